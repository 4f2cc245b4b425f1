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
from pathlib import Path

from twin.errors import ConfigError, TraceError
from twin.schema.scenario import ClusterScenario
from twin.sim.jobrecord import JobRecord

GROUP = "twin.job_sources"
ROOT = Path(__file__).resolve().parents[2]
"""The project's root: a relative trace path not found from the current directory is found
from here (where `traces/` ships)."""
SHIPPED_TRACES = ROOT / "traces"
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


def trace_path(path: str) -> Path:
    """Where a scenario's trace file is: as given (absolute, or from the current directory),
    else from the project's root."""
    given = Path(path)
    if given.is_absolute() or given.exists():
        return given
    shipped = ROOT / given
    if shipped.exists():
        return shipped
    raise TraceError(f"trace file {path!r} not found (from the current directory or {ROOT})")


def within(path: str, roots: Iterable[Path]) -> bool:
    """Whether the trace at `path` (found as `trace_path` finds it) lies under one of `roots`,
    decided from the path alone (nothing outside them is opened)."""
    given = Path(path)
    candidates = [given] if given.is_absolute() else [Path.cwd() / given, ROOT / given]
    for candidate in candidates:
        resolved = candidate.resolve()
        if any(resolved.is_relative_to(root.resolve()) for root in roots):
            return True
    return False
