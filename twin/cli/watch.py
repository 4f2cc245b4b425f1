"""`twin watch`: the twin pointed at a running cluster, re-forecasting as it changes, scoring
each forecast when its jobs start, and serving a dashboard page and JSON."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from twin.cli.arg_types import at_least_one, out_dir, port, positive
from twin.cli.forecast import MAX_HORIZON_H, MAX_SAMPLES, add_forecast_options
from twin.cli.trace_args import trace_file
from twin.errors import ConfigError

if TYPE_CHECKING:
    from rich.console import Console

    from twin.watch.sources import Recorded, Source
    from twin.watch.watch import Watcher

DEFAULT_PORT = 8471


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    w = sub.add_parser(
        "watch", help="follow a running cluster: re-forecast as it changes, score, serve",
        description="Poll a running cluster (Slurm or Kubernetes, by its commands or the files "
        "a cron job writes), re-forecast each waiting job's start at every change, score each "
        "forecast when its job starts (beside the cluster's own estimate and 'starts now'), "
        "and serve a dashboard page and /watch.json. --replay plays a recorded watch's "
        "captures again: the offline backtest of the same snapshots.",
    )  # fmt: skip
    where = w.add_argument_group("the cluster (one of)")
    where.add_argument("--slurm", action="store_true", help="run squeue --json --states=all "
                       "and sinfo --json at each poll (scontrol show config once)")  # fmt: skip
    where.add_argument("--slurm-dir", metavar="DIR", help="read squeue.json and sinfo.json "
                       "(and config.txt) from DIR, as a cron job writes them")  # fmt: skip
    where.add_argument("--kubectl", action="store_true",
                       help="run kubectl get pods -A -o json and kubectl get nodes -o "
                       "json at each poll")  # fmt: skip
    where.add_argument("--kubernetes-dir", metavar="DIR",
                       help="read the kubectl ... -o json files in DIR, merged")  # fmt: skip
    where.add_argument("--replay", type=trace_file, metavar="DIR",
                       help="a recorded watch's --out (or a driven run's captures), played "
                       "again in order; prints the score")  # fmt: skip
    w.add_argument("--interval-s", type=positive, default=30.0,
                   help="seconds between polls (default 30)")  # fmt: skip
    w.add_argument("--polls", type=at_least_one, help="stop after this many polls")
    w.add_argument("--host", default="127.0.0.1",
                   help="where to serve (default 127.0.0.1; beyond loopback --token-file is "
                   "needed)")  # fmt: skip
    w.add_argument("--port", type=port, default=DEFAULT_PORT,
                   help=f"port to serve on (default {DEFAULT_PORT}; 0: any free port)")  # fmt: skip
    w.add_argument("--token-file", type=trace_file, metavar="FILE",
                   help="a file holding the token every request must give")  # fmt: skip
    w.add_argument("--window-h", type=positive, default=168.0,
                   help="hours of history the models are fitted on (default 168)")  # fmt: skip
    add_forecast_options(w)
    w.add_argument("--set", action="append", metavar="PATH=VALUE", default=[],
                   help="a what-if forecast beside each one: pools.NAME.nodes=+8, "
                   "queue=priority, ...")  # fmt: skip
    w.add_argument("--out", type=out_dir, help="keep the captures, forecasts.jsonl and "
                   "score.json here")  # fmt: skip
    w.add_argument("--json", action="store_true",
                   help="with --replay: print the final view as one JSON object")  # fmt: skip
    w.set_defaults(func=watch_command)


def _source(args: argparse.Namespace) -> Source | Recorded:
    from twin.watch import sources

    given = [f for f in ("slurm", "slurm_dir", "kubectl", "kubernetes_dir", "replay")
             if getattr(args, f)]  # fmt: skip
    if len(given) != 1:
        raise ConfigError("give one cluster: --slurm, --slurm-dir DIR, --kubectl, "
                          "--kubernetes-dir DIR or --replay DIR")  # fmt: skip
    if args.slurm:
        return sources.SlurmCommands()
    if args.slurm_dir:
        return sources.SlurmFiles(Path(args.slurm_dir))
    if args.kubectl:
        return sources.KubernetesCommands()
    if args.kubernetes_dir:
        return sources.KubernetesFiles(Path(args.kubernetes_dir))
    return sources.Recorded.of(Path(args.replay))


def watch_command(args: argparse.Namespace) -> int:
    import asyncio

    from twin.cli.render import console_for, print_json
    from twin.cli.serve import is_loopback
    from twin.watch import server, sources
    from twin.watch.watch import Settings, Watcher

    if args.samples > MAX_SAMPLES or args.horizon_h > MAX_HORIZON_H:
        raise ConfigError(f"--samples at most {MAX_SAMPLES:,}, --horizon-h at most "
                          f"{MAX_HORIZON_H:g}")  # fmt: skip
    for assignment in args.set:
        if "=" not in assignment:
            raise ConfigError(f"--set {assignment}: give PATH=VALUE (pools.NAME.nodes=+8, ...)")
    source = _source(args)
    token = None
    if args.token_file:
        token = Path(args.token_file).read_text(encoding="utf-8").strip()
        if len(token) < 16:
            raise ConfigError(f"--token-file: {args.token_file} holds under 16 characters")
    elif not is_loopback(args.host) and not args.replay:
        raise ConfigError(f"--host {args.host}: the watch shows the cluster's queue; serving "
                          "it beyond loopback needs --token-file")  # fmt: skip
    settings = Settings(samples=args.samples, horizon_s=args.horizon_h * 3600,
                        step_s=args.step_min * 60, seed=args.seed,
                        window_s=args.window_h * 3600, what_if=tuple(args.set))  # fmt: skip
    out = Path(args.out) if args.out else None
    console = console_for(args)
    if isinstance(source, sources.Recorded):
        watcher = Watcher(source, settings, out)
        try:
            watcher.replay(source.captures)
        finally:
            watcher.close()
        print_score(watcher, console)
        if args.json:
            print_json("watch", view=watcher.view)
        return 0
    watcher = Watcher(source, settings, out)
    try:
        asyncio.run(server.serve(watcher, host=args.host, port=args.port,
                                 interval_s=args.interval_s, token=token,
                                 say=lambda line: print(line, flush=True),
                                 polls=args.polls))  # fmt: skip
    finally:
        watcher.close()
    print_score(watcher, console)
    return 0


def print_score(watcher: Watcher, console: Console) -> None:

    from twin.cli.render import Table
    from twin.watch.page import NAMES
    from twin.watch.score import PREDICTORS, predictor

    score = watcher.view["score"]
    table = Table(title=f"watch of {watcher.source.described}: {watcher.captures} captures, "
                  f"{score['pairs']} forecasts scored")  # fmt: skip
    for name in ("predictor", "pairs", "median |error|", "within 10 s"):
        table.add_column(name, justify="left" if name == "predictor" else "right")
    for name in PREDICTORS:
        p = predictor(score, name)
        e, w = p["median_abs_error_s"], p["within_10s"]
        table.add_row(NAMES[name], str(p["pairs"]), "-" if e is None else f"{e:.1f} s",
                      "-" if w is None else f"{w:.0%}")  # fmt: skip
    console.print(table)
    cover = score["twin_coverage_80"]
    console.print("the twin's 80% intervals held "
                  + ("-" if cover is None else f"{cover:.0%}") + " of the starts")  # fmt: skip
