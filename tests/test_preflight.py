"""LLM runs that speak up: a model endpoint is checked before a session relies on it (a real
aiohttp server on loopback stands in for the model server here; the SmolLM2 server is checked in
`test_llm_live.py`), and `twin play` says how many decisions the model answered."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from twin_agents.preflight import PreflightError, preflight

MakeServer = Callable[..., Awaitable[TestServer]]
DEAD = "http://127.0.0.1:9/v1"


def model_server(listed: list[str] | None, serves: set[str] | None) -> web.Application:
    """An OpenAI-compatible stand-in: `/models` lists `listed` (none: 404), and a completion
    answers for a model in `serves` (None: any name, as llama.cpp's server does)."""

    async def models(request: web.Request) -> web.Response:
        if listed is None:
            return web.Response(status=404)
        return web.json_response({"data": [{"id": m} for m in listed]})

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        assert body["max_tokens"] == 32
        assert sum(len(m["content"]) for m in body["messages"]) > 2000  # a turn-sized prompt
        if serves is not None and body["model"] not in serves:
            return web.json_response({"error": "model not found"}, status=404)
        return web.json_response({"choices": [{"message": {"content": "OK"}}]})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def test_a_served_model_passes_and_is_timed(aiohttp_server: MakeServer) -> None:
    server = await aiohttp_server(model_server(["smol"], {"smol"}))
    checked = await preflight(str(server.make_url("/v1")), "smol")
    assert checked.models == ("smol",)
    assert 0 < checked.latency_s < 5
    assert checked.first_answer_s(120) == pytest.approx(max(2.0, 3 * checked.latency_s))
    assert checked.first_answer_s(1.0) == 1.0  # never past the round's ceiling


async def test_a_server_that_answers_under_any_name_passes(aiohttp_server: MakeServer) -> None:
    server = await aiohttp_server(model_server(["/models/x.gguf"], None))
    assert (await preflight(str(server.make_url("/v1")), "smollm2-135m")).latency_s > 0


@pytest.mark.parametrize(
    ("listed", "serves", "model", "error"),
    [
        (["a", "b"], {"a", "b"}, "c", r"does not serve the model 'c'; it lists: a, b"),
        (None, {"a"}, "c", r"answered HTTP 404 for the model 'c'"),
    ],
)
async def test_a_model_not_served_is_named_with_what_is(
    aiohttp_server: MakeServer, listed: list[str] | None, serves: set[str], model: str, error: str
) -> None:
    server = await aiohttp_server(model_server(listed, serves))
    with pytest.raises(PreflightError, match=error):
        await preflight(str(server.make_url("/v1")), model)


@pytest.mark.parametrize(
    ("url", "error"),
    [("htp:/bad", "is not an http"), (DEAD, "cannot reach the model endpoint")],
)
async def test_a_bad_or_dead_endpoint_is_one_clear_error(url: str, error: str) -> None:
    with pytest.raises(PreflightError, match=error):
        await preflight(url, "any", timeout_s=5)


def twin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "twin", *args], capture_output=True, text=True,
                          check=False, timeout=300)  # fmt: skip


@pytest.mark.parametrize("url", [DEAD, "htp:/bad"])
def test_play_refuses_an_endpoint_that_fails_before_the_session(url: str) -> None:
    result = twin("play", "--agents", "research=llm", "--llm-base-url", url,
                  "--llm-model", "none")  # fmt: skip
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("twin: error: ")
    assert line.endswith("(--no-preflight starts anyway, on fallbacks)")
    assert result.stdout == ""  # nothing ran


def test_without_preflight_a_dead_endpoint_plays_on_fallbacks_and_says_so(tmp_path: Path) -> None:
    args = ["play", "--agents", "research=llm,inference=fair_share", "--llm-base-url", DEAD,
            "--llm-model", "none", "--no-preflight"]  # fmt: skip
    result = twin(*args, "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads((tmp_path / "agents.json").read_text())
    decisions = report["agents"]["research"]["llm"]["decisions"]
    assert f"research: 0 of {decisions} decisions answered by the model (" in result.stdout
    assert "warning: the fallback answered most of research's decisions" in result.stdout
    strict = twin(*args, "--strict")
    assert strict.returncode == 3
