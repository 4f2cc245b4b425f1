"""Calibrate the scheduler model to a trace: fit a handful of scalars on the first half of the
trace's time span by minimising the KS distance between simulated and observed queueing delay,
then report the KS on the second half with the fitted values. (With the `alternate-days` split,
fit on the jobs submitted on even days of the span and validate on those of odd days: both
halves then sample the same weeks, so a load that drifts across the span does not set the
validation's floor.)

The delays come out of the simulated mechanism only: the cluster's share available to the
trace (queueing and fragmentation), scheduling cycles, bind latency and back-off. The search is
coordinate descent over small grids (each evaluation a replay), started from the plain
event-driven scheduler; it is deterministic for a seed. A point whose delays have a tail far
past the observed one is overloaded and rejected, however well the body of its distribution
fits (KS weighs the body: a pool shrunk to the trace's own peak can match it with bursts of
backlog the real cluster never had).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from functools import partial
from itertools import repeat
from pathlib import Path

import numpy as np

from twin.errors import TraceError
from twin.processes import quiet_pool, stopping
from twin.replay import validate
from twin.replay.cluster import build
from twin.replay.common import GPU_CLASSES
from twin.replay.run import Replay, ReplayOptions, replay
from twin.replay.tenant_delays import ReplayMetrics
from twin.replay.trace import Reading, Trace
from twin.schema.scheduling import ReplayParams, SchedulerConfig
from twin.schema.summary import (
    Calibration,
    CalibrationStep,
    ClassTail,
    DelayTail,
    SeedSpread,
)
from twin.schema.vocabulary import PLACEMENTS, CalibrationSplit, Placement
from twin.sim.jobrecord import JobRecord

DAY_S = 86_400.0
SPAN_QUANTILE = 0.01  # the span starts at this quantile of submissions (skips a sparse lead-in)
SHARES = (1.0, 0.5, 0.2, 0.1, 0.05, 0.03, 0.02, 0.015, 0.01, 0.008, 0.007, 0.006)
OVERLOAD_KS = 0.15  # a smaller share this much worse than the best: stop shrinking (overload)
OVERLOAD_P99 = 10.0
"""A point whose simulated 99th-percentile delay (over the fit window) is over this many times
the observed one (at least a second) is overloaded: it scores KS 1. So is one where a class of
GPU count with `MIN_CLASS_JOBS` jobs or more has its p99 over this many times the larger of its
own observed p99 and all jobs' (a few wide jobs waiting for weeks hide in an aggregate's 99th
percentile; a class that hardly waited may still wait as long as the rest)."""
MIN_CLASS_JOBS = 10
GRIDS: dict[str, tuple[float, ...]] = {
    "cycle_s": (0.0, 0.5, 1.0, 2.0, 5.0, 10.0),  # a scheduler's latency is seconds, not minutes
    "backoff_s": (1.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 60.0),
    "backoff_max_s": (1.0, 2.0, 4.0, 10.0, 30.0),  # times backoff_s
    "bind_s": (0.0, 0.5, 1.0, 2.0, 5.0),
    "retry_s": (0.0, 15.0, 30.0, 60.0, 120.0),
    "conflict_hold_s": (0.0, 15.0, 30.0, 60.0, 120.0),
    "bind_conflict": (0.0, 0.1, 0.2, 0.3, 0.45, 0.6, 0.75, 0.9),
}
CYCLE_ONLY = {
    "backoff_s",
    "backoff_max_s",
    "bind_s",
    "retry_s",
    "bind_conflict",
    "conflict_hold_s",
}  # act only with cycles
SIZED_SHARES = (1.0, 0.99, 0.98)
"""A pool sized to the trace's peak demand: a little less is plausible, much less overloads it."""
SIZED_DEMAND_Q = 1.0  # a pool calibration sizes holds the peak: the fitted scalars queue, not it

