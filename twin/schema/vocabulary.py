"""The twin's closed vocabularies, each spelled once: the schema, the CLI and the code that
dispatches on a name all read them from here.

A `Literal` names the members (so configs and wire messages validate against it and their JSON
Schemas list them); the tuple beside it is the same list for code that iterates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

QueuePolicy = Literal["fifo", "priority", "sjf", "manual"]
QUEUE_POLICIES: tuple[QueuePolicy, ...] = get_args(QueuePolicy)
"""Queue order: first come first served, highest priority, shortest job first, or jobs start
only when a placement names them (manual)."""
PLACED_ONLY: frozenset[QueuePolicy] = frozenset({"manual"})
RoundPolicy = Literal["fifo", "max-min-fairness"]
ROUND_POLICIES: tuple[RoundPolicy, ...] = get_args(RoundPolicy)
"""Gavel's policies a round-based replay (`twin replay --rounds`) plays."""
"""The queue policies under which a job starts only when an agent's placement names it."""


@dataclass(frozen=True, slots=True)
class MechanismTraits:
    """What an agent must know of a mechanism to act under it (the wire carries it, so agents
    act on the trait, never on the mechanism's name)."""

    priced: bool = False
    """A scarce pool's winners pay one clearing price per GPU."""
    takes_bids: bool = False
    """Sealed bids per pool (`bids_usd_per_gpu`) decide who is served."""
    clears_held: bool = False
    """GPUs tenants already hold change hands at one clearing price each round."""


Mechanism = str
"""How a round shares a pool that cannot serve every request: a name in `MECHANISM_TRAITS`
(the wire and configs validate it there; `twin.sim.market.mechanisms.register` adds one)."""
MECHANISM_TRAITS: dict[Mechanism, MechanismTraits] = {
    "proportional": MechanismTraits(),
    "priority": MechanismTraits(),
    "auction": MechanismTraits(priced=True, takes_bids=True),
    "call_market": MechanismTraits(clears_held=True),
}
DEFAULT_MECHANISM: Mechanism = "proportional"


def mechanism_names() -> tuple[Mechanism, ...]:
    """The mechanisms registered now, built-in ones first."""
    return tuple(MECHANISM_TRAITS)


Clock = Literal["lockstep", "realtime"]
CLOCKS: tuple[Clock, ...] = get_args(Clock)
"""How a negotiation session's virtual time moves against the wall clock."""

Precision = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8"]
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
LayerGroup = Literal["default", "embedding", "attention", "mlp", "moe", "norm", "head"]
LAYER_GROUPS: tuple[LayerGroup, ...] = get_args(LayerGroup)
"""A plan's numeric precision per layer group ('default' covers the groups not named); the
kernel's own tables list the same names."""

Mode = Literal["train", "infer"]
MODES: tuple[Mode, ...] = get_args(Mode)
Optimizer = Literal["none", "sgd", "adam"]
OPTIMIZERS: tuple[Optimizer, ...] = get_args(Optimizer)

EndReason = Literal[
    "horizon", "drained", "budget_exhausted", "max_steps", "round_limit", "work_limit", "idle",
    "deleted",
]  # fmt: skip
END_REASONS: tuple[EndReason, ...] = get_args(EndReason)
"""Why an episode ended: its horizon passed; nothing was left to do; every budget was spent; its
step count was reached; a session's round limit; an RL env's bound on work per step; a session
left idle too long, or deleted."""

ExportFormat = Literal["parquet", "csv", "perfetto"]
EXPORT_FORMATS: tuple[ExportFormat, ...] = get_args(ExportFormat)
"""What an event log exports to: typed tables (Parquet, CSV) or a Perfetto timeline."""

EVENTS_FILE = "events.jsonl"
SUMMARY_FILE = "summary.json"
REPLAY_FILE = "replay.json"
AGENTS_FILE = "agents.json"  # a played session's per-agent report
REPORT_FILE = "report.html"  # the run's HTML report
TIMELINE_FILE = "timeline.perfetto.json"  # the run's Perfetto timeline
"""What a run writes into its output directory: the event log, its summary, a replay's report."""

Placement = Literal["first_fit", "best_fit", "spread", "fgd"]
PLACEMENTS: tuple[Placement, ...] = get_args(Placement)
"""Node choice: lowest-numbered node that fits; tightest fit (bin packing); most free room;
least growth of expected fragmentation (after FGD, ATC '23)."""
WARM_SOCKET_ENV = "TWIN_WARM_SOCKET"  # where `twin warm` listens (empty: use none)
CALIBRATION_FILE = "calibration.json"  # what `twin calibrate` fitted
CALIBRATION_FIGURE = "calibration.svg"  # its validation CDFs, observed against simulated
WHAT_IF_FILE = "what_if.csv"  # one replay per placement policy, side by side

CalibrationSplit = Literal["halves", "alternate-days"]
SPLITS: tuple[CalibrationSplit, ...] = get_args(CalibrationSplit)
"""How `twin calibrate` splits a trace into fit and validation."""
