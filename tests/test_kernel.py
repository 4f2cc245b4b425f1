"""The allocation kernel: physics checked by hand, properties by hypothesis, batch == single."""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twin.bench.kernel import random_plans
from twin.kernel import (
    ClusterContext,
    Plan,
    PlanBatch,
    Reason,
    Verdict,
    default_tables,
    evaluate,
    evaluate_one,
    formula,
    jit,
    reason_names,
)
from twin.kernel.compile import fixing
from twin.kernel.plans import BF16, FP8, FP16, FP32, GROUPS
from twin.kernel.tables import load_json, model_params

T = default_tables()
M70, M8, MIXTRAL = T.model("llama-3.1-70b"), T.model("llama-3.1-8b"), T.model("mixtral-8x7b")
H100, A100, V100, T4 = T.gpu("h100"), T.gpu("a100-80gb"), T.gpu("v100"), T.gpu("t4")
GIB = 2.0**30


def plan(**fields: object) -> Plan:
    base: dict[str, object] = {"model": M70, "gpu": H100, "n_gpus": 8, "tp": 8}
    base.update(fields)
    return Plan(**base)  # type: ignore[arg-type]


def with_precision(p: Plan, **groups: int) -> Plan:
    prec = list(p.precision)
    for name, code in groups.items():
        prec[GROUPS.index(name)] = code
    return dataclasses.replace(p, precision=tuple(prec))  # type: ignore[arg-type]


class TestCatalog:
    def test_model_presets_match_their_published_sizes(self) -> None:
        sizes = {
            m["name"]: sum(model_params(m).values()) / 1e9
            for m in load_json("models.json")["models"]
        }
        assert sizes["llama-3.1-8b"] == pytest.approx(8.03, abs=0.01)
        assert sizes["llama-3.1-70b"] == pytest.approx(70.55, abs=0.01)
        assert sizes["mixtral-8x7b"] == pytest.approx(46.70, abs=0.01)
        assert sizes["qwen2.5-7b"] == pytest.approx(7.62, abs=0.01)

    def test_the_catalog_has_the_required_accelerators(self) -> None:
        required = {
            "v100",
            "t4",
            "a10",
            "l40s",
            "a100-40gb",
            "a100-80gb",
            "h100",
            "h200",
            "b200",
            "mi300x",
        }
        assert required <= set(T.gpu_names)

    def test_every_accelerator_names_its_source(self) -> None:
        for gpu in load_json("accelerators.json")["accelerators"]:
            assert "datasheet" in gpu["source"] or "data sheet" in gpu["source"], gpu["name"]


