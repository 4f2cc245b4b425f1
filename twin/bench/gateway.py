"""Gateway throughput: 64 agents on loopback, messages per second and decision-round latency.

`twin serve` runs in its own process (one core); 64 real websocket agents in this one answer
every round with one proposal. A round's latency runs from the first agent receiving its
request to the last agent receiving its commit.
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np

from twin.bench.harness import Result
from twin.bench.server import Served, twin_serve
from twin.schema.wire import SCHEMA_VERSION

AGENTS = 64
TARGET_MSGS_PER_S = 20_000
TARGET_P99_MS = 10.0


def scenario(agents: int, rounds: int) -> dict[str, Any]:
    return {
        "kind": "cluster",
        "name": "gateway-bench",
        "horizon_s": 60.0 * (rounds + 1) - 1,
        "pools": [
            {"name": "gpu", "gpu_type": "h100", "max_gpus": 4 * agents, "price_usd_per_gpu_h": 4.0}
        ],
        "tenants": [{"name": f"t{i:02d}", "policy": "static"} for i in range(agents)],
        "decisions": {"interval_s": 60.0, "triggers": []},
    }


@dataclass
class Tally:
    """What the agents saw: frames sent and received, and each round's first and last moment."""

    sent: int = 0
    received: int = 0
    rounds: dict[int, list[float]] = field(default_factory=dict)


async def _agent(
    session: aiohttp.ClientSession, url: str, hello: dict[str, str], tally: Tally
) -> None:
    async with session.ws_connect(f"{url}/v1/agents", max_msg_size=0) as ws:
        await ws.send_str(json.dumps({"type": "hello", "schema_version": SCHEMA_VERSION, **hello}))
        tally.sent += 1
        async for msg in ws:
            tally.received += 1
            frame = json.loads(msg.data)
            kind = frame["type"]
            if kind == "decision_requested":
                rnd = frame["round"]
                tally.rounds.setdefault(rnd, [time.perf_counter(), 0.0])
                answer = {
                    "type": "propose",
                    "round": rnd,
                    "seq": 1,
                    "provision": {"gpu": 1},
                    "final": True,
                }
                await ws.send_str(json.dumps(answer))
                tally.sent += 1
            elif kind == "round_committed":
                tally.rounds[frame["round"]][1] = time.perf_counter()
            elif kind == "session_ended":
                return


async def _drive(served: Served, agents: int, rounds: int) -> tuple[float, int, list[float]]:
    url = served.url
    async with aiohttp.ClientSession() as http:
        resp = await http.post(f"{url}/v1/sessions",
                               headers={"Authorization": f"Bearer {served.token}"},
                               json={"scenario": scenario(agents, rounds),
                                     "agents": [f"t{i:02d}" for i in range(agents)],
                                     "round_timeout_ms": 5000})  # fmt: skip
        created = await resp.json()
        tally = Tally()
        start = time.perf_counter()
        await asyncio.gather(
            *(
                _agent(
                    http, url, {"session_id": created["session_id"], "tenant": t, "token": k}, tally
                )
                for t, k in created["tokens"].items()
            )
        )
        wall_s = time.perf_counter() - start
    latencies = [(end - begin) * 1000 for begin, end in tally.rounds.values() if end]
    return wall_s, tally.sent + tally.received, latencies


def bench_gateway(quick: bool) -> Result:
    rounds = 50 if quick else 300
    with twin_serve("--max-sessions", "4") as served:
        # The agents share this process: keep what it has made so far out of the
        # collector's full passes, or their pauses would be measured as round latency.
        gc.collect()
        gc.freeze()
        wall_s, messages, latencies = asyncio.run(_drive(served, AGENTS, rounds))
        gc.unfreeze()
    rate = messages / wall_s
    p50, p99 = (float(np.percentile(latencies, q)) for q in (50, 99))
    r = Result()
    mean = statistics.fmean(latencies)
    r.lines += [
        f"gateway: {AGENTS} agents on loopback, {len(latencies)} lock-step rounds, "
        "server in its own process",
        f"  {messages:,} messages in {wall_s:.2f} s = {rate:,.0f} messages/s "
        f"(target {TARGET_MSGS_PER_S:,})",
        f"  decision round: p50 {p50:.2f} ms, p99 {p99:.2f} ms, mean {mean:.2f} ms "
        f"(target p99 <= {TARGET_P99_MS} ms)",
    ]
    r.figures = {
        "agents": AGENTS,
        "rounds": len(latencies),
        "messages_per_s": round(rate),
        "round_p50_ms": round(p50, 3),
        "round_p99_ms": round(p99, 3),
        "messages_per_s_vs_target": round(rate / TARGET_MSGS_PER_S, 2),
        "round_p99_vs_target": round(TARGET_P99_MS / p99, 2),
    }
    return r
