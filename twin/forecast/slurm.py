"""A snapshot from `squeue --json` with `sinfo --json`.

Nodes from `sinfo --json` (either its per-node `nodes` list or its `sinfo` groups), GPUs
from `gres` (`gpu:a100:8(S:0-1)`; a node of several models, `gpu:h100:6,gpu:h200:2`, as one
node per model), a pool per GPU model; a node listed under several partitions counted once,
and nodes down, drained or powered down left out (counted in `unused_fields`). Jobs from
`squeue --json`: GPUs however they were asked (`--gpus`: `tres_per_job`; `--gres` and
`--gpus-per-node`: `tres_per_node` times the node count; `--gpus-per-task`: `tres_per_task`
times the tasks; else `tres_alloc_str`/`tres_req_str`), tenant its `account`, priority its
`priority`, time limit `time_limit` (minutes); RUNNING jobs run from `start_time`, PENDING jobs
wait from `submit_time`, COMPLETED/FAILED/TIMEOUT/CANCELLED jobs with an end time are finished
runs. Numbers may be plain or `{"set", "infinite", "number"}` as data_parser 0.0.39+ writes
them. The instant is when the export was taken, as it records it (`slurm_instant`): never a
pending job's `start_time`, which is Slurm's estimate of its start, in the future. The queue is
by priority with backfill, as Slurm's default scheduler runs.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import mean
from typing import Any

from twin.errors import ConfigError
from twin.forecast import exports
from twin.forecast.slurm_config import SlurmConfig, read_config
from twin.replay.cluster import slug
from twin.schema.scheduling import NodeConfig
from twin.schema.snapshot import FinishedRun, Snapshot, SnapshotJob


def from_slurm(squeue: Path, sinfo: Path, *, at_s: float | None = None,
               window_s: float = exports.DEFAULT_WINDOW_S,
               config: Path | None = None) -> Snapshot:  # fmt: skip
    """A snapshot from `squeue --json` and `sinfo --json` (`at_s`: when the export was taken,
    as it records it, unless given), scheduled as `config` (`scontrol show config`) says, or
    as Slurm's defaults."""
    cfg = read_config(config) if config is not None else SlurmConfig()
    with exports.shaped(squeue, "squeue --json (with sinfo --json)"):
        return _slurm(exports.json_doc(squeue, "squeue --json"), squeue, sinfo, at_s,
                      window_s=window_s, cfg=cfg)  # fmt: skip


Times = dict[str, float]  # epoch seconds by job id


def read_slurm(squeue: Path, sinfo: Path, *, window_s: float = exports.DEFAULT_WINDOW_S,
               config: Path | None = None) -> tuple[Snapshot, Times, Times]:  # fmt: skip
    """`from_slurm`'s snapshot (the export's own instant) and `job_times`' starts and
    estimates, from one read of `squeue --json` (what a watch needs of each capture)."""
    cfg = read_config(config) if config is not None else SlurmConfig()
    with exports.shaped(squeue, "squeue --json (with sinfo --json)"):
        doc = exports.json_doc(squeue, "squeue --json")
        state = _slurm(doc, squeue, sinfo, None, window_s=window_s, cfg=cfg)
        return (state, *_job_times(doc, squeue))


_JOB_USED = {
    "job_id", "job_state", "submit_time", "start_time", "end_time", "time_limit", "account",
    "user_name", "partition", "priority", "tres_per_node", "tres_per_job", "tres_per_task",
    "tres_req_str", "tres_alloc_str", "node_count", "tasks", "name", "nodes",
    "last_sched_evaluation", "accrue_time", "suspend_time", "preempt_time", "resize_time",
    "array_job_id", "array_task_id", "array_task_string", "array_max_tasks", "hold",
}  # fmt: skip
# A model is any name with a letter in it (`h100`, `nvidia_h100_80gb_hbm3`, a MIG profile such
# as `1g.10gb`); a bare number is the count.
_GRES = re.compile(r"(?:gres[:/])?gpu(?::(?P<model>[\w.-]*[A-Za-z][\w.-]*))?[:=](?P<count>\d+)")
_MIG = re.compile(r"\d+g\.\d+gb", re.IGNORECASE)
# Node states under which Slurm starts nothing new on a node (data_parser 0.0.38's `state` and
# `state_flags`, 0.0.39+'s `state` list).
_NOT_SCHEDULABLE = {
    "DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "FUTURE", "INVAL", "MAINT",
    "NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN", "REBOOT_ISSUED",
    "REBOOT_REQUESTED", "UNKNOWN",
}  # fmt: skip
# Job times that only ever hold the past (never a pending job's planned start or a running
# job's planned end): the evidence of when an export was taken, where it does not say.
_PAST_TIMES = ("submit_time", "accrue_time", "last_sched_evaluation", "suspend_time",
               "preempt_time", "resize_time")  # fmt: skip
