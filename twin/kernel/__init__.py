"""The allocation kernel: numpy, and numba for the compiled formula (imported on first use).

`evaluate(batch)` scores a structure-of-arrays batch of allocation plans and `evaluate_one(plan)`
a single plan, both with the formula compiled by numba, and with exactly the same numbers as the
formula run on numpy arrays (`evaluate(batch, engine="numpy")`, the reference).
"""

from twin.kernel.evaluate import (
    ClusterContext,
    Verdict,
    Verdicts,
    credit_one,
    evaluate,
    evaluate_one,
    floor_hoarding_one,
)
from twin.kernel.plans import GROUPS, PRECISIONS, Plan, PlanBatch, Reason, reason_names
from twin.kernel.tables import Tables, default_tables

__all__ = [
    "GROUPS",
    "PRECISIONS",
    "ClusterContext",
    "Plan",
    "PlanBatch",
    "Reason",
    "Tables",
    "Verdict",
    "Verdicts",
    "credit_one",
    "default_tables",
    "evaluate",
    "evaluate_one",
    "floor_hoarding_one",
    "reason_names",
]
