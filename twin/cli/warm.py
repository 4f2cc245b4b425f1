"""`twin warm`: a resident process with the twin imported, so short commands answer at once.

`twin warm start` starts it in the background (`serve` in the foreground), `stop` ends it,
`status` says whether one runs (exit 0; 3 when none does). While it runs, `twin replay`,
`twin run` and the other commands of `twin.cli.warm_client.COMMANDS` are handed to it: for each
it forks a worker (a fresh process that shares the imported modules, copy-on-write) which runs
the command with the caller's arguments, directory, environment and standard streams. Nothing
else changes: the same output, files and exit status as without it. (Settings read once at
import, such as numba's and OpenBLAS's environment variables, are the warm process's: restart it
after changing them.)

Only this user can reach it: the socket lives in a directory of theirs closed to others, and
every connection's peer user is checked. A worker is one command; the warm process itself
never runs the twin's code, so nothing a command does (or leaves behind) reaches the next.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import io
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from twin.cli.warm_client import (
    COMMANDS,
    FORWARDED,
    HEADER,
    fingerprint,
    installation,
    private,
    socket_path,
)
from twin.errors import TwinError

PRELOAD = (
    "numpy", "pydantic", "rich.console", "rich.table", "twin.cli.render",
    "twin.cli.analyse", "twin.cli.progress", "twin.replay.run", "twin.replay.synth",
    "twin.sim.runner", "twin.sim.scenarios", "twin.kernel", "twin.schema.summary",
    "twin.eventlog.log", "twin.sweep.execute", "twin.arena.run", "twin.arena.sessions",
    "twin.gateway.app", "twin_agents.client", "twin_agents.factory", "pyarrow.parquet",
    "twin.arena.page", "twin.arena.session", "twin.arena.planner_agent", "twin.bound.run",
    "twin.eventlog.jobs", "twin_agents.policies", "twin_agents.learned",
)  # fmt: skip
"""What the warm process imports: what the commands it runs need first."""
MAX_REQUEST_BYTES = 1 << 20
START_TIMEOUT_S = 60.0
_PEERCRED = struct.Struct("3i")  # pid, uid, gid


Entry = Callable[[list[str]], int]
"""The CLI's entry (`twin.cli.main.main`): argv -> exit status."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], entry: Entry,
               prepare: Callable[[], None]) -> None:  # fmt: skip
    """`twin warm`; its workers run `entry`, after `prepare` (once, in the warm process)."""
    warm = sub.add_parser("warm", help="a resident process so short commands answer at once")
    warm.add_argument("action", choices=("start", "stop", "status", "serve"))
    warm.add_argument(
        "--socket", type=Path,
        help="the socket (default: $TWIN_WARM_SOCKET, else one per installation, "
        "warm-<key>.sock in a private directory under $XDG_RUNTIME_DIR or /tmp)",
    )  # fmt: skip
    warm.set_defaults(func=functools.partial(run, entry=entry, prepare=prepare))


def run(args: argparse.Namespace, entry: Entry, prepare: Callable[[], None]) -> int:
    path: Path = args.socket or socket_path()
    if args.action == "serve":
        serve(path, entry, prepare)
        return 0
    if args.action == "start":
        return _start(path, entry, prepare)
    if args.action == "stop":
        return _stop(path)
    pid = _running(path)
    print(f"warm process {pid} at {path}" if pid else f"no warm process at {path}")
    print(f"for the twin at {installation()}")
    return 0 if pid else 3  # as LSB status says of a program not running


def _pid_file(path: Path) -> Path:
    return path.with_suffix(".pid")


