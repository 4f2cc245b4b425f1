"""The job-level cluster model: pools, tenants, queues, jobs, failures and money.

Everything happens in SimPy virtual time (float seconds). Jobs run on GPUs their own tenant
holds; pools cap what all tenants together can hold. State changes emit event records; a change
that a tenant's policy should hear about marks a pending decision for the driver.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Iterable
from typing import Any

import simpy

from twin.errors import ActionError
from twin.eventlog.log import EventLog
from twin.replay.record import JobRecord
from twin.schema.actions import Bundle, ProvisionAction
from twin.schema.scenario import ClusterScenario, WorkloadConfig
from twin.sim.arrivals import gaps
from twin.sim.encode import PlanOption, plan_options
from twin.sim.jobs import Job
from twin.sim.ledger import Ledger
from twin.sim.pools import Holding, Pool, Request
from twin.sim.queues import JobQueue, make_queue
from twin.sim.rng import Streams
from twin.sim.sampling import Sampler, sampler
from twin.sim.scaling import efficiency

EPS_USD = 1e-9


class ClusterModel:
    """One cluster's state and the SimPy processes that change it."""

    def __init__(
        self,
        env: simpy.Environment,
        cfg: ClusterScenario,
        streams: Streams,
        log: EventLog,
        sources: Iterable[Iterable[JobRecord]] = (),
    ) -> None:
        self.env = env
        self.cfg = cfg
        self.streams = streams
        self._emit = log.append
        self.tenant_names = [t.name for t in cfg.tenants]
        self._tenant_index = {name: i for i, name in enumerate(self.tenant_names)}
        self.pools = [
            Pool(
                i,
                p,
                sampler(p.provision_delay_s, streams.get(f"provision/{p.name}")),
                sampler(p.repair_s, streams.get(f"repair/{p.name}")),
            )
            for i, p in enumerate(cfg.pools)
        ]
        self.pool_index = {p.name: i for i, p in enumerate(cfg.pools)}
        self.holdings = [
            [Holding(t, pool, pool.cfg.price_usd_per_gpu_h / 3600.0) for pool in self.pools]
            for t in range(len(cfg.tenants))
        ]
        # Placement preference: fastest pool first, then cheapest.
        self._by_speed = [
            sorted(hs, key=lambda h: (-h.pool.cfg.speed, h.pool.cfg.price_usd_per_gpu_h))
            for hs in self.holdings
        ]
        self.ledgers = [
            Ledger(
                i,
                t.name,
                t.budget_usd,
                sorted(cfg.decisions.budget_thresholds, reverse=True),
                t.sla_usd_per_job_h / 3600.0,
                t.value_usd_per_gpu_h / 3600.0,
                self.holdings[i],
            )
            for i, t in enumerate(cfg.tenants)
        ]
        self.options, evaluated = plan_options(cfg)
        for tenant, *payload in evaluated:
            self._emit(("plan_evaluated", env.now, tenant, *payload))
        divergence = streams.get("divergence")
        self._divergence = Sampler(divergence, lambda g, n: g.uniform(0.2, 0.9, n))
        self.queues: list[JobQueue] = [make_queue(cfg.queue.policy) for _ in cfg.tenants]
        self.queued_milli = [0] * len(cfg.tenants)
        self._eff = efficiency(cfg.scaling)
        self._backfill = cfg.queue.backfill
        self._manual = cfg.queue.policy == "manual"
        triggers = cfg.decisions.triggers
        self._on_arrival = "arrival" in triggers
        self._on_completion = "completion" in triggers
        self._on_ready = "gpus_ready" in triggers
        self._on_failure = "failure" in triggers
        self._on_threshold = "budget_threshold" in triggers
        self.pending: dict[int, list[str]] = {}
        self._reward_base = [0.0] * len(cfg.tenants)
        self.ended: str | None = None
        self.jobs_in_system = 0
        self.running_jobs = 0
        self.open_sources = 0
        self._seq = 0
        self._start(sources)

    # -- set-up ---------------------------------------------------------------------------------

    def _start(self, sources: Iterable[Iterable[JobRecord]]) -> None:
        env = self.env
        for t, tenant in enumerate(self.cfg.tenants):
            for pool_name, n in sorted(tenant.initial_gpus.items()):
                if n:
                    h = self.holdings[t][self.pool_index[pool_name]]
                    h.pool.in_use += n
                    h.ready += n
                    self._emit(("gpus_ready", env.now, tenant.name, pool_name, n))
                    self._set_billed(h, n)
            for w, workload in enumerate(tenant.workloads):
                self.open_sources += 1
                env.process(self.job_arrivals(t, w, workload))
        for source in sources:
            self.open_sources += 1
            env.process(self.record_arrivals(source))
        for pool in self.pools:
            if pool.cfg.mtbf_gpu_h is not None and pool.cfg.max_gpus > 0:
                env.process(self.node_failures(pool))
        if self.cfg.decisions.interval_s is not None:
            env.process(self.decision_ticks(self.cfg.decisions.interval_s))
        if self.cfg.horizon_s is not None:
            env.timeout(self.cfg.horizon_s).callbacks.append(lambda _: self.end("horizon"))

    # -- SimPy processes ------------------------------------------------------------------------

    def job_arrivals(
        self, tenant: int, index: int, w: WorkloadConfig
    ) -> Generator[simpy.Event, Any, None]:
        """SimPy process: the jobs of one synthetic workload arriving."""
        name = self.tenant_names[tenant]
        rng = self.streams.get(f"jobs/{name}/{index}")
        draw_gpus, draw_priority = sampler(w.gpus, rng), sampler(w.priority, rng)
        size = w.kernel.tokens if w.kernel is not None else w.service_s
        assert size is not None  # the schema requires one of the two
        draw_size = sampler(size, rng)
        timeout = self.env.timeout
        for n, gap_s in enumerate(gaps(w.arrivals, self.streams.get(f"arrivals/{name}/{index}"))):
            if w.max_jobs is not None and n >= w.max_jobs:
                break
            yield timeout(gap_s)
            if self.ended:
                return
            gpus = draw_gpus()
            if w.kernel is None:
                work, option = draw_size() * gpus, None
            else:
                work, option = draw_size(), self.options[(tenant, index, gpus)]
            job = self.admit(
                tenant,
                None,
                gpus=gpus,
                work=work,
                priority=draw_priority(),
                gpu_type=w.gpu_type,
                option=option,
            )
            job.workload = index
        self.open_sources -= 1
        self._check_drained()

    def record_arrivals(self, source: Iterable[JobRecord]) -> Generator[simpy.Event, Any, None]:
        """SimPy process: jobs from a job-record source (a trace) arriving at their submit times."""
        env = self.env
        eff = self._eff
        for rec in source:
            delay_s = rec.submit_s - env.now
            if delay_s > 0:
                yield env.timeout(delay_s)
            if self.ended:
                return
            tenant = self._tenant_index.get(rec.tenant, 0)
            work = rec.service_s * rec.gpus * eff(rec.gpus) if rec.gpus > 0 else rec.service_s
            self.admit(
                tenant,
                rec.job_id,
                gpus=rec.gpus,
                work=work,
                priority=rec.priority,
                gpu_type=rec.gpu_type,
            )
        self.open_sources -= 1
        self._check_drained()

    def decision_ticks(self, interval_s: float) -> Generator[simpy.Event, Any, None]:
        """SimPy process: ask every tenant for a decision each `interval_s`."""
        quiet_ticks = 0
        while not self.ended:
            yield self.env.timeout(interval_s)
            if self.ended:
                return
            for t in range(len(self.tenant_names)):
                self._want(t, "tick")
            if self.cfg.horizon_s is None:
                # Without a horizon, stop once nothing can change (the schedule then empties).
                quiet_ticks = quiet_ticks + 1 if self._quiet() else 0
                if quiet_ticks > 1:
                    return

    def node_failures(self, pool: Pool) -> Generator[simpy.Event, Any, None]:
        """SimPy process: GPU failures in `pool`, each held GPU failing at rate 1/MTBF.

        Failures are drawn at the rate of a full pool and thinned by the share of slots held.
        """
        assert pool.cfg.mtbf_gpu_h is not None
        rng = self.streams.get(f"failures/{pool.cfg.name}")
        mean_gap_s = pool.cfg.mtbf_gpu_h * 3600.0 / pool.cfg.max_gpus
        gap = Sampler(rng, lambda g, n: g.exponential(mean_gap_s, n))
        slot = Sampler(rng, lambda g, n: g.integers(0, pool.cfg.max_gpus, n))
        while not self.ended:
            yield self.env.timeout(gap())
            if self.ended or (self.cfg.horizon_s is None and self._quiet()):
                return
            s = int(slot())
            for h in (hs[pool.index] for hs in self.holdings):
                if s < h.ready:
                    self._fail_gpu(h, s)
                    break
                s -= h.ready

    # -- jobs -----------------------------------------------------------------------------------

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
    ) -> Job:
        """A job enters its tenant's queue; a kernel job whose plan runs nowhere is rejected.

        `work` is reference-GPU-seconds, or tokens for a kernel job (`option` set).
        """
        now = self.env.now
        self._seq += 1
        seq = self._seq
        if option is None:
            work_gpu_s, nominal = work, gpus if gpus > 0 else 1.0
        else:
            nominal = option.best_rate
            work_gpu_s = gpus * work / nominal if nominal > 0 else 0.0
        job = Job(
            job_id or f"j{seq}",
            tenant,
            gpus,
            round(gpus * 1000),
            work_gpu_s,
            priority,
            gpu_type,
            now,
            seq,
            work,
            work,
            nominal,
            now,
            option,
        )
        name = self.tenant_names[tenant]
        self._emit(
            ("job_arrived", now, name, job.job_id, gpus, work_gpu_s, priority, gpu_type)
        )  # fmt: skip
        if option is not None and nominal <= 0:
            self._emit(
                ("job_failed", now, name, job.job_id, f"infeasible_plan: {option.why_not()}")
            )
            return job
        self.jobs_in_system += 1
        self._enqueue(job)
        self.schedule(tenant)
        if self._on_arrival:
            self._want(tenant, "arrival")
        return job

    def _enqueue(self, job: Job, *, requeue: bool = False) -> None:
        job.queued = True
        job.queued_since_s = self.env.now
        self.queues[job.tenant].push(job, requeue=requeue)
        self.queued_milli[job.tenant] += job.milli

    def schedule(self, tenant: int) -> None:
        """Start queued jobs of `tenant` in queue order while they fit; then backfill.
        (With a manual queue, jobs start only when placed.)"""
        if self._manual:
            return
        q = self.queues[tenant]
        while True:
            job = q.head()
            if job is None:
                return
            h = self._fit(job)
            if h is None:
                break
            q.pop()
            self._run(job, h)
        if self._backfill and len(q) > 1:
            self._backfill_behind(job)

    def _fit(self, job: Job) -> Holding | None:
        milli, gpu_type, option = job.milli, job.gpu_type, job.option
        for h in self._by_speed[job.tenant]:
            if (
                h.ready * 1000 - h.busy_milli >= milli
                and (gpu_type is None or h.pool.cfg.gpu_type == gpu_type)
                and (option is None or option.rates[h.pool.index] > 0)
            ):
                return h
        return None

    def _backfill_behind(self, head: Job) -> None:
        """EASY backfill: a later job may start now if it cannot delay the blocked head.

        The head reserves the earliest time its GPUs free up in its best pool (the shadow time);
        a candidate may run there if it ends by then or uses only GPUs the head will not need.
        """
        now = self.env.now
        shadow_s, spare_milli = math.inf, 0
        reserved: Holding | None = None
        for h in self._by_speed[head.tenant]:
            if head.gpu_type is not None and h.pool.cfg.gpu_type != head.gpu_type:
                continue
            free = h.ready * 1000 - h.busy_milli
            ends = sorted((j.start_s + j.remaining / j.rate, j.milli) for j in h.running)
            for end_s, milli in ends:
                free += milli
                if free >= head.milli:
                    if end_s < shadow_s:
                        shadow_s, spare_milli, reserved = end_s, free - head.milli, h
                    break
        q = self.queues[head.tenant]
        for job in q.first(self.cfg.queue.backfill_depth)[1:]:
            fit = self._fit(job)
            if fit is None:
                continue
            if fit is not reserved or now + job.remaining / self._rate(job, fit.pool) <= shadow_s:
                pass
            elif job.milli <= spare_milli:
                spare_milli -= job.milli
            else:
                continue
            job.queued = False
            q.remove(job)
            self.queued_milli[job.tenant] -= job.milli
            self._start_run(job, fit)

    def _rate(self, job: Job, pool: Pool) -> float:
        """Work per second on `pool`: the kernel's tokens/s for a kernel job, else
        reference-GPU-seconds per second (a GPU-less job runs at the pool's speed)."""
        if job.option is not None:
            rate: float = job.option.rates[pool.index]
            return rate
        gpus = job.gpus
        return gpus * pool.cfg.speed * self._eff(gpus) if gpus > 0 else pool.cfg.speed

    def _run(self, job: Job, h: Holding) -> None:
        job.queued = False
        self.queued_milli[job.tenant] -= job.milli
        self._start_run(job, h)

    def _start_run(self, job: Job, h: Holding) -> None:
        now = self.env.now
        pool = h.pool
        job.pool = pool.index
        job.start_s = now
        h.busy_milli += job.milli
        h.running[job] = None
        self.running_jobs += 1
        job.rate = rate = self._rate(job, pool)
        run_s = job.remaining / rate
        ev = self.env.timeout(run_s, job)
        ev.callbacks.append(self._finished)
        job.run = ev
        if job.option is not None and not job.option.stable[pool.index]:
            # An unstable plan starts, then diverges part-way through.
            fraction = self._divergence()
            self.env.timeout(run_s * fraction).callbacks.append(lambda _: self._diverged(job, ev))
        wait_s = now - job.queued_since_s
        tenant = self.tenant_names[job.tenant]
        self._emit(("job_started", now, tenant, job.job_id, pool.cfg.name, job.gpus, run_s, wait_s))
        ledger = self.ledgers[job.tenant]
        if ledger.sla_usd_per_job_s and wait_s > 0:
            amount = wait_s * ledger.sla_usd_per_job_s
            ledger.sla_usd += amount
            self._emit(("sla_penalty", now, tenant, job.job_id, wait_s, amount))

    def _stop_run(self, job: Job) -> Holding:
        h = self.holdings[job.tenant][job.pool]
        h.busy_milli -= job.milli
        del h.running[job]
        job.run = None
        self.running_jobs -= 1
        return h

    def _finished(self, ev: simpy.Event) -> None:
        job: Job = ev._value
        if job.run is not ev or self.ended:
            return
        now = self.env.now
        h = self._stop_run(job)
        tenant = job.tenant
        self._emit(
            ("job_finished", now, self.tenant_names[tenant], job.job_id, h.pool.cfg.name,
             job.gpus, now - job.start_s)
        )  # fmt: skip
        ledger = self.ledgers[tenant]
        ledger.value_usd += job.work_gpu_s * ledger.value_usd_per_gpu_s
        self.jobs_in_system -= 1
        self.schedule(tenant)
        if self._on_completion:
            self._want(tenant, "completion")
        self._check_drained()

    def _diverged(self, job: Job, run: simpy.Event) -> None:
        """An unstable run's loss blew up: the job fails for good (the same plan would again)."""
        if job.run is not run or self.ended:
            return
        h = self._stop_run(job)
        self._emit(
            ("job_failed", self.env.now, self.tenant_names[job.tenant], job.job_id, "diverged")
        )
        self.jobs_in_system -= 1
        self.schedule(job.tenant)
        if self._on_completion:
            self._want(job.tenant, "completion")
        del h
        self._check_drained()

    def _interrupt(self, job: Job, reason: str) -> None:
        """Stop a running job; it resumes from its last checkpoint or fails for good."""
        now = self.env.now
        h = self._stop_run(job)
        elapsed_s = now - job.start_s
        ckpt_s = self.cfg.checkpoint_interval_s
        kept_s = math.floor(elapsed_s / ckpt_s) * ckpt_s if ckpt_s else 0.0
        job.remaining = max(job.remaining - kept_s * job.rate, 0.0)
        job.restarts += 1
        tenant = self.tenant_names[job.tenant]
        self._emit(
            ("job_interrupted", now, tenant, job.job_id, h.pool.cfg.name, reason,
             (elapsed_s - kept_s) * job.gpus, job.restarts)
        )  # fmt: skip
        if job.restarts > self.cfg.max_restarts:
            self._emit(("job_failed", now, tenant, job.job_id, "too_many_restarts"))
            self.jobs_in_system -= 1
            self._check_drained()
        else:
            self._enqueue(job, requeue=True)

    # -- GPUs -----------------------------------------------------------------------------------

    def provision(self, tenant: int, pool_index: int, gpus: int) -> None:
        """Request `gpus` more GPUs of a pool for `tenant`, within the pool's free capacity."""
        now = self.env.now
        h = self.holdings[tenant][pool_index]
        pool = h.pool
        name = self.tenant_names[tenant]
        if self.ledgers[tenant].exhausted:
            self._emit(("action_clamped", now, name, pool.cfg.name, gpus, 0, "budget_exhausted"))
            return
        granted = min(gpus, pool.free)
        if granted < gpus:
            self._emit(("action_clamped", now, name, pool.cfg.name, gpus, granted, "pool_full"))
        if granted <= 0:
            return
        delay_s = max(pool.draw_delay_s(), 0.0)
        req = Request(granted, now + delay_s)
        pool.in_use += granted
        h.pending.append(req)
        self._emit(("gpus_requested", now, name, pool.cfg.name, granted, req.ready_at_s))
        if pool.cfg.billing == "from_request":
            self._set_billed(h, granted)
        req.event = self.env.timeout(delay_s)
        req.event.callbacks.append(lambda _: self._ready(h, req))

    def _ready(self, h: Holding, req: Request) -> None:
        if req.cancelled or self.ended:
            return
        h.pending.remove(req)
        h.ready += req.gpus
        if h.pool.cfg.billing == "from_ready":
            self._set_billed(h, req.gpus)
        self._emit(
            ("gpus_ready", self.env.now, self.tenant_names[h.tenant], h.pool.cfg.name, req.gpus)
        )
        self.schedule(h.tenant)
        if self._on_ready:
            self._want(h.tenant, "gpus_ready")

    def release(self, tenant: int, pool_index: int, gpus: int) -> None:
        """Give back up to `gpus`: pending requests first (newest first), then idle GPUs."""
        now = self.env.now
        h = self.holdings[tenant][pool_index]
        pool = h.pool
        name = self.tenant_names[tenant]
        left = gpus
        while left and h.pending:
            req = h.pending[-1]
            k = min(left, req.gpus)
            req.gpus -= k
            if req.gpus == 0:
                req.cancelled = True
                h.pending.pop()
            pool.in_use -= k
            left -= k
            self._emit(("gpus_cancelled", now, name, pool.cfg.name, k))
            if pool.cfg.billing == "from_request":
                self._set_billed(h, -k)
        k = min(left, h.idle_whole)
        if k > 0:
            h.ready -= k
            pool.in_use -= k
            left -= k
            self._set_billed(h, -k)
            self._emit(("gpus_released", now, name, pool.cfg.name, k))
        if left:
            self._emit(
                ("action_clamped", now, name, pool.cfg.name, -gpus, left - gpus, "gpus_busy")
            )

    def _fail_gpu(self, h: Holding, slot: int) -> None:
        """GPU number `slot` of a holding breaks: its job (if any) stops, the GPU goes to repair."""
        now = self.env.now
        pool = h.pool
        victim = None
        if slot * 1000 < h.busy_milli:
            used = 0
            for job in h.running:
                used += job.milli
                if used > slot * 1000:
                    victim = job
                    break
        self._emit(
            ("node_failed", now, self.tenant_names[h.tenant], pool.cfg.name,
             victim.job_id if victim else None)
        )  # fmt: skip
        if victim is not None:
            self._interrupt(victim, "node_failure")
        h.ready -= 1
        self._set_billed(h, -1)
        pool.down += 1
        self.env.timeout(pool.draw_repair_s()).callbacks.append(lambda _: self._repaired(pool))
        self.schedule(h.tenant)
        if self._on_failure:
            self._want(h.tenant, "failure")

    def _repaired(self, pool: Pool) -> None:
        if self.ended:
            return
        pool.down -= 1
        pool.in_use -= 1
        self._emit(("node_repaired", self.env.now, None, pool.cfg.name))

    # -- money ----------------------------------------------------------------------------------

    def _settle(self, h: Holding) -> None:
        now = self.env.now
        dt = now - h.billed_since_s
        if h.billed and dt > 0:
            gpu_s = h.billed * dt
            amount = gpu_s * h.price_usd_per_gpu_s
            self.ledgers[h.tenant].spent_usd += amount
            self._emit(
                ("budget_charged", now, self.tenant_names[h.tenant], h.pool.cfg.name, gpu_s, amount)
            )
        h.billed_since_s = now

    def _set_billed(self, h: Holding, delta: int) -> None:
        self._settle(h)
        h.billed += delta
        ledger = self.ledgers[h.tenant]
        if ledger.budget_usd is not None:
            self._arm_alarm(ledger)

    def _arm_alarm(self, ledger: Ledger) -> None:
        """Schedule a wake-up for when the next budget threshold (or zero) is reached."""
        ledger.alarm += 1
        rate = ledger.burn_usd_per_s()
        if ledger.exhausted or rate <= 0 or ledger.budget_usd is None:
            return
        now = self.env.now
        left_usd = ledger.budget_usd - ledger.spent_at(now) - ledger.next_target_usd()
        token = ledger.alarm
        ev = self.env.timeout(max(left_usd / rate, 0.0))
        ev.callbacks.append(lambda _: self._alarm(ledger, token))

    def _alarm(self, ledger: Ledger, token: int) -> None:
        if token != ledger.alarm or self.ended or ledger.budget_usd is None:
            return
        now = self.env.now
        for h in ledger.holdings:
            self._settle(h)
        budget = ledger.budget_usd
        remaining = budget - ledger.spent_usd
        tol = EPS_USD * budget
        while (
            ledger.next_threshold < len(ledger.thresholds)
            and remaining <= ledger.next_target_usd() + tol
        ):
            fraction = ledger.thresholds[ledger.next_threshold]
            ledger.next_threshold += 1
            self._emit(("budget_threshold", now, ledger.name, remaining, fraction))
            if self._on_threshold:
                self._want(ledger.tenant, "budget_threshold")
        if remaining <= tol:
            self._exhaust(ledger)
        else:
            self._arm_alarm(ledger)

    def _exhaust(self, ledger: Ledger) -> None:
        """A tenant out of money loses its GPUs; the episode ends when every tenant is out."""
        ledger.exhausted = True
        self._emit(("budget_exhausted", self.env.now, ledger.name, ledger.spent_usd))
        for h in ledger.holdings:
            for job in list(h.running):
                self._interrupt(job, "budget_exhausted")
            self.release(ledger.tenant, h.pool.index, h.pending_gpus + h.ready)
        if all(lg.exhausted for lg in self.ledgers):
            self.end("budget_exhausted")

    # -- decisions ------------------------------------------------------------------------------

    def _want(self, tenant: int, reason: str) -> None:
        reasons = self.pending.get(tenant)
        if reasons is None:
            self.pending[tenant] = [reason]
        elif reason not in reasons:
            reasons.append(reason)

    def apply(self, tenant: int, action: ProvisionAction) -> None:
        """Carry out a tenant's provisioning decision, pool by pool in name order."""
        for pool_name, delta in sorted(action.provision.items()):
            index = self.pool_index.get(pool_name)
            if index is None:
                raise ActionError(
                    f"action for tenant {self.tenant_names[tenant]!r} names pool {pool_name!r}; "
                    f"pools are {sorted(self.pool_index)}"
                )
            if delta > 0:
                self.provision(tenant, index, delta)
            elif delta < 0:
                self.release(tenant, index, -delta)

    # -- negotiation (the mediator's operations) -------------------------------------------------

    def clamp(self, tenant: int, pool: int, requested: int, granted: int, reason: str) -> None:
        name, now = self.pools[pool].cfg.name, self.env.now
        self._emit(
            ("action_clamped", now, self.tenant_names[tenant], name, requested, granted, reason)
        )

    def clear_auction(self, pool: int, price: float, winners: dict[int, int]) -> None:
        """Each winner pays `price` per GPU won, from its budget, now."""
        now, name = self.env.now, self.pools[pool].cfg.name
        self._emit(("auction_cleared", now, None, name, price,
                    {self.tenant_names[t]: n for t, n in sorted(winners.items())}))  # fmt: skip
        for t, n in sorted(winners.items()):
            amount = price * n
            if amount > 0:
                self.ledgers[t].spent_usd += amount
                self._emit(("budget_charged", now, self.tenant_names[t], name, 0.0, amount))

    def can_hand_over(self, tenant: int, bundle: Bundle) -> str:
        """Why `tenant` cannot hand over `bundle` now ('' when it can)."""
        for pool, n in bundle.gpus.items():
            index = self.pool_index.get(pool)
            if index is None:
                return f"unknown pool {pool!r}"
            idle = self.holdings[tenant][index].idle_whole
            if idle < n:
                return f"{self.tenant_names[tenant]} has {idle} idle {pool} GPUs, not {n}"
        ledger = self.ledgers[tenant]
        if bundle.usd and ledger.budget_usd is not None:
            left = ledger.budget_usd - ledger.spent_at(self.env.now)
            if left < bundle.usd:
                who = self.tenant_names[tenant]
                return f"{who} has ${left:,.2f} of budget left, not ${bundle.usd:,.2f}"
        return ""

    def hand_over(self, giver: int, taker: int, bundle: Bundle) -> None:
        """Move idle GPUs (billing moves with them) and budget from one tenant to another."""
        now = self.env.now
        for pool, n in sorted(bundle.gpus.items()):
            a = self.holdings[giver][self.pool_index[pool]]
            b = self.holdings[taker][self.pool_index[pool]]
            a.ready -= n
            self._set_billed(a, -n)
            self._emit(("gpus_released", now, self.tenant_names[giver], pool, n))
            b.ready += n
            self._set_billed(b, n)
            self._emit(("gpus_ready", now, self.tenant_names[taker], pool, n))
            self.schedule(taker)
        if bundle.usd:
            give, take = self.ledgers[giver], self.ledgers[taker]
            if give.budget_usd is not None:
                give.budget_usd -= bundle.usd
                self._arm_alarm(give)
            if take.budget_usd is not None:
                take.budget_usd += bundle.usd
                self._arm_alarm(take)

    def settle_trade(
        self, offer_id: str, giver: int, to_tenant: str, applied: bool, reason: str
    ) -> None:
        self._emit(
            ("trade_settled", self.env.now, self.tenant_names[giver], offer_id, to_tenant,
             applied, reason)
        )  # fmt: skip

    def decide_placement(  # noqa: PLR0917 (the fields of the placement_decided record)
        self,
        tenant: int,
        job_id: str,
        pool: str,
        started: bool,
        reasons: list[str],
        score: float,
        tokens_per_s: float,
        credit: float,
    ) -> None:
        self._emit(
            ("placement_decided", self.env.now, self.tenant_names[tenant], job_id, pool,
             started, reasons, score, tokens_per_s, credit)
        )  # fmt: skip

    def start_placed(self, job: Job, pool: int, option: PlanOption) -> bool:
        """Start a queued job on `pool` with a placed plan, if its tenant has the GPUs idle."""
        h = self.holdings[job.tenant][pool]
        if h.idle_milli < job.milli:
            return False
        job.option = option
        job.nominal_rate = option.best_rate
        self.queues[job.tenant].remove(job)
        self._run(job, h)
        return True

    def settle_reward(self, tenant: int) -> float:
        """Value earned minus money spent and SLA penalties since the tenant's last round."""
        ledger = self.ledgers[tenant]
        total = ledger.value_usd - ledger.spent_at(self.env.now) - ledger.sla_usd
        reward, self._reward_base[tenant] = total - self._reward_base[tenant], total
        return reward

    # -- the end --------------------------------------------------------------------------------

    def _quiet(self) -> bool:
        return (
            self.open_sources == 0
            and self.running_jobs == 0
            and not any(h.pending for hs in self.holdings for h in hs)
        )

    def _check_drained(self) -> None:
        if self.open_sources == 0 and self.jobs_in_system == 0 and self.cfg.horizon_s is None:
            self.end("drained")

    def end(self, reason: str) -> None:
        """Close the books: settle every holding, charge SLA for jobs still waiting."""
        if self.ended:
            return
        now = self.env.now
        for hs in self.holdings:
            for h in hs:
                self._settle(h)
        for t, q in enumerate(self.queues):
            ledger = self.ledgers[t]
            if ledger.sla_usd_per_job_s:
                for job in q.first(len(q)):
                    wait_s = now - job.queued_since_s
                    if wait_s > 0:
                        amount = wait_s * ledger.sla_usd_per_job_s
                        ledger.sla_usd += amount
                        self._emit(("sla_penalty", now, ledger.name, job.job_id, wait_s, amount))
        self.ended = reason
        self.pending.clear()
        self._emit(("episode_ended", now, None, reason))
