"""A cluster's state at one instant: what `twin forecast` starts from.

Read from a trace cut at an instant (`twin forecast --trace X --at T`), from Kubernetes
(`kubectl get pods,nodes -o json`) or from Slurm (`squeue --json`, `sinfo --json`); written
with `twin forecast --write-snapshot`. It holds only what was known at `at_s`: the running jobs
(when each started, not when it will end), the waiting jobs, the finished runs of a window
before `at_s` (what the run-time and arrival models are fitted on), the cluster and the queue
policy. Times are seconds on the source's clock (a trace's: from its first submission).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from twin.schema.base import Frozen
from twin.schema.scenario import PoolConfig
from twin.schema.scheduling import NodeConfig, SchedulerConfig
from twin.schema.vocabulary import QueuePolicy

SNAPSHOT_FORMAT: Literal["twin-snapshot/1"] = "twin-snapshot/1"


class SnapshotJob(Frozen):
    """A job running or waiting at the snapshot's instant."""

    job_id: str = Field(min_length=1)
    tenant: str = "default"
    gpus: Annotated[float, Field(gt=0.0, le=1024.0)]
    gpu_type: str | None = Field(None, description="The GPU model the job is held to, if any.")
    priority: float = 0.0
    cpu_milli: NonNegativeInt = 0
    submit_s: float
    start_s: float | None = Field(None, description="When it started (running jobs only).")
    time_limit_s: PositiveFloat | None = Field(
        None, description="Its requested time limit, where the source has one (Slurm)."
    )
    run_s: PositiveFloat | None = Field(
        None,
        description="Its whole run time on a speed-1 GPU, where the source knows it (a twin "
        "session's own jobs, whose work the tenant is told); else drawn from the window's runs.",
    )


class FinishedRun(Frozen):
    """A run that ended within the window before the instant: what the models learn from."""

    tenant: str = "default"
    gpus: Annotated[float, Field(gt=0.0, le=1024.0)]
    gpu_type: str | None = None
    priority: float = 0.0
    cpu_milli: NonNegativeInt = 0
    submit_s: float
    start_s: float
    end_s: float
    time_limit_s: PositiveFloat | None = Field(
        None, description="Its requested time limit, where the source has one (Slurm)."
    )


class Snapshot(Frozen):
    format: Literal["twin-snapshot/1"] = SNAPSHOT_FORMAT
    at_s: float = Field(description="The instant, on the source's clock.")
    source: str = Field(description="Where the state came from.")
    window_s: PositiveFloat = Field(
        description="How far back `history` reaches: runs that ended in [at_s - window_s, at_s)."
    )
    pools: list[PoolConfig] = Field(min_length=1)
    nodes: NodeConfig | None = None
    queue: QueuePolicy = "fifo"
    backfill: bool = False
    backfill_interval_s: NonNegativeFloat = Field(
        0.0,
        description="0: EASY backfill at every event, on run times; above 0: Slurm's backfill "
        "scheduler, a pass this often (bf_interval) planned on time limits.",
    )
    backfill_resolution_s: NonNegativeFloat = Field(
        60.0, description="Slurm's bf_resolution (a reservation's times rounded down to it)."
    )
    backfill_depth: PositiveInt = Field(
        64, description="How many waiting jobs a backfill pass tries (Slurm's bf_max_job_test)."
    )
    completing_s: NonNegativeFloat = Field(
        0.0,
        description="How much longer an ended run holds its GPUs before the next job may "
        "have them (Slurm's COMPLETING: the epilog and the node's report).",
    )
    scheduler: SchedulerConfig = SchedulerConfig()
    running: list[SnapshotJob] = Field(default_factory=list)
    waiting: list[SnapshotJob] = Field(default_factory=list)
    history: list[FinishedRun] = Field(default_factory=list)
    unused_fields: dict[str, NonNegativeInt] = Field(
        default_factory=dict,
        description="Fields of the source the twin cannot use, with how many records had them.",
    )
