"""Round-based scheduling, as Gavel simulates it: time moves in rounds, and a round is the
event. At a round's start the scheduler admits the jobs that have arrived, brings its
allocation up to date, and runs, for one round length, the jobs furthest below their share
(a job's priority on a worker type is its share there over the fraction of that type's time it
has had since the last reset); a job runs whole rounds of steps at its throughput on the type,
and ends early within a round when its steps run out. The round ends when the last job run in
it stops; an idle cluster waits for the next arrival.

What Gavel's simulator does and the twin does the same way (so that its runs reproduce
Gavel's): the allocation is recomputed only when jobs came or went and at least
`RESET_INTERVAL_S` passed since the last reset (or the cluster ran dry); until then a new job
has no share and (under FIFO) waits; each job starts with half a round of credit on each type;
worker types are visited in an order shuffled every round; a job picked for a round but not
yet in the allocation holds its workers idle for that round; a job's time on a type is counted
from the end of the previous round it could have run in (idle gaps included).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from twin.errors import ConfigError
from twin.replay.formats.gavel import WORKER_TYPES, GavelJob, Throughputs
from twin.rounds.policies import Allocation, PolicyJob, RoundPolicy
from twin.schema import records as r

ROUND_S = 360.0
"""Gavel's default round (its `time_per_iteration`)."""
RESET_INTERVAL_S = 1920.0
"""Least time between two recomputations of the allocation (Gavel's default)."""
MAX_FAILED_ROUNDS = 5
"""Rounds a job may fail in a row before it is dropped (Gavel's limit)."""


@dataclass
class _Active:
    job_id: int
    job: GavelJob
    throughput: Mapping[str, float]
    credit_s: dict[str, float]  # time had on each type since the last reset (+ half a round)
    deficit_s: dict[str, float]
    steps_done: int = 0
    failed_rounds: int = 0
    rounds: int = 0  # rounds it was run in
    starts: int = 0  # times it started after not running
    gpu_s: float = 0.0  # GPU-seconds of steps counted

    @property
    def steps_left(self) -> int:
        return self.job.total_steps - self.steps_done


@dataclass(frozen=True)
class JobResult:
    job_id: int
    line: int
    job_type: str
    scale_factor: int
    arrival_s: float
    end_s: float
    rounds: int
    gpu_s: float
    dropped: bool = False
    """Dropped unfinished after MAX_FAILED_ROUNDS failed rounds (its JCT is not counted)."""

    @property
    def jct_s(self) -> float:
        return self.end_s - self.arrival_s


@dataclass
class RoundRun:
    """A finished run: each job's result, the rounds played, the busy GPU-seconds by type."""

    jobs: list[JobResult]
    rounds: int
    makespan_s: float
    busy_gpu_s: dict[str, float] = field(default_factory=dict)

    @property
    def finished(self) -> list[JobResult]:
        return [r for r in self.jobs if not r.dropped]

    @property
    def average_jct_s(self) -> float:
        """Mean JCT of the jobs that finished (as Gavel reports it)."""
        done = self.finished
        return sum(r.jct_s for r in done) / len(done) if done else float("nan")


Append = Callable[[r.AnyRecord], None]
SCENARIO = "gavel-rounds"
DROPPED = (f"failed {MAX_FAILED_ROUNDS} rounds in a row: its last round had fewer steps than "
           "GPUs, and a worker with no step fails the round (Gavel drops such a job)")  # fmt: skip


