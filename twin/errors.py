"""The exceptions the twin raises, under one base class.

TwinError
├── ConfigError          a scenario or option is invalid
│   └── ScenarioNotFoundError a scenario name is neither built in nor a file
├── ActionError          an action names something the model does not have
└── SessionEndedError         a finished episode was asked to go on
"""

from __future__ import annotations


class TwinError(Exception):
    """Raised when the twin cannot do what was asked; the base of all its errors."""


class ConfigError(TwinError):
    """Raised when a scenario, a file or an option is invalid; the message names the field."""


class ScenarioNotFoundError(ConfigError):
    """Raised when a scenario name is neither built in nor a readable file."""


class TraceError(TwinError):
    """Raised when a trace file cannot be read; the message names the file, line and field."""


class ActionError(TwinError):
    """Raised when an action names a pool or tenant that the scenario does not have."""


class SessionEndedError(TwinError):
    """Raised when `step` is called on an episode that has already ended."""
