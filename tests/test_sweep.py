"""`twin sweep`: the same runs give the same results.parquet on a local process pool and on a
real local Ray, and an interrupted sweep resumes without redoing what it finished."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import twin_command
from twin.sweep.spec import SweepSpec, runs

# 2 tasks x 8 seeds x 2 policies x 2 budgets = 64 runs of the classic step model (fast).
GRID = ["--scenario", "gpucluster-easy,gpucluster-medium", "--seeds", "8",
        "--policy", "baseline,random", "--set", "budget_usd=500,900"]  # fmt: skip


def sweep(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    result = twin_command("sweep", *GRID, "--out", str(out), "--workers", "2", *extra)
    assert result.returncode == 0, result.stderr
    return result


def test_a_local_pool_and_a_local_ray_give_the_same_results(tmp_path: Path) -> None:
    pool = sweep(tmp_path / "pool")
    ray = sweep(tmp_path / "ray", "--engine", "ray")
    assert "64 runs (64 now, 0 done before)" in pool.stdout
    assert "64 runs (64 now, 0 done before)" in ray.stdout
    a = (tmp_path / "pool" / "results.parquet").read_bytes()
    assert a == (tmp_path / "ray" / "results.parquet").read_bytes()
    table = pq.read_table(tmp_path / "pool" / "results.parquet")
    assert table.num_rows == 64
    assert len(set(table.column("key").to_pylist())) == 64
    for column in ("scenario", "seed", "policy", "set.budget_usd", "reward", "score",
                   "jobs.arrived", "cost_usd"):  # fmt: skip
        assert column in table.column_names


def test_an_interrupted_sweep_resumes_without_redoing_finished_runs(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    args = [sys.executable, "-m", "twin", "sweep", "--scenario", "default", "--seeds", "6",
            "--out", str(out), "--workers", "1"]  # fmt: skip
    # Its own process group, killed whole as a terminal's interrupt would, workers included.
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while len(list((out / "runs").glob("*.json"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = {p.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*.json")}
    assert 2 <= len(finished) < 6, "killed part-way"
    assert not (out / "results.parquet").exists()
    again = twin_command(*args[3:])
    assert again.returncode == 0, again.stderr
    assert f"6 runs ({6 - len(finished)} now, {len(finished)} done before)" in again.stdout
    for name, mtime in finished.items():
        assert (out / "runs" / name).stat().st_mtime_ns == mtime, "finished runs are not redone"
    assert pq.read_table(out / "results.parquet").num_rows == 6


def test_a_spec_file_samples_the_grid_reproducibly(tmp_path: Path) -> None:
    spec = SweepSpec(scenarios=["gpucluster-easy"], seeds=5, policies=["baseline", "random"],
                     set={"arrival_rate": [1, 2, 3]}, sample=7)  # fmt: skip
    first, second = runs(spec), runs(spec)
    assert [r.key for r in first] == [r.key for r in second]
    assert len(first) == 7
    (tmp_path / "sweep.yaml").write_text(
        "scenarios: [gpucluster-easy]\nseeds: 5\npolicies: [baseline, random]\n"
        "set: {arrival_rate: [1, 2, 3]}\nsample: 7\n"
    )
    result = twin_command("sweep", "--spec", str(tmp_path / "sweep.yaml"),
                          "--out", str(tmp_path / "out"), "--workers", "1", "--plot")  # fmt: skip
    assert result.returncode == 0, result.stderr
    table = pq.read_table(tmp_path / "out" / "results.parquet")
    assert sorted(table.column("key").to_pylist()) == sorted(r.key for r in first)
    page = (tmp_path / "out" / "sweep.html").read_text()
    assert page.count("<figure><svg") == 1
    assert "<script" not in page
    assert "arrival_rate" in page  # a row of panels per swept input


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scenario", "nope"], "nope"),
        (["--set", "budget_usd"], "expected PATH=VALUE[,VALUE...]"),
        (["--scenario", "gpucluster-easy", "--set", "max_steps=-1"], "max_steps"),
        (["--workers", "0"], "argument --workers: at least 1 (got 0)"),
        (
            ["--scenario", "gpucluster-easy", "--engine", "ray", "--ray-address", "127.0.0.1:1"],
            "cannot reach the Ray cluster at 127.0.0.1:1",
        ),
    ],
)
def test_bad_sweeps_are_refused_before_anything_runs(
    tmp_path: Path, args: list[str], message: str
) -> None:
    result = twin_command("sweep", *args, "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out" / "runs").exists()


def interrupted_output(proc: subprocess.Popen[str]) -> str:
    """The stderr of a command sent SIGINT, once it exits; a command still running a minute
    later is killed, and the test fails with what it had printed (rather than leaving it and
    its pipes behind for the next test)."""
    try:
        return proc.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        pytest.fail(f"still running 60 s after SIGINT; it had printed:\n{stderr}")


@pytest.mark.parametrize("command", ["sweep", "arena"])
def test_ctrl_c_is_one_line_saying_what_is_saved_and_how_to_go_on(
    tmp_path: Path, command: str
) -> None:
    """A terminal's interrupt (SIGINT to the whole process group, workers included): exit 130,
    one line naming the runs saved, no traceback from the command or its workers."""
    out = tmp_path / command
    if command == "sweep":
        args = ["sweep", "--scenario", "default", "--seeds", "40", "--workers", "2"]
    else:
        args = ["arena", "--scenario", "market", "--agents", "negotiator,stepper", "--seeds",
                "40", "--workers", "2"]  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "twin", *args, "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while len(list((out / "runs").glob("*.json"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    stderr = interrupted_output(proc)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    saved = len(list((out / "runs").glob("*.json")))
    assert last == (f"twin: interrupted; {saved} runs saved in {out}: run the same command "
                    "again to resume")  # fmt: skip


# A pool of quick tasks: the command's own process spends its time waiting for the next to finish,
# where Ctrl-C then lands. (Forked workers find `task` in this `__main__`.)
BUSY_POOL = """
import time
from twin.sweep.execute import local

