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

from twin.errors import ConfigError
from twin.schema.vocabulary import DEFAULT_MECHANISM, mechanism_names

if TYPE_CHECKING:
    from rich.console import Console

ENGINES = ("local", "ray")
ROUND_TIMEOUT_MS, LLM_ROUND_TIMEOUT_MS = 30_000, 120_000
SHOWN = (
    ("#", "rank", 0), ("agent", "agent", None), ("gain $", "gain_usd", 0),
    ("95% CI", ("gain_lo_usd", "gain_hi_usd"), 0), ("trades", "trades_applied", 1),
    ("valid", "valid_first_share", 2), ("p95 s", "answer_s_p95", 1),
    ("Pareto", "pareto_share", 2),
)  # fmt: skip


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ar = sub.add_parser("arena", help="rank agent line-ups over seeds, with confidence intervals")
    ar.add_argument("--scenario", default="market",
                    help="scenarios, comma-separated: built-in names or files")  # fmt: skip
    ar.add_argument("--agents", help="agents, comma-separated: built-in policies, or names "
                    "given by --llm (every agent plays every tenant on every seed)")  # fmt: skip
    ar.add_argument("--llm", action="append", default=[], metavar="NAME=URL,MODEL[,PROMPT]",
                    help="an LLM agent: an OpenAI-compatible endpoint, a model, and "
                    "optionally a system prompt file naming {tenant} and {others} "
                    "(repeat for more)")  # fmt: skip
    ar.add_argument("--fallback", default="baseline",
                    help="the built-in policy LLM agents fall back on")  # fmt: skip
    ar.add_argument("--llm-schema-format", choices=("json_schema", "json_object"),
                    default="json_schema", help="how LLM endpoints are asked for JSON "
                    "(llama.cpp's server: json_object)")  # fmt: skip
    ar.add_argument("--llm-first-answer-s", type=float,
                    help="how long LLM agents wait for a first answer (default 0.5)")  # fmt: skip
    ar.add_argument("--seeds", default="8", help="N (seeds 0..N-1), A-B, or a list (default 8)")
    ar.add_argument("--mechanism", choices=mechanism_names(), default=DEFAULT_MECHANISM)
    ar.add_argument("--round-timeout-ms", type=int, help=f"a round's deadline (default "
                    f"{ROUND_TIMEOUT_MS}; with LLM agents {LLM_ROUND_TIMEOUT_MS})")  # fmt: skip
    ar.add_argument("--out", help="the arena's directory (resumes if it exists)")
    ar.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                    help="sessions at once (processes or Ray CPUs); default: cores")  # fmt: skip
    ar.add_argument("--keep-logs", action="store_true",
                    help="keep each session's log and summary in OUT/logs/KEY")  # fmt: skip
    ar.add_argument("--engine", choices=ENGINES, default="local")
    ar.add_argument("--ray-address", help="a Ray cluster to run on (default: a local Ray)")
    ar.set_defaults(func=arena_command)
    more = ar.add_subparsers(dest="arena_command", metavar="{merge}")
    mg = more.add_parser("merge", help="two arenas of the same scenarios and seeds, as one")
    mg.add_argument("first", help="an arena directory")
    mg.add_argument("second", help="another, of the same scenarios and seeds")
    mg.add_argument(
        "--out", dest="merge_out", metavar="OUT", required=True, help="the merged arena's directory"
    )
    mg.set_defaults(func=merge_command)


def arena_command(args: argparse.Namespace) -> int:
    from rich.console import Console

    from twin.arena import lineup
    from twin.arena.run import Ticker, execute, finish, manifest, prepare
    from twin.cli.analyse import require_analysis
    from twin.cli.progress import progress_bar
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
            raise ConfigError("--engine ray needs Ray: pip install 'cluster-twin[ray]'")
    from agents.registry import BUILT_IN

    if args.fallback not in BUILT_IN:
        raise ConfigError(f"--fallback: {args.fallback!r} is not one of {list(BUILT_IN)}")
    llms = [lineup.parse_llm(spec, args.fallback, args.llm_schema_format) for spec in args.llm]
    agents = lineup.parse_agents(args.agents, llms)
    seeds = lineup.parse_seeds(args.seeds)
    scenarios = [lineup.scenario_entry(s) for s in args.scenario.split(",") if s.strip()]
    if not scenarios:
        raise ConfigError("--scenario: name at least one scenario")
    timeout_ms = args.round_timeout_ms or (
        LLM_ROUND_TIMEOUT_MS if any(a.policy == "llm" for a in agents) else ROUND_TIMEOUT_MS
    )
    out = Path(args.out)
    tasks = lineup.tasks(scenarios, seeds, agents, mechanism=args.mechanism,
                         round_timeout_ms=timeout_ms, first_answer_s=args.llm_first_answer_s,
                         logs=str(out / "logs") if args.keep_logs else None)  # fmt: skip
    prepare(out, manifest(scenarios, seeds, agents, mechanism=args.mechanism,
                          round_timeout_ms=timeout_ms))  # fmt: skip
    console = Console()
    with progress_bar(console, "arena", len(tasks), "sessions") as advance:
        if advance is not None:
            bar = advance

            def progress(done: int, running: int) -> None:
                bar(done, f"{running} running")

            played = execute(tasks, out, engine=args.engine, workers=args.workers,
                             address=args.ray_address, progress=progress)  # fmt: skip
        else:
            played = execute(tasks, out, engine=args.engine, workers=args.workers,
                             address=args.ray_address,
                             progress=Ticker(console.print, len(tasks)))  # fmt: skip
    ranked = finish(out, tasks)
    show(console, ranked)
    console.print(f"{len(tasks)} sessions ({played} now, {len(tasks) - played} done before)")
    console.print(f"wrote {out / 'leaderboard.html'}, leaderboard.parquet and sessions.parquet")
    return 0


def merge_command(args: argparse.Namespace) -> int:
    from rich.console import Console

    from twin.arena import store
    from twin.cli.analyse import require_analysis

    require_analysis()
    out = Path(args.merge_out)
    manifest, rows, twice = store.merge(Path(args.first), Path(args.second), out)
    ranked = store.write_outputs(out, manifest, rows)
    console = Console()
    show(console, ranked)
    console.print(f"merged {len(rows)} sessions ({twice} in both, kept once)")
    console.print(f"wrote {out / store.PAGE_FILE}, {store.LEADERBOARD_FILE} and "
                  f"{store.SESSIONS_FILE}")  # fmt: skip
    return 0


def show(console: Console, ranked: list[dict[str, Any]]) -> None:
    """The ranking of each scenario, all roles together, as a table."""
    from rich.table import Table

    from twin.arena.board import ALL_ROLES
    from twin.arena.page import cell

    for sha in dict.fromkeys(r["scenario_sha256"] for r in ranked):
        rows = [{**r, "answer_s_p95": _seconds(r["answer_ms_p95"])} for r in ranked
                if r["scenario_sha256"] == sha and r["role"] == ALL_ROLES]  # fmt: skip
        seeds = rows[0]["seeds"]
        plural = "s" * (seeds != 1)
        table = Table(title=f"{rows[0]['scenario']}: {seeds} seed{plural}, ranked by gain over "
                      "the paired baseline")  # fmt: skip
        for head, _, _ in SHOWN:
            if head == "agent":
                table.add_column(head, no_wrap=True, min_width=max(len(r["agent"]) for r in rows))
            else:
                table.add_column(head, justify="right", no_wrap=True)
        for r in rows:
            table.add_row(*(cell(r, field, digits) for _, field, digits in SHOWN))
        console.print(table)


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000
