"""The forecast against a real Slurm: a private Slurm (tests/slurm.py) runs a slice of ITP's
cluster10 (tests/slurm_workload.py), snapshotted while it runs; every (snapshot, pending job)
pair is then forecast as a user runs it (`twin forecast --squeue --sinfo`, no `--at`) and
scored against the start Slurm gave the job, beside "every job starts now" and Slurm's own
estimate (the pending job's `start_time`), overall and by class. Readable lines, then one JSON
line.

    python -m bench.slurm [--jobs 60] [--load 2.5] [--run-s 8,150] [--every-s 8]"""

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
from tests.slurm_workload import Pair, drive, plan, score

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
    p.add_argument("--jobs", type=int, default=60)
    p.add_argument("--load", type=float, default=2.5)
    p.add_argument("--run-s", default="8,150", help="the run-time range, seconds: LO,HI")
    p.add_argument("--every-s", type=float, default=8.0, help="seconds between snapshots")
    p.add_argument("--samples", type=int, default=200)
    args = p.parse_args(argv)
    lo, hi = (float(x) for x in args.run_s.split(","))
    into = Path(tempfile.mkdtemp(prefix="twin-bench-slurm-"))
    planned = plan(jobs=args.jobs, total_gpus=16, node_gpus=8, load=args.load, run_s=(lo, hi))
    start = time.perf_counter()
    try:
        with slurm([Nodes("r", 2, 8, "h100")], bf_interval_s=5) as cluster:
            done = drive(cluster, planned, into, every_s=args.every_s, gpu_flag="both")
    except NoSlurmError as exc:
        print(f"slurm: no Slurm here: {exc}", file=sys.stderr)
        return 2
    drove_s = time.perf_counter() - start
    pairs = score(into, done, samples=args.samples)
    table = figures(pairs)
    print(f"{len(done)} jobs on 2 x 8 GPUs in {drove_s:.0f} s, {len(pairs)} (snapshot, pending "
          f"job) pairs, median wait {statistics.median(p.waited_s() for p in pairs):.0f} s; "
          f"snapshots in {into}")  # fmt: skip
    for name, row in table.items():
        cells = ", ".join(f"{k} {v}" for k, v in row.items())
        print(f"{name}: {cells}")
    print(json.dumps({"jobs": len(done), "drove_s": round(drove_s, 1), "pairs": len(pairs),
                      "classes": table}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