def task(i):
    time.sleep(0.002)
    return i

try:
    for n, _ in enumerate(local(task, list(range(20000)), 2, warmed=lambda: None)):
        if n == 50:
            print("waiting", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


def test_ctrl_c_stops_a_pool_whatever_moment_of_its_wait_it_lands_in() -> None:
    """Ten interrupts at spread moments of a busy pool's wait: each stops it within seconds.
    (Waiting with `concurrent.futures.wait` hung six times in ten: an interrupt while it took the
    pending futures' locks left some held, and the pool's thread waited on them forever.)"""
    for delay_s in [i * 0.03 for i in range(10)]:
        proc = subprocess.Popen([sys.executable, "-c", BUSY_POOL], stdout=subprocess.PIPE,
                                text=True, start_new_session=True)  # fmt: skip
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "waiting"
        time.sleep(delay_s)
        os.killpg(proc.pid, signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            pytest.fail(f"still running 20 s after an interrupt {delay_s:.2f} s into its wait")
        assert out.strip() == "interrupted"


@pytest.mark.parametrize("command", ["calibrate", "fill"])
def test_ctrl_c_in_a_command_that_writes_at_its_end_is_one_line_too(
    tmp_path: Path, command: str
) -> None:
    openb = Path(__file__).resolve().parents[1] / "traces" / "alibaba-gpu-v2023-openb"
    pods, nodes = openb / "openb_pod_list_default.csv", openb / "openb_node_list_gpu_node.csv"
    if command == "calibrate":
        args = ["calibrate", "--trace", str(pods), "--cluster", str(nodes), "--workers", "2",
                "--out", str(tmp_path / "calibrate")]  # fmt: skip
    else:
        args = ["fill", "--trace", str(pods), "--cluster", str(nodes), "--seeds", "0-9",
                "--workers", "2", "--out", str(tmp_path / "fill")]  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "twin", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    time.sleep(4)  # the workers are busy by now
    os.killpg(proc.pid, signal.SIGINT)
    stderr = interrupted_output(proc)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        f"twin: interrupted; nothing written (twin {command} writes its results when it ends)"
    )


def test_ray_takes_the_runs_in_consecutive_chunks_a_few_per_worker() -> None:
    from twin.sweep.execute import CHUNKS_PER_WORKER, chunked

    items = list(range(100))
    chunks = chunked(items, 2)
    assert [i for chunk in chunks for i in chunk] == items
    assert len(chunks) == 2 * CHUNKS_PER_WORKER  # of 13 runs, the last of 9
    assert chunked(items[:3], 16) == [[0], [1], [2]]
    assert chunked([], 4) == []
