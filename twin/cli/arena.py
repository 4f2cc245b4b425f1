"""`twin arena`: agent line-ups over scenarios and seeds as real gateway sessions, ranked with
95% confidence intervals against a paired baseline; `twin arena merge A B --out C` puts two
arenas of the same scenarios and seeds on one leaderboard.

Every agent plays every tenant on every seed (roles rotate); each seed's baseline (the tenants'
own policies, no agent, no trading) is played once and paired with all of them. Sessions run on
a local process pool or on Ray, resume where they stopped, and end in `leaderboard.parquet`,
`sessions.parquet`, `leaderboard.html` and `arena.json` (what ran, to run it again).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twin.cli.analyse import add_json_option
from twin.cli.arg_types import at_least_one, out_dir, positive, positive_ms
from twin.errors import ConfigError
from twin.schema.vocabulary import DEFAULT_MECHANISM, mechanism_names

if TYPE_CHECKING:
    from rich.console import Console

    from twin.arena.lineup import AgentSpec, ScenarioEntry, SessionTask
    from twin.arena.store import Boards

ENGINES = ("local", "ray")
ROUND_TIMEOUT_MS, LLM_ROUND_TIMEOUT_MS = 30_000, 120_000
SHOWN = (
    ("#", "rank", 0), ("agent", "agent", None), ("gain $", "gain_usd", 0),
    ("95% CI", ("gain_lo_usd", "gain_hi_usd"), 0), ("trades", "trades_applied", 1),
    ("valid", "valid_first_share", 2), ("p95 s", "answer_s_p95", 1),
    ("Pareto", "pareto_share", 2),
)  # fmt: skip
MIRRORED = (
    ("agent", "agent", None),
    ("welfare gain $", ("welfare_gain_usd", "welfare_gain_lo_usd", "welfare_gain_hi_usd"), 0),
    ("trade gain $", ("trade_welfare_gain_usd", "trade_welfare_gain_lo_usd",
                      "trade_welfare_gain_hi_usd"), 0),
    ("score", ("score", "score_lo", "score_hi"), 2), ("Pareto", "pareto_share", 2),
)  # fmt: skip
CROSSED = (
    ("agent", "agent", None), ("against", "against", None),
    ("gain $", ("gain_usd", "gain_lo_usd", "gain_hi_usd"), 0),
    ("trade gain $", "trade_gain_usd", 1),
)  # fmt: skip


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ar = sub.add_parser("arena", help="rank agent line-ups over seeds, with confidence intervals")
    ar.add_argument("--scenario", default="market",
                    help="scenarios, comma-separated: built-in names or files; or a family "
                    "(family:market, with --seeds held-out:N or train:N: its members, each on "
                    "its own seed, pooled as one scenario)")  # fmt: skip
    ar.add_argument("--agents", help="agents, comma-separated: built-in policies, or names "
                    "given by --llm (every agent plays every tenant on every seed)")  # fmt: skip
    ar.add_argument("--llm", action="append", default=[], metavar="NAME=URL,MODEL[,PROMPT]",
                    help="an LLM agent: an OpenAI-compatible endpoint, a model, and "
                    "optionally a system prompt file naming {tenant} and {others} "
                    "(repeat for more)")  # fmt: skip
    ar.add_argument("--policy", action="append", default=[], metavar="NAME=SOURCE",
                    help="a trained agent: a policy file (twin train's policy.json) or "
                    "package.module:callable taking a Seat (repeat for more)")  # fmt: skip
    ar.add_argument("--fallback", default="stepper",
                    help="the built-in policy LLM agents fall back on")  # fmt: skip
    ar.add_argument("--llm-schema-format", choices=("json_schema", "json_object"),
                    default="json_schema", help="how LLM endpoints are asked for JSON "
                    "(llama.cpp's server: json_object)")  # fmt: skip
    ar.add_argument("--no-preflight", dest="preflight", action="store_false",
                    help="start without checking each LLM endpoint first")  # fmt: skip
    ar.add_argument("--llm-first-answer-s", type=positive,
                    help="how long LLM agents wait for a first answer (default: what the "
                    "slowest endpoint's preflight measured it needs, within the round's "
                    "deadline)")  # fmt: skip
    ar.add_argument("--seeds", default="8", help="N (seeds 0..N-1), A-B, a list, or held-out:N "
                    "(the first N held-out seeds) (default 8); with a family, held-out:N or "
                    "train:N members")  # fmt: skip
    ar.add_argument("--mechanism", default=DEFAULT_MECHANISM,
                    help="mechanisms, comma-separated (" + ", ".join(mechanism_names()) + "): "
                    "every line-up plays under each")  # fmt: skip
    ar.add_argument("--regime", default="rotation",
                    help="regimes, comma-separated: rotation (every agent every tenant), mirror "
                    "(every tenant one agent), cross (A in one seat, B in the others)")  # fmt: skip
    ar.add_argument("--no-trade-gain", dest="trade_gain", action="store_false",
                    help="play no line-up again with trading off (no trade gain: half the "
                    "sessions where an agent trades; for costly LLM agents)")  # fmt: skip
    ar.add_argument("--round-timeout-ms", type=positive_ms, help=f"a round's deadline (default "
                    f"{ROUND_TIMEOUT_MS}; with LLM agents {LLM_ROUND_TIMEOUT_MS})")  # fmt: skip
    ar.add_argument("--out", type=out_dir, help="the arena's directory (resumes if it exists)")
    ar.add_argument("--workers", type=at_least_one, default=os.cpu_count() or 1,
                    help="sessions at once (processes or Ray CPUs); default: cores")  # fmt: skip
    ar.add_argument("--keep-logs", action="store_true",
                    help="keep each session's log and summary in OUT/logs/KEY")  # fmt: skip
    ar.add_argument("--engine", choices=ENGINES, default="local")
    ar.add_argument("--ray-address", help="a Ray cluster to run on (default: a local Ray)")
    add_json_option(ar)
    ar.set_defaults(func=arena_command)
    more = ar.add_subparsers(dest="arena_command", metavar="{merge}")
    mg = more.add_parser("merge", help="two arenas of the same scenarios and seeds, as one")
    mg.add_argument("first", help="an arena directory")
    mg.add_argument("second", help="another, of the same scenarios and seeds")
    mg.add_argument(
        "--out",
        dest="merge_out",
        metavar="OUT",
        required=True,
        type=out_dir,
        help="the merged arena's directory",
    )
    mg.set_defaults(func=merge_command)


def preflight_endpoints(args: argparse.Namespace, llms: list[AgentSpec]) -> None:
    """Check each LLM endpoint before any session (ConfigError if one fails); without
    `--llm-first-answer-s`, first answers may take what the slowest endpoint needs."""
    from twin.cli.play import check_endpoint

    ceiling_s = (args.round_timeout_ms or LLM_ROUND_TIMEOUT_MS) / 1000
    derived = []
    for base_url, model in dict.fromkeys((a.base_url or "", a.model or "") for a in llms):
        derived.append(check_endpoint(base_url, model).first_answer_s(ceiling_s))
    if args.llm_first_answer_s is None and derived:
        args.llm_first_answer_s = max(derived)


def arena_command(args: argparse.Namespace) -> int:
    from twin.arena import lineup, store
    from twin.arena.run import finish, manifest, prepare
    from twin.cli.analyse import require_analysis
    from twin.cli.render import console_for, print_json
    from twin.logs import configure_logging

    require_analysis()
    configure_logging("warning")  # the sessions' logs stay quiet; the console tells the story
    if not args.agents or not args.out:
        raise ConfigError("twin arena needs --agents and --out (or: twin arena merge A B --out C)")
    if args.workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {args.workers}")
    if args.engine == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise ConfigError("--engine ray needs Ray: pip install 'ray>=2.9'")
    from twin_agents.registry import BUILT_IN

    if args.fallback not in BUILT_IN:
        raise ConfigError(f"--fallback: {args.fallback!r} is not one of {list(BUILT_IN)}")
    llms = [lineup.parse_llm(spec, args.fallback, args.llm_schema_format) for spec in args.llm]
    if args.preflight:
        preflight_endpoints(args, llms)
    trained = [lineup.parse_policy(spec) for spec in args.policy]
    agents = lineup.parse_agents(args.agents, llms + trained)
    scenarios, seeds, pairs = _played(args.scenario, args.seeds)
    timeout_ms = args.round_timeout_ms or (
        LLM_ROUND_TIMEOUT_MS if any(a.policy == "llm" for a in agents) else ROUND_TIMEOUT_MS
    )
    mechanisms = parse_list("--mechanism", args.mechanism, mechanism_names())
    chosen = parse_list("--regime", args.regime, lineup.REGIMES)
    regimes = tuple(r for r in lineup.REGIMES if r in chosen)
    if "cross" in regimes and len(agents) < 2:
        raise ConfigError("--regime cross needs at least two agents")
    out = Path(args.out)
    tasks = [
        task
        for entry, seed in pairs
        for task in lineup.tasks(
            [entry],
            [seed],
            agents,
            mechanisms=mechanisms,
            regimes=regimes,
            trade_gain=args.trade_gain,
            round_timeout_ms=timeout_ms,
            first_answer_s=args.llm_first_answer_s,
            logs=str(out / "logs") if args.keep_logs else None,
        )
    ]
    prepare(out, manifest(scenarios, seeds, agents, mechanisms=mechanisms, regimes=regimes,
                          trade_gain=args.trade_gain,
                          round_timeout_ms=timeout_ms))  # fmt: skip
    console = console_for(args)
    played = _play_all(console, tasks, out, args)
    boards = finish(out, tasks)
    show(console, boards)
    console.print(f"{len(tasks)} sessions ({played} now, {len(tasks) - played} done before)")
    console.print(store.written(out, boards), soft_wrap=True)  # a path is not cut
    if args.json:
        print_json("arena", sessions=len(tasks), played_now=played, out=str(out),
                   **boards._asdict())  # fmt: skip
    return 0


def _played(spec: str, selector: str) -> tuple[list[ScenarioEntry], list[int],
                                               list[tuple[ScenarioEntry, int]]]:  # fmt: skip
    """The scenarios, the seeds and which seeds each plays: every scenario on every seed, or a
    family's members (`family:market` with `held-out:N`) each on its own."""
    from twin.arena import lineup
    from twin.sim import families

    named = list(dict.fromkeys(s.strip() for s in spec.split(",") if s.strip()))  # once each
    if not named:
        raise ConfigError("--scenario: name at least one scenario")
    whole = [s for s in named if families.is_family(s) and families.parse(s)[1] is None]
    if whole and len(named) == 1:
        pairs = lineup.family_entries(named[0], selector)
        return [entry for entry, _ in pairs], [m for _, m in pairs], pairs
    if whole:
        raise ConfigError(f"--scenario: a whole family ({whole[0]}) is played alone, with "
                          "--seeds held-out:N or train:N; name members beside other scenarios "
                          "as family:market/17")  # fmt: skip
    seeds = lineup.parse_seeds(selector)
    scenarios = [lineup.scenario_entry(s) for s in named]
    return scenarios, seeds, [(entry, seed) for entry in scenarios for seed in seeds]


