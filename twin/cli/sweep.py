"""`twin sweep`: many runs (scenarios by seeds by policies by overrides), on a local process
pool or on Ray, into one `results.parquet`; resumable."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from twin.cli.arg_types import at_least_one, out_dir
from twin.errors import ConfigError

if TYPE_CHECKING:
    from twin.sweep.spec import SweepSpec

ENGINES = ("local", "ray")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sw = sub.add_parser("sweep", help="many runs into one results.parquet (local pool or Ray)")
    sw.add_argument("--spec", help="a sweep file (YAML: scenarios, seeds, policies, set, sample)")
    sw.add_argument("--scenario", help="scenarios, comma-separated (default: default)")
    sw.add_argument("--seeds", type=at_least_one, help="seeds 0..N-1 for every point (default 1)")
    sw.add_argument("--policy", help="policies, comma-separated (default: each tenant's own)")
    sw.add_argument("--set", action="append", metavar="PATH=V1,V2",
                    help="a scenario field and its values (repeat for a grid)")  # fmt: skip
    sw.add_argument(
        "--sample", type=at_least_one, help="run a random sample of this many grid points"
    )
    sw.add_argument(
        "--out", type=out_dir, required=True, help="the sweep's directory (resumes if it exists)"
    )
    sw.add_argument("--workers", type=at_least_one, default=os.cpu_count() or 1,
                    help="processes (or Ray CPUs) at once; default: the cores")  # fmt: skip
    sw.add_argument("--engine", choices=ENGINES, default="local")
    sw.add_argument("--ray-address", help="a Ray cluster to run on (default: a local Ray)")
    sw.add_argument("--keep-logs", action="store_true", help="keep each run's event log")
    sw.add_argument("--plot", action="store_true", help="also draw the main figures, sweep.html")
    sw.set_defaults(func=sweep_command)


def _spec(args: argparse.Namespace) -> SweepSpec:
    """The sweep file (if any) with the flags on top."""
    from twin.sweep.spec import load_spec, parse_set, validated

    spec = load_spec(Path(args.spec)) if args.spec else validated({}, "flags")
    fields = spec.model_dump()
    if args.scenario:
        fields["scenarios"] = [s for s in args.scenario.split(",") if s]
    if args.seeds is not None:
        fields["seeds"] = args.seeds
    if args.policy:
        fields["policies"] = [p for p in args.policy.split(",") if p]
    if args.set:
        fields["set"] = {**fields["set"], **parse_set(args.set)}
    if args.sample is not None:
        fields["sample"] = args.sample
    return validated(fields, "flags")


def sweep_command(args: argparse.Namespace) -> int:
    from rich.console import Console

    from twin.cli.analyse import require_analysis
    from twin.cli.progress import progress_bar
    from twin.sweep.execute import assemble, done_keys, execute
    from twin.sweep.spec import check_points, runs

    require_analysis()
    if args.workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {args.workers}")
    if args.engine == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise ConfigError("--engine ray needs Ray: pip install 'ray>=2.9'")
    spec = _spec(args)
    planned = runs(spec)
    check_points(planned)
    out = Path(args.out)
    console = Console()
    already = len(done_keys(out) & {r.key for r in planned})
    with progress_bar(console, "sweeping", len(planned), "runs") as advance:
        if advance is not None:
            advance(already)
        ran = execute(planned, out, engine=args.engine, workers=args.workers,
                      address=args.ray_address, keep_logs=args.keep_logs,
                      progress=advance)  # fmt: skip
    path = assemble(out, [r.key for r in planned])
    console.print(f"{len(planned)} runs ({ran} now, {already} done before) -> {path}")
    if args.plot:
        from twin.sweep.plot import PLOT_FILE, plot

        console.print(f"wrote {plot(path, out / PLOT_FILE)}")
    return 0
