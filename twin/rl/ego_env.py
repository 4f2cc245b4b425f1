"""The ego environment: one agent acts for one tenant, every other tenant follows its policy.

It serves the OpenEnv control plane (one per websocket, one shared over HTTP) and works on any
scenario kind: a gpucluster scenario is the classic GPUClusterEnv task, a cluster scenario the
job-level model. Results follow OpenEnv's shape: observation, reward, done, metadata.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import ConfigDict, Field, StrictInt, ValidationError

from twin.errors import (
    ActionError,
    ConfigError,
    EnvNotReadyError,
    SessionEndedError,
    TwinError,
    WorkLimitError,
)
from twin.eventlog.log import EventLog
from twin.schema.actions import GpuClusterObservation, TenantObservation
from twin.schema.agentic import AgenticView
from twin.schema.base import Frozen
from twin.schema.scenario import Scenario
from twin.sim import scenarios
from twin.sim.driver import PAUSED, Driver
from twin.sim.meter import UNMETERED, Meter
from twin.sim.tenant_policies import TenantPolicy

Loader = Callable[[Any, Sequence[str]], Scenario]
"""Loads what a reset names: a scenario's name, or (where the loader allows) an inline mapping."""
Admit = Callable[[Scenario], float]
"""Refuses (raises) a scenario the environment may not run, once loaded with its overrides;
else the jobs its episode is expected to bring."""
Ob = TypeVar("Ob", bound=Frozen)
A = TypeVar("A", bound=Frozen)


def play_round(driver: Driver[Ob, A], actions: Mapping[str, A],
               defaults: Mapping[str, TenantPolicy[Ob, A]], tenant: str) -> float:  # fmt: skip
    """Commit one round (`actions`, the other asked tenants by `defaults`); `tenant`'s reward."""
    book = driver.book()
    for who, action in actions.items():
        book.propose(who, action)
    outcome = driver.commit(book, defaults).get(tenant)
    return outcome.reward if outcome is not None else 0.0


def to_turn(driver: Driver[Ob, A], tenant: str,
            defaults: Mapping[str, TenantPolicy[Ob, A]],
            meter: Meter = UNMETERED) -> float:  # fmt: skip
    """Run the other tenants' rounds by their policies until `tenant` must decide (or the
    episode ends, when its reward is settled); `tenant`'s reward meanwhile. Past a limit of
    `meter` (looked at every `SLICE_EVENTS` events) the episode ends (`work_limit`) and
    WorkLimitError says which."""
    reward = 0.0
    metered = meter != UNMETERED
    end_s = time.thread_time() + (meter.cpu_s or 0.0)
    while (batch := driver.advance(SLICE_EVENTS if metered else None)) is not None:
        if batch is PAUSED:
            over = meter.over(driver.model.admitted(), driver.log.records, end_s)
            if over is not None:
                driver.stop("work_limit")
                raise WorkLimitError(
                    f"{over}; the episode ended (lower the scenario's arrival rates, or shorten it)"
                )
            continue
        if tenant in batch.reasons:
            return reward
        reward += play_round(driver, {}, defaults, tenant)
    return reward + driver.settle_reward(tenant)


SLICE_EVENTS = 512  # events between two looks at the clock, when a call's time is bounded


class EgoOptions(Frozen):
    """What `reset` accepts (other keys a client sends are ignored)."""

    model_config = ConfigDict(frozen=True, extra="ignore", allow_inf_nan=False)

    seed: StrictInt | None = Field(default=None, ge=0)
    episode_id: str | None = None
    scenario: str | dict[str, Any] | None = None
    tenant: str | None = None
    overrides: list[str] = Field(default_factory=list, max_length=64)


class EgoMetadata(Frozen):
    episode_id: str
    tenant: str
    t_s: float
    step_count: int
    end_reason: str | None
    handle: str | None = Field(
        None, description="Over HTTP, what reaches this environment again (server-issued)."
    )


class EgoResult(Frozen):
    """What `reset` and `step` return (OpenEnv's observation shape)."""

    observation: TenantObservation | GpuClusterObservation | AgenticView
    reward: float | None
    done: bool
    metadata: EgoMetadata


class EgoState(Frozen):
    """What `state` returns."""

    episode_id: str
    step_count: int
    scenario: str
    tenant: str
    t_s: float
    total_reward: float
    done: bool
    end_reason: str | None


