"""The garbage collector during a long run: a run allocates tuples by the million (records, SimPy
events) that die young, while what lives long (kept trace jobs, tables) only grows, and each
full collection walks all of it. Inside `collecting_rarely`, young collections wait for more
allocations and full ones come rarely; the settings in force before are restored after."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG = 50_000  # allocations between young collections (CPython's default: 700)
MIDDLE = 50  # young collections between middle ones (10)
OLD = 100  # middle collections between full ones (10)


@contextmanager
def collecting_rarely() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(YOUNG, MIDDLE, OLD)
    try:
        yield
    finally:
        gc.set_threshold(*before)
