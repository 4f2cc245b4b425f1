"""`twin bound`: the welfare a central planner with hindsight could reach on a scenario, per seed,
with GPUs movable between tenants and with holdings kept per tenant; their difference is the
trade headroom. A feasible schedule's welfare (the best of the tenants' own policies on the same
workload) stands beside it, to show how tight it is. `--out DIR` writes `bound.json` and
`bound.parquet`.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from twin.cli.arg_types import at_least_one, out_dir, positive
from twin.errors import ConfigError

if TYPE_CHECKING:
    from twin.bound.run import SeedBound


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bd = sub.add_parser("bound", help="the best welfare a planner with hindsight could reach")
    bd.add_argument("--scenario", default="market", help="built-in name, YAML/JSON file, "
                    "family member (family:market/17) or family (family:market, with --seeds "
                    "train:N or held-out:N: its members, each on its own seed)")  # fmt: skip
    bd.add_argument("--seeds", default="1", help="N (seeds 0..N-1), A-B, or a list (default 1); "
                    "with a family, train:N or held-out:N")  # fmt: skip
    bd.add_argument("--slot-s", type=positive, help="the program's slot (default: the decision "
                    "interval)")  # fmt: skip
    bd.add_argument("--time-limit-s", type=positive, default=20.0, help="per program (default "
                    "20; a program stopped there reports the best bound proved)")  # fmt: skip
    bd.add_argument("--fractional-jobs", action="store_true",
                    help="the linear program alone: a fraction of a job earns that fraction "
                    "of its value (looser, faster)")  # fmt: skip
    bd.add_argument("--steps-per-slot", type=at_least_one, default=1,
                    help="count each slot's processing in N steps, so jobs queue within a slot "
                    "(tighter, slower)")  # fmt: skip
    bd.add_argument("--integer-gpus", action="store_true", help="GPUs held and requested in "
                    "whole numbers (tighter, much slower)")  # fmt: skip
    bd.add_argument(
        "--set", action="append", metavar="PATH=VALUE", help="override a scenario field"
    )
    bd.add_argument("--out", type=out_dir, help="write bound.json and bound.parquet here")
    bd.set_defaults(func=bound_command)


def bound_command(args: argparse.Namespace) -> int:
    from twin.arena.lineup import parse_seeds
    from twin.bound.program import Tightness, relaxes
    from twin.bound.run import bound_seed, write
    from twin.sim import families, scenarios

    if args.slot_s is not None and args.slot_s <= 0:
        raise ConfigError(f"--slot-s must be positive, got {args.slot_s:g}")
    if args.time_limit_s <= 0:
        raise ConfigError(f"--time-limit-s must be positive, got {args.time_limit_s:g}")
    tightness = Tightness(args.steps_per_slot, not args.fractional_jobs, args.integer_gpus)
    plays = families.plays(args.scenario, args.seeds, parse_seeds)
    results = [bound_seed(scenarios.as_cluster(scenarios.load(spec, args.set or [])), seed,
                          slot_s=args.slot_s, tightness=tightness,
                          time_limit_s=args.time_limit_s)
               for spec, seed in plays]  # fmt: skip
    _print(results, relaxes(tightness))
    if families.is_family(args.scenario) and len(results) > 1:
        _family(results)
    if args.out:
        written = write(results, Path(args.out))
        print("wrote " + " and ".join(str(p) for p in written))
    return 0


TRADE_SHARE = 0.05
"""A member has real gains from trade where its headroom is at least this share of its bound."""


def _family(results: list[SeedBound]) -> None:
    """The distribution of trade headroom over a family's members."""
    from rich.console import Console

    shares = sorted(r.headroom_usd / r.bound_usd if r.bound_usd > 0 else 0.0 for r in results)
    dollars = sorted(r.headroom_usd for r in results)
    traded = sum(share >= TRADE_SHARE for share in shares)
    Console().print(
        f"trade headroom over {len(results)} members: median {statistics.median(dollars):.1f} $ "
        f"({statistics.median(shares):.0%} of the bound), 10-90%: "
        f"{_quantile(dollars, 0.1):.1f}-{_quantile(dollars, 0.9):.1f} $; "
        f"{traded} of {len(results)} ({traded / len(results):.0%}) with headroom of "
        f"{TRADE_SHARE:.0%} of the bound or more (real gains from trade)"
    )


def _best_own(results: list[SeedBound]) -> str:
    """Which of the tenants' own policies was best, on which seeds."""
    seeds: dict[str, list[str]] = {}
    for r in results:
        seeds.setdefault(r.feasible_policy, []).append(str(r.seed))
    return "; ".join(f"{policy} on seed{'s' if len(on) > 1 else ''} {', '.join(on)}"
                     for policy, on in seeds.items())  # fmt: skip


def _quantile(ordered: list[float], q: float) -> float:
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def _print(results: list[SeedBound], relaxes: tuple[str, ...]) -> None:
    from rich.console import Console

    from twin.cli.render import Table

    name = results[0].scenario
    if len({r.scenario for r in results}) > 1:
        name = f"{results[0].scenario} .. {results[-1].scenario}"
    table = Table(title=f"{name}: welfare bound (all tenants' returns together, $)")
    columns = ("seed", "jobs", "pooled", "separable", "headroom", "own", "planner", "gap")
    for column in columns:
        table.add_column(column, justify="right")
    for r in results:
        share = r.headroom_usd / r.bound_usd if r.bound_usd > 0 else 0.0
        table.add_row(str(r.seed), str(r.jobs), f"{r.pooled.welfare_usd:.1f}",
                      f"{r.separable.welfare_usd:.1f}", f"{r.headroom_usd:.1f} ({share:.0%})",
                      f"{r.feasible_usd:.1f}",
                      f"{r.planner_usd:.1f}", f"{r.planner_gap_usd:.1f}")  # fmt: skip
    if len(results) > 1:
        table.add_section()
        table.add_row(
            "mean", "", f"{statistics.fmean(r.pooled.welfare_usd for r in results):.1f}",
            f"{statistics.fmean(r.separable.welfare_usd for r in results):.1f}",
            f"{statistics.fmean(r.headroom_usd for r in results):.1f}",
            f"{statistics.fmean(r.feasible_usd for r in results):.1f}",
            f"{statistics.fmean(r.planner_usd for r in results):.1f}",
            f"{statistics.fmean(r.planner_gap_usd for r in results):.1f}",
        )  # fmt: skip
    console = Console()
    console.print(table)
    console.print(
        "pooled: GPUs move between tenants at once; separable: each tenant holds its own; "
        "headroom: what trade adds (pooled - separable). Feasible schedules on the same "
        f"arrivals: the best of the tenants' own policies ({_best_own(results)}), and the "
        "planner (the best of the separable programs' holdings played in the twin); gap: the "
        "bound less the better of the two. The bound relaxes:"
    )
    for line in relaxes:
        console.print(f"  - {line}")
