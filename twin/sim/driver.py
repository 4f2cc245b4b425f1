"""The driver: runs virtual time as fast as possible and stops only at decision points.

All decisions due at one virtual instant form one batch; answers are applied in tenant order,
so a session is reproduced by its seed and its recorded actions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import simpy

from twin.errors import ActionError, SessionEndedError
from twin.eventlog.log import EventLog
from twin.schema import records
from twin.schema.actions import (
    GpuClusterAction,
    GpuClusterObservation,
    ProvisionAction,
    TenantObservation,
)
from twin.schema.base import Frozen
from twin.schema.scenario import Scenario
from twin.schema.snapshot import Snapshot
from twin.schema.vocabulary import DEFAULT_MECHANISM, EndReason, Mechanism
from twin.sim.jobrecord import JobRecord
from twin.sim.kinds import Kind, kind_of
from twin.sim.model import Model, TenantOutcome, World
from twin.sim.rng import Streams
from twin.sim.round import RoundBook
from twin.sim.tenant_policies import TenantPolicy

Action = ProvisionAction | GpuClusterAction
Observation = TenantObservation | GpuClusterObservation
Obs = TypeVar("Obs", bound=Frozen)
Act = TypeVar("Act", bound=Frozen)


@dataclass(frozen=True, slots=True)
class DecisionBatch:
    """The tenants asked to decide at virtual time `t_s`, with why."""

    t_s: float
    reasons: dict[str, list[str]]


PAUSED = DecisionBatch(-1.0, {})
"""What `Driver.advance(limit=...)` returns when it stopped before a decision point."""


class Driver(Generic[Obs, Act]):
    """One session: a SimPy world, its model and its event log; it owns the decision rounds.

    Typed by the model kind's observation and action (`Driver[TenantObservation,
    ProvisionAction]` for a cluster scenario); callers see the model only through it.
    """

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
        self.log.append(
            records.EpisodeStarted("episode_started", 0.0, None, scenario.name, seed, config)
        )
        self.kind: Kind[Scenario, Obs, Act] = kind_of(scenario)
        self.model: Model[Obs, Act] = self.kind.model(
            World(self.env, Streams(seed), self.log), scenario, sources
        )
        self.tenants = list(self.model.tenant_names)
        self._tenants = {name: i for i, name in enumerate(self.tenants)}
        pools = self.kind.pool_names(scenario)
        self._pools = None if pools is None else frozenset(pools)
        self.batch: DecisionBatch | None = None
        self.round = 0
        self._told = dict.fromkeys(self.tenants, 0.0)  # rewards told in rounds, by tenant
        self._final: dict[str, float] = {}  # what accrued after each tenant's last round

    @property
    def ended(self) -> str | None:
        """Why the episode ended, or None while it runs."""
        return self.model.ended

    @property
    def now_s(self) -> float:
        return float(self.env.now)

    @property
    def negotiable(self) -> bool:
        """Whether negotiation sessions can run on this model kind."""
        return self.kind.negotiable

    def stop(self, reason: EndReason) -> None:
        """End the episode now (a session's round limit, say); its log is flushed."""
        self.model.end(reason)
        self.log.flush()

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
                    model.score_round(sorted(pending))
                    names = self.tenants
                    reasons = {names[t]: list(pending[t]) for t in sorted(pending)}
                    for tenant, why in reasons.items():
                        self.log.append(
                            records.DecisionRequested("decision_requested", now, tenant, why)
                        )
                    self.batch = DecisionBatch(now, reasons)
                    return self.batch
                step()
        except simpy.core.EmptySchedule:
            model.end("drained")
        self.log.flush()
        self.batch = None
        return None

    def observe(self, tenant: str) -> Obs:
        """The tenant's view now."""
        reasons = self.batch.reasons.get(tenant, []) if self.batch else []
        return self.model.observe(self._tenant(tenant), reasons)

    def observe_flat(self, tenant: str) -> tuple[float, ...]:
        """The tenant's view now as one vector of numbers (the model kind documents its layout)."""
        return self.model.observe_flat(self._tenant(tenant))

    def snapshot(self, tenant: str) -> Snapshot | None:
        """The tenant's own GPUs and jobs now, as a forecast starts from them (None: the
        model kind has no job queue to forecast)."""
        return self.model.snapshot(self._tenant(tenant))

    def parse_action(self, raw: Any) -> Act:
        """An action for this model kind from its JSON form (pydantic's ValidationError if not)."""
        return self.kind.action.model_validate(raw)

    def default_policies(self, override: str | None = None) -> dict[str, TenantPolicy[Obs, Act]]:
        """Each tenant's configured policy (or `override` for all), seeded by the session."""
        return self.kind.default_policies(self.scenario, self.seed, override)

    def settle_reward(self, tenant: str) -> float:
        """The tenant's reward accrued since its last committed round; once the episode has
        ended, the final settlement's (the same figure however often it is asked)."""
        if self.model.ended:
            return self.settlement(tenant)[0]
        return self.model.settle_reward(self._tenant(tenant))

    def waiting_sla_usd(self, tenant: str) -> float:
        """The SLA penalty the tenant's waiting jobs have accrued and not yet been charged (0
        once the episode has ended: the end charges it)."""
        return self.model.waiting_sla_usd(self._tenant(tenant))

    def settlement(self, tenant: str) -> tuple[float, float]:
        """Once the episode has ended: what accrued after the tenant's last round (logged as
        `episode_settled`), and its whole return: every round's reward plus that."""
        if tenant not in self._final:
            self._final[tenant] = self.model.settle_reward(self._tenant(tenant))
        final = self._final[tenant]
        return final, self._told[tenant] + final

    def book(self, mechanism: Mechanism = DEFAULT_MECHANISM, asked: Iterable[str] | None = None,
             *, trading: bool = True) -> RoundBook[Act]:  # fmt: skip
        """A book for the open decision round: the tenants asked are the decision point's (or
        `asked`, for a caller whose every agent acts each round), under `mechanism`; without
        `trading`, it refuses every offer."""
        if asked is None:
            asked = self.batch.reasons if self.batch is not None else ()
        return RoundBook(self.round + 1, self.now_s, self.tenants, asked, pools=self._pools,
                         mechanism=mechanism, trading=trading, order=self._tenants)  # fmt: skip

    def commit(
        self,
        book: RoundBook[Act],
        defaults: Mapping[str, TenantPolicy[Obs, Act]] | None = None,
        *,
        announce_defaults: bool = True,
    ) -> Mapping[str, TenantOutcome]:
        """Commit `book` at the current instant: for every tenant asked that took no turn, the
        decision of its policy in `defaults` first (announced, unless the policies decide
        in-process rather than stand in for an absent agent), then everything in canonical
        order, so the log is reproduced by the same book."""
        if self.model.ended:
            raise SessionEndedError(f"session {self.session!r} ended ({self.model.ended})")
        if defaults:
            for tenant in book.silent():
                policy = defaults.get(tenant)
                if policy is not None:
                    action = policy.decide(self.observe(tenant))
                    book.default(tenant, action, policy.name, announced=announce_defaults)
        inputs = book.inputs()
        now = self.env.now
        self.round += 1
        append = self.log.append
        for tenant, action in inputs.actions:
            # The action model itself is recorded; the log serialises it as JSON.
            append(records.DecisionMade("decision_made", now, tenant,
                                        book.turns[tenant].policy, action))  # fmt: skip
        for offer in inputs.offers:
            append(records.OfferMade("offer_made", now, offer.from_tenant, offer.offer_id,
                                     offer.to_tenant, offer.give, offer.take,
                                     offer.reason))  # fmt: skip
        answers = book.answers
        for offer in inputs.offers:
            said = answers.get(offer.offer_id)
            if said is not None:
                append(records.OfferAnswered("offer_answered", now, offer.to_tenant,
                                             offer.offer_id, said.accepted,
                                             said.reason))  # fmt: skip
        outcomes = self.model.commit(inputs)
        for tenant, outcome in outcomes.items():
            self._told[tenant] += outcome.reward
        append(records.RoundCommitted("round_committed", now, None, self.round,
                                      book.mechanism, book.defaulted()))  # fmt: skip
        self.model.pending.clear()
        self.batch = None
        self.log.maybe_flush()
        return outcomes

    def _tenant(self, name: str) -> int:
        index = self._tenants.get(name)
        if index is None:
            raise ActionError(f"unknown tenant {name!r}; tenants are {sorted(self._tenants)}")
        return index
