"""Allocation plans: one dataclass for a single plan, structure-of-arrays for a batch."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
GROUPS = ("embedding", "attention", "mlp", "moe", "norm", "head")
MODES = ("train", "infer")
OPTIMIZERS = ("none", "sgd", "adam")
FP32, TF32, BF16, FP16, FP8, INT8 = range(6)


class Reason(enum.IntFlag):
    """Why a plan is infeasible, unstable or floored (a bit set per plan)."""

    OOM = 1
    UNSUPPORTED_PRECISION = 2
    POWER_CAP = 4
    BAD_PARALLELISM = 8
    UNSTABLE = 16
    DEGENERATE_ALL_FP8 = 32
    DEGENERATE_ALL_FP32 = 64
    DEGENERATE_ZERO_GPUS = 128
    DEGENERATE_HOARDING = 256


INFEASIBLE = Reason.OOM | Reason.UNSUPPORTED_PRECISION | Reason.POWER_CAP | Reason.BAD_PARALLELISM


def reason_names(bits: int) -> list[str]:
    """The reason codes set in `bits`, lower-case, in bit order."""
    return [str(r.name).lower() for r in Reason if bits & r]


@dataclass(frozen=True, slots=True)
class Plan:
    """One allocation: a model on `n_gpus` GPUs of one type, precision per layer group.

    Sizes (`SIZE_FIELDS`) may be given as ints; they are held as floats.
    `precision` holds one code per group in `GROUPS` order (indices into `PRECISIONS`);
    `tokens` is the job's work (training tokens, or generated tokens when serving).
    `power_cap_w` is a per-GPU cap (0: the board's TDP).
    """

    model: int
    gpu: int
    n_gpus: float
    precision: tuple[int, int, int, int, int, int] = (BF16,) * 6
    tp: float = 1
    pp: float = 1
    mode: int = 0
    micro_batch: float = 1
    seq_len: float = 4096
    micro_batches: float = 8
    optimizer: int = 2
    zero: int = 0
    checkpointing: int = 0
    power_cap_w: float = 0.0
    tokens: float = 0.0
    tenant: int = 0

    def __post_init__(self) -> None:
        # Sizes are whole numbers held as floats, as in a batch (and faster to compute with).
        for name in SIZE_FIELDS:
            object.__setattr__(self, name, float(getattr(self, name)))
        problems = check(
            {name: [getattr(self, name)] for name in SCALAR_FIELDS}, [list(self.precision)]
        )
        if problems:
            raise ValueError(f"invalid plan: {problems[0]}")


SCALAR_FIELDS = tuple(f.name for f in fields(Plan) if f.name != "precision")
SIZE_FIELDS = (
    "n_gpus",
    "tp",
    "pp",
    "micro_batch",
    "seq_len",
    "micro_batches",
    "power_cap_w",
    "tokens",
)
"""Fields a batch holds as float64 (whole numbers where the plan says int)."""

SMALL_CHECK = 64  # up to this many rows are checked in Python (numpy calls cost more)

LIMITS: dict[str, tuple[float, float]] = {
    "n_gpus": (0, 1 << 20),
    "tp": (1, 1 << 20),
    "pp": (1, 1 << 20),
    "mode": (0, 1),
    "micro_batch": (1, 1 << 30),
    "seq_len": (1, 1 << 30),
    "micro_batches": (1, 1 << 30),
    "optimizer": (0, len(OPTIMIZERS) - 1),
    "zero": (0, 3),
    "checkpointing": (0, 1),
    "power_cap_w": (0.0, 1e6),
    "tokens": (0.0, 1e18),
    "tenant": (0, 1 << 20),
}


def check(
    columns: dict[str, Any], precision: Any, n_models: int = 1 << 20, n_gpus: int = 1 << 20
) -> list[str]:
    """What is out of range in plan columns (lists or arrays), as readable lines."""
    problems = []
    bounds = {**LIMITS, "model": (0, n_models - 1), "gpu": (0, n_gpus - 1)}
    for name, (lo, hi) in bounds.items():
        col = columns[name]
        small = len(col) <= SMALL_CHECK
        values = col.tolist() if small and isinstance(col, np.ndarray) else col
        # Written so that NaN (which compares false) counts as out of range.
        if len(values) and (
            not all(lo <= v <= hi for v in values)
            if small
            else not (col.min() >= lo and col.max() <= hi)
        ):
            bad = next(i for i, v in enumerate(np.asarray(col).tolist()) if not lo <= v <= hi)
            problems.append(f"{name} = {values[bad]} (row {bad}) is outside [{lo}, {hi}]")
    prec = np.asarray(precision)
    if prec.size and (prec.min() < 0 or prec.max() > len(PRECISIONS) - 1):  # one check per batch
        bad = int(np.flatnonzero(((prec < 0) | (prec > 5)).any(axis=-1))[0])
        problems.append(f"precision {prec[bad].tolist()} (row {bad}) has a code outside 0..5")
    return problems


@dataclass(frozen=True)
class PlanBatch:
    """B plans as arrays: every `Plan` field is a length-B array; `precision` is B x 6 codes.

    Sizes (`SIZE_FIELDS`) are float64 holding whole numbers, codes are int64. `precision` is
    fastest column-major (Fortran order, as `from_plans` makes it: each code a contiguous
    column, which the compiled batch reads 8 rows at a time); row-major works too.
    """

    model: np.ndarray
    gpu: np.ndarray
    n_gpus: np.ndarray
    precision: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    mode: np.ndarray
    micro_batch: np.ndarray
    seq_len: np.ndarray
    micro_batches: np.ndarray
    optimizer: np.ndarray
    zero: np.ndarray
    checkpointing: np.ndarray
    power_cap_w: np.ndarray
    tokens: np.ndarray
    tenant: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.model)

    @classmethod
    def from_plans(cls, plans: list[Plan]) -> PlanBatch:
        """Pack plans into arrays (row i is plans[i])."""
        cols: dict[str, np.ndarray] = {
            name: np.array(
                [getattr(p, name) for p in plans],
                dtype=np.float64 if name in SIZE_FIELDS else np.int64,
            )
            for name in SCALAR_FIELDS
        }
        precision = np.array([p.precision for p in plans], dtype=np.int64).reshape(len(plans), 6)
        return cls(precision=np.asfortranarray(precision), **cols)

    def row(self, i: int) -> Plan:
        """Plan i as a dataclass of Python numbers."""
        values: dict[str, Any] = {name: getattr(self, name)[i].item() for name in SCALAR_FIELDS}
        prec = tuple(int(x) for x in self.precision[i])
        assert len(prec) == 6
        return Plan(precision=prec, **values)

    def problems(self, n_models: int, n_gpus: int) -> list[str]:
        """What is out of range, as readable lines (empty when the batch is valid)."""
        return check({n: getattr(self, n) for n in SCALAR_FIELDS}, self.precision, n_models, n_gpus)

    def take(self, index: np.ndarray) -> PlanBatch:
        """The plans at `index`, in that order."""
        return PlanBatch(**{f.name: getattr(self, f.name)[index] for f in fields(self)})
