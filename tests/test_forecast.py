"""`twin forecast`: a cluster's state at an instant (a trace cut, a Kubernetes or Slurm export,
a snapshot file) played forward many times, reading nothing that was unknown at the instant."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import TRACES, twin_command
from twin.errors import ConfigError
from twin.forecast import snapshot
from twin.forecast.forecast import Forecast, Known, forecast
from twin.replay import load
from twin.replay.cluster import build
from twin.replay.params import read_params
from twin.replay.reader import ReadLog
from twin.replay.run import Queue, replay_scenario
from twin.schema.scheduling import ReplayParams
from twin.schema.snapshot import SnapshotJob
from twin.sim.jobrecord import JobRecord
from twin.sim.runner import run_episode

OPENB = TRACES / "alibaba-gpu-v2023-openb"
PODS = OPENB / "openb_pod_list_default.csv"
SAMPLES = TRACES / "samples"
ITP = TRACES / "microsoft-itp-elasticflow-2021" / "cluster10.csv"  # no start times


def openb_cut(pods: Path, at_s: float) -> snapshot.Snapshot:
    params = read_params(OPENB / "calibrated-params.json")
    cluster = build(iter(()), (OPENB / "openb_node_list_gpu_node.csv", None), None, params)
    return snapshot.cut(load.records(pods, "openb", ReadLog()), at_s, window_s=7 * 86400,
                        cluster=cluster, scheduler=params.scheduler)  # fmt: skip


def same(a: Forecast, b: Forecast) -> bool:
    return a.jobs == b.jobs and all(
        x.name == y.name and np.array_equal(x.quantiles, y.quantiles)
        for x, y in zip(a.bands, b.bands, strict=True)
    )


def test_a_forecast_reads_nothing_after_its_instant(tmp_path: Path) -> None:
    """Every start and end time after the instant moved: the same snapshot, the same forecast,
    bit for bit."""
    with PODS.open() as f:
        rows = list(csv.DictReader(f))
    waited = [r for r in rows if r["scheduled_time"] and
              int(r["scheduled_time"]) - int(r["creation_time"]) > 300]  # fmt: skip
    at_s = float(int(waited[5]["creation_time"]) + 1 - int(rows[0]["creation_time"]))
    moved = tmp_path / "openb_moved.csv"
    cutoff = at_s + int(rows[0]["creation_time"])
    with moved.open("w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=list(rows[0]))
        out.writeheader()
        for original in rows:
            row = dict(original)
            if row["scheduled_time"] and int(row["scheduled_time"]) > cutoff:
                row["scheduled_time"] = str(int(row["scheduled_time"]) + 97)
            if int(row["deletion_time"]) > cutoff:
                row["deletion_time"] = str(int(row["deletion_time"]) + 86_400)
            out.writerow(row)
    before, after = openb_cut(PODS, at_s), openb_cut(moved, at_s)
    assert before.waiting, "the instant has a job waiting"
    assert before == after
    assert same(forecast(before, samples=20, seed=3), forecast(after, samples=20, seed=3))


@settings(max_examples=12, deadline=None, derandomize=True)
@given(
    jobs=st.lists(
        st.tuples(st.integers(0, 3_000), st.integers(1, 8), st.integers(60, 4_000)),
        min_size=3,
        max_size=25,
    ),
    cut_share=st.floats(0.1, 0.9),
)
def test_with_nothing_uncertain_a_forecast_is_the_rest_of_the_run(
    jobs: list[tuple[int, int, int]], cut_share: float
) -> None:
    """Run the twin on a workload, cut its own run at an instant, and forecast from the cut
    with the run times and arrivals known: each waiting job starts when it did in the run."""
    jobs.sort()
    records = [JobRecord(job_id=f"j{i}", submit_s=float(t), service_s=float(s), gpus=float(g),
                         tenant="t") for i, (t, g, s) in enumerate(jobs)]  # fmt: skip
    cluster = build(iter(()), None, 8, ReplayParams())
    scenario = replay_scenario("run", "a run", cluster, Queue(), ReplayParams().scheduler)
    _, driver = run_episode(scenario, sources=[records], keep_log=True)
    started = {e.job_id: e.t_s for e in driver.log if e.kind == "job_started"}
    ended = {e.job_id: e.t_s for e in driver.log if e.kind == "job_finished"}
    observed = [r._replace(observed_start_s=started[r.job_id], observed_end_s=ended[r.job_id])
                for r in records]  # fmt: skip
    at_s = float(np.quantile([r.submit_s for r in records], cut_share))
    state = snapshot.cut(observed, at_s, window_s=1e6, cluster=cluster)
    future = [(r.submit_s - at_s, SnapshotJob(job_id=r.job_id, gpus=r.gpus, submit_s=r.submit_s),
               r.service_s) for r in records if r.submit_s > at_s]  # fmt: skip
    known = Known(run_s={r.job_id: r.service_s for r in records}, arrivals=future)
    result = forecast(state, samples=1, known=known, horizon_s=1e6, step_s=1e5)
    assert [j.job_id for j in result.jobs] == [j.job_id for j in state.waiting]
    for job in result.jobs:
        assert job.start_s is not None
        assert job.start_s[1] == pytest.approx(started[job.job_id], abs=1e-6)


def test_kubernetes_and_slurm_exports_forecast_end_to_end() -> None:
    k8s = twin_command("forecast", "--kubernetes", str(SAMPLES / "kubernetes_pods_nodes.json"),
                       "--samples", "20", "--json")  # fmt: skip
    assert k8s.returncode == 0, k8s.stderr
    body: dict[str, Any] = json.loads(k8s.stdout)["forecast"]
    assert (body["running"], body["waiting"], body["runs_fitted"]) == (11, 6, 40)
    for job in body["jobs"]:
        assert job["start_p10_s"] <= job["start_p50_s"] <= job["start_p90_s"]
    assert "pod.spec.tolerations" in body["unused_fields"]  # named, not dropped silently
    jobs, nodes = str(SAMPLES / "slurm_squeue.json"), str(SAMPLES / "slurm_sinfo.json")
    slurm = twin_command("forecast", "--squeue", jobs, "--sinfo", nodes, "--samples", "20",
                         "--json")  # fmt: skip
    assert slurm.returncode == 0, slurm.stderr
    body = json.loads(slurm.stdout)["forecast"]
    assert (body["running"], body["waiting"]) == (8, 5)
    assert body["unused_fields"]["job.dependency"] == 1


def test_adding_nodes_now_brings_every_start_forward() -> None:
    from twin.forecast import slurm

    state = slurm.from_slurm(SAMPLES / "slurm_squeue.json", SAMPLES / "slurm_sinfo.json")
    base = forecast(state, samples=30, seed=1)
    more = forecast(snapshot.what_if(state, ["pools.a100.nodes=+2"]), samples=30, seed=1)
    assert sum(p.max_gpus for p in snapshot.what_if(state, ["pools.a100.nodes=+2"]).pools) == 40
    late = [j.start_s[1] for j in base.jobs if j.start_s and j.start_s[1] > state.at_s]
    assert late, "some job waits without the nodes"
    for a, b in zip(base.jobs, more.jobs, strict=True):
        assert a.start_s is not None
        assert b.start_s is not None
        assert b.start_s[1] <= a.start_s[1]
    with pytest.raises(ConfigError, match="no pool 'h100'"):
        snapshot.what_if(state, ["pools.h100.nodes=+2"])


def test_a_snapshot_round_trips_and_a_bad_one_is_named(tmp_path: Path) -> None:
    state = openb_cut(PODS, 3_000_000.0)
    path = tmp_path / "snap.json"
    snapshot.write(state, path)
    assert snapshot.read(path) == state
    raw = json.loads(path.read_text())
    raw["running"][0]["gpus"] = -1
    path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match=r"running\.0\.gpus"):
        snapshot.read(path)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--trace", str(PODS), "--gpus", "8"], "--trace needs --at"),
        (["--trace", str(PODS), "--at", "10h"], "give the cluster"),
        (["--squeue", str(SAMPLES / "slurm_squeue.json")], "--squeue and --sinfo go together"),
        (["--trace", str(PODS), "--gpus", "8", "--at", "yesterday"], "--at: 'yesterday'"),
        (["--kubernetes", str(SAMPLES / "slurm_squeue.json")], "not a Kubernetes List"),
        (["--trace", str(ITP), "--gpus", "64", "--at", "10h"], "records when it started"),
    ],
)
def test_a_wrong_state_is_one_line_naming_it(argv: list[str], says: str) -> None:
    done = twin_command("forecast", *argv)
    assert done.returncode == 2
    assert says in done.stderr
    assert "Traceback" not in done.stderr


def test_kubernetes_exports_given_apart_are_merged_and_an_instant_before_them_refused(
    tmp_path: Path,
) -> None:
    from twin.forecast import kubernetes

    whole = json.loads((SAMPLES / "kubernetes_pods_nodes.json").read_text())
    for kind in ("Pod", "Node"):
        part = {**whole, "items": [i for i in whole["items"] if i["kind"] == kind]}
        (tmp_path / f"{kind}.json").write_text(json.dumps(part))
    apart = kubernetes.from_kubernetes([tmp_path / "Pod.json", tmp_path / "Node.json"])
    together = kubernetes.from_kubernetes(SAMPLES / "kubernetes_pods_nodes.json")
    fields = ("at_s", "pools", "nodes", "running", "waiting", "history")
    assert apart.model_dump(include=set(fields)) == together.model_dump(include=set(fields))
    done = twin_command("forecast", "--kubernetes", str(tmp_path / "Pod.json"), "--kubernetes",
                        str(tmp_path / "Node.json"), "--samples", "5", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["forecast"]["waiting"] == len(together.waiting)
    early = twin_command("forecast", "--kubernetes", str(SAMPLES / "kubernetes_pods_nodes.json"),
                         "--at", "2020-01-01T00:00:00Z")  # fmt: skip
    assert early.returncode == 2
    assert "was taken (2026-" in early.stderr
    assert "an export holds the state when it was taken, not before" in early.stderr
    nodes = json.loads((tmp_path / "Node.json").read_text())
    for node in nodes["items"]:
        node["metadata"].pop("creationTimestamp", None)
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    (tmp_path / "Node.json").write_text(json.dumps(nodes))
    nodes_only = twin_command("forecast", "--kubernetes", str(tmp_path / "Node.json"))
    assert nodes_only.returncode == 2  # it forecast from 1970 before
    assert "no time in the export says when it was taken" in nodes_only.stderr
    assert "Traceback" not in early.stderr + nodes_only.stderr


def test_a_trace_that_records_no_start_is_refused_by_the_backtest_too() -> None:
    """ITP's traces hold submissions and run times only: cut at any instant every job would
    wait forever (it forecast thousands waiting for hundreds of hours, exit 0)."""
    done = twin_command("backtest", "--trace", str(ITP), "--gpus", "64")
    assert done.returncode == 2
    assert "no job in this itp trace records when it started" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_backtest_scores_the_twin_beside_the_baselines_on_held_out_instants() -> None:
    from twin.forecast import backtest as bt

    params = read_params(OPENB / "calibrated-params-alternate-days.json")
    records = list(load.records(PODS, "openb", ReadLog()))
    cluster = build(iter(()), (OPENB / "openb_node_list_gpu_node.csv", None), None, params)
    times = bt.instants(records, "alternate-days", every_h=None, max_cuts=12)
    assert len(times) == 12
    assert all(int(t // 86_400) % 2 == 1 for t in times)  # odd days only
    setup = bt.Setup(cluster, Queue(), params.scheduler, samples=4)
    scored, queues = bt.backtest(records, times, setup)
    assert len(scored) >= 12  # each instant's job just submitted, at least
    actual = {r.job_id: r.observed_start_s for r in records}
    for s in scored:
        assert s.actual_s == actual[s.job_id]
        assert s.actual_s >= s.at_s >= s.submit_s
        for band in s.predicted.values():
            assert band is None or band[0] <= band[1] <= band[2]
    scores = {(c.method, c.gpu_class): c for c in bt.summarise(scored)}
    assert {m for m, _ in scores} == set(bt.METHODS)
    assert scores["median", "all"].coverage is None
    assert 0 <= scores["twin", "all"].coverage <= 1
    assert queues


def test_the_backtest_command_writes_its_tables_and_page(tmp_path: Path) -> None:
    done = twin_command("backtest", "--trace", str(PODS), "--cluster",
                        str(OPENB / "openb_node_list_gpu_node.csv"), "--params",
                        str(OPENB / "calibrated-params-alternate-days.json"), "--max-cuts", "4",
                        "--samples", "3", "--out", str(tmp_path), "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)["backtest"]
    assert body["instants"] == 4
    import pyarrow.parquet as pq

    rows = pq.read_table(tmp_path / "backtest.parquet").to_pylist()
    assert len(rows) == body["starts"]
    assert {"twin_p50_s", "oracle_p50_s", "median_p50_s", "qbets_p90_s"} <= set(rows[0])
    assert "<table>" in (tmp_path / "backtest.html").read_text()


SHAPES = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**20), st.text(max_size=8),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers()),
)  # fmt: skip


@settings(max_examples=40, deadline=None, derandomize=True)
@given(which=st.integers(0, 10**6), field_at=st.integers(0, 10**6), value=SHAPES)
def test_an_export_of_the_wrong_shape_is_one_error_naming_the_file(
    which: int, field_at: int, value: object, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Any one field of any one record replaced by a value of another shape: a forecast or one
    ConfigError naming the file, never another exception."""
    from twin.forecast import kubernetes, slurm

    where = tmp_path_factory.mktemp("shape")
    for name, key in (("kubernetes_pods_nodes.json", "items"), ("slurm_squeue.json", "jobs")):
        doc = json.loads((SAMPLES / name).read_text())
        record = doc[key][which % len(doc[key])]
        paths = [(record, k) for k in record] + [
            (record[k], j) for k in record if isinstance(record[k], dict) for j in record[k]
        ]
        parent, field = paths[field_at % len(paths)]
        parent[field] = value
        broken = where / name
        broken.write_text(json.dumps(doc))
        try:
            if key == "items":
                kubernetes.from_kubernetes(broken)
            else:
                slurm.from_slurm(broken, SAMPLES / "slurm_sinfo.json")
        except ConfigError as exc:
            message = str(exc)
        else:
            message = str(broken)
        assert str(broken) in message


