"""The exceptions the twin raises, under one base class.

TwinError                   the twin cannot do what was asked
├── ConfigError             a scenario, file or option is invalid
│   └── ScenarioNotFoundError   a scenario name is neither built in nor a file
├── TraceError              a trace file cannot be read
├── EventLogError           a run's event log cannot be read or exported
├── ActionError             an action names something the model does not have
├── SessionEndedError       a finished episode was asked to go on
├── EnvNotReadyError        an environment was used before its first reset
├── BoundError              a welfare bound's program was not solved (infeasible, time limit)
└── RefusedError            a client's request is refused with a wire code
    ├── FrameError          a frame is too large, not JSON, of an unknown type or invalid
    ├── RoundError          a round message cannot be taken (wrong round, bad offer, ...)
    ├── ControlError        an OpenEnv reset / step / state cannot be done
    └── CapacityReachedError    a session or environment is asked for beyond the cap
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twin.schema.codes import ErrorCode

if TYPE_CHECKING:
    from pydantic import ValidationError


class TwinError(Exception):
    """Raised when the twin cannot do what was asked; the base of all its errors."""


class ConfigError(TwinError):
    """Raised when a scenario, a file or an option is invalid; the message names the field."""

    @classmethod
    def first_of(cls, exc: ValidationError, prefix: str, whole: str) -> ConfigError:
        """`prefix` then the first invalid field of a validation error (`whole` if it is the
        input as a whole) and what is wrong with it."""
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or whole
        return cls(f"{prefix}{where}: {first['msg']}")


class ScenarioNotFoundError(ConfigError):
    """Raised when a scenario name is neither built in nor a readable file."""


class TraceError(TwinError):
    """Raised when a trace file cannot be read; the message names the file, line and field."""


class EventLogError(TwinError):
    """Raised when a run's event log cannot be read or exported; the message names the file
    and line."""


class ActionError(TwinError):
    """Raised when an action names a pool or tenant that the scenario does not have."""


class SessionEndedError(TwinError):
    """Raised when `step` is called on an episode that has already ended."""


class EnvNotReadyError(TwinError):
    """Raised when an environment is stepped or read before its first reset."""


class BoundError(TwinError):
    """Raised when the solver does not reach a welfare bound; `reason` says why in one word
    (`infeasible`, `time_limit`, `unbounded`, `numerical_difficulties`, `no_horizon`)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"bound not reached ({reason}): {detail}")
        self.reason = reason


class RefusedError(TwinError):
    """Raised when a client's request is refused; `code` is what the client sees."""

    code: ErrorCode = ErrorCode.VALIDATION_ERROR

    def __init__(self, code: ErrorCode, detail: str) -> None:
        super().__init__(detail)
        self.code = code


class FrameError(RefusedError):
    """Raised when a frame is too large, not JSON, of an unknown type, or fails its schema."""


class RoundError(RefusedError):
    """Raised when a round message cannot be taken: no such round, not asked, a bad offer."""


class ControlError(RefusedError):
    """Raised when an OpenEnv reset, step or state request cannot be carried out."""


class CapacityReachedError(RefusedError):
    """Raised when a session or an environment is asked for while the cap is reached."""

    def __init__(self, detail: str) -> None:
        super().__init__(ErrorCode.CAPACITY_REACHED, detail)


class StorageError(RefusedError):
    """The operator's log directory cannot be written: nothing the request asked for was done
    (a session not created, or not deleted)."""

    def __init__(self, detail: str) -> None:
        super().__init__(ErrorCode.STORAGE_UNAVAILABLE, detail)


class WorkLimitError(RefusedError):
    """A call would run more simulation work than the operator allows one call."""

    def __init__(self, detail: str) -> None:
        super().__init__(ErrorCode.CAPACITY_REACHED, detail)
