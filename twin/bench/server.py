"""A `twin serve` process for the benchmarks: on a free loopback port, its output in a file."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from twin.gateway.tokens import ADMIN_TOKEN_ENV, new_token


@dataclass(frozen=True)
class Served:
    url: str
    pid: int
    output: Path
    token: str

    def rss_kib(self) -> int:
        """The server's resident memory now (VmRSS), in KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def cpu_s(self) -> float:
        """CPU seconds the server has used (user + system)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_serve(port: int, token: str, output: Path, *args: str,
                files: int | None = None) -> subprocess.Popen[bytes]:  # fmt: skip
    """`twin serve` on a loopback port with this operator token, its output in `output`, and
    at most `files` open file descriptors if given; returns once it answers `/health` (its
    socket listens from the start, but it serves only once it has loaded; RuntimeError, with
    its output, if it does not)."""
    python = [sys.executable, "-m", "twin"]
    if files is not None:  # the limit set in the child before the twin starts
        limit = f"resource.setrlimit(resource.RLIMIT_NOFILE, ({files}, {files}))"
        run = "sys.argv[0] = 'twin'; runpy.run_module('twin', run_name='__main__')"
        python = [sys.executable, "-c", f"import resource, runpy, sys; {limit}; {run}"]
    with output.open("wb") as sink:
        proc = subprocess.Popen(
            [*python, "serve", "--port", str(port), *args],
            stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, ADMIN_TOKEN_ENV: token},
        )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return proc
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise RuntimeError("twin serve did not start: " + output.read_text())


@contextmanager
def twin_serve(*args: str) -> Iterator[Served]:
    """Run `twin serve` with a fresh operator token until the block ends."""
    port, token = free_port(), new_token()
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp) / "serve.log"
        proc = start_serve(port, token, output, *args)
        try:
            yield Served(f"http://127.0.0.1:{port}", proc.pid, output, token)
        finally:
            proc.terminate()
            proc.wait(timeout=15)
