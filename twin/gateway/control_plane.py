"""The OpenEnv-compatible control plane's state: the default scenario, the environments.

Each websocket on `/ws` gets its own ego environment (`twin.rl.ego_env`). Over HTTP, an
environment is addressed by its `episode_id` (returned by `/reset`); a request without one
uses the environment its client (address) reset last, so a lone client needs no bookkeeping
and clients never touch each other's environments. HTTP environments idle for
`env_idle_timeout_s` are dropped; all environments together are capped at `max_envs`.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twin import __version__
from twin.errors import CapacityReachedError, EnvNotReadyError
from twin.gateway.config import GatewayConfig
from twin.rl.ego_env import EgoEnv, EgoOptions, EgoState
from twin.sim import catalog, scenarios
from twin.sim.kinds import kind_of
from twin.sim.scenario_access import ScenarioAccess

NAME = "cluster-twin"
DESCRIPTION = (
    "A digital twin of a GPU cluster: provision GPUs across pools for one tenant while others "
    "follow their policies; reward = value of finished work - GPU cost - SLA penalties."
)
STATE_SCHEMA: dict[str, Any] = EgoState.model_json_schema()
RESET_OPTIONS = ["seed", "episode_id", "scenario", "tenant", "overrides"]


@dataclass
class HttpEnv:
    """One HTTP client's environment; calls on it take turns."""

    env: EgoEnv
    client: str
    last_used: float
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class ControlPlane:
    """The default scenario, the environments and their caps."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.default_scenario = config.scenario
        self.access = ScenarioAccess(Path(config.scenario_dir) if config.scenario_dir else None)
        self.http_envs: dict[str, HttpEnv] = {}
        self.latest: dict[str, str] = {}  # client -> the episode it reset last
        self.open_envs = 0  # websocket environments
        self.kind = kind_of(scenarios.load(config.scenario))

    def new_env(self) -> EgoEnv:
        """An environment that loads scenarios the way clients may."""
        return EgoEnv(self.default_scenario, loader=self.access.load)

    def environments(self) -> int:
        return self.open_envs + len(self.http_envs)

    def claim_socket_env(self) -> None:
        """Count one more websocket environment; CapacityReachedError at the cap."""
        self._check_cap()
        self.open_envs += 1

    def _check_cap(self) -> None:
        if self.environments() >= self.config.max_envs:
            raise CapacityReachedError(
                f"{self.environments()} environments open; the cap is {self.config.max_envs}"
            )

    def for_reset(self, client: str, options: EgoOptions, now: float) -> tuple[HttpEnv, EgoOptions]:
        """The HTTP environment a reset goes to (new if need be), and its options with the
        episode id it is addressed by."""
        episode = options.episode_id or self.latest.get(client) or secrets.token_hex(12)
        held = self.http_envs.get(episode)
        if held is None:
            self._check_cap()
            held = self.http_envs[episode] = HttpEnv(self.new_env(), client, now)
        held.last_used = now
        self.latest[client] = episode
        return held, options.model_copy(update={"episode_id": episode})

    def discard(self, episode: str) -> None:
        """Forget an HTTP environment (one whose first reset failed)."""
        held = self.http_envs.pop(episode, None)
        if held is not None and self.latest.get(held.client) == episode:
            del self.latest[held.client]

    def find(self, client: str, episode_id: str | None, now: float) -> HttpEnv:
        """The HTTP environment a step or state request addresses."""
        episode = episode_id or self.latest.get(client)
        held = self.http_envs.get(episode) if episode else None
        if held is None:
            raise EnvNotReadyError("no episode yet: reset first")
        held.last_used = now
        return held

    def reap(self, now: float) -> None:
        """Drop HTTP environments idle for longer than `env_idle_timeout_s`."""
        for episode, held in list(self.http_envs.items()):
            if now - held.last_used > self.config.env_idle_timeout_s and not held.lock.locked():
                del self.http_envs[episode]
                if self.latest.get(held.client) == episode:
                    del self.latest[held.client]

    def metadata(self) -> dict[str, Any]:
        return {
            "name": NAME,
            "description": DESCRIPTION,
            "version": __version__,
            "default_scenario": self.default_scenario,
            "scenarios": catalog.builtin_names(),
            "reset_options": RESET_OPTIONS,
        }

    def schema(self) -> dict[str, Any]:
        return {
            "action": self.kind.action.model_json_schema(),
            "observation": self.kind.observation.model_json_schema(),
            "state": STATE_SCHEMA,
        }
