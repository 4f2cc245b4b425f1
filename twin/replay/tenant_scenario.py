"""A cluster scenario whose tenants play a real trace: the trace's cluster (its node inventory
or a sized pool, under the replay's scheduler model and params) as shared pools, the trace's
rows mapped to tenants by a column (the top N by GPU-hours named, the rest one `other` tenant),
beside any cloud pools the tenants may provision, trade and bid for.

`twin trace-scenario` writes one; the built-in `openb-tenants` and `dlrm-tenants` are written by
it. With every tenant passive and no cloud pools, each job starts and finishes exactly when
`twin replay` with the same trace, window, params and seed has it start and finish.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from twin.errors import ConfigError
from twin.replay.run import Playable, Replay, ReplayOptions
from twin.replay.trace import Trace
from twin.replay.workload import no_such_field, row_tenant, tenant_key
from twin.schema.scenario import ClusterScenario
from twin.schema.trace_workload import TraceWorkload
from twin.sim import scenarios
from twin.sim.job_sources import trace_path


@dataclass(frozen=True)
class TenantDefaults:
    """What every tenant of the scenario starts with (the same for all)."""

    policy: str = "static"
    budget_usd: float | None = None
    value_usd_per_gpu_h: float = 4.0
    sla_usd_per_job_h: float = 0.0


@dataclass(frozen=True)
class Extras:
    """The scenario's own parts beside the trace: cloud pools, decisions, a horizon."""

    name: str
    description: str = ""
    pools: list[dict[str, Any]] = field(default_factory=list)
    decisions: dict[str, Any] = field(default_factory=lambda: {"interval_s": 900.0, "triggers": []})
    horizon_s: float | None = None


def build(
    workload: TraceWorkload,
    options: ReplayOptions,
    top: int,
    extras: Extras,
    defaults: TenantDefaults = TenantDefaults(),
) -> ClusterScenario:
    """The scenario: `options` give the cluster and params as `twin replay` takes them (its
    trace reading must be `workload`'s); the `top` tenants by GPU-hours are named, the rest
    play as `workload.other`."""
    trace = Trace(trace_path(workload.path), options.reading, keep="always")
    plan = Replay(trace, options)
    base = plan.scenario
    names = ranked_tenants(trace, base, workload, top)
    shared = [p.model_copy(update={"shared": True}) for p in base.pools]
    raw: dict[str, Any] = {
        "kind": "cluster",
        "name": extras.name,
        "description": extras.description or base.description,
        "pools": [p.model_dump(mode="json") for p in shared] + extras.pools,
        "tenants": [_tenant(n, defaults) for n in names],
        "queue": base.queue.model_dump(mode="json"),
        "decisions": extras.decisions,
        "scheduler": base.scheduler.model_dump(mode="json"),
        "trace": workload.model_dump(mode="json", exclude_defaults=True),
    }
    if base.nodes is not None:
        raw["nodes"] = base.nodes.model_dump(mode="json")
    if extras.horizon_s is not None:
        raw["horizon_s"] = extras.horizon_s
    return scenarios.as_cluster(scenarios.validate(raw, f"scenario {extras.name!r}"))


def ranked_tenants(
    trace: Trace, base: ClusterScenario, workload: TraceWorkload, top: int
) -> list[str]:
    """The `top` tenants by GPU-hours of the jobs the cluster plays, then `workload.other`."""
    if top < 1:
        raise ConfigError(f"--top must name at least one tenant, got {top}")
    records, log = trace.jobs()
    playable = Playable(base.pools, log)
    gpu_h: defaultdict[str, float] = defaultdict(float)
    for rec in records:
        if playable(rec):
            value = row_tenant(rec, workload.tenant_by)
            if value is None:
                raise ConfigError(no_such_field(trace.path, workload.tenant_by, rec))
            gpu_h[tenant_key(value)] += rec.gpus * rec.service_s / 3600
    ranked = sorted(gpu_h.items(), key=lambda kv: (-kv[1], kv[0]))
    named = [name for name, _ in ranked if name != workload.other][:top]
    return [*named, workload.other]


def _tenant(name: str, defaults: TenantDefaults) -> dict[str, Any]:
    tenant: dict[str, Any] = {
        "name": name,
        "policy": defaults.policy,
        "value_usd_per_gpu_h": defaults.value_usd_per_gpu_h,
    }
    if defaults.budget_usd is not None:
        tenant["budget_usd"] = defaults.budget_usd
    if defaults.sla_usd_per_job_h:
        tenant["sla_usd_per_job_h"] = defaults.sla_usd_per_job_h
    return tenant
