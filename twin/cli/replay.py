"""`twin replay` and `twin trace`: replay a trace on a cluster; generate synthetic traces."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from twin.cli.analyse import (
    add_json_option,
    add_output_options,
    check_output_options,
    write_outputs,
)
from twin.cli.arg_types import at_least_one, out_dir, out_file, positive, seed
from twin.cli.trace_args import (
    add_trace_options,
    add_window_options,
    trace_file,
    trace_options,
)
from twin.schema.vocabulary import (
    CALIBRATION_FILE,
    EVENTS_FILE,
    PLACED_ONLY,
    PLACEMENTS,
    QUEUE_POLICIES,
    REPLAY_FILE,
    ROUND_POLICIES,
    SPLITS,
    SUMMARY_FILE,
)

if TYPE_CHECKING:
    from rich.console import Console

    from twin.schema.summary import Quantiles, ReplayReport


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rp = sub.add_parser("replay", help="replay a cluster trace and summarise it")
    add_trace_options(rp)
    rp.add_argument(
        "--policy",
        choices=[  # a replay has no agent to place
            *(p for p in QUEUE_POLICIES if p not in PLACED_ONLY),
            *(p for p in ROUND_POLICIES if p not in QUEUE_POLICIES),
        ],
        default="fifo",
        help="queue order; with --rounds, Gavel's policy (fifo, max-min-fairness)",
    )
    rp.add_argument("--backfill", action="store_true", help="EASY backfill behind a blocked head")
    add_window_options(rp)
    rp.add_argument(
        "--placement",
        help=f"node choice on a --cluster inventory: {', '.join(PLACEMENTS)} (default best_fit); "
        "a comma-separated list replays each and prints a what-if table",
    )
    rp.add_argument(
        "--params",
        type=trace_file,
        help=f"scheduler model and cluster share: a {CALIBRATION_FILE} or its params",
    )
    rp.add_argument(
        "--out", type=out_dir, help=f"directory for {EVENTS_FILE}, {SUMMARY_FILE} and {REPLAY_FILE}"
    )
    rp.add_argument(
        "--seeds", metavar="SEEDS",
        help="replay on each of these seeds (N: 0..N-1, A-B, or a list) and print the median "
        "and range of the fidelity figures instead of one replay's summary",
    )  # fmt: skip
    rounds = rp.add_argument_group("round-based scheduling (Gavel workloads)")
    rounds.add_argument(
        "--rounds", type=positive, nargs="?", const=360.0, metavar="S",
        help="schedule in rounds of S seconds (default 360) as Gavel's simulator does: its "
        "allocation, its priorities and its worker types (a Gavel workload only)",
    )  # fmt: skip
    rounds.add_argument(
        "--cluster-spec", metavar="SPEC", default="25:0:0",
        help="GPUs by worker type for --rounds: V100:P100:K80 as Gavel writes it (default "
        "25:0:0), or v100=N,p100=N,k80=N",
    )  # fmt: skip
    rounds.add_argument(
        "--throughputs", type=trace_file,
        help="steps/s by job type and worker type for --rounds: Gavel's "
        "simulation_throughputs.json or the twin's layout (default: the shipped table)",
    )  # fmt: skip
    add_output_options(rp)
    add_json_option(rp)
    rp.set_defaults(func=replay_command)

    cal = sub.add_parser(
        "calibrate", help="fit the scheduler model to a trace (KS of queueing delay)"
    )
    add_trace_options(cal)
    add_window_options(cal)
    cal.add_argument(
        "--placement", choices=PLACEMENTS, help="keep this node choice (default: fit one)"
    )
    cal.add_argument("--split", choices=SPLITS, default="halves",
                     help="fit on the first half and validate on the second (default), or fit "
                     "on even days and validate on odd days")  # fmt: skip
    cal.add_argument("--out", type=out_dir, required=True, help=f"directory for {CALIBRATION_FILE}")
    cal.add_argument("--workers", type=at_least_one, default=os.cpu_count() or 1,
                     help="replays at once, in processes (default: the cores)")  # fmt: skip
    cal.add_argument("--spread-seeds", type=at_least_one, default=5, metavar="N",
                     help="replay the fitted values on N seeds from --seed on and report "
                     "the median and range of the validation KS and p99 (default 5; 1: "
                     "none)")  # fmt: skip
    cal.set_defaults(func=calibrate_command)

    tr = sub.add_parser("trace", help="synthetic traces")
    tsub = tr.add_subparsers(dest="trace_command", required=True)
    gen = tsub.add_parser("generate", help="write a synthetic trace of any size")
    gen.add_argument("--jobs", type=at_least_one, required=True)
    gen.add_argument("--format", choices=("itp",), default="itp")
    gen.add_argument("--seed", type=seed, default=0)
    gen.add_argument("--out", type=out_file, required=True, help="file to write")
    gen.set_defaults(func=generate_command)


def calibrate_command(args: argparse.Namespace) -> int:
    from twin.cli import fidelity

    return fidelity.calibrate_command(args)


def replay_command(args: argparse.Namespace) -> int:
    from twin.cli.fidelity import placements, seed_spread, what_if
    from twin.cli.progress import progress_bar
    from twin.cli.render import console_for, print_json, print_summary
    from twin.errors import ConfigError
    from twin.replay.reader import count_lines
    from twin.replay.run import replay

    check_output_options(args)
    if args.rounds is not None or args.policy not in QUEUE_POLICIES:
        from twin.cli.rounds import rounds_command

        return rounds_command(args)
    options = trace_options(args)
    policies = placements(args.placement)
    if args.seeds is not None:
        if args.out or len(policies) > 1:
            raise ConfigError("--seeds prints the figures' spread over seeds: it writes no run "
                              "directory (drop --out) and takes one --placement")  # fmt: skip
        if policies:
            options = replace(options, params=options.params.model_copy(
                update={"placement": policies[0]}))  # fmt: skip
        return seed_spread(Path(args.trace), options, args.seeds, as_json=args.json)
    if len(policies) > 1:
        return what_if(Path(args.trace), options, policies, Path(args.out) if args.out else None,
                       as_json=args.json)  # fmt: skip
    if policies:
        options = replace(options, params=options.params.model_copy(
            update={"placement": policies[0]}))  # fmt: skip
    out = Path(args.out) if args.out else None
    console = console_for(args)
    path = Path(args.trace)
    lines = count_lines(path) if console.is_terminal else None
    total = min(lines, args.max_jobs) if lines and args.max_jobs else lines
    with progress_bar(console, "replaying", total, "jobs") as advance:
        summary, report = replay(path, options, out_dir=out, progress=advance)
    print_summary(summary, console)
    print_report(report, console)
    if out is not None:
        console.print(f"wrote {out / EVENTS_FILE}, {out / SUMMARY_FILE} and {out / REPLAY_FILE}")
    write_outputs(args, console)
    if args.json:
        print_json("replay", summary=summary, replay=report, out=args.out)
    return 0


def print_report(r: ReplayReport, console: Console) -> None:
    from twin.cli.render import Table

    table = Table(title=f"trace {r.trace} ({r.format})", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    if r.window is not None:
        table.add_row("window", r.window)
    table.add_row("jobs", f"{r.jobs_read:,} read · {r.jobs_replayed:,} replayed")
    for reason, n in r.skipped.items():
        table.add_row("skipped", f"{n:,} {reason}")
    if r.statuses:
        table.add_row("statuses", " · ".join(f"{n:,} {s}" for s, n in r.statuses.items()))
    if r.tenants_merged_jobs:
        merged = f"{r.tenants_merged_jobs:,} jobs of tenants past the first {r.max_tenants:,}"
        table.add_row("tenants", f"{merged} reported together as (other) (--max-tenants)")
    if r.bad_lines:
        table.add_row("bad lines", f"{r.bad_lines:,} skipped (first: {r.first_bad_line})")
    gpus = sum(r.cluster.values())
    table.add_row(
        "cluster", f"{gpus:,} GPUs: " + ", ".join(f"{k} {v:,}" for k, v in r.cluster.items())
    )
    table.add_row("cluster from", r.cluster_source)
    d = r.queueing_delay
    if d is not None:

        def q(values: list[float | None]) -> str:
            return " · ".join(
                f"p{int(p * 100)} {'-' if v is None else f'{v:,.0f} s'}"
                for p, v in zip(d.quantiles, values, strict=True)
            )

        table.add_row("observed delay", f"{q(d.observed)}  ({d.observed_jobs:,} jobs)")
        table.add_row("simulated delay", q(d.simulated))
        table.add_row("KS distance", f"{d.ks_distance:.3f}")
    for name, value in (r.placement or {}).items():
        table.add_row(
            name.replace("_", " "), f"{value:.1%}" if name == "fragmentation" else str(value)
        )
    console.print(table)
    if len(r.tenants) > 1:
        print_tenants(r, console)


SHOWN_TENANTS = 10


def print_tenants(r: ReplayReport, console: Console) -> None:
    """Queueing delay of the trace's own tenants, the busiest first."""
    from twin.cli.render import Table

    rest = len(r.tenants) - SHOWN_TENANTS
    more = f" (top {SHOWN_TENANTS}; {rest:,} more in {REPLAY_FILE})" if rest > 0 else ""
    table = Table(title=f"queueing delay by the trace's tenants{more}")
    for name in ("tenant", "jobs", "finished", "simulated p50 · p99", "observed p50 · p99"):
        table.add_column(name, justify="left" if name == "tenant" else "right")

    def p50_p99(q: Quantiles | None) -> str:
        if q is None or q.p50 is None or q.p99 is None:
            return "-"
        return f"{q.p50:,.0f} s · {q.p99:,.0f} s"

    for t in r.tenants[:SHOWN_TENANTS]:
        table.add_row(
            t.name,
            f"{t.jobs:,}",
            f"{t.jobs_finished:,}",
            p50_p99(t.simulated_delay_s),
            p50_p99(t.observed_delay_s),
        )
    console.print(table)


def generate_command(args: argparse.Namespace) -> int:
    from twin.errors import ConfigError
    from twin.replay.synth import generate_itp

    if args.jobs <= 0:
        raise ConfigError(f"--jobs must be positive, got {args.jobs}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    generate_itp(Path(args.out), args.jobs, seed=args.seed)
    print(f"wrote {args.jobs:,} jobs to {args.out}", file=sys.stderr)
    return 0
