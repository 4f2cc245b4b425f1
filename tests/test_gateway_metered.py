"""The gateway's limits hold while the work runs, not only at admission: a real aiohttp server
on loopback, requests shaped to defeat the admission estimate."""

from __future__ import annotations

import asyncio
import gc
import time
import tracemalloc
from typing import Any

import pytest

from tests.test_gateway import ADMIN, OPERATOR, Client, MakeClient
from twin.gateway.app import create_app
from twin.gateway.config import GatewayConfig
from twin.sim import scenarios

ANONYMOUS = {"Authorization": "Bearer not-a-token"}


async def serve(aiohttp_client: MakeClient, **config: Any) -> Client:
    return await aiohttp_client(
        create_app(GatewayConfig(admin_token=ADMIN, **config)), headers=OPERATOR
    )


def market_with(arrivals: dict[str, Any]) -> dict[str, Any]:
    """The built-in `market`, its third tenant's workload arriving by `arrivals`."""
    scenario = scenarios.load("market").model_dump(mode="json")
    scenario["tenants"][2]["workloads"][0]["arrivals"] = arrivals
    return scenario


async def test_an_on_off_process_that_almost_never_brings_a_job_answers_and_holds_no_thread(
    aiohttp_client: MakeClient,
) -> None:
    """Sized at 0 jobs, it passed admission and then spun inside one draw for minutes, holding
    every thread it was given; now each gap draws a bounded number of values and its reset
    answers like any other, while others' calls go on."""
    client = await serve(aiohttp_client, env_workers=2)
    rare = {"process": "onoff", "on_rate_per_h": 1e-300, "mean_on_s": 1, "mean_off_s": 1}
    spinning = {"scenario": market_with(rare)}
    start = time.perf_counter()
    resets = [asyncio.create_task(client.post("/reset", json=spinning, headers=ANONYMOUS))
              for _ in range(4)]  # fmt: skip
    health = await client.get("/health")
    assert health.status == 200
    answers = await asyncio.wait_for(asyncio.gather(*resets), timeout=30)
    assert [a.status for a in answers] == [200] * 4
    newcomer = await client.post("/reset", json={"seed": 1})
    assert newcomer.status == 200
    assert time.perf_counter() - start < 30


async def test_an_openenv_episode_keeps_its_state_not_its_history(
    aiohttp_client: MakeClient,
) -> None:
    """Memory grows with what an episode holds, not with its steps: 32 tenants and no workload
    cost about 48 kB a step while every record was kept (29 MB over these 600 steps); now the
    records pass to the log's consumers and are let go (at most one chunk is held)."""
    client = await serve(aiohttp_client)
    scenario = scenarios.load("market").model_dump(mode="json")
    idle = scenario["tenants"][0]
    scenario["tenants"] = [dict(idle, name=f"t{i}", workloads=[], initial_gpus={})
                           for i in range(32)]  # fmt: skip
    scenario["horizon_s"] = 10**8
    reset = await client.post("/reset", json={"scenario": scenario})
    assert reset.status == 200
    step = {"action": {}, "handle": (await reset.json())["metadata"]["handle"]}

    async def steps(n: int) -> None:
        for _ in range(n):
            assert (await client.post("/step", json=step)).status == 200

    await steps(100)
    gc.collect()
    tracemalloc.start()
    try:
        await steps(600)
        gc.collect()
        grown_bytes = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert grown_bytes < 6_000_000, f"{grown_bytes / 600 / 1000:.1f} kB a step"


async def test_a_burst_the_estimate_did_not_see_is_stopped_at_the_job_limit_as_it_comes(
    aiohttp_client: MakeClient,
) -> None:
    """Sized by its long-run mean (about 150 jobs), an on/off process that starts "on" brings a
    hundred thousand jobs in its first tenth of a second; the episode is metered as it runs and
    ended at the limit with a coded refusal, and the server goes on."""
    client = await serve(aiohttp_client, max_episode_jobs=2_000)
    burst = {"process": "onoff", "on_rate_per_h": 3.6e9, "mean_on_s": 0.1, "mean_off_s": 1e7}
    resp = await client.post("/reset", json={"scenario": market_with(burst)}, headers=ANONYMOUS)
    body = await resp.json()
    assert (resp.status, body["code"]) == (503, "CAPACITY_REACHED")
    assert "--max-episode-jobs" in body["detail"]
    assert "has brought" in body["detail"]
    health = await (await client.get("/health")).json()
    assert (health["status"], health["environments"]) == ("healthy", 0)
    assert (await client.post("/reset", json={"seed": 1}, headers=ANONYMOUS)).status == 200


