"""The twin reads a real Slurm (Debian's 22.05, openapi v0.0.38), as it is: a private Slurm
started for these tests (tests/slurm.py) with emulated GPU nodes, jobs asking GPUs every way
users ask them, and a workload from ITP's cluster10 driven through it (tests/slurm_workload.py)
with `twin watch --slurm` following it (its live score against the offline one, its page in
Chromium). The same reader is held to captures of that Slurm shipped in
traces/samples/slurm-22.05/ (arrays, held and dependent jobs among them), for machines where no
Slurm can start.

Where no Slurm can be started here (its packages missing, not root, a daemon that will not
start) the tests that need one skip with the reason: the only skip of this module."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.browser import chromium, new_page
from tests.slurm import Nodes, NoSlurmError, Slurm, slurm
from tests.slurm_workload import Done, drive, oracle, plan, score
from twin.errors import ConfigError
from twin.forecast.exports import ranked_unused
from twin.forecast.slurm import from_slurm, slurm_instant
from twin.schema.snapshot import Snapshot

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "traces" / "samples" / "slurm-22.05"
BF_INTERVAL_S = 5


@pytest.fixture(scope="module")
def shapes() -> Iterator[Slurm]:
    """Two 8-GPU H100 nodes in `gpu`; one node of 6 H100s and 2 H200s in `gpu` and `big`; one
    more H100 node, drained."""
    try:
        with slurm([Nodes("r", 2, 8, "h100"), Nodes("x", 1, 8, "h100"),
                    Nodes("m", 1, 6, "h100", partitions=("gpu", "big"), extra=(("h200", 2),))],
                   bf_interval_s=BF_INTERVAL_S) as cluster:  # fmt: skip
            yield cluster
    except NoSlurmError as exc:
        pytest.skip(f"no Slurm here: {exc}")  # the only skip of this module


def ask_every_way(cluster: Slurm) -> dict[str, str]:
    """Jobs asking GPUs each way Slurm users do (held longer than the test: they wait or run),
    by what they asked."""
    cluster.run("scontrol", "update", "nodename=x1", "state=drain", "reason=maintenance")
    return {
        "--gres=gpu:h100:4": cluster.sbatch("--gres=gpu:h100:4", "--time=5", run_s=300),
        "--gpus=8": cluster.sbatch("--gpus=8", "--time=5", run_s=300),
        "--gpus-per-task=1 -n2": cluster.sbatch("--gpus-per-task=1", "-n2", "--time=5", run_s=300),
        "--gres=gpu:h100:1,gpu:h200:1": cluster.sbatch(
            "--gres=gpu:h100:1,gpu:h200:1", "-p", "big", "--time=5", run_s=300
        ),
        "--gpus=16": cluster.sbatch("--gpus=16", "-N2", "--time=5", run_s=300),
        "no GPU": cluster.sbatch("--time=5", run_s=300),
    }


def read_shapes(into: Path) -> tuple[dict[str, float], dict[str, str | None], Snapshot]:
    state = from_slurm(into / "squeue.json", into / "sinfo.json")
    jobs = [*state.running, *state.waiting]
    return ({j.job_id: j.gpus for j in jobs}, {j.job_id: j.gpu_type for j in jobs}, state)


def test_gpus_asked_every_way_are_read_from_a_real_slurm(shapes: Slurm, tmp_path: Path) -> None:
    asked = ask_every_way(shapes)
    taken = shapes.snapshot(tmp_path)
    gpus, models, state = read_shapes(tmp_path)
    assert gpus == {asked["--gres=gpu:h100:4"]: 4, asked["--gpus=8"]: 8,
                    asked["--gpus-per-task=1 -n2"]: 2, asked["--gres=gpu:h100:1,gpu:h200:1"]: 2,
                    asked["--gpus=16"]: 16}  # fmt: skip
    assert models[asked["--gres=gpu:h100:4"]] == "h100"
    assert models[asked["--gres=gpu:h100:1,gpu:h200:1"]] is None  # any model stands in
    unused = state.unused_fields
    assert unused["jobs without GPUs (not played)"] == 1
    assert unused["jobs asking for several GPU models (any model stands in)"] == 1
    assert unused["nodes DRAIN (GPUs left out)"] == 1
    assert unused["nodes with several GPU models (a node per model)"] == 1
    pools = {p.name: p.max_gpus for p in state.pools}
    assert pools == {"h100": 8 + 8 + 6, "h200": 2}  # m1 once (two partitions), x1 drained
    assert taken - BF_INTERVAL_S - 2 <= state.at_s <= taken


@dataclass(frozen=True)
class Driven:
    """A driven run: its captures, what Slurm did with each job, and `twin watch --slurm`
    that followed it (its --out and its address, still serving)."""

    into: Path
    done: list[Done]
    watch_out: Path
    watch_url: str


WATCH = ["--interval-s", "2", "--samples", "50", "--step-min", "1", "--port", "0"]


@pytest.fixture(scope="module")
def driven(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Driven]:
    """24 jobs of ITP's cluster10 (runs scaled to 8-40 s, limits 1.5-4x in whole minutes) on
    two 8-GPU nodes at an offered load of 2, half asking with --gres, half with --gpus,
    snapshotted every 5 s (about a minute), with `twin watch --slurm` following it."""
    into = tmp_path_factory.mktemp("driven")
    watch_out = tmp_path_factory.mktemp("watch")
    try:
        with slurm([Nodes("r", 2, 8, "h100")], bf_interval_s=BF_INTERVAL_S) as cluster:
            watch = subprocess.Popen([sys.executable, "-m", "twin", "watch", "--slurm", *WATCH,
                                      "--out", str(watch_out)], env=cluster.env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)  # fmt: skip
            try:
                assert watch.stdout is not None
                url = watch.stdout.readline().split("serving ")[1].split(" ")[0]
                planned = plan(jobs=24, total_gpus=16, node_gpus=8, load=2.0, run_s=(8, 40))
                done = drive(cluster, planned, into, every_s=5, gpu_flag="both")
                settled(url)
                yield Driven(into, done, watch_out, url)
            finally:
                os.killpg(watch.pid, signal.SIGINT)
                _, err = watch.communicate(timeout=60)
                assert "Traceback" not in err, err
    except NoSlurmError as exc:
        pytest.skip(f"no Slurm here: {exc}")  # the only skip of this module


def view_of(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "watch.json", timeout=10) as r:
        view: dict[str, Any] = json.loads(r.read())
    return view


def settled(url: str, timeout_s: float = 60) -> None:
    """Until the watch has seen every job it forecast start (a capture after the last one
    did), and nothing waits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        view = view_of(url)
        if view["open_pairs"] == 0 and view["waiting"] == 0 and view["score"]["pairs"] > 0:
            return
        time.sleep(0.5)
    raise AssertionError(f"the watch did not settle: {view_of(url)}")


