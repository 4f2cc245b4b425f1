"""A DLRM instance that existed before the trace began (no creation or scheduled time) is left
censored: it runs from the start for as long as the trace saw it, is counted apart in the
summary, and gives no completion time or queueing delay (it was not submitted at t = 0). Timed
from t = 0 instead, the trace's 846 such instances that end in the window moved the p90
completion time of finished jobs from about 66 h to about 307 h."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import twin_command
from twin.eventlog.log import read_jsonl
from twin.replay.run import ReplayOptions, replay

HEADER = ("instance_sn,role,app_name,cpu_request,cpu_limit,gpu_request,gpu_limit,rdma_request,"
          "rdma_limit,memory_request,memory_limit,disk_request,disk_limit,max_instance_per_node,"
          "creation_time,scheduled_time,deletion_time")  # fmt: skip


def _instance(n: int, created: str, scheduled: str, deleted: str) -> str:
    asks = "12,12,1,1,25,25,120,120,640,800,8"  # cpu, gpu, rdma, memory, disk, density
    return f"instance_{n},HN,app_{n % 2},{asks},{created},{scheduled},{deleted}"


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "dlrm.csv"
    rows = [
        _instance(0, "", "", "36000"),  # there before the start, deleted at 10 h
        _instance(1, "", "", ""),  # there before the start and after the end
        _instance(2, "100", "160", "3700"),  # submitted, waited a minute (there), ran 59 min
        _instance(3, "200", "200", "7400"),
        _instance(4, "300", "300", ""),  # still running at the end
    ]
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    return path


def test_instances_there_before_the_trace_are_counted_apart_and_not_timed_from_zero(
    trace: Path, tmp_path: Path
) -> None:
    summary, _ = replay(trace, ReplayOptions(gpus=8), out_dir=tmp_path / "run")
    jobs = summary.jobs
    assert (jobs.arrived, jobs.finished, jobs.unfinished, jobs.present_at_start) == (5, 3, 2, 2)
    assert summary.completion_s.count == 2  # instances 2 and 3; not instance 0's 10 h
    assert summary.completion_s.max == pytest.approx(7200.0)
    with (tmp_path / "run" / "events.jsonl").open("rb") as log:
        kinds = [r["kind"] for r in read_jsonl(log)]
    assert kinds.count("job_present_at_start") == 2


def test_the_jobs_table_leaves_their_arrival_delay_and_completion_unknown(
    trace: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    replayed = twin_command("replay", "--trace", str(trace), "--gpus", "8", "--out", str(run),
                            "--export", "parquet")  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
    said = " ".join(replayed.stdout.replace("│", " ").split())
    assert "2 running at the trace's start (no completion time)" in said
    rows = {r["job_id"]: r for r in pq.read_table(run / "parquet" / "jobs.parquet").to_pylist()}
    assert rows["instance_0"]["outcome"] == "finished"
    for present in ("instance_0", "instance_1"):
        assert rows[present]["arrival_s"] is None
        assert rows[present]["completion_s"] is None
        assert rows[present]["queueing_delay_s"] is None
    assert rows["instance_2"]["completion_s"] == pytest.approx(3540.0)  # its own run, no wait


def test_on_the_real_trace_the_p90_completion_time_is_the_finished_jobs_own(
    real_traces: Path,
) -> None:
    path = real_traces / "alibaba-gpu-v2025-dlrm" / "disaggregated_DLRM_trace.csv"
    params = real_traces / "alibaba-gpu-v2025-dlrm" / "calibrated-params.json"
    from twin.replay.params import read_params

    summary, _ = replay(path, ReplayOptions(params=read_params(params)))
    assert summary.jobs.present_at_start == 2_277 + 846
    assert summary.completion_s.p90 is not None
    assert 60 * 3600 < summary.completion_s.p90 < 72 * 3600  # not ~307 h
