"""The OpenEnv tooling accepts the gateway: its validator and its generic client, against a
real `twin serve` process on a free loopback port."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from twin.bench.server import free_port, start_serve

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    output = tmp_path_factory.mktemp("serve") / "output.log"
    proc = start_serve(
        port, "operator-token-for-openenv", output, "--scenario", "gpucluster-medium"
    )
    yield f"http://127.0.0.1:{port}"
    proc.terminate()  # SIGTERM: graceful shutdown
    assert proc.wait(timeout=15) == 0, output.read_text()
    assert "gateway_stopped" in output.read_text()


def test_openenv_validate_passes(server: str) -> None:
    result = subprocess.run(
        [str(BIN / "openenv"), "validate", "--url", server, "--json"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["passed"] is True
    assert report["mode"] == "simulation"


def test_the_generic_client_completes_an_episode(server: str) -> None:
    from openenv.core.generic_client import GenericEnvClient

    with GenericEnvClient(base_url=server).sync() as env:
        result = env.reset(seed=3)
        assert result.observation["active_gpus"] == 1
        steps, total = 0, 0.0
        while not result.done:
            queue, active = result.observation["queue_size"], result.observation["active_gpus"]
            result = env.step({"gpus_to_provision": min(max(queue - active, -1), 2)})
            total += result.reward
            steps += 1
        assert steps <= 100
        state = env.state()
        assert state["step_count"] == steps
        assert state["total_reward"] == pytest.approx(total)


def test_openenvs_mcp_client_plays_an_episode_through_the_tools(server: str) -> None:
    from openenv.core.mcp_client import MCPToolClient

    async def play() -> tuple[list[str], list[dict[str, Any]], dict[str, Any]]:
        client = MCPToolClient(base_url=server)
        try:
            names = [t.name for t in await client.list_tools()]
            results = [await client.call_tool("reset", seed=3)]
            while not results[-1]["done"] and len(results) < 200:
                results.append(await client.call_tool("step", action={"gpus_to_provision": 1}))
            return names, results, await client.call_tool("state")
        finally:
            await client.close()

    names, results, state = asyncio.run(play())
    assert names == ["reset", "step", "state"]
    assert results[0]["observation"]["active_gpus"] == 1
    assert results[-1]["done"]
    assert state["step_count"] == len(results) - 1  # the tools act on one episode: the session's
    assert state["total_reward"] == pytest.approx(sum(r["reward"] or 0.0 for r in results[1:]))
