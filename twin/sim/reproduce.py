"""Reproduce a session from its event log: the seed, the scenario and the recorded rounds."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import TypeAdapter

from twin.errors import TwinError
from twin.eventlog.log import EventLog, encode
from twin.schema.actions import Bundle
from twin.schema.scenario import Scenario
from twin.sim.driver import Driver
from twin.sim.model import Offer

SCENARIO: TypeAdapter[Scenario] = TypeAdapter(Scenario)


@dataclass
class RecordedRound:
    """One round's inputs as the log holds them (decoded JSONL records)."""

    actions: list[dict[str, Any]] = field(default_factory=list)
    offers: list[dict[str, Any]] = field(default_factory=list)
    answers: list[dict[str, Any]] = field(default_factory=list)
    commit: dict[str, Any] = field(default_factory=dict)


def rounds(records: Iterable[dict[str, Any]]) -> tuple[dict[str, Any], list[RecordedRound]]:
    """The `episode_started` record and each round's inputs, from decoded JSONL records."""
    start: dict[str, Any] | None = None
    out: list[RecordedRound] = []
    current = RecordedRound()
    for rec in records:
        kind = rec["kind"]
        if kind == "episode_started":
            start = rec
        elif kind == "decision_made":
            current.actions.append(rec)
        elif kind == "offer_made":
            current.offers.append(rec)
        elif kind == "offer_answered":
            current.answers.append(rec)
        elif kind == "round_committed":
            current.commit = rec
            out.append(current)
            current = RecordedRound()
    if start is None:
        raise TwinError("the log has no episode_started record")
    return start, out


def reproduce_log(records: Iterable[dict[str, Any]]) -> bytes:
    """Play the recorded rounds again; the JSONL of the reproduced session."""
    start, recorded = rounds(records)
    scenario = SCENARIO.validate_python(start["config"])
    session = start["session"]
    log = EventLog(session)
    driver: Driver[Any, Any] = Driver(scenario, seed=start["seed"], session=session, log=log)
    for rnd in recorded:
        if driver.advance() is None:
            raise TwinError(f"the session ended before round {rnd.commit['round']}")
        play_round(driver, rnd)
    if driver.advance() is not None:  # the tail after the last recorded round
        raise TwinError("the session asked for more decisions than were recorded")
    log.flush()
    return b"".join(encode(r, session) for r in log)


def play_round(driver: Driver[Any, Any], rnd: RecordedRound) -> None:
    """Commit one recorded round's inputs at the driver's current decision point."""
    actions = {rec["tenant"]: driver.parse_action(rec["action"]) for rec in rnd.actions}
    policies = {rec["tenant"]: rec["policy"] for rec in rnd.actions}
    offers = [
        Offer(o["offer_id"], o["tenant"], o["to_tenant"], Bundle.model_validate(o["give"]),
              Bundle.model_validate(o["take"]), o.get("reason", ""))
        for o in rnd.offers
    ]  # fmt: skip
    answers = {a["offer_id"]: a["accepted"] for a in rnd.answers}
    why = {a["offer_id"]: a["reason"] for a in rnd.answers if a.get("reason")}
    driver.act(actions, policies, offers=offers, answers=answers, answer_reasons=why,
               mechanism=rnd.commit["mechanism"], defaulted=rnd.commit["defaulted"])  # fmt: skip


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
