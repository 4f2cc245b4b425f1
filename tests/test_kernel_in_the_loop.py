"""The kernel at every decision point: each round scores the plans being decided, jobs run at
the verdict of the allocation they are granted, and decision requests carry the verdicts."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from tests.conftest import kinds, play
from tests.rounds import commit
from twin.eventlog.log import EventLog
from twin.gateway.app import create_app
from twin.gateway.config import GatewayConfig, SessionRequest
from twin.gateway.keys import REGISTRY
from twin.schema.actions import PlanVerdict, PoolView, QueuedJob, TenantObservation
from twin.schema.scenario import ClusterScenario
from twin.schema.wire import DecisionRequested
from twin.sim import scenarios
from twin.sim.driver import Driver
from twin.sim.reproduce import reproduce_log
from twin.sim.tenant_policies import Autoscale
from twin_agents.client import AgentClient
from twin_agents.policy import Quiet, Turn
from twin_agents.registry import builtin


def kernel_cluster(*, power_cap_w: float = 0.0, gpus: list[int] | None = None) -> ClusterScenario:
    """One H100 pool and a tenant whose jobs train Llama 3.1 8B on 8 GPUs, one at a time."""
    return ClusterScenario.model_validate({
        "name": "kernel-loop",
        "pools": [{"name": "h100", "gpu_type": "h100", "max_gpus": 16,
                   "price_usd_per_gpu_h": 4.0, "power_cap_w": power_cap_w}],
        "tenants": [{
            "name": "t", "policy": "static", "initial_gpus": {"h100": 16},
            "workloads": [{
                "arrivals": {"process": "poisson", "rate_per_h": 2},
                "gpus": {"dist": "choice", "values": gpus or [8]},
                "max_jobs": 6,
                "kernel": {"model": "llama-3.1-8b", "tokens": {"dist": "constant", "value": 2e8},
                           "plan": {"tp": 8}},
            }],
        }],
        "decisions": {"interval_s": 600, "triggers": ["arrival"]},
        "horizon_s": 12 * 3600,
    })  # fmt: skip


def run_s_by_gpus(events: list[dict[str, Any]]) -> dict[float, set[float]]:
    out: dict[float, set[float]] = {}
    for e in kinds(events, "job_started"):
        out.setdefault(e["gpus"], set()).add(round(e["run_s"], 6))
    return out


def test_the_default_run_scores_plans_at_many_decision_points() -> None:
    events = play(scenarios.load("default"))
    times = {e["t_s"] for e in kinds(events, "plan_evaluated")}
    assert 0.0 in times
    assert len(times) > 100


def test_jobs_run_slower_under_a_lower_power_cap() -> None:
    free = run_s_by_gpus(play(kernel_cluster()))
    capped = run_s_by_gpus(play(kernel_cluster(power_cap_w=350.0)))
    [free_s], [capped_s] = free[8.0], capped[8.0]  # every job: the same tokens, the same verdict
    assert capped_s > free_s * 1.05


def test_jobs_run_at_the_speed_of_the_gpus_they_are_granted() -> None:
    by_gpus = run_s_by_gpus(play(kernel_cluster(gpus=[8, 16]), seed=3))
    assert set(by_gpus) == {8.0, 16.0}
    (eight,), (sixteen,) = by_gpus[8.0], by_gpus[16.0]
    assert sixteen < eight


def test_a_power_cap_below_idle_makes_the_pool_infeasible_and_says_why() -> None:
    events = play(kernel_cluster(power_cap_w=50.0))
    verdicts = kinds(events, "plan_evaluated")
    assert verdicts
    assert all(not v["feasible"] and v["reasons"] == ["power_cap"] for v in verdicts)
    assert {e["reason"].split(":")[0] for e in kinds(events, "job_failed")} == {"infeasible_plan"}


def test_a_decision_request_carries_the_verdicts_of_the_queued_jobs_plans() -> None:
    driver: Driver[Any, Any] = Driver(scenarios.load("default"), seed=1, log=EventLog("v"))
    seen = []
    while (batch := driver.advance()) is not None and len(seen) < 5:
        for tenant in batch.reasons:
            for job in driver.observe(tenant).head:
                seen += [(tenant, job.job_id, p) for p in job.plans]
        commit(driver, {}, driver.default_policies())
    assert seen
    tenant, _, verdict = seen[0]
    assert tenant in ("research", "inference")
    assert verdict.pool in ("h100", "a100", "l40s")
    assert (verdict.run_s is not None) == verdict.feasible
    assert 0.0 <= verdict.score < 1.0


@pytest.mark.parametrize("seed", [0, 7])
def test_each_round_logs_verdicts_and_repeated_plans_cost_no_kernel_call(seed: int) -> None:
    driver: Driver[Any, Any] = Driver(scenarios.load("default"), seed=seed, log=EventLog("c"))
    rounds = 0
    while driver.advance() is not None:
        commit(driver, {}, driver.default_policies())
        rounds += 1
    scorer = driver.model.scorer  # the sim's own part, inspected by its own test
    assert scorer.kernel_calls < rounds / 10
    assert len(scorer.cache) <= 2 * 3 * 2  # tenants with plans x pools x GPU counts


class Hoarder(Quiet):
    """Asks for every free GPU of every pool each round and never gives one back."""

    name = "hoarder"

    async def decide(self, request: DecisionRequested) -> Turn:
        return Turn(provision={p.name: p.free_capacity for p in request.view.pools
                               if p.free_capacity > 0})  # fmt: skip


async def test_a_market_session_credits_each_agent_by_the_kernel_and_floors_a_hoarder(
    aiohttp_server: Any,
) -> None:
    tenants = ["research", "inference", "batch"]
    server = await aiohttp_server(create_app(GatewayConfig()))
    session = server.app[REGISTRY].create(
        SessionRequest(scenario="market", agents=tenants, round_timeout_ms=10_000, seed=4)
    )
    url = str(server.make_url("/v1/agents")).replace("http://", "ws://")
    policies = {"research": Hoarder(), "inference": builtin("negotiator", tenants, "inference"),
                "batch": builtin("fair_share", tenants, "batch")}  # fmt: skip
    clients = [AgentClient(url, session.id, t, session.tokens[t], p) for t, p in policies.items()]
    for stats in await asyncio.gather(*(c.run() for c in clients)):
        assert (stats.end_reason, stats.defaulted_rounds) == ("horizon", 0)
    log = session.events()
    records = [orjson.loads(line) for line in log.splitlines()]
    credited = kinds(records, "round_credited")
    by_tenant = {t: [r["difference_reward"] for r in credited if r["tenant"] == t] for t in tenants}
    assert all(len(set(rewards)) > 1 for rewards in by_tenant.values())  # they vary by round
    assert len({round(sum(r), 6) for r in by_tenant.values()}) == 3  # and by agent
    assert any(r != 0.0 for rewards in by_tenant.values() for r in rewards)
    floored = [r for r in credited if "degenerate_hoarding" in r["reasons"]]
    assert floored
    assert {r["tenant"] for r in floored} == {"research"}
    assert all(r["score"] == 0.01 for r in floored)
    assert reproduce_log(records) == log


def observation(plans: list[PlanVerdict]) -> TenantObservation:
    """Two pools: `cheap` is the better buy per unit of speed; the kernel may disagree."""
    pools = [
        PoolView(name=name, gpu_type=name, price_usd_per_gpu_h=price, speed=speed,
                 mean_provision_delay_s=0.0, ready=0, busy_gpus=0.0, pending=0, down=0,
                 free_capacity=16)
        for name, price, speed in (("cheap", 1.0, 1.0), ("dear", 4.0, 2.0))
    ]  # fmt: skip
    job = QueuedJob(job_id="j1", gpus=4, work_gpu_s=3600.0, priority=0.0, wait_s=0.0,
                    pools=["cheap", "dear"], plans=plans)  # fmt: skip
    return TenantObservation(t_s=0.0, tenant="t", reasons=["tick"], budget_usd=None,
                             spent_usd=0.0, queue_length=1, queued_gpus=4.0, running_jobs=0,
                             head=[job], pools=pools)  # fmt: skip


def verdict(pool: str, score: float, tokens_per_s: float) -> PlanVerdict:
    return PlanVerdict(pool=pool, feasible=True, score=score, tokens_per_s=tokens_per_s,
                       usd_per_h=1.0, run_s=100.0, reasons=[])  # fmt: skip


def test_policies_choose_pools_by_the_kernels_verdicts_on_the_queued_plans() -> None:
    plain = observation([])
    scored = observation([verdict("cheap", 0.12, 9000.0), verdict("dear", 0.31, 5000.0)])
    assert [p.name for p in plain.ranked_pools()] == ["cheap", "dear"]  # price per speed
    assert [p.name for p in scored.ranked_pools()] == ["dear", "cheap"]  # the kernel's score
    assert [p.name for p in scored.ranked_pools("speed")] == ["cheap", "dear"]  # its tokens/s
    assert Autoscale().decide(scored).provision == {"dear": 4}
    assert Autoscale().decide(plain).provision == {"cheap": 4}
