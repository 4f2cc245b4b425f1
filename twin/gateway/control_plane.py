"""The OpenEnv-compatible control plane's state: the default scenario, the environments.

Each websocket on `/ws` gets its own ego environment (`twin.rl.ego_env`) once it sends its first
frame. Over HTTP, an environment is addressed by its `episode_id` (returned by `/reset`) within
the client that opened it (the operator, by its token, or an address): each client has its own
episode ids, and never reaches another's. A request without an id uses the
environment its client reset last, so a lone client needs no bookkeeping. HTTP environments
idle for `env_idle_timeout_s` are dropped; all environments together are capped at `max_envs`,
and those of one address at `max_envs_per_client`.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from twin import __version__
from twin.errors import CapacityReachedError, EnvNotReadyError
from twin.gateway.access import OPERATOR
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
ENVELOPE_FIELDS: dict[str, Any] = {
    "reward": {"anyOf": [{"type": "number"}, {"type": "null"}], "default": None,
               "description": "The step's reward (the tenant's return over it, in dollars)."},
    "done": {"type": "boolean", "default": False, "description": "Whether the episode ended."},
    "metadata": {"type": "object", "default": {}, "description": "What else the step reports."},
}  # fmt: skip
RESET_OPTIONS = ["seed", "episode_id", "scenario", "tenant", "overrides"]
T = TypeVar("T")


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
        self.http_envs: dict[tuple[str, str], HttpEnv] = {}  # by (client, handle)
        self.latest: dict[str, str] = {}  # the operator -> the handle it reset last
        self.open_envs = 0  # websocket environments
        self.held: Counter[str] = Counter()  # environments by client, both kinds
        self.kind = kind_of(scenarios.load(config.scenario))
        # Environment calls run on their own threads, at most half of them for one client, so
        # a client's heavy steps neither block the server's loop nor every other client.
        self.pool = ThreadPoolExecutor(config.env_workers, thread_name_prefix="twin-env")
        self.per_client_calls = max(config.env_workers // 2, 1)
        self.gates: dict[str, tuple[asyncio.Semaphore, int]] = {}  # client -> (gate, users)

    async def run(self, client: str, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on an environment thread, in `client`'s share of them."""
        gate, users = self.gates.get(client) or (asyncio.Semaphore(self.per_client_calls), 0)
        self.gates[client] = (gate, users + 1)
        try:
            async with gate:
                return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)
        finally:
            gate, users = self.gates[client]
            if users <= 1:
                del self.gates[client]
            else:
                self.gates[client] = (gate, users - 1)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    def new_env(self) -> EgoEnv:
        """An environment that loads scenarios the way clients may, and simulates for at most
        `max_call_s` CPU seconds a call."""
        return EgoEnv(self.default_scenario, loader=self.access.load,
                      max_cpu_s=self.config.max_call_s)  # fmt: skip

    def environments(self) -> int:
        return self.open_envs + len(self.http_envs)

    def claim(self, client: str) -> None:
        """Count one more environment for `client`; CapacityReachedError past a cap."""
        if self.environments() >= self.config.max_envs:
            raise CapacityReachedError(
                f"{self.environments()} environments open; the cap is {self.config.max_envs}"
            )
        cap = self.config.max_envs_per_client
        if client != OPERATOR and self.held[client] >= cap:
            raise CapacityReachedError(
                f"{client} holds {self.held[client]} environments; the limit per client is {cap}"
            )
        self.held[client] += 1

    def release(self, client: str) -> None:
        self.held[client] -= 1
        if self.held[client] <= 0:
            del self.held[client]

    def claim_socket_env(self, client: str) -> None:
        """Count one more websocket environment; CapacityReachedError at a cap."""
        self._make_room(client)
        self.claim(client)
        self.open_envs += 1

    def release_socket_env(self, client: str) -> None:
        self.release(client)
        self.open_envs -= 1

    def open_http(self, client: str, now: float, handle: str | None = None) -> str:
        """A new HTTP environment for `client`, and the handle that reaches it: unguessable and
        issued here, so a client-chosen name reaches nothing another client holds, whatever
        address the two share (the operator, known by its token, may name its own)."""
        handle = handle or secrets.token_urlsafe(18)
        self._make_room(client)
        self.claim(client)
        self.http_envs[client, handle] = HttpEnv(self.new_env(), client, now)
        return handle

    def _make_room(self, client: str) -> None:
        """A client at its limit that opens another environment gives up its own oldest idle
        HTTP episode (never another client's)."""
        if client == OPERATOR or self.held[client] < self.config.max_envs_per_client:
            return
        idle = [(held.last_used, handle) for (owner, handle), held in self.http_envs.items()
                if owner == client and not held.lock.locked()]  # fmt: skip
        if idle:
            self.discard(client, min(idle)[1])

    def for_reset(self, client: str, options: EgoOptions, handle: str | None,
                  now: float) -> tuple[HttpEnv, EgoOptions, str, bool]:  # fmt: skip
        """The HTTP environment a reset goes to (new without a handle), its options with the
        episode's id (the client's, else the handle), its handle, and whether it is new."""
        if client == OPERATOR:  # its token is its secret: it may name and default its episodes
            handle = handle or options.episode_id or self.latest.get(client)
        new = handle is None or (client == OPERATOR and (client, handle) not in self.http_envs)
        reached = self.open_http(client, now, handle) if new else str(handle)
        held = self.find(client, reached, now)
        if client == OPERATOR:
            self.latest[client] = reached
        episode = options.episode_id or reached
        return held, options.model_copy(update={"episode_id": episode}), reached, new

    def discard(self, client: str, handle: str) -> None:
        """Forget an HTTP environment (one whose first reset failed, or idle)."""
        if self.http_envs.pop((client, handle), None) is None:
            return
        self.release(client)
        if self.latest.get(client) == handle:
            del self.latest[client]

    def find(self, client: str, handle: str | None, now: float) -> HttpEnv:
        """The HTTP environment of `client` a request addresses by `handle` (the operator's
        default: the one it reset last)."""
        handle = handle or (self.latest.get(client) if client == OPERATOR else None)
        held = self.http_envs.get((client, handle)) if handle else None
        if held is None:
            raise EnvNotReadyError(
                "no such episode: reset first, then address the episode by the handle the reset "
                "returned (metadata.handle); a client at its limit that resets anew gives up its "
                "oldest idle episode"
            )
        held.last_used = now
        return held

    def reap(self, now: float) -> None:
        """Drop HTTP environments idle for longer than `env_idle_timeout_s`."""
        for (client, episode), held in list(self.http_envs.items()):
            if now - held.last_used > self.config.env_idle_timeout_s and not held.lock.locked():
                self.discard(client, episode)

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
        """The action, observation and state schemas. OpenEnv reads an observation with the
        envelope's `reward`, `done` and `metadata` beside its fields (its `Observation` carries
        them), so the observation's schema names them too."""
        observation = self.kind.observation.model_json_schema()
        observation["properties"] = {**observation["properties"], **ENVELOPE_FIELDS}
        return {
            "action": self.kind.action.model_json_schema(),
            "observation": observation,
            "state": STATE_SCHEMA,
        }
