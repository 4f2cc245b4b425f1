"""A workload for a real Slurm from a shipped trace: a slice of its jobs in submission order,
run times scaled into seconds (their order kept), time limits as users set them (1.5-4x the
run time, in whole minutes), submissions spaced for an offered load; driven with `sbatch` while
`squeue --json`, `sinfo --json` and `squeue --start` are snapshotted, and what Slurm did with
each job read back at the end."""

from __future__ import annotations

import csv
import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

from tests.slurm import Slurm

ROOT = Path(__file__).resolve().parents[1]
ITP_CLUSTER10 = ROOT / "traces" / "microsoft-itp-elasticflow-2021" / "cluster10.csv"


@dataclass(frozen=True)
class Planned:
    """One job to submit: when (seconds after the first), its GPUs, how long it runs and the
    time limit its user gives it."""

    trace_id: str
    submit_s: float
    gpus: int
    run_s: float
    limit_min: int


@dataclass(frozen=True)
class Done:
    """What Slurm did with one job (epoch seconds)."""

    job_id: str
    planned: Planned
    submit_s: float
    start_s: float
    end_s: float
    state: str
    nodes: str = ""  # where it ran, as squeue names them


def plan(trace: Path = ITP_CLUSTER10, *, jobs: int, total_gpus: int, node_gpus: int,
         load: float, run_s: tuple[float, float], first: int = 0,
         seed: int = 0) -> list[Planned]:  # fmt: skip
    """`jobs` consecutive jobs of `trace` from its `first`, as `Planned`."""
    with trace.open(newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: float(r["submission_time"]))
    rows = rows[first : first + jobs]
    rng = random.Random(seed)
    logs = [math.log(max(float(r["duration"]), 1.0)) for r in rows]
    lo, hi = min(logs), max(logs)
    runs = [run_s[0] + (run_s[1] - run_s[0]) * ((x - lo) / (hi - lo) if hi > lo else 0.5)
            for x in logs]  # fmt: skip
    gpus = [min(int(float(r["num_gpu"])), node_gpus) for r in rows]
    work = sum(r * g for r, g in zip(runs, gpus, strict=True))
    span_s = work / (load * total_gpus)
    submitted = [float(r["submission_time"]) for r in rows]
    scale = span_s / max(submitted[-1] - submitted[0], 1.0)
    return [Planned(trace_id=r["job_id"], submit_s=round((t - submitted[0]) * scale, 1),
                    gpus=g, run_s=round(run, 1),
                    limit_min=max(1, math.ceil(run * rng.uniform(1.5, 4.0) / 60)))
            for r, t, g, run in zip(rows, submitted, gpus, runs, strict=True)]  # fmt: skip


def drive(cluster: Slurm, planned: list[Planned], into: Path, *, every_s: float,
          gpu_flag: str = "--gres") -> list[Done]:  # fmt: skip
    """Submit `planned` on its schedule, snapshotting every `every_s` into `into/NNNN/` while
    any job waits or runs; what Slurm did with each, once all have ended. `gpu_flag`:
    `--gres` (gpu:N per node) or `--gpus` (N for the job), alternating with `both`."""
    into.mkdir(parents=True, exist_ok=True)
    (into / "config.txt").write_text(cluster.run("scontrol", "show", "config"))
    t0 = time.time()
    ids: dict[str, Planned] = {}
    pending = list(planned)
    snapshots = 0
    next_snapshot = t0
    while True:
        now = time.time()
        while pending and pending[0].submit_s <= now - t0:
            job = pending.pop(0)
            flag = gpu_flag if gpu_flag != "both" else ("--gres", "--gpus")[len(ids) % 2]
            gpus = f"--gres=gpu:{job.gpus}" if flag == "--gres" else f"--gpus={job.gpus}"
            name = f"--job-name={job.trace_id[:8]}"
            ids[cluster.sbatch(gpus, f"--time={job.limit_min}", "-N1", name, run_s=job.run_s)] = job
        if now >= next_snapshot and ids:
            cluster.snapshot(into / f"{snapshots:04d}")
            snapshots += 1
            next_snapshot += every_s
        states = {str(j["job_id"]): str(j["job_state"]) for j in cluster.jobs()}
        if not pending and all(states.get(i) in ENDED for i in ids):
            break
        time.sleep(0.25)
    done = []
    for raw in cluster.jobs():
        job_id = str(raw["job_id"])
        if job_id in ids:
            done.append(Done(job_id, ids[job_id], float(raw["submit_time"]),  # type: ignore[arg-type]
                             float(raw["start_time"]), float(raw["end_time"]),  # type: ignore[arg-type]
                             str(raw["job_state"]), str(raw.get("nodes") or "")))  # fmt: skip
    (into / "done.json").write_text(json.dumps([d.__dict__ | {"planned": d.planned.__dict__}
                                                for d in done], indent=1))  # fmt: skip
    return done


