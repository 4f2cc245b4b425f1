"""Hostile soak, resource consumption: what one client can make the server hold or do.

Three attacks on a real `twin serve`, each measured by what the server answered and what its
memory did (OWASP API4, unrestricted resource consumption):

- overrides: resets whose overrides raise an arrival rate 10^4-fold (each would grow a queue,
  and the server, by megabytes a step), with steps on the episodes a client does get;
- MCP concurrency: 200 `initialize`s of one tenant at once, with calls and deletes mixed in;
- queued steps: four addresses hold every shared environment, a heavy call running and a step
  queued on each of the others, and a newcomer asks for one.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from twin.bench.server import Served, twin_serve

FLOOD = "tenants.1.workloads.0.arrivals.mean_rate_per_h=100000"  # on `market`: ~400k jobs
HEAVY = "tenants.2.workloads.0.arrivals.rate_per_h=5000000"  # on `default`: runs to max_call_s
ATTACKERS = [f"127.0.0.{i}" for i in range(2, 6)]
NEWCOMER = "127.0.0.6"
SHARED_ENVS = 56  # the default cap of 64 less the operator's eighth
INITIALIZES = 200


@dataclass
class Consumed:
    """What the three attacks got, and the server's memory around them."""

    statuses: Counter[str] = field(default_factory=Counter)  # "attack status" -> answers
    rss_before_kib: int = 0
    rss_after_kib: int = 0
    newcomer_s: float = 0.0
    newcomer_status: int = 0
    evicted_queued: int = 0

    @property
    def server_errors(self) -> int:
        statuses = ((key.rsplit(" ", 1)[1], n) for key, n in self.statuses.items())
        return sum(n for status, n in statuses if status.startswith("5") and status != "503")


async def _post(http: aiohttp.ClientSession, url: str, body: Any,
                headers: dict[str, str] | None = None) -> tuple[int, Any]:  # fmt: skip
    async with http.post(url, json=body, headers=headers or {}) as resp:
        text = await resp.text()
        try:
            return resp.status, await resp.json(content_type=None) if text else None
        except ValueError:
            return resp.status, text


async def _overrides(url: str, tally: Consumed, steps: int) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(20):
            status, _ = await _post(http, f"{url}/reset", {"overrides": [FLOOD]})
            tally.statuses[f"overrides {status}"] += 1
        status, body = await _post(http, f"{url}/reset", {"seed": 1})
        handle = body["metadata"]["handle"]
        for i in range(steps):
            status, body = await _post(http, f"{url}/step", {"handle": handle, "action": {}})
            if status != 200 or body.get("done"):
                flood = {"handle": handle, "overrides": [FLOOD]}
                refused, _ = await _post(http, f"{url}/reset", flood)
                tally.statuses[f"overrides {refused}"] += 1
                await _post(http, f"{url}/reset", {"handle": handle, "seed": i})


async def _mcp(served: Served, tally: Consumed) -> None:
    operator = {"Authorization": f"Bearer {served.token}"}
    hello = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "hostile", "version": "1"}}}  # fmt: skip
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:
        wanted = {"scenario": "market", "agents": ["research"], "start_timeout_s": 60}
        _, created = await _post(http, f"{served.url}/v1/sessions", wanted, operator)
        token = created["tokens"]["research"]
        url = f"{served.url}/v1/sessions/{created['session_id']}/mcp"
        auth = {"Authorization": f"Bearer {token}"}

        async def initialize() -> tuple[int, str | None]:
            async with http.post(url, json=hello, headers=auth) as resp:
                await resp.read()
                return resp.status, resp.headers.get("Mcp-Session-Id")

        answers = await asyncio.gather(*(initialize() for _ in range(INITIALIZES)))
        ids = [i for status, i in answers if status == 200 and i]
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}

        async def call(mcp_id: str, delete: bool) -> int:
            headers = {**auth, "Mcp-Session-Id": mcp_id}
            method = http.delete(url, headers=headers) if delete else http.post(
                url, json=ping, headers=headers)  # fmt: skip
            async with method as resp:
                await resp.read()
                return resp.status

        mixed = await asyncio.gather(
            *(initialize() for _ in range(20)),
            *(call(i, d % 3 == 0) for d, i in enumerate(ids[:60])),
        )
        for answer in (*answers, *mixed):
            status = answer[0] if isinstance(answer, tuple) else answer
            tally.statuses[f"mcp {status}"] += 1
        await http.delete(f"{served.url}/v1/sessions/{created['session_id']}", headers=operator)


def _from(address: str) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(address, 0), limit=0))


async def _queued(url: str, tally: Consumed) -> None:
    anonymous = {"Authorization": "Bearer not-a-token"}
    sessions = {a: _from(a) for a in ATTACKERS}
    calls: list[asyncio.Task[tuple[int, Any]]] = []
    try:
        held: dict[str, list[str]] = {a: [] for a in ATTACKERS}
        for i in range(SHARED_ENVS):
            address = ATTACKERS[i % len(ATTACKERS)]
            status, body = await _post(sessions[address], f"{url}/reset", {}, anonymous)
            tally.statuses[f"queued-steps {status}"] += 1
            if status == 200:
                held[address].append(body["metadata"]["handle"])
        for address, handles in held.items():
            first, *rest = handles
            heavy = {"handle": first, "seed": 1, "overrides": [HEAVY]}
            calls.append(asyncio.create_task(
                _post(sessions[address], f"{url}/reset", heavy, anonymous)))  # fmt: skip
            await asyncio.sleep(0.02)
            calls += [asyncio.create_task(_post(sessions[address], f"{url}/step",
                                                {"handle": h, "action": {}}, anonymous))
                      for h in rest]  # fmt: skip
        await asyncio.sleep(0.3)
        start = time.perf_counter()
        async with _from(NEWCOMER) as newcomer:
            tally.newcomer_status, _ = await _post(newcomer, f"{url}/reset", {}, anonymous)
        tally.newcomer_s = time.perf_counter() - start
        for status, body in await asyncio.gather(*calls):
            tally.statuses[f"queued-steps {status}"] += 1
            detail = body.get("detail", "") if isinstance(body, dict) else ""
            tally.evicted_queued += status == 409 and "waited its turn" in detail
    finally:
        for task in calls:
            task.cancel()
        for http in sessions.values():
            await http.close()


def consume(quick: bool) -> Consumed:
    """The three attacks, each on a fresh server (the queued steps on one that admits the heavy
    calls they need), and the memory of the first two's server before and after them (after
    the same once as a warm-up)."""
    tally = Consumed()
    with twin_serve("--scenario", "market", "--max-sessions", "4") as served:
        time.sleep(0.5)
        warm = Consumed()  # the same once: caches, first episodes, the MCP SDK imported
        asyncio.run(_overrides(served.url, warm, 50))
        asyncio.run(_mcp(served, warm))
        tally.rss_before_kib = served.rss_kib()
        asyncio.run(_overrides(served.url, tally, 200 if quick else 1000))
        asyncio.run(_mcp(served, tally))
        tally.rss_after_kib = served.rss_kib()
    with twin_serve("--max-episode-jobs", str(10**9), "--max-client-jobs", str(10**12)) as served:
        asyncio.run(_queued(served.url, tally))
    return tally
