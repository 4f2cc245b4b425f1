"""Action-level elastic orchestration, after ARL-Tangram.

CPU manager (allocate on execution): sandboxes wait at zero quota, so an action holds cores only
while it runs; each pass over the queue shares the free cores by `elastic.allocate`.
GPU manager (evict on execution): a service is loaded into an aligned chunk of the shared pool
when a call needs it and no loaded copy has a free slot; it goes when idle for `idle_evict_s`,
or (least recently used first, idle copies only) when another service needs the space. A call
that waits for its service to load counts the load in its completion time.
"""

from __future__ import annotations

from itertools import islice
from typing import Literal

from twin.schema import records
from twin.sim.agentic.actions import Action
from twin.sim.agentic.elastic import Demand, allocate, run_s
from twin.sim.agentic.gpus import Nodes
from twin.sim.agentic.orchestrators import Copy, Host, Orchestrator


class Elastic(Orchestrator):
    def __init__(self, model: Host) -> None:
        super().__init__(model)
        self.nodes = Nodes(self.cfg.gpu_nodes)
        self.running: dict[str, Action] = {}
        # The knobs an agent may set (orchestration `agent`): a cap on cores per action, and
        # services never to evict.
        self.max_units: int | None = None
        self.pinned: frozenset[str] = frozenset()

    def configure(self, max_units: int | None, pinned: frozenset[str]) -> None:
        self.max_units, self.pinned = max_units, pinned
        self.dispatch_cpu()

    def dedicated_gpus(self) -> None:
        """Nothing is loaded up front: services come and go with their calls."""

    # -- CPU --------------------------------------------------------------------------------

    def dispatch_cpu(self) -> None:
        queue = self.cpu_queue
        use = self.usage["cpu"]
        free = int(use.capacity - use.busy)
        if not queue or free <= 0:
            return
        depth = self.cfg.search_depth
        window = list(islice(queue, free + depth))
        cap = self.max_units or free
        demands = [Demand(a.work_s, a.kind.serial_fraction, min(a.kind.max_units, cap))
                   for a in window]  # fmt: skip
        now = self.env.now
        ends = [(a.ends_s - now, a.units) for a in self.running.values()]
        for d, units in zip(demands, allocate(demands, free, ends, depth), strict=False):
            a = queue.popleft()
            granted = min(units, d.max_units)
            self.running[a.action_id] = a
            self.run(a, granted, run_s(d, granted), "cpu", held=granted, busy=granted,
                     then=self._cpu_done)  # fmt: skip

    def _cpu_done(self, a: Action) -> None:
        del self.running[a.action_id]
        self.dispatch_cpu()

    # -- GPU --------------------------------------------------------------------------------

    def dispatch_gpu(self) -> None:
        for service, waiting in self.gpu.waiting.items():
            copies = self.gpu.copies[service]
            while waiting:
                copy = next((c for c in copies if c.in_flight < c.slots), None)
                if copy is None:
                    copy = self._load(service)
                    if copy is None:
                        break
                self._call(waiting.popleft(), copy, self._load_left(copy))

    def _load_left(self, copy: Copy) -> float:
        """Seconds until the copy is loaded (0 once it is)."""
        return 0.0 if copy.ready else max(copy.ready_s - self.env.now, 0.0)

    def _load(self, service: str) -> Copy | None:
        """A new copy of `service` in a free chunk (evicting idle copies, least recently used
        first, to make room); None if there is no room."""
        spec = self.services[service]
        chunk = self.nodes.place(spec.gpus)
        while chunk is None:
            idle = [c for cs in self.gpu.copies.values() for c in cs
                    if c.ready and not c.in_flight and c.service not in self.pinned]  # fmt: skip
            if not idle:
                return None
            self._evict(min(idle, key=lambda c: c.last_used_s), "lru")
            chunk = self.nodes.place(spec.gpus)
        now = self.env.now
        copy = Copy(service, chunk, spec.concurrency, spec.gpus, ready=False,
                    ready_s=now + spec.load_s, last_used_s=now)  # fmt: skip
        self.gpu.copies[service].append(copy)
        self.usage["gpu"].change(now, held=spec.gpus)
        self.emit(
            records.ServiceLoaded(
                "service_loaded",
                now,
                None,
                service,
                spec.gpus,
                chunk.node,
                chunk.offset,
                spec.load_s,
            )
        )

        def loaded(_: object) -> None:
            copy.ready = True

        self.env.timeout(spec.load_s).callbacks.append(loaded)
        return copy

    def _called(self, a: Action, copy: Copy) -> None:
        copy.in_flight -= 1
        copy.last_used_s = self.env.now
        if not copy.in_flight:
            since_s = self.env.now

            def check(_: object) -> None:
                self._idle(copy, since_s)

            self.env.timeout(self.cfg.idle_evict_s).callbacks.append(check)
        self.dispatch_gpu()

    def _idle(self, copy: Copy, since_s: float) -> None:
        """Evict the copy if it has stayed idle since `since_s`."""
        present = copy in self.gpu.copies[copy.service]
        if copy.service in self.pinned:
            return
        if present and not copy.in_flight and copy.last_used_s == since_s:
            self._evict(copy, "idle")
            self.dispatch_gpu()

    def _evict(self, copy: Copy, reason: Literal["idle", "lru"]) -> None:
        assert copy.chunk is not None
        assert not copy.in_flight
        self.gpu.copies[copy.service].remove(copy)
        self.nodes.free(copy.chunk)
        self.usage["gpu"].change(self.env.now, held=-copy.gpus)
        self.emit(
            records.ServiceEvicted(
                "service_evicted",
                self.env.now,
                None,
                copy.service,
                copy.chunk.node,
                copy.chunk.offset,
                reason,
            )
        )

    def close(self) -> None:
        """Loaded copies count as held until the end."""
