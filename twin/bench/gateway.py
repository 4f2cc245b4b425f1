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
    rounds: dict[tuple[str, int], list[float]] = field(default_factory=dict)


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
                tally.rounds.setdefault((hello["session_id"], rnd), [time.perf_counter(), 0.0])
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
                tally.rounds[hello["session_id"], frame["round"]][1] = time.perf_counter()
            elif kind == "session_ended":
                return


async def _drive(
    served: Served, agents: int, rounds: int, sessions: int = 1
) -> tuple[float, int, list[float]]:
    """Open `sessions` sessions of `agents` agents each and play them to their end together."""
    url, tally = served.url, Tally()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        hellos = []
        for _ in range(sessions):
            resp = await http.post(f"{url}/v1/sessions",
                                   headers={"Authorization": f"Bearer {served.token}"},
                                   json={"scenario": scenario(agents, rounds),
                                         "agents": [f"t{i:02d}" for i in range(agents)],
                                         "round_timeout_ms": 5000})  # fmt: skip
            created = await resp.json()
            hellos += [
                {"session_id": created["session_id"], "tenant": t, "token": k}
                for t, k in created["tokens"].items()
            ]
        start = time.perf_counter()
        await asyncio.gather(*(_agent(http, url, hello, tally) for hello in hellos))
        wall_s = time.perf_counter() - start
    latencies = [(end - begin) * 1000 for begin, end in tally.rounds.values() if end]
    return wall_s, tally.sent + tally.received, latencies


def _measure(agents: int, rounds: int, sessions: int) -> tuple[float, float, float, float]:
    """Messages/s, round p50 and p99 ms, and the server's CPU seconds for one configuration."""
    with twin_serve("--max-sessions", "4", "--max-tenants", str(max(agents, 64))) as served:
        # The agents share this process: keep what it has made so far out of the
        # collector's full passes, or their pauses would be measured as round latency.
        gc.collect()
        gc.freeze()
        cpu_before = served.cpu_s()
        wall_s, messages, latencies = asyncio.run(_drive(served, agents, rounds, sessions))
        cpu_s = served.cpu_s() - cpu_before
        gc.unfreeze()
    p50, p99 = (float(np.percentile(latencies, q)) for q in (50, 99))
    return messages / wall_s, p50, p99, cpu_s / wall_s


RUNS = 5
"""The 64-agent figures are measured this many times (each on a fresh server): one run's p99 is
its three slowest rounds, so a single run says little about the tail."""


def bench_gateway(quick: bool) -> Result:
    rounds = 50 if quick else 300
    runs = [_measure(AGENTS, rounds, 1) for _ in range(2 if quick else RUNS)]
    rates = [run[0] for run in runs]
    p99s = [run[2] for run in runs]
    rate, p50, p99, busy = (statistics.median(run[i] for run in runs) for i in range(4))
    met = sum(1 for run in runs if run[0] >= TARGET_MSGS_PER_S and run[2] <= TARGET_P99_MS)
    r = Result()
    r.lines += [
        f"gateway: {AGENTS} agents on loopback, {rounds} lock-step rounds, "
        f"server in its own process; {len(runs)} runs, each on a fresh server (median; range)",
        f"  {rate:,.0f} messages/s ({min(rates):,.0f}-{max(rates):,.0f}; target "
        f"{TARGET_MSGS_PER_S:,}); server CPU {busy:.0%} busy",
        f"  decision round: p50 {p50:.2f} ms, p99 {p99:.2f} ms (each run: "
        + ", ".join(f"{x:.1f}" for x in p99s)
        + f"; target p99 <= {TARGET_P99_MS} ms)",
        f"  runs meeting both targets: {met} of {len(runs)}",
    ]
    r.figures = {
        "agents": AGENTS,
        "rounds": rounds,
        "runs": len(runs),
        "messages_per_s": round(rate),
        "messages_per_s_min": round(min(rates)),
        "round_p50_ms": round(p50, 3),
        "round_p99_ms": round(p99, 3),
        "round_p99_ms_max": round(max(p99s), 3),
        "runs_meeting_targets": met,
        "server_cpu_busy": round(busy, 2),
        "messages_per_s_vs_target": round(rate / TARGET_MSGS_PER_S, 2),
        "round_p99_vs_target": round(TARGET_P99_MS / p99, 2),
    }
    for key, agents, sessions in (("agents_256", 256, 1), ("sessions_2x64", AGENTS, 2)):
        rate, p50, p99, busy = _measure(agents, rounds // 3, sessions)
        r.lines.append(
            f"  {sessions} x {agents} agents: {rate:,.0f} messages/s, round p50 {p50:.2f} ms, "
            f"p99 {p99:.2f} ms, server CPU {busy:.0%} busy"
        )
        r.figures |= {f"{key}_messages_per_s": round(rate), f"{key}_round_p50_ms": round(p50, 3),
                      f"{key}_round_p99_ms": round(p99, 3)}  # fmt: skip
    return r
