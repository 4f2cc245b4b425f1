"""Node-level replay against counter pools: the same trace on the same GPUs, placed on nodes
(each placement policy) or counted. Each replay runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from twin.bench.harness import Result
from twin.bench.replay import shared_traces
from twin.schema.vocabulary import PLACEMENTS

TARGET_RATIO = 0.5  # node-level jobs/s at least half the counter pools' rate
NODES = 1000  # nodes of the generated inventory, 8 GPUs each

_CHILD = """
import json, sys, time
from pathlib import Path
from twin.replay.run import ReplayOptions, replay
from twin.schema.scheduling import ReplayParams
trace, cluster, gpus, placement = sys.argv[1:5]
options = ReplayOptions(
    cluster=None if cluster == "-" else Path(cluster),
    gpus=None if gpus == "-" else int(gpus),
    params=ReplayParams(placement=None if placement == "-" else placement),
)
cpu, wall = time.process_time(), time.perf_counter()
_, report = replay(Path(trace), options)
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
print(json.dumps({"jobs": report.jobs_replayed, "cpu_s": cpu, "wall_s": wall}))
"""


def _run(
    trace: Path, cluster: Path | None, gpus: int | None, placement: str | None
) -> dict[str, float]:
    args = [str(trace), str(cluster or "-"), str(gpus or "-"), placement or "-"]
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, *args], check=True, capture_output=True, text=True
    ).stdout
    figures: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return figures


def _inventory(path: Path) -> int:
    """A generated openb-format inventory of NODES 8-GPU nodes; returns its GPUs."""
    lines = ["sn,cpu_milli,memory_mib,gpu,model"]
    lines += [f"node-{i:04d},96000,786432,8,A100" for i in range(NODES)]
    path.write_text("\n".join(lines) + "\n")
    return NODES * 8


def bench_nodes(quick: bool) -> Result:
    r = Result()
    traces = shared_traces()
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
        r.lines.append("replay on nodes vs counter pools of the same GPUs (fresh process each)")
        for name, trace, cluster, total in cases:
            counter = _run(trace, None, total, None)
            base = counter["jobs"] / counter["cpu_s"]
            r.lines.append(
                f"  {name}: counters {base:,.0f} jobs/s per core "
                f"({counter['cpu_s']:.2f} s CPU, {counter['wall_s']:.2f} s wall)"
            )
            key = name.split()[0]
            r.figures[f"{key}_counter_jobs_per_s"] = round(base)
            for placement in PLACEMENTS if not quick or key == "openb" else ("best_fit",):
                fig = _run(trace, cluster, None, placement)
                rate = fig["jobs"] / fig["cpu_s"]
                r.lines.append(
                    f"    {placement:>9}: {rate:,.0f} jobs/s per core ({fig['cpu_s']:.2f} s CPU, "
                    f"{fig['wall_s']:.2f} s wall) = {rate / base:.2f}x counters"
                )
                r.figures[f"{key}_{placement}_jobs_per_s"] = round(rate)
                r.figures[f"{key}_{placement}_vs_counter"] = round(rate / base, 3)
    r.lines.append(f"  target: best_fit >= {TARGET_RATIO}x the counter rate")
    return r
