"""The three ways to give agentic-RL actions their external resources.

- `static`: each trajectory holds a sandbox of `sandbox_cores` cores from its start (after a pod
  start delay) to its end, and runs its code there; every GPU service has its own GPUs.
- `isolation`: the cores are split into a fixed partition per CPU action kind (by its expected
  demand), where actions queue first come, first served at `fixed_units` cores each; every GPU
  service has its own GPUs.
- `elastic` (ARL-Tangram): one shared core pool, units granted only while an action runs
  (containers wait at zero quota), shared by the drop-the-last rule of `elastic.allocate`; GPU
  services are loaded on demand into aligned chunks of a shared pool, evicted when idle for
  `idle_evict_s` or, least recently used first, when another service needs the space.

API calls share the quota first come, first served under every policy. No action ever runs
without its units; the quota and the pools are never exceeded.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Protocol

import simpy

from twin.schema import records
from twin.schema.agentic import AgenticRlScenario
from twin.schema.distributions import mean
from twin.schema.records import AnyRecord
from twin.sim.agentic.actions import TENANT, Action, Usage
from twin.sim.agentic.elastic import Demand, run_s
from twin.sim.agentic.gpus import Chunk


class Host(Protocol):
    """The agentic model, as its orchestrator uses it."""

    env: simpy.Environment
    cfg: AgenticRlScenario
    emit: Callable[[AnyRecord], None]
    usage: dict[str, Usage]
    sandbox_start_s: Callable[[], float]

    def completed(self, act_s: float) -> None: ...


@dataclass(slots=True)
class Copy:
    """A loaded copy of a GPU service: where it sits, its calls in flight, when last used."""

    service: str
    chunk: Chunk | None
    slots: int
    gpus: int
    ready: bool = True
    ready_s: float = 0.0  # when a loading copy will be ready
    in_flight: int = 0
    last_used_s: float = 0.0


@dataclass(slots=True)
class _Services:
    """Calls waiting per service, and its loaded copies."""

    waiting: dict[str, deque[Action]] = field(default_factory=dict)
    copies: dict[str, list[Copy]] = field(default_factory=dict)


class Orchestrator:
    """What every policy shares: queues, the API quota, dedicated or shared GPU services, and
    running an action on units and giving them back."""

    def __init__(self, model: Host) -> None:
        self.model, self.env, self.cfg = model, model.env, model.cfg
        self.emit = model.emit
        self.usage = model.usage
        self.cpu_queue: deque[Action] = deque()
        self.api_queue: deque[Action] = deque()
        self.api_in_flight = 0
        self.in_flight = dict.fromkeys(("cpu", "gpu", "api"), 0)
        self.gpu = _Services()
        self.services = {s.name: s for s in self.cfg.services}
        for s in self.cfg.services:
            self.gpu.waiting[s.name] = deque()
            self.gpu.copies[s.name] = []
        self.dedicated_gpus()

    # -- what the model calls ---------------------------------------------------------------

    def trajectory_started(self, name: str) -> Generator[simpy.Event, Any, None]:
        yield from ()

    def trajectory_ended(self, name: str) -> None:
        """A trajectory is done with its resources."""

    def submit(self, a: Action) -> None:
        resource = a.kind.resource
        if resource == "cpu":
            self.cpu_queue.append(a)
            self.dispatch_cpu()
        elif resource == "api":
            self.api_queue.append(a)
            self.dispatch_api()
        else:
            assert a.kind.service is not None
            self.gpu.waiting[a.kind.service].append(a)
            self.dispatch_gpu()

    def queued(self, resource: str) -> int:
        if resource == "cpu":
            return len(self.cpu_queue)
        if resource == "api":
            return len(self.api_queue)
        return sum(len(q) for q in self.gpu.waiting.values())

    def free(self, resource: str) -> int:
        """Units of `resource` nobody holds now."""
        use = self.usage[resource]
        return int(use.capacity - use.held)

    def loaded(self) -> list[str]:
        """Services with a loaded copy."""
        return sorted(name for name, cs in self.gpu.copies.items() if any(c.ready for c in cs))

    def close(self) -> None:
        """The episode is over: give back what is held for its whole length."""

    # -- running actions --------------------------------------------------------------------

    def run(self, a: Action, units: int, duration_s: float, resource: str, *,
            held: float, busy: float, then: Any) -> None:  # fmt: skip
        """Start `a` now on `units` units for `duration_s` (plus the grant overhead)."""
        env = self.env
        now = env.now
        a.units, a.started_s = units, now
        a.ends_s = now + self.cfg.overhead_s + duration_s
        self.emit(
            records.ActionStarted(
                "action_started", now, TENANT, a.action_id, units, now - a.submitted_s
            )
        )
        use = self.usage[resource]
        use.change(now, held=held, busy=busy)
        self.in_flight[resource] += 1

        def finish(_: simpy.Event) -> None:
            t = env.now
            use.change(t, held=-held, busy=-busy)
            self.in_flight[resource] -= 1
            self.model.completed(t - a.submitted_s)
            self.emit(
                records.ActionFinished(
                    "action_finished", t, TENANT, a.action_id, t - a.submitted_s, duration_s
                )
            )
            a.done.succeed()
            then(a)

        env.timeout(a.ends_s - now).callbacks.append(finish)

    # -- the API quota (every policy) -------------------------------------------------------

    def dispatch_api(self) -> None:
        quota = self.cfg.api_quota
        while self.api_queue and self.api_in_flight < quota:
            a = self.api_queue.popleft()
            self.api_in_flight += 1
            self.run(a, 1, a.work_s, "api", held=1, busy=1, then=self._api_done)

    def _api_done(self, a: Action) -> None:
        self.api_in_flight -= 1
        self.dispatch_api()

    # -- GPU services: dedicated (static, isolation) ----------------------------------------

    def dedicated_gpus(self) -> None:
        """Each service loaded once on its own GPUs, for the whole run."""
        total = sum(s.gpus for s in self.cfg.services)
        self.usage["gpu"].capacity = total
        self.usage["gpu"].change(0.0, held=total)
        for s in self.cfg.services:
            self.gpu.copies[s.name].append(Copy(s.name, None, s.concurrency, s.gpus))

    def dispatch_gpu(self) -> None:
        for service, waiting in self.gpu.waiting.items():
            for copy in self.gpu.copies[service]:
                while waiting and copy.ready and copy.in_flight < copy.slots:
                    self._call(waiting.popleft(), copy, 0.0)

    def _call(self, a: Action, copy: Copy, load_s: float) -> None:
        copy.in_flight += 1
        copy.last_used_s = self.env.now
        share = copy.gpus / copy.slots
        self.run(a, 1, load_s + a.work_s, "gpu", held=0.0, busy=share,
                 then=lambda done: self._called(done, copy))  # fmt: skip

    def _called(self, a: Action, copy: Copy) -> None:
        copy.in_flight -= 1
        copy.last_used_s = self.env.now
        self.dispatch_gpu()

    def dispatch_cpu(self) -> None:
        raise NotImplementedError


class Static(Orchestrator):
    """A sandbox per trajectory for its lifetime; dedicated GPU services."""

    def __init__(self, model: Host) -> None:
        super().__init__(model)
        cores = self.cfg.sandbox_cores
        self.sandboxes = simpy.Resource(self.env, capacity=max(self.cfg.cpu_cores // cores, 1))
        self.held: dict[str, Any] = {}

    def trajectory_started(self, name: str) -> Generator[simpy.Event, Any, None]:
        request = self.sandboxes.request()
        yield request
        self.held[name] = request
        self.usage["cpu"].change(self.env.now, held=self.cfg.sandbox_cores)
        yield self.env.timeout(self.model.sandbox_start_s())

    def trajectory_ended(self, name: str) -> None:
        self.sandboxes.release(self.held.pop(name))
        self.usage["cpu"].change(self.env.now, held=-self.cfg.sandbox_cores)

    def close(self) -> None:
        self.usage["gpu"].change(self.env.now, held=-self.usage["gpu"].held)

    def dispatch_cpu(self) -> None:
        # A trajectory has one action in flight: its sandbox is always free for it.
        while self.cpu_queue:
            a = self.cpu_queue.popleft()
            units = min(self.cfg.sandbox_cores, a.kind.max_units)
            duration = run_s(Demand(a.work_s, a.kind.serial_fraction, a.kind.max_units), units)
            self.run(a, units, duration, "cpu", held=0.0, busy=units, then=lambda _: None)


class Isolation(Orchestrator):
    """A fixed core partition per CPU action kind, fixed parallelism; dedicated GPU services."""

    def __init__(self, model: Host) -> None:
        super().__init__(model)
        cfg = self.cfg
        kinds = [a for a in cfg.actions if a.resource == "cpu"]
        demand = {a.name: a.share * mean(a.work_s) for a in kinds}
        total = sum(demand.values()) or 1.0
        self.units = {a.name: min(cfg.fixed_units, a.max_units) for a in kinds}
        self.partition = {
            a.name: max(self.units[a.name], int(cfg.cpu_cores * demand[a.name] / total))
            for a in kinds
        }
        self.in_use = dict.fromkeys(self.partition, 0)
        self.queues: dict[str, deque[Action]] = {name: deque() for name in self.partition}
        self.usage["cpu"].change(0.0, held=cfg.cpu_cores)

    def close(self) -> None:
        self.usage["cpu"].change(self.env.now, held=-self.cfg.cpu_cores)
        self.usage["gpu"].change(self.env.now, held=-self.usage["gpu"].held)

    def dispatch_cpu(self) -> None:
        while self.cpu_queue:
            a = self.cpu_queue.popleft()
            self.queues[a.kind.name].append(a)
        for name, queue in self.queues.items():
            units = self.units[name]
            while queue and self.in_use[name] + units <= self.partition[name]:
                a = queue.popleft()
                self.in_use[name] += units
                duration = run_s(Demand(a.work_s, a.kind.serial_fraction, a.kind.max_units),
                                 units)  # fmt: skip
                self.run(a, units, duration, "cpu", held=0.0, busy=units,
                         then=lambda done, n=name, u=units: self._freed(n, u))  # fmt: skip

    def _freed(self, name: str, units: int) -> None:
        self.in_use[name] -= units
        self.dispatch_cpu()
