"""What each scenario kind adds to a summary, by kind: the one place the summary tells kinds
apart. The sim's model-kind registry points at these, and a test keeps the two in step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from twin.eventlog.agentic import AgenticMetrics
from twin.eventlog.job_tally import JobTally
from twin.eventlog.step_summary import StepSummary
from twin.eventlog.tenant_totals import Tenants
from twin.schema.summary import Summary


class KindSummary(Protocol):
    """A kind's own part of a summary: what it reads from `episode_started`, the records only
    it writes (`_on_<kind>` handlers), and how it amends the summary."""

    def started(self, config: dict[str, Any]) -> None: ...

    def amend(self, summary: Summary) -> Summary: ...


class ClusterSummary:
    """The job-level cluster: the common summary is all of it."""

    kind = "cluster"

    def started(self, config: dict[str, Any]) -> None:
        pass

    def amend(self, summary: Summary) -> Summary:
        return summary


SUMMARIES: dict[str, Callable[[Tenants, JobTally], KindSummary]] = {
    ClusterSummary.kind: lambda tenants, jobs: ClusterSummary(),
    StepSummary.kind: lambda tenants, jobs: StepSummary(tenants=tenants, jobs=jobs),
    AgenticMetrics.kind: lambda tenants, jobs: AgenticMetrics(tenants=tenants),
}