def test_the_instant_is_the_export_s_own_never_a_pending_job_s_estimate(
    driven: Driven,
) -> None:
    """Each pending job's start_time in squeue --json is Slurm's estimate, in the future:
    taking the newest time in the export for its instant put it ahead of the capture."""
    into, done = driven.into, driven.done
    assert len(done) == 24
    assert {d.state for d in done} == {"COMPLETED"}
    ahead = 0
    for snap in sorted(p for p in into.iterdir() if p.is_dir()):
        taken = float((snap / "taken.txt").read_text())
        state = from_slurm(snap / "squeue.json", snap / "sinfo.json")
        assert taken - BF_INTERVAL_S - 2 <= state.at_s <= taken, snap.name
        jobs = json.loads((snap / "squeue.json").read_text())["jobs"]
        estimates = [j["start_time"] for j in jobs if j["job_state"] == "PENDING"]
        ahead += any(t > taken for t in estimates)
        assert "jobs without GPUs (not played)" not in state.unused_fields  # --gpus too
    assert ahead > 0  # the estimates were there to be mistaken for the instant


def test_twin_watch_scores_its_forecasts_of_the_real_slurm_as_an_offline_backtest_does(
    driven: Driven,
) -> None:
    """`twin watch --slurm` re-forecast at each change and scored each forecast when its job
    started: its rolling score equals the one an offline backtest of the same captures gives
    (tests/slurm_workload.score, the figures docs/forecast.md reports), and the twin is nearer
    than Slurm's own estimate."""
    live = view_of(driven.watch_url)["score"]
    pairs = score(driven.watch_out, driven.done, samples=50)
    assert live["pairs"] == len(pairs) >= 20
    twin = [abs(p.twin_s - p.started_s) for p in pairs if p.twin_s is not None]
    now = [abs(p.taken_s - p.started_s) for p in pairs]
    own = [abs(p.slurm_s - p.started_s) for p in pairs if p.slurm_s is not None]
    inside = [p.twin_p10_s <= p.started_s <= p.twin_p90_s for p in pairs  # type: ignore[operator]
              if p.twin_p10_s is not None]  # fmt: skip
    assert live["twin"]["median_abs_error_s"] == statistics.median(twin)
    assert live["starts_now"]["median_abs_error_s"] == statistics.median(now)
    assert live["estimate"]["median_abs_error_s"] == statistics.median(own)
    assert live["twin_coverage_80"] == sum(inside) / len(inside)
    assert statistics.median(twin) < statistics.median(own)


