"""The kernel's API: evaluate a batch of plans, or one plan, with exactly the same numbers.

Both run the formula compiled by numba (`twin.kernel.jit`); `engine="numpy"` runs the same
formula on numpy arrays instead, the reference the compiled code is tested against bit for bit.
"""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np

from twin.kernel import formula, jit, settle
from twin.kernel.blocks import verdict_block
from twin.kernel.compile import NumpyOps, fixing, scalar
from twin.kernel.plans import INFEASIBLE, LIMITS, PRECISIONS, Plan, PlanBatch, Reason
from twin.kernel.tables import Tables, default_tables

CHUNK = 8192  # rows per numpy pass: big enough to amortise calls, small enough for cache
SMALL = 32  # at most this many rows settle their round in Python numbers instead of numpy
INF = math.inf

FLOATS = (
    "mem_bytes",
    "step_s",
    "tokens_per_s",
    "power_w",
    "throttle",
    "stability",
    "usd_per_h",
    "job_s",
    "score",
    "credit",
)
"""The rows of a `Verdicts`' float block."""
SCORE, CREDIT = FLOATS.index("score"), FLOATS.index("credit")
_N_FLOATS = len(FLOATS)
COLUMNS = (*FLOATS[:CREDIT], "reasons")
"""The formula's outputs, in its order."""
NOT_RUNNABLE = int(INFEASIBLE | Reason.DEGENERATE_ZERO_GPUS)

_NP = NumpyOps()
floor_hoarding_one = scalar(settle.floor_hoarding)
"""`settle.floor_hoarding` on Python numbers (its first argument, the ops, is ignored)."""
credit_one = scalar(settle.credit)
"""`settle.credit` on Python numbers (its first argument, the ops, is ignored)."""


@dataclass(frozen=True)
class ClusterContext:
    """The decision round around the plans: capacity and what each tenant demands (GPUs)."""

    capacity_gpus: float = math.inf
    demand_gpus: tuple[float, ...] = ()
    hoard_slack: float = 0.25
    overcommit_penalty: float = 1.0


ALONE = ClusterContext()


class Shares:
    """Per-tenant totals of one round, indexed by tenant id: GPUs, utility, how many other
    tenants are short of their demand; the fair share and all GPUs. (Given as lists, a total
    becomes an array when first read: a round of one plan rarely reads them.)"""

    __slots__ = ("_gpus", "_starving", "_utility", "fair_gpus", "total_gpus")

    def __init__(self, tenant_gpus: np.ndarray | list[float],
                 tenant_utility: np.ndarray | list[float],
                 others_starving: np.ndarray | list[int], fair_gpus: float,
                 total_gpus: float) -> None:  # fmt: skip
        self._gpus, self._utility, self._starving = tenant_gpus, tenant_utility, others_starving
        self.fair_gpus, self.total_gpus = fair_gpus, total_gpus

    @property
    def tenant_gpus(self) -> np.ndarray:
        if not isinstance(self._gpus, np.ndarray):
            self._gpus = np.array(self._gpus, dtype=np.float64)
        return self._gpus

    @property
    def tenant_utility(self) -> np.ndarray:
        if not isinstance(self._utility, np.ndarray):
            self._utility = np.array(self._utility, dtype=np.float64)
        return self._utility

    @property
    def others_starving(self) -> np.ndarray:
        if not isinstance(self._starving, np.ndarray):
            self._starving = np.array(self._starving, dtype=np.int64)
        return self._starving


class Verdict(NamedTuple):
    """One plan's evaluation; the fields of `Verdicts`, as Python numbers."""

    mem_bytes: float
    step_s: float
    tokens_per_s: float
    power_w: float
    throttle: float
    stability: float
    usd_per_h: float
    job_s: float
    score: float
    reasons: int
    credit: float

    @property
    def job_usd(self) -> float:
        return self.usd_per_h * self.job_s / 3600.0

    @property
    def feasible(self) -> bool:
        return self.reasons & NOT_RUNNABLE == 0


