"""Jobs past what a trace keeps in memory, spilled to a private temporary file in batches and
read back in order: a later pass reads them without parsing the trace again, and memory stays
bounded by a batch."""

from __future__ import annotations

import contextlib
import os
import pickle
import tempfile
import weakref
from collections.abc import Iterator
from types import MappingProxyType

from twin.sim.jobrecord import NO_EXTRAS, JobRecord

BATCH = 4096  # records per pickled batch


class Spill:
    """Records written once, then read back (any number of times) until the spill is freed."""

    def __init__(self) -> None:
        fd, self.path = tempfile.mkstemp(prefix="twin-trace-", suffix=".spill")  # mode 0600
        self._file = os.fdopen(fd, "wb")
        self._batch: list[JobRecord] = []
        self.count = 0
        self._free = weakref.finalize(self, _unlink, self.path)

    def add(self, rec: JobRecord) -> None:
        self._batch.append(rec._replace(extras=dict(rec.extras)))  # a mapping proxy won't pickle
        self.count += 1
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
                    batch: list[JobRecord] = pickle.load(stream)
                except EOFError:
                    return
                for rec in batch:
                    extras = rec.extras
                    yield rec._replace(extras=MappingProxyType(extras) if extras else NO_EXTRAS)

    def free(self) -> None:
        """Delete the file now (else when the spill is garbage)."""
        if not self._file.closed:
            self._file.close()
        self._free()

    def _flush(self) -> None:
        if self._batch:
            pickle.dump(self._batch, self._file, protocol=pickle.HIGHEST_PROTOCOL)
            self._batch = []


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
