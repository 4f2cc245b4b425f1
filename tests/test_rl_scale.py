"""RL at scale: every registered Gymnasium env passes `check_env`, the PettingZoo parallel env
passes PettingZoo's API and seed tests, vector envs step, Ray rollouts equal in-process ones,
and the TRL environment works the way TRL drives it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import orjson
import pytest
from gymnasium.utils.env_checker import check_env
from pettingzoo.test import parallel_api_test, parallel_seed_test

import twin.rl
from twin.errors import ConfigError
from twin.rl.cluster_env import ClusterEnv
from twin.rl.parallel_env import ClusterParallelEnv
from twin.rl.rollouts import rollouts
from twin.rl.trl_env import ClusterTenantEnv
from twin.rl.whole_action import BID_LEVELS_USD, USD_LEVELS

ALL_IDS = sorted({*twin.rl.ENV_IDS, *twin.rl.CLUSTER_ENV_IDS})


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_every_registered_env_passes_gymnasium_s_checker(env_id: str) -> None:
    env = gym.make(env_id)
    check_env(env.unwrapped, skip_render_check=True)


def test_the_flat_observation_option_passes_too() -> None:
    env = ClusterEnv("market", tenant="inference", flat=True)
    check_env(env, skip_render_check=True)
    obs, _ = env.reset(seed=1)
    assert obs.shape == env.observation_space.shape


def test_the_ego_env_plays_a_whole_episode_and_its_reward_is_the_tenant_s() -> None:
    env = ClusterEnv("market", tenant="research")
    _, info = env.reset(seed=0)
    total, done = info["reward_before"], False
    while not done:
        _, reward, terminated, truncated, _ = env.step(env.whole.idle())  # change nothing
        total += reward
        done = terminated or truncated
    from twin.eventlog.log import from_dict
    from twin.eventlog.metrics import Metrics

    metrics = Metrics()
    metrics.consume([from_dict(e) for e in env.driver.log.dicts()])
    research = next(t for t in metrics.summary().tenants if t.name == "research")
    assert total == pytest.approx(research.reward_usd, rel=1e-9, abs=1e-6)


def test_the_parallel_env_passes_pettingzoo_s_api_and_seed_tests() -> None:
    parallel_api_test(ClusterParallelEnv("market"), num_cycles=50)
    parallel_seed_test(lambda: ClusterParallelEnv("market"))


def test_vector_envs_step_many_episodes_at_once() -> None:
    envs = gym.make_vec("twin/Market-v0", num_envs=3, vectorization_mode="sync", flat=True)
    obs, _ = envs.reset(seed=0)
    assert obs.shape[0] == 3
    for _ in range(4):
        obs, rewards, _, _, _ = envs.step(envs.action_space.sample())
    assert rewards.shape == (3,)
    envs.close()


def _same(a: object, b: object) -> bool:
    """Batches equal, nested dicts and arrays alike."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, tuple | list):
        return isinstance(b, tuple | list) and len(a) == len(b) and all(map(_same, a, b))
    return bool(np.array_equal(np.asarray(a), np.asarray(b)))


@pytest.mark.parametrize("flat", [False, True])
def test_the_process_vector_env_gives_the_sync_vector_env_s_batches(flat: bool) -> None:
    # Several environments to a process: the same observations, rewards, ends, autoresets and
    # infos as Gymnasium's own vector env stepping the same environments in turn.
    from twin.rl.vector import ProcessVectorEnv

    mine = gym.make_vec("twin/Market-v0", num_envs=5, workers=2, flat=flat)
    assert isinstance(mine, ProcessVectorEnv)
    assert mine.shares == [3, 2]
    theirs = gym.make_vec("twin/Market-v0", num_envs=5, vectorization_mode="sync", flat=flat)
    theirs.action_space.seed(3)
    try:
        assert _same(mine.reset(seed=7), theirs.reset(seed=7))
        ended = 0
        for _ in range(40):  # episodes end and reset inside this
            actions = theirs.action_space.sample()
            got, want = mine.step(actions), theirs.step(actions)
            for g, w in zip(got, want, strict=True):
                assert _same(g, w)
            ended += int(got[2].sum() + got[3].sum())
        assert ended > 0, "some episode ended and was reset"
    finally:
        mine.close()
        theirs.close()


