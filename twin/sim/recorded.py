"""Reproduce a session from its event log: the seed, the scenario and the recorded rounds."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import TypeAdapter

from twin.errors import TwinError
from twin.eventlog.log import EventLog, encode
from twin.schema.actions import Bundle, GpuClusterAction, ProvisionAction
from twin.schema.scenario import Scenario
from twin.sim.driver import Action, Driver
from twin.sim.mediate import Offer

SCENARIO: TypeAdapter[Scenario] = TypeAdapter(Scenario)


def rounds(records: Iterable[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The `episode_started` record and each round's inputs, from decoded JSONL records."""
    start: dict[str, Any] | None = None
    out: list[dict[str, Any]] = []
    current: dict[str, Any] = {"actions": [], "offers": [], "answers": []}
    for rec in records:
        kind = rec["kind"]
        if kind == "episode_started":
            start = rec
        elif kind == "decision_made":
            current["actions"].append(rec)
        elif kind == "offer_made":
            current["offers"].append(rec)
        elif kind == "offer_answered":
            current["answers"].append(rec)
        elif kind == "round_committed":
            out.append({**current, "commit": rec})
            current = {"actions": [], "offers": [], "answers": []}
    if start is None:
        raise TwinError("the log has no episode_started record")
    return start, out


def replay_log(records: Iterable[dict[str, Any]]) -> bytes:
    """Play the recorded rounds again; the JSONL of the reproduced session."""
    start, recorded = rounds(records)
    scenario = SCENARIO.validate_python(start["config"])
    session = start["session"]
    log = EventLog(session)
    driver = Driver(scenario, seed=start["seed"], session=session, log=log)
    for rnd in recorded:
        if driver.advance() is None:
            raise TwinError(f"the session ended before round {rnd['commit']['round']}")
        actions: dict[str, Action] = {}
        policies = {}
        for rec in rnd["actions"]:
            model = GpuClusterAction if scenario.kind == "gpucluster" else ProvisionAction
            actions[rec["tenant"]] = model.model_validate(rec["action"])
            policies[rec["tenant"]] = rec["policy"]
        offers = [
            Offer(o["offer_id"], o["tenant"], o["to_tenant"], Bundle.model_validate(o["give"]),
                  Bundle.model_validate(o["take"]))
            for o in rnd["offers"]
        ]  # fmt: skip
        answers = {a["offer_id"]: a["accepted"] for a in rnd["answers"]}
        commit = rnd["commit"]
        driver.act(
            actions, policies, offers=offers, answers=answers, mechanism=commit["mechanism"],
            defaulted=commit["defaulted"],
        )  # fmt: skip
    while driver.advance() is not None:  # the tail after the last recorded round
        raise TwinError("the session asked for more decisions than were recorded")
    log.flush()
    return b"".join(encode(r, session) for r in log)
