"""The agentic-RL model: RL steps of trajectories that alternate LLM generation with actions on
external resources, allocated by the scenario's orchestration policy.

Each step starts `trajectories_per_step` trajectory processes; each generates (a decode delay),
then submits an action and waits for it to complete, for its number of turns. The step's
rollout ends when its slowest trajectory ends; training follows. The orchestrator owns the
external resources; every action's submission, start and finish is logged, and at the end the
unit-seconds each resource was held and busy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from twin.errors import ActionError
from twin.schema import records
from twin.schema.agentic import AgenticAction, AgenticRlScenario, AgenticView
from twin.schema.vocabulary import EndReason
from twin.sim.agentic.actions import RESOURCES, TENANT, Action, Usage
from twin.sim.agentic.policies import orchestrator
from twin.sim.jobrecord import JobRecord
from twin.sim.model import TenantOutcome, World
from twin.sim.round import RoundInputs
from twin.sim.sampling import sampler


class AgenticModel:
    """The model kind `agentic_rl` (one tenant, `rl`, whose orchestrator decides in-model)."""

    def __init__(
        self, world: World, cfg: AgenticRlScenario, sources: Iterable[Iterable[JobRecord]] = ()
    ) -> None:
        self.env, self.cfg = world.env, cfg
        self.emit = world.log.append
        self.tenant_names = [TENANT]
        self.pending: dict[int, list[str]] = {}
        self.ended: EndReason | None = None
        self.step = 0
        streams = world.streams
        self.turns = sampler(cfg.turns, streams.get("agentic/turns"))
        self.decode_s = sampler(cfg.decode_s, streams.get("agentic/decode"))
        self.work_s = {a.name: sampler(a.work_s, streams.get(f"agentic/work/{a.name}"))
                       for a in cfg.actions}  # fmt: skip
        self.sandbox_start_s = sampler(cfg.sandbox_start_s, streams.get("agentic/sandbox"))
        shares = np.array([a.share for a in cfg.actions], dtype=float)
        self._kind_rng = streams.get("agentic/kinds")
        self._kind_p = shares / shares.sum()
        self._seq = 0
        self.usage = {
            "cpu": Usage(cfg.cpu_cores),
            "gpu": Usage(8 * cfg.gpu_nodes),
            "api": Usage(cfg.api_quota),
        }
        self._act_s, self._acts = 0.0, 0  # completions since the last decision
        self._act_settled_s = 0.0  # completion seconds not yet settled as reward
        self.orchestrator = orchestrator(self)
        self.env.process(self._steps())
        if cfg.orchestration == "agent":
            self.env.process(self._ticks())

    # -- the processes ----------------------------------------------------------------------

    def _steps(self) -> Any:
        cfg, env = self.cfg, self.env
        for step in range(cfg.steps):
            self.step = step
            start = env.now
            rollouts = [env.process(self._trajectory(step, i))
                        for i in range(cfg.trajectories_per_step)]  # fmt: skip
            yield env.all_of(rollouts)
            rollout_s = env.now - start
            yield env.timeout(cfg.train_s)
            self.emit(
                records.RlStepFinished(
                    "rl_step_finished", env.now, TENANT, step, env.now - start, rollout_s
                )
            )
        self.end("max_steps")

    def _ticks(self) -> Any:
        """Ask the rl tenant to set the orchestrator's knobs now and every interval."""
        while not self.ended:
            self.pending[0] = ["tick"]
            yield self.env.timeout(self.cfg.decision_interval_s)

    def completed(self, act_s: float) -> None:
        """An action completed after `act_s` seconds."""
        self._act_s += act_s
        self._acts += 1
        self._act_settled_s += act_s

    def _trajectory(self, step: int, i: int) -> Any:
        env, orch = self.env, self.orchestrator
        name = f"s{step}-t{i}"
        start = env.now
        yield from orch.trajectory_started(name)
        turns = max(1, round(self.turns()))
        for _ in range(turns):
            yield env.timeout(self.decode_s())
            kind = self.cfg.actions[int(self._kind_rng.choice(len(self._kind_p), p=self._kind_p))]
            self._seq += 1
            action = Action(f"a{self._seq}", name, kind, self.work_s[kind.name](), env.now,
                            env.event())  # fmt: skip
            self.emit(
                records.ActionSubmitted(
                    "action_submitted",
                    env.now,
                    TENANT,
                    action.action_id,
                    name,
                    kind.name,
                    kind.resource,
                )
            )
            orch.submit(action)
            yield action.done
        orch.trajectory_ended(name)
        self.emit(
            records.TrajectoryFinished(
                "trajectory_finished", env.now, TENANT, name, step, env.now - start, turns
            )
        )

    # -- the Model protocol -----------------------------------------------------------------

    def score_round(self, tenants: list[int]) -> None:
        """No decision rounds: the orchestrator allocates inside the model."""

    def observe(self, tenant: int, reasons: list[str]) -> AgenticView:
        orch = self.orchestrator
        return AgenticView(
            t_s=self.env.now,
            step=self.step,
            queued={r: orch.queued(r) for r in RESOURCES},
            running=dict(orch.in_flight),
            free_units={r: orch.free(r) for r in RESOURCES},
            loaded_services=orch.loaded(),
            recent_act_s=self._act_s / self._acts if self._acts else None,
        )

    def observe_flat(self, tenant: int) -> tuple[float, ...]:
        orch = self.orchestrator
        return (self.env.now, float(self.step), *(float(orch.queued(r)) for r in RESOURCES))

    def snapshot(self, tenant: int) -> None:
        """No job queue of its own to forecast."""

    def commit(self, inputs: RoundInputs[AgenticAction]) -> Mapping[str, TenantOutcome]:
        """Set the elastic orchestrator's knobs (orchestration `agent` only)."""
        self._act_s, self._acts = 0.0, 0  # the next view reports from this decision on
        services = [s.name for s in self.cfg.services]
        for _, action in inputs.actions:
            unknown = sorted(set(action.pinned) - set(services))
            if unknown:
                raise ActionError(f"unknown service {unknown[0]!r}; services: {services}")
            configure = getattr(self.orchestrator, "configure", None)
            if configure is not None and self.cfg.orchestration == "agent":
                configure(action.max_units, frozenset(action.pinned))
        return {TENANT: TenantOutcome(reward=self.settle_reward(0))}

    def settle_reward(self, tenant: int) -> float:
        """Minus the hours of action completion time since the last settlement."""
        reward, self._act_settled_s = -self._act_settled_s / 3600, 0.0
        return reward

    def waiting_sla_usd(self, tenant: int) -> float:
        """Nothing: completion time is booked as it accrues."""
        return 0.0

    def admitted(self) -> int:
        return self._seq

    def figures(self) -> dict[str, float | int | str]:
        return {}

    def end(self, reason: EndReason) -> None:
        """Close the books: every resource's held and busy unit-seconds."""
        if self.ended:
            return
        self.ended = reason
        now = self.env.now
        self.orchestrator.close()
        for resource, use in self.usage.items():
            use.change(now)
            if use.capacity:
                self.emit(
                    records.ResourcesUsed(
                        "resources_used",
                        now,
                        None,
                        resource,
                        use.held_unit_s,
                        use.busy_unit_s,
                        use.capacity,
                    )
                )
        self.emit(records.EpisodeEnded("episode_ended", now, None, reason))
