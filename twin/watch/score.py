"""The live backtest: every forecast a watch made, scored once the jobs it was made for start.

A pair is one (capture, waiting job): the twin's start for it (median and 80% interval), the
cluster's own estimate where it gives one (a pending Slurm job's `start_time`, what
`squeue --start` prints) and "it starts now" (the capture's time). When a later capture shows
the job started, the pair is scored against that start. The same captures scored offline (a
recorded watch played again, or `tests/slurm_workload.score`) give the same figures."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypedDict

PREDICTORS = ("twin", "starts_now", "estimate")
ROLLING_PAIRS = 200  # the rolling score: the pairs scored last
WITHIN_S = 10.0


@dataclass(frozen=True)
class Pair:
    """One (capture, waiting job) forecast; times in epoch seconds (the source's clock)."""

    capture: str
    job_id: str
    gpus: float
    taken_s: float  # when the capture was taken: "starts now"
    twin_p10_s: float | None
    twin_p50_s: float | None
    twin_p90_s: float | None
    estimate_s: float | None  # the cluster's own estimate (Slurm's), where it gives one

    def predicted_s(self, predictor: str) -> float | None:
        return {"twin": self.twin_p50_s, "starts_now": self.taken_s,
                "estimate": self.estimate_s}[predictor]  # fmt: skip


@dataclass(frozen=True)
class Scored:
    pair: Pair
    started_s: float


class PredictorScore(TypedDict):
    pairs: int
    median_abs_error_s: float | None
    within_10s: float | None


class ScoreSummary(TypedDict):
    pairs: int
    median_wait_s: float | None
    twin: PredictorScore
    starts_now: PredictorScore
    estimate: PredictorScore
    twin_coverage_80: float | None


def summarise(scored: Iterable[Scored]) -> ScoreSummary:
    """Each predictor's median absolute error, its share within 10 s, and how often the twin's
    80% interval held the start."""
    rows = list(scored)

    def of(predictor: str) -> PredictorScore:
        errors = [abs(t - s.started_s) for s in rows
                  if (t := s.pair.predicted_s(predictor)) is not None]  # fmt: skip
        return {
            "pairs": len(errors),
            "median_abs_error_s": statistics.median(errors) if errors else None,
            "within_10s": sum(e <= WITHIN_S for e in errors) / len(errors) if errors else None,
        }

    banded = [s for s in rows if s.pair.twin_p10_s is not None and s.pair.twin_p90_s is not None]
    covered = sum(s.pair.twin_p10_s <= s.started_s <= s.pair.twin_p90_s  # type: ignore[operator]
                  for s in banded)  # fmt: skip
    waits = [s.started_s - s.pair.taken_s for s in rows]
    return {
        "pairs": len(rows),
        "median_wait_s": statistics.median(waits) if waits else None,
        "twin": of("twin"),
        "starts_now": of("starts_now"),
        "estimate": of("estimate"),
        "twin_coverage_80": covered / len(banded) if banded else None,
    }


class LiveScore:
    """Pairs waiting for their job to start, and those scored, in the order they were."""

    def __init__(self) -> None:
        self.open: dict[str, list[Pair]] = {}  # by job
        self.scored: list[Scored] = []

    def forecast(self, pairs: Iterable[Pair]) -> None:
        for pair in pairs:
            self.open.setdefault(pair.job_id, []).append(pair)

    def started(self, starts_s: Mapping[str, float]) -> int:
        """Jobs seen started (their starts): the pairs made for them are scored; how many."""
        before = len(self.scored)
        for job_id in sorted(set(starts_s) & set(self.open)):
            self.scored += [Scored(p, starts_s[job_id]) for p in self.open.pop(job_id)]
        return len(self.scored) - before

    def summary(self) -> ScoreSummary:
        return summarise(self.scored)

    def rolling(self, pairs: int = ROLLING_PAIRS) -> ScoreSummary:
        return summarise(self.scored[-pairs:])


def predictor(summary: ScoreSummary, name: str) -> PredictorScore:
    """One predictor's figures of a summary, by its name in PREDICTORS."""
    return {"twin": summary["twin"], "starts_now": summary["starts_now"],
            "estimate": summary["estimate"]}[name]  # fmt: skip
