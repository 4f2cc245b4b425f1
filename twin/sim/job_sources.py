"""Where a scenario's jobs come from besides its synthetic workloads: the openers that other
packages provide, found by their entry points (group `twin.job_sources`).

A scenario that names a trace (`ClusterScenario.trace`) is opened by the replay package's
opener (`twin.replay.workload:job_sources`, declared in `pyproject.toml`); the sim knows only
this interface, so it depends on no trace reader.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import cache
from importlib.metadata import entry_points

from twin.errors import ConfigError
from twin.schema.scenario import ClusterScenario
from twin.sim.jobrecord import JobRecord

GROUP = "twin.job_sources"
Opener = Callable[[ClusterScenario], list[Iterable[JobRecord]]]


@cache
def openers() -> tuple[Opener, ...]:
    """Every installed opener, in name order."""
    found = sorted(entry_points(group=GROUP), key=lambda ep: ep.name)
    return tuple(ep.load() for ep in found)


def open_sources(scenario: ClusterScenario) -> list[Iterable[JobRecord]]:
    """The job sources of `scenario`'s trace (none when it names no trace)."""
    if scenario.trace is None:
        return []
    for opener in openers():
        sources = opener(scenario)
        if sources:
            return sources
    raise ConfigError(
        f"scenario {scenario.name!r} plays the jobs of {scenario.trace.path}, and no job "
        f"source opener is installed (entry point group {GROUP!r}; reinstall the twin)"
    )
