"""Trace replay: real files read exactly as documented, bad input named, summaries pinned."""

from __future__ import annotations

import hashlib
import json
import math
import tempfile
from array import array
from collections.abc import Iterator
from contextlib import suppress
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.conftest import twin_command
from twin.errors import ConfigError, TraceError
from twin.eventlog.log import read_jsonl
from twin.replay import tenant_delays as tracegroups
from twin.replay import trace as trace_module
from twin.replay.detect import detect
from twin.replay.formats.flat import parse_map
from twin.replay.load import TraceOptions, inventory, job_format, records
from twin.replay.reader import ReadLog
from twin.replay.registry import JOB_FORMATS, NODE_FORMATS
from twin.replay.run import ReplayOptions, replay
from twin.replay.window import BEFORE, Window
from twin.schema.scheduling import ReplayParams
from twin.sim.jobrecord import JobRecord

SAMPLES = Path(__file__).resolve().parents[1] / "traces" / "samples"
GOLDEN = Path(__file__).parent / "golden"

SHA256 = {  # from each SOURCE.md
    "microsoft-itp-elasticflow-2021/cluster01.csv": "27d707f576fce5637f9efec43f610da3d335f36e3c6fd4ded2f5bccfce05974a",  # noqa: E501
    "microsoft-itp-elasticflow-2021/cluster04.csv": "247850e4265f35749e98d15e82a67765301e81272334265f1fe60d65787892a9",  # noqa: E501
    "microsoft-itp-elasticflow-2021/cluster10.csv": "139abea485b52090f5950d0f28d82878169df408e36052ec5c7cd04a3f3fcfa7",  # noqa: E501
    "alibaba-gpu-v2023-openb/openb_pod_list_default.csv": "1ee7ed79c27a3b0861cda8ddba86a004c6aba904caafa329a76ae93ca63834a8",  # noqa: E501
    "alibaba-gpu-v2023-openb/openb_node_list_gpu_node.csv": "2beca64b4d3dfa342036a34b56a495c6cef9225db836c81f541282cb1df320b5",  # noqa: E501
    "alibaba-gpu-v2023-openb/openb_node_list_all_node.csv": "5a85c2af79c66a1efff8bbcbda430400aae56d8431370d738480967e1a9c6b15",  # noqa: E501
    "alibaba-gpu-v2025-dlrm/disaggregated_DLRM_trace.csv": "fb17bc4b3f412d5280f70f04a1bdf2adfc4429d1e61237a5b106e86206414295",  # noqa: E501
    "azure-llm-inference-2023/AzureLLMInferenceTrace_code.csv": "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6",  # noqa: E501
    "azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv": "2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8",  # noqa: E501
    "mooncake-kimi-fast25/conversation_trace.jsonl": "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df",  # noqa: E501
    "alibaba-pai-v2020-machines/pai_machine_spec.csv": "251e9e33649155a6a935fdc1dc0e90cd4698206936b60bd8fce60ff2ccd51439",  # noqa: E501
    "alibaba-spot-gpu-v2026-nodes/node_info_df.csv": "1aba161961a5a4a1a61aa581383c5e5abe3400b59f8597ba8c4eef7597bc9d18",  # noqa: E501
    "microsoft-philly-2017-machines/cluster_machine_list": "5a3f3ad190fcf75bb44b8f7e4b1a8d76897255e35657d3038c8e43d021cba22f",  # noqa: E501
    "microsoft-philly-2017-machines/revised_machine_list.csv": "8662346b8cc6d4c3d80e659ec8bcdc9b32b9badd69eda61f14c47f855a99898e",  # noqa: E501
}  # fmt: skip


def read_all(
    path: Path, fmt: str | None = None, **log_args: bool
) -> tuple[list[JobRecord], ReadLog]:
    log = ReadLog(**log_args)
    options = TraceOptions()
    return list(records(path, job_format(path, fmt, options), log, options)), log


@pytest.mark.parametrize("name", sorted(SHA256))
def test_real_trace_files_are_byte_exact(real_traces: Path, name: str) -> None:
    assert hashlib.sha256((real_traces / name).read_bytes()).hexdigest() == SHA256[name]


