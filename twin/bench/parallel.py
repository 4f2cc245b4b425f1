"""Parallel runs as a user starts them: fresh `twin sweep` and `twin arena` processes timed on the
wall clock (parallel work is what they buy), the fixed start-up apart from the cost a run adds,
and the scaling efficiency at 1, 2 and all cores.

With T(w, n) the wall seconds of n runs on w workers: a run costs c = (T(1, n2) - T(1, n1)) /
(n2 - n1) on one worker, the fixed start-up is F = T(1, n1) - n1 c (the interpreter, imports,
forking the workers, writing the results), and the efficiency at w workers is T(1, n2) /
(w T(w, n2)), the whole command as a user waits for it. All of it is measured again with the
commands handed to a warm process (`twin warm start`), whose workers fork the pools with the
twin already imported: the start-up a user who keeps one running pays.
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from twin.bench.harness import Result
from twin.bench.startup import warm_process
from twin.schema.vocabulary import WARM_SOCKET_ENV

TARGET_FIXED_S = 0.5
TARGET_EFFICIENCY_2 = 0.9
Command = Callable[[int, int, Path], list[str]]  # (size, workers, out) -> `twin` arguments


def _wall_s(argv: list[str], warm: Path | None) -> float:
    """Wall seconds of `twin ARGV` in a fresh process (handed to the warm process at `warm`,
    if given; else run without one)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", WARM_SOCKET_ENV: str(warm or "")}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "twin", *argv], check=True, capture_output=True,
                   env=env)  # fmt: skip
    return time.perf_counter() - start


def _median_wall_s(command: Command, size: int, workers: int, out: Path, *, repeats: int,
                   warm: Path | None = None) -> float:  # fmt: skip
    """The median wall seconds of `repeats` fresh runs, each into a new directory."""
    tag = "warm" if warm else "cold"
    return statistics.median(
        _wall_s(command(size, workers, out / f"{tag}-{size}-{workers}-{k}"), warm)
        for k in range(repeats)
    )


def levels() -> list[int]:
    """1, 2 and all cores (each once)."""
    return sorted({1, min(2, os.cpu_count() or 1), os.cpu_count() or 1})


def scaling(name: str, command: Command, sizes: tuple[int, int], result: Result, *,
            runs_per_size: int = 1, unit: str = "runs", repeats: int = 3) -> None:  # fmt: skip
    """Time `command` at `sizes` (small, large; `runs_per_size` runs each) on 1 worker, and at
    the large size on every level (medians of `repeats`), in fresh processes and handed to a
    warm one; lines and figures into `result`."""
    small, large = sizes
    points = [(small, 1), *((large, w) for w in levels())]
    with tempfile.TemporaryDirectory() as tmp:
        cold = {p: _median_wall_s(command, *p, Path(tmp), repeats=repeats) for p in points}
        with warm_process(Path(tmp)) as sock:
            warm = {p: _median_wall_s(command, *p, Path(tmp), repeats=repeats, warm=sock)
                    for p in points}  # fmt: skip
    for tag, walls in (("", cold), ("warm_", warm)):
        how = (f"fresh `twin {name}` processes" if not tag else
               "handed to a warm process (`twin warm start`), whose workers fork with the twin "
               "imported")  # fmt: skip
        _report(result, name, tag, how, walls, sizes=sizes, runs_per_size=runs_per_size,
                unit=unit, repeats=repeats)  # fmt: skip


def _report(result: Result, name: str, tag: str, how: str, walls: dict[tuple[int, int], float],
            *, sizes: tuple[int, int], runs_per_size: int, unit: str,
            repeats: int) -> None:  # fmt: skip
    """The per-run cost, the fixed start-up and the efficiency at each level, from `walls`
    (wall seconds by (size, workers))."""
    small, large = sizes
    n1, n2 = small * runs_per_size, large * runs_per_size
    per_run_s = (walls[large, 1] - walls[small, 1]) / (n2 - n1)
    fixed_s = max(walls[small, 1] - n1 * per_run_s, 0.0)
    result.lines.append(f"{name}: {how}, wall, median of {repeats}; {n1} and {n2} {unit} on 1 "
                        f"worker: a run {per_run_s * 1000:,.0f} ms, fixed start-up {fixed_s:.2f} "
                        f"s (target <= {TARGET_FIXED_S})")  # fmt: skip
    key = f"{name}_{tag}"
    result.figures.update({f"{key}per_run_ms": round(per_run_s * 1000, 1),
                           f"{key}fixed_s": round(fixed_s, 2),
                           f"{key}fixed_vs_target": round(TARGET_FIXED_S / max(fixed_s, 1e-3),
                                                          2)})  # fmt: skip
    for workers in levels():
        wall = walls[large, workers]
        whole = walls[large, 1] / (workers * wall)
        target = f" (target >= {TARGET_EFFICIENCY_2:.0%})" if workers == 2 else ""
        result.lines.append(f"  {workers:2d} workers: {n2} {unit} in {wall:.2f} s, "
                            f"{n2 / wall:.1f}/s; efficiency {whole:.0%}{target}")  # fmt: skip
        result.figures.update({f"{key}per_s_{workers}": round(n2 / wall, 2),
                               f"{key}efficiency_{workers}": round(whole, 3)})  # fmt: skip


def sweep_command(seeds: int, workers: int, out: Path) -> list[str]:
    return ["sweep", "--scenario", "default", "--seeds", str(seeds), "--workers", str(workers),
            "--out", str(out)]  # fmt: skip


ARENA_SESSIONS_PER_SEED = 8  # market, 3 agents: the bound, the baseline, 3 mirrors, 3 crosses


def arena_command(seeds: int, workers: int, out: Path) -> list[str]:
    return ["arena", "--scenario", "market", "--agents", "negotiator,fair_share,stepper",
            "--seeds", str(seeds), "--workers", str(workers), "--out", str(out)]  # fmt: skip


def bench_arena(quick: bool) -> Result:
    """Arena sessions (`market`, 3 agents, 8 sessions a seed) on 1, 2 and all cores."""
    r = Result()
    cores = os.cpu_count() or 1
    large = 2 if quick else max(6, math.ceil(10 * cores / ARENA_SESSIONS_PER_SEED))
    scaling("arena", arena_command, (1, large), r, runs_per_size=ARENA_SESSIONS_PER_SEED,
            unit="sessions", repeats=1 if quick else 3)  # fmt: skip
    return r
