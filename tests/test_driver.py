"""The driver owns decision rounds: one batch per instant, defaults for silent tenants."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.conftest import kinds
from tests.rounds import commit
from twin.errors import RoundError, SessionEndedError
from twin.eventlog.log import EventLog
from twin.schema.actions import ProvisionAction
from twin.schema.scenario import ClusterScenario
from twin.sim import catalog, scenarios
from twin.sim.driver import Driver
from twin.sim.kinds import KINDS


def two_tenants() -> ClusterScenario:
    return ClusterScenario.model_validate({
        "name": "two",
        "pools": [{"name": "gpu", "gpu_type": "a100", "max_gpus": 8, "price_usd_per_gpu_h": 2}],
        "tenants": [{"name": "a", "policy": "autoscale"}, {"name": "b", "policy": "static"}],
        "decisions": {"interval_s": 60, "triggers": []},
        "horizon_s": 300,
    })  # fmt: skip


def first_round() -> Driver[Any, Any]:
    driver: Driver[Any, Any] = Driver(two_tenants(), seed=1, log=EventLog("d", keep=True))
    assert driver.advance() is not None
    return driver


def test_a_silent_tenant_gets_its_default_policy_and_the_log_says_so() -> None:
    driver = first_round()
    commit(driver, {"a": ProvisionAction(provision={"gpu": 1})}, driver.default_policies())
    log = list(driver.log.dicts())
    made = {e["tenant"]: e["policy"] for e in kinds(log, "decision_made")}
    assert made == {"a": "agent", "b": "default:static"}
    assert kinds(log, "round_committed")[0]["defaulted"] == ["b"]


def test_policies_deciding_in_process_are_logged_by_name_not_as_defaults() -> None:
    driver = first_round()
    commit(driver, {}, driver.default_policies(), announce_defaults=False)
    log = list(driver.log.dicts())
    assert {e["policy"] for e in kinds(log, "decision_made")} == {"autoscale", "static"}
    assert kinds(log, "round_committed")[0]["defaulted"] == []


def test_an_action_for_an_unknown_tenant_or_pool_is_refused_by_name() -> None:
    with pytest.raises(RoundError, match="unknown tenant 'zed'"):
        commit(first_round(), {"zed": ProvisionAction()})
    with pytest.raises(RoundError, match="unknown pool 'tpu'; pools: \\['gpu'\\]"):
        commit(first_round(), {"a": ProvisionAction(provision={"tpu": 1})})


def test_a_finished_episode_refuses_another_round() -> None:
    driver = first_round()
    while driver.advance() is not None:
        commit(driver, {}, driver.default_policies())
    with pytest.raises(SessionEndedError):
        commit(driver)


@pytest.mark.parametrize("name", catalog.builtin_names())
def test_every_builtin_scenario_plays_to_its_end_through_the_one_model_interface(
    name: str,
) -> None:
    scenario = scenarios.load(name)
    driver: Driver[Any, Any] = Driver(scenario, seed=0, log=EventLog("k", keep=False))
    while (batch := driver.advance()) is not None:
        for tenant in batch.reasons:
            assert isinstance(driver.observe(tenant), KINDS[scenario.kind].observation)
        outcomes = commit(driver, {}, driver.default_policies())
        assert set(outcomes) <= set(driver.tenants)
    assert driver.ended in ("horizon", "drained", "budget_exhausted", "max_steps")


def flat_of(view: Any) -> tuple[float, ...]:
    """The documented flat layout, computed from the observation record."""
    if hasattr(view, "time_step"):
        return (view.time_step, view.active_gpus, view.queue_size, view.current_budget,
                view.incoming_jobs)  # fmt: skip
    left = math.inf if view.budget_usd is None else view.budget_usd
    head = (view.t_s, left, view.spent_usd, view.queue_length, view.queued_gpus,
            view.running_jobs)  # fmt: skip
    pools = [(p.ready, p.busy_gpus, p.pending, p.down, p.free_capacity) for p in view.pools]
    return head + tuple(x for pool in pools for x in pool)


@pytest.mark.parametrize("name", ["default", "market", "gpucluster-easy"])
def test_the_flat_observation_holds_the_numbers_of_the_observation_record(name: str) -> None:
    driver: Driver[Any, Any] = Driver(scenarios.load(name), seed=2, log=EventLog("f", keep=False))
    rounds = 0
    while (batch := driver.advance()) is not None and rounds < 40:
        for tenant in batch.reasons:
            assert driver.observe_flat(tenant) == pytest.approx(flat_of(driver.observe(tenant)))
        commit(driver, {}, driver.default_policies())
        rounds += 1
    assert rounds > 0
