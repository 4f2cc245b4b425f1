"""Summary metrics folded from event records, so a summary can be rebuilt from any log.

Feed chunks of records (as the sim writes them, or decoded from JSONL) to `Metrics.consume`;
`summary()` reads the totals. Each tally folds the kinds of record it knows (jobs, money, GPUs
held), and the scenario kind's own summary (named by `episode_started`) folds what only that
kind writes. Memory grows only with per-job durations (8 bytes each).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from twin.eventlog.gpu_tally import GpuTally
from twin.eventlog.job_tally import JobTally
from twin.eventlog.kind_summaries import SUMMARIES, ClusterSummary, KindSummary
from twin.eventlog.log import Record, from_dict
from twin.eventlog.money_tally import MoneyTally
from twin.eventlog.quantiles import quantiles
from twin.eventlog.reward import money_reward
from twin.eventlog.tenant_totals import Tenants, tenants
from twin.schema import records
from twin.schema.events import EVENT_FIELDS
from twin.schema.summary import JobCounts, PoolSummary, Summary, TenantSummary

Handler = Callable[[Any], None]


@dataclass
class Metrics:
    """Running totals over an event log; prices and the kind come from `episode_started`."""

    session: str = ""
    scenario: str = ""
    seed: int = 0
    end_reason: str | None = None
    end_t_s: float = 0.0
    events: int = 0
    decisions: int = 0
    tenants: Tenants = field(default_factory=tenants)

    def __post_init__(self) -> None:
        self.jobs = JobTally(tenants=self.tenants)
        self.money = MoneyTally(tenants=self.tenants)
        self.gpus = GpuTally()
        self.kind: KindSummary = ClusterSummary()
        self._handlers = _handlers((self.jobs, self.money, self.gpus, self))

    def consume(self, chunk: list[Record]) -> None:
        """Fold a chunk of records, in log order."""
        handlers = self._handlers
        for rec in chunk:
            handler = handlers.get(rec.kind)
            if handler is not None:
                handler(rec)
        self.events += len(chunk)

    def _on_episode_started(self, rec: records.EpisodeStarted) -> None:
        self.scenario, self.seed, config = rec.scenario, rec.seed, rec.config
        self.kind = SUMMARIES[config.get("kind", ClusterSummary.kind)](self.tenants, self.jobs)
        self.kind.started(config)
        self._handlers.update(_handlers((self.kind,)))
        for tenant in config.get("tenants", []):
            self.jobs.value_usd_per_gpu_s[tenant["name"]] = tenant["value_usd_per_gpu_h"] / 3600

    def _on_episode_ended(self, rec: records.EpisodeEnded) -> None:
        self.end_reason = rec.reason
        self.end_t_s = rec.t_s

    def _on_decision_made(self, rec: records.DecisionMade) -> None:
        self.decisions += 1

    @property
    def queueing_delays_s(self) -> np.ndarray:
        """Total queueing delay of each finished job, in completion order."""
        return np.frombuffer(self.jobs.queueing_s, dtype=float).copy()

    def summary(self) -> Summary:
        end = self.end_t_s
        totals = self.tenants.values()
        cost = sum(t.cost_usd for t in totals)
        sla = sum(t.sla_usd for t in totals)
        reward, score = money_reward(sum(t.value_usd for t in totals), cost, sla)
        summary = Summary(
            session=self.session,
            scenario=self.scenario,
            seed=self.seed,
            end_reason=self.end_reason,
            end_t_s=end,
            events=self.events,
            decisions=self.decisions,
            jobs=self._job_counts(),
            completion_s=quantiles(self.jobs.completion_s),
            queueing_delay_s=quantiles(self.jobs.queueing_s),
            failed_queueing_delay_s=(
                quantiles(self.jobs.failed_queueing_s) if self.jobs.failed_queueing_s else None
            ),
            pools=self._pools(end),
            tenants=self._tenant_summaries(),
            cost_usd=cost,
            sla_usd=sla,
            reward=reward,
            score=score,
            steps=None,
            agentic=None,
        )
        return self.kind.amend(summary)

    def _pools(self, end_s: float) -> list[PoolSummary]:
        busy = self.jobs.busy_until(end_s)
        held = self.gpus.held_until(end_s)
        return [
            PoolSummary(
                name=name,
                held_gpu_h=held[name] / 3600,
                busy_gpu_h=busy.get(name, 0.0) / 3600,
                utilisation=busy.get(name, 0.0) / held[name] if held[name] > 0 else None,
                cost_usd=self.money.pool_cost_usd.get(name, 0.0),
            )
            for name in sorted(set(held) | set(busy))
        ]

    def _job_counts(self) -> JobCounts:
        totals = self.tenants.values()
        arrived = sum(t.arrived for t in totals)
        finished = sum(t.finished for t in totals)
        failed = sum(t.failed for t in totals)
        return JobCounts(arrived=arrived, finished=finished, failed=failed,
                         interrupted=self.jobs.interrupted,
                         unfinished=arrived - finished - failed,
                         present_at_start=self.jobs.present_at_start)  # fmt: skip

    def _tenant_summaries(self) -> list[TenantSummary]:
        return [
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
            for name, t in sorted((n, t) for n, t in self.tenants.items() if n is not None)
        ]


def _handlers(tallies: tuple[object, ...]) -> dict[str, Handler]:
    """Per kind of record, the tallies' handlers for it (`_on_<kind>`), called in order."""
    found: dict[str, list[Handler]] = {}
    for tally in tallies:
        for kind in EVENT_FIELDS:
            handler = getattr(tally, f"_on_{kind}", None)
            if handler is not None:
                found.setdefault(kind, []).append(handler)
    return {kind: hs[0] if len(hs) == 1 else _chain(hs) for kind, hs in found.items()}


def _chain(handlers: list[Handler]) -> Handler:
    def each(rec: Any) -> None:
        for handler in handlers:
            handler(rec)

    return each


def summarise(events: list[dict[str, Any]]) -> Summary:
    """The summary of a log's events (as JSON objects, in log order)."""
    metrics = Metrics()
    metrics.session = events[0]["session"] if events else ""
    metrics.consume([from_dict(e) for e in events])
    return metrics.summary()
