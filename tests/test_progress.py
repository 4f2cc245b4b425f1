"""The long commands say how far they are and how long is left: on a terminal, `twin fill` and
`twin calibrate` draw a bar with the count done, the rate and an estimate (calibrate's is a
bound: its search often stops sooner), and `twin train` prints each generation with the time
left. Piped, the bars stay out of the output. (A terminal here is rich's `TTY_COMPATIBLE`.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import TRACES
from tests.test_fill import csv_file
from twin.fill.run import FillSpec, run


def _twin(*args: str, terminal: bool) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "100"}
    env.pop("TTY_COMPATIBLE", None)
    if terminal:
        env["TTY_COMPATIBLE"] = "1"
    return subprocess.run([sys.executable, "-m", "twin", *args], capture_output=True, text=True,
                          check=False, env=env)  # fmt: skip


def _lists(tmp_path: Path) -> tuple[Path, Path]:
    nodes = csv_file(tmp_path / "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model",
                     (f"n{i},64000,262144,{2 + 2 * (i % 3)},G2" for i in range(12)))  # fmt: skip
    rows = (f"p{i:03},2000,4096,1,{(250, 500, 1000)[i % 3]}" for i in range(60))
    pods = csv_file(tmp_path / "pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli", rows)
    return pods, nodes


def test_fill_draws_a_bar_with_an_estimate_on_a_terminal_and_none_in_a_pipe(
    tmp_path: Path,
) -> None:
    pods, nodes = _lists(tmp_path)
    args = ("fill", "--trace", str(pods), "--cluster", str(nodes), "--placement",
            "best_fit,fgd", "--seeds", "1-2", "--workers", "1")  # fmt: skip
    shown = _twin(*args, "--out", str(tmp_path / "a"), terminal=True)
    assert shown.returncode == 0, shown.stderr
    assert "filling" in shown.stdout
    assert "4 of 4 runs" in shown.stdout
    assert "eta" in shown.stdout
    piped = _twin(*args, "--out", str(tmp_path / "b"), terminal=False)
    assert piped.returncode == 0, piped.stderr
    assert "filling" not in piped.stdout + piped.stderr


def test_fill_tells_each_run_as_it_finishes(tmp_path: Path) -> None:
    pods, nodes = _lists(tmp_path)
    told: list[int] = []
    spec = FillSpec(pods, nodes, 1.3, None, None, False, "twin")
    run(spec, ["best_fit", "fgd"], [1, 2, 3], 2, told.append)
    assert told == [1, 2, 3, 4, 5, 6]


def test_calibrate_draws_a_bar_bounded_by_the_most_replays_its_search_can_take(
    tmp_path: Path,
) -> None:
    trace = TRACES / "samples" / "helios_synthetic.csv"
    done = _twin("calibrate", "--trace", str(trace), "--gpus", "32", "--workers", "1",
                 "--out", str(tmp_path), terminal=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "calibrating (at most)" in done.stderr
    assert "replays/s" in done.stderr
    assert "eta" in done.stderr


def test_train_prints_each_generation_with_the_time_left(tmp_path: Path) -> None:
    done = _twin("train", "--scenario", "market", "--generations", "3", "--population", "4",
                 "--elite", "2", "--seeds-per-generation", "2", "--validation-seeds", "2",
                 "--held-out", "2", "--workers", "1", "--out", str(tmp_path),
                 terminal=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("generation")]
    assert len(lines) == 4
    assert all(" left" in line for line in lines[1:3])
    assert " left" not in lines[-1]