SPREAD_SEEDS = 5  # seeds the fitted values are replayed on, to report what is the seed's
PASSES = 2
REFINE = (0.8, 0.9, 0.95, 1.05, 1.1, 1.2)  # the share's second look, as multiples of the best
BACKGROUND_USE = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
"""With a node inventory, the whole of it, its binds racing as if work the trace does not hold
kept this share busy: the alternative to a share of the nodes (which a wide job may find
fragmented by long-lived ones where the real cluster had whole nodes free)."""
TENANT_MIN_JOBS = 50  # a trace tenant's own KS is reported from this many validation jobs


@dataclass(frozen=True)
class Point:
    """One candidate: the cluster share and the scheduler's scalars."""

    capacity_share: float = 1.0
    cycle_s: float = 0.0
    backoff_s: float = 10.0
    backoff_max_s: float = 4.0  # a multiple of backoff_s
    bind_s: float = 0.0
    retry_s: float = 0.0
    bind_conflict: float = 0.0
    conflict_hold_s: float = 0.0
    placement: Placement | None = None
    background_use: float = 0.0

    def params(self, base: ReplayParams) -> ReplayParams:
        scheduler = SchedulerConfig(
            cycle_s=self.cycle_s,
            bind_s=self.bind_s if self.cycle_s > 0 else 0.0,
            backoff_s=self.backoff_s,
            backoff_max_s=self.backoff_s * self.backoff_max_s,
            retry_s=self.retry_s,
            bind_conflict=self.bind_conflict,
            conflict_hold_s=self.conflict_hold_s,
            background_use=self.background_use,
            preemption=base.scheduler.preemption,
            quota_gpus=base.scheduler.quota_gpus,
        )
        return base.model_copy(
            update={
                "scheduler": scheduler,
                "capacity_share": self.capacity_share,
                "placement": self.placement or base.placement,
            }
        )


def split_time_s(submits: Sequence[float]) -> float:
    """The middle of the trace's time span, the span starting at its 1st percentile of
    submissions (a few long-lived jobs submitted long before the rest do not stretch it)."""
    if not len(submits):
        raise TraceError("no jobs with an observed start to calibrate on")
    first = float(np.quantile(np.asarray(submits), SPAN_QUANTILE))
    return (first + float(max(submits))) / 2


