"""`twin families`: the scenario families, their splits and the ranges their members are drawn
from, and the named built-ins that lie in them; `--member SEED` prints one member's scenario
(YAML, as a file would hold it: `twin families --member 17 > m17.yaml`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from twin.cli.arg_types import seed
from twin.errors import ConfigError

if TYPE_CHECKING:
    from twin.sim.families import Range


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    fam = sub.add_parser("families", help="the scenario families: their space, splits and "
                         "members (family:market/17)")  # fmt: skip
    fam.add_argument("family", nargs="?", default="market", help="the family (default market)")
    fam.add_argument("--member", type=seed, metavar="SEED",
                     help="print this member's scenario (0-999)")  # fmt: skip
    fam.set_defaults(func=families_command)


def families_command(args: argparse.Namespace) -> int:
    import yaml

    from twin.sim import families
    from twin.sim.scenarios import load_raw

    if args.family not in families.FAMILIES:
        raise ConfigError(f"no family {args.family!r}; families: {', '.join(families.FAMILIES)}")
    if args.member is not None:
        raw = families.member(f"{families.PREFIX}{args.family}/{args.member}")
        print(yaml.safe_dump(raw, sort_keys=False, width=100), end="")
        return 0
    print(f"family:{args.family}/SEED, a member of the {args.family} family; splits: train "
          f"{_span(families.TRAIN)}, held-out {_span(families.HELD_OUT)} "
          "(--seeds train:N or held-out:N with --scenario family:NAME)")  # fmt: skip
    print(f"  {len(families.POOLS)} pools, in this order; per pool:")
    for p in families.POOLS:
        print(f"    {p.name} ({p.gpu_type}, speed {p.speed:g}): {p.max_gpus[0]}-{p.max_gpus[1]} "
              f"GPUs, {_range(p.price_usd_per_gpu_h)} $/GPU-h, provisioning median "
              f"{_range(p.delay_median_s, 1 / 60)} min, billed from the request or from ready "
              f"({families.FROM_REQUEST:.0%} from the request)")  # fmt: skip
    print(f"  {families.TENANTS[0]}-{families.TENANTS[1]} tenants, each of an archetype:")
    for a in families.ARCHETYPES:
        held = ", ".join(f"{pool} 0-{high}" for pool, (_, high) in a.initial.items())
        hours = families.HORIZON_S / 3600
        peaks = f"{_range(a.rate_per_h)} jobs/h peaking at {_range(a.peak, hours)} h"
        arrivals = f"on/off bursts of {_range(a.rate_per_h, 2)} jobs/h" if a.onoff else peaks
        print(f"    {a.name}: value {_range(a.value_usd_per_gpu_h)} $/GPU-h, SLA "
              f"{_range(a.sla_usd_per_job_h)} $/job-h, budget {_range(a.budget_usd)} $, "
              f"{arrivals}, starts with {held}")  # fmt: skip
    for name in families.MEMBERS:
        raw, _ = load_raw(name)
        outside = [c for c in families.membership(raw) if not c.inside]
        if outside:
            what = "; ".join(f"{c.what} {c.value} not in {c.allowed}" for c in outside)
            print(f"  {name}: outside the space ({what})")
        else:
            print(f"  {name}: a member (each of its {len(families.membership(raw))} drawn "
                  "quantities is in its range)")  # fmt: skip
    return 0


def _span(seeds: range) -> str:
    return f"{seeds.start}-{seeds.stop - 1}"


def _range(r: Range, scale: float = 1.0) -> str:
    return f"{r.low * scale:.4g}-{r.high * scale:.4g}"
