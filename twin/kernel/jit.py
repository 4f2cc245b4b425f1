"""The formula compiled with numba, for single plans and batches alike.

`twin.kernel.compile` turns `formula.assess` into scalar source: per mode for a single plan
(`one`), and for the batch one branch-free loop body (both modes, every selection between
computed values) inlined into a loop that range-checks each value as it reads it. This module
writes both to a module file in the cache directory (named by a hash of its source, so an edited
formula or table layout gets a new file) and imports it. numba compiles it on first use and
caches the machine code beside it (`cache=True`), so later processes load it in milliseconds;
`warm()` compiles ahead (the Makefile and the Dockerfile call it). `error_model="numpy"` keeps
IEEE division (no zero-division checks), and without `fastmath` nothing is reassociated or
fused: the compiled numbers are the numpy path's, bit for bit (the tests check).

The batch loop vectorises (8 lanes with AVX-512: a table read is a gather, every lane performs
the same operations): its array arguments are declared `noalias` and LLVM is asked for 8 lanes
while it compiles. Tables are arguments, not constants: any `Tables` works with the same
compiled code. Tables read with the same key are interleaved (one row per key), so a plan's
reads touch few cache lines.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from twin.kernel import formula
from twin.kernel.compile import Slot, flat_source, packed_source, table_keys
from twin.kernel.tables import Tables

CACHE_ENV = "TWIN_CACHE_DIR"
MODULE = "twin_kernel_compiled"

# The single-plan dispatcher and the round sums, written by hand.
_HANDWRITTEN = """

@njit(**OPTIONS)
def one(F, I, model, gpu, n, tp, pp, pe, pa, pm, px, pn, ph, mode, mb, seq, mbs, opt, zero, ckpt,
        cap_w, tokens):
    if mode == 0:
        return assess_train(F, I, model, gpu, n, tp, pp, pe, pa, pm, px, pn, ph, mode, mb, seq,
                            mbs, opt, zero, ckpt, cap_w, tokens)
    return assess_serve(F, I, model, gpu, n, tp, pp, pe, pa, pm, px, pn, ph, mode, mb, seq, mbs,
                        opt, zero, ckpt, cap_w, tokens)


@njit(**OPTIONS)
def tenant_sums(tenant, n, score, count):
    gpus = np.zeros(count)
    utility = np.zeros(count)
    for i in range(tenant.shape[0]):
        k = tenant[i]
        gpus[k] += n[i]
        utility[k] += score[i] * n[i]
    return gpus, utility


@njit(**OPTIONS)
def spread(values, index, out):
    for i in range(index.shape[0]):
        out[i] = values[index[i]]
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


COLUMNS = ("model", "gpu", "n", "tp", "pp", "prec", "mode", "mb", "seq", "mbs", "opt", "zero",
           "ckpt", "cap_w", "tokens")  # fmt: skip
"""The batch's plan columns, in its argument order (`prec` holds the six precision codes)."""
PRECISION_PARAMS = ("pe", "pa", "pm", "px", "pn", "ph")
IN_RANGE, OUT_OF_RANGE, WRONG_SHAPE = 0, 1, 2
"""What the batch returns: all values in range, some value out of range (the outputs are then
meaningless), a column of the wrong length (nothing was read)."""
INT_PARAMS = frozenset(("model", "gpu", *PRECISION_PARAMS, "mode", "opt", "zero", "ckpt"))
"""The formula's integer parameters: codes that index tables."""


