"""The command-line options that name a trace, the cluster it replays on and the window to
play, and the replay options they give (shared by `twin replay` and `twin calibrate`)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING

from twin.cli.arg_types import at_least_one, non_negative, positive, seed
from twin.replay.registry import JOB_FORMATS, NODE_FORMATS

if TYPE_CHECKING:
    from twin.replay.run import ReplayOptions


def trace_file(text: str) -> Path:
    """A trace or inventory file as a user names it: as given, or (a `traces/...` path) among
    the traces the twin ships, so the documented paths work from any directory. One that is
    nowhere is a TraceError (a one-line error, not a usage message)."""
    from twin.sim.job_sources import trace_path

    return trace_path(text)


def add_trace_options(rp: argparse.ArgumentParser, *, required: bool = True) -> None:
    """The trace and the cluster it replays on (shared by `replay`, `calibrate` and
    `forecast`)."""
    rp.add_argument("--trace", required=required, type=trace_file, help="the trace file")
    rp.add_argument("--format", choices=JOB_FORMATS, help="override format detection")
    rp.add_argument(
        "--columns",
        help="column map for a flat CSV: submit=COL,gpus=COL,duration=COL[,...]; unit=s|ms|"
        "datetime is that of the times (a duration is in s, or ms with unit=ms)",
    )
    where = rp.add_mutually_exclusive_group()
    where.add_argument("--cluster", type=trace_file,
                       help="a node inventory that instantiates the cluster")  # fmt: skip
    where.add_argument("--gpus", type=at_least_one, help="one pool of this many GPUs")
    rp.add_argument("--cluster-format", choices=NODE_FORMATS, help="override inventory detection")
    rp.add_argument("--skip-bad", action="store_true", help="skip and count corrupt lines")
    rp.add_argument(
        "--include-cpu", action="store_true", help="replay CPU-only instances too (DLRM)"
    )
    rp.add_argument("--max-tenants", type=at_least_one, default=4096,
                    help="the trace's tenants reported apart (default 4096); the jobs of the "
                    "rest are reported together as '(other)', and counted")  # fmt: skip


def add_window_options(rp: argparse.ArgumentParser) -> None:
    """The part of the trace to play, and the seed (shared by `replay` and `calibrate`)."""
    rp.add_argument(
        "--start-h", type=non_negative, default=0.0, help="play jobs submitted from this hour on"
    )
    rp.add_argument("--end-h", type=positive, help="... and before this hour (from the first job)")
    rp.add_argument(
        "--max-jobs", type=at_least_one, help="play at most this many jobs of the window"
    )
    rp.add_argument("--seed", type=seed, default=0)


def trace_options(args: argparse.Namespace) -> ReplayOptions:
    """The replay options the command line gives (trace, cluster, window, queue, params)."""
    from twin.replay.formats.flat import parse_map
    from twin.replay.load import TraceOptions
    from twin.replay.params import read_params
    from twin.replay.run import ReplayOptions
    from twin.replay.window import Window
    from twin.schema.scheduling import ReplayParams

    return ReplayOptions(
        fmt=args.format,
        trace=TraceOptions(
            columns=parse_map(args.columns) if args.columns else None, include_cpu=args.include_cpu
        ),
        cluster=Path(args.cluster) if args.cluster else None,
        cluster_format=args.cluster_format,
        gpus=args.gpus,
        policy=getattr(args, "policy", "fifo"),
        backfill=getattr(args, "backfill", False),
        skip_bad=args.skip_bad,
        seed=getattr(args, "seed", 0),
        window=Window(
            start_s=getattr(args, "start_h", 0.0) * 3600.0,
            end_s=math.inf if getattr(args, "end_h", None) is None else args.end_h * 3600.0,
            max_jobs=getattr(args, "max_jobs", None),
        ),
        params=read_params(Path(args.params)) if getattr(args, "params", None) else ReplayParams(),
        max_tenants=getattr(args, "max_tenants", 4096),
    )
