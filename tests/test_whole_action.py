"""Every RL interface carries a tenant's whole action (provision, place, bid, offer, answer):
Gymnasium against in-process opponents that negotiate as the built-in agents do over the
gateway, PettingZoo with every tenant an agent, and TRL's tools. What a learner is told sums to
its summary's return."""

from __future__ import annotations

import asyncio
from typing import Any

import gymnasium as gym
import numpy as np
import orjson
import pytest
from gymnasium.utils.env_checker import check_env

import twin.rl  # noqa: F401 (registers the envs)
from twin.errors import ActionError, ConfigError
from twin.eventlog.log import from_dict
from twin.eventlog.metrics import Metrics
from twin.rl.cluster_env import ClusterEnv
from twin.rl.opponents import at_once, opponents
from twin.rl.parallel_env import ClusterParallelEnv
from twin.rl.trl_env import ClusterTenantEnv
from twin.rl.whole_action import BID_LEVELS_USD, PARTS, USD_LEVELS
from twin.sim.driver import Driver


def log_of(driver: Driver[Any, Any]) -> list[dict[str, Any]]:
    return list(driver.log.dicts())


def summary_reward(driver: Driver[Any, Any], tenant: str) -> float:
    metrics = Metrics()
    metrics.consume([from_dict(e) for e in driver.log.dicts()])
    return next(t.reward_usd for t in metrics.summary().tenants if t.name == tenant)


def play(env: ClusterEnv, seed: int, choose: Any) -> float:
    """One episode; `choose(obs)` picks each action; the sum of what the learner was told."""
    obs, info = env.reset(seed=seed)
    told, done = info["reward_before"], False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(choose(obs))
        told += reward
        done = terminated or truncated
    return float(told)


# -- the spaces ----------------------------------------------------------------------------


@pytest.mark.parametrize("flat", [False, True])
@pytest.mark.parametrize("opponents_kind", ["scenario", "negotiator"])
def test_the_whole_action_env_passes_gymnasium_s_checker(flat: bool, opponents_kind: str) -> None:
    env = ClusterEnv("market", tenant="inference", flat=flat, opponents=opponents_kind)
    check_env(env, skip_render_check=True)


def test_the_flat_action_is_the_dict_action_part_by_part() -> None:
    env = ClusterEnv("market", tenant="research")
    whole = env.whole
    space = whole.action_space()
    space.seed(3)
    for _ in range(20):
        action = space.sample()
        vector = whole.flatten(action)
        assert whole.flat_action_space().contains(vector)
        again = whole.unflatten(vector)
        assert list(again) == list(PARTS)
        for name in PARTS:
            assert np.array_equal(np.asarray(again[name]).reshape(-1),
                                  np.asarray(action[name]).reshape(-1))  # fmt: skip


def test_an_action_outside_its_space_is_refused_naming_the_part() -> None:
    env = ClusterEnv("market", tenant="research")
    env.reset(seed=0)
    bad = {**env.whole.idle(), "offer_to": 99}
    with pytest.raises(ActionError, match="'offer_to' is outside"):
        env.step(bad)
    missing = env.whole.idle()
    del missing["bid"]
    with pytest.raises(ActionError, match="'bid' is missing"):
        env.step(missing)
    with pytest.raises(ActionError, match="flat action is 20 integers, not 2"):
        env.step(np.array([4, 4]))
    env.step(env.whole.idle())  # and the episode goes on


# -- Gymnasium: the learner against negotiators ------------------------------------------------


def test_a_learner_accepts_a_negotiator_s_offer_and_the_trade_applies() -> None:
    env = gym.make("twin/Market-v0", tenant="inference", flat=False, normalised=False).unwrapped

    def accept_all(obs: dict[str, Any]) -> dict[str, Any]:
        action = env.whole.idle()
        action["accept"] = (obs["offers"][:, 0] > 0).astype(np.int8)
        return action

    play(env, 0, accept_all)
    log = log_of(env.driver)
    answered = [r for r in log if r["kind"] == "offer_answered" and r["tenant"] == "inference"]
    assert answered
    assert all(r["accepted"] for r in answered)
    settled = {r["offer_id"]: r["applied"] for r in log if r["kind"] == "trade_settled"}
    assert any(settled[r["offer_id"]] for r in answered)


