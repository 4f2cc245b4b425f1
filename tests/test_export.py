"""Exports a user analyses: Parquet and CSV tables read back by DuckDB and pyarrow reproduce the
summary, and the Perfetto timeline is a valid trace-event file whose job slices match the log."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from tests.conftest import twin_command
from twin.eventlog.export import read_events
from twin.schema.summary import Summary
from twin.schema.vocabulary import TIMELINE_FILE

KINDS = ("run", "replay", "session")
MONEY = {"rel": 1e-12, "abs": 1e-9}  # sums over the same values in another order


def summary_of(run: Path) -> Summary:
    return Summary.model_validate_json((run / "summary.json").read_text())


def sql(run: Path, query: str) -> list[tuple[Any, ...]]:
    """`query` with `{table}` naming the run's Parquet files."""
    tables = {p.stem: f"'{p}'" for p in (run / "parquet").glob("*.parquet")}
    return duckdb.sql(query.format(**tables)).fetchall()


@pytest.mark.parametrize("kind", KINDS)
def test_job_counts_from_parquet_reproduce_the_summary(runs: dict[str, Path], kind: str) -> None:
    run, s = runs[kind], summary_of(runs[kind])
    outcomes = dict(sql(run, "select outcome, count(*) from {jobs} group by outcome"))
    assert outcomes.get("finished", 0) == s.jobs.finished
    assert outcomes.get("failed", 0) == s.jobs.failed
    assert outcomes.get("unfinished", 0) == s.jobs.unfinished
    assert sum(outcomes.values()) == s.jobs.arrived
    [(arrived,)] = sql(run, "select count(*) from {job_arrived}")
    assert arrived == s.jobs.arrived
    [(interrupted,)] = sql(run, "select count(*) from {job_interrupted}")
    assert interrupted == s.jobs.interrupted


@pytest.mark.parametrize("kind", KINDS)
def test_money_per_tenant_from_parquet_reproduces_the_summary(
    runs: dict[str, Path], kind: str
) -> None:
    run, s = runs[kind], summary_of(runs[kind])
    cost = dict(sql(run, "select tenant, sum(amount_usd) from {budget_charged} group by 1"))
    sla = dict(sql(run, "select tenant, sum(amount_usd) from {sla_penalty} group by 1"))
    counts = {
        t: (a, f, x)
        for t, a, f, x in sql(
            run,
            "select tenant, count(*), count(*) filter (outcome = 'finished'), "
            "count(*) filter (outcome = 'failed') from {jobs} group by 1",
        )
    }
    for t in s.tenants:
        assert counts[t.name] == (t.jobs_arrived, t.jobs_finished, t.jobs_failed)
        assert cost.get(t.name, 0.0) == pytest.approx(t.cost_usd, **MONEY)
        assert sla.get(t.name, 0.0) == pytest.approx(t.sla_usd, **MONEY)
    assert sum(cost.values()) == pytest.approx(s.cost_usd, **MONEY)
    assert sum(sla.values()) == pytest.approx(s.sla_usd, **MONEY)


@pytest.mark.parametrize("kind", KINDS)
def test_delay_quantiles_from_the_jobs_table_are_the_summary_s(
    runs: dict[str, Path], kind: str
) -> None:
    run, s = runs[kind], summary_of(runs[kind])
    [(n, mean, p50, p99, top)] = sql(
        run,
        "select count(*), avg(queueing_delay_s), quantile_cont(queueing_delay_s, 0.5), "
        "quantile_cont(queueing_delay_s, 0.99), max(queueing_delay_s) from {jobs} "
        "where outcome = 'finished'",
    )
    q = s.queueing_delay_s
    assert n == q.count
    assert (mean, p50, p99, top) == pytest.approx((q.mean, q.p50, q.p99, q.max), **MONEY)
    [(jct_p50,)] = sql(
        run, "select quantile_cont(completion_s, 0.5) from {jobs} where outcome = 'finished'"
    )
    assert jct_p50 == pytest.approx(s.completion_s.p50, **MONEY)


def test_the_rounds_table_holds_what_each_agent_was_told(runs: dict[str, Path]) -> None:
    run = runs["session"]
    agents = json.loads((run / "agents.json").read_text())["agents"]
    per_tenant = {
        t: (n, reward, diff, trades, traded)
        for t, n, reward, diff, trades, traded in sql(
            run,
            "select tenant, count(*), sum(reward_usd), sum(difference_reward), sum(trades), "
            "sum(traded_usd) from {rounds} group by 1",
        )
    }
    s = summary_of(run)
    finals = dict(sql(run, "select tenant, reward_usd from {episode_settled}"))
    for tenant, stats in agents.items():
        n, reward, diff, trades, traded = per_tenant[tenant]
        assert n == stats["rounds"]
        assert finals[tenant] == stats["final_reward"]  # told at the end, after the last round
        assert reward + finals[tenant] == pytest.approx(stats["reward"], **MONEY)
        assert diff == pytest.approx(stats["difference_reward"], **MONEY)
        assert trades == stats["trades_applied"]
        assert traded == pytest.approx(next(t.traded_usd for t in s.tenants if t.name == tenant))
    [(rounds,)] = sql(run, "select count(*) from {round_committed}")
    assert {n for n, *_ in per_tenant.values()} == {rounds}