class TestRealTraces:
    def test_itp_clusters_hold_69351_jobs_sorted_from_zero(self, real_traces: Path) -> None:
        total = 0
        for path in sorted((real_traces / "microsoft-itp-elasticflow-2021").glob("cluster*.csv")):
            jobs, _ = read_all(path)
            assert jobs[0].submit_s == 0.0
            assert all(a.submit_s <= b.submit_s for a, b in pairwise(jobs))
            assert min(j.service_s for j in jobs) >= 600
            assert {j.tenant for j in jobs} == {path.stem}
            total += len(jobs)
        assert total == 69_351

    def test_openb_pods_are_fractional_censored_and_pending_is_counted(
        self, real_traces: Path
    ) -> None:
        jobs, log = read_all(real_traces / "alibaba-gpu-v2023-openb/openb_pod_list_default.csv")
        assert len(jobs) == 8_152 - 897
        assert log.skipped == {"never scheduled (Pending)": 897}
        by_id = {j.job_id: j for j in jobs}
        assert by_id["openb-pod-0001"].gpus == pytest.approx(0.46)
        assert by_id["openb-pod-0001"].censored  # Running at the end of the window
        assert sum(j.censored for j in jobs) == 5_193

    def test_dlrm_is_sorted_and_cpu_instances_are_counted(self, real_traces: Path) -> None:
        jobs, log = read_all(real_traces / "alibaba-gpu-v2025-dlrm/disaggregated_DLRM_trace.csv")
        assert len(jobs) + log.skipped["CPU-only instance"] == 23_871
        assert all(a.submit_s <= b.submit_s for a, b in pairwise(jobs))
        assert all(j.submit_s == round(j.submit_s) for j in jobs)
        assert len({j.tenant for j in jobs}) > 50

    def test_azure_crlf_without_final_newline_and_seven_digit_fractions(
        self, real_traces: Path
    ) -> None:
        code, _ = read_all(real_traces / "azure-llm-inference-2023/AzureLLMInferenceTrace_code.csv")
        conv, _ = read_all(real_traces / "azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv")
        assert (len(code), len(conv)) == (8_819, 19_366)
        # 18:17:03.9799600 -> 19:14:19.93...: about 3,436 s.
        assert code[-1].submit_s == pytest.approx(3436.0, abs=1.0)
        assert code[-1].extras["output_tokens"] > 0

    def test_mooncake_timestamps_are_milliseconds(self, real_traces: Path) -> None:
        jobs, _ = read_all(real_traces / "mooncake-kimi-fast25/conversation_trace.jsonl")
        assert len(jobs) == 12_031
        assert jobs[-1].submit_s == pytest.approx(3537.0, abs=1.0)
        assert jobs[0].extras["prefix_blocks"] == 14

    @pytest.mark.parametrize(
        ("name", "gpus"),
        [
            ("alibaba-gpu-v2023-openb/openb_node_list_gpu_node.csv", 6_212),
            ("alibaba-gpu-v2023-openb/openb_node_list_all_node.csv", 6_212),
            ("alibaba-pai-v2020-machines/pai_machine_spec.csv", 6_742),
            ("alibaba-spot-gpu-v2026-nodes/node_info_df.csv", 10_412),
            ("microsoft-philly-2017-machines/cluster_machine_list", 2_490),
            ("microsoft-philly-2017-machines/revised_machine_list.csv", 3_205),
        ],
    )
    def test_node_inventories_count_their_gpus(
        self, real_traces: Path, name: str, gpus: int
    ) -> None:
        assert sum(inventory(real_traces / name, None, ReadLog()).gpus.values()) == gpus

    def test_every_trace_file_is_detected(self, real_traces: Path) -> None:
        seen = {
            detect(p)
            for p in real_traces.glob("*/*")
            if p.is_file()
            and (p.parent / "SOURCE.md").exists()  # a real dataset, not samples/
            and p.suffix not in (".md", ".header", ".json", ".py")  # params, scripts beside it
            and p.name != "topo.csv"
        }
        assert seen == {"itp", "openb", "dlrm", "azure", "mooncake", "gavel", *NODE_FORMATS}


class TestSyntheticFormats:
    """Formats with no real sample here, on hand-written fixtures in their documented schemas."""

    def test_helios_maps_states_and_counts_jobs_that_never_started(self) -> None:
        jobs, log = read_all(SAMPLES / "helios_synthetic.csv")
        assert [j.status for j in jobs] == ["completed", "failed", "failed", "failed", "completed"]
        assert log.skipped == {"never started (killed)": 1}
        assert (jobs[0].service_s, jobs[0].gpus, jobs[0].tenant) == (7200.0, 8.0, "vc-a")
        assert jobs[2].observed_start_s - jobs[2].submit_s == 1800.0  # queued 30 minutes

    def test_acme_handles_utc_offsets(self) -> None:
        jobs, _ = read_all(SAMPLES / "acme_synthetic.csv")
        assert [j.submit_s for j in jobs] == [0.0, 1800.0, 3600.0]
        assert jobs[0].extras["type"] == "Pretrain"

    def test_philly_sums_attempts_strips_keys_and_skips_unknown_run_times(self) -> None:
        jobs, log = read_all(SAMPLES / "philly_synthetic.json")
        assert [j.job_id for j in jobs] == ["application_0001", "application_0002"]
        assert jobs[0].gpus == 8.0  # 4 + 4 GPUs on two hosts
        assert jobs[1].service_s == 600.0 + 1200.0  # two attempts
        assert jobs[1].tenant == "vc-y"  # the key was " vc"
        assert log.skipped == {"never started": 1, "still running, run time unknown": 1}

    def test_a_flat_csv_with_a_column_map(self, tmp_path: Path) -> None:
        from twin.replay.formats.flat import parse_map

        path = tmp_path / "sim.csv"
        path.write_text("id,t_ms,run_ms,g,team\na,0,60000,2,x\nb,1500,1000,1,y\n")
        columns = parse_map("job_id=id,submit=t_ms,duration=run_ms,gpus=g,tenant=team,unit=ms")
        jobs = list(records(path, "csv", ReadLog(), TraceOptions(columns=columns)))
        assert [(j.job_id, j.submit_s, j.service_s, j.gpus, j.tenant) for j in jobs] == [
            ("a", 0.0, 60.0, 2.0, "x"),
            ("b", 1.5, 1.0, 1.0, "y"),
        ]


