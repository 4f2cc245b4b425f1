"""`twin forecast` and `twin replay --rounds`: how fast the twin answers "what happens next?"
and how fast it replays a Gavel workload against Gavel's own simulator.

- forecast: openb cut at 2851 h on its calibrated 10-node share (28 pods running, one waiting),
  50 samples of 6 hours; DLRM cut at a held-out submission on 3,484 GPUs (some 3,200 instances
  running), 10 samples. Target: a forecast in seconds (50 samples of openb under 5 s of CPU).
- slurm: a capture of a real Slurm 22.05 (traces/samples/slurm-22.05/itp-cluster10-0007, with
  its scontrol show config) in the twin's Slurm mode (a backfill pass every 5 s, planned on time
  limits), 100 samples of 6 hours: what `twin watch` spends on each change.
- rounds: the heavy Gavel workload (60 jobs on 24 GPUs) under max-min fairness, against Gavel's
  simulator on the same run (0.9 s on this machine kind, ECOS included). Target: 10x.
"""

from __future__ import annotations

import time
from pathlib import Path

from twin.bench.harness import Result
from twin.bench.replay import project_traces

FORECAST_TARGET_CPU_S = 5.0
GAVEL_S = 0.9  # Gavel's simulator, one run of the heavy workload under max-min fairness
ROUNDS_TARGET_SPEEDUP = 10.0


def bench_forecast(quick: bool) -> Result:
    from twin.forecast import snapshot
    from twin.forecast.forecast import forecast
    from twin.replay import load
    from twin.replay.cluster import build
    from twin.replay.params import read_params
    from twin.replay.reader import ReadLog

    traces = project_traces()
    r = Result()
    if not (traces / "alibaba-gpu-v2023-openb").is_dir():
        r.lines.append("forecast: skipped (no shipped traces: is $TWIN_TRACES right?)")
        return r
    cases = [("openb", "alibaba-gpu-v2023-openb/openb_pod_list_default.csv", "openb",
              "alibaba-gpu-v2023-openb/calibrated-params.json", 2851 * 3600.0, 50)]  # fmt: skip
    if not quick:
        cases.append(("dlrm", "alibaba-gpu-v2025-dlrm/disaggregated_DLRM_trace.csv", "dlrm",
                      "alibaba-gpu-v2025-dlrm/calibrated-params-alternate-days.json",
                      2_040_787.0, 10))  # fmt: skip
    r.lines.append("forecast: a trace cut at an instant, 6 h ahead, one process")
    openb_cpu_s = float("nan")
    for name, trace, fmt, params_file, at_s, samples in cases:
        params = read_params(traces / params_file)
        inventory = (traces / "alibaba-gpu-v2023-openb/openb_node_list_gpu_node.csv", None)
        cluster = build(iter(()), inventory if name == "openb" else None,
                        None if name == "openb" else 3484, params)  # fmt: skip
        records = load.records(traces / trace, fmt, ReadLog())
        state = snapshot.cut(records, at_s, window_s=7 * 86400, cluster=cluster,
                             scheduler=params.scheduler)  # fmt: skip
        wall, cpu = time.perf_counter(), time.process_time()
        forecast(state, samples=samples)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        r.figures[f"{name}_{samples}_samples_cpu_s"] = round(cpu, 2)
        r.figures[f"{name}_{samples}_samples_wall_s"] = round(wall, 2)
        r.figures[f"{name}_samples_per_s"] = round(samples / cpu, 1)
        if name == "openb":
            openb_cpu_s = cpu
        took = f"{samples} samples in {cpu:.2f} s CPU ({wall:.2f} s wall)"
        r.lines.append(f"  {name:>6}: {len(state.running):,} running, {len(state.waiting)} "
                       f"waiting; {took}")  # fmt: skip
    _slurm(r, traces)
    r.figures["forecast_vs_target"] = round(FORECAST_TARGET_CPU_S / openb_cpu_s, 1)
    r.lines.append(f"  target: 50 openb samples under {FORECAST_TARGET_CPU_S:g} s CPU: "
                   f"{r.figures['forecast_vs_target']}x")  # fmt: skip
    _rounds(r)
    return r


def _slurm(r: Result, traces: Path) -> None:
    from twin.forecast.forecast import forecast
    from twin.forecast.slurm import from_slurm

    shipped = traces / "samples" / "slurm-22.05"
    capture = shipped / "itp-cluster10-0007"
    state = from_slurm(capture / "squeue.json", capture / "sinfo.json",
                       config=shipped / "config.txt")  # fmt: skip
    samples = 100
    wall, cpu = time.perf_counter(), time.process_time()
    forecast(state, samples=samples, step_s=60.0)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    r.figures[f"slurm_{samples}_samples_cpu_s"] = round(cpu, 3)
    r.figures[f"slurm_{samples}_samples_wall_s"] = round(wall, 3)
    r.lines.append(f"  {'slurm':>6}: {len(state.running)} running, {len(state.waiting)} waiting "
                   f"(Slurm mode, backfill every {state.backfill_interval_s:g} s); {samples} "
                   f"samples in {cpu:.2f} s CPU ({wall:.2f} s wall)")  # fmt: skip


def _rounds(r: Result) -> None:
    from twin.replay.formats import gavel
    from twin.replay.reader import ReadLog
    from twin.rounds import policies as round_policies
    from twin.rounds import rounds

    jobs = gavel.read(project_traces() / "gavel/heavy.trace", ReadLog())
    table = gavel.throughputs()
    cpus = []
    for _ in range(5):
        cpu = time.process_time()
        rounds.play(jobs, {"v100": 8, "p100": 8, "k80": 8}, round_policies.MaxMinFairness(),
                    table)  # fmt: skip
        cpus.append(time.process_time() - cpu)
    cpu = sorted(cpus)[len(cpus) // 2]
    r.figures["rounds_heavy_max_min_cpu_s"] = round(cpu, 3)
    r.figures["rounds_vs_gavel"] = round(GAVEL_S / cpu, 1)
    r.figures["rounds_vs_target"] = round(GAVEL_S / cpu / ROUNDS_TARGET_SPEEDUP, 1)
    r.lines.append(f"rounds: Gavel's heavy workload, max-min fairness: {cpu:.3f} s CPU (median "
                   f"of 5); {GAVEL_S / cpu:.0f}x Gavel's simulator (target "
                   f"{ROUNDS_TARGET_SPEEDUP:g}x)")  # fmt: skip
