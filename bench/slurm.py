"""The forecast against a real Slurm: a private Slurm (tests/slurm.py) runs a slice of ITP's
cluster10 (tests/slurm_workload.py), snapshotted while it runs; every (snapshot, pending job)
pair is then forecast as a user runs it (`twin forecast --squeue --sinfo`, no `--at`) and
scored against the start Slurm gave the job, beside "every job starts now" and Slurm's own
estimate (the pending job's `start_time`), overall and by class; and the oracle: the same jobs
with their true run times in the twin's Slurm mode, the share started within one backfill
interval of Slurm's start. `--workload held-out` drives cluster10's jobs 60-99 instead (run
times 8-90 s, load 3), a workload the first models were not developed on (the share-of-limit
curves' thin-history rule was chosen on it); `--workload unseen` drives jobs 100-149 (run times
10-120 s, load 2), on which no model was developed. Readable lines, then one
JSON line.

    python -m bench.slurm [--workload tuned|held-out] [--samples 200]"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.slurm import Nodes, NoSlurmError, slurm
from tests.slurm_workload import Pair, drive, oracle, plan, score

BF_INTERVAL_S = 5
WORKLOADS = {  # jobs, first, load, run times (s), seconds between snapshots
    "tuned": (60, 0, 2.5, (8.0, 150.0), 8.0),
    "held-out": (40, 60, 3.0, (8.0, 90.0), 6.0),
    "unseen": (50, 100, 2.0, (10.0, 120.0), 7.0),
}

Predictor = Callable[[Pair], float | None]
PREDICTORS: dict[str, Predictor] = {
    "twin": lambda p: p.twin_s,
    "starts now": lambda p: p.taken_s,
    "Slurm's estimate": lambda p: p.slurm_s,
}
CLASSES: dict[str, Callable[[Pair], bool]] = {
    "all": lambda p: True,
    "1 GPU": lambda p: p.gpus == 1,
    "2+ GPUs": lambda p: p.gpus >= 2,
    "wait < 1 min": lambda p: p.waited_s() < 60,
    "wait 1-10 min": lambda p: 60 <= p.waited_s() < 600,
    "wait >= 10 min": lambda p: p.waited_s() >= 600,
}


def figures(pairs: list[Pair]) -> dict[str, dict[str, float | int | None]]:
    out: dict[str, dict[str, float | int | None]] = {}
    for name, member in CLASSES.items():
        chosen = [p for p in pairs if member(p)]
        row: dict[str, float | int | None] = {"pairs": len(chosen)}
        for predictor, at in PREDICTORS.items():
            errors = [abs(t - p.started_s) for p in chosen if (t := at(p)) is not None]
            row[f"{predictor} median_abs_error_s"] = (
                round(statistics.median(errors), 1) if errors else None
            )
        inside = [p for p in chosen if p.twin_p10_s is not None and p.twin_p90_s is not None]
        row["twin 80% coverage"] = (
            round(sum(p.twin_p10_s <= p.started_s <= p.twin_p90_s for p in inside)  # type: ignore[operator]
                  / len(inside), 3) if inside else None
        )  # fmt: skip
        out[name] = row
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.slurm", description=__doc__)
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="tuned")
    p.add_argument("--samples", type=int, default=200)
    args = p.parse_args(argv)
    jobs, first, load, run_s, every_s = WORKLOADS[args.workload]
    into = Path(tempfile.mkdtemp(prefix="twin-bench-slurm-"))
    planned = plan(jobs=jobs, total_gpus=16, node_gpus=8, load=load, run_s=run_s, first=first)
    start = time.perf_counter()
    try:
        with slurm([Nodes("r", 2, 8, "h100")], bf_interval_s=BF_INTERVAL_S) as cluster:
            done = drive(cluster, planned, into, every_s=every_s, gpu_flag="both")
    except NoSlurmError as exc:
        print(f"slurm: no Slurm here: {exc}", file=sys.stderr)
        return 2
    drove_s = time.perf_counter() - start
    pairs = score(into, done, samples=args.samples)
    table = figures(pairs)
    starts = oracle(done, nodes=2, node_gpus=8, bf_interval_s=BF_INTERVAL_S)
    within = sum(abs(starts[d.job_id] - d.start_s) <= BF_INTERVAL_S for d in done) / len(done)
    wait_s = statistics.median(p.waited_s() for p in pairs)
    print(f"{args.workload}: {len(done)} jobs on 2 x 8 GPUs in {drove_s:.0f} s, {len(pairs)} "
          f"(snapshot, pending job) pairs, median wait {wait_s:.0f} s; in {into}")  # fmt: skip
    print(
        f"oracle (run times known, Slurm mode): {within:.0%} of jobs start within "
        f"{BF_INTERVAL_S} s of Slurm's start"
    )
    for name, row in table.items():
        cells = ", ".join(f"{k} {v}" for k, v in row.items())
        print(f"{name}: {cells}")
    print(json.dumps({"workload": args.workload, "jobs": len(done),
                      "drove_s": round(drove_s, 1), "pairs": len(pairs),
                      "oracle_within_interval": round(within, 3), "classes": table}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