class TestHandChecked:
    def test_70b_bf16_training_does_not_fit_one_80gb_gpu(self) -> None:
        v = evaluate_one(plan(n_gpus=1, tp=1))
        # 16 bytes per parameter (bf16 weights + grads, fp32 master + Adam m, v) alone: 1.1 TB.
        assert v.mem_bytes > 16 * 70.5e9
        assert v.reasons & Reason.OOM
        assert v.score == 0.01  # the floor, like any degenerate plan

    def test_tensor_parallel_8_is_not_enough_for_70b_training(self) -> None:
        v = evaluate_one(plan(n_gpus=8, tp=8))
        state = 16 * 70.55e9 / 8  # 141 GB of weights, gradients and optimizer states per GPU
        activations = 80 * 34 * 4096 * 8192 / 8  # 80 layers, one micro-batch in flight
        assert v.mem_bytes == pytest.approx(state + activations, rel=0.01)
        assert reason_names(v.reasons) == ["oom"]

    def test_enough_tensor_parallelism_makes_70b_training_fit(self) -> None:
        for p in (plan(n_gpus=32, tp=32), plan(n_gpus=32, tp=8, pp=4)):
            v = evaluate_one(p)
            assert v.mem_bytes < 80 * GIB * 0.92
            assert v.feasible
            assert v.score > 0.01

    def test_tensor_parallelism_across_nodes_is_slower_than_within(self) -> None:
        across = evaluate_one(plan(n_gpus=32, tp=32))
        within = evaluate_one(plan(n_gpus=32, tp=8, pp=4))
        assert across.step_s > 3 * within.step_s

    @pytest.mark.parametrize("gpu", ["v100", "t4", "a100-40gb", "a100-80gb"])
    def test_fp8_is_infeasible_where_the_hardware_has_none(self, gpu: str) -> None:
        p = with_precision(plan(gpu=T.gpu(gpu), model=M8, n_gpus=8, tp=1), mlp=FP8)
        v = evaluate_one(p)
        assert v.reasons & Reason.UNSUPPORTED_PRECISION
        assert v.score == 0.01

    def test_fp8_mlp_on_h100_is_faster_than_bf16(self) -> None:
        base = plan(n_gpus=32, tp=8, pp=4)
        assert evaluate_one(with_precision(base, mlp=FP8)).step_s < evaluate_one(base).step_s

    def test_bf16_is_unsupported_on_v100_but_fp16_is_fine(self) -> None:
        p = plan(gpu=V100, model=M8, n_gpus=8, tp=8, micro_batch=1, seq_len=1024)
        assert evaluate_one(p).reasons & Reason.UNSUPPORTED_PRECISION
        fp16 = dataclasses.replace(p, precision=(FP16,) * 6)
        assert not evaluate_one(fp16).reasons & Reason.UNSUPPORTED_PRECISION

    def test_fp8_on_the_embedding_diverges(self) -> None:
        v = evaluate_one(with_precision(plan(n_gpus=32, tp=8, pp=4), embedding=FP8))
        assert v.stability < 0.5
        assert v.reasons & Reason.UNSTABLE

    def test_bf16_attention_is_stable(self) -> None:
        v = evaluate_one(plan(n_gpus=32, tp=8, pp=4))
        assert v.stability >= 0.5
        assert not v.reasons & Reason.UNSTABLE

    def test_a_power_cap_throttles_and_slows(self) -> None:
        free = evaluate_one(plan(n_gpus=32, tp=8, pp=4))
        capped = evaluate_one(plan(n_gpus=32, tp=8, pp=4, power_cap_w=350.0))
        assert capped.throttle < 1.0
        assert capped.power_w == pytest.approx(350.0)
        assert capped.step_s > free.step_s

    def test_a_cap_below_idle_power_is_infeasible(self) -> None:
        v = evaluate_one(plan(n_gpus=32, tp=8, pp=4, power_cap_w=100.0))
        assert v.reasons & Reason.POWER_CAP
        assert v.score == 0.01

    def test_gpus_must_divide_into_tp_x_pp(self) -> None:
        v = evaluate_one(plan(n_gpus=12, tp=8))
        assert v.reasons & Reason.BAD_PARALLELISM

    def test_serving_70b_on_8_h100_is_memory_bound_and_fits(self) -> None:
        v = evaluate_one(plan(mode=1, micro_batch=32, seq_len=4096))
        assert v.feasible
        # A decode step reads the weight shard: 141 GB / 8 at 80% of 3.35 TB/s is ~6.6 ms.
        assert 0.0066 < v.step_s < 0.02
        assert v.tokens_per_s == pytest.approx(32 / v.step_s)

    def test_cost_is_gpus_times_price_and_the_job_takes_tokens_over_throughput(self) -> None:
        v = evaluate_one(plan(n_gpus=32, tp=8, pp=4, tokens=1e9))
        assert v.usd_per_h == pytest.approx(32 * 6.88)
        assert v.job_s == pytest.approx(1e9 / v.tokens_per_s)
        assert v.job_usd == pytest.approx(v.usd_per_h * v.job_s / 3600)


