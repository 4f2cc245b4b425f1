"""Latency a user feels: how long a command takes to answer, and how much of a small job is
start-up rather than work. Wall-clock medians of fresh `twin` processes."""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from twin.bench.harness import Result

TARGET_MS = 150.0
QUICK = (["--version"], ["--help"], ["scenarios"], ["run", "--help"])


def _wall_ms(argv: list[str], repeats: int) -> float:
    """Median wall milliseconds of `twin ARGV` in a fresh interpreter."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "twin", *argv], capture_output=True, check=True)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def _work_ms(fn: object, repeats: int) -> float:
    """Median wall milliseconds of the in-process work (after a warm-up call)."""
    assert callable(fn)
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def bench_startup(quick: bool) -> Result:
    from twin.replay.run import replay
    from twin.replay.synth import generate_itp
    from twin.sim import scenarios
    from twin.sim.runner import run_episode

    repeats = 3 if quick else 7
    r = Result()
    r.lines.append(f"start-up: wall ms, median of {repeats} fresh processes")
    for argv in QUICK:
        ms = _wall_ms(argv, repeats)
        key = "_".join(a.strip("-") for a in argv)
        r.figures[f"{key}_ms"] = round(ms, 1)
        r.lines.append(f"  twin {' '.join(argv):<14} {ms:6.0f} ms (target <= {TARGET_MS:.0f})")
    worst = max(v for k, v in r.figures.items() if isinstance(v, float))
    r.figures["quick_commands_vs_target"] = round(TARGET_MS / worst, 2)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.csv"
        generate_itp(trace, 1000, seed=0)
        small = {
            "replay_1k": (["replay", "--trace", str(trace)], lambda: replay(trace)),
            "run_default": (["run"], lambda: run_episode(scenarios.load("default"))),
        }
        for key, (argv, fn) in small.items():
            total, work = _wall_ms(argv, repeats), _work_ms(fn, repeats)
            r.figures[f"{key}_total_ms"] = round(total, 1)
            r.figures[f"{key}_work_ms"] = round(work, 1)
            r.lines.append(
                f"  twin {' '.join(argv[:1]):<14} {total:6.0f} ms: start-up {total - work:,.0f} ms"
                f" + work {work:,.0f} ms"
            )
    return r