class Verdicts:
    """Evaluations of a batch, one array per field (rows of one float block, and the reasons).

    mem_bytes: memory needed per GPU; step_s: one optimizer step (training) or decode step
    (serving), inf when a precision is unsupported; tokens_per_s: the whole plan; power_w and
    throttle: per GPU; stability: product over groups (< 0.5 diverges); usd_per_h: the whole
    plan; job_s: time for the plan's `tokens`; score: the 0.01 floor for a plan that cannot run
    or a degenerate strategy, else stability x tokens-per-dollar quality in [0.01, 1); reasons:
    `Reason` bits; credit: the tenant's difference reward. `shares`: the round's tenant totals.
    """

    __slots__ = ("floats", "reasons", "shares")

    def __init__(self, floats: np.ndarray, reasons: np.ndarray, shares: Shares) -> None:
        self.floats = floats  # the `FLOATS` rows, a column per plan
        self.reasons = reasons
        self.shares = shares

    def __len__(self) -> int:
        return len(self.reasons)

    def __repr__(self) -> str:
        return f"Verdicts({len(self)} plans)"

    @property
    def mem_bytes(self) -> np.ndarray:
        row: np.ndarray = self.floats[0]
        return row

    @property
    def step_s(self) -> np.ndarray:
        row: np.ndarray = self.floats[1]
        return row

    @property
    def tokens_per_s(self) -> np.ndarray:
        row: np.ndarray = self.floats[2]
        return row

    @property
    def power_w(self) -> np.ndarray:
        row: np.ndarray = self.floats[3]
        return row

    @property
    def throttle(self) -> np.ndarray:
        row: np.ndarray = self.floats[4]
        return row

    @property
    def stability(self) -> np.ndarray:
        row: np.ndarray = self.floats[5]
        return row

    @property
    def usd_per_h(self) -> np.ndarray:
        row: np.ndarray = self.floats[6]
        return row

    @property
    def job_s(self) -> np.ndarray:
        row: np.ndarray = self.floats[7]
        return row

    @property
    def score(self) -> np.ndarray:
        row: np.ndarray = self.floats[8]
        return row

    @property
    def credit(self) -> np.ndarray:
        row: np.ndarray = self.floats[9]
        return row

    @property
    def job_usd(self) -> np.ndarray:
        out: np.ndarray = self.usd_per_h * self.job_s / 3600.0
        return out

    @property
    def feasible(self) -> np.ndarray:
        out: np.ndarray = self.reasons & NOT_RUNNABLE == 0
        return out

    def row(self, i: int) -> Verdict:
        f = self.floats[:, i].tolist()
        return Verdict(f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[SCORE],
                       int(self.reasons[i]), f[CREDIT])  # fmt: skip


def evaluate(
    batch: PlanBatch,
    ctx: ClusterContext = ALONE,
    tables: Tables | None = None,
    *,
    engine: Literal["compiled", "numpy"] = "compiled",
) -> Verdicts:
    """Evaluate B plans: the compiled formula over the rows (or numpy's vectorised pass)."""
    t = tables or default_tables()
    if engine == "numpy":
        _check_shapes(batch)
        _refuse(batch, t)
        floats, reasons = _assess_numpy(batch, t)
        return _settle(floats, reasons, batch, ctx, t)
    code, packed, ranges = _compiled(t)
    size = len(batch)
    floats, reasons = verdict_block(size, _N_FLOATS)
    columns: tuple[np.ndarray, ...] = _GET_COLUMNS(batch)
    # The compiled loop checks every length, and every value as it reads it (it reads no
    # table with a bad code); numba's dispatch checks each column's type and layout. It fills
    # the float block's rows but the credit.
    try:
        verdict = code.batch(*packed, *columns, *ranges, floats, reasons)
    except TypeError:  # a column of another type or layout: check, then convert
        _check_shapes(batch)
        _refuse(batch, t)
        columns = _columns(batch)
        verdict = code.batch(*packed, *columns, *ranges, floats, reasons)
    if verdict != jit.IN_RANGE:
        _check_shapes(batch)
        _refuse(batch, t)
        raise AssertionError("the compiled checks and the plan check disagree")
    if size <= SMALL:
        tenants = _few_tenants(batch)
        if tenants is not None:
            return _settle_few(floats, reasons, tenants, columns[2].tolist(), ctx)
    return _settle(floats, reasons, batch, ctx, t, code=code)


