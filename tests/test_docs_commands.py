"""Every `twin` command the docs show (in their console blocks and inline) is one the CLI takes
as written: its subcommand, flags and values parse with the real parser, from the repository's
root as the docs assume; and those that finish in seconds (`run`, `bound`, `replay`, `kernel`)
run, in a scratch copy of the paths they write, and exit 0. (The README's tour also runs each of
its commands and compares the output: tests/test_readme.py; the docs' longer runs, the arena
and training, are parsed, not run: tests/test_arena.py and tests/test_training.py run them
smaller.)"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from twin.cli.main import build_parser, innermost

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PLACEHOLDER = re.compile(r"[<>|\[\]…]|\.\.\.|\bNAME\b|\bFILE\b|\bDIR\b|\bN\b|=X\b|\bURL\b")
INLINE = re.compile(r"`(twin [^`]+)`")
QUICK = {"run", "bound", "replay", "kernel", "scenarios", "schema"}  # commands of seconds


def _commands() -> list[tuple[str, str]]:
    """(where, command) for each concrete command in the docs."""
    out = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in re.findall(r"```console\n(.*?)```", text, flags=re.S):
            joined = block.replace("\\\n", " ")
            out += [(doc.name, line[2:].strip()) for line in joined.splitlines()
                    if line.startswith("$ twin ")]  # fmt: skip
        out += [(doc.name, c) for c in INLINE.findall(text)  # a line, not a command's name
                if " --" in c and not c.split()[-1].startswith("--")]  # nor a flag's  # fmt: skip
    concrete = []
    for where, shown in out:
        command = shown.split(" | ")[0].split(" > ")[0].strip()
        words = command.split()
        if len(words) < 2 or PLACEHOLDER.search(command) or not words[1][0].isalpha():
            continue  # a usage line or a sketch with placeholders, not a command to run
        concrete.append((where, command))
    return concrete


COMMANDS = _commands()


def test_the_docs_show_commands_to_check() -> None:
    assert len(COMMANDS) >= 8
    assert {where for where, _ in COMMANDS} >= {"arena.md", "training.md"}


@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[f"{w}: {c}" for w, c in COMMANDS])
def test_a_documented_command_parses_as_written(
    where: str, command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    parser = build_parser()
    argv = shlex.split(command)[1:]
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            innermost(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    except SystemExit as exc:
        if exc.code != 0:  # `--help` and `--version` are fine
            pytest.fail(f"{where}: `{command}` does not parse: {capsys.readouterr().err}")


# Documented commands another test runs as written and holds to what the docs say of it.
RUN_ELSEWHERE = {
    "twin bound --scenario family:market --seeds held-out:20": "tests/test_families.py",
}
QUICK_COMMANDS = [(w, c) for w, c in COMMANDS
                  if shlex.split(c)[1] in QUICK and c not in RUN_ELSEWHERE]  # fmt: skip


def test_some_documented_commands_are_quick_enough_to_run() -> None:
    assert len(QUICK_COMMANDS) >= 2
    documented = {c for _, c in COMMANDS}
    for command, test in RUN_ELSEWHERE.items():  # still documented, and still run there
        assert command in documented
        call = ", ".join(f'"{w}"' for w in shlex.split(command)[1:])
        assert call in (ROOT / test).read_text(), f"{test} no longer runs `{command}`"


@pytest.mark.parametrize(("where", "command"), QUICK_COMMANDS,
                         ids=[f"{w}: {c}" for w, c in QUICK_COMMANDS])  # fmt: skip
def test_a_quick_documented_command_runs_as_written(where: str, command: str,
                                                    tmp_path: Path) -> None:  # fmt: skip
    argv = shlex.split(command)[1:]
    for flag in ("--out",):  # what it writes goes to a scratch directory, not the checkout
        if flag in argv:
            argv[argv.index(flag) + 1] = str(tmp_path / "out")
    done = subprocess.run([sys.executable, "-m", "twin", *argv], cwd=ROOT, capture_output=True,
                          text=True, check=False, timeout=300)  # fmt: skip
    assert done.returncode == 0, f"{where}: `{command}`: {done.stderr[-2000:]}"
