"""Forecasts a session's agents ask for (`ask_forecast` on the channel, the `forecast` MCP
tool): when the tenant's waiting jobs start, as things are and with GPUs added.

The tenant's snapshot is taken on the event loop, between the session's steps; the forecast
plays it on a worker thread, `SAMPLES` times as things are and the same samples with the GPUs
added (common random numbers: the difference is the GPUs', not the draws'). One forecast at a
time per session, and at most `max_forecasts` at once on the whole server (shared `Slots`):
another asked meanwhile is refused as RATE_LIMITED, so what clients can claim is a bounded
share of the server's threads whatever the number of sessions. A pool's name is any valid
name (dots included); an ask the snapshot cannot take is refused with a code; a session closed
while its forecast ran is told so, not answered. Seeded by the session's seed and the instant:
asked again at the same instant, the same answer.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

from twin.errors import ConfigError, FrameError
from twin.forecast.forecast import Forecast, JobForecast, forecast
from twin.forecast.snapshot import what_if
from twin.schema.codes import ErrorCode
from twin.schema.scenario import ClusterScenario
from twin.schema.snapshot import Snapshot
from twin.schema.wire import AskForecast, ForecastReady, JobWait
from twin.sim.driver import Driver

SAMPLES = 20
STEP_S = 600.0


class Slots:
    """Forecasts under way on the whole server, at most `capacity`."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.taken = capacity, 0


class ForecastDesk:
    """A session's forecasts: one under way at a time, within the server's `slots`."""

    def __init__(self, driver: Driver[Any, Any], scenario: ClusterScenario, seed: int,
                 ended: Callable[[], str | None], slots: Slots | None = None) -> None:  # fmt: skip
        self.driver, self.scenario, self.seed, self.ended = driver, scenario, seed, ended
        self.slots = slots if slots is not None else Slots(1)
        self.busy = False

    async def answer(self, tenant: str, ask: AskForecast) -> ForecastReady:
        """The forecast for `tenant`, or a FrameError saying why not."""
        ended = self.ended()
        if ended is not None:
            raise FrameError(ErrorCode.SESSION_ENDED, f"the session ended ({ended})")
        if self.busy:
            raise FrameError(
                ErrorCode.RATE_LIMITED,
                "a forecast is under way in this session; ask when it is answered",
            )
        slots = self.slots
        if slots.taken >= slots.capacity:
            raise FrameError(
                ErrorCode.RATE_LIMITED,
                f"the server is answering {slots.taken} forecasts, its most at once; ask again "
                "in a moment",
            )
        snapshot = self.driver.snapshot(tenant)
        if snapshot is None:
            raise FrameError(ErrorCode.NOT_AVAILABLE, "this session's model has no job queue")
        shared = {p.name for p in self.scenario.pools if p.shared}
        try:
            added = _added(snapshot, ask, shared)
        except ConfigError as exc:
            raise FrameError(ErrorCode.VALIDATION_ERROR, f"ask_forecast: {exc}") from None
        seed = self.seed * 1_000_003 + int(snapshot.at_s)
        self.busy = True
        slots.taken += 1
        try:
            base, more = await asyncio.to_thread(_both, snapshot, added, ask.horizon_s, seed)
        finally:
            self.busy = False
            slots.taken -= 1
        ended = self.ended()
        if ended is not None:
            raise FrameError(ErrorCode.SESSION_ENDED,
                             f"the session ended ({ended}) while its forecast ran")  # fmt: skip
        sla_usd_per_job_h = self.driver.observe(tenant).sla_usd_per_job_h
        return _ready(snapshot, ask, base, more, sla_usd_per_job_h)


def _added(snapshot: Snapshot, ask: AskForecast, shared: set[str]) -> Snapshot | None:
    """The snapshot with the GPUs added, or None when none are (a shared pool's GPUs are
    nobody's to add)."""
    if not ask.add_gpus:
        return None
    pools = [p.name for p in snapshot.pools]
    for name in ask.add_gpus:
        if name not in pools:
            raise FrameError(ErrorCode.VALIDATION_ERROR,
                             f"ask_forecast: add_gpus: no pool {name!r} "
                             f"(pools: {', '.join(pools)})")  # fmt: skip
        if name in shared:
            raise FrameError(ErrorCode.VALIDATION_ERROR,
                             f"ask_forecast: add_gpus: pool {name!r} is shared; its GPUs are "
                             "not provisioned")  # fmt: skip
    return what_if(snapshot, [f"pools.{n}.gpus=+{g}" for n, g in ask.add_gpus.items()])


def _both(snapshot: Snapshot, added: Snapshot | None, horizon_s: float,
          seed: int) -> tuple[Forecast, Forecast]:  # fmt: skip
    base = forecast(snapshot, samples=SAMPLES, horizon_s=horizon_s, step_s=STEP_S, seed=seed)
    if added is None:
        return base, base
    return base, forecast(added, samples=SAMPLES, horizon_s=horizon_s, step_s=STEP_S, seed=seed)


def _ready(snapshot: Snapshot, ask: AskForecast, base: Forecast, more: Forecast,
           sla_usd_per_job_h: float) -> ForecastReady:  # fmt: skip
    end_s = snapshot.at_s + ask.horizon_s
    jobs = [_wait(a, b, end_s) for a, b in zip(base.jobs, more.jobs, strict=True)]
    saved_h = sum(j.saved_s for j in jobs) / 3600.0
    return ForecastReady(
        t_s=snapshot.at_s, horizon_s=ask.horizon_s, samples=base.samples,
        added_gpus=dict(ask.add_gpus), jobs=jobs, saved_job_h=saved_h,
        saved_sla_usd=saved_h * sla_usd_per_job_h, runs_fitted=base.runs_fitted,
        arrivals_per_h=base.arrivals_per_h, cpu_s=base.cpu_s + (more.cpu_s if more is not base
                                                                 else 0.0),
    )  # fmt: skip


def _wait(base: JobForecast, more: JobForecast, end_s: float) -> JobWait:
    saved = min(base.median_s, end_s) - min(more.median_s, end_s)
    return JobWait(
        job_id=base.job_id, gpus=base.gpus, started_share=base.started_share,
        start_s=None if base.start_s is None else list(base.start_s),
        with_added_start_s=None if more.start_s is None else list(more.start_s),
        saved_s=saved if math.isfinite(saved) else 0.0,
    )  # fmt: skip
