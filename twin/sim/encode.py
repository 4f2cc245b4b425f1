"""Where the sim meets the kernel: plans encoded into arrays once, evaluated in one call.

Every (tenant, workload, GPU count) a kernel workload can produce is paired with every pool;
the verdicts become `PlanOption`s that jobs look up: their speed (tokens/s) on each pool, 0
where the plan cannot run there, and whether the plan is numerically stable.
"""

from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from twin.errors import ConfigError
from twin.kernel import (
    GROUPS,
    PRECISIONS,
    ClusterContext,
    Plan,
    PlanBatch,
    credit_one,
    default_tables,
    evaluate,
    floor_hoarding_one,
    reason_names,
    settle,
)
from twin.kernel.plans import MODES, OPTIMIZERS
from twin.kernel.tables import load_json
from twin.schema.distributions import Choice, Constant
from twin.schema.scenario import ClusterScenario, KernelJob, PlanSpec

Key = tuple[int, int, float]  # tenant, workload, gpus

# Trace GPU model names -> kernel accelerators where the match is exact (else kept as given).
CATALOG_NAMES = {
    "T4": "t4",
    "A10": "a10",
    "V100": "v100",
    "V100M32": "v100",
    "V100M16": "v100",
    "A100-SXM4-80GB": "a100-80gb",
    "A800-SXM4-80GB": "a100-80gb",
    "H800": "h100",
}


def warm_kernel() -> float:
    """Compile the kernel for the shipped tables ahead of first use (or load its cache); the
    seconds it took. A process that forks workers calls it first, so they start warm."""
    from twin.kernel import jit

    return jit.warm()


def catalog_gpu(model: str) -> str:
    """The kernel catalog's name for a GPU model as a trace names it (else the name, lowered)."""
    return CATALOG_NAMES.get(model, model.lower())


def gpu_price_usd_h(gpu_type: str) -> float | None:
    """The catalog's on-demand price per GPU-hour for a GPU type, if the catalog knows it (read
    from the catalog file: pricing a pool builds no kernel tables)."""
    for gpu in load_json("accelerators.json")["accelerators"]:
        if gpu["name"] == gpu_type:
            return float(gpu["price_usd_per_gpu_h"])
    return None


@dataclass(frozen=True, slots=True)
class PlanOption:
    """A plan's outcome on each pool (by pool index)."""

    rates: tuple[float, ...]  # tokens per second; 0 where infeasible
    stable: tuple[bool, ...]
    reasons: tuple[tuple[str, ...], ...]

    @property
    def best_rate(self) -> float:
        return max(self.rates)

    def why_not(self) -> str:
        """The reasons the plan runs nowhere, e.g. 'oom, unsupported_precision'."""
        seen = dict.fromkeys(r for rs in self.reasons for r in rs)
        return ", ".join(seen) or "no pool"


class Evaluated(NamedTuple):
    """One verdict for the event log: the tenant, then the `plan_evaluated` payload in order."""

    tenant: str
    workload: int
    pool: str
    gpus: float
    feasible: bool
    score: float
    reasons: list[str]
    tokens_per_s: float
    mem_gib: float
    power_w: float
    stability: float
    usd_per_h: float


def precision_codes(spec: PlanSpec) -> tuple[int, int, int, int, int, int]:
    default = spec.precision.get("default", "bf16")
    a, b, c, d, e, f = (PRECISIONS.index(spec.precision.get(g, default)) for g in GROUPS)  # type: ignore[call-overload]
    return (a, b, c, d, e, f)


def _gpu_counts(w_gpus: Constant | Choice) -> list[float]:
    return [w_gpus.value] if isinstance(w_gpus, Constant) else sorted(set(w_gpus.values))


_BY_SCENARIO: dict[int, tuple[weakref.ref[ClusterScenario], dict[str, Any]]] = {}


def for_scenario(cfg: ClusterScenario) -> dict[str, Any]:
    """What this module has worked out for `cfg` (a frozen scenario): kept while `cfg` lives,
    so every episode on it (an RL env's resets) shares the plan options and verdicts."""
    key = id(cfg)
    hit = _BY_SCENARIO.get(key)
    if hit is not None and hit[0]() is cfg:
        return hit[1]
    memo: dict[str, Any] = {}
    _BY_SCENARIO[key] = (weakref.ref(cfg, lambda _: _BY_SCENARIO.pop(key, None)), memo)
    return memo


def plan_options(cfg: ClusterScenario) -> tuple[dict[Key, PlanOption], list[Evaluated]]:
    """Every plan the scenario's kernel workloads can produce, evaluated in one kernel call
    (once per scenario: the result is shared, and read only)."""
    memo = for_scenario(cfg)
    if "options" not in memo:
        memo["options"] = _plan_options(cfg)
    options: tuple[dict[Key, PlanOption], list[Evaluated]] = memo["options"]
    return options


