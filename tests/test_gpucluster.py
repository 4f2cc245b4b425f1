"""The gpucluster tasks follow GPUClusterEnv's rules exactly, seeded."""

from __future__ import annotations

import pytest

from tests.conftest import kinds
from tests.rounds import commit
from twin.schema.actions import GpuClusterAction, GpuClusterObservation
from twin.schema.scenario import GpuClusterScenario
from twin.sim import scenarios
from twin.sim.driver import Driver
from twin.sim.rng import Streams
from twin.sim.runner import run_episode
from twin.sim.tenant_policies import Baseline


def task(name: str) -> GpuClusterScenario:
    sc = scenarios.load(f"gpucluster-{name}")
    assert isinstance(sc, GpuClusterScenario)
    return sc


def reference_episode(
    sc: GpuClusterScenario, seed: int
) -> list[tuple[int, int, int, float, float]]:
    """DESIGN.md's rules written out plainly, with the baseline policy.

    Returns per step: (active, incoming, queue, reward, budget).
    """
    arrivals = Streams(seed).get("arrivals").poisson(sc.arrival_rate, 1024).tolist()
    active, queue, budget, out = 1, 0, sc.budget_usd, []
    for step in range(sc.max_steps):
        action = min(max(queue - active, -1), 2)
        active = max(0, active + action)
        incoming = arrivals[step]
        queue += incoming
        processed = min(active, queue)
        queue -= processed
        reward = 5.0 * processed - 2.5 * active - 1.0 * queue
        budget -= 2.5 * active
        out.append((active, incoming, queue, reward, budget))
        if budget <= 0:
            break
    return out


@pytest.mark.parametrize("name", ["easy", "medium", "hard"])
def test_tasks_have_the_published_sizes(name: str) -> None:
    sc = task(name)
    assert (sc.max_steps, sc.budget_usd, sc.arrival_rate) == {
        "easy": (50, 1000.0, 2.0),
        "medium": (100, 800.0, 5.0),
        "hard": (200, 500.0, 12.0),
    }[name]
    assert sc.initial_gpus == 1


@pytest.mark.parametrize("name", ["easy", "medium", "hard"])
@pytest.mark.parametrize("seed", [0, 7])
def test_baseline_episode_matches_the_rules_step_by_step(name: str, seed: int) -> None:
    sc = task(name)
    expected = reference_episode(sc, seed)
    _, driver = run_episode(sc, seed=seed, keep_log=True)
    steps = kinds(list(driver.log.dicts()), "step_completed")
    arrived = kinds(list(driver.log.dicts()), "jobs_arrived")
    got = [
        (s["active_gpus"], a["count"], s["queue_size"], s["reward"], s["budget_usd"])
        for s, a in zip(steps, arrived, strict=True)
    ]
    assert got == expected


def test_first_steps_by_hand() -> None:
    """Seed 3 on easy: the first arrivals are drawn here, the arithmetic is done by hand."""
    sc = task("easy")
    a0, a1 = Streams(3).get("arrivals").poisson(2.0, 1024)[:2].tolist()
    driver = Driver(sc, seed=3)
    driver.advance()
    # Step 1: provision +2 -> 3 GPUs. queue = a0, processed = min(3, a0).
    commit(driver, {"default": GpuClusterAction(gpus_to_provision=2)}, {})
    driver.advance()
    m = driver.model
    p0 = min(3, a0)
    assert (m.active_gpus, m.queue_size) == (3, a0 - p0)
    assert m.last_reward == 5 * p0 - 7.5 - (a0 - p0)
    assert m.budget_usd == 1000 - 7.5
    # Step 2: release 5 -> active floors at 0; nothing is processed, the queue grows.
    commit(driver, {"default": GpuClusterAction(gpus_to_provision=-5)}, {})
    driver.advance()
    assert (m.active_gpus, m.queue_size) == (0, a0 - p0 + a1)
    assert m.last_reward == -(a0 - p0 + a1)
    assert m.budget_usd == 1000 - 7.5


def test_observation_uses_the_openenv_field_names() -> None:
    driver = Driver(task("medium"), seed=1)
    driver.advance()
    obs = driver.observe("default")
    assert isinstance(obs, GpuClusterObservation)
    assert obs.model_dump() == {
        "time_step": 0,
        "active_gpus": 1,
        "queue_size": 0,
        "current_budget": 800.0,
        "incoming_jobs": 0,
    }


def test_budget_at_or_below_zero_ends_the_episode() -> None:
    sc = task("hard")
    summary, driver = run_episode(sc, seed=7)
    assert summary.end_reason == "budget_exhausted"
    assert driver.model.budget_usd <= 0
    assert summary.steps is not None
    assert summary.steps < sc.max_steps


def test_episode_runs_to_max_steps_when_money_lasts() -> None:
    summary, _ = run_episode(task("easy"), seed=0, policy="static")
    assert summary.end_reason == "max_steps"
    assert summary.steps == 50


def test_score_is_total_reward_over_ten_per_step_clamped() -> None:
    summary, driver = run_episode(task("easy"), seed=5)
    assert summary.reward == pytest.approx(driver.model.total_reward)
    assert summary.score == min(max(summary.reward / 500.0, 0.0), 1.0)


@pytest.mark.parametrize(
    ("queue", "active", "expected"), [(10, 1, 2), (3, 2, 1), (2, 2, 0), (0, 5, -1)]
)
def test_baseline_provisions_clamped_queue_minus_active(
    queue: int, active: int, expected: int
) -> None:
    obs = GpuClusterObservation(
        time_step=1, active_gpus=active, queue_size=queue, current_budget=10, incoming_jobs=0
    )
    assert Baseline().decide(obs).gpus_to_provision == expected


def test_summary_tenant_reward_equals_the_task_reward() -> None:
    summary, _ = run_episode(task("medium"), seed=3)
    [tenant] = summary.tenants
    assert tenant.value_usd == 5.0 * tenant.jobs_finished
    assert tenant.reward_usd == pytest.approx(summary.reward)
