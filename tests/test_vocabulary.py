"""Each vocabulary is spelled once; the schema, the CLI and the dispatch all read it."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from twin.cli.main import build_parser
from twin.errors import ConfigError
from twin.replay.detect import SIGNATURES
from twin.replay.registry import JOB_FORMATS, JOB_READERS, NODE_FORMATS
from twin.schema.scenario import QueueConfig
from twin.schema.vocabulary import CLOCKS, MECHANISMS, QUEUE_POLICIES
from twin.sim.kinds import KINDS
from twin.sim.market.mechanisms import MECHANISM
from twin.sim.queues import QUEUES
from twin.sim.tenant_policies import by_name


def choices(command: str, flag: str) -> list[Any]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    action = next(a for a in sub.choices[command]._actions if flag in a.option_strings)
    return list(action.choices or ())


def test_every_queue_policy_has_a_queue_and_the_schema_lists_them_all() -> None:
    assert tuple(QUEUES) == QUEUE_POLICIES
    assert QueueConfig.model_json_schema()["properties"]["policy"]["enum"] == list(QUEUE_POLICIES)


def test_replay_offers_every_queue_policy_an_unattended_run_can_use() -> None:
    assert choices("replay", "--policy") == [p for p in QUEUE_POLICIES if p != "manual"]


def test_every_mechanism_has_a_rule_and_serve_offers_them_all() -> None:
    assert tuple(MECHANISM) == MECHANISMS
    assert choices("serve", "--mechanism") == list(MECHANISMS)
    assert choices("serve", "--clock") == list(CLOCKS)


def test_trace_formats_come_from_one_registry() -> None:
    assert tuple(JOB_READERS) == JOB_FORMATS
    assert choices("replay", "--format") == list(JOB_FORMATS)
    assert choices("replay", "--cluster-format") == list(NODE_FORMATS)
    assert {fmt for _, fmt in SIGNATURES} <= {*JOB_FORMATS, *NODE_FORMATS}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_an_unknown_tenant_policy_names_the_kinds_policies(kind: str) -> None:
    registry = KINDS[kind].policies
    with pytest.raises(ConfigError, match=", ".join(registry)):
        by_name(registry, "nope")
    for name in registry:
        assert by_name(registry, name).name == name
