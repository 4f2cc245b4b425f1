"""Scheduling cycles: each queued job is tried on its own, at cycle boundaries, with back-off.

After the Kubernetes scheduler: a cycle every `cycle_s` takes at most `pods_per_cycle` pods; a
pod that fits starts `bind_s` after its cycle (the fit is checked then), unless its bind loses
a race for the node (with work the trace does not hold: a chance of `bind_conflict` times the
share of the pool in use, so races grow with load; `background_use` counts the busy share that
work keeps beside the trace's) and it backs off; the winner may hold the
node for up to `conflict_hold_s`, and the loser's retries wait that out. One that does not fit
(after trying to evict lower-priority work, if preemption is on) is unschedulable: it waits
until something is released, and is tried again once its back-off (`backoff_s`, doubling to
`backoff_max_s`) has also passed. A waiting job never blocks the ones behind it.
"""

from __future__ import annotations

import math
from typing import Protocol

import simpy

from twin.schema.scheduling import SchedulerConfig
from twin.sim.jobs import Job
from twin.sim.placement import Placement
from twin.sim.pools import Holding
from twin.sim.queues import TenantQueue
from twin.sim.sampling import Sampler
from twin.sim.state import ClusterState


class Host(Protocol):
    """The scheduler whose queues the cycles try."""

    env: simpy.Environment
    state: ClusterState
    placement: Placement
    queues: list[TenantQueue]

    def fit(self, job: Job) -> Holding | None: ...

    def run(self, job: Job, h: Holding) -> None: ...

    def interrupt(self, job: Job, reason: str) -> None: ...

    def room_freed(self, tenant: int) -> None: ...

    def room_freed_everywhere(self) -> None: ...


class Cycles:
    """When each queued job is next tried, and what happens when it is."""

    __slots__ = ("_background", "_booked", "_cfg", "_conflict", "_env", "_flushing", "_held",
                 "_parked", "_scheduler", "conflicts", "preemptions")  # fmt: skip

    WAKE_SCAN = 256  # parked jobs looked at per release (in the order they were parked)

    def __init__(self, scheduler: Host, cfg: SchedulerConfig) -> None:
        self._scheduler = scheduler
        self._env = scheduler.env
        self._cfg = cfg
        self._booked: dict[int, int] = {}  # cycle number -> pods it takes
        self._parked: dict[Job, float] = {}  # unschedulable jobs -> when their back-off ends
        self._flushing = False  # a periodic retry is due (only while jobs are parked)
        self._held: dict[Job, float] = {}  # jobs that lost a bind race -> when the node frees
        self.preemptions = self.conflicts = 0
        self._background = cfg.background_use
        self._conflict = (
            Sampler(scheduler.state.streams.get("bind_conflict"), lambda g, n: g.random(n))
            if cfg.bind_conflict > 0
            else None
        )

    def submit(self, job: Job, after_s: float = 0.0) -> None:
        """Book `job` into the first cycle with room, `after_s` from now."""
        cfg = self._cfg
        now = self._env.now
        cycle = math.ceil((now + after_s) / cfg.cycle_s - 1e-9)
        booked = self._booked
        while booked.get(cycle, 0) >= cfg.pods_per_cycle:
            cycle += 1
        booked[cycle] = booked.get(cycle, 0) + 1
        if len(booked) > 4096:  # forget cycles that have passed
            past = math.floor(now / cfg.cycle_s)
            for c in [c for c in booked if c < past]:
                del booked[c]
        version = job.version
        at_s = cycle * cfg.cycle_s + cfg.bind_s
        ev = self._env.timeout(max(at_s - now, 0.0))
        ev.callbacks.append(lambda _: self._attempt(job, version))

    def _attempt(self, job: Job, version: int) -> None:
        s = self._scheduler
        if not job.queued or job.version != version or s.state.ended:
            if not job.queued:
                self._held.pop(job, None)
            return
        held_until = self._held.pop(job, None) if self._held else None
        if held_until is not None and self._env.now < held_until:
            self._held[job] = held_until  # the race's winner still holds the node
            job.attempts += 1
            self.submit(job, self._backoff_s(job))
            return
        h = s.fit(job)
        if h is None and self._cfg.preemption:
            victims = s.placement.victims(job)
            for v in victims:
                s.interrupt(v, "preempted")
            self.preemptions += len(victims)
            h = s.fit(job) if victims else None
        if h is None:
            job.attempts += 1
            cfg = self._cfg
            self._parked[job] = self._env.now + self._backoff_s(job)
            if cfg.retry_s > 0 and not self._flushing:
                self._flushing = True
                self._env.timeout(cfg.retry_s).callbacks.append(self._flush)
            return
        if held_until is None and self._loses_race(job, h.busy_milli, h.ready):
            job.attempts += 1
            self.submit(job, self._backoff_s(job))
            return
        job.attempts = 0
        s.queues[job.tenant].remove(job)
        s.run(job, h)

    def _loses_race(self, job: Job, busy_milli: int, ready_gpus: int) -> bool:
        """Whether `job`'s bind loses a race for its node (a chance that grows with the pool's
        use), and if so until when the winner holds the node."""
        draw = self._conflict
        if draw is None:
            return False
        use = busy_milli / (ready_gpus * 1000) if ready_gpus else 0.0
        use = self._background + (1.0 - self._background) * use
        if draw() >= self._cfg.bind_conflict * use:
            return False
        self.conflicts += 1
        if self._cfg.conflict_hold_s > 0:
            self._held[job] = self._env.now + draw() * self._cfg.conflict_hold_s
        return True

    def _backoff_s(self, job: Job) -> float:
        cfg = self._cfg
        return min(cfg.backoff_s * 2.0 ** min(job.attempts - 1, 60), cfg.backoff_max_s)

    def _flush(self, _: object) -> None:
        """The periodic retry: parked jobs are tried as if room had been released."""
        self._flushing = False
        s = self._scheduler
        if s.state.ended:
            return
        s.room_freed_everywhere()
        if self._parked and not self._flushing:
            self._flushing = True
            self._env.timeout(self._cfg.retry_s).callbacks.append(self._flush)

    def released(self, idle_milli: int) -> None:
        """Room freed up: parked jobs that the `idle_milli` now free could hold are tried again
        when their back-off ends (the rest stay parked for the next release)."""
        parked = self._parked
        if not parked:
            return
        now = self._env.now
        woken: list[tuple[Job, float]] = []
        for n, (job, ready_s) in enumerate(parked.items()):
            if n >= self.WAKE_SCAN or idle_milli <= 0:
                break
            if job.milli <= idle_milli:
                idle_milli -= job.milli
                woken.append((job, ready_s))
        for job, ready_s in woken:
            del parked[job]
            if job.queued:
                self.submit(job, max(ready_s - now, 0.0))
