"""`twin train --scenario family:market`: one policy for every seat, searched on the family's
train split only, and evaluated where it was not trained (held-out members, each named built-in
in the family on its held-out seeds), per scenario and pooled, with intervals."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.conftest import twin_command
from twin.rl.cem import CemSettings
from twin.rl.family_training import evaluate_family, play_member, train_family
from twin.rl.training import TrainSettings
from twin.schema.actions import Bundle, Offer
from twin.schema.vocabulary import MechanismTraits
from twin.schema.wire import DecisionRequested
from twin.sim import families, scenarios
from twin.sim.driver import Driver
from twin_agents.learned import (
    AUTOSCALE_WEIGHTS,
    FEATURES,
    MARKET,
    MARKET_START,
    LearnedAgent,
    PolicyFile,
    decide,
    trades,
)
from twin_agents.policies import (
    ask_usd_per_gpu,
    saved_wait_h,
    sla_saved_usd_per_gpu,
    unmet_gpus,
    usable_pools,
    worth_usd_per_gpu,
)

TINY = TrainSettings(generations=1, seeds_per_generation=2, validation_seeds=2,
                     cem=CemSettings(population=2, elite=1), seed=3)  # fmt: skip


def test_the_search_plays_train_members_only_and_is_reproducible() -> None:
    first = train_family("market", TINY)
    again = train_family("market", TINY)
    assert first.policy.default == again.policy.default
    assert len(first.policy.default) == len(FEATURES)
    trained = first.policy.trained or {}
    assert all(m in families.TRAIN for m in trained["validation_members"])
    assert first.policy.scenario == "family:market"
    assert first.curve[0].gain_usd == 0.0  # generation 0 is the tenants' own policy


def test_autoscale_weights_in_every_seat_are_the_tenants_own_policy() -> None:
    """The family's tenants autoscale: seated with autoscale's weights they earn what their own
    policy earns, so a gain over them is what training found."""
    own = play_member("market", 905, None, "proportional")
    seated = play_member("market", 905, AUTOSCALE_WEIGHTS, "proportional")
    assert own.keys() == seated.keys()
    policy = PolicyFile("family:market", {}, default=AUTOSCALE_WEIGHTS)
    result = evaluate_family("market", policy, [905, 906], mechanism="proportional")
    assert result.members == [905, 906]
    assert len(result.welfare_gains()) == 2


def test_train_over_a_family_writes_the_policy_and_its_held_out_evaluation(
    tmp_path: Path,
) -> None:
    out = tmp_path / "fam"
    done = twin_command("train", "--scenario", "family:market", "--generations", "1",
                        "--population", "2", "--elite", "1", "--seeds-per-generation", "2",
                        "--validation-seeds", "2", "--held-out", "3", "--workers", "1",
                        "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "training on family:market (train members 0-899)" in done.stdout
    policy = PolicyFile.load(out / "policy.json")
    assert policy.weights == {}
    assert len(policy.default) == len(FEATURES)
    report = json.loads((out / "evaluation.json").read_text())
    rows = report["scenarios"]
    assert list(rows) == ["held-out members (3)", "market", "market-scarce", "pooled"]
    assert [rows[k]["episodes"] for k in rows] == [3, 3, 3, 9]
    assert [m["member"] for m in report["held_out_members"]["per_member"]] == [900, 901, 902]
    for row in rows.values():
        gain = row["welfare_gain_usd"]
        assert gain["low"] <= gain["mean"] <= gain["high"]
    again = twin_command("train", "--scenario", "family:market", "--evaluate",
                         str(out / "policy.json"), "--held-out", "3", "--workers", "1")  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "pooled" in again.stdout
    too_many = twin_command("train", "--scenario", "family:market", "--held-out", "101",
                            "--out", str(tmp_path / "x"))  # fmt: skip
    assert too_many.returncode == 2
    assert "100 held-out members" in too_many.stderr


def test_each_member_may_be_judged_on_several_episodes_with_its_own_interval() -> None:
    policy = PolicyFile("family:market", {}, default=AUTOSCALE_WEIGHTS)
    once = evaluate_family("market", policy, [905, 906], mechanism="proportional")
    twice = evaluate_family("market", policy, [905, 906], mechanism="proportional", episodes=2)
    assert once.share_significant() is None  # one episode a member: no interval of its own
    assert twice.members == [905, 905, 906, 906]
    assert twice.own[0] == once.own[0]  # a member's first episode is on its own seed
    assert twice.own[1] != twice.own[0]  # the second on another
    share = twice.share_significant()
    assert share is not None
    assert 0.0 <= share <= 1.0
    assert len(twice.per_member_means(twice.welfare_gains())) == 2


def test_under_a_call_market_the_search_learns_to_trade_as_well() -> None:
    """Where the mechanism clears held GPUs, each row carries the call market's parameters after
    its weights, from `MARKET_START`; the policy file keeps them and seats them."""
    trained = train_family("market", replace(TINY, mechanism="call_market"))
    row = trained.policy.default
    assert len(row) == len(FEATURES) + len(MARKET)
    back = PolicyFile.from_json(json.loads(json.dumps(trained.policy.to_json())))
    assert back.default == row
    assert len(train_family("market", TINY).policy.default) == len(FEATURES)


def test_a_trading_row_asks_a_share_of_its_spare_gpus_and_bids_for_what_its_queue_lacks() -> None:
    """At the first round of `market-scarce` research's queue is empty and it holds idle H100s:
    autoscale's weights release them; with `ask_share` 0.5 it asks half of them on the call
    market at `ask_delays` delays' rent and releases the rest. Without a call market, or without
    the parameters, it only provisions; bids are a share of what a GPU is worth to the queue."""
    driver: Driver[Any, Any] = Driver(scenarios.as_cluster(scenarios.load("market-scarce")),
                                      seed=0)  # fmt: skip
    driver.advance()
    view = driver.observe("research")
    h100 = next(p for p in view.pools if p.name == "h100")
    assert view.queue_length == 0
    assert h100.idle_gpus >= 2
    plain = decide(view, AUTOSCALE_WEIGHTS, clears=True)
    released = -plain.provision["h100"]
    assert released == h100.idle_gpus
    assert not plain.asks
    trading = decide(view, (*AUTOSCALE_WEIGHTS, 0.5, 2.0, 1.0), clears=True)
    asked = round(0.5 * released)
    assert trading.asks["h100"].gpus == asked
    assert trading.provision.get("h100", 0) == asked - released
    assert trading.asks["h100"].usd_per_gpu == round(2.0 * ask_usd_per_gpu(h100), 2)
    assert not trading.buys  # nothing waits
    assert decide(view, (*AUTOSCALE_WEIGHTS, 0.5, 2.0, 1.0), clears=False) == plain
    bidders = 0
    for tenant in driver.tenants:
        mine = driver.observe(tenant)
        action = decide(mine, (*AUTOSCALE_WEIGHTS, 0.0, 1.0, 1.0), clears=True)
        if unmet_gpus(mine) > 0:
            bidders += 1
            ((pool, order),) = action.buys.items()
            best = next(p for p in mine.pools if p.name == pool)
            worth = worth_usd_per_gpu(mine, best) + sla_saved_usd_per_gpu(mine, best)
            assert order.gpus == unmet_gpus(mine)
            assert order.usd_per_gpu == round(worth, 2)
    assert bidders >= 1  # inference and batch wait for GPUs at the first round


def test_a_policy_file_trades_where_a_row_carries_the_call_market_s_parameters(
    tmp_path: Path,
) -> None:
    """The arena replays a trading agent with trading off, for its trade gain: a policy file
    with call-market parameters is such an agent, one without them is not."""
    plain = tmp_path / "plain.json"
    PolicyFile("family:market", {}, default=AUTOSCALE_WEIGHTS).save(plain)
    trading = tmp_path / "trading.json"
    PolicyFile("family:market", {}, default=(*AUTOSCALE_WEIGHTS, 0.5, 1.0, 0.5)).save(trading)
    assert not trades(str(plain))
    assert trades(str(trading))


def test_spare_gpus_asked_last_round_and_still_spare_are_released() -> None:
    """Nobody bought what it asked to sell: the next round it releases those GPUs rather than
    holding them for another ask (the caller keeps `asked` from round to round)."""
    driver: Driver[Any, Any] = Driver(scenarios.as_cluster(scenarios.load("market-scarce")),
                                      seed=0)  # fmt: skip
    driver.advance()
    view = driver.observe("research")
    row, asked = (*AUTOSCALE_WEIGHTS, 1.0, 1.0, 0.0), {}  # ask every spare GPU
    first = decide(view, row, clears=True, asked=asked)
    spare = {pool: order.gpus for pool, order in first.asks.items()}
    assert spare["h100"] > 0
    assert asked == spare
    assert not any(n < 0 for n in first.provision.values())  # nothing released yet
    again = decide(view, row, clears=True, asked=asked)  # the same GPUs, still spare
    assert not again.asks
    assert {pool: -n for pool, n in again.provision.items()} == spare
    assert asked == {}


def _first_round(tenant: str) -> tuple[Driver[Any, Any], Any]:
    driver: Driver[Any, Any] = Driver(scenarios.as_cluster(scenarios.load("market-scarce")),
                                      seed=0)  # fmt: skip
    driver.advance()
    return driver, driver.observe(tenant)


def test_a_trading_row_trades_only_in_pools_where_a_gpu_now_saves_at_least_min_wait_h() -> None:
    """`min_wait_h`, the fourth trading parameter: spare GPUs are asked, and missing ones bid
    for, only where one handed over now saves its buyer that long (a pool's provisioning delay,
    or an hour where it can provision no more); a row of the first three trades everywhere."""
    driver, view = _first_round("research")
    h100 = next(p for p in view.pools if p.name == "h100")
    wait_h = saved_wait_h(h100)
    assert wait_h > 0
    near = decide(view, (*AUTOSCALE_WEIGHTS, 1.0, 1.0, 1.0, wait_h - 0.01), clears=True)
    far = decide(view, (*AUTOSCALE_WEIGHTS, 1.0, 1.0, 1.0, wait_h + 0.01), clears=True)
    three = decide(view, (*AUTOSCALE_WEIGHTS, 1.0, 1.0, 1.0), clears=True)
    assert near.asks["h100"].gpus == h100.idle_gpus == three.asks["h100"].gpus
    assert "h100" not in far.asks
    assert far.provision["h100"] == -h100.idle_gpus  # released instead
    for tenant in driver.tenants:
        mine = driver.observe(tenant)
        if unmet_gpus(mine) > 0:
            assert decide(mine, (*AUTOSCALE_WEIGHTS, 0.0, 1.0, 1.0, 0.0), clears=True).buys
            assert not decide(mine, (*AUTOSCALE_WEIGHTS, 0.0, 1.0, 1.0, 99.0), clears=True).buys


def _request(view: Any, clears: bool = False) -> DecisionRequested:
    return DecisionRequested(round=1, t_s=view.t_s, deadline_ms=1000, view=view, offers=[],
                             traits=MechanismTraits(clears_held=clears))  # fmt: skip


async def test_bilateral_offers_carry_a_trading_row_s_asks_its_bid_is_its_acceptance_rule() -> None:
    """Where the mechanism does not clear held GPUs, a trading row's asks go to the other
    tenants as offers (the same GPUs, in lots, at the asked price a GPU) and are kept for the
    round; its bid is its acceptance rule: GPUs its queue lacks, for at most `bid_share` of
    what they are worth to it now. A row without trading parameters neither offers nor
    accepts."""
    driver, view = _first_round("research")
    tenants = list(driver.tenants)
    seller = LearnedAgent((*AUTOSCALE_WEIGHTS, 1.0, 2.0, 1.0, 0.0), "t", tenants, "research")
    turn = await seller.decide(_request(view))
    h100 = next(p for p in view.pools if p.name == "h100")
    assert not turn.asks
    assert not turn.buys
    assert {o.to_tenant for o in turn.offers} == set(tenants) - {"research"}
    of_h100 = [o for o in turn.offers if "h100" in o.give.gpus]
    assert sum(o.give.gpus["h100"] for o in of_h100) == h100.idle_gpus
    for o in of_h100:
        assert o.take.usd == round(o.give.gpus["h100"] * round(2 * ask_usd_per_gpu(h100), 2), 2)
    assert "h100" not in turn.provision  # kept for the round, for sale
    again = LearnedAgent(seller.weights, "t", tenants, "research")
    assert (await again.decide(_request(view, clears=True))).asks  # on a call market: asks

    buyer_name = next(t for t in tenants if unmet_gpus(driver.observe(t)) > 0)
    mine = driver.observe(buyer_name)
    pool = usable_pools(mine)[0]
    worth = worth_usd_per_gpu(mine, pool) + sla_saved_usd_per_gpu(mine, pool)
    buyer = LearnedAgent((*AUTOSCALE_WEIGHTS, 0.0, 1.0, 0.5, 0.0), "t", tenants, buyer_name)
    await buyer.decide(_request(mine))

    def offer(usd: float, gpus: int = 1) -> Offer:
        return Offer(offer_id="x", from_tenant="research", to_tenant=buyer_name,
                     give=Bundle(gpus={pool.name: gpus}), take=Bundle(usd=usd))  # fmt: skip

    assert not (await buyer.answer(offer(round(0.5 * worth + 0.01, 2)), _request(mine))).accept
    assert (await buyer.answer(offer(round(0.5 * worth - 0.01, 2)), _request(mine))).accept
    lacking = unmet_gpus(mine) - 1
    assert not (await buyer.answer(offer(0.0, lacking + 1), _request(mine))).accept
    plain = LearnedAgent(AUTOSCALE_WEIGHTS, "t", tenants, buyer_name)
    assert not (await plain.decide(_request(view))).offers
    assert not (await plain.answer(offer(0.0), _request(mine))).accept


def test_learned_traders_trade_with_each_other_over_a_real_gateway() -> None:
    """Every tenant of `market-scarce` a trading row, under the default mechanism (bilateral
    offers): offers are made, answered by the acceptance rule, and trades applied."""
    from twin.arena.session import play_session
    from twin.schema.vocabulary import DEFAULT_MECHANISM

    tenants = [t.name for t in scenarios.as_cluster(scenarios.load("market-scarce")).tenants]
    row = (*AUTOSCALE_WEIGHTS, 1.0, 1.0, 1.0, 0.0)
    policies: dict[str, Any] = {t: LearnedAgent(row, "t", tenants, t) for t in tenants}
    played = asyncio.run(play_session("market-scarce", policies, seed=0,
                                      mechanism=DEFAULT_MECHANISM, round_timeout_ms=30_000,
                                      max_round_timeout_ms=30_000))  # fmt: skip
    assert sum(s.offers_made for s in played.stats) > 0
    assert sum(s.trades_applied for s in played.stats) > 0


def test_a_trading_only_search_from_a_start_moves_the_trading_parameters_alone() -> None:
    """`--start POLICY --trading-only`: trading learned on top of a given provisioning policy,
    whose weights every candidate keeps (so its provisioning is the start's, wherever it plays);
    a start of provisioning weights alone gets `MARKET_START` after them."""
    provisioning = tuple(w + 0.25 for w in AUTOSCALE_WEIGHTS)
    start = PolicyFile("family:market", {}, default=provisioning)
    how = replace(TINY, mechanism="call_market", start=start, trading_only=True,
                  cem=CemSettings(population=4, elite=2))  # fmt: skip
    trained = train_family("market", how)
    row = trained.policy.default
    assert row[: len(FEATURES)] == provisioning
    assert row[len(FEATURES) :] != MARKET_START
    assert (trained.policy.trained or {})["start_row"] == [*provisioning, *MARKET_START]
    free = train_family("market", replace(how, trading_only=False)).policy.default
    assert free[: len(FEATURES)] != provisioning