def _settle(floats: np.ndarray, reasons: np.ndarray, batch: PlanBatch, ctx: ClusterContext,
            t: Tables, *, code: jit.Compiled | None = None) -> Verdicts:  # fmt: skip
    """The round terms on arrays (compiled sums where `code` is given), and the verdicts."""
    tenant, count = _tenants(batch, t)
    count = max(count, len(ctx.demand_gpus))
    n = np.asarray(batch.n_gpus, dtype=np.float64)
    utility: np.ndarray | None = None
    if code is not None:  # both sums in one compiled pass, accumulated in row order as bincount
        gpus, utility = code.tenant_sums(tenant, n, floats[SCORE], count)
    else:
        gpus = np.bincount(tenant, weights=n, minlength=count)
    starving, fair = _shortfall(gpus, ctx)
    if starving.any():  # else nobody is short of GPUs, and the hoarding floor cannot apply
        floats[SCORE], reasons = settle.floor_hoarding(
            _NP, floats[SCORE], reasons, gpus[tenant], starving[tenant], fair, ctx.hoard_slack,
        )  # fmt: skip
        utility = None  # the floor changed scores
    if utility is None:
        utility = np.bincount(tenant, weights=floats[SCORE] * n, minlength=count)
    shares = Shares(gpus, utility, starving, fair, float(n.sum()))
    if not math.isinf(ctx.capacity_gpus):
        floats[CREDIT] = settle.credit(
            _NP, utility[tenant], gpus[tenant], shares.total_gpus, ctx.capacity_gpus,
            ctx.overcommit_penalty,
        )  # fmt: skip
    # No over-commitment without a capacity: the credit is exactly the tenant's utility
    # (u - p * (0.0 - 0.0) == u), which the scalar path computes in full.
    elif code is not None:
        code.spread(utility, tenant, floats[CREDIT])
    else:
        floats[CREDIT] = utility[tenant]
    return Verdicts(floats, reasons, shares)


_COLUMN_NAMES = ("model", "gpu", "n_gpus", "tp", "pp", "precision", "mode", "micro_batch",
                 "seq_len", "micro_batches", "optimizer", "zero", "checkpointing", "power_cap_w",
                 "tokens")  # fmt: skip
"""The plan columns in the compiled batch's argument order (`twin.kernel.jit.COLUMNS`)."""
FLOAT_ARGS = frozenset(
    ("n_gpus", "tp", "pp", "micro_batch", "seq_len", "micro_batches", "power_cap_w", "tokens")
)
_I64 = np.dtype(np.int64)
_GET_COLUMNS = operator.attrgetter(*_COLUMN_NAMES)
MAX_TENANT = LIMITS["tenant"][1]


def _columns(batch: PlanBatch) -> tuple[np.ndarray, ...]:
    """The plan columns in the formula's argument order, contiguous, writeable and aligned, in
    the compiled types (the precision codes column-major): the types the batch is compiled for."""
    return tuple(
        np.require(getattr(batch, n), np.float64 if n in FLOAT_ARGS else np.int64,
                   ("F" if n == "precision" else "C", "W", "A"))
        for n in _COLUMN_NAMES
    )  # fmt: skip


