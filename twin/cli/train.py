"""`twin train`: the reference training recipe. A cross-entropy search trains a small linear
provisioning policy (one row of weights per tenant) on a job-level scenario's training seeds,
draws its learning curve on validation seeds, and evaluates it against the tenants' own policies
on held-out seeds with 95% intervals. `--out DIR` gets `policy.json` (seat it with `twin arena
--policy NAME=DIR/policy.json` or `twin play --policy`), `curve.csv`, `curve.svg` and
`evaluation.json`.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from twin.cli.arg_types import at_least_one, out_dir, seed
from twin.errors import ConfigError
from twin.schema.vocabulary import DEFAULT_MECHANISM, mechanism_names

if TYPE_CHECKING:
    from twin.rl.training import Evaluation

from twin.cli.curves import EVALUATION_FILE


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tr = sub.add_parser("train", help="train a provisioning policy; evaluate it on held-out seeds")
    tr.add_argument("--scenario", default="market-scarce", help="built-in name, YAML/JSON file, "
                    "or a family (family:market: one policy for every seat, trained on the "
                    "family's train split, evaluated on its held-out members and on the named "
                    "built-ins in it)")  # fmt: skip
    tr.add_argument("--set", action="append", metavar="PATH=VALUE", help="override a field")
    tr.add_argument(
        "--generations", type=at_least_one, default=40, help="search generations (default 40)"
    )
    tr.add_argument(
        "--population", type=at_least_one, default=32, help="candidates a generation (32)"
    )
    tr.add_argument(
        "--elite", type=at_least_one, default=8, help="candidates kept a generation (8)"
    )
    tr.add_argument("--seeds-per-generation", type=at_least_one, default=16,
                    help="training seeds each candidate plays a generation (16)")  # fmt: skip
    tr.add_argument("--validation-seeds", type=at_least_one, default=16,
                    help="training seeds for the learning curve, not searched on (16)")  # fmt: skip
    tr.add_argument("--held-out", type=at_least_one, default=30,
                    help="held-out seeds to evaluate on, the split's first N (30); with a "
                    "family, also its first N held-out members (at most 100)")  # fmt: skip
    tr.add_argument("--episodes-per-member", type=at_least_one, default=1,
                    help="with a family: episodes each held-out member is evaluated on (1); "
                    "from 2, the share of members whose own interval is above zero")  # fmt: skip
    tr.add_argument("--mechanism", choices=mechanism_names(), default=DEFAULT_MECHANISM)
    tr.add_argument("--seed", type=seed, default=0, help="the search's own seed (default 0)")
    tr.add_argument("--workers", type=at_least_one, help="processes (default: the cores)")
    tr.add_argument("--start", metavar="POLICY_FILE",
                    help="start the search from this policy file's rows (default: the tenants' "
                    "own policies)")  # fmt: skip
    tr.add_argument("--trading-only", action="store_true",
                    help="search only the trading parameters (a mechanism that clears held "
                    "GPUs), keeping the provisioning weights of the start")  # fmt: skip
    tr.add_argument("--evaluate", metavar="POLICY_FILE",
                    help="only evaluate this policy file on the held-out seeds")  # fmt: skip
    tr.add_argument(
        "--out", type=out_dir, help="write policy.json, curve.csv, curve.svg, evaluation.json here"
    )
    tr.set_defaults(func=train_command)


def _positive(args: argparse.Namespace, *names: str) -> None:
    for name in names:
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {value}")


def train_command(args: argparse.Namespace) -> int:
    from twin.cli.train_args import output_dir, trained_or_loaded
    from twin.rl.seeds import seed_split
    from twin.rl.training import default_workers, evaluate, train
    from twin.sim import scenarios

    _positive(args, "generations", "population", "elite", "seeds_per_generation",
              "validation_seeds", "held_out", "workers")  # fmt: skip
    if args.elite > args.population:
        raise ConfigError(f"--elite {args.elite} is more than --population {args.population}")
    if not args.out and not args.evaluate:
        raise ConfigError("twin train needs --out (or --evaluate POLICY_FILE)")
    from twin.sim import families

    if families.is_family(args.scenario) and families.parse(args.scenario)[1] is None:
        from twin.cli.train_family import train_family_command

        return train_family_command(args)
    scenario = scenarios.as_cluster(scenarios.load(args.scenario, args.set or []))
    workers = args.workers or default_workers()
    try:
        held_out = seed_split(scenario.name).first("held_out", args.held_out)
    except ValueError as exc:
        raise ConfigError(f"--held-out: {exc}") from None
    out = output_dir(args)
    policy = trained_or_loaded(
        args, workers, out, name=scenario.name, on=scenario.name, what="seeds",
        search=lambda how, hear: train(scenario, how, progress=hear),
    )  # fmt: skip
    result = evaluate(scenario, policy, held_out, mechanism=args.mechanism, workers=workers)
    _print(result)
    if out is not None:
        (out / EVALUATION_FILE).write_text(json.dumps(result.to_json(), indent=2) + "\n")
        print(f"wrote {', '.join(sorted(p.name for p in out.iterdir()))} in {out}")
    return 0


def _print(result: Evaluation) -> None:
    from rich.console import Console

    from twin.cli.render import Table

    table = Table(title=f"{result.scenario}: the trained policy against the tenants' own "
                  f"policies, {len(result.seeds)} held-out seeds ($)")  # fmt: skip
    for column in ("tenant", "own policy", "trained", "gain", "95% interval"):
        table.add_column(column, justify="left" if column == "tenant" else "right")
    for t in result.tenants:
        g = result.gain(t)
        own = result.own_usd(t)
        table.add_row(t, f"{own:.2f}", f"{own + g.mean:.2f}", f"{g.mean:+.2f}",
                      f"{g.low:+.2f} .. {g.high:+.2f}")  # fmt: skip
    table.add_section()
    for label, g in (("all roles", result.all_roles()), ("welfare", result.welfare())):
        table.add_row(label, "", "", f"{g.mean:+.2f}", f"{g.low:+.2f} .. {g.high:+.2f}")
    console = Console()
    console.print(table)
    console.print("gain: the trained policy's return less the tenant's own policy's on the same "
                  "seed (every tenant seated); all roles: per seed the mean over tenants; "
                  "intervals: percentile bootstrap over seeds")  # fmt: skip
