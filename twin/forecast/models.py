"""What a forecast does not know at its instant, modelled from what it does: how long each job
runs (by class of GPU count) and which jobs arrive next.

- Run times: a Kaplan-Meier survival curve per class from the window's runs, those that ended
  (observed) and those still running at the instant (censored at their age), so long runs
  still going are not left out. A running job's remaining time is drawn from the curve beyond
  its age (its residual life); past the curve's last drop, beyond the longest run seen (ended
  or still running), with an exponential tail whose mean is the larger of its age and the
  class's mean. A class with fewer than `MIN_RUNS` ended runs takes the pooled curve. A time
  limit caps a draw.
- A job that declares a time limit (Slurm's `--time`) runs for a share of it: a Kaplan-Meier
  curve of run time over limit, fitted the same way on the window's runs whose limits were
  near its own (within a factor of `NEAR_LIMIT`; the running ones censored at age over
  limit), gives that share beyond the share it has already run. Users ask limits of a job's
  kind, so the share varies less than the run time does; near limits, because limits come in
  round units (a minute, an hour) that a short job fills less of. A run never passes its
  limit. The curve stands beside a prior of `PRIOR_RUNS` run of any share of what is left of
  the limit, as likely: a draw takes the curve with chance n / (n + 1) for n runs ended near
  it (a posterior predictive with one pseudo-run), so a curve of one run is not as sure as one
  of fifty; with none near, the prior alone. No ended run with a limit at all: the class
  curves. A share curve is fitted from one ended run on (`MIN_LIMITED_RUNS`, the running ones
  censored beside it): a real Slurm keeps ended jobs in `squeue` for `MinJobAge` (5 minutes by
  default), so a capture's history is often a handful of runs, and the shares of a few runs
  near a job's limit tell more of its run than curves of run time that ignore the limit (on a
  driven Slurm's first minutes, those drew a median 72 s for runs of 21 s).
- Arrivals: a Poisson process at the window's rate; each arrival is one of the window's jobs,
  drawn at random (its shape: GPUs, tenant, GPU model, priority, CPU), with a run time drawn
  from its class's curve.
- A job whose run time the snapshot knows (`run_s`: a twin session's own jobs) runs for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from twin.replay.common import GPU_CLASSES, gpu_class
from twin.schema.snapshot import Snapshot, SnapshotJob

MIN_RUNS = 5
MIN_LIMITED_RUNS = 1
PRIOR_RUNS = 1.0
NEAR_LIMIT = 2.0
CLASSES = GPU_CLASSES


@dataclass(frozen=True)
class Survival:
    """A Kaplan-Meier curve: S(t) just after each time of `times` is `surviving`."""

    times: np.ndarray
    surviving: np.ndarray
    mean_s: float
    seen_s: float = 0.0  # the longest run it saw, ended or still running
    runs: int = 0  # the ended runs it was fitted on

    @classmethod
    def fit(cls, ended_s: Sequence[float], censored_s: Sequence[float]) -> Survival:
        ended = np.sort(np.asarray(ended_s, dtype=float))
        censored = np.sort(np.asarray(censored_s, dtype=float))
        times = np.unique(ended)
        at_risk = (len(ended) - np.searchsorted(ended, times, side="left")) + (
            len(censored) - np.searchsorted(censored, times, side="left")
        )
        deaths = np.searchsorted(ended, times, side="right") - np.searchsorted(
            ended, times, side="left"
        )
        surviving = np.cumprod(1.0 - deaths / np.maximum(at_risk, 1))
        mean_s = float(ended.mean()) if len(ended) else 3600.0
        seen_s = max(float(ended[-1]) if len(ended) else 0.0,
                     float(censored[-1]) if len(censored) else 0.0)  # fmt: skip
        return cls(times, surviving, mean_s, seen_s, len(ended))

    def at(self, t_s: float) -> float:
        """S(t): the chance a run lasts longer than `t_s`."""
        i = int(np.searchsorted(self.times, t_s, side="right"))
        return 1.0 if i == 0 else float(self.surviving[i - 1])

    def remaining(self, age_s: float, rng: np.random.Generator) -> float:
        """A draw of the time left to a run that has lasted `age_s`."""
        alive = self.at(age_s)
        target = rng.random() * alive
        if alive > 0:
            first = int(np.searchsorted(self.times, age_s, side="right"))
            below = np.nonzero(self.surviving[first:] <= target)[0]
            if len(below):
                return float(self.times[first + below[0]] - age_s)
        # past its last drop, a run lasts at least as long as the longest one seen
        last = max(float(self.times[-1]) if len(self.times) else age_s, self.seen_s)
        return max(last - age_s, 0.0) + float(rng.exponential(max(age_s, self.mean_s)))


class RunTimes:
    """A survival curve per class of GPU count, fitted on a snapshot's window."""

    def __init__(self, snapshot: Snapshot) -> None:
        ended: dict[str, list[float]] = {c: [] for c in CLASSES}
        censored: dict[str, list[float]] = {c: [] for c in CLASSES}
        for run in snapshot.history:
            ended[gpu_class(run.gpus)].append(run.end_s - run.start_s)
        for job in snapshot.running:
            if job.start_s is not None:
                censored[gpu_class(job.gpus)].append(snapshot.at_s - job.start_s)
        pooled = Survival.fit([x for c in CLASSES for x in ended[c]],
                              [x for c in CLASSES for x in censored[c]])  # fmt: skip
        self.curves = {
            c: Survival.fit(ended[c], censored[c]) if len(ended[c]) >= MIN_RUNS else pooled
            for c in CLASSES
        }
        self.runs = sum(len(v) for v in ended.values())
        # (limit, share of it run) of the runs that had limits: ended, and running (censored)
        self._ended = [(r.time_limit_s, (r.end_s - r.start_s) / r.time_limit_s)
                       for r in snapshot.history if r.time_limit_s]  # fmt: skip
        self._running = [(j.time_limit_s, (snapshot.at_s - j.start_s) / j.time_limit_s)
                         for j in snapshot.running
                         if j.time_limit_s and j.start_s is not None]  # fmt: skip
        self.of_limit = self._shares(lambda _: True)
        self._near: dict[float, Survival | None] = {}

    def _shares(self, near: Callable[[float], bool]) -> Survival | None:
        ended = [share for limit, share in self._ended if near(limit)]
        if len(ended) < MIN_LIMITED_RUNS:
            return None
        return Survival.fit(ended, [share for limit, share in self._running if near(limit)])

    def near(self, limit_s: float) -> Survival | None:
        """The share-of-limit curve of the runs whose limits were near `limit_s` (None where
        none of them has ended)."""
        if limit_s not in self._near:
            curve = self._shares(lambda lim: limit_s / NEAR_LIMIT <= lim <= limit_s * NEAR_LIMIT)
            self._near[limit_s] = curve
        return self._near[limit_s]

    def remaining(self, job: SnapshotJob, age_s: float, rng: np.random.Generator) -> float:
        if job.run_s is not None:  # known (nothing is drawn)
            return max(job.run_s - age_s, 0.0)
        limit_s = job.time_limit_s
        if limit_s is not None and self.of_limit is not None:
            curve, ran = self.near(limit_s), min(age_s / limit_s, 1.0)
            # the runs near its limit, beside `PRIOR_RUNS` of any share of what is left
            if curve is not None and rng.random() * (curve.runs + PRIOR_RUNS) < curve.runs:
                share = curve.remaining(ran, rng)
            else:
                share = rng.random() * (1.0 - ran)
            return min(share * limit_s, max(limit_s - age_s, 0.0))
        left = self.curves[gpu_class(job.gpus)].remaining(age_s, rng)
        if job.time_limit_s is not None:
            left = min(left, max(job.time_limit_s - age_s, 0.0))
        return left