def _check_shapes(batch: PlanBatch) -> None:
    """Refuse columns of the wrong length or shape (the compiled loop reads row i of each)."""
    size = len(batch)
    for name in _COLUMN_NAMES:
        col = np.asarray(getattr(batch, name))
        want = (size, 6) if name == "precision" else (size,)
        if col.shape != want:
            raise ValueError(f"invalid plans: {name} has shape {col.shape}, expected {want}")
    if len(batch.tenant) not in (0, size):
        raise ValueError(f"invalid plans: tenant has {len(batch.tenant)} rows, expected {size}")


_Arrays = tuple[np.ndarray, ...]
_COMPILED: dict[int, tuple[Tables, jit.Compiled, _Arrays, _Arrays]] = {}


def _compiled(t: Tables) -> tuple[jit.Compiled, _Arrays, _Arrays]:
    """The compiled code for `t`, and the batch's array arguments but the columns: the packed
    tables, and per formula parameter (`jit.COLUMNS` with the six precision codes) its range,
    as ints and as floats (each parameter reads the one of its type)."""
    known = _COMPILED.get(id(t))
    if known is None or known[0] is not t:
        code, packed = jit.for_tables(t)
        limits = {**LIMITS, "model": (0, t.model_count - 1), "gpu": (0, len(t.gpu_names) - 1)}
        ranges = [limits[name] for name in _COLUMN_NAMES[:5]] + [(0, len(PRECISIONS) - 1)] * 6
        ranges += [limits[name] for name in _COLUMN_NAMES[6:]]
        lo, hi = [r[0] for r in ranges], [r[1] for r in ranges]
        known = _COMPILED[id(t)] = (t, code, (packed.floats, packed.ints), (
            np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64),
            np.array(lo, dtype=np.float64), np.array(hi, dtype=np.float64),
        ))  # fmt: skip
    return known[1], known[2], known[3]


def _refuse(batch: PlanBatch, t: Tables) -> None:
    """Raise naming what is out of range (nothing is when this returns)."""
    problems = batch.problems(t.model_count, len(t.gpu_names))
    if problems:
        raise ValueError("invalid plans: " + "; ".join(problems))


def _assess_numpy(batch: PlanBatch, t: Tables) -> tuple[np.ndarray, np.ndarray]:
    """The formula on numpy arrays, in chunks of `CHUNK` rows."""
    size = len(batch)
    floats = np.empty((len(FLOATS), size))
    reasons = np.empty(size, dtype=np.int64)
    with np.errstate(all="ignore"):
        for lo in range(0, size, CHUNK):
            sl = slice(lo, min(lo + CHUNK, size))
            mode = batch.mode[sl]
            first = int(mode[0])
            assess = _one_mode(first) if (mode == first).all() else formula.assess
            prec = np.ascontiguousarray(batch.precision[sl].T)
            cols = assess(
                _NP, t, batch.model[sl], batch.gpu[sl], batch.n_gpus[sl], batch.tp[sl],
                batch.pp[sl], prec[0], prec[1], prec[2], prec[3], prec[4], prec[5], mode,
                batch.micro_batch[sl], batch.seq_len[sl], batch.micro_batches[sl],
                batch.optimizer[sl], batch.zero[sl], batch.checkpointing[sl],
                batch.power_cap_w[sl], batch.tokens[sl],
            )  # fmt: skip
            for row, col in enumerate(cols[:-1]):
                floats[row, sl] = col
            reasons[sl] = cols[-1]
    return floats, reasons


@functools.cache
def _one_mode(mode: int) -> Any:
    """The numpy formula for rows of one mode (it skips the other mode's terms), made on
    first use."""
    return fixing(formula.assess, train=mode == 0)


def _few_tenants(batch: PlanBatch) -> list[int] | None:
    """A few plans' tenants as Python ints (zeros when the batch names none); None when the
    column is not int64 or a tenant is out of range (the array path names it or converts)."""
    tenant = batch.tenant
    if not len(tenant):
        return [0] * len(batch)
    if tenant.dtype is not _I64 or len(tenant) != len(batch):
        return None
    tenants: list[int] = tenant.tolist()
    return tenants if min(tenants) >= 0 and max(tenants) <= MAX_TENANT else None


