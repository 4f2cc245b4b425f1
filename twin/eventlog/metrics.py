"""Summary metrics folded from event records, so a summary can be rebuilt from any log.

Feed chunks of records (as the sim writes them, or decoded from JSONL) to `Metrics.consume`;
`summary()` reads the totals. Memory grows only with per-job durations (8 bytes each).
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from twin.eventlog.agentic import AgenticMetrics
from twin.eventlog.log import Record
from twin.schema.events import EVENT_FIELDS
from twin.schema.summary import (
    JobCounts,
    PoolSummary,
    Quantiles,
    Summary,
    TenantSummary,
)

GPUCLUSTER_POOL = "gpu"  # the step model's single pool
GPUCLUSTER_SCALE = 10.0  # score = clamp(total reward / (max_steps * 10), 0, 1)


@dataclass
class _Tenant:
    arrived: int = 0
    finished: int = 0
    failed: int = 0
    cost_usd: float = 0.0
    sla_usd: float = 0.0
    value_usd: float = 0.0
    traded_usd: float = 0.0


@dataclass
class Metrics:
    """Running totals over an event log; prices and task sizes come from `episode_started`."""

    value_usd_per_gpu_s: dict[str, float] = field(default_factory=dict)
    max_steps: int | None = None
    step_s: float = 0.0
    job_reward_usd: float = 0.0
    session: str = ""
    scenario: str = ""
    seed: int = 0
    end_reason: str | None = None
    end_t_s: float = 0.0
    events: int = 0
    decisions: int = 0
    interrupted: int = 0
    steps: int = 0
    step_reward: float = 0.0
    _tenants: dict[str, _Tenant] = field(default_factory=lambda: defaultdict(_Tenant))
    _submit_s: dict[str, float] = field(default_factory=dict)
    _work: dict[str, float] = field(default_factory=dict)
    # This round's offers (ids are unique within a round): maker, taker, $ each way.
    _offers: dict[str, tuple[str, str, float, float]] = field(default_factory=dict)
    _wait_s: dict[str, float] = field(default_factory=dict)
    # Per finished job, as packed doubles (8 bytes a job, not a list's 32).
    _completion_s: array[float] = field(default_factory=lambda: array("d"))
    _queueing_s: array[float] = field(default_factory=lambda: array("d"))
    _held: dict[tuple[str | None, str], list[float]] = field(default_factory=dict)
    _busy_gpu_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    _running: dict[str, tuple[float, float, str]] = field(default_factory=dict)
    _pool_cost: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    agentic: AgenticMetrics = field(default_factory=AgenticMetrics)

    def __post_init__(self) -> None:
        self._handlers: dict[str, Callable[[Record], None]] = {
            kind: getattr(self, f"_on_{kind}")
            for kind in EVENT_FIELDS
            if hasattr(self, f"_on_{kind}")
        }

    def consume(self, chunk: list[Record]) -> None:
        """Fold a chunk of records, in log order."""
        handlers = self._handlers
        for rec in chunk:
            handler = handlers.get(rec[0])
            if handler is not None:
                handler(rec)
        self.events += len(chunk)

    # One handler per kind that matters: (kind, t_s, tenant, *payload in EVENT_FIELDS order).

    def _on_job_arrived(self, rec: Record) -> None:
        self._tenants[rec[2]].arrived += 1
        self._submit_s[rec[3]] = rec[1]
        self._work[rec[3]] = rec[5]

    def _on_job_started(self, rec: Record) -> None:
        job = rec[3]
        self._wait_s[job] = self._wait_s.get(job, 0.0) + rec[7]
        self._running[job] = (rec[1], rec[5], rec[4])

    def _on_job_finished(self, rec: Record) -> None:
        t, tenant, job = rec[1], self._tenants[rec[2]], rec[3]
        self._end_run(job, t)
        tenant.finished += 1
        tenant.value_usd += self._work.pop(job, 0.0) * self.value_usd_per_gpu_s.get(rec[2], 0.0)
        self._completion_s.append(t - self._submit_s.pop(job, t))
        self._queueing_s.append(self._wait_s.pop(job, 0.0))

    def _on_job_interrupted(self, rec: Record) -> None:
        self._end_run(rec[3], rec[1])
        self.interrupted += 1

    def _on_job_failed(self, rec: Record) -> None:
        self._tenants[rec[2]].failed += 1
        if rec[3] in self._running:  # it failed during a run (diverged, or as a trace says)
            self._end_run(rec[3], rec[1])
        for per_job in (self._submit_s, self._work, self._wait_s):
            per_job.pop(rec[3], None)

    def _on_budget_charged(self, rec: Record) -> None:
        self._tenants[rec[2]].cost_usd += rec[5]
        self._pool_cost[rec[3]] += rec[5]

    def _on_sla_penalty(self, rec: Record) -> None:
        self._tenants[rec[2]].sla_usd += rec[5]

    def _on_offer_made(self, rec: Record) -> None:
        self._offers[rec[3]] = (rec[2], rec[4], _usd(rec[5]), _usd(rec[6]))

    def _on_trade_settled(self, rec: Record) -> None:
        offer = self._offers.get(rec[3])
        if rec[5] and offer is not None:
            maker, taker, given, taken = offer
            self._tenants[maker].traded_usd += taken - given
            self._tenants[taker].traded_usd += given - taken

    def _on_round_committed(self, rec: Record) -> None:
        self._offers.clear()

    def _on_gpus_ready(self, rec: Record) -> None:
        self._hold(rec[2], rec[3], rec[1], rec[4])

    def _on_gpus_released(self, rec: Record) -> None:
        self._hold(rec[2], rec[3], rec[1], -rec[4])

    def _on_node_failed(self, rec: Record) -> None:
        self._hold(rec[2], rec[3], rec[1], -1)

    def _on_decision_made(self, rec: Record) -> None:
        self.decisions += 1

    def _on_jobs_arrived(self, rec: Record) -> None:
        self._tenants[rec[2]].arrived += rec[3]

    def _on_jobs_processed(self, rec: Record) -> None:
        tenant = self._tenants[rec[2]]
        tenant.finished += rec[3]
        tenant.value_usd += rec[3] * self.job_reward_usd
        self._busy_gpu_s[GPUCLUSTER_POOL] += rec[3] * self.step_s

    def _on_step_completed(self, rec: Record) -> None:
        self.steps = rec[3]
        self.step_reward += rec[6]

    def _on_episode_ended(self, rec: Record) -> None:
        self.end_reason = rec[3]
        self.end_t_s = rec[1]

    # Agentic RL: actions are its jobs; its money is what the external resources cost.

    def _on_action_submitted(self, rec: Record) -> None:
        self._tenants[rec[2]].arrived += 1
        self.agentic.submitted(rec[3], rec[5])

    def _on_action_finished(self, rec: Record) -> None:
        self._tenants[rec[2]].finished += 1
        self.agentic.finished(rec[3], rec[4])

    def _on_trajectory_finished(self, rec: Record) -> None:
        self.agentic.trajectory_s.append(rec[5])

    def _on_rl_step_finished(self, rec: Record) -> None:
        self.agentic.step_s.append(rec[4])
        self.agentic.rollout_s.append(rec[5])

    def _on_resources_used(self, rec: Record) -> None:
        self.agentic.resources.append((rec[3], rec[4], rec[5], rec[6]))

    def _on_episode_started(self, rec: Record) -> None:
        self.scenario, self.seed, config = rec[3], rec[4], rec[5]
        if config.get("kind") == "agentic_rl":
            self.agentic.started(config)
        if config.get("kind") == "gpucluster":
            self.max_steps = config["max_steps"]
            self.step_s = config["step_s"]
            self.job_reward_usd = config["job_reward_usd"]
        for tenant in config.get("tenants", []):
            self.value_usd_per_gpu_s[tenant["name"]] = tenant["value_usd_per_gpu_h"] / 3600

    @property
    def queueing_delays_s(self) -> np.ndarray:
        """Total queueing delay of each finished job, in completion order."""
        return np.frombuffer(self._queueing_s, dtype=float).copy()

    def _end_run(self, job: str, t: float) -> None:
        start, gpus, pool = self._running.pop(job)
        self._busy_gpu_s[pool] += gpus * (t - start)

    def _hold(self, tenant: str | None, pool: str, t: float, delta: float) -> None:
        # [gpus held now, since when, GPU-seconds so far]
        acc = self._held.setdefault((tenant, pool), [0.0, t, 0.0])
        acc[2] += acc[0] * (t - acc[1])
        acc[0] += delta
        acc[1] = t

    def summary(self) -> Summary:
        end = self.end_t_s
        busy = dict(self._busy_gpu_s)
        for start, gpus, pool in self._running.values():
            busy[pool] = busy.get(pool, 0.0) + gpus * (end - start)
        held: dict[str, float] = defaultdict(float)
        for (_, pool), (n, since, gpu_s) in self._held.items():
            held[pool] += gpu_s + n * (end - since)
        pools = [
            PoolSummary(
                name=name,
                held_gpu_h=held[name] / 3600,
                busy_gpu_h=busy.get(name, 0.0) / 3600,
                utilisation=busy.get(name, 0.0) / held[name] if held[name] > 0 else None,
                cost_usd=self._pool_cost.get(name, 0.0),
            )
            for name in sorted(set(held) | set(busy))
        ]
        tenants = [
            TenantSummary(
                name=name,
                jobs_arrived=t.arrived,
                jobs_finished=t.finished,
                jobs_failed=t.failed,
                cost_usd=t.cost_usd,
                sla_usd=t.sla_usd,
                value_usd=t.value_usd,
                traded_usd=t.traded_usd,
                reward_usd=t.value_usd + t.traded_usd - t.cost_usd - t.sla_usd,
            )
            for name, t in sorted(self._tenants.items())
            if name is not None
        ]
        arrived = sum(t.arrived for t in self._tenants.values())
        finished = sum(t.finished for t in self._tenants.values())
        failed = sum(t.failed for t in self._tenants.values())
        cost = sum(t.cost_usd for t in self._tenants.values())
        sla = sum(t.sla_usd for t in self._tenants.values())
        value = sum(t.value_usd for t in self._tenants.values())
        agentic = self.agentic.summary() if self.agentic.orchestration else None
        if agentic is not None:
            cost = sum(r.cost_usd for r in agentic.resources)
        if self.max_steps is not None:
            reward = self.step_reward
            score = min(max(reward / (self.max_steps * GPUCLUSTER_SCALE), 0.0), 1.0)
        else:
            reward = value - cost - sla
            score = min(max(reward / value, 0.0), 1.0) if value > 0 else 0.0
        return Summary(
            session=self.session,
            scenario=self.scenario,
            seed=self.seed,
            end_reason=self.end_reason,
            end_t_s=end,
            events=self.events,
            decisions=self.decisions,
            jobs=JobCounts(
                arrived=arrived,
                finished=finished,
                failed=failed,
                interrupted=self.interrupted,
                unfinished=arrived - finished - failed,
            ),
            completion_s=quantiles(self._completion_s),
            queueing_delay_s=quantiles(self._queueing_s),
            pools=pools,
            tenants=tenants,
            cost_usd=cost,
            sla_usd=sla,
            reward=reward,
            score=score,
            steps=self.steps if self.max_steps is not None else None,
            agentic=agentic,
        )


def quantiles(values: Sequence[float] | np.ndarray) -> Quantiles:
    """Count, mean, p50/p90/p99 and max of `values`."""
    if not len(values):
        return Quantiles(count=0, mean=None, p50=None, p90=None, p99=None, max=None)
    a = np.asarray(values)
    p50, p90, p99 = np.percentile(a, [50, 90, 99]).tolist()
    return Quantiles(
        count=len(values), mean=float(a.mean()), p50=p50, p90=p90, p99=p99, max=float(a.max())
    )


def _usd(bundle: Any) -> float:
    """The dollars in a trade bundle, as the sim records it or as JSON decodes it."""
    usd = bundle.get("usd", 0.0) if isinstance(bundle, dict) else bundle.usd
    return float(usd)
