"""A scenario a client asks for is sized before it is admitted: the jobs its episode is
expected to bring (its arrival rates over its horizon, after the client's overrides) against the
operator's per-episode limit (`twin serve --max-episode-jobs`) and, for an environment, what the
client's other environments leave of its budget (`--max-client-jobs`); and the nodes it would
build (a node cluster's groups, an agentic scenario's GPU nodes) against `--max-episode-nodes`,
since nodes are built, and some passes walk them all, before any limit that meters a running
episode can look."""

from __future__ import annotations

from twin.errors import WorkLimitError
from twin.schema.scenario import Scenario
from twin.sim.kinds import kind_of


def admit_nodes(scenario: Scenario, max_nodes: int) -> None:
    """WorkLimitError (CAPACITY_REACHED) naming the limit if `scenario` builds more than
    `max_nodes` nodes."""
    nodes = kind_of(scenario).nodes(scenario)
    if nodes > max_nodes:
        raise WorkLimitError(
            f"scenario {scenario.name!r} has {nodes:,} nodes; this server builds at most "
            f"{max_nodes:,} an episode (--max-episode-nodes)"
        )


def admit_size(scenario: Scenario, max_jobs: int,
               within: tuple[str, float, int] | None = None) -> float:  # fmt: skip
    """The jobs `scenario` is expected to bring over its episode; WorkLimitError
    (CAPACITY_REACHED) naming the limit if more than `max_jobs`, or, `within` a client's
    budget (the client, what its other environments bring, the budget), if it would take the
    client past it."""
    expected = kind_of(scenario).expected_jobs(scenario)
    if expected > max_jobs:
        said = (
            "without end (no horizon, no max_jobs)"
            if expected == float("inf")
            else (f"about {expected:,.0f}" if expected < 1e15 else f"about {expected:.1e}")
        )
        raise WorkLimitError(
            f"scenario {scenario.name!r} is expected to bring {said} jobs over its episode; "
            f"this server admits at most {max_jobs:,} an episode (--max-episode-jobs): lower "
            "its arrival rates, set max_jobs, or shorten its horizon"
        )
    if within is not None:
        client, others, budget = within
        if others + expected > budget:
            raise WorkLimitError(
                f"{client}'s environments would together be expected to bring about "
                f"{others + expected:,.0f} jobs; a client may have at most {budget:,} in play "
                "(--max-client-jobs): reset a smaller episode, or let one of yours go"
            )
    return expected
