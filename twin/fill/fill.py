"""The fill-to-saturation experiment of "Beware of Fragmentation" (ATC '23), as its simulator runs
it: pods arrive one at a time and never leave; each is placed by a policy or dropped for good;
after every arrival, how many GPUs are left unallocated and how fragmented the cluster is.

Nodes have CPU (milli), memory (MiB) and up to eight GPUs of 1,000 milli each. A pod asks for
CPU, memory and either a share of one GPU (`gpu_milli` < 1,000 on one GPU) or whole GPUs. A node
is feasible when what is left of its CPU and memory holds the pod and its GPUs do (a share: one
GPU with that much free; k whole GPUs: k wholly free GPUs), with under 1,001 pods on it. The
policy scores every feasible node (an integer, 0-100); the highest wins and ties go to a fixed
node priority. `fill_policies.py` holds the policies.

Fragmentation is FGD's: a node's expected fragmentation against the typical-pod distribution
(`typical_pods`) is, for each typical pod weighted by its frequency, the GPU milli it could not
use there: all that is free, unless the node could host it, then the free milli of the GPUs too
small for it.

GPU models, as the artefact honours them: a pod may name the models it runs on (`gpu_spec`,
`A|B`); a GPU pod that names any runs only on a node of one of them (a node with no model takes
none of it). It is filtered so, scored only there, and a typical pod is a (CPU, GPU milli, GPU
count, models) spec: on a node it cannot use, all the node's free GPU milli is a fragment to it.
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from twin.errors import TraceError

WHOLE = 1000  # milli-GPU in a GPU
MAX_GPUS = 8  # per node
MAX_PODS = 1001  # per node
TYPICAL_SHARE = 0.95  # typical pods cover this share of all pods


@dataclass(frozen=True)
class Pod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # per GPU
    gpu_spec: str = ""  # the GPU models it may run on ('A|B'), where the pod list names any

    @property
    def models(self) -> str:
        """The GPU models it is held to, as the artefact reads them: a GPU pod's `gpu_spec`
        without empty names; '' for any model (and for a pod without GPUs)."""
        if not (self.num_gpu and self.gpu_milli > 0):
            return ""
        return "|".join(m for m in self.gpu_spec.split("|") if m)

    @property
    def gpu_request_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    @property
    def share(self) -> bool:
        """A share of one GPU (less than all of it)."""
        return self.num_gpu == 1 and self.gpu_milli < WHOLE

    @property
    def kind(self) -> int:
        """Its kind of GPU request: 0 a share of one GPU, k for k whole GPUs."""
        return 0 if self.share else min(self.num_gpu, MAX_GPUS)

    @property
    def spec(self) -> tuple[int, int, int, str]:
        return self.cpu_milli, self.gpu_milli, self.num_gpu, self.models


@dataclass(frozen=True)
class Typical:
    """The typical pods: CPU milli, GPU milli, GPU count and GPU models ('' for any) of each, and
    its frequency."""

    cpu_milli: np.ndarray
    gpu_milli: np.ndarray
    num_gpu: np.ndarray
    freq: np.ndarray
    models: tuple[str, ...] = ()  # empty: every typical pod takes any model


Choose = Callable[[Pod, np.ndarray], tuple[np.ndarray, np.ndarray]]
"""A policy deciding: a pod and its feasible nodes (in priority order) to an integer score per
node and the GPU a share of one GPU would go on there."""


def accessible(node_model: str, models: str) -> bool:
    """Whether a node of GPU model `node_model` ('' for none) may take a pod held to `models`
    ('A|B', '' for any), as the artefact's filter decides."""
    named = [m for m in models.split("|") if m]
    return not named or (bool(node_model) and node_model in named)


