"""No traceback reaches a user from any command and any argument. For every subcommand, hypothesis
draws command lines from the subcommand's own flags with hostile values (negative and huge
numbers, NaN, empty strings, an existing file where a directory goes and the reverse, a path
that cannot be created, bytes that are not UTF-8, a file that is not UTF-8 text), on top of a
base line that makes the command otherwise valid so the hostile value reaches the command's
code and not only argparse. Each line runs as a user runs it (in a forked process, in a scratch
directory, Ctrl-C after a deadline): it ends with 0 (done), 2 (refused, one line saying why),
3 (done, with a verdict) or 130 (interrupted), and nothing on its error stream is a traceback."""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.argv_fork import Finished, run_forked
from twin.cli.main import build_parser
from twin.cli.warm_client import SOCKET_ENV

ROOT = Path(__file__).resolve().parents[1]
TRACE = str(ROOT / "traces" / "samples" / "itp_synthetic.csv")
OPENB = ROOT / "traces" / "alibaba-gpu-v2023-openb"
SAMPLES = ROOT / "traces" / "samples"
DEADLINE_S = 1.0
EXITS = {0, 2, 3, 130}
DAEMONS = {"start"}  # `twin warm start` detaches a process by design (tests/test_warm.py has it)

# Values chosen to break a command that trusts its input; paths are relative to the scratch
# directory each line runs in (made by `scratch`).
HOSTILE = (
    "-1", "0", "99999999999999999999", "-99999999999999999999", "nan", "inf", "1e309", "",
    "existing.txt", "a_dir", "/proc/no-such/x", "missing/deeper/x", "latin1.yaml", "\udcff",
    "   ", "--", "a,b,,c", "3-1", "held-out:-1",
)  # fmt: skip

PRELOADED = (
    "numpy", "pyarrow.parquet", "matplotlib.pyplot", "aiohttp.web", "rich.console", "yaml",
    "twin.kernel.jit", "twin.sim.runner", "twin.replay.run", "twin.replay.calibrate",
    "twin.fill.run", "twin.eventlog.report", "twin.gateway.app", "twin.rl",
    "twin.arena.lineup", "twin.bound", "twin.sweep.execute", "twin.cli.main",
    "twin.forecast.forecast", "twin.forecast.backtest", "twin.rounds.rounds", "twin.watch.server",
)  # fmt: skip

# A line that makes each command valid, so a hostile value reaches the command itself.
BASE: dict[str, list[str]] = {
    "export": ["run"],
    "report": ["run"],
    "compare": ["--policy", "greedy", "--scenario", "default"],
    "sweep": ["--out", "sweep-out", "--scenario", "default"],
    "kernel evaluate": ["--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1"],
    "replay": ["--trace", TRACE],
    "calibrate": ["--trace", TRACE, "--out", "cal-out"],
    "trace generate": ["--jobs", "5", "--out", "gen.csv"],
    "trace-scenario": ["--trace", TRACE, "--name", "x"],
    "fill": ["--trace", str(OPENB / "openb_pod_list_default.csv"),
             "--cluster", str(OPENB / "openb_node_list_gpu_node.csv"), "--out", "fill-out",
             "--seeds", "42"],
    "play": ["--agents", "greedy,greedy", "--scenario", "market"],
    "arena": ["--scenario", "market", "--seeds", "1", "--agents", "greedy", "--workers", "1"],
    "arena merge": ["a_dir", "a_dir", "--out", "merged"],
    "bound": ["--scenario", "market", "--seeds", "1"],
    "families": ["market"],
    "train": ["--scenario", "market", "--generations", "1", "--population", "2", "--elite", "1"],
    "warm": ["status"],
    "bench": ["kernel", "--quick"],
    "serve": ["--port", "0"],
    "backtest": ["--trace", TRACE, "--gpus", "8", "--max-cuts", "2", "--samples", "2"],
    "forecast": ["--squeue", str(SAMPLES / "slurm_squeue.json"),
                 "--sinfo", str(SAMPLES / "slurm_sinfo.json"), "--samples", "3"],
    "watch": ["--slurm-dir", str(SAMPLES / "slurm-22.05" / "itp-cluster10-0004"), "--port", "0",
              "--polls", "1", "--samples", "3"],
}  # fmt: skip


