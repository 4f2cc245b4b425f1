"""The gateway's limits hold while the work runs, not only at admission: a real aiohttp server
on loopback, requests shaped to defeat the admission estimate."""

from __future__ import annotations

import asyncio
import gc
import time
import tracemalloc
from typing import Any

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