async def test_nodes_are_counted_before_any_is_built(aiohttp_client: MakeClient) -> None:
    """A million 64-GPU nodes (no job expected) took 903 MB and 9 s of CPU to build before
    any limit could look; an agentic scenario's million GPU nodes 19 s. Both are refused at
    admission, with the limit named, in milliseconds."""
    client = await serve(aiohttp_client)
    huge = scenarios.load("market").model_dump(mode="json")
    huge["pools"][0]["max_gpus"] = 64 * 10**6
    huge["nodes"] = {"groups": [{"pool": huge["pools"][0]["name"], "count": 10**6, "gpus": 64}]}
    agentic = scenarios.load("agentic-rl").model_dump(mode="json") | {"gpu_nodes": 10**6}
    for scenario in (huge, agentic):
        start = time.process_time()
        resp = await client.post("/reset", json={"scenario": scenario}, headers=ANONYMOUS)
        body = await resp.json()
        assert (resp.status, body["code"]) == (503, "CAPACITY_REACHED"), body
        assert "1,000,000 nodes" in body["detail"]
        assert "--max-episode-nodes" in body["detail"]
        assert time.process_time() - start < 1.0
    session = await client.post("/v1/sessions", json={"scenario": huge})
    assert (session.status, (await session.json())["code"]) == (503, "CAPACITY_REACHED")


def test_an_address_asking_faster_than_its_rate_is_told_when_to_come_back() -> None:
    """A bucket of `burst` requests per address, refilled at the rate: past it a request waits
    for its token; other addresses keep their own."""
    from twin.gateway.request_rate import RequestRate

    now = [0.0]
    rate = RequestRate(10.0, 20.0, "operator-token", lambda: now[0])
    assert [rate.take("a") for _ in range(20)] == [0.0] * 20
    assert rate.take("a") == pytest.approx(0.1)
    assert rate.take("b") == 0.0
    now[0] += 0.25  # two and a half tokens back
    assert [rate.take("a") for _ in range(2)] == [0.0, 0.0]
    assert rate.take("a") == pytest.approx(0.05)


async def test_requests_past_an_address_s_rate_are_refused_with_a_code_the_operator_s_never(
    aiohttp_client: MakeClient,
) -> None:
    client = await serve(aiohttp_client, max_requests_per_s=5)
    answers = [await client.get("/metadata", headers=ANONYMOUS) for _ in range(15)]
    limited = [a for a in answers if a.status == 429]
    assert len(limited) >= 4
    assert (await limited[0].json())["code"] == "RATE_LIMITED"
    assert int(limited[0].headers["Retry-After"]) >= 1
    assert all([(await client.get("/metadata")).status == 200 for _ in range(30)])


async def test_the_schema_and_the_tool_list_are_built_once(aiohttp_client: MakeClient) -> None:
    """They never change; rebuilt on every call (8-11 ms each), they let one address take the
    server's loop."""
    from twin.gateway.keys import CONTROL

    client = await serve(aiohttp_client)
    first = await (await client.get("/schema")).json()
    control = client.server.app[CONTROL]
    built = control.schema()
    assert await (await client.get("/schema")).json() == first
    assert control.schema() is built
    ask = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    tools = [(await (await client.post("/mcp", json=ask)).json())["result"] for _ in range(2)]
    assert tools[0] == tools[1]
    assert control.mcp_tools is not None
    assert tools[0]["tools"] == control.mcp_tools


async def test_a_session_s_burst_is_stopped_at_the_job_limit_as_it_comes(
    aiohttp_client: MakeClient,
) -> None:
    """A negotiation session plays on the server's loop: metered every slice of events, the
    burst its estimate missed ends the session with `work_limit`, and the server answers
    throughout."""
    client = await serve(aiohttp_client, max_episode_jobs=2_000)
    burst = {"process": "onoff", "on_rate_per_h": 3.6e9, "mean_on_s": 0.1, "mean_off_s": 1e7}
    created = await client.post("/v1/sessions", json={"scenario": market_with(burst)})
    assert created.status == 201, await created.text()
    url = f"/v1/sessions/{(await created.json())['session_id']}"
    for _ in range(200):
        assert (await client.get("/health")).status == 200
        state = await (await client.get(url)).json()
        if state["ended"]:
            break
        await asyncio.sleep(0.05)
    assert state["ended"] == "work_limit"
