"""The figures docs/benchmarks.md quotes, and the guard that flags a run falling well behind them.

A regression is caught where it is made only if the benchmark that shows it says so: each
quoted figure names the benchmark's JSON key, the figure as the docs give it, and which way is
better. A run more than `TOLERANCE` worse than the quoted figure prints a flag line and lists
the key under `regressions` in its JSON. The docs' rows carry the same numbers (a test holds
them together), so re-measuring the docs moves the guard with them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from twin.bench.harness import Result

TOLERANCE = 0.25
"""How much worse than the quoted figure a run may be before it is flagged (the machine's
speed drifts by tens of percent; a change that costs more than this is not drift)."""


@dataclass(frozen=True)
class Quoted:
    key: str  # the benchmark's JSON figure
    figure: float  # as docs/benchmarks.md quotes it (a range's worse end)
    better: Literal["higher", "lower"]
    docs: str  # the text of the docs' row that quotes it (a range's dash is an en dash)

    def worse_by(self, measured: float) -> float:
        """How much worse than quoted `measured` is, as a share of the quoted figure (<= 0:
        as good or better)."""
        if self.better == "higher":
            return (self.figure - measured) / self.figure
        return (measured - self.figure) / self.figure


QUOTED: dict[str, tuple[Quoted, ...]] = {
    "gateway": (
        Quoted("messages_per_s", 15_800, "higher", "15.8\u201318.2 k"),
        Quoted("round_p99_ms", 19.8, "lower", "17.2\u201319.8"),
    ),
    "rl": (Quoted("market_steps_per_s", 1_100, "higher", "1.1\u20131.7 k"),),
}
"""Per benchmark, the figures the guard checks (the 64-agent gateway and `Market-v0`, where
regressions went unnoticed before)."""


def guard(which: str, result: Result, *, quick: bool) -> None:
    """Flag, in `result`'s lines and figures, each quoted figure the run fell more than
    `TOLERANCE` behind (not in `--quick`, whose few repetitions are a smoke test)."""
    quoted = QUOTED.get(which, ())
    if quick or not quoted:
        return
    flagged = []
    for q in quoted:
        measured = result.figures.get(q.key)
        if not isinstance(measured, int | float):
            continue
        worse = q.worse_by(float(measured))
        if worse > TOLERANCE:
            flagged.append(q.key)
            result.lines.append(
                f"  REGRESSION? {which} {q.key} = {measured:,} is {worse:.0%} worse than the "
                f"{q.figure:,} docs/benchmarks.md quotes (flagged beyond {TOLERANCE:.0%}; "
                "rerun on a quiet machine, then bisect)"
            )
    result.figures["regressions"] = ",".join(flagged)
