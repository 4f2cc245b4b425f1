"""The checks on a batch of plans before (or where) the compiled loop cannot check them itself:
column shapes, value ranges, the tenant column; and the columns in the compiled types."""

from __future__ import annotations

import operator

import numpy as np

from twin.kernel.plans import LIMITS, PlanBatch
from twin.kernel.tables import Tables

COLUMN_NAMES = ("model", "gpu", "n_gpus", "tp", "pp", "precision", "mode", "micro_batch",
                 "seq_len", "micro_batches", "optimizer", "zero", "checkpointing", "power_cap_w",
                 "tokens")  # fmt: skip
"""The plan columns in the compiled batch's argument order (`twin.kernel.jit.COLUMNS`)."""
FLOAT_ARGS = frozenset(
    ("n_gpus", "tp", "pp", "micro_batch", "seq_len", "micro_batches", "power_cap_w", "tokens")
)
I64 = np.dtype(np.int64)
GET_COLUMNS = operator.attrgetter(*COLUMN_NAMES)
MAX_TENANT = LIMITS["tenant"][1]


def columns(batch: PlanBatch) -> tuple[np.ndarray, ...]:
    """The plan columns in the formula's argument order, contiguous, writeable and aligned, in
    the compiled types (the precision codes column-major): the types the batch is compiled for."""
    return tuple(
        np.require(getattr(batch, n), np.float64 if n in FLOAT_ARGS else np.int64,
                   ("F" if n == "precision" else "C", "W", "A"))
        for n in COLUMN_NAMES
    )  # fmt: skip


def check_shapes(batch: PlanBatch) -> None:
    """Refuse columns of the wrong length or shape (the compiled loop reads row i of each)."""
    size = len(batch)
    for name in COLUMN_NAMES:
        col = np.asarray(getattr(batch, name))
        want = (size, 6) if name == "precision" else (size,)
        if col.shape != want:
            raise ValueError(f"invalid plans: {name} has shape {col.shape}, expected {want}")
    if len(batch.tenant) not in (0, size):
        raise ValueError(f"invalid plans: tenant has {len(batch.tenant)} rows, expected {size}")


def refuse(batch: PlanBatch, t: Tables) -> None:
    """Raise naming what is out of range (nothing is when this returns)."""
    problems = batch.problems(t.model_count, len(t.gpu_names))
    if problems:
        raise ValueError("invalid plans: " + "; ".join(problems))


def tenants(batch: PlanBatch, t: Tables) -> tuple[np.ndarray, int]:
    """The tenant column as int64 (all zeros when the batch names none), range-checked, and
    the highest tenant + 1."""
    size, tenant = len(batch), batch.tenant
    if not len(tenant):
        return np.zeros(size, dtype=np.int64), 1 if size else 0
    if len(tenant) != size:
        check_shapes(batch)
    if not size:
        return tenant.astype(np.int64), 0
    lo, hi = LIMITS["tenant"]
    top = tenant.max()
    if not (tenant.min() >= lo and top <= hi):  # NaN fails both
        refuse(batch, t)
    if tenant.dtype == I64:
        return tenant, int(top) + 1
    whole = tenant.astype(np.int64)
    if not np.array_equal(whole, tenant):
        row = int(np.flatnonzero(whole != tenant)[0])
        raise ValueError(f"invalid plans: tenant = {tenant[row]} (row {row}) is not a whole number")
    return whole, int(top) + 1
