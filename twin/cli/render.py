"""Human-readable tables for summaries, and `--json`: one machine-readable object on stdout."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson
from rich import box
from rich import table as rich_table
from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from twin.schema.summary import AgenticSummary, Quantiles, Summary

FOLD_WIDTH = 24  # a column this wide holds any number the tables show; a longer word may fold


class Table(rich_table.Table):
    """A rich table that never splits a word or a number, at 80 columns or in a pipe. Laid out
    as rich lays it where that keeps every word whole; else, where every column can have its
    longest word, cells wrap by word, and what is left goes to the columns that need least to
    be whole (one word too long for any width, a path, folds); where even that does not fit,
    the borders go (a compact table); and below that, the table is printed vertically, a block
    of `column  value` lines for each row."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if (
            self.columns
            and not self._whole_words(console, options)
            and not self._fits(console, options)
        ):
            self.box, self.show_edge, self.padding = box.SIMPLE_HEAD, False, (0, 0)
            if not self._fits(console, options):
                yield from self._vertical()
                return
        yield from super().__rich_console__(console, options)

    def _whole_words(self, console: Console, options: ConsoleOptions) -> bool:
        """Whether rich's own widths give every column at least its longest word."""
        width = options.max_width - self._extra_width
        widths = self._calculate_column_widths(console, options.update_width(width))
        least = [self._measure_column(console, options, c).minimum for c in self.columns]
        return all(w >= m for w, m in zip(widths, least, strict=True))

    def _fits(self, console: Console, options: ConsoleOptions) -> bool:
        """Whether every column can have its longest word; if so, fix the columns' widths so."""
        available = options.max_width - self._extra_width
        ranges = [self._measure_column(console, options, column) for column in self.columns]
        least = [r.minimum for r in ranges]
        widest = max(range(len(least)), key=least.__getitem__)
        others = [r for k, r in enumerate(ranges) if k != widest]
        room = available - sum(r.minimum for r in others)
        if least[widest] > room >= FOLD_WIDTH:  # one long word (a path) folds; the rest is whole
            whole = available - sum(r.maximum for r in others)
            least[widest] = whole if whole >= FOLD_WIDTH else room
        if sum(least) > available:
            return False
        more = [max(r.maximum - width, 0) for r, width in zip(ranges, least, strict=True)]
        spare, shares = available - sum(least), [0] * len(more)
        for k in sorted(range(len(more)), key=more.__getitem__):  # the narrow ones whole first
            shares[k] = min(more[k], spare)
            spare -= shares[k]
        for column, width, share in zip(self.columns, least, shares, strict=True):
            column.width = width + share - self._get_padding_width(column._index)
            column.overflow = "fold"  # only a word longer than any width can be (a long path)
        return True

    def _vertical(self) -> RenderResult:
        """Each row as `column  value` lines (keys alone where the table has no header)."""
        if self.title:
            yield Text(str(self.title), style="bold")
        names = [Text.from_markup(str(c.header)).plain.replace("\n", " ") if c.header else ""
                 for c in self.columns]  # fmt: skip
        cells = [list(c.cells) for c in self.columns]
        for row in range(self.row_count):
            block = rich_table.Table.grid(padding=(0, 2))
            block.add_column(style="bold", no_wrap=True)
            block.add_column(overflow="fold")
            for name, column in zip(names, cells, strict=True):
                block.add_row(name, column[row])
            yield block
            if row < self.row_count - 1:
                yield Text("")


