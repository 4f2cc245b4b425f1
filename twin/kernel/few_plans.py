"""The few-plan path: a handful of plans (and one plan alone, `evaluate_one`) settle their round
in Python numbers, where numpy's per-call costs would dominate; the batch path's operations in
its order, so the same numbers."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from twin.kernel import jit, settle
from twin.kernel.compile import scalar
from twin.kernel.plan_checks import I64, MAX_TENANT
from twin.kernel.plans import Plan, PlanBatch
from twin.kernel.tables import Tables, default_tables
from twin.kernel.verdicts import (
    ALONE,
    CREDIT,
    SCORE,
    ClusterContext,
    Shares,
    Verdict,
    Verdicts,
)

INF = math.inf
floor_hoarding_one = scalar(settle.floor_hoarding)
"""`settle.floor_hoarding` on Python numbers (its first argument, the ops, is ignored)."""
credit_one = scalar(settle.credit)
"""`settle.credit` on Python numbers (its first argument, the ops, is ignored)."""


def few_tenants(batch: PlanBatch) -> list[int] | None:
    """A few plans' tenants as Python ints (zeros when the batch names none); None when the
    column is not int64 or a tenant is out of range (the array path names it or converts)."""
    tenant = batch.tenant
    if not len(tenant):
        return [0] * len(batch)
    if tenant.dtype is not I64 or len(tenant) != len(batch):
        return None
    tenants: list[int] = tenant.tolist()
    return tenants if min(tenants) >= 0 and max(tenants) <= MAX_TENANT else None


def settle_few(floats: np.ndarray, reasons: np.ndarray, tenants: list[int],
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
