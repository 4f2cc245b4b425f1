"""A scenario's welfare bound, seed by seed: the session played by the tenants' own policies
(its log gives the realised workload, its welfare a feasible schedule's), the program solved with
pooled and with separable holdings, the separable program's holdings played in the twin (the
planner: another feasible schedule), and the result as JSON and Parquet.

Welfare is every tenant's return together (value of finished work, less GPU rent and SLA
penalties; trade money and auction prices are transfers between tenants and count for nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from twin.bound.planner import Planner
from twin.bound.program import HOLDINGS, LOOSE, TIGHT, Plan, Tightness, relaxes, solve
from twin.bound.workload import RealisedJob, realised_jobs
from twin.errors import ConfigError
from twin.schema.actions import ProvisionAction, TenantObservation
from twin.schema.scenario import ClusterScenario, PoolConfig
from twin.sim.driver import Driver
from twin.sim.runner import run_episode
from twin.sim.sampling import sampler

BOUND_FILE = "bound.json"
BOUND_TABLE = "bound.parquet"
DELAY_QUANTILE = 0.01  # provisioning delays at their 1st percentile: a real one is rarely less
FEASIBLE_POLICIES = ("autoscale", "static")  # tenants' own policies, each a feasible schedule
PLANNER_DELAY_QUANTILES = (DELAY_QUANTILE, 0.5, 0.9)
"""Besides the bound's own separable plan, the planner tries the linear program's plans with
provisioning taking these quantiles of its delay (the slower, the earlier GPUs are asked for: a
real request waits longer than the bound's 1st percentile), and plays the best."""


@dataclass(frozen=True, slots=True)
class SeedBound:
    """One seed's bound: both programs' optima, their difference (the trade headroom), and the
    best welfare the tenants' own policies reached on the same workload."""

    scenario: str
    seed: int
    jobs: int
    slot_s: float
    delay_s: dict[str, float]
    pooled: Plan
    separable: Plan
    feasible_usd: float
    feasible_policy: str
    planner_usd: float
    planner_delay_quantile: float
    planner_held_gpus: dict[str, dict[str, list[float]]]
    tightness: Tightness

    @property
    def bound_usd(self) -> float:
        return self.pooled.welfare_usd

    @property
    def planner_gap_usd(self) -> float:
        """How far the best schedule played (the planner's or the tenants' own policies') is
        below the bound: what is left to explain between them."""
        return self.bound_usd - max(self.planner_usd, self.feasible_usd)

    @property
    def headroom_usd(self) -> float:
        """What moving GPUs between tenants adds to the best welfare: the trade headroom (never
        below zero: the pooled program relaxes the separable one; a solver's rounding is not
        reported as a loss)."""
        return max(self.pooled.welfare_usd - self.separable.welfare_usd, 0.0)

    def row(self) -> dict[str, float | int | str]:
        return {
            "scenario": self.scenario, "seed": self.seed, "jobs": self.jobs,
            "pooled_usd": self.pooled.welfare_usd, "separable_usd": self.separable.welfare_usd,
            "headroom_usd": self.headroom_usd, "feasible_usd": self.feasible_usd,
            "feasible_policy": self.feasible_policy, "planner_usd": self.planner_usd,
            "planner_delay_quantile": self.planner_delay_quantile,
            "planner_gap_usd": self.planner_gap_usd,
            "value_usd": self.pooled.value_usd, "rent_usd": self.pooled.rent_usd,
            "sla_usd": self.pooled.sla_usd,
            "solve_s": self.pooled.solve_s + self.separable.solve_s,
        }  # fmt: skip


def delay_quantiles_s(pools: Sequence[PoolConfig],
                      quantiles: Sequence[float]) -> dict[float, dict[str, float]]:  # fmt: skip
    """Each pool's provisioning delay at each of `quantiles`, by quantile (one set of 20,000
    seeded draws a pool, whatever the quantiles)."""
    rng = np.random.default_rng(0)
    out: dict[float, dict[str, float]] = {q: {} for q in quantiles}
    for pool in pools:
        draw = sampler(pool.provision_delay_s, rng)
        draws = [draw() for _ in range(20_000)]
        for q, at in zip(quantiles, np.quantile(draws, quantiles), strict=True):
            out[q][pool.name] = float(at)
    return out


def bound_seed(
    scenario: ClusterScenario,
    seed: int,
    *,
    slot_s: float | None = None,
    tightness: Tightness = TIGHT,
    time_limit_s: float = 20.0,
) -> SeedBound:
    """The bound on one seed of `scenario`."""
    if scenario.horizon_s is None:
        raise ConfigError(f"bound: scenario {scenario.name!r} has no horizon_s; set one")
    if scenario.scheduler.quota_gpus:
        raise ConfigError(
            f"bound: scenario {scenario.name!r} sets quotas (scheduler.quota_gpus), which the "
            "program does not model yet; bound it without them"
        )
    slot = slot_s or scenario.decisions.interval_s or 900.0
    feasible: dict[str, float] = {}
    log: list[dict[str, Any]] = []
    for policy in FEASIBLE_POLICIES:
        summary, driver = run_episode(scenario, seed=seed, policy=policy, keep_log=not log)
        feasible[policy] = sum(t.reward_usd for t in summary.tenants)
        if not log:
            log = list(driver.log.dicts())
    jobs = realised_jobs(scenario, log)
    table = delay_quantiles_s(scenario.pools, PLANNER_DELAY_QUANTILES)
    delays = table[DELAY_QUANTILE]
    plans = {
        holdings: solve(scenario, jobs, holdings, slot_s=slot,
                        delay_s=[delays[p.name] for p in scenario.pools], tightness=tightness,
                        time_limit_s=time_limit_s)
        for holdings in HOLDINGS
    }  # fmt: skip
    pooled, separable = plans["pooled"], plans["separable"]
    if separable.welfare_usd > pooled.welfare_usd:
        # Pooled holdings relax separable ones: where the solver stopped short on the separable
        # program, the pooled bound bounds it too.
        separable = replace(separable, welfare_usd=pooled.welfare_usd)
    best = max(feasible, key=lambda k: feasible[k])
    quantile, held, planned = best_plan(scenario, seed, jobs, separable, table, slot_s=slot,
                                         time_limit_s=time_limit_s)  # fmt: skip
    return SeedBound(scenario.name, seed, len(jobs), slot, delays, pooled, separable,
                     feasible[best], best, planned, quantile, held, tightness)  # fmt: skip


def best_plan(
    scenario: ClusterScenario, seed: int, jobs: Sequence[RealisedJob], separable: Plan,
    delays_by_quantile: dict[float, dict[str, float]], *, slot_s: float, time_limit_s: float,
) -> tuple[float, dict[str, dict[str, list[float]]], float]:  # fmt: skip
    """The planner's schedule: the bound's separable plan and the linear program's plans with
    each pool's delay at each quantile of `delays_by_quantile`, each played in the twin; the
    best one's delay quantile, holdings and welfare."""
    candidates = [(DELAY_QUANTILE, separable.held_gpus)]
    for quantile, delays in delays_by_quantile.items():
        plan = solve(scenario, jobs, "separable", slot_s=slot_s,
                     delay_s=[delays[p.name] for p in scenario.pools], tightness=LOOSE,
                     time_limit_s=time_limit_s)  # fmt: skip
        candidates.append((quantile, plan.held_gpus))
    played = [(play_plan(scenario, seed, held, slot_s), quantile, held)
              for quantile, held in candidates]  # fmt: skip
    welfare, quantile, held = max(played, key=lambda c: c[0])
    return quantile, held, welfare


def play_plan(scenario: ClusterScenario, seed: int,
              held_gpus: dict[str, dict[str, list[float]]], slot_s: float) -> float:  # fmt: skip
    """The welfare of planned holdings played in the twin (`Planner`)."""
    driver: Driver[TenantObservation, ProvisionAction] = Driver(scenario, seed=seed)
    planners = {t: Planner(held_gpus.get(t, {}), slot_s) for t in driver.tenants}
    while driver.advance() is not None:
        driver.commit(driver.book(), planners, announce_defaults=False)
    return sum(driver.settlement(t)[1] for t in driver.tenants)


def write(results: Sequence[SeedBound], out_dir: Path) -> list[Path]:
    """`bound.json` (every seed, both plans with the GPUs they hold, what the program relaxes)
    and `bound.parquet` (one row per seed)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        "relaxes": list(relaxes(results[0].tightness if results else TIGHT)),
        "tightness": asdict(results[0].tightness if results else TIGHT),
        "seeds": [{**r.row(), "delay_s": r.delay_s, "slot_s": r.slot_s,
                   "plans": {h: asdict(getattr(r, h)) for h in HOLDINGS},
                   "planner_held_gpus": r.planner_held_gpus}
                  for r in results],
    }  # fmt: skip
    json_path = out_dir / BOUND_FILE
    json_path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    table_path = out_dir / BOUND_TABLE
    pq.write_table(pa.Table.from_pylist([r.row() for r in results]), table_path)
    return [json_path, table_path]
