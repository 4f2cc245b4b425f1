"""What the kernel answers: one plan's `Verdict`, a batch's `Verdicts` (one array per field),
the round's per-tenant `Shares`, and the `ClusterContext` a round is settled in."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from twin.kernel.plans import INFEASIBLE, Reason

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
