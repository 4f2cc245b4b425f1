"""Benchmarks: per-core rates against the design targets, JSON last.

Each benchmark prints readable lines, then one JSON line whose keys carry units
(`jobs_per_s`, `steps_per_s`, ...) and a `*_vs_target` ratio (>= 1 meets the target).
Rates are per core: the twin runs single-threaded, and CPU time (not wall time) is the
denominator so a busy shared machine distorts figures less. Medians over repetitions.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import orjson

from twin.bench.harness import Result
from twin.bench.quoted import guard

BENCHMARKS = {
    "sim": "twin.bench.sim:bench_sim",
    "rl": "twin.bench.rl:bench_rl",
    "kernel": "twin.bench.kernel:bench_kernel",
    "replay": "twin.bench.replay:bench_replay",
    "nodes": "twin.bench.nodes:bench_nodes",
    "gateway": "twin.bench.gateway:bench_gateway",
    "hostile": "twin.bench.hostile:bench_hostile",
    "startup": "twin.bench.startup:bench_startup",
    "export": "twin.bench.export:bench_export",
    "sweep": "twin.bench.sweep:bench_sweep",
    "arena": "twin.bench.parallel:bench_arena",
    "tenants": "twin.bench.tenants:bench_tenants",
    "fill": "twin.bench.fill:bench_fill",
    "forecast": "twin.bench.forecast:bench_forecast",
}
"""Each benchmark by name, as `module:function` (imported only when it runs)."""


def benchmark(name: str) -> Callable[..., Result]:
    module, _, function = BENCHMARKS[name].partition(":")
    bench: Callable[..., Result] = getattr(importlib.import_module(module), function)
    return bench


def run_benchmarks(which: str, *, as_json: bool, quick: bool, libratio: Path | None = None) -> int:
    """Run one benchmark or all; 2 for an unknown name. `libratio`, a checkout of the seed's
    kernel, runs its benchmark beside the kernel's.

    `all` runs each benchmark in a fresh interpreter, so none inherits another's heap (whose
    garbage collections would show up as latency) or memory high-water mark.
    """
    if which == "all":
        flags = [*(["--json"] if as_json else []), *(["--quick"] if quick else [])]
        codes = [
            subprocess.run(
                [sys.executable, "-m", "twin", "bench", name, *flags,
                 *(["--libratio", str(libratio)] if libratio and name == "kernel" else [])],
                check=False,
            ).returncode
            for name in BENCHMARKS
        ]  # fmt: skip
        return max(codes)
    if which not in BENCHMARKS:
        allowed = ", ".join(["all", *BENCHMARKS])
        print(f"twin: error: unknown benchmark {which!r}; allowed: {allowed}", file=sys.stderr)
        return 2
    if libratio is not None and which != "kernel":
        print("twin: error: --libratio goes with the kernel benchmark (or all)", file=sys.stderr)
        return 2
    result = benchmark(which)(quick, libratio) if libratio else benchmark(which)(quick)
    guard(which, result, quick=quick)
    if not as_json:
        for line in result.lines:
            print(line, flush=True)
    print(orjson.dumps({"bench": which, **result.figures}).decode(), flush=True)
    return 0
