"""`twin train --scenario family:NAME`: one policy for every seat, trained on the family's train
split and evaluated where it was not trained: the family's first N held-out members, and each
named built-in in the family on its held-out seeds; per scenario and pooled, with 95% intervals.
`--out DIR` gets `policy.json` (its `default` row: seat it in any member), `curve.csv`,
`curve.svg` and `evaluation.json`."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from twin.errors import ConfigError

if TYPE_CHECKING:
    from twin.rl.family_training import FamilyEvaluation
    from twin.rl.training import Evaluation


def train_family_command(args: argparse.Namespace) -> int:
    from twin.cli.curves import EVALUATION_FILE
    from twin.cli.train_args import output_dir, trained_or_loaded
    from twin.rl.family_training import evaluate_family, train_family
    from twin.rl.seeds import seed_split
    from twin.rl.training import default_workers, evaluate
    from twin.sim import families, scenarios

    family, _ = families.parse(args.scenario)
    if args.set:
        raise ConfigError("--set does not apply to a family (its members are drawn)")
    held = len(families.HELD_OUT)
    if args.held_out > held:
        raise ConfigError(f"--held-out {args.held_out}: a family has {held} held-out members")
    workers = args.workers or default_workers()
    out = output_dir(args)
    policy = trained_or_loaded(
        args, workers, out, name=f"family:{family}", what="members",
        on=f"family:{family} (train members {families.TRAIN.start}-{families.TRAIN.stop - 1})",
        search=lambda how, hear: train_family(family, how, progress=hear),
    )  # fmt: skip
    members = families.seeds(family, f"held-out:{args.held_out}")
    result = evaluate_family(family, policy, members, mechanism=args.mechanism, workers=workers,
                             episodes=args.episodes_per_member)  # fmt: skip
    builtins: dict[str, Evaluation] = {}
    for name in families.MEMBERS:
        scenario = scenarios.as_cluster(scenarios.load(name))
        seeds = seed_split(scenario.name).first("held_out", args.held_out)
        builtins[name] = evaluate(scenario, policy, seeds, mechanism=args.mechanism,
                                  workers=workers)  # fmt: skip
    report = _report(result, builtins)
    _print(report)
    if out is not None:
        report["held_out_members"] = result.to_json()
        report["builtins"] = {n: e.to_json() for n, e in builtins.items()}
        (out / EVALUATION_FILE).write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {', '.join(sorted(p.name for p in out.iterdir()))} in {out}")
    return 0


def _report(family: FamilyEvaluation, builtins: dict[str, Evaluation]) -> dict[str, Any]:
    """Per scenario (the held-out members together, each built-in) and pooled over every
    episode: the welfare gain and the gain per tenant with 95% intervals."""
    from twin.rl.family_training import per_tenant
    from twin.rl.training import Interval

    members = len(set(family.members))
    rows: dict[str, Any] = {
        f"held-out members ({members})": {
            "episodes": len(family.members), "welfare_gain_usd": family.welfare().to_json(),
            "all_roles_gain_usd": family.all_roles().to_json(),
            "share_gaining": family.share_gaining(),
            "share_gaining_significantly": family.share_significant(),
        },
    }  # fmt: skip
    welfare = family.per_member_means(family.welfare_gains())
    tenant = family.per_member_means(family.tenant_gains())
    for name, ev in builtins.items():
        pairs = list(zip(ev.learned, ev.own, strict=True))
        w = [sum(a.values()) - sum(b.values()) for a, b in pairs]
        t = [per_tenant(a) - per_tenant(b) for a, b in pairs]
        rows[name] = {"episodes": len(pairs), "welfare_gain_usd": Interval.of(w).to_json(),
                      "all_roles_gain_usd": Interval.of(t).to_json(),
                      "share_gaining": sum(g > 0 for g in w) / len(w)}  # fmt: skip
        welfare, tenant = welfare + w, tenant + t
    rows["pooled"] = {"episodes": len(welfare),
                      "welfare_gain_usd": Interval.of(welfare).to_json(),
                      "all_roles_gain_usd": Interval.of(tenant).to_json(),
                      "share_gaining": sum(g > 0 for g in welfare) / len(welfare)}  # fmt: skip
    return {"family": family.family, "scenarios": rows}


def _print(report: dict[str, Any]) -> None:
    from rich.console import Console

    from twin.cli.render import Table

    table = Table(title=f"family:{report['family']}: the trained policy in every seat against "
                  "the tenants' own policies, where it was not trained ($)")  # fmt: skip
    for column in ("scenario", "episodes", "welfare gain", "95% interval", "per tenant",
                   "95% interval", "gaining"):  # fmt: skip
        table.add_column(column, justify="left" if column == "scenario" else "right")
    for name, row in report["scenarios"].items():
        if name == "pooled":
            table.add_section()
        w, t = row["welfare_gain_usd"], row["all_roles_gain_usd"]
        gaining = f"{row['share_gaining']:.0%}"
        table.add_row(name, str(row["episodes"]), f"{w['mean']:+.2f}",
                      f"{w['low']:+.2f} .. {w['high']:+.2f}", f"{t['mean']:+.2f}",
                      f"{t['low']:+.2f} .. {t['high']:+.2f}", gaining)  # fmt: skip
    console = Console()
    console.print(table)
    for name, row in report["scenarios"].items():
        if row.get("share_gaining_significantly") is not None:
            console.print(f"{name}: {row['share_gaining_significantly']:.0%} of members gain "
                          "with their own 95% interval above zero")  # fmt: skip
    console.print("held-out members: each on its own seeds (gaining: the share of members whose "
                  "mean gain is above zero); built-ins: their held-out seeds (the share of "
                  "episodes); intervals: percentile bootstrap over members and seeds")  # fmt: skip
