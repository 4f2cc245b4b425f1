"""Snapshots (`twin.schema.snapshot`): cut from a trace at an instant, read and written as JSON.

A cut reads the trace in submission order and stops at the first job submitted after the
instant; of the jobs before it, a job's end is read only to learn that it ended before the
instant, and a job's start only to learn that it started before it. A job running at the
instant keeps its start and nothing of its end, so changing any time after the instant changes
no snapshot. A job the trace never started waits at the instant as any job not yet started
does: that it never will is not known then.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic import ValidationError

from twin.errors import ConfigError
from twin.replay.cluster import Cluster
from twin.replay.run import Queue
from twin.schema.scheduling import SchedulerConfig
from twin.schema.snapshot import FinishedRun, Snapshot, SnapshotJob
from twin.sim.jobrecord import JobRecord
from twin.sim.scenarios import describe, override
from twin.text_files import read_text

FIFO = Queue()
DEFAULT_SCHEDULER = SchedulerConfig()


def cut(
    records: Iterable[JobRecord],
    at_s: float,
    *,
    window_s: float,
    cluster: Cluster,
    queue: Queue = FIFO,
    scheduler: SchedulerConfig = DEFAULT_SCHEDULER,
    source: str = "trace",
) -> Snapshot:
    """The state at `at_s` of a trace's jobs (in submission order): running, waiting, and the
    runs that ended in the window before it."""
    since = at_s - window_s
    running: list[SnapshotJob] = []
    waiting: list[SnapshotJob] = []
    history: list[FinishedRun] = []
    stream = iter(records)
    for rec in stream:
        if rec.submit_s > at_s:
            close = getattr(stream, "close", None)  # the future: not read (a reader lets go)
            if close is not None:
                close()
            break
        if rec.gpus <= 0:
            continue
        # A job the trace never started waits at the instant like any other: that it will not
        # start is not known then (the backtest does not score it: its start is censored).
        start = rec.observed_start_s
        if start is None and rec.present_at_start:
            start = rec.submit_s  # already running when the trace began: its age is a floor
        shape = {"tenant": rec.tenant, "gpus": rec.gpus, "gpu_type": rec.gpu_type,
                 "priority": rec.priority, "cpu_milli": rec.cpu_milli,
                 "submit_s": rec.submit_s}  # fmt: skip
        if start is not None and start <= at_s:
            end = rec.observed_end_s
            if end is not None and end <= at_s:
                if end >= since:
                    history.append(FinishedRun(**shape, start_s=start, end_s=end))
            else:
                running.append(SnapshotJob(job_id=rec.job_id, start_s=start, **shape))
        else:
            waiting.append(SnapshotJob(job_id=rec.job_id, **shape))
    return Snapshot(
        at_s=at_s, source=source, window_s=window_s, pools=cluster.pools, nodes=cluster.nodes,
        queue=queue.policy, backfill=queue.backfill, scheduler=scheduler, running=running,
        waiting=waiting, history=history,
    )  # fmt: skip


def read(path: Path) -> Snapshot:
    """A snapshot written by `twin forecast --write-snapshot` (or by hand, to its schema)."""
    text = read_text(path, "snapshot")
    try:
        return Snapshot.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise ConfigError(f"{path}: {where}: {first['msg']} ({exc.error_count()} errors)") from None


def write(snapshot: Snapshot, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(snapshot.model_dump_json(indent=1) + "\n", encoding="utf-8")


MAX_SET = 100_000  # nodes or GPUs a what-if may give a pool
_POOL_SET = re.compile(r"pools\.(?P<pool>[^=]+)\.(?P<what>nodes|gpus)=(?P<sign>[+-]?)(?P<n>\d+)")


def what_if(snapshot: Snapshot, assignments: Sequence[str]) -> Snapshot:
    """The snapshot with each `--set` applied: `pools.NAME.nodes=+8` adds 8 nodes like the
    pool's commonest (`=8`: makes it 8, `-2`: removes 2), `pools.NAME.gpus=+8` the same for a
    pool without nodes, and any other `path.to.field=value` sets that field (`queue=priority`,
    `scheduler.cycle_s=5`)."""
    raw = snapshot.model_dump(mode="json")
    for assignment in assignments:
        match = _POOL_SET.fullmatch(assignment.replace(" ", ""))
        if match is None:
            override(raw, assignment)
            continue
        pool, what = match["pool"], match["what"]
        pools = {p["name"]: p for p in raw["pools"]}
        if pool not in pools:
            raise ConfigError(f"--set {assignment}: no pool {pool!r} (pools: {', '.join(pools)})")
        groups = [g for g in (raw["nodes"] or {}).get("groups", []) if g["pool"] == pool]
        if (what == "nodes") != bool(groups):
            raise ConfigError(f"--set {assignment}: pool {pool!r} has "
                              + ("nodes: set pools.NAME.nodes" if groups else
                                 "no nodes: set pools.NAME.gpus"))  # fmt: skip
        unit = max(groups, key=lambda g: g["count"]) if groups else None
        now = unit["count"] if unit else pools[pool]["max_gpus"]
        n = int(match["n"])
        new = now + n if match["sign"] == "+" else now - n if match["sign"] == "-" else n
        if not (1 if unit else 0) <= new <= MAX_SET:
            raise ConfigError(f"--set {assignment}: {new:,} {what}; from {1 if unit else 0} "
                              f"to {MAX_SET:,}")  # fmt: skip
        if unit is not None:
            pools[pool]["max_gpus"] += (new - now) * unit["gpus"]
            unit["count"] = new
        else:
            pools[pool]["max_gpus"] = new
    try:
        return Snapshot.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"--set: {describe(exc)}") from None