class TestInverseRewardDesign:
    def test_all_fp8_is_floored(self) -> None:
        v = evaluate_one(plan(n_gpus=32, tp=8, pp=4, precision=(FP8,) * 6))
        assert v.reasons & Reason.DEGENERATE_ALL_FP8
        assert v.score == 0.01

    def test_all_fp32_is_floored(self) -> None:
        v = evaluate_one(plan(model=M8, n_gpus=8, tp=8, precision=(FP32,) * 6))
        assert v.reasons & Reason.DEGENERATE_ALL_FP32
        assert v.score == 0.01

    def test_zero_gpus_is_floored(self) -> None:
        v = evaluate_one(plan(n_gpus=0))
        assert reason_names(v.reasons) == ["degenerate_zero_gpus"]
        assert v.score == 0.01

    def test_hoarding_beyond_the_fair_share_while_others_starve_is_floored(self) -> None:
        plans = [
            plan(model=M8, n_gpus=48, tp=8, tenant=0),
            plan(model=M8, n_gpus=8, tp=8, tenant=1),
        ]
        ctx = ClusterContext(capacity_gpus=64, demand_gpus=(16, 32))
        v = evaluate(PlanBatch.from_plans(plans), ctx)
        assert v.reasons[0] & Reason.DEGENERATE_HOARDING
        assert v.score[0] == 0.01
        assert not v.reasons[1] & Reason.DEGENERATE_HOARDING
        # Nobody starving: holding a lot is not hoarding.
        v = evaluate(
            PlanBatch.from_plans(plans), ClusterContext(capacity_gpus=64, demand_gpus=(48, 8))
        )
        assert not v.reasons[0] & Reason.DEGENERATE_HOARDING


class TestDifferenceRewards:
    def test_credit_is_global_utility_with_minus_without_the_tenant(self) -> None:
        plans = [
            plan(model=M8, n_gpus=8, tp=8, tenant=0),
            plan(model=M8, n_gpus=8, tp=4, tenant=0),
            plan(model=M8, n_gpus=16, tp=8, tenant=1),
        ]
        ctx = ClusterContext(capacity_gpus=24, overcommit_penalty=0.5)
        v = evaluate(PlanBatch.from_plans(plans), ctx)

        def utility(rows: list[int]) -> float:
            gpus = sum(plans[i].n_gpus for i in rows)
            useful = sum(v.score[i] * plans[i].n_gpus for i in rows)
            return useful - 0.5 * max(gpus - 24, 0)

        assert v.credit[0] == pytest.approx(utility([0, 1, 2]) - utility([2]))
        assert v.credit[1] == v.credit[0]
        assert v.credit[2] == pytest.approx(utility([0, 1, 2]) - utility([0, 1]))


# -- properties -----------------------------------------------------------------------------

plans_st = st.builds(
    Plan,
    model=st.integers(0, len(T.model_names) - 1),
    gpu=st.integers(0, len(T.gpu_names) - 1),
    n_gpus=st.sampled_from([0, 1, 2, 4, 8, 16, 32, 64]),
    precision=st.tuples(*[st.integers(0, 5)] * 6),
    tp=st.sampled_from([1, 2, 4, 8, 16]),
    pp=st.sampled_from([1, 2, 4]),
    mode=st.integers(0, 1),
    micro_batch=st.sampled_from([1, 2, 8]),
    seq_len=st.sampled_from([512, 4096, 32768]),
    micro_batches=st.sampled_from([1, 8, 32]),
    optimizer=st.integers(0, 2),
    zero=st.integers(0, 3),
    checkpointing=st.integers(0, 1),
    power_cap_w=st.sampled_from([0.0, 150.0, 400.0, 2000.0]),
    tokens=st.sampled_from([0.0, 1e6, 1e12]),
    tenant=st.integers(0, 3),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(plans_st, min_size=1, max_size=40))
def test_batch_equals_single_exactly(plans: list[Plan]) -> None:
    ctx = ClusterContext(capacity_gpus=96, demand_gpus=(8, 64, 0, 16))
    v = evaluate(PlanBatch.from_plans(plans), ctx)
    for i, p in enumerate(plans):
        assert evaluate_one(p, ctx, shares=v.shares) == v.row(i)


@settings(max_examples=300, deadline=None)
@given(plans_st)
def test_outputs_are_finite_where_the_plan_can_run(p: Plan) -> None:
    v = evaluate_one(p)
    assert np.isfinite(
        [v.mem_bytes, v.power_w, v.throttle, v.stability, v.usd_per_h, v.score]
    ).all()
    assert 0.0 <= v.score < 1.0
    if v.feasible:
        assert np.isfinite([v.step_s, v.tokens_per_s, v.job_s]).all()
        assert v.step_s > 0


