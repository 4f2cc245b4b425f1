"""The formula compiled with numba, for single plans and batches alike.

`twin.kernel.compile.packed_source` turns `formula.assess` into scalar source (per mode, tables
read from two packed arrays); this module writes it, with a batch loop around it, to a module
file in the cache directory (named by a hash of its source, so an edited formula or table
layout gets a new file) and imports it. numba compiles it on first use and caches the machine
code beside it (`cache=True`), so later processes load it in milliseconds; `warm()` compiles
ahead (the Makefile and the Dockerfile call it). `error_model="numpy"` keeps IEEE division
(no zero-division checks), and without `fastmath` nothing is reassociated or fused: the
compiled numbers are the numpy path's, bit for bit (the tests check).

Tables are arguments, not constants: any `Tables` works with the same compiled code. Tables read
with the same key are interleaved (one row per key), so a plan's reads touch few cache lines.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from twin.kernel import formula
from twin.kernel.compile import Slot, packed_source, table_keys
from twin.kernel.tables import Tables

CACHE_ENV = "TWIN_CACHE_DIR"
MODULE = "twin_kernel_compiled"

_BATCH_LOOP = """

@njit(**OPTIONS)
def one(F, I, model, gpu, n, tp, pp, pe, pa, pm, px, pn, ph, mode, mb, seq, mbs, opt, zero, ckpt,
        cap_w, tokens):
    if mode == 0:
        return assess_train(F, I, model, gpu, n, tp, pp, pe, pa, pm, px, pn, ph, mode, mb, seq,
                            mbs, opt, zero, ckpt, cap_w, tokens)
    return assess_serve(F, I, model, gpu, n, tp, pp, pe, pa, pm, px, pn, ph, mode, mb, seq, mbs,
                        opt, zero, ckpt, cap_w, tokens)


@njit(**OPTIONS)
def batch(F, I, model, gpu, n, tp, pp, prec, mode, mb, seq, mbs, opt, zero, ckpt, cap_w, tokens,
          out, reasons):
    for i in range(model.shape[0]):
        r = one(F, I, model[i], gpu[i], n[i], tp[i], pp[i], prec[i, 0], prec[i, 1], prec[i, 2],
                prec[i, 3], prec[i, 4], prec[i, 5], mode[i], mb[i], seq[i], mbs[i], opt[i],
                zero[i], ckpt[i], cap_w[i], tokens[i])
        out[0, i] = r[0]
        out[1, i] = r[1]
        out[2, i] = r[2]
        out[3, i] = r[3]
        out[4, i] = r[4]
        out[5, i] = r[5]
        out[6, i] = r[6]
        out[7, i] = r[7]
        out[8, i] = r[8]
        reasons[i] = r[9]


@njit(**OPTIONS)
def within(values, lo, hi):
    for v in values.flat:
        if not (lo <= v <= hi):  # NaN compares false: out of range
            return False
    return True
