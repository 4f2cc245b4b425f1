"""`report.html`: one self-contained page about a run, built from its event log alone (plus the
replay's and the agents' reports when they sit beside it).

It shows GPUs held and busy per pool, queues and spend per tenant over time, job completion and
queueing-delay CDFs, the per-tenant and per-pool tables; for a replay, simulated against
observed delay; for a session, the negotiation round by round. The page has no script and loads
nothing: styles and SVG figures are inline.
"""

from __future__ import annotations

import html
from array import array
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from twin.eventlog import figures
from twin.eventlog.export import read_events
from twin.eventlog.html_page import page
from twin.eventlog.jobs import JobTable
from twin.eventlog.log import from_dict
from twin.eventlog.metrics import Metrics
from twin.eventlog.occupancy import Occupancy
from twin.eventlog.rounds import RoundTable
from twin.schema.summary import ReplayReport, Summary
from twin.schema.vocabulary import AGENTS_FILE, EVENTS_FILE, REPLAY_FILE

CHUNK = 8192


class _Pair:
    """A step series as two packed arrays; a change at the same time replaces the last."""

    __slots__ = ("t", "v")

    def __init__(self) -> None:
        self.t, self.v = array("d"), array("d")

    def add(self, t_s: float, value: float) -> None:
        if self.t and self.t[-1] == t_s:
            self.v[-1] = value
        else:
            self.t.append(t_s)
            self.v.append(value)

    def arrays(self) -> figures.Step:
        return np.frombuffer(self.t, dtype=float), np.frombuffer(self.v, dtype=float)


class Series(Occupancy):
    """What the figures plot over time, gathered as the log plays."""

    def __init__(self) -> None:
        super().__init__()
        self.held_s: dict[str, _Pair] = defaultdict(_Pair)
        self.busy_s: dict[str, _Pair] = defaultdict(_Pair)
        self.queue_s: dict[str, _Pair] = defaultdict(_Pair)
        self.spend_s: dict[str, _Pair] = defaultdict(_Pair)

    def on_pool(self, t_s: float, pool: str, held: float, busy: float) -> None:
        self.held_s[pool].add(t_s, held)
        self.busy_s[pool].add(t_s, busy)

    def on_queue(self, t_s: float, tenant: str, jobs: int) -> None:
        self.queue_s[tenant].add(t_s, jobs)

    def on_spend(self, t_s: float, tenant: str, spent_usd: float) -> None:
        self.spend_s[tenant].add(t_s, spent_usd)


class _Samples:
    """Per tenant: completion time and queueing delay of each finished job."""

    def __init__(self) -> None:
        self.completion_s: dict[str, array[float]] = defaultdict(lambda: array("d"))
        self.queueing_s: dict[str, array[float]] = defaultdict(lambda: array("d"))

    def __call__(self, row: dict[str, Any]) -> None:
        if row["outcome"] == "finished":
            self.completion_s[row["tenant"]].append(row["completion_s"])
            self.queueing_s[row["tenant"]].append(row["queueing_delay_s"])


def _fold(
    events: Iterable[dict[str, Any]],
) -> tuple[Summary, Series, _Samples, list[dict[str, Any]]]:
    metrics, series, samples = Metrics(), Series(), _Samples()
    round_rows: list[dict[str, Any]] = []
    jobs, rounds = JobTable(samples), RoundTable(lambda row: round_rows.append(dict(row)))
    chunk = []
    for event in events:
        if not metrics.session:
            metrics.session = event.get("session", "")
        series.take(event)
        jobs.take(event)
        rounds.take(event)
        chunk.append(from_dict(event))
        if len(chunk) >= CHUNK:
            metrics.consume(chunk)
            chunk = []
    metrics.consume(chunk)
    series.close()
    jobs.close()
    return metrics.summary(), series, samples, round_rows


def _table(head: list[str], rows: list[list[str]]) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{cells}</tr></thead><tbody>{body}</tbody></table>"


