"""Gavel's own simulator on the workloads here: the reference `gavel-results.json` holds.

Run from the `scheduler/` folder of a checkout of stanford-futuredata/gavel (commit c4fa400),
with cvxpy and ECOS installed:

    python /path/to/run_gavel.py /path/to/traces/gavel > gavel-results.json

For each workload and policy it runs `Scheduler.simulate` as Gavel's
`scripts/drivers/simulate_scheduler_with_trace.py` does (seeds 0-4, rounds of 360 s, one GPU a
server, 8 V100s, 8 P100s and 8 K80s) and records each job's completion time (the seed
draws FIFO's worker types and the order types are visited in each round).
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))  # Gavel's scheduler/ folder, where this runs
import scheduler  # Gavel's
import utils  # Gavel's

SEEDS = range(5)
WORKLOADS = ("heavy", "light")
POLICIES = ("fifo", "max_min_fairness")
CLUSTER = {"v100": 8, "p100": 8, "k80": 8}


def run(trace: Path, policy_name: str, seed: int) -> dict[str, object]:
    jobs, arrivals = utils.parse_trace(str(trace))
    policy = utils.get_policy(policy_name, solver="ECOS", seed=seed)
    sched = scheduler.Scheduler(
        policy,
        throughputs_file="simulation_throughputs.json",
        simulate=True,
        seed=seed,
        time_per_iteration=360,
    )
    sched.simulate(
        dict(CLUSTER), arrivals, jobs, num_gpus_per_server={"v100": 1, "p100": 1, "k80": 1}
    )
    jct = {job_id[0]: value for job_id, value in sched._job_completion_times.items()}
    return {
        "average_jct_s": sched.get_average_jct(verbose=False),
        "makespan_s": sched._current_timestamp,
        "utilisation": sched.get_cluster_utilization(),
        "jct_s": [jct[i] for i in sorted(jct)],
    }


def main() -> None:
    folder = Path(sys.argv[1])
    results = {
        f"{w}/{p}": [run(folder / f"{w}.trace", p, seed) for seed in SEEDS]
        for w in WORKLOADS
        for p in POLICIES
    }
    sys.stdout = sys.__stdout__
    print(
        json.dumps(
            {
                "gavel_commit": "c4fa400",
                "cluster": CLUSTER,
                "seeds": list(SEEDS),
                "round_s": 360,
                "results": results,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    sys.stdout = sys.stderr  # Gavel prints as it goes; only the JSON goes to stdout
    main()
