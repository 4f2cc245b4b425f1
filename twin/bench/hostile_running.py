"""Hostile soak, limits while work runs: the attacks that defeated admission estimates, from
eight addresses at once, beside an honest negotiation session on the same real `twin serve`.

Each attacker loops on one attack for the whole window: (1) resets of an on/off process that
almost never brings a job; (2) resets of a burst its long-run mean hides; (3) an episode of 64
tenants stepped as fast as it answers; (4) a million-node cluster; (5) `/schema` and MCP's
`tools/list` as fast as they answer; (6) scenarios with numbers past what arithmetic holds, on
`/reset` and `/ws`; (7) forecasts asked back to back by an agent of a session of its own;
(8) `Expect` headers and websocket handshakes the server cannot take. An honest session (eight
agents) plays the same number of rounds quiet and then under the attacks. Reported: its round
p99 both ways, the answers each attack got (no 500 may come), the server's RSS before, while
attacked and once the attackers have left, and how long SIGTERM takes to end it.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import signal
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from twin.bench.gateway import Tally as Rounds
from twin.bench.gateway import _agent, scenario
from twin.bench.server import Served, free_port, start_serve
from twin.gateway.tokens import new_token
from twin.schema.wire import SCHEMA_VERSION
from twin.sim import scenarios

ATTACKERS = [f"127.0.0.{i}" for i in range(2, 10)]
HONEST_AGENTS = 8
ANONYMOUS = {"Authorization": "Bearer not-a-token"}
P99_RATIO_TARGET = 2.0
RSS_AFTER_TARGET = 0.20
SIGTERM_TARGET_S = 5.0


def _market(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    raw = copy.deepcopy(scenarios.load("market").model_dump(mode="json"))
    change(raw)
    return raw


def _arrivals(process: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    def change(raw: dict[str, Any]) -> None:
        raw["tenants"][2]["workloads"][0]["arrivals"] = process

    return change


def _many_tenants(raw: dict[str, Any]) -> None:
    idle = raw["tenants"][0]
    raw["tenants"] = [dict(idle, name=f"t{i}", workloads=[], initial_gpus={}) for i in range(64)]
    raw["horizon_s"] = 10**8


def _huge(raw: dict[str, Any]) -> None:
    raw["pools"][0]["max_gpus"] = 64 * 10**6
    raw["nodes"] = {"groups": [{"pool": raw["pools"][0]["name"], "count": 10**6, "gpus": 64}]}


SPINNING = _market(_arrivals({"process": "onoff", "on_rate_per_h": 1e-300, "mean_on_s": 1,
                              "mean_off_s": 1}))  # fmt: skip
BURST = _market(_arrivals({"process": "onoff", "on_rate_per_h": 3.6e9, "mean_on_s": 0.1,
                           "mean_off_s": 1e7}))  # fmt: skip
OUT_OF_RANGE = ['{"scenario": "family:market/' + "7" * 5000 + '"}',
                '{"overrides": ["horizon_s=1e308"]}',
                '{"overrides": ["pools.0.price_usd_per_gpu_h=1e308"]}',
                '{"overrides": ["scheduler.cycle_s=5e-324"]}']  # fmt: skip


@dataclass
class Attacked:
    """What the attacks got, what the honest session saw, and what the server did."""

    answers: Counter[str] = field(default_factory=Counter)  # "attack status" -> answers
    quiet_p99_ms: float = 0.0
    attacked_p99_ms: float = 0.0
    rss_start_kib: int = 0
    rss_peak_kib: int = 0
    rss_after_kib: int = 0
    sigterm_s: float = 0.0
    tracebacks: int = 0

    @property
    def server_errors(self) -> int:
        return sum(n for k, n in self.answers.items() if k.rsplit(" ", 1)[1] == "500")


def _from(address: str) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(address, 0), limit=0),
                                 timeout=aiohttp.ClientTimeout(total=60))  # fmt: skip


async def _post(http: aiohttp.ClientSession, url: str, data: str, tally: Attacked, attack: str,
                *, headers: dict[str, str] | None = None) -> Any:  # fmt: skip
    async with http.post(url, data=data, headers={**ANONYMOUS, "Content-Type": "application/json",
                                                  **(headers or {})}) as resp:  # fmt: skip
        tally.answers[f"{attack} {resp.status}"] += 1
        return await resp.json(content_type=None) if resp.status == 200 else None


def _resets(body: dict[str, Any], attack: str) -> Callable[..., Awaitable[None]]:
    data = json.dumps(body)

    async def attack_loop(http: aiohttp.ClientSession, served: Served, tally: Attacked) -> None:
        await _post(http, f"{served.url}/reset", data, tally, attack)

    return attack_loop


async def _stepping(http: aiohttp.ClientSession, served: Served, tally: Attacked,
                    state: dict[str, Any]) -> None:  # fmt: skip
    if "handle" not in state:
        body = await _post(
            http,
            f"{served.url}/reset",
            json.dumps({"scenario": _market(_many_tenants)}),
            tally,
            "64-tenants",
        )
        if body is None:
            return
        state["handle"] = body["metadata"]["handle"]
    step = json.dumps({"handle": state["handle"], "action": {}})
    await _post(http, f"{served.url}/step", step, tally, "64-tenants")


async def _saturate(http: aiohttp.ClientSession, served: Served, tally: Attacked) -> None:
    async with http.get(f"{served.url}/schema", headers=ANONYMOUS) as resp:
        tally.answers[f"schema {resp.status}"] += 1
    ask = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    await _post(http, f"{served.url}/mcp", ask, tally, "tools-list")


async def _out_of_range(http: aiohttp.ClientSession, served: Served, tally: Attacked,
                        state: dict[str, Any]) -> None:  # fmt: skip
    n = state["n"] = state.get("n", -1) + 1
    body = OUT_OF_RANGE[n % len(OUT_OF_RANGE)]
    if n % 2:
        await _post(http, f"{served.url}/reset", body, tally, "out-of-range")
        return
    async with http.ws_connect(f"{served.url}/ws", headers=ANONYMOUS) as ws:
        await ws.send_str('{"type": "reset", "data": ' + body + "}")
        frame = await ws.receive(timeout=30)
        kind = json.loads(frame.data)["type"] if frame.type == aiohttp.WSMsgType.TEXT else "dropped"
        tally.answers[f"out-of-range-ws {kind}"] += 1


async def _wire(http: aiohttp.ClientSession, served: Served, tally: Attacked) -> None:
    await _post(http, f"{served.url}/reset", "{}", tally, "expect", headers={"Expect": "magic"})
    async with http.get(f"{served.url}/ws", headers={
            "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "not-a-key"}) as resp:  # fmt: skip
        tally.answers[f"handshake {resp.status}"] += 1


async def _forecasts(http: aiohttp.ClientSession, served: Served, tally: Attacked,
                     until: float) -> None:  # fmt: skip
    """An agent of a session of its own (the operator made it) asking back to back."""
    operator = {"Authorization": f"Bearer {served.token}"}
    async with http.post(f"{served.url}/v1/sessions", headers=operator,
                         json={"scenario": "market", "agents": ["research"],
                               "round_timeout_ms": 60_000}) as resp:  # fmt: skip
        created = await resp.json()
    if "session_id" not in created:
        tally.answers[f"forecast-session {resp.status} {created.get('code')}"] += 1
        return
    hello = {
        "type": "hello",
        "schema_version": SCHEMA_VERSION,
        "tenant": "research",
        "session_id": created["session_id"],
        "token": created["tokens"]["research"],
    }
    async with http.ws_connect(f"{served.url}/v1/agents") as ws:
        await ws.send_str(json.dumps(hello))
        while time.perf_counter() < until:
            await ws.send_str(json.dumps({"type": "ask_forecast"}))
            while True:
                frame = json.loads((await ws.receive(timeout=60)).data)
                if frame["type"] in {"forecast", "error"}:
                    tally.answers[f"forecast {frame.get('code', 'answered')}"] += 1
                    break


async def _attack(address: str, served: Served, tally: Attacked, until: float,
                  one: Callable[..., Awaitable[None]], *,
                  stateful: bool = False) -> None:  # fmt: skip
    state: dict[str, Any] = {}
    async with _from(address) as http:
        while time.perf_counter() < until:
            try:
                await (one(http, served, tally, state) if stateful else one(http, served, tally))
            except (TimeoutError, aiohttp.ClientError) as exc:
                tally.answers[f"{one.__name__} {type(exc).__name__}"] += 1
                await asyncio.sleep(0.05)


async def _honest(served: Served, rounds: int) -> list[float]:
    """An honest session's round latencies (ms): eight agents answering every round."""
    url, tally = served.url, Rounds()
    async with _from("127.0.0.1") as http:
        async with http.post(f"{url}/v1/sessions",
                             headers={"Authorization": f"Bearer {served.token}"},
                             json={"scenario": scenario(HONEST_AGENTS, rounds),
                                   "agents": [f"t{i:02d}" for i in range(HONEST_AGENTS)],
                                   "round_timeout_ms": 5000}) as resp:  # fmt: skip
            created = await resp.json()
        hellos = [{"session_id": created["session_id"], "tenant": t, "token": k}
                  for t, k in created["tokens"].items()]  # fmt: skip
        await asyncio.gather(*(_agent(http, url, hello, tally) for hello in hellos))
    return [(end - begin) * 1000 for begin, end in tally.rounds.values() if end]