def _settle_few(floats: np.ndarray, reasons: np.ndarray, tenants: list[int],
                n_gpus: list[float], ctx: ClusterContext) -> Verdicts:  # fmt: skip
    """The round terms of a few plans in Python numbers (numpy's per-call costs would dominate),
    written into their verdicts: the array path's operations in its order (tenant sums
    accumulate in row order, as bincount does), so the same numbers."""
    demand = ctx.demand_gpus
    if len(tenants) == 1 and not demand:
        return _settle_one(floats, reasons, tenants[0], n_gpus[0], ctx)
    rows = range(len(tenants))
    count = max(max(tenants) + 1 if tenants else 0, len(demand))
    gpus = [0.0] * count
    for i in rows:
        gpus[tenants[i]] += n_gpus[i]
    if demand:
        wanted = list(demand) + [0.0] * (count - len(demand))
        short = [g < d for g, d in zip(gpus, wanted, strict=True)]
        others = [sum(short) - s for s in short]
        active = sum(1 for g, d in zip(gpus, wanted, strict=True) if g > 0 or d > 0)
    else:  # no demands: nobody is short, and the active tenants are those with GPUs (>= 0)
        others = [0] * count
        active = count - gpus.count(0.0)
    fair = ctx.capacity_gpus / max(active, 1)
    scores: list[float] = floats[SCORE].tolist()
    if demand and any(others):  # as the array path: else the hoarding floor cannot apply
        codes: list[int] = reasons.tolist()
        for i in rows:
            k = tenants[i]
            scores[i], codes[i] = floor_hoarding_one(
                None, scores[i], codes[i], gpus[k], others[k], fair, ctx.hoard_slack
            )
        floats[SCORE] = scores
        reasons[:] = codes
    utility = [0.0] * count
    for i in rows:
        utility[tenants[i]] += scores[i] * n_gpus[i]
    total = float(sum(n_gpus))
    credit = floats[CREDIT]
    if ctx.capacity_gpus == INF:  # as the array path: the credit is the utility itself
        for i in rows:
            credit[i] = utility[tenants[i]]
    else:
        for i in rows:
            k = tenants[i]
            credit[i] = credit_one(None, utility[k], gpus[k], total, ctx.capacity_gpus,
                                    ctx.overcommit_penalty)  # fmt: skip
    return Verdicts(floats, reasons, Shares(gpus, utility, others, fair, total))


def _settle_one(floats: np.ndarray, reasons: np.ndarray, k: int, n: float,
                ctx: ClusterContext) -> Verdicts:  # fmt: skip
    """`_settle_few` for one plan of tenant k in a round without demands (the common single
    evaluation), its operations unrolled: nobody is short, so no floor; the sums start at 0.0."""
    gpus = [0.0] * (k + 1)
    gpus[k] += n
    utility = [0.0] * (k + 1)
    utility[k] += floats.item(SCORE, 0) * n
    fair = ctx.capacity_gpus / 1  # at most one tenant is active: the division by max(., 1)
    total = float(sum((n,)))
    if ctx.capacity_gpus == INF:  # as the array path: the credit is the utility itself
        floats[CREDIT, 0] = utility[k]
    else:
        floats[CREDIT, 0] = credit_one(None, utility[k], gpus[k], total, ctx.capacity_gpus,
                                        ctx.overcommit_penalty)  # fmt: skip
    return Verdicts(floats, reasons, Shares(gpus, utility, [0] * (k + 1), fair, total))


