"""Argument types the commands share: each checks a flag's value where it is parsed, so a bad
one is argparse's usage and one line naming the flag, what it allows and what it got (exit 2),
never a traceback from deep inside the command."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

SEED_MAX = 2**32 - 1  # numpy's seed sequence takes non-negative integers; a run's seed fits 32 bits
PORT_MAX = 65_535
COUNT_MAX = 2**31 - 1  # a count (runs, workers, jobs, steps) fits a C int everywhere it goes


def _whole(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} is a whole number (got {text!r})") from None


def seed(text: str) -> int:
    """A seed: a whole number from 0 to 2**32 - 1."""
    value = _whole(text, "a seed")
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"a seed is from 0 to {SEED_MAX:,} (got {text})")
    return value


def port(text: str) -> int:
    """A TCP port: 0 (any free port) to 65535."""
    value = _whole(text, "a port")
    if not 0 <= value <= PORT_MAX:
        raise argparse.ArgumentTypeError(f"a port is from 0 to {PORT_MAX} (got {text})")
    return value


def at_least_one(text: str) -> int:
    """A count of one or more (GPUs, a parallel degree, workers)."""
    return _count(text, 1)


def at_least_zero(text: str) -> int:
    """A count that may be none (elite policies, held-out seeds)."""
    return _count(text, 0)


def _count(text: str, least: int) -> int:
    value = _whole(text, "a count")
    if value < least:
        raise argparse.ArgumentTypeError(f"at least {least} (got {text})")
    if value > COUNT_MAX:
        raise argparse.ArgumentTypeError(f"at most {COUNT_MAX:,} (got {text})")
    return value


def _real(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} is a number (got {text!r})") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{what} is a finite number (got {text})")
    return value


def non_negative(text: str) -> float:
    """A finite number of zero or more (hours, dollars, watts)."""
    value = _real(text, "a quantity")
    if value < 0:
        raise argparse.ArgumentTypeError(f"zero or more (got {text})")
    return value


def positive(text: str) -> float:
    """A finite number above zero (a duration, a rate, a factor)."""
    value = _real(text, "a quantity")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"above 0 (got {text})")
    return value


def positive_ms(text: str) -> int:
    """A duration in milliseconds, above zero."""
    value = _whole(text, "a duration in ms")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a duration in ms is above 0 (got {text})")
    return value


def out_dir(text: str) -> str:
    """A directory a command writes into: one that exists, or one it could create (so a command
    finds out before its work, not after it, that it has nowhere to write). Nothing is left
    behind by the check: a command refused later creates nothing."""
    if not text:
        raise argparse.ArgumentTypeError("an output directory needs a name (got '')")
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} exists and is not a directory")
    missing = []  # the directories the command would create, deepest first
    above = path
    while not above.exists() and above != above.parent:
        missing.append(above)
        above = above.parent
    if not above.is_dir():
        raise argparse.ArgumentTypeError(f"cannot create directory {text}: {above} is a file")
    try:  # created and removed again: only trying tells (permissions, read-only mounts, /proc)
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise argparse.ArgumentTypeError(f"cannot create directory {text}: {reason}") from None
    for made in missing:
        made.rmdir()
    return text


def out_file(text: str) -> str:
    """A file a command writes: not a directory, in a directory that exists or that it could
    create (checked as `out_dir` checks, leaving nothing behind)."""
    if not text:
        raise argparse.ArgumentTypeError("an output file needs a name (got '')")
    path = Path(text)
    if path.is_dir() or text.endswith("/"):
        raise argparse.ArgumentTypeError(f"{text} is a directory; name a file to write")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise argparse.ArgumentTypeError(f"cannot write {text}: permission denied")
        return text
    out_dir(str(path.parent))
    if path.parent.is_dir():  # only trying tells (/proc, read-only mounts)
        try:
            path.open("x").close()
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise argparse.ArgumentTypeError(f"cannot write {text}: {reason}") from None
        path.unlink()
    return text