def _running(path: Path) -> int | None:
    """The warm process's pid, if one answers at `path`."""
    try:
        pid = int(_pid_file(path).read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        return None
    finally:
        probe.close()
    return pid


def _start(path: Path, entry: Entry, prepare: Callable[[], None]) -> int:
    """Start `serve` in the background (its own session, output to a `.log` beside the
    socket); return once it accepts connections."""
    if pid := _running(path):
        print(f"warm process {pid} already at {path}")
        return 0
    _private_dir(path.parent)
    log = path.with_suffix(".log")
    child = os.fork()
    if child == 0:  # pragma: no cover - the daemon's side, observed through its socket
        os.setsid()
        if os.fork():
            os._exit(0)
        devnull = os.open(os.devnull, os.O_RDONLY)
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        for fd, target in ((0, devnull), (1, out), (2, out)):
            os.dup2(target, fd)
        code = 1
        try:
            serve(path, entry, prepare)
            code = 0
        finally:
            os._exit(code)
    os.waitpid(child, 0)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if pid := _running(path):
            print(f"warm process {pid} at {path}")
            return 0
        time.sleep(0.05)
    raise TwinError(f"the warm process did not start within {START_TIMEOUT_S:.0f} s; see {log}")


def _stop(path: Path) -> int:
    pid = _running(path)
    if pid is None:
        print(f"no warm process at {path}")
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline and _running(path):
        time.sleep(0.05)
    print(f"stopped warm process {pid}")
    return 0


def _private_dir(directory: Path) -> None:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not private(directory):
        raise TwinError(f"{directory} must be yours and closed to others (chmod 700)")


def preload() -> None:
    """Import what commands need (pandas too, which pyarrow imports when it first builds an
    array); compile (or load) the kernel."""
    for name in PRELOAD:
        importlib.import_module(name)
    from twin.kernel import jit
    from twin.sweep.execute import preload_results

    preload_results()
    jit.warm()


def serve(path: Path, entry: Entry, prepare: Callable[[], None]) -> None:
    """Accept commands at `path` until SIGTERM or SIGINT; a worker for each runs `entry`."""
    _private_dir(path.parent)
    preload()
    prepare()
    mine = fingerprint()
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    os.chmod(path, 0o600)
    listener.listen(64)
    listener.setblocking(False)
    _pid_file(path).write_text(f"{os.getpid()}\n")

    # A stop only sets a flag and wakes the loop: raised from the handler, SystemExit could
    # land inside a fork's at-fork hooks, where Python swallows it, and the process would run on.
    stopping: list[int] = []
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda signum, _frame: stopping.append(signum))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped by the kernel
    print(f"warm process {os.getpid()} at {path}", flush=True)
    watch = selectors.DefaultSelector()
    watch.register(listener, selectors.EVENT_READ)
    watch.register(wake_r, selectors.EVENT_READ)
    try:
        while not stopping:
            ready = {key.fd for key, _ in watch.select()}
            if wake_r in ready:
                os.read(wake_r, 512)  # the bytes the signals wrote; `stopping` says which
            if stopping or listener.fileno() not in ready:
                continue
            try:
                conn, _ = listener.accept()
            except BlockingIOError:  # the caller gave up before it was accepted
                continue
            if os.fork() == 0:
                signal.set_wakeup_fd(-1)
                for fd in (wake_r, wake_w):
                    os.close(fd)
                watch.close()
                listener.close()
                _handle(conn, mine, entry)  # never returns
            conn.close()
    finally:
        signal.set_wakeup_fd(-1)
        watch.close()
        for fd in (wake_r, wake_w):
            os.close(fd)
        listener.close()
        with contextlib.suppress(OSError):
            path.unlink()
            _pid_file(path).unlink()


