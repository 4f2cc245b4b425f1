"""How long a forecast draws each job to run: a job that declares a time limit runs for a share
of it, learnt from the window's runs whose limits were near its own however few have ended (a
real Slurm's `squeue` keeps ended jobs for five minutes), beside a prior of one run of any
share; a run never passes its limit."""

from __future__ import annotations

import numpy as np

from twin.forecast.models import RunTimes
from twin.replay.cluster import pool_of
from twin.schema.snapshot import FinishedRun, Snapshot, SnapshotJob

AT_S = 1_000.0


def _snapshot(history: list[FinishedRun], running: list[SnapshotJob] = ()) -> Snapshot:  # type: ignore[assignment]
    return Snapshot(at_s=AT_S, source="test", window_s=AT_S, pools=[pool_of("h100", 16)],
                    history=history, running=list(running))  # fmt: skip


def _ended(run_s: float, limit_s: float | None, gpus: float = 1.0) -> FinishedRun:
    return FinishedRun(gpus=gpus, submit_s=0.0, start_s=100.0, end_s=100.0 + run_s,
                       time_limit_s=limit_s)  # fmt: skip


def _waiting(limit_s: float | None, gpus: float = 1.0) -> SnapshotJob:
    return SnapshotJob(job_id="w", gpus=gpus, submit_s=AT_S - 5, time_limit_s=limit_s)


def _draws(times: RunTimes, job: SnapshotJob, age_s: float = 0.0, n: int = 400) -> np.ndarray:
    rng = np.random.default_rng(7)
    return np.array([times.remaining(job, age_s, rng) for _ in range(n)])


def test_runs_ended_near_its_limit_give_the_share_a_waiting_job_runs() -> None:
    # fifty runs used a quarter of their 4-minute limits: a job asking 3 minutes runs a quarter
    # of 3, but for the one pseudo-run of any share beside them (1 draw in 51)
    times = RunTimes(_snapshot([_ended(60.0, 240.0)] * 50))
    assert np.mean(np.isclose(_draws(times, _waiting(180.0), n=2_000), 45.0)) > 0.95


def test_one_ended_run_near_its_limit_is_no_surer_than_the_prior_beside_it() -> None:
    # one run, one pseudo-run: half the draws at its share, half anywhere in the limit
    times = RunTimes(_snapshot([_ended(60.0, 240.0)]))
    draws = _draws(times, _waiting(180.0), n=2_000)
    assert 0.45 < np.mean(np.isclose(draws, 45.0)) < 0.55
    assert 0.15 < np.mean(draws > 90.0) < 0.35  # the prior's half: a share of 0.5 or more


def test_running_jobs_near_its_limit_are_counted_as_running_longer_than_their_share() -> None:
    # one ended at a quarter; one still runs at half its limit: half the curve's draws go past
    # a half, and half the prior's
    running = SnapshotJob(job_id="r", gpus=1, submit_s=0, start_s=AT_S - 120, time_limit_s=240)
    times = RunTimes(_snapshot([_ended(60.0, 240.0)], [running]))
    draws = _draws(times, _waiting(240.0))
    assert 0.35 < np.mean(draws > 120.0) < 0.65
    assert draws.max() <= 240.0


def test_with_no_ended_run_near_its_limit_any_share_of_it_is_as_likely() -> None:
    times = RunTimes(_snapshot([_ended(30.0, 60.0)]))  # a 1-minute limit: far from an hour
    draws = _draws(times, _waiting(3_600.0), n=2_000)
    assert draws.max() <= 3_600.0
    assert np.quantile(draws, [0.1, 0.5, 0.9]) == pytest_approx([360.0, 1_800.0, 3_240.0])


def test_with_no_ended_run_that_had_a_limit_the_class_curve_is_drawn_and_capped() -> None:
    times = RunTimes(_snapshot([_ended(r, None) for r in (50.0, 60.0, 70.0, 80.0, 90.0)]))
    assert times.of_limit is None
    draws = _draws(times, _waiting(65.0))
    assert set(np.round(draws)) <= {50.0, 60.0, 65.0}  # the curve's runs, none past the limit


def test_a_running_job_is_never_drawn_past_its_limit() -> None:
    times = RunTimes(_snapshot([_ended(230.0, 240.0)]))
    draws = _draws(times, _waiting(240.0), age_s=200.0)
    assert draws.max() <= 40.0


def pytest_approx(values: list[float]) -> object:
    import pytest

    return pytest.approx(values, rel=0.08)
