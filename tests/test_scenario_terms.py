"""A tenant sees the scenario's terms it would know (each pool's price, provisioning delay
quantiles, billing and capacity; its own value, SLA cost and budget) in every observation a
policy reads: the gateway's view, Gymnasium's and PettingZoo's `terms`, the TRL compact view,
and the learned policy's features. So one policy can tell a family's members apart."""

from __future__ import annotations

import json

import numpy as np
import pytest

from twin.rl.cluster_env import ClusterEnv
from twin.rl.learnable import TENANT_TERMS, TERMS_PER_POOL, terms
from twin.rl.parallel_env import ClusterParallelEnv
from twin.rl.trl_env import ClusterTenantEnv
from twin.schema.distributions import LogNormal, quantile
from twin.sim import scenarios
from twin.sim.driver import Driver
from twin_agents.learned import FEATURES, features

SCARCE = "market-scarce"


def test_the_view_carries_each_pools_delay_quantiles_billing_and_capacity() -> None:
    driver = Driver(scenarios.load(SCARCE))
    assert driver.advance() is not None
    view = driver.observe("inference")
    h100 = next(p for p in view.pools if p.name == "h100")
    low, median, high = h100.provision_delay_s
    assert median == pytest.approx(3600.0)  # the scenario's lognormal median
    assert low < median < high
    assert h100.billing == "from_request"
    assert h100.max_gpus == 8
    assert (view.value_usd_per_gpu_h, view.sla_usd_per_job_h) == (10.0, 2.0)


def test_quantiles_of_a_lognormal_sit_around_its_median() -> None:
    dist = LogNormal(median=900.0, sigma=0.4)
    assert quantile(dist, 0.5) == pytest.approx(900.0)
    assert quantile(dist, 0.9) == pytest.approx(900.0 * np.exp(0.4 * 1.2815515655446004))


def test_gym_and_pettingzoo_show_the_terms_and_they_tell_members_apart() -> None:
    env = ClusterEnv("family:market/901", normalised=True)
    obs, _ = env.reset(seed=1)
    assert obs["terms"].shape == (TERMS_PER_POOL * 2 + TENANT_TERMS,)
    assert env.observation_space["terms"].contains(obs["terms"])
    other = ClusterEnv("family:market/902", normalised=True).reset(seed=1)[0]["terms"]
    assert not np.allclose(obs["terms"], other)
    flat = ClusterEnv("family:market/901", normalised=True, flat=True)
    vector, _ = flat.reset(seed=1)
    assert np.allclose(vector[-len(obs["terms"]) :], obs["terms"])
    scenario = scenarios.as_cluster(scenarios.load(SCARCE))
    raw = terms(scenario, "inference", normalised=False)
    per_pool = raw[: 2 * TERMS_PER_POOL].reshape(2, TERMS_PER_POOL)
    assert per_pool[0].tolist()[0] == 3.9  # h100's price per GPU-hour
    assert per_pool[0, 2] == pytest.approx(3600.0)  # its median delay
    assert per_pool[:, 4].tolist() == [1.0, 1.0]  # both bill from the request
    assert per_pool[:, 5].tolist() == [8.0, 8.0]  # capacities
    assert raw[-TENANT_TERMS:].tolist() == [10.0, 2.0, 1200.0]
    parallel = ClusterParallelEnv(SCARCE)
    observations, _ = parallel.reset(seed=3)
    assert np.allclose(observations["inference"]["terms"], terms(scenario, "inference",
                                                                 normalised=False))  # fmt: skip
    assert parallel.observation_space("batch")["terms"].contains(observations["batch"]["terms"])


def test_the_trl_compact_view_names_delays_billing_value_and_sla() -> None:
    env = ClusterTenantEnv()
    text = env.reset(scenario=SCARCE, tenant="inference", seed=0, view="compact")
    seen = json.loads(text)
    assert seen["pools"]["h100"]["billed"] == "request"
    assert seen["pools"]["h100"]["delay_h"][1] == pytest.approx(1.0)
    assert (seen["value_usd_h"], seen["sla_usd_job_h"]) == (10.0, 2.0)


def test_the_learned_policys_features_read_the_delay_and_billing() -> None:
    driver = Driver(scenarios.load(SCARCE))
    assert driver.advance() is not None
    view = driver.observe("research")
    rows = features(view)
    at = {name: i for i, name in enumerate(FEATURES)}
    h100 = rows["h100"]
    idle_empty = h100[at["idle_if_empty"]]
    assert idle_empty == 2.0  # two of its six H100s idle, nothing waiting
    assert h100[at["idle_if_empty_x_delay_h"]] == pytest.approx(idle_empty * 1.0)
    assert h100[at["idle_if_empty_x_from_request"]] == idle_empty
    fast = Driver(scenarios.load("market"))
    assert fast.advance() is not None
    quick = features(fast.observe("research"))["h100"]
    assert quick[at["idle_if_empty"]] == 4.0
    assert quick[at["idle_if_empty_x_from_request"]] == 0.0  # market bills from ready
    assert quick[at["idle_if_empty_x_delay_h"]] == pytest.approx(
        quick[at["idle_if_empty"]] * 0.25
    )  # 15 minutes away