def _handle(conn: socket.socket, mine: str, entry: Entry) -> None:
    """One connection: check who it is and what code it expects, fork the worker, pass
    signals on to it, report its exit status. Exits this (handler) process."""
    code = 0
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, signal.SIG_DFL)
        _, uid, _ = _PEERCRED.unpack(
            conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
        )
        request, fds = _receive(conn)
        if uid != os.getuid() or request is None or len(fds) != 3:
            conn.sendall(b"refused\n")
        elif not request["argv"] or request["argv"][0] not in COMMANDS:
            # Only the commands it is for, whatever a client asks: a client that is not ours
            # (any process of the user's can reach the socket) gets no server, no session.
            conn.sendall(b"refused\n")
            print(f"warm: refused `{str(request['argv'][:1])[:80]}`: not a command it runs",
                  flush=True)  # fmt: skip
        elif request.get("fingerprint") != mine:
            conn.sendall(b"stale\n")
        else:
            worker = os.fork()
            if worker == 0:
                conn.close()
                _work(request, fds, entry)  # never returns
            for fd in fds:
                os.close(fd)
            started = time.perf_counter()
            status = _supervise(conn, worker)
            conn.sendall(f"exit {status}\n".encode())
            print(f"warm: worker {worker} ran `{' '.join(request['argv'][:1])}`: exit {status} "
                  f"in {time.perf_counter() - started:.3f} s", flush=True)  # fmt: skip
    except Exception as exc:  # a broken client must not take the warm process's log
        print(f"warm: a request failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = 1
    finally:
        os._exit(code)


def _receive(conn: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """The request (None if malformed or too large) and the descriptors sent with it."""
    conn.settimeout(10.0)
    data, fds, _, _ = socket.recv_fds(conn, 4096, 3)
    if len(data) < HEADER.size:
        return None, fds
    (length,) = HEADER.unpack(data[: HEADER.size])
    if length > MAX_REQUEST_BYTES:
        return None, fds
    body = bytearray(data[HEADER.size :])
    while len(body) < length:
        chunk = conn.recv(min(65536, length - len(body)))
        if not chunk:
            return None, fds
        body += chunk
    conn.settimeout(None)
    try:
        request = json.loads(body)
    except ValueError:
        return None, fds
    valid = (
        isinstance(request, dict) and isinstance(request.get("argv"), list)
        and all(isinstance(a, str) for a in request["argv"])
        and isinstance(request.get("cwd"), str) and isinstance(request.get("env"), dict)
    )  # fmt: skip
    return (request if valid else None), fds


def _supervise(conn: socket.socket, worker: int) -> int:
    """Wait for the worker, passing on the signals the client relays; its exit status (128 +
    the signal's number if a signal ended it, as shells report it)."""
    watch = selectors.DefaultSelector()
    pidfd = os.pidfd_open(worker)
    watch.register(pidfd, selectors.EVENT_READ)
    watch.register(conn, selectors.EVENT_READ)
    pending = b""
    try:
        while True:
            for key, _ in watch.select():
                if key.fd == pidfd:
                    _, status = os.waitpid(worker, 0)
                    code = os.waitstatus_to_exitcode(status)
                    return 128 - code if code < 0 else code
                chunk = conn.recv(256)
                if not chunk:  # the client is gone: so is its command
                    watch.unregister(conn)
                    os.kill(worker, signal.SIGTERM)
                    continue
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    word, _, value = line.decode(errors="replace").partition(" ")
                    if word == "signal" and value.isdigit() and int(value) in FORWARDED:
                        os.kill(worker, int(value))
    finally:
        watch.close()
        os.close(pidfd)


def _work(request: dict[str, Any], fds: list[int], entry: Entry) -> None:
    """The worker: become the caller (streams, directory, environment) and run the command."""
    code = 1
    try:
        for fd, passed in enumerate(fds):
            os.dup2(passed, fd)
            os.close(passed)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD):
            signal.signal(s, signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in request["env"].items()})
        with _streams():
            try:
                code = entry(request["argv"])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except KeyboardInterrupt:
                code = 128 + signal.SIGINT
    finally:
        os._exit(code)


@contextlib.contextmanager
def _streams() -> Iterator[None]:
    """sys.stdin/stdout/stderr over the caller's descriptors, buffered as Python would have
    buffered them in the caller's process (line by line to a terminal)."""
    encoding = os.environ.get("PYTHONIOENCODING", "utf-8").partition(":")[0] or "utf-8"

    def text(fd: int, mode: str, *, line: bool) -> io.TextIOWrapper:
        raw = io.FileIO(fd, mode, closefd=False)
        buffered = io.BufferedWriter(raw) if "w" in mode else io.BufferedReader(raw)
        return io.TextIOWrapper(buffered, encoding=encoding,
                                errors="backslashreplace" if fd == 2 else "strict",
                                line_buffering=line)  # fmt: skip

    sys.stdin = text(0, "r", line=False)
    sys.stdout = text(1, "w", line=os.isatty(1))
    sys.stderr = text(2, "w", line=True)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
