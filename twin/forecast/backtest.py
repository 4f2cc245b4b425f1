"""`twin backtest`: forecasts from many instants of a trace, scored against what it recorded.

Instants are the held-out part of a split (odd days of `alternate-days`, the second half of
`halves`): by default each held-out job's submission (the question a queue-wait predictor
answers: when will the job just submitted start?), thinned evenly to `max_cuts`; or every
`every_h` hours, scoring every job waiting then. Each instant's snapshot is forecast three
ways beside two baselines computed from the same history (the window before the instant):

- the twin: run times and arrivals drawn (`forecast`);
- the oracle: the twin told each job's true run time and the arrivals that came, which
  isolates the scheduler model's own error from run-time uncertainty;
- the class's historical median wait (jobs of its GPU class that started in the window), and
  a QBETS-style estimate: the median and 10-90% quantiles of the class's window waits longer
  than the job has already waited.

A forecast is scored on each job waiting at its instant whose start the trace recorded:
start-time error, the share within 1 min / 10 min / 1 h, and whether the 80% interval covered
the start; by GPU class (share, 1, 2, 4, 8+). Queue length (all tenants) is scored at +1 h and
+6 h against the trace's own queue then.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from twin.errors import ConfigError
from twin.forecast.forecast import Forecast, Known, forecast
from twin.forecast.models import CLASSES
from twin.forecast.snapshot import cut
from twin.replay.cluster import Cluster
from twin.replay.common import gpu_class
from twin.replay.run import Queue
from twin.schema.scheduling import SchedulerConfig
from twin.schema.snapshot import Snapshot, SnapshotJob
from twin.sim.jobrecord import JobRecord

DAY_S = 86_400.0
QUEUE_AT_H = (1.0, 6.0)
WITHIN_S = (60.0, 600.0, 3600.0)
METHODS = ("twin", "oracle", "median", "qbets")
MAX_GRID = 1_000_000


@dataclass(frozen=True)
class Setup:
    cluster: Cluster
    queue: Queue
    scheduler: SchedulerConfig
    window_s: float = 7 * DAY_S
    samples: int = 20
    horizon_s: float = 6 * 3600.0
    seed: int = 0


@dataclass(frozen=True)
class Scored:
    """One job's start, forecast at one instant, by each method: (p10, p50, p90) or None."""

    at_s: float
    job_id: str
    gpu_class: str
    tenant: str
    submit_s: float
    actual_s: float
    predicted: dict[str, tuple[float, float, float] | None]


@dataclass(frozen=True)
class QueueScore:
    at_s: float
    ahead_h: float
    predicted: float
    actual: float


