"""Agents: the client against a real gateway, the built-in policies, the LLM agent's paths."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestServer

from tests.fake_llm import REQUESTS, fake_llm_app
from twin.bench.server import free_port, start_serve
from twin.gateway.app import create_app
from twin.gateway.config import GatewayConfig, SessionRequest
from twin.gateway.keys import REGISTRY
from twin.schema.actions import Bundle, PlanVerdict, PoolView, QueuedJob, TenantObservation
from twin.schema.vocabulary import MECHANISM_TRAITS
from twin.schema.wire import DecisionRequested, OfferView
from twin_agents import prompting
from twin_agents.client import AgentClient, HandshakeError
from twin_agents.llm import BOUND, LLMPolicy
from twin_agents.policies import Negotiator, Stepper
from twin_agents.policy import Answer
from twin_agents.registry import BUILT_IN, builtin
from twin_agents.turn import answer_model, shape

MakeServer = Callable[..., Awaitable[TestServer]]

SHARED = {
    "kind": "cluster",
    "name": "shared",
    "horizon_s": 4 * 3600,
    "pools": [
        {
            "name": "a100",
            "gpu_type": "a100-80gb",
            "max_gpus": 32,
            "price_usd_per_gpu_h": 2.0,
            "provision_delay_s": {"dist": "constant", "value": 1800},
        },
        {
            "name": "h100",
            "gpu_type": "h100",
            "max_gpus": 16,
            "price_usd_per_gpu_h": 4.0,
            "speed": 2.0,
            "provision_delay_s": {"dist": "constant", "value": 1800},
        },
    ],
    "tenants": [
        {
            "name": n,
            "budget_usd": 2000,
            "value_usd_per_gpu_h": 8.0,
            "policy": "static",
            "initial_gpus": {"a100": g},
            "workloads": [
                {
                    "arrivals": {"process": "poisson", "rate_per_h": r},
                    "gpus": {"dist": "choice", "values": [1, 2, 4]},
                    "service_s": {"dist": "exponential", "mean": 1800},
                }
            ],
        }
        for n, g, r in (("alpha", 8, 0.5), ("beta", 0, 12), ("gamma", 2, 6), ("delta", 0, 6))
    ],
    "decisions": {"interval_s": 900, "triggers": []},
}
TENANTS = [t["name"] for t in SHARED["tenants"]]  # type: ignore[index]


async def gateway(
    aiohttp_server: MakeServer, tmp_path: Any, **session: Any
) -> tuple[TestServer, dict[str, Any]]:
    server = await aiohttp_server(create_app(GatewayConfig()))
    registry = server.app[REGISTRY]
    created = registry.create(SessionRequest(scenario=SHARED, **session))
    return server, {"session_id": created.id, "tokens": created.tokens, "session": created}


def ws_url(server: TestServer) -> str:
    return str(server.make_url("/v1/agents")).replace("http://", "ws://")


async def test_built_in_agents_negotiate_a_session_to_its_end(
    aiohttp_server: MakeServer, tmp_path: Any
) -> None:
    server, s = await gateway(aiohttp_server, tmp_path, agents=TENANTS, mechanism="proportional")
    policies = dict(zip(TENANTS, ("negotiator", "negotiator", "fair_share", "greedy"), strict=True))
    clients = [
        AgentClient(ws_url(server), s["session_id"], t, s["tokens"][t], builtin(p, TENANTS, t))
        for t, p in policies.items()
    ]
    results = await asyncio.gather(*(c.run() for c in clients))
    for stats in results:
        assert stats.end_reason == "horizon"
        assert stats.rounds == 15  # every 900 s for 4 h, the horizon itself excluded
        assert stats.defaulted_rounds == 0
        assert not stats.errors
    assert results[0].offers_made > 0  # alpha has idle GPUs and little work: it sells
    assert sum(r.offers_answered for r in results) > 0
    events = [orjson.loads(line) for line in (await _events(server, s["session_id"])).splitlines()]
    assert any(e["kind"] == "trade_settled" and e["applied"] for e in events)
    # Each side reports what moved; the GPUs and dollars that left one arrived at the other.
    assert results[0].trades_applied > 0
    assert results[0].gpus_out > 0
    assert sum(r.gpus_in for r in results) == sum(r.gpus_out for r in results)
    assert sum(r.usd_in for r in results) == pytest.approx(sum(r.usd_out for r in results))
    applied = sum(1 for e in events if e["kind"] == "trade_settled" and e["applied"])
    assert sum(r.trades_applied for r in results) == 2 * applied  # both parties count it


async def _events(server: TestServer, session_id: str) -> bytes:
    from aiohttp import ClientSession

    reader = {"Authorization": f"Bearer {server.app[REGISTRY].sessions[session_id].read_token}"}
    async with (
        ClientSession() as http,
        http.get(server.make_url(f"/v1/sessions/{session_id}/events"), headers=reader) as resp,
    ):
        return await resp.read()


async def test_a_dropped_agent_reconnects_and_resumes(
    aiohttp_server: MakeServer, tmp_path: Any
) -> None:
    server, s = await gateway(aiohttp_server, tmp_path, agents=["alpha"], round_timeout_ms=5000)
    client = AgentClient(ws_url(server), s["session_id"], "alpha", s["tokens"]["alpha"], Stepper())
    task = asyncio.create_task(client.run())
    session = s["session"]
    while "alpha" not in session.agents or session.driver.round < 2:
        await asyncio.sleep(0.01)
    await session.agents["alpha"].ws.close()  # the connection drops
    stats = await task
    assert stats.reconnects >= 1
    assert stats.end_reason == "horizon"
    assert stats.defaulted_rounds == 0


async def test_a_wrong_token_is_refused_and_not_retried(
    aiohttp_server: MakeServer, tmp_path: Any
) -> None:
    server, s = await gateway(aiohttp_server, tmp_path, agents=["alpha"])
    client = AgentClient(ws_url(server), s["session_id"], "alpha", "wrong", Stepper())
    with pytest.raises(HandshakeError, match="UNAUTHORIZED"):
        await client.run()


def test_every_built_in_policy_is_available() -> None:
    for name in BUILT_IN:
        assert builtin(name, TENANTS, "alpha").name == name
    with pytest.raises(ValueError, match="built-in policies: stepper"):
        builtin("oracle", TENANTS, "alpha")


def request(
    deadline_ms: int = 2000, offers: list[OfferView] | None = None, mechanism: str = "proportional"
) -> DecisionRequested:
    pools = [
        PoolView(
            name=n,
            gpu_type=n,
            price_usd_per_gpu_h=p,
            speed=1.0,
            mean_provision_delay_s=0.0,
            ready=r,
            busy_gpus=r,
            pending=0,
            down=0,
            free_capacity=10,
        )
        for n, p, r in (("a100", 2.0, 4), ("h100", 4.0, 0))
    ]
    view = TenantObservation(
        t_s=900.0,
        tenant="beta",
        reasons=["tick"],
        budget_usd=1500.0,
        spent_usd=500.0,
        queue_length=3,
        queued_gpus=6.0,
        running_jobs=2,
        head=[
            QueuedJob(
                job_id="j7",
                gpus=4,
                work_gpu_s=7200,
                priority=0,
                wait_s=300,
                pools=["a100", "h100"],
                plans=[
                    PlanVerdict(
                        pool=p,
                        feasible=True,
                        score=s,
                        tokens_per_s=t,
                        usd_per_h=u,
                        run_s=r,
                        reasons=[],
                    )
                    for p, s, t, u, r in (
                        ("a100", 0.42, 9e3, 8.0, 3600),
                        ("h100", 0.61, 2e4, 16.0, 1620),
                    )
                ],
            )
        ],
        pools=pools,
    )
    return DecisionRequested(round=3, t_s=900.0, deadline_ms=deadline_ms, mechanism=mechanism,
                             traits=MECHANISM_TRAITS[mechanism], view=view,
                             offers=offers or [])  # fmt: skip


async def llm(
    aiohttp_server: MakeServer, model: str, timeout_s: float = 30.0
) -> tuple[LLMPolicy, Any]:
    server = await aiohttp_server(fake_llm_app())
    policy = LLMPolicy(str(server.make_url("/v1")), model, Stepper(), timeout_s=timeout_s,
                       tenant="beta", tenants=tuple(TENANTS))  # fmt: skip
    return policy, server.app[REQUESTS]


async def test_the_model_decides_the_whole_turn(aiohttp_server: MakeServer) -> None:
    policy, requests = await llm(aiohttp_server, "valid")
    turn = await policy.decide(request())
    await policy.close()
    assert turn.provision == {"a100": 1, "h100": 1}
    assert [(p.job_id, p.pool, p.plan) for p in turn.placements] == [("j7", "h100", None)]
    (offer,) = turn.offers  # to the last other tenant: one GPU of each pool and $1, for nothing
    assert (offer.to_tenant, offer.give.gpus, offer.give.usd) == (
        "delta",
        {"a100": 1, "h100": 1},
        1,
    )
    assert offer.take == Bundle()
    assert turn.reason == offer.reason == "fake reason"
    assert (policy.stats.valid_first_try, policy.stats.fallbacks) == (1, 0)
    assert (policy.stats.offers_made, policy.stats.placements) == (1, 1)
    fmt = requests[0]["response_format"]
    assert fmt["type"] == "json_schema"
    schema = fmt["json_schema"]["schema"]
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"provision", "place", "offer", "reason"}
    provision = schema["$defs"]["Provision"]["properties"]
    assert provision["a100"]["enum"] == list(range(-BOUND, BOUND + 1))
    assert schema["$defs"]["Place"]["properties"]["job"]["const"] == "j7"
    assert schema["$defs"]["Offer"]["properties"]["to"]["enum"] == ["nobody", "alpha", "gamma",
                                                                    "delta"]  # fmt: skip
    assert (policy.stats.prompt_tokens, policy.stats.completion_tokens) == (100, 10)


def test_an_llm_is_offered_no_offer_to_make_where_trading_is_off() -> None:
    on = request()
    off = on.model_copy(update={"trading": False})
    assert "offer" in answer_model(on, tuple(TENANTS)).model_json_schema()["required"]
    assert "offer" not in answer_model(off, tuple(TENANTS)).model_json_schema()["properties"]


async def test_under_a_call_market_the_negotiator_bids_for_what_its_queue_needs() -> None:
    negotiator = Negotiator(list(TENANTS), "beta")
    asked = request(mechanism="call_market")
    slow = [p.model_copy(update={"mean_provision_delay_s": 1800.0}) for p in asked.view.pools]
    worth = asked.view.model_copy(update={"value_usd_per_gpu_h": 8.0, "pools": slow})
    turn = await negotiator.decide(asked.model_copy(update={"view": worth}))
    ((_, order),) = turn.buys.items()
    assert order.gpus == 6  # its queue needs 6 GPUs; none idle, none coming, new ones 30 min off
    assert order.usd_per_gpu > 0
    assert not turn.offers, "held GPUs go through the market, not offers"


def test_an_llm_may_sell_and_buy_held_gpus_under_a_call_market() -> None:
    schema = answer_model(request(mechanism="call_market"), tuple(TENANTS)).model_json_schema()
    assert {"sell", "sell_usd", "buy", "buy_usd"} <= set(schema["required"])
    assert "sell" not in answer_model(request(), tuple(TENANTS)).model_json_schema()["properties"]


def test_the_registry_says_which_agents_trade() -> None:
    from twin_agents.registry import LLM, trades

    assert trades("negotiator")
    assert trades(LLM)
    assert not any(trades(name) for name in ("stepper", "greedy", "fair_share", "random"))


async def test_bids_are_asked_for_only_where_the_mechanism_takes_them(
    aiohttp_server: MakeServer,
) -> None:
    policy, requests = await llm(aiohttp_server, "valid")
    turn = await policy.decide(request(mechanism="auction"))
    await policy.close()
    assert turn.bids_usd_per_gpu == {"a100": 1.0, "h100": 1.0}
    assert "bids" in requests[0]["response_format"]["json_schema"]["schema"]["required"]
    assert "bids" not in answer_model(request(), tuple(TENANTS)).model_json_schema()["required"]


async def test_offers_in_the_request_are_answered_within_the_turn(
    aiohttp_server: MakeServer,
) -> None:
    offer = OfferView(offer_id="alpha-3-0", from_tenant="alpha", to_tenant="beta",
                      give=Bundle(gpus={"a100": 2}), take=Bundle(usd=2), reason="idle")  # fmt: skip
    policy, requests = await llm(aiohttp_server, "valid")
    req = request(offers=[offer])
    await policy.decide(req)
    assert await policy.answer(offer, req) == Answer(False, "fake reason")
    await policy.close()
    assert len(requests) == 1  # the answer came with the turn
    assert (
        '- alpha-3-0 from alpha: you get 2 a100 GPUs, you pay $2.00 ("idle")'
        in (requests[0]["messages"][1]["content"])
    )
    assert policy.stats.offers_answered == 1


async def test_an_offer_after_the_turn_is_answered_by_the_model(
    aiohttp_server: MakeServer,
) -> None:
    offer = OfferView(offer_id="gamma-3-0", from_tenant="gamma", to_tenant="beta",
                      give=Bundle(usd=5.0), take=Bundle(gpus={"a100": 1}))  # fmt: skip
    policy, requests = await llm(aiohttp_server, "valid")
    req = request()
    await policy.decide(req)
    answer = await policy.answer(offer, req)
    await policy.close()
    assert answer == Answer(False, "fake reason")
    schema = requests[1]["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["answer"]["enum"] == ["accept", "reject"]
    assert "gamma offers you: you get $5.00, you pay 1 a100 GPUs" in requests[1]["messages"][1][
        "content"]  # fmt: skip
    assert (policy.stats.offers_answered, policy.stats.offer_fallbacks) == (1, 0)


async def test_an_invalid_answer_is_retried_once_with_the_error_fed_back(
    aiohttp_server: MakeServer,
) -> None:
    policy, requests = await llm(aiohttp_server, "invalid-once")
    turn = await policy.decide(request())
    await policy.close()
    assert turn.provision == {"a100": 1, "h100": 1}
    assert (policy.stats.valid_first_try, policy.stats.valid_after_retry, policy.stats.invalid) == (
        0,
        1,
        1,
    )
    retry = requests[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": "Sure! Here is my answer: {"}
    assert "rejected (invalid answer" in retry[-1]["content"]


@pytest.mark.parametrize(
    ("model", "counter"), [("out-of-bounds", "invalid"), ("http500", "http_errors")]
)
async def test_two_failures_fall_back_to_the_configured_policy(
    aiohttp_server: MakeServer, model: str, counter: str
) -> None:
    policy, requests = await llm(aiohttp_server, model)
    turn = await policy.decide(request())
    await policy.close()
    assert turn.provision == (await Stepper().decide(request())).provision
    assert turn.reason.startswith("fallback stepper: ")
    assert policy.stats.fallbacks == 1
    assert getattr(policy.stats, counter) == 2
    assert len(requests) == 2


async def test_a_late_answer_falls_back_before_the_deadline(aiohttp_server: MakeServer) -> None:
    policy, _ = await llm(aiohttp_server, "slow")
    started = asyncio.get_running_loop().time()
    await policy.decide(request(deadline_ms=300))
    await policy.close()
    assert asyncio.get_running_loop().time() - started < 1.0
    assert policy.stats.late >= 1
    assert policy.stats.fallbacks == 1


def test_the_request_is_rendered_compactly() -> None:
    req = request()
    text = prompting.decision(req, shape(answer_model(req, tuple(TENANTS))))
    assert "Queue: 3 jobs waiting for 6 GPUs; 2 running." in text
    assert "- a100: 4 / 4 / 0; +10; $2.00; x1; 0 min" in text
    assert "- j7: 4 GPUs, 5 min; a100 0.42 60 min, h100 0.61 27 min" in text
    assert '"provision": {"a100": -8..8, "h100": -8..8}' in text
    assert '"offer": {"to": nobody|alpha|gamma|delta' in text
    assert len(text) < 1200


def test_the_command_refuses_a_missing_token() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "twin_agents",
            "run",
            "--gateway",
            "ws://127.0.0.1:9/v1/agents",
            "--session",
            "s",
            "--tenant",
            "t",
        ],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": ""},
    )
    assert result.returncode == 2
    assert "--token (or TWIN_AGENT_TOKEN) is required" in result.stderr


def agents_command(*args: str, **environ: str) -> subprocess.CompletedProcess[str]:
    """`python -m twin_agents run` against a closed port, with only `environ` set."""
    argv = [sys.executable, "-m", "twin_agents", "run", "--gateway", "ws://127.0.0.1:9/v1/agents",
            "--tenant", "t", *args]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, check=False,
                          env={"PATH": "", **environ})  # fmt: skip


def test_the_command_refuses_a_missing_session() -> None:
    result = agents_command("--token", "t-token-0123456789")
    assert result.returncode == 2
    assert "--session (or TWIN_AGENT_SESSION) is required" in result.stderr


@pytest.mark.parametrize("think", ["-1", "soon", "600001"])
def test_a_bad_think_time_is_one_clear_line_from_the_flag_or_the_environment(think: str) -> None:
    flag = agents_command("--session", "s", "--token", "t", "--think-ms", think)
    environment = agents_command("--session", "s", "--token", "t", TWIN_AGENT_THINK_MS=think)
    for result in (flag, environment):
        assert result.returncode == 2
        assert f"argument --think-ms: {think!r}: milliseconds from 0 to 600000" in result.stderr
        assert "Traceback" not in result.stderr


async def test_the_json_object_form_still_carries_the_schema(aiohttp_server: MakeServer) -> None:
    server = await aiohttp_server(fake_llm_app())
    policy = LLMPolicy(str(server.make_url("/v1")), "valid", Stepper(), schema_format="json_object")
    turn = await policy.decide(request())
    await policy.close()
    fmt = server.app[REQUESTS][0]["response_format"]
    assert fmt["type"] == "json_object"
    assert fmt["schema"]["$defs"]["Provision"]["required"] == ["a100", "h100"]
    assert turn.provision == {"a100": 1, "h100": 1}


async def test_an_endpoint_that_is_down_means_the_fallback_decides_at_once() -> None:
    policy = LLMPolicy("http://127.0.0.1:9/v1", "any", Stepper(), timeout_s=30.0, tenant="beta")
    start = time.perf_counter()
    turn = await policy.decide(request())
    await policy.close()
    assert time.perf_counter() - start < 5.0  # not the round's whole deadline
    assert turn.provision == (await Stepper().decide(request())).provision
    assert turn.reason.startswith("fallback stepper: ")
    assert (policy.stats.http_errors, policy.stats.fallbacks) == (1, 1)  # refused: no retry


async def play_market(aiohttp_server: MakeServer, llm_url: str | None) -> tuple[float, Any]:
    """A market session of three agents, beta an LLM agent when `llm_url` is given (its
    fallback the built-in policy it replaces); the wall seconds it took and beta's stats."""
    server, s = await gateway(aiohttp_server, None, agents=TENANTS, round_timeout_ms=20_000)
    policies: dict[str, Any] = {t: builtin("fair_share", TENANTS, t) for t in TENANTS}
    if llm_url is not None:
        policies["beta"] = LLMPolicy(llm_url, "smollm2", policies["beta"], tenant="beta")
    clients = [
        AgentClient(ws_url(server), s["session_id"], t, s["tokens"][t], p)
        for t, p in policies.items()
    ]
    start = time.perf_counter()
    results = await asyncio.gather(*(c.run() for c in clients))
    wall_s = time.perf_counter() - start
    assert all(r.end_reason == "horizon" for r in results)
    return wall_s, policies["beta"]


