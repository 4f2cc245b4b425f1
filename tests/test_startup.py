"""A command answers at once: building the CLI and importing the schema or the agents package
load none of the heavy packages; each subcommand imports what it needs when it runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("numpy", "aiohttp", "pydantic", "simpy", "rich", "gymnasium", "twin.kernel", "asyncio")


def loaded_after(code: str) -> list[str]:
    """The heavy packages a fresh interpreter has imported after running `code`."""
    probe = (
        f"{code}\nimport sys, json\nprint(json.dumps(sorted(set(sys.modules) & {set(HEAVY)!r})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    loaded: list[str] = json.loads(result.stdout.splitlines()[-1])
    return loaded


def test_building_the_cli_imports_nothing_heavy() -> None:
    assert loaded_after("from twin.cli.main import build_parser; build_parser()") == []


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["scenarios"]])
def test_the_quick_commands_import_nothing_heavy_but_what_they_print_with(argv: list[str]) -> None:
    code = f"import contextlib, io\nfrom twin.cli.main import main\n" \
           f"with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n" \
           f"    main({argv!r})"  # fmt: skip
    assert set(loaded_after(code)) <= {"rich"}


@pytest.mark.parametrize("module", ["twin.schema", "twin.schema.vocabulary", "twin_agents"])
def test_the_schema_and_the_agents_package_stay_light(module: str) -> None:
    assert loaded_after(f"import {module}") == []


def test_the_wire_schema_needs_pydantic_but_not_the_server_or_the_kernel() -> None:
    assert loaded_after("import twin.schema.wire") == ["pydantic"]
