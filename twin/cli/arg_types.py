"""Argument types the commands share: each checks a flag's value where it is parsed, so a bad
one is argparse's usage and one line naming the flag, what it allows and what it got (exit 2),
never a traceback from deep inside the command."""

from __future__ import annotations

import argparse
from pathlib import Path

SEED_MAX = 2**32 - 1  # numpy's seed sequence takes non-negative integers; a run's seed fits 32 bits
PORT_MAX = 65_535


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
    """A count of one or more (GPUs, a parallel degree)."""
    value = _whole(text, "a count")
    if value < 1:
        raise argparse.ArgumentTypeError(f"at least 1 (got {text})")
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
