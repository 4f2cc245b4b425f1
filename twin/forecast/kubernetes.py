"""A snapshot from `kubectl get pods,nodes -o json`.

GPU nodes (allocatable `nvidia.com/gpu`, `amd.com/gpu` or MIG slices such as
`nvidia.com/mig-1g.10gb`) grouped by their GPU model label (`nvidia.com/gpu.product`,
`amd.com/gpu.product-name`; else one pool `gpu`, `amd-gpu`), MIG slices as a pool of their
profile; a node with several such resources as one node per resource (its CPUs shared out).
Nodes the scheduler starts nothing on are left out and counted: cordoned
(`spec.unschedulable`), not Ready, or tainted `NoSchedule`/`NoExecute` (but for a taint on a GPU
resource itself, which GPU pods tolerate). A pod's GPUs and CPU are its containers'
requests (limits where a request is missing), its tenant its namespace, its priority
`spec.priority`, its time limit `spec.activeDeadlineSeconds`, its GPU model a node selector on
the model label, or the one pool its GPU resource is found in. Running pods run from
`status.startTime`; Pending pods wait from `metadata.creationTimestamp`; Succeeded and Failed
pods are the window's finished runs (their containers' last `finishedAt`). The queue is the
default scheduler's: by priority, then age.
"""

from __future__ import annotations

import re
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
AMD_GPU = "amd.com/gpu"
AMD_MODEL = "amd.com/gpu.product-name"
MIG = re.compile(r"nvidia\.com/mig-(?P<profile>[\w.-]+)")
# A GPU resource's model label and the pool name where a node has none.
MODEL_LABELS = {GPU: (GPU_MODEL, "gpu"), AMD_GPU: (AMD_MODEL, "amd-gpu")}


def gpu_resource(name: str) -> bool:
    return name in MODEL_LABELS or MIG.fullmatch(name) is not None


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
    "spec.unschedulable", "spec.taints",
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
    pools_of: dict[str, set[str]] = {}  # the pools a GPU resource is found in
    pods = []
    for i, item in enumerate(items):
        kind = item.get("kind") if isinstance(item, dict) else None
        if kind == "Node":
            for node, model, resource in _k8s_node(item, f"{path}: items[{i}]", unused):
                nodes.append(node)
                models[node[0]] = model
                pools_of.setdefault(resource, set()).add(node[0])
            exports.count_unused(item, _NODE_USED, unused, "node.")
        elif kind == "Pod":
            pods.append((i, item))
            exports.count_unused(item, _POD_USED, unused, "pod.")
        else:
            unused[f"items of kind {kind!r}"] += 1
    if not nodes:
        raise ConfigError(f"{path}: no schedulable node with allocatable {GPU}, {AMD_GPU} or "
                          "nvidia.com/mig-* (export nodes too: kubectl get pods,nodes -o "
                          "json)")  # fmt: skip
    at = exports.instant(at_s, kubernetes_instant(items), path, "no pod or node with a timestamp")
    every = set().union(*pools_of.values())
    # A GPU resource found in one pool of several holds the pods asking for it to that pool.
    held_to = {r: next(iter(ps)) for r, ps in pools_of.items() if len(ps) == 1 < len(every)}
    jobs = [_k8s_pod(pod, f"{path}: items[{i}]", at, window_s, unused, held_to=held_to)
            for i, pod in pods]  # fmt: skip
    source = " + ".join(str(p) for p in paths)
    return exports.assemble(Snapshot(at_s=at, source=f"{source} (Kubernetes)", window_s=window_s,
                              pools=exports.pools(exports.groups(nodes), models),
                              nodes=NodeConfig(groups=exports.groups(nodes)), queue="priority"),
                     jobs, unused)  # fmt: skip


def _k8s_node(
    item: Mapping[str, Any], where: str, unused: Counter[str]
) -> list[tuple[tuple[str, int, int], str, str]]:
    """((pool, GPUs, CPU milli), model, resource) for each GPU resource of a node the scheduler
    may start pods on; none for one it may not (counted by why)."""
    status, spec = item.get("status", {}), item.get("spec", {})
    alloc = status.get("allocatable") or status.get("capacity") or {}
    gpus = {name: int(exports.quantity(n, f"{where}.status.allocatable.{name}"))
            for name, n in alloc.items() if gpu_resource(name)}  # fmt: skip
    gpus = {name: n for name, n in gpus.items() if n > 0}
    if not gpus:
        return []
    if spec.get("unschedulable"):
        unused["nodes cordoned (GPUs left out)"] += 1
        return []
    ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    if ready and ready[0].get("status") != "True":
        unused["nodes not Ready (GPUs left out)"] += 1
        return []
    for taint in spec.get("taints") or []:
        key, effect = str(taint.get("key", "")), taint.get("effect")
        if effect in ("NoSchedule", "NoExecute") and not gpu_resource(key):
            unused[f"nodes tainted {key}:{effect} (GPUs left out)"] += 1
            return []
    if len(gpus) > 1:
        unused["nodes with several GPU resources (a node per resource)"] += 1
    labels = item.get("metadata", {}).get("labels", {})
    cpu = exports.quantity(alloc.get("cpu", 0), f"{where}.status.allocatable.cpu") * 1000
    total = sum(gpus.values())
    out = []
    for name, n in sorted(gpus.items()):
        mig = MIG.fullmatch(name)
        if mig is not None:
            model = f"mig-{mig['profile']}"
            unused["nodes with MIG slices (a slice counted as a GPU)"] += 1
        else:
            label, default = MODEL_LABELS[name]
            model = str(labels.get(label, default))
        out.append(((slug(model), min(n, 64), round(cpu * n / total)), model, name))
    return out


def _k8s_pod(
    pod: Mapping[str, Any],
    where: str,
    at_s: float,
    window_s: float,
    unused: Counter[str],
    *,
    held_to: Mapping[str, str],
) -> SnapshotJob | FinishedRun | None:
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    gpus = cpu = 0.0
    resources: set[str] = set()
    for c in spec.get("containers", []):
        res = c.get("resources", {})
        asked = {**res.get("limits", {}), **res.get("requests", {})}
        for name, value in asked.items():
            if gpu_resource(name):
                n = exports.quantity(value, f"{where}.spec.containers")
                gpus += n
                resources |= {name} if n > 0 else set()
            elif name == "cpu":
                cpu += exports.quantity(value, f"{where}.spec.containers")
            else:
                unused[f"pod.resources.{name}"] += 1
    if gpus <= 0:
        unused["pods without GPUs (not played)"] += 1
        return None
    selector = spec.get("nodeSelector", {})
    model = next((selector[label] for label, _ in MODEL_LABELS.values() if label in selector),
                 None)  # fmt: skip
    if model is None:  # held to the pool its GPU resource is found in, where that is one
        if len(resources) > 1:
            unused["pods asking several GPU resources (any pool stands in)"] += 1
        elif resources:
            model = held_to.get(next(iter(resources)))
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
