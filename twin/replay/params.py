"""Replay parameters read from a file: a calibration's result or bare parameters."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from twin.errors import ConfigError
from twin.schema.scheduling import ReplayParams
from twin.text_files import read_text


def read_params(path: Path) -> ReplayParams:
    """Replay parameters from a calibration file (its `params`) or a bare params file."""
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not JSON (line {exc.lineno}: {exc.msg})") from None
    if isinstance(data, dict) and "params" in data:
        data = data["params"]
    try:
        return ReplayParams.model_validate(data)
    except ValidationError as exc:
        raise ConfigError.first_of(exc, f"{path}: params ", "(top level)") from None