def calibrate(
    trace: Path,
    base: ReplayOptions,
    *,
    hear: Callable[[str], None] = lambda _: None,
    workers: int = 1,
    split: CalibrationSplit = "halves",
    progress: Callable[[int, int], None] = lambda done, most: None,
    spread_seeds: int = SPREAD_SEEDS,
) -> Calibration:
    """Fit `base.params` to `trace` (see the module doc); `hear` is told of each improvement,
    `progress` of the replays done and the most the search can take (it often stops sooner).
    The fitted values are then replayed on `spread_seeds` seeds from the base seed on, whose
    validation KS and p99 the result reports beside the base seed's.
    With `workers` > 1, an axis's replays run in that many processes (same result). The trace
    is read once for the fit window and once for the whole (each worker reads the fit window
    once), and its jobs are handed to every replay."""
    sized = base.cluster is None and base.gpus is None
    if sized:
        peak = base.params.model_copy(update={"demand_quantile": SIZED_DEMAND_Q})
        base = replace(base, params=peak)
    whole = Trace(trace, base.reading)
    submits, gpus = _first_pass(whole, base, size=sized)
    if not submits:
        raise TraceError(
            f"{trace}: records no start times, so there is no observed delay to calibrate to"
        )
    split_s = split_time_s(submits)
    if gpus is not None:
        # Both halves on the pool the whole trace sizes (the first half alone would size less).
        base = replace(base, gpus=gpus)
    window = base.window  # split_s counts from its start, as the replay's times do
    fit_keep: Callable[[float], bool]
    later: Callable[[float], bool]
    if split == "alternate-days":
        fit_options, fit_keep, later = base, _even_day, _odd_day
    else:
        fit_options = replace(base, window=replace(window, end_s=window.start_s + split_s))
        fit_keep = _always
        later = partial(_at_or_after, split_s)

    with _pool(workers, trace, fit_options) as pool:
        most = most_replays(base)
        search = _Search(lambda p: p.params(base.params), Trace(trace, fit_options.reading),
                         fit_options, pool=pool, workers=workers, hear=hear, keep=fit_keep,
                         done=lambda n: progress(n, most))  # fmt: skip
        _descend(search, base)
    best, best_ks, steps = search.best, search.best_ks, search.steps
    params = best.params(base.params)
    metrics = ReplayMetrics()
    _, report = replay(trace, replace(base, params=params), metrics=metrics, trace=whole)
    validation = _ks(metrics, later)

    def fit_part(at: float) -> bool:  # the jobs fitted on, in the whole trace's replay
        return not later(at)

    spread = None
    if spread_seeds > 1:
        spread = _seed_spread(trace, replace(base, params=params), whole, later, spread_seeds)
    return Calibration(
        trace=str(trace),
        cluster=report.cluster_source,
        window=None if window.whole else window.describe(),
        seed=base.seed,
        split=split,
        split_s=split_s,
        params=params,
        ks_fit=best_ks,
        ks_validation=validation,
        ks_whole=_ks(metrics, _always),
        tenants=_tenant_ks(metrics, later),
        evaluations=len(search.cache),
        steps=steps,
        cdf_levels=list(validate.CDF_LEVELS),
        observed_cdf_s=validate.cdf_curve(_part(metrics, observed=True, keep=later)),
        simulated_cdf_s=validate.cdf_curve(_part(metrics, observed=False, keep=later)),
        observed_tail_s=_tail(_part(metrics, observed=True, keep=later)),
        simulated_tail_s=_tail(_part(metrics, observed=False, keep=later)),
        fit_observed_tail_s=_tail(_part(metrics, observed=True, keep=fit_part)),
        fit_simulated_tail_s=_tail(_part(metrics, observed=False, keep=fit_part)),
        seed_spread=spread,
        class_tails=_class_tails(metrics, later),
    )


def _seed_spread(trace: Path, options: ReplayOptions, whole: Trace,
                 later: Callable[[float], bool], seeds: int) -> SeedSpread:  # fmt: skip
    """The validation KS and simulated p99 of `options` on `seeds` seeds from its own on."""
    chosen = [options.seed + k for k in range(seeds)]
    ks, p99 = [], []
    for seed in chosen:
        metrics = ReplayMetrics()
        replay(trace, replace(options, seed=seed), metrics=metrics, trace=whole)
        ks.append(_ks(metrics, later))
        p99.append(_tail(_part(metrics, observed=False, keep=later)).p99)
    return SeedSpread(seeds=chosen, ks_validation=ks, p99_simulated_s=p99)


def _class_tails(metrics: ReplayMetrics, keep: Callable[[float], bool]) -> list[ClassTail]:
    """Observed beside simulated tails per class of GPU count (classes with jobs)."""
    out = []
    for index, name in enumerate(GPU_CLASSES):
        seen = _part(metrics, observed=True, keep=keep, gpu_class=index)
        if len(seen):
            simulated = _part(metrics, observed=False, keep=keep, gpu_class=index)
            out.append(ClassTail(gpu_class=name, observed=_tail(seen), simulated=_tail(simulated)))
    return out


def _tail(delays_s: np.ndarray) -> DelayTail:
    """p90, p99 and max of some delays."""
    if not len(delays_s):
        return DelayTail(jobs=0, p90=None, p99=None, max=None)
    p90, p99 = (float(q) for q in np.quantile(delays_s, (0.9, 0.99)))
    return DelayTail(jobs=len(delays_s), p90=p90, p99=p99, max=float(delays_s.max()))


Axis = tuple[tuple[str, ...], list[tuple[object, ...]]]


