"""Tenants on a real trace against its plain replay: openb's busiest day on its calibrated nodes.

The same 24-hour window of openb (678 pods) is played three ways: the plain replay, the tenant
scenario with passive tenants (the same jobs at the same times), and four built-in negotiators
over the real gateway on loopback, as `twin play` runs them (aiohttp server, websocket clients,
a round every hour as the built-in decides, beside its cloud pool, until the day's pods are
done). Wall clock beside CPU time, medians; the target is the negotiated day in at most three
times the plain replay's wall time.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

from twin.bench.harness import Result
from twin.bench.replay import project_traces
from twin.schema.scenario import ClusterScenario

TARGET_RATIO = 3.0
START_H, END_H = 3552.0, 3576.0  # openb's busiest day (day 148 of the trace)


def _timed(fn: Any, repeats: int) -> tuple[float, float]:
    """Median wall and CPU seconds of `fn()` over `repeats` runs, after a warm-up."""
    fn()
    walls, cpus = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus)


def day_scenario() -> ClusterScenario:
    """`openb-tenants` cut to the day (the same trace window as the replay's)."""
    from twin.sim import scenarios

    day = [f"trace.start_h={START_H}", f"trace.end_h={END_H}"]
    return scenarios.as_cluster(scenarios.load("openb-tenants", day))


async def negotiate(scenario: ClusterScenario) -> int:
    """Play `scenario` with every tenant a built-in negotiator over a loopback gateway; the
    number of rounds."""
    from aiohttp import web

    from twin.gateway.app import create_app
    from twin.gateway.config import GatewayConfig, SessionRequest
    from twin.gateway.keys import REGISTRY
    from twin_agents.client import AgentClient
    from twin_agents.registry import builtin

    tenants = [t.name for t in scenario.tenants]
    app = create_app(GatewayConfig(round_timeout_ms=30_000))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    request = SessionRequest(scenario=scenario.model_dump(mode="json"), agents=tenants)
    session = app[REGISTRY].create(request)
    url = f"ws://{host}:{port}/v1/agents"
    clients = [
        AgentClient(url, session.id, t, session.tokens[t], builtin("negotiator", tenants, t))
        for t in tenants
    ]
    await asyncio.gather(*(c.run() for c in clients))
    rounds = session.rounds
    await runner.cleanup()
    return int(rounds)


def bench_tenants(quick: bool) -> Result:
    from twin.logs import configure_logging
    from twin.replay.params import read_params
    from twin.replay.run import ReplayOptions, replay
    from twin.replay.window import Window
    from twin.sim.runner import run_episode

    openb = project_traces() / "alibaba-gpu-v2023-openb"
    r = Result()
    if not openb.is_dir():
        r.lines.append("tenants: skipped (no shipped traces: is $TWIN_TRACES right?)")
        return r
    repeats = 3 if quick else 5
    configure_logging("warning")  # the gateway's connection lines are not figures
    options = ReplayOptions(
        cluster=openb / "openb_node_list_gpu_node.csv",
        params=read_params(openb / "calibrated-params-ten-nodes.json"),
        window=Window(START_H * 3600, END_H * 3600),
    )
    pods = openb / "openb_pod_list_default.csv"
    scenario = day_scenario()
    rounds = asyncio.run(negotiate(scenario))
    figures = {
        "replay": _timed(lambda: replay(Path(pods), options), repeats),
        "passive": _timed(lambda: run_episode(scenario, policy="static"), repeats),
        "negotiated": _timed(lambda: asyncio.run(negotiate(scenario)), repeats),
    }
    r.lines.append(
        f"tenants: openb hours {START_H:g}-{END_H:g} on its calibrated nodes; medians of {repeats}"
    )
    base_wall = figures["replay"][0]
    for name, (wall, cpu) in figures.items():
        r.lines.append(f"  {name:>10}: {wall * 1000:7.1f} ms wall, {cpu * 1000:7.1f} ms CPU, "
                       f"{wall / base_wall:4.2f}x the replay's wall")  # fmt: skip
        r.figures[f"{name}_wall_ms"] = round(wall * 1000, 1)
        r.figures[f"{name}_cpu_ms"] = round(cpu * 1000, 1)
    ratio = figures["negotiated"][0] / base_wall
    r.figures["negotiated_rounds"] = rounds
    r.figures["negotiated_vs_replay"] = round(ratio, 2)
    r.figures["negotiated_vs_target"] = round(TARGET_RATIO / ratio, 2)
    r.lines.append(f"  four negotiators, {rounds} rounds; target: <= {TARGET_RATIO:g}x the replay")
    return r
