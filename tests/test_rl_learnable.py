"""Job-level environments built to be learned: scaled observations, SLA penalties told as they
accrue, masks of the action parts that can act, fixed seed splits, and episodes that always
settle, so that the rewards told over any episode, however it is cut, sum to the summary's
return to the cent."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

from twin.eventlog.log import from_dict
from twin.eventlog.metrics import Metrics
from twin.rl.cluster_env import ClusterEnv
from twin.rl.parallel_env import ClusterParallelEnv
from twin.rl.seeds import HELD_OUT, TRAIN
from twin.rl.trl_env import ClusterTenantEnv
from twin.rl.whole_action import BID_LEVELS_USD, USD_LEVELS
from twin.sim.driver import Driver

CENT = 0.005


def summary_return(driver: Driver[object, object], tenant: str) -> float:  # type: ignore[type-var]
    metrics = Metrics()
    metrics.consume([from_dict(e) for e in driver.log.dicts()])
    found = [t.reward_usd for t in metrics.summary().tenants if t.name == tenant]
    return found[0] if found else 0.0


def by_part(env: ClusterEnv, mask: np.ndarray) -> dict[str, np.ndarray]:
    """A flat mask split into the action's parts."""
    sizes = [sum(nvec) for nvec in env.whole.parts().values()]
    return dict(zip(env.whole.parts(), np.split(mask, np.cumsum(sizes)[:-1]), strict=True))