class TestBadInput:
    def corrupt(self, tmp_path: Path) -> Path:
        path = tmp_path / "cluster99.csv"
        path.write_text(
            "job_id,submission_time,duration,num_gpu\n"
            "a,0,700,1\n"
            "b,10,seven hundred,1\n"
            "c,20,700\n"
            "d,30,700,2\n"
        )
        return path

    def test_a_corrupt_line_names_file_line_and_field(self, tmp_path: Path) -> None:
        with pytest.raises(
            TraceError,
            match=r"cluster99\.csv: line 3: field 'duration' = 'seven hundred': not a number",
        ):
            read_all(self.corrupt(tmp_path))

    def test_a_missing_column_names_file_line_and_column(self, tmp_path: Path) -> None:
        path = tmp_path / "cluster99.csv"
        path.write_text("job_id,submission_time,num_gpu\na,0,1\n\nb,10,1\n")
        with pytest.raises(TraceError, match=r"cluster99\.csv: line 2: field 'duration' .*missing"):
            read_all(path, "itp")
        jobs, log = read_all(path, "itp", skip_bad=True)
        assert (jobs, log.bad_lines) == ([], 2)  # every row is bad, blank lines are not

    def test_skip_bad_skips_and_counts(self, tmp_path: Path) -> None:
        jobs, log = read_all(self.corrupt(tmp_path), skip_bad=True)
        assert [j.job_id for j in jobs] == ["a", "d"]
        assert log.bad_lines == 2
        assert log.first_bad is not None
        assert "line 3" in log.first_bad

    def test_an_over_long_field_is_a_bad_line_that_skip_bad_skips(self, tmp_path: Path) -> None:
        path = tmp_path / "cluster99.csv"
        path.write_text(
            f'job_id,submission_time,duration,num_gpu\na,0,700,1\n"{"x" * 1_000_000}",5,1,1\n'
            "c,20,700,1\n"
        )
        with pytest.raises(TraceError, match=r"line 3: malformed CSV: field larger than"):
            read_all(path)
        jobs, log = read_all(path, skip_bad=True)
        assert ([j.job_id for j in jobs], log.bad_lines) == (["a", "c"], 1)

    @pytest.mark.parametrize("rows", ["", "b,10,seven hundred,1\n"])
    def test_a_trace_with_no_readable_job_is_a_clear_error(self, tmp_path: Path, rows: str) -> None:
        path = tmp_path / "cluster99.csv"
        path.write_text("job_id,submission_time,duration,num_gpu\n" + rows)
        with pytest.raises(TraceError, match=r"cluster99\.csv: no jobs to replay"):
            replay(path, ReplayOptions(skip_bad=True))

    def test_replay_reports_skipped_lines(self, tmp_path: Path) -> None:
        _, report = replay(self.corrupt(tmp_path), ReplayOptions(skip_bad=True, gpus=4))
        assert (report.jobs_read, report.jobs_replayed, report.bad_lines) == (2, 2, 2)

    @pytest.mark.parametrize("keep_jobs", [1, 1 << 17])
    def test_sizing_reads_once_with_the_same_report_kept_or_spilled(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep_jobs: int
    ) -> None:
        # Jobs past KEEP_JOBS are spilled to a private file, not parsed again; it is deleted.
        monkeypatch.setattr(trace_module, "KEEP_JOBS", keep_jobs)
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        reads = []
        real = trace_module.load.records
        monkeypatch.setattr(trace_module.load, "records", lambda *a: reads.append(1) or real(*a))
        summary, report = replay(self.corrupt(tmp_path), ReplayOptions(skip_bad=True))
        assert reads == [1]
        assert (report.jobs_read, report.jobs_replayed, report.bad_lines) == (2, 2, 2)
        assert report.cluster_source == (
            "3 GPUs (the trace's demand, every job running from its arrival, stays at or below "
            "this 99% of the time)"  # a and d overlap for 92% of the span
        )
        assert summary.jobs.finished == 2
        assert list(tmp_path.glob("*.spill")) == []

    def test_a_trace_kept_for_every_pass_hands_each_the_same_jobs_parsed_once(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(trace_module, "KEEP_JOBS", 1)  # one in memory, the rest spilled
        reads = []
        real = trace_module.load.records
        monkeypatch.setattr(trace_module.load, "records", lambda *a: reads.append(1) or real(*a))
        trace = trace_module.Trace(self.corrupt(tmp_path), trace_module.Reading(skip_bad=True))
        passes = [list(trace.jobs()[0]) for _ in range(3)]
        assert passes[0] == passes[1] == passes[2]
        assert len(passes[0]) == 2
        assert reads == [1]
        assert trace.jobs()[1].bad_lines == 2  # each pass is told what the reading skipped

    def test_an_unknown_format_says_what_it_saw(self, tmp_path: Path) -> None:
        path = tmp_path / "x.csv"
        path.write_text("foo,bar\n1,2\n")
        with pytest.raises(
            TraceError, match=r"cannot tell the format from its first line 'foo,bar'"
        ):
            detect(path)

    @pytest.mark.parametrize(
        "job", ["[" * 100_000 + "]" * 100_000, '{"jobid": 1' + "0" * 5000 + "}"]
    )
    def test_json_nested_past_the_stack_or_with_endless_digits_is_named(
        self, tmp_path: Path, job: str
    ) -> None:
        path = tmp_path / "philly.json"
        path.write_text(f"[\n{job}\n]\n")
        with pytest.raises(TraceError, match=r"philly\.json: line 2: a job nested too deep"):
            read_all(path, "philly")
        lines = tmp_path / "requests.jsonl"
        good = '{"timestamp": 1, "input_length": 1, "output_length": 1}'
        lines.write_text(f"{good}\n{job}\n{good}\n")
        jobs, log = read_all(lines, "mooncake", skip_bad=True)
        assert (len(jobs), log.bad_lines) == (2, 1)
        assert "line 2" in (log.first_bad or "")

    def test_non_utf8_is_a_bad_line(self, tmp_path: Path) -> None:
        path = tmp_path / "cluster.csv"
        path.write_bytes(b"job_id,submission_time,duration,num_gpu\na,0,700,1\n\xff\xfe,1,1,1\n")
        with pytest.raises(TraceError, match="line 3: not UTF-8"):
            read_all(path, "itp")

    def test_going_back_in_time_is_an_error(self, tmp_path: Path) -> None:
        path = tmp_path / "cluster.csv"
        path.write_text("job_id,submission_time,duration,num_gpu\na,100,700,1\nb,50,700,1\n")
        with pytest.raises(
            TraceError, match=r"line 3: field 'submission_time' = 50\.0: goes back in time"
        ):
            read_all(path)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=400), st.sampled_from(JOB_FORMATS[:1] + JOB_FORMATS[2:]))
