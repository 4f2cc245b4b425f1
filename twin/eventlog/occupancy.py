"""The cluster's state as its log plays back: GPUs held and busy per pool, each tenant's queue
and spend, and its running jobs, each on a lane (a row where its runs never overlap).

Subclasses hear the changes through the `on_*` hooks; a change is reported once per virtual
instant (the value the instant ends with), so a burst of events at one time is one point.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from twin.eventlog.lanes import Lanes

Row = Mapping[str, Any]


class Occupancy:
    """Folds events (dicts as JSONL decodes them, in log order) into state over time."""

    def __init__(self) -> None:
        self.held: dict[str, float] = {}
        self.busy: dict[str, float] = {}
        self.queued: dict[str, int] = {}
        self.spent_usd: dict[str, float] = {}
        self.budget_usd: dict[str, float | None] = {}
        self.running: dict[str, tuple[str, int, str, float]] = {}  # job: tenant, lane, pool, gpus
        self._lanes = Lanes()
        self._changed: dict[tuple[str, str], None] = {}  # (what, name) changed this instant
        self.t_s = 0.0
        self._handlers: dict[str, Callable[[Row], object]] = {
            "episode_started": self._episode,
            "episode_ended": self._instant,
            "gpus_ready": lambda e: self._hold(e["pool"], e["gpus"]),
            "gpus_released": lambda e: self._hold(e["pool"], -e["gpus"]),
            "node_failed": self._node_failed,
            "job_arrived": lambda e: self._queue(e["tenant"], 1),
            "job_started": self._started,
            "job_finished": lambda e: self._stop(e, "finished"),
            "job_censored": lambda e: self._stop(e, "unfinished"),
            "job_interrupted": self._interrupted,
            "job_failed": self._failed,
            "budget_charged": lambda e: self._spend(e["tenant"], e["amount_usd"]),
            "trade_settled": lambda e: self._instant(e) if e["applied"] else None,
            "budget_threshold": self._instant,
            "budget_exhausted": self._instant,
        }

    # -- hooks ------------------------------------------------------------------------------

    def on_pool(self, t_s: float, pool: str, held: float, busy: float) -> None:
        """GPUs held and busy in `pool` from `t_s` on."""

    def on_queue(self, t_s: float, tenant: str, jobs: int) -> None:
        """The number of `tenant`'s jobs waiting from `t_s` on."""

    def on_spend(self, t_s: float, tenant: str, spent_usd: float) -> None:
        """What `tenant` has paid for GPUs by `t_s` (what its budget is charged)."""

    def on_job_start(self, e: Row, lane: int) -> None:
        """A job started a run on `lane` of its tenant."""

    def on_job_stop(self, t_s: float, tenant: str, job_id: str, lane: int, how: str) -> None:
        """A run ended: `finished`, `failed`, `interrupted` or `unfinished` (at the end, or
        where the trace's record of a replayed job ends)."""

    def on_instant(self, e: Row) -> None:
        """A moment worth marking: a failure, a trade, a budget alarm."""

    # -- folding ----------------------------------------------------------------------------

    def take(self, e: Row) -> None:
        """Fold one event."""
        t_s = e["t_s"]
        if t_s != self.t_s:
            self.settle()
            self.t_s = t_s
        handler = self._handlers.get(e["kind"])
        if handler is not None:
            handler(e)

    def settle(self) -> None:
        """Report what changed at the current instant."""
        t_s = self.t_s
        for what, name in self._changed:
            if what == "pool":
                self.on_pool(t_s, name, self.held.get(name, 0.0), self.busy.get(name, 0.0))
            elif what == "queue":
                self.on_queue(t_s, name, self.queued[name])
            else:
                self.on_spend(t_s, name, self.spent_usd[name])
        self._changed.clear()

    def close(self) -> None:
        """End the playback: runs still going end as `unfinished`."""
        self.settle()
        for job_id, (tenant, lane, _, _) in list(self.running.items()):
            self.on_job_stop(self.t_s, tenant, job_id, lane, "unfinished")
        self.running.clear()

    def _episode(self, e: Row) -> None:
        for tenant in e["config"].get("tenants", []):
            self.budget_usd[tenant["name"]] = tenant.get("budget_usd")
            self._queue(tenant["name"], 0)
            self._spend(tenant["name"], 0.0)
        for pool in e["config"].get("pools", []):
            self._hold(pool["name"], 0)

    def _hold(self, pool: str, gpus: float) -> None:
        self.held[pool] = self.held.get(pool, 0.0) + gpus
        self._changed["pool", pool] = None

    def _node_failed(self, e: Row) -> None:
        self._hold(e["pool"], -1)
        self.on_instant(e)

    def _queue(self, tenant: str, delta: int) -> None:
        self.queued[tenant] = self.queued.get(tenant, 0) + delta
        self._changed["queue", tenant] = None

    def _spend(self, tenant: str, usd: float) -> None:
        self.spent_usd[tenant] = self.spent_usd.get(tenant, 0.0) + usd
        self._changed["spend", tenant] = None

    def _started(self, e: Row) -> None:
        tenant, pool, gpus = e["tenant"], e["pool"], e["gpus"]
        self._queue(tenant, -1)
        lane = self._lanes.take(tenant)
        self.running[e["job_id"]] = (tenant, lane, pool, gpus)
        self.busy[pool] = self.busy.get(pool, 0.0) + gpus
        self._changed["pool", pool] = None
        self.on_job_start(e, lane)

    def _stop(self, e: Row, how: str) -> bool:
        """End the job's run, if it is running; whether it was."""
        run = self.running.pop(e["job_id"], None)
        if run is None:
            return False
        tenant, lane, pool, gpus = run
        self.busy[pool] -= gpus
        self._changed["pool", pool] = None
        self._lanes.give_back(tenant, lane)
        self.on_job_stop(e["t_s"], tenant, e["job_id"], lane, how)
        return True

    def _interrupted(self, e: Row) -> None:
        self._stop(e, "interrupted")
        self._queue(e["tenant"], 1)  # back in the queue; a job_failed follows if it gives up
        self.on_instant(e)

    def _failed(self, e: Row) -> None:
        if not self._stop(e, "failed"):
            self._queue(e["tenant"], -1)
        self.on_instant(e)

    def _instant(self, e: Row) -> None:
        self.on_instant(e)