def most_replays(base: ReplayOptions) -> int:
    """The most points `_descend` can score: the start, every axis's grid on the first pass and
    again on the later ones (the share's grid then its refinement)."""
    shares = SHARES if base.cluster is not None else SIZED_SHARES
    axes = _axes(shares, placements=base.cluster is not None and base.params.placement is None)
    first = sum(len(grid) for _, grid in axes)
    later = first - len(axes[0][1]) + len(REFINE)
    return 1 + first + (PASSES - 1) * later


def _descend(search: _Search, base: ReplayOptions) -> None:
    """Coordinate descent over the axes, a few passes, until a pass improves nothing."""
    shares = SHARES if base.cluster is not None else SIZED_SHARES
    axes = _axes(shares, placements=base.cluster is not None and base.params.placement is None)
    for n in range(PASSES):
        if n:  # a finer look around the share found
            near = (round(search.best.capacity_share * f, 6) for f in REFINE)
            axes[0] = (("capacity_share",), [(v,) for v in near if 0 < v <= 1])
        improved = False
        for names, grid in axes:
            if search.best.cycle_s == 0 and CYCLE_ONLY & set(names):
                continue  # without cycles these do not act
            improved |= search.axis(names, grid)
        if not improved:
            break


_FIT: Trace | None = None  # a worker process's fit window, read once


def _pool(
    workers: int, path: Path, options: ReplayOptions
) -> AbstractContextManager[ProcessPoolExecutor | None]:
    """A process pool whose workers each read the fit window once (None: replay in process)."""
    if workers <= 1:
        return nullcontext()
    return stopping(quiet_pool(workers, _open_fit, (path, options.reading)))


def _open_fit(path: Path, reading: Reading) -> None:
    global _FIT  # noqa: PLW0603 (a worker's own trace, set once by the pool's initializer)
    _FIT = Trace(path, reading)


def _fit_in_worker(options: ReplayOptions, params: ReplayParams,
                   keep: Callable[[float], bool]) -> float:  # fmt: skip
    assert _FIT is not None, "the pool's initializer opens the fit window"
    return fit_score(_FIT, options, params, keep)


class _Search:
    """Coordinate descent's state: the best point so far, its KS, the steps that improved it,
    and every point's KS (replays of an axis's points may run in a process pool)."""

    def __init__(
        self,
        params: Callable[[Point], ReplayParams],
        trace: Trace,
        options: ReplayOptions,
        *,
        pool: ProcessPoolExecutor | None,
        workers: int,
        hear: Callable[[str], None],
        keep: Callable[[float], bool],
        done: Callable[[int], None],
    ) -> None:
        self._params, self._trace, self._options = params, trace, options
        self._keep, self._done = keep, done
        self._pool, self._workers, self._hear = pool, workers, hear
        self.cache: dict[Point, float] = {}
        self.best = Point(cycle_s=1.0)
        self.best_ks = self.scores([self.best])[0]
        self.steps = [CalibrationStep(**_describe(self.best), ks=self.best_ks)]
        hear(f"start: KS {self.best_ks:.3f}")

    def scores(self, points: list[Point]) -> list[float]:
        todo = [p for p in dict.fromkeys(points) if p not in self.cache]
        params = [self._params(p) for p in todo]
        if self._pool is not None and len(todo) > 1:
            done = list(self._pool.map(_fit_in_worker, repeat(self._options), params,
                                       repeat(self._keep)))  # fmt: skip
        else:
            done = [fit_score(self._trace, self._options, p, self._keep) for p in params]
        self.cache.update(zip(todo, done, strict=True))
        self._done(len(self.cache))
        return [self.cache[p] for p in points]

    def axis(self, names: tuple[str, ...], grid: list[tuple[object, ...]]) -> bool:
        """Try each of `grid`'s values for `names` from the best point; whether one improved
        it. Shares go a worker's worth at a time: past an overload, smaller ones only overload
        the cluster further (and slowly), so the axis ends there. Other axes go all at once."""
        shares = names == ("capacity_share",)
        chunk = max(self._workers if shares else len(grid), 1)
        base, improved = self.best, False
        for start in range(0, len(grid), chunk):
            batch = grid[start : start + chunk]
            points = [replace(base, **dict(zip(names, v, strict=True))) for v in batch]  # type: ignore[arg-type]
            for values, point, score in zip(batch, points, self.scores(points), strict=True):
                if shares and score > self.best_ks + OVERLOAD_KS:
                    return improved
                if score < self.best_ks - 1e-9:
                    self.best, self.best_ks, improved = point, score, True
                    self.steps.append(CalibrationStep(**_describe(point), ks=score))
                    self._hear(", ".join(f"{k}={v}" for k, v in zip(names, values, strict=True))
                               + f": KS {score:.3f}")  # fmt: skip
        return improved


