"""The batch path: the round terms settled on arrays (compiled sums where the compiled formula
ran), the compiled code and its arguments per tables object, and the formula on numpy arrays
(the reference the compiled code is tested against)."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from twin.kernel import formula, jit, settle
from twin.kernel.compile import NumpyOps, fixing
from twin.kernel.plan_checks import COLUMN_NAMES, tenants
from twin.kernel.plans import LIMITS, PRECISIONS, PlanBatch
from twin.kernel.tables import Tables
from twin.kernel.verdicts import CREDIT, FLOATS, SCORE, ClusterContext, Shares, Verdicts

CHUNK = 8192  # rows per numpy pass: big enough to amortise calls, small enough for cache
_NP = NumpyOps()


def settle_round(floats: np.ndarray, reasons: np.ndarray, batch: PlanBatch, ctx: ClusterContext,
            t: Tables, *, code: jit.Compiled | None = None) -> Verdicts:  # fmt: skip
    """The round terms on arrays (compiled sums where `code` is given), and the verdicts."""
    tenant, count = tenants(batch, t)
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


_Arrays = tuple[np.ndarray, ...]
_COMPILED: dict[int, tuple[Tables, jit.Compiled, _Arrays, _Arrays]] = {}


def compiled(t: Tables) -> tuple[jit.Compiled, _Arrays, _Arrays]:
    """The compiled code for `t`, and the batch's array arguments but the columns: the packed
    tables, and per formula parameter (`jit.COLUMNS` with the six precision codes) its range,
    as ints and as floats (each parameter reads the one of its type)."""
    known = _COMPILED.get(id(t))
    if known is None or known[0] is not t:
        code, packed = jit.for_tables(t)
        limits = {**LIMITS, "model": (0, t.model_count - 1), "gpu": (0, len(t.gpu_names) - 1)}
        ranges = [limits[name] for name in COLUMN_NAMES[:5]] + [(0, len(PRECISIONS) - 1)] * 6
        ranges += [limits[name] for name in COLUMN_NAMES[6:]]
        lo, hi = [r[0] for r in ranges], [r[1] for r in ranges]
        known = _COMPILED[id(t)] = (t, code, (packed.floats, packed.ints), (
            np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64),
            np.array(lo, dtype=np.float64), np.array(hi, dtype=np.float64),
        ))  # fmt: skip
    return known[1], known[2], known[3]


def assess_numpy(batch: PlanBatch, t: Tables) -> tuple[np.ndarray, np.ndarray]:
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


def _shortfall(gpus: np.ndarray, ctx: ClusterContext) -> tuple[np.ndarray, float]:
    """How many other tenants are short of their demand, per tenant; the fair share."""
    demand = np.zeros(len(gpus))
    demand[: len(ctx.demand_gpus)] = ctx.demand_gpus
    short = gpus < demand
    active = int(np.count_nonzero((gpus > 0) | (demand > 0)))
    return (short.sum() - short).astype(np.int64), ctx.capacity_gpus / max(active, 1)
