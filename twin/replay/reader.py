"""Reading trace files line by line: decoding, CSV, bad lines named or skipped and counted."""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from math import isfinite
from pathlib import Path

from twin.errors import TraceError


class BadFieldError(ValueError):
    """A field that does not parse; the reader turns it into a `TraceError` naming the line."""

    def __init__(self, field: str, value: object, why: str) -> None:
        super().__init__(f"field {field!r} = {value!r}: {why}")
        self.field = field


@dataclass
class ReadLog:
    """What reading a trace skipped, and why: nothing is dropped silently."""

    skip_bad: bool = False
    bad_lines: int = 0
    first_bad: str | None = None
    skipped: Counter[str] = field(default_factory=Counter)

    def bad(self, path: Path, line: int, why: str) -> None:
        """A line that cannot be read: an error, or with `skip_bad` a count."""
        message = f"{path}: line {line}: {why}"
        if not self.skip_bad:
            raise TraceError(message)
        self.bad_lines += 1
        self.first_bad = self.first_bad or message

    def skip(self, reason: str) -> None:
        """A well-formed record left out on purpose (e.g. a pod that never ran)."""
        self.skipped[reason] += 1


def lines(path: Path, log: ReadLog) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line: LF or CRLF, final newline optional, UTF-8 (BOM ok)."""
    try:
        stream = path.open("rb")
    except OSError as exc:
        raise TraceError(f"{path}: cannot open: {exc.strerror}") from None
    with stream:
        for number, raw in enumerate(stream, start=1):
            try:
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                log.bad(path, number, f"not UTF-8 text ({exc.reason} at byte {exc.start})")
                continue
            yield number, text.rstrip("\r\n")


def csv_rows(
    path: Path, log: ReadLog, *, header: list[str] | None = None, columns: Iterable[str] = ()
) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row by column name); `header` for headerless files. Blank lines are passed
    over; a row with the wrong number of fields is a bad line, and so is every row when the
    header lacks one of the `columns` the format needs."""
    numbered = lines(path, log)
    if header is None:
        first = next(((n, t) for n, t in numbered if t.strip()), None)
        if first is None:
            raise TraceError(f"{path}: empty file, no header row")
        try:
            header = [h.strip() for h in next(csv.reader([first[1]]))]
        except csv.Error as exc:
            raise TraceError(f"{path}: line {first[0]}: malformed CSV header: {exc}") from None
    width = len(header)
    missing = [c for c in columns if c not in header]
    if missing:
        absent = BadFieldError(missing[0], None, f"missing column; the file has {sorted(header)}")
        for n, text in numbered:
            if text.strip():
                log.bad(path, n, str(absent))
        return
    current = [0]

    def nonblank() -> Iterator[str]:
        for n, text in numbered:
            if text.strip():
                current[0] = n
                yield text

    texts = nonblank()
    while True:
        try:
            for fields in csv.reader(texts):
                if len(fields) != width:
                    log.bad(path, current[0], f"{len(fields)} fields, the header has {width}")
                    continue
                yield current[0], dict(zip(header, fields, strict=True))
            return
        except csv.Error as exc:
            # A bad line (an over-long field, a stray quote) is skipped or named; reading
            # resumes with a new reader at the next line.
            log.bad(path, current[0], f"malformed CSV: {exc}")


def number(row: dict[str, str], column: str, *, optional: bool = False) -> float | None:
    """A numeric field (surrounding spaces allowed); empty is None when optional."""
    text = row[column]
    try:
        value = float(text)
    except ValueError:
        if not text.strip():
            if optional:
                return None
            raise BadFieldError(column, text, "empty") from None
        raise BadFieldError(column, text, "not a number") from None
    if not isfinite(value):
        raise BadFieldError(column, text, "not a finite number")
    return value


def required(row: dict[str, str], column: str) -> float:
    value = number(row, column)
    assert value is not None
    return value


def count_lines(path: Path) -> int | None:
    """Lines in a text file (a trace's job count, give or take a header); None if unreadable."""
    try:
        with path.open("rb") as stream:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: stream.read(1 << 20), b""))
    except OSError:
        return None