def held_out(at_s: float, split: str, span_s: float) -> bool:
    """Whether an instant lies in the held-out part of `split`."""
    if split == "alternate-days":
        return int(at_s // DAY_S) % 2 == 1
    return at_s >= span_s / 2


def instants(records: Sequence[JobRecord], split: str, *, every_h: float | None,
             max_cuts: int) -> list[float]:  # fmt: skip
    """The held-out instants: each held-out submission, or every `every_h` hours; evenly
    thinned to at most `max_cuts`."""
    span_s = records[-1].submit_s if records else 0.0
    if every_h is None:
        times = [r.submit_s for r in records if held_out(r.submit_s, split, span_s)]
    else:
        if span_s / (every_h * 3600) > MAX_GRID:
            raise ConfigError(f"--every-h {every_h:g}: over {MAX_GRID:,} instants in the trace")
        grid = np.arange(every_h * 3600, span_s, every_h * 3600)
        times = [float(t) for t in grid if held_out(float(t), split, span_s)]
    if len(times) > max_cuts:
        picks = np.linspace(0, len(times) - 1, max_cuts).round().astype(int)
        times = [times[i] for i in sorted(set(picks.tolist()))]
    return times


def backtest(
    records: Sequence[JobRecord],
    times: Sequence[float],
    setup: Setup,
    progress: Callable[[int], None] | None = None,
) -> tuple[list[Scored], list[QueueScore]]:
    """Forecast from each instant of `times` and score on what `records` (in submission order)
    recorded."""
    submits = [r.submit_s for r in records]
    scored: list[Scored] = []
    queues: list[QueueScore] = []
    for n, at_s in enumerate(times):
        state = _cut(records, submits, at_s, setup)
        todo = [j for j in state.waiting if _actual(records, submits, j) is not None]
        if todo or n % 4 == 0:  # queues on a quarter of the instants when none waits
            twin = forecast(state, samples=setup.samples, horizon_s=setup.horizon_s,
                            step_s=1800.0, seed=setup.seed + n)  # fmt: skip
            queues += _queue_scores(records, submits, at_s, twin)
        if todo:
            oracle = forecast(state, samples=setup.samples, horizon_s=setup.horizon_s,
                              step_s=setup.horizon_s, seed=setup.seed + n,
                              known=_known(records, submits, state, setup.horizon_s))  # fmt: skip
            history = _waits(records, submits, at_s, setup.window_s)
            by_id = {a.job_id: (a, b) for a, b in zip(twin.jobs, oracle.jobs, strict=True)}
            for job in todo:
                actual = _actual(records, submits, job)
                assert actual is not None
                mine, told = by_id[job.job_id]
                scored.append(Scored(at_s, job.job_id, gpu_class(job.gpus), job.tenant,
                                     job.submit_s, actual, {
                                         "twin": mine.start_s, "oracle": told.start_s,
                                         **_baselines(history, job, at_s)}))  # fmt: skip
        if progress is not None:
            progress(n + 1)
    return scored, queues


def _cut(records: Sequence[JobRecord], submits: list[float], at_s: float,
         setup: Setup) -> Snapshot:  # fmt: skip
    """The snapshot at `at_s`, with the job submitted at that instant waiting in it."""
    state = cut(records, at_s, window_s=setup.window_s, cluster=setup.cluster,
                queue=setup.queue, scheduler=setup.scheduler)  # fmt: skip
    # The job submitted at the instant waits at it even when the trace started it then.
    last = bisect.bisect_right(submits, at_s)
    extra = [records[i] for i in range(last - 1, -1, -1) if submits[i] == at_s
             and records[i].observed_start_s == at_s and records[i].gpus > 0]  # fmt: skip
    if not extra:
        return state
    moved = {r.job_id for r in extra}
    return state.model_copy(update={
        "running": [j for j in state.running if j.job_id not in moved],
        "waiting": [*state.waiting, *(_job(r) for r in reversed(extra))],
    })  # fmt: skip


def _job(rec: JobRecord) -> SnapshotJob:
    return SnapshotJob(job_id=rec.job_id, tenant=rec.tenant, gpus=rec.gpus,
                       gpu_type=rec.gpu_type, priority=rec.priority, cpu_milli=rec.cpu_milli,
                       submit_s=rec.submit_s)  # fmt: skip


def _index(records: Sequence[JobRecord], submits: list[float], job: SnapshotJob) -> int:
    i = bisect.bisect_left(submits, job.submit_s)
    while records[i].job_id != job.job_id:
        i += 1
    return i


def _actual(records: Sequence[JobRecord], submits: list[float], job: SnapshotJob) -> float | None:
    return records[_index(records, submits, job)].observed_start_s


def _run_s(rec: JobRecord, end_of_trace_s: float) -> float:
    start = rec.observed_start_s if rec.observed_start_s is not None else rec.submit_s
    end = rec.observed_end_s if rec.observed_end_s is not None else end_of_trace_s
    return max(end - start, 0.0)


def _known(records: Sequence[JobRecord], submits: list[float], state: Snapshot,
           horizon_s: float) -> Known:  # fmt: skip
    """The oracle's knowledge: true run times of the snapshot's jobs, and the arrivals."""
    end_s = records[-1].submit_s
    run_s = {j.job_id: _run_s(records[_index(records, submits, j)], end_s)
             for j in (*state.running, *state.waiting)}  # fmt: skip
    first = bisect.bisect_right(submits, state.at_s)
    last = bisect.bisect_right(submits, state.at_s + horizon_s)
    arrivals = [(records[i].submit_s - state.at_s, _job(records[i]), _run_s(records[i], end_s))
                for i in range(first, last) if records[i].gpus > 0]  # fmt: skip
    return Known(run_s, arrivals)


def _waits(records: Sequence[JobRecord], submits: list[float], at_s: float,
           window_s: float) -> dict[str, list[float]]:  # fmt: skip
    """Waits by class of the jobs submitted in the window that started before `at_s`."""
    out: dict[str, list[float]] = {c: [] for c in CLASSES}
    for i in range(bisect.bisect_left(submits, at_s - window_s), bisect.bisect_left(submits, at_s)):
        rec = records[i]
        if rec.observed_start_s is not None and rec.observed_start_s <= at_s and rec.gpus > 0:
            out[gpu_class(rec.gpus)].append(rec.observed_start_s - rec.submit_s)
    return out


def _baselines(history: dict[str, list[float]], job: SnapshotJob,
               at_s: float) -> dict[str, tuple[float, float, float] | None]:  # fmt: skip
    waits = history[gpu_class(job.gpus)] or [w for c in CLASSES for w in history[c]]
    if not waits:
        return {"median": None, "qbets": None}
    waited = at_s - job.submit_s
    median = max(at_s, job.submit_s + float(np.median(waits)))
    longer = [w for w in waits if w > waited]
    if longer:
        q10, q50, q90 = (job.submit_s + float(q) for q in np.quantile(longer, (0.1, 0.5, 0.9)))
        qbets = (max(q10, at_s), max(q50, at_s), max(q90, at_s))
    else:
        qbets = (at_s, at_s, at_s)
    return {"median": (median, median, median), "qbets": qbets}


def _queue_at(records: Sequence[JobRecord], submits: list[float], t_s: float) -> int:
    """Jobs the trace shows waiting at `t_s`: submitted, and started later (a job with no
    recorded start, never started or running before the trace began, is not counted)."""
    waiting = 0
    for i in range(bisect.bisect_right(submits, t_s)):
        rec = records[i]
        if rec.gpus > 0 and rec.observed_start_s is not None and rec.observed_start_s > t_s:
            waiting += 1
    return waiting


def _queue_scores(records: Sequence[JobRecord], submits: list[float], at_s: float,
                  twin: Forecast) -> list[QueueScore]:  # fmt: skip
    band = next(b for b in twin.bands if b.kind == "queue" and b.name == "(all)")
    out = []
    for ahead_h in QUEUE_AT_H:
        i = int(abs(twin.offsets_s - ahead_h * 3600).argmin())
        if twin.offsets_s[i] != ahead_h * 3600 or at_s + ahead_h * 3600 > submits[-1]:
            continue
        actual = _queue_at(records, submits, at_s + ahead_h * 3600)
        out.append(QueueScore(at_s, ahead_h, float(band.quantiles[1, i]), float(actual)))
    return out


@dataclass(frozen=True)
class ClassScore:
    """A method's scores on one class of jobs."""

    method: str
    gpu_class: str
    jobs: int
    median_abs_error_s: float
    mean_abs_error_s: float
    within_s: dict[float, float]  # share within each of WITHIN_S
    coverage: float | None  # share inside the 80% interval (None: the method gives none)
    actual_median_wait_s: float


def summarise(scored: Sequence[Scored]) -> list[ClassScore]:
    """Each method's scores, per GPU class present and over all jobs ("all")."""
    out = []
    groups = [(c, [s for s in scored if s.gpu_class == c]) for c in CLASSES]
    for name, group in [*groups, ("all", list(scored))]:
        if not group:
            continue
        wait = float(np.median([s.actual_s - s.submit_s for s in group]))
        for method in METHODS:
            rows = [s for s in group if s.predicted[method] is not None]
            if not rows:
                continue
            errors = np.array([abs(s.predicted[method][1] - s.actual_s) for s in rows])  # type: ignore[index]
            lo_hi = [(s.predicted[method][0], s.predicted[method][2], s.actual_s)  # type: ignore[index]
                     for s in rows]  # fmt: skip
            coverage = (None if method == "median" else
                        float(np.mean([lo <= a <= hi for lo, hi, a in lo_hi])))  # fmt: skip
            out.append(ClassScore(method, name, len(rows), float(np.median(errors)),
                                  float(np.mean(errors)),
                                  {w: float(np.mean(errors <= w)) for w in WITHIN_S},
                                  coverage, wait))  # fmt: skip
    return out
