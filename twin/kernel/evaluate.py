"""The kernel's API: evaluate a batch of plans, or one plan, with exactly the same numbers.

Both run the formula compiled by numba (`twin.kernel.jit`); `engine="numpy"` runs the same
formula on numpy arrays instead, the reference the compiled code is tested against bit for bit.
The checks on input (`plan_checks`), the few-plan path (`few_plans`) and the batch path
(`batch_path`) each live in their own module; this one routes a batch between them.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from twin.kernel import jit
from twin.kernel.batch_path import assess_numpy, compiled, settle_round
from twin.kernel.blocks import verdict_block
from twin.kernel.few_plans import (
    credit_one,
    evaluate_one,
    few_tenants,
    floor_hoarding_one,
    settle_few,
)
from twin.kernel.plan_checks import GET_COLUMNS, check_shapes, refuse
from twin.kernel.plan_checks import columns as plan_columns
from twin.kernel.plans import PlanBatch
from twin.kernel.tables import Tables, default_tables
from twin.kernel.verdicts import (
    ALONE,
    COLUMNS,
    FLOATS,
    ClusterContext,
    Shares,
    Verdict,
    Verdicts,
)

SMALL = 32  # at most this many rows settle their round in Python numbers instead of numpy
FEW_ON_NUMPY = 64
"""Up to this many plans are evaluated on numpy while the compiled code is not loaded in this
process; the first larger batch (or the `CALLS_ON_NUMPY`-th small one) loads it."""
CALLS_ON_NUMPY = 2_000
"""Loading the compiled code (importing numba, reading its cache) takes 0.6-0.9 s; a small
batch costs ~170 us on numpy against ~8 us compiled. A process loads it once it has spent
about as long on numpy as loading would take (rent, then buy), so a short run, a sweep's worker
or an arena's session never pays the second, and a long one pays it once."""
_on_numpy = [0]  # small batches evaluated on numpy in this process
_N_FLOATS = len(FLOATS)

__all__ = [
    "ALONE",
    "COLUMNS",
    "FLOATS",
    "ClusterContext",
    "Shares",
    "Verdict",
    "Verdicts",
    "credit_one",
    "evaluate",
    "evaluate_one",
    "floor_hoarding_one",
]


def evaluate(
    batch: PlanBatch,
    ctx: ClusterContext = ALONE,
    tables: Tables | None = None,
    *,
    engine: Literal["compiled", "numpy"] = "compiled",
) -> Verdicts:
    """Evaluate B plans: the compiled formula over the rows (or numpy's vectorised pass, with
    the same numbers: also for a few plans while the compiled code is not loaded here)."""
    t = tables or default_tables()
    if engine == "compiled" and len(batch) <= FEW_ON_NUMPY and not jit.loaded(t):
        _on_numpy[0] += 1
        engine = "numpy" if _on_numpy[0] <= CALLS_ON_NUMPY else engine
    if engine == "numpy":
        check_shapes(batch)
        refuse(batch, t)
        floats, reasons = assess_numpy(batch, t)
        return settle_round(floats, reasons, batch, ctx, t)
    code, packed, ranges = compiled(t)
    size = len(batch)
    floats, reasons = verdict_block(size, _N_FLOATS)
    columns: tuple[np.ndarray, ...] = GET_COLUMNS(batch)
    # The compiled loop checks every length, and every value as it reads it (it reads no
    # table with a bad code); numba's dispatch checks each column's type and layout. It fills
    # the float block's rows but the credit.
    try:
        verdict = code.batch(*packed, *columns, *ranges, floats, reasons)
    except TypeError:  # a column of another type or layout: check, then convert
        check_shapes(batch)
        refuse(batch, t)
        columns = plan_columns(batch)
        verdict = code.batch(*packed, *columns, *ranges, floats, reasons)
    if verdict != jit.IN_RANGE:
        check_shapes(batch)
        refuse(batch, t)
        raise AssertionError("the compiled checks and the plan check disagree")
    if size <= SMALL:
        tenants = few_tenants(batch)
        if tenants is not None:
            return settle_few(floats, reasons, tenants, columns[2].tolist(), ctx)
    return settle_round(floats, reasons, batch, ctx, t, code=code)
