"""Job arrivals: synthetic workloads and job-record sources, as SimPy processes.

Each arrival process (Poisson, on/off, MMPP, diurnal) is an endless generator of gaps in seconds.
A gap draws at most `DRAWS_PER_GAP` values: where no arrival came within them (an "on" state
that almost never holds one, a thinning that rejects almost every candidate), the time drawn so
far comes out as a `Silent` gap, which the workload waits out without a job, so every step of
a simulation ends however the process is shaped; the arrival times are the same either way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from typing import Any, Protocol

import numpy as np
import simpy

from twin.schema.scenario import (
    ArrivalProcess,
    DiurnalArrivals,
    MmppArrivals,
    OnOffArrivals,
    PoissonArrivals,
    WorkloadConfig,
)
from twin.sim.encode import Key, PlanOption
from twin.sim.jobrecord import JobRecord
from twin.sim.jobs import Job
from twin.sim.sampling import Sampler, sampler
from twin.sim.state import ClusterState

Options = Mapping[Key, PlanOption]  # (tenant, workload, GPUs) -> the plan's rates
DRAWS_PER_GAP = 1_000


class Silent(float):
    """A gap with no arrival at its end: the process drew `DRAWS_PER_GAP` values and none."""


class Admits(Protocol):
    """The scheduler, as arrivals use it."""

    @property
    def efficiency(self) -> Callable[[float], float]: ...

    def admit(
        self,
        tenant: int,
        job_id: str | None,
        *,
        gpus: float,
        work: float,
        priority: float,
        gpu_type: str | None,
        option: PlanOption | None = None,
        workload: int = -1,
        fails: str | None = None,
        censored: bool = False,
        cpu_milli: int = 0,
        group: str = "",
        present: bool = False,
        bound: bool = False,
        time_limit_s: float | None = None,
    ) -> Job: ...


def _exp(rng: np.random.Generator) -> Sampler:
    """Standard exponential draws (mean 1); scale by the mean you need."""
    return Sampler(rng, lambda g, n: g.standard_exponential(n))


def _modulated(rates_per_s: list[float], dwell_s: list[float], e: Sampler) -> Iterator[float]:
    """Poisson with a rate that cycles through states of exponential length (memoryless)."""
    carried_s, draws = 0.0, 0
    while True:
        for rate, mean_dwell in zip(rates_per_s, dwell_s, strict=True):
            left_s = e() * mean_dwell
            draws += 1
            while rate > 0:
                gap = e() / rate
                draws += 1
                if gap > left_s:
                    break
                left_s -= gap
                yield carried_s + gap
                carried_s, draws = 0.0, 0
            carried_s += left_s
            if draws >= DRAWS_PER_GAP:
                yield Silent(carried_s)
                carried_s, draws = 0.0, 0


def _diurnal(cfg: DiurnalArrivals, e: Sampler, u: Sampler) -> Iterator[float]:
    """Thinning of a Poisson process at the peak rate."""
    mean_per_s = cfg.mean_rate_per_h / 3600.0
    peak_per_s = mean_per_s * (1.0 + cfg.amplitude)
    omega = 2.0 * math.pi / cfg.period_s  # the schema holds the period to a second or more
    t_s = last_s = 0.0
    draws = 0
    while True:
        t_s += e() / peak_per_s
        if not math.isfinite(t_s):  # past float's range: no arrival ever comes
            yield Silent(math.inf)
            continue
        rate = mean_per_s * (1.0 + cfg.amplitude * math.cos(omega * (t_s - cfg.peak_s)))
        draws += 1
        if u() * peak_per_s <= rate:
            yield t_s - last_s
            last_s, draws = t_s, 0
        elif draws >= DRAWS_PER_GAP:
            yield Silent(t_s - last_s)
            last_s, draws = t_s, 0


def gaps(process: ArrivalProcess, rng: np.random.Generator) -> Iterator[float]:
    """Seconds between consecutive arrivals of `process`, drawn from `rng`."""
    e = _exp(rng)
    match process:
        case PoissonArrivals(rate_per_h=r):
            mean_s = 3600.0 / r
            return (e() * mean_s for _ in iter(int, 1))
        case OnOffArrivals(on_rate_per_h=r, mean_on_s=on, mean_off_s=off):
            return _modulated([r / 3600.0, 0.0], [on, off], e)
        case MmppArrivals(rates_per_h=rs, mean_dwell_s=ds):
            return _modulated([r / 3600.0 for r in rs], ds, e)
        case DiurnalArrivals():
            return _diurnal(process, e, Sampler(rng, lambda g, n: g.random(n)))
    raise AssertionError(f"unhandled arrival process {process!r}")


def job_arrivals(
    state: ClusterState,
    scheduler: Admits,
    w: WorkloadConfig,
    *,
    tenant: int,
    index: int,
    options: Options,
    closed: Callable[[], None],
) -> Generator[simpy.Event, Any, None]:
    """SimPy process: the jobs of one synthetic workload arriving (then `closed()`)."""
    name = state.tenant_names[tenant]
    rng = state.streams.get(f"jobs/{name}/{index}")
    draw_gpus, draw_priority = sampler(w.gpus, rng), sampler(w.priority, rng)
    size = w.kernel.tokens if w.kernel is not None else w.service_s
    assert size is not None  # the schema requires one of the two
    draw_size = sampler(size, rng)
    timeout = state.env.timeout
    admit = scheduler.admit
    n = 0
    for gap_s in gaps(w.arrivals, state.streams.get(f"arrivals/{name}/{index}")):
        if (w.max_jobs is not None and n >= w.max_jobs) or math.isinf(gap_s):
            break  # enough jobs, or none will ever come
        yield timeout(gap_s)
        if state.ended:
            return
        if isinstance(gap_s, Silent):
            continue
        n += 1
        gpus = draw_gpus()
        if w.kernel is None:
            work, option = draw_size() * gpus, None
        else:
            work, option = draw_size(), options[(tenant, index, gpus)]
        admit(tenant, None, gpus=gpus, work=work, priority=draw_priority(), gpu_type=w.gpu_type,
              option=option, workload=index)  # fmt: skip
    closed()


ENDS_FAILED = ("failed", "killed")  # trace outcomes a replayed job ends with, after its run


def record_arrivals(
    state: ClusterState, scheduler: Admits, source: Iterable[JobRecord], closed: Callable[[], None]
) -> Generator[simpy.Event, Any, None]:
    """SimPy process: jobs from a job-record source (a trace) arriving at their submit times
    (then `closed()`)."""
    env = state.env
    eff = scheduler.efficiency
    admit = scheduler.admit
    tenant_index = state.tenant_index
    for rec in source:
        delay_s = rec.submit_s - env.now
        if delay_s > 0:
            yield env.timeout(delay_s)
        if state.ended:
            return
        tenant = tenant_index.get(rec.tenant, 0)
        work = rec.service_s * rec.gpus * eff(rec.gpus) if rec.gpus > 0 else rec.service_s
        fails = rec.status if rec.status in ENDS_FAILED else None
        admit(tenant, rec.job_id, gpus=rec.gpus, work=work, priority=rec.priority,
              gpu_type=rec.gpu_type, fails=fails, censored=rec.censored and fails is None,
              cpu_milli=rec.cpu_milli, group=rec.tenant,
              present=rec.present_at_start, bound=rec.bound,
              time_limit_s=rec.time_limit_s)  # fmt: skip
    closed()
