"""The twin as a library: load a scenario and override its fields, run it, replay a trace, play
agents over the gateway, sweep; results as typed objects, their tables as pandas DataFrames.

    from twin import api

    market = api.scenario("market", {"horizon_s": 7200, "tenants.0.budget_usd": 500})
    run = api.run(market, seed=3)
    run.summary.tenants[0].reward_usd      # the typed summary (twin.schema.summary.Summary)
    run.tenants()                          # one row per tenant
    run.jobs()                             # one row per job: waits, runs, outcome, cost
    run.events("round_committed")          # the event log's rows of one kind

    played = api.play("market", {"research": "negotiator", "inference": "negotiator"}, seed=3)
    replayed = api.replay("traces/alibaba-gpu-v2023-openb/openb_pod_list_default.csv",
                          cluster="traces/alibaba-gpu-v2023-openb/openb_node_list_gpu_node.csv")
    swept = api.sweep("default", seeds=4, policies=["autoscale", "static"], out="runs/sweep")
    swept.frame()                          # one row per run

Every call is the command's own code path (`twin run`, `twin replay`, `twin play`, `twin
sweep`): the same seed gives the same event log, byte for byte. Errors are the twin's own
(`twin.errors.TwinError` and its kinds), with the messages the commands print.
"""

from __future__ import annotations

import asyncio
import math
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import structlog
import yaml

from twin.errors import ConfigError
from twin.logs import configure_logging
from twin.schema.base import Frozen
from twin.schema.scenario import Scenario
from twin.schema.summary import ReplayReport, Summary
from twin.schema.vocabulary import (
    DEFAULT_MECHANISM,
    EVENTS_FILE,
    Mechanism,
)

if TYPE_CHECKING:
    import pandas as pd

    from twin_agents.client import AgentStats

__all__ = ["Played", "Replayed", "Result", "Swept", "play", "replay", "run", "scenario", "sweep"]

ScenarioLike = str | Path | Scenario
"""A built-in scenario's name, a scenario file, or a scenario already loaded."""


def scenario(name_or_path: str | Path, overrides: Mapping[str, Any] | Sequence[str] = ()
             ) -> Scenario:  # fmt: skip
    """A validated scenario by built-in name or file, with overrides: `{"path.to.field": value}`
    (any JSON value) or `["path.to.field=value", ...]` as `--set` takes them."""
    from twin.sim import scenarios

    return scenarios.load(str(name_or_path), _assignments(overrides))


def _assignments(overrides: Mapping[str, Any] | Sequence[str]) -> list[str]:
    if isinstance(overrides, Mapping):
        return [f"{path}={orjson.dumps(value).decode()}" for path, value in overrides.items()]
    return list(overrides)


def _loaded(spec: ScenarioLike) -> Scenario:
    return spec if isinstance(spec, Frozen) else scenario(spec)


@dataclass(frozen=True)
class Result:
    """A finished run: its summary, computed from its event log alone, and the log itself."""

    summary: Summary
    event_log: bytes = field(repr=False)  # the JSONL log as written, one event per line
    out: Path | None = None  # where its files were written, if anywhere

    @cached_property
    def _events(self) -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in self.event_log.splitlines()]

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The log's events in order (of one kind, if given), as JSON objects."""
        return [e for e in self._events if kind is None or e["kind"] == kind]

    def tenants(self) -> pd.DataFrame:
        """One row per tenant of the summary (`name` first)."""
        return _frame([t.model_dump(mode="json") for t in self.summary.tenants])

    def jobs(self) -> pd.DataFrame:
        """One row per job: tenant, GPUs, arrival, waits, runs, outcome and cost (the `jobs`
        table of `twin export`)."""
        from twin.eventlog.jobs import JobTable

        rows: list[dict[str, Any]] = []
        table = JobTable(rows.append)
        for event in self._events:
            table.take(event)
        table.close()
        return _frame(rows)

    def table(self, kind: str) -> pd.DataFrame:
        """The events of one kind as a table (the per-kind table of `twin export`)."""
        return _frame([{k: v for k, v in e.items() if k != "kind"} for e in self.events(kind)])


@dataclass(frozen=True)
class Replayed(Result):
    """A replayed trace: the summary and log, and what the replay read (`ReplayReport`)."""

    report: ReplayReport | None = None


@dataclass(frozen=True)
class Played(Result):
    """A session played by agents: the summary and log, and each agent's counts by tenant
    (offers made and taken, trades, rounds, the return it was told)."""

    agents: dict[str, AgentStats] = field(default_factory=dict)
    wall_s: float = 0.0


@dataclass(frozen=True)
class Swept:
    """A sweep's results: one row per run in `path` (`results.parquet`)."""

    path: Path
    runs: int

    def frame(self) -> pd.DataFrame:
        import pyarrow.parquet as pq

        return pq.read_table(self.path).to_pandas()


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is a dependency
        raise ConfigError("tables as DataFrames need pandas: pip install pandas") from None
    return pd.DataFrame(rows)


def _written(out: str | Path | None) -> tuple[Path, tempfile.TemporaryDirectory[str] | None]:
    """Where a call writes its files: `out`, or a temporary folder removed after reading."""
    if out is not None:
        return Path(out), None
    scratch = tempfile.TemporaryDirectory(prefix="twin-api-")
    return Path(scratch.name), scratch


def run(spec: ScenarioLike, *, seed: int = 0, policy: str | None = None,
        out: str | Path | None = None) -> Result:  # fmt: skip
    """Play a scenario to its end, every tenant by its own policy (or `policy` for all), as
    `twin run` does; `out` gets `events.jsonl` and `summary.json`."""
    from twin.sim.runner import run_episode

    directory, scratch = _written(out)
    try:
        summary, _ = run_episode(_loaded(spec), seed=seed, policy=policy, out_dir=directory)
        log = (directory / EVENTS_FILE).read_bytes()
    finally:
        if scratch is not None:
            scratch.cleanup()
    return Result(summary, log, None if scratch else directory)


