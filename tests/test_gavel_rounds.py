"""`twin replay --rounds`: a Gavel workload scheduled in rounds, as Gavel's simulator does.

The workloads in traces/gavel were drawn by Gavel's own generator and run by Gavel's own
simulator (`traces/gavel/run_gavel.py`, results in `gavel-results.json`); the twin's runs of
them are held to those results: FIFO job by job, max-min fairness within 1% on average JCT.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TRACES, twin_command
from twin.cli.rounds import cluster_spec
from twin.errors import ConfigError, TraceError
from twin.replay.detect import detect
from twin.replay.formats import gavel
from twin.replay.reader import ReadLog
from twin.rounds import policies as round_policies
from twin.rounds import rounds

GAVEL = TRACES / "gavel"
REFERENCE: dict[str, Any] = json.loads((GAVEL / "gavel-results.json").read_text())
CLUSTER = {"v100": 8, "p100": 8, "k80": 8}


def play(workload: str, policy: str, seed: int = 0, **kwargs: Any) -> rounds.RoundRun:
    jobs = gavel.read(GAVEL / f"{workload}.trace", ReadLog())
    chosen = round_policies.Fifo(seed) if policy == "fifo" else round_policies.MaxMinFairness()
    return rounds.play(jobs, CLUSTER, chosen, gavel.throughputs(), seed=seed, **kwargs)


@pytest.mark.parametrize("seed", REFERENCE["seeds"])
@pytest.mark.parametrize("workload", ["heavy", "light"])
@pytest.mark.parametrize("policy", ["fifo", "max_min_fairness"])
def test_average_jct_is_gavels_own_within_one_percent(
    workload: str, policy: str, seed: int
) -> None:
    """On each seed (it draws FIFO's worker types and the order types are visited in)."""
    ours = play(workload, "fifo" if policy == "fifo" else "max-min-fairness", seed)
    theirs = REFERENCE["results"][f"{workload}/{policy}"][seed]
    assert ours.average_jct_s == pytest.approx(theirs["average_jct_s"], rel=0.01)
    assert ours.makespan_s == pytest.approx(theirs["makespan_s"], rel=0.01)
    # Jobs Gavel dropped (a last round with fewer steps than GPUs, five times) are dropped here.
    dropped = [i for i, jct in enumerate(theirs["jct_s"]) if jct is None]
    assert [r.job_id for r in ours.jobs if r.dropped] == dropped


@pytest.mark.parametrize("workload", ["heavy", "light"])
def test_fifo_is_gavels_job_by_job(workload: str) -> None:
    """FIFO has no solver in the loop: every job ends when Gavel's does."""
    ours = play(workload, "fifo")
    theirs = REFERENCE["results"][f"{workload}/fifo"][0]["jct_s"]
    for result, jct in zip(ours.jobs, theirs, strict=True):
        assert (None if result.dropped else result.jct_s) == pytest.approx(jct, abs=1e-6)


def test_every_event_reaches_the_log_in_time_order() -> None:
    events: list[Any] = []
    run = play("heavy", "max-min-fairness", log=events.append)
    kinds = Counter(e[0] for e in events)
    assert kinds["job_arrived"] == len(run.jobs) == 60
    assert kinds["job_finished"] + kinds["job_failed"] == 60
    assert kinds["episode_started"] == kinds["episode_ended"] == 1
    assert kinds["job_started"] == kinds["job_interrupted"] + kinds["job_finished"]
    times = [e[1] for e in events]
    assert times == sorted(times)


def test_the_command_writes_the_events_and_the_per_job_results(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = twin_command("replay", "--trace", str(GAVEL / "light.trace"), "--rounds",
                        "--cluster-spec", "8:8:8", "--policy", "max-min-fairness",
                        "--out", str(out), "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)["rounds"]
    gavels = REFERENCE["results"]["light/max_min_fairness"][0]
    assert figures["average_jct_s"] == pytest.approx(gavels["average_jct_s"], rel=0.01)
    assert figures["utilisation"] == pytest.approx(gavels["utilisation"], abs=0.005)
    written = json.loads((out / "rounds.json").read_text())
    assert len(written["per_job"]) == 60
    lines = (out / "events.jsonl").read_text().splitlines()
    assert sum('"job_finished"' in line for line in lines) == 60


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--gpus", "4"], "drop --gpus"),
        (["--cluster-spec", "h100=8"], "is not TYPE=N"),
        (["--cluster-spec", "0:0:0"], "from 1 to"),
        (["--cluster-spec", "2:0:0"], "more than any worker type has"),
    ],
)
def test_a_wrong_option_is_one_line_naming_it(argv: list[str], says: str) -> None:
    done = twin_command("replay", "--trace", str(GAVEL / "heavy.trace"), "--rounds", *argv)
    assert done.returncode == 2
    assert says in done.stderr
    assert "Traceback" not in done.stderr


def test_a_round_based_replay_refuses_a_trace_that_is_not_a_gavel_workload() -> None:
    done = twin_command("replay", "--trace", str(TRACES / "samples/itp_synthetic.csv"),
                        "--policy", "max-min-fairness")  # fmt: skip
    assert done.returncode == 2
    assert "plays a Gavel workload" in done.stderr


def test_a_gavel_workload_is_recognised_and_its_bad_lines_named(tmp_path: Path) -> None:
    assert detect(GAVEL / "heavy.trace") == "gavel"
    good = (GAVEL / "heavy.trace").read_text().splitlines()
    bad = tmp_path / "bad.trace"
    fields = good[1].split("\t")
    fields[6] = "zero"
    bad.write_text("\n".join([good[0], "\t".join(fields), *good[2:]]) + "\n")
    with pytest.raises(TraceError, match=r"line 2: field 'scale_factor' = 'zero'"):
        gavel.read(bad, ReadLog())
    log = ReadLog(skip_bad=True)
    assert len(gavel.read(bad, log)) == len(good) - 1
    assert log.bad_lines == 1
    late = tmp_path / "late.trace"
    late.write_text("\n".join([good[2], good[1]]) + "\n")
    with pytest.raises(TraceError, match="before the previous job's"):
        gavel.read(late, ReadLog())


def test_gavels_own_throughput_file_reads_as_the_shipped_table(tmp_path: Path) -> None:
    shipped = gavel.throughputs()
    own: dict[str, dict[str, dict[str, float]]] = {}
    for (job_type, scale), by_type in shipped.items():
        for worker_type, speed in by_type.items():
            own.setdefault(worker_type, {})[f"('{job_type}', {scale})"] = {"null": speed}
    path = tmp_path / "simulation_throughputs.json"
    path.write_text(json.dumps(own))
    assert gavel.throughputs(path) == shipped
    path.write_text('{"v100": {"ResNet": 3}}')
    with pytest.raises(TraceError, match="not a throughput table"):
        gavel.throughputs(path)


def test_cluster_spec_reads_gavels_form_and_named_types() -> None:
    assert cluster_spec("8:4:2") == {"v100": 8, "p100": 4, "k80": 2}
    assert cluster_spec("25") == {"v100": 25, "p100": 0, "k80": 0}
    assert cluster_spec("k80=4, v100=2") == {"k80": 4, "v100": 2}
    with pytest.raises(ConfigError):
        cluster_spec("8:8:8:8")
