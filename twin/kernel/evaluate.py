"""The kernel's API: evaluate a batch of plans, or one plan, with exactly the same numbers.

Both run the formula compiled by numba (`twin.kernel.jit`); `engine="numpy"` runs the same
formula on numpy arrays instead, the reference the compiled code is tested against bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, TypeVar

import numpy as np

from twin.kernel import formula, jit, settle
from twin.kernel.compile import NumpyOps, fixing, scalar
from twin.kernel.plans import INFEASIBLE, LIMITS, PRECISIONS, Plan, PlanBatch, Reason
from twin.kernel.tables import Tables, default_tables

CHUNK = 8192  # rows per numpy pass: big enough to amortise calls, small enough for cache
SMALL = 32  # at most this many rows go through the scalar formula instead
INF = math.inf
T = TypeVar("T")

COLUMNS = (
    "mem_bytes",
    "step_s",
    "tokens_per_s",
    "power_w",
    "throttle",
    "stability",
    "usd_per_h",
    "job_s",
    "score",
    "reasons",
)
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


@dataclass(frozen=True)
class Shares:
    """Per-tenant totals of one round, indexed by tenant id."""

    tenant_gpus: np.ndarray
    tenant_utility: np.ndarray
    others_starving: np.ndarray
    fair_gpus: float
    total_gpus: float


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


@dataclass(frozen=True)
class Verdicts:
    """Evaluations of a batch, one array per field.

    mem_bytes: memory needed per GPU; step_s: one optimizer step (training) or decode step
    (serving), inf when a precision is unsupported; tokens_per_s: the whole plan; power_w and
    throttle: per GPU; stability: product over groups (< 0.5 diverges); usd_per_h: the whole
    plan; job_s: time for the plan's `tokens`; score: the 0.01 floor for a plan that cannot run
    or a degenerate strategy, else stability x tokens-per-dollar quality in [0.01, 1); reasons:
    `Reason` bits; credit: the tenant's difference reward. `shares`: the round's tenant totals.
    """

    mem_bytes: np.ndarray
    step_s: np.ndarray
    tokens_per_s: np.ndarray
    power_w: np.ndarray
    throttle: np.ndarray
    stability: np.ndarray
    usd_per_h: np.ndarray
    job_s: np.ndarray
    score: np.ndarray
    reasons: np.ndarray
    credit: np.ndarray
    shares: Shares = field(repr=False)

    def __len__(self) -> int:
        return len(self.score)

    @property
    def job_usd(self) -> np.ndarray:
        out: np.ndarray = self.usd_per_h * self.job_s / 3600.0
        return out

    @property
    def feasible(self) -> np.ndarray:
        out: np.ndarray = self.reasons & NOT_RUNNABLE == 0
        return out

    def row(self, i: int) -> Verdict:
        return Verdict(*(getattr(self, name)[i].item() for name in Verdict._fields))


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
        return _evaluate_small(batch, ctx, t)
    _validate(batch, t)
    out = _assess_numpy(batch, t) if engine == "numpy" else _assess_compiled(batch, t)
    tenant = batch.tenant if len(batch.tenant) == size else np.zeros(size, dtype=np.int64)
    n = batch.n_gpus
    gpus, starving, fair = _round(tenant, n, ctx)
    if starving.any():  # else nobody is short of GPUs, and the hoarding floor cannot apply
        out["score"], out["reasons"] = settle.floor_hoarding(
            _NP, out["score"], out["reasons"], gpus[tenant], starving[tenant], fair,
            ctx.hoard_slack,
        )  # fmt: skip
    utility = np.bincount(tenant, weights=out["score"] * n, minlength=len(gpus))
    shares = Shares(gpus, utility, starving, fair, float(n.sum()))
    if math.isinf(ctx.capacity_gpus):
        # No over-commitment without a capacity: the credit is exactly the tenant's utility
        # (u - p * (0.0 - 0.0) == u), which the scalar path computes in full.
        credit = utility[tenant]
    else:
        credit = settle.credit(
            _NP, utility[tenant], gpus[tenant], shares.total_gpus, ctx.capacity_gpus,
            ctx.overcommit_penalty,
        )  # fmt: skip
    return Verdicts(credit=credit, shares=shares, **out)


def _columns(batch: PlanBatch) -> list[np.ndarray]:
    """The plan columns in the formula's argument order, contiguous, in the compiled types."""
    names = ("model", "gpu", "n_gpus", "tp", "pp", "precision", "mode", "micro_batch",
             "seq_len", "micro_batches", "optimizer", "zero", "checkpointing", "power_cap_w",
             "tokens")  # fmt: skip
    return [
        np.ascontiguousarray(getattr(batch, n), dtype=np.float64 if n in FLOAT_ARGS else np.int64)
        for n in names
    ]


_COMPILED_DTYPES = (np.dtype(np.float64), np.dtype(np.int64))

FLOAT_ARGS = frozenset(
    ("n_gpus", "tp", "pp", "micro_batch", "seq_len", "micro_batches", "power_cap_w", "tokens")
)


def _assess_compiled(batch: PlanBatch, t: Tables) -> dict[str, np.ndarray]:
    code, packed = jit.for_tables(t)
    size = len(batch)
    cols = np.empty((len(COLUMNS) - 1, size))
    reasons = np.empty(size, dtype=np.int64)
    code.batch(packed.floats, packed.ints, *_columns(batch), cols, reasons)
    out: dict[str, np.ndarray] = dict(zip(COLUMNS[:-1], cols, strict=True))
    out["reasons"] = reasons
    return out


