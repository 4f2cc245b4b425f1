"""The fill experiment's placement policies: the FGD artefact's (random, dot-product,
gpu-clustering, gpu-packing, best-fit, FGD) as it scores them, and the twin's own first-fit and
spread. Each maps a pod and its feasible nodes (in priority order) to an integer score per node
(the highest wins, the first of equals) and the GPU a share of one GPU goes on."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from twin.errors import TraceError
from twin.fill.fill import WHOLE, Choose, Cluster, Pod, Typical, fragmentation, sigmoid

MAX_SPEC_CPU, MAX_SPEC_GPU = 128_000.0, 8_000.0  # what best-fit normalises by
MAX_SPEC_GPU_MILLI, MAX_SPEC_CPU_MILLI = 8_000, 128_000
NO_GPU = np.int64(-1)


def normalised(scores: np.ndarray) -> np.ndarray:
    """Min-max to 0-100 in integers, as the scheduler framework's NormalizeScore does."""
    lo, hi = int(scores.min()), int(scores.max())
    if hi == lo:
        return np.zeros_like(scores)
    out: np.ndarray = (scores - lo) * 100 // (hi - lo)
    return out


def tightest_gpu(gpu: np.ndarray, milli: int) -> np.ndarray:
    """Per node, the first GPU with the least free milli that still holds `milli`."""
    out: np.ndarray = np.where(gpu >= milli, gpu, WHOLE + 1).argmin(axis=1)
    return out


