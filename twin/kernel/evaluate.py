"""The kernel's API: evaluate a batch of plans, or one plan, with exactly the same numbers.

Both run the formula compiled by numba (`twin.kernel.jit`); `engine="numpy"` runs the same
formula on numpy arrays instead, the reference the compiled code is tested against bit for bit.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np

from twin.kernel import formula, jit, settle
from twin.kernel.compile import NumpyOps, fixing, scalar
from twin.kernel.plans import INFEASIBLE, LIMITS, PRECISIONS, Plan, PlanBatch, Reason
from twin.kernel.tables import Tables, default_tables

CHUNK = 8192  # rows per numpy pass: big enough to amortise calls, small enough for cache
SMALL = 32  # at most this many rows go through the scalar formula instead
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
COLUMNS = (*FLOATS[:CREDIT], "reasons")
"""The formula's outputs, in its order."""
NOT_RUNNABLE = int(INFEASIBLE | Reason.DEGENERATE_ZERO_GPUS)

_NP = NumpyOps()
# Rows of one mode skip the other mode's terms; mixed chunks take the general formula.
_BATCH = {0: fixing(formula.assess, train=True), 1: fixing(formula.assess, train=False)}
_floor_one = scalar(settle.floor_hoarding)
_credit_one = scalar(settle.credit)


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
    size = len(batch)
    if engine == "compiled" and size <= SMALL:
        if size == 1:
            single = _evaluate_single(batch, ctx, t)
            if single is not None:
                return single
        return _evaluate_small(batch, ctx, t)
    if engine == "numpy":
        _validate(batch, t)
        floats, reasons = _assess_numpy(batch, t)
    else:
        floats, reasons = _assess_compiled(batch, t)  # checks the values in the same pass
    tenant, count = _tenants(batch, t)
    count = max(count, len(ctx.demand_gpus))
    n = np.asarray(batch.n_gpus, dtype=np.float64)
    code = jit.for_tables(t)[0] if engine == "compiled" else None
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


def _columns(batch: PlanBatch) -> list[np.ndarray]:
    """The plan columns in the formula's argument order, contiguous, in the compiled types (the
    precision codes column-major)."""
    return [
        np.require(getattr(batch, n), np.float64 if n in FLOAT_ARGS else np.int64,
                   "F" if n == "precision" else "C")
        for n in _COLUMN_NAMES
    ]  # fmt: skip


_COMPILED_DTYPES = (np.dtype(np.float64), np.dtype(np.int64))

FLOAT_ARGS = frozenset(
    ("n_gpus", "tp", "pp", "micro_batch", "seq_len", "micro_batches", "power_cap_w", "tokens")
)


def _native_columns(batch: PlanBatch) -> list[np.ndarray] | None:
    """The columns as they are, when each is contiguous and of its compiled type (else None:
    they must be checked, then converted)."""
    cols = [getattr(batch, n) for n in _COLUMN_NAMES]
    for name, col in zip(_COLUMN_NAMES, cols, strict=True):
        wanted = np.float64 if name in FLOAT_ARGS else np.int64
        if col.dtype != wanted or not (col.flags.c_contiguous or col.flags.f_contiguous):
            return None
    return cols


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


_BOUNDS: dict[int, tuple[Tables, tuple[np.ndarray, ...]]] = {}


def _bounds(t: Tables) -> tuple[np.ndarray, ...]:
    """Per formula parameter (`jit.COLUMNS` with the six precision codes): its range, as ints
    and as floats (each parameter reads the one of its type)."""
    known = _BOUNDS.get(id(t))
    if known is None or known[0] is not t:
        n_models, n_gpus = t.layer_stride // 216, len(t.gpu_names)
        limits = {**LIMITS, "model": (0, n_models - 1), "gpu": (0, n_gpus - 1)}
        ranges = [limits[name] for name in _COLUMN_NAMES[:5]] + [(0, len(PRECISIONS) - 1)] * 6
        ranges += [limits[name] for name in _COLUMN_NAMES[6:]]
        lo, hi = [r[0] for r in ranges], [r[1] for r in ranges]
        known = _BOUNDS[id(t)] = (t, (
            np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64),
            np.array(lo, dtype=np.float64), np.array(hi, dtype=np.float64),
        ))  # fmt: skip
    return known[1]


