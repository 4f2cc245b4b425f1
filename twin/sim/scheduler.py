"""The scheduler: admission, queue order, fit, EASY backfill, and each run's start and end.

Jobs wait in their tenant's queue and run on GPUs their own tenant holds; where a job fits is
the placement part's answer. A run ends by finishing, diverging (an unstable plan), or being
interrupted (GPU failure, budget exhaustion), after which the job resumes from its last
checkpoint or fails for good.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

import simpy

from twin.schema import records
from twin.schema.scenario import ClusterScenario
from twin.schema.vocabulary import PLACED_ONLY
from twin.sim.backfill import backfill_behind
from twin.sim.cycles import Cycles
from twin.sim.decisions import Decisions
from twin.sim.encode import DEGENERATE, Evaluated, PlanOption
from twin.sim.jobs import Job
from twin.sim.placement import CounterPlacement, Placement
from twin.sim.pools import Holding, Pool
from twin.sim.queues import (
    ClusterQueue,
    FifoQueue,
    JobQueue,
    KeyedQueue,
    TenantLine,
    TenantQueue,
    make_queue,
)
from twin.sim.quotas import Quotas
from twin.sim.sampling import Sampler
from twin.sim.scaling import efficiency
from twin.sim.slurm_backfill import SlurmBackfill
from twin.sim.state import ClusterState

TIME_LIMIT = "time_limit"  # why a run stopped at its job's time limit failed


class Charges(Protocol):
    """Billing, as the scheduler uses it."""

    def charge_wait(self, job: Job, wait_s: float) -> None: ...

    def earn(self, tenant: int, work_gpu_s: float) -> None: ...


class Scores(Protocol):
    """The plan scorer, as the scheduler uses it."""

    def option(self, tenant: int, job: Job) -> PlanOption: ...

    def verdict(self, tenant: int, job: Job, pool: int) -> Evaluated: ...


class Scheduler:
    """Every tenant's queue and running jobs."""

    def __init__(
        self,
        state: ClusterState,
        cfg: ClusterScenario,
        placement: Placement,
        *,
        billing: Charges,
        scorer: Scores,
        decisions: Decisions,
        left: Callable[[], None],
    ) -> None:
        """`left` is told each time a job leaves the system for good."""
        self.state = state
        self.cfg = cfg
        self.env = state.env
        self._emit = state.emit
        self.placement = placement
        self.billing = billing
        self.scorer = scorer
        self.decisions = decisions
        self._left_system = left
        self.cycles = Cycles(self, cfg.scheduler) if cfg.scheduler.cycles else None
        self.quotas = Quotas(cfg.scheduler.quota_gpus) if cfg.scheduler.quota_gpus else None
        self.fit = placement.fit if self.quotas is None else self._fit_within_quota
        # Counter pools are checked when the scenario is validated; nodes and CPUs are not.
        self._check_fits = cfg.nodes is not None or self.cycles is not None

        def queue() -> FifoQueue | KeyedQueue:
            if self.cycles:
                return KeyedQueue(lambda j: -j.priority)
            return make_queue(cfg.queue.policy)

        self.shared = any(p.shared for p in cfg.pools)
        self.queues: list[TenantQueue]  # each tenant's jobs, as its policy sees them
        self.lines: list[JobQueue]  # the queue each tenant's jobs are scheduled from
        if self.shared:  # shared pools: one queue for the cluster, as a real scheduler has
            cluster = ClusterQueue(queue(), len(cfg.tenants))
            self.queues = [TenantLine(cluster, t) for t in range(len(cfg.tenants))]
            self.lines = [cluster] * len(cfg.tenants)
        else:
            own: list[JobQueue] = [queue() for _ in cfg.tenants]
            self.queues, self.lines = list(own), own
        self.queued_milli = [0] * len(cfg.tenants)
        self.queued_gpuless = [0] * len(cfg.tenants)  # queued jobs that ask for no GPU
        # Counters have no side effect of a failed fit (node placement meters each one), so a
        # backfill pass that cannot start anything may be skipped with them alone.
        self._skip_futile = isinstance(placement, CounterPlacement)
        self.efficiency = efficiency(cfg.scaling)
        self._backfill = cfg.queue.backfill and cfg.queue.backfill_interval_s == 0
        self._completing_s = cfg.queue.completing_s
        self.slurm_backfill = self._slurm_backfill(cfg) if cfg.queue.backfill else []
        self._manual = cfg.queue.policy in PLACED_ONLY or self.cycles is not None
        divergence = state.streams.get("divergence")
        self._divergence = Sampler(divergence, lambda g, n: g.uniform(0.2, 0.9, n))
        self.jobs_in_system = 0
        self.running_jobs = 0
        self._seq = 0
        self._fastest = max((p.speed for p in cfg.pools), default=1.0)
        # Finished runs are kept for a tenant's forecast where someone decides (asks); a replay,
        # with no decision points, keeps none.
        asks = cfg.decisions.interval_s is not None or bool(cfg.decisions.triggers)
        self._runs = state.runs if asks else None

    def _slurm_backfill(self, cfg: ClusterScenario) -> list[SlurmBackfill]:
        """Slurm's periodic backfill pass on each queue, where the queue asks for one (a
        cluster with shared pools has one queue, planned on the holdings of its first tenant,
        which a replayed trace's one tenant is)."""
        q = cfg.queue
        if q.backfill_interval_s == 0:
            return []
        phase_s = q.backfill_phase_s
        if phase_s is None:  # when the passes fall is not known: drawn once an episode
            phase_s = float(self.state.streams.get("backfill").uniform(0.0, q.backfill_interval_s))
        passes = []
        for tenant, line in enumerate(self.lines[:1] if self.shared else self.lines):
            bf = SlurmBackfill(self.env, line, self.placement, self.state.holdings[tenant],
                               interval_s=q.backfill_interval_s,
                               resolution_s=q.backfill_resolution_s, phase_s=phase_s,
                               grid_s=q.backfill_grid_s,
                               depth=q.backfill_depth, run=self.run)  # fmt: skip
            self.env.process(bf.process())
            passes.append(bf)
        return passes

    # -- admission ------------------------------------------------------------------------

    @property
    def admitted(self) -> int:
        """Jobs admitted so far (the episode's, from its start)."""
        return self._seq

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
    ) -> Job:
        """A job enters its tenant's queue; a kernel job whose plan runs nowhere is rejected.

        `work` is reference-GPU-seconds, or tokens for a kernel job (`option` set); `present`
        marks a replayed job already running when its trace began (left censored); `bound` one
        running at a snapshot's instant, placed at once; `time_limit_s`, where the job has
        one, stops its run there.
        """
        now = self.env.now
        self._seq += 1
        seq = self._seq
        if option is None:
            work_gpu_s, nominal = work, gpus if gpus > 0 else 1.0
        else:
            nominal = option.best_rate
            work_gpu_s = gpus * work / nominal if nominal > 0 else 0.0
        job = Job(job_id or f"j{seq}", tenant, gpus, round(gpus * 1000), work_gpu_s, priority,
                  gpu_type, now, seq, work, work, nominal, now, option, workload)  # fmt: skip
        job.fails, job.censored, job.cpu_milli, job.group = fails, censored, cpu_milli, group
        if time_limit_s is not None:
            job.time_limit_s = time_limit_s
        self.placement.arrived(job)
        name = self.state.tenant_names[tenant]
        self._emit(
            records.JobArrived(
                "job_arrived", now, name, job.job_id, gpus, work_gpu_s, priority, gpu_type
            )
        )
        if present:
            self._emit(records.JobPresentAtStart("job_present_at_start", now, name, job.job_id))
        if option is not None and nominal <= 0:
            self._emit(
                records.JobFailed(
                    "job_failed", now, name, job.job_id, f"infeasible_plan: {option.why_not()}"
                )
            )
            return job
        if self._check_fits and not self.placement.ever_fits(job):
            # It would wait forever (and, at a FIFO head, block the queue behind it): no node
            # of its kind is large enough even when empty.
            self._emit(
                records.JobFailed(
                    "job_failed", now, name, job.job_id, "unschedulable: no node can hold it"
                )
            )
            return job
        self.jobs_in_system += 1
        if bound and self.cycles is not None and (h := self.fit(job)) is not None:
            # Already running on a node when the state was taken (a forecast's snapshot):
            # placed at once, without the scheduler's cycles and bind races.
            self.queued_milli[tenant] += job.milli
            self.queued_gpuless[tenant] += int(job.milli == 0)
            self.run(job, h)
            return job
        self.enqueue(job)
        self.schedule(tenant)
        if self.decisions.on_arrival:
            self.decisions.want(tenant, "arrival")
        return job

    def enqueue(self, job: Job, *, requeue: bool = False) -> None:
        job.queued = True
        job.queued_since_s = self.env.now
        self.queues[job.tenant].push(job, requeue=requeue)
        self.queued_milli[job.tenant] += job.milli
        self.queued_gpuless[job.tenant] += int(job.milli == 0)
        if self.cycles is not None:
            self.cycles.submit(job)
        for bf in self.slurm_backfill:
            bf.queued()

    def _fit_within_quota(self, job: Job) -> Holding | None:
        quotas = self.quotas
        assert quotas is not None
        if quotas.allows(job):
            return self.placement.fit(job)
        # Over its quota: on a cluster with shared pools the quota is of those, and the job
        # may still run on its tenant's own GPUs.
        return self.placement.fit(job, shared=False) if self.shared else None

    def _counts_in_quota(self, pool: Pool) -> bool:
        """Whether a run on `pool` counts in its group's quota (everywhere, or only on the
        shared pools of a cluster that has them)."""
        return not self.shared or pool.cfg.shared

    # -- queue order, fit and backfill ----------------------------------------------------

    def room_freed(self, tenant: int) -> None:
        """GPUs became free or ready for `tenant`: start what now fits (or, with scheduling
        cycles, try the unschedulable jobs again)."""
        if self.cycles is not None:
            self.cycles.released(sum(h.idle_milli for h in self.state.holdings[tenant]))
        else:
            self.schedule(tenant)

    def room_freed_everywhere(self) -> None:
        """Try every tenant's waiting jobs again (once for a cluster whose pools are shared)."""
        if not self.shared:
            for tenant in range(len(self.queues)):
                self.room_freed(tenant)
            return
        if self.cycles is not None:
            held = {id(h): h for hs in self.state.holdings for h in hs}
            self.cycles.released(sum(h.idle_milli for h in held.values()))
        else:
            self.schedule(0)

    def schedule(self, tenant: int) -> None:
        """Start queued jobs of `tenant` in queue order while they fit; then backfill.
        (With a manual queue, jobs start only when placed.)"""
        if self._manual:
            return
        q = self.lines[tenant]
        fit = self.fit
        while True:
            job = q.head()
            if job is None:
                return
            h = fit(job)
            if h is None:
                break
            q.pop()
            self.run(job, h)
        if self._backfill and len(q) > 1 and not self._futile(tenant):
            backfill_behind(job, q, now_s=self.env.now, depth=self.cfg.queue.backfill_depth,
                            placement=self.placement, fit=fit, rate=self.rate,
                            run=self.run)  # fmt: skip

    def _futile(self, tenant: int) -> bool:
        """Whether backfill behind `tenant`'s blocked head can start nothing: no holding it may
        use has a GPU idle and none of the waiting jobs is GPU-less (so every fit fails, and
        skipping the pass changes nothing but its cost; a saturated cluster with a long queue
        would otherwise try backfill's whole depth at every arrival)."""
        if not self._skip_futile:
            return False
        # A cluster with shared pools schedules every tenant's jobs from its one queue.
        tenants = range(len(self.queues)) if self.shared else (tenant,)
        holdings = self.state.holdings
        return not any(self.queued_gpuless[t] for t in tenants) and all(
            h.ready * 1000 <= h.busy_milli for t in tenants for h in holdings[t]
        )

    # -- runs -----------------------------------------------------------------------------

    def rate(self, job: Job, pool: Pool) -> float:
        """Work per second on `pool`: the kernel's tokens/s for a kernel job, else
        reference-GPU-seconds per second (a GPU-less job runs at the pool's speed)."""
        if job.option is not None:
            rate: float = job.option.rates[pool.index]
            return rate
        gpus = job.gpus
        return gpus * pool.cfg.speed * self.efficiency(gpus) if gpus > 0 else pool.cfg.speed

    def run(self, job: Job, h: Holding) -> None:
        """Start a queued job (already out of its queue) on holding `h`."""
        job.queued = False
        self.queued_milli[job.tenant] -= job.milli
        self.queued_gpuless[job.tenant] -= int(job.milli == 0)
        now = self.env.now
        pool = h.pool
        if job.option is not None and not job.placed:
            # The verdict of the allocation granted now: pool, GPU count, power cap in force.
            scorer = self.scorer
            job.option = scorer.option(job.tenant, job)
            v = scorer.verdict(job.tenant, job, pool.index)
            job.quality, job.flags = v.score, tuple(r for r in v.reasons if r in DEGENERATE)
        elif job.option is None:
            job.quality = pool.cfg.speed / self._fastest
        job.pool = pool.index
        job.start_s = now
        self.placement.claim(job)
        if self.quotas is not None and self._counts_in_quota(pool):
            self.quotas.take(job)
        h.busy_milli += job.milli
        h.running[job] = None
        self.running_jobs += 1
        job.rate = rate = self.rate(job, pool)
        run_s = job.remaining / rate
        if run_s > job.time_limit_s:  # stopped at its limit, as Slurm kills a job there
            run_s, job.fails = job.time_limit_s, TIME_LIMIT
        ev = self.env.timeout(run_s + self._completing_s, job)
        ev.callbacks.append(self._finished)
        job.run = ev
        if job.option is not None and not job.option.stable[pool.index]:
            # An unstable plan starts, then diverges part-way through.
            fraction = self._divergence()
            self.env.timeout(run_s * fraction).callbacks.append(lambda _: self._diverged(job, ev))
        wait_s = now - job.queued_since_s
        tenant = self.state.tenant_names[job.tenant]
        self._emit(
            records.JobStarted(
                "job_started", now, tenant, job.job_id, pool.cfg.name, job.gpus, run_s, wait_s
            )
        )
        self.billing.charge_wait(job, wait_s)

    def start_placed(self, job: Job, pool: int, option: PlanOption) -> bool:
        """Start a queued job on `pool` with a placed plan, if its tenant has the GPUs idle."""
        h = self.state.holdings[job.tenant][pool]
        if h.idle_milli < job.milli:
            return False
        job.option = option
        job.placed = True
        job.nominal_rate = option.best_rate
        self.queues[job.tenant].remove(job)
        self.run(job, h)
        return True

    def _stop(self, job: Job) -> Holding:
        h = self.state.holdings[job.tenant][job.pool]
        h.busy_milli -= job.milli
        del h.running[job]
        self.placement.release(job)
        if self.quotas is not None and self._counts_in_quota(h.pool):
            self.quotas.give(job)
        job.run = None
        self.running_jobs -= 1
        if self.cycles is not None:
            self.room_freed(job.tenant)
        return h

    def _finished(self, ev: simpy.Event) -> None:
        job: Job = ev._value
        state = self.state
        if job.run is not ev or state.ended:
            return
        now = self.env.now
        h = self._stop(job)
        tenant = job.tenant
        if job.fails is not None:  # it ran as long as the trace says, then failed as it did
            why = job.fails if job.fails == TIME_LIMIT else f"trace: {job.fails}"
            self._emit(
                records.JobFailed("job_failed", now, state.tenant_names[tenant], job.job_id, why)
            )
            self._left(tenant)
            return
        ran = (now, state.tenant_names[tenant], job.job_id, h.pool.cfg.name, job.gpus,
               now - job.start_s)  # fmt: skip
        self._emit(records.JobCensored("job_censored", *ran) if job.censored  # seen no further
                   else records.JobFinished("job_finished", *ran))  # fmt: skip
        if self._runs is not None:
            self._runs[tenant].append((job.submit_s, job.start_s, now, job.gpus,
                                       h.pool.cfg.gpu_type))  # fmt: skip
        self.billing.earn(tenant, job.work_gpu_s)
        self._left(tenant)

    def _diverged(self, job: Job, run: simpy.Event) -> None:
        """An unstable run's loss blew up: the job fails for good (the same plan would again)."""
        state = self.state
        if job.run is not run or state.ended:
            return
        self._stop(job)
        self._emit(
            records.JobFailed(
                "job_failed", self.env.now, state.tenant_names[job.tenant], job.job_id, "diverged"
            )
        )
        self._left(job.tenant)

    def _left(self, tenant: int) -> None:
        """A job left the system after a run: its GPUs go to the next in line."""
        self.jobs_in_system -= 1
        self.schedule(tenant)
        if self.decisions.on_completion:
            self.decisions.want(tenant, "completion")
        self._left_system()

    def interrupt(self, job: Job, reason: str) -> None:
        """Stop a running job; it resumes from its last checkpoint or fails for good."""
        now = self.env.now
        cfg = self.cfg
        h = self._stop(job)
        elapsed_s = now - job.start_s
        ckpt_s = cfg.checkpoint_interval_s
        kept_s = math.floor(elapsed_s / ckpt_s) * ckpt_s if ckpt_s else 0.0
        job.remaining = max(job.remaining - kept_s * job.rate, 0.0)
        job.restarts += 1
        tenant = self.state.tenant_names[job.tenant]
        self._emit(
            records.JobInterrupted(
                "job_interrupted",
                now,
                tenant,
                job.job_id,
                h.pool.cfg.name,
                reason,
                (elapsed_s - kept_s) * job.gpus,
                job.restarts,
            )
        )
        if job.restarts > cfg.max_restarts:
            self._emit(
                records.JobFailed("job_failed", now, tenant, job.job_id, "too_many_restarts")
            )
            self.jobs_in_system -= 1
            self._left_system()
        else:
            self.enqueue(job, requeue=True)
