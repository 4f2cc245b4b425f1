"""Hostile soak: 10^5 malformed frames and requests at every endpoint of a real `twin serve`;
then what one client can make a server hold (`hostile_resources`) and the attacks on limits
while work runs, beside an honest session (`hostile_running`).

Agents (each with a valid hello) and OpenEnv clients send websocket frames drawn from a seeded
corpus of broken input: not JSON, not objects, unknown types, wrong field types, out-of-round
messages, huge numbers, deep nesting, binary garbage, and every field of every message replaced
by a hostile value (`hostile_values`). HTTP clients post the same hostile values to `/reset`,
`/step`, `/mcp`, `/v1/sessions` and a tenant's MCP endpoint. Every frame must get a coded error
(or a normal answer: some hostile values are valid), every request an answer below 500; the
server's log must hold no traceback. Then, on the wire, what no client library sends: hostile
paths and header values, bodies cut short, unmasked frames, a crowd of idle sockets. The soak
runs once as a warm-up (caps filled, caches made), and the server's memory must grow by under
10% over the second run.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from twin.bench.harness import Result
from twin.bench.hostile_resources import consume
from twin.bench.hostile_running import (
    P99_RATIO_TARGET,
    RSS_AFTER_TARGET,
    SIGTERM_TARGET_S,
    attacked,
)
from twin.bench.hostile_values import Template, cases, send_raw, templates, wire_requests
from twin.bench.server import Served, twin_serve
from twin.schema.codes import ErrorCode
from twin.schema.wire import SCHEMA_VERSION

AGENTS = 16
ENVS = 16
POSTERS = 8  # HTTP clients
BATCH = 50  # frames in flight per connection before their answers are awaited
UNMASKED = 100  # websocket upgrades whose first frame is not masked
IDLE_SOCKETS = 300  # silent connections held open at once
RSS_GROWTH_TARGET = 0.10  # after the warm-up
UPGRADE = (
    b"GET %s HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)
CODES = {c.value for c in ErrorCode}


def corpus(rng: random.Random, n: int, path: str = "/ws") -> list[str | bytes]:
    """`n` hostile frames for the channel at `path`: broken frames, each of which the gateway
    must refuse with a code, and its messages with a field replaced by a hostile value."""
    valued = [c for t in templates("S", "t00", "x", "e") if t.endpoint == path for c in cases(t)]
    makers: list[Callable[[], str | bytes]] = [
        *[lambda: rng.choice(valued)] * 4,
        lambda: "{" * rng.randint(1, 50),
        lambda: rng.randbytes(rng.randint(1, 64)),
        lambda: orjson.dumps(rng.choice([[1, 2], "text", 7, None, 1e308])).decode(),
        lambda: orjson.dumps({"type": f"x{rng.randint(0, 99)}"}).decode(),
        lambda: orjson.dumps({"type": "propose", "round": "r", "seq": -1}).decode(),
        lambda: orjson.dumps({"type": "propose", "round": 10**9, "seq": 1}).decode(),
        lambda: '{"type": "accept_offer", "round": 1' + "0" * 40 + ', "seq": 1}',
        lambda: orjson.dumps({"type": "step", "data": {"provision": {"gpu": "many"}}}).decode(),
        lambda: orjson.dumps({"type": "reset", "data": {"overrides": 5, "seed": -3}}).decode(),
        lambda: '{"type": "state", "data": ' + "[" * 200 + "]" * 200 + "}",
        lambda: "\ud800".encode("utf-8", "surrogatepass").decode("latin-1"),
    ]
    return [rng.choice(makers)() for _ in range(n)]


SENTINEL = "hostile-sentinel"


@dataclass
class Tally:
    sent: int = 0
    codes: Counter[str] = field(default_factory=Counter)
    uncoded: int = 0
    dropped: int = 0
    server_errors: int = 0  # HTTP answers of 500 or more (503, a cap reached, excepted)


async def _connection(
    http: aiohttp.ClientSession, served: Served, hello: dict[str, Any] | None,
    frames: list[str | bytes], tally: Tally,
) -> None:  # fmt: skip
    path = "/v1/agents" if hello else "/ws"
    async with http.ws_connect(f"{served.url}{path}", max_msg_size=0) as ws:
        if hello:
            await ws.send_json(hello)
            await ws.receive(timeout=10)  # welcomed
        for start in range(0, len(frames), BATCH):
            batch = frames[start : start + BATCH]
            for frame in batch:
                await (ws.send_bytes(frame) if isinstance(frame, bytes) else ws.send_str(frame))
            await ws.send_str(orjson.dumps({"type": SENTINEL}).decode())
            tally.sent += len(batch)
            while True:  # every answer until the sentinel's (valid frames may get none)
                msg = await ws.receive(timeout=300)  # one address: its env calls queue
                if msg.type != aiohttp.WSMsgType.TEXT:
                    tally.dropped += 1
                    return
                if SENTINEL in msg.data:
                    break
                if "RATE_LIMITED" in msg.data:  # maybe the sentinel's: slow down, ask again
                    await asyncio.sleep(0.1)
                    await ws.send_str(orjson.dumps({"type": SENTINEL}).decode())
                reply = orjson.loads(msg.data)
                if reply.get("type") != "error":
                    continue  # a decision request, an observation: a frame that was valid
                code = reply.get("code") or reply.get("data", {}).get("code")
                tally.codes[code] += 1
                tally.uncoded += code not in CODES


async def _poster(http: aiohttp.ClientSession, served: Served, work: list[tuple[Template, str]],
                  headers: dict[str, str], tally: Tally) -> None:  # fmt: skip
    for template, body in work:
        async with http.post(f"{served.url}{template.endpoint}", data=body,
                             headers=headers) as resp:  # fmt: skip
            text = await resp.text()
            tally.sent += 1
            if resp.status >= 500 and resp.status != 503:
                tally.server_errors += 1
            elif resp.status >= 400 and resp.content_type == "application/json":
                code = orjson.loads(text).get("code")
                tally.codes[code] += 1
                tally.uncoded += code not in CODES


async def _soak(served: Served, frames: int, tally: Tally) -> None:
    rng = random.Random(7)
    tenants = [f"t{i:02d}" for i in range(AGENTS)]
    per = frames // (AGENTS + ENVS + POSTERS)
    operator = {"Authorization": f"Bearer {served.token}"}
    async with aiohttp.ClientSession() as http:
        resp = await http.post(
            f"{served.url}/v1/sessions", headers=operator,
            json={"scenario": _scenario(tenants), "agents": tenants, "round_timeout_ms": 60_000},
        )  # fmt: skip
        created = await resp.json()
        sid = created["session_id"]
        hellos: list[dict[str, Any] | None] = [
            {"type": "hello", "schema_version": SCHEMA_VERSION, "session_id": sid,
             "tenant": t, "token": created["tokens"][t]}
            for t in tenants
        ]  # fmt: skip
        hellos += [None] * ENVS
        posts = [(t, c) for t in templates(sid, "t00", created["tokens"]["t00"], "soak")
                 if t.via == "http" and "/mcp" not in t.endpoint[1:] for c in cases(t)]  # fmt: skip
        headers = {**operator, "Content-Type": "application/json"}
        await asyncio.gather(
            *(_connection(http, served, h, corpus(rng, per, "/v1/agents" if h else "/ws"), tally)
              for h in hellos),
            *(_poster(http, served, [rng.choice(posts) for _ in range(per)], headers, tally)
              for _ in range(POSTERS)),
        )  # fmt: skip
        await _on_the_wire(served, sid, created["tokens"]["t00"], tally)
        await http.delete(f"{served.url}/v1/sessions/{sid}", headers=operator)


async def _on_the_wire(served: Served, session_id: str, token: str, tally: Tally) -> None:
    """What no client library sends: hostile paths and header values, bodies cut short,
    unmasked frames, and a crowd of idle sockets (after which the server must still answer)."""
    host, port = served.url.removeprefix("http://").split(":")
    for raw in wire_requests(session_id, token):
        status = await send_raw(host, int(port), raw)
        tally.sent += 1
        tally.server_errors += status is not None and status >= 500 and status != 503
    for path in ("/ws", "/v1/agents") * (UNMASKED // 2):
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(UPGRADE % path.encode() + b"\x81\x02{}")  # the frame not masked
        await reader.read()  # the server closes the connection
        writer.close()
        tally.sent += 1
    idle = [await asyncio.open_connection(host, int(port)) for _ in range(IDLE_SOCKETS)]
    async with aiohttp.ClientSession() as http, http.get(f"{served.url}/health") as resp:
        tally.server_errors += resp.status != 200  # beside the idle crowd, still served
    for _, writer in idle:
        writer.close()
    tally.sent += IDLE_SOCKETS


def _scenario(tenants: list[str]) -> dict[str, Any]:
    return {
        "kind": "cluster",
        "name": "hostile",
        "horizon_s": 10**7,
        "pools": [{"name": "gpu", "gpu_type": "h100", "max_gpus": 64, "price_usd_per_gpu_h": 4.0}],
        "tenants": [{"name": t, "policy": "static"} for t in tenants],
        "decisions": {"interval_s": 3600, "triggers": []},
    }


def bench_hostile(quick: bool) -> Result:
    frames = 10_000 if quick else 100_000
    warm_up = frames  # the same soak once: caps filled, caches made, before memory is read
    # Every client here is one address, so one identity: it may hold the shared cap (at its
    # limit a client is refused another environment, never given up one of its own).
    with twin_serve("--max-sessions", "4", "--max-envs-per-client", "56") as served:
        time.sleep(0.5)
        rss_start = served.rss_kib()
        asyncio.run(_soak(served, warm_up, Tally()))  # caches, pools, first allocations
        rss_before, cpu_before = served.rss_kib(), served.cpu_s()
        start = time.perf_counter()
        tally = Tally()
        asyncio.run(_soak(served, frames, tally))
        wall_s = time.perf_counter() - start
        rss_after, cpu_s = served.rss_kib(), served.cpu_s() - cpu_before
        text = served.output.read_text(errors="replace")
    tracebacks = text.count("Traceback")
    growth = rss_after / rss_before - 1
    consumed = consume(quick)
    consumed_growth = consumed.rss_after_kib / consumed.rss_before_kib - 1
    running = attacked(quick)
    p99_ratio = running.attacked_p99_ms / running.quiet_p99_ms
    running_growth = running.rss_after_kib / running.rss_start_kib - 1
    r = Result()
    by_code = ", ".join(f"{c} {n:,}" for c, n in tally.codes.most_common())
    r.lines += [
        f"hostile: {tally.sent:,} malformed frames and requests from {AGENTS} agents, {ENVS} "
        f"OpenEnv sockets and {POSTERS} HTTP clients, then on the wire: hostile paths and header "
        f"values, bodies cut short, {UNMASKED} unmasked frames, {IDLE_SOCKETS} idle sockets",
        f"  {sum(tally.codes.values()):,} coded errors ({by_code}); uncoded {tally.uncoded}",
        f"  tracebacks {tracebacks}, dropped connections {tally.dropped}, "
        f"HTTP server errors {tally.server_errors}",
        f"  server RSS {rss_start / 1024:.1f} MiB at start, {rss_before / 1024:.1f} after a "
        f"warm-up of {warm_up:,}, {rss_after / 1024:.1f} after the soak: growth {growth:+.1%} "
        f"(target under {RSS_GROWTH_TARGET:.0%})",
        f"  {tally.sent / cpu_s:,.0f} frames per server CPU-second; {wall_s:.1f} s wall",
        "hostile, resource consumption (fresh servers): flooding overrides, 200 concurrent MCP "
        "initializes of one tenant, four addresses pinning every environment with queued steps",
        "  answers: " + ", ".join(f"{k} x{n:,}" for k, n in sorted(consumed.statuses.items())),
        f"  HTTP server errors {consumed.server_errors}; server RSS "
        f"{consumed.rss_before_kib / 1024:.1f} MiB before the overrides and MCP, "
        f"{consumed.rss_after_kib / 1024:.1f} after ({consumed_growth:+.1%})",
        f"  a newcomer beside pinned environments: {consumed.newcomer_status} in "
        f"{consumed.newcomer_s * 1000:.0f} ms; queued steps answered with their eviction: "
        f"{consumed.evicted_queued}",
        "hostile, limits while work runs (one fresh server): eight attacks at once from eight "
        "addresses (a reset that spins, a burst past the estimate, 64 tenants stepped, a million "
        "nodes, /schema and tools/list, numbers out of range, forecasts, bad Expect and "
        "handshakes) beside an honest session of 8 agents",
        "  answers: " + ", ".join(f"{k} x{n:,}" for k, n in sorted(running.answers.items())),
        f"  honest round p99 {running.quiet_p99_ms:.1f} ms quiet, {running.attacked_p99_ms:.1f} "
        f"ms attacked: x{p99_ratio:.1f} (target under x{P99_RATIO_TARGET:g}); HTTP server "
        f"errors {running.server_errors}, tracebacks {running.tracebacks}",
        f"  server RSS {running.rss_start_kib / 1024:.1f} MiB before, "
        f"{running.rss_peak_kib / 1024:.1f} attacked, {running.rss_after_kib / 1024:.1f} once "
        f"they left ({running_growth:+.1%}, target within {RSS_AFTER_TARGET:.0%}); SIGTERM "
        f"ended it in {running.sigterm_s:.1f} s (target under {SIGTERM_TARGET_S:g} s)",
    ]
    r.figures = {
        "frames": tally.sent,
        "coded_errors": sum(tally.codes.values()),
        "uncoded": tally.uncoded,
        "tracebacks": tracebacks,
        "dropped_connections": tally.dropped,
        "http_server_errors": tally.server_errors,
        "rss_start_mib": round(rss_start / 1024, 1),
        "rss_before_mib": round(rss_before / 1024, 1),
        "rss_after_mib": round(rss_after / 1024, 1),
        "rss_growth": round(growth, 3),
        "frames_per_server_cpu_s": round(tally.sent / cpu_s),
        "wall_s": round(wall_s, 2),
        "consumption_server_errors": consumed.server_errors,
        "consumption_overrides_refused": consumed.statuses["overrides 503"],
        "consumption_mcp_500s": consumed.statuses["mcp 500"],
        "consumption_rss_before_mib": round(consumed.rss_before_kib / 1024, 1),
        "consumption_rss_after_mib": round(consumed.rss_after_kib / 1024, 1),
        "consumption_rss_growth": round(consumed_growth, 3),
        "consumption_newcomer_status": consumed.newcomer_status,
        "consumption_newcomer_ms": round(consumed.newcomer_s * 1000),
        "consumption_queued_evicted": consumed.evicted_queued,
        "running_server_errors": running.server_errors,
        "running_tracebacks": running.tracebacks,
        "running_quiet_p99_ms": round(running.quiet_p99_ms, 2),
        "running_attacked_p99_ms": round(running.attacked_p99_ms, 2),
        "running_p99_ratio": round(p99_ratio, 2),
        "running_rss_start_mib": round(running.rss_start_kib / 1024, 1),
        "running_rss_peak_mib": round(running.rss_peak_kib / 1024, 1),
        "running_rss_after_mib": round(running.rss_after_kib / 1024, 1),
        "running_sigterm_s": round(running.sigterm_s, 2),
    }
    return r
