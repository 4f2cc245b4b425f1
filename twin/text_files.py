"""A user's text file read whole (a scenario, a sweep spec, replay parameters, a token): UTF-8,
or a ConfigError that names the file and what was wrong, never a decoder's traceback."""

from __future__ import annotations

from pathlib import Path

from twin.errors import ConfigError


def read_text(path: Path, where: str | None = None) -> str:
    """The file's text; `where` names it in an error (default: its path)."""
    where = where or str(path)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        bad = exc.object[exc.start]
        raise ConfigError(
            f"{where}: not UTF-8 text (byte {exc.start} is {bad:#04x}); save it as UTF-8"
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"{where}: cannot read it ({exc.strerror or type(exc).__name__})"
        ) from None
