"""The other tenants of an RL environment, played in process: the scenario's own policies (which
never trade) or the project's built-in agents (which make and answer offers as they do over the
gateway, `negotiator` among them).

An opponent decides from its view, may make offers, answers offers made to it and hears how each
round went, all synchronously: a built-in agent's coroutines finish without waiting on anything,
so they run to completion at once (an agent that waits on I/O, such as an LLM's, is refused).
"""

from __future__ import annotations

from collections.abc import Coroutine, Sequence
from typing import Any, Protocol, TypeVar

from twin.errors import ConfigError
from twin.schema.actions import REASON_CHARS, Offer, ProvisionAction, TenantObservation
from twin.schema.vocabulary import MECHANISM_TRAITS, Mechanism
from twin.schema.wire import DecisionRequested, OfferView
from twin.sim.model import TenantOutcome
from twin.sim.tenant_policies import ClusterPolicy
from twin.sim.told import round_committed
from twin_agents.policy import Policy
from twin_agents.registry import builtin, builtin_names

T = TypeVar("T")
NOT_TRADING = "this policy does not trade"


class Opponent(Protocol):
    """One tenant that is not the learner's, deciding in process."""

    name: str

    def decide(self, view: TenantObservation, round_number: int,
               mechanism: Mechanism) -> tuple[ProvisionAction, list[Offer]]:  # fmt: skip
        """Its action for the round, and the offers it makes in it."""
        ...

    def answer(self, offer: OfferView, round_number: int) -> tuple[bool, str]:
        """Accept or reject an offer made to it in round `round_number`, and why."""
        ...

    def learn(self, round_number: int, t_s: float, outcome: TenantOutcome) -> None:
        """Hear how a committed round went for it."""
        ...


class ScenarioPolicy:
    """A tenant by its scenario's policy (`autoscale`, `static`): no offers, rejects every one."""

    def __init__(self, policy: ClusterPolicy) -> None:
        self.policy = policy
        self.name = policy.name

    def decide(self, view: TenantObservation, round_number: int,
               mechanism: Mechanism) -> tuple[ProvisionAction, list[Offer]]:  # fmt: skip
        return self.policy.decide(view), []

    def answer(self, offer: OfferView, round_number: int) -> tuple[bool, str]:
        return False, NOT_TRADING

    def learn(self, round_number: int, t_s: float, outcome: TenantOutcome) -> None:
        return None


class BuiltInAgent:
    """A tenant played by one of the project's built-in agents, exactly as over the gateway: the
    same decision request, its offers under the client's ids, its answers with their reasons."""

    def __init__(self, policy: Policy, tenant: str) -> None:
        self.policy, self.tenant = policy, tenant
        self.name = policy.name
        self._request: DecisionRequested | None = None

    def decide(self, view: TenantObservation, round_number: int,
               mechanism: Mechanism) -> tuple[ProvisionAction, list[Offer]]:  # fmt: skip
        request = DecisionRequested(round=round_number, t_s=view.t_s, deadline_ms=0,
                                    traits=MECHANISM_TRAITS[mechanism],
                                    mechanism=mechanism, view=view, offers=[])  # fmt: skip
        self._request = request
        turn = at_once(self.policy.decide(request), self.name)
        action = ProvisionAction(provision=turn.provision, bids_usd_per_gpu=turn.bids_usd_per_gpu,
                                 asks=turn.asks, buys=turn.buys, placements=turn.placements,
                                 reason=turn.reason[:REASON_CHARS])  # fmt: skip
        offers = [
            Offer(offer_id=f"{self.tenant}-{round_number}-{i}", from_tenant=self.tenant,
                  to_tenant=o.to_tenant, give=o.give, take=o.take,
                  reason=o.reason[:REASON_CHARS])
            for i, o in enumerate(turn.offers)
        ]  # fmt: skip
        return action, offers

    def answer(self, offer: OfferView, round_number: int) -> tuple[bool, str]:
        request = self._request if self._request and self._request.round == round_number else None
        said = at_once(self.policy.answer(offer, request), self.name)
        return said.accept, said.reason[:REASON_CHARS]

    def learn(self, round_number: int, t_s: float, outcome: TenantOutcome) -> None:
        self.policy.learn(round_committed(round_number, t_s, False, outcome))


def at_once(step: Coroutine[Any, Any, T], who: str) -> T:
    """The result of a coroutine that finishes without waiting; ConfigError if it waits."""
    try:
        step.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    step.close()
    raise ConfigError(
        f"opponent policy {who!r} waits on I/O; in-process opponents must answer at once "
        f"(the built-in ones do: {', '.join(builtin_names())})"
    )


SCENARIO = "scenario"


def opponent_kinds() -> tuple[str, ...]:
    """What can play the other tenants: `scenario` (each its scenario policy) or a built-in
    agent (any registered now)."""
    return (SCENARIO, *builtin_names())


def opponents(kind: str, tenants: Sequence[str], ego: str,
              policies: dict[str, ClusterPolicy], seed: int) -> dict[str, Opponent]:  # fmt: skip
    """Every tenant but `ego`, played by `kind` (one of `opponent_kinds()`); ConfigError if
    unknown."""
    if kind not in opponent_kinds():
        raise ConfigError(f"unknown opponents {kind!r}; allowed: {', '.join(opponent_kinds())}")
    names = list(tenants)
    out: dict[str, Opponent] = {}
    for i, tenant in enumerate(t for t in names if t != ego):
        if kind == SCENARIO:
            out[tenant] = ScenarioPolicy(policies[tenant])
        else:
            out[tenant] = BuiltInAgent(builtin(kind, names, tenant, seed + i), tenant)
    return out