def test_event_tables_have_the_schema_s_types(runs: dict[str, Path]) -> None:
    table = pq.read_table(runs["session"] / "parquet" / "round_credited.parquet")
    types = {f.name: f.type for f in table.schema}
    assert types["t_s"] == types["held_gpus"] == pa.float64()
    assert pa.types.is_list(types["reasons"])
    assert types["reasons"].value_type == pa.string()
    assert types["tenant"] == pa.string()
    offers = pq.read_table(runs["session"] / "parquet" / "offer_made.parquet")
    give = json.loads(offers.column("give")[0].as_py())
    assert set(give) == {"gpus", "usd"}


def test_csv_tables_hold_the_same_rows_as_parquet(runs: dict[str, Path]) -> None:
    run = runs["session"]
    for path in (run / "parquet").glob("*.parquet"):
        flat = pacsv.read_csv(run / "csv" / f"{path.stem}.csv")
        assert flat.num_rows == pq.read_metadata(path).num_rows, path.stem


# -- Perfetto ---------------------------------------------------------------------------------

PHASES = {"M", "C", "B", "E", "i"}


def timeline(run: Path) -> list[dict[str, Any]]:
    trace = json.loads((run / TIMELINE_FILE).read_text())
    assert set(trace) == {"displayTimeUnit", "traceEvents"}
    events: list[dict[str, Any]] = trace["traceEvents"]
    return events


@pytest.mark.parametrize("kind", KINDS)
def test_the_timeline_is_well_formed_trace_events(runs: dict[str, Path], kind: str) -> None:
    events = timeline(runs[kind])
    last_ts = 0.0
    open_slices: dict[tuple[int, int], list[str]] = defaultdict(list)
    for e in events:
        assert e["ph"] in PHASES
        assert isinstance(e["pid"], int)
        assert e["ph"] == "E" or isinstance(e["name"], str)
        if e["ph"] == "M":
            assert e["name"] in {"process_name", "process_sort_index", "thread_name"}
            continue
        assert e["ts"] >= last_ts, "events are in time order"
        last_ts = e["ts"]
        if e["ph"] == "C":
            assert all(isinstance(v, int | float) for v in e["args"].values())
        elif e["ph"] == "B":
            open_slices[e["pid"], e["tid"]].append(e["name"])
        elif e["ph"] == "E":
            assert open_slices[e["pid"], e["tid"]].pop() is not None
    assert not any(open_slices.values()), "every slice ends"
    names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert any(n.startswith("pool ") for n in names)
    assert any(n.startswith("tenant ") for n in names)


@pytest.mark.parametrize("kind", KINDS)
def test_every_job_slice_matches_a_run_in_the_log(runs: dict[str, Path], kind: str) -> None:
    run = runs[kind]
    runs_in_log: list[tuple[str, float, float]] = []
    started: dict[str, float] = {}
    end_s = 0.0
    for e in read_events(run / "events.jsonl"):
        end_s = e["t_s"]
        if e["kind"] == "job_started":
            started[e["job_id"]] = e["t_s"]
        elif (
            e["kind"] in {"job_finished", "job_censored", "job_interrupted", "job_failed"}
            and e["job_id"] in started
        ):
            runs_in_log.append((e["job_id"], started.pop(e["job_id"]), e["t_s"]))
    runs_in_log += [(job, t, end_s) for job, t in started.items()]
    slices: list[tuple[str, float, float]] = []
    opened: dict[tuple[int, int], tuple[str, float]] = {}
    for e in timeline(run):
        key = (e["pid"], e.get("tid", 0))
        if e["ph"] == "B":
            opened[key] = (e["name"], e["ts"])
        elif e["ph"] == "E":
            name, ts = opened.pop(key)
            slices.append((name, ts / 1e6, e["ts"] / 1e6))
    assert len(slices) == len(runs_in_log) > 0
    for (name, start, end), (job, t0, t1) in zip(sorted(slices), sorted(runs_in_log), strict=True):
        assert name == job
        assert (start, end) == pytest.approx((t0, t1), rel=1e-12)  # microseconds and back


def test_instants_mark_trades(runs: dict[str, Path]) -> None:
    trades = [e for e in timeline(runs["session"]) if e.get("name") == "trade_settled"]
    [(applied,)] = sql(runs["session"], "select count(*) from {trade_settled} where applied")
    assert len(trades) == applied > 0


# -- bad input ---------------------------------------------------------------------------------


def test_a_corrupt_log_line_is_named_and_nothing_is_half_written(tmp_path: Path) -> None:
    (tmp_path / "events.jsonl").write_text(
        '{"kind": "episode_ended", "t_s": 0.0, "session": "s", "tenant": null, '
        '"reason": "horizon"}\n{"kind": "job_arrived", "t_s": 1.0\n'
    )
    result = twin_command("export", str(tmp_path), "--format", "parquet")
    assert result.returncode == 2
    assert result.stderr.startswith(f"twin: error: {tmp_path / 'events.jsonl'}:2: not JSON")
    assert "Traceback" not in result.stderr
    assert not list(tmp_path.glob("parquet/*"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["export", "{dir}", "--format", "xlsx"], "unknown export format 'xlsx'"),
        (["export", "{dir}/nothing"], "cannot read the event log"),
        (["run", "--export", "parquet"], "give --out"),
    ],
)
def test_export_bad_input_is_one_clear_line(tmp_path: Path, args: list[str], message: str) -> None:
    result = twin_command(*(a.format(dir=tmp_path) for a in args))
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