def _assess_numpy(batch: PlanBatch, t: Tables) -> dict[str, np.ndarray]:
    """The formula on numpy arrays, in chunks of `CHUNK` rows."""
    size = len(batch)
    out = {
        name: np.empty(size, dtype=np.int64 if name == "reasons" else np.float64)
        for name in COLUMNS
    }
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
            for name, col in zip(COLUMNS, cols, strict=True):
                out[name][sl] = col
    return out


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
_F64, _I64 = np.dtype(np.float64), np.dtype(np.int64)
MAX_TENANT = LIMITS["tenant"][1]
_BOUNDS: dict[int, tuple[Tables, tuple[tuple[str, np.dtype[Any], float, float], ...]]] = {}


def _bounds(t: Tables) -> tuple[tuple[str, np.dtype[Any], float, float], ...]:
    """Per column of `ONE_ORDER`: its name, the type the code is compiled for, and its range."""
    known = _BOUNDS.get(id(t))
    if known is None or known[0] is not t:
        n_models, n_gpus = t.layer_stride // 216, len(t.gpu_names)
        limits = {**LIMITS, "model": (0, n_models - 1), "gpu": (0, n_gpus - 1)}
        known = _BOUNDS[id(t)] = (t, tuple(
            (name, _F64 if name in FLOAT_ARGS else _I64, float(limits[name][0]),
             float(limits[name][1])) for name in ONE_ORDER
        ))  # fmt: skip
    return known[1]


def _small_columns(batch: PlanBatch, t: Tables) -> tuple[list[list[Any]], list[Any]] | None:
    """The columns (in `ONE_ORDER`) and precision rows as Python numbers, when every column
    has the compiled type and every value is in range; None otherwise (the general check then
    names what is wrong, or converts)."""
    columns = []
    for name, dtype, lo, hi in _bounds(t):
        col = getattr(batch, name)
        if col.dtype is not dtype:
            return None
        values = col.tolist()
        for v in values:
            if not lo <= v <= hi:  # NaN compares false: out of range
                return None
        columns.append(values)
    prec = batch.precision
    if prec.dtype is not _I64 or prec.shape != (len(batch), 6):
        return None
    codes = prec.tolist()
    top = len(PRECISIONS) - 1
    for row in codes:
        for c in row:
            if not 0 <= c <= top:
                return None
    return columns, codes


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
    n_gpus = columns[2]
    count = max(max(tenants, default=-1) + 1, len(ctx.demand_gpus))
    gpus = [0.0] * count
    for k, n in zip(tenants, n_gpus, strict=True):
        gpus[k] += n
    demand = list(ctx.demand_gpus) + [0.0] * (count - len(ctx.demand_gpus))
    short = [g < d for g, d in zip(gpus, demand, strict=True)]
    others = [sum(short) - s for s in short]
    active = sum(1 for g, d in zip(gpus, demand, strict=True) if g > 0 or d > 0)
    fair = ctx.capacity_gpus / max(active, 1)
    settled = [
        _floor_one(None, row[8], row[9], gpus[k], others[k], fair, ctx.hoard_slack)
        for row, k in zip(rows, tenants, strict=True)
    ]
    utility = [0.0] * count
    for (score, _), k, n in zip(settled, tenants, n_gpus, strict=True):
        utility[k] += score * n
    total = float(sum(n_gpus))
    credit = [
        _credit_one(None, utility[k], gpus[k], total, ctx.capacity_gpus, ctx.overcommit_penalty)
        for k in tenants
    ]
    # One array for the float columns (with the settled score and the credit), viewed per field.
    block = np.array([(*row[:8], sc, c) for row, (sc, _), c in zip(rows, settled, credit,
                                                                   strict=True)],
                     dtype=np.float64).reshape(size, 10).T  # fmt: skip
    shares = _made(Shares, tenant_gpus=np.array(gpus), tenant_utility=np.array(utility),
                   others_starving=np.array(others, dtype=np.int64), fair_gpus=fair,
                   total_gpus=total)  # fmt: skip
    fields_ = dict(zip(COLUMNS[:9], block[:9], strict=True))
    return _made(
        Verdicts,
        **fields_,
        credit=block[9],
        reasons=np.array([r for _, r in settled], dtype=np.int64),
        shares=shares,
    )


def _made(cls: type[T], **values: Any) -> T:
    """A frozen dataclass of ours built without its generated `__init__` (a microsecond saved
    per verdict on the few-plan path; the values are the ones `__init__` would store)."""
    obj = object.__new__(cls)
    obj.__dict__.update(values)
    return obj


def _round(tenant: np.ndarray, n: np.ndarray, ctx: ClusterContext) -> tuple[Any, Any, float]:
    """GPUs per tenant, how many other tenants are short of their demand, the fair share."""
    count = max(int(tenant.max(initial=-1)) + 1, len(ctx.demand_gpus))
    gpus = np.bincount(tenant, weights=n, minlength=count)
    demand = np.zeros(count)
    demand[: len(ctx.demand_gpus)] = ctx.demand_gpus
    short = gpus < demand
    active = int(np.count_nonzero((gpus > 0) | (demand > 0)))
    return gpus, (short.sum() - short).astype(np.int64), ctx.capacity_gpus / max(active, 1)


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
