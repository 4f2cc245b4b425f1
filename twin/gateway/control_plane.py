"""The OpenEnv-compatible control plane's state: the default scenario, the environments.

Each websocket on `/ws` gets its own ego environment (`twin.rl.ego_env`) once it sends its first
frame. Over HTTP, an environment is reached by the handle its first `/reset` returned, within
the client that opened it (the operator, by its token, or an address): no other client reaches
it, whatever it names. HTTP environments idle for `env_idle_timeout_s` are dropped. How many
environments each client may hold, and whose give way under pressure: `ControlPlane`.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import Counter, OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from twin import __version__
from twin.errors import CapacityReachedError, EnvNotReadyError
from twin.gateway.access import OPERATOR
from twin.gateway.config import GatewayConfig
from twin.gateway.episode_size import admit_nodes, admit_size
from twin.gateway.worker_time import WorkerTime
from twin.rl.ego_env import EgoEnv, EgoOptions, EgoState
from twin.sim import catalog, scenarios
from twin.sim.kinds import kind_of
from twin.sim.meter import Meter
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
EVICTED_WHY = ("closed to make room: the server was at its environment cap, and it was the "
               "oldest idle environment of a client holding more than others")  # fmt: skip
EVICTED_KEPT = 4096  # evicted HTTP episodes remembered, to tell their owners why
T = TypeVar("T")


@dataclass(eq=False)
class Held:
    """One environment a client holds (over HTTP, or a websocket's); calls on it take turns.
    `tell` is how its owner hears that it was closed to make room (a websocket is told and
    closed; an HTTP client hears it on its next call)."""

    env: EgoEnv
    client: str
    last_used: float
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    handle: str | None = None  # an HTTP environment's
    tell: Callable[[str], None] | None = None  # a websocket's
    running: bool = False  # a call of it is on a thread now (queued ones are not)
    queued: asyncio.Task[Any] | None = None  # its call waiting for (or on) a thread
    evicted: str | None = None  # why it was closed to make room, once it was


class ControlPlane:
    """The default scenario, the environments and their caps.

    Environments are budgeted per identity (the operator, by its token, else an address): each
    holds at most `max_envs_per_client` (the operator any number), and all but the operator
    together at most `max_envs - reserved_envs`, so no group of addresses can take every slot.
    Under that ceiling, one more environment closes the oldest idle one held by an identity that
    holds more than the asker (its owner is told): what a few clients took, a new one can take
    back, up to an equal share."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.default_scenario = config.scenario
        self.access = ScenarioAccess(Path(config.scenario_dir) if config.scenario_dir else None)
        self.http_envs: dict[tuple[str, str], Held] = {}  # by (client, handle)
        self.sockets: set[Held] = set()  # websocket environments
        self.latest: dict[str, str] = {}  # the operator -> the handle it reset last
        self.held: Counter[str] = Counter()  # environments by client, both kinds
        self.evicted: OrderedDict[tuple[str, str], str] = OrderedDict()  # why, to tell; bounded
        self.kind = kind_of(scenarios.load(config.scenario))
        self.workers = WorkerTime(config.env_workers, reserved_for=OPERATOR)
        self._tasks: set[asyncio.Task[None]] = set()  # owned till done
        self._schema: dict[str, Any] | None = None
        self.mcp_tools: list[dict[str, Any]] | None = None  # built on the first tools/list

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` (telling a client something) without waiting for it."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def call(self, held: Held, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` for `held`, one call of it at a time, in its client's share of the
        threads. Only a call running on a thread makes the environment busy: one waiting its
        turn (behind its own client's calls) is no shield against being closed to make room,
        and is then answered with why (EnvNotReadyError)."""
        async with held.lock:
            if held.evicted is not None:
                raise EnvNotReadyError(f"this episode was {held.evicted}; reset to start another")

            def running() -> T:
                held.running = True
                try:
                    return fn(*args)
                finally:
                    held.running = False

            task = asyncio.ensure_future(self.workers.run(held.client, running))
            held.queued = task
            try:
                return await task
            except asyncio.CancelledError:
                me = asyncio.current_task()
                if held.evicted is None or (me is not None and me.cancelling()):
                    raise
                raise EnvNotReadyError(
                    f"this episode was {held.evicted} while this call waited its turn; reset "
                    "to start another"
                ) from None
            finally:
                held.queued = None

    def close(self) -> None:
        self.workers.close()

    def new_env(self, client: str) -> EgoEnv:
        """An environment of `client`'s that loads scenarios the way clients may, simulates for
        at most `max_call_s` CPU seconds a call, and admits an episode within the per-episode
        limit and (but for the operator's) within what the client's other environments leave
        of its budget of jobs; once admitted, the episode is metered as it runs and ended at
        `max_episode_jobs` jobs brought or `max_episode_events` events written, whatever its
        estimate said."""
        meter = Meter(cpu_s=self.config.max_call_s, jobs=self.config.max_episode_jobs,
                      records=self.config.max_episode_events)  # fmt: skip
        env = EgoEnv(self.default_scenario, loader=self.access.load, meter=meter)

        def admit(scenario: Any) -> float:
            admit_nodes(scenario, self.config.max_episode_nodes)
            if client == OPERATOR:
                return admit_size(scenario, self.config.max_episode_jobs)
            others = sum(h.env.expected_jobs for h in (*self.http_envs.values(), *self.sockets)
                         if h.client == client and h.env is not env)  # fmt: skip
            return admit_size(scenario, self.config.max_episode_jobs,
                              within=(client, others, self.config.max_client_jobs))  # fmt: skip

        env.admit = admit
        env.public = self.access.public
        return env

    def environments(self) -> int:
        return len(self.sockets) + len(self.http_envs)

    def _claim(self, client: str) -> None:
        """Count one more environment for `client`, making room where the rules allow;
        CapacityReachedError past a cap."""
        cap = self.config.max_envs_per_client
        if client != OPERATOR and self.held[client] >= cap:
            # Never one of its own to make room: clients that share an address (two processes
            # on a host, everyone behind a proxy) are one identity, and an episode is only ever
            # ended through its handle.
            raise CapacityReachedError(
                f"{client} holds {self.held[client]} environments; the limit per client is "
                f"{cap}: reset one you hold by its handle to start anew in it (an HTTP one idle "
                f"for {self.config.env_idle_timeout_s:g} s is dropped)"
            )
        if self._full(client):
            mine = self.held[client]
            richer = self._idle(lambda h: h.client not in (client, OPERATOR)
                                and self.held[h.client] > mine + 1)  # fmt: skip
            if not self._evict(richer, EVICTED_WHY):
                shared = self.config.max_envs - self.config.operator_reserve
                raise CapacityReachedError(
                    f"{self.environments()} environments open (clients without the operator's "
                    f"token share {shared} of the cap of {self.config.max_envs}), and no client "
                    f"holding more than {client} has one idle"
                )
        self.held[client] += 1

    def _full(self, client: str) -> bool:
        if client == OPERATOR:
            return self.environments() >= self.config.max_envs
        shared = self.environments() - self.held[OPERATOR]
        return shared >= self.config.max_envs - self.config.operator_reserve

    def _idle(self, which: Callable[[Held], bool]) -> Held | None:
        """The environment idle longest (no call of it running; one may be queued) of those
        `which` picks."""
        idle = [h for h in (*self.http_envs.values(), *self.sockets)
                if which(h) and not h.running]  # fmt: skip
        return min(idle, key=lambda h: h.last_used, default=None)

    def _evict(self, held: Held | None, why: str) -> bool:
        """Close `held` to make room, and tell its owner `why`; False when there is none."""
        if held is None:
            return False
        held.evicted = why
        if held.queued is not None and not held.running:
            held.queued.cancel()  # its caller is answered with why
        if held.tell is not None:
            self.release_socket_env(held)
            held.tell(f"this environment was {why}")
        elif held.handle is not None:
            self.discard(held.client, held.handle)
            self.evicted[held.client, held.handle] = why
            while len(self.evicted) > EVICTED_KEPT:
                self.evicted.popitem(last=False)
        return True

    def release(self, client: str) -> None:
        self.held[client] -= 1
        if self.held[client] <= 0:
            del self.held[client]

    def claim_socket_env(self, client: str, now: float, tell: Callable[[str], None]) -> Held:
        """A websocket environment for `client`; CapacityReachedError at a cap."""
        self._claim(client)
        held = Held(self.new_env(client), client, now, tell=tell)
        self.sockets.add(held)
        return held

    def release_socket_env(self, held: Held) -> None:
        if held in self.sockets:  # not already given up to make room
            self.sockets.discard(held)
            self.release(held.client)

    def open_http(self, client: str, now: float, handle: str | None = None) -> str:
        """A new HTTP environment for `client`, and the handle that reaches it: unguessable and
        issued here, so a client-chosen name reaches nothing another client holds, whatever
        address the two share (the operator, known by its token, may name its own)."""
        handle = handle or secrets.token_urlsafe(18)
        self._claim(client)
        self.http_envs[client, handle] = Held(self.new_env(client), client, now, handle=handle)
        return handle

    def for_reset(self, client: str, options: EgoOptions, handle: str | None, now: float, *,
                  issued: bool = False) -> tuple[Held, EgoOptions, str, bool]:  # fmt: skip
        """The HTTP environment a reset goes to (new without a handle), its options with the
        episode's id (the client's, else the handle), its handle, and whether it is new. An
        `issued` handle (an MCP session's id, which the gateway issued) opens on first use."""
        if client == OPERATOR:  # its token is its secret: it may name and default its episodes
            handle = handle or options.episode_id or self.latest.get(client)
        named = client == OPERATOR or issued
        new = handle is None or (named and (client, handle) not in self.http_envs)
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

    def find(self, client: str, handle: str | None, now: float) -> Held:
        """The HTTP environment of `client` a request addresses by `handle` (the operator's
        default: the one it reset last)."""
        handle = handle or (self.latest.get(client) if client == OPERATOR else None)
        held = self.http_envs.get((client, handle)) if handle else None
        if held is None:
            why = self.evicted.get((client, handle)) if handle is not None else None
            if why is not None:
                raise EnvNotReadyError(f"this episode was {why}; reset to start another")
            raise EnvNotReadyError(
                "no such episode: reset first, then address the episode by the handle the reset "
                "returned (metadata.handle)"
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
        them), so the observation's schema names them too. Built once: it never changes."""
        if self._schema is None:
            observation = self.kind.observation.model_json_schema()
            observation["properties"] = {**observation["properties"], **ENVELOPE_FIELDS}
            self._schema = {
                "action": self.kind.action.model_json_schema(),
                "observation": observation,
                "state": STATE_SCHEMA,
            }
        return self._schema
