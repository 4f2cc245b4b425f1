"""`twin compare`: policies side by side on the same scenario and seeds.

Each policy runs once per seed (`--seeds N`: seeds 0..N-1, so every policy meets the same
arrivals and draws); the table shows each figure's mean over the seeds and its ratio to the
first policy's, and `--out DIR` writes `compare.json` (every run and the means) and
`compare.csv` (one row per run).
"""

from __future__ import annotations

import argparse
import csv
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from twin.cli.arg_types import at_least_one, out_dir
from twin.errors import ConfigError

if TYPE_CHECKING:
    pass


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cp = sub.add_parser("compare", help="run policies side by side on the same seeds")
    cp.add_argument("--scenario", default="default", help="built-in name or YAML/JSON file")
    cp.add_argument("--policy", required=True, help="policies, comma-separated; ratios are to "
                    "the first")  # fmt: skip
    cp.add_argument(
        "--seeds", type=at_least_one, default=1, help="run seeds 0..N-1 for each policy"
    )
    cp.add_argument(
        "--set", action="append", metavar="PATH=VALUE", help="override a scenario field"
    )
    cp.add_argument("--out", type=out_dir, help="write compare.json and compare.csv here")
    cp.set_defaults(func=compare_command)


def compare(scenario_spec: str, policies: list[str], seeds: int,
            overrides: list[str]) -> dict[str, list[dict[str, float | None]]]:  # fmt: skip
    """Each policy's figures per seed."""
    from twin.sim import scenarios
    from twin.sim.kinds import kind_of
    from twin.sim.runner import run_episode

    scenario = scenarios.load(scenario_spec, overrides)
    table = kind_of(scenario).figures
    runs: dict[str, list[dict[str, float | None]]] = {}
    for policy in policies:
        runs[policy] = []
        for seed in range(seeds):
            summary, _ = run_episode(scenario, seed=seed, policy=policy)
            runs[policy].append({name: get(summary) for name, get in table.items()})
    return runs


def means(rows: list[dict[str, float | None]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for name in rows[0]:
        values = [r[name] for r in rows if r[name] is not None]
        out[name] = statistics.fmean(v for v in values if v is not None) if values else None
    return out


def compare_command(args: argparse.Namespace) -> int:
    from rich.console import Console

    from twin.cli.render import Table

    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    if not policies:
        raise ConfigError("--policy: name at least one policy")
    if args.seeds < 1:
        raise ConfigError(f"--seeds must be at least 1, got {args.seeds}")
    console = Console()
    with console.status(f"running {len(policies)} policies on {args.seeds} seed(s)"):
        runs = compare(args.scenario, policies, args.seeds, args.set or [])
    avg = {p: means(rows) for p, rows in runs.items()}
    first = policies[0]
    title = f"{args.scenario}: means over seeds 0..{args.seeds - 1}; ratio: to {first}"
    table = Table(title=title)
    table.add_column("figure")
    for policy in policies:
        table.add_column(policy, justify="right")
        if policy != first:
            table.add_column("ratio", justify="right")
    for name, ref in avg[first].items():
        cells = []
        for policy in policies:
            value = avg[policy][name]
            cells.append(_number(value))
            if policy != first:
                cells.append("-" if value is None or not ref else f"{value / ref:.2f}x")
        table.add_row(name, *cells)
    console.print(table)
    if args.out:
        _write(Path(args.out), args, runs, avg)
        console.print(f"wrote {Path(args.out) / 'compare.json'} and compare.csv")
    return 0


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _write(out: Path, args: argparse.Namespace, runs: dict[str, list[dict[str, float | None]]],
           avg: dict[str, dict[str, float | None]]) -> None:  # fmt: skip
    import orjson

    out.mkdir(parents=True, exist_ok=True)
    body = {"scenario": args.scenario, "seeds": args.seeds, "overrides": args.set or [],
            "policies": list(runs), "runs": runs, "means": avg}  # fmt: skip
    (out / "compare.json").write_bytes(orjson.dumps(body, option=orjson.OPT_INDENT_2) + b"\n")
    with (out / "compare.csv").open("w", newline="") as stream:
        names = list(next(iter(avg.values())))
        writer = csv.writer(stream)
        writer.writerow(["policy", "seed", *names])
        for policy, rows in runs.items():
            for seed, row in enumerate(rows):
                writer.writerow([policy, seed, *(row[n] for n in names)])
