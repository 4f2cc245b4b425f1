"""Snapshots from what operators can export: Kubernetes (`kubectl get pods,nodes -o json`) and
Slurm (`squeue --json` with `sinfo --json`), read from their documented schemas.

Every field of a pod, a node or a Slurm job that the twin does not use is named in the
snapshot's `unused_fields`, with how many records had it (a path such as `spec.affinity`), so
nothing is dropped silently.

Kubernetes: GPU nodes (allocatable `nvidia.com/gpu`) grouped by their GPU model label
(`nvidia.com/gpu.product`, else one pool `gpu`); a pod's GPUs and CPU are its containers'
requests (limits where a request is missing), its tenant its namespace, its priority
`spec.priority`, its time limit `spec.activeDeadlineSeconds`, its GPU model a node selector on
`nvidia.com/gpu.product`. Running pods run from `status.startTime`; Pending pods wait from
`metadata.creationTimestamp`; Succeeded and Failed pods are the window's finished runs (their
containers' last `finishedAt`). The queue is the default scheduler's: by priority, then age.

Slurm: nodes from `sinfo --json` (either its per-node `nodes` list or its `sinfo` groups), GPUs
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
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from twin.errors import ConfigError
from twin.replay.cluster import pool_of, slug
from twin.schema.scenario import PoolConfig
from twin.schema.scheduling import NodeConfig, NodeGroup
from twin.schema.snapshot import FinishedRun, Snapshot, SnapshotJob
from twin.sim.scenarios import describe
from twin.text_files import read_text

GPU = "nvidia.com/gpu"
GPU_MODEL = "nvidia.com/gpu.product"
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


def _json(path: Path, what: str) -> Any:
    try:
        return orjson.loads(read_text(path, what))
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not JSON ({exc})") from None


def _epoch_s(text: object, where: str) -> float:
    if not isinstance(text, str):
        raise ConfigError(f"{where}: a timestamp (RFC 3339) is expected, got {text!r}")
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ConfigError(f"{where}: {text!r} is not an RFC 3339 timestamp") from None


def _quantity(value: object, where: str) -> float:
    """A Kubernetes quantity (`2`, `500m`, `1k`) as a number."""
    text = str(value).strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(m|k|M|Ki|Mi)?", text)
    if match is None:
        raise ConfigError(f"{where}: {text!r} is not a quantity")
    scale = {"m": 1e-3, "k": 1e3, "M": 1e6, "Ki": 1024.0, "Mi": 1024.0**2}
    return float(match[1]) * scale.get(match[2] or "", 1.0)


def _unused(
    record: Mapping[str, Any], used: set[str], counts: Counter[str], label: str, at: str = ""
) -> None:
    """Count, as `label` + path, every non-empty field of `record` whose path is not in `used`
    (descending into a mapping some used path lies under)."""
    for key, value in record.items():
        path = f"{at}{key}"
        if path in used or _unset(path, value):
            continue
        if isinstance(value, dict) and any(u.startswith(path + ".") for u in used):
            _unused(value, used, counts, label, path + ".")
        else:
            counts[label + path] += 1


def _unset(path: str, value: object) -> bool:
    """Whether a field says nothing: empty, zero or false (Slurm writes `0` and `false` for
    what a job did not ask, and `{"set": false}` from data_parser 0.0.39), or a waiting reason
    every queued job has."""
    if isinstance(value, dict) and value.get("set") is False:
        return True
    if path == "state_reason" and value in ("None", "Resources", "Priority"):
        return True
    return value is None or value is False or value in ("", 0, [], {})


def _pools(groups: Sequence[NodeGroup], models: Mapping[str, str]) -> list[PoolConfig]:
    totals: dict[str, int] = {}
    for g in groups:
        totals[g.pool] = totals.get(g.pool, 0) + g.count * g.gpus
    return [pool_of(models[name], n) for name, n in sorted(totals.items())]


def _groups(nodes: Sequence[tuple[str, int, int]]) -> list[NodeGroup]:
    """(pool, GPUs, CPU milli) per node -> groups of identical nodes."""
    counted = Counter(nodes)
    return [NodeGroup(pool=pool, count=n, gpus=gpus, cpu_milli=cpu)
            for (pool, gpus, cpu), n in sorted(counted.items())]  # fmt: skip


# --- Kubernetes ---------------------------------------------------------------------------

_POD_USED = {
    "apiVersion", "kind", "metadata.name", "metadata.namespace", "metadata.creationTimestamp",
    "metadata.uid", "metadata.labels", "metadata.annotations", "metadata.resourceVersion",
    "metadata.ownerReferences", "metadata.generateName", "metadata.managedFields",
    "spec.containers", "spec.priority", "spec.nodeSelector", "spec.nodeName",
    "spec.activeDeadlineSeconds", "status.phase", "status.startTime", "status.containerStatuses",
    "status.conditions", "status.qosClass", "status.hostIP", "status.podIP", "status.podIPs",
}  # fmt: skip
_NODE_USED = {
    "apiVersion", "kind", "metadata.name", "metadata.labels", "metadata.uid",
    "metadata.creationTimestamp", "metadata.annotations", "metadata.resourceVersion",
    "metadata.managedFields", "status.allocatable", "status.capacity", "status.conditions",
    "status.addresses", "status.nodeInfo", "status.daemonEndpoints", "status.images",
}  # fmt: skip


def from_kubernetes(paths: Path | Sequence[Path], *, at_s: float | None = None,
                    window_s: float = DEFAULT_WINDOW_S) -> Snapshot:  # fmt: skip
    """A snapshot from `kubectl get pods,nodes -o json` (a `List`, or several merged: pods and
    nodes exported apart; `at_s`: when the export was taken, as it records it, unless given)."""
    listed = [paths] if isinstance(paths, Path) else list(paths)
    loaded = []
    for path in listed:  # each file read once, a List or one error naming it
        with _shaped(path, "kubectl get pods,nodes -o json"):
            loaded.append((path, _items(path)))
    with _shaped(listed[-1], "kubectl get pods,nodes -o json"):
        return _kubernetes(loaded, at_s, window_s)


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


def from_slurm(squeue: Path, sinfo: Path, *, at_s: float | None = None,
               window_s: float = DEFAULT_WINDOW_S) -> Snapshot:  # fmt: skip
    """A snapshot from `squeue --json` and `sinfo --json` (`at_s`: when the export was taken,
    as it records it, unless given)."""
    with _shaped(squeue, "squeue --json (with sinfo --json)"):
        return _slurm(squeue, sinfo, at_s, window_s)


@contextmanager
def _shaped(path: Path, what: str) -> Iterator[None]:
    """A record of the wrong shape (a list where a mapping goes, text where a number goes) is
    one error naming the file, not a traceback."""
    try:
        yield
    except ValidationError as exc:
        raise ConfigError(f"{path}: a record the snapshot cannot hold: {describe(exc)}") from None
    except (AttributeError, TypeError, KeyError, ValueError, IndexError) as exc:
        raise ConfigError(f"{path}: not in the shape of {what} ({type(exc).__name__}: "
                          f"{str(exc)[:200]})") from None  # fmt: skip


def _items(path: Path) -> list[Any]:
    doc = _json(path, "Kubernetes export")
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise ConfigError(f"{path}: not a Kubernetes List (no 'items')")
    return items


def _merged(loaded: Sequence[tuple[Path, list[Any]]], unused: Counter[str]) -> list[Any]:
    """The items of every file, an object given twice (kind, namespace, name) taken from the
    last file that has it."""
    merged: dict[tuple[str, str, str], Any] = {}
    for _, items in loaded:
        for item in items:
            meta = item.get("metadata", {}) if isinstance(item, dict) else {}
            key = (str(item.get("kind") if isinstance(item, dict) else None),
                   str(meta.get("namespace", "")), str(meta.get("name", len(merged))))  # fmt: skip
            if key in merged:
                unused["objects in more than one file (the last file's taken)"] += 1
            merged[key] = item
    return list(merged.values())


def kubernetes_instant(items: Sequence[Any]) -> float | None:
    """When the export was taken, from the export alone: the newest time in it, all of which
    are past (creations, starts, condition changes, node heartbeats, container ends). None
    where it holds none."""
    times: list[str] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        meta, status = item.get("metadata", {}), item.get("status", {})
        times += [meta.get("creationTimestamp"), status.get("startTime")]
        for c in status.get("conditions") or []:
            times += [c.get("lastHeartbeatTime"), c.get("lastTransitionTime")]
        for c in status.get("containerStatuses") or []:
            for state in (c.get("state") or {}).values():
                times += [state.get("startedAt"), state.get("finishedAt")]
    stamps = []
    for t in times:
        if isinstance(t, str):
            with suppress(ValueError):
                stamps.append(datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp())
    return max(stamps) if stamps else None


def _kubernetes(
    loaded: Sequence[tuple[Path, list[Any]]], at_s: float | None, window_s: float
) -> Snapshot:
    paths = [path for path, _ in loaded]
    path = paths[-1]
    unused: Counter[str] = Counter()
    items = _merged(loaded, unused)
    nodes, models = [], {}
    pods = []
    for i, item in enumerate(items):
        kind = item.get("kind") if isinstance(item, dict) else None
        if kind == "Node":
            node = _k8s_node(item, f"{path}: items[{i}]")
            if node is not None:
                nodes.append(node[0])
                models[node[0][0]] = node[1]
            _unused(item, _NODE_USED, unused, "node.")
        elif kind == "Pod":
            pods.append((i, item))
            _unused(item, _POD_USED, unused, "pod.")
        else:
            unused[f"items of kind {kind!r}"] += 1
    if not nodes:
        raise ConfigError(f"{path}: no node with allocatable {GPU} (export nodes too: "
                          "kubectl get pods,nodes -o json)")  # fmt: skip
    at = instant(at_s, kubernetes_instant(items), path, "no pod or node with a timestamp")
    jobs = [_k8s_pod(pod, f"{path}: items[{i}]", at, window_s, unused) for i, pod in pods]
    source = " + ".join(str(p) for p in paths)
    return _assemble(Snapshot(at_s=at, source=f"{source} (Kubernetes)", window_s=window_s,
                              pools=_pools(_groups(nodes), models),
                              nodes=NodeConfig(groups=_groups(nodes)), queue="priority"),
                     jobs, unused)  # fmt: skip


def _assemble(
    empty: Snapshot, jobs: Sequence[SnapshotJob | FinishedRun | None], unused: Counter[str]
) -> Snapshot:
    """`empty` (the cluster and queue) with the jobs sorted into running, waiting, finished."""
    running = [j for j in jobs if isinstance(j, SnapshotJob) and j.start_s is not None]
    waiting = [j for j in jobs if isinstance(j, SnapshotJob) and j.start_s is None]
    history = [j for j in jobs if isinstance(j, FinishedRun)]
    return empty.model_copy(update={"running": running, "waiting": waiting, "history": history,
                                    "unused_fields": dict(sorted(unused.items()))})  # fmt: skip


def _k8s_node(item: Mapping[str, Any], where: str) -> tuple[tuple[str, int, int], str] | None:
    status = item.get("status", {})
    alloc = status.get("allocatable") or status.get("capacity") or {}
    gpus = int(_quantity(alloc.get(GPU, 0), f"{where}.status.allocatable"))
    if gpus <= 0:
        return None
    model = item.get("metadata", {}).get("labels", {}).get(GPU_MODEL, "gpu")
    cpu = round(_quantity(alloc.get("cpu", 0), f"{where}.status.allocatable.cpu") * 1000)
    return (slug(model), min(gpus, 64), cpu), model


def _k8s_pod(
    pod: Mapping[str, Any], where: str, at_s: float, window_s: float, unused: Counter[str]
) -> SnapshotJob | FinishedRun | None:
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    gpus = cpu = 0.0
    for c in spec.get("containers", []):
        res = c.get("resources", {})
        asked = {**res.get("limits", {}), **res.get("requests", {})}
        gpus += _quantity(asked.get(GPU, 0), f"{where}.spec.containers")
        cpu += _quantity(asked.get("cpu", 0), f"{where}.spec.containers")
        for name in asked:
            if name not in (GPU, "cpu"):
                unused[f"pod.resources.{name}"] += 1
    if gpus <= 0:
        unused["pods without GPUs (not played)"] += 1
        return None
    model = spec.get("nodeSelector", {}).get(GPU_MODEL)
    shape: dict[str, Any] = {
        "tenant": meta.get("namespace", "default"), "gpus": gpus,
        "gpu_type": slug(model) if model else None, "priority": float(spec.get("priority", 0)),
        "cpu_milli": round(cpu * 1000),
        "submit_s": _epoch_s(meta.get("creationTimestamp"), f"{where}.metadata.creationTimestamp"),
    }  # fmt: skip
    phase = status.get("phase")
    if phase in ("Succeeded", "Failed"):
        ends = [s.get("state", {}).get("terminated", {}).get("finishedAt")
                for s in status.get("containerStatuses", [])]  # fmt: skip
        ends = [e for e in ends if e]
        if not ends or not status.get("startTime"):
            unused["finished pods without start or finish times"] += 1
            return None
        end = max(_epoch_s(e, f"{where}.status.containerStatuses") for e in ends)
        if not at_s - window_s <= end <= at_s:
            return None
        return FinishedRun(**shape, start_s=_epoch_s(status["startTime"], f"{where}.status"),
                           end_s=end)  # fmt: skip
    limit = spec.get("activeDeadlineSeconds")
    job = {"job_id": f"{shape['tenant']}/{meta.get('name', '?')}",
           "time_limit_s": float(limit) if limit else None, **shape}  # fmt: skip
    if phase == "Running" and status.get("startTime"):
        return SnapshotJob(**job, start_s=_epoch_s(status["startTime"], f"{where}.status"))
    if phase == "Pending":
        return SnapshotJob(**job)
    unused[f"pods in phase {phase!r}"] += 1
    return None


# --- Slurm --------------------------------------------------------------------------------

_JOB_USED = {
    "job_id", "job_state", "submit_time", "start_time", "end_time", "time_limit", "account",
    "user_name", "partition", "priority", "tres_per_node", "tres_per_job", "tres_per_task",
    "tres_req_str", "tres_alloc_str", "node_count", "tasks", "name", "nodes",
    "last_sched_evaluation", "accrue_time", "suspend_time", "preempt_time", "resize_time",
}  # fmt: skip
_GRES = re.compile(r"(?:gres[:/])?gpu(?::(?P<model>[A-Za-z][\w.-]*))?[:=](?P<count>\d+)")
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
_ENDED = ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY",
          "PREEMPTED", "DEADLINE", "BOOT_FAIL")  # fmt: skip


def _number(value: object) -> float | None:
    """A Slurm number: plain, or `{"set": true, "infinite": false, "number": n}`."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _gres_gpus(text: object) -> list[tuple[str | None, int]]:
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