@settings(max_examples=200, deadline=None)
@given(plans_st, st.sampled_from([2, 4]))
def test_more_gpus_never_raise_memory_per_gpu(p: Plan, factor: int) -> None:
    wider = dataclasses.replace(p, n_gpus=p.n_gpus * factor, tp=p.tp * factor)
    assert evaluate_one(wider).mem_bytes <= evaluate_one(p).mem_bytes


@settings(max_examples=200, deadline=None)
@given(plans_st, st.integers(0, 5))
def test_fp8_is_never_more_stable_than_bf16_for_the_same_group(p: Plan, group: int) -> None:
    prec = list(p.precision)
    prec[group] = FP8
    fp8 = evaluate_one(dataclasses.replace(p, precision=tuple(prec)))  # type: ignore[arg-type]
    prec[group] = BF16
    bf16 = evaluate_one(dataclasses.replace(p, precision=tuple(prec)))  # type: ignore[arg-type]
    assert fp8.stability <= bf16.stability


@settings(max_examples=100, deadline=None)
@given(st.lists(plans_st, min_size=2, max_size=60))
def test_an_infeasible_plan_never_outscores_a_feasible_one(plans: list[Plan]) -> None:
    v = evaluate(PlanBatch.from_plans(plans))
    runnable = v.feasible
    if runnable.any() and (~runnable).any():
        assert (
            v.score[~runnable & (v.reasons & Reason.DEGENERATE_ZERO_GPUS == 0)].max(initial=0)
            <= v.score[runnable].min()
        )


@settings(max_examples=100, deadline=None)
@given(st.lists(plans_st, min_size=1, max_size=50), st.randoms())
def test_permuting_a_batch_permutes_the_results(plans: list[Plan], rnd: object) -> None:
    order = np.arange(len(plans))
    np.random.default_rng(len(plans)).shuffle(order)
    ctx = ClusterContext(capacity_gpus=64, demand_gpus=(8, 8, 8, 8))
    batch = PlanBatch.from_plans(plans)
    a, b = evaluate(batch, ctx), evaluate(batch.take(order), ctx)
    for name in ("mem_bytes", "step_s", "score", "reasons"):
        assert np.array_equal(getattr(a, name)[order], getattr(b, name))
    assert np.allclose(a.credit[order], b.credit, rtol=1e-12, atol=1e-12)


def test_invalid_plans_are_refused_with_the_field_named() -> None:
    with pytest.raises(ValueError, match=r"tp = 0(\.0)? \(row 0\) is outside"):
        plan(tp=0)
    batch = PlanBatch.from_plans([plan()])
    bad = dataclasses.replace(batch, gpu=np.array([99]))
    with pytest.raises(ValueError, match=r"gpu = 99 \(row 0\)"):
        evaluate(bad)


@pytest.mark.parametrize("rows", [1, 40, 1000])
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_nan_and_infinite_sizes_are_refused_with_the_row_named(rows: int, value: float) -> None:
    # Small batches are checked in Python, large ones with numpy: both must refuse the value.
    batch = PlanBatch.from_plans([plan()] * rows)
    batch.tokens[rows - 1] = value
    with pytest.raises(ValueError, match=rf"tokens = {value} \(row {rows - 1}\) is outside"):
        evaluate(batch)
    with pytest.raises(ValueError, match=r"n_gpus = nan \(row 0\)"):
        plan(n_gpus=math.nan)


def test_a_formula_error_points_at_the_formula_line() -> None:
    # The compiled variants keep the source's line numbers, so a traceback reads true.
    source_lines, first = inspect.getsourcelines(formula.assess)
    compiled = fixing(formula.assess, train=True)
    lines = range(first, first + len(source_lines))
    assert compiled.__code__.co_firstlineno == first
    assert all(line in lines for _, _, line in compiled.__code__.co_lines() if line)


def bits(a: np.ndarray) -> np.ndarray:
    """Floats as their bit patterns: equal only when identical (NaNs and signed zeros too)."""
    return np.asarray(a, dtype=np.float64).view(np.int64)


