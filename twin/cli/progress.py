"""A progress bar for long runs on a terminal: done out of total, rate and time left.
Piped or redirected output gets none (the bar would only be noise in a log)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Task
    from rich.text import Text

    from twin.schema.scenario import Scenario


class Advance(Protocol):
    def __call__(self, completed: float, note: str = "") -> None:
        """`completed` so far, and a word on what is under way (say, how many are running)."""


@contextmanager
def progress_bar(console: Console, what: str, total: float | None,
                 unit: str) -> Iterator[Advance | None]:  # fmt: skip
    """`update(done[, note])` for a bar of `total` (None: unknown) `unit`s; None when not a
    terminal."""
    if not console.is_terminal:
        yield None
        return
    from rich.progress import (
        BarColumn,
        Progress,
        ProgressColumn,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task: Task) -> Text:
            speed = task.finished_speed or task.speed
            return Text("" if speed is None else f"{speed:,.0f} {unit}/s", style="cyan")

    done = TextColumn("{task.completed:,.0f}" + (f" of {total:,.0f}" if total else "") + f" {unit}")
    columns = (TextColumn(what), BarColumn(bar_width=16), TaskProgressColumn(), done, Rate(),
               TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
               TextColumn("{task.fields[note]}"))  # fmt: skip
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(what, total=total, note="")

        def advance(completed: float, note: str = "") -> None:
            bar.update(task, completed=completed, note=note)

        yield advance


def horizon_h(scenario: Scenario) -> float | None:
    """How far a run goes in virtual hours, where the scenario says (else it runs until drained)."""
    from twin.sim.kinds import kind_of

    horizon_s = kind_of(scenario).horizon_s(scenario)
    return None if horizon_s is None else horizon_s / 3600
