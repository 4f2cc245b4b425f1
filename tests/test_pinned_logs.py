"""Pinned event logs: the built-in scenarios, a trace replay and a recorded negotiation session.

Each log is pinned in `golden/pinned_logs.json` (its SHA-256, per-kind counts and block hashes;
small logs are kept whole under `golden/logs/`). A change to the sim that alters any domain event
fails here and says which kinds changed and the first event that differs; a deliberate change
regenerates the pins with `python -m tests.test_pinned_logs --write` and says why in its commit.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests import golden_logs
from tests.conftest import TRACES
from twin.replay.run import ReplayOptions, replay
from twin.sim import catalog, scenarios
from twin.sim.reproduce import reproduce_log
from twin.sim.runner import run_episode

GOLDEN = Path(__file__).parent / "golden"
PINS = GOLDEN / "pinned_logs.json"
LOGS = GOLDEN / "logs"
SESSION = GOLDEN / "negotiation_session.jsonl.gz"
ITP = TRACES / "microsoft-itp-elasticflow-2021/cluster10.csv"
SEEDS = (0, 7)
RUNS = [(name, seed) for name in catalog.builtin_names() for seed in SEEDS]
REPLAYS = {"itp-cluster10-fifo": ReplayOptions(), "itp-cluster10-sjf-backfill": ReplayOptions(
    policy="sjf", backfill=True)}  # fmt: skip


def scenario_log(name: str, seed: int, tmp: Path) -> bytes:
    run_episode(scenarios.load(name), seed=seed, out_dir=tmp)
    return (tmp / "events.jsonl").read_bytes()


def replay_events(key: str, tmp: Path) -> bytes:
    replay(ITP.resolve(), REPLAYS[key], out_dir=tmp)
    return (tmp / "events.jsonl").read_bytes()


def whole(key: str) -> Path:
    return LOGS / f"{key.replace('/', '-')}.jsonl.gz"


def check(key: str, data: bytes) -> None:
    pinned: dict[str, Any] = json.loads(PINS.read_text())[key]
    difference = golden_logs.difference(data, pinned, whole(key))
    assert not difference, difference


@pytest.mark.parametrize(("name", "seed"), RUNS)
def test_a_builtin_scenario_log_is_pinned(name: str, seed: int, tmp_path: Path) -> None:
    check(f"{name}/s{seed}", scenario_log(name, seed, tmp_path))


@pytest.mark.parametrize("key", sorted(REPLAYS))
def test_an_itp_trace_replay_log_is_pinned(key: str, tmp_path: Path) -> None:
    check(key, replay_events(key, tmp_path))


def test_a_failing_pin_names_the_changed_kinds_and_the_first_differing_event() -> None:
    log = b'{"kind":"a","x":1}\n{"kind":"b","x":2}\n'
    pinned = golden_logs.pin(log)
    changed = log.replace(b'"x":2', b'"x":3')
    assert golden_logs.difference(log, pinned, None) == ""
    message = golden_logs.difference(changed, pinned, None)
    assert "first difference within events 1-1024" in message
    assert '"x":3' in message


def test_a_recorded_negotiation_session_reproduces_byte_for_byte() -> None:
    recorded = gzip.decompress(SESSION.read_bytes())
    records = [orjson.loads(line) for line in recorded.splitlines()]
    kinds = {r["kind"] for r in records}
    assert {"placement_decided", "trade_settled", "auction_cleared", "offer_answered"} <= kinds
    assert reproduce_log(records) == recorded


def write_pins(tmp: Path) -> None:
    """Regenerate `pinned_logs.json` (and the logs kept whole) from the current sim."""
    logs = {f"{name}/s{seed}": scenario_log(name, seed, tmp / f"{name}-{seed}")
            for name, seed in RUNS}  # fmt: skip
    logs.update({key: replay_events(key, tmp / key) for key in sorted(REPLAYS)})
    LOGS.mkdir(exist_ok=True)
    out = {}
    for key, data in logs.items():
        out[key] = golden_logs.pin(data)
        golden_logs.keep(data, whole(key))
    PINS.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        write_pins(Path(tmp))
