"""Mechanisms: how a round shares a pool whose free GPUs cannot serve every request.

Each takes the requests (tenant -> GPUs, in tenant order), the sealed bids, the tenants'
priorities and the free GPUs; it returns the grants and, for an auction, the uniform price.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from twin.schema.vocabulary import MECHANISM_TRAITS, Mechanism, MechanismTraits


@dataclass(frozen=True, slots=True)
class Requests:
    """One pool's requests in a round, keyed by tenant name, in tenant order."""

    wants: dict[str, int]
    bids: dict[str, float]
    priority: dict[str, float]
    order: dict[str, int]  # tenant -> scenario index, the tie-breaker


Share = tuple[dict[str, int], float | None]


def proportional(r: Requests, free: int) -> Share:
    """Grants in proportion to requests; leftover GPUs to the largest remainders."""
    total = sum(r.wants.values())
    exact = {t: n * free / total for t, n in r.wants.items()}
    grants = {t: math.floor(exact[t]) for t in r.wants}
    left = free - sum(grants.values())
    for t in sorted(r.wants, key=lambda t: (-(exact[t] - grants[t]), r.order[t]))[:left]:
        grants[t] += 1
    return grants, None


def priority(r: Requests, free: int) -> Share:
    """Strict priority: higher-priority tenants are served in full first."""
    return _in_order(r, free, sorted(r.wants, key=lambda t: (-r.priority[t], r.order[t]))), None


def auction(r: Requests, free: int) -> Share:
    """Sealed bids, highest first; everyone pays the highest bid left (partly) unserved."""
    order = sorted(r.wants, key=lambda t: (-r.bids[t], r.order[t]))
    grants = _in_order(r, free, order)
    losing = [r.bids[t] for t in order if grants[t] < r.wants[t]]
    return grants, max(losing, default=0.0)


def _in_order(r: Requests, free: int, order: list[str]) -> dict[str, int]:
    grants = dict.fromkeys(r.wants, 0)
    left = free
    for t in order:
        grants[t] = min(r.wants[t], left)
        left -= grants[t]
    return grants


@dataclass(frozen=True, slots=True)
class Rule:
    """A mechanism: how it shares a scarce pool, and its traits (whether winners pay a price,
    whether bids count), which agents are told."""

    scarce: Callable[[Requests, int], Share]
    traits: MechanismTraits


MECHANISM: dict[Mechanism, Rule] = {
    "proportional": Rule(proportional, MECHANISM_TRAITS["proportional"]),
    "priority": Rule(priority, MECHANISM_TRAITS["priority"]),
    "auction": Rule(auction, MECHANISM_TRAITS["auction"]),
    # Held GPUs change hands in its double auction (call_market.py); new ones are shared as
    # proportional shares them.
    "call_market": Rule(proportional, MECHANISM_TRAITS["call_market"]),
}


def register(name: Mechanism, rule: Rule) -> None:
    """Add a mechanism: sessions, envs and the arena may name it, and agents are told its
    traits."""
    MECHANISM[name] = rule
    MECHANISM_TRAITS[name] = rule.traits


def share(mechanism: Mechanism, r: Requests, free: int) -> Share:
    """How many of `free` GPUs each tenant gets, and the price per GPU (None if unpriced)."""
    rule = MECHANISM[mechanism]
    if sum(r.wants.values()) <= free:
        return dict(r.wants), (0.0 if rule.traits.priced else None)
    return rule.scarce(r, free)
