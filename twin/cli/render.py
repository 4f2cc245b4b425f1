"""Human-readable tables for summaries, and `--json`: one machine-readable object on stdout."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson
from rich import table as rich_table
from rich.console import Console, ConsoleOptions, RenderResult

from twin.schema.summary import AgenticSummary, Quantiles, Summary


class Table(rich_table.Table):
    """A rich table that never cuts a value, at 80 columns or in a pipe: a cell too wide for
    its column folds onto more lines instead of ending in an ellipsis."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for column in self.columns:
            column.overflow = "fold"
        yield from super().__rich_console__(console, options)


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
            f"{j.unfinished} unfinished · {j.interrupted} interruptions",
        )
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
