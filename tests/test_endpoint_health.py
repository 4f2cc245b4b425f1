"""A model endpoint that fails fails fast: after a timeout or a refused connection the LLM agent
answers from its fallback at once for a back-off period, shared by every agent on the endpoint,
and a background probe brings the endpoint back; an ask's patience follows the model's measured
latency. Whatever the endpoint does (refuses, hangs, answers too slowly, answers garbage),
`twin play` on `market` ends within twice the built-in session's wall time."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from tests.fake_llm import REQUESTS, fake_llm_app
from tests.test_agents import request
from twin_agents.health import EndpointHealth
from twin_agents.llm import LLMPolicy
from twin_agents.policies import Stepper

MakeServer = Callable[..., Awaitable[TestServer]]


def test_each_failure_in_a_row_doubles_the_back_off_up_to_its_cap() -> None:
    health = EndpointHealth(backoff_s=5.0, max_backoff_s=12.0)
    periods = []
    for _ in range(4):
        before = time.monotonic()
        health.failed()
        periods.append(round(health.down_until - before))
    assert periods == [5, 10, 12, 12]
    assert not health.up()
    health.answered(0.5)
    assert health.up()
    assert health.failures == 0


def test_a_probe_s_answer_brings_the_endpoint_back_but_keeps_the_run_of_failures() -> None:
    health = EndpointHealth(backoff_s=0.0)
    health.failed()
    assert health.probe_due()
    health.answered(4.0, probe=True)
    assert health.up()
    assert health.failures == 1  # the next failure backs off longer
    assert not health.probe_due()


def test_patience_follows_the_measured_latency_within_bounds() -> None:
    health = EndpointHealth(first_ask_s=3.0)
    assert health.ask_timeout_s(60.0) == 3.0  # nothing measured yet
    for latency in [2.0] * 19 + [9.0]:
        health.answered(latency)
    assert health.ask_timeout_s(60.0) == 2 * 9.0 + 1  # the p95 of 20 answers is the slowest
    assert health.ask_timeout_s(10.0) == 10.0  # never past the caller's ceiling
    fast = EndpointHealth(first_ask_s=3.0)
    fast.answered(0.1)
    assert fast.ask_timeout_s(60.0) == 3.0  # never below the first ask's


async def test_a_hung_endpoint_costs_one_short_wait_then_the_fallback_answers_at_once() -> None:
    with hung_endpoint() as url:
        health = EndpointHealth(first_ask_s=0.5)
        policy = LLMPolicy(url, "m", Stepper(), tenant="beta", health=health)
        started = time.perf_counter()
        first = await policy.decide(request())
        waited = time.perf_counter() - started
        second = await policy.decide(request())
        both = time.perf_counter() - started
        await policy.close()
    assert 0.4 < waited < 1.5
    assert both - waited < 0.1  # down: no ask at all
    assert first.reason.startswith("fallback stepper: ")
    assert second.reason.startswith("fallback stepper: ")
    assert (policy.stats.late, policy.stats.endpoint_down) == (1, 1)


async def test_agents_on_one_endpoint_share_its_health_and_a_probe_brings_it_back(
    aiohttp_server: MakeServer,
) -> None:
    server = await aiohttp_server(fake_llm_app())
    url = str(server.make_url("/v1"))
    health = EndpointHealth(backoff_s=0.0)
    health.failed()  # found down by another agent on the same endpoint
    policy = LLMPolicy(url, "valid", Stepper(), tenant="beta", health=health)
    fallback = await policy.decide(request())  # down: falls back, and sends a probe
    assert fallback.reason.startswith("fallback stepper: ")
    assert health.probing is not None
    await health.probing
    turn = await policy.decide(request())  # the probe answered: the model decides again
    await policy.close()
    assert turn.reason == "fake reason"
    assert (policy.stats.probes, policy.stats.endpoint_down) == (1, 1)
    assert len(server.app[REQUESTS]) == 2  # the probe and the second turn


@pytest.fixture(scope="module")
def built_in_wall_s(tmp_path_factory: pytest.TempPathFactory) -> float:
    """`twin play` on market with built-in agents only: the reference wall time (the median of
    three runs, as the machine's speed drifts)."""
    out = tmp_path_factory.mktemp("built-in")
    agents = "research=negotiator,inference=negotiator,batch=fair_share"
    return statistics.median(play(None, agents, out=out) for _ in range(3))


@pytest.mark.parametrize("endpoint", ["refuses", "hangs", "too slow", "garbage"])
async def test_twin_play_ends_within_twice_the_built_in_session_whatever_the_endpoint_does(
    aiohttp_server: MakeServer, built_in_wall_s: float, endpoint: str, tmp_path: Path
) -> None:
    """However the endpoint fails during the session (started without the preflight, which
    refuses a dead or hung endpoint before it: `test_preflight.py`)."""
    fake = await aiohttp_server(fake_llm_app())
    extra: list[str] = ["--no-preflight"]
    with hung_endpoint() as hung:
        if endpoint == "refuses":
            url, model = "http://127.0.0.1:9/v1", "valid"
        elif endpoint == "hangs":
            url, model = hung, "valid"
        elif endpoint == "too slow":  # 5 s an answer against 2 s rounds
            url, model = str(fake.make_url("/v1")), "slow"
            extra += ["--round-timeout-ms", "2000"]
        else:
            url, model = str(fake.make_url("/v1")), "garbage"
        wall_s = await asyncio.to_thread(  # the fake endpoint keeps serving meanwhile
            play, url, "research=negotiator,inference=llm,batch=fair_share", "--llm-model",
            model, "--fallback", "fair_share", *extra, out=tmp_path)  # fmt: skip
    agents = json.loads((tmp_path / "agents.json").read_text())["agents"]
    assert agents["inference"]["end_reason"] == "horizon"
    assert agents["inference"]["llm"]["fallbacks"] > 0
    assert wall_s <= 2 * built_in_wall_s, (wall_s, built_in_wall_s)


def play(url: str | None, agents: str, *args: str, out: Path) -> float:
    """`twin play --scenario market` in a fresh process, as a user runs it; its wall seconds."""
    argv = [sys.executable, "-m", "twin", "play", "--scenario", "market", "--agents", agents,
            "--out", str(out), *args]  # fmt: skip
    if url is not None:
        argv += ["--llm-base-url", url]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
    wall_s = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-2000:]
    return wall_s


@contextlib.contextmanager
def hung_endpoint() -> Iterator[str]:
    """An endpoint that accepts connections and never answers: a listening socket nobody
    reads (the kernel completes the handshakes into its backlog)."""
    with socket.create_server(("127.0.0.1", 0), backlog=64) as sock:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
