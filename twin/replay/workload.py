"""A scenario's trace workload at run time: the jobs `twin replay` would play on the scenario's
cluster, each handed to the tenant its row maps to (`TraceWorkload` says how).

`job_sources` is the sim's job source opener for scenarios with a `trace` (an entry point in
`pyproject.toml`; the sim finds it without importing this package).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from itertools import chain
from pathlib import Path

from twin.errors import ConfigError
from twin.replay.formats.flat import parse_map
from twin.replay.reader import ReadLog
from twin.replay.registry import TraceOptions
from twin.replay.run import Playable
from twin.replay.trace import Reading, Trace
from twin.replay.window import Window
from twin.schema.scenario import ClusterScenario
from twin.schema.trace_workload import TraceWorkload
from twin.sim.job_sources import trace_path
from twin.sim.jobrecord import JobRecord


def tenant_key(value: object) -> str:
    """A row's tenant value as a tenant name: lower-cased, anything but letters, digits, `_`,
    `.` and `-` made `-`, starting with a letter or digit (openb's `LS` is `ls`; an empty
    value is `x`)."""
    return re.sub(r"[^a-z0-9_.-]+", "-", str(value).lower()).lstrip("_.-")[:64].rstrip("-") or "x"


def reading(workload: TraceWorkload) -> Reading:
    """How the workload's trace is read: as `twin replay` reads it with the same options."""
    columns = parse_map(workload.columns) if workload.columns else None
    end_s = math.inf if workload.end_h is None else workload.end_h * 3600.0
    return Reading(
        workload.format,
        TraceOptions(columns=columns, include_cpu=workload.include_cpu),
        Window(workload.start_h * 3600.0, end_s, workload.max_jobs),
        workload.skip_bad,
    )


def open_trace(workload: TraceWorkload) -> Trace:
    return Trace(trace_path(workload.path), reading(workload), keep="none")


def job_sources(scenario: ClusterScenario) -> list[Iterable[JobRecord]]:
    """The job sources a scenario's model takes: its trace's jobs (none without a trace)."""
    workload = scenario.trace
    if workload is None:
        return []
    records, log = open_trace(workload).jobs()
    first = next(records, None)  # checked before the model starts: a bad rule fails at once
    if first is None:
        return [iter(())]
    if row_tenant(first, workload.tenant_by) is None:
        problem = no_such_field(Path(workload.path), workload.tenant_by, first)
        raise ConfigError(f"scenario {scenario.name!r}: trace.tenant_by: {problem}")
    return [tenant_jobs(chain([first], records), log, scenario)]


def row_tenant(rec: JobRecord, by: str) -> object | None:
    """A row's value of the tenant column `by` (`tenant`: the format's own), None if it has
    no such field."""
    return rec.tenant if by == "tenant" else rec.extras.get(by)


def no_such_field(path: Path, by: str, rec: JobRecord) -> str:
    """Why rows of `path` (one of them `rec`) cannot map to tenants by `by`."""
    kept = ", ".join(sorted(rec.extras)) or "none"
    return f"{path}: rows have no {by!r} to map tenants by; use 'tenant' or a field the " \
           f"format keeps ({kept})"  # fmt: skip


def tenant_jobs(
    records: Iterator[JobRecord], log: ReadLog, scenario: ClusterScenario
) -> Iterator[JobRecord]:
    """The jobs the scenario's cluster plays (skipped and constrained exactly as `twin replay`
    on its shared pools does), each with the tenant its row maps to."""
    workload = scenario.trace
    assert workload is not None
    shared = [p for p in scenario.pools if p.shared] or scenario.pools
    playable = Playable(shared, log)
    names = {t.name for t in scenario.tenants}
    by, other = workload.tenant_by, workload.other
    tenants: dict[object, str] = {}
    for rec in records:
        if not playable(rec):
            continue
        value = row_tenant(rec, by)
        tenant = tenants.get(value)
        if tenant is None:
            key = other if value is None else tenant_key(value)
            tenant = tenants[value] = key if key in names else other
        yield playable.constrained(rec)._replace(tenant=tenant)
