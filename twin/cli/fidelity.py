"""`twin calibrate`, `twin replay --params` and the placement what-if of `twin replay`."""

from __future__ import annotations

import argparse
import csv
import importlib.util
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from twin.errors import ConfigError
from twin.schema.vocabulary import (
    CALIBRATION_FIGURE,
    CALIBRATION_FILE,
    PLACEMENTS,
    WHAT_IF_FILE,
    Placement,
)

if TYPE_CHECKING:
    from twin.replay.run import ReplayOptions
    from twin.schema.summary import Calibration, ReplayReport, Summary

LABELS = {"delay_p50_s": "delay p50 s", "delay_p99_s": "p99 s", "ks_distance": "KS",
          "fragmentation": "frag.", "blocked_by_fragmentation": "frag. blocks",
          "utilisation": "util."}  # fmt: skip


def placements(text: str | None) -> list[Placement]:
    """The policies a `--placement` list names, checked."""
    if not text:
        return []
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if name not in PLACEMENTS:
            raise ConfigError(
                f"--placement: unknown policy {name!r}; allowed: {', '.join(PLACEMENTS)}"
            )
    return names  # type: ignore[return-value]  # checked against PLACEMENTS above


SPREAD_FIGURES = {"ks_distance": "KS", "delay_p50_s": "delay p50 s", "delay_p99_s": "p99 s",
                  "completion_p90_s": "completion p90 s", "unfinished": "unfinished"}  # fmt: skip


def seed_spread(trace: Path, options: ReplayOptions, seeds_text: str, *,
                as_json: bool = False) -> int:  # fmt: skip
    """Replay the trace on each seed and print, per fidelity figure, its median and range."""
    from rich.console import Console

    from twin.arena.lineup import parse_seeds
    from twin.cli.render import Table, print_json
    from twin.replay.run import replay
    from twin.replay.trace import Trace
    from twin.schema.summary import SeedSpread

    seeds = parse_seeds(seeds_text)
    opened = Trace(trace, options.reading)
    per_seed: dict[str, list[float]] = {name: [] for name in SPREAD_FIGURES}
    for seed in seeds:
        summary, report = replay(trace, replace(options, seed=seed), trace=opened)
        d = report.queueing_delay
        p50, p99 = _delay_p50_p99(summary, report)
        figures = {"ks_distance": None if d is None else d.ks_distance, "delay_p50_s": p50,
                   "delay_p99_s": p99, "completion_p90_s": summary.completion_s.p90,
                   "unfinished": float(summary.jobs.unfinished)}  # fmt: skip
        for name, value in figures.items():
            if value is not None:
                per_seed[name].append(float(value))
    rows = {name: SeedSpread.spread(values) for name, values in per_seed.items() if values}
    contiguous = seeds == list(range(seeds[0], seeds[0] + len(seeds)))
    named = f"{seeds[0]}-{seeds[-1]}" if contiguous and len(seeds) > 1 else seeds_text
    table = Table(title=f"{trace.name}, seeds {named}: median and range")
    for label in ("figure", "median", "least", "most"):
        table.add_column(label, justify="left" if label == "figure" else "right")
    for name, (median, least, most) in rows.items():
        table.add_row(SPREAD_FIGURES[name], *(_cell(round(v, 4)) for v in (median, least, most)))
    Console(stderr=as_json).print(table)
    if as_json:
        print_json("replay", seeds=seeds, per_seed=per_seed,
                   spread={k: dict(zip(("median", "least", "most"), v, strict=True))
                           for k, v in rows.items()})  # fmt: skip
    return 0


def what_if(
    trace: Path,
    options: ReplayOptions,
    policies: list[Placement],
    out: Path | None,
    *,
    as_json: bool = False,
) -> int:
    """Replay the trace with each placement policy and print (and write) them side by side;
    `as_json`: the rows as JSON on stdout too, the table on stderr."""
    from rich.console import Console

    from twin.cli.render import Table, print_json
    from twin.replay.run import replay
    from twin.replay.trace import Trace

    if options.cluster is None:
        raise ConfigError("a placement what-if needs a node inventory (--cluster)")
    rows = []
    opened = Trace(trace, options.reading)  # read once, handed to every policy's replay
    for policy in policies:
        params = options.params.model_copy(update={"placement": policy})
        summary, report = replay(trace, replace(options, params=params), trace=opened)
        figures = report.placement or {}
        held = sum(p.held_gpu_h for p in summary.pools)
        busy = sum(p.busy_gpu_h for p in summary.pools)
        d = report.queueing_delay
        p50, p99 = _delay_p50_p99(summary, report)
        rows.append({
            "placement": policy,
            "delay_p50_s": p50,
            "delay_p99_s": p99,
            "ks_distance": None if d is None else round(d.ks_distance, 4),
            "fragmentation": figures.get("fragmentation"),
            "blocked_by_fragmentation": figures.get("blocked_by_fragmentation"),
            "utilisation": round(busy / held, 4) if held else None,
        })  # fmt: skip
    table = Table(title=f"placement what-if: {trace.name} on {options.cluster.name}")
    for column in rows[0]:
        label = LABELS.get(column, column)
        table.add_column(label, justify="left" if column == "placement" else "right")
    for row in rows:
        table.add_row(*(_cell(v) for v in row.values()))
    console = Console(stderr=as_json)
    console.print(table)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        with (out / WHAT_IF_FILE).open("w", newline="") as stream:
            writer = csv.DictWriter(stream, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        console.print(f"wrote {out / WHAT_IF_FILE}")
    if as_json:
        print_json("replay", what_if=rows, out=None if out is None else str(out))
    return 0


def _delay_p50_p99(summary: Summary, report: ReplayReport) -> tuple[float | None, float | None]:
    """Delay to first start of every started job (as the trace counts it), else the finished
    jobs' queueing delay: its p50 and p99."""
    d = report.queueing_delay
    if d is not None:
        return d.simulated[0], d.simulated[2]
    return summary.queueing_delay_s.p50, summary.queueing_delay_s.p99


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.3g}" if value < 1000 else f"{value:,.0f}"
    return str(value)


