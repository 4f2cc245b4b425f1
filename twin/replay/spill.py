"""Jobs past what a trace keeps in memory, spilled to a private temporary file in batches and
read back in order: a later pass reads them without parsing the trace again, and memory stays
bounded by a batch. Records go as plain tuples (a named tuple pickles an order of magnitude
slower), their extras' read-only mappings as dicts."""

from __future__ import annotations

import contextlib
import copyreg
import os
import pickle
import tempfile
import weakref
from collections.abc import Iterator
from types import MappingProxyType
from typing import Any

from twin.sim.jobrecord import NO_EXTRAS, JobRecord

BATCH = 4096  # records per pickled batch
_new = tuple.__new__


def _proxy(mapping: MappingProxyType[str, Any]) -> tuple[Any, tuple[dict[str, Any]]]:
    return _read_only, (dict(mapping),)


def _read_only(mapping: dict[str, Any]) -> MappingProxyType[str, Any]:
    return MappingProxyType(mapping) if mapping else NO_EXTRAS  # type: ignore[return-value]


class Spill:
    """Records written once, then read back (any number of times) until the spill is freed."""

    def __init__(self) -> None:
        fd, self.path = tempfile.mkstemp(prefix="twin-trace-", suffix=".spill")  # mode 0600
        self._file = os.fdopen(fd, "wb")
        self._pickler = pickle.Pickler(self._file, protocol=pickle.HIGHEST_PROTOCOL)
        self._pickler.dispatch_table = {**copyreg.dispatch_table, MappingProxyType: _proxy}
        self._batch: list[tuple[Any, ...]] = []
        self._free = weakref.finalize(self, _unlink, self.path)

    def add(self, rec: JobRecord) -> None:
        self._batch.append(tuple(rec))
        if len(self._batch) >= BATCH:
            self._flush()

    def close(self) -> None:
        """Everything written: the spill can be read."""
        self._flush()
        self._file.close()

    def read(self) -> Iterator[JobRecord]:
        with open(self.path, "rb") as stream:
            while True:
                try:
                    batch: list[tuple[Any, ...]] = pickle.load(stream)
                except EOFError:
                    return
                for row in batch:
                    yield _new(JobRecord, row)

    def free(self) -> None:
        """Delete the file now (else when the spill is garbage)."""
        if not self._file.closed:
            self._file.close()
        self._free()

    def _flush(self) -> None:
        if self._batch:
            self._pickler.dump(self._batch)
            self._pickler.clear_memo()
            self._batch = []


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