def _plan_options(cfg: ClusterScenario) -> tuple[dict[Key, PlanOption], list[Evaluated]]:
    if not any(w.kernel is not None for t in cfg.tenants for w in t.workloads):
        return {}, []  # no kernel workloads: no tables to build
    tables = default_tables()
    accel = {
        p.name: tables.gpu_names.index(p.gpu_type)
        for p in cfg.pools
        if p.gpu_type in tables.gpu_names
    }
    plans: list[Plan] = []
    index: list[tuple[Key, int]] = []
    for t, tenant in enumerate(cfg.tenants):
        for w, workload in enumerate(tenant.workloads):
            job = workload.kernel
            if job is None:
                continue
            model = _model(tables.model_names, job, tenant.name, w)
            if not accel:
                raise ConfigError(
                    f"tenant {tenant.name!r} workload {w}: kernel jobs need a pool whose gpu_type "
                    f"is a kernel accelerator ({', '.join(tables.gpu_names)})"
                )
            assert isinstance(workload.gpus, Constant | Choice)
            for gpus in _gpu_counts(workload.gpus):
                for p, pool in enumerate(cfg.pools):
                    if pool.name in accel and (workload.gpu_type in (None, pool.gpu_type)):
                        spec = _capped(job.plan, pool.power_cap_w)
                        plans.append(plan(model, accel[pool.name], gpus, job.mode, spec))
                        index.append(((t, w, gpus), p))
    if not plans:
        return {}, []
    v = evaluate(PlanBatch.from_plans(plans))
    rates: dict[Key, list[float]] = {}
    stable: dict[Key, list[bool]] = {}
    why: dict[Key, list[tuple[str, ...]]] = {}
    records = []
    n_pools = len(cfg.pools)
    for i, (key, p) in enumerate(index):
        row = v.row(i)
        names = reason_names(row.reasons)
        r = rates.setdefault(key, [0.0] * n_pools)
        s = stable.setdefault(key, [False] * n_pools)
        y = why.setdefault(key, [("unknown_accelerator",)] * n_pools)
        r[p] = row.tokens_per_s if row.feasible else 0.0
        s[p] = "unstable" not in names
        y[p] = tuple(names)
        records.append(_evaluated(cfg, (*key, p), row))
    options = {
        key: PlanOption(tuple(rates[key]), tuple(stable[key]), tuple(why[key])) for key in rates
    }
    return options, records


Candidate = tuple[int, int, float, int]
"""A plan a round decides: tenant, workload, GPU count, pool (under the pool's power cap)."""


def _evaluated(cfg: ClusterScenario, key: Candidate, row: Any) -> Evaluated:
    """A kernel verdict row as the `plan_evaluated` payload."""
    t, w, gpus, p = key
    return Evaluated(
        cfg.tenants[t].name, w, cfg.pools[p].name, gpus, row.feasible, row.score,
        reason_names(row.reasons), row.tokens_per_s, row.mem_bytes / 2**30, row.power_w,
        row.stability, row.usd_per_h,
    )  # fmt: skip


def evaluate_candidates(cfg: ClusterScenario, candidates: list[Candidate]) -> list[Evaluated]:
    """The kernel's verdicts on a round's candidate plans, in one call: each workload's plan
    with the pool's accelerator, its GPU count, and the lower of its own and the pool's cap."""
    if not candidates:
        return []
    tables = default_tables()
    plans = []
    for t, w, gpus, p in candidates:
        job = cfg.tenants[t].workloads[w].kernel
        assert job is not None, "candidates are kernel workloads"
        model = _model(tables.model_names, job, cfg.tenants[t].name, w)
        spec = _capped(job.plan, cfg.pools[p].power_cap_w)
        plans.append(plan(model, tables.gpu_names.index(cfg.pools[p].gpu_type), gpus, job.mode,
                          spec))  # fmt: skip
    v = evaluate(PlanBatch.from_plans(plans))
    return [_evaluated(cfg, c, v.row(i)) for i, c in enumerate(candidates)]


def _capped(spec: PlanSpec, pool_cap_w: float) -> PlanSpec:
    """The plan under a pool's power cap (the lower of the two caps in force; 0 is none)."""
    if pool_cap_w <= 0 or 0 < spec.power_cap_w <= pool_cap_w:
        return spec
    return spec.model_copy(update={"power_cap_w": pool_cap_w})


def kernel_pools(cfg: ClusterScenario) -> list[int]:
    """The pools whose accelerator the kernel knows."""
    names = default_tables().gpu_names
    return [p for p, pool in enumerate(cfg.pools) if pool.gpu_type in names]


def _model(names: tuple[str, ...], job: KernelJob, tenant: str, w: int) -> int:
    if job.model not in names:
        known = ", ".join(names)
        raise ConfigError(
            f"tenant {tenant!r} workload {w}: unknown model {job.model!r}; known: {known}"
        )
    return names.index(job.model)


