"""Provisioning: GPUs requested, ready after a delay, released, cancelled, failed and repaired.

A pool's capacity counts every tenant's ready, pending and broken GPUs; a request beyond what
is free is clamped (and the log says so).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twin.sim.pools import Holding, Pool, Request

if TYPE_CHECKING:
    from twin.sim.cluster import ClusterModel


class Provisioning:
    """Every tenant's GPU requests and releases."""

    def __init__(self, model: ClusterModel) -> None:
        self.model = model
        self.env = model.env
        self._emit = model.emit

    def provision(self, tenant: int, pool_index: int, gpus: int) -> None:
        """Request `gpus` more GPUs of a pool for `tenant`, within the pool's free capacity."""
        model, now = self.model, self.env.now
        h, name = model.holdings[tenant][pool_index], model.tenant_names[tenant]
        pool = h.pool
        if model.ledgers[tenant].exhausted:
            self._emit(("action_clamped", now, name, pool.cfg.name, gpus, 0, "budget_exhausted"))
            return
        granted = min(gpus, pool.free)
        if granted < gpus:
            self._emit(("action_clamped", now, name, pool.cfg.name, gpus, granted, "pool_full"))
        if granted <= 0:
            return
        delay_s = max(pool.draw_delay_s(), 0.0)
        req = Request(granted, now + delay_s)
        pool.in_use += granted
        h.pending.append(req)
        self._emit(("gpus_requested", now, name, pool.cfg.name, granted, req.ready_at_s))
        if pool.cfg.billing == "from_request":
            model.billing.set_billed(h, granted)
        req.event = self.env.timeout(delay_s)
        req.event.callbacks.append(lambda _: self._ready(h, req))

    def _ready(self, h: Holding, req: Request) -> None:
        model = self.model
        if req.cancelled or model.ended:
            return
        h.pending.remove(req)
        h.ready += req.gpus
        if h.pool.cfg.billing == "from_ready":
            model.billing.set_billed(h, req.gpus)
        self._emit(
            ("gpus_ready", self.env.now, model.tenant_names[h.tenant], h.pool.cfg.name, req.gpus)
        )
        model.scheduler.room_freed(h.tenant)
        if model.decisions.on_ready:
            model.decisions.want(h.tenant, "gpus_ready")

    def grant_initial(self, tenant: int, pool_index: int, gpus: int) -> None:
        """GPUs a tenant holds from the start: ready at once, billed from now."""
        h = self.model.holdings[tenant][pool_index]
        h.pool.in_use += gpus
        h.ready += gpus
        self._emit(
            ("gpus_ready", self.env.now, self.model.tenant_names[tenant], h.pool.cfg.name, gpus)
        )
        self.model.billing.set_billed(h, gpus)

    def release(self, tenant: int, pool_index: int, gpus: int) -> None:
        """Give back up to `gpus`: pending requests first (newest first), then idle GPUs."""
        model, now = self.model, self.env.now
        h, name = model.holdings[tenant][pool_index], model.tenant_names[tenant]
        pool, left = h.pool, gpus
        while left and h.pending:
            req = h.pending[-1]
            k = min(left, req.gpus)
            req.gpus -= k
            if req.gpus == 0:
                req.cancelled = True
                h.pending.pop()
            pool.in_use -= k
            left -= k
            self._emit(("gpus_cancelled", now, name, pool.cfg.name, k))
            if pool.cfg.billing == "from_request":
                model.billing.set_billed(h, -k)
        k = min(left, h.idle_whole)
        if k > 0:
            h.ready -= k
            pool.in_use -= k
            left -= k
            model.billing.set_billed(h, -k)
            self._emit(("gpus_released", now, name, pool.cfg.name, k))
        if left:
            self._emit(
                ("action_clamped", now, name, pool.cfg.name, -gpus, left - gpus, "gpus_busy")
            )

    def hand_over(self, giver: int, taker: int, pool: str, gpus: int) -> None:
        """Move idle GPUs of a pool from one tenant to another (billing moves with them)."""
        model = self.model
        now = self.env.now
        index = model.pool_index[pool]
        a, b = model.holdings[giver][index], model.holdings[taker][index]
        a.ready -= gpus
        model.billing.set_billed(a, -gpus)
        self._emit(("gpus_released", now, model.tenant_names[giver], pool, gpus))
        b.ready += gpus
        model.billing.set_billed(b, gpus)
        self._emit(("gpus_ready", now, model.tenant_names[taker], pool, gpus))
        model.scheduler.room_freed(taker)

    def fail_gpu(self, h: Holding, slot: int) -> None:
        """GPU number `slot` of a holding breaks: its job (if any) stops, the GPU goes to repair."""
        model = self.model
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
            ("node_failed", self.env.now, model.tenant_names[h.tenant], pool.cfg.name,
             victim.job_id if victim else None)
        )  # fmt: skip
        if victim is not None:
            model.scheduler.interrupt(victim, "node_failure")
        h.ready -= 1
        model.billing.set_billed(h, -1)
        pool.down += 1
        self.env.timeout(pool.draw_repair_s()).callbacks.append(lambda _: self._repaired(pool))
        model.scheduler.room_freed(h.tenant)
        if model.decisions.on_failure:
            model.decisions.want(h.tenant, "failure")

    def _repaired(self, pool: Pool) -> None:
        if self.model.ended:
            return
        pool.down -= 1
        pool.in_use -= 1
        self._emit(("node_repaired", self.env.now, None, pool.cfg.name))
