"""The planner's program: the most welfare (value of finished work, less GPU rent and SLA
penalties, summed over tenants) any schedule of a realised workload could reach.

Time is cut into slots of `slot_s` seconds (and each slot into processing steps). Per slot and
pool the planner holds N GPUs (billed, counted against the pool's size), new ones lose their
provisioning delay before they serve, and each job is processed for up to one step's time per
step on at most its GPUs. By default a job earns its value only once all of it is done (a binary
per job: a mixed-integer program, solved by HiGHS to within `MIP_REL_GAP`, its proved bound
reported); `LOOSE` is the linear program in which a fraction of a job earns that fraction.

`pooled`: GPUs change hands between tenants at once and money moves freely (every budget in one
purse): what a perfect market could reach. `separable`: each tenant holds, provisions and pays for
its own GPUs: what the same planner reaches without any trade. Their difference is the trade
headroom.

What it relaxes (so no schedule the twin can play beats it) is `relaxes(tightness)`:
- jobs are divisible: any part of a job may run in any step, on any pool that can run it;
- a job's processing within a step counts from the step's start (or its arrival), so its wait is
  charged by its mean busy time less half its run time, which never exceeds its true wait; a job
  that never runs waits until the end;
- GPUs are fractional (unless `integer_gpus`), requests are taken at every slot's start, releases
  are instant;
- provisioning takes `delay_s` per pool (a low quantile of its distribution);
- budgets bind on rent only (auction prices and trade money are transfers, not costs).
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from twin.bound.workload import RealisedJob
from twin.errors import BoundError
from twin.schema.scenario import ClusterScenario, PoolConfig

Holdings = Literal["pooled", "separable"]
HOLDINGS: tuple[Holdings, ...] = ("pooled", "separable")


@dataclass(frozen=True, slots=True)
class Plan:
    """The program's optimum: welfare and its parts (US dollars), and the GPUs held per slot
    (by holder: a tenant's name, or `pool` when holdings are pooled) and pool."""

    holdings: Holdings
    welfare_usd: float
    value_usd: float
    rent_usd: float
    sla_usd: float
    held_gpus: dict[str, dict[str, list[float]]]
    solve_s: float


@dataclass
class _Program:
    """Columns (variables, with cost and bounds) and rows (A x <= b) as they are added."""

    cost: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    integral: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    cols: list[int] = field(default_factory=list)
    vals: list[float] = field(default_factory=list)
    rhs: list[float] = field(default_factory=list)

    def column(self, cost: float, upper: float = math.inf, *, integral: bool = False) -> int:
        self.cost.append(cost)
        self.upper.append(upper)
        self.integral.append(int(integral))
        return len(self.cost) - 1

    def row(self, terms: Sequence[tuple[int, float]], rhs: float) -> None:
        r = len(self.rhs)
        for col, val in terms:
            self.rows.append(r)
            self.cols.append(col)
            self.vals.append(val)
        self.rhs.append(rhs)


def lost_s(request_s: float, delay_s: float, slot_start_s: float, slot_s: float) -> float:
    """Seconds of the slot starting at `slot_start_s` a GPU requested at `request_s` spends
    still provisioning."""
    return max(0.0, min(request_s + delay_s, slot_start_s + slot_s) - max(request_s, slot_start_s))


@dataclass(frozen=True, slots=True)
class Tightness:
    """How closely the program follows a schedule the twin can play. Every setting keeps it a
    bound; the tighter ones cost solver time.

    `steps_per_slot`: each slot's processing is counted in this many steps, so jobs that share
    GPUs within a slot queue behind each other at the step's grain. `whole_jobs`: a job earns its
    value only when all of it is done (a binary per job). `integer_gpus`: GPUs are held and
    requested in whole numbers."""

    steps_per_slot: int = 1
    whole_jobs: bool = True
    integer_gpus: bool = False


TIGHT = Tightness()
"""The default: whole jobs, on fractional GPUs, a step a slot (each solves in about a second on
the negotiation scenarios)."""

LOOSE = Tightness(steps_per_slot=1, whole_jobs=False, integer_gpus=False)
"""The linear program alone: fractional jobs earn fractional value on fractional GPUs."""


def relaxes(tightness: Tightness) -> tuple[str, ...]:
    """What the program relaxes at `tightness`, so that no schedule the twin can play beats it."""
    value = ("but earns its value only once all of it is done" if tightness.whole_jobs
             else "and earns that fraction of its value")  # fmt: skip
    step = ("each slot's start" if tightness.steps_per_slot <= 1
            else f"the start of each of a slot's {tightness.steps_per_slot} steps")  # fmt: skip
    gpus = "whole" if tightness.integer_gpus else "fractional"
    return (
        "jobs are divisible: any part may run in any slot on any pool that can run it, on at "
        f"most its GPUs, {value}",
        f"a job's wait is charged by its mean busy time (processing counted from {step} or its "
        "arrival) less half its run time; a job that can finish but does not waits to the end",
        f"GPUs are {gpus}, requested at any slot's start and released at once",
        "provisioning takes each pool's delay at its 1st percentile",
        "budgets bind on rent only (auction prices and trade money are transfers)",
        "a shared pool is its GPUs' time, with no nodes, CPUs or scheduling cycles",
    )


def solve(
    scenario: ClusterScenario,
    jobs: Sequence[RealisedJob],
    holdings: Holdings,
    *,
    slot_s: float,
    delay_s: Sequence[float],
    tightness: Tightness = TIGHT,
    time_limit_s: float = 20.0,
) -> Plan:
    """The program's optimum for `holdings` (or, where the solver stops at its time limit, the
    best bound it proved); BoundError if the solver cannot reach either."""
    built = _Builder(scenario, holdings, slot_s, delay_s, tightness)
    built.hold()
    for job in jobs:
        built.job(job)
    built.close()
    return built.solved(time_limit_s)


class _Builder:
    """The program for one scenario and one kind of holdings, built part by part."""

    def __init__(self, scenario: ClusterScenario, holdings: Holdings, slot_s: float,
                 delay_s: Sequence[float], tightness: Tightness) -> None:  # fmt: skip
        horizon_s = scenario.horizon_s
        if horizon_s is None:
            raise BoundError("no_horizon", f"scenario {scenario.name!r} has no horizon_s")
        self.scenario, self.holdings, self.delay_s = scenario, holdings, delay_s
        self.tightness = tightness
        self.horizon_s = horizon_s
        slots = max(1, math.ceil(horizon_s / slot_s))
        self.starts = [k * slot_s for k in range(slots)]
        self.lengths = [min(slot_s, horizon_s - s) for s in self.starts]
        # Processing steps: each slot cut in `steps_per_slot`, each step in its slot.
        step_s = slot_s / max(1, tightness.steps_per_slot)
        self.step_starts: list[float] = []
        self.step_lengths: list[float] = []
        self.step_slot: list[int] = []
        for k, (start_s, length_s) in enumerate(zip(self.starts, self.lengths, strict=True)):
            at_s = start_s
            while at_s < start_s + length_s - 1e-9:
                self.step_starts.append(at_s)
                self.step_lengths.append(min(step_s, start_s + length_s - at_s))
                self.step_slot.append(k)
                at_s += step_s
        tenants = scenario.tenants
        self.holders = [t.name for t in tenants] if holdings == "separable" else ["pool"]
        self.prog = _Program()
        self.held: dict[tuple[int, int], list[int]] = {}  # (holder, pool) -> N per slot
        # (holder, pool, step) -> GPU-seconds used less those served (<= 0)
        self.capacity: dict[tuple[int, int, int], list[tuple[int, float]]] = {}
        self.rent: dict[int, list[tuple[int, float]]] = {}  # holder -> $ per unit of a column
        self.value: list[tuple[int, float]] = []
        self.waits: list[tuple[int, float]] = []
        self.fixed_sla_usd = 0.0  # of the jobs that can run nowhere
        self.shared: dict[tuple[int, int], list[tuple[int, float]]] = {}  # (pool, step) -> use

    def hold(self) -> None:
        """Each holder's GPUs per pool and slot: new ones lose their provisioning delay, all
        are billed, and the pool's size binds every holder's together."""
        pools, prog = self.scenario.pools, self.prog
        for h in range(len(self.holders)):
            for p, pool in enumerate(pools):
                if not pool.shared:
                    self._holding(h, p, pool)
        for p, pool in enumerate(pools):
            if pool.shared:  # the cluster's own GPUs: every tenant's jobs use them, rent-free
                for s in range(len(self.step_starts)):
                    self.shared[p, s] = []
        for p in range(len(pools)):
            for k in range(len(self.starts)):
                cols = [(self.held[h, p][k], 1.0) for h in range(len(self.holders))
                        if (h, p) in self.held]  # fmt: skip
                if len(cols) > 1:
                    prog.row(cols, float(pools[p].max_gpus))

    def _holding(self, h: int, p: int, pool: PoolConfig) -> None:
        prog, starts, lengths = self.prog, self.starts, self.lengths
        tenants = self.scenario.tenants
        price_s = pool.price_usd_per_gpu_h / 3600.0
        holders = tenants if self.holdings == "pooled" else [tenants[h]]
        initial = sum(t.initial_gpus.get(pool.name, 0) for t in holders)
        whole = self.tightness.integer_gpus
        n = [prog.column(0.0, float(pool.max_gpus), integral=whole) for _ in starts]
        q = [prog.column(0.0, integral=whole) for _ in starts]  # requested at each slot's start
        self.held[h, p] = n
        delay_s = self.delay_s[p]
        for k in range(len(starts)):
            before = [] if k == 0 else [(n[k - 1], -1.0)]
            prog.row([(n[k], 1.0), *before, (q[k], -1.0)], float(initial) if k == 0 else 0.0)
            billed = [(n[k], lengths[k])]
            if pool.billing == "from_ready":
                billed += [
                    (q[j], -v) for j in range(k + 1)
                    if (v := lost_s(starts[j], delay_s, starts[k], lengths[k])) > 0
                ]  # fmt: skip
            self.rent.setdefault(h, []).extend((c, v * price_s) for c, v in billed)
        for s, (start_s, length_s) in enumerate(zip(self.step_starts, self.step_lengths,
                                                    strict=True)):  # fmt: skip
            k = self.step_slot[s]
            lost = [(q[j], v) for j in range(k + 1)
                    if (v := lost_s(starts[j], delay_s, start_s, length_s)) > 0]  # fmt: skip
            self.capacity[h, p, s] = [(n[k], -length_s), *lost]

    def job(self, job: RealisedJob) -> None:
        """A job's processing per step and pool, its value and its wait."""
        prog = self.prog
        h = job.tenant if self.holdings == "separable" else 0
        done: list[tuple[int, float]] = []
        busy: list[tuple[int, float]] = []  # (column, mean-busy-time weight)
        for s, start_s in enumerate(self.step_starts):
            end_s = start_s + self.step_lengths[s]
            open_s = min(self.step_lengths[s], max(0.0, end_s - job.arrival_s))
            if open_s <= 0:
                continue
            at_s = max(start_s, job.arrival_s)
            in_step = []
            for p, run_s in enumerate(job.run_s):
                shared = self.shared.get((p, s))
                if not math.isfinite(run_s) or ((h, p) not in self.held and shared is None):
                    continue
                y = prog.column(0.0, open_s)  # seconds of the job's run in this step
                in_step.append((y, 1.0))
                (shared if shared is not None else self.capacity[h, p, s]).append((y, job.gpus))
                done.append((y, 1.0 / run_s))
                busy.append((y, (at_s - job.arrival_s - run_s / 2) / run_s))
            if len(in_step) > 1:
                prog.row(in_step, open_s)
        if not done:  # it can run nowhere: it waits to the end
            self.fixed_sla_usd += job.sla_usd_per_s * (self.horizon_s - job.arrival_s)
            return
        prog.row(done, 1.0)
        if self.tightness.whole_jobs:  # its value only once all of it is done
            finished = prog.column(0.0, 1.0, integral=True)
            prog.row([(finished, 1.0), *((c, -v) for c, v in done)], 0.0)
            self.value.append((finished, job.value_usd))
        else:
            self.value += [(c, v * job.value_usd) for c, v in done]
        if job.sla_usd_per_s > 0:
            w = prog.column(0.0)
            self.waits.append((w, job.sla_usd_per_s))
            prog.row([*busy, (w, -1.0)], 0.0)
            waits_s = self.horizon_s - job.arrival_s
            if max(r for r in job.run_s if math.isfinite(r)) <= waits_s:
                # It could finish from its arrival on: what is not done waited to the end.
                prog.row([*((c, -waits_s * v) for c, v in done), (w, -1.0)], -waits_s)

    def close(self) -> None:
        """The capacity rows, the budgets, and the objective (welfare, negated)."""
        prog = self.prog
        for terms in self.capacity.values():
            prog.row(terms, 0.0)
        for (p, s), used in self.shared.items():
            if used:
                prog.row(used, self.scenario.pools[p].max_gpus * self.step_lengths[s])
        budgets = [t.budget_usd for t in self.scenario.tenants]
        if self.holdings == "separable":
            for h, terms in self.rent.items():
                budget = budgets[h]
                if budget is not None:
                    prog.row(terms, float(budget))
        elif all(b is not None for b in budgets) and self.rent:
            prog.row(self.rent[0], float(sum(b for b in budgets if b is not None)))
        for c, v in self.value:
            prog.cost[c] -= v
        for terms in self.rent.values():
            for c, v in terms:
                prog.cost[c] += v
        for c, v in self.waits:
            prog.cost[c] += v

    def solved(self, time_limit_s: float) -> Plan:
        """Solve with HiGHS and read the optimum back (where the solver stopped at its time
        limit, its best schedule's parts and the best bound it proved as the welfare)."""
        prog = self.prog
        a = coo_array((prog.vals, (prog.rows, prog.cols)), shape=(len(prog.rhs), len(prog.cost)))
        started = time.perf_counter()
        with _quiet_native_output():
            result = milp(
                np.array(prog.cost),
                constraints=LinearConstraint(a.tocsr(), -np.inf, np.array(prog.rhs)),
                bounds=Bounds(np.zeros(len(prog.cost)), np.array(prog.upper)),
                integrality=np.array(prog.integral),
                options={"time_limit": time_limit_s, "mip_rel_gap": MIP_REL_GAP},
            )  # fmt: skip
        solve_s = time.perf_counter() - started
        # A MILP stopped at its time limit still proved a bound; a linear program did not.
        stopped = result.status == 1 and result.x is not None and any(prog.integral)
        if result.status != 0 and not stopped:
            reason = SOLVER_STATUS.get(result.status, "solver_error")
            raise BoundError(reason, f"{self.holdings} holdings: {result.message}")
        x = result.x

        def total(terms: Sequence[tuple[int, float]]) -> float:
            return float(sum(x[c] * v for c, v in terms))

        value = total(self.value)
        rent = sum(total(terms) for terms in self.rent.values())
        sla = total(self.waits) + self.fixed_sla_usd
        # The best welfare proved: a linear program's optimum, or the bound the MILP's solver
        # proved when it stopped (within its gap, or at its time limit).
        proved = value - rent - sla
        if any(prog.integral):
            proved = max(proved, -float(result.mip_dual_bound) - self.fixed_sla_usd)
        gpus: dict[str, dict[str, list[float]]] = {}
        for (h, p), cols in self.held.items():
            gpus.setdefault(self.holders[h], {})[self.scenario.pools[p].name] = [
                round(float(x[c]), 6) for c in cols
            ]
        return Plan(self.holdings, proved, value, rent, sla, gpus, solve_s)


MIP_REL_GAP = 0.01
"""The solver stops once its schedule is within this share of the best bound it can prove; the
bound reported is that proved bound (valid), not the schedule's welfare."""


@contextlib.contextmanager
def _quiet_native_output() -> Iterator[None]:
    """Silence what the solver's native code prints past its own output switch (HiGHS's MIP
    heuristics write a debug line to the process's stdout): fds 1 and 2 go to /dev/null while it
    runs, for the whole process, so the bound is solved where nothing else writes meanwhile (a
    command, or an arena worker process)."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(fd) for fd in (1, 2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in (1, 2):
            os.dup2(null, fd)
        yield
    finally:
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)
        os.close(null)


SOLVER_STATUS = {1: "time_limit", 2: "infeasible", 3: "unbounded", 4: "numerical_difficulties"}
"""scipy's milp status codes, by what they mean for a bound."""
