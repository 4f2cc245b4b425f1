"""docker compose on a real Docker Engine: the images build from a clean checkout (the twin's
without the model server's), the built-in stack plays its session to the end with the real
Compose v2 binary, and its event log is byte for byte the one `twin serve --session-file` and
the same agents write outside Docker. Faults on the engine: the gateway stopped mid-session and
started again resumes from its log to the same end; an agent killed mid-session leaves its
tenant to its default policy, which the log records; the stack plays again under a fresh
session id without a file deleted by hand.

The daemon is the one that answers, or a `dockerd` these tests start and stop by its PID
(tests/engine.py). Where neither can be had (no dockerd installed, not root, a daemon that
will not start, no base image to build on) the module skips with the reason: that is the only
skip here."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.engine import ROOT, Engine, NoEngineError, Project, checkout_copy, committed, engine
from tests.test_compose import COMPOSE_FILES
from tests.test_compose import play as play_as_local_processes

BUILTIN = ("docker-compose.yml", "docker-compose.builtin.yml")
PACED = {"TWIN_AGENT_THINK_MS": "400"}  # 15 rounds in about 6 s: time to stop things mid-way
AGENTS = {"research", "inference", "batch"}


@pytest.fixture(scope="module")
def docker() -> Iterator[Engine]:
    try:
        with engine() as started:
            yield started
    except NoEngineError as exc:
        pytest.skip(f"no Docker Engine here: {exc}")  # the only skip of this module


@pytest.fixture
def stack(docker: Engine) -> Iterator[Project]:
    """The built-in stack (no model server) in a fresh copy of the checkout, taken down after."""
    project = Project(docker, checkout_copy(), BUILTIN)
    try:
        yield project
    finally:
        project.down()


@pytest.fixture(scope="module")
def alone() -> bytes:
    """The event log the same session file and the same agents write outside Docker: `twin
    serve --session-file compose/session.yaml` and the three agents as local processes."""
    root = Path(tempfile.mkdtemp(prefix="twin-alone-"))
    root.chmod(0o755)
    try:
        for name in COMPOSE_FILES:
            shutil.copy(ROOT / name, root / name)
        shutil.copytree(ROOT / "compose", root / "compose")
        subprocess.run(["sh", "compose/tokens.sh"], cwd=root, check=True, capture_output=True)
        reports = play_as_local_processes(root, *BUILTIN)
        assert {r["end_reason"] for r in reports.values()} == {"horizon"}
        return (root / "runs" / "main.jsonl").read_bytes()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def events(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_the_twin_image_builds_without_building_the_model_server(stack: Project) -> None:
    built = stack.must("build", "gateway")
    assert "llama" not in built.lower()  # Dockerfile.llm's stages never ran
    inspect = stack.engine.docker("image", "inspect", "cluster-twin:latest")
    assert inspect.returncode == 0, inspect.stderr
    image = json.loads(inspect.stdout)[0]
    assert image["Config"]["Entrypoint"] == ["/usr/local/bin/twin-entrypoint", "twin"]
    shipped = stack.engine.docker(
        "run", "--rm", "--entrypoint", "python", "cluster-twin:latest", "-c",
        "from twin.sim.job_sources import INSTALLED_TRACES as t; print(len(list(t.iterdir())))",
    )  # fmt: skip
    assert shipped.returncode == 0, shipped.stderr  # the real traces ship in the image
    assert int(shipped.stdout) > 0


def test_the_built_in_stack_writes_the_log_the_twin_writes_alone(
    stack: Project, alone: bytes
) -> None:
    stack.must("up", "--build")
    assert stack.exit_codes() == {"gateway": 0} | dict.fromkeys(AGENTS, 0)
    in_docker = stack.log().read_bytes()
    assert events(stack.log())[-1]["kind"] == "episode_ended"
    assert in_docker == alone


def test_a_gateway_stopped_mid_session_resumes_from_its_log_to_the_same_end(
    stack: Project, alone: bytes
) -> None:
    stack.must("up", "--build", "--detach", env=PACED)
    stack.wait_for_rounds(5)
    stack.must("stop", "gateway")  # SIGTERM, as `docker compose stop` sends
    stopped_at = committed(stack.log())
    assert stopped_at < 15, "the session ended before the gateway stopped"
    assert stack.running() == AGENTS  # the agents wait for their gateway to come back
    stack.must("start", "gateway", env=PACED)
    codes = stack.wait_until_exited()
    assert codes == {"gateway": 0} | dict.fromkeys(AGENTS, 0)
    logs = stack.must("logs", "research")
    assert '"reconnects": 0' not in logs  # it did reconnect
    assert stack.log().read_bytes() == alone


def test_a_killed_agent_leaves_its_tenant_to_its_default_policy_in_the_log(
    stack: Project,
) -> None:
    # The round its agent was playing waits its timeout: 5 s here rather than the stack's 60.
    stack.must("up", "--build", "--detach", env={**PACED, "TWIN_ROUND_TIMEOUT_MS": "5000"})
    stack.wait_for_rounds(3)
    stack.must("kill", "research")
    codes = stack.wait_until_exited()
    assert codes["research"] == 137  # SIGKILL: no goodbye
    assert codes == {"gateway": 0, "research": 137, "inference": 0, "batch": 0}
    rounds = [e for e in events(stack.log()) if e["kind"] == "round_committed"]
    assert len(rounds) == 15
    defaulted = [r["round"] for r in rounds if "research" in r["defaulted"]]
    assert defaulted, "no round fell back to research's default policy"
    assert defaulted == list(range(defaulted[0], rounds[-1]["round"] + 1))  # from then on
    assert defaulted[0] > rounds[0]["round"]  # its agent decided the first rounds itself
    assert all(set(r["defaulted"]) <= {"research"} for r in rounds)


def test_the_stack_plays_again_under_a_fresh_session_id(stack: Project, alone: bytes) -> None:
    stack.must("up", "--build")
    stack.must("up", env={"TWIN_SESSION": "again"})
    assert stack.exit_codes() == {"gateway": 0} | dict.fromkeys(AGENTS, 0)
    again = events(stack.log("again"))
    assert again[0]["session"] == "again"
    assert again[-1]["kind"] == "episode_ended"
    assert stack.log("main").read_bytes() == alone  # the first play is kept as it was


def docs_commands() -> list[str]:
    """The commands of docs/compose.md's first block, in order, as printed."""
    text = (ROOT / "docs" / "compose.md").read_text()
    block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def needs_the_model(command: str) -> bool:
    """A stack with the model server (bench/compose.py plays those: llama.cpp builds for
    minutes)."""
    return re.match(r"(\w+=\S+ )*docker compose ", command) is not None and not any(
        name in command for name in ("docker-compose.builtin.yml", "docker-compose.openb.yml")
    )


