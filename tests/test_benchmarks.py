"""The benchmarks' guard against regressions, and what the gateway's figures rest on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from twin.bench.harness import Result
from twin.bench.quoted import QUOTED, TOLERANCE, Quoted, guard
from twin.bench.server import free_port, start_serve

ROOT = Path(__file__).resolve().parents[1]


def _result(**figures: float) -> Result:
    return Result(lines=["a benchmark's own line"], figures=dict(figures))


def test_a_run_well_behind_a_quoted_figure_is_flagged_in_its_lines_and_json() -> None:
    gateway = {q.key: q for q in QUOTED["gateway"]}
    rate, p99 = gateway["messages_per_s"], gateway["round_p99_ms"]
    slow = _result(messages_per_s=rate.figure * 0.7, round_p99_ms=p99.figure * 1.3)
    guard("gateway", slow, quick=False)
    assert slow.figures["regressions"] == "messages_per_s,round_p99_ms"
    flags = [line for line in slow.lines if "REGRESSION?" in line]
    assert len(flags) == 2
    assert "30% worse" in flags[0]
    assert "docs/benchmarks.md" in flags[0]


def test_a_run_within_the_tolerance_or_better_is_not_flagged() -> None:
    gateway = {q.key: q for q in QUOTED["gateway"]}
    rate, p99 = gateway["messages_per_s"], gateway["round_p99_ms"]
    for figures in (
        {
            "messages_per_s": rate.figure * (1 - TOLERANCE + 0.01),
            "round_p99_ms": p99.figure * (1 + TOLERANCE - 0.01),
        },
        {"messages_per_s": rate.figure * 3, "round_p99_ms": p99.figure / 3},
    ):
        run = _result(**figures)
        guard("gateway", run, quick=False)
        assert run.figures["regressions"] == ""
        assert run.lines == ["a benchmark's own line"]


def test_quick_runs_and_unguarded_benchmarks_are_left_as_they_are() -> None:
    quick = _result(messages_per_s=1.0, round_p99_ms=1e6)
    guard("gateway", quick, quick=True)
    assert "regressions" not in quick.figures
    other = _result(jobs_per_s=1.0)
    guard("sim", other, quick=False)
    assert "regressions" not in other.figures


def test_worse_is_measured_in_the_direction_that_is_worse() -> None:
    assert Quoted("x", 100, "higher", "").worse_by(60) == pytest.approx(0.4)
    assert Quoted("x", 100, "higher", "").worse_by(160) < 0
    assert Quoted("x", 10, "lower", "").worse_by(15) == pytest.approx(0.5)
    assert Quoted("x", 10, "lower", "").worse_by(5) < 0


def test_the_docs_quote_each_guarded_figure_in_its_benchmark_s_row() -> None:
    rows = (ROOT / "docs" / "benchmarks.md").read_text().splitlines()
    for which, quoted in QUOTED.items():
        for q in quoted:
            assert any(row.startswith(f"| {which}") and q.docs in row for row in rows), (
                f"docs/benchmarks.md has no {which} row quoting {q.docs!r} for {q.key}"
            )


def test_the_gateway_serves_only_once_the_compiled_kernel_is_loaded(tmp_path: Path) -> None:
    """A round never stalls on the kernel's load nor shares the interpreter with it: the
    server loads it before it answers anything (its socket listens from the start)."""
    output = tmp_path / "serve.log"
    proc = start_serve(free_port(), "operator-token-for-the-kernel-test", output)
    try:
        records = [json.loads(line) for line in output.read_text().splitlines()
                   if line.startswith("{")]  # fmt: skip
        starting = [r for r in records if r.get("event") == "gateway_starting"]
        assert starting, output.read_text()
        assert starting[0]["kernel_loaded"] is True
    finally:
        proc.terminate()
        proc.wait(timeout=15)
