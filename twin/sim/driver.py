"""The driver: runs virtual time as fast as possible and stops only at decision points.

All decisions due at one virtual instant form one batch; answers are applied in tenant order,
so a session is reproduced by its seed and its recorded actions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import simpy

from twin.errors import ActionError, SessionEndedError
from twin.eventlog.log import EventLog
from twin.replay.record import JobRecord
from twin.schema.actions import (
    GpuClusterAction,
    GpuClusterObservation,
    ProvisionAction,
    TenantObservation,
)
from twin.schema.scenario import ClusterScenario, Scenario
from twin.sim import mediate
from twin.sim.cluster import ClusterModel
from twin.sim.gpucluster import GpuClusterModel
from twin.sim.mediate import Mechanism, Offer, TenantOutcome
from twin.sim.observe import observe
from twin.sim.rng import Streams

Action = ProvisionAction | GpuClusterAction
Observation = TenantObservation | GpuClusterObservation


@dataclass(frozen=True, slots=True)
class DecisionBatch:
    """The tenants asked to decide at virtual time `t_s`, with why."""

    t_s: float
    reasons: dict[str, list[str]]


PAUSED = DecisionBatch(-1.0, {})
"""What `Driver.advance(limit=...)` returns when it stopped before a decision point."""


class Driver:
    """One session: a SimPy world, its model and its event log."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        seed: int = 0,
        session: str | None = None,
        log: EventLog | None = None,
        sources: Iterable[Iterable[JobRecord]] = (),
    ) -> None:
        self.scenario = scenario
        self.seed = seed
        self.session = session or f"{scenario.name}-s{seed}"
        self.log = log if log is not None else EventLog(self.session)
        self.env = simpy.Environment(initial_time=0.0)
        config = scenario.model_dump(mode="json")
        self.log.append(("episode_started", 0.0, None, scenario.name, seed, config))
        streams = Streams(seed)
        self.model: ClusterModel | GpuClusterModel
        if isinstance(scenario, ClusterScenario):
            self.model = ClusterModel(self.env, scenario, streams, self.log, sources)
        else:
            self.model = GpuClusterModel(self.env, scenario, streams, self.log)
        self._tenants = {name: i for i, name in enumerate(self.model.tenant_names)}
        self.batch: DecisionBatch | None = None
        self.round = 0

    @property
    def ended(self) -> str | None:
        """Why the episode ended, or None while it runs."""
        return self.model.ended

    @property
    def now_s(self) -> float:
        return float(self.env.now)

    def advance(self, limit: int | None = None) -> DecisionBatch | None:
        """Run to the next decision point (all events of its instant done); None at the end.

        With `limit`, stop after that many SimPy events and return `PAUSED`, so an async caller
        can yield to its event loop and call again.
        """
        env, model, step = self.env, self.model, self.env.step
        pending = model.pending
        budget = -1 if limit is None else limit
        try:
            while not model.ended:
                if budget == 0:
                    return PAUSED
                budget -= 1
                if not budget & 4095:
                    # Runs without decision points (replays) would otherwise hold every record.
                    self.log.maybe_flush()
                if pending:
                    now = env.now
                    while env.peek() == now and not model.ended:
                        step()
                    if model.ended:
                        break
                    names = model.tenant_names
                    reasons = {names[t]: list(pending[t]) for t in sorted(pending)}
                    for tenant, why in reasons.items():
                        self.log.append(("decision_requested", now, tenant, why))
                    self.batch = DecisionBatch(now, reasons)
                    return self.batch
                step()
        except simpy.core.EmptySchedule:
            model.end("drained")
        self.log.flush()
        self.batch = None
        return None

    def observe(self, tenant: str) -> Observation:
        """The tenant's view now."""
        model = self.model
        if isinstance(model, GpuClusterModel):
            return model.observe()
        index = self._tenant(tenant)
        reasons = self.batch.reasons.get(tenant, []) if self.batch else []
        return observe(model, index, reasons)

    def act(
        self,
        actions: Mapping[str, Action],
        policies: Mapping[str, str],
        *,
        offers: Sequence[Offer] = (),
        answers: Mapping[str, bool] | None = None,
        mechanism: Mechanism = "proportional",
        defaulted: Sequence[str] = (),
    ) -> dict[str, TenantOutcome]:
        """Commit one decision round at the current instant and record it.

        Records go out in canonical order (tenants in scenario order, offers in the order
        given, which callers keep canonical), so the log is reproduced by the same inputs.
        """
        if self.model.ended:
            raise SessionEndedError(f"session {self.session!r} ended ({self.model.ended})")
        now = self.env.now
        model = self.model
        self.round += 1
        items = sorted(actions.items(), key=lambda item: self._tenant(item[0]))
        for tenant, action in items:
            # The action model itself is recorded; the log serialises it as JSON.
            self.log.append(
                ("decision_made", now, tenant, policies.get(tenant, "external"), action)
            )
        answers = answers or {}
        for offer in offers:
            self.log.append(
                ("offer_made", now, offer.from_tenant, offer.offer_id, offer.to_tenant,
                 offer.give, offer.take)
            )  # fmt: skip
        for offer in offers:
            if offer.offer_id in answers:
                self.log.append(
                    (
                        "offer_answered",
                        now,
                        offer.to_tenant,
                        offer.offer_id,
                        answers[offer.offer_id],
                    )
                )
        outcomes: dict[str, TenantOutcome] = {}
        if isinstance(model, GpuClusterModel):
            for tenant, action in items:
                if not isinstance(action, GpuClusterAction):
                    raise ActionError(f"gpucluster expects GpuClusterAction, got {action!r}")
                model.apply(self._tenant(tenant), action)
        else:
            cluster_actions = {}
            for tenant, action in items:
                if not isinstance(action, ProvisionAction):
                    raise ActionError(f"cluster expects ProvisionAction, got {action!r}")
                for pool in (*action.provision, *action.bids_usd_per_gpu):
                    if pool not in model.pool_index:
                        raise ActionError(
                            f"action for tenant {tenant!r} names pool {pool!r}; "
                            f"pools are {sorted(model.pool_index)}"
                        )
                cluster_actions[tenant] = action
            accepted = {o for o, yes in answers.items() if yes}
            outcomes = mediate.commit(model, cluster_actions, list(offers), accepted, mechanism)
        self.log.append(("round_committed", now, None, self.round, mechanism, sorted(defaulted)))
        model.pending.clear()
        self.batch = None
        self.log.maybe_flush()
        return outcomes

    def _tenant(self, name: str) -> int:
        index = self._tenants.get(name)
        if index is None:
            raise ActionError(f"unknown tenant {name!r}; tenants are {sorted(self._tenants)}")
        return index