@example(b"a\rb,c\n1,2\n", "itp")  # a carriage return inside the header line
@example(b"job_id,submission_time,duration,num_gpu\na,0,7\r00,1\n", "itp")
def test_no_parser_crashes_on_arbitrary_bytes(tmp_path: Path, data: bytes, fmt: str) -> None:
    """Any bytes: records or a TraceError, never another exception."""
    path = tmp_path / f"fuzz-{fmt}.txt"
    path.write_bytes(data)
    with suppress(TraceError):
        list(records(path, fmt, ReadLog()))


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.text(alphabet=st.characters(codec="utf-8"), max_size=30), max_size=8))
def test_itp_parser_never_crashes_on_arbitrary_rows(tmp_path: Path, rows: list[str]) -> None:
    path = tmp_path / "fuzz.csv"
    path.write_text("job_id,submission_time,duration,num_gpu\n" + "\n".join(rows), encoding="utf-8")
    with suppress(TraceError):
        list(records(path, "itp", ReadLog(skip_bad=True)))


def test_replaying_the_synthetic_itp_sample_matches_its_golden_summary(tmp_path: Path) -> None:
    summary, report = replay(SAMPLES / "itp_synthetic.csv", ReplayOptions(), out_dir=tmp_path)
    got = {
        "summary": json.loads(summary.model_dump_json()),
        "replay": json.loads(report.model_dump_json()),
    }
    got["replay"]["trace"] = "itp_synthetic.csv"
    golden = GOLDEN / "replay_itp_synthetic.json"
    assert got == json.loads(golden.read_text()), f"if the change is intended, rewrite {golden}"


