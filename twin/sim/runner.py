"""Run one episode to its end with in-process policies, streaming its event log."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import ExitStack
from pathlib import Path

from twin.eventlog.log import EventLog, JsonlWriter
from twin.eventlog.metrics import Metrics
from twin.schema.base import Frozen
from twin.schema.scenario import Scenario
from twin.schema.summary import Summary
from twin.schema.vocabulary import EVENTS_FILE, SUMMARY_FILE
from twin.sim.collector import collecting_rarely
from twin.sim.driver import PAUSED, Driver
from twin.sim.jobrecord import JobRecord
from twin.sim.kinds import kind_of

PROGRESS_EVERY = 50_000  # SimPy events between progress reports


def run_episode(
    scenario: Scenario,
    *,
    seed: int = 0,
    policy: str | None = None,
    out_dir: Path | None = None,
    sources: Iterable[Iterable[JobRecord]] = (),
    keep_log: bool = False,
    metrics: Metrics | None = None,
    progress: Callable[[float], None] | None = None,
) -> tuple[Summary, Driver[Frozen, Frozen]]:
    """Play `scenario` to its end, every tenant by its policy (`policy` for all, if given);
    write the event log and the summary under `out_dir`; `progress(t_s)` hears the virtual
    time every few thousand events."""
    kind = kind_of(scenario)
    if policy is not None and kind.with_policy is not None:
        scenario = kind.with_policy(scenario, policy)
    policies = kind.default_policies(scenario, seed, policy)
    with ExitStack() as stack:
        stack.enter_context(collecting_rarely())
        session = f"{scenario.name}-s{seed}"
        log = EventLog(session, keep=keep_log)
        metrics = metrics or Metrics()
        metrics.session = session
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            stream = stack.enter_context((out_dir / EVENTS_FILE).open("wb"))
            log.subscribe(JsonlWriter(stream, session))
        log.subscribe(metrics.consume)
        driver: Driver[Frozen, Frozen] = Driver(
            scenario, seed=seed, session=session, log=log, sources=sources
        )
        limit = None if progress is None else PROGRESS_EVERY
        while (batch := driver.advance(limit)) is not None:
            if progress is not None:
                progress(driver.now_s)
            if batch is not PAUSED:
                driver.commit(driver.book(), policies, announce_defaults=False)
        log.flush()
    summary = metrics.summary()
    if out_dir is not None:
        (out_dir / SUMMARY_FILE).write_text(summary.model_dump_json(indent=2) + "\n")
    return summary, driver