"""

_HEAD = '''"""Generated from twin/kernel/formula.py by twin.kernel.jit; do not edit."""

import math

import numpy as np
from numba import njit

OPTIONS = {"cache": True, "error_model": "numpy", "nogil": True}


@njit(**OPTIONS)
def _floor(x):
    return np.floor(x)


@njit(**OPTIONS)
def _sqrt(x):
    return math.sqrt(x)

'''


@dataclass(frozen=True)
class Layout:
    """Where each table lives in the packed arrays, and the integer constants."""

    slots: dict[str, Slot]
    ints: dict[str, int]
    groups: tuple[tuple[bool, tuple[str, ...]], ...]  # (ints?, tables interleaved), in order


@dataclass(frozen=True)
class Packed:
    """A `Tables` as the two arrays the compiled formula reads."""

    floats: np.ndarray
    ints: np.ndarray


def layout(tables: Tables) -> Layout:
    """Group the tables by key (same key, same length: interleaved rows) into two arrays."""
    keys = table_keys(formula.assess)
    grouped: dict[tuple[bool, str, int], list[str]] = {}
    ints: dict[str, int] = {}
    for name, value in vars(tables).items():
        if isinstance(value, np.ndarray) and name in keys:
            is_int = value.dtype.kind in "iu"
            grouped.setdefault((is_int, keys[name], len(value)), []).append(name)
        elif isinstance(value, int) and not isinstance(value, bool):
            ints[name] = value
    slots: dict[str, Slot] = {}
    position = {False: 0, True: 0}
    for (is_int, _, length), names in grouped.items():
        for slot, name in enumerate(names):
            slots[name] = ("I" if is_int else "F", position[is_int] + slot, len(names))
        position[is_int] += length * len(names)
    return Layout(slots, ints, tuple((k[0], tuple(v)) for k, v in grouped.items()))


def pack(tables: Tables, shape: Layout) -> Packed:
    """The tables' values in `shape`'s order."""
    parts: dict[bool, list[np.ndarray]] = {False: [], True: []}
    for is_int, names in shape.groups:
        rows = np.stack([np.asarray(getattr(tables, n)) for n in names], axis=1).reshape(-1)
        parts[is_int].append(rows)
    floats = np.concatenate(parts[False]).astype(np.float64) if parts[False] else np.zeros(1)
    ints = np.concatenate(parts[True]).astype(np.int64) if parts[True] else np.zeros(1, np.int64)
    return Packed(np.ascontiguousarray(floats), np.ascontiguousarray(ints))


def source(shape: Layout) -> str:
    """The generated module: the formula per mode, the dispatcher and the batch loop."""
    variants = [
        packed_source(formula.assess, f"assess_{name}", shape.slots, shape.ints, train=train)
        for name, train in (("train", True), ("serve", False))
    ]
    body = "\n\n\n".join(f"@njit(**OPTIONS)\n{v}" for v in variants)
    return _HEAD + "\n" + body + "\n" + _BATCH_LOOP


def cache_dir() -> Path:
    """`$TWIN_CACHE_DIR`, else ~/.cache/cluster-twin (a temporary directory if unwritable)."""
    configured = os.environ.get(CACHE_ENV)
    base = Path(configured) if configured else Path.home() / ".cache" / "cluster-twin"
    try:
        base.mkdir(parents=True, exist_ok=True)
        probe = base / ".probe"
        probe.touch()
        probe.unlink()
    except OSError:
        base = Path(tempfile.gettempdir()) / f"cluster-twin-{os.getuid()}"
        base.mkdir(parents=True, exist_ok=True)
    return base


@dataclass(frozen=True)
class Compiled:
    """The compiled module's entry points, for one table layout."""

    one: Any
    batch: Any
    within: Any  # (array, lo, hi) -> every value in [lo, hi]


_MODULES: dict[str, Compiled] = {}
_READY: dict[int, tuple[Tables, Compiled, Packed]] = {}  # id(tables) -> ...; kept alive


def for_tables(tables: Tables) -> tuple[Compiled, Packed]:
    """The compiled formula for `tables`' layout, and the tables packed for it (both made once
    per tables object)."""
    known = _READY.get(id(tables))
    if known is None or known[0] is not tables:
        shape = layout(tables)
        packed = pack(tables, shape)
        known = (tables, compiled(shape, packed), packed)
        _READY[id(tables)] = known
    return known[1], known[2]


def compiled(shape: Layout, packed: Packed) -> Compiled:
    """Import (generating on first use) the module for `shape`; compile or load its code (a
    first call on `packed`, tables laid out by `shape`)."""
    text = source(shape)
    import numba

    digest = hashlib.sha256(f"{text}\n{numba.__version__}\n{sys.version}".encode()).hexdigest()
    known = _MODULES.get(digest)
    if known is not None:
        return known
    path = cache_dir() / f"kernel-{digest[:16]}" / f"{MODULE}.py"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text)
        partial.replace(path)  # atomic: concurrent processes see a whole file or none
    module = _import(path, digest)
    _warm(module, packed)
    made = Compiled(module.one, module.batch, module.within)
    _MODULES[digest] = made
    return made


def _import(path: Path, digest: str) -> ModuleType:
    name = f"{MODULE}_{digest[:16]}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # numba's cache finds the module again by its name
    spec.loader.exec_module(module)
    return module


def _warm(module: ModuleType, packed: Packed) -> None:
    """Compile (or load from the cache) the entry points for the plan column types, with one
    valid plan (the first model and accelerator) read from real tables."""
    f, i = np.zeros(1), np.zeros(1, dtype=np.int64)
    prec = np.zeros((1, 6), dtype=np.int64)
    module.batch(packed.floats, packed.ints, i, i, f + 1, f + 1, f + 1, prec, i, f + 1, f + 1,
                 f + 1, i, i, i, f, f, np.zeros((9, 1)), np.zeros(1, dtype=np.int64))  # fmt: skip
    module.one(packed.floats, packed.ints, 0, 0, 1.0, 1.0, 1.0, 0, 0, 0, 0, 0, 0, 0, 1.0, 1.0,
               1.0, 0, 0, 0, 0.0, 0.0)  # fmt: skip
    for column in (f, i, prec):
        module.within(column, 0.0, 1.0)


def warm() -> float:
    """Compile ahead for the shipped tables (or load the cache); the seconds it took."""
    from twin.kernel.tables import default_tables

    started = time.perf_counter()
    for_tables(default_tables())
    return time.perf_counter() - started