def _axes(shares: tuple[float, ...], *, placements: bool) -> list[Axis]:
    """The search's axes in order: the share; the conflict chance with the back-off, then with
    the hold (they trade off: fewer conflicts with longer waits look alike); each scalar; with
    a node inventory, the placement, and the whole inventory under background use."""
    axes: list[Axis] = [(("capacity_share",), [(v,) for v in shares])]
    axes += [(("bind_conflict", partner),
              [(c, v) for c in GRIDS["bind_conflict"] for v in GRIDS[partner]])
             for partner in ("backoff_s", "conflict_hold_s")]  # fmt: skip
    axes += [((name,), [(v,) for v in grid]) for name, grid in GRIDS.items()]
    if placements:
        axes.append((("placement",), [(p,) for p in PLACEMENTS]))
        axes.append((("capacity_share", "background_use"),
                     [(1.0, b) for b in BACKGROUND_USE]))  # fmt: skip
    return axes


def fit_score(trace: Trace, options: ReplayOptions, params: ReplayParams,
              keep: Callable[[float], bool] | None = None) -> float:  # fmt: skip
    """The KS of queueing delay of one replay (of the fit window) with `params`, over the jobs
    whose submit time `keep`s; 1 if its tail, or a class's, says the pool is overloaded (see
    OVERLOAD_P99)."""
    metrics = ReplayMetrics()
    Replay(trace, replace(options, params=params)).run(metrics=metrics)
    keep = keep or _always
    seen = _part(metrics, observed=True, keep=keep)
    simulated = _part(metrics, observed=False, keep=keep)
    if _overloaded(seen, simulated):
        return 1.0
    whole_p99_s = float(np.quantile(seen, 0.99)) if len(seen) else 1.0
    for index, part in _classes(metrics, keep):
        mine = _part(metrics, observed=False, keep=keep, gpu_class=index)
        if _overloaded(part, mine, floor_s=whole_p99_s):
            return 1.0
    return _distance(seen, simulated)


def _classes(
    metrics: ReplayMetrics, keep: Callable[[float], bool]
) -> Iterator[tuple[int, np.ndarray]]:
    """Each class of GPU count with `MIN_CLASS_JOBS` observed delays or more: its index and them."""
    for index in range(len(GPU_CLASSES)):
        seen = _part(metrics, observed=True, keep=keep, gpu_class=index)
        if len(seen) >= MIN_CLASS_JOBS:
            yield index, seen


def _overloaded(seen: np.ndarray, simulated: np.ndarray, *, floor_s: float = 1.0) -> bool:
    """The simulated p99 over OVERLOAD_P99 times the observed one (or `floor_s`, if more)."""
    if not len(seen) or not len(simulated):
        return False
    limit_s = OVERLOAD_P99 * max(float(np.quantile(seen, 0.99)), floor_s, 1.0)
    return float(np.quantile(simulated, 0.99)) > limit_s


def _always(_: float) -> bool:
    return True


def _at_or_after(split_s: float, at: float) -> bool:
    return at >= split_s


