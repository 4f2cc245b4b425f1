"""The code's shape, as the layout promises it: kinds told apart in one place, event records
read by field name, classes with one job, short functions."""

from __future__ import annotations

import ast
import statistics
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
    found = [f"{path}:{line}" for path, tree in sources("twin", "agents")
             for line in kind_switches(tree) if path != Path("twin/sim/kinds.py")]  # fmt: skip
    assert found == []


def test_event_records_are_read_by_field_name() -> None:
    found = [
        f"{path}:{node.lineno}"
        for path, tree in sources("twin", "agents", "tests")
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
        for path, tree in sources("twin", "agents")
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and (n := sum(isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef) for b in node.body))
        > MAX_METHODS
    }
    assert big == {}


def test_the_median_function_is_short() -> None:
    lengths = [
        node.end_lineno - node.lineno + 1
        for _, tree in sources("twin", "agents")
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno
    ]
    assert statistics.median(lengths) <= 7


def test_the_switch_finder_sees_a_comparison_and_an_isinstance() -> None:
    code = "if s.kind == 'gpucluster':\n    pass\nok = isinstance(m, ClusterModel)\n"
    assert list(kind_switches(ast.parse(code))) == [1, 3]