def test_openb_replay_sets_simulated_against_observed_delay(real_traces: Path) -> None:
    base = real_traces / "alibaba-gpu-v2023-openb"
    _, report = replay(
        base / "openb_pod_list_default.csv",
        ReplayOptions(cluster=base / "openb_node_list_gpu_node.csv"),
    )
    d = report.queueing_delay
    assert d is not None
    assert d.observed_jobs == 7_255
    assert d.observed[0] == 2.0  # median scheduling delay in the trace
    assert 0.0 <= d.ks_distance <= 1.0
    assert sum(report.cluster.values()) == 6_212


class TestWindow:
    """A window replays the jobs submitted in it, with times from its start."""

    @staticmethod
    def jobs(*submits_s: float) -> list[JobRecord]:
        return [
            JobRecord(str(i), s, 60.0, 1.0, "t", observed_start_s=s + 5.0, observed_end_s=s + 65.0)
            for i, s in enumerate(submits_s)
        ]

    def test_jobs_before_the_window_are_skipped_and_times_rebased(self) -> None:
        log = ReadLog()
        got = list(Window(start_s=100.0, end_s=300.0).clip(self.jobs(0, 50, 100, 250, 300), log))
        assert [(r.job_id, r.submit_s, r.observed_start_s, r.observed_end_s) for r in got] == [
            ("2", 0.0, 5.0, 65.0),
            ("3", 150.0, 155.0, 215.0),
        ]
        assert log.skipped == {BEFORE: 2}

    def test_reading_stops_at_the_first_job_past_the_end(self) -> None:
        def trace() -> Iterator[JobRecord]:
            yield from self.jobs(0, 10, 20)
            raise AssertionError("read past the window")

        assert len(list(Window(end_s=15.0).clip(trace(), ReadLog()))) == 2
        assert len(list(Window(max_jobs=3).clip(trace(), ReadLog()))) == 3

    def test_max_jobs_counts_within_the_window(self) -> None:
        got = list(Window(start_s=10.0, max_jobs=2).clip(self.jobs(0, 10, 20, 30), ReadLog()))
        assert [r.job_id for r in got] == ["1", "2"]

    @pytest.mark.parametrize(
        ("window", "message"),
        [
            ({"start_s": -3600.0}, r"window start must be a time >= 0 h, got -1 h"),
            ({"start_s": math.nan}, r"window start must be a time >= 0 h, got nan h"),
            ({"start_s": 7200.0, "end_s": 3600.0}, r"window end \(1 h\) must come after .*\(2 h\)"),
            ({"max_jobs": 0}, r"window max jobs must be positive, got 0"),
        ],
    )
    def test_an_impossible_window_is_refused(self, window: dict[str, Any], message: str) -> None:
        with pytest.raises(ConfigError, match=message):
            Window(**window)

    def test_openb_dense_window_skips_the_idle_lead_in(
        self, real_traces: Path, tmp_path: Path
    ) -> None:
        base = real_traces / "alibaba-gpu-v2023-openb"
        start_h, end_h = 2780.0, 3000.0
        summary, report = replay(
            base / "openb_pod_list_default.csv",
            ReplayOptions(
                cluster=base / "openb_node_list_gpu_node.csv",
                window=Window(start_s=start_h * 3600, end_s=end_h * 3600),
            ),
            out_dir=tmp_path,
        )
        assert report.window == "submitted in [2780 h, 3000 h)"
        before = report.skipped[BEFORE]
        assert before > 0
        assert report.jobs_read == before + report.jobs_replayed
        assert summary.jobs.arrived == report.jobs_replayed
        # The first job arrives at the window's first submission, not after 2,780 idle hours.
        with (tmp_path / "events.jsonl").open("rb") as f:
            arrivals = [e for e in read_jsonl(f) if e["kind"] == "job_arrived"]
        first_h = min(e["t_s"] for e in arrivals) / 3600
        assert 0.0 <= first_h < 1.0
        whole = read_all(base / "openb_pod_list_default.csv")[0]
        in_window = [r for r in whole if start_h * 3600 <= r.submit_s < end_h * 3600]
        assert report.jobs_replayed == len(in_window)