def _n(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _q(values: array[float], p: float) -> str:
    return "-" if not values else _n(float(np.percentile(np.frombuffer(values), p)))


def _section(title: str, *parts: str) -> str:
    return f"<section><h2>{html.escape(title)}</h2>{''.join(parts)}</section>"


def _overview(s: Summary) -> str:
    rows = [
        ["scenario", s.scenario], ["seed", str(s.seed)], ["session", s.session],
        ["ended", f"{s.end_reason or '-'} at {s.end_t_s / 3600:,.2f} h"],
        ["events", f"{s.events:,}"], ["decisions", f"{s.decisions:,}"],
        ["jobs", f"{s.jobs.arrived:,} arrived · {s.jobs.finished:,} finished · "
                 f"{s.jobs.failed:,} failed · {s.jobs.unfinished:,} unfinished"],
        ["cost", f"${s.cost_usd:,.2f} · SLA ${s.sla_usd:,.2f}"],
        ["reward", f"{s.reward:,.2f} (score {s.score:.3f})"],
    ]  # fmt: skip
    cells = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return f"<table class='kv'>{cells}</table>"


def _tenants(s: Summary, samples: _Samples) -> str:
    head = ["tenant", "arrived", "finished", "failed", "cost $", "SLA $", "value $", "traded $",
            "reward $", "JCT p50 s", "JCT p99 s", "delay p50 s", "delay p99 s"]  # fmt: skip
    rows = [
        [t.name, _n(t.jobs_arrived), _n(t.jobs_finished), _n(t.jobs_failed), _n(t.cost_usd, 2),
         _n(t.sla_usd, 2), _n(t.value_usd, 2), _n(t.traded_usd, 2), _n(t.reward_usd, 2),
         _q(samples.completion_s[t.name], 50), _q(samples.completion_s[t.name], 99),
         _q(samples.queueing_s[t.name], 50), _q(samples.queueing_s[t.name], 99)]
        for t in s.tenants
    ]  # fmt: skip
    return _table(head, rows)


def _pools(s: Summary) -> str:
    head = ["pool", "held GPU-h", "busy GPU-h", "utilisation", "cost $"]
    rows = [
        [p.name, _n(p.held_gpu_h, 1), _n(p.busy_gpu_h, 1),
         "-" if p.utilisation is None else f"{p.utilisation:.1%}", _n(p.cost_usd, 2)]
        for p in s.pools
    ]  # fmt: skip
    return _table(head, rows)


def _replay(path: Path) -> str:
    if not path.is_file():
        return ""
    r = ReplayReport.model_validate_json(path.read_bytes())
    facts = _table(
        ["trace", "format", "jobs read", "replayed", "bad lines", "cluster"],
        [[r.trace, r.format, _n(r.jobs_read), _n(r.jobs_replayed), _n(r.bad_lines),
          ", ".join(f"{k} {v:,}" for k, v in r.cluster.items())]],
    )  # fmt: skip
    d = r.queueing_delay
    if d is None:
        note = "<p>The trace records no start times, so there is no observed delay to compare.</p>"
        return _section("Replay", facts, note)
    if not d.observed_cdf_s:
        return _section("Replay", facts, f"<p>KS distance {d.ks_distance:.3f}</p>")
    plot = figures.delay_curves(d.cdf_levels, d.observed_cdf_s, d.simulated_cdf_s, d.ks_distance)
    caption = (f"<p>Queueing delay of the {d.observed_jobs:,} jobs whose start the trace "
               f"recorded, against the twin's; KS distance {d.ks_distance:.3f}.</p>")  # fmt: skip
    return _section("Replay: simulated against observed", facts, caption, _figure(plot))


def _negotiation(rows: list[dict[str, Any]], agents_path: Path | None) -> str:
    if not rows or not any(r["offers_made"] or r["policy"] == "agent" for r in rows):
        return ""
    by_tenant: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        for key in ("round", "reward_usd", "difference_reward", "offers_made",
                    "offers_accepted", "granted_gpus"):  # fmt: skip
            value = r[key]
            by_tenant[r["tenant"]][key].append(float("nan") if value is None else float(value))
    arrays = {t: {k: np.asarray(v) for k, v in cols.items()} for t, cols in by_tenant.items()}
    totals = []
    for tenant, cols in sorted(by_tenant.items()):
        mine = [r for r in rows if r["tenant"] == tenant]
        totals.append([
            tenant, _n(len(mine)), _n(sum(r["defaulted"] for r in mine)),
            _n(sum(cols["offers_made"])), _n(sum(cols["offers_accepted"])),
            _n(sum(r["trades"] for r in mine)), _n(sum(r["traded_usd"] for r in mine), 2),
            _n(sum(r["market_fills"] for r in mine)),
            _n(float(np.nansum(cols["reward_usd"])), 2),
            _n(float(np.nansum(cols["difference_reward"])), 2),
        ])  # fmt: skip
    table = _table(["tenant", "rounds", "defaulted", "offers made", "accepted", "trades",
                    "traded $", "market fills", "reward $", "difference reward GPUs"],
                   totals)  # fmt: skip
    note = ("<p>Rewards as each agent heard them at its rounds' commits. What accrued after "
            "its last round it heard in the final settlement (<code>episode_settled</code>); "
            "with it, each agent's rewards add up to its return in the tenants' table "
            "above.</p>")  # fmt: skip
    parts = [_figure(figures.rounds(arrays)), table, note]
    if agents_path is not None and agents_path.is_file():
        agents = orjson.loads(agents_path.read_bytes()).get("agents", {})
        parts.append(_table(
            ["tenant", "policy", "LLM asks", "valid first try", "fallbacks"],
            [[t, str(a.get("policy", "-")), _n(a.get("llm", {}).get("asks")),
              _n(a.get("llm", {}).get("valid_first_try")),
              _n(a.get("llm", {}).get("fallbacks"))] for t, a in sorted(agents.items())],
        ))  # fmt: skip
    return _section("Negotiation, round by round", *parts)


def _figure(svg: str) -> str:
    return f"<figure>{svg}</figure>"


def render(events: Iterable[dict[str, Any]], beside: Path | None = None) -> str:
    """The report's HTML for a log's events (and the replay's and agents' reports in the
    directory `beside`, if given)."""
    summary, series, samples, round_rows = _fold(events)
    end_s = summary.end_t_s

    def reduced(pairs: dict[str, _Pair]) -> dict[str, figures.Step]:
        return {k: figures.envelope(*v.arrays(), end_s) for k, v in pairs.items()}

    parts = [_section("Run", _overview(summary))]
    if series.held_s:
        pools = figures.pools(reduced(series.held_s), reduced(series.busy_s), end_s)
        parts.append(_section("GPUs held and busy per pool", _figure(pools), _pools(summary)))
    if series.queue_s:
        queues = figures.per_tenant(reduced(series.queue_s), end_s, "jobs")
        parts.append(_section("Queued jobs per tenant", _figure(queues)))
        spend = figures.per_tenant(reduced(series.spend_s), end_s, "GPU spend ($)",
                                   series.budget_usd)  # fmt: skip
        parts.append(_section("Spend per tenant (dashed: budget)", _figure(spend)))
    finished = {t: np.frombuffer(v) for t, v in samples.completion_s.items()}
    if any(len(v) for v in finished.values()):
        waits = {t: np.frombuffer(v) for t, v in samples.queueing_s.items()}
        plot = figures.cdfs([("job completion time (s)", finished),
                             ("queueing delay (s)", waits)])  # fmt: skip
        parts.append(_section("Job completion time and queueing delay", _figure(plot)))
    parts.append(_section("Tenants", _tenants(summary, samples)))
    if beside is not None:
        parts.append(_replay(beside / REPLAY_FILE))
    parts.append(_negotiation(round_rows, beside / AGENTS_FILE if beside is not None else None))
    return page(
        "cluster twin report",
        html.escape(f"{summary.scenario} · seed {summary.seed}"),
        "\n".join(p for p in parts if p),
        "Written by <code>twin report</code> from the run's event log; virtual time throughout.",
    )


def write_report(run_dir: Path, target: Path) -> Path:
    """Write the report of the run in `run_dir` (or of the log file it names) to `target`."""
    log_path = run_dir / EVENTS_FILE if run_dir.is_dir() else run_dir
    page = render(read_events(log_path), log_path.parent)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(page, encoding="utf-8")
    return target