def _commands() -> dict[str, argparse.ArgumentParser]:
    """Every (sub)command that takes arguments of its own, by its words (`kernel evaluate`)."""
    out: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, words: list[str]) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if words:
            out[" ".join(words)] = parser
        for name, child in subs[0].choices.items() if subs else ():
            walk(child, [*words, name])

    walk(build_parser(), [])
    return out


COMMANDS = _commands()


def _flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    skip = (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)
    return [a for a in parser._actions if not isinstance(a, skip)]


@st.composite
def command_lines(draw: st.DrawFn, command: str) -> list[str]:
    """The command's base line with one to three of its flags (or positionals) set hostile."""
    base = list(BASE.get(command, []))
    actions = _flags(COMMANDS[command])
    extra: list[str] = []
    if not actions:  # a command without arguments gets a stray one
        return [*command.split(), *base, draw(st.sampled_from(HOSTILE))]
    for action in draw(st.lists(st.sampled_from(actions), min_size=1, max_size=3, unique=True)):
        choices = tuple(str(c) for c in action.choices or () if c not in DAEMONS)
        value = draw(st.sampled_from(HOSTILE + choices))
        if not action.option_strings:  # a positional: the base gives it first
            positions = [i for i, word in enumerate(base) if not word.startswith("-")]
            if positions:
                base[draw(st.sampled_from(positions))] = value
            continue
        flag = action.option_strings[-1]
        if action.nargs == 0:
            extra.append(flag)
        elif flag in base:
            base[base.index(flag) + 1] = value
        else:
            extra += [flag, value]
    return [*command.split(), *base, *extra]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A directory holding what the hostile values name, and a finished run to export."""
    where = tmp_path_factory.mktemp("argv")
    (where / "existing.txt").write_text("a file, not a directory\n")
    (where / "a_dir").mkdir()
    (where / "latin1.yaml").write_bytes(b"kind: cluster\nname: caf\xe9\n")
    home = os.getcwd()
    os.chdir(where)
    try:
        done = run_forked(["run", "--scenario", "default", "--out", "run"], deadline_s=60, env={})
        assert done.code == 0, done.stderr
        # Load what the commands load, here, once: each forked line starts with it imported,
        # so the deadline's Ctrl-C lands in the command, not in a slow machine's import of a
        # C extension (which can turn it into an ImportError).
        for module in PRELOADED:
            importlib.import_module(module)
        for argv in (["kernel", "catalog"], ["scenarios"]):  # the kernel's compiled code too
            run_forked(argv, deadline_s=60, env={})

        yield where
    finally:
        os.chdir(home)
        for socket in (where / "warm.sock", *(where / v for v in HOSTILE if v)):
            run_forked(["warm", "stop", "--socket", str(socket)], deadline_s=10, env={})


def _reset(where: Path) -> None:
    """Each line starts from the same directory: what a previous line wrote goes."""
    keep = {"existing.txt", "a_dir", "latin1.yaml", "run"}
    for entry in where.iterdir():
        if entry.name not in keep:
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    (where / "existing.txt").write_text("a file, not a directory\n")
    for entry in (where / "a_dir").iterdir():
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def _verdict(done: Finished) -> str | None:
    """What is wrong with how a line ended, or None."""
    if "Traceback (most recent call last)" in done.stderr:
        return "a traceback"
    if done.code not in EXITS:
        return f"exit {done.code}"
    if done.code == 2 and not any(
        line.startswith(("twin: error:", "twin ")) and "error:" in line
        for line in done.stderr.splitlines()
    ):
        return "exit 2 without a one-line error"
    return None


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_no_command_line_gets_a_traceback(command: str, scratch: Path) -> None:
    env = {SOCKET_ENV: str(scratch / "warm.sock"), "COLUMNS": "80"}

    @settings(max_examples=12, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])  # fmt: skip
    @given(argv=command_lines(command))
    def check(argv: list[str]) -> None:
        _reset(scratch)
        done = run_forked(argv, deadline_s=DEADLINE_S, env=env)
        wrong = _verdict(done)
        assert wrong is None, f"twin {' '.join(argv)!r}: {wrong}\n{done.stderr[-3000:]}"

    check()
