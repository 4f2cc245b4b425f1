"""Jobs and the sources that feed them to the model."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(slots=True, eq=False)
class Job:
    """One job's identity, demand and progress. `work_gpu_s` is reference-GPU-seconds."""

    job_id: str
    tenant: int
    gpus: float
    milli: int
    work_gpu_s: float
    priority: float
    gpu_type: str | None
    submit_s: float
    seq: int
    remaining_gpu_s: float = 0.0
    queued_since_s: float = 0.0
    restarts: int = 0
    pool: int = -1
    start_s: float = 0.0
    rate: float = 0.0
    run: Any = None  # the SimPy event that completes the current run
    queued: bool = False
    version: int = 0  # bumped on every enqueue (lazy heap deletion)


@dataclass(slots=True, frozen=True)
class JobRecord:
    """A job as a source describes it; the canonical record trace adapters produce."""

    job_id: str
    submit_s: float
    service_s: float
    gpus: float
    tenant: str
    gpu_type: str | None = None
    priority: float = 0.0
    extras: dict[str, Any] = field(default_factory=dict)


class JobSource(Protocol):
    """Anything that yields job records in non-decreasing `submit_s` order."""

    def __iter__(self) -> Iterator[JobRecord]: ...