class Cluster:
    """What is left on each node, as arrays over nodes (GPUs past a node's own count are 0)."""

    def __init__(self, names: list[str], cpu_milli: list[int], memory_mib: list[int],
                 gpus: list[int], models: list[str] | None = None) -> None:  # fmt: skip
        n = len(names)
        self.names = names
        self.models = models  # each node's GPU model, where the node list names them
        self._reach: dict[str, np.ndarray] = {}
        self.cpu = np.array(cpu_milli, dtype=np.int64)
        self.mem = np.array(memory_mib, dtype=np.int64)
        self.gpu = np.zeros((n, MAX_GPUS), dtype=np.int64)
        for i, k in enumerate(gpus):
            if not 0 <= k <= MAX_GPUS:
                raise TraceError(f"node {names[i]}: {k} GPUs; at most {MAX_GPUS} are modelled")
            self.gpu[i, :k] = WHOLE
        self.pods = np.zeros(n, dtype=np.int64)
        self.capacity_milli = int(sum(gpus)) * WHOLE
        self.gpu_count = np.array(gpus, dtype=np.int64)
        # GPU pods on each node by kind: column 0 shares of a GPU, column k pods of k GPUs.
        self.kinds = np.zeros((n, MAX_GPUS + 1), dtype=np.int64)
        self.frag = np.zeros(n)  # each node's expected fragmentation, as `fill` keeps it

    def feasible(self, pod: Pod) -> np.ndarray:
        ok: np.ndarray = (
            (self.cpu >= pod.cpu_milli) & (self.mem >= pod.memory_mib) & (self.pods < MAX_PODS)
        )
        if pod.share:
            ok &= (self.gpu >= pod.gpu_milli).any(axis=1)
        elif pod.num_gpu:
            ok &= (self.gpu == WHOLE).sum(axis=1) >= pod.num_gpu
        if pod.models:
            ok &= self.reach(pod.models)
        return ok

    def reach(self, models: str) -> np.ndarray:
        """Per node, whether a pod held to `models` ('' for any) may run there."""
        if models not in self._reach:
            if models and self.models is None:
                raise TraceError(f"pods name GPU models ({models!r}) but the node list does "
                                 "not (no column 'model')")  # fmt: skip
            nodes = self.models or [""] * len(self.names)
            self._reach[models] = np.array([accessible(m, models) for m in nodes], dtype=bool)
        return self._reach[models]

    def typical_reach(self, typical: Typical) -> np.ndarray | None:
        """Per node and typical pod, whether the pod may run there (None: everywhere)."""
        if not any(typical.models):
            return None
        return np.stack([self.reach(m) for m in typical.models], axis=-1)

    def place(self, node: int, pod: Pod, gpu: int) -> None:
        """`pod` on `node`: a share on GPU `gpu`, whole GPUs on its first wholly free ones."""
        self.cpu[node] -= pod.cpu_milli
        self.mem[node] -= pod.memory_mib
        self.pods[node] += 1
        if pod.num_gpu:
            self.kinds[node, pod.kind] += 1
        if pod.share:
            self.gpu[node, gpu] -= pod.gpu_milli
        elif pod.num_gpu:
            free = np.flatnonzero(self.gpu[node] == WHOLE)[: pod.num_gpu]
            self.gpu[node, free] = 0


