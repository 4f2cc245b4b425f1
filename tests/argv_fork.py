"""Run one `twin` command line in a forked copy of the test process, as a user's shell would run
it, but without paying the interpreter's start-up for each: standard input from /dev/null,
output and error captured, a deadline after which the command gets Ctrl-C (SIGINT, as a user
who gave up would press it) and, if it still runs, is killed with its whole process group."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass

GRACE_S = 30.0  # after Ctrl-C, how long a command may take to stop (a busy machine is slow)


@dataclass(frozen=True)
class Finished:
    argv: tuple[str, ...]
    code: int | None  # None: killed at the deadline's end (it ignored Ctrl-C)
    stdout: str
    stderr: str


def run_forked(argv: Sequence[str], *, deadline_s: float, env: dict[str, str]) -> Finished:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:
            _become(argv, env, out.fileno(), err.fileno())
        status = _wait(pid, deadline_s)
        out.seek(0)
        err.seek(0)
        code = None if status is None else os.waitstatus_to_exitcode(status)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
        return Finished(tuple(argv), code, stdout, stderr)


def _become(argv: Sequence[str], env: dict[str, str], out: int, err: int) -> None:
    """The child: run the command with its own streams and group; never return into the test."""
    code = 1
    try:
        os.setpgrp()
        os.environ.update(env)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 (the child's own streams)
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from twin.cli.main import main

        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _wait(pid: int, deadline_s: float) -> int | None:
    started = time.monotonic()
    interrupted = False
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            _kill_group(pid)  # anything it left running in its group
            return status
        waited_s = time.monotonic() - started
        if waited_s > deadline_s and not interrupted:
            os.kill(pid, signal.SIGINT)
            interrupted = True
        elif waited_s > deadline_s + GRACE_S:
            _kill_group(pid)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.005)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
