"""Hand a command to the warm process, when one is running (`twin warm start`).

A fresh `twin` spends most of a short command importing numpy, pydantic and the twin. The warm
process has them imported; for each command it forks a fresh worker that runs it with this
process's arguments, working directory, environment, standard input, output and error (the
descriptors themselves are passed over the socket, so a terminal stays a terminal). Signals
sent to this process (Ctrl-C) are passed on to the worker, and its exit status is this one's.

Only the standard library is imported here, before anything else: a command with no warm
process to take it pays a few milliseconds for the check. A warm process started from other
code (an edited source file, another interpreter) answers "stale" and the command runs here.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import struct
import sys
import tempfile
from pathlib import Path
from types import FrameType

from twin.schema.vocabulary import WARM_SOCKET_ENV as SOCKET_ENV

COMMANDS = frozenset(("run", "replay", "calibrate", "compare", "kernel", "trace",
                      "trace-scenario", "fill", "export", "report", "scenarios",
                      "schema", "sweep", "arena"))  # fmt: skip
"""Commands the warm process runs: those that finish on their own (sweeps and arenas fork
their pools from the warm worker, which has the twin imported and the kernel loaded). The
gateway, sessions and benchmarks run here: they serve, or time fresh processes."""
HEADER = struct.Struct("!I")  # the request's length, then the request (JSON)
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
PACKAGE = Path(__file__).resolve().parents[1]


def installation() -> str:
    """Which twin this is: where its package lies, its version, and the interpreter."""
    from twin import __version__

    return f"{PACKAGE} ({__version__}, {sys.executable})"


def socket_path() -> Path:
    """`$TWIN_WARM_SOCKET`, else `warm-<installation>.sock` in a directory of this user's own
    (0700) under `$XDG_RUNTIME_DIR` or the temporary directory: one warm process per checkout
    (or installed package) and interpreter, so a command is never handed to other code."""
    configured = os.environ.get(SOCKET_ENV)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    key = hashlib.sha256(installation().encode()).hexdigest()[:12]
    return Path(base) / f"cluster-twin-{os.getuid()}" / f"warm-{key}.sock"


def private(directory: Path) -> bool:
    """Whether `directory` is this user's own and closed to others (a socket inside it can be
    trusted: nobody else can have put it there)."""
    try:
        st = directory.stat()
    except OSError:
        return False
    return st.st_uid == os.getuid() and st.st_mode & 0o077 == 0


def fingerprint() -> str:
    """The code a process runs: interpreter, and the package's sources and data (how many,
    their modification times and sizes, summed). A warm process with another is stale."""
    count = stamps = size = 0
    for root, dirs, files in os.walk(PACKAGE):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if name.endswith((".py", ".json")):
                st = os.stat(os.path.join(root, name))
                count, stamps, size = count + 1, stamps + st.st_mtime_ns, size + st.st_size
    return f"{sys.executable}|{sys.version}|{count}|{stamps}|{size}"


def forward(argv: list[str]) -> int | None:
    """Run `twin ARGV` in the warm process; its exit status, or None when no warm process
    takes it (none running, a stale one, or a command it does not run)."""
    if not argv or argv[0] not in COMMANDS or os.environ.get(SOCKET_ENV) == "":
        return None
    path = socket_path()
    if not path.exists() or not private(path.parent):
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
    except OSError:  # a socket left by a process that is gone
        conn.close()
        return None
    request = json.dumps({
        "argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "fingerprint": fingerprint(),
    }).encode()  # fmt: skip
    with conn:
        message = HEADER.pack(len(request)) + request
        socket.send_fds(conn, [message[:4096]], [0, 1, 2])
        conn.sendall(message[4096:])
        return _await_exit(conn)


def _await_exit(conn: socket.socket) -> int | None:
    """Pass signals on until the worker's exit status arrives."""

    def relay(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(OSError):
            conn.sendall(f"signal {signum}\n".encode())

    previous = {s: signal.signal(s, relay) for s in FORWARDED}
    try:
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = conn.recv(64)
            if not chunk:
                print("twin: error: the warm process went away", file=sys.stderr)
                return 1
            reply += chunk
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    word, _, value = reply.decode().strip().partition(" ")
    if word == "exit":
        return int(value)
    return None  # "stale": run here