def fragmentation(cpu: np.ndarray, gpu: np.ndarray, typical: Typical,
                  reach: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """Expected fragmentation (milli-GPU) of nodes whose CPU left is `cpu` (any shape S) and
    GPUs left `gpu` (shape S + (GPUs,)), against the typical pods; `reach` (S + (typical pods,),
    broadcast) says which typical pods may run on each node (None: all of them). Summed as the
    artefact sums it (per kind of shortfall, in the typical pods' order, then the kinds in
    order), so that the integer scores taken from it agree to the last unit."""
    total = gpu.sum(axis=-1).astype(np.float64)
    lack_both, lack_gpu, lack_cpu, xl, xr, barred = (np.zeros(total.shape) for _ in range(6))
    by_milli = {}  # per GPU milli asked: how many GPUs hold it, and the free milli of the rest
    for m in set(typical.gpu_milli.tolist()) - {0}:
        fits = gpu >= m
        by_milli[m] = (fits.sum(axis=-1), np.where(fits, 0, gpu).sum(axis=-1))
    for i, (c, m, k, f) in enumerate(zip(typical.cpu_milli, typical.gpu_milli, typical.num_gpu,
                                         typical.freq, strict=True)):  # fmt: skip
        cpu_ok = cpu >= c
        if m == 0:  # a CPU-only pod uses no GPU: every free GPU milli is a fragment to it
            xl += np.where(cpu_ok, f * total, 0.0)
            xr += np.where(cpu_ok, 0.0, f * total)
            continue
        holding, small = by_milli[m]
        hosted = holding >= k
        gpu_short = np.where(hosted, np.where(cpu_ok, f * small, 0.0),
                             np.where(cpu_ok, f * total, 0.0))  # fmt: skip
        both_short, cpu_short = ~hosted & ~cpu_ok, hosted & ~cpu_ok
        if reach is not None and typical.models[i]:  # a node of another model: all of it
            ok = reach[..., i]
            barred += np.where(ok, 0.0, f * total)
            gpu_short = np.where(ok, gpu_short, 0.0)
            both_short, cpu_short = both_short & ok, cpu_short & ok
        lack_gpu += gpu_short
        lack_both += np.where(both_short, f * total, 0.0)
        lack_cpu += np.where(cpu_short, f * total, 0.0)
    out: np.ndarray = lack_both + lack_gpu + lack_cpu + xl + xr + barred
    return out


def typical_pods(pods: list[Pod], share: float = TYPICAL_SHARE) -> Typical:
    """The most common (CPU, GPU milli, GPU count, GPU models) specs, most common first, until
    they cover `share` of the pods, their frequencies renormalised to sum to 1."""
    counts = Counter(p.spec for p in pods)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    kept, covered = [], 0
    for spec, n in ranked:
        if covered >= share * len(pods):
            break
        kept.append((spec, n))
        covered += n
    total = len(pods)
    freq = np.array([(n / total) / (covered / total) for _, n in kept])  # as the artefact does
    return Typical(
        np.array([s[0] for s, _ in kept]), np.array([s[1] for s, _ in kept]),
        np.array([s[2] for s, _ in kept]), freq, tuple(s[3] for s, _ in kept),
    )  # fmt: skip


# -- inputs -------------------------------------------------------------------------------------


def read_pods(path: Path) -> list[Pod]:
    """An openb pod list (or an arrival sequence with the same columns), in file order."""
    out = []
    for line, row in _rows(path, ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli")):
        name = row.get("pod") or row.get("name") or f"line-{line}"
        cpu, mem, count, milli = _ints(path, line, row, "cpu_milli", "memory_mib", "num_gpu",
                                       "gpu_milli")  # fmt: skip
        out.append(Pod(name, cpu, mem, count, milli, (row.get("gpu_spec") or "").strip()))
    return out


def unconstrained(pods: list[Pod]) -> list[Pod]:
    """The pods with their GPU-model constraints dropped."""
    return [replace(p, gpu_spec="") if p.gpu_spec else p for p in pods]


def constrainable(path: Path, pods: list[Pod], cluster: Path, nodes: Cluster) -> None:
    """Refuse pods that name GPU models on a node list that names none: the constraint could
    not be honoured, and the figures would be those of pods placed on any GPU (TraceError,
    naming the first such pod)."""
    named = [p for p in pods if p.models]
    if named and nodes.models is None:
        raise TraceError(
            f"{path}: {len(named):,} of {len(pods):,} pods name a GPU model (gpu_spec, the first "
            f"{named[0].name}: {named[0].gpu_spec!r}), but the node list {cluster} has no "
            "'model' column to honour it with. --ignore-gpu-spec fills anyway, the constraint "
            "dropped"
        )


def read_nodes(path: Path) -> Cluster:
    """An openb node list: `sn`, `cpu_milli`, `memory_mib`, `gpu`, and the GPU `model` where it
    has that column."""
    names, cpu, mem, gpus, models = [], [], [], [], []
    named = False
    for line, row in _rows(path, ("sn", "cpu_milli", "memory_mib", "gpu")):
        c, m, g = _ints(path, line, row, "cpu_milli", "memory_mib", "gpu")
        names.append(row["sn"])
        cpu.append(c)
        mem.append(m)
        gpus.append(g)
        named = named or "model" in row
        models.append((row.get("model") or "").strip())
    return Cluster(names, cpu, mem, gpus, models if named else None)


def read_priority(path: Path, names: list[str]) -> np.ndarray:
    """Node priority ranks (lower wins a tie) from a `node,...,tiebreak_rank` file."""
    ranks = {
        row["node"]: _ints(path, line, row, "tiebreak_rank")[0]
        for line, row in _rows(path, ("node", "tiebreak_rank"))
    }
    missing = [n for n in names if n not in ranks]
    if missing:
        raise TraceError(f"{path}: no tie-break rank for node {missing[0]!r}")
    return np.array([ranks[n] for n in names], dtype=np.int64)


def _ints(path: Path, line: int, row: dict[str, str], *columns: str) -> list[int]:
    try:
        return [int(row[c]) for c in columns]
    except (ValueError, TypeError):
        bad = next(c for c in columns if not (row[c] or "").strip().lstrip("-").isdigit())
        raise TraceError(
            f"{path}: line {line}: field {bad!r} = {row[bad]!r}: not an integer"
        ) from None


def _rows(path: Path, needed: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            absent = [c for c in needed if c not in (reader.fieldnames or [])]
            if absent:
                raise TraceError(f"{path}: no column {absent[0]!r} (columns: {reader.fieldnames})")
            yield from enumerate(reader, start=2)
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror})") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise TraceError(f"{path}: not a CSV file ({exc})") from None


# -- the experiment -------------------------------------------------------------------------------


def arrivals(pods: list[Pod], seed: int, inflate: float, capacity_milli: int) -> list[Pod]:
    """The seeded arrival order: the pods sorted by name and shuffled, then tuned to `inflate`
    times the capacity both ways, as the artefact tunes them. A list asking less gets copies
    drawn uniformly with replacement (from the name-sorted pods) until the GPU milli requested
    would pass the target (the draw that would pass is dropped; as the artefact does, a copy
    is checked by one GPU's milli and adds all of its GPUs'). A list asking more loses pods
    drawn uniformly from what is left until it asks at most the target."""
    ordered = sorted(pods, key=lambda p: p.name)
    rng = np.random.default_rng(seed)
    out = [ordered[i] for i in rng.permutation(len(ordered))]
    asked = sum(p.gpu_request_milli for p in out)
    limit = inflate * capacity_milli
    if asked >= limit:  # (asking exactly the target, it is left as it is)
        while asked > limit and out:
            asked -= out.pop(int(rng.integers(len(out)))).gpu_request_milli
        return out
    while True:
        pod = ordered[int(rng.integers(len(ordered)))]
        if asked + (pod.gpu_milli if pod.num_gpu else 0) > limit:
            return out
        out.append(pod)
        asked += pod.gpu_request_milli


@dataclass
class Curve:
    """Per arrival: GPU milli requested so far, allocated so far, and fragmentation (milli)."""

    requested: np.ndarray
    allocated: np.ndarray
    frag: np.ndarray
    capacity_milli: int

    def binned(self) -> dict[int, tuple[float, float]]:
        """By arrived % (rounded, half to even): mean unallocated GPU % and fragmentation %."""
        arrived = np.rint(self.requested * 100 / self.capacity_milli).astype(int)
        unalloc = 100 - self.allocated * 100 / self.capacity_milli
        frag = self.frag * 100 / self.capacity_milli
        out = {}
        for pct in np.unique(arrived):
            at = arrived == pct
            out[int(pct)] = (float(unalloc[at].mean()), float(frag[at].mean()))
        return out


def fill(cluster: Cluster, sequence: list[Pod], choose: Choose, typical: Typical, *,
         priority: np.ndarray) -> Curve:  # fmt: skip
    """Play `sequence` on `cluster`, each pod placed where `choose` scores best (a policy of
    `fill_policies`); the curve after every arrival."""
    n = len(sequence)
    requested, allocated, frags = (np.zeros(n) for _ in range(3))
    node_frag = cluster.frag
    reach = cluster.typical_reach(typical)
    node_frag[:] = fragmentation(cluster.cpu, cluster.gpu, typical, reach)
    asked = placed = 0
    order = np.argsort(priority, kind="stable")  # nodes by priority: the first max wins a tie
    for i, pod in enumerate(sequence):
        asked += pod.gpu_request_milli
        ok = cluster.feasible(pod)
        if ok.any():
            candidates = order[ok[order]]
            scores, gpus = choose(pod, candidates)
            best = int(np.argmax(scores))  # the first of the highest, in priority order
            node = int(candidates[best])
            cluster.place(node, pod, int(gpus[best]))
            placed += pod.gpu_request_milli
            node_frag[node] = fragmentation(cluster.cpu[node], cluster.gpu[node], typical,
                                            None if reach is None else reach[node])  # fmt: skip
        requested[i], allocated[i], frags[i] = asked, placed, node_frag.sum()
    return Curve(requested, allocated, frags, cluster.capacity_milli)


def sigmoid(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = 1.0 / (1.0 + np.exp(-x))
    return out
