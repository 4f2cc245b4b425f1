"""Pinned event logs you can diff: what a pin keeps, and what a failing pin says.

A pin keeps the log's SHA-256, its per-kind counts and a hash of every block of lines; a small
log is kept whole (gzip) beside its pin. When a log no longer matches, the message names the
kinds whose counts changed and the first event that differs: the expected and actual lines
and the fields that differ where the log is kept whole, else the first differing block's lines.
"""

from __future__ import annotations

import gzip
import hashlib
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

BLOCK_LINES = 1024
KEEP_BYTES = 256 * 1024  # logs whose gzip is at most this are kept whole


def pin(data: bytes) -> dict[str, Any]:
    """What a pin keeps of `data` (a JSONL event log)."""
    lines = data.splitlines()
    return {
        "sha256": hashlib.sha256(data).hexdigest(),
        "events": len(lines),
        "kinds": dict(sorted(_kinds(lines).items())),
        "blocks": _blocks(lines),
    }


def keep(data: bytes, path: Path) -> bool:
    """Keep the whole log at `path` if it is small; whether it was."""
    packed = gzip.compress(data, compresslevel=9, mtime=0)
    if len(packed) > KEEP_BYTES:
        path.unlink(missing_ok=True)
        return False
    path.write_bytes(packed)
    return True


def difference(data: bytes, pinned: dict[str, Any], whole: Path | None) -> str:
    """'' when `data` matches the pin; else what changed, first difference first."""
    if hashlib.sha256(data).hexdigest() == pinned["sha256"]:
        return ""
    lines = data.splitlines()
    out = [f"the log differs from its pin ({len(lines)} events, pinned {pinned['events']})"]
    counts = _kinds(lines)
    for kind in sorted(set(counts) | set(pinned["kinds"])):
        was, now = pinned["kinds"].get(kind, 0), counts.get(kind, 0)
        if was != now:
            out.append(f"  {kind}: {was} -> {now}")
    if whole is not None and whole.exists():
        out += _first_line(gzip.decompress(whole.read_bytes()).splitlines(), lines)
    else:
        out += _first_block(lines, pinned["blocks"])
    return "\n".join(out)


def _kinds(lines: list[bytes]) -> Counter[str]:
    return Counter(orjson.loads(line)["kind"] for line in lines)


def _blocks(lines: list[bytes]) -> list[str]:
    return [
        hashlib.sha256(b"\n".join(lines[i : i + BLOCK_LINES])).hexdigest()[:16]
        for i in range(0, len(lines), BLOCK_LINES)
    ]


def _first_line(expected: list[bytes], actual: list[bytes]) -> list[str]:
    for n, (was, now) in enumerate(zip(expected, actual, strict=False), start=1):
        if was != now:
            a, b = orjson.loads(was), orjson.loads(now)
            fields = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            return [f"first difference at event {n}: fields {fields}",
                    f"  expected {was.decode()}", f"  actual   {now.decode()}"]  # fmt: skip
    n = min(len(expected), len(actual)) + 1
    extra = expected[n - 1 : n] or actual[n - 1 : n]
    return [f"first difference at event {n}: only one log has it: {extra[0].decode()}"]


def _first_block(actual: list[bytes], pinned: list[str]) -> list[str]:
    for b, (was, now) in enumerate(zip(pinned, _blocks(actual), strict=False)):
        if was != now:
            first = b * BLOCK_LINES
            shown = actual[first : first + 3]
            return [
                f"first difference within events {first + 1}-{first + BLOCK_LINES} (the log is "
                "too large to keep whole; its first events there now):",
                *(f"  actual   {line.decode()}" for line in shown),
            ]
    n = min(len(pinned), len(_blocks(actual))) * BLOCK_LINES + 1
    return [f"first difference from event {n}: one log is longer"]
