"""The allocation kernel: numpy and the standard library only.

`evaluate(batch)` scores a structure-of-arrays batch of allocation plans in one vectorised pass;
`evaluate_one(plan)` is the same formula compiled to plain Python for a single plan, and returns
exactly the batch path's numbers.
"""

from twin.kernel.evaluate import ClusterContext, Verdict, Verdicts, evaluate, evaluate_one
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
    "default_tables",
    "evaluate",
    "evaluate_one",
    "reason_names",
]