def test_compiled_single_and_batch_and_numpy_agree_bit_for_bit_on_100k_plans() -> None:
    batch = random_plans(100_000, seed=11)
    ctx = ClusterContext(capacity_gpus=4096, demand_gpus=(512.0, 64.0, 0.0, 2048.0))
    compiled = evaluate(batch, ctx)
    reference = evaluate(batch, ctx, engine="numpy")
    for name in (*Verdict._fields[:-2], "credit"):  # every float column
        assert np.array_equal(bits(getattr(compiled, name)), bits(getattr(reference, name))), name
    assert np.array_equal(compiled.reasons, reference.reasons)
    rows = [evaluate_one(batch.row(i), ctx, shares=compiled.shares) for i in range(len(batch))]
    for j, name in enumerate(Verdict._fields):
        column = np.array([row[j] for row in rows])
        expected = getattr(compiled, name)
        same = column == expected if name == "reasons" else bits(column) == bits(expected)
        assert same.all(), f"{name}: row {int(np.flatnonzero(~same)[0])} differs"


def test_a_few_plans_give_the_same_numbers_before_and_after_the_compiled_code_loads() -> None:
    # A process evaluates small batches on numpy until loading the compiled code would pay
    # (start-up a short run never earns back): which one ran must not show in any number.
    jit.warm()
    contexts = (ClusterContext(), ClusterContext(capacity_gpus=64, demand_gpus=(8.0, 40.0, 0.0)))
    for size in (1, 2, 3, 5, 14, 32, 33, 64):
        batch = random_plans(size, seed=size)
        for ctx in contexts:
            compiled, reference = evaluate(batch, ctx), evaluate(batch, ctx, engine="numpy")
            for name in (*Verdict._fields[:-2], "credit"):
                assert np.array_equal(
                    bits(getattr(compiled, name)), bits(getattr(reference, name))
                ), (size, name)
            assert np.array_equal(compiled.reasons, reference.reasons)
            for name in ("tenant_gpus", "tenant_utility", "others_starving"):
                assert np.array_equal(
                    np.asarray(getattr(compiled.shares, name)),
                    np.asarray(getattr(reference.shares, name)),
                ), (size, name)