ENDED = {"COMPLETED", "TIMEOUT", "FAILED", "CANCELLED", "NODE_FAIL"}


@dataclass(frozen=True)
class Pair:
    """One (snapshot, pending job): when Slurm started it, and each predictor's start."""

    snapshot: str
    job_id: str
    gpus: float
    taken_s: float
    started_s: float
    twin_s: float | None
    twin_p10_s: float | None
    twin_p90_s: float | None
    slurm_s: float | None  # the pending job's start_time: Slurm's own estimate

    def waited_s(self) -> float:
        return self.started_s - self.taken_s


def score(into: Path, done: list[Done], *, samples: int = 200, seed: int = 0,
          at: str | None = None) -> list[Pair]:  # fmt: skip
    """Every (snapshot, pending job) of a driven run with the twin's forecast from that
    snapshot as a user runs it (`twin forecast --squeue --sinfo`, the instant the export's
    own unless `at` says, e.g. "taken" for the capture's own clock)."""
    from twin.forecast.forecast import forecast
    from twin.forecast.slurm import from_slurm

    started = {d.job_id: d.start_s for d in done}
    pairs = []
    for snap in sorted(p for p in into.iterdir() if p.is_dir()):
        taken = float((snap / "taken.txt").read_text())
        config = into / "config.txt"
        state = from_slurm(snap / "squeue.json", snap / "sinfo.json",
                           at_s=taken if at == "taken" else None,
                           config=config if config.exists() else None)  # fmt: skip
        if not state.waiting:
            continue
        result = forecast(state, samples=samples, horizon_s=6 * 3600, step_s=60, seed=seed)
        estimate = {str(j["job_id"]): j.get("start_time")
                    for j in json.loads((snap / "squeue.json").read_text())["jobs"]}  # fmt: skip
        for job in result.jobs:
            if job.job_id not in started:
                continue
            p10, p50, p90 = job.start_s if job.start_s else (None, None, None)
            slurm = estimate.get(job.job_id)
            pairs.append(Pair(snap.name, job.job_id, job.gpus, taken, started[job.job_id],
                              p50, p10, p90,
                              float(slurm) if isinstance(slurm, (int, float)) and slurm > 0
                              else None))  # fmt: skip
    return pairs


def oracle(done: list[Done], *, nodes: int, node_gpus: int, bf_interval_s: float,
           seed: int = 0) -> dict[str, float]:  # fmt: skip
    """Each job's start (epoch seconds) when the same jobs, submitted when Slurm had them and
    running as long as they ran there (the oracle), play in the twin's Slurm mode: priority
    order (priority/basic: submission order), a backfill pass every `bf_interval_s` planned on
    their time limits, nodes in order, an ended run's GPUs going to the next job as late as
    they did there (`completing_s`, as the Slurm reader measures it)."""
    from twin.eventlog.metrics import Metrics
    from twin.forecast.slurm import completing_s
    from twin.replay.cluster import Cluster, pool_of
    from twin.replay.run import Queue, replay_scenario
    from twin.schema import records
    from twin.schema.scheduling import NodeConfig, NodeGroup, SchedulerConfig
    from twin.sim.jobrecord import JobRecord
    from twin.sim.runner import run_episode

    class Starts(Metrics):
        def __post_init__(self) -> None:
            super().__post_init__()
            self.started_s: dict[str, float] = {}

        def _on_job_started(self, rec: records.JobStarted) -> None:
            self.started_s.setdefault(rec.job_id, rec.t_s)

    ordered = sorted(done, key=lambda d: (d.submit_s, int(d.job_id)))
    t0 = ordered[0].submit_s
    jobs = [JobRecord(job_id=d.job_id, submit_s=d.submit_s - t0, service_s=d.end_s - d.start_s,
                      gpus=float(d.planned.gpus), tenant="slurm", priority=-float(d.job_id),
                      time_limit_s=d.planned.limit_min * 60.0)
            for d in ordered]  # fmt: skip
    cluster = Cluster([pool_of("h100", nodes * node_gpus)],
                      NodeConfig(groups=[NodeGroup(pool="h100", count=nodes, gpus=node_gpus)],
                                 placement="first_fit"), "driven Slurm")  # fmt: skip
    queue = Queue(
        "priority",
        backfill=True,
        backfill_interval_s=bf_interval_s,
        backfill_grid_s=(-t0) % 60.0,  # Slurm rounds epoch seconds to bf_resolution (60 s)
        completing_s=completing_s([(d.submit_s, d.start_s, d.end_s, d.nodes) for d in done]),
    )
    scenario = replay_scenario("slurm-oracle", "a driven Slurm's jobs", cluster, queue,
                               SchedulerConfig())  # fmt: skip
    metrics = Starts()
    run_episode(scenario, seed=seed, sources=[jobs], metrics=metrics)
    return {job: t0 + t for job, t in metrics.started_s.items()}
