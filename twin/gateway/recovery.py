"""Sessions survive a crash: each session with a log directory keeps a sidecar beside its log
(`<id>.session.json`: its request with the tenant tokens, its read token, its scenario), and a
restarted gateway restores every session whose log has not ended, replaying the log's recorded
rounds to the last committed one. Agents reconnect with their hello and go on."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import structlog

from twin.errors import TwinError
from twin.schema.base import Frozen
from twin.schema.scenario import ClusterScenario
from twin.sim.reproduce import RecordedRound, complete_records, rounds

log = structlog.get_logger()
SIDECAR = ".session.json"


class Sidecar(Frozen):
    """What restoring a session needs beyond its event log. Holds secrets: mode 0600."""

    session_id: str
    request: dict[str, Any]
    read_token: str
    scenario: ClusterScenario
    owner: str


@dataclass(frozen=True)
class Restorable:
    sidecar: Sidecar
    recorded: list[RecordedRound]


def log_path(log_dir: str, session_id: str) -> Path:
    return Path(log_dir) / f"{session_id}.jsonl"


def save(log_dir: str, sidecar: Sidecar) -> None:
    """Write the sidecar readable by the server's user only."""
    path = Path(log_dir) / f"{sidecar.session_id}{SIDECAR}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(sidecar.model_dump_json().encode())


def keep_aside(log: Path) -> None:
    """Move an earlier run's log `<id>.jsonl` (and its exports, `<id>/`) to the first free
    `<id>.<n>.jsonl` (and `<id>.<n>/`), so a session of the same name writes over nothing."""
    if not log.exists():
        return
    n = 1
    while log.with_suffix(f".{n}.jsonl").exists() or log.with_suffix(f".{n}").exists():
        n += 1
    log.rename(log.with_suffix(f".{n}.jsonl"))
    exports = log.with_suffix("")
    if exports.is_dir():
        exports.rename(log.with_suffix(f".{n}"))


def forget(log_dir: str, session_id: str) -> None:
    """A deleted session is not restored (its log stays): its sidecar is removed, durably (the
    directory synced) before this returns. OSError if the directory will not allow it."""
    try:
        (Path(log_dir) / f"{session_id}{SIDECAR}").unlink()
    except FileNotFoundError:
        return
    fd = os.open(log_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def restorable(log_dir: str) -> Iterator[Restorable]:
    """The sessions in `log_dir` whose logs have not ended, with their recorded rounds."""
    for path in sorted(Path(log_dir).glob(f"*{SIDECAR}")):
        try:
            sidecar = Sidecar.model_validate(orjson.loads(path.read_bytes()))
            records = complete_records(log_path(log_dir, sidecar.session_id).read_bytes())
            if any(r["kind"] == "episode_ended" for r in records):
                continue
            _, recorded = rounds(records)
        except (OSError, ValueError, KeyError, TwinError) as exc:
            # One unreadable session must not stop the others (ValueError covers bad JSON
            # and a sidecar that fails validation).
            log.warning("session_not_restored", sidecar=path.name, error=type(exc).__name__)
            continue
        yield Restorable(sidecar, recorded)
