"""The seed's kernel (Libratio's `kernel_benchmark.py`), run side by side from a checkout.

Libratio evaluates one plan per Python call (state and action dictionaries) and batches by
looping over them; its benchmark prints both rates. This runs it in its own checkout with this
interpreter, so the ratios `twin bench kernel --libratio DIR` prints compare one machine, one
moment.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from twin.errors import TwinError

SCRIPT = "kernel_benchmark.py"
EVALS = 10_000
_RATES = {
    "single": re.compile(r"^\s*Throughput\s*:\s*([\d,]+) evals/sec", re.MULTILINE),
    "batch": re.compile(r"^\s*Batch throughput\s*:\s*([\d,]+) evals/sec", re.MULTILINE),
}


@dataclass(frozen=True)
class LibratioRates:
    """Libratio's evaluations per second: one call at a time, and its batch mode."""

    single_per_s: float
    batch_per_s: float


def run(checkout: Path, evals: int = EVALS, timeout_s: float = 900.0) -> LibratioRates:
    """Run the benchmark in `checkout`; its two rates (TwinError naming what went wrong)."""
    script = checkout / SCRIPT
    if not script.is_file():
        raise TwinError(f"{checkout}: no {SCRIPT} (expected a SnippyCodes/Libratio checkout)")
    try:
        done = subprocess.run(
            [sys.executable, SCRIPT, str(evals)], cwd=checkout, capture_output=True, text=True,
            timeout=timeout_s, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise TwinError(f"{script}: no result within {timeout_s:.0f} s") from None
    rates = {name: pattern.search(done.stdout) for name, pattern in _RATES.items()}
    if done.returncode != 0 or not all(rates.values()):
        last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or ["no output"]
        raise TwinError(f"{script} failed (exit {done.returncode}): {last[0]}")
    single, batch = (float(m.group(1).replace(",", "")) for m in rates.values() if m)
    return LibratioRates(single, batch)