def test_a_failing_vector_worker_says_why_and_the_env_still_closes() -> None:
    envs = gym.make_vec("twin/Market-v0", num_envs=2, workers=2, flat=True)
    envs.reset(seed=0)
    with pytest.raises(RuntimeError, match="worker failed"):
        envs.step(np.full((3, 2), -5))  # not a batch of this action space
    with pytest.raises(RuntimeError, match="broken"):
        envs.step(envs.action_space.sample())
    envs.close()
    killed = gym.make_vec("twin/Market-v0", num_envs=2, workers=2, flat=True)
    killed.reset(seed=0)
    killed._procs[0].kill()  # a worker dying under it
    killed._procs[0].join()
    with pytest.raises(RuntimeError, match="worker exited"):
        killed.step(killed.action_space.sample())
    killed.close()
    with pytest.raises(ConfigError, match="num_envs must be at least 1"):
        gym.make_vec("twin/Market-v0", num_envs=0)


def test_rollouts_on_a_local_ray_equal_rollouts_in_process() -> None:
    here = rollouts("twin/GpuClusterEasy-v0", 4, seed=10, engine="local")
    on_ray = rollouts("twin/GpuClusterEasy-v0", 4, seed=10, engine="ray", workers=2)
    assert on_ray == here
    assert [e.seed for e in here] == [10, 11, 12, 13]
    assert all(e.steps > 0 for e in here)


# -- TRL -----------------------------------------------------------------------------------


def test_trl_derives_a_tool_schema_from_each_action_method() -> None:
    from transformers.utils import get_json_schema

    env = ClusterTenantEnv()
    tools = (env.view, env.provision, env.place, env.bid, env.sell, env.buy, env.make_offer,
             env.answer_offer, env.wait)  # fmt: skip
    schemas = {s["function"]["name"]: s["function"] for s in map(get_json_schema, tools)}
    assert set(schemas) == {"view", "provision", "place", "bid", "sell", "buy", "make_offer",
                            "answer_offer", "wait"}  # fmt: skip
    for side in ("sell", "buy"):
        assert schemas[side]["parameters"]["required"] == ["pool", "gpus", "usd_per_gpu"]
    assert schemas["make_offer"]["parameters"]["required"] == ["to_tenant", "pool", "gpus", "usd"]
    answer = schemas["answer_offer"]["parameters"]
    assert answer["properties"]["accept"]["type"] == "boolean"
    assert answer["required"] == ["offer_id", "accept"]
    assert schemas["place"]["parameters"]["required"] == ["job_id", "pool"]
    bid = schemas["bid"]["parameters"]
    assert bid["properties"]["usd_per_gpu"]["type"] == "number"
    assert bid["required"] == ["pool", "gpus", "usd_per_gpu"]
    provision = schemas["provision"]["parameters"]
    assert provision["properties"]["pool"]["type"] == "string"
    assert provision["properties"]["gpus"]["type"] == "integer"
    assert provision["required"] == ["pool", "gpus"]
    assert "GPUs" in schemas["provision"]["description"]


def test_a_scripted_rollout_through_the_tools_earns_the_tenant_s_reward() -> None:
    import orjson

    env = ClusterTenantEnv()  # as TRL builds it: no arguments
    first = orjson.loads(env.reset(scenario="market", tenant="inference", seed=0, prompt="..."))
    assert first["tenant"] == "inference"
    assert "error" in orjson.loads(env.provision("nope", 2))
    assert "error" in orjson.loads(env.provision("h100", 99))
    answer = orjson.loads(env.provision("h100", 2))
    turns = 1
    while "ended" not in answer:
        answer = orjson.loads(env.wait())
        turns += 1
    assert answer["ended"] == "horizon"
    assert turns > 3
    assert env.get_reward() == answer["reward"]
    assert env.get_reward() != 0.0


def test_a_model_places_waiting_jobs_and_bids_through_the_tools() -> None:
    import orjson

    env = ClusterTenantEnv()
    view = orjson.loads(env.reset(scenario="default", tenant="research", seed=0))
    assert "error" in orjson.loads(env.place("j0", "nope"))
    assert "error" in orjson.loads(env.bid("h100", 99, 1.0))
    assert "error" in orjson.loads(env.bid("h100", 2, -1.0))
    for _ in range(50):  # until a waiting job has a feasible plan
        feasible = [(j["job_id"], p["pool"]) for j in view.get("head", [])
                    for p in j.get("plans", []) if p["feasible"]]  # fmt: skip
        if feasible:
            break
        view = orjson.loads(env.wait())
    job_id, pool = feasible[0]
    assert "error" not in orjson.loads(env.place(job_id, pool))
    assert "error" not in orjson.loads(env.bid("h100", 2, 5.0))
    log = list(env._need().driver.log.dicts())
    placed = [r for r in log if r["kind"] == "placement_decided" and r["job_id"] == job_id]
    assert [(r["tenant"], r["pool"]) for r in placed] == [("research", pool)]
    decided = [r["action"] for r in log if r["kind"] == "decision_made"
               and r["tenant"] == "research"]  # fmt: skip
    assert decided[-1]["bids_usd_per_gpu"] == {"h100": 5.0}
    assert decided[-1]["provision"] == {"h100": 2}


