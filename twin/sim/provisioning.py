"""Provisioning: GPUs requested, ready after a delay, released, cancelled, failed and repaired.

A pool's capacity counts every tenant's ready, pending and broken GPUs; a request beyond what
is free is clamped (and the log says so).
"""

from __future__ import annotations

from typing import Protocol

from twin.schema import records
from twin.sim.decisions import Decisions
from twin.sim.jobs import Job
from twin.sim.pools import Holding, Pool, Request
from twin.sim.state import ClusterState


class Bills(Protocol):
    """Billing, as provisioning uses it."""

    def set_billed(self, h: Holding, delta: int) -> None: ...


class Runs(Protocol):
    """The scheduler, as provisioning uses it."""

    def room_freed(self, tenant: int) -> None: ...

    def interrupt(self, job: Job, reason: str) -> None: ...


class Provisioning:
    """Every tenant's GPU requests and releases."""

    def __init__(
        self, state: ClusterState, billing: Bills, runs: Runs, decisions: Decisions
    ) -> None:
        self.state = state
        self.env = state.env
        self._emit = state.emit
        self.billing = billing
        self.runs = runs
        self.decisions = decisions

    def provision(self, tenant: int, pool_index: int, gpus: int) -> None:
        """Request `gpus` more GPUs of a pool for `tenant`, within the pool's free capacity."""
        state, now = self.state, self.env.now
        h, name = state.holdings[tenant][pool_index], state.tenant_names[tenant]
        pool = h.pool
        if pool.cfg.shared:
            self._refuse_shared(name, pool, gpus)
            return
        if state.ledgers[tenant].exhausted:
            self._emit(
                records.ActionClamped(
                    "action_clamped", now, name, pool.cfg.name, gpus, 0, "budget_exhausted"
                )
            )
            return
        granted = min(gpus, pool.free)
        if granted < gpus:
            self._emit(
                records.ActionClamped(
                    "action_clamped", now, name, pool.cfg.name, gpus, granted, "pool_full"
                )
            )
        if granted <= 0:
            return
        delay_s = max(pool.draw_delay_s(), 0.0)
        req = Request(granted, now + delay_s)
        pool.in_use += granted
        h.pending.append(req)
        self._emit(
            records.GpusRequested(
                "gpus_requested", now, name, pool.cfg.name, granted, req.ready_at_s
            )
        )
        if pool.cfg.billing == "from_request":
            self.billing.set_billed(h, granted)
        req.event = self.env.timeout(delay_s)
        req.event.callbacks.append(lambda _: self._ready(h, req))

    def _ready(self, h: Holding, req: Request) -> None:
        state = self.state
        if req.cancelled or state.ended:
            return
        h.pending.remove(req)
        h.ready += req.gpus
        if h.pool.cfg.billing == "from_ready":
            self.billing.set_billed(h, req.gpus)
        self._emit(
            records.GpusReady(
                "gpus_ready", self.env.now, state.tenant_names[h.tenant], h.pool.cfg.name, req.gpus
            )
        )
        self.runs.room_freed(h.tenant)
        if self.decisions.on_ready:
            self.decisions.want(h.tenant, "gpus_ready")

    def grant_initial(self, tenant: int, pool_index: int, gpus: int) -> None:
        """GPUs a tenant holds from the start: ready at once, billed from now."""
        h = self.state.holdings[tenant][pool_index]
        h.pool.in_use += gpus
        h.ready += gpus
        self._emit(
            records.GpusReady(
                "gpus_ready", self.env.now, self.state.tenant_names[tenant], h.pool.cfg.name, gpus
            )
        )
        self.billing.set_billed(h, gpus)

    def release(self, tenant: int, pool_index: int, gpus: int) -> None:
        """Give back up to `gpus`: pending requests first (newest first), then idle GPUs."""
        state, now = self.state, self.env.now
        h, name = state.holdings[tenant][pool_index], state.tenant_names[tenant]
        pool, left = h.pool, gpus
        if pool.cfg.shared:
            self._refuse_shared(name, pool, -gpus)
            return
        while left and h.pending:
            req = h.pending[-1]
            k = min(left, req.gpus)
            req.gpus -= k
            if req.gpus == 0:
                req.cancelled = True
                h.pending.pop()
            pool.in_use -= k
            left -= k
            self._emit(records.GpusCancelled("gpus_cancelled", now, name, pool.cfg.name, k))
            if pool.cfg.billing == "from_request":
                self.billing.set_billed(h, -k)
        k = min(left, h.idle_whole)
        if k > 0:
            h.ready -= k
            pool.in_use -= k
            left -= k
            self.billing.set_billed(h, -k)
            self._emit(records.GpusReleased("gpus_released", now, name, pool.cfg.name, k))
        if left:
            self._emit(
                records.ActionClamped(
                    "action_clamped", now, name, pool.cfg.name, -gpus, left - gpus, "gpus_busy"
                )
            )

    def _refuse_shared(self, tenant: str, pool: Pool, gpus: int) -> None:
        """A shared pool's GPUs are the cluster's: nobody adds to or gives back any of them."""
        self._emit(
            records.ActionClamped(
                "action_clamped", self.env.now, tenant, pool.cfg.name, gpus, 0, "shared_pool"
            )
        )

    def hand_over(self, giver: int, taker: int, pool: str, gpus: int) -> None:
        """Move idle GPUs of a pool from one tenant to another (billing moves with them)."""
        state = self.state
        now = self.env.now
        index = state.pool_index[pool]
        a, b = state.holdings[giver][index], state.holdings[taker][index]
        a.ready -= gpus
        self.billing.set_billed(a, -gpus)
        self._emit(
            records.GpusReleased("gpus_released", now, state.tenant_names[giver], pool, gpus)
        )
        b.ready += gpus
        self.billing.set_billed(b, gpus)
        self._emit(records.GpusReady("gpus_ready", now, state.tenant_names[taker], pool, gpus))
        self.runs.room_freed(taker)

    def fail_gpu(self, h: Holding, slot: int) -> None:
        """GPU number `slot` of a holding breaks: its job (if any) stops, the GPU goes to repair."""
        state = self.state
        pool = h.pool
        victim = None
        if slot * 1000 < h.busy_milli:
            used = 0
            for job in h.running:
                used += job.milli
                if used > slot * 1000:
                    victim = job
                    break
        self._emit(
            records.NodeFailed(
                "node_failed",
                self.env.now,
                state.tenant_names[h.tenant],
                pool.cfg.name,
                victim.job_id if victim else None,
            )
        )
        if victim is not None:
            self.runs.interrupt(victim, "node_failure")
        h.ready -= 1
        self.billing.set_billed(h, -1)
        pool.down += 1
        self.env.timeout(pool.draw_repair_s()).callbacks.append(lambda _: self._repaired(pool))
        self.runs.room_freed(h.tenant)
        if self.decisions.on_failure:
            self.decisions.want(h.tenant, "failure")

    def _repaired(self, pool: Pool) -> None:
        if self.state.ended:
            return
        pool.down -= 1
        pool.in_use -= 1
        self._emit(records.NodeRepaired("node_repaired", self.env.now, None, pool.cfg.name))
