"""The README is the front door and tells the truth: every command of its tour runs as printed
and prints what the page shows (`...` stands for any lines), with the twin a pip user gets (its
wheel in a new environment) from a directory with nothing in it, its Python runs, every link in
it and in docs/ leads to a file, the documented `twin serve` usage names exactly the flags the
command takes, and nothing reads the world outside the repository."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.wheel import Installed

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
README = ROOT / "README.md"
TOUR = ("## A short tour", "## Where to read on")
WIDTH = "80"  # the terminal width the page's tables were printed at


def tour_blocks(language: str) -> list[str]:
    text = README.read_text()
    start, end = text.index(TOUR[0]), text.index(TOUR[1])
    return re.findall(rf"```{language}\n(.*?)```", text[start:end], re.S)


@dataclass
class Command:
    line: str
    shown: list[str]

    def __str__(self) -> str:
        return self.line


def commands() -> list[Command]:
    """Each `$ ` command of the tour (with its `\\` continuations) and the output shown."""
    out: list[Command] = []
    for block in tour_blocks("console"):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            assert lines[i].startswith("$ "), f"expected a command: {lines[i]!r}"
            line = lines[i][2:]
            while line.endswith("\\"):
                i += 1
                line = line[:-1] + " " + lines[i].strip()
            i += 1
            shown = []
            while i < len(lines) and not lines[i].startswith("$ "):
                shown.append(lines[i].rstrip())
                i += 1
            out.append(Command(line, shown))
    return out


def matches(shown: list[str], printed: list[str]) -> bool:
    """Whether `printed` is `shown` line for line, a `...` line standing for any lines."""
    if not shown:
        return not printed
    if shown[0] == "...":
        return any(matches(shown[1:], printed[i:]) for i in range(len(printed) + 1))
    return bool(printed) and printed[0] == shown[0] and matches(shown[1:], printed[1:])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty directory outside the repository: the traces the tour names ship in the wheel."""
    return tmp_path_factory.mktemp("tour")


def run(line: str, cwd: Path, installed: Installed) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TWIN_TRACES", "PYTHONPATH")}
    env.update(COLUMNS=WIDTH, PATH=f"{installed.bin}:{os.environ['PATH']}")
    return subprocess.run(["bash", "-c", line.replace(".venv/bin/", f"{installed.bin}/")],
                          cwd=cwd, env=env, capture_output=True, text=True, check=False,
                          timeout=600)  # fmt: skip


def test_the_tour_is_the_readme_s_heart_and_the_page_stays_short() -> None:
    assert len(README.read_text().splitlines()) <= 300
    assert len(commands()) >= 7
    assert README.read_text().startswith("# cluster twin\n")


def test_every_tour_command_runs_as_printed_and_prints_what_is_shown(
    workdir: Path, installed: Installed
) -> None:
    """In order, as a reader would: later commands read what earlier ones wrote."""
    for command in commands():
        result = run(command.line, workdir, installed)
        printed = [line.rstrip() for line in (result.stdout + result.stderr).splitlines()]
        refused = bool(command.shown) and command.shown[0].startswith("twin: error:")
        assert result.returncode == (2 if refused else 0), f"{command}\n{result.stderr}"
        if command.shown:
            assert matches(command.shown, printed), (
                f"{command}\n--- shown\n" + "\n".join(command.shown) + "\n--- printed\n"
                + "\n".join(printed)
            )  # fmt: skip


def test_the_tour_s_python_runs(workdir: Path, installed: Installed) -> None:
    for block in tour_blocks("python"):
        result = subprocess.run([installed.bin / "python", "-c", block], cwd=workdir,
                                capture_output=True, text=True, check=False,
                                timeout=300)  # fmt: skip
        assert result.returncode == 0, result.stderr


def test_the_matcher_holds_lines_in_order_and_reads_dots_as_any_lines() -> None:
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert matches(["...", "c", "..."], ["a", "b", "c", "d"])
    assert not matches(["a", "d"], ["a", "b", "d"])
    assert not matches(["a", "...", "x"], ["a", "b", "c"])
    assert not matches(["b", "a"], ["a", "b"])


def documents() -> list[Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "traces" / "README.md"]


@pytest.mark.parametrize("page", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_leads_to_a_file_of_the_project(page: Path) -> None:
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text()):
        if re.match(r"[a-z]+:", target):  # a web address
            continue
        assert (page.parent / target).exists(), f"{page.name}: {target}"


def test_nothing_in_the_project_reads_or_names_what_lies_beside_it() -> None:
    beside = "../" + "shared"  # spelled in two, so that this file does not name it
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()  # fmt: skip
    for name in tracked:
        path = ROOT / name
        if path.suffix in {".py", ".md", ".yml", ".yaml", ".toml", ".sh", ""} and path.is_file():
            assert beside not in path.read_text(errors="replace"), name


def test_the_documented_serve_usage_names_exactly_the_flags_twin_serve_takes() -> None:
    gateway = (ROOT / "docs" / "gateway.md").read_text()
    usage = re.search(r"```text\n(twin serve .*?)```", gateway, re.S)
    assert usage is not None
    help_text = subprocess.run([str(BIN / "twin"), "serve", "--help"], capture_output=True,
                               text=True, check=True).stdout  # fmt: skip
    flags = set(re.findall(r"--[a-z-]+", help_text)) - {"--help"}
    assert set(re.findall(r"--[a-z-]+", usage[1])) == flags