def test_agents_of_the_parallel_env_trade_as_they_would_through_the_gateway() -> None:
    env = ClusterParallelEnv("market")
    env.reset(seed=0)
    whole = env.whole
    research, inference = (
        env.possible_agents.index("research"),
        env.possible_agents.index("inference"),
    )
    idle = {a: whole.idle() for a in env.agents}
    give = whole.idle()["offer_gpus"]
    give[env.pools.index("h100")] += 2  # research gives 2 H100s ...
    ask_one_usd = len(USD_LEVELS) - 1 - USD_LEVELS.index(1.0)  # ... and asks $1
    offer = {**idle["research"], "offer_to": inference + 1, "offer_gpus": give,
             "offer_usd": ask_one_usd}  # fmt: skip
    observations, *_ = env.step({**idle, "research": offer})
    seen = observations["inference"]["offers"][0]  # its first offer slot
    assert seen[0] == 1.0
    assert seen[1] == 1.0 + research
    assert seen[2] == -1.0  # dollars it would get
    assert seen[3 + env.pools.index("h100")] == 2.0
    accept = np.zeros(whole.offer_slots, dtype=np.int8)
    accept[0] = 1
    *_, infos = env.step({**idle, "inference": {**idle["inference"], "accept": accept}})
    assert infos["research"]["trades"] == ["applied"]
    assert infos["inference"]["trades"] == ["applied"]


def test_agents_of_the_parallel_env_trade_held_gpus_on_the_call_market() -> None:
    """Research asks to sell two idle H100s at $1 each, inference bids for two at up to $16:
    under `call_market` they change hands at one price, as through the gateway's orders."""
    env = ClusterParallelEnv("market", mechanism="call_market")
    env.reset(seed=0)
    whole, h100 = env.whole, env.pools.index("h100")
    idle = {a: whole.idle() for a in env.agents}
    sell, buy = whole.idle(), whole.idle()
    sell["market"][h100] -= 2
    sell["market_price"][h100] = BID_LEVELS_USD.index(1.0)
    buy["market"][h100] += 2
    buy["market_price"][h100] = BID_LEVELS_USD.index(16.0)
    env.step({**idle, "research": sell, "inference": buy})
    assert env._driver is not None
    cleared = [r for r in env._driver.log.dicts() if r["kind"] == "market_cleared"]
    assert [(r["pool"], r["fills"]) for r in cleared] == [
        ("h100", {"research": -2, "inference": 2})
    ]
    assert 1.0 <= cleared[0]["price_usd_per_gpu"] <= 16.0
    orders = [r["action"] for r in env._driver.log.dicts() if r["kind"] == "decision_made"
              and r["tenant"] in ("research", "inference")]  # fmt: skip
    assert {"h100": {"gpus": 2, "usd_per_gpu": 1.0}} in [o.get("asks") for o in orders]
    assert {"h100": {"gpus": 2, "usd_per_gpu": 16.0}} in [o.get("buys") for o in orders]


def test_a_trl_tenant_sells_idle_gpus_on_the_call_market() -> None:
    """Research sells two idle H100s through the `sell` tool; the negotiator opponents bid for
    GPUs their queues need, and the round's call market clears."""
    env = ClusterTenantEnv()
    env.reset(scenario="market-scarce", tenant="research", seed=0, mechanism="call_market")
    assert orjson.loads(env.buy("nowhere", 1, 1.0))["error"].startswith("unknown pool")
    assert orjson.loads(env.sell("h100", 1, -1.0))["error"].startswith("usd_per_gpu must be")
    assert orjson.loads(env.sell("h100", 0, 1.0))["error"] == "gpus must be 1..16"
    env.sell("h100", 2, 0.5)
    log = list(env._need().driver.log.dicts())
    asked = [r["action"].get("asks") for r in log
             if r["kind"] == "decision_made" and r["tenant"] == "research"]  # fmt: skip
    assert {"h100": {"gpus": 2, "usd_per_gpu": 0.5}} in asked
    cleared = [r for r in log if r["kind"] == "market_cleared"]
    assert [(r["pool"], r["fills"]["research"]) for r in cleared] == [("h100", -2)]
    assert cleared[0]["price_usd_per_gpu"] >= 0.5
