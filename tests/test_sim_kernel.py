"""The sim runs kernel jobs at the kernel's speed, and only where their plans are feasible."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import kinds, play
from twin.errors import ConfigError
from twin.kernel import Plan, default_tables, evaluate_one
from twin.schema.scenario import ClusterScenario

T = default_tables()


def scenario(
    plan: dict[str, Any],
    *,
    model: str = "llama-3.1-8b",
    gpus: float = 8,
    tokens: float = 1e8,
    pools: tuple[str, ...] = ("h100", "a100-80gb"),
) -> ClusterScenario:
    return ClusterScenario.model_validate(
        {
            "name": "kernel-jobs",
            "pools": [
                {"name": g, "gpu_type": g, "max_gpus": 16, "price_usd_per_gpu_h": 2.0}
                for g in pools
            ],
            "tenants": [
                {
                    "name": "t",
                    "policy": "static",
                    "initial_gpus": dict.fromkeys(pools, 8),
                    "workloads": [
                        {
                            "arrivals": {"process": "poisson", "rate_per_h": 1},
                            "gpus": {"dist": "constant", "value": gpus},
                            "max_jobs": 3,
                            "kernel": {
                                "model": model,
                                "tokens": {"dist": "constant", "value": tokens},
                                "plan": plan,
                            },
                        }
                    ],
                }
            ],
            "decisions": {"interval_s": None, "triggers": []},
        }
    )


def test_every_plan_is_evaluated_once_and_logged() -> None:
    events = play(scenario({"tp": 8}))
    verdicts = kinds(events, "plan_evaluated")
    assert [(v["pool"], v["gpus"]) for v in verdicts] == [("h100", 8.0), ("a100-80gb", 8.0)]
    expected = evaluate_one(Plan(model=T.model("llama-3.1-8b"), gpu=T.gpu("h100"), n_gpus=8, tp=8))
    assert verdicts[0]["tokens_per_s"] == expected.tokens_per_s
    assert verdicts[0]["score"] == expected.score


def test_a_kernel_job_runs_for_its_tokens_over_the_kernels_throughput() -> None:
    events = play(scenario({"tp": 8}, tokens=5e8))
    rate = {v["pool"]: v["tokens_per_s"] for v in kinds(events, "plan_evaluated")}
    finished = kinds(events, "job_finished")
    assert len(finished) == 3
    for f in finished:
        assert f["run_s"] == pytest.approx(5e8 / rate[f["pool"]])


def test_fp8_plans_never_run_on_a100() -> None:
    events = play(scenario({"tp": 8, "precision": {"default": "bf16", "mlp": "fp8"}}))
    [h100, a100] = kinds(events, "plan_evaluated")
    assert h100["feasible"]
    assert not a100["feasible"]
    assert a100["reasons"] == ["unsupported_precision"]
    assert {e["pool"] for e in kinds(events, "job_started")} == {"h100"}


def test_a_plan_that_fits_nowhere_is_rejected_with_its_reasons() -> None:
    events = play(scenario({"tp": 1}, model="llama-3.1-70b", gpus=1))
    failed = kinds(events, "job_failed")
    assert [f["reason"] for f in failed] == ["infeasible_plan: oom"] * 3
    assert not kinds(events, "job_started")
    assert events[-1]["reason"] == "drained"


def test_an_unstable_plan_starts_and_then_diverges() -> None:
    events = play(scenario({"tp": 8, "precision": {"default": "bf16", "embedding": "fp8"}}))
    assert all("unstable" in v["reasons"] for v in kinds(events, "plan_evaluated"))
    started = {e["job_id"]: e for e in kinds(events, "job_started")}
    failed = kinds(events, "job_failed")
    assert len(failed) == 3
    for f in failed:
        assert f["reason"] == "diverged"
        start = started[f["job_id"]]
        assert start["t_s"] < f["t_s"] < start["t_s"] + start["run_s"]
    assert not kinds(events, "job_finished")


def test_an_unknown_model_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"unknown model 'gpt-9'; known: llama-3\.1-8b"):
        play(scenario({"tp": 8}, model="gpt-9"))


def test_kernel_jobs_need_a_pool_the_kernel_knows() -> None:
    with pytest.raises(ConfigError, match="need a pool whose gpu_type is a kernel accelerator"):
        play(scenario({"tp": 8}, pools=("tpu-v5",)))


def test_verdict_records_carry_the_plan_evaluated_fields_in_order() -> None:
    from twin.schema.events import EVENT_FIELDS
    from twin.sim.encode import Evaluated

    assert Evaluated._fields == ("tenant", *EVENT_FIELDS["plan_evaluated"])
