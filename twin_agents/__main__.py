"""`python -m twin_agents run ...`: one agent for one tenant of a gateway session."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict

import orjson

from twin_agents.client import AgentClient, HandshakeError
from twin_agents.factory import LlmEndpoint, make_policy
from twin_agents.health import EndpointHealth
from twin_agents.llm import LLMPolicy
from twin_agents.registry import agent_names, builtin_names


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m twin_agents", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="act for a tenant until the session ends")
    run.add_argument(
        "--gateway", required=True, help="agent endpoint, e.g. ws://127.0.0.1:8000/v1/agents"
    )
    run.add_argument(
        "--session", default=os.environ.get("TWIN_AGENT_SESSION"), help="or TWIN_AGENT_SESSION"
    )
    run.add_argument("--tenant", required=True)
    run.add_argument(
        "--token", default=os.environ.get("TWIN_AGENT_TOKEN"), help="or TWIN_AGENT_TOKEN"
    )
    run.add_argument("--policy", default="stepper", choices=agent_names())
    run.add_argument(
        "--fallback", default="stepper", choices=builtin_names(), help="when the LLM fails twice"
    )
    run.add_argument(
        "--base-url", default=os.environ.get("OPENAI_BASE_URL"), help="or OPENAI_BASE_URL"
    )
    run.add_argument("--model", default=os.environ.get("OPENAI_MODEL"), help="or OPENAI_MODEL")
    run.add_argument(
        "--api-key", default=os.environ.get("OPENAI_API_KEY"), help="or OPENAI_API_KEY"
    )
    run.add_argument(
        "--schema-format",
        choices=("json_schema", "json_object"),
        default="json_schema",
        help="how to ask for the answer's JSON Schema; json_object for llama.cpp's server",
    )
    run.add_argument(
        "--first-answer-s",
        type=float,
        default=EndpointHealth.first_ask_s,
        help="how long to wait for the model's first answer, before its latency is known "
        "(then the wait follows the measured latency); raise it for a slow CPU model",
    )
    run.add_argument(
        "--tenants", default="", help="the session's tenants, comma-separated (negotiator)"
    )
    run.add_argument("--seed", type=int, default=0)
    run.add_argument(
        "--think-ms",
        type=think_ms,
        default=os.environ.get("TWIN_AGENT_THINK_MS") or "0",  # argparse types it
        help="wait this long before each turn, as an agent that deliberates does (a session "
        "at a pace one can follow, or stop and start mid-way); or TWIN_AGENT_THINK_MS",
    )
    return p


def think_ms(text: str) -> float:
    """A non-negative number of milliseconds."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 600_000:
        raise argparse.ArgumentTypeError(f"{text!r}: milliseconds from 0 to 600000")
    return value


async def _run(args: argparse.Namespace) -> dict[str, object]:
    tenants = [t for t in args.tenants.split(",") if t] or [args.tenant]
    if args.policy == "llm" and (not args.base_url or not args.model):
        raise SystemExit("python -m twin_agents: error: --policy llm needs --base-url and --model")
    endpoint = (
        LlmEndpoint(
            args.base_url,
            args.model,
            args.api_key,
            args.schema_format,
            EndpointHealth(first_ask_s=args.first_answer_s),
        )
        if args.policy == "llm"
        else None
    )
    policy = make_policy(args.policy, tenants, args.tenant, seed=args.seed,
                         fallback=args.fallback, llm=endpoint)  # fmt: skip
    llm = policy if isinstance(policy, LLMPolicy) else None
    client = AgentClient(args.gateway, args.session, args.tenant, args.token or "", policy,
                         think_s=args.think_ms / 1000)  # fmt: skip
    start = time.perf_counter()
    try:
        stats = await client.run()
    finally:
        if llm is not None:
            await llm.close()
    wall_s = time.perf_counter() - start
    report: dict[str, object] = {
        "tenant": args.tenant,
        "policy": policy.name,
        **asdict(stats),
        "decisions_per_s": stats.proposals / wall_s if wall_s else None,
    }
    if llm is not None:
        report["llm"] = llm.stats.summary()
    return report


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for flag, variable in (("session", "TWIN_AGENT_SESSION"), ("token", "TWIN_AGENT_TOKEN")):
        if not getattr(args, flag):
            print(f"python -m twin_agents: error: --{flag} (or {variable}) is required",
                  file=sys.stderr)  # fmt: skip
            return 2
    try:
        report = asyncio.run(_run(args))
    except HandshakeError as exc:
        print(f"python -m twin_agents: error: the gateway refused the agent: {exc}",
              file=sys.stderr)  # fmt: skip
        return 2
    print(orjson.dumps(report).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
