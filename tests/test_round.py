"""A round book: what a negotiation round takes, checked as it is taken, and the one canonical
order every caller (gateway, RL table, parallel env, reproduce) commits it in."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import kinds
from twin.errors import RoundError
from twin.eventlog.log import EventLog
from twin.schema.actions import Bundle, ProvisionAction
from twin.schema.codes import ErrorCode
from twin.sim import scenarios
from twin.sim.driver import Driver
from twin.sim.round import AGENT, RoundBook, Turn

TENANTS = ("a", "b", "c")
ONE = Bundle(gpus={"h100": 1})
PAY = Bundle(usd=2.0)


def book(asked: tuple[str, ...] = TENANTS) -> RoundBook[ProvisionAction]:
    return RoundBook(4, 60.0, TENANTS, asked, pools=("h100", "a100"))


def ask(n: int) -> ProvisionAction:
    return ProvisionAction(provision={"h100": n})


def test_turns_come_out_in_tenant_order_whatever_order_they_arrive_in() -> None:
    b = book()
    b.propose("c", ask(3))
    b.propose("a", ask(1))
    b.propose("a", ask(2))  # the last proposal before the commit counts
    assert [(t.tenant, t.action) for t in b.decisions()] == [("a", ask(2)), ("c", ask(3))]
    assert b.inputs().actions == [("a", ask(2)), ("c", ask(3))]


def test_offers_come_out_by_maker_then_by_the_maker_s_sequence_number() -> None:
    b = book()
    late = b.offer("c", "a", ONE, PAY, seq=1)
    first_of_b = b.offer("b", "a", ONE, PAY, seq=7)
    early = b.offer("c", "b", ONE, PAY, seq=0)
    second_of_b = b.offer("b", "c", ONE, PAY, seq=9)
    assert b.offers_to("a") == [first_of_b, late]
    assert b.in_order() == [first_of_b, second_of_b, early, late]


def test_the_book_names_offers_by_tenant_round_and_count_refused_ones_included() -> None:
    b = book()
    with pytest.raises(RoundError):
        b.offer("a", "a", ONE, PAY)  # refused, but counted
    made = b.offer("a", "b", ONE, PAY)
    assert made is not None
    assert made.offer_id == "a-4-1"
    assert b.offer("b", "c", ONE, PAY, offer_id="mine") is not None
    with pytest.raises(RoundError, match="offer id 'mine' is taken"):
        b.offer("c", "a", ONE, PAY, offer_id="mine")


@pytest.mark.parametrize(
    ("take", "code", "words"),
    [
        (lambda b: b.offer("a", "a", ONE, PAY), ErrorCode.BAD_OFFER, "cannot offer to 'a'"),
        (lambda b: b.offer("a", "zed", ONE, PAY), ErrorCode.BAD_OFFER, "cannot offer to 'zed'"),
        (lambda b: b.offer("a", "b", Bundle(gpus={"tpu": 1}), PAY), ErrorCode.VALIDATION_ERROR,
         "unknown pool 'tpu'"),
        (lambda b: b.propose("a", ProvisionAction(bids_usd_per_gpu={"v100": 1.0})),
         ErrorCode.VALIDATION_ERROR, "unknown pool 'v100'"),
        (lambda b: b.propose("zed", ask(1)), ErrorCode.OUT_OF_ROUND, "unknown tenant 'zed'"),
        (lambda b: b.propose("c", ask(1)), ErrorCode.OUT_OF_ROUND, "'c' was not asked"),
        (lambda b: b.answer("a", "nope", True), ErrorCode.BAD_OFFER, "no offer 'nope' to 'a'"),
    ],
)  # fmt: skip
def test_what_a_round_cannot_take_is_refused_with_a_code_naming_it(
    take: Any, code: ErrorCode, words: str
) -> None:
    b = book(asked=("a", "b"))
    with pytest.raises(RoundError, match=words) as refused:
        take(b)
    assert refused.value.code == code
    assert not b.turns
    assert not b.offers


def test_after_its_turn_a_tenant_may_only_answer() -> None:
    b = book()
    made = b.offer("b", "a", ONE, PAY)
    assert made is not None
    b.propose("a", ask(1), final=True)
    with pytest.raises(RoundError, match="'a' already ended its turn"):
        b.propose("a", ask(2))
    with pytest.raises(RoundError, match="already ended its turn"):
        b.offer("a", "b", ONE, PAY)
    assert b.answer("a", made.offer_id, True, reason="fair")
    assert b.inputs().accepted == frozenset({made.offer_id})
    assert b.answers[made.offer_id].reason == "fair"


def test_a_message_sent_again_under_its_sequence_number_is_taken_once() -> None:
    b = book()
    first = b.offer("a", "b", ONE, PAY, seq=3)
    assert first is not None
    assert b.offer("a", "b", ONE, PAY, seq=3) is None  # a resend after a cut connection
    assert list(b.offers) == [first.offer_id]
    assert b.end_turn("a", seq=4)
    assert not b.end_turn("a", seq=4)
    assert b.answer("b", first.offer_id, False, seq=1)
    assert not b.answer("b", first.offer_id, False, seq=1)
    assert b.answer("b", first.offer_id, True, seq=2)  # a new answer replaces the old
    assert b.answers[first.offer_id].accepted


def test_the_round_settles_once_every_awaited_tenant_ended_its_turn_and_answered() -> None:
    b = book()
    waits_for = {"a", "b"}.__contains__
    assert not b.settled(waits_for)
    made = b.offer("a", "b", ONE, PAY)
    assert made is not None
    b.end_turn("a")
    b.end_turn("b")
    assert not b.settled(waits_for)  # b still owes an answer
    b.answer("b", made.offer_id, True)
    assert b.settled(waits_for)  # c is not awaited


def test_the_silent_are_decided_by_their_defaults_and_the_log_names_them() -> None:
    log = EventLog("r", keep=True)
    driver: Driver[Any, Any] = Driver(scenarios.load("market"), seed=0, log=log)
    batch = driver.advance()
    assert batch is not None
    first, *rest = batch.reasons
    b = driver.book()
    b.propose(first, ProvisionAction())
    assert b.silent() == rest
    driver.commit(b, driver.default_policies())
    made = {e["tenant"]: e["policy"] for e in kinds(list(log.dicts()), "decision_made")}
    assert made[first] == AGENT
    assert all(made[t].startswith("default:") for t in rest)
    assert kinds(list(log.dicts()), "round_committed")[0]["defaulted"] == sorted(rest)


def test_a_recorded_turn_keeps_its_label_and_a_recorded_default_stays_a_default() -> None:
    b = book(asked=())
    b.record(Turn("b", ask(1), "default:autoscale", defaulted=True))
    b.record(Turn("a", ask(2), "negotiator"))
    assert [t.policy for t in b.decisions()] == ["negotiator", "default:autoscale"]
    assert b.defaulted() == ["b"]
    with pytest.raises(RoundError, match="unknown tenant 'zed'"):
        b.record(Turn("zed", ask(1)))


def test_with_trading_off_every_offer_is_refused_and_turns_still_count() -> None:
    b = RoundBook(2, 0.0, TENANTS, TENANTS, pools=("h100",), trading=False)
    with pytest.raises(RoundError, match="trading is off in this session") as refused:
        b.offer("a", "b", ONE, PAY)
    assert refused.value.code == ErrorCode.BAD_OFFER
    assert b.propose("a", ask(1))
    assert b.inputs().actions == [("a", ask(1))]


def test_with_trading_off_call_market_orders_are_refused_too() -> None:
    from twin.schema.actions import Order

    b = RoundBook(2, 0.0, TENANTS, TENANTS, pools=("h100",), trading=False)
    with pytest.raises(RoundError, match="no call market orders"):
        b.propose("a", ProvisionAction(asks={"h100": Order(gpus=1, usd_per_gpu=1.0)}))
    assert not b.turns


def test_many_large_messages_leave_the_round_holding_only_their_fingerprints() -> None:
    """A tenant sending thousands of large proposals under fresh sequence numbers grows the
    round by a bounded set of 16-byte digests, not by the messages."""
    import tracemalloc

    from twin.sim.round import SEQS_KEPT

    b = book()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for seq in range(3_000):
        action = ProvisionAction(provision={"h100": 1}, reason=f"{seq:>06}" + "y" * 234)
        assert b.propose("a", action, seq=seq)
    grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    assert len(b._taken["a"]) == SEQS_KEPT
    assert grown < 200_000, grown  # 3,000 messages kept would be a megabyte and more
    assert not b.propose("a", action, seq=2_999)  # the latest is still known as taken


def test_a_tenant_makes_at_most_so_many_offers_a_round() -> None:
    from twin.sim.round import MAX_OFFERS_PER_ROUND

    b = book()
    for n in range(MAX_OFFERS_PER_ROUND):
        b.offer("a", "b", ONE, PAY, seq=n)
    with pytest.raises(RoundError, match=f"at most {MAX_OFFERS_PER_ROUND} offers") as refused:
        b.offer("a", "b", ONE, PAY, seq=MAX_OFFERS_PER_ROUND)
    assert refused.value.code == ErrorCode.BAD_OFFER
    assert b.offer("b", "a", ONE, PAY) is not None  # another tenant's count is its own


def test_money_for_money_is_no_trade() -> None:
    b = book()
    with pytest.raises(RoundError, match="a trade moves GPUs or quota") as refused:
        b.offer("a", "b", PAY, Bundle(usd=1.0))
    assert refused.value.code == ErrorCode.BAD_OFFER
    assert b.offer("a", "b", Bundle(quota_gpus=2), PAY) is not None  # quota is a good too