def _node(name: str, resources: dict[str, str], *, labels: dict[str, str] | None = None,
          spec: dict[str, Any] | None = None, ready: str = "True") -> dict[str, Any]:  # fmt: skip
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels or {},
                         "creationTimestamp": "2026-08-04T12:00:00Z"},
            "spec": spec or {},
            "status": {"allocatable": {"cpu": "64", **resources},
                       "conditions": [{"type": "Ready", "status": ready}]}}  # fmt: skip


def _pending(name: str, resource: str, count: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "lab",
                         "creationTimestamp": "2026-11-02T10:43:23Z"},
            "spec": {"containers": [{"name": "main",
                                     "resources": {"requests": {resource: count}}}]},
            "status": {"phase": "Pending"}}  # fmt: skip


def test_kubernetes_nodes_the_scheduler_would_not_use_are_left_out_and_named(
    tmp_path: Path,
) -> None:
    """Cordoned, not Ready and tainted nodes start nothing (a taint on the GPU resource itself,
    which GPU pods tolerate, excepted); AMD GPUs and MIG slices are pools of their own, and a pod
    is held to the pools its GPU resource is found in (`nvidia.com/gpu` is on the H100s alone
    here)."""
    from twin.forecast import kubernetes

    h100 = {"nvidia.com/gpu.product": "NVIDIA-H100"}
    items = [
        _node("ok", {"nvidia.com/gpu": "8"}, labels=h100,
              spec={"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}),
        _node("cordoned", {"nvidia.com/gpu": "8"}, labels=h100, spec={"unschedulable": True}),
        _node("down", {"nvidia.com/gpu": "8"}, labels=h100, ready="False"),
        _node("reserved", {"nvidia.com/gpu": "8"}, labels=h100,
              spec={"taints": [{"key": "team", "value": "x", "effect": "NoSchedule"}]}),
        _node("mi300", {"amd.com/gpu": "8"}, labels={"amd.com/gpu.product-name": "MI300X"}),
        _node("sliced", {"nvidia.com/mig-1g.10gb": "14", "nvidia.com/gpu": "1"}, labels=h100),
        _pending("amd", "amd.com/gpu", "2"),
        _pending("slice", "nvidia.com/mig-1g.10gb", "1"),
        _pending("any", "nvidia.com/gpu", "1"),
    ]  # fmt: skip
    (tmp_path / "k.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                                  "items": items}))  # fmt: skip
    state = kubernetes.from_kubernetes(tmp_path / "k.json")
    assert {p.name: p.max_gpus for p in state.pools} == {
        "nvidia-h100": 8 + 1, "mi300x": 8, "mig-1g.10gb": 14}  # fmt: skip
    notes = state.unused_fields
    assert notes["nodes cordoned (GPUs left out)"] == 1
    assert notes["nodes not Ready (GPUs left out)"] == 1
    assert notes["nodes tainted team:NoSchedule (GPUs left out)"] == 1
    assert notes["nodes with MIG slices (a slice counted as a GPU)"] == 1
    assert notes["nodes with several GPU resources (a node per resource)"] == 1
    held = {j.job_id: j.gpu_type for j in state.waiting}
    assert held == {"lab/amd": "mi300x", "lab/slice": "mig-1g.10gb", "lab/any": "nvidia-h100"}


def test_a_job_the_trace_never_started_waits_at_the_cut_and_is_not_scored() -> None:
    """That a job will never start is not known at an instant: it waits in the snapshot as any
    job not yet started does (it was left out, which told the forecast the future), and the
    backtest, having no start to score it on, scores the others only."""
    from twin.forecast import backtest as bt

    records = [
        JobRecord(job_id="ran", submit_s=0.0, service_s=50.0, gpus=1.0, tenant="t",
                  status="completed", observed_start_s=0.0, observed_end_s=50.0),
        JobRecord(job_id="never", submit_s=10.0, service_s=0.0, gpus=8.0, tenant="t",
                  status="pending"),
        JobRecord(job_id="later", submit_s=20.0, service_s=30.0, gpus=1.0, tenant="t",
                  status="completed", observed_start_s=60.0, observed_end_s=90.0),
    ]  # fmt: skip
    cluster = build(iter(()), None, 8, ReplayParams())
    state = snapshot.cut(records, 30.0, window_s=1e6, cluster=cluster)
    assert [j.job_id for j in state.waiting] == ["never", "later"]
    assert state.unused_fields == {}  # nothing says which of them never starts
    setup = bt.Setup(cluster, Queue(), ReplayParams().scheduler, window_s=1e6, samples=2,
                     horizon_s=3600.0, seed=0)  # fmt: skip
    scored, _ = bt.backtest(records, [30.0], setup)
    assert [s.job_id for s in scored] == ["later"]