async def _under_attack(served: Served, tally: Attacked, rounds: int, window_s: float) -> None:
    until = time.perf_counter() + window_s
    spin = _resets({"scenario": SPINNING}, "spin")
    burst = _resets({"scenario": BURST}, "burst")
    nodes = _resets({"scenario": _market(_huge)}, "nodes")
    attacks = [
        _attack(ATTACKERS[0], served, tally, until, spin),
        _attack(ATTACKERS[1], served, tally, until, burst),
        _attack(ATTACKERS[2], served, tally, until, _stepping, stateful=True),
        _attack(ATTACKERS[3], served, tally, until, nodes),
        _attack(ATTACKERS[4], served, tally, until, _saturate),
        _attack(ATTACKERS[5], served, tally, until, _out_of_range, stateful=True),
        _forecast_attack(ATTACKERS[6], served, tally, until),
        _attack(ATTACKERS[7], served, tally, until, _wire),
    ]
    running = [asyncio.create_task(a) for a in attacks]
    await asyncio.sleep(1.0)  # the attacks under way before the honest session starts
    tally.rss_peak_kib = served.rss_kib()
    latencies = await _honest(served, rounds)
    tally.attacked_p99_ms = float(np.percentile(latencies, 99))
    tally.rss_peak_kib = max(tally.rss_peak_kib, served.rss_kib())
    await asyncio.gather(*running)


