"""Reproduce a session from its event log: the seed, the scenario and the recorded rounds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from pydantic import TypeAdapter, ValidationError

from twin.errors import TwinError
from twin.eventlog.log import EventLog, encode
from twin.schema import events
from twin.schema.actions import Bundle, Offer
from twin.schema.base import Event, Frozen
from twin.schema.scenario import Scenario
from twin.sim.driver import Driver
from twin.sim.model import TenantOutcome
from twin.sim.round import Answer, Turn

SCENARIO: TypeAdapter[Scenario] = TypeAdapter(Scenario)
Obs = TypeVar("Obs", bound=Frozen)
Act = TypeVar("Act", bound=Frozen)
RoundEvent = events.DecisionMade | events.OfferMade | events.OfferAnswered | events.RoundCommitted
READ: dict[str, type[events.EpisodeStarted] | type[RoundEvent]] = {
    m.model_fields["kind"].default: m
    for m in (events.EpisodeStarted, events.DecisionMade, events.OfferMade, events.OfferAnswered,
              events.RoundCommitted)
}  # fmt: skip
"""The event models a reproduction reads, by kind; other records are passed over."""


@dataclass
class RecordedRound:
    """One round's inputs as the log holds them."""

    decisions: list[events.DecisionMade] = field(default_factory=list)
    offers: list[events.OfferMade] = field(default_factory=list)
    answers: list[events.OfferAnswered] = field(default_factory=list)
    commit: events.RoundCommitted | None = None


def rounds(records: Iterable[dict[str, Any]]) -> tuple[events.EpisodeStarted, list[RecordedRound]]:
    """The `episode_started` record and each round's inputs, from decoded JSONL records."""
    start: events.EpisodeStarted | None = None
    out: list[RecordedRound] = []
    current = RecordedRound()
    for rec in records:
        model = READ.get(rec["kind"])
        if model is None:
            continue
        try:
            event = model.model_validate(rec)
        except ValidationError as exc:
            raise TwinError(f"the log's {rec['kind']} record at t_s={rec.get('t_s')} does not "
                            f"validate: {exc.errors()[0]['msg']}") from None  # fmt: skip
        if isinstance(event, events.EpisodeStarted):
            start = event
        elif isinstance(event, events.DecisionMade):
            current.decisions.append(event)
        elif isinstance(event, events.OfferMade):
            current.offers.append(event)
        elif isinstance(event, events.OfferAnswered):
            current.answers.append(event)
        else:
            current.commit = event
            out.append(current)
            current = RecordedRound()
    if start is None:
        raise TwinError("the log has no episode_started record")
    return start, out


def reproduce_log(records: Iterable[dict[str, Any]]) -> bytes:
    """Play the recorded rounds again; the JSONL of the reproduced session."""
    start, recorded = rounds(records)
    scenario = SCENARIO.validate_python(start.config)
    log = EventLog(start.session)
    driver: Driver[Frozen, Frozen] = Driver(scenario, seed=start.seed, session=start.session,
                                            log=log)  # fmt: skip
    for number, rnd in enumerate(recorded, 1):
        if driver.advance() is None:
            raise TwinError(f"the session ended before round {number}")
        play_round(driver, rnd)
    if driver.advance() is not None:  # the tail after the last recorded round
        raise TwinError("the session asked for more decisions than were recorded")
    log.flush()
    return b"".join(encode(r, start.session) for r in log)


def play_round(driver: Driver[Obs, Act], rnd: RecordedRound) -> Mapping[str, TenantOutcome]:
    """Commit one recorded round's inputs at the driver's current decision point; what each
    tenant got of it."""
    commit = rnd.commit
    assert commit is not None, "a recorded round ends in its commit"
    book = driver.book(commit.mechanism, asked=())
    defaulted = set(commit.defaulted)
    for made in rnd.decisions:
        tenant = _tenant(made)
        book.record(Turn(tenant, driver.parse_action(made.action), made.policy,
                         defaulted=tenant in defaulted))  # fmt: skip
    for seq, o in enumerate(rnd.offers):
        book.record_offer(
            Offer(offer_id=o.offer_id, from_tenant=_tenant(o), to_tenant=o.to_tenant,
                  give=Bundle.model_validate(o.give), take=Bundle.model_validate(o.take),
                  reason=o.reason), seq
        )  # fmt: skip
    for a in rnd.answers:
        book.record_answer(Answer(a.offer_id, _tenant(a), a.accepted, a.reason))
    return driver.commit(book)


def _tenant(event: Event) -> str:
    if event.tenant is None:
        raise TwinError(f"the log's {type(event).__name__} at t_s={event.t_s} names no tenant")
    return event.tenant


def complete_records(data: bytes) -> list[dict[str, Any]]:
    """The records of a JSONL log's clean prefix: whole lines that decode, up to the first that
    does not (a log cut off by a crash ends in a partial line)."""
    out = []
    for line in data.split(b"\n")[:-1]:  # the last piece has no newline: partial or empty
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            break
        if not isinstance(rec, dict) or "kind" not in rec:
            break
        out.append(rec)
    return out