def _refuse(batch: PlanBatch, t: Tables) -> None:
    """Raise naming what is out of range (nothing is when this returns)."""
    problems = batch.problems(t.layer_stride // 216, len(t.gpu_names))
    if problems:
        raise ValueError("invalid plans: " + "; ".join(problems))


def _assess_compiled(batch: PlanBatch, t: Tables) -> tuple[np.ndarray, np.ndarray]:
    """The float block (its credit row left to fill) and the reasons, compiled; the values are
    range-checked in the same pass."""
    code, packed = jit.for_tables(t)
    _check_shapes(batch)
    columns = _native_columns(batch)
    if columns is None:  # check before converting, which could hide a bad value
        _refuse(batch, t)
        columns = _columns(batch)
    size = len(batch)
    floats = np.empty((len(FLOATS), size))
    reasons = np.empty(size, dtype=np.int64)
    if code.batch(packed.floats, packed.ints, *columns, *_bounds(t), floats[:CREDIT], reasons):
        _refuse(batch, t)
        raise AssertionError("the compiled range check and the plan check disagree")
    return floats, reasons


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
            assess = _BATCH[first] if (mode == first).all() else formula.assess
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


def _validate(batch: PlanBatch, t: Tables) -> None:
    """Refuse a batch with a value out of range, naming the field and row. The common case (all
    in range) is one compiled pass per column; only a bad batch is searched for the culprit."""
    n_models, n_gpus = t.layer_stride // 216, len(t.gpu_names)
    within = jit.for_tables(t)[0].within
    bounds = {**LIMITS, "model": (0, n_models - 1), "gpu": (0, n_gpus - 1)}
    columns = [(getattr(batch, name), float(lo), float(hi)) for name, (lo, hi) in bounds.items()]
    columns.append((batch.precision, 0.0, float(len(PRECISIONS) - 1)))
    if all(
        col.dtype in _COMPILED_DTYPES and col.flags.c_contiguous and within(col, lo, hi)
        for col, lo, hi in columns
    ):
        return
    problems = batch.problems(n_models, n_gpus)
    if problems:
        raise ValueError("invalid plans: " + "; ".join(problems))


ONE_ORDER = (
    "model",
    "gpu",
    "n_gpus",
    "tp",
    "pp",
    "mode",
    "micro_batch",
    "seq_len",
    "micro_batches",
    "optimizer",
    "zero",
    "checkpointing",
    "power_cap_w",
    "tokens",
)
"""The plan columns in the order the compiled single-plan formula takes them (the six
precision codes go after `pp`)."""
_I64 = np.dtype(np.int64)
MAX_TENANT = LIMITS["tenant"][1]
_SIX_INTS = [int] * 6
_TOP_CODE = len(PRECISIONS) - 1
_CHECKS: dict[int, tuple[Tables, tuple[list[type], list[float], list[float]]]] = {}


def _checks(t: Tables) -> tuple[list[type], list[float], list[float]]:
    """Per column of `ONE_ORDER`: the Python type its values have in the compiled types (a
    float64 column's are floats, an int64 column's ints), and its range."""
    known = _CHECKS.get(id(t))
    if known is None or known[0] is not t:
        n_models, n_gpus = t.layer_stride // 216, len(t.gpu_names)
        limits = {**LIMITS, "model": (0, n_models - 1), "gpu": (0, n_gpus - 1)}
        known = _CHECKS[id(t)] = (t, (
            [float if name in FLOAT_ARGS else int for name in ONE_ORDER],
            [float(limits[name][0]) for name in ONE_ORDER],
            [float(limits[name][1]) for name in ONE_ORDER],
        ))  # fmt: skip
    return known[1]


_GET_ONE = operator.attrgetter(*ONE_ORDER)


def _small_columns(batch: PlanBatch, t: Tables) -> tuple[list[list[Any]], list[Any]] | None:
    """The columns (in `ONE_ORDER`) and precision rows as Python numbers, when every column
    has the compiled type and every value is in range; None otherwise (the general check then
    names what is wrong, or converts)."""
    columns = []
    types, lows, highs = _checks(t)
    cols: tuple[np.ndarray, ...] = _GET_ONE(batch)
    for col, ty, lo, hi in zip(cols, types, lows, highs, strict=True):
        values: list[float] = col.tolist()
        for v in values:
            if type(v) is not ty or not lo <= v <= hi:  # NaN compares false: out of range
                return None
        columns.append(values)
    prec = batch.precision
    if prec.shape != (len(batch), 6):
        return None
    codes = prec.tolist()
    for row in codes:
        if list(map(type, row)) != _SIX_INTS or not 0 <= min(row) <= max(row) <= _TOP_CODE:
            return None
    return columns, codes


def _evaluate_single(batch: PlanBatch, ctx: ClusterContext, t: Tables) -> Verdicts | None:
    """One plan, in a few microseconds: `_evaluate_small`'s operations for one row, in the same
    order (so the same numbers); None if a value is not of its compiled type (int or float) or
    out of range (the general path then converts, or names what is wrong)."""
    values = [col.item() for col in _GET_ONE(batch)]
    types, lows, highs = _checks(t)
    if list(map(type, values)) != types:
        return None
    for v, lo, hi in zip(values, lows, highs, strict=True):
        if not lo <= v <= hi:  # NaN compares false: out of range
            return None
    prec, tenant_col = batch.precision, batch.tenant
    if prec.shape != (1, 6):
        return None
    codes = prec.tolist()[0]
    if list(map(type, codes)) != _SIX_INTS or not 0 <= min(codes) <= max(codes) <= _TOP_CODE:
        return None
    k = 0
    if len(tenant_col) == 1:
        k = tenant_col.item()
        if type(k) is not int or not 0 <= k <= MAX_TENANT:
            return None
    model, gpu, n, tp, pp, m, mb, seq, mbs, opt, zero, ckpt, cap, tok = values
    code, packed = jit.for_tables(t)
    row = code.one(packed.floats, packed.ints, model, gpu, n, tp, pp, *codes, m, mb, seq, mbs,
                   opt, zero, ckpt, cap, tok)  # fmt: skip
    return _settled([row], [k], [n], ctx)


def _evaluate_small(batch: PlanBatch, ctx: ClusterContext, t: Tables) -> Verdicts:
    """Few rows: the compiled formula row by row, and the round terms in Python, beat numpy's
    per-call overhead (a batch of one costs a few times `evaluate_one`).

    Same operations in the same order as the array path (tenant sums accumulate in row order,
    as bincount does), so the numbers are the same.
    """
    code, packed = jit.for_tables(t)
    one, fl, il = code.one, packed.floats, packed.ints
    size = len(batch)
    tenant_col = batch.tenant
    mine = len(tenant_col) == size
    checked = _small_columns(batch, t) if not mine or tenant_col.dtype is _I64 else None
    if checked is None or (mine and not all(0 <= k <= MAX_TENANT for k in tenant_col.tolist())):
        _validate(batch, t)  # names what is out of range; else the columns convert
        typed = _columns(batch)
        prec = typed.pop(5)
        checked = ([c.tolist() for c in typed], prec.reshape(len(batch), 6).tolist())
    columns, codes = checked
    rows = [
        one(fl, il, model, gpu, n, tp, pp, *pr, m, mb, seq, mbs, opt, zero, ckpt, cap, tok)
        for model, gpu, n, tp, pp, pr, m, mb, seq, mbs, opt, zero, ckpt, cap, tok in zip(
            *columns[:5], codes, *columns[5:], strict=True
        )
    ]
    tenants = np.asarray(tenant_col, dtype=np.int64).tolist() if mine else [0] * size
    return _settled(rows, tenants, columns[2], ctx)


def _settled(rows: list[tuple[Any, ...]], tenants: list[int], n_gpus: list[float],
             ctx: ClusterContext) -> Verdicts:  # fmt: skip
    """The round terms of a few plans in Python, and their verdicts: the array path's
    operations in its order (tenant sums accumulate in row order, as bincount does)."""
    count = max(max(tenants) + 1 if tenants else 0, len(ctx.demand_gpus))
    gpus = [0.0] * count
    for k, n in zip(tenants, n_gpus, strict=True):
        gpus[k] += n
    if ctx.demand_gpus:
        demand = list(ctx.demand_gpus) + [0.0] * (count - len(ctx.demand_gpus))
        short = [g < d for g, d in zip(gpus, demand, strict=True)]
        others = [sum(short) - s for s in short]
        active = sum(1 for g, d in zip(gpus, demand, strict=True) if g > 0 or d > 0)
    else:  # no demands: nobody is short, and the active tenants are those with GPUs (>= 0)
        others = [0] * count
        active = count - gpus.count(0.0)
    fair = ctx.capacity_gpus / max(active, 1)
    if any(others):
        settled = [
            _floor_one(None, row[SCORE], row[SCORE + 1], gpus[k], others[k], fair,
                       ctx.hoard_slack)
            for row, k in zip(rows, tenants, strict=True)
        ]  # fmt: skip
    else:  # as the array path: nobody is short of GPUs, so the hoarding floor cannot apply
        settled = [(row[SCORE], row[SCORE + 1]) for row in rows]
    utility = [0.0] * count
    for (score, _), k, n in zip(settled, tenants, n_gpus, strict=True):
        utility[k] += score * n
    total = float(sum(n_gpus))
    if ctx.capacity_gpus == INF:  # as the array path: the credit is the utility itself
        credit = [utility[k] for k in tenants]
    else:
        credit = [
            _credit_one(None, utility[k], gpus[k], total, ctx.capacity_gpus,
                        ctx.overcommit_penalty)
            for k in tenants
        ]  # fmt: skip
    # One array for the float rows (with the settled score and the credit).
    block = (np.array([(*row[:SCORE], sc, c) for row, (sc, _), c in zip(rows, settled, credit,
                                                                        strict=True)]).T
             if rows else np.empty((len(FLOATS), 0)))  # fmt: skip
    reasons = np.array([r for _, r in settled], dtype=np.int64)
    return Verdicts(block, reasons, Shares(gpus, utility, others, fair, total))


def _tenants(batch: PlanBatch, t: Tables) -> tuple[np.ndarray, int]:
    """The tenant column as int64 (all zeros when the batch names none), range-checked, and
    the highest tenant + 1."""
    size, tenant = len(batch), batch.tenant
    if len(tenant) != size:
        return np.zeros(size, dtype=np.int64), 1 if size else 0
    if not size:
        return tenant.astype(np.int64), 0
    lo, hi = LIMITS["tenant"]
    top = tenant.max()
    if not (tenant.min() >= lo and top <= hi):  # NaN fails both
        _refuse(batch, t)
    return (tenant if tenant.dtype == _I64 else tenant.astype(np.int64)), int(top) + 1


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
            c = _credit_one(None, c, n, n, ctx.capacity_gpus, ctx.overcommit_penalty)
        # tuple.__new__ skips the named tuple's Python-level constructor (~0.1 us of ~4).
        return _new(
            Verdict,
            (mem, step_s, tps, power_w, throttle, stability, usd_h, job_s, score, reasons, c),
        )
    k = plan.tenant
    tenant_gpus = float(shares.tenant_gpus[k])
    score, reasons = _floor_one(
        None, score, reasons, tenant_gpus, int(shares.others_starving[k]), shares.fair_gpus,
        ctx.hoard_slack,
    )  # fmt: skip
    c = _credit_one(
        None, float(shares.tenant_utility[k]), tenant_gpus, shares.total_gpus, ctx.capacity_gpus,
        ctx.overcommit_penalty,
    )  # fmt: skip
    return Verdict(mem, step_s, tps, power_w, throttle, stability, usd_h, job_s, score, reasons, c)


_ONE: dict[int, tuple[Tables | None, Any, np.ndarray, np.ndarray]] = {}
"""Per tables object (None: the shipped ones): the compiled single-plan entry and its arrays,
unpacked once. `jit.for_tables` holds the same; asking it each call costs ~90 ns of the 2 us."""
_new = tuple.__new__
