"""How a round-based scheduler shares its workers (Gavel's policies): each policy turns the
active jobs into an allocation, the share of each round every job should get on each worker
type, recomputed when jobs come or go. The round loop (`rounds`) then runs, in each round, the
jobs furthest below their share.

- `Fifo`: jobs in arrival order each hold one worker type until they finish. Gavel's FIFO
  draws a type at random, but places the job on the last type in name order that still has a
  free worker and takes the drawn one off the list of free types when that placement fills a
  type; the twin does the same, with the same draws, so that it reproduces Gavel's runs.
- `MaxMinFairness`: the linear programme of Gavel's max-min fairness (least attained service):
  maximise the least priority-weighted share of any job, counting a job of n GPUs n times,
  with every worker type's capacity and each job's whole round as limits. Its solutions are
  not unique (every type counts the same); Gavel takes the interior point its solver (ECOS)
  ends at, which spreads each job over the types, and so does the twin, with the same solver
  from the data cvxpy hands it (another interior-point code, or ECOS on another layout of the
  same programme, ends at another point of the optimal face: about 1% on the average JCT).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import ecos
import numpy as np
from scipy import sparse

from twin.errors import TwinError

Allocation = dict[int, dict[str, float]]
"""Share of each round by job id, then worker type."""


@dataclass(frozen=True)
class PolicyJob:
    """What a policy sees of an active job."""

    job_id: int
    scale_factor: int
    priority_weight: float
    throughput: Mapping[str, float]  # steps/s by worker type


class RoundPolicy(Protocol):
    name: str
    uses_priority: bool
    """Whether a job with no share is left idle even when workers are free (FIFO)."""

    def allocate(self, jobs: Sequence[PolicyJob], workers: Mapping[str, int]) -> Allocation: ...


class Fifo:
    name = "fifo"
    uses_priority = True

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._held: dict[int, str] = {}  # job id -> the worker type it holds

    def allocate(self, jobs: Sequence[PolicyJob], workers: Mapping[str, int]) -> Allocation:
        by_id = {job.job_id: job for job in jobs}
        free = dict(workers)
        waiting = sorted(i for i in by_id if i not in self._held)
        for held_id in sorted(self._held):
            worker_type = self._held[held_id]
            if held_id in by_id:
                free[worker_type] -= by_id[held_id].scale_factor
                continue
            del self._held[held_id]  # done: its type goes to the first waiting job, if it fits
            if waiting:
                head = by_id[waiting[0]]
                if head.scale_factor <= free[worker_type] and head.throughput[worker_type] > 0:
                    self._held[waiting.pop(0)] = worker_type
                    free[worker_type] -= head.scale_factor
        free_types = sorted(t for t in free if free[t] > 0)
        while waiting and free_types:
            job = by_id[waiting.pop(0)]
            fitting = [i for i, t in enumerate(free_types) if free[t] >= job.scale_factor]
            if not fitting:
                break
            drawn = fitting[self._rng.randrange(len(fitting))]
            placed = free_types[-1]  # Gavel's placement (see the module's docstring)
            if job.throughput[placed] > 0:
                self._held[job.job_id] = placed
                free[placed] -= job.scale_factor
                if free[placed] == 0:
                    free_types.pop(drawn)
        allocation = {job.job_id: dict.fromkeys(workers, 0.0) for job in jobs}
        for job_id, worker_type in self._held.items():
            allocation[job_id][worker_type] = 1.0
        return allocation


class MaxMinFairness:
    name = "max-min-fairness"
    uses_priority = False

    def allocate(self, jobs: Sequence[PolicyJob], workers: Mapping[str, int]) -> Allocation:
        if not jobs:
            return {}
        order = sorted(jobs, key=lambda job: job.job_id)
        types = sorted(workers)
        m = len(order)
        capacity = np.array([workers[t] for t in types], dtype=float)
        # Gavel divides each job's term by its throughput under an even split of the cluster
        # (every throughput counts as 1: about 1, to the last bit as Gavel computes it).
        even = capacity / m
        even_throughput = np.sum(even / np.sum(even))
        weight = np.array([1.0 * ((1.0 / job.priority_weight) * (1.0 / even_throughput))
                           * job.scale_factor for job in order])  # fmt: skip
        shares = _max_min_lp(weight, np.array([job.scale_factor for job in order], float), capacity)
        return {job.job_id: {t: float(shares[i, j]) for j, t in enumerate(types)}
                for i, job in enumerate(order)}  # fmt: skip


def _max_min_lp(weight: np.ndarray, scale: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """max t s.t. t <= weight_i * sum_j x_ij, sum_i scale_i x_ij <= capacity_j,
    sum_j x_ij <= 1, x >= 0, solved by ECOS from the data cvxpy hands it for Gavel's
    programme: u = -t first, then x column by column; rows: the epigraph, x >= 0, the
    capacities, the rounds. Interior-point iterates depend on that layout in their last bits,
    and a round's ranking on those bits, so the layout is Gavel's. Returns x (m x n) in [0, 1]."""
    m, n = len(weight), len(capacity)
    x_cols = np.arange(m * n) + 1  # x[i, j] is column 1 + i + j * m
    job_of, type_of = x_cols - 1 - ((x_cols - 1) // m) * m, (x_cols - 1) // m
    rows = [
        (np.arange(m), np.zeros(m, dtype=np.int64), np.full(m, -1.0)),  # -u - w_i sum_j x_ij <= 0
        (job_of, x_cols, -weight[job_of]),
        (m + x_cols - 1, x_cols, np.full(m * n, -1.0)),  # -x <= 0
        (m + m * n + type_of, x_cols, scale[job_of]),  # capacity of each type
        (m + m * n + n + job_of, x_cols, np.ones(m * n)),  # a job's whole round
    ]
    r, c, v = (np.concatenate(parts) for parts in zip(*rows, strict=True))
    g = sparse.csc_matrix((v, (r, c)), shape=(m + m * n + n + m, 1 + m * n))
    h = np.concatenate([np.zeros(m + m * n), capacity, np.ones(m)])
    cost = np.zeros(1 + m * n)
    cost[0] = 1.0
    solution = ecos.solve(cost, g, h, {"l": g.shape[0], "q": [], "e": 0}, verbose=False)
    exit_flag = solution["info"]["exitFlag"]
    if exit_flag not in (0, 10):  # optimal, or optimal to reduced accuracy
        raise TwinError(f"max-min fairness: ECOS found no optimum (exit {exit_flag})")
    shares = np.asarray(solution["x"][1:], dtype=float).reshape(m, n, order="F")
    clipped: np.ndarray = np.clip(shares, 0.0, 1.0)
    return clipped
