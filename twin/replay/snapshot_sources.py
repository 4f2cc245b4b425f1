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
from `gres` (`gpu:a100:8(S:0-1)`), a pool per GPU model; jobs from `squeue --json`: GPUs from
`tres_per_node` times the node count or from `tres_req_str`, tenant its `account`, priority its
`priority`, time limit `time_limit` (minutes); RUNNING jobs run from `start_time`, PENDING jobs
wait from `submit_time`, COMPLETED/FAILED/TIMEOUT/CANCELLED jobs with an end time are finished
runs. Numbers may be plain or `{"set", "infinite", "number"}` as data_parser 0.0.39+ writes
them. The queue is by priority with backfill, as Slurm's default scheduler runs.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
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
        if path in used or value in (None, "", [], {}):
            continue
        if isinstance(value, dict) and any(u.startswith(path + ".") for u in used):
            _unused(value, used, counts, label, path + ".")
        else:
            counts[label + path] += 1


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


def from_kubernetes(path: Path, *, at_s: float | None = None,
                    window_s: float = DEFAULT_WINDOW_S) -> Snapshot:  # fmt: skip
    """A snapshot from `kubectl get pods,nodes -o json` (a `List`; `at_s`: the newest time in
    it unless given)."""
    with _shaped(path, "kubectl get pods,nodes -o json"):
        return _kubernetes(path, at_s, window_s)


def from_slurm(squeue: Path, sinfo: Path, *, at_s: float | None = None,
               window_s: float = DEFAULT_WINDOW_S) -> Snapshot:  # fmt: skip
    """A snapshot from `squeue --json` and `sinfo --json` (`at_s`: the newest submit or start
    time in the jobs unless given)."""
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


