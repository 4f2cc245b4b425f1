"""`twin play`: a whole negotiation session on this machine, in one command.

The gateway runs in-process on a loopback port; one agent per named tenant connects to it over
a real websocket (built-in policies, or LLM agents sharing one endpoint); progress is shown
while it runs, and each agent's report and the session's summary at the end.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twin.cli.analyse import (
    add_json_option,
    add_output_options,
    check_output_options,
    write_outputs,
)
from twin.cli.arg_types import out_dir, positive, positive_ms, seed
from twin.errors import ConfigError
from twin.schema.vocabulary import (
    AGENTS_FILE,
    DEFAULT_MECHANISM,
    EVENTS_FILE,
    SUMMARY_FILE,
    mechanism_names,
)
from twin_agents.registry import LLM, agent_names, builtin_names

if TYPE_CHECKING:
    from twin.schema.summary import Summary
    from twin_agents.policy import Policy
    from twin_agents.preflight import Preflight
    from twin_agents.registry import Maker

ROUND_TIMEOUT_MS, LLM_ROUND_TIMEOUT_MS = 30_000, 120_000


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pl = sub.add_parser("play", help="play a whole negotiation session with agents, here")
    pl.add_argument("--scenario", default="market", help="built-in name or YAML/JSON file")
    pl.add_argument(
        "--agents",
        required=True,
        help="TENANT=POLICY,... (policies: " + ", ".join(agent_names()) + ", or a name --policy "
        "gives); the other "
        "tenants follow their default policies",
    )
    pl.add_argument("--seed", type=seed, default=0)
    pl.add_argument("--mechanism", choices=mechanism_names(), default=DEFAULT_MECHANISM)
    pl.add_argument(
        "--round-timeout-ms",
        type=positive_ms,
        help=f"a round's deadline (default {ROUND_TIMEOUT_MS}; with llm agents "
        f"{LLM_ROUND_TIMEOUT_MS}, the ceiling: each agent waits as long as its model's measured "
        "latency needs)",
    )
    pl.add_argument(
        "--fallback",
        choices=builtin_names(),
        default="stepper",
        help="the built-in policy an llm agent falls back on (default stepper)",
    )
    pl.add_argument("--policy", action="append", default=[], metavar="NAME=SOURCE",
                    help="a trained agent, then seated as TENANT=NAME: a policy file (twin "
                    "train's policy.json) or package.module:callable taking a Seat")  # fmt: skip
    pl.add_argument("--llm-base-url", help="OpenAI-compatible endpoint for llm agents")
    pl.add_argument("--no-preflight", dest="preflight", action="store_false",
                    help="start without checking the model endpoint first (llm agents then "
                    "fall back where it fails)")  # fmt: skip
    pl.add_argument(
        "--strict",
        action="store_true",
        help="exit 3 when the fallback answered most of an llm agent's decisions",
    )
    pl.add_argument("--llm-model", help="the model name at that endpoint")
    pl.add_argument(
        "--llm-schema-format", choices=("json_schema", "json_object"), default="json_schema"
    )
    pl.add_argument(
        "--llm-first-answer-s",
        type=positive,
        help="how long llm agents wait for the model's first answer, before its latency is "
        "known (default: three times the preflight's timed completion, at least 2 s, within "
        "the round's deadline; 0.5 with --no-preflight; then the wait follows the measured "
        "latency)",
    )
    pl.add_argument(
        "--out", type=out_dir, help=f"directory for {EVENTS_FILE}, {SUMMARY_FILE} and {AGENTS_FILE}"
    )
    add_output_options(pl)
    add_json_option(pl)
    pl.set_defaults(func=play_command)


def parse_agents(spec: str, tenants: list[str], trained: Iterable[str] = ()) -> dict[str, str]:
    """`a=negotiator,b=llm` -> {"a": "negotiator", "b": "llm"} (a policy may also be a name
    `--policy` gave); names what is wrong."""
    out: dict[str, str] = {}
    allowed = [*agent_names(), *trained]
    for part in filter(None, (p.strip() for p in spec.split(","))):
        tenant, sep, policy = part.partition("=")
        if not sep or tenant not in tenants:
            raise ConfigError(f"--agents: {part!r} is not TENANT=POLICY; tenants: {tenants}")
        if policy not in allowed:
            raise ConfigError(f"--agents: unknown policy {policy!r}; allowed: {allowed}")
        out[tenant] = policy
    if not out:
        raise ConfigError("--agents: name at least one TENANT=POLICY")
    return out


def play_command(args: argparse.Namespace) -> int:
    import asyncio

    from twin.logs import configure_logging
    from twin.sim import scenarios

    check_output_options(args)
    configure_logging("warning")  # the operator's log stays quiet; the console tells the story
    scenario = scenarios.as_cluster(scenarios.load(args.scenario))
    tenants = [t.name for t in scenario.tenants]
    trained = parse_trained(args.policy)
    agents = parse_agents(args.agents, tenants, trained)
    if LLM in agents.values() and not (args.llm_base_url and args.llm_model):
        raise ConfigError("llm agents need --llm-base-url and --llm-model")
    if LLM in agents.values() and args.preflight:
        checked = check_endpoint(args.llm_base_url, args.llm_model)
        if args.llm_first_answer_s is None:
            ceiling_s = (args.round_timeout_ms or LLM_ROUND_TIMEOUT_MS) / 1000
            args.llm_first_answer_s = checked.first_answer_s(ceiling_s)
        print(f"model endpoint {checked.base_url}: {checked.model} answered in "
              f"{checked.latency_s * 1000:.0f} ms; first answers may take "
              f"{args.llm_first_answer_s:.1f} s", file=sys.stderr)  # fmt: skip
    return asyncio.run(_play(args, tenants, agents, trained))


def check_endpoint(base_url: str, model: str) -> Preflight:
    """The endpoint checked before the session (`twin_agents.preflight`); ConfigError if it
    fails."""
    import asyncio

    from twin_agents.preflight import PreflightError, preflight

    try:
        return asyncio.run(preflight(base_url, model))
    except PreflightError as exc:
        raise ConfigError(f"{exc} (--no-preflight starts anyway, on fallbacks)") from None


def parse_trained(specs: list[str]) -> dict[str, Maker]:
    """`--policy NAME=SOURCE` (repeated) -> how to seat each trained agent, by name."""
    from twin.arena.lineup import trained_maker

    out: dict[str, Maker] = {}
    for spec in specs:
        name, _, maker = trained_maker(spec)
        out[name] = maker
    return out


async def _play(args: argparse.Namespace, tenants: list[str], agents: dict[str, str],
                trained: dict[str, Maker]) -> int:  # fmt: skip

    from twin.arena.session import Progress, play_session
    from twin.cli.render import console_for, print_json
    from twin.gateway.config import GatewayConfig
    from twin_agents.factory import LlmEndpoint, make_policy
    from twin_agents.health import EndpointHealth
    from twin_agents.registry import Seat

    console = console_for(args)
    timeout_ms = args.round_timeout_ms or (
        LLM_ROUND_TIMEOUT_MS if LLM in agents.values() else ROUND_TIMEOUT_MS
    )
    endpoint = (
        LlmEndpoint(
            args.llm_base_url,
            args.llm_model,
            None,
            args.llm_schema_format,
            EndpointHealth(first_ask_s=args.llm_first_answer_s or EndpointHealth.first_ask_s),
        )
        if args.llm_base_url and args.llm_model
        else None
    )
    policies: dict[str, Policy] = {
        t: trained[p](Seat(tuple(tenants), t, args.seed)) if p in trained
        else make_policy(p, tenants, t, seed=args.seed, fallback=args.fallback, llm=endpoint)
        for t, p in agents.items()
    }  # fmt: skip
    llm_stats = {t: getattr(p, "stats", None) for t, p in policies.items()}
    with console.status("starting") as status:

        def watch(p: Progress) -> None:
            status.update(f"round {p.round} · t = {p.t_s / 3600:.2f} h · "
                          f"offers {p.offers} · trades {p.trades}")  # fmt: skip

        played = await play_session(args.scenario, policies, seed=args.seed,
                                    mechanism=args.mechanism, round_timeout_ms=timeout_ms,
                                    max_round_timeout_ms=GatewayConfig().max_round_timeout_ms,
                                    watch=watch)  # fmt: skip
    summary = played.summary()
    _show(console, agents, llm_stats, played.stats, summary)
    report = played.agents_report(agents, summary, llm_stats)
    if args.out is not None:
        out = Path(args.out)
        played.save(out, summary, report)
        console.print(f"wrote {out / EVENTS_FILE}, {out / SUMMARY_FILE} and {out / AGENTS_FILE}")
    write_outputs(args, console)
    overruled = model_answers(console, agents, llm_stats, args.fallback)
    if args.json:
        print_json("play", summary=summary, agents=report["agents"], wall_s=played.wall_s,
                   out=args.out)  # fmt: skip
    return 3 if overruled and args.strict else 0


def model_answers(console: Any, agents: dict[str, str], llm_stats: dict[str, Any],
                  fallback: str) -> list[str]:  # fmt: skip
    """A line per LLM agent: how many of its decisions the model answered; a warning where the
    fallback answered most. The tenants where it did."""
    overruled = []
    for tenant, name in agents.items():
        llm = llm_stats.get(tenant)
        if name != LLM or llm is None:
            continue
        by_model = llm.decisions - llm.fallbacks
        console.print(f"{tenant}: {by_model} of {llm.decisions} decisions answered by the model "
                      f"({llm.fallbacks} by the fallback, {fallback})")  # fmt: skip
        if llm.fallbacks * 2 > llm.decisions:
            overruled.append(tenant)
            console.print(f"[bold yellow]warning[/]: the fallback answered most of {tenant}'s "
                          "decisions: the model was late, down or invalid (see --llm-first-"
                          "answer-s and --round-timeout-ms)")  # fmt: skip
    return overruled


def _show(console: Any, agents: dict[str, str], llm_stats: dict[str, Any], stats: list[Any],
          summary: Summary) -> None:  # fmt: skip
    """Each agent's counts and rewards, and the session's summary, as tables."""
    from twin.cli.render import Table, print_summary

    trades = Table(title="negotiation")
    trades.caption = ("offers made (taken, refused) and answered (accepted); applied trades; "
                      "call-market fills (GPUs bought/sold)")  # fmt: skip
    for col in ("tenant", "policy", "made", "taken", "refused", "answered", "accepted", "trades",
                "GPUs in/out", "$ in/out", "market fills", "market GPUs in/out"):  # fmt: skip
        trades.add_column(col, justify="left" if col in ("tenant", "policy") else "right")
    rewards = Table(title="rewards")
    for col in ("tenant", "rounds", "defaulted", "reward $", "difference reward GPUs",
                "LLM valid first / asks", "LLM fallbacks"):  # fmt: skip
        rewards.add_column(col, justify="left" if col == "tenant" else "right")
    for (tenant, name), s in zip(agents.items(), stats, strict=True):
        llm = llm_stats[tenant]
        trades.add_row(tenant, name, str(s.offers_made), str(s.offers_taken),
                       str(s.offers_refused), str(s.offers_answered), str(s.offers_accepted),
                       str(s.trades_applied), f"{s.gpus_in}/{s.gpus_out}",
                       f"{s.usd_in:,.0f}/{s.usd_out:,.0f}", str(s.market_fills),
                       f"{s.market_gpus_in}/{s.market_gpus_out}")  # fmt: skip
        rewards.add_row(tenant, str(s.rounds), str(s.defaulted_rounds), f"{s.reward:,.2f}",
                        f"{s.difference_reward:,.2f}",
                        f"{llm.valid_first_try} / {llm.asks}" if llm else "-",
                        f"{llm.fallbacks + llm.offer_fallbacks}" if llm else "-")  # fmt: skip
    console.print(trades)
    console.print(rewards)
    print_summary(summary, console)