def test_a_short_run_does_not_load_the_compiled_kernel() -> None:
    script = (
        "import sys\n"
        "from twin.sim import scenarios\n"
        "from twin.sim.runner import run_episode\n"
        "summary, _ = run_episode(scenarios.load('default'), seed=1, policy=None, out_dir=None)\n"
        "assert summary.jobs.finished > 0\n"
        "print('numba' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True)  # fmt: skip
    assert out.stdout.strip() == "False", "a short run evaluates its few plans on numpy"


def test_a_million_random_plans_match_the_numpy_formula_bit_for_bit() -> None:
    # The vectorised batch (every lane the same IEEE operations), its fused range check and the
    # compiled round sums, against the numpy reference, with and without a round's capacity.
    batch = random_plans(1_000_000, seed=5)
    for ctx in (ClusterContext(), ClusterContext(capacity_gpus=1e5, demand_gpus=(4e4, 1.0))):
        compiled = evaluate(batch, ctx)
        reference = evaluate(batch, ctx, engine="numpy")
        for name in (*Verdict._fields[:-2], "credit"):
            assert np.array_equal(bits(getattr(compiled, name)), bits(getattr(reference, name))), (
                name
            )
        assert np.array_equal(compiled.reasons, reference.reasons)
        for name in ("tenant_gpus", "tenant_utility", "others_starving"):
            assert np.array_equal(getattr(compiled.shares, name), getattr(reference.shares, name))


def test_precision_codes_stored_row_major_give_the_same_numbers() -> None:
    batch = random_plans(5_000, seed=6)
    assert batch.precision.flags.f_contiguous  # the fast layout, as from_plans makes it too
    rows = dataclasses.replace(batch, precision=np.ascontiguousarray(batch.precision))
    a, b = evaluate(batch), evaluate(rows)
    assert np.array_equal(bits(a.floats), bits(b.floats))
    assert np.array_equal(a.reasons, b.reasons)


@pytest.mark.parametrize(
    ("column", "row", "value", "message"),
    [
        ("gpu", 4_321, 99, r"gpu = 99 \(row 4321\)"),
        ("model", 0, -1, r"model = -1 \(row 0\)"),
        ("mode", 4_999, 2, r"mode = 2 \(row 4999\)"),
        ("tp", 17, 0.0, r"tp = 0.0 \(row 17\)"),
        ("precision", 2_500, 7, r"precision \[.*7.*\] \(row 2500\) has a code outside 0..5"),
        ("tenant", 3, -2, r"tenant = -2 \(row 3\)"),
    ],
)
def test_a_bad_value_anywhere_in_a_large_batch_is_named_and_nothing_is_read_out_of_bounds(
    column: str, row: int, value: float, message: str
) -> None:
    # The compiled loop checks each value as it reads it and clamps codes before they index a
    # table, so a wild code is refused by name rather than read past the tables' end.
    batch = random_plans(5_000, seed=7)
    target = getattr(batch, column)
    if column == "precision":
        target[row, 3] = value
    else:
        target[row] = value
    with pytest.raises(ValueError, match=message):
        evaluate(batch)


def test_a_tenant_that_is_not_a_whole_number_is_refused() -> None:
    batch = random_plans(100, seed=9)
    tenants = batch.tenant.astype(np.float64)
    tenants[42] = 1.5
    with pytest.raises(ValueError, match=r"tenant = 1.5 \(row 42\) is not a whole number"):
        evaluate(dataclasses.replace(batch, tenant=tenants))
    whole = evaluate(dataclasses.replace(batch, tenant=batch.tenant.astype(np.float64)))
    assert np.array_equal(whole.credit, evaluate(batch).credit)


def test_columns_of_the_wrong_length_are_refused_before_the_compiled_loop_reads_them() -> None:
    batch = random_plans(100, seed=8)
    with pytest.raises(ValueError, match=r"tp has shape \(99,\), expected \(100,\)"):
        evaluate(dataclasses.replace(batch, tp=batch.tp[:99]))
    with pytest.raises(ValueError, match=r"precision has shape \(100, 5\)"):
        evaluate(dataclasses.replace(batch, precision=batch.precision[:, :5]))
    with pytest.raises(ValueError, match=r"tenant has 3 rows, expected 100"):
        evaluate(dataclasses.replace(batch, tenant=np.arange(3)))


def test_a_large_result_still_held_is_never_written_over() -> None:
    # Large results reuse one block of memory, but only once nothing refers to it: a result,
    # or a row of one, that is still held keeps its numbers while other batches run.
    first, second = random_plans(100_000, seed=21), random_plans(100_000, seed=22)
    held = evaluate(first)
    kept = held.floats.copy(), held.reasons.copy()
    row = evaluate(second).score  # the verdicts go, their score row stays
    row_copy = row.copy()
    for _ in range(3):
        evaluate(second)
        evaluate(first)
    assert np.array_equal(bits(held.floats), bits(kept[0]))
    assert np.array_equal(held.reasons, kept[1])
    assert np.array_equal(bits(row), bits(row_copy))


def test_a_dropped_large_result_s_memory_is_reused() -> None:
    batch = random_plans(100_000, seed=23)
    address = evaluate(batch).floats.__array_interface__["data"][0]
    again = evaluate(batch)
    assert again.floats.__array_interface__["data"][0] == address
    assert np.array_equal(bits(again.score), bits(evaluate(batch, engine="numpy").score))


def test_batches_evaluated_on_threads_at_once_each_get_their_own_numbers() -> None:
    batches = [random_plans(100_000, seed=30 + k) for k in range(4)]
    expected = [evaluate(b, engine="numpy").floats for b in batches]

    def run(k: int) -> bool:
        return all(
            np.array_equal(bits(evaluate(batches[k]).floats), bits(expected[k])) for _ in range(5)
        )

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(run, range(4)))


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split()}