async def test_the_watch_page_of_the_real_slurm_in_chromium(driven: Driven) -> None:
    view = view_of(driven.watch_url)
    async with chromium() as (browser, watched):
        page = await new_page(browser, watched)
        await page.goto(driven.watch_url)
        caption = await page.locator("#score caption").inner_text()
        assert f"{view['score']['pairs']} pairs" in caption
        table = await page.locator("#score").inner_text()
        assert f"{view['score']['twin']['median_abs_error_s']:,.1f} s" in table
        assert f"{view['score']['estimate']['median_abs_error_s']:,.1f} s" in table
        assert "Slurm (squeue, sinfo)" in await page.locator("h1").inner_text()
        assert await page.locator("#fan").count() == 1
        assert watched.problems == []


def test_the_shipped_captures_of_a_real_slurm_read_with_their_own_instant() -> None:
    """traces/samples/slurm-22.05/: what this machine's Slurm 22.05.8 wrote, with the wall
    clock time each capture began."""
    for snap in sorted(p for p in SHIPPED.iterdir() if p.is_dir()):
        taken = float((snap / "taken.txt").read_text())
        squeue = json.loads((snap / "squeue.json").read_text())
        assert squeue["meta"]["plugin"]["type"] == "openapi/v0.0.38"
        state = from_slurm(snap / "squeue.json", snap / "sinfo.json")
        assert taken - BF_INTERVAL_S - 2 <= state.at_s <= taken, snap.name
        assert state.waiting, snap.name
        without = 1 if snap.name == "gpus-every-way" else 0  # its one job asked for none
        assert state.unused_fields.get("jobs without GPUs (not played)", 0) == without
        with pytest.raises(ConfigError, match="an export holds the state when it was taken"):
            from_slurm(snap / "squeue.json", snap / "sinfo.json", at_s=taken - 600)


def test_an_export_that_says_nothing_of_when_it_was_taken_is_refused(tmp_path: Path) -> None:
    (tmp_path / "q.json").write_text('{"jobs": []}')
    sinfo = next(p for p in SHIPPED.iterdir() if p.is_dir()) / "sinfo.json"
    nodes = json.loads(sinfo.read_text())
    for node in nodes["nodes"]:
        for key in ("last_busy", "slurmd_start_time", "boot_time", "reason_changed_at"):
            node[key] = 0
    (tmp_path / "s.json").write_text(json.dumps(nodes))
    assert slurm_instant({"jobs": []}, nodes) is None
    with pytest.raises(ConfigError, match="no time in the export says when it was taken"):
        from_slurm(tmp_path / "q.json", tmp_path / "s.json")