class EgoEnv:
    """One isolated environment over the driver. Errors are TwinErrors naming the problem."""

    def __init__(self, default_scenario: str, *, loader: Loader = scenarios.load,
                 meter: Meter = UNMETERED) -> None:  # fmt: skip
        """`loader` loads the scenarios a reset names (the default one is always the
        operator's own); `meter` bounds what an episode may use while it runs. `admit`, if its
        owner sets it, refuses a scenario (with its overrides) before an episode starts."""
        self.default_scenario = default_scenario
        self.loader = loader
        self.admit: Admit | None = None
        self.public: Callable[[str], str] | None = None  # an error's detail as a client sees it
        self.expected_jobs = 0.0  # of the episode admitted last (by `admit`)
        self.meter = meter
        self.driver: Driver[Frozen, Frozen] | None = None  # of whatever kind a reset names
        self.tenant = ""
        self.episode_id = ""
        self.steps = 0
        self.total_reward = 0.0
        self._defaults: Mapping[str, TenantPolicy[Frozen, Frozen]] = {}

    def reset(self, options: EgoOptions) -> EgoResult:
        """A new episode; the ego tenant's first observation. An error's detail is said as
        `public` has it (a server's clients are not told its paths or a file's lines)."""
        try:
            return self._reset(options)
        except TwinError as exc:
            if self.public is not None:
                exc.args = (self.public(str(exc)),)
            raise

    def _reset(self, options: EgoOptions) -> EgoResult:
        seed = options.seed or 0
        if options.scenario:
            scenario = self.loader(options.scenario, options.overrides)
        else:
            scenario = scenarios.load(self.default_scenario, options.overrides)
        if self.admit is not None:
            self.expected_jobs = self.admit(scenario)
        self.episode_id = options.episode_id or secrets.token_hex(6)
        # the episode keeps its state, not its history: its records pass and are let go
        log = EventLog(self.episode_id, keep=False)
        driver: Driver[Frozen, Frozen] = Driver(scenario, seed=seed, session=self.episode_id,
                                                log=log)  # fmt: skip
        self.tenant = options.tenant or driver.tenants[0]
        if self.tenant not in driver.tenants:
            raise ConfigError(f"unknown tenant {self.tenant!r}; tenants: {driver.tenants}")
        self.driver = driver
        self._defaults = driver.default_policies()
        self.steps, self.total_reward = 0, 0.0
        self._advance_to_ego()
        return self._result(None)

    def step(self, raw_action: dict[str, Any]) -> EgoResult:
        """Apply the ego tenant's action; run on until it must decide again."""
        driver = self._need_driver()
        if driver.ended:
            raise SessionEndedError(f"episode {self.episode_id} is over; reset it")
        try:
            action = driver.parse_action(raw_action)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "action"
            raise ActionError(f"action field {where}: {first['msg']}") from None
        reward = self._commit({self.tenant: action})
        reward += self._advance_to_ego()
        self.steps += 1
        self.total_reward += reward
        return self._result(reward)

    def state(self) -> EgoState:
        driver = self._need_driver()
        return EgoState(
            episode_id=self.episode_id,
            step_count=self.steps,
            scenario=driver.scenario.name,
            tenant=self.tenant,
            t_s=driver.now_s,
            total_reward=self.total_reward,
            done=driver.ended is not None,
            end_reason=driver.ended,
        )

    # -- internals ------------------------------------------------------------------------

    def _need_driver(self) -> Driver[Frozen, Frozen]:
        if self.driver is None:
            raise EnvNotReadyError("no episode yet: reset first")
        return self.driver

    def _advance_to_ego(self) -> float:
        return to_turn(self._need_driver(), self.tenant, self._defaults, self.meter)

    def _commit(self, actions: dict[str, Frozen]) -> float:
        return play_round(self._need_driver(), actions, self._defaults, self.tenant)

    def _result(self, reward: float | None) -> EgoResult:
        driver = self._need_driver()
        return EgoResult(
            observation=driver.observe(self.tenant),
            reward=reward,
            done=driver.ended is not None,
            metadata=EgoMetadata(
                episode_id=self.episode_id,
                tenant=self.tenant,
                t_s=driver.now_s,
                step_count=self.steps,
                end_reason=driver.ended,
            ),
        )


def reset_options(raw: Mapping[str, Any]) -> EgoOptions:
    """Reset options from a JSON object; ConfigError names the first bad field."""
    try:
        return EgoOptions.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError.first_of(exc, "reset option ", "options") from None


__all__: Sequence[str] = ("EgoEnv", "EgoOptions", "EgoResult", "EgoState", "reset_options")
