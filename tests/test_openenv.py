"""The OpenEnv tooling accepts the gateway: its validator and its generic client, against a
real `twin serve` process on a free loopback port."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from twin.bench.server import free_port, start_serve

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]


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


def test_a_generic_mcp_client_resets_then_steps_without_a_handle(server: str) -> None:
    """The official SDK's client, as any MCP agent uses it: `reset`, then `step` and `state`
    with only the tool's own arguments. Its MCP session is its episode; a second client's
    session is another episode; a handle in the arguments still reaches the one it names."""
    import httpx
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def session_plays(steps: int) -> tuple[dict[str, Any], dict[str, Any], str]:
        async with (
            httpx.AsyncClient(timeout=30) as http,
            streamable_http_client(f"{server}/mcp", http_client=http) as (read, write, sid),
            ClientSession(read, write) as mcp,
        ):
            await mcp.initialize()
            reset = (await mcp.call_tool("reset", {"seed": 5})).structuredContent
            assert reset is not None
            for _ in range(steps):
                step = await mcp.call_tool("step", {"action": {"gpus_to_provision": 1}})
                assert not step.isError, step.content
            state = (await mcp.call_tool("state", {})).structuredContent
            assert state is not None
            handle = reset["metadata"]["handle"]
            named = (await mcp.call_tool("state", {"handle": handle})).structuredContent
            assert named == state
            return reset, state, str(sid())

    async def two() -> list[tuple[dict[str, Any], dict[str, Any], str]]:
        return list(await asyncio.gather(session_plays(3), session_plays(5)))

    (first, first_state, first_id), (_, second_state, second_id) = asyncio.run(two())
    assert first_id != second_id
    assert first["metadata"]["handle"] == first_id  # the episode is the MCP session's
    assert (first_state["step_count"], second_state["step_count"]) == (3, 5)


def test_an_mcp_session_id_the_gateway_did_not_issue_reaches_nothing(server: str) -> None:
    import httpx

    step = {"name": "step", "arguments": {"action": {"gpus_to_provision": 1}}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": step}
    forged = httpx.post(f"{server}/mcp", json=body, headers={"Mcp-Session-Id": "mine.0123"})
    result = forged.json()["result"]
    assert result["isError"] is True
    notification = httpx.post(
        f"{server}/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}
    )
    assert (notification.status_code, notification.content) == (202, b"")


def package(tmp_path: Path) -> Path:
    """The project as `openenv push` would take it: its files, not the local environment."""
    command = ["git", "ls-files", "--cached", "--others", "--exclude-standard"]
    listed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    root = tmp_path / "cluster_twin"
    for name in listed.splitlines():
        if (ROOT / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, root / name)
    return root


def test_the_manifest_passes_openenv_s_static_validation(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(BIN / "openenv"), "validate", "--level", "static", "--json", str(package(tmp_path))],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "pass"
    assert [r["status"] for r in report["results"]] == ["pass"]


# openenv's collector calls websockets' connect() outside a `with`, which websockets 17.1
# deprecates: a warning about the validator's own client, not about the twin.
@pytest.mark.filterwarnings(
    "ignore:connect\\(\\) must be used as a context manager:DeprecationWarning"
)
def test_the_manifest_s_runtime_probe_plays_and_meets_openenv_s_runtime_contracts(
    tmp_path: Path,
) -> None:
    """The probe the manifest names, played by openenv's own collector and graded by its
    runtime graders, against a real `twin serve` as the image runs it (its default scenario;
    the process, not the image: no Docker engine here)."""
    from openenv.validation.graders import Subject
    from openenv.validation.graders.runtime import (
        ObservationSchemaGrader,
        RewardWellFormedGrader,
        StateContractGrader,
    )
    from openenv.validation.parsers.openenv_yaml import OpenEnvYamlParser
    from openenv.validation.runtime.collector import collect_runtime_evidence
    from openenv.validation.runtime.contracts import load_runtime_plan

    manifest = OpenEnvYamlParser().parse(ROOT)
    plan = load_runtime_plan(ROOT, manifest.execution)
    port = free_port()
    proc = start_serve(port, "operator-token-for-the-probe", tmp_path / "serve.log")
    try:
        budget_s = manifest.resources.episode_timeout_s
        evidence = collect_runtime_evidence(f"http://127.0.0.1:{port}", plan,
                                            episode_timeout_s=budget_s)  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    assert evidence.failure_reason is None
    assert [e.operation for e in evidence.exchanges].count("step") == len(plan.actions)
    subject = Subject(root=ROOT, manifest=manifest, image_ref=None, running=None,
                      outputs_dir=ROOT / "outputs", runtime_evidence=evidence)  # fmt: skip
    for grader in (RewardWellFormedGrader(), ObservationSchemaGrader(), StateContractGrader()):
        result = grader.run(subject)
        assert result.status.value == "pass", (grader.check_id, result.evidence)


def test_openenv_build_builds_the_twin_image_from_the_root_dockerfile(tmp_path: Path) -> None:
    """No Docker engine runs here: a stand-in `docker` records the command `openenv build`
    gives it, and the Dockerfile it names is read for the stage that command builds."""
    root = package(tmp_path)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "docker").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path / "argv"}\n')
    (fake / "docker").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    result = subprocess.run([str(BIN / "openenv"), "build", str(root)], env=env,
                            capture_output=True, text=True, check=False, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[:3] == ["build", "-t", "openenv-cluster_twin"]
    assert "--target" not in argv  # the last stage is what it builds
    assert Path(argv[argv.index("-f") + 1]).name == "Dockerfile"
    stages = re.findall(r"^FROM \S+ AS (\S+)$", (ROOT / "Dockerfile").read_text(), re.M)
    assert stages[-1] == "twin"
    port = yaml.safe_load((ROOT / "openenv.yaml").read_text())["port"]
    twin_stage = (ROOT / "Dockerfile").read_text().split("AS twin\n")[-1]
    assert f"EXPOSE {port}" in twin_stage
    assert f'CMD ["serve", "--host", "0.0.0.0", "--port", "{port}"]' in twin_stage