def _kubernetes(path: Path, at_s: float | None, window_s: float) -> Snapshot:
    doc = _json(path, "Kubernetes export")
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise ConfigError(f"{path}: not a Kubernetes List (no 'items')")
    unused: Counter[str] = Counter()
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
    stamps = [_epoch_s(p["metadata"]["creationTimestamp"], f"{path}: items[{i}]")
              for i, p in pods if p.get("metadata", {}).get("creationTimestamp")]  # fmt: skip
    at = at_s if at_s is not None else max(stamps, default=0.0)
    jobs = [_k8s_pod(pod, f"{path}: items[{i}]", at, window_s, unused) for i, pod in pods]
    return _assemble(Snapshot(at_s=at, source=f"{path} (Kubernetes)", window_s=window_s,
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
    "user_name", "partition", "priority", "tres_per_node", "tres_req_str", "tres_alloc_str",
    "node_count", "name", "nodes",
}  # fmt: skip
_GRES = re.compile(r"gpu(?::(?P<model>[A-Za-z][\w.-]*))?[:=](?P<count>\d+)")


def _number(value: object) -> float | None:
    """A Slurm number: plain, or `{"set": true, "infinite": false, "number": n}`."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _gres_gpus(text: object) -> tuple[int, str | None]:
    found = _GRES.search(str(text or ""))
    return (int(found["count"]), found["model"]) if found else (0, None)


def _slurm(squeue: Path, sinfo: Path, at_s: float | None, window_s: float) -> Snapshot:
    nodes, models = _slurm_nodes(_json(sinfo, "sinfo --json"), sinfo)
    doc = _json(squeue, "squeue --json")
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        raise ConfigError(f"{squeue}: not squeue --json output (no 'jobs')")
    unused: Counter[str] = Counter()
    times = [t for j in jobs for t in (_number(j.get("submit_time")), _number(j.get("start_time")))
             if t]  # fmt: skip
    at = at_s if at_s is not None else max(times, default=0.0)
    read = []
    for i, raw in enumerate(jobs):
        _unused(raw, _JOB_USED, unused, "job.")
        read.append(_slurm_job(raw, f"{squeue}: jobs[{i}]", at, window_s, unused))
    return _assemble(Snapshot(at_s=at, source=f"{squeue} (Slurm)", window_s=window_s,
                              pools=_pools(_groups(nodes), models),
                              nodes=NodeConfig(groups=_groups(nodes)), queue="priority",
                              backfill=True), read, unused)  # fmt: skip


def _slurm_nodes(doc: Any, path: Path) -> tuple[list[tuple[str, int, int]], dict[str, str]]:
    nodes: list[tuple[str, int, int]] = []
    models: dict[str, str] = {}
    if isinstance(doc, dict) and isinstance(doc.get("nodes"), list):  # one entry per node
        entries = [(n.get("gres"), 1, _number(n.get("cpus")), n.get("partitions") or ["gpu"])
                   for n in doc["nodes"]]  # fmt: skip
    elif isinstance(doc, dict) and isinstance(doc.get("sinfo"), list):  # groups of nodes
        entries = [_sinfo_group(g) for g in doc["sinfo"]]
    else:
        raise ConfigError(f"{path}: not sinfo --json output (no 'nodes' or 'sinfo')")
    for gres, count, cpus, partitions in entries:
        gpus, model = _gres_gpus(gres)
        if gpus <= 0:
            continue
        name = model or str(partitions[0])
        models[slug(name)] = name
        nodes += [(slug(name), min(gpus, 64), round((cpus or 0) * 1000))] * count
    if not nodes:
        raise ConfigError(f"{path}: no node with GPUs in its gres")
    return nodes, models


def _sinfo_group(group: Mapping[str, Any]) -> tuple[object, int, float | None, list[str]]:
    """(gres, nodes, CPUs a node, partitions) of one `sinfo` group (data_parser 0.0.39+)."""
    cpus = group.get("cpus", {})
    nodes = int(_number(group.get("nodes", {}).get("total")) or 0)
    total_cpus = _number(cpus.get("total"))
    per_node = _number(cpus.get("maximum")) or (
        total_cpus / nodes if total_cpus and nodes else None
    )
    return (group.get("gres", {}).get("total"), nodes, per_node,
            [group.get("partition", {}).get("name", "gpu")])  # fmt: skip


def _slurm_job(
    raw: Mapping[str, Any], where: str, at_s: float, window_s: float, unused: Counter[str]
) -> SnapshotJob | FinishedRun | None:
    state = raw.get("job_state")
    state = (state[0] if state else "") if isinstance(state, list) else str(state or "")
    per_node, model = _gres_gpus(raw.get("tres_per_node"))
    gpus = per_node * int(_number(raw.get("node_count")) or 1)
    if gpus <= 0:
        gpus, model = _gres_gpus(raw.get("tres_req_str"))
    if gpus <= 0:
        unused["jobs without GPUs (not played)"] += 1
        return None
    submit = _number(raw.get("submit_time"))
    if submit is None:
        raise ConfigError(f"{where}.submit_time: missing")
    limit_min = _number(raw.get("time_limit"))
    shape: dict[str, Any] = {
        "tenant": str(raw.get("account") or raw.get("user_name") or "default"),
        "gpus": float(gpus), "gpu_type": slug(model) if model else None,
        "priority": _number(raw.get("priority")) or 0.0, "submit_s": submit,
    }  # fmt: skip
    start, end = _number(raw.get("start_time")), _number(raw.get("end_time"))
    if state in ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY"):
        if start is None or end is None or not at_s - window_s <= end <= at_s or start <= 0:
            return None
        return FinishedRun(**shape, start_s=start, end_s=end)
    job = {"job_id": str(raw.get("job_id", "?")), **shape,
           "time_limit_s": limit_min * 60 if limit_min else None}  # fmt: skip
    if state in ("RUNNING", "COMPLETING") and start:
        return SnapshotJob(**job, start_s=start)
    if state == "PENDING":
        return SnapshotJob(**job)
    unused[f"jobs in state {state!r}"] += 1
    return None
