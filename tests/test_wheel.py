"""The wheel is the product: what a pip user installs carries the traces the built-ins and the
docs name, the libraries its commands need, and no top-level module another package owns.
(The README's tour runs from this same install: tests/test_readme.py.)"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.wheel import Installed


def twin(installed: Installed, cwd: Path, *args: str,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run([str(installed.bin / "twin"), *args], cwd=cwd, capture_output=True,
                          text=True, check=False, env=env, timeout=300)  # fmt: skip


def test_the_wheel_installs_only_the_twin_s_own_top_level_modules(installed: Installed) -> None:
    assert installed.top_level() == {"twin", "twin_agents"}


def test_the_built_in_trace_scenarios_play_from_any_directory(
    installed: Installed, tmp_path: Path
) -> None:
    for scenario in ("openb-tenants", "dlrm-tenants"):
        result = twin(installed, tmp_path, "run", "--scenario", scenario, "--seed", "1",
                      "--set", "horizon_s=3600")  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert scenario in result.stdout


def test_a_trace_not_found_says_where_it_looked_and_how_to_name_another_folder(
    installed: Installed, tmp_path: Path
) -> None:
    result = twin(installed, tmp_path, "replay", "--trace", "mine/jobs.csv")
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("twin: error: trace file 'mine/jobs.csv' not found")
    assert "a shipped trace is named traces/..." in line
    assert "$TWIN_TRACES" in line


def test_the_agents_run_as_python_m_twin_agents(installed: Installed, tmp_path: Path) -> None:
    result = subprocess.run([str(installed.bin / "python"), "-m", "twin_agents", "--help"],
                            cwd=tmp_path, capture_output=True, text=True, check=False)  # fmt: skip
    assert result.returncode == 0
    assert result.stdout.startswith("usage: python -m twin_agents")


def test_the_documented_trace_paths_work_from_any_directory(
    installed: Installed, tmp_path: Path
) -> None:
    openb = "traces/alibaba-gpu-v2023-openb"
    result = twin(installed, tmp_path, "replay", "--trace", f"{openb}/openb_pod_list_default.csv",
                  "--cluster", f"{openb}/openb_node_list_gpu_node.csv",
                  "--params", f"{openb}/calibrated-params.json", "--max-jobs", "200")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "openb_pod_list_default.csv" in result.stdout