def replay(trace: str | Path, *, cluster: str | Path | None = None, gpus: int | None = None,
           params: str | Path | None = None, fmt: str | None = None, seed: int = 0,
           max_jobs: int | None = None, start_h: float = 0.0, end_h: float | None = None,
           out: str | Path | None = None) -> Replayed:  # fmt: skip
    """Replay a trace's jobs on a fixed cluster (a node inventory, or `gpus` in one pool), as
    `twin replay` does; paths may name the shipped traces (`traces/...`) from any directory."""
    from twin.replay.params import read_params
    from twin.replay.run import ReplayOptions
    from twin.replay.run import replay as replay_trace
    from twin.replay.window import Window
    from twin.sim.job_sources import trace_path

    window = Window(start_h * 3600, math.inf if end_h is None else end_h * 3600, max_jobs)
    nodes = None if cluster is None else trace_path(str(cluster))
    options = ReplayOptions(fmt=fmt, gpus=gpus, seed=seed, window=window, cluster=nodes)
    if params is not None:
        options = replace(options, params=read_params(trace_path(str(params))))
    directory, scratch = _written(out)
    try:
        summary, report = replay_trace(trace_path(str(trace)), options, out_dir=directory)
        log = (directory / EVENTS_FILE).read_bytes()
    finally:
        if scratch is not None:
            scratch.cleanup()
    return Replayed(summary, log, None if scratch else directory, report=report)


def play(spec: ScenarioLike, agents: Mapping[str, str], *, seed: int = 0,
         mechanism: Mechanism = DEFAULT_MECHANISM, round_timeout_ms: int = 30_000,
         out: str | Path | None = None) -> Played:  # fmt: skip
    """Play a negotiation session over a real gateway on loopback, as `twin play` does: one
    built-in agent per tenant named in `agents` (`{"research": "negotiator", ...}`), the other
    tenants by their own policies. From inside a running event loop, await `play_async`."""
    return asyncio.run(play_async(spec, agents, seed=seed, mechanism=mechanism,
                                  round_timeout_ms=round_timeout_ms, out=out))  # fmt: skip


async def play_async(spec: ScenarioLike, agents: Mapping[str, str], *, seed: int = 0,
                     mechanism: Mechanism = DEFAULT_MECHANISM, round_timeout_ms: int = 30_000,
                     out: str | Path | None = None) -> Played:  # fmt: skip
    """`play`, for callers that already run an event loop (a notebook, an async service)."""
    from twin.arena.session import play_session
    from twin.sim.scenarios import as_cluster
    from twin_agents.factory import make_policy
    from twin_agents.registry import builtin_names

    cluster = as_cluster(_loaded(spec))
    tenants = [t.name for t in cluster.tenants]
    for tenant, name in agents.items():
        if tenant not in tenants:
            raise ConfigError(f"agents: no tenant {tenant!r}; tenants: {tenants}")
        if name not in builtin_names():
            raise ConfigError(f"agents: unknown policy {name!r}; built in: {builtin_names()}")
    if not agents:
        raise ConfigError("agents: name at least one tenant's agent")
    policies = {t: make_policy(p, tenants, t, seed=seed) for t, p in agents.items()}
    if not structlog.is_configured():  # the gateway's lines per round: not a library's to print
        configure_logging("warning")
    with tempfile.TemporaryDirectory(prefix="twin-api-") as scratch:
        named = str(spec)  # the gateway takes a scenario by name or file: a loaded one is written
        if isinstance(spec, Frozen):
            named = str(Path(scratch) / "scenario.yaml")
            Path(named).write_text(yaml.safe_dump(cluster.model_dump(mode="json")))
        played = await play_session(named, policies, seed=seed, mechanism=mechanism,
                                    round_timeout_ms=round_timeout_ms,
                                    max_round_timeout_ms=round_timeout_ms)  # fmt: skip
    summary = played.summary()
    directory = Path(out) if out is not None else None
    if directory is not None:
        played.save(directory, summary, played.agents_report(agents, summary))
    by_tenant = dict(zip(agents, played.stats, strict=True))
    return Played(summary, played.events, directory, agents=by_tenant, wall_s=played.wall_s)


def sweep(scenarios: str | Iterable[str], *, seeds: int | Sequence[int] = 1,
          policies: Sequence[str | None] = (None,),
          grid: Mapping[str, Sequence[Any]] | None = None, out: str | Path,
          workers: int = 1) -> Swept:  # fmt: skip
    """Many runs, as `twin sweep` does: every scenario (name or file) by seed by policy (None:
    each tenant's own) by every combination of `grid` (`{"path.to.field": [v1, v2]}`), on
    `workers` local processes, into `out/results.parquet`; a sweep already there resumes."""
    from twin.sweep.execute import assemble, execute
    from twin.sweep.spec import check_points, runs, validated

    names = [scenarios] if isinstance(scenarios, str) else list(scenarios)
    fields = {
        "scenarios": names,
        "seeds": seeds if isinstance(seeds, int) else list(seeds),
        "policies": list(policies),
        "set": {path: list(values) for path, values in (grid or {}).items()},
    }
    spec = validated(fields, "api.sweep")
    planned = runs(spec)
    check_points(planned)
    if workers < 1:
        raise ConfigError(f"workers must be at least 1, got {workers}")
    directory = Path(out)
    execute(planned, directory, engine="local", workers=workers)
    return Swept(assemble(directory, [r.key for r in planned]), len(planned))
