"""The code's shape, as the layout promises it: kinds told apart in one place, event records
read by field name, classes with one job, short functions."""

from __future__ import annotations

import ast
import re
import statistics
import tomllib
from collections.abc import Iterator
from pathlib import Path

from twin.sim.kinds import KINDS

ROOT = Path(__file__).resolve().parent.parent
KIND_CLASSES = {"ClusterScenario", "GpuClusterScenario", "AgenticRlScenario", "ClusterModel",
                "StepModel", "AgenticModel"}  # fmt: skip
RECORD_NAMES = {"rec", "record", "event", "ev"}
MAX_METHODS = 20


def sources(*packages: str) -> Iterator[tuple[Path, ast.Module]]:
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT), ast.parse(path.read_text())


def kind_switches(tree: ast.Module) -> Iterator[int]:
    """Lines comparing with a scenario kind's name, or asking for a kind's class."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                for value in ast.walk(side):
                    if isinstance(value, ast.Constant) and value.value in KINDS:
                        yield node.lineno
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance":
            named = {getattr(n, "id", getattr(n, "attr", "")) for n in ast.walk(node.args[1])}
            if named & KIND_CLASSES:
                yield node.lineno


def test_kinds_are_told_apart_only_in_the_kinds_registry() -> None:
    found = [f"{path}:{line}" for path, tree in sources("twin", "twin_agents")
             for line in kind_switches(tree) if path != Path("twin/sim/kinds.py")]  # fmt: skip
    assert found == []


def test_event_records_are_read_by_field_name() -> None:
    found = [
        f"{path}:{node.lineno}"
        for path, tree in sources("twin", "twin_agents", "tests")
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript)
        and getattr(node.value, "id", "") in RECORD_NAMES
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, int)
    ]
    assert found == []


def test_no_class_has_more_than_twenty_methods() -> None:
    big = {
        f"{path}:{node.name}": n
        for path, tree in sources("twin", "twin_agents")
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and (n := sum(isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef) for b in node.body))
        > MAX_METHODS
    }
    assert big == {}


def test_the_median_function_is_short() -> None:
    lengths = [
        node.end_lineno - node.lineno + 1
        for _, tree in sources("twin", "twin_agents")
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno
    ]
    assert statistics.median(lengths) <= 7


def test_the_switch_finder_sees_a_comparison_and_an_isinstance() -> None:
    code = "if s.kind == 'gpucluster':\n    pass\nok = isinstance(m, ClusterModel)\n"
    assert list(kind_switches(ast.parse(code))) == [1, 3]


def layout_sections() -> dict[str, str]:
    """docs/layout.md's tree, by top-level entry (`twin/sim/`, `twin_agents/`, `twin/errors.py`):
    the text of its lines."""
    text = (ROOT / "docs" / "layout.md").read_text()
    tree = text.split("```\n", 2)[1]
    sections: dict[str, str] = {}
    head = ""
    for line in tree.splitlines():
        if line and not line[0].isspace():
            head = line.split()[0]
        sections[head] = sections.get(head, "") + line + "\n"
    return sections


def test_the_layout_names_every_module_under_its_package() -> None:
    sections = layout_sections()
    unnamed = []
    for package in ("twin", "twin_agents"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if path.name in ("__init__.py", "__main__.py"):
                continue
            if len(rel.parts) == 2 and rel.parts[0] == "twin":  # a module of twin itself
                if str(rel) not in sections:
                    unnamed.append(str(rel))
                continue
            depth = 1 if rel.parts[0] == "twin_agents" else 2
            section = sections.get("/".join(rel.parts[:depth]) + "/", "")
            nested = all(f"{part}/" in section for part in rel.parts[depth:-1])
            if not (nested and re.search(rf"(?<![\w/]){re.escape(path.name)}\b", section)):
                unnamed.append(str(rel))
    assert not unnamed, f"docs/layout.md does not name {unnamed} under their package"


def test_pyproject_lists_every_package_and_the_traces_it_installs() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for package in ("twin", "twin_agents")
        for init in (ROOT / package).rglob("__init__.py")
    }
    assert set(setuptools["packages"]) == found | {"twin.traces"}
    assert setuptools["package-dir"] == {"twin.traces": "traces"}