def test_the_fields_that_would_move_the_forecast_come_first_and_the_rest_are_counted() -> None:
    """A real export has dozens of unused fields, most of them ids, paths and Slurm's `0` and
    `false` for what a job did not ask: those are counted, not listed."""
    snap = SHIPPED / "gpus-every-way"
    state = from_slurm(snap / "squeue.json", snap / "sinfo.json")
    notes, matters, others = ranked_unused(state.unused_fields)
    assert notes == ["jobs asking for several GPU models (any model stands in)",
                     "jobs without GPUs (not played)", "nodes DRAIN (GPUs left out)",
                     "nodes with several GPU models (a node per model)",
                     "scheduler: sched/backfill every 30 s on time limits (resolution 60 s, 500 "
                     "jobs a pass), priority/basic; Slurm's defaults (no scontrol show config "
                     "given)",
                     ]  # fmt: skip
    assert set(matters) == {"job.cpus", "job.max_nodes", "job.minimum_cpus_per_node"}
    assert "job.array_job_id" not in state.unused_fields  # 0: not an array job
    assert 0 < others < 20


def test_scontrol_show_config_sets_the_scheduler_the_twin_plays(tmp_path: Path) -> None:
    """The shipped capture's own `scontrol show config`: backfill every 5 s, priority/basic;
    a pass tries bf_max_job_test jobs (Slurm's default 500, or as SchedulerParameters says);
    sched/builtin plays priority order with no backfill."""
    snap = SHIPPED / "itp-cluster10-0007"
    state = from_slurm(snap / "squeue.json", snap / "sinfo.json", config=SHIPPED / "config.txt")
    assert (state.backfill, state.backfill_interval_s, state.backfill_resolution_s) == (
        True, 5.0, 60.0)  # fmt: skip
    assert state.nodes is not None
    assert state.nodes.placement == "first_fit"
    assert state.backfill_depth == 500
    shipped = (SHIPPED / "config.txt").read_text()
    shallow = tmp_path / "shallow.txt"
    shallow.write_text(shipped.replace("bf_interval=5", "bf_interval=5,bf_max_job_test=8"))
    assert from_slurm(snap / "squeue.json", snap / "sinfo.json",
                      config=shallow).backfill_depth == 8  # fmt: skip
    builtin = tmp_path / "builtin.txt"
    builtin.write_text(shipped.replace("= sched/backfill", "= sched/builtin"))
    plain = from_slurm(snap / "squeue.json", snap / "sinfo.json", config=builtin)
    assert (plain.backfill, plain.backfill_interval_s) == (False, 0.0)
    (tmp_path / "not.txt").write_text("hello = world\n")
    with pytest.raises(ConfigError, match="not scontrol show config output"):
        from_slurm(snap / "squeue.json", snap / "sinfo.json", config=tmp_path / "not.txt")


def test_with_run_times_known_the_twin_starts_the_jobs_when_slurm_did(
    driven: Driven,
) -> None:
    """The oracle: the driven jobs, submitted when Slurm had them and running as long as they
    ran there, in the twin's Slurm mode (priority order, backfill every bf_interval on time
    limits, nodes in order): at least 95% start within one backfill interval of Slurm's start."""
    done = driven.done
    starts = oracle(done, nodes=2, node_gpus=8, bf_interval_s=BF_INTERVAL_S)
    within = [abs(starts[d.job_id] - d.start_s) <= BF_INTERVAL_S for d in done]
    assert sum(within) / len(within) >= 0.95