def _s(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 3600:
        return f"{value / 3600:.2f} h"
    if value >= 60:
        return f"{value / 60:.1f} min"
    return f"{value:.1f} s"


def _q(q: Quantiles) -> str:
    return f"p50 {_s(q.p50)} · p90 {_s(q.p90)} · p99 {_s(q.p99)}"


def print_summary(summary: Summary, console: Console) -> None:
    """The episode at a glance, then pools and tenants."""
    head = Table(title=f"{summary.scenario}  (seed {summary.seed})", show_header=False)
    head.add_column(style="bold")
    head.add_column()
    head.add_row("ended", f"{summary.end_reason} at t = {_s(summary.end_t_s)}")
    if summary.steps is not None:
        head.add_row("steps", str(summary.steps))
    j = summary.jobs
    if j.arrived:
        head.add_row(
            "actions" if summary.agentic is not None else "jobs",
            f"{j.arrived} arrived · {j.finished} finished · {j.failed} failed · "
            f"{j.unfinished} unfinished · {j.interrupted} interruptions"
            + (f" · {j.present_at_start} running at the trace's start (no completion time)"
               if j.present_at_start else ""),
        )  # fmt: skip
    if summary.completion_s.count:
        head.add_row("completion time", _q(summary.completion_s))
        head.add_row("queueing delay", _q(summary.queueing_delay_s))
    if summary.failed_queueing_delay_s is not None:
        head.add_row("delay, failed jobs", _q(summary.failed_queueing_delay_s))
    head.add_row("cost", f"${summary.cost_usd:,.2f}")
    head.add_row("SLA penalties", f"${summary.sla_usd:,.2f}")
    head.add_row("reward", f"{summary.reward:,.2f}")
    head.add_row("score", f"{summary.score:.3f}")
    head.add_row("events · decisions", f"{summary.events:,} · {summary.decisions:,}")
    console.print(head)
    if summary.pools:
        pools = Table(title="pools")
        for col in ("pool", "held GPU-h", "busy GPU-h", "utilisation", "cost $"):
            pools.add_column(col, justify="right" if col != "pool" else "left")
        for p in summary.pools:
            util = "-" if p.utilisation is None else f"{p.utilisation:.1%}"
            pools.add_row(
                p.name, f"{p.held_gpu_h:,.1f}", f"{p.busy_gpu_h:,.1f}", util, f"{p.cost_usd:,.2f}"
            )
        console.print(pools)
    if summary.agentic is not None:
        print_agentic(summary.agentic, console)
        return
    if summary.tenants and summary.jobs.arrived:
        tenants = Table(title="tenants")
        traded = any(t.traded_usd for t in summary.tenants)
        cols = ("tenant", "jobs", "finished", "cost $", "SLA $", "value $",
                *(("traded $",) if traded else ()), "reward $")  # fmt: skip
        for col in cols:
            tenants.add_column(col, justify="right" if col != "tenant" else "left")
        for t in summary.tenants:
            tenants.add_row(
                t.name,
                str(t.jobs_arrived),
                str(t.jobs_finished),
                f"{t.cost_usd:,.2f}",
                f"{t.sla_usd:,.2f}",
                f"{t.value_usd:,.2f}",
                *((f"{t.traded_usd:,.2f}",) if traded else ()),
                f"{t.reward_usd:,.2f}",
            )
        console.print(tenants)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def print_agentic(a: AgenticSummary, console: Console) -> None:
    """Action completion times by kind, RL steps and external resources."""
    acts = Table(title=f"actions under {a.orchestration} orchestration (completion time, s)")
    for col in ("action", "count", "mean", "p50", "p99", "max"):
        acts.add_column(col, justify="right" if col != "action" else "left")
    for name, q in [("all", a.act_s), *a.act_by_action.items()]:
        acts.add_row(name, f"{q.count:,}", _ms(q.mean), _ms(q.p50), _ms(q.p99), _ms(q.max))
    console.print(acts)
    steps = Table(title="RL steps (s)")
    for col in ("", "count", "mean", "p50", "max"):
        steps.add_column(col, justify="right" if col else "left")
    for name, q in (("step", a.step_s), ("rollout", a.rollout_s), ("trajectory", a.trajectory_s)):
        steps.add_row(name, f"{q.count:,}", _ms(q.mean), _ms(q.p50), _ms(q.max))
    console.print(steps)
    res = Table(title="external resources")
    for col in ("resource", "capacity", "held unit-h", "busy unit-h", "utilisation", "cost $"):
        res.add_column(col, justify="right" if col != "resource" else "left")
    for r in a.resources:
        util = "-" if r.utilisation is None else f"{r.utilisation:.1%}"
        res.add_row(r.resource, f"{r.capacity:,.0f}", f"{r.held_unit_h:,.1f}",
                    f"{r.busy_unit_h:,.1f}", util, f"{r.cost_usd:,.2f}")  # fmt: skip
    console.print(res)


def console_for(args: argparse.Namespace) -> Console:
    """Where a command's tables and messages go: stderr under `--json` (stdout is the JSON's)."""
    return Console(stderr=True) if getattr(args, "json", False) else Console()


def print_json(command: str, **parts: Any) -> None:
    """`{"command": ..., **parts}` as one line on stdout (models as their JSON, NaN as null)."""

    def plain(value: Any) -> Any:
        dump = getattr(value, "model_dump", None)
        if dump is not None:
            return dump(mode="json")
        raise TypeError(f"{type(value).__name__} is not JSON")

    line = orjson.dumps({"command": command, **parts}, default=plain,
                        option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)  # fmt: skip
    sys.stdout.buffer.write(line + b"\n")
    sys.stdout.flush()