async def test_a_dead_model_endpoint_costs_the_session_only_fallbacks(
    aiohttp_server: MakeServer,
) -> None:
    built_in_s, _ = await play_market(aiohttp_server, None)
    dead_s, llm_agent = await play_market(aiohttp_server, "http://127.0.0.1:9/v1")
    await llm_agent.close()
    stats = llm_agent.stats
    assert stats.decisions > 0
    assert stats.fallbacks == stats.decisions  # every round, the fallback decided
    assert stats.http_errors == 1  # found dead once; then down, and probed in the background
    assert stats.endpoint_down == stats.asks - 1
    assert dead_s < built_in_s + 3.0


def agent_process(port: int, tenant: str) -> subprocess.Popen[str]:
    """`python -m twin_agents run` for `tenant` of the declared session `main`."""
    argv = [sys.executable, "-m", "twin_agents", "run", "--gateway", f"ws://127.0.0.1:{port}/v1/agents",
            "--session", "main", "--tenant", tenant, "--token", f"{tenant}-token-0123456789",
            "--policy", "fair_share"]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)


def test_separately_started_agents_join_a_declared_session_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    declared = tmp_path / "session.yaml"
    declared.write_text(
        "session_id: main\nscenario: market\nseed: 2\nagents: [research, inference]\n"
        "tokens: {research: research-token-0123456789}\nround_timeout_ms: 10000\n"
    )
    monkeypatch.setenv("TWIN_TOKEN_INFERENCE", "inference-token-0123456789")
    port = free_port()
    server = start_serve(port, "operator-token-0123456789", tmp_path / "serve.log",
                        "--session-file", str(declared))  # fmt: skip
    try:
        agents = [agent_process(port, tenant) for tenant in ("research", "inference")]
        reports = [orjson.loads(a.communicate(timeout=60)[0].splitlines()[-1]) for a in agents]
    finally:
        server.terminate()
        server.wait(timeout=15)
    assert [(r["tenant"], r["end_reason"], r["defaulted_rounds"]) for r in reports] == [
        ("research", "horizon", 0),
        ("inference", "horizon", 0),
    ]


def test_an_llm_answer_offering_money_for_money_makes_no_offer() -> None:
    """Money for money is no trade (the round would refuse it): the turn drops it, and keeps an
    offer that moves GPUs."""
    from twin_agents.turn import to_turn

    req = request()
    model = answer_model(req, tuple(TENANTS))
    no_gpus = {"a100": 0, "h100": 0}

    def answer(give_gpus: dict[str, int]) -> Any:
        return model.model_validate({
            "provision": no_gpus, "reason": "r",
            "offer": {"to": "gamma", "give_gpus": give_gpus, "give_usd": 5.0,
                      "take_gpus": no_gpus, "take_usd": 0.0},
            **({"place": []} if "place" in model.model_fields else {}),
        })  # fmt: skip

    assert to_turn(answer(no_gpus))[0].offers == []
    (made,) = to_turn(answer({"a100": 1, "h100": 0}))[0].offers
    assert made.give.gpus == {"a100": 1}
