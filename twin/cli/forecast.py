"""`twin forecast`: from a cluster's state at an instant, what happens next (and `twin
backtest`: such forecasts scored against what a trace recorded)."""

from __future__ import annotations

import argparse
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twin.cli.arg_types import at_least_one, out_dir, out_file, positive, seed
from twin.cli.trace_args import add_trace_options, trace_file
from twin.errors import ConfigError

if TYPE_CHECKING:
    from rich.console import Console

    from twin.forecast.forecast import Forecast
    from twin.replay.cluster import Cluster
    from twin.replay.run import ReplayOptions
    from twin.schema.snapshot import Snapshot

MAX_SAMPLES = 10_000
MAX_HORIZON_H = 24 * 30.0
MAX_STEPS = 10_000
MAX_INSTANT_S = 1e13  # seconds: a trace's clock or epoch seconds (year 2286)
FORECAST_FILES = ("forecast_jobs.parquet", "forecast_bands.parquet", "forecast.svg",
                  "snapshot.json")  # fmt: skip


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    fc = sub.add_parser(
        "forecast", help="from a cluster's state at an instant, forecast starts and queues",
        description="Load the state at an instant (a trace cut with --trace and --at, a "
        "Kubernetes or Slurm export, or a snapshot file) and play it forward many times: "
        "each waiting job's start (median and an 80%% interval), and queue length and "
        "utilisation bands over the next hours.",
    )  # fmt: skip
    where = fc.add_argument_group("the state (one of)")
    where.add_argument("--snapshot", type=trace_file, help="a snapshot file (twin-snapshot/1)")
    where.add_argument("--kubernetes", type=trace_file, metavar="FILE", action="append",
                       help="kubectl get pods,nodes -o json; again for more files, merged "
                       "(pods and nodes exported apart)")  # fmt: skip
    where.add_argument("--squeue", type=trace_file, metavar="FILE", help="squeue --json")
    where.add_argument("--sinfo", type=trace_file, metavar="FILE",
                       help="sinfo --json (with --squeue)")  # fmt: skip
    where.add_argument("--slurm-config", type=trace_file, metavar="FILE",
                       help="scontrol show config (with --squeue): the scheduler, "
                       "its backfill interval, resolution (default: Slurm's, 30 s)")  # fmt: skip
    add_trace_options(fc, required=False)
    fc.add_argument("--params", type=trace_file, help="scheduler model and cluster share (a "
                    "calibration.json or its params), for --trace")  # fmt: skip
    fc.add_argument("--at", help="the instant: with --trace, time from the trace's first "
                    "submission (s, or with m/h/d); with an export, an RFC 3339 time, epoch "
                    "seconds, or now for a capture just taken (default: when the export was "
                    "taken, as it records it: never a pending job's estimated start)")  # fmt: skip
    fc.add_argument("--window-h", type=positive, default=168.0,
                    help="hours of history before the instant the models are fitted on "
                    "(default 168)")  # fmt: skip
    add_forecast_options(fc)
    fc.add_argument("--set", action="append", metavar="PATH=VALUE", default=[],
                    help="a what-if on the snapshot: pools.NAME.nodes=+8, pools.NAME.gpus=+8, "
                    "queue=priority, scheduler.cycle_s=5, ...")  # fmt: skip
    fc.add_argument("--write-snapshot", type=out_file, metavar="FILE",
                    help="also write the snapshot (after --set)")  # fmt: skip
    fc.add_argument("--out", type=out_dir, help=f"directory for {', '.join(FORECAST_FILES)}")
    fc.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    fc.set_defaults(func=forecast_command)


def add_forecast_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--samples",
        type=at_least_one,
        default=50,
        help=f"plays of the future (default 50; at most {MAX_SAMPLES:,})",
    )
    parser.add_argument("--horizon-h", type=positive, default=6.0,
                        help="how far ahead the bands reach (default 6)")  # fmt: skip
    parser.add_argument("--step-min", type=positive, default=10.0,
                        help="band resolution in minutes (default 10)")  # fmt: skip
    parser.add_argument("--seed", type=seed, default=0)