def play(
    jobs: Sequence[GavelJob],
    workers: Mapping[str, int],
    policy: RoundPolicy,
    throughputs: Throughputs,
    *,
    seed: int = 0,
    round_s: float = ROUND_S,
    reset_interval_s: float = RESET_INTERVAL_S,
    log: Append | None = None,
) -> RoundRun:
    """Play `jobs` on `workers` (GPUs by worker type) in rounds under `policy`; `log` hears
    every event (a job's arrival, each start on a worker type after not running, each round
    it is not continued in, its end or its drop) in time order."""
    if not jobs:
        raise ConfigError("round-based replay: the workload has no jobs")
    setup = _setup(jobs, workers, throughputs, round_s, reset_interval_s)
    rounds = _Rounds(jobs, setup, policy, seed)
    if log is not None:
        log(r.EpisodeStarted("episode_started", jobs[0].arrival_s, None,
                             SCENARIO, seed, {"workers": dict(setup.workers), "round_s": round_s,
                                              "policy": policy.name,
                                              "reset_interval_s": reset_interval_s}))  # fmt: skip
        rounds.emit = log
    run = rounds.run()
    if log is not None:
        log(r.EpisodeEnded("episode_ended", run.makespan_s, None, "drained"))
    return run


@dataclass(frozen=True)
class _Setup:
    workers: dict[str, int]
    throughputs: dict[tuple[str, int], dict[str, float]]
    round_s: float
    reset_interval_s: float


@dataclass
class _Dispatch:
    """A job run in the current round: its type, the steps it runs and when it stops."""

    active: _Active
    worker_type: str
    steps: int
    end_s: float


def _setup(
    jobs: Sequence[GavelJob], workers: Mapping[str, int], throughputs: Throughputs,
    round_s: float, reset_interval_s: float,
) -> _Setup:  # fmt: skip
    """The cluster and each job's throughputs, checked: every job has a throughput and fits
    some worker type."""
    types = [t for t in WORKER_TYPES if workers.get(t, 0) > 0]
    unknown = sorted(set(workers) - set(WORKER_TYPES))
    if unknown or not types:
        raise ConfigError(f"workers: worker types are {', '.join(WORKER_TYPES)}, "
                          f"got {', '.join(unknown) or 'no workers'}")  # fmt: skip
    cluster = {t: workers[t] for t in sorted(types)}
    table: dict[tuple[str, int], dict[str, float]] = {}
    widest = max(cluster.values())
    for job in jobs:
        key = (job.job_type, job.scale_factor)
        if key not in throughputs:
            raise ConfigError(f"line {job.line}: no throughput for {job.job_type!r} on "
                              f"{job.scale_factor} GPU(s) in the throughput table")  # fmt: skip
        if job.scale_factor > widest:
            raise ConfigError(f"line {job.line}: {job.scale_factor} GPUs, more than any "
                              f"worker type has ({widest})")  # fmt: skip
        table[key] = {t: throughputs[key].get(t, 0.0) for t in types}
    return _Setup(cluster, table, round_s, reset_interval_s)


