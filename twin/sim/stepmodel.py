"""The classic GPUClusterEnv step model, seeded.

Per step, in this order: active = max(0, active + action); incoming ~ Poisson(lambda) join the
queue; processed = min(active, queue) leave it; cost = gpu_cost * active; SLA = sla * queue;
reward = job_reward * processed - cost - SLA; budget -= cost (GPU spend only; the SLA penalty
lowers the reward, not the budget). The episode ends after `max_steps` or once budget <= 0.
A step lasts `step_s` virtual seconds (an hour by default, so $2.50 is a price per GPU-hour).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import simpy

from twin.schema import records
from twin.schema.actions import GpuClusterAction, GpuClusterObservation
from twin.schema.scenario import GpuClusterScenario
from twin.schema.vocabulary import EndReason
from twin.sim.jobrecord import JobRecord
from twin.sim.model import TenantOutcome, World
from twin.sim.round import RoundInputs
from twin.sim.sampling import Sampler

TENANT = "default"
POOL = "gpu"


class StepModel:
    """State of one GPUClusterEnv episode; each committed round plays one step."""

    __slots__ = (
        "_arrivals",
        "_emit",
        "_next_step",
        "active_gpus",
        "budget_usd",
        "cfg",
        "ended",
        "env",
        "incoming_jobs",
        "last_reward",
        "pending",
        "queue_size",
        "tenant_names",
        "time_step",
        "total_reward",
    )

    def __init__(
        self, world: World, cfg: GpuClusterScenario, sources: Iterable[Iterable[JobRecord]] = ()
    ) -> None:
        """A step model takes no job sources: its arrivals are counts drawn each step."""
        self.env = env = world.env
        self.cfg = cfg
        self._emit = world.log.append
        streams = world.streams
        lam = cfg.arrival_rate
        self._arrivals = Sampler(streams.get("arrivals"), lambda g, n: g.poisson(lam, n))
        self.tenant_names = [TENANT]
        self.active_gpus = cfg.initial_gpus
        self.queue_size = 0
        self.budget_usd = cfg.budget_usd
        self.time_step = 0
        self.incoming_jobs = 0
        self.last_reward = 0.0
        self.total_reward = 0.0
        self.ended: EndReason | None = None
        self.pending: dict[int, list[str]] = {0: ["step"]}
        self._next_step = self._step_due
        if cfg.initial_gpus:
            self._emit(records.GpusReady("gpus_ready", env.now, TENANT, POOL, cfg.initial_gpus))

    def observe(self, tenant: int = 0, reasons: list[str] | None = None) -> GpuClusterObservation:
        return GpuClusterObservation(
            time_step=self.time_step,
            active_gpus=self.active_gpus,
            queue_size=self.queue_size,
            current_budget=self.budget_usd,
            incoming_jobs=self.incoming_jobs,
        )

    def score_round(self, tenants: list[int]) -> None:
        """The classic task has no plans to score."""

    def observe_flat(self, tenant: int = 0) -> tuple[float, ...]:
        """The observation as [time_step, active_gpus, queue_size, current_budget,
        incoming_jobs]."""
        return (self.time_step, self.active_gpus, self.queue_size, self.budget_usd,
                self.incoming_jobs)  # fmt: skip

    def snapshot(self, tenant: int) -> None:
        """No job queue of its own to forecast."""

    def commit(self, inputs: RoundInputs[GpuClusterAction]) -> Mapping[str, TenantOutcome]:
        """Play one step per action (the task has one tenant); its reward is the step's."""
        out = {}
        for tenant, action in inputs.actions:
            self.play(action.gpus_to_provision)
            out[tenant] = TenantOutcome({}, {}, [], [], 0.0, self.last_reward)
        return out

    def settle_reward(self, tenant: int) -> float:
        """Nothing accrues between steps: each step's reward came with its round."""
        return 0.0

    def waiting_sla_usd(self, tenant: int) -> float:
        """Nothing: each step books its queue's penalty at once."""
        return 0.0

    def play(self, gpus_to_provision: int) -> None:
        """One step of the task with the given action."""
        cfg = self.cfg
        emit = self._emit
        now = self.env.now
        active = max(0, self.active_gpus + gpus_to_provision)
        if active > self.active_gpus:
            emit(records.GpusReady("gpus_ready", now, TENANT, POOL, active - self.active_gpus))
        elif active < self.active_gpus:
            emit(
                records.GpusReleased("gpus_released", now, TENANT, POOL, self.active_gpus - active)
            )
        self.active_gpus = active
        incoming = int(self._arrivals())
        queue = self.queue_size + incoming
        processed = min(active, queue)
        queue -= processed
        cost = cfg.gpu_cost_usd * active
        sla = cfg.sla_usd_per_job * queue
        reward = cfg.job_reward_usd * processed - cost - sla
        self.queue_size = queue
        self.incoming_jobs = incoming
        self.budget_usd -= cost
        self.time_step += 1
        self.last_reward = reward
        self.total_reward += reward
        emit(records.JobsArrived("jobs_arrived", now, TENANT, incoming))
        emit(records.JobsProcessed("jobs_processed", now, TENANT, processed))
        emit(records.BudgetCharged("budget_charged", now, TENANT, POOL, active * cfg.step_s, cost))
        emit(records.SlaPenalty("sla_penalty", now, TENANT, None, queue * cfg.step_s, sla))
        emit(
            records.StepCompleted(
                "step_completed",
                now,
                TENANT,
                self.time_step,
                active,
                queue,
                reward,
                self.budget_usd,
            )
        )
        self.env.timeout(cfg.step_s).callbacks.append(self._next_step)

    def _step_due(self, _: simpy.Event) -> None:
        if self.budget_usd <= 0:
            self.end("budget_exhausted")
        elif self.time_step >= self.cfg.max_steps:
            self.end("max_steps")
        else:
            self.pending[0] = ["step"]

    def admitted(self) -> int:
        return 0  # its queue is a count: no job is held as an object

    def figures(self) -> dict[str, float | int | str]:
        return {}

    def end(self, reason: EndReason) -> None:
        if self.ended:
            return
        self.ended = reason
        self.pending.clear()
        self._emit(records.EpisodeEnded("episode_ended", self.env.now, None, reason))

    @property
    def score(self) -> float:
        """clamp(total_reward / (max_steps * 10), 0, 1)."""
        return min(max(self.total_reward / (self.cfg.max_steps * 10.0), 0.0), 1.0)