def test_a_learner_s_offer_is_answered_by_the_negotiator_it_names_with_its_reason() -> None:
    env = ClusterEnv("market", tenant="batch", opponents="negotiator")
    whole = env.whole
    h100 = whole.pools.index("h100")

    def buy_an_h100(obs: dict[str, Any]) -> dict[str, Any]:
        action = whole.idle()
        action["offer_to"] = 1 + whole.tenants.index("research")
        action["offer_gpus"][h100] -= 1  # take one H100 ...
        action["offer_usd"] = len(USD_LEVELS) - 1 + USD_LEVELS.index(5.0)  # ... for $5
        return action

    play(env, 0, buy_an_h100)
    log = log_of(env.driver)
    mine = {r["offer_id"] for r in log if r["kind"] == "offer_made" and r["tenant"] == "batch"}
    assert len(mine) >= 10
    answers = [r for r in log if r["kind"] == "offer_answered" and r["offer_id"] in mine]
    assert {r["tenant"] for r in answers} == {"research"}
    assert len(answers) == len(mine)
    assert all(r["reason"] for r in answers)  # the negotiator says why


def test_a_learner_places_a_waiting_job_through_its_queue_slot() -> None:
    env = ClusterEnv("default", tenant="research")
    obs, _ = env.reset(seed=0)
    pools = env.whole.pools
    for _ in range(60):  # until the head of the queue has a plan feasible somewhere
        scores = obs["queue"][0, 3:]
        if obs["queue"][0, 0] and scores.max() > 0:
            break
        obs, *_ = env.step(env.whole.idle())
    pool = int(np.argmax(scores))
    job_id = env.driver.observe("research").head[0].job_id
    action = env.whole.idle()
    action["place"][0] = 1 + pool
    env.step(action)
    placed = [r for r in log_of(env.driver)
              if r["kind"] == "placement_decided" and r["job_id"] == job_id]  # fmt: skip
    assert [(r["tenant"], r["pool"]) for r in placed] == [("research", pools[pool])]


def test_a_learner_bids_for_what_it_provisions_under_the_auction() -> None:
    env = ClusterEnv("market", tenant="inference", mechanism="auction")
    env.reset(seed=0)
    whole = env.whole
    h100 = whole.pools.index("h100")
    action = whole.idle()
    action["provision"][h100] += 2
    action["bid"][h100] = BID_LEVELS_USD.index(6.0)
    env.step(action)
    log = log_of(env.driver)
    decided = [r["action"] for r in log if r["kind"] == "decision_made"
               and r["tenant"] == "inference"]  # fmt: skip
    assert decided[0]["provision"] == {"h100": 2}
    assert decided[0]["bids_usd_per_gpu"] == {"h100": 6.0}
    assert {r["mechanism"] for r in log if r["kind"] == "round_committed"} == {"auction"}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("tenant", ["research", "inference", "batch"])
def test_what_a_learner_is_told_sums_to_its_summary_return(seed: int, tenant: str) -> None:
    env = ClusterEnv("market", tenant=tenant, opponents="negotiator", flat=True)
    env.action_space.seed(seed)
    told = play(env, seed, lambda _: env.action_space.sample())
    assert told == pytest.approx(summary_reward(env.driver, tenant), abs=0.005)


# -- in-process opponents ----------------------------------------------------------------------


def test_an_opponent_that_waits_on_io_is_refused_by_name() -> None:
    async def thinks() -> int:
        await asyncio.sleep(0)
        return 1

    with pytest.raises(ConfigError, match="'slow' waits on I/O"):
        at_once(thinks(), "slow")


