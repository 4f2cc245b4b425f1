"""Agents see the forecast of their own queue: in a session on a real gateway, `ask_forecast`
answers when each waiting job starts, as things are and with GPUs added, and what those GPUs
save; it changes nothing in the session. The tenant's snapshot holds what it is told, and from
it the forecast is the session's own future where nothing is uncertain."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import ClientWebSocketResponse
from aiohttp.test_utils import TestClient, TestServer

from twin.eventlog.log import EventLog
from twin.forecast.forecast import forecast
from twin.gateway.keys import REGISTRY
from twin.replay.cluster import Cluster
from twin.replay.run import Queue, replay_scenario
from twin.schema.scenario import PoolConfig
from twin.schema.scheduling import SchedulerConfig
from twin.sim.driver import Driver
from twin.sim.jobrecord import JobRecord

from .test_gateway import hello, new_session, next_of, serve
from .test_mcp_tenant import market, tenant_over_mcp

Client = TestClient  # type: ignore[type-arg]
MakeClient = Callable[..., Awaitable[Client]]
MakeServer = Callable[..., Awaitable[TestServer]]

BUSY = {
    "kind": "cluster",
    "name": "busy",
    "horizon_s": 4 * 3600,
    "pools": [{"name": "h100", "gpu_type": "h100", "max_gpus": 16, "price_usd_per_gpu_h": 4.0,
               "provision_delay_s": {"dist": "constant", "value": 60}},
              {"name": "lab", "gpu_type": "a100", "max_gpus": 4, "price_usd_per_gpu_h": 0.0,
               "shared": True}],
    "tenants": [{"name": "t0", "budget_usd": 1000, "policy": "static", "sla_usd_per_job_h": 2.0,
                 "initial_gpus": {"h100": 1},
                 "workloads": [{"arrivals": {"process": "poisson", "rate_per_h": 12},
                                "service_s": {"dist": "constant", "value": 900},
                                "gpu_type": "h100"}]}],
    "decisions": {"interval_s": 1800, "triggers": []},
}  # fmt: skip


async def ask(ws: ClientWebSocketResponse, **frame: Any) -> dict[str, Any]:
    await ws.send_json({"type": "ask_forecast", **frame})
    answer: dict[str, Any] = await ws.receive_json(timeout=60)
    return answer


async def test_an_agent_asks_when_its_waiting_jobs_start_and_what_more_gpus_would_save(
    aiohttp_client: MakeClient,
) -> None:
    client = await serve(aiohttp_client)
    session = await new_session(client, scenario=BUSY, seed=2, agents=["t0"],
                                round_timeout_ms=60_000)  # fmt: skip
    ws = await hello(client, session, "t0")
    request = await next_of(ws, "decision_requested")
    view, t_s = request["view"], request["t_s"]
    assert view["queue_length"] >= 3  # one GPU, a job every 5 minutes, each 15

    same = await ask(ws)
    assert same["type"] == "forecast", same
    assert same["t_s"] == t_s
    assert same["added_gpus"] == {}
    assert same["saved_job_h"] == 0
    assert [j["job_id"] for j in same["jobs"]] == [j["job_id"] for j in view["head"]]
    for job in same["jobs"]:
        p10, p50, p90 = job["start_s"] or (t_s, t_s + 1e9, t_s + 1e9)
        assert t_s <= p10 <= p50 <= p90
    # FIFO on one GPU: the queue starts in order, 15 minutes apart after the running job ends.
    medians = [j["start_s"][1] for j in same["jobs"] if j["start_s"] is not None]
    assert medians == sorted(medians)
    assert len(medians) >= 2
    assert medians[1] - medians[0] == pytest.approx(900, abs=1)

    more = await ask(ws, add_gpus={"h100": 4}, horizon_s=7200)
    assert more["added_gpus"] == {"h100": 4}
    assert more["samples"] >= 10
    assert all(j["saved_s"] >= 0 for j in more["jobs"])
    assert more["saved_job_h"] > 0.5  # the second to fifth jobs start at once rather than later
    assert more["saved_sla_usd"] == pytest.approx(more["saved_job_h"] * 2.0)
    assert more["jobs"][1]["with_added_start_s"][1] == pytest.approx(t_s, abs=1)

    again = await ask(ws, add_gpus={"h100": 4}, horizon_s=7200)
    assert again["jobs"] == more["jobs"]  # seeded by the session and the instant

    for bad, why in (({"add_gpus": {"h200": 1}}, "no pool 'h200'"),
                     ({"add_gpus": {"lab": 1}}, "pool 'lab' is shared"),
                     ({"add_gpus": {"h100": 0}}, "add_gpus.h100"),
                     ({"horizon_s": 10}, "horizon_s")):  # fmt: skip
        refused = await ask(ws, **bad)
        assert (refused["type"], refused["code"]) == ("error", "VALIDATION_ERROR"), refused
        assert why in refused["detail"]
    await ws.send_json({"type": "end_turn", "round": request["round"], "seq": 1})
    assert (await next_of(ws, "round_committed"))["round"] == request["round"]
    await ws.close()


async def test_a_forecast_changes_nothing_in_the_session(aiohttp_client: MakeClient) -> None:
    """Two sessions of the same seed, the agent ending every turn at once; in one it asks a
    forecast first each round. Their event logs hold the same events."""
    client = await serve(aiohttp_client)

    async def play(asking: bool) -> list[tuple[str, float, str]]:
        session = await new_session(client, scenario=BUSY, seed=5, agents=["t0"],
                                    round_timeout_ms=60_000)  # fmt: skip
        ws = await hello(client, session, "t0")
        while True:
            frame = json.loads((await ws.receive(timeout=60)).data)
            if frame["type"] == "session_ended":
                break
            if frame["type"] == "decision_requested":
                if asking:
                    assert (await ask(ws, add_gpus={"h100": 2}))["type"] == "forecast"
                await ws.send_json({"type": "end_turn", "round": frame["round"], "seq": 1})
        await ws.close()
        events = await client.get(f"/v1/sessions/{session['session_id']}/events")
        lines = [json.loads(line) for line in (await events.text()).splitlines()]
        return [(r["kind"], r["t_s"], str(r.get("job_id", ""))) for r in lines]

    assert await play(asking=True) == await play(asking=False)


async def test_one_forecast_at_a_time_per_session(aiohttp_client: MakeClient) -> None:
    client = await serve(aiohttp_client)
    session = await new_session(client, scenario=BUSY, seed=2, agents=["t0"],
                                round_timeout_ms=60_000)  # fmt: skip
    ws = await hello(client, session, "t0")
    await next_of(ws, "decision_requested")
    live = client.server.app[REGISTRY].get(session["session_id"])
    assert live is not None
    live.forecasts.busy = True  # as while another agent's forecast runs on its worker thread
    refused = await ask(ws)
    assert refused["code"] == "RATE_LIMITED"
    assert "under way" in refused["detail"]
    live.forecasts.busy = False
    assert (await ask(ws))["type"] == "forecast"
    await ws.close()


async def test_forecasts_are_limited_on_the_whole_server_not_only_per_session(
    aiohttp_client: MakeClient,
) -> None:
    """Seven tenants asking back to back in seven sessions took the server's threads from an
    honest session; now the server answers at most `max_forecasts` at once."""
    client = await serve(aiohttp_client, max_forecasts=1)
    sockets = []
    for seed in (2, 3):
        session = await new_session(client, scenario=BUSY, seed=seed, agents=["t0"],
                                    round_timeout_ms=60_000)  # fmt: skip
        ws = await hello(client, session, "t0")
        await next_of(ws, "decision_requested")
        sockets.append(ws)
    registry = client.server.app[REGISTRY]
    registry.forecast_slots.taken = 1  # as while another session's forecast runs
    refused = await ask(sockets[1])
    assert (refused["code"], "its most at once" in refused["detail"]) == ("RATE_LIMITED", True)
    registry.forecast_slots.taken = 0
    assert (await ask(sockets[1]))["type"] == "forecast"
    assert registry.forecast_slots.taken == 0  # given back once answered
    for ws in sockets:
        await ws.close()


async def test_a_pool_whose_name_has_a_dot_takes_its_added_gpus(
    aiohttp_client: MakeClient,
) -> None:
    """`h.100` is a valid pool name; the what-if that adds its GPUs crashed on the dot."""
    dotted = json.loads(json.dumps(BUSY).replace('"h100"', '"h.100"'))
    client = await serve(aiohttp_client)
    session = await new_session(client, scenario=dotted, seed=2, agents=["t0"],
                                round_timeout_ms=60_000)  # fmt: skip
    ws = await hello(client, session, "t0")
    await next_of(ws, "decision_requested")
    answer = await ask(ws, add_gpus={"h.100": 4})
    assert answer["type"] == "forecast", answer
    assert answer["added_gpus"] == {"h.100": 4}
    await ws.close()


async def test_the_forecast_is_an_mcp_tool(aiohttp_server: MakeServer) -> None:
    server, session = await market(aiohttp_server)
    async with tenant_over_mcp(server, session, "inference") as mcp:
        assert "forecast" in [t.name for t in (await mcp.list_tools()).tools]
        result = await mcp.call_tool("forecast", {"add_gpus": {"a100": 2}, "horizon_s": 3600})
        assert not result.isError, result.content
        answer = result.structuredContent
        assert answer is not None
        assert answer["added_gpus"] == {"a100": 2}
        assert answer["horizon_s"] == 3600
        assert isinstance(answer["jobs"], list)
        bad = await mcp.call_tool("forecast", {"add_gpus": {"tpu": 2}})
        assert bad.isError
        assert "VALIDATION_ERROR" in str(bad.content)


def test_from_a_tenants_snapshot_the_forecast_is_the_sessions_own_future() -> None:
    """Four GPUs, twelve two-GPU jobs of known work submitted over two minutes, FIFO, and
    nothing else arriving: cut the session at 5 minutes, forecast the tenant's queue from what
    it is told, and each waiting job starts when the session then starts it."""
    pools = [PoolConfig(name="g", gpu_type="a100", max_gpus=4, price_usd_per_gpu_h=1.0)]
    scenario = replay_scenario("cut", "a cut session", Cluster(pools, None, "test"), Queue(),
                               SchedulerConfig())  # fmt: skip
    jobs = [JobRecord(f"j{i}", 10.0 * i, 100.0 + 97.0 * i, 2.0, "default") for i in range(12)]
    log = EventLog("cut", keep=True)
    driver = Driver(scenario, sources=[jobs], log=log)
    driver.env.run(until=300.0)
    snapshot = driver.snapshot("trace")
    assert snapshot is not None
    assert [p.max_gpus for p in snapshot.pools] == [4]
    assert len(snapshot.running) == 2
    assert len(snapshot.waiting) >= 6
    assert all(j.run_s is not None for j in (*snapshot.running, *snapshot.waiting))
    predicted = forecast(snapshot, samples=3, horizon_s=6 * 3600.0, seed=1)
    driver.env.run()
    log.flush()
    started = {r.job_id: r.t_s for r in log if r.kind == "job_started"}
    for job in predicted.jobs:
        assert job.start_s is not None
        assert job.started_share == 1.0
        assert job.start_s == pytest.approx((started[job.job_id],) * 3, abs=1e-6), job.job_id