def test_a_fresh_cache_compiles_once_for_threads_at_once_and_to_simd_divisions(
    tmp_path: Path,
) -> None:
    # Threads that need the kernel at once (a gateway's environment calls) find it made once:
    # none trips over another's half-written module. Branch-free and alias-free, the loop
    # vectorises: the formula's divisions are packed, 8 lanes wide where the machine has
    # AVX-512. (numba shows no assembly for code loaded from its cache, so a fresh process
    # compiles into an empty one.)
    script = (
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from twin.kernel import default_tables, jit\n"
        "tables = default_tables()\n"
        "with ThreadPoolExecutor(4) as pool:\n"
        "    made = list(pool.map(lambda _: jit.for_tables(tables)[0], range(4)))\n"
        "assert all(m is made[0] for m in made)\n"
        "print('\\n'.join(made[0].batch.inspect_asm().values()))\n"
    )
    env = {**os.environ, jit.CACHE_ENV: str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    if "avx2" not in _cpu_flags():
        return  # the SIMD check reads x86 AVX2 assembly
    wide = "zmm" if "avx512f" in _cpu_flags() else "ymm"
    assert re.search(rf"vdivpd\s+%{wide}", done.stdout)
    assert "loop not vectorized" not in done.stderr


def test_the_compiled_formula_comes_from_the_formula_source() -> None:
    # One source of truth: the compiled module is generated from formula.assess, per mode.
    shape = jit.layout(default_tables())
    text = jit.source(shape)
    assert "def assess_train(F, I, model, gpu, n, tp, pp" in text
    assert "def assess_serve(F, I, model, gpu, n, tp, pp" in text
    assert '"cache": True, "error_model": "numpy"' in text
    assert "fastmath" not in text  # no reassociation: the numbers stay numpy's


@pytest.mark.parametrize("rows", [1, 5])
def test_a_few_plans_in_other_number_types_evaluate_as_the_compiled_types_do(rows: int) -> None:
    # Columns a caller filled with ints where the batch holds floats (or the reverse) take the
    # checked, converting path: the same numbers, and a bad tenant is still named.
    batch = PlanBatch.from_plans([plan(n_gpus=8, tp=2)] * rows)
    loose = dataclasses.replace(batch, n_gpus=batch.n_gpus.astype(np.int64),
                                model=batch.model.astype(np.float64),
                                tenant=np.arange(rows, dtype=np.float64))  # fmt: skip
    exact = dataclasses.replace(batch, tenant=np.arange(rows, dtype=np.int64))
    a, b = evaluate(loose), evaluate(exact)
    for name in ("mem_bytes", "step_s", "score", "reasons", "credit"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    bad = dataclasses.replace(exact, tenant=np.full(rows, -1, dtype=np.int64))
    with pytest.raises(ValueError, match=r"tenant = -1 \(row 0\) is outside"):
        evaluate(bad)


@settings(max_examples=200, deadline=None)
@given(plans_st, st.integers(0, 3), st.sampled_from([(), (8.0, 0.0, 4.0, 2.0), (1.0,)]),
       st.sampled_from([math.inf, 16.0, 2.0]))  # fmt: skip
def test_one_plan_through_evaluate_has_the_array_path_s_numbers(
    p: Plan, tenant: int, demand: tuple[float, ...], capacity: float
) -> None:
    # A batch of one takes its own short path: every field as the numpy formula gives it.
    batch = PlanBatch.from_plans([dataclasses.replace(p, tenant=tenant)])
    ctx = ClusterContext(capacity_gpus=capacity, demand_gpus=demand)
    fast, ref = evaluate(batch, ctx), evaluate(batch, ctx, engine="numpy")
    for name in ("mem_bytes", "step_s", "tokens_per_s", "power_w", "throttle", "stability",
                 "usd_per_h", "job_s", "score", "reasons", "credit"):  # fmt: skip
        assert np.array_equal(getattr(fast, name), getattr(ref, name), equal_nan=True), name
    for name in ("tenant_gpus", "tenant_utility", "others_starving"):
        assert np.array_equal(getattr(fast.shares, name), getattr(ref.shares, name)), name
    assert fast.row(0) == ref.row(0) or math.isnan(fast.row(0).score)
