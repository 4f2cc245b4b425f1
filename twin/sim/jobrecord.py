"""The canonical job record: what the sim takes from a job source (trace adapters make it)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal, NamedTuple, get_args

Status = Literal["completed", "failed", "killed", "running", "pending", "unknown"]
STATUSES: tuple[Status, ...] = get_args(Status)


NO_EXTRAS: Mapping[str, Any] = MappingProxyType({})


class JobRecord(NamedTuple):
    """One job as a trace describes it.

    `submit_s` counts from the trace's first submission; `service_s` is the run time on the
    requested `gpus` (fractional for shared GPUs). `observed_start_s` / `observed_end_s` are
    what the trace recorded (validation targets, never inputs). `censored` marks a service time
    cut short by the end of the observation window, `present_at_start` a job already running
    when the trace began (submitted at its start, its service time what the trace saw of it);
    `bound` a job running on a node at a forecast's instant (placed at once, with no scheduler
    cycle or bind race).
    (A NamedTuple: cheap to build per line.)
    """

    job_id: str
    submit_s: float
    service_s: float
    gpus: float
    tenant: str
    gpu_type: str | None = None
    priority: float = 0.0
    status: Status = "unknown"
    observed_start_s: float | None = None
    observed_end_s: float | None = None
    censored: bool = False
    extras: Mapping[str, Any] = NO_EXTRAS
    cpu_milli: int = 0  # CPU asked of its node, milli-cores (node-level clusters); 0: none
    present_at_start: bool = False
    bound: bool = False  # running at a snapshot's instant: placed at once (a forecast)
    time_limit_s: float | None = None  # the limit its run is stopped at, where it has one
