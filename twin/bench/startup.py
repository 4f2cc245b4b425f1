"""Latency a user feels: how long a command takes to answer, and how much of a small job is
start-up rather than work. Wall-clock medians of fresh `twin` processes."""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from twin.bench.harness import Result
from twin.schema.vocabulary import WARM_SOCKET_ENV

TARGET_MS = 150.0
QUICK = (["--version"], ["--help"], ["scenarios"], ["run", "--help"])


def _wall_ms(argv: list[str], repeats: int, warm: Path | None = None) -> float:
    """Median wall milliseconds of `twin ARGV` in a fresh interpreter (handed to the warm
    process at `warm`, if given; else run without one)."""
    env = {**os.environ, WARM_SOCKET_ENV: str(warm) if warm else ""}
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "twin", *argv], capture_output=True, check=True,
                       env=env)  # fmt: skip
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


@contextlib.contextmanager
def warm_process(directory: Path) -> Iterator[Path]:
    """A `twin warm serve` for the duration; its socket."""
    sock = directory / "warm" / "warm.sock"
    sock.parent.mkdir(mode=0o700)
    argv = [sys.executable, "-m", "twin", "warm", "serve", "--socket", str(sock)]
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not sock.with_suffix(".pid").exists():
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the warm process did not start")
            time.sleep(0.05)
        yield sock
    finally:
        server.terminate()
        server.wait(timeout=30)


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
        warm_ms = {}
        with warm_process(Path(tmp)) as sock:
            for key, (argv, _) in small.items():
                _wall_ms(argv, 1, sock)  # the first command touches what the fork shares
                warm_ms[key] = ms = _wall_ms(argv, repeats, sock)
                r.figures[f"{key}_warm_total_ms"] = round(ms, 1)
                r.lines.append(f"  twin {argv[0]:<14} {ms:6.0f} ms with a warm process "
                               f"(target <= {TARGET_MS:.0f} for replay)")  # fmt: skip
        r.figures["replay_1k_warm_vs_target"] = round(TARGET_MS / warm_ms["replay_1k"], 2)
    return r