def test_the_commands_of_the_compose_docs_run_as_printed(docker: Engine) -> None:
    root = checkout_copy()
    (root / ".env").unlink()  # a clone has none: the first command writes it
    project = Project(docker, root, ("docker-compose.yml",))
    project.name = re.sub(r"[^a-z0-9_-]", "", root.name.lower())  # compose's own default
    commands = [c for c in docs_commands() if not needs_the_model(c)]
    assert len(commands) >= 6
    plugins = Path(tempfile.mkdtemp(prefix="twin-docker-config-"))
    env = {k: v for k, v in docker.env.items() if not k.startswith("TWIN_")}
    env |= {"DOCKER_CONFIG": str(plugins), "PATH": f"{Path(sys.executable).parent}:{env['PATH']}"}
    try:
        script = "set -eu\n" + "\n".join(commands) + "\n"
        done = subprocess.run(["bash", "-c", script], cwd=root, env=env, capture_output=True,
                              text=True, timeout=1800, check=False)  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        for session, agents in (("builtin", 3), ("more-builtin", 6), ("openb", 4)):
            log = events(root / "runs" / f"{session}.jsonl")
            assert log[0]["session"] == session
            assert log[-1]["kind"] == "episode_ended"
            assert len({e["tenant"] for e in log if e["kind"] == "episode_settled"}) == agents
            rounds = [e for e in log if e["kind"] == "round_committed"]
            assert rounds
            assert all(not r["defaulted"] for r in rounds)  # every agent played every round
    finally:
        project.down()
        shutil.rmtree(plugins, ignore_errors=True)


def test_the_image_serves_openenv_as_its_validator_starts_it(
    stack: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenEnv's own Docker provider starts the built image as `openenv validate .` does (uid
    65532, read-only root, every capability dropped, /tmp a tmpfs, no environment: no token),
    and its runtime graders pass against it. One difference, said here: the network is the
    manifest's `public` form, not `no-network`, whose probes run in a digest-pinned helper
    image (python:3.12-slim@sha256:...) that only the registry this machine cannot reach has;
    and the image is the one compose built (`openenv validate .` builds with no build
    argument, so on the default base only)."""
    from openenv.validation.manifest import NetworkPolicy
    from openenv.validation.parsers.openenv_yaml import OpenEnvYamlParser
    from openenv.validation.providers.docker import DockerValidationProvider
    from openenv.validation.runtime.contracts import LaunchSpec

    stack.must("build", "gateway")
    image = stack.engine.docker("image", "inspect", "--format", "{{.Id}}", "cluster-twin:latest")
    assert image.returncode == 0, image.stderr
    manifest = OpenEnvYamlParser().parse(ROOT)
    for name, value in stack.engine.env.items():  # the provider's docker, on this daemon
        monkeypatch.setenv(name, value)
    spec = LaunchSpec(image_ref=image.stdout.strip(), resources=manifest.resources,
                      network=NetworkPolicy(mode="public"), run_id="twin-engine-openenv",
                      startup_timeout_s=60)  # fmt: skip
    subject = DockerValidationProvider().start(spec)
    try:
        graded = subprocess.run(
            [str(Path(sys.executable).parent / "openenv"), "validate", "--url", subject.base_url,
             "--level", "runtime", "--json"],
            capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip
        assert graded.returncode == 0, graded.stdout + graded.stderr
        assert json.loads(graded.stdout)["passed"] is True
        said = stack.engine.docker("logs", subject.name).stderr
        assert "no operator token given: made one in /tmp/twin-admin-token (uid 65532" in said
        token = stack.engine.docker("exec", subject.name, "cat", "/tmp/twin-admin-token")
        assert token.returncode == 0, token.stderr
        assert operator_status(subject.base_url, None) == 401  # nothing without it
        assert operator_status(subject.base_url, token.stdout.strip()) == 200
    finally:
        subject.stop()


def operator_status(base_url: str, token: str | None) -> int:
    """The HTTP status of the operator's session list, with `token` or none."""
    import urllib.error
    import urllib.request

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(f"{base_url}/v1/sessions", headers=headers)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
