"""The warm process: short commands handed to a resident process answer as they would alone."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from twin.cli.warm_client import PACKAGE
from twin.replay.synth import generate_itp
from twin.schema.vocabulary import WARM_SOCKET_ENV as SOCKET_ENV


def twin(*argv: str, sock: Path | None, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`twin ARGV` as a user runs it, through the warm process at `sock` (None: without)."""
    env = {**os.environ, SOCKET_ENV: str(sock) if sock else ""}
    return subprocess.run([sys.executable, "-m", "twin", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


class Warm:
    """A `twin warm serve` in the foreground, and what it logged."""

    def __init__(self, sock: Path) -> None:
        self.sock = sock
        self.process = subprocess.Popen(
            [sys.executable, "-m", "twin", "warm", "serve", "--socket", str(sock)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not sock.with_suffix(".pid").exists():
            assert self.process.poll() is None, self.process.communicate()[0]
            assert time.monotonic() < deadline, "the warm process did not start"
            time.sleep(0.05)

    def stop(self) -> str:
        self.process.send_signal(signal.SIGTERM)
        log, _ = self.process.communicate(timeout=30)
        return log


@pytest.fixture
def warm(tmp_path: Path) -> Iterator[Warm]:
    directory = tmp_path / "run"
    directory.mkdir(mode=0o700)
    server = Warm(directory / "warm.sock")
    yield server
    if server.process.poll() is None:
        server.stop()


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.csv"
    generate_itp(path, 300, seed=0)
    return path


def test_a_replay_through_the_warm_process_is_the_replay_alone(
    warm: Warm, trace: Path, tmp_path: Path
) -> None:
    # Same output and files (written where the caller stands), run by a worker of the warm
    # process (its log names it), not by the command's own process.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    through = twin("replay", "--trace", str(trace), "--out", "out", sock=warm.sock,
                   cwd=tmp_path / "a")  # fmt: skip
    alone = twin("replay", "--trace", str(trace), "--out", "out", sock=None, cwd=tmp_path / "b")
    assert through.returncode == alone.returncode == 0, through.stderr
    assert through.stdout.replace("/a/", "/b/") == alone.stdout
    for name in ("events.jsonl", "summary.json"):
        assert (tmp_path / "a" / "out" / name).read_bytes() == (
            tmp_path / "b" / "out" / name
        ).read_bytes()
    assert "ran `replay`: exit 0" in warm.stop()


def test_a_failing_command_fails_as_it_would_alone(warm: Warm, tmp_path: Path) -> None:
    through = twin("replay", "--trace", "missing.csv", sock=warm.sock, cwd=tmp_path)
    alone = twin("replay", "--trace", "missing.csv", sock=None, cwd=tmp_path)
    assert through.returncode == alone.returncode == 2
    assert through.stderr == alone.stderr
    assert "Traceback" not in through.stderr
    assert "ran `replay`: exit 2" in warm.stop()


def test_ctrl_c_reaches_the_command_in_the_warm_process(warm: Warm, tmp_path: Path) -> None:
    # Generating 20 million jobs takes far longer than the test waits: the interrupt ends it.
    env = {**os.environ, SOCKET_ENV: str(warm.sock)}
    argv = ["trace", "generate", "--jobs", "20000000", "--out", "big.csv"]
    client = subprocess.Popen([sys.executable, "-m", "twin", *argv], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 30
    while not (tmp_path / "big.csv").exists():
        assert time.monotonic() < deadline, "the command did not start"
        time.sleep(0.05)
    client.send_signal(signal.SIGINT)
    _, err = client.communicate(timeout=15)
    assert client.returncode == 128 + signal.SIGINT, err
    assert f"exit {128 + signal.SIGINT}" in warm.stop()


def test_a_warm_process_running_other_code_is_not_used(
    warm: Warm, trace: Path, tmp_path: Path
) -> None:
    # An edited source (here: a newer modification time) makes the warm process stale: the
    # command runs in its own process, with the same result.
    source = PACKAGE / "cli" / "warm_client.py"
    before = source.stat()
    try:
        os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
        done = twin("replay", "--trace", str(trace), sock=warm.sock, cwd=tmp_path)
    finally:
        os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert done.returncode == 0
    assert "jobs" in done.stdout
    assert "ran `" not in warm.stop()


def test_a_socket_left_behind_is_ignored(trace: Path, tmp_path: Path) -> None:
    left = tmp_path / "left"
    left.mkdir(mode=0o700)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(left / "warm.sock"))
    dead.close()  # the file stays, nobody listens
    done = twin("replay", "--trace", str(trace), sock=left / "warm.sock", cwd=tmp_path)
    assert done.returncode == 0
    assert "jobs" in done.stdout


def test_a_warm_process_in_a_directory_open_to_others_is_neither_used_nor_started(
    warm: Warm, trace: Path, tmp_path: Path
) -> None:
    # Anyone could have put a socket in such a directory: the command runs in its own process.
    warm.sock.parent.chmod(0o755)
    try:
        done = twin("replay", "--trace", str(trace), sock=warm.sock, cwd=tmp_path)
    finally:
        warm.sock.parent.chmod(0o700)
    assert done.returncode == 0
    assert "jobs" in done.stdout
    assert "ran `" not in warm.stop()
    open_to_all = tmp_path / "open"
    open_to_all.mkdir()
    open_to_all.chmod(0o755)
    refused = twin("warm", "serve", "--socket", str(open_to_all / "warm.sock"), sock=None,
                   cwd=tmp_path)  # fmt: skip
    assert refused.returncode == 2
    assert "must be yours and closed to others" in refused.stderr


def test_start_status_and_stop(tmp_path: Path) -> None:
    directory = tmp_path / "run"
    sock = directory / "warm.sock"
    started = twin("warm", "start", "--socket", str(sock), sock=None, cwd=tmp_path)
    try:
        assert started.returncode == 0, started.stderr
        status = twin("warm", "status", "--socket", str(sock), sock=None, cwd=tmp_path)
        assert status.returncode == 0
        assert f"for the twin at {PACKAGE} (" in status.stdout  # which code it serves
        assert (directory / "warm.log").is_file()
        assert oct(directory.stat().st_mode & 0o777) == "0o700"
        assert oct(sock.stat().st_mode & 0o777) == "0o600"
    finally:
        assert twin("warm", "stop", "--socket", str(sock), sock=None, cwd=tmp_path).returncode == 0
    assert twin("warm", "status", "--socket", str(sock), sock=None, cwd=tmp_path).returncode == 3
    assert not sock.exists()


def test_an_arena_through_the_warm_process_is_the_arena_alone(warm: Warm, tmp_path: Path) -> None:
    """An arena's pool is forked from the warm worker (the twin imported, the kernel loaded):
    the same tables and boards as the arena run alone."""
    argv = ["arena", "--scenario", "market", "--agents", "fair_share,stepper", "--seeds", "1",
            "--workers", "2", "--out", "out"]  # fmt: skip
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    through = twin(*argv, sock=warm.sock, cwd=tmp_path / "a")
    alone = twin(*argv, sock=None, cwd=tmp_path / "b")
    assert through.returncode == alone.returncode == 0, through.stderr
    untimed = [re.sub(r"\b\d+ s\b", "N s", run.stdout) for run in (through, alone)]
    assert untimed[0].replace("/a/", "/b/") == untimed[1]  # the progress lines' seconds aside
    boards = [pq.read_table(tmp_path / d / "out" / "leaderboard.parquet").to_pylist()
              for d in ("a", "b")]  # fmt: skip
    timed = {"answer_ms_p50", "answer_ms_p95"}  # how fast agents answered: wall clock
    assert [{k: v for k, v in row.items() if k not in timed} for row in boards[0]] == [
        {k: v for k, v in row.items() if k not in timed} for row in boards[1]
    ]
    assert "ran `arena`: exit 0" in warm.stop()


def test_ctrl_c_stops_a_sweep_s_pool_in_the_warm_process(warm: Warm, tmp_path: Path) -> None:
    """The interrupt the client relays stops the sweep's workers (forked from the warm worker,
    outside the terminal's process group): one line, exit 130, and no run saved after it."""
    env = {**os.environ, SOCKET_ENV: str(warm.sock)}
    argv = ["sweep", "--scenario", "default", "--seeds", "40", "--workers", "2", "--out", "out"]
    client = subprocess.Popen([sys.executable, "-m", "twin", *argv], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)  # fmt: skip
    runs = tmp_path / "out" / "runs"
    deadline = time.monotonic() + 60
    while len(list(runs.glob("*.json"))) < 2:
        assert time.monotonic() < deadline, "the sweep did not start"
        time.sleep(0.05)
    client.send_signal(signal.SIGINT)
    _, err = client.communicate(timeout=30)
    assert client.returncode == 130, err
    assert "Traceback" not in err
    saved = len(list(runs.glob("*.json")))
    assert err.strip().splitlines()[-1].startswith(f"twin: interrupted; {saved} runs saved")
    time.sleep(1.0)
    assert len(list(runs.glob("*.json"))) == saved
    assert "ran `sweep`: exit 130" in warm.stop()


def test_the_warm_process_runs_only_its_own_commands_whatever_a_client_asks(
    warm: Warm, tmp_path: Path
) -> None:
    """A client that is not `twin` (any process of the user's reaches the socket) asks for
    `serve`, which would print a fresh operator token: refused, and nothing runs."""
    from twin.cli.warm_client import HEADER, _await_exit, fingerprint

    for argv in (["serve", "--port", "0"], ["play"], []):
        request = json.dumps({"argv": argv, "cwd": str(tmp_path), "env": dict(os.environ),
                              "fingerprint": fingerprint()}).encode()  # fmt: skip
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn, \
                (tmp_path / "out.txt").open("w") as out:  # fmt: skip
            conn.connect(str(warm.sock))
            socket.send_fds(conn, [HEADER.pack(len(request)) + request], [0, out.fileno(), 2])
            assert _await_exit(conn) is None  # refused: the client would run it itself
        assert (tmp_path / "out.txt").read_text() == ""
    log = warm.stop()
    assert "ran `" not in log
    assert log.count("not a command it runs") == 3


def test_each_checkout_has_a_warm_process_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default socket is keyed by the installation (where the package lies, its version,
    the interpreter): a `twin` of another checkout never reaches this one's warm process."""
    from twin.cli import warm_client

    monkeypatch.delenv(SOCKET_ENV, raising=False)
    here = warm_client.socket_path()
    assert here.name.startswith("warm-")
    assert here == warm_client.socket_path()  # stable
    monkeypatch.setattr(warm_client, "PACKAGE", Path("/elsewhere/another-checkout/twin"))
    assert warm_client.socket_path() != here
    assert warm_client.socket_path().parent == here.parent


def test_a_stop_that_arrives_while_the_warm_process_forks_still_stops_it(tmp_path: Path) -> None:
    """SIGTERM landing in a fork's at-fork hooks (where Python swallows an exception a handler
    raises) still ends the warm process. The hook here marks that it runs and is made slow, so
    the signal lands in it."""
    directory = tmp_path / "run"
    directory.mkdir(mode=0o700)
    sock, forking = directory / "warm.sock", tmp_path / "forking"
    slow_fork = (
        "import os, pathlib, sys, time\n"
        "def hook():\n"
        "    pathlib.Path(sys.argv[2]).touch()\n"
        "    time.sleep(3.0)\n"
        "os.register_at_fork(after_in_parent=hook)\n"
        "from twin.cli.main import main\n"
        "sys.exit(main(['warm', 'serve', '--socket', sys.argv[1]]))\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", slow_fork, str(sock), str(forking)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not sock.with_suffix(".pid").exists():
            assert process.poll() is None, process.communicate()[0]
            assert time.monotonic() < deadline, "the warm process did not start"
            time.sleep(0.05)
        forking.unlink(missing_ok=True)  # only the fork for the connection below counts
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(str(sock))  # the warm process forks a handler for it
            while not forking.exists():
                assert time.monotonic() < deadline + 30, "the warm process did not fork"
                time.sleep(0.01)
            process.send_signal(signal.SIGTERM)  # inside the parent's slow at-fork hook
            log, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, log
    assert not sock.exists()
