"""Playing one arena session and reducing it to its row: per tenant, who played it, its return
(the session summary's), difference reward, offers and trades, answer times and model counts,
and its jobs' queueing delay; per session, the tenants' welfare together."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import orjson

from twin.arena.lineup import BASELINE, BOUND, SessionTask, trades

if TYPE_CHECKING:
    from twin_agents.client import AgentStats
    from twin_agents.policy import Policy

Row = dict[str, Any]
MAX_ROUND_TIMEOUT_MS = 120_000


def jain(values: list[float]) -> float | None:
    """Jain's fairness index, (sum x)^2 / (n sum x^2): 1 when all are equal, 1/n when one
    holds all; 1 when all are zero; None for no values."""
    if not values:
        return None
    squares = sum(v * v for v in values)
    return 1.0 if squares == 0 else sum(values) ** 2 / (len(values) * squares)


def _policies(task: SessionTask) -> dict[str, Policy]:
    from twin.arena.lineup import PLANNER, TRAINED
    from twin.arena.planner_agent import PlannerAgent
    from twin_agents.factory import LlmEndpoint, make_policy
    from twin_agents.health import EndpointHealth
    from twin_agents.learned import load_maker
    from twin_agents.registry import Seat

    tenants = list(task.scenario.tenants)
    endpoints: dict[str, LlmEndpoint] = {}  # one per agent: its health is shared by its roles
    out: dict[str, Policy] = {}
    for tenant, agent in task.lineup.items():
        if agent.policy == PLANNER:
            out[tenant] = PlannerAgent(task.scenario.spec, task.seed, tenant)
            continue
        if agent.policy == TRAINED:
            assert agent.source is not None
            seat = Seat(tuple(tenants), tenant, task.seed)
            out[tenant] = load_maker(agent.source, agent.name)(seat)
            continue
        endpoint = None
        if agent.policy == "llm":
            assert agent.base_url is not None
            assert agent.model is not None
            first_s = task.first_answer_s or EndpointHealth.first_ask_s
            health = EndpointHealth(first_ask_s=first_s)
            endpoint = endpoints.setdefault(agent.name, LlmEndpoint(
                agent.base_url, agent.model, schema_format=agent.schema_format,  # type: ignore[arg-type]
                health=health, system_prompt=agent.prompt))  # fmt: skip
        out[tenant] = make_policy(agent.policy, tenants, tenant, seed=task.seed,
                                  fallback=agent.fallback or "stepper", llm=endpoint)  # fmt: skip
    return out


def _tenant(stats: AgentStats | None, llm: Any) -> Row:
    """What an agent did in one role (nothing for a tenant its own policy played)."""
    if stats is None:
        return {}
    row: Row = {
        "difference_reward_gpus": stats.difference_reward,
        "rounds": stats.rounds,
        "defaulted_rounds": stats.defaulted_rounds,
        "offers_made": stats.offers_made,
        "offers_taken": stats.offers_taken,
        "offers_refused": stats.offers_refused,
        "offers_answered": stats.offers_answered,
        "offers_accepted": stats.offers_accepted,
        "trades_applied": stats.trades_applied,
        "trades_failed": stats.trades_failed,
        "market_fills": stats.market_fills,
        "errors": len(stats.errors),
        "answer_ms": [round(ms, 4) for ms in stats.answer_ms],
    }
    if llm is not None:
        s = llm.summary()
        row["llm"] = {k: s[k] for k in ("asks", "valid_first_try", "valid_after_retry",
                                        "fallbacks", "offer_fallbacks", "invalid", "late",
                                        "http_errors", "endpoint_down", "prompt_tokens",
                                        "completion_tokens")}  # fmt: skip
        row["llm"]["latency_ms"] = [round(ms, 3) for ms in llm.latency_ms]
    return row


def reduce(task: SessionTask, events: bytes, stats: dict[str, AgentStats],
           llm: dict[str, Any], wall_s: float) -> Row:  # fmt: skip
    """A played session's row, from its event log and its agents' counts."""
    from twin.eventlog.jobs import JobTable
    from twin.eventlog.metrics import summarise

    records = [orjson.loads(line) for line in events.splitlines()]
    delays: dict[str, list[float]] = {}

    def take(job: Row) -> None:
        if job["outcome"] == "finished":
            delays.setdefault(job["tenant"], []).append(job["queueing_delay_s"])

    jobs = JobTable(take)
    for record in records:
        jobs.take(record)
    jobs.close()
    summary = summarise(records)
    if task.logs is not None:
        from pathlib import Path

        from twin.schema.vocabulary import EVENTS_FILE, SUMMARY_FILE

        kept = Path(task.logs) / task.key
        kept.mkdir(parents=True, exist_ok=True)
        (kept / EVENTS_FILE).write_bytes(events)
        (kept / SUMMARY_FILE).write_text(summary.model_dump_json(indent=2) + "\n")
    mean_delay = {t: sum(v) / len(v) for t, v in delays.items() if v}
    told = {t.name: t for t in summary.tenants}  # a tenant with no record is not in it
    traders = {t for t, a in task.lineup.items() if trades(a)}
    to_nontraders: dict[str, int] = {}  # offers made to a tenant that does not trade
    for record in records:
        if record["kind"] == "offer_made" and record["to_tenant"] not in traders:
            to_nontraders[record["tenant"]] = to_nontraders.get(record["tenant"], 0) + 1
    tenants = []
    for name in task.scenario.tenants:
        agent, mine = task.lineup.get(name), told.get(name)
        tenants.append({
            "tenant": name,
            "agent": agent.name if agent is not None else None,
            "return_usd": mine.reward_usd if mine is not None else 0.0,
            "jobs_finished": mine.jobs_finished if mine is not None else 0,
            "mean_queueing_delay_s": mean_delay.get(name),
            "trades": name in traders,
            "offers_to_nontraders": to_nontraders.get(name, 0),
            **_tenant(stats.get(name), llm.get(name)),
        })  # fmt: skip
    return {
        "key": task.key,
        "kind": task.kind,
        "scenario": task.scenario.name,
        "scenario_sha256": task.scenario.sha256,
        "seed": task.seed,
        "rotation": task.rotation,
        "mechanism": task.mechanism,
        "trading": task.trading,
        "regimes": list(task.regimes),
        "end_reason": summary.end_reason,
        "wall_s": wall_s,
        "total_return_usd": sum(t["return_usd"] for t in tenants),
        "jain_delay": jain(list(mean_delay.values())),
        "tenants": tenants,
    }


def run_task(task: SessionTask) -> Row:
    """Play one session over a real gateway on loopback; its row. (Top-level, so worker
    processes and Ray can run it.)"""
    from twin.arena.session import play_session

    if task.kind == BOUND:
        return bound_row(task)
    policies = _policies(task) if task.kind != BASELINE else {}
    llm = {t: getattr(p, "stats", None) for t, p in policies.items()}
    played = asyncio.run(play_session(task.scenario.spec, policies, seed=task.seed,
                                      mechanism=task.mechanism,
                                      round_timeout_ms=task.round_timeout_ms,
                                      max_round_timeout_ms=MAX_ROUND_TIMEOUT_MS,
                                      trading=task.trading))  # fmt: skip
    stats = dict(zip(policies, played.stats, strict=True))
    return reduce(task, played.events, stats, llm, played.wall_s)


def bound_row(task: SessionTask) -> Row:
    """A seed's welfare bound, as a row: what a planner with hindsight could reach with GPUs
    movable between tenants (`bound_usd`) and with holdings kept per tenant; None (with why)
    where the program cannot be built for the scenario."""
    from twin.bound.run import bound_seed
    from twin.errors import ConfigError
    from twin.sim import scenarios

    started = time.perf_counter()
    row: Row = {
        "key": task.key, "kind": BOUND, "scenario": task.scenario.name,
        "scenario_sha256": task.scenario.sha256, "seed": task.seed, "rotation": None,
        "tenants": [], "bound_usd": None, "separable_usd": None, "why_not": None,
    }  # fmt: skip
    try:
        found = bound_seed(scenarios.as_cluster(scenarios.load(task.scenario.spec)), task.seed)
    except ConfigError as exc:  # a scenario the program does not model (shared pools, ...)
        row["why_not"] = str(exc)
    else:
        row.update(bound_usd=found.pooled.welfare_usd, separable_usd=found.separable.welfare_usd,
                   feasible_usd=found.feasible_usd)  # fmt: skip
    row["wall_s"] = time.perf_counter() - started
    return row


def warm() -> None:
    """Import what a session needs before worker processes fork (see `twin.sweep.execute.warm`:
    not the compiled kernel)."""
    from twin.arena import session  # noqa: F401
    from twin.eventlog import jobs  # noqa: F401
    from twin.gateway import app  # noqa: F401
    from twin.sim import runner  # noqa: F401
    from twin_agents import client, factory, policies  # noqa: F401 (for the workers to inherit)