@dataclass(frozen=True)
class Arrival:
    offset_s: float
    shape: SnapshotJob


class Arrivals:
    """The window's jobs, replayed as a Poisson process of its rate."""

    def __init__(self, snapshot: Snapshot) -> None:
        since = snapshot.at_s - snapshot.window_s
        shapes: list[SnapshotJob] = [j.model_copy(update={"run_s": None})  # its size, not its
                                     for j in (*snapshot.running, *snapshot.waiting)  # run time
                                     if j.submit_s >= since]  # fmt: skip
        shapes += [
            SnapshotJob(job_id="h", tenant=r.tenant, gpus=r.gpus, gpu_type=r.gpu_type,
                        priority=r.priority, cpu_milli=r.cpu_milli, submit_s=r.submit_s)
            for r in snapshot.history if r.submit_s >= since
        ]  # fmt: skip
        shapes.sort(key=lambda j: (j.submit_s, j.job_id))
        self.shapes = shapes
        self.rate_per_s = len(shapes) / snapshot.window_s

    def draw(self, horizon_s: float, rng: np.random.Generator) -> Iterable[Arrival]:
        if not self.shapes:
            return
        t = 0.0
        while True:
            t += float(rng.exponential(1.0 / self.rate_per_s))
            if t > horizon_s:
                return
            yield Arrival(t, self.shapes[int(rng.integers(len(self.shapes)))])