def test_the_time_an_end_takes_to_free_its_gpus_is_read_on_its_own_nodes_and_averaged() -> None:
    """(submitted, started, ended, nodes): each waiting job started after the latest end on its
    own nodes (0 s, 0 s, 3 s after), while another node's job ended a second before each."""
    from twin.forecast.slurm import completing_s

    runs: list[tuple[float, float, float | None, str]] = [
        (0, 0, 100, "r1"), (50, 100, 200, "r1"), (60, 200, 300, "r1"), (70, 303, None, "r1"),
        (0, 0, 99, "r2"), (0, 0, 199, "r2"), (0, 0, 302, "r2"),
    ]  # fmt: skip
    # the latest end anywhere would read 1 s, 1 s and 1 s; the median of these gaps 0 s
    assert completing_s(runs) == 1.0


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [
        ("gpu:nvidia_h100_80gb_hbm3:8(S:0-1)", [("nvidia_h100_80gb_hbm3", 8)]),
        ("gpu:nvidia_a100_80gb_pcie:3(S:1)", [("nvidia_a100_80gb_pcie", 3)]),
        ("gpu:1g.10gb:21(S:1)", [("1g.10gb", 21)]),  # MIG slices: the model starts with a digit
        ("gpu:1g.10gb:9(IDX:0-3,5-9)", [("1g.10gb", 9)]),
        ("gpu:4", [(None, 4)]),
        ("cpu=4,mem=8G,gres/gpu=2,gres/gpu:h100=2", [("h100", 2)]),
    ],
)
def test_gres_as_a_real_cluster_writes_it(gres: str, gpus: list[tuple[str | None, int]]) -> None:
    """Node and job GRES strings as the University of Oregon's Talapas (Slurm 23.11.1,
    slurmrestd data_parser v0.0.40) wrote them, in lcrownover/prometheus-slurm-exporter's
    testdata/V0040OpenapiNodesResp.json: a model name may start with a digit (a MIG profile,
    `1g.10gb`), and the socket or index suffix is not part of the count. (Before, `1g.10gb:21`
    read as one GPU of no model.)"""
    from twin.forecast.slurm import gres_gpus

    assert gres_gpus(gres) == gpus


def test_a_pending_job_array_waits_as_one_job_per_task() -> None:
    """traces/samples/slurm-22.05/array-job: Slurm lists an array's pending tasks as one record
    (`array_task_string` `1-6%2`); each task waits, named as Slurm names it (`2_1` ... `2_6`),
    Slurm's estimate is its next task's, and the throttle is named (not modelled)."""
    from twin.forecast.slurm import job_times

    snap = SHIPPED / "array-job"
    state = from_slurm(snap / "squeue.json", snap / "sinfo.json")
    assert [j.job_id for j in state.waiting] == [f"2_{t}" for t in range(1, 7)]
    assert {j.gpus for j in state.waiting} == {4.0}
    assert state.unused_fields["array jobs throttled with %N (tasks may run at once beyond it)"]
    started, estimated = job_times(snap / "squeue.json")
    assert list(started) == ["1"]
    assert list(estimated) == ["2_1"]


def test_a_started_array_task_keeps_its_array_name(tmp_path: Path) -> None:
    """A task that starts gets a job id of its own; the reader names it `ARRAYJOB_TASK`, as it
    named the task while it waited, so a forecast made for it is scored on its start."""
    from twin.forecast.slurm import job_times

    try:
        with slurm([Nodes("a", 1, 8, "h100")], bf_interval_s=BF_INTERVAL_S) as cluster:
            array = cluster.sbatch("--array=1-2", "--gres=gpu:1", "--time=5", run_s=300)
            named = {f"{array}_1", f"{array}_2"}
            deadline = time.monotonic() + 30
            while True:
                cluster.snapshot(tmp_path)
                started, _ = job_times(tmp_path / "squeue.json")
                if named <= set(started) or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
    except NoSlurmError as exc:
        pytest.skip(f"no Slurm here: {exc}")
    assert named <= set(started)
    state = from_slurm(tmp_path / "squeue.json", tmp_path / "sinfo.json")
    assert named <= {j.job_id for j in state.running}


def test_a_held_job_is_left_out_and_a_dependent_one_named() -> None:
    """traces/samples/slurm-22.05/held-and-dependent: a held job (`JobHeldUser`, priority 0)
    starts nothing until it is released: it is left out of the queue and named; a job waiting
    on a dependency is forecast as if free of it, and says so."""
    snap = SHIPPED / "held-and-dependent"
    state = from_slurm(snap / "squeue.json", snap / "sinfo.json")
    assert [j.job_id for j in state.waiting] == ["3"]
    assert [j.job_id for j in state.running] == ["1"]
    notes, _, _ = ranked_unused(state.unused_fields)
    assert "jobs held (not queued until released)" in notes
    assert "jobs waiting on a dependency (forecast as if free of it)" in notes