def plan(
    model: int, gpu: int, gpus: float, mode: str, spec: PlanSpec, *, tokens: float = 0.0
) -> Plan:
    """The kernel's plan for `gpus` GPUs of accelerator `gpu` running preset `model` per `spec`."""
    return Plan(
        model=model,
        gpu=gpu,
        n_gpus=gpus,
        precision=precision_codes(spec),
        tp=spec.tp,
        pp=spec.pp,
        mode=MODES.index(mode),
        micro_batch=spec.micro_batch,
        seq_len=spec.seq_len,
        micro_batches=spec.micro_batches,
        optimizer=OPTIMIZERS.index(spec.optimizer),
        zero=spec.zero,
        checkpointing=int(spec.checkpointing),
        power_cap_w=spec.power_cap_w,
        tokens=tokens,
    )


@dataclass(frozen=True, slots=True)
class PlacementVerdict:
    feasible: bool
    stable: bool
    reasons: tuple[str, ...]
    score: float
    tokens_per_s: float
    credit: float


def evaluate_placements(
    cfg: ClusterScenario,
    requests: list[tuple[int, int, float, int, PlanSpec | None]],
    *,
    capacity_gpus: float,
    demand_gpus: tuple[float, ...],
) -> list[PlacementVerdict]:
    """One kernel call for a round's placements: (tenant, workload, gpus, pool, plan) each; no
    plan means the workload's own (under the pool's power cap), as the job's verdicts scored it.

    Difference rewards come from the same pass, with the tenants' demands as the round context.
    """
    if not requests:
        return []
    tables = default_tables()
    plans = []
    unknown = []
    for tenant, workload, gpus, pool, spec in requests:
        job = cfg.tenants[tenant].workloads[workload].kernel
        assert job is not None
        gpu_type = cfg.pools[pool].gpu_type
        unknown.append(gpu_type not in tables.gpu_names)
        gpu = tables.gpu_names.index(gpu_type) if not unknown[-1] else 0
        model = _model(tables.model_names, job, cfg.tenants[tenant].name, workload)
        chosen = _capped(job.plan, cfg.pools[pool].power_cap_w) if spec is None else spec
        plans.append(dataclasses.replace(plan(model, gpu, gpus, job.mode, chosen), tenant=tenant))
    v = evaluate(
        PlanBatch.from_plans(plans),
        ClusterContext(capacity_gpus=capacity_gpus, demand_gpus=demand_gpus),
    )
    out = []
    for i, is_unknown in enumerate(unknown):
        row = v.row(i)
        names = ("unknown_accelerator",) if is_unknown else tuple(reason_names(row.reasons))
        verdict = PlacementVerdict(
            row.feasible and not is_unknown, "unstable" not in names, names, row.score,
            row.tokens_per_s, row.credit,
        )  # fmt: skip
        out.append(verdict)
    return out


DEGENERATE = ("degenerate_all_fp8", "degenerate_all_fp32")
"""Reason codes of a plan that runs but earns the floor score."""


@dataclass(frozen=True, slots=True)
class RoundCredit:
    """The kernel's settlement of one round, by tenant (scenario order)."""

    score: tuple[float, ...]
    useful_gpus: tuple[float, ...]
    difference_reward: tuple[float, ...]
    hoarding: tuple[bool, ...]


def round_credit(
    held: list[float], useful: list[float], demand: list[float], capacity: float
) -> RoundCredit:
    """Each tenant's score, useful GPUs and difference reward for a round, by the kernel's
    settlement: a tenant holding over its fair share while another is short is floored
    (inverse reward design); its credit is its useful GPUs minus the over-commitment its demand
    adds: U_t - penalty * (over(N) - over(N - n_t)), over(x) = max(x - capacity, 0)."""
    n = len(held)
    ctx = ClusterContext()
    short = [d > h for h, d in zip(held, demand, strict=True)]
    fair, slack = capacity / max(n, 1), ctx.hoard_slack
    total = float(np.add.reduce(np.asarray(demand, dtype=np.float64)))  # numpy's summation order
    floored, utility, credit, hoarding = [], [], [], []
    # numpy's formulas on Python numbers, tenant by tenant: the same IEEE operations.
    for h, d, s, u in zip(held, demand, short, map(float, useful), strict=True):
        score = u / (h if h >= 1e-12 else 1e-12) if h > 0 else 0.0
        _, bits = floor_hoarding_one(None, score, 0, h, sum(short) - s, fair, slack)
        hoarding.append(bits > 0)
        floored.append(settle.FLOOR if bits > 0 else score)
        utility.append(settle.FLOOR * h if bits > 0 else u)
        credit.append(credit_one(None, utility[-1], d, total, capacity, ctx.overcommit_penalty))
    return RoundCredit(tuple(floored), tuple(utility), tuple(credit), tuple(hoarding))