def best_fit(cluster: Cluster, typical: Typical, rng: np.random.Generator) -> Choose:
    """Least CPU and GPU left after the pod, half each, against the largest node's."""

    def choose(pod: Pod, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cpu_after = (cluster.cpu[nodes] - pod.cpu_milli) / MAX_SPEC_CPU * 0.5
        gpu_after = (cluster.gpu[nodes].sum(axis=1) - pod.gpu_request_milli) / MAX_SPEC_GPU * 0.5
        raw = np.trunc((1.0 - (cpu_after + gpu_after)) * 100.0).astype(np.int64)
        gpus = tightest_gpu(cluster.gpu[nodes], pod.gpu_milli) if pod.share else None
        return normalised(raw), gpus if gpus is not None else np.full(len(nodes), NO_GPU)

    return choose


def fgd(cluster: Cluster, typical: Typical, rng: np.random.Generator) -> Choose:
    """Fragmentation gradient descent: the node (and, for a share, the GPU) whose expected
    fragmentation grows least, as int(100 sigmoid((before - after) / 1000))."""
    reach_all = cluster.typical_reach(typical)

    def choose(pod: Pod, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cpu, gpu = cluster.cpu[nodes], cluster.gpu[nodes]
        reach = None if reach_all is None else reach_all[nodes]
        before = cluster.frag[nodes]  # kept up to date by the engine
        cpu_after = cpu - pod.cpu_milli
        if pod.share:
            fits = gpu >= pod.gpu_milli  # (nodes, GPUs)
            tried = gpu[:, None, :] - np.eye(gpu.shape[1], dtype=np.int64)[None] * pod.gpu_milli
            after = fragmentation(
                cpu_after[:, None], tried, typical, None if reach is None else reach[:, None, :]
            )  # (nodes, GPUs)
            scores = np.trunc(sigmoid((before[:, None] - after) / 1000) * 100).astype(np.int64)
            scores = np.where(fits, scores, -1)
            gpus = scores.argmax(axis=1)
            return scores[np.arange(len(nodes)), gpus], gpus
        taken = gpu.copy()
        if pod.num_gpu:
            free = gpu == WHOLE
            first = np.cumsum(free, axis=1) <= pod.num_gpu
            taken[free & first] = 0
        after = fragmentation(cpu_after, taken, typical, reach)
        scores = np.trunc(sigmoid((before - after) / 1000) * 100).astype(np.int64)
        return scores, np.full(len(nodes), NO_GPU)

    return choose


def random(cluster: Cluster, typical: Typical, rng: np.random.Generator) -> Choose:
    """A feasible node at random (it scores 100, the rest 0), a GPU that fits at random."""

    def choose(pod: Pod, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        scores = np.zeros(len(nodes), dtype=np.int64)
        pick = int(rng.integers(len(nodes)))
        scores[pick] = 100
        gpus = np.full(len(nodes), NO_GPU)
        if pod.share:
            fitting = np.flatnonzero(cluster.gpu[nodes[pick]] >= pod.gpu_milli)
            gpus[pick] = fitting[int(rng.integers(len(fitting)))]
        return scores, gpus

    return choose


def gpu_packing(cluster: Cluster, typical: Typical, rng: np.random.Generator) -> Choose:
    """Shared GPUs first (the fuller, the better), then free GPUs on used nodes (the fewer, the
    better), then empty nodes; a share goes on the tightest GPU that fits."""

    def choose(pod: Pod, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        gpu, count = cluster.gpu[nodes], cluster.gpu_count[nodes]
        no_gpu = np.full(len(nodes), NO_GPU)
        if not pod.num_gpu:
            return np.zeros(len(nodes), dtype=np.int64), no_gpu
        free = (gpu == WHOLE).sum(axis=1)
        empty = np.maximum(100 // 3 - free, free)  # all its GPUs free
        if pod.share:
            gpus = tightest_gpu(gpu, pod.gpu_milli)
            left = gpu[np.arange(len(nodes)), gpus]
            used_gpu = np.maximum(100 - (left * 100 // WHOLE) // 10, 50)
            used_node = np.where(left == WHOLE, max(50 - 1, 100 // 3), used_gpu)
            return np.where(free == count, empty, used_node), gpus
        used_node = np.full(len(nodes), max(50 - pod.num_gpu, 100 // 3), dtype=np.int64)
        return np.where(free == count, empty, used_node), no_gpu

    return choose


def dot_product(cluster: Cluster, typical: Typical, rng: np.random.Generator) -> Choose:
    """Tetris-like: the node whose free CPU and GPU (against the largest node's) line up least
    with the pod's request scores highest, as 100 (1 - dot / 2); a share on the tightest GPU."""

    def choose(pod: Pod, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        free_cpu = cluster.cpu[nodes] / MAX_SPEC_CPU
        free_gpu = cluster.gpu[nodes].sum(axis=1) / MAX_SPEC_GPU
        dot = free_cpu * (pod.cpu_milli / MAX_SPEC_CPU) + free_gpu * (
            pod.gpu_request_milli / MAX_SPEC_GPU
        )
        scores = np.trunc(100.0 * (1 - dot / 2.0)).astype(np.int64)
        gpus = tightest_gpu(cluster.gpu[nodes], pod.gpu_milli) if pod.share else None
        return scores, gpus if gpus is not None else np.full(len(nodes), NO_GPU)

    return choose


def gpu_clustering(cluster: Cluster, typical: Typical, rng: np.random.Generator) -> Choose:
    """Pods of one kind of GPU request together: nodes holding only that kind first, then nodes
    holding it among others, then idle ones, then others; within a tier, the fuller node."""

    def choose(pod: Pod, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        no_gpu = np.full(len(nodes), NO_GPU)
        if not pod.num_gpu:
            return np.zeros(len(nodes), dtype=np.int64), no_gpu
        kinds = cluster.kinds[nodes] > 0
        fullness = 100 // 4 * (MAX_SPEC_GPU_MILLI - cluster.gpu[nodes].sum(axis=1))
        fullness //= MAX_SPEC_GPU_MILLI
        held, count = kinds[:, pod.kind], kinds.sum(axis=1)
        tier = np.where(held, np.where(count == 1, 75, 50), np.where(count == 0, 25, 0))
        gpus = tightest_gpu(cluster.gpu[nodes], pod.gpu_milli) if pod.share else no_gpu
        return fullness + tier, gpus

    return choose


def first_fit(cluster: Cluster, typical: Typical, rng: np.random.Generator) -> Choose:
    """The first feasible node in priority order; a share on its first GPU that fits."""

    def choose(pod: Pod, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        gpus = (
            (cluster.gpu[nodes] >= pod.gpu_milli).argmax(axis=1)
            if pod.share
            else np.full(len(nodes), NO_GPU)
        )
        return np.zeros(len(nodes), dtype=np.int64), gpus

    return choose


def spread(cluster: Cluster, typical: Typical, rng: np.random.Generator) -> Choose:
    """The node with the most GPU milli free (then CPU); a share on its loosest GPU."""

    def choose(pod: Pod, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        gpu = cluster.gpu[nodes]
        scores = gpu.sum(axis=1) * MAX_SPEC_CPU_MILLI + cluster.cpu[nodes]
        gpus = gpu.argmax(axis=1) if pod.share else np.full(len(nodes), NO_GPU)
        return scores, gpus

    return choose


POLICIES: dict[str, Callable[[Cluster, Typical, np.random.Generator], Choose]] = {
    "first_fit": first_fit,
    "spread": spread,
    "random": random,
    "dot_product": dot_product,
    "gpu_clustering": gpu_clustering,
    "gpu_packing": gpu_packing,
    "best_fit": best_fit,
    "fgd": fgd,
}
"""Each fill policy by name (the artefact's baselines, as this experiment runs them)."""


def policy(name: str, cluster: Cluster, typical: Typical, seed: int = 0) -> Choose:
    """The policy called `name` on `cluster` (seeded, where it draws at random)."""
    if name not in POLICIES:
        raise TraceError(f"unknown fill policy {name!r}; allowed: {', '.join(POLICIES)}")
    return POLICIES[name](cluster, typical, np.random.default_rng(seed))
