"""Pinned event logs: the built-in scenarios, a trace replay and a recorded negotiation session.

Each log's SHA-256 is pinned in `golden/pinned_logs.json`. A change to the sim that alters any
domain event fails here; a deliberate change regenerates the pins with
`python -m tests.test_pinned_logs --write` and says why in its commit.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
from pathlib import Path

import orjson
import pytest

from tests.conftest import TRACES
from twin.replay.run import ReplayOptions, replay
from twin.sim import catalog, scenarios
from twin.sim.reproduce import reproduce_log
from twin.sim.runner import run_episode

GOLDEN = Path(__file__).parent / "golden"
PINS = GOLDEN / "pinned_logs.json"
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


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pins() -> dict[str, str]:
    pinned: dict[str, str] = json.loads(PINS.read_text())
    return pinned


@pytest.mark.parametrize(("name", "seed"), RUNS)
def test_a_builtin_scenario_log_is_pinned(name: str, seed: int, tmp_path: Path) -> None:
    assert digest(scenario_log(name, seed, tmp_path)) == pins()[f"{name}/s{seed}"]


@pytest.mark.parametrize("key", sorted(REPLAYS))
def test_an_itp_trace_replay_log_is_pinned(key: str, tmp_path: Path) -> None:
    assert digest(replay_events(key, tmp_path)) == pins()[key]


def test_a_recorded_negotiation_session_reproduces_byte_for_byte() -> None:
    recorded = gzip.decompress(SESSION.read_bytes())
    records = [orjson.loads(line) for line in recorded.splitlines()]
    kinds = {r["kind"] for r in records}
    assert {"placement_decided", "trade_settled", "auction_cleared", "offer_answered"} <= kinds
    assert reproduce_log(records) == recorded


def write_pins(tmp: Path) -> None:
    """Regenerate `pinned_logs.json` from the current sim."""
    out = {}
    for name, seed in RUNS:
        out[f"{name}/s{seed}"] = digest(scenario_log(name, seed, tmp / f"{name}-{seed}"))
    for key in sorted(REPLAYS):
        out[key] = digest(replay_events(key, tmp / key))
    PINS.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        write_pins(Path(tmp))
