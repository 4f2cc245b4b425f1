"""Benchmarks: per-core rates against the design targets, JSON last.

Each benchmark prints readable lines, then one JSON line whose keys carry units
(`jobs_per_s`, `steps_per_s`, ...) and a `*_vs_target` ratio (>= 1 meets the target).
Rates are per core: the twin runs single-threaded, and CPU time (not wall time) is the
denominator so a busy shared machine distorts figures less. Medians over repetitions.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import orjson

from twin.bench.gateway import bench_gateway
from twin.bench.harness import Result
from twin.bench.kernel import bench_kernel
from twin.bench.replay import bench_replay
from twin.bench.rl import bench_rl
from twin.bench.sim import bench_sim

BENCHMARKS: dict[str, Callable[[bool], Result]] = {
    "sim": bench_sim,
    "rl": bench_rl,
    "kernel": bench_kernel,
    "replay": bench_replay,
    "gateway": bench_gateway,
}


def run_benchmarks(which: str, *, as_json: bool, quick: bool) -> int:
    """Run one benchmark or all; 2 for an unknown name."""
    names = list(BENCHMARKS) if which == "all" else [which]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        allowed = ", ".join(["all", *BENCHMARKS])
        print(f"twin: error: unknown benchmark {unknown[0]!r}; allowed: {allowed}", file=sys.stderr)
        return 2
    for name in names:
        result = BENCHMARKS[name](quick)
        if not as_json:
            for line in result.lines:
                print(line)
        print(orjson.dumps({"bench": name, **result.figures}).decode())
    return 0