def _tails(result: Calibration) -> str:
    """The delay tail of the jobs fitted on and of the validation jobs, observed beside
    simulated (a line each, or nothing)."""

    def s(value: float | None) -> str:
        return "-" if value is None else f"{value:,.0f} s"

    lines = ""
    for part, seen, simulated in (
        ("fit", result.fit_observed_tail_s, result.fit_simulated_tail_s),
        ("validation", result.observed_tail_s, result.simulated_tail_s),
    ):
        if seen is None or simulated is None or not seen.jobs:
            continue
        lines += (f"delay tail, {part} (observed · simulated): p90 {s(seen.p90)} · "
                  f"{s(simulated.p90)}, p99 {s(seen.p99)} · {s(simulated.p99)}, max "
                  f"{s(seen.max)} · {s(simulated.max)}\n")  # fmt: skip
    for c in result.class_tails:
        seen, simulated = c.observed, c.simulated
        lines += (f"  {c.gpu_class} GPU{'s' if c.gpu_class != '1' else ''} ({seen.jobs:,} jobs): "
                  f"p99 {s(seen.p99)} · {s(simulated.p99)}, max {s(seen.max)} · "
                  f"{s(simulated.max)}\n")  # fmt: skip
    return lines


def _spread(result: Calibration) -> str:
    """The validation KS and p99 over the spread's seeds: median (least-most), or nothing."""
    from twin.schema.summary import SeedSpread

    spread = result.seed_spread
    if spread is None:
        return ""
    ks = SeedSpread.spread(spread.ks_validation)
    line = (f"over seeds {spread.seeds[0]}-{spread.seeds[-1]}: validation KS median {ks[0]:.3f} "
            f"({ks[1]:.3f}-{ks[2]:.3f})")  # fmt: skip
    p99 = [v for v in spread.p99_simulated_s if v is not None]
    if p99:
        mid, low, high = SeedSpread.spread(p99)
        line += f" · simulated p99 median {mid:,.0f} s ({low:,.0f}-{high:,.0f} s)"
    return line + "\n"


def _window_flags(args: argparse.Namespace) -> list[tuple[str, float]]:
    """The window options given, to repeat on the replay that uses the fit."""
    given = [("--start-h", args.start_h or None), ("--end-h", args.end_h),
             ("--max-jobs", args.max_jobs), ("--seed", args.seed or None)]  # fmt: skip
    return [(flag, value) for flag, value in given if value is not None]


def calibrate_command(args: argparse.Namespace) -> int:
    from rich.console import Console

    from twin.cli.progress import progress_bar
    from twin.cli.trace_args import trace_options
    from twin.replay.calibrate import calibrate, most_replays

    if args.workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {args.workers}")
    console = Console(stderr=True)
    out = Path(args.out)
    options = trace_options(args)
    if args.placement:
        if options.cluster is None:
            raise ConfigError("--placement needs a node inventory (--cluster)")
        fixed = options.params.model_copy(update={"placement": args.placement})
        options = replace(options, params=fixed)
    most = most_replays(options)  # the search often stops sooner: the time left is a bound
    with progress_bar(console, "calibrating (at most)", most, "replays") as advance:

        def progress(done: int, _: int) -> None:
            if advance is not None:
                advance(done)

        result = calibrate(Path(args.trace), options, hear=console.print, workers=args.workers,
                           split=args.split, progress=progress,
                           spread_seeds=args.spread_seeds)  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    (out / CALIBRATION_FILE).write_text(result.model_dump_json(indent=2) + "\n")
    figure = ""
    if importlib.util.find_spec("matplotlib") is not None:
        from twin.eventlog.figures import delay_curves

        (out / CALIBRATION_FIGURE).write_text(
            delay_curves(
                result.cdf_levels,
                result.observed_cdf_s,
                result.simulated_cdf_s,
                result.ks_validation,
            )
        )
        figure = f" and {out / CALIBRATION_FIGURE} (validation: observed vs simulated)"
    s = result.params.scheduler
    fit, checked = (("the even days", "odd days") if result.split == "alternate-days"
                    else ("the first half", "second half"))  # fmt: skip
    print(
        f"fitted on {fit} ({result.evaluations} replays): capacity_share "
        f"{result.params.capacity_share:g}, cycle {s.cycle_s:g} s, bind {s.bind_s:g} s, "
        f"back-off {s.backoff_s:g}-{s.backoff_max_s:g} s, bind conflicts {s.bind_conflict:g} "
        f"(held up to {s.conflict_hold_s:g} s), retry every {s.retry_s:g} s, "
        + (f"background use {s.background_use:g}, " if s.background_use else "")
        + f"placement {result.params.placement or '-'}\n"
        f"KS fit {result.ks_fit:.3f} · validation ({checked}) {result.ks_validation:.3f} · "
        f"whole trace {result.ks_whole:.3f}\n"
        f"{_tails(result)}{_spread(result)}"
        f"wrote {out / CALIBRATION_FILE}{figure}; replay with --params {out / CALIBRATION_FILE}"
        + "".join(f" {flag} {value:g}" for flag, value in _window_flags(args))
    )
    return 0
