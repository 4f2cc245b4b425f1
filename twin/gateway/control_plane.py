"""The OpenEnv-compatible control plane: what its endpoints share, and its error codes.

Each websocket on `/ws` gets its own ego environment (`twin.rl.ego_env`); HTTP `/reset`,
`/step` and `/state` share one. Environment calls run in a worker thread, so a long stretch of
virtual time never blocks the event loop; each environment is used by one caller at a time.
"""

from __future__ import annotations

import asyncio
from typing import Any

from twin import __version__
from twin.errors import (
    EnvNotReadyError,
    RefusedError,
    SessionEndedError,
    TwinError,
)
from twin.rl.ego_env import EgoEnv, EgoState
from twin.schema.codes import ErrorCode
from twin.sim import scenarios
from twin.sim.kinds import kind_of

NAME = "cluster-twin"
DESCRIPTION = (
    "A digital twin of a GPU cluster: provision GPUs across pools for one tenant while others "
    "follow their policies; reward = value of finished work - GPU cost - SLA penalties."
)
STATE_SCHEMA: dict[str, Any] = EgoState.model_json_schema()
RESET_OPTIONS = ["seed", "episode_id", "scenario", "tenant", "overrides"]


def code_of(exc: TwinError) -> ErrorCode:
    """The wire code for an error an environment raised."""
    if isinstance(exc, RefusedError):
        return exc.code
    if isinstance(exc, EnvNotReadyError):
        return ErrorCode.NOT_READY
    if isinstance(exc, SessionEndedError):
        return ErrorCode.SESSION_ENDED
    return ErrorCode.VALIDATION_ERROR


class ControlPlane:
    """The default scenario, the shared HTTP environment, and the open-environment count."""

    def __init__(self, default_scenario: str) -> None:
        self.default_scenario = default_scenario
        self.http_env = EgoEnv(default_scenario)
        self.http_lock = asyncio.Lock()
        self.open_envs = 0
        self.kind = kind_of(scenarios.load(default_scenario))

    def metadata(self) -> dict[str, Any]:
        return {
            "name": NAME,
            "description": DESCRIPTION,
            "version": __version__,
            "default_scenario": self.default_scenario,
            "scenarios": scenarios.builtin_names(),
            "reset_options": RESET_OPTIONS,
        }

    def schema(self) -> dict[str, Any]:
        return {
            "action": self.kind.action.model_json_schema(),
            "observation": self.kind.observation.model_json_schema(),
            "state": STATE_SCHEMA,
        }