class TestTraceTenants:
    """A replay reports queueing delay by the trace's own tenants (VCs, users, services)."""

    def test_delays_are_attributed_to_each_jobs_tenant(self, tmp_path: Path) -> None:
        from twin.replay.formats.flat import parse_map

        path = tmp_path / "two-teams.csv"
        # One GPU, FIFO: a runs 0-100 s; b waits 100 s; c (submitted at 10 s) waits 140 s.
        path.write_text("id,t,run,g,team\na,0,100,1,x\nb,0,50,1,y\nc,10,10,1,y\n")
        columns = parse_map("job_id=id,submit=t,duration=run,gpus=g,tenant=team")
        _, report = replay(path, ReplayOptions(trace=TraceOptions(columns=columns), gpus=1))
        by_name = {t.name: t for t in report.tenants}
        assert [t.name for t in report.tenants] == ["y", "x"]  # busiest first
        assert by_name["x"].simulated_delay_s.max == 0.0
        assert by_name["y"].jobs_finished == 2
        assert by_name["y"].simulated_delay_s.mean == 120.0
        assert by_name["y"].simulated_delay_s.max == 140.0
        assert by_name["y"].observed_delay_s is None  # a flat CSV records no start times

    def test_dlrm_services_add_up_to_the_whole_replay(self, real_traces: Path) -> None:
        trace = real_traces / "alibaba-gpu-v2025-dlrm" / "disaggregated_DLRM_trace.csv"
        summary, report = replay(trace, ReplayOptions())
        assert len(report.tenants) == len({r.tenant for r in read_all(trace)[0]})
        assert sum(t.jobs_finished for t in report.tenants) == summary.jobs.finished
        d = report.queueing_delay
        assert d is not None
        seen = [t.observed_delay_s.count for t in report.tenants if t.observed_delay_s]
        assert sum(seen) == d.observed_jobs

    def test_tenants_past_the_limit_are_counted_together(self) -> None:
        groups = tracegroups.Groups(limit=3)
        for i, tenant in enumerate(["a", "b", "c", "d", "a"]):
            groups.submitted(f"j{i}", tenant)
        assert groups.names == ["a", "b", tracegroups.OTHER]
        assert groups.merged_jobs == 2
        for i in range(5):
            groups.ended(f"j{i}", finished=i != 1)  # j1 failed: not a finished job
        assert groups.finished.tolist() == [0, 2, 2, 0]
        codes = array("H", groups.finished)  # each started job's delay, by the same tenants
        rows = groups.report(np.array([1.0, 2.0, 3.0, 4.0]), codes, np.array([]))
        assert [(t.name, t.jobs, t.jobs_finished, t.simulated_delay_s.mean) for t in rows] == [
            ("(other)", 2, 2, 2.5),
            ("a", 2, 2, 2.5),
            ("b", 1, 0, None),  # its one job failed: counted among its jobs, not finished
        ]
        other = next(t for t in rows if t.name == tracegroups.OTHER)
        assert other.jobs == groups.merged_jobs  # the header's count and the row's agree


# -- gaps found replaying an unseen trace through the flat adapter ------------------------------

UNSEEN = "id,t,secs,state\na,0,100,SUCCEED\nb,5,50,FAILED\nc,9,80,PENDING\nd,12,60,Cancelled\n"


def test_a_column_map_constant_means_the_same_value_for_every_row(tmp_path: Path) -> None:
    path = tmp_path / "unseen.csv"
    path.write_text(UNSEEN)
    cm = parse_map("submit=t,duration=secs,gpus=const:1,job_id=id,tenant=const:team-a")
    recs = list(records(path, "csv", ReadLog(), TraceOptions(columns=cm)))
    assert [r.gpus for r in recs] == [1.0] * 4
    assert {r.tenant for r in recs} == {"team-a"}


def test_status_words_map_by_a_wider_vocabulary_and_the_column_map_s_own(tmp_path: Path) -> None:
    path = tmp_path / "unseen.csv"
    path.write_text(UNSEEN.replace("Cancelled", "WEIRD"))
    plain = parse_map("submit=t,duration=secs,gpus=const:1,job_id=id,status=state")
    with pytest.raises(TraceError, match=r"line 5: field 'state' = 'WEIRD': an unknown status"):
        list(records(path, "csv", ReadLog(), TraceOptions(columns=plain)))
    mapped = parse_map("submit=t,duration=secs,gpus=const:1,status=state,"
                       "status_map=WEIRD:killed|SUCCEED:completed")  # fmt: skip
    got = [r.status for r in records(path, "csv", ReadLog(), TraceOptions(columns=mapped))]
    assert got == ["completed", "failed", "pending", "killed"]
    with pytest.raises(ConfigError, match="status_map entry 'X:gone'"):
        parse_map("submit=t,duration=secs,gpus=const:1,status_map=X:gone")