def instant_s(text: str, *, clock: bool) -> float:
    """`--at`: seconds (or `90m`, `36h`, `2d`) on a trace's clock; an RFC 3339 time or epoch
    seconds on an export's (`clock`)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if match is not None and not (clock and match[2]):
        value = float(match[1]) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match[2]]
        if value > MAX_INSTANT_S:
            raise ConfigError(f"--at: {text!r} is past {MAX_INSTANT_S:.0e} s")
        return value
    if clock and text.strip() == "now":  # a capture just taken
        return time.time()
    if clock:
        try:
            return datetime.fromisoformat(text.strip().replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
        raise ConfigError(f"--at: {text!r} is not an RFC 3339 time or epoch seconds")
    raise ConfigError(f"--at: {text!r} is not a time from the trace's start (s, or with m/h/d)")


def load_snapshot(args: argparse.Namespace) -> Snapshot:
    """The snapshot the options name, --set applied."""
    from twin.forecast import kubernetes, slurm, snapshot

    given = [f for f in ("snapshot", "kubernetes", "squeue", "trace") if getattr(args, f)]
    if len(given) != 1:
        raise ConfigError("give one state: --trace (with --at), --kubernetes, --squeue with "
                          "--sinfo, or --snapshot")  # fmt: skip
    if getattr(args, "slurm_config", None) and not args.squeue:
        raise ConfigError("--slurm-config goes with --squeue and --sinfo")
    if bool(args.squeue) != bool(args.sinfo):
        raise ConfigError("--squeue and --sinfo go together (jobs, and the nodes they run on)")
    window_s = args.window_h * 3600
    if args.snapshot:
        state = snapshot.read(Path(args.snapshot))
    elif args.kubernetes:
        at = instant_s(args.at, clock=True) if args.at else None
        state = kubernetes.from_kubernetes([Path(k) for k in args.kubernetes], at_s=at,
                                                 window_s=window_s)  # fmt: skip
    elif args.squeue:
        at = instant_s(args.at, clock=True) if args.at else None
        config = Path(args.slurm_config) if getattr(args, "slurm_config", None) else None
        state = slurm.from_slurm(Path(args.squeue), Path(args.sinfo), at_s=at,
                                 window_s=window_s, config=config)  # fmt: skip
    else:
        if not args.at:
            raise ConfigError("--trace needs --at: the instant to cut it at")
        state = trace_cut(args, instant_s(args.at, clock=False), window_s)
    return snapshot.what_if(state, args.set) if args.set else state


def trace_cluster(options: ReplayOptions, path: Path) -> tuple[Path, str, Cluster]:
    """The trace's format and the cluster the options give (never sized from the trace: that
    would read past the instant)."""
    from twin.replay import load
    from twin.replay.cluster import build

    if options.cluster is None and options.gpus is None:
        raise ConfigError("--trace: give the cluster (--cluster or --gpus); sizing it from the "
                          "trace's demand would read past the instant")  # fmt: skip
    fmt = load.job_format(path, options.fmt, options.trace)
    inventory = None if options.cluster is None else (options.cluster, options.cluster_format)
    return path, fmt, build(iter(()), inventory, options.gpus, options.params)


def trace_cut(args: argparse.Namespace, at_s: float, window_s: float) -> Snapshot:
    """The trace cut at `at_s`, on the cluster a replay with the same options plays on."""
    from twin.cli.trace_args import trace_options
    from twin.forecast import snapshot
    from twin.replay import load
    from twin.replay.reader import ReadLog
    from twin.replay.run import Queue

    options = trace_options(args)
    path, fmt, cluster = trace_cluster(options, Path(args.trace))
    records = load.RecordedStarts(
        load.records(path, fmt, ReadLog(skip_bad=options.skip_bad), options.trace), path, fmt
    )
    state = snapshot.cut(
        records, at_s,
        window_s=window_s, cluster=cluster, queue=Queue(options.policy, options.backfill),
        scheduler=options.params.scheduler, source=f"{path} ({fmt}) on {cluster.source}",
    )  # fmt: skip
    records.check()  # every job read up to the instant, and none said when it started
    return state


def forecast_command(args: argparse.Namespace) -> int:
    from twin.cli.render import console_for, print_json
    from twin.forecast import snapshot
    from twin.forecast.forecast import forecast

    if args.samples > MAX_SAMPLES:
        raise ConfigError(f"--samples: at most {MAX_SAMPLES:,}, got {args.samples:,}")
    if args.horizon_h > MAX_HORIZON_H:
        raise ConfigError(f"--horizon-h: at most {MAX_HORIZON_H:g} h, got {args.horizon_h:g}")
    if args.horizon_h * 60 / args.step_min > MAX_STEPS:
        raise ConfigError(f"--step-min: at most {MAX_STEPS:,} steps in the horizon, got "
                          f"{args.horizon_h * 60 / args.step_min:,.0f}")  # fmt: skip
    state = load_snapshot(args)
    if args.write_snapshot:
        snapshot.write(state, Path(args.write_snapshot))
    horizon_s = args.horizon_h * 3600
    result = forecast(state, samples=args.samples, horizon_s=horizon_s,
                      step_s=min(args.step_min * 60, horizon_s), seed=args.seed)  # fmt: skip
    console = console_for(args)
    print_forecast(state, result, console)
    if args.out:
        out = Path(args.out)
        write_forecast(state, result, out)
        console.print(f"wrote {', '.join(str(out / f) for f in FORECAST_FILES)}")
    if args.json:
        print_json("forecast", forecast=forecast_json(state, result), out=args.out)
    return 0


def instant_text(state: Snapshot) -> str:
    """The instant as a date (UTC) where it is on a wall clock (an export's), else seconds on
    the trace's clock."""
    if state.at_s > 1e8:  # after 1973: an epoch time, not an offset into a trace
        return datetime.fromtimestamp(state.at_s, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{state.at_s:,.0f} s"


def _offset(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:,.0f} s"
    return f"{seconds / 60:,.0f} min" if seconds < 7200 else f"{seconds / 3600:,.1f} h"


def print_forecast(state: Snapshot, result: Forecast, console: Console) -> None:
    from twin.cli.render import Table

    head = Table(title=f"forecast from {state.source}", show_header=False)
    head.add_column(style="bold")
    head.add_column()
    head.add_row("instant", f"{instant_text(state)} · {len(state.running)} running · "
                 f"{len(state.waiting)} waiting")  # fmt: skip
    head.add_row("models", f"{result.runs_fitted} finished runs in the window · "
                 f"{result.arrivals_per_h:.2f} arrivals/h")  # fmt: skip
    head.add_row("samples", f"{result.samples} · {result.cpu_s:.2f} s CPU")
    if state.unused_fields:
        from twin.forecast.exports import ranked_unused

        notes, matters, others = ranked_unused(state.unused_fields)
        count = state.unused_fields
        if notes:
            head.add_row("read as", ", ".join(f"{k} ({count[k]})" for k in notes))
        if matters or others:
            named = ", ".join(f"{k} ({count[k]})" for k in matters) or "none that moves it"
            head.add_row("not modelled", f"{named}; {others} other fields the forecast does "
                         "not depend on (--json lists them all)")  # fmt: skip
    console.print(head)
    jobs = Table(title="waiting jobs: start (median, 80% interval), from the instant")
    for name in ("job", "tenant", "GPUs", "waited", "starts in", "80% interval"):
        jobs.add_column(name, justify="right" if name not in ("job", "tenant") else "left")
    for job in result.jobs:
        if job.start_s is None:
            when, interval = "not in any sample", "-"
        else:
            p10, p50, p90 = (t - state.at_s for t in job.start_s)
            when, interval = _offset(p50), f"{_offset(p10)} - {_offset(p90)}"
        jobs.add_row(job.job_id, job.tenant, f"{job.gpus:g}", _offset(state.at_s - job.submit_s),
                     when, interval)  # fmt: skip
    if result.jobs:
        console.print(jobs)
    marks = [h * 3600 for h in (0, 1, 3, 6, 12, 24) if h * 3600 <= result.horizon_s]
    bands = Table(title="queue (jobs waiting) and utilisation: median (p10-p90)")
    bands.add_column("what")
    for m in marks:
        bands.add_column(f"+{m / 3600:g} h", justify="right")
    offsets = result.offsets_s
    for band in result.bands:
        cells = []
        for m in marks:
            i = int(abs(offsets - m).argmin())
            lo, mid, hi = band.quantiles[:, i]
            fmt = "{:.0%}" if band.kind == "utilisation" else "{:.0f}"
            cells.append(f"{fmt.format(mid)} ({fmt.format(lo)}-{fmt.format(hi)})")
        bands.add_row(f"{band.kind} {band.name}", *cells)
    console.print(bands)


def forecast_json(state: Snapshot, result: Forecast) -> dict[str, Any]:
    return {
        "at_s": state.at_s, "source": state.source, "samples": result.samples,
        "horizon_s": result.horizon_s, "step_s": result.step_s, "cpu_s": result.cpu_s,
        "running": len(state.running), "waiting": len(state.waiting),
        "runs_fitted": result.runs_fitted, "arrivals_per_h": result.arrivals_per_h,
        "unused_fields": state.unused_fields,
        "jobs": [{"job_id": j.job_id, "tenant": j.tenant, "gpus": j.gpus, "submit_s": j.submit_s,
                  "start_p10_s": j.start_s[0] if j.start_s else None,
                  "start_p50_s": j.start_s[1] if j.start_s else None,
                  "start_p90_s": j.start_s[2] if j.start_s else None,
                  "started_share": j.started_share} for j in result.jobs],
        "bands": [{"kind": b.kind, "name": b.name, "offsets_s": result.offsets_s.tolist(),
                   "p10": b.quantiles[0].tolist(), "p50": b.quantiles[1].tolist(),
                   "p90": b.quantiles[2].tolist()} for b in result.bands],
    }  # fmt: skip


def write_forecast(state: Snapshot, result: Forecast, out: Path) -> None:
    """Parquet tables, the fan chart and the snapshot under `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pyarrow as pa
    import pyarrow.parquet as pq

    from twin.forecast import snapshot

    out.mkdir(parents=True, exist_ok=True)
    body = forecast_json(state, result)
    pq.write_table(pa.Table.from_pylist(body["jobs"], schema=pa.schema([
        ("job_id", pa.string()), ("tenant", pa.string()), ("gpus", pa.float64()),
        ("submit_s", pa.float64()), ("start_p10_s", pa.float64()),
        ("start_p50_s", pa.float64()), ("start_p90_s", pa.float64()),
        ("started_share", pa.float64())])), out / FORECAST_FILES[0])  # fmt: skip
    rows = [{"kind": b.kind, "name": b.name, "offset_s": float(t), "p10": float(b.quantiles[0, i]),
             "p50": float(b.quantiles[1, i]), "p90": float(b.quantiles[2, i])}
            for b in result.bands for i, t in enumerate(result.offsets_s)]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), out / FORECAST_FILES[1])
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    hours = result.offsets_s / 3600
    for ax, kind in zip(axes, ("queue", "utilisation"), strict=True):
        for band in (b for b in result.bands if b.kind == kind):
            line = ax.plot(hours, band.quantiles[1], label=band.name)[0]
            ax.fill_between(hours, band.quantiles[0], band.quantiles[2], alpha=0.2,
                            color=line.get_color())  # fmt: skip
        ax.set_xlabel("hours from the instant")
        ax.set_ylabel("jobs waiting" if kind == "queue" else "share of GPUs busy")
        ax.legend(fontsize=7)
    fig.suptitle(f"forecast: median and 80% band over {result.samples} samples", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / FORECAST_FILES[2])
    plt.close(fig)
    snapshot.write(state, out / FORECAST_FILES[3])


BACKTEST_FILES = ("backtest.parquet", "backtest_scores.parquet", "backtest.html")


def add_backtest_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from twin.schema.vocabulary import SPLITS

    bt = sub.add_parser(
        "backtest", help="forecast from many instants of a trace and score against it",
        description="Cut a trace at many instants of its held-out part, forecast each, and "
        "score the starts against what the trace recorded, beside the class's historical "
        "median wait, a QBETS-style quantile and the twin told the true run times.",
    )  # fmt: skip
    add_trace_options(bt)
    bt.add_argument("--params", type=trace_file, help="scheduler model and cluster share (a "
                    "calibration.json or its params)")  # fmt: skip
    bt.add_argument("--split", choices=SPLITS, default="alternate-days",
                    help="held-out instants: odd days (default) or the second half")  # fmt: skip
    bt.add_argument("--every-h", type=positive,
                    help="cut every H hours and score the jobs waiting then (default: cut at "
                    "each held-out submission, scoring the job just submitted)")  # fmt: skip
    bt.add_argument("--max-cuts", type=at_least_one, default=200,
                    help="at most this many instants, evenly spread (default 200)")  # fmt: skip
    bt.add_argument("--window-h", type=positive, default=168.0,
                    help="hours of history before each instant the models are fitted on "
                    "(default 168)")  # fmt: skip
    add_forecast_options(bt)
    bt.add_argument("--out", type=out_dir, help=f"directory for {', '.join(BACKTEST_FILES)}")
    bt.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    bt.set_defaults(func=backtest_command, samples=20)


def backtest_command(args: argparse.Namespace) -> int:
    from twin.cli.progress import progress_bar
    from twin.cli.render import console_for, print_json
    from twin.cli.trace_args import trace_options
    from twin.forecast import backtest as bt
    from twin.replay import load
    from twin.replay.reader import ReadLog
    from twin.replay.run import Queue

    if args.samples > MAX_SAMPLES or args.horizon_h > MAX_HORIZON_H:
        raise ConfigError(f"--samples at most {MAX_SAMPLES:,}, --horizon-h at most "
                          f"{MAX_HORIZON_H:g}")  # fmt: skip
    options = trace_options(args)
    path, fmt, cluster = trace_cluster(options, Path(args.trace))
    read = load.RecordedStarts(
        load.records(path, fmt, ReadLog(skip_bad=options.skip_bad), options.trace), path, fmt
    )
    records = list(read)
    read.check()
    setup = bt.Setup(cluster, Queue(options.policy, options.backfill), options.params.scheduler,
                     window_s=args.window_h * 3600, samples=args.samples,
                     horizon_s=args.horizon_h * 3600, seed=args.seed)  # fmt: skip
    times = bt.instants(records, args.split, every_h=args.every_h, max_cuts=args.max_cuts)
    console = console_for(args)
    with progress_bar(console, "forecasting", len(times), "instants") as advance:
        scored, queues = bt.backtest(records, times, setup, progress=advance)
    scores = bt.summarise(scored)
    queue_error = {
        f"+{h:g} h": (float(sum(abs(q.predicted - q.actual) for q in queues if q.ahead_h == h))
                      / max(1, sum(1 for q in queues if q.ahead_h == h)))
        for h in bt.QUEUE_AT_H
    }  # fmt: skip
    title = f"backtest: {path.name} ({fmt}), {len(times)} instants, {len(scored)} starts"
    table = _scores_table(title, scores)
    console.print(table)
    console.print("queue length, mean absolute error: "
                  + ", ".join(f"{k} {v:.2f} jobs" for k, v in queue_error.items()))  # fmt: skip
    body = {"trace": str(path), "format": fmt, "split": args.split, "instants": len(times),
            "starts": len(scored), "samples": args.samples, "queue_mae_jobs": queue_error,
            "scores": [_score_json(s) for s in scores]}  # fmt: skip
    if args.out:
        out = Path(args.out)
        _write_backtest(out, scored, scores, table, console)
        console.print(f"wrote {', '.join(str(out / f) for f in BACKTEST_FILES)}")
    if args.json:
        print_json("backtest", backtest=body, out=args.out)
    return 0


def _score_json(s: Any) -> dict[str, Any]:
    return {"method": s.method, "class": s.gpu_class, "jobs": s.jobs,
            "median_abs_error_s": s.median_abs_error_s, "mean_abs_error_s": s.mean_abs_error_s,
            "within_1min": s.within_s[60.0], "within_10min": s.within_s[600.0],
            "within_1h": s.within_s[3600.0], "coverage_80": s.coverage,
            "actual_median_wait_s": s.actual_median_wait_s}  # fmt: skip


def _scores_table(title: str, scores: list[Any]) -> Any:
    from twin.cli.render import Table

    table = Table(title=title)
    for name in ("class", "method", "jobs", "median wait", "median |error|", "mean |error|",
                 "<= 1 min", "<= 10 min", "80% covers"):  # fmt: skip
        table.add_column(name, justify="left" if name in ("class", "method") else "right")
    for s in scores:
        table.add_row(s.gpu_class, s.method, str(s.jobs), _offset(s.actual_median_wait_s),
                      _offset(s.median_abs_error_s), _offset(s.mean_abs_error_s),
                      f"{s.within_s[60.0]:.0%}", f"{s.within_s[600.0]:.0%}",
                      "-" if s.coverage is None else f"{s.coverage:.0%}")  # fmt: skip
    return table


def _write_backtest(out: Path, scored: list[Any], scores: list[Any], table: Any,
                    console: Console) -> None:  # fmt: skip
    import html

    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for s in scored:
        row = {"at_s": s.at_s, "job_id": s.job_id, "gpu_class": s.gpu_class, "tenant": s.tenant,
               "submit_s": s.submit_s, "actual_start_s": s.actual_s}  # fmt: skip
        for method, band in s.predicted.items():
            for q, value in zip(("p10", "p50", "p90"), band or (None, None, None), strict=True):
                row[f"{method}_{q}_s"] = value
        rows.append(row)
    pq.write_table(pa.Table.from_pylist(rows), out / BACKTEST_FILES[0])
    pq.write_table(pa.Table.from_pylist([_score_json(s) for s in scores]), out / BACKTEST_FILES[1])
    head = "".join(f"<th>{html.escape(str(c.header))}</th>" for c in table.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in cells) + "</tr>"
        for cells in zip(*(c._cells for c in table.columns), strict=True)
    )
    (out / BACKTEST_FILES[2]).write_text(
        f"<!doctype html><meta charset=utf-8><title>{html.escape(str(table.title))}</title>"
        f"<style>body{{font:14px sans-serif}}td,th{{padding:2px 8px;text-align:right}}</style>"
        f"<h1>{html.escape(str(table.title))}</h1><table><tr>{head}</tr>{body}</table>\n",
        encoding="utf-8",
    )
