"""A snapshot from `kubectl get pods,nodes -o json`.

GPU nodes (allocatable `nvidia.com/gpu`) grouped by their GPU model label
(`nvidia.com/gpu.product`, else one pool `gpu`); a pod's GPUs and CPU are its containers'
requests (limits where a request is missing), its tenant its namespace, its priority
`spec.priority`, its time limit `spec.activeDeadlineSeconds`, its GPU model a node selector on
`nvidia.com/gpu.product`. Running pods run from `status.startTime`; Pending pods wait from
`metadata.creationTimestamp`; Succeeded and Failed pods are the window's finished runs (their
containers' last `finishedAt`). The queue is the default scheduler's: by priority, then age.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from contextlib import suppress
from datetime import datetime
from pathlib import Path
from typing import Any

from twin.errors import ConfigError
from twin.forecast import exports
from twin.replay.cluster import slug
from twin.schema.scheduling import NodeConfig
from twin.schema.snapshot import FinishedRun, Snapshot, SnapshotJob

GPU = "nvidia.com/gpu"
GPU_MODEL = "nvidia.com/gpu.product"


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
                    window_s: float = exports.DEFAULT_WINDOW_S) -> Snapshot:  # fmt: skip
    """A snapshot from `kubectl get pods,nodes -o json` (a `List`, or several merged: pods and
    nodes exported apart; `at_s`: when the export was taken, as it records it, unless given)."""
    listed = [paths] if isinstance(paths, Path) else list(paths)
    loaded = []
    for path in listed:  # each file read once, a List or one error naming it
        with exports.shaped(path, "kubectl get pods,nodes -o json"):
            loaded.append((path, _items(path)))
    with exports.shaped(listed[-1], "kubectl get pods,nodes -o json"):
        return _kubernetes(loaded, at_s, window_s)


def _items(path: Path) -> list[Any]:
    doc = exports.json_doc(path, "Kubernetes export")
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
            exports.count_unused(item, _NODE_USED, unused, "node.")
        elif kind == "Pod":
            pods.append((i, item))
            exports.count_unused(item, _POD_USED, unused, "pod.")
        else:
            unused[f"items of kind {kind!r}"] += 1
    if not nodes:
        raise ConfigError(f"{path}: no node with allocatable {GPU} (export nodes too: "
                          "kubectl get pods,nodes -o json)")  # fmt: skip
    at = exports.instant(at_s, kubernetes_instant(items), path, "no pod or node with a timestamp")
    jobs = [_k8s_pod(pod, f"{path}: items[{i}]", at, window_s, unused) for i, pod in pods]
    source = " + ".join(str(p) for p in paths)
    return exports.assemble(Snapshot(at_s=at, source=f"{source} (Kubernetes)", window_s=window_s,
                              pools=exports.pools(exports.groups(nodes), models),
                              nodes=NodeConfig(groups=exports.groups(nodes)), queue="priority"),
                     jobs, unused)  # fmt: skip


def _k8s_node(item: Mapping[str, Any], where: str) -> tuple[tuple[str, int, int], str] | None:
    status = item.get("status", {})
    alloc = status.get("allocatable") or status.get("capacity") or {}
    gpus = int(exports.quantity(alloc.get(GPU, 0), f"{where}.status.allocatable"))
    if gpus <= 0:
        return None
    model = item.get("metadata", {}).get("labels", {}).get(GPU_MODEL, "gpu")
    cpu = round(exports.quantity(alloc.get("cpu", 0), f"{where}.status.allocatable.cpu") * 1000)
    return (slug(model), min(gpus, 64), cpu), model


def _k8s_pod(
    pod: Mapping[str, Any], where: str, at_s: float, window_s: float, unused: Counter[str]
) -> SnapshotJob | FinishedRun | None:
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    gpus = cpu = 0.0
    for c in spec.get("containers", []):
        res = c.get("resources", {})
        asked = {**res.get("limits", {}), **res.get("requests", {})}
        gpus += exports.quantity(asked.get(GPU, 0), f"{where}.spec.containers")
        cpu += exports.quantity(asked.get("cpu", 0), f"{where}.spec.containers")
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
        "submit_s": exports.epoch_s(meta.get("creationTimestamp"),
                                    f"{where}.metadata.creationTimestamp"),
    }  # fmt: skip
    phase = status.get("phase")
    if phase in ("Succeeded", "Failed"):
        ends = [s.get("state", {}).get("terminated", {}).get("finishedAt")
                for s in status.get("containerStatuses", [])]  # fmt: skip
        ends = [e for e in ends if e]
        if not ends or not status.get("startTime"):
            unused["finished pods without start or finish times"] += 1
            return None
        end = max(exports.epoch_s(e, f"{where}.status.containerStatuses") for e in ends)
        if not at_s - window_s <= end <= at_s:
            return None
        return FinishedRun(**shape, start_s=exports.epoch_s(status["startTime"], f"{where}.status"),
                           end_s=end)  # fmt: skip
    limit = spec.get("activeDeadlineSeconds")
    job = {"job_id": f"{shape['tenant']}/{meta.get('name', '?')}",
           "time_limit_s": float(limit) if limit else None, **shape}  # fmt: skip
    if phase == "Running" and status.get("startTime"):
        return SnapshotJob(**job, start_s=exports.epoch_s(status["startTime"], f"{where}.status"))
    if phase == "Pending":
        return SnapshotJob(**job)
    unused[f"pods in phase {phase!r}"] += 1
    return None
