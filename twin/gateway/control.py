"""The OpenEnv-compatible control plane: reset / step / state over WS `/ws` and HTTP.

Ego-agent mode: the environment's agent acts for one tenant (the first, or `tenant` at reset);
every other tenant follows its default policy. A gpucluster scenario is the classic
GPUClusterEnv task: action `{"gpus_to_provision": n}`. Observations follow OpenEnv's shape:
`{"observation": {...}, "reward": float | null, "done": bool, "metadata": {...}}`.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from pydantic import BaseModel, ValidationError

from twin import __version__
from twin.errors import TwinError
from twin.schema.actions import (
    GpuClusterAction,
    GpuClusterObservation,
    ProvisionAction,
    TenantObservation,
)
from twin.schema.scenario import GpuClusterScenario, Scenario
from twin.schema.wire import ErrorCode
from twin.sim import scenarios
from twin.sim.driver import Driver
from twin.sim.gpucluster import GpuClusterModel
from twin.sim.policies import cluster_policy

NAME = "cluster-twin"
DESCRIPTION = (
    "A digital twin of a GPU cluster: provision GPUs across pools for one tenant while others "
    "follow their policies; reward = value of finished work - GPU cost - SLA penalties."
)


class ControlError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class EgoEnv:
    """One isolated environment (one per websocket, one shared for HTTP)."""

    def __init__(self, default_scenario: str) -> None:
        self.default_scenario = default_scenario
        self.driver: Driver | None = None
        self.tenant = ""
        self.episode_id = ""
        self.steps = 0
        self.total_reward = 0.0
        self._defaults: dict[str, Any] = {}

    def reset(self, options: dict[str, Any]) -> dict[str, Any]:
        seed = options.get("seed")
        if seed is not None and (not isinstance(seed, int) or seed < 0):
            raise ControlError(
                ErrorCode.VALIDATION_ERROR, f"seed must be a non-negative integer, got {seed!r}"
            )
        name = options.get("scenario") or self.default_scenario
        try:
            scenario: Scenario = scenarios.load(str(name), options.get("overrides") or ())
        except TwinError as exc:
            raise ControlError(ErrorCode.VALIDATION_ERROR, str(exc)) from None
        self.episode_id = str(options.get("episode_id") or secrets.token_hex(6))
        self.driver = Driver(scenario, seed=seed or 0, session=self.episode_id)
        tenants = self.driver.model.tenant_names
        self.tenant = str(options.get("tenant") or tenants[0])
        if self.tenant not in tenants:
            raise ControlError(
                ErrorCode.VALIDATION_ERROR, f"unknown tenant {self.tenant!r}; tenants: {tenants}"
            )
        self._defaults = (
            {}
            if isinstance(scenario, GpuClusterScenario)
            else {t.name: cluster_policy(t.policy, seed or 0) for t in scenario.tenants}
        )
        self.steps, self.total_reward = 0, 0.0
        self._advance_to_ego()
        return self._result(None)

    def step(self, action: dict[str, Any]) -> dict[str, Any]:
        driver = self._need_driver()
        if driver.ended:
            raise ControlError(
                ErrorCode.SESSION_ENDED, f"episode {self.episode_id} is over; reset it"
            )
        model_cls: type[BaseModel] = (
            GpuClusterAction if isinstance(driver.model, GpuClusterModel) else ProvisionAction
        )
        try:
            parsed = model_cls.model_validate(action)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "action"
            raise ControlError(
                ErrorCode.VALIDATION_ERROR, f"action field {where}: {first['msg']}"
            ) from None
        try:
            reward = self._commit({self.tenant: parsed}, {self.tenant: "agent"})
        except TwinError as exc:
            raise ControlError(ErrorCode.VALIDATION_ERROR, str(exc)) from None
        reward += self._advance_to_ego()
        self.steps += 1
        self.total_reward += reward
        return self._result(reward)

    def state(self) -> dict[str, Any]:
        driver = self._need_driver()
        return {
            "episode_id": self.episode_id,
            "step_count": self.steps,
            "scenario": driver.scenario.name,
            "tenant": self.tenant,
            "t_s": driver.now_s,
            "total_reward": self.total_reward,
            "done": driver.ended is not None,
            "end_reason": driver.ended,
        }

    # -- internals ------------------------------------------------------------------------

    def _need_driver(self) -> Driver:
        if self.driver is None:
            raise ControlError(ErrorCode.NOT_READY, "no episode yet: reset first")
        return self.driver

    def _advance_to_ego(self) -> float:
        """Run other tenants' rounds with their defaults until the ego tenant must decide."""
        driver = self._need_driver()
        reward = 0.0
        while (batch := driver.advance()) is not None:
            if self.tenant in batch.reasons:
                return reward
            reward += self._commit({}, {})
        if isinstance(driver.model, GpuClusterModel):
            return reward
        return reward + driver.model.settle_reward(driver.model.tenant_names.index(self.tenant))

    def _commit(self, actions: dict[str, BaseModel], policies: dict[str, str]) -> float:
        driver = self._need_driver()
        batch = driver.batch
        asked = list(batch.reasons) if batch else []
        for tenant in asked:
            if tenant not in actions and tenant in self._defaults:
                view = driver.observe(tenant)
                assert isinstance(view, TenantObservation)
                actions[tenant] = self._defaults[tenant].decide(view)
                policies[tenant] = f"default:{self._defaults[tenant].name}"
        outcomes = driver.act(actions, policies)  # type: ignore[arg-type]
        if isinstance(driver.model, GpuClusterModel):
            return driver.model.last_reward if self.tenant in actions else 0.0
        return outcomes[self.tenant].reward if self.tenant in outcomes else 0.0

    def _result(self, reward: float | None) -> dict[str, Any]:
        driver = self._need_driver()
        obs = driver.observe(self.tenant)
        return {
            "observation": obs.model_dump(mode="json"),
            "reward": reward,
            "done": driver.ended is not None,
            "metadata": {
                "episode_id": self.episode_id,
                "tenant": self.tenant,
                "t_s": driver.now_s,
                "step_count": self.steps,
                "end_reason": driver.ended,
            },
        }