_NODE_PAST_TIMES = ("last_busy", "slurmd_start_time", "boot_time", "reason_changed_at")
_STARTED = ("RUNNING", "COMPLETING", "SUSPENDED")
_FOLLOWS_S = 3.0  # a start this soon after an end was the end's doing (Slurm's times are whole s)
_ENDED = ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY",
          "PREEMPTED", "DEADLINE", "BOOT_FAIL")  # fmt: skip


def _number(value: object) -> float | None:
    """A Slurm number: plain, or `{"set": true, "infinite": false, "number": n}`."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def gres_gpus(text: object) -> list[tuple[str | None, int]]:
    """The GPUs of a GRES or TRES string, by model: `gpu:h100:6,gpu:h200:2(S:0-1)` (a node),
    `gres:gpu:8` or `gres/gpu:h100:1` (a job's request), `...,gres/gpu=8,gres/gpu:h100=8`
    (TRES, where the typed entries restate the untyped one: those are taken)."""
    found = [(m["model"], int(m["count"])) for m in _GRES.finditer(str(text or ""))]
    typed = [(model, n) for model, n in found if model]
    return typed or found


def _state_words(raw: Mapping[str, Any]) -> set[str]:
    """A node's or a job's state, as upper-case words (`idle` + `["DRAIN"]`, or a list)."""
    words: set[str] = set()
    for key in ("state", "state_flags", "job_state"):
        value = raw.get(key)
        for item in value if isinstance(value, list) else [value]:
            words |= set(str(item or "").upper().replace("+", " ").split())
    return words


def slurm_instant(squeue: Any, sinfo: Any) -> float | None:
    """When the export was taken, from the export alone: its own `last_update` or
    `last_backfill` where Slurm writes them (data_parser 0.0.39+), else the newest time in it
    that can only be past (a submission, a scheduling pass, a start or an end that happened,
    a node's last activity), never a pending job's estimated start. None where it holds none."""
    times = [_number(doc.get(key)) for doc in (squeue, sinfo) if isinstance(doc, dict)
             for key in ("last_update", "last_backfill")]  # fmt: skip
    for job in squeue.get("jobs", []) if isinstance(squeue, dict) else []:
        if not isinstance(job, dict):
            continue
        times += [_number(job.get(key)) for key in _PAST_TIMES]
        state = _state_words(job)
        if state & {*_STARTED, *_ENDED}:
            times.append(_number(job.get("start_time")))
        if state & set(_ENDED):
            times.append(_number(job.get("end_time")))
    for node in sinfo.get("nodes", []) if isinstance(sinfo, dict) else []:
        if isinstance(node, dict):
            times += [_number(node.get(key)) for key in _NODE_PAST_TIMES]
    known = [t for t in times if t is not None and t > 0]
    return max(known) if known else None


MAX_ARRAY_TASKS = 10_000  # pending tasks of one array record played; the rest are named


def job_identity(raw: Mapping[str, Any]) -> str:
    """A job's id as Slurm names it: `JOBID`, or `ARRAYJOBID_TASK` for an array's task (a task
    keeps that name when it starts and gets a job id of its own)."""
    array = _number(raw.get("array_job_id"))
    task = _number(raw.get("array_task_id"))
    if array and task is not None and 0 <= task < 4_000_000_000:  # NO_VAL: not one task
        return f"{array:.0f}_{task:.0f}"
    return str(raw.get("job_id", "?"))


def _array_id(raw: Mapping[str, Any]) -> str:
    return f"{_number(raw.get('array_job_id')) or 0:.0f}"


def _pending_tasks(raw: Mapping[str, Any], where: str, unused: Counter[str]) -> list[int]:
    """The task numbers of a pending array record (`array_task_string`: `1-6%2`, `3,5-9:2`),
    each a job waiting; none for any other record. A throttle (`%N`) is named, not modelled."""
    text = str(raw.get("array_task_string") or "").strip()
    if not text or not _number(raw.get("array_job_id")):
        return []
    ranges, _, throttle = text.partition("%")
    if throttle:
        unused["array jobs throttled with %N (tasks may run at once beyond it)"] += 1
    tasks: list[int] = []
    for part in ranges.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", part.strip())
        if match is None:
            raise ConfigError(f"{where}.array_task_string: {text!r} is not a task list")
        first, last, step = int(match[1]), int(match[2] or match[1]), int(match[3] or 1)
        if step < 1 or last < first:
            raise ConfigError(f"{where}.array_task_string: {text!r} is not a task list")
        room = MAX_ARRAY_TASKS - len(tasks)
        count = (last - first) // step + 1
        tasks += range(first, first + step * min(count, room), step)
        if count > room:
            unused[f"array tasks past {MAX_ARRAY_TASKS:,} of one array (left out)"] += count - room
    return tasks


def job_times(squeue: Path) -> tuple[Times, Times]:
    """From `squeue --json`: when each job that started did (running or ended), and each
    pending job's estimated start where Slurm has planned one (its `start_time`, what
    `squeue --start` prints), by job id; epoch seconds."""
    return _job_times(exports.json_doc(squeue, "squeue --json"), squeue)


def _job_times(doc: object, squeue: Path) -> tuple[Times, Times]:
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    started: Times = {}
    estimated: Times = {}
    for raw in jobs if isinstance(jobs, list) else []:
        if not isinstance(raw, dict):
            continue
        state, start = _state_words(raw), _number(raw.get("start_time"))
        if start is None or start <= 0:
            continue
        job_id = job_identity(raw)
        end = _number(raw.get("end_time")) or 0.0
        if "CANCELLED" in state and end <= start:  # cancelled while pending: its "start" is when
            continue
        if state & {*_STARTED, *_ENDED}:
            started[job_id] = start
        elif "PENDING" in state:  # an array record: the estimate is its next task's
            tasks = _pending_tasks(raw, f"{squeue}: job {job_id}", Counter())
            estimated[f"{_array_id(raw)}_{tasks[0]}" if tasks else job_id] = start
    return started, estimated


def _slurm(
    doc: object,
    squeue: Path,
    sinfo: Path,
    at_s: float | None,
    *,
    window_s: float,
    cfg: SlurmConfig,
) -> Snapshot:
    nodes_doc = exports.json_doc(sinfo, "sinfo --json")
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        raise ConfigError(f"{squeue}: not squeue --json output (no 'jobs')")
    unused: Counter[str] = Counter()
    nodes, models = _slurm_nodes(nodes_doc, sinfo, unused)
    at = exports.instant(
        at_s, slurm_instant(doc, nodes_doc), squeue, "no job submitted, started or ended"
    )
    read: list[SnapshotJob | FinishedRun | None] = []
    for i, raw in enumerate(jobs):
        exports.count_unused(raw, _JOB_USED, unused, "job.")
        job = _slurm_job(raw, f"{squeue}: jobs[{i}]", at, window_s, unused)
        tasks = _pending_tasks(raw, f"{squeue}: jobs[{i}]", unused)
        if isinstance(job, SnapshotJob) and job.start_s is None and tasks:
            base = _array_id(raw)
            read += [job.model_copy(update={"job_id": f"{base}_{t}"}) for t in tasks]
        else:
            read.append(job)
    groups = exports.groups(nodes)
    unused[f"scheduler: {cfg.described()}"] += 1
    return exports.assemble(Snapshot(
        at_s=at, source=f"{squeue} (Slurm)", window_s=window_s,
        pools=exports.pools(groups, models),
        nodes=NodeConfig(groups=groups, placement="first_fit"),  # cons_tres: nodes in order
        queue="priority", backfill=cfg.backfill,
        backfill_interval_s=cfg.bf_interval_s if cfg.backfill else 0.0,
        backfill_resolution_s=cfg.bf_resolution_s,
        backfill_depth=cfg.bf_max_job_test,
        completing_s=completing_s(_runs(jobs)),
    ), read, unused)  # fmt: skip


def _runs(jobs: Sequence[Any]) -> list[tuple[float, float, float | None, str]]:
    """(submitted, started, ended or None, its nodes) of every job of the export that
    started."""
    runs = []
    for raw in jobs:
        if not isinstance(raw, dict):
            continue
        state = _state_words(raw)
        submit, start = _number(raw.get("submit_time")), _number(raw.get("start_time"))
        if submit is None or not start or not state & {*_STARTED, *_ENDED}:
            continue
        end = _number(raw.get("end_time")) if state & set(_ENDED) else None
        runs.append((submit, start, end, str(raw.get("nodes") or "")))
    return runs


def completing_s(runs: Sequence[tuple[float, float, float | None, str]]) -> float:
    """How long after a run ends its GPUs go to the next job: the mean, over the jobs that
    waited and then started within `_FOLLOWS_S` of an end on the same nodes, of the time from
    the latest such end to its start (Slurm's COMPLETING state and the scheduling it
    triggers; 0 where no start followed an end). The mean, because a chain of jobs on a node
    is late by the sum of its gaps; the same nodes, because on a busy cluster some job ends
    every second, and the latest end anywhere is rarely the one that made room (on a driven
    Slurm that read 0 s where its nodes' gaps averaged 0.8 s)."""
    ends: dict[str, list[float]] = {}
    for _, _, end, nodes in runs:
        if end is not None and nodes:
            ends.setdefault(nodes, []).append(end)
    for times in ends.values():
        times.sort()
    gaps = []
    for submit, start, _, nodes in runs:
        if start - submit < 1 or nodes not in ends:
            continue  # started at its submission: no end released its GPUs
        on = ends[nodes]
        i = bisect_right(on, start)
        if i and start - on[i - 1] <= _FOLLOWS_S:
            gaps.append(start - on[i - 1])
    return float(mean(gaps)) if gaps else 0.0


def _slurm_nodes(
    doc: Any, path: Path, unused: Counter[str]
) -> tuple[list[tuple[str, int, int]], dict[str, str]]:
    """(pool, GPUs, CPU milli) per node that Slurm may start jobs on, a node of several GPU
    models as one node per model (its CPUs shared out by GPUs); a node listed under several
    partitions once; nodes down, drained or powered down left out and counted."""
    nodes: list[tuple[str, int, int]] = []
    models: dict[str, str] = {}
    if isinstance(doc, dict) and isinstance(doc.get("nodes"), list):  # one entry per node
        entries = [(n.get("name"), n.get("gres"), 1, _number(n.get("cpus")),
                    n.get("partitions") or ["gpu"], _state_words(n))
                   for n in doc["nodes"]]  # fmt: skip
    elif isinstance(doc, dict) and isinstance(doc.get("sinfo"), list):  # groups of nodes
        entries = [_sinfo_group(g) for g in doc["sinfo"]]
    else:
        raise ConfigError(f"{path}: not sinfo --json output (no 'nodes' or 'sinfo')")
    seen: set[str] = set()
    for name, gres, count, cpus, partitions, state in entries:
        gpus = gres_gpus(gres)
        if not gpus:
            continue
        if name is not None:
            if name in seen:
                continue  # listed again under another partition
            seen.add(name)
        if state & _NOT_SCHEDULABLE:
            unused[f"nodes {'/'.join(sorted(state & _NOT_SCHEDULABLE))} (GPUs left out)"] += count
            continue
        if len(gpus) > 1:
            unused["nodes with several GPU models (a node per model)"] += count
        if any(model and _MIG.fullmatch(model) for model, _ in gpus):
            unused["nodes with MIG slices (a slice counted as a GPU)"] += count
        total = sum(n for _, n in gpus)
        for model, n in gpus:
            label = model or str(partitions[0])
            models[slug(label)] = label
            nodes += [(slug(label), min(n, 64), round((cpus or 0) * 1000 * n / total))] * count
    if not nodes:
        raise ConfigError(f"{path}: no node with GPUs in its gres that Slurm may start jobs on")
    return nodes, models


def _sinfo_group(
    group: Mapping[str, Any],
) -> tuple[str | None, object, int, float | None, list[str], set[str]]:
    """(a name for its nodes, gres, nodes, CPUs a node, partitions, state) of one `sinfo`
    group (data_parser 0.0.39+); named by its node list, so that a group of the same nodes
    under another partition counts once."""
    cpus = group.get("cpus", {})
    listed = group.get("nodes", {})
    nodes = int(_number(listed.get("total")) or 0)
    total_cpus = _number(cpus.get("total"))
    per_node = _number(cpus.get("maximum")) or (
        total_cpus / nodes if total_cpus and nodes else None
    )
    names = listed.get("nodes") or listed.get("hostnames")
    name = ",".join(sorted(map(str, names))) if isinstance(names, list) and names else None
    partition = group.get("partition", {}).get("name", "gpu")
    state = _state_words(group.get("node", {}))
    return name, group.get("gres", {}).get("total"), nodes, per_node, [partition], state


def _slurm_job(
    raw: Mapping[str, Any], where: str, at_s: float, window_s: float, unused: Counter[str]
) -> SnapshotJob | FinishedRun | None:
    state = _state_words(raw)
    gpus = _slurm_job_gpus(raw)
    if not gpus:
        unused["jobs without GPUs (not played)"] += 1
        return None
    models = {model for model, _ in gpus}
    if len(models) > 1:
        unused["jobs asking for several GPU models (any model stands in)"] += 1
    model = next(iter(models)) if len(models) == 1 else None
    submit = _number(raw.get("submit_time"))
    if submit is None:
        raise ConfigError(f"{where}.submit_time: missing")
    limit_min = _number(raw.get("time_limit"))
    shape: dict[str, Any] = {
        "tenant": str(raw.get("account") or raw.get("user_name") or "default"),
        "gpus": float(sum(n for _, n in gpus)), "gpu_type": slug(model) if model else None,
        "priority": _number(raw.get("priority")) or 0.0, "submit_s": submit,
    }  # fmt: skip
    start, end = _number(raw.get("start_time")), _number(raw.get("end_time"))
    if state & set(_ENDED):
        if start is None or end is None or not at_s - window_s <= end <= at_s or start <= 0:
            return None
        return FinishedRun(**shape, start_s=start, end_s=end,
                           time_limit_s=limit_min * 60 if limit_min else None)  # fmt: skip
    job = {"job_id": job_identity(raw), **shape,
           "time_limit_s": limit_min * 60 if limit_min else None}  # fmt: skip
    if state & set(_STARTED) and start:
        return SnapshotJob(**job, start_s=start)
    if "PENDING" in state:
        reason = str(raw.get("state_reason") or "")
        if raw.get("hold") is True or reason.startswith("JobHeld"):
            unused["jobs held (not queued until released)"] += 1
            return None
        if reason == "Dependency" or "unfulfilled" in str(raw.get("dependency") or ""):
            unused["jobs waiting on a dependency (forecast as if free of it)"] += 1
        return SnapshotJob(**job)
    unused[f"jobs in state {'+'.join(sorted(state))!r}"] += 1
    return None


def _slurm_job_gpus(raw: Mapping[str, Any]) -> list[tuple[str | None, int]]:
    """A job's GPUs by model, however they were asked: `--gpus` (`tres_per_job`), `--gres` or
    `--gpus-per-node` (`tres_per_node`, times its nodes), `--gpus-per-task` (`tres_per_task`,
    times its tasks), else what it was given or asked in TRES (`tres_alloc_str`,
    `tres_req_str`)."""
    nodes = int(_number(raw.get("node_count")) or 1)
    tasks = int(_number(raw.get("tasks")) or 1)
    for field, times in (("tres_per_job", 1), ("tres_per_node", nodes), ("tres_per_task", tasks)):
        if gpus := gres_gpus(raw.get(field)):
            return [(model, n * times) for model, n in gpus]
    for field in ("tres_alloc_str", "tres_req_str"):
        if gpus := gres_gpus(raw.get(field)):
            return gpus
    return []
