"""The summary of one episode, computed from its event log alone."""

from __future__ import annotations

import statistics

from pydantic import Field

from twin.schema.base import Frozen
from twin.schema.scheduling import ReplayParams
from twin.schema.vocabulary import CalibrationSplit, Placement


class Quantiles(Frozen):
    """Distribution of a duration in seconds (None when nothing was measured)."""

    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None


class PoolSummary(Frozen):
    name: str
    held_gpu_h: float
    busy_gpu_h: float
    utilisation: float | None
    cost_usd: float


class TenantSummary(Frozen):
    name: str
    jobs_arrived: int
    jobs_finished: int
    jobs_failed: int
    cost_usd: float
    sla_usd: float
    value_usd: float
    traded_usd: float = Field(0.0, description="Net dollars received in trades.")
    reward_usd: float


class JobCounts(Frozen):
    arrived: int
    finished: int
    failed: int
    interrupted: int
    unfinished: int
    present_at_start: int = Field(
        0,
        exclude_if=lambda v: v == 0,
        description="Of the arrived, those a replayed trace found already running at its start "
        "(left censored): they finish or stay unfinished as the others do, but no completion "
        "time or queueing delay is counted for them (absent: none).",
    )


class ResourceUse(Frozen):
    """An external resource of an agentic-RL run: unit-hours held (allocated) and busy."""

    resource: str
    capacity: float
    held_unit_h: float
    busy_unit_h: float
    utilisation: float | None
    cost_usd: float


class AgenticSummary(Frozen):
    """Action completion times (ACT), RL steps and external resources of an agentic-RL run."""

    orchestration: str
    actions: int
    act_s: Quantiles
    act_by_action: dict[str, Quantiles]
    step_s: Quantiles
    rollout_s: Quantiles
    trajectory_s: Quantiles
    resources: list[ResourceUse]


class Summary(Frozen):
    session: str
    scenario: str
    seed: int
    end_reason: str | None
    end_t_s: float
    events: int
    decisions: int
    jobs: JobCounts
    completion_s: Quantiles
    queueing_delay_s: Quantiles = Field(description="Of the jobs that finished.")
    failed_queueing_delay_s: Quantiles | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="Of the jobs that started and then failed (none: no such job).",
    )
    pools: list[PoolSummary]
    tenants: list[TenantSummary]
    cost_usd: float
    sla_usd: float
    reward: float
    score: float
    steps: int | None = None
    agentic: AgenticSummary | None = None


class DelayComparison(Frozen):
    """Queueing delay in the replay against what the trace observed (seconds)."""

    observed_jobs: int
    observed: list[float | None]
    simulated: list[float | None]
    quantiles: list[float]
    ks_distance: float
    cdf_levels: list[float] = Field(
        default_factory=list, description="Levels of the two delay curves below (0 to 1)."
    )
    observed_cdf_s: list[float] = Field(
        default_factory=list, description="Observed delay at each level (its quantile function)."
    )
    simulated_cdf_s: list[float] = Field(
        default_factory=list, description="Simulated delay at each level."
    )


class TraceTenant(Frozen):
    """One of the trace's own tenants (a virtual cluster, user or service) in a replay."""

    name: str
    jobs_finished: int
    simulated_delay_s: Quantiles
    observed_delay_s: Quantiles | None  # where the trace recorded when its jobs started
    jobs: int = 0  # replayed, finished or not (what the replay's (other) header counts too)


class ReplayReport(Frozen):
    """What a replay read, what it left out and why, and how it compares with the trace."""

    trace: str
    format: str
    jobs_read: int
    jobs_replayed: int
    bad_lines: int
    first_bad_line: str | None
    skipped: dict[str, int]
    cluster: dict[str, int]
    cluster_source: str
    window: str | None = None  # the part of the trace replayed, when not all of it
    queueing_delay: DelayComparison | None
    tenants: tuple[TraceTenant, ...] = ()  # by jobs, most first
    statuses: dict[str, int] = Field(
        default_factory=dict, description="Jobs read by their status in the trace."
    )
    tenants_merged_jobs: int = Field(
        0, description="Jobs of tenants past the first `max_tenants`, reported as '(other)'."
    )
    max_tenants: int = 4096
    params: ReplayParams | None = None  # the scheduler model and cluster share, when not default
    placement: dict[str, float | int | str] | None = None  # node-level fragmentation, preemption


class CalibrationStep(Frozen):
    """A point of the search that improved the fit, in the order found."""

    capacity_share: float
    cycle_s: float
    backoff_s: float
    backoff_max_s: float
    bind_s: float
    retry_s: float
    bind_conflict: float
    conflict_hold_s: float = 0.0
    placement: Placement | None = None
    background_use: float = 0.0
    ks: float


class DelayTail(Frozen):
    """The tail of a queueing-delay distribution (seconds; None when there are no delays)."""

    jobs: int
    p90: float | None
    p99: float | None
    max: float | None


class ClassTail(Frozen):
    """The delay tails of one class of GPU count (share, 1, 2, 4, 8+) on the validation part:
    what an aggregate tail hides when the class is a sliver of the jobs."""

    gpu_class: str
    observed: DelayTail
    simulated: DelayTail


class SeedSpread(Frozen):
    """The fitted values replayed on several seeds: how much of the fit is the seed's."""

    seeds: list[int]
    ks_validation: list[float] = Field(description="Per seed, the validation KS.")
    p99_simulated_s: list[float | None] = Field(
        description="Per seed, the simulated p99 delay of the validation jobs."
    )

    @staticmethod
    def spread(values: list[float]) -> tuple[float, float, float]:
        """Median, least and most of some values."""
        return statistics.median(values), min(values), max(values)


class Calibration(Frozen):
    """What `twin calibrate` fitted and how well: KS distances of queueing delay, simulated
    against observed, on the first half of the trace's span (fit) and on the second (validation,
    the whole trace replayed with the fitted values, jobs submitted after the split)."""

    trace: str
    cluster: str
    window: str | None = Field(
        default=None, description="The part of the trace calibrated on, when not all of it."
    )
    seed: int = 0
    split: CalibrationSplit = Field(
        "halves",
        description="halves: fit on the first half of the span, validate on the second; "
        "alternate-days: fit on jobs submitted on even days of the window, validate on odd days.",
    )
    split_s: float = Field(
        description="The middle of the span, in seconds from the window's start."
    )
    params: ReplayParams
    ks_fit: float
    ks_validation: float
    ks_whole: float
    tenants: dict[str, float] = Field(
        default_factory=dict, description="Validation KS per trace tenant with enough jobs."
    )
    evaluations: int
    steps: list[CalibrationStep]
    cdf_levels: list[float]
    observed_cdf_s: list[float]
    simulated_cdf_s: list[float]
    observed_tail_s: DelayTail | None = Field(
        None, description="The observed delay's tail on the second half (validation)."
    )
    simulated_tail_s: DelayTail | None = Field(
        None, description="The simulated delay's tail on the second half, the same jobs."
    )
    fit_observed_tail_s: DelayTail | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="The observed delay's tail on the part fitted on (first half, even days).",
    )
    fit_simulated_tail_s: DelayTail | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="The simulated delay's tail on the part fitted on, the same jobs, with the "
        "fitted values replayed over the whole trace.",
    )
    seed_spread: SeedSpread | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="The fitted values replayed on the calibration's seed and the next ones: "
        "the validation KS and p99 per seed (absent: one seed).",
    )
    class_tails: list[ClassTail] = Field(
        default_factory=list,
        exclude_if=lambda v: not v,
        description="Validation delay tails by class of GPU count, observed beside simulated.",
    )