class ControlPlane:
    """What the OpenEnv endpoints share: the default scenario and the HTTP environment.

    Environment calls run in a worker thread (a long stretch of virtual time never blocks the
    event loop); each environment is used by one caller at a time.
    """

    def __init__(self, default_scenario: str) -> None:
        self.default_scenario = default_scenario
        self.http_env = EgoEnv(default_scenario)
        self.http_lock = asyncio.Lock()
        self.open_envs = 0
        kind = scenarios.load(default_scenario).kind
        self.action_model: type[BaseModel] = (
            GpuClusterAction if kind == "gpucluster" else ProvisionAction
        )
        self.observation_model: type[BaseModel] = (
            GpuClusterObservation if kind == "gpucluster" else TenantObservation
        )

    def metadata(self) -> dict[str, Any]:
        return {
            "name": NAME,
            "description": DESCRIPTION,
            "version": __version__,
            "default_scenario": self.default_scenario,
            "scenarios": scenarios.builtin_names(),
            "reset_options": ["seed", "episode_id", "scenario", "tenant", "overrides"],
        }

    def schema(self) -> dict[str, Any]:
        return {
            "action": self.action_model.model_json_schema(),
            "observation": self.observation_model.model_json_schema(),
            "state": STATE_SCHEMA,
        }


STATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "episode_id": {"type": "string"},
        "step_count": {"type": "integer"},
        "scenario": {"type": "string"},
        "tenant": {"type": "string"},
        "t_s": {"type": "number"},
        "total_reward": {"type": "number"},
        "done": {"type": "boolean"},
        "end_reason": {"type": ["string", "null"]},
    },
    "required": ["episode_id", "step_count", "done"],
}
