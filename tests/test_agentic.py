"""Agentic RL: each orchestration policy's invariants, read from real runs' logs; the elastic
rule and the GPU topology on their own; and the paper's direction on the built-in scenario."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import twin_command
from tests.rounds import commit
from twin.eventlog.log import Record
from twin.schema.agentic import ORCHESTRATIONS, AgenticRlScenario
from twin.sim import scenarios
from twin.sim.agentic.elastic import Demand, allocate, run_s, share
from twin.sim.agentic.gpus import GPUS_PER_NODE, Nodes
from twin.sim.runner import run_episode

SMALL = ["steps=2", "trajectories_per_step=96", "cpu_cores=288", "api_quota=8"]


def small(**fields: Any) -> AgenticRlScenario:
    scenario = scenarios.load("agentic-rl", SMALL)
    assert isinstance(scenario, AgenticRlScenario)
    return scenario.model_copy(update=fields)


def events(scenario: AgenticRlScenario, policy: str, seed: int = 0) -> list[Record]:
    _, driver = run_episode(scenario, seed=seed, policy=policy, keep_log=True)
    return list(driver.log)


# -- the elastic rule -------------------------------------------------------------------------


def test_an_idle_pool_gives_each_action_all_the_units_it_can_use() -> None:
    demands = [Demand(8.0, 0.05, 16), Demand(0.4, 1.0, 1)]
    assert allocate(demands, 3840) == [16, 1]


@given(
    st.lists(st.tuples(st.floats(0.1, 50), st.floats(0, 1), st.integers(1, 6)), min_size=1,
             max_size=3),
    st.integers(1, 9),
)  # fmt: skip
@settings(max_examples=200, deadline=None)
def test_sharing_units_minimises_the_sum_of_run_times(raw: list[Any], units: int) -> None:
    demands = [Demand(w, s, m) for w, s, m in raw]
    if units < len(demands):
        return
    alloc = share(demands, units)
    assert sum(alloc) <= units
    assert all(1 <= a <= d.max_units for a, d in zip(alloc, demands, strict=True))
    best = min(
        sum(run_s(d, m) for d, m in zip(demands, ms, strict=True))
        for ms in itertools.product(*(range(1, d.max_units + 1) for d in demands))
        if sum(ms) <= units
    )
    got = sum(run_s(d, m) for d, m in zip(demands, alloc, strict=True))
    assert got == pytest.approx(best, rel=1e-9)


def test_the_last_candidate_waits_when_that_lowers_the_sum_of_completion_times() -> None:
    parallel = Demand(100.0, 0.0, 16)
    # Two perfectly parallel actions on 16 cores: one after the other on all 16 (6.25 s, then
    # 12.5 s) beats both at once on 8 each (12.5 s each).
    assert allocate([parallel, parallel], 16) == [16]
    # Serial actions gain nothing from more cores: all start at once.
    assert allocate([Demand(1.0, 1.0, 1)] * 4, 16) == [1, 1, 1, 1]
    # A short serial action beside a long parallel one starts now on one core.
    assert allocate([parallel, Demand(0.5, 1.0, 1)], 16) == [15, 1]


# -- the GPU topology -------------------------------------------------------------------------


@given(st.lists(st.tuples(st.booleans(), st.sampled_from([1, 2, 4, 8])), max_size=60))
@settings(max_examples=200, deadline=None)
def test_chunks_are_aligned_and_never_overlap(ops: list[tuple[bool, int]]) -> None:
    nodes = Nodes(3)
    held = []
    for place, gpus in ops:
        if place or not held:
            chunk = nodes.place(gpus)
            if chunk is None:
                assert not nodes.fits(gpus)
                continue
            assert chunk.offset % chunk.gpus == 0
            assert chunk.offset + chunk.gpus <= GPUS_PER_NODE
            assert all(c.node != chunk.node or not c.mask & chunk.mask for c in held)
            held.append(chunk)
        else:
            nodes.free(held.pop(0))
    assert nodes.free_gpus == 3 * GPUS_PER_NODE - sum(c.gpus for c in held)


def test_placement_is_best_fit() -> None:
    nodes = Nodes(2)
    first = nodes.place(4)
    assert first is not None
    second = nodes.place(2)  # into the half-used node, keeping the other whole
    assert second is not None
    assert second.node == first.node
    assert nodes.place(8) is not None


# -- invariants of each policy, from its log ---------------------------------------------------


def concurrency(log: list[Record]) -> dict[str, float]:
    """The most units of each resource in use at once, and whether any action ran without."""
    resource: dict[str, str] = {}
    units: dict[str, int] = {}
    now: dict[str, float] = defaultdict(float)
    peak: dict[str, float] = defaultdict(float)
    for rec in log:
        if rec.kind == "action_submitted":
            resource[rec.action_id] = rec.resource
        elif rec.kind == "action_started":
            assert rec.units >= 1, "an action runs on at least one unit"
            units[rec.action_id] = rec.units
            now[resource[rec.action_id]] += rec.units
            peak[resource[rec.action_id]] = max(
                peak[resource[rec.action_id]], now[resource[rec.action_id]]
            )
        elif rec.kind == "action_finished":
            now[resource[rec.action_id]] -= units.pop(rec.action_id)
    assert not units, "every action that started finished"
    return peak


@pytest.mark.parametrize("policy", ORCHESTRATIONS)
def test_no_pool_or_quota_is_ever_exceeded(policy: str) -> None:
    scenario = small()
    log = events(scenario, policy)
    peak = concurrency(log)
    assert peak["cpu"] <= scenario.cpu_cores
    assert peak["api"] <= scenario.api_quota
    submitted = sum(r.kind == "action_submitted" for r in log)
    finished = sum(r.kind == "action_finished" for r in log)
    assert submitted == finished > 0


def test_elastic_services_sit_in_aligned_chunks_and_serve_only_while_loaded() -> None:
    scenario = small(gpu_nodes=1, idle_evict_s=5.0)
    log = events(scenario, "elastic")
    loaded: dict[tuple[int, int], tuple[str, int]] = {}
    copies: dict[str, int] = defaultdict(int)
    service_of = {a.name: a.service for a in scenario.actions if a.service}
    kind_of: dict[str, str] = {}
    calls = 0
    for rec in log:
        if rec.kind == "service_loaded":
            service, gpus, node, offset = rec.service, rec.gpus, rec.node, rec.offset
            assert offset % gpus == 0
            mask = set(range(offset, offset + gpus))
            for (n, o), (_, g) in loaded.items():
                assert n != node or not mask & set(range(o, o + g)), "chunks never overlap"
            loaded[node, offset] = (service, gpus)
            copies[service] += 1
        elif rec.kind == "service_evicted":
            service, gpus = loaded.pop((rec.node, rec.offset))
            assert service == rec.service
            copies[service] -= 1
        elif rec.kind == "action_submitted":
            kind_of[rec.action_id] = rec.action
        elif rec.kind == "action_started" and kind_of[rec.action_id] in service_of:
            calls += 1
            assert copies[service_of[kind_of[rec.action_id]]] >= 1, "a call runs on a loaded copy"
    assert calls > 0
    kinds = {r.service for r in log if r.kind == "service_evicted"}
    reasons = {r.reason for r in log if r.kind == "service_evicted"}
    assert kinds, "services come and go on one node"
    assert reasons <= {"idle", "lru"}


def test_lru_eviction_takes_the_idle_service_used_longest_ago() -> None:
    # Four 4-GPU services on one 8-GPU node: a load beyond two evicts an idle one.
    scenario = small(gpu_nodes=1, idle_evict_s=1e6)
    log = events(scenario, "elastic")
    service_of = {a.name: a.service for a in scenario.actions if a.service}
    service: dict[str, str] = {}  # call id -> its service
    last_use: dict[str, float] = {}
    in_flight: dict[str, int] = defaultdict(int)
    resident: set[str] = set()
    evictions = 0
    for rec in log:
        if rec.kind == "action_submitted" and rec.action in service_of:
            service[rec.action_id] = service_of[rec.action]
        elif rec.kind == "action_started" and rec.action_id in service:
            in_flight[service[rec.action_id]] += 1
        elif rec.kind == "action_finished" and rec.action_id in service:
            in_flight[service[rec.action_id]] -= 1
            last_use[service[rec.action_id]] = rec.t_s
        elif rec.kind == "service_loaded":
            resident.add(rec.service)
        elif rec.kind == "service_evicted":
            assert rec.reason == "lru"
            assert in_flight[rec.service] == 0, "only an idle service is evicted"
            idle = {s for s in resident - {rec.service} if in_flight[s] == 0}
            assert all(last_use[rec.service] <= last_use[s] for s in idle)
            resident.discard(rec.service)
            evictions += 1
    assert evictions > 0


@pytest.mark.parametrize("policy", ORCHESTRATIONS)
def test_the_same_seed_gives_the_same_log(policy: str, tmp_path: Path) -> None:
    scenario = small()
    for name in ("a", "b"):
        run_episode(scenario, seed=3, policy=policy, out_dir=tmp_path / name)
    assert (tmp_path / "a" / "events.jsonl").read_bytes() == (
        tmp_path / "b" / "events.jsonl"
    ).read_bytes()


# -- the paper's direction on the built-in scenario ---------------------------------------------


def test_elastic_beats_static_over_provisioning_as_the_paper_reports(tmp_path: Path) -> None:
    result = twin_command("compare", "--scenario", "agentic-rl", "--policy", "static,elastic",
                          "--out", str(tmp_path))  # fmt: skip
    assert result.returncode == 0, result.stderr
    m = json.loads((tmp_path / "compare.json").read_text())["means"]
    static, elastic = m["static"], m["elastic"]
    assert static["ACT mean s"] / elastic["ACT mean s"] >= 2.0
    assert static["step mean s"] / elastic["step mean s"] >= 1.2
    assert elastic["GPU-h held"] <= 0.5 * static["GPU-h held"]
    assert elastic["core-h held"] < static["core-h held"]
    rows = (tmp_path / "compare.csv").read_text().splitlines()
    assert rows[0].startswith("policy,seed,ACT mean s")
    assert len(rows) == 3


def test_compare_refuses_an_unknown_policy() -> None:
    result = twin_command("compare", "--scenario", "agentic-rl", "--policy", "static,magic")
    assert result.returncode == 2
    assert "unknown policy 'magic'; allowed: static, isolation, elastic" in result.stderr


# -- an agent sets the elastic knobs ----------------------------------------------------------


def test_under_agent_orchestration_the_tenant_decides_every_interval() -> None:
    scenario = small(orchestration="agent", decision_interval_s=30.0)
    log = events(scenario, "agent")
    decided = [r for r in log if r.kind == "decision_made"]
    end_s = next(r.t_s for r in log if r.kind == "episode_ended")
    assert len(decided) == pytest.approx(end_s / 30.0, abs=1.5)
    assert {r.tenant for r in decided} == {"rl"}


async def test_an_agent_over_the_openenv_plane_caps_the_cores_an_action_takes(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    from twin.gateway.app import create_app
    from twin.gateway.config import GatewayConfig

    scenario = small(orchestration="agent", decision_interval_s=20.0)
    path = tmp_path / "agentic.json"
    path.write_text(scenario.model_dump_json())
    client = await aiohttp_client(create_app(GatewayConfig(scenario=str(path))))
    reset = await (await client.post("/reset", json={"seed": 0})).json()
    handle = reset["metadata"]["handle"]  # this client is its address: the handle reaches it
    assert reset["metadata"]["tenant"] == "rl"
    assert set(reset["observation"]) >= {"queued", "running", "free_units", "loaded_services"}
    rewards = []
    for _ in range(5):
        action = {"max_units": 2, "pinned": ["reward"]}
        resp = await client.post("/step", json={"action": action, "handle": handle})
        step = await resp.json()
        assert resp.status == 200, step
        rewards.append(step["reward"])
    assert all(r <= 0 for r in rewards), "the reward is minus the completion hours since"
    assert any(r < 0 for r in rewards)
    bad = await client.post("/step", json={"action": {"pinned": ["nope"]}, "handle": handle})
    assert (await bad.json())["code"] == "VALIDATION_ERROR"


def test_a_cap_set_by_the_agent_bounds_the_cores_of_every_later_action() -> None:
    from twin.eventlog.log import EventLog
    from twin.schema.agentic import AgenticAction
    from twin.sim.driver import Driver

    scenario = small(orchestration="agent", decision_interval_s=30.0)
    driver: Driver[Any, Any] = Driver(scenario, seed=0, log=EventLog("cap", keep=True))
    defaults = driver.default_policies()
    while driver.advance() is not None:
        commit(driver, {"rl": AgenticAction(max_units=2)}, defaults)
    started = [r for r in driver.log if r.kind == "action_started"]
    assert started
    assert max(r.units for r in started) == 2
