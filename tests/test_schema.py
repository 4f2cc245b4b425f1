"""Configs and records: validated at the edge, one source of truth, exported schemas in sync."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.conftest import play, tiny
from twin.errors import ConfigError
from twin.schema import export, record_source, records
from twin.schema.events import EVENT_ADAPTER, EVENT_FIELDS
from twin.schema.scenario import ClusterScenario
from twin.schema.wire import AGENT_TYPES
from twin.sim import catalog, scenarios


def test_unknown_fields_are_rejected_with_their_path() -> None:
    raw, where = scenarios.load_raw("default")
    raw["pools"][0]["colour"] = "green"
    with pytest.raises(
        ConfigError, match=r"field pools\.0\.colour: Extra inputs are not permitted"
    ):
        scenarios.validate(raw, where)


def test_a_bad_literal_names_the_allowed_values() -> None:
    with pytest.raises(
        ConfigError, match=r"queue\.policy: Input should be 'fifo', 'priority', 'sjf' or 'manual'"
    ):
        scenarios.load("default", ["queue.policy=lifo"])


def test_negative_gpus_are_rejected() -> None:
    with pytest.raises(
        ConfigError, match=r"initial_gpus\.a100: Input should be greater than or equal to 0"
    ):
        scenarios.load("default", ["tenants.0.initial_gpus.a100=-4"])


@pytest.mark.parametrize("value", ["inf", "nan"])
def test_non_finite_numbers_are_rejected_with_their_path(value: str) -> None:
    # JSON cannot carry them, so the episode's config in the event log could not replay.
    with pytest.raises(
        ConfigError, match=r"tenants\.0\.budget_usd: Input should be a finite number"
    ):
        scenarios.load("default", [f"tenants.0.budget_usd={value}"])


def test_more_initial_gpus_than_the_pool_holds_is_rejected() -> None:
    with pytest.raises(
        ConfigError, match="pool 'l40s': tenants start with 99 GPUs but max_gpus is 48"
    ):
        scenarios.load("default", ["tenants.1.initial_gpus.l40s=99"])


def test_a_workload_too_wide_for_every_pool_is_rejected() -> None:
    with pytest.raises(
        ValidationError, match=r"asks for up to 16\.0 GPUs but the largest pool holds 8"
    ):
        tiny(tenants=[{"name": "t", "workloads": [{
            "arrivals": {"process": "poisson", "rate_per_h": 1},
            "gpus": {"dist": "choice", "values": [1, 16]},
            "service_s": {"dist": "constant", "value": 1}}]}])  # fmt: skip


def test_scenarios_load_from_yaml_and_json_files(tmp_path: Any) -> None:
    import json

    import yaml

    sc = scenarios.load("gpucluster-easy")
    (tmp_path / "s.json").write_text(json.dumps(sc.model_dump(mode="json")))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sc.model_dump(mode="json")))
    assert scenarios.load(str(tmp_path / "s.json")) == sc
    assert scenarios.load(str(tmp_path / "s.yaml")) == sc


def test_every_builtin_scenario_validates() -> None:
    for name in catalog.builtin_names():
        assert scenarios.load(name).name == name


def test_every_record_the_sim_writes_validates_against_its_model() -> None:
    events = play(scenarios.load("default"), seed=3)  # type: ignore[arg-type]
    seen = set()
    for e in events:
        model = EVENT_ADAPTER.validate_python(e)
        assert model.model_dump(mode="json") == e
        seen.add(e["kind"])
    assert {"job_arrived", "job_started", "job_finished", "gpus_ready", "budget_charged",
            "decision_made", "episode_started", "episode_ended"} <= seen  # fmt: skip


def test_event_fields_cover_every_model() -> None:
    assert set(EVENT_FIELDS) >= {"job_arrived", "node_failed", "step_completed"}
    assert EVENT_FIELDS["job_started"] == ("job_id", "pool", "gpus", "run_s", "wait_s")


@pytest.mark.parametrize("name", list(export.MODELS))
def test_shipped_json_schemas_match_the_models(name: str) -> None:
    shipped = (export.SHIPPED / f"{name}.json").read_text()
    assert shipped == export.render(name), f"run `twin schema --write {export.SHIPPED}`"


pool_names = st.sampled_from(["a", "b", "c"])


@st.composite
def cluster_configs(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(pool_names, min_size=1, max_size=3, unique=True))
    pools = [
        {"name": n, "gpu_type": f"type-{n}", "max_gpus": draw(st.integers(0, 64)),
         "price_usd_per_gpu_h": draw(st.floats(0, 10)), "speed": draw(st.floats(0.1, 4))}
        for n in names
    ]  # fmt: skip
    initial = {n: draw(st.integers(-2, 70)) for n in draw(st.lists(pool_names, max_size=3))}
    return {"name": "h", "pools": pools, "tenants": [{"name": "t", "initial_gpus": initial}]}


@settings(max_examples=200, deadline=None)
@given(cluster_configs())
def test_configs_validate_exactly_when_consistent(raw: dict[str, Any]) -> None:
    pools = {p["name"]: p["max_gpus"] for p in raw["pools"]}
    initial = raw["tenants"][0]["initial_gpus"]
    consistent = all(p in pools and 0 <= n <= pools[p] for p, n in initial.items())
    try:
        sc = ClusterScenario.model_validate(raw)
    except ValidationError:
        assert not consistent
    else:
        assert consistent
        assert ClusterScenario.model_validate_json(sc.model_dump_json()) == sc


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=8), max_size=4))
def test_arbitrary_mappings_never_crash_validation(raw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        scenarios.validate(raw, "fuzz")


def test_the_shipped_typed_records_match_the_event_models() -> None:
    shipped = record_source.SHIPPED.read_text()
    assert shipped == record_source.render(), "run `python -m twin.schema.record_source`"


@pytest.mark.parametrize("kind", list(EVENT_FIELDS))
def test_each_kind_has_a_record_with_the_logs_field_order(kind: str) -> None:
    record = records.RECORDS[kind]
    assert record._fields == ("kind", "t_s", "tenant", *EVENT_FIELDS[kind])


def test_the_wire_unions_are_exported_and_agent_types_are_read_off_the_union() -> None:
    assert {"agent_message", "gateway_message"} <= set(export.MODELS)
    schema = export.json_schema("agent_message")
    assert sorted(schema["discriminator"]["mapping"]) == sorted(AGENT_TYPES)


def test_a_plan_s_bounds_in_the_scenario_schema_are_the_kernel_s_own() -> None:
    """A plan the schema admits is one the kernel evaluates: the scenario schema's ranges for
    parallelism and batch sizes are `twin.kernel.plans.LIMITS`."""
    from twin.kernel.plans import LIMITS
    from twin.schema.scenario import PlanSpec

    schema = PlanSpec.model_json_schema()["properties"]
    for name in ("tp", "pp", "micro_batch", "seq_len", "micro_batches"):
        assert (schema[name]["minimum"], schema[name]["maximum"]) == LIMITS[name], name