def _batch_source(shape: Layout) -> str:
    """The batch loop: each row's values read, range-checked (codes clamped into range, so a
    bad row never reads outside the tables: the caller refuses the batch when told), then the
    formula inlined branch-free and its outputs stored. With no calls or branches in it, LLVM
    vectorises the loop: one table read per lane, the same IEEE operations per lane."""
    params, body, returned = flat_source(formula.assess, shape.slots, shape.ints)
    expected = [c for c in COLUMNS if c != "prec"]
    expected[5:5] = PRECISION_PARAMS
    assert params == expected, params  # the formula's parameters are the columns, in order
    # The loop's own names start with "_b" (the formula's never do: its names are checked).
    assert not any(line.startswith("_b") for line in body)
    lines = []
    for k, name in enumerate(params):
        if name in PRECISION_PARAMS:
            read = f"_bc_prec[_bi, {PRECISION_PARAMS.index(name)}]"
        else:
            read = f"_bc_{name}[_bi]"
        if name in INT_PARAMS:
            lines += [f"_br = {read}", f"{name} = min(max(_br, _bklo[{k}]), _bkhi[{k}])",
                      f"_bad |= {name} != _br"]  # fmt: skip
        else:
            outside = f"({name} < _bflo[{k}]) | ({name} > _bfhi[{k}]) | ({name} != {name})"
            lines += [f"{name} = {read}", f"_bad |= {outside}"]
    lines += body
    # The outputs' first rows (the caller's block may have more, such as a credit row).
    lines += [f"_bout[{k}, _bi] = {name}" for k, name in enumerate(returned[:-1])]
    lines.append(f"_breasons[_bi] = {returned[-1]}")
    args = ", ".join(f"_bc_{c}" for c in COLUMNS)
    lengths = " | ".join(f"(_bc_{c}.shape[0] != _bn)" for c in COLUMNS)
    return (
        "@njit(**BATCH_OPTIONS)\n"
        f"def batch(F, I, {args}, _bklo, _bkhi, _bflo, _bfhi, _bout, _breasons):\n"
        "    _bn = _bc_model.shape[0]\n"
        f"    if {lengths} | (_bc_prec.shape[1] != 6) | (_bout.shape[0] < 9)"
        " | (_bout.shape[1] != _bn) | (_breasons.shape[0] != _bn):\n"
        f"        return {WRONG_SHAPE}\n"
        "    _bad = False\n"
        "    for _bi in range(_bn):\n"
        + "".join(f"        {line}\n" for line in lines)
        + f"    return {OUT_OF_RANGE} if _bad else {IN_RANGE}\n"
    )


def source(shape: Layout) -> str:
    """The generated module: the formula per mode and the single-plan dispatcher, the round
    sums, and the batch loop."""
    variants = [
        packed_source(formula.assess, f"assess_{name}", shape.slots, shape.ints, train=train)
        for name, train in (("train", True), ("serve", False))
    ]
    body = "\n\n\n".join(f"@njit(**OPTIONS)\n{v}" for v in variants)
    options = '{**OPTIONS, "noalias": True}' if _noalias_option() else "OPTIONS"
    return (_HEAD + f"BATCH_OPTIONS = {options}\n\n\n" + body + "\n" + _HANDWRITTEN + "\n\n"
            + _batch_source(shape))  # fmt: skip


def _noalias_option() -> bool:
    """Make numba's `noalias` flag (LLVM `noalias` on array arguments) a decorator option.

    Without it LLVM cannot rule out that the outputs overlap the tables and leaves the batch
    loop scalar (about 2x slower here, with AVX-512 3x). The flag is part of numba's compiler
    but not of its public options; where it is missing the batch runs unvectorised. Sound for
    the batch: its outputs are arrays it was given fresh; inputs that overlap are only read.
    """
    from numba.core import compiler, cpu, options

    mapping = getattr(options, "_mapping", None)
    if not hasattr(compiler.Flags, "noalias") or mapping is None:
        return False
    if not hasattr(cpu.CPUTargetOptions, "noalias"):
        cpu.CPUTargetOptions.noalias = mapping("noalias")
    return True


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
    batch: Any  # -> IN_RANGE, OUT_OF_RANGE or WRONG_SHAPE; raises TypeError on other types
    tenant_sums: Any  # (tenant, n, score, count) -> GPUs and utility per tenant, in row order
    spread: Any  # (values, index, out): out[i] = values[index[i]]


_MODULES: dict[str, Compiled] = {}
_READY: dict[int, tuple[Tables, Compiled, Packed]] = {}  # id(tables) -> ...; kept alive
_MAKING = threading.RLock()