def masked_sample(env: ClusterEnv, mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random flat action among the choices the mask allows."""
    out, at = [], 0
    for n in env.whole.flat_action_space().nvec:
        allowed = np.flatnonzero(mask[at : at + n])
        out.append(rng.choice(allowed))
        at += n
    return np.array(out, dtype=np.int64)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), cut=st.integers(1, 20), masked=st.booleans(),
       opponents=st.sampled_from(["scenario", "negotiator"]),
       sla=st.sampled_from(["accrued", "booked"]))  # fmt: skip
def test_a_gym_episode_cut_anywhere_tells_rewards_that_sum_to_the_summary(
    seed: int, cut: int, masked: bool, opponents: str, sla: str
) -> None:
    env = ClusterEnv("market", tenant="inference", flat=True, opponents=opponents, sla=sla,  # type: ignore[arg-type]
                     max_steps=cut, normalised=True)  # fmt: skip
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed)
    told, done, steps = info["reward_before"], False, 0
    while not done:
        action = masked_sample(env, info["action_mask"], rng) if masked \
            else env.action_space.sample()  # fmt: skip
        _, reward, terminated, truncated, info = env.step(action)
        told += reward
        done, steps = terminated or truncated, steps + 1
    assert steps <= cut
    assert env.driver.ended is not None  # settled, whatever the cut
    assert told == pytest.approx(summary_return(env.driver, "inference"), abs=CENT)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), calls=st.lists(st.sampled_from(
    ["wait", "provision", "release", "offer", "view"]), max_size=12))  # fmt: skip
def test_a_trl_episode_stopped_anywhere_is_settled_and_scores_the_summary(
    seed: int, calls: list[str]
) -> None:
    env = ClusterTenantEnv()
    env.reset(scenario="market", tenant="research", seed=seed)
    for call in calls:
        if call == "wait":
            env.wait()
        elif call == "provision":
            env.provision("a100", 2)
        elif call == "release":
            env.provision("h100", -1)
        elif call == "offer":
            env.make_offer("inference", "h100", 1, 20.0, "spare")
        else:
            env.view()
    reward = env.get_reward()
    driver = env._need().driver
    assert driver.ended is not None
    assert reward == pytest.approx(summary_return(driver, "research"), abs=CENT)
    assert env.get_reward() == reward  # asked again, the same figure


def test_sla_is_told_as_it_accrues_and_the_episode_still_sums_to_the_summary() -> None:
    runs = {}
    for sla in ("accrued", "booked"):
        env = ClusterEnv("market-scarce", tenant="inference", sla=sla)  # type: ignore[arg-type]
        _, info = env.reset(seed=4)
        rewards, done = [info["reward_before"]], False
        while not done:
            _, r, terminated, truncated, _ = env.step(env.whole.idle())
            rewards.append(r)
            done = terminated or truncated
        runs[sla] = rewards
    accrued, booked = np.array(runs["accrued"]), np.array(runs["booked"])
    assert accrued.sum() == pytest.approx(booked.sum(), abs=CENT)
    assert not np.allclose(accrued, booked)  # waits cost while they last, not when they end
    # Inference starts with too few GPUs: its queue waits from the first rounds, and says so.
    assert accrued[1:4].sum() < booked[1:4].sum()


def test_the_normalised_observation_is_about_one_and_passes_the_checker() -> None:
    for flat in (True, False):
        check_env(ClusterEnv("market", tenant="batch", normalised=True, flat=flat),
                  skip_render_check=True)  # fmt: skip
    env = ClusterEnv("market", tenant="inference", normalised=True, flat=True)
    raw = ClusterEnv("market", tenant="inference", flat=True)
    obs, _ = env.reset(seed=2)
    unscaled, _ = raw.reset(seed=2)
    largest, largest_raw = np.abs(obs).max(), np.abs(unscaled).max()
    for _ in range(12):
        obs, *_ = env.step(env.whole.flatten(env.whole.idle()))
        unscaled, *_ = raw.step(raw.whole.flatten(raw.whole.idle()))
        largest, largest_raw = (
            max(largest, np.abs(obs).max()),
            max(largest_raw, np.abs(unscaled).max()),
        )
    assert largest <= 10.0
    assert largest_raw > 1000.0  # seconds and dollars, unscaled


def test_the_mask_opens_only_the_parts_that_can_act() -> None:
    env = ClusterEnv("market", tenant="inference", flat=True)
    nvec = env.whole.flat_action_space().nvec
    _, info = env.reset(seed=0)
    mask = info["action_mask"]
    assert mask.shape == (int(nvec.sum()),)
    assert mask.dtype == bool
    assert np.array_equal(env.action_masks(), mask)
    parts = by_part(env, mask)
    d = env.max_delta
    assert parts["offer_to"].tolist() == [True, False, False, False]  # nobody trades here
    assert parts["offer_usd"].sum() == 1
    assert parts["offer_usd"][len(USD_LEVELS) - 1]
    assert parts["bid"].sum() == 2  # proportional takes no bids: level 0, per pool
    assert not parts["accept"].reshape(-1, 2)[:, 1].any()  # no offers to answer
    holds_none = parts["provision"][: 2 * d + 1]  # h100: inference holds nothing to release
    assert not holds_none[:d].any()
    assert holds_none[d]
    traders = ClusterEnv("market", tenant="inference", flat=True, opponents="negotiator",
                         mechanism="auction")  # fmt: skip
    _, info = traders.reset(seed=0)
    opened = by_part(traders, info["action_mask"])
    assert opened["offer_to"].tolist() == [True, True, False, True]  # anyone but itself
    assert opened["offer_usd"].all()
    assert opened["offer_gpus"].all()
    assert opened["bid"].sum() == 2 * len(BID_LEVELS_USD)  # the auction takes bids
    assert opened["market"].sum() == 2  # no call market under the auction: no order, per pool
    assert parts["market_price"].sum() == 2


def test_the_call_market_s_orders_open_up_to_the_idle_gpus_to_sell() -> None:
    env = ClusterEnv("market", tenant="research", flat=True, opponents="negotiator",
                     mechanism="call_market")  # fmt: skip
    _, info = env.reset(seed=0)
    parts, d = by_part(env, info["action_mask"]), env.max_delta
    h100 = parts["market"][: 2 * d + 1]  # research starts holding 8 idle H100s
    assert h100.all()  # ask up to max_delta of them, or buy up to max_delta
    assert parts["market_price"].all()
    a100 = env.driver.observe("research").pools[1]
    idle = a100.idle_gpus
    assert parts["market"][2 * d + 1 :].tolist() == [k >= -idle for k in range(-d, d + 1)]


def test_placements_open_only_for_a_waiting_job_on_a_pool_its_plan_fits() -> None:
    env = ClusterEnv("market", tenant="inference", flat=True)
    _, info = env.reset(seed=1)
    for _ in range(6):
        _, _, _, _, info = env.step(env.whole.flatten(env.whole.idle()))
    queue = env.whole.queue_block(env.driver.observe("inference"))
    p = len(env.whole.pools)
    slots = by_part(env, info["action_mask"])["place"].reshape(-1, p + 1)
    assert queue[:, 0].any()  # jobs wait by now
    for row, slot in zip(queue, slots, strict=True):
        assert slot[0]
        assert slot[1:].tolist() == [bool(row[0]) and s > 0 for s in row[3:]]


def test_episode_seeds_come_from_the_split_asked_for_or_are_given_exactly() -> None:
    env = ClusterEnv("market", tenant="research", split="held_out")
    seeds = {env.reset(seed=k)[1]["seed"] for k in range(5)}
    assert all(s in HELD_OUT for s in seeds)
    assert len(seeds) > 1
    train = ClusterEnv("market", tenant="research", split="train")
    assert all(train.reset(seed=k)[1]["seed"] in TRAIN for k in range(5))
    assert env.reset(options={"episode_seed": 1_000_007})[1]["seed"] == 1_000_007


def test_finish_settles_an_episode_the_caller_stopped_early() -> None:
    env = ClusterEnv("market-scarce", tenant="inference")
    _, info = env.reset(seed=3)
    told = info["reward_before"]
    for _ in range(3):
        told += env.step(env.whole.idle())[1]
    rest = env.finish()
    assert env.driver.ended is not None
    assert env.own_policy == "autoscale"
    assert told + rest == pytest.approx(summary_return(env.driver, "inference"), abs=CENT)
    assert env.finish() == 0.0


def test_the_parallel_env_tells_accrued_sla_and_masks_and_sums_to_the_summary() -> None:
    env = ClusterParallelEnv("market", normalised=True)
    _, infos = env.reset(seed=5)
    assert all("action_mask" in infos[a] for a in env.agents)
    told = dict.fromkeys(env.possible_agents, 0.0)
    while env.agents:
        actions = {a: env.action_space(a).sample() for a in env.agents}
        _, rewards, _, _, infos = env.step(actions)
        for a, r in rewards.items():
            told[a] += r
    driver = env._driver
    assert driver is not None
    for a in env.possible_agents:
        assert told[a] == pytest.approx(summary_return(driver, a), abs=CENT)
