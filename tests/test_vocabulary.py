"""Each vocabulary is spelled once; the schema, the CLI and the dispatch all read it."""

from __future__ import annotations

import argparse
from typing import Any, get_args

import pytest

from twin.cli.main import build_parser
from twin.errors import ConfigError
from twin.eventlog.formats import EXPORTERS
from twin.eventlog.kind_summaries import SUMMARIES
from twin.replay.registry import JOB_FORMATS, JOB_READERS, NODE_FORMATS, NODE_RECOGNISED
from twin.schema.scenario import QueueConfig, Scenario
from twin.schema.vocabulary import (
    CLOCKS,
    DEFAULT_MECHANISM,
    EXPORT_FORMATS,
    PLACED_ONLY,
    PLACEMENTS,
    QUEUE_POLICIES,
    ROUND_POLICIES,
    mechanism_names,
)
from twin.sim import catalog, scenarios
from twin.sim.kinds import KINDS, kind_of
from twin.sim.market.mechanisms import MECHANISM
from twin.sim.placement_policies import POLICIES
from twin.sim.queues import QUEUES
from twin.sim.tenant_policies import by_name


def subparser(command: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = sub.choices[command]
    return parser


def choices(command: str, flag: str) -> list[Any]:
    action = next(a for a in subparser(command)._actions if flag in a.option_strings)
    return list(action.choices or ())


def test_every_queue_policy_has_a_queue_and_the_schema_lists_them_all() -> None:
    assert tuple(QUEUES) == QUEUE_POLICIES
    assert QueueConfig.model_json_schema()["properties"]["policy"]["enum"] == list(QUEUE_POLICIES)


def test_replay_offers_every_queue_policy_an_unattended_run_can_use_and_gavels() -> None:
    unattended = [p for p in QUEUE_POLICIES if p != "manual"]
    gavels = [p for p in ROUND_POLICIES if p not in QUEUE_POLICIES]
    assert choices("replay", "--policy") == unattended + gavels


def test_every_mechanism_has_a_rule_and_serve_offers_them_all() -> None:
    assert tuple(MECHANISM) == mechanism_names()
    assert choices("serve", "--mechanism") == list(mechanism_names())
    assert choices("serve", "--clock") == list(CLOCKS)


def test_trace_formats_come_from_one_registry() -> None:
    assert tuple(JOB_READERS) == JOB_FORMATS
    assert choices("replay", "--format") == list(JOB_FORMATS)
    assert choices("replay", "--cluster-format") == list(NODE_FORMATS)
    assert tuple(NODE_RECOGNISED) == NODE_FORMATS


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_an_unknown_tenant_policy_names_the_kinds_policies(kind: str) -> None:
    registry = KINDS[kind].policies
    with pytest.raises(ConfigError, match=", ".join(registry)):
        by_name(registry, "nope")
    for name in registry:
        assert by_name(registry, name).name == name


def test_every_scenario_kind_has_a_model_kind_and_a_summary() -> None:
    members = get_args(get_args(Scenario)[0])
    assert {m.model_fields["kind"].default for m in members} == set(KINDS) == set(SUMMARIES)
    for kind in KINDS.values():
        assert kind.figures, f"{kind.name} shows nothing in twin compare"


@pytest.mark.parametrize("name", catalog.builtin_names())
def test_a_kind_answers_its_built_in_scenarios_horizon(name: str) -> None:
    scenario = scenarios.load(name)
    horizon_s = kind_of(scenario).horizon_s(scenario)
    assert horizon_s is None or horizon_s > 0


def test_every_placement_policy_has_a_rule() -> None:
    assert tuple(POLICIES) == PLACEMENTS
    assert choices("calibrate", "--placement") == list(PLACEMENTS)


def test_every_export_format_has_a_writer_and_the_help_names_it() -> None:
    assert tuple(EXPORTERS) == EXPORT_FORMATS
    help_text = next(a.help for a in subparser("export")._actions if "--format" in a.option_strings)
    assert all(f"{name}:" in (help_text or "") for name in EXPORT_FORMATS)


def test_queue_policies_that_wait_for_a_placement_are_queue_policies() -> None:
    assert set(QUEUE_POLICIES) >= PLACED_ONLY
    assert not PLACED_ONLY & set(choices("replay", "--policy"))


def test_the_default_mechanism_is_one_and_every_surface_defaults_to_it() -> None:
    assert DEFAULT_MECHANISM in mechanism_names()
    assert subparser("serve").get_default("mechanism") == DEFAULT_MECHANISM
    assert subparser("play").get_default("mechanism") == DEFAULT_MECHANISM