def _play_all(console: Console, tasks: list[SessionTask], out: Path,
              args: argparse.Namespace) -> int:  # fmt: skip
    """Play the sessions not yet played, with a progress bar on a terminal and a line every
    few seconds elsewhere; how many played now."""
    from twin.arena.run import Ticker, execute
    from twin.cli.progress import progress_bar

    with progress_bar(console, "arena", len(tasks), "sessions") as advance:
        if advance is not None:
            bar = advance

            def progress(done: int, running: int) -> None:
                bar(done, f"{running} running")

            return execute(tasks, out, engine=args.engine, workers=args.workers,
                           address=args.ray_address, progress=progress)  # fmt: skip
        with Ticker(console.print, len(tasks)) as tick:
            return execute(tasks, out, engine=args.engine, workers=args.workers,
                           address=args.ray_address, progress=tick)  # fmt: skip


def parse_list(flag: str, text: str, allowed: tuple[str, ...]) -> list[str]:
    """`a,b` -> ["a", "b"], each one of `allowed`; ConfigError names what is not."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in allowed]
    if unknown or not names:
        listed = ", ".join(allowed)
        raise ConfigError(f"{flag}: unknown {unknown[0]!r}; allowed: {listed}" if unknown
                          else f"{flag}: name at least one of {listed}")  # fmt: skip
    if len(set(names)) != len(names):
        raise ConfigError(f"{flag}: name each once")
    return names


def merge_command(args: argparse.Namespace) -> int:
    from rich.console import Console

    from twin.arena import store
    from twin.cli.analyse import require_analysis

    require_analysis()
    out = Path(args.merge_out)
    manifest, rows, twice = store.merge(Path(args.first), Path(args.second), out)
    boards = store.write_outputs(out, manifest, rows)
    console = Console()
    show(console, boards)
    console.print(f"merged {len(rows)} sessions ({twice} in both, kept once)")
    console.print(store.written(out, boards), soft_wrap=True)  # a path is not cut
    return 0


def show(console: Console, boards: Boards) -> None:
    """Per scenario and mechanism: the ranking (all roles together), the mirror against the
    bound, and the cross-play matrix, as tables."""
    from twin.arena.board import ALL_ROLES
    from twin.arena.page import shared

    every = [row for board in boards for row in board]
    several = len({r["mechanism"] for r in every}) > 1
    for key in dict.fromkeys((r["scenario_sha256"], r["mechanism"]) for r in every):
        mechanism = key[1]
        ranked, mirrored, crossed = (_of(b, key) for b in boards)

        rows = [{**r, "answer_s_p95": _seconds(r["answer_ms_p95"])} for r in ranked
                if r["role"] == ALL_ROLES]  # fmt: skip
        first = (rows or mirrored or crossed)[0]
        name = f"{first['scenario']} ({mechanism})" if several else first["scenario"]
        plural = "s" * (first["seeds"] != 1)
        if rows:
            once = shared(rows, SHOWN)  # session-wide, alike on every row: said once
            columns = tuple(c for c in SHOWN if c[0] not in once)
            _table(console, f"{name}: {first['seeds']} seed{plural}, ranked by gain over the "
                   "paired baseline", columns, rows)  # fmt: skip
            for head, value in once.items():
                console.print(f"{head} (the sessions, all agents together): {value}")
        if mirrored:
            _table(console, f"{name}: mirror (every tenant one agent): welfare gain, trade gain "
                   "and score, 95% CIs", MIRRORED, mirrored)  # fmt: skip
            for r in mirrored:
                console.print(_attribution(r), soft_wrap=True)
        if crossed:
            _table(console, f"{name}: cross-play, gain of the agent in one seat against the "
                   "other in the rest", CROSSED, crossed)  # fmt: skip


def _attribution(r: dict[str, Any]) -> str:
    """The mirror's gain split: provisioning (trading off), trade (on against off), against
    the bound's trade headroom; a trade gain above it is repair."""
    from twin.arena.page import cell

    span = cell(r, ("provisioning_welfare_gain_lo_usd", "provisioning_welfare_gain_hi_usd"), 0)
    trade, room = cell(r, "trade_welfare_gain_usd", 0), cell(r, "trade_headroom_usd", 0)
    line = (f"{r['agent']}: from provisioning {cell(r, 'provisioning_welfare_gain_usd', 0)} "
            f"({span}) $, from trade {trade} $")  # fmt: skip
    line += f" > headroom {room} $ (repair)" if r["trade_repair"] else f", headroom {room} $"
    return line


def _of(rows: list[dict[str, Any]], key: tuple[str, str]) -> list[dict[str, Any]]:
    """The rows of one (scenario hash, mechanism)."""
    return [r for r in rows if (r["scenario_sha256"], r["mechanism"]) == key]


def _table(console: Console, title: str, columns: Any, rows: list[dict[str, Any]]) -> None:
    from twin.arena.page import cell
    from twin.cli.render import Table

    table = Table(title=title)
    for head, field, _ in columns:
        if field in ("agent", "against"):
            table.add_column(head, min_width=max(len(r[field]) for r in rows))
        else:
            table.add_column(head, justify="right")
    for r in rows:
        table.add_row(*(cell(r, field, digits) for _, field, digits in columns))
    console.print(table)


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000
