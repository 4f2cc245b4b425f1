"""`twin fill`: the fill-to-saturation experiment of "Beware of Fragmentation" for any openb-style
node inventory and pod list."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from twin.cli.arg_types import at_least_one, out_dir, positive
from twin.cli.trace_args import trace_file


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    fp = sub.add_parser(
        "fill",
        help="fill a cluster with pods that never leave, per placement policy (FGD's Fig. 9)",
    )
    fp.add_argument("--trace", required=True, type=trace_file,
                    help="the pods (an openb pod list)")  # fmt: skip
    fp.add_argument("--cluster", required=True, type=trace_file,
                    help="the nodes (an openb node list)")  # fmt: skip
    fp.add_argument(
        "--placement",
        default="best_fit,fgd",
        help="policies, comma-separated: first_fit, spread, random, dot_product, gpu_clustering, "
        "gpu_packing, best_fit, fgd (hyphens work too)",
    )
    fp.add_argument("--seeds", default="42-51", help="a seed or a range, e.g. 42-51")
    fp.add_argument(
        "--inflate",
        type=positive,
        default=1.3,
        help="tune the pod list to ask this multiple of the GPU capacity (default 1.3): copies "
        "are added to a list that asks less, pods removed from one that asks more",
    )
    fp.add_argument("--sequence", help="play this arrival order exactly (idx,pod,...,gpu_milli)")
    fp.add_argument(
        "--node-priority", help="break ties by this node order (node,...,tiebreak_rank)"
    )
    fp.add_argument(
        "--ignore-gpu-spec", action="store_true",
        help="drop the pods' GPU-model constraints (gpu_spec), placing them on any GPU (else "
        "each runs only on nodes of a model it names; refused where the node list has no "
        "'model' column)",
    )  # fmt: skip
    fp.add_argument(
        "--draws", choices=("twin", "artefact"), default="twin",
        help="the seeded arrival order and node priority: the twin's own (any seed), or the "
        "FGD artefact's, drawn from Go's math/rand as its simulator draws them (seeds 42-51), "
        "so each seed plays the artefact's own run",
    )  # fmt: skip
    fp.add_argument("--workers", type=at_least_one, default=os.cpu_count() or 1,
                    help="runs at once, in processes (default: the cores)")  # fmt: skip
    fp.add_argument(
        "--out", type=out_dir, required=True, help="directory for fill.csv and fill.svg"
    )
    fp.set_defaults(func=fill_command)


def seeds(text: str) -> list[int]:
    """`42` or `42-51` as the seeds it names."""
    from twin.arena.lineup import MAX_SEEDS, SEED_MAX
    from twin.errors import ConfigError

    first, sep, last = text.partition("-")
    try:
        lo, hi = int(first), int(last) if sep else int(first)
    except ValueError:
        raise ConfigError(f"--seeds {text!r}: a seed or a range such as 42-51") from None
    if hi < lo:
        raise ConfigError(f"--seeds {text!r}: the range ends before it starts")
    if hi > SEED_MAX or hi - lo >= MAX_SEEDS:
        raise ConfigError(f"--seeds {text!r}: seeds go up to {SEED_MAX:,}, and at most "
                          f"{MAX_SEEDS:,} of them")  # fmt: skip
    return list(range(lo, hi + 1))


def fill_command(args: argparse.Namespace) -> int:
    from rich.console import Console

    from twin.cli.progress import progress_bar
    from twin.cli.render import Table
    from twin.errors import ConfigError
    from twin.fill.policies import POLICIES
    from twin.fill.run import FILL_CSV, FILL_SVG, SHOWN_PCT, FillSpec, medians, run, write

    policies = [p.strip().replace("-", "_") for p in args.placement.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        raise ConfigError(f"--placement {args.placement!r}: allowed: {', '.join(POLICIES)}")
    if not 0.0 < args.inflate <= 3.0:
        raise ConfigError(f"--inflate {args.inflate}: above 0, up to 3 times the capacity")
    spec = FillSpec(
        Path(args.trace), Path(args.cluster), args.inflate,
        Path(args.sequence) if args.sequence else None,
        Path(args.node_priority) if args.node_priority else None, args.ignore_gpu_spec,
        args.draws,
    )  # fmt: skip
    if args.draws == "artefact" and (args.sequence or args.node_priority):
        raise ConfigError("--draws artefact draws the order and priority; drop --sequence and "
                          "--node-priority")  # fmt: skip
    chosen = seeds(args.seeds) if args.sequence is None else seeds(args.seeds)[:1]
    console = Console()
    with progress_bar(console, "filling", len(policies) * len(chosen), "runs") as advance:
        rows = run(spec, policies, chosen, args.workers,
                   (lambda _: None) if advance is None else advance)  # fmt: skip
    out = Path(args.out)
    write(rows, out)
    curves = medians(rows)
    table = Table(title=f"unallocated GPU %, median over seeds {args.seeds}"
                  + (" (the given sequence)" if args.sequence else ""))  # fmt: skip
    table.add_column("policy")
    for pct in SHOWN_PCT:
        table.add_column(f"{pct}% arrived", justify="right")
    spread: dict[str, tuple[float, float]] = {}  # per policy: the seeds' least, most at 100%
    for policy, _, pct, unallocated, _ in rows:
        if pct == 100:
            low, high = spread.get(policy, (unallocated, unallocated))
            spread[policy] = (min(low, unallocated), max(high, unallocated))
    ranged = len(chosen) > 1 and bool(spread)
    if ranged:
        table.add_column("range at 100%", justify="right")  # least-most over the seeds
    for policy, bins in curves.items():
        cells = [f"{bins[p][0]:.2f}" if p in bins else "-" for p in SHOWN_PCT]
        if ranged:
            cells.append(f"{spread[policy][0]:.2f}-{spread[policy][1]:.2f}"
                         if policy in spread else "-")  # fmt: skip
        table.add_row(policy, *cells)
    console.print(table)
    fgd, bf = (curves.get(p, {}).get(100, (0.0, 0.0))[0] for p in ("fgd", "best_fit"))
    if 100 in curves.get("fgd", {}) and bf > 0:  # (best fit may fill a small cluster exactly)
        console.print(f"FGD leaves {100 * (bf - fgd) / bf:.1f}% fewer GPUs unallocated than "
                      "best-fit at 100% arrived")  # fmt: skip
    console.print(f"wrote {out / FILL_CSV} and {out / FILL_SVG}")
    return 0