def _tenants(batch: PlanBatch, t: Tables) -> tuple[np.ndarray, int]:
    """The tenant column as int64 (all zeros when the batch names none), range-checked, and
    the highest tenant + 1."""
    size, tenant = len(batch), batch.tenant
    if not len(tenant):
        return np.zeros(size, dtype=np.int64), 1 if size else 0
    if len(tenant) != size:
        _check_shapes(batch)
    if not size:
        return tenant.astype(np.int64), 0
    lo, hi = LIMITS["tenant"]
    top = tenant.max()
    if not (tenant.min() >= lo and top <= hi):  # NaN fails both
        _refuse(batch, t)
    if tenant.dtype == _I64:
        return tenant, int(top) + 1
    whole = tenant.astype(np.int64)
    if not np.array_equal(whole, tenant):
        row = int(np.flatnonzero(whole != tenant)[0])
        raise ValueError(f"invalid plans: tenant = {tenant[row]} (row {row}) is not a whole number")
    return whole, int(top) + 1


def _shortfall(gpus: np.ndarray, ctx: ClusterContext) -> tuple[np.ndarray, float]:
    """How many other tenants are short of their demand, per tenant; the fair share."""
    demand = np.zeros(len(gpus))
    demand[: len(ctx.demand_gpus)] = ctx.demand_gpus
    short = gpus < demand
    active = int(np.count_nonzero((gpus > 0) | (demand > 0)))
    return (short.sum() - short).astype(np.int64), ctx.capacity_gpus / max(active, 1)


def evaluate_one(
    plan: Plan,
    ctx: ClusterContext = ALONE,
    tables: Tables | None = None,
    shares: Shares | None = None,
) -> Verdict:
    """Evaluate one plan with the compiled formula (about a microsecond), with the batch path's
    numbers.

    `shares` are the per-tenant totals of the round the plan belongs to (from
    `evaluate(...).shares`); without them the plan is alone in its round.
    """
    p0, p1, p2, p3, p4, p5 = plan.precision
    known = _ONE.get(id(tables))
    if known is None or known[0] is not tables:
        code, packed = jit.for_tables(tables or default_tables())
        known = _ONE[id(tables)] = (tables, code.one, packed.floats, packed.ints)
    _, one, fl, il = known
    # A Plan holds its sizes as floats and its codes as ints: the types the code was compiled
    # for, so no call compiles anew.
    mem, step_s, tps, power_w, throttle, stability, usd_h, job_s, score, reasons = one(
        fl, il, plan.model, plan.gpu, plan.n_gpus, plan.tp, plan.pp, p0, p1, p2, p3, p4, p5,
        plan.mode, plan.micro_batch, plan.seq_len, plan.micro_batches, plan.optimizer, plan.zero,
        plan.checkpointing, plan.power_cap_w, plan.tokens,
    )  # fmt: skip
    n = plan.n_gpus
    if shares is None:
        # Alone in its round: no other tenant can be short, so the hoarding floor cannot apply;
        # without a capacity nothing is over-committed and the credit is the utility itself,
        # exactly as the batch path takes it.
        c = score * n
        if ctx.capacity_gpus != INF:
            c = credit_one(None, c, n, n, ctx.capacity_gpus, ctx.overcommit_penalty)
        # tuple.__new__ skips the named tuple's Python-level constructor (~0.1 us of ~4).
        return _new(
            Verdict,
            (mem, step_s, tps, power_w, throttle, stability, usd_h, job_s, score, reasons, c),
        )
    k = plan.tenant
    tenant_gpus = float(shares.tenant_gpus[k])
    score, reasons = floor_hoarding_one(
        None, score, reasons, tenant_gpus, int(shares.others_starving[k]), shares.fair_gpus,
        ctx.hoard_slack,
    )  # fmt: skip
    c = credit_one(
        None, float(shares.tenant_utility[k]), tenant_gpus, shares.total_gpus, ctx.capacity_gpus,
        ctx.overcommit_penalty,
    )  # fmt: skip
    return Verdict(mem, step_s, tps, power_w, throttle, stability, usd_h, job_s, score, reasons, c)


_ONE: dict[int, tuple[Tables | None, Any, np.ndarray, np.ndarray]] = {}
"""Per tables object (None: the shipped ones): the compiled single-plan entry and its arrays,
unpacked once. `jit.for_tables` holds the same; asking it each call costs ~90 ns of the 2 us."""
_new = tuple.__new__