class TestHonestRows:
    """What a replay does with rows it could read more than one way, it says."""

    def test_an_unknown_status_word_is_refused_with_the_known_ones(self, tmp_path: Path) -> None:
        # As in Alibaba's GenAI serving trace: requests still PROCESSING when it was cut.
        path = tmp_path / "genai.csv"
        path.write_text("id,t,secs,state\na,0,10,SUCCEED\nb,1,10,PROCESSING\nc,2,10,\n")
        cm = "submit=t,duration=secs,gpus=const:1,job_id=id,status=state"
        options = ReplayOptions(trace=TraceOptions(columns=parse_map(cm)), gpus=1)
        with pytest.raises(TraceError) as refused:
            replay(path, options)
        message = str(refused.value)
        assert "line 3: field 'state' = 'PROCESSING': an unknown status word" in message
        assert "completed: completed/complete" in message
        assert "status_map=PROCESSING:STATUS" in message
        _, report = replay(path, ReplayOptions(
            trace=TraceOptions(columns=parse_map(cm)), gpus=1, skip_bad=True))  # fmt: skip
        assert report.bad_lines == 1
        assert report.statuses == {"completed": 1, "unknown": 1}  # an empty cell: counted

    def test_a_status_rule_maps_the_word_and_the_report_counts_each(self, tmp_path: Path) -> None:
        path = tmp_path / "genai.csv"
        path.write_text("id,t,secs,state\na,0,10,SUCCEED\nb,1,10,PROCESSING\nc,2,10,FAILED\n")
        cm = "submit=t,duration=secs,gpus=const:1,job_id=id,status=state," \
             "status_map=PROCESSING:running"  # fmt: skip
        _, report = replay(path, ReplayOptions(trace=TraceOptions(columns=parse_map(cm)), gpus=1))
        assert report.statuses == {"completed": 1, "failed": 1, "running": 1}

    def test_tenants_past_the_limit_are_announced_and_the_limit_is_the_user_s(
        self, tmp_path: Path
    ) -> None:
        path = tmp_path / "many.csv"
        path.write_text("id,t,secs,team\n" + "".join(f"j{i},{i},5,u{i}\n" for i in range(10)))
        cm = parse_map("submit=t,duration=secs,gpus=const:1,job_id=id,tenant=team")
        options = ReplayOptions(trace=TraceOptions(columns=cm), gpus=2, max_tenants=4)
        _, report = replay(path, options)
        assert [t.name for t in report.tenants if t.name == "(other)"] == ["(other)"]
        assert (report.tenants_merged_jobs, report.max_tenants) == (7, 4)
        shown = twin_command("replay", "--trace", str(path), "--columns",
                             "submit=t,duration=secs,gpus=const:1,job_id=id,tenant=team",
                             "--gpus", "2", "--max-tenants", "4")  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        assert "7 jobs of tenants past the first 4" in " ".join(shown.stdout.split())
        with pytest.raises(ConfigError, match="--max-tenants"):
            ReplayOptions(max_tenants=70_000)

    def test_a_capacity_share_names_the_node_kinds_it_leaves_out(self, real_traces: Path) -> None:
        openb = real_traces / "alibaba-gpu-v2023-openb"
        options = ReplayOptions(cluster=openb / "openb_node_list_gpu_node.csv",
                                params=ReplayParams(capacity_share=0.006), window=Window(
                                    end_s=24 * 3600))  # fmt: skip
        _, report = replay(openb / "openb_pod_list_default.csv", options)
        assert "no a10, g3, v100m16, v100m32 node left at this share" in report.cluster_source
        assert set(report.cluster) == {"g2", "p100", "t4"}
        described = ReplayParams.model_fields["capacity_share"].description or ""
        assert "left out" in described

    def test_failed_jobs_delays_are_reported_beside_finished_ones(self, tmp_path: Path) -> None:
        path = tmp_path / "fails.csv"
        # One GPU: a runs 0-100 s; b waits 100 s, runs and fails; c waits 140 s and finishes.
        path.write_text("id,t,secs,state\na,0,100,ok\nb,0,10,FAILED\nc,0,10,ok\n")
        cm = parse_map("submit=t,duration=secs,gpus=const:1,job_id=id,status=state")
        summary, _ = replay(path, ReplayOptions(trace=TraceOptions(columns=cm), gpus=1))
        assert (summary.queueing_delay_s.count, summary.queueing_delay_s.max) == (2, 110.0)
        failed = summary.failed_queueing_delay_s
        assert failed is not None
        assert (failed.count, failed.max) == (1, 100.0)

    def test_with_datetimes_a_duration_is_in_seconds(self, tmp_path: Path) -> None:
        path = tmp_path / "dates.csv"
        path.write_text("id,at,secs\na,2024-01-01 00:00:00,90\nb,2024-01-01 00:01:00,30\n")
        cm = parse_map("submit=at,duration=secs,gpus=const:1,job_id=id,unit=datetime")
        recs = list(records(path, "csv", ReadLog(), TraceOptions(columns=cm)))
        assert [(r.submit_s, r.service_s) for r in recs] == [(0.0, 90.0), (60.0, 30.0)]
        assert "a duration is in s" in " ".join(twin_command("replay", "--help").stdout.split())


