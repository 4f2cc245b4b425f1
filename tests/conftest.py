"""Shared helpers: tiny scenarios and running them to a list of event dicts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.wheel import Installed, build_and_install
from twin.eventlog.log import EventLog
from twin.schema.scenario import ClusterScenario
from twin.sim.driver import Driver
from twin.sim.runner import run_episode

TRACES = Path(__file__).resolve().parents[1] / "traces"
"""The real public trace samples the project ships (each folder's SOURCE.md says whence)."""


def tiny(**fields: Any) -> ClusterScenario:
    """A one-pool, one-tenant cluster with no decisions unless fields say otherwise."""
    base: dict[str, Any] = {
        "name": "tiny",
        "pools": [{"name": "gpu", "gpu_type": "a100", "max_gpus": 8, "price_usd_per_gpu_h": 3.6}],
        "tenants": [{"name": "t", "initial_gpus": {"gpu": 2}, "policy": "static"}],
        "decisions": {"interval_s": None, "triggers": []},
    }
    base.update(fields)
    return ClusterScenario.model_validate(base)


def play(scenario: ClusterScenario, seed: int = 0, **kwargs: Any) -> list[dict[str, Any]]:
    """Run with each tenant's own built-in policy; the log as JSON objects."""
    _, driver = run_episode(scenario, seed=seed, keep_log=True, **kwargs)
    return list(driver.log.dicts())


def kinds(events: list[dict[str, Any]], *wanted: str) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] in wanted]


def drive(scenario: ClusterScenario, seed: int = 0) -> Driver:
    """A driver with its whole log kept, not yet advanced."""
    return Driver(scenario, seed=seed, log=EventLog("test", keep=True))


@pytest.fixture
def real_traces() -> Path:
    return TRACES


def twin_command(*args: str) -> subprocess.CompletedProcess[str]:
    """`twin ARGS...` in a fresh interpreter, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "twin", *args], capture_output=True, text=True, check=False
    )


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three real runs to analyse, made once through the `twin` command, each with
    `--export parquet,csv,perfetto --report`: a scenario run, a replay of openb (whose trace
    records start times) on its node inventory, and a negotiation session of three agents."""
    openb = TRACES / "alibaba-gpu-v2023-openb"
    root = tmp_path_factory.mktemp("analysis")
    outputs = ("--export", "parquet,csv,perfetto", "--report")
    commands = {
        "run": ("run", "--scenario", "default"),
        "replay": ("replay", "--trace", str(openb / "openb_pod_list_default.csv"),
                   "--cluster", str(openb / "openb_node_list_gpu_node.csv")),
        "session": ("play", "--agents",
                    "research=negotiator,inference=negotiator,batch=fair_share"),
    }  # fmt: skip
    for name, command in commands.items():
        result = twin_command(*command, "--out", str(root / name), *outputs)
        assert result.returncode == 0, result.stderr
    return {name: root / name for name in commands}


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The project's wheel, installed in a new virtual environment (see tests/wheel.py)."""
    return build_and_install(tmp_path_factory.mktemp("wheel"))