async def _forecast_attack(address: str, served: Served, tally: Attacked, until: float) -> None:
    async with _from(address) as http:
        try:
            await _forecasts(http, served, tally, until)
        except (TimeoutError, aiohttp.ClientError) as exc:
            tally.answers[f"forecast {type(exc).__name__}"] += 1


def attacked(quick: bool) -> Attacked:
    """The honest session quiet, then beside the eight attacks, on one fresh server; its RSS
    once they have left; SIGTERM's time to end it."""
    tally, rounds = Attacked(), 150 if quick else 400
    port, token = free_port(), new_token()
    with tempfile.TemporaryDirectory() as tmp:
        proc = start_serve(port, token, Path(tmp) / "serve.log", "--max-sessions", "8")
        served = Served(f"http://127.0.0.1:{port}", proc.pid, Path(tmp) / "serve.log", token)
        try:
            asyncio.run(_honest(served, 20))  # a warm-up: first sessions, caches
            tally.rss_start_kib = served.rss_kib()
            tally.quiet_p99_ms = float(np.percentile(asyncio.run(_honest(served, rounds)), 99))
            asyncio.run(_under_attack(served, tally, rounds, 15.0 if quick else 40.0))
            time.sleep(2.0)  # the attackers' episodes reaped as they go idle, or held
            tally.rss_after_kib = served.rss_kib()
            tally.tracebacks = served.output.read_text(errors="replace").count("Traceback")
        finally:
            start = time.perf_counter()
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            finally:
                tally.sigterm_s = time.perf_counter() - start
                if proc.poll() is None:
                    proc.kill()
    return tally
