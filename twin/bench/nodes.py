"""Node-level replay against counter pools: the same trace on the same GPUs, placed on nodes
(each placement policy) or counted.

The machine's speed drifts by tens of percent over seconds, which swamps a ratio of two runs
made apart. So the cases run in rounds, each round counters then every policy back to back
(each replay in a fresh interpreter, as a user's `twin replay` is), and a policy's ratio is
the median of its per-round ratios."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from twin.bench.harness import Result
from twin.bench.replay import project_traces
from twin.schema.vocabulary import PLACEMENTS

TARGET_RATIO = 0.5  # node-level jobs/s at least half the counter pools' rate
NODES = 1000  # nodes of the generated inventory, 8 GPUs each
OPENB_ROUNDS, ROUNDS = 5, 3  # openb's replays take a fraction of a second
COUNTERS = "counters"

_CHILD = """
import json, sys, time
from pathlib import Path
from twin.replay.run import ReplayOptions, replay
from twin.schema.scheduling import ReplayParams
trace, cluster, gpus, case = sys.argv[1:]
counted = case == "counters"
options = ReplayOptions(
    cluster=None if counted else Path(cluster),
    gpus=int(gpus) if counted else None,
    params=ReplayParams(placement=None if counted else case),
)
cpu, wall = time.process_time(), time.perf_counter()
_, report = replay(Path(trace), options)
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
print(json.dumps({"jobs": report.jobs_replayed, "cpu_s": cpu, "wall_s": wall}))
"""


@dataclass
class Rounds:
    """Per case, the CPU and wall seconds of its replay in each round; the jobs replayed."""

    cases: list[str]
    jobs: int = 0
    cpu_s: dict[str, list[float]] = field(default_factory=dict)
    wall_s: dict[str, list[float]] = field(default_factory=dict)


def _rounds(trace: Path, cluster: Path, gpus: int, cases: list[str], rounds: int) -> Rounds:
    done = Rounds(cases, cpu_s={c: [] for c in cases}, wall_s={c: [] for c in cases})
    for _ in range(rounds):
        for case in cases:
            out = subprocess.run(
                [sys.executable, "-c", _CHILD, str(trace), str(cluster), str(gpus), case],
                check=True, capture_output=True, text=True,
            ).stdout  # fmt: skip
            figures = json.loads(out.strip().splitlines()[-1])
            done.cpu_s[case].append(figures["cpu_s"])
            done.wall_s[case].append(figures["wall_s"])
            done.jobs = figures["jobs"]
    return done


def _inventory(path: Path) -> int:
    """A generated openb-format inventory of NODES 8-GPU nodes; returns its GPUs."""
    lines = ["sn,cpu_milli,memory_mib,gpu,model"]
    lines += [f"node-{i:04d},96000,786432,8,A100" for i in range(NODES)]
    path.write_text("\n".join(lines) + "\n")
    return NODES * 8


def bench_nodes(quick: bool) -> Result:
    r = Result()
    traces = project_traces()
    openb = traces / "alibaba-gpu-v2023-openb"
    cases: list[tuple[str, Path, Path, int]] = []
    with tempfile.TemporaryDirectory() as tmp:
        from twin.replay.synth import generate_itp

        synthetic, inventory = Path(tmp) / "synthetic-100k.csv", Path(tmp) / "nodes.csv"
        generate_itp(synthetic, 20_000 if quick else 100_000, seed=7)
        gpus = _inventory(inventory)
        if openb.is_dir():
            cases.append(("openb", openb / "openb_pod_list_default.csv",
                          openb / "openb_node_list_gpu_node.csv", 6212))  # fmt: skip
        cases.append((f"generated {NODES} nodes", synthetic, inventory, gpus))
        r.lines.append(
            "replay on nodes vs counter pools of the same GPUs: medians of rounds "
            f"({1 if quick else OPENB_ROUNDS} on openb, {1 if quick else ROUNDS} otherwise), "
            "each round every case back to back, each replay in a fresh process"
        )
        for name, trace, cluster, total in cases:
            key = name.split()[0]
            rounds = 1 if quick else OPENB_ROUNDS if key == "openb" else ROUNDS
            policies = list(PLACEMENTS) if not quick or key == "openb" else ["best_fit"]
            _report(r, name, key, _rounds(trace, cluster, total, [COUNTERS, *policies], rounds))
    r.lines.append(f"  target: best_fit >= {TARGET_RATIO}x the counter rate")
    return r


def _report(r: Result, name: str, key: str, rounds: Rounds) -> None:
    counters = rounds.cpu_s[COUNTERS]
    for case in rounds.cases:
        cpu_s, wall_s = (
            statistics.median(rounds.cpu_s[case]),
            statistics.median(rounds.wall_s[case]),
        )
        rate, times = rounds.jobs / cpu_s, f"{cpu_s:.2f} s CPU, {wall_s:.2f} s wall"
        if case == COUNTERS:
            r.lines.append(f"  {name}: counters {rate:,.0f} jobs/s per core ({times})")
            r.figures[f"{key}_counter_jobs_per_s"] = round(rate)
            continue
        per_round = (c / p for c, p in zip(counters, rounds.cpu_s[case], strict=True))
        ratio = statistics.median(per_round)
        r.lines.append(
            f"    {case:>9}: {rate:,.0f} jobs/s per core ({times}) = {ratio:.2f}x counters"
        )
        r.figures[f"{key}_{case}_jobs_per_s"] = round(rate)
        r.figures[f"{key}_{case}_vs_counter"] = round(ratio, 3)
