"""Memory for a large batch's verdicts, reused once nothing refers to it any more.

A batch of 10^6 plans returns 88 MB of verdicts. Memory that large comes fresh from the
operating system, which zeroes it page by page: about a quarter of the batch's time. So the
last large block is kept, and the next batch of its size or smaller writes into it again when
no verdicts, rows or views of it are alive (its reference count says so). A loop that evaluates
batch after batch, keeping each result only while it reads it, touches the same memory. At
most one block is kept; a result still held is never written to.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

REUSE_MIN_ROWS = 1 << 16
"""Smaller blocks come from the allocator's own free memory: nothing to gain."""

_lock = threading.Lock()
_kept: list[np.ndarray] = []  # at most one byte buffer
_UNREFERENCED = 3  # the list's reference, the caller's name, getrefcount's argument


def verdict_block(rows: int, floats: int) -> tuple[np.ndarray, np.ndarray]:
    """A C-contiguous (floats, rows) float64 array and a rows-long int64 array, uninitialised."""
    if rows < REUSE_MIN_ROWS:
        return np.empty((floats, rows)), np.empty(rows, dtype=np.int64)
    split, nbytes = floats * rows * 8, (floats + 1) * rows * 8
    with _lock:
        buf = _kept[0] if _kept else None
        if buf is None or buf.nbytes < nbytes or sys.getrefcount(buf) != _UNREFERENCED:
            buf = np.empty(nbytes, dtype=np.uint8)
            _kept[:] = [buf]
        block = buf[:split].view(np.float64).reshape(floats, rows)
        reasons = buf[split:nbytes].view(np.int64)
    return block, reasons


def release() -> None:
    """Drop the kept block (its memory goes once no result refers to it)."""
    with _lock:
        _kept.clear()