def test_failed_jobs_replay_as_failed_and_never_started_ones_are_left_out(tmp_path: Path) -> None:
    path = tmp_path / "unseen.csv"
    path.write_text(UNSEEN)
    cm = parse_map("submit=t,duration=secs,gpus=const:1,job_id=id,status=state")
    summary, report = replay(path, ReplayOptions(fmt="csv", trace=TraceOptions(columns=cm),
                                                 gpus=4))  # fmt: skip
    assert report.skipped == {"never started in the trace (status pending)": 1}
    assert (summary.jobs.finished, summary.jobs.failed) == (1, 2)  # b failed, d cancelled
    assert summary.jobs.arrived == 3


def test_rows_the_trace_records_as_running_are_unfinished_at_its_end(tmp_path: Path) -> None:
    """A row still running when the trace ends runs as long as the trace saw it, then stops
    there unfinished: neither finished nor failed in the summary, its tenant's row or the jobs
    table, though its GPU time is counted."""
    path = tmp_path / "running.csv"
    path.write_text("id,t,secs,state,team\na,0,10,ok,x\nb,0,20,RUNNING,x\nc,5,10,FAILED,y\n"
                    "d,6,30,running,y\n")  # fmt: skip
    cm = parse_map("submit=t,duration=secs,gpus=const:1,job_id=id,status=state,tenant=team")
    options = ReplayOptions(trace=TraceOptions(columns=cm), gpus=4)
    summary, report = replay(path, options, out_dir=tmp_path / "out")
    jobs = summary.jobs
    assert (jobs.arrived, jobs.finished, jobs.failed, jobs.unfinished) == (4, 1, 1, 2)
    tenants = {(t.name, t.jobs, t.jobs_finished) for t in report.tenants}
    assert tenants == {("x", 2, 1), ("y", 2, 0)}
    with (tmp_path / "out" / "events.jsonl").open("rb") as log:
        kinds = [e["kind"] for e in read_jsonl(log)]
    assert (kinds.count("job_finished"), kinds.count("job_censored")) == (1, 2)
    busy_gpu_s = sum(p.busy_gpu_h for p in summary.pools) * 3600
    assert busy_gpu_s == pytest.approx(10 + 20 + 10 + 30)  # b's and d's runs count as GPU time
    shown = twin_command("replay", "--trace", str(path), "--columns",
                         "submit=t,duration=secs,gpus=const:1,job_id=id,status=state,tenant=team",
                         "--gpus", "4")  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "4 arrived · 1 finished · 1 failed · 2 unfinished" in " ".join(shown.stdout.split())


def test_a_negative_gpu_count_is_reported_under_the_gpu_column(tmp_path: Path) -> None:
    path = tmp_path / "neg.csv"
    path.write_text("t,secs,n\n0,10,-2\n")
    cm = parse_map("submit=t,duration=secs,gpus=n")
    log = ReadLog(skip_bad=True)
    assert list(records(path, "csv", log, TraceOptions(columns=cm))) == []
    assert log.first_bad == f"{path}: line 2: field 'n' = -2.0: negative"


def test_a_bursty_trace_is_sized_from_its_demand_not_its_mean(tmp_path: Path) -> None:
    # 40 one-GPU jobs arrive at once and run 300 s, then one more at 10,000 s: the mean load is
    # about one GPU, while the demand is 40 GPUs for 3% of the span.
    rows = "".join(f"j{i},0,300,1\n" for i in range(40)) + "late,10000,100,1\n"
    path = tmp_path / "cluster98.csv"
    path.write_text("job_id,submission_time,duration,num_gpu\n" + rows)
    _, report = replay(path, ReplayOptions())
    assert report.cluster == {"gpu": 40}


def test_spilled_jobs_come_back_whole_with_their_extras_read_only() -> None:
    from types import MappingProxyType

    from twin.replay.spill import Spill
    from twin.sim.jobrecord import NO_EXTRAS, JobRecord

    jobs = [
        JobRecord("a", 1.0, 60.0, 2.0, "vc1", "v100", 1.0, "completed", 5.0, 65.0),
        JobRecord(
            "b", 2.0, 30.0, 0.5, "vc2", extras=MappingProxyType({"qos": "LS"}), cpu_milli=4000
        ),
    ]
    spill = Spill()
    for job in jobs:
        spill.add(job)
    spill.close()
    for _ in range(2):  # read back as often as asked
        back = list(spill.read())
        assert back == jobs
        assert back[0].extras is NO_EXTRAS
        assert isinstance(back[1].extras, MappingProxyType)
    spill.free()
    assert not Path(spill.path).exists()