def for_tables(tables: Tables) -> tuple[Compiled, Packed]:
    """The compiled formula for `tables`' layout, and the tables packed for it (both made once
    per tables object)."""
    known = _READY.get(id(tables))
    if known is None or known[0] is not tables:
        with _MAKING:  # threads (a gateway's environment calls) make it once, one at a time
            known = _READY.get(id(tables))
            if known is None or known[0] is not tables:
                shape = layout(tables)
                packed = pack(tables, shape)
                known = (tables, compiled(shape, packed), packed)
                _READY[id(tables)] = known
    return known[1], known[2]


def loaded(tables: Tables) -> bool:
    """Whether the compiled formula for `tables` is loaded in this process already."""
    known = _READY.get(id(tables))
    return known is not None and known[0] is tables


def compiled(shape: Layout, packed: Packed) -> Compiled:
    """Import (generating on first use) the module for `shape`; compile or load its code (a
    first call on `packed`, tables laid out by `shape`)."""
    text = source(shape)
    import numba

    digest = hashlib.sha256(f"{text}\n{numba.__version__}\n{sys.version}".encode()).hexdigest()
    with _MAKING:
        return _MODULES.get(digest) or _made(digest, text, packed)


def _made(digest: str, text: str, packed: Packed) -> Compiled:
    path = cache_dir() / f"kernel-{digest[:16]}" / f"{MODULE}.py"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        partial.write_text(text)
        partial.replace(path)  # atomic: concurrent processes see a whole file or none
    module = _import(path, digest)
    _warm(module, packed)
    made = Compiled(module.one, module.batch, module.tenant_sums, module.spread)
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


@contextmanager
def _wide_vectors() -> Iterator[None]:
    """Let LLVM vectorise the kernel's loops 8 lanes wide while they compile (by default it
    stops at 4 on AVX-512 machines, about half the speed here; narrower hardware splits the
    lanes). LLVM's options are process-wide, so the default is restored after."""
    import llvmlite.binding as llvm

    llvm.set_option("", "-force-vector-width=8")
    try:
        yield
    finally:
        llvm.set_option("", "-force-vector-width=0")


def _warm(module: ModuleType, packed: Packed) -> None:
    """Compile (or load from the cache) the entry points for the plan column types, with valid
    plans (the first model and accelerator) read from real tables; the batch for precision
    codes stored column-major (the fast layout) and row-major."""
    f, i = np.zeros(2), np.zeros(2, dtype=np.int64)
    lo, hi = np.zeros(len(COLUMNS) + 5, dtype=np.int64), np.ones(len(COLUMNS) + 5, dtype=np.int64)
    with _wide_vectors():  # only the batch loop: LLVM reports every other loop it cannot widen
        for prec in (np.zeros((2, 6), dtype=np.int64, order="F"), np.zeros((2, 6), dtype=np.int64)):
            module.batch(packed.floats, packed.ints, i, i, f + 1, f + 1, f + 1, prec, i, f + 1,
                         f + 1, f + 1, i, i, i, f, f, lo, hi, lo + 0.0, hi + 1.0,
                         np.zeros((9, 2)), np.zeros(2, dtype=np.int64))  # fmt: skip
    module.one(packed.floats, packed.ints, 0, 0, 1.0, 1.0, 1.0, 0, 0, 0, 0, 0, 0, 0, 1.0, 1.0,
               1.0, 0, 0, 0, 0.0, 0.0)  # fmt: skip
    gpus, _ = module.tenant_sums(i, f, f, 1)
    module.spread(gpus, i, f)
    # Other column types or layouts raise TypeError (the caller converts them) rather than
    # compiling anew for seconds.
    module.batch.disable_compile()


def warm() -> float:
    """Compile ahead for the shipped tables (or load the cache); the seconds it took."""
    from twin.kernel.tables import default_tables

    started = time.perf_counter()
    for_tables(default_tables())
    return time.perf_counter() - started
