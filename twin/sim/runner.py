"""Run one episode to its end with in-process policies, streaming its event log."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import ExitStack
from pathlib import Path

from twin.eventlog.log import EventLog, JsonlWriter
from twin.eventlog.metrics import Metrics
from twin.replay.record import JobRecord
from twin.schema.scenario import ClusterScenario, GpuClusterScenario, Scenario
from twin.schema.summary import Summary
from twin.sim.driver import Action, Driver
from twin.sim.policies import (
    ClusterPolicy,
    GpuClusterPolicy,
    cluster_policy,
    gpucluster_policy,
)


def policies_for(
    scenario: Scenario, seed: int, override: str | None = None
) -> dict[str, ClusterPolicy | GpuClusterPolicy]:
    """Each tenant's policy: `override` for all, else the one its config names."""
    if isinstance(scenario, GpuClusterScenario):
        return {"default": gpucluster_policy(override or scenario.policy, seed)}
    return {t.name: cluster_policy(override or t.policy, seed) for t in scenario.tenants}


def run_episode(
    scenario: Scenario,
    *,
    seed: int = 0,
    policy: str | None = None,
    out_dir: Path | None = None,
    sources: Iterable[Iterable[JobRecord]] = (),
    keep_log: bool = False,
    metrics: Metrics | None = None,
) -> tuple[Summary, Driver]:
    """Play `scenario` to its end; write `events.jsonl` and `summary.json` under `out_dir`."""
    policies = policies_for(scenario, seed, policy)
    names = {tenant: p.name for tenant, p in policies.items()}
    with ExitStack() as stack:
        session = f"{scenario.name}-s{seed}"
        log = EventLog(session, keep=keep_log)
        metrics = metrics or Metrics()
        metrics.session = session
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            stream = stack.enter_context((out_dir / "events.jsonl").open("wb"))
            log.subscribe(JsonlWriter(stream, session))
        log.subscribe(metrics.consume)
        driver = Driver(scenario, seed=seed, session=session, log=log, sources=sources)
        batch = driver.advance()
        while batch is not None:
            actions: dict[str, Action] = {}
            for tenant in batch.reasons:
                obs = driver.observe(tenant)
                actions[tenant] = policies[tenant].decide(obs)  # type: ignore[arg-type]
            driver.act(actions, names)
            batch = driver.advance()
        log.flush()
    summary = metrics.summary()
    if out_dir is not None:
        (out_dir / "summary.json").write_text(summary.model_dump_json(indent=2) + "\n")
    return summary, driver


__all__ = ["ClusterScenario", "run_episode"]