def _even_day(at: float) -> bool:
    """Submitted on an even day of the span (day 0 first)."""
    return int(at // DAY_S) % 2 == 0


def _odd_day(at: float) -> bool:
    return int(at // DAY_S) % 2 == 1


def _first_pass(trace: Trace, base: ReplayOptions, *, size: bool) -> tuple[list[float], int | None]:
    """One read of the trace: the submit times of jobs it saw start, and (if `size`) the GPUs
    of the pool a replay would size from it."""
    records, _ = trace.jobs()
    submits: list[float] = []

    def noted() -> Iterator[JobRecord]:
        for rec in records:
            if rec.observed_start_s is not None:
                submits.append(rec.submit_s)
            yield rec

    if size:
        sizing = ReplayParams(demand_quantile=base.params.demand_quantile)
        return submits, build(noted(), None, None, sizing).pools[0].max_gpus
    deque(noted(), maxlen=0)
    return submits, None


def _part(
    metrics: ReplayMetrics,
    *,
    observed: bool,
    keep: Callable[[float], bool],
    group: int = -1,
    gpu_class: int = -1,
) -> np.ndarray:
    """Observed or simulated first-start delays of the jobs whose submit time `keep`s (of one
    trace tenant's group code and one class of GPU count (a GPU_CLASSES index), or all)."""
    if observed:
        at = np.frombuffer(metrics.observed_at_s, dtype=float)
        values = np.frombuffer(metrics.observed_delay_s, dtype=float)
        codes = np.frombuffer(metrics.groups.observed, dtype=np.uint16)
        classes = np.frombuffer(metrics.observed_class, dtype=np.uint8)
    else:
        at = np.frombuffer(metrics.first_start_at_s, dtype=float)
        values = np.frombuffer(metrics.first_start_wait_s, dtype=float)
        codes = np.frombuffer(metrics.first_start_group, dtype=np.uint16)
        classes = np.frombuffer(metrics.first_start_class, dtype=np.uint8)
    mask = np.fromiter((keep(t) for t in at), dtype=bool, count=len(at))
    if not observed:  # only jobs the trace recorded a start for are compared
        mask &= np.frombuffer(metrics.first_start_observed, dtype=np.uint8).astype(bool)
    if group >= 0:
        mask &= codes == group
    if gpu_class >= 0:
        mask &= classes == gpu_class
    kept: np.ndarray = values[mask]
    return kept


def _ks(metrics: ReplayMetrics, keep: Callable[[float], bool], group: int = -1) -> float:
    seen = _part(metrics, observed=True, keep=keep, group=group)
    return _distance(seen, _part(metrics, observed=False, keep=keep, group=group))


def _distance(seen: np.ndarray, simulated: np.ndarray) -> float:
    if not len(seen) or not len(simulated):
        return 1.0
    return validate.ks_distance(seen, simulated)


def _tenant_ks(metrics: ReplayMetrics, keep: Callable[[float], bool]) -> dict[str, float]:
    """Validation KS of each trace tenant with at least TENANT_MIN_JOBS observed there."""
    codes = np.frombuffer(metrics.groups.observed, dtype=np.uint16)
    at = np.frombuffer(metrics.observed_at_s, dtype=float)
    kept = codes[np.fromiter((keep(t) for t in at), dtype=bool, count=len(at))]
    counts = np.bincount(kept, minlength=len(metrics.groups.names))
    return {
        name: round(_ks(metrics, keep, code), 6)
        for code, name in enumerate(metrics.groups.names)
        if counts[code] >= TENANT_MIN_JOBS
    }


def _describe(point: Point) -> dict[str, float | str | None]:
    return {
        "capacity_share": point.capacity_share,
        "cycle_s": point.cycle_s,
        "backoff_s": point.backoff_s,
        "backoff_max_s": point.backoff_s * point.backoff_max_s,
        "bind_s": point.bind_s,
        "retry_s": point.retry_s,
        "bind_conflict": point.bind_conflict,
        "conflict_hold_s": point.conflict_hold_s,
        "placement": point.placement,
        "background_use": point.background_use,
    }
