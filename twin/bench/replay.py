"""Replay throughput and memory: the ten ITP clusters, openb, and a generated 10^6-job trace.

Each replay runs in a fresh interpreter so its peak memory (max RSS) is its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from twin.bench.harness import Result

TARGET_100K_S = 2.0
TARGET_RSS_MIB = 1024

_CHILD = """
import json, sys, time
from pathlib import Path
from twin.replay.run import ReplayOptions, replay
paths = [Path(p) for p in sys.argv[2:]]
cluster = Path(sys.argv[1]) if sys.argv[1] != "-" else None
jobs = 0
start = time.process_time()
for p in paths:
    _, report = replay(p, ReplayOptions(cluster=cluster))
    jobs += report.jobs_replayed
cpu_s = time.process_time() - start
# VmHWM is this process's own peak; ru_maxrss would include the parent's from before exec.
rss_kib = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
rss_mib = rss_kib / 1024
print(json.dumps({"jobs": jobs, "cpu_s": cpu_s, "rss_mib": rss_mib}))
"""


def _run(paths: list[Path], cluster: Path | None = None) -> dict[str, float]:
    cmd = [sys.executable, "-c", _CHILD, str(cluster) if cluster else "-", *map(str, paths)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    figures: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return figures


def project_traces() -> Path:
    """The real trace samples the twin ships (a checkout's `traces/`, a wheel's copy)."""
    from twin.sim.job_sources import shipped_traces

    return shipped_traces()


def bench_replay(quick: bool) -> Result:
    traces = project_traces()
    r = Result()
    itp = sorted((traces / "microsoft-itp-elasticflow-2021").glob("cluster*.csv"))
    openb = traces / "alibaba-gpu-v2023-openb"
    big_jobs = 100_000 if quick else 1_000_000
    with tempfile.TemporaryDirectory() as tmp:
        synthetic_100k = Path(tmp) / "synthetic-100k.csv"
        synthetic_big = Path(tmp) / "synthetic-big.csv"
        from twin.replay.synth import generate_itp

        generate_itp(synthetic_100k, 100_000, seed=7)
        if big_jobs != 100_000:
            generate_itp(synthetic_big, big_jobs, seed=8)
        else:
            synthetic_big = synthetic_100k
        runs: dict[str, dict[str, float] | None] = {
            "itp": _run(itp) if itp else None,
            "openb": _run(
                [openb / "openb_pod_list_default.csv"], openb / "openb_node_list_gpu_node.csv"
            )
            if openb.is_dir()
            else None,
            "synthetic_100k": _run([synthetic_100k]),
            "synthetic_big": _run([synthetic_big]),
        }
    r.lines.append("replay: FIFO on a fixed cluster, parse + sim + metrics, fresh process each")
    for name, fig in runs.items():
        if fig is None:
            r.lines.append(f"  {name}: skipped (no shipped traces: is $TWIN_TRACES right?)")
            continue
        rate = fig["jobs"] / fig["cpu_s"]
        r.lines.append(
            f"  {name:>15}: {int(fig['jobs']):>9,} jobs in {fig['cpu_s']:.2f} s CPU = "
            f"{rate:,.0f} jobs/s per core, peak RSS {fig['rss_mib']:,.0f} MiB"
        )
        r.figures[f"{name}_jobs"] = int(fig["jobs"])
        r.figures[f"{name}_jobs_per_s"] = round(rate)
        r.figures[f"{name}_peak_rss_mib"] = round(fig["rss_mib"])
    small, big = runs["synthetic_100k"], runs["synthetic_big"]
    assert small is not None
    assert big is not None
    r.figures["synthetic_100k_s"] = round(small["cpu_s"], 3)
    r.figures["synthetic_100k_vs_target"] = round(TARGET_100K_S / small["cpu_s"], 2)
    r.figures["synthetic_big_rss_vs_target"] = round(TARGET_RSS_MIB / big["rss_mib"], 2)
    r.lines.append(
        f"  targets: 100k jobs <= {TARGET_100K_S} s; "
        f"{big_jobs:,}-job replay under {TARGET_RSS_MIB} MiB"
    )
    return r
