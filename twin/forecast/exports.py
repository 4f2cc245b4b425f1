"""What exports of a cluster's state have in common, read into a snapshot: the instant an
export was taken, its JSON read with errors naming the file, the unused fields counted and
ranked for a reader, nodes grouped into pools.

Every field of a pod, a node or a Slurm job that the twin does not use is named in the
snapshot's `unused_fields`, with how many records had it (a path such as `spec.affinity`), so
nothing is dropped silently.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from twin.errors import ConfigError
from twin.replay.cluster import pool_of
from twin.schema.scenario import PoolConfig
from twin.schema.scheduling import NodeGroup
from twin.schema.snapshot import FinishedRun, Snapshot, SnapshotJob
from twin.sim.scenarios import describe
from twin.text_files import read_text

DEFAULT_WINDOW_S = 7 * 86_400.0


# Fields a source records that would move a forecast were the twin to model them (a
# dependency holds a job back, a reservation or a taint keeps nodes from it, memory can bind
# before GPUs do); every other unused field (ids, paths, exit codes, flags) does not.
FORECAST_FIELDS = (
    "job.dependency", "job.qos", "job.nice", "job.state_reason", "job.array_task",
    "job.resv_name", "job.required_nodes", "job.excluded_nodes", "job.features", "job.het_job",
    "job.deadline", "job.time_minimum", "job.contiguous", "job.memory_per", "job.licenses",
    "job.shared", "job.max_nodes", "job.minimum_cpus_per_node", "job.cpus", "job.exclusive",
    "pod.spec.tolerations", "pod.spec.affinity", "pod.spec.topologySpreadConstraints",
    "pod.spec.schedulerName", "pod.spec.priorityClassName", "pod.resources.", "node.spec",
)  # fmt: skip


def ranked_unused(unused: Mapping[str, int]) -> tuple[list[str], list[str], int]:
    """`unused_fields` for a reader: what the reader did (`jobs without GPUs`, `nodes DRAIN`),
    the fields that would move the forecast, and how many others there are."""
    notes = [k for k in unused if not k.startswith(("job.", "pod.", "node."))]
    matters = [k for k in unused if k.startswith(FORECAST_FIELDS)]
    return notes, matters, len(unused) - len(notes) - len(matters)


def json_doc(path: Path, what: str) -> Any:
    try:
        return orjson.loads(read_text(path, what))
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not JSON ({exc})") from None


def epoch_s(text: object, where: str) -> float:
    if not isinstance(text, str):
        raise ConfigError(f"{where}: a timestamp (RFC 3339) is expected, got {text!r}")
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ConfigError(f"{where}: {text!r} is not an RFC 3339 timestamp") from None


def quantity(value: object, where: str) -> float:
    """A Kubernetes quantity (`2`, `500m`, `1k`) as a number."""
    text = str(value).strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(m|k|M|Ki|Mi)?", text)
    if match is None:
        raise ConfigError(f"{where}: {text!r} is not a quantity")
    scale = {"m": 1e-3, "k": 1e3, "M": 1e6, "Ki": 1024.0, "Mi": 1024.0**2}
    return float(match[1]) * scale.get(match[2] or "", 1.0)


def count_unused(
    record: Mapping[str, Any], used: set[str], counts: Counter[str], label: str, at: str = ""
) -> None:
    """Count, as `label` + path, every non-empty field of `record` whose path is not in `used`
    (descending into a mapping some used path lies under)."""
    for key, value in record.items():
        path = f"{at}{key}"
        if path in used or unset(path, value):
            continue
        if isinstance(value, dict) and any(u.startswith(path + ".") for u in used):
            count_unused(value, used, counts, label, path + ".")
        else:
            counts[label + path] += 1


def unset(path: str, value: object) -> bool:
    """Whether a field says nothing: empty, zero or false (Slurm writes `0` and `false` for
    what a job did not ask, and `{"set": false}` from data_parser 0.0.39), or a waiting reason
    every queued job has."""
    if isinstance(value, dict) and value.get("set") is False:
        return True
    if path == "state_reason" and value in ("None", "Resources", "Priority"):
        return True
    return value is None or value is False or value in ("", 0, [], {})


def pools(groups: Sequence[NodeGroup], models: Mapping[str, str]) -> list[PoolConfig]:
    totals: dict[str, int] = {}
    for g in groups:
        totals[g.pool] = totals.get(g.pool, 0) + g.count * g.gpus
    return [pool_of(models[name], n) for name, n in sorted(totals.items())]


def groups(nodes: Sequence[tuple[str, int, int]]) -> list[NodeGroup]:
    """(pool, GPUs, CPU milli) per node -> groups of identical nodes."""
    counted = Counter(nodes)
    return [NodeGroup(pool=pool, count=n, gpus=gpus, cpu_milli=cpu)
            for (pool, gpus, cpu), n in sorted(counted.items())]  # fmt: skip


def instant(at_s: float | None, own_s: float | None, path: Path, lacking: str) -> float:
    """The instant of an export: `at_s` (`--at`) where given, else its own (`own_s`). An export
    holds the state when it was taken: an `--at` before that is refused, and so is an export
    that says nothing of when it was taken (`lacking`: what it lacks) without one."""
    if at_s is None:
        if own_s is None:
            raise ConfigError(f"{path}: no time in the export says when it was taken "
                              f"({lacking}): give --at (RFC 3339, or now)")  # fmt: skip
        return own_s
    if own_s is not None and at_s < own_s - 1:
        taken = datetime.fromtimestamp(own_s, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        raise ConfigError(f"--at: before {path} was taken ({taken}): an export holds the "
                          "state when it was taken, not before")  # fmt: skip
    return at_s


@contextmanager
def shaped(path: Path, what: str) -> Iterator[None]:
    """A record of the wrong shape (a list where a mapping goes, text where a number goes) is
    one error naming the file, not a traceback."""
    try:
        yield
    except ValidationError as exc:
        raise ConfigError(f"{path}: a record the snapshot cannot hold: {describe(exc)}") from None
    except (AttributeError, TypeError, KeyError, ValueError, IndexError) as exc:
        raise ConfigError(f"{path}: not in the shape of {what} ({type(exc).__name__}: "
                          f"{str(exc)[:200]})") from None  # fmt: skip


def assemble(
    empty: Snapshot, jobs: Sequence[SnapshotJob | FinishedRun | None], unused: Counter[str]
) -> Snapshot:
    """`empty` (the cluster and queue) with the jobs sorted into running, waiting, finished."""
    running = [j for j in jobs if isinstance(j, SnapshotJob) and j.start_s is not None]
    waiting = [j for j in jobs if isinstance(j, SnapshotJob) and j.start_s is None]
    history = [j for j in jobs if isinstance(j, FinishedRun)]
    return empty.model_copy(update={"running": running, "waiting": waiting, "history": history,
                                    "unused_fields": dict(sorted(unused.items()))})  # fmt: skip
