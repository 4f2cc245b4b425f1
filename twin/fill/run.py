"""`twin fill`'s experiment over policies and seeds: each (policy, seed) run in its own process,
its curve binned by arrived %, then the median over seeds per policy and bin; written as
`fill.csv` (one row per policy, seed and bin) and drawn as `fill.svg`."""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from twin.errors import ConfigError
from twin.fill import policies as fill_policies
from twin.fill.fill import (
    Pod,
    Typical,
    arrivals,
    constrainable,
    fill,
    read_nodes,
    read_pods,
    read_priority,
    typical_pods,
    unconstrained,
)
from twin.fill.go_rand import artefact_draws
from twin.fill.go_rand import seeds as shipped_seeds
from twin.processes import as_finished, quiet_pool, stopping

FILL_CSV, FILL_SVG = "fill.csv", "fill.svg"
COLUMNS = ("policy", "seed", "arrived_pct", "unallocated_gpu_pct", "frag_pct")
SHOWN_PCT = (90, 95, 100, 110, 130)


@dataclass(frozen=True)
class FillSpec:
    """What one experiment plays: pods and nodes, and optionally the exact arrival order and
    node priority (else a seeded shuffle and inflation, and a seeded node priority)."""

    trace: Path
    cluster: Path
    inflate: float = 1.3
    sequence: Path | None = None
    node_priority: Path | None = None
    ignore_gpu_spec: bool = False  # drop the pods' GPU-model constraints (else honoured)
    draws: Literal["twin", "artefact"] = "twin"  # who draws the seeded order and priority


Row = tuple[str, int, int, float, float]


def run_one(spec: FillSpec, policy: str, seed: int) -> list[Row]:
    """One policy on one seed: its binned curve as rows."""
    pods = _pods(spec, spec.trace)
    typical: Typical = typical_pods(pods)
    cluster = read_nodes(spec.cluster)
    if spec.draws == "artefact":
        sequence, priority = _artefact_draws(pods, cluster.names, seed, spec.inflate,
                                             cluster.capacity_milli)  # fmt: skip
    else:
        sequence = (
            _pods(spec, spec.sequence)
            if spec.sequence is not None
            else arrivals(pods, seed, spec.inflate, cluster.capacity_milli)
        )
        priority = (
            read_priority(spec.node_priority, cluster.names)
            if spec.node_priority is not None
            else np.random.default_rng([seed, 1]).permutation(len(cluster.names))
        )
    choose = fill_policies.policy(policy, cluster, typical, seed)
    curve = fill(cluster, sequence, choose, typical, priority=priority)
    return [(policy, seed, pct, round(u, 4), round(f, 4)) for pct, (u, f) in
            curve.binned().items()]  # fmt: skip


def _artefact_draws(pods: list[Pod], nodes: list[str], seed: int, inflate: float,
                    capacity_milli: int) -> tuple[list[Pod], np.ndarray]:  # fmt: skip
    """The arrival order and node priority the artefact's Go simulator draws for `seed`."""
    ordered = sorted(pods, key=lambda p: p.name)
    requests = [(p.num_gpu, p.gpu_milli if p.num_gpu else 0) for p in ordered]
    order, ranks = artefact_draws(requests, len(nodes), seed, inflate, capacity_milli)
    rank_of = dict(zip(sorted(nodes), ranks, strict=True))
    return [ordered[i] for i in order], np.array([rank_of[n] for n in nodes], dtype=np.int64)


def _pods(spec: FillSpec, path: Path) -> list[Pod]:
    pods = read_pods(path)
    return unconstrained(pods) if spec.ignore_gpu_spec else pods


def run(spec: FillSpec, policies: Sequence[str], seeds: Sequence[int], workers: int,
        done: Callable[[int], None] = lambda _: None) -> list[Row]:  # fmt: skip
    """Every (policy, seed), in `workers` processes; rows in policy, seed, bin order (`done` is
    told how many runs have finished, as each does). TraceError
    first if the pods name GPU models the node list cannot honour, unless the spec says to drop
    the constraint; ConfigError first for a seed the artefact's draws are not shipped for."""
    if spec.draws == "artefact":
        have = shipped_seeds()
        missing = sorted(set(seeds) - set(have))
        if missing:
            raise ConfigError(f"--draws artefact: no draws for seed {missing[0]}; the "
                              f"artefact's seeds are {min(have)}-{max(have)}")  # fmt: skip
    if not spec.ignore_gpu_spec:
        nodes = read_nodes(spec.cluster)
        for path in (spec.trace, spec.sequence):
            if path is not None:
                constrainable(path, read_pods(path), spec.cluster, nodes)
    jobs = [(policy, seed) for policy in policies for seed in seeds]
    if workers <= 1 or len(jobs) == 1:
        results = []
        for p, s in jobs:
            results.append(run_one(spec, p, s))
            done(len(results))
    else:
        with stopping(quiet_pool(min(workers, len(jobs)))) as pool:
            futures = [pool.submit(run_one, spec, p, s) for p, s in jobs]
            for finished, _ in enumerate(as_finished(futures), start=1):
                done(finished)
            results = [f.result() for f in futures]
    return [row for rows in results for row in rows]


def medians(rows: list[Row]) -> dict[str, dict[int, tuple[float, float]]]:
    """Per policy and arrived %: the median over seeds of unallocated GPU % and frag %."""
    by: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for policy, _, pct, unalloc, frag in rows:
        by.setdefault((policy, pct), []).append((unalloc, frag))
    out: dict[str, dict[int, tuple[float, float]]] = {}
    for (policy, pct), values in by.items():
        a = np.array(values)
        out.setdefault(policy, {})[pct] = (float(np.median(a[:, 0])), float(np.median(a[:, 1])))
    return out


def write(rows: list[Row], out: Path) -> None:
    """`fill.csv` and `fill.svg` under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / FILL_CSV).open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        writer.writerows(rows)
    draw(medians(rows), out / FILL_SVG)


def draw(curves: dict[str, dict[int, tuple[float, float]]], path: Path) -> None:
    """Unallocated GPU % and fragmentation % against arrived %, one line per policy (the
    paper's Fig. 9 and Fig. 7)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.4))
    left, right = fig.subplots(1, 2)
    for policy, bins in curves.items():
        pct = sorted(bins)
        left.plot(pct, [bins[p][0] for p in pct], label=policy)
        right.plot(pct, [bins[p][1] for p in pct], label=policy)
    left.set(xlabel="arrived workload (% of GPU capacity)", ylabel="unallocated GPUs (%)")
    right.set(xlabel="arrived workload (% of GPU capacity)", ylabel="fragmented GPUs (%)")
    left.set_xlim(80, max((max(b) for b in curves.values()), default=130))
    left.set_ylim(0, 20)
    right.set_xlim(0, max((max(b) for b in curves.values()), default=130))
    left.legend(fontsize=7)
    fig.suptitle("median over seeds", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, format="svg", metadata={"Date": None})


def default_workers() -> int:
    return os.cpu_count() or 1