def _slurm(squeue: Path, sinfo: Path, at_s: float | None, window_s: float) -> Snapshot:
    nodes_doc = _json(sinfo, "sinfo --json")
    doc = _json(squeue, "squeue --json")
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        raise ConfigError(f"{squeue}: not squeue --json output (no 'jobs')")
    unused: Counter[str] = Counter()
    nodes, models = _slurm_nodes(nodes_doc, sinfo, unused)
    at = instant(at_s, slurm_instant(doc, nodes_doc), squeue, "no job submitted, started or "
                 "ended")  # fmt: skip
    read = []
    for i, raw in enumerate(jobs):
        _unused(raw, _JOB_USED, unused, "job.")
        read.append(_slurm_job(raw, f"{squeue}: jobs[{i}]", at, window_s, unused))
    return _assemble(Snapshot(at_s=at, source=f"{squeue} (Slurm)", window_s=window_s,
                              pools=_pools(_groups(nodes), models),
                              nodes=NodeConfig(groups=_groups(nodes)), queue="priority",
                              backfill=True), read, unused)  # fmt: skip


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
        gpus = _gres_gpus(gres)
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
        return FinishedRun(**shape, start_s=start, end_s=end)
    job = {"job_id": str(raw.get("job_id", "?")), **shape,
           "time_limit_s": limit_min * 60 if limit_min else None}  # fmt: skip
    if state & set(_STARTED) and start:
        return SnapshotJob(**job, start_s=start)
    if "PENDING" in state:
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
        if gpus := _gres_gpus(raw.get(field)):
            return [(model, n * times) for model, n in gpus]
    for field in ("tres_alloc_str", "tres_req_str"):
        if gpus := _gres_gpus(raw.get(field)):
            return gpus
    return []
