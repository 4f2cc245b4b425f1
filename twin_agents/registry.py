"""The built-in agents by name: the one list the CLI (`twin play`, `twin arena`, `python -m
agents`), the RL opponents and the policy factory read. A new built-in agent is one entry here.

Light to import (the policies themselves load when an agent is made), so a command line can
offer the names as choices without paying for them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from twin_agents.policy import Policy

LLM = "llm"
"""The name of an agent played by a language model (with a built-in agent to fall back on)."""


@dataclass(frozen=True, slots=True)
class Seat:
    """Where an agent sits: the session's tenants, the one it acts for, and its seed."""

    tenants: tuple[str, ...]
    tenant: str
    seed: int = 0


Maker = Callable[[Seat], "Policy"]


@dataclass(frozen=True, slots=True)
class BuiltIn:
    """A built-in agent: how it is made, and whether it trades (makes and answers offers; one
    that does not refuses every offer made to it)."""

    make: Maker
    trades: bool = False


def _stepper(seat: Seat) -> Policy:
    from twin_agents.policies import Stepper

    return Stepper()


def _greedy(seat: Seat) -> Policy:
    from twin_agents.policies import Greedy

    return Greedy()


def _fair_share(seat: Seat) -> Policy:
    from twin_agents.policies import FairShare

    return FairShare(len(seat.tenants))


def _random(seat: Seat) -> Policy:
    from twin_agents.policies import RandomPolicy

    return RandomPolicy(seat.seed)


def _negotiator(seat: Seat) -> Policy:
    from twin_agents.policies import Negotiator

    return Negotiator(list(seat.tenants), seat.tenant)


BUILT_IN: dict[str, BuiltIn] = {
    "stepper": BuiltIn(_stepper),
    "greedy": BuiltIn(_greedy),
    "fair_share": BuiltIn(_fair_share),
    "random": BuiltIn(_random),
    "negotiator": BuiltIn(_negotiator, trades=True),
}
"""Every built-in agent, by name, in the order listings show them."""


def builtin_names() -> tuple[str, ...]:
    """The built-in agents' names (those registered now)."""
    return tuple(BUILT_IN)


def agent_names() -> tuple[str, ...]:
    """Every agent a tenant can be played by: the built-in ones and `llm`."""
    return (*BUILT_IN, LLM)


def trades(name: str) -> bool:
    """Whether the agent called `name` trades: an LLM agent does (it may make and answer
    offers), a built-in one where its entry says so."""
    entry = BUILT_IN.get(name)
    return entry.trades if entry is not None else name == LLM


def builtin(name: str, tenants: list[str] | tuple[str, ...], me: str, seed: int = 0) -> Policy:
    """The built-in agent called `name` acting for `me` among `tenants`; ValueError names the
    built-in ones if there is none of that name."""
    entry = BUILT_IN.get(name)
    if entry is None:
        raise ValueError(f"unknown policy {name!r}; built-in policies: {', '.join(BUILT_IN)}")
    return entry.make(Seat(tuple(tenants), me, seed))