def test_unknown_opponents_are_refused_with_the_allowed_ones() -> None:
    with pytest.raises(ConfigError, match="allowed: scenario, stepper"):
        opponents("llm", ["a", "b"], "a", {}, 0)


# -- PettingZoo --------------------------------------------------------------------------------


def test_every_pettingzoo_agent_places_and_bids_as_well() -> None:
    env = ClusterParallelEnv("market", mechanism="auction")
    observations, _ = env.reset(seed=0)
    whole = env.whole
    h100 = whole.pools.index("h100")
    actions = {a: whole.idle() for a in env.agents}
    actions["batch"]["provision"][h100] += 1
    actions["batch"]["bid"][h100] = BID_LEVELS_USD.index(3.0)
    observations, *_ = env.step(actions)
    for _ in range(40):  # until some agent's queue head has a feasible plan
        ready = [a for a in env.agents if observations[a]["queue"][0, 3:].max() > 0]
        if ready:
            break
        observations, *_ = env.step({a: whole.idle() for a in env.agents})
    agent = ready[0]
    job_id = env._driver.observe(agent).head[0].job_id  # type: ignore[union-attr]
    place = whole.idle()
    place["place"][0] = 1 + int(np.argmax(observations[agent]["queue"][0, 3:]))
    env.step({**{a: whole.idle() for a in env.agents}, agent: place})
    log = log_of(env._driver)  # type: ignore[arg-type]
    assert any(r["kind"] == "placement_decided" and r["job_id"] == job_id for r in log)
    bids = [r["action"]["bids_usd_per_gpu"] for r in log
            if r["kind"] == "decision_made" and r["tenant"] == "batch"]  # fmt: skip
    assert bids[0] == {"h100": 3.0}


# -- TRL ---------------------------------------------------------------------------------------


def test_a_model_trades_through_the_tools_and_its_return_is_its_summary_s() -> None:
    env = ClusterTenantEnv()
    view = orjson.loads(env.reset(scenario="market", tenant="inference", seed=0))
    assert "error" in orjson.loads(env.make_offer("inference", "h100", 1, 5.0))  # itself
    assert "error" in orjson.loads(env.make_offer("research", "h100", 0, 0.0))  # nothing
    assert "error" in orjson.loads(env.answer_offer("nobody-1-0", True))
    trades: list[str] = []
    while "ended" not in view:
        for offer in view["offers"]:
            assert offer["reason"]  # the negotiator says why it offers
            answered = orjson.loads(env.answer_offer(offer["offer_id"], True, "I need GPUs"))
            assert answered == {"offer_id": offer["offer_id"], "accept": True}
        made = orjson.loads(env.make_offer("batch", "a100", -1, 2.0, "one A100 for $2?"))
        assert made["from_tenant"] == "inference"
        view = orjson.loads(env.wait())
        trades += [t["status"] for t in view.get("last_trades", [])]
    assert "applied" in trades
    log = log_of(env._need().driver)
    answers = [r for r in log if r["kind"] == "offer_answered"]
    assert {r["tenant"] for r in answers} >= {"inference", "batch"}
    assert env.get_reward() == pytest.approx(summary_reward(env._need().driver, "inference"),
                                             abs=0.005)  # fmt: skip


def test_a_trl_episode_stopped_short_is_played_out_by_the_tenant_s_policy_and_settled() -> None:
    """Five `wait()` calls, then the reward: the rest of the episode is the tenant's own
    policy's, and the reward is the tenant's whole return in the summary (stopping early never
    pays by leaving the end's penalties unsettled)."""
    env = ClusterTenantEnv()
    env.reset(scenario="market", tenant="inference", seed=0)
    for _ in range(5):
        env.wait()
    before = env.reward
    assert env._need().driver.ended is None
    reward = env.get_reward()
    driver = env._need().driver
    assert driver.ended == "horizon"
    assert env.finished_by == "autoscale"
    assert reward == pytest.approx(summary_reward(driver, "inference"), abs=0.005)
    assert reward != before
    assert env.get_reward() == reward, "asking again settles nothing more"
