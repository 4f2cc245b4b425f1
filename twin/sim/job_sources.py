"""Where a scenario's jobs come from besides its synthetic workloads: the openers that other
packages provide, found by their entry points (group `twin.job_sources`).

A scenario that names a trace (`ClusterScenario.trace`) is opened by the replay package's
opener (`twin.replay.workload:job_sources`, declared in `pyproject.toml`); the sim knows only
this interface, so it depends on no trace reader.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path

from twin.errors import ConfigError, TraceError
from twin.schema.scenario import ClusterScenario
from twin.sim.jobrecord import JobRecord

GROUP = "twin.job_sources"
ROOT = Path(__file__).resolve().parents[2]
"""The project's root (a checkout's; an installed package's parent folder)."""
INSTALLED_TRACES = Path(__file__).resolve().parents[1] / "traces"
"""Where an installed twin keeps the traces it ships (the package `twin.traces`, built from the
project's `traces/`); a checkout has them only at its root."""
TRACES_VARIABLE = "TWIN_TRACES"


def shipped_traces() -> Path:
    """The traces the twin ships: `$TWIN_TRACES` (another copy, if set), else the installed
    package's, else the checkout's `traces/`."""
    named = os.environ.get(TRACES_VARIABLE)
    if named:
        return Path(named)
    return INSTALLED_TRACES if INSTALLED_TRACES.is_dir() else ROOT / "traces"


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


def candidates(path: str) -> list[Path]:
    """Where a scenario's trace path may be, in the order looked: as given (absolute, or from
    the current directory), from the project's root, and (a `traces/...` path) among the
    shipped traces."""
    given = Path(path)
    if given.is_absolute():
        return [given]
    found = [given, ROOT / given]
    if given.parts and given.parts[0] == "traces":
        found.append(shipped_traces().joinpath(*given.parts[1:]))
    return found


def trace_path(path: str) -> Path:
    """The first of `candidates(path)` that exists."""
    for candidate in candidates(path):
        if candidate.exists():
            return candidate
    hint = "" if Path(path).parts[:1] == ("traces",) else "; a shipped trace is named traces/..."
    raise TraceError(
        f"trace file {path!r} not found (looked from the current directory, {ROOT} and among "
        f"the shipped traces, {shipped_traces()}{hint}; ${TRACES_VARIABLE} names another folder "
        "of traces)"
    )


def portable(path: str) -> str:
    """A trace path as a scenario should carry it: `traces/...` for a trace the twin ships,
    otherwise relative to the project's root when inside it, otherwise as given."""
    resolved = trace_path(path).resolve()
    shipped = shipped_traces().resolve()
    if resolved.is_relative_to(shipped):
        return str(Path("traces") / resolved.relative_to(shipped))
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else path


NAME_MAX_BYTES = 255  # the longest file name a common file system takes


def lexically_inside(path: Path, roots: Iterable[Path]) -> bool:
    """Whether `path`, its `..` folded away as text, lies under one of `roots` (absolute), and
    every component of it is a name a file system takes: decided without a system call."""
    folded = os.path.normpath(path)
    if not os.path.isabs(folded) or "\0" in folded:
        return False
    if any(len(part.encode("utf-8", "surrogatepass")) > NAME_MAX_BYTES
           for part in Path(folded).parts):  # fmt: skip
        return False
    return any(Path(folded).is_relative_to(root) for root in roots)


def inside(path: str, roots: Iterable[Path]) -> Path | None:
    """The trace file `path` names under one of `roots` (the first of its candidates that is),
    resolved; None if there is none. A candidate is first checked as text against the roots,
    so nothing outside them is looked at (not even stat'ed), and a name no file system takes
    is simply not found."""
    resolved_roots = [root.resolve() for root in roots]
    for candidate in candidates(path):
        if not lexically_inside(candidate.absolute(), resolved_roots):
            continue
        try:
            resolved = candidate.resolve()
            found = any(resolved.is_relative_to(r) for r in resolved_roots) and resolved.is_file()
        except OSError:  # a loop of links, say: not a trace
            continue
        if found:
            return resolved
    return None