class _Rounds:
    def __init__(self, jobs: Sequence[GavelJob], setup: _Setup, policy: RoundPolicy, seed: int):
        self.jobs, self.policy = jobs, policy
        self.workers, self.throughputs = setup.workers, setup.throughputs
        self.round_s, self.reset_interval_s = setup.round_s, setup.reset_interval_s
        self.types = [t for t in WORKER_TYPES if t in self.workers]
        self.shuffler = random.Random(seed + 5)  # Gavel seeds its type order so
        self.active: dict[int, _Active] = {}
        self.allocation: Allocation = {}
        self.type_time_s = dict.fromkeys(self.types, 0.0)
        self.last_reset_s = 0.0
        self.stale = False  # jobs came or went since the allocation was computed
        self.now = jobs[0].arrival_s
        self.emit: Append = lambda record: None
        self.results: list[JobResult] = []
        self.busy_gpu_s = dict.fromkeys(self.types, 0.0)
        self.ran_last: dict[int, str] = {}  # job id -> the type it ran on in the last round

    def run(self) -> RoundRun:
        arrivals = list(enumerate(self.jobs))
        arrivals.reverse()  # popped from the end, in arrival order
        running: list[_Dispatch] = []
        round_start_s: float | None = None  # end of the last round that ran anything
        previous_end_s: float | None = None
        rounds = 0
        while len(self.results) < len(self.jobs):
            events: list[r.AnyRecord] = []  # this round's, emitted in time order
            if not arrivals and not running:
                self.last_reset_s = 0.0
            if running:
                round_start_s = previous_end_s if previous_end_s is not None else 0.0
                previous_end_s = self.now = max(d.end_s for d in running)
            elif arrivals:
                self.now = arrivals[-1][1].arrival_s
            for dispatch in running:
                self._close(dispatch, round_start_s or 0.0, events)
            while arrivals and arrivals[-1][1].arrival_s <= self.now:
                self._admit(*arrivals.pop(), events)
            running = self._dispatch(events)
            events.sort(key=lambda record: record.t_s)
            for record in events:
                self.emit(record)
            rounds += bool(running)
            if not running and not arrivals and len(self.results) < len(self.jobs):
                raise ConfigError("round-based replay: jobs left that no worker type can run")
        self.results.sort(key=lambda result: result.job_id)
        return RoundRun(self.results, rounds, self.now, self.busy_gpu_s)

    def _close(self, d: _Dispatch, round_start_s: float, events: list[r.AnyRecord]) -> None:
        """A round's end for one job run in it: its steps and time counted, or a failed round."""
        active, worker_type = d.active, d.worker_type
        if d.steps < active.job.scale_factor:
            # Gavel splits a round's steps evenly over the job's workers; one with no step
            # fails the round, which counts nothing and is retried.
            active.failed_rounds += 1
            self.stale = True
            if active.failed_rounds >= MAX_FAILED_ROUNDS:
                self.results.append(self._finish(active, d.end_s, dropped=True))
                events.append(r.JobFailed("job_failed", d.end_s, None, _name(active), DROPPED))
                self.ran_last.pop(active.job_id, None)
            return
        active.failed_rounds = 0
        ran_s = d.end_s - round_start_s
        active.steps_done += d.steps
        active.credit_s[worker_type] += ran_s
        self.type_time_s[worker_type] += ran_s
        gpu_s = d.steps / active.throughput[worker_type] * active.job.scale_factor
        self.busy_gpu_s[worker_type] += gpu_s
        active.gpu_s += gpu_s
        if active.steps_left <= 0:
            result = self._finish(active, d.end_s)
            self.results.append(result)
            events.append(r.JobFinished("job_finished", d.end_s, None, _name(active), worker_type,
                                        active.job.scale_factor,
                                        result.gpu_s / active.job.scale_factor))  # fmt: skip
            self.ran_last.pop(active.job_id, None)

    def _dispatch(self, events: list[r.AnyRecord]) -> list[_Dispatch]:
        """Start this round: the jobs it runs, each for a round of steps or what it has left;
        a job starts (an event) when it did not run on this type in the last round, and one
        that ran then and not now is preempted."""
        running: list[_Dispatch] = []
        this_round: dict[int, str] = {}
        for active, worker_type in self._pick():
            thr = active.throughput[worker_type]
            steps = min(int(thr * self.round_s), active.steps_left)
            running.append(_Dispatch(active, worker_type, steps, self.now + steps / thr))
            active.rounds += 1
            this_round[active.job_id] = worker_type
            if self.ran_last.get(active.job_id) != worker_type:
                active.starts += 1
                events.append(r.JobStarted("job_started", self.now, None, _name(active),
                                           worker_type, active.job.scale_factor, steps / thr,
                                           self.now - active.job.arrival_s))  # fmt: skip
        for job_id, worker_type in self.ran_last.items():
            if this_round.get(job_id) != worker_type:
                events.append(r.JobInterrupted("job_interrupted", self.now, None, _name(job_id),
                                               worker_type, "preempted", 0.0,
                                               self.active[job_id].starts))  # fmt: skip
        self.ran_last = this_round
        return running

    def _admit(self, job_id: int, job: GavelJob, events: list[r.AnyRecord]) -> None:
        """A job joins at the round's start, with half a round of credit on every type."""
        half = self.round_s / 2
        throughput = self.throughputs[(job.job_type, job.scale_factor)]
        self.active[job_id] = _Active(
            job_id, job, throughput,
            credit_s=dict.fromkeys(self.types, half), deficit_s=dict.fromkeys(self.types, 0.0),
        )  # fmt: skip
        self.stale = True
        fastest = max(throughput.values())
        work_gpu_s = job.total_steps / fastest * job.scale_factor if fastest > 0 else 0.0
        events.append(
            r.JobArrived(
                "job_arrived",
                job.arrival_s,
                None,
                _name(job_id),
                job.scale_factor,
                work_gpu_s,
                job.priority_weight,
                None,
            )
        )

    def _finish(self, active: _Active, end_s: float, *, dropped: bool = False) -> JobResult:
        del self.active[active.job_id]
        self.stale = True
        job = active.job
        return JobResult(active.job_id, job.line, job.job_type, job.scale_factor, job.arrival_s,
                         end_s, active.rounds, active.gpu_s, dropped)  # fmt: skip

    def _reallocate(self) -> None:
        """Reset every job's credit (its shortfall against the old allocation kept as a
        deficit, the tie-break) and recompute the allocation, when due."""
        since_s = self.now - self.last_reset_s
        if not self.stale or not (since_s >= self.reset_interval_s or self.last_reset_s == 0):
            return
        half = self.round_s / 2
        for t in self.types:
            self.type_time_s[t] = 0.0
            for job_id, active in self.active.items():
                owed_s = self.allocation.get(job_id, {}).get(t, 0.0) * since_s
                active.deficit_s[t] += owed_s - (active.credit_s[t] - half)
                active.credit_s[t] = half
                self.type_time_s[t] += half
        self.last_reset_s = self.now
        jobs = [PolicyJob(i, a.job.scale_factor, a.job.priority_weight, a.throughput)
                for i, a in self.active.items()]  # fmt: skip
        self.allocation = self.policy.allocate(jobs, self.workers)
        self.stale = False

    def _priority(self, job_id: int, active: _Active, worker_type: str) -> float:
        share = self.allocation.get(job_id, {}).get(worker_type)
        if share is None or share == 0.0 or active.throughput[worker_type] == 0:
            return 0.0
        type_time_s = self.type_time_s[worker_type]
        had = active.credit_s[worker_type] / type_time_s if type_time_s else 0.0
        return share / had if had > 0 else share * 1e9

    def _pick(self) -> list[tuple[_Active, str]]:
        """This round's jobs and the type each runs on: types in a shuffled order, each type's
        jobs by priority (then deficit, then share), greedily while its workers last."""
        self._reallocate()
        order = [t for t in WORKER_TYPES if t in self.types]
        self.shuffler.shuffle(order)
        queue: list[tuple[int, str]] = []
        for t in order:
            ranked = sorted(
                self.active.items(),
                key=lambda item: (self._priority(item[0], item[1], t), item[1].deficit_s[t],
                                  self.allocation.get(item[0], {}).get(t, 0.0)),
                reverse=True,
            )  # fmt: skip
            queue += [(job_id, t) for job_id, _ in ranked]
        left = dict(self.workers)
        taken: set[int] = set()
        picked: list[tuple[_Active, str]] = []
        for job_id, t in queue:
            active = self.active[job_id]
            if left[t] == 0 or job_id in taken or active.throughput[t] <= 0:
                continue
            if self.policy.uses_priority and self._priority(job_id, active, t) <= 0:
                continue
            if active.job.scale_factor > left[t]:
                continue
            left[t] -= active.job.scale_factor
            taken.add(job_id)
            if job_id in self.allocation:  # a job not yet allocated holds its workers idle
                picked.append((active, t))
        return picked


def _name(job: _Active | int) -> str:
    """A job's id in the event log: its index in the workload, from 0 (Gavel's job id)."""
    return str(job if isinstance(job, int) else job.job_id)
