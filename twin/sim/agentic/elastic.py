"""Action-level elastic allocation (ARL-Tangram's scheduling rule), as a pure function.

Given the queued actions in arrival order and the free units of one resource, the candidates are
the first actions that fit with one unit each (FCFS, so later turns of a trajectory never starve
earlier ones). The free units are shared among the candidates to minimise the sum of their run
times (each next unit to the action it speeds up most). Then the last candidate is dropped, its
units going to the others, for as long as that lowers the estimated sum of completion times of
the candidates and of the actions left waiting (each waiting action starts when the earliest
running or scheduled action ends, on that action's units). `depth` bounds the drops per pass.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Demand:
    """A queued action as the allocator sees it."""

    work_s: float  # on one unit
    serial: float  # Amdahl's serial fraction
    max_units: int


def run_s(d: Demand, units: int) -> float:
    """The action's run time on `units` units: work / (1 / (s + (1 - s) / m))."""
    m = min(units, d.max_units)
    return d.work_s * (d.serial + (1.0 - d.serial) / m)


def share(demands: Sequence[Demand], units: int) -> list[int]:
    """`units` (at least one each) shared among `demands` to minimise the sum of run times."""
    alloc = [1] * len(demands)
    spare = units - len(demands)
    gains = [(run_s(d, 2) - run_s(d, 1), i) for i, d in enumerate(demands) if d.max_units > 1]
    heapq.heapify(gains)
    while spare > 0 and gains:
        gain, i = heapq.heappop(gains)
        if gain >= 0:
            break
        alloc[i] += 1
        spare -= 1
        d, m = demands[i], alloc[i]
        if m < d.max_units:
            heapq.heappush(gains, (run_s(d, m + 1) - run_s(d, m), i))
    return alloc


def _objective(
    scheduled: Sequence[Demand],
    alloc: Sequence[int],
    waiting: Sequence[Demand],
    running_ends: Sequence[tuple[float, int]],
) -> float:
    """Sum of estimated completion times (from now) of scheduled and waiting actions."""
    total = 0.0
    ends = list(running_ends)
    for d, m in zip(scheduled, alloc, strict=True):
        done = run_s(d, m)
        total += done
        ends.append((done, m))
    heapq.heapify(ends)
    for d in waiting:
        if not ends:
            break
        start, m = heapq.heappop(ends)
        done = start + run_s(d, m)
        total += done
        heapq.heappush(ends, (done, m))
    return total


def allocate(
    queue: Sequence[Demand],
    free_units: int,
    running_ends: Sequence[tuple[float, int]] = (),
    depth: int = 16,
) -> list[int]:
    """Units for the first actions of `queue` (a prefix; its length says how many start now).
    `running_ends` are the running actions' (seconds left, units)."""
    n = min(len(queue), free_units)
    if n == 0:
        return []
    window = list(queue[: n + depth])
    alloc = share(window[:n], free_units)
    best = _objective(window[:n], alloc, window[n:], running_ends)
    for _ in range(depth):
        if n <= 1:
            break
        fewer = share(window[: n - 1], free_units)
        value = _objective(window[: n - 1], fewer, window[n - 1 :], running_ends)
        if value >= best:
            break
        n, alloc, best = n - 1, fewer, value
    return alloc
