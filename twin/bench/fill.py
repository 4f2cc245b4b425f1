"""`twin fill` against the FGD artefact's own simulator: one seed of one policy on openb.

Plays the artefact's exact seed-42 arrival order (shipped under traces/) with FGD and best-fit,
to 95% arrived and to the end, CPU time beside wall. The artefact's Go simulator, run on this
machine kind on seed 42, took 39 minutes for FGD to reach 95% arrived and 845 s for best-fit to
reach 37%: the target is a tenth of that.
"""

from __future__ import annotations

import time

from twin.bench.harness import Result
from twin.bench.replay import project_traces

ARTEFACT_S = {"fgd": (95, 39 * 60.0), "best_fit": (37, 845.0)}  # arrived %, seconds to reach it
TARGET_SPEEDUP = 10.0


def bench_fill(quick: bool) -> Result:
    from twin.fill.fill import Pod, fill, read_nodes, read_pods, read_priority, typical_pods
    from twin.fill.policies import policy as make

    openb = project_traces() / "alibaba-gpu-v2023-openb"
    r = Result()
    if not openb.is_dir():
        r.lines.append("fill: skipped (no shipped traces: is $TWIN_TRACES right?)")
        return r
    typical = typical_pods(read_pods(openb / "openb_pod_list_default.csv"))
    sequence = read_pods(openb / "fgd/arrivals_seed42.csv")
    capacity = read_nodes(openb / "openb_node_list_gpu_node.csv").capacity_milli

    def upto(pct: float) -> list[Pod]:
        asked, out = 0, []
        for pod in sequence:
            asked += pod.gpu_request_milli
            out.append(pod)
            if asked >= pct / 100 * capacity:
                break
        return out

    r.lines.append("fill: openb, the artefact's seed-42 order, one process")
    for policy, (pct, artefact_s) in ARTEFACT_S.items():
        for label, pods in ((f"to {pct}%", upto(pct)), ("whole", sequence)):
            if quick and label == "whole":
                continue
            cluster = read_nodes(openb / "openb_node_list_gpu_node.csv")
            priority = read_priority(openb / "fgd/node_tiebreak_seed42.csv", cluster.names)
            wall, cpu = time.perf_counter(), time.process_time()
            fill(cluster, pods, make(policy, cluster, typical), typical, priority=priority)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            key = f"{policy}_{'whole' if label == 'whole' else f'to_{pct}pct'}"
            r.figures[f"{key}_cpu_s"] = round(cpu, 2)
            r.figures[f"{key}_wall_s"] = round(wall, 2)
            took = f"{cpu:.1f} s CPU ({wall:.1f} s wall)"
            line = f"  {policy:>8} {label:>8}: {len(pods):,} pods in {took}"
            if label != "whole":
                speedup = artefact_s / wall
                r.figures[f"{policy}_vs_artefact"] = round(speedup, 1)
                r.figures[f"{policy}_vs_target"] = round(speedup / TARGET_SPEEDUP, 1)
                line += f", {speedup:,.0f}x the artefact's {artefact_s:,.0f} s"
            r.lines.append(line)
    r.lines.append(f"  target: at least {TARGET_SPEEDUP:g}x the artefact's speed")
    return r
