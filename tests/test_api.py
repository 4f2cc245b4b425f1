"""`twin.api`, the twin as a library: each call is its command's own path (the same seed gives
the same log, byte for byte), results are typed, their tables are DataFrames; and `--json` on
`run`, `replay`, `play` and `arena` prints one machine-readable object on stdout."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from twin import api
from twin.errors import ConfigError
from twin.schema.summary import Summary

OPENB = "traces/alibaba-gpu-v2023-openb"


def twin_json(*args: str, cwd: Path | None = None) -> dict[str, Any]:
    """`twin ARGS --json`: stdout must be exactly one JSON object (the tables went to stderr)."""
    result = subprocess.run([sys.executable, "-m", "twin", *args, "--json"], cwd=cwd,
                            capture_output=True, text=True, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr
    (line,) = result.stdout.splitlines()
    parsed: dict[str, Any] = json.loads(line)
    return parsed


def unsessioned(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k != "session"} for e in events]


def test_a_run_is_the_command_s_run_byte_for_byte(tmp_path: Path) -> None:
    market = api.scenario("market", {"horizon_s": 7200, "tenants.0.budget_usd": 900})
    result = api.run(market, seed=3, out=tmp_path / "api")
    subprocess.run([sys.executable, "-m", "twin", "run", "--scenario", "market", "--seed", "3",
                    "--set", "horizon_s=7200", "--set", "tenants.0.budget_usd=900",
                    "--out", str(tmp_path / "cli")], check=True, capture_output=True)  # fmt: skip
    assert result.event_log == (tmp_path / "cli" / "events.jsonl").read_bytes()
    assert isinstance(result.summary, Summary)
    assert result.summary.end_t_s == 7200
    assert result.out == tmp_path / "api"


def test_a_run_s_tables_are_dataframes_that_agree_with_its_summary() -> None:
    result = api.run("market", seed=1)
    tenants = result.tenants()
    assert list(tenants["name"]) == [t.name for t in result.summary.tenants]
    assert tenants["reward_usd"].sum() == pytest.approx(
        sum(t.reward_usd for t in result.summary.tenants)
    )
    jobs = result.jobs()
    assert len(jobs) == result.summary.jobs.arrived
    assert (jobs["outcome"] == "finished").sum() == result.summary.jobs.finished
    assert len(result.table("round_committed")) == len(result.events("round_committed")) > 0
    assert result.out is None  # nothing asked to be kept: nothing left on disk


def test_overrides_take_a_mapping_or_set_assignments_alike() -> None:
    by_mapping = api.scenario("market", {"horizon_s": 3600, "pools.0.max_gpus": 50})
    by_assignments = api.scenario("market", ["horizon_s=3600", "pools.0.max_gpus=50"])
    assert by_mapping == by_assignments


def test_a_bad_override_is_the_twin_s_own_error() -> None:
    with pytest.raises(ConfigError, match="field no: Extra inputs are not permitted"):
        api.scenario("market", {"no.such.field": 1})


def test_a_played_session_is_twin_play_s_and_counts_each_agent(tmp_path: Path) -> None:
    agents = {"research": "negotiator", "inference": "negotiator"}
    played = api.play("market", agents, seed=2, out=tmp_path / "api")
    subprocess.run([sys.executable, "-m", "twin", "play", "--scenario", "market", "--seed", "2",
                    "--agents", "research=negotiator,inference=negotiator",
                    "--out", str(tmp_path / "cli")], check=True, capture_output=True)  # fmt: skip
    cli = [
        json.loads(line) for line in (tmp_path / "cli" / "events.jsonl").read_text().splitlines()
    ]
    assert unsessioned(played.events()) == unsessioned(cli)  # a session's id is drawn afresh
    assert set(played.agents) == set(agents)
    assert all(s.rounds > 0 for s in played.agents.values())
    written = json.loads((tmp_path / "api" / "agents.json").read_text())["agents"]
    assert written.keys() == agents.keys()


def test_a_loaded_scenario_plays_with_its_overrides() -> None:
    short = api.scenario("market", {"horizon_s": 3600})
    played = api.play(short, {"research": "fair_share"}, seed=0)
    assert played.summary.end_t_s == 3600


def test_play_refuses_a_tenant_or_agent_that_does_not_exist() -> None:
    with pytest.raises(ConfigError, match="no tenant 'ghost'"):
        api.play("market", {"ghost": "negotiator"})
    with pytest.raises(ConfigError, match="unknown policy 'genius'"):
        api.play("market", {"research": "genius"})


def test_a_replay_reads_the_shipped_traces_and_reports_what_it_read() -> None:
    pods, nodes = f"{OPENB}/openb_pod_list_default.csv", f"{OPENB}/openb_node_list_gpu_node.csv"
    replayed = api.replay(pods, cluster=nodes, max_jobs=300)
    assert replayed.report is not None
    assert replayed.report.jobs_replayed == 300
    assert len(replayed.jobs()) == 300


def test_a_sweep_is_one_row_per_run(tmp_path: Path) -> None:
    swept = api.sweep("default", seeds=2, policies=["autoscale", "static"],
                      grid={"horizon_s": [3600]}, out=tmp_path)  # fmt: skip
    frame = swept.frame()
    assert swept.runs == len(frame) == 4
    assert sorted(set(frame["policy"])) == ["autoscale", "static"]


def test_json_on_run_is_the_summary_it_wrote(tmp_path: Path) -> None:
    printed = twin_json("run", "--scenario", "market", "--seed", "4", "--out", str(tmp_path))
    assert printed["command"] == "run"
    assert printed["summary"] == json.loads((tmp_path / "summary.json").read_text())


def test_json_on_replay_carries_the_summary_and_what_the_replay_read() -> None:
    printed = twin_json("replay", "--trace", "traces/samples/itp_synthetic.csv", "--gpus", "64")
    assert printed["summary"]["jobs"]["arrived"] == printed["replay"]["jobs_replayed"] > 0


def test_json_on_play_carries_each_agent_s_report(tmp_path: Path) -> None:
    printed = twin_json("play", "--scenario", "market", "--agents", "research=negotiator",
                        "--out", str(tmp_path))  # fmt: skip
    written = json.loads((tmp_path / "agents.json").read_text())
    assert printed["agents"] == written["agents"]
    assert printed["summary"] == json.loads((tmp_path / "summary.json").read_text())


def test_json_on_arena_carries_its_boards(tmp_path: Path) -> None:
    printed = twin_json("arena", "--scenario", "market", "--agents", "negotiator",
                        "--regime", "mirror", "--seeds", "1", "--workers", "1",
                        "--out", str(tmp_path))  # fmt: skip
    assert printed["sessions"] >= 1
    (row,) = printed["mirrored"]
    assert row["agent"] == "negotiator"


def test_the_documented_example_runs_as_printed(tmp_path: Path) -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text()
    (block,) = re.findall(r"```python\n(.*?)```", page, re.S)
    result = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True,
                            text=True, check=False, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "runs" / "sweep" / "results.parquet").is_file()
