"""The watch's dashboard: one page, drawn on the server from the latest view (no script; it
reloads itself at the poll interval): each waiting job's start with its 80% interval and the
cluster's own estimate beside it, the queue's fan chart, and the rolling score."""

from __future__ import annotations

import html
from datetime import UTC, datetime

from twin.watch.score import PREDICTORS, ScoreSummary, predictor
from twin.watch.watch import BandView, View

NAMES = {"twin": "the twin", "starts_now": "“starts now”", "estimate": "the cluster's estimate"}
CHART_W, CHART_H, PAD = 640, 200, 36
DASH = "-"
MIN_REFRESH_S = 5.0  # the page reloads itself at the poll interval, but not faster


def _when(t_s: float | None, now_s: float | None) -> str:
    if t_s is None:
        return DASH
    if t_s > 1e8:  # on a wall clock
        stamp = datetime.fromtimestamp(t_s, UTC).strftime("%H:%M:%S")
    else:
        stamp = f"{t_s:,.0f} s"
    return stamp if now_s is None else f"{stamp} ({_offset(t_s - now_s)})"


def _offset(seconds: float) -> str:
    sign = "+" if seconds >= 0 else "-"
    s = abs(seconds)
    text = f"{s:.0f} s" if s < 120 else (f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h")
    return sign + text


def _seconds(value: float | None) -> str:
    return DASH if value is None else f"{value:,.1f} s"


def _share(value: float | None) -> str:
    return DASH if value is None else f"{value:.0%}"


def fan_chart(band: BandView) -> str:
    """The queue's p10-p90 band and median over the horizon, as inline SVG."""
    xs, lo, mid, hi = band["offsets_s"], band["p10"], band["p50"], band["p90"]
    if len(xs) < 2:
        return "<p>no horizon to draw</p>"
    top = max(*hi, 1.0)
    span = xs[-1] - xs[0] or 1.0

    def x(t: float) -> float:
        return PAD + (t - xs[0]) / span * (CHART_W - 2 * PAD)

    def y(v: float) -> float:
        return CHART_H - PAD + -(v / top) * (CHART_H - 2 * PAD)

    upper = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in zip(xs, hi, strict=True))
    lower = " ".join(
        f"{x(t):.1f},{y(v):.1f}" for t, v in zip(reversed(xs), reversed(lo), strict=True)
    )
    median = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in zip(xs, mid, strict=True))
    ticks = "".join(
        f'<text x="{x(t):.1f}" y="{CHART_H - PAD + 16}" class="tick">+{t / 3600:g} h</text>'
        for t in (xs[0], xs[len(xs) // 2], xs[-1])
    )
    return (
        f'<svg id="fan" viewBox="0 0 {CHART_W} {CHART_H}" role="img" '
        f'aria-label="jobs waiting, median and 80% band">'
        f'<polygon class="band" points="{upper} {lower}"/>'
        f'<polyline class="median" points="{median}"/>'
        f'<text x="{PAD}" y="{PAD - 10}" class="tick">{top:.0f} jobs</text>'
        f'<line class="axis" x1="{PAD}" y1="{CHART_H - PAD}" x2="{CHART_W - PAD}" '
        f'y2="{CHART_H - PAD}"/>{ticks}</svg>'
    )


def _score_table(caption: str, score: ScoreSummary, table_id: str) -> str:
    rows = "".join(
        f"<tr><th>{NAMES[name]}</th><td>{p['pairs']}</td>"
        f"<td>{_seconds(p['median_abs_error_s'])}</td><td>{_share(p['within_10s'])}</td></tr>"
        for name in PREDICTORS
        if (p := predictor(score, name))
    )
    return (
        f'<table id="{table_id}"><caption>{html.escape(caption)}: {score["pairs"]} pairs, median '
        f"wait {_seconds(score['median_wait_s'])}, the twin's 80% interval held "
        f"{_share(score['twin_coverage_80'])}</caption><tr><th>predictor</th><th>pairs</th>"
        f"<th>median |error|</th><th>within 10 s</th></tr>{rows}</table>"
    )


def render(view: View, refresh_s: float, query: str = "") -> str:
    """The page; `query` (`?token=...` where the watch needs one) is kept on its own links."""
    now = view["taken_s"]
    what_if = view["what_if"]
    extra = f"<th>with {html.escape(', '.join(what_if))}</th>" if what_if else ""
    head = ("<tr><th>job</th><th>tenant</th><th>GPUs</th><th>submitted</th><th>starts (median)"
            f"</th><th>80% interval</th><th>cluster's estimate</th>{extra}</tr>")  # fmt: skip
    rows = "".join(
        f'<tr class="job"><td>{html.escape(j["job_id"])}</td><td>{html.escape(j["tenant"])}</td>'
        f"<td>{j['gpus']:g}</td><td>{_when(j['submit_s'], now)}</td>"
        f"<td>{_when(j['start_p50_s'], now)}</td>"
        f"<td>{_when(j['start_p10_s'], now)} to {_when(j['start_p90_s'], now)}</td>"
        f"<td>{_when(j['estimate_s'], now)}</td>"
        + (f"<td>{_when(j['what_if_p50_s'], now)}</td>" if what_if else "")
        + "</tr>"
        for j in view["jobs"]
    )
    band = next((b for b in view["queue"] if b["name"] == "(all)"), None)
    errors = "".join(f"<li>{html.escape(e)}</li>" for e in view["errors"])
    instant = _when(view["at_s"], None) if view["at_s"] is not None else "no capture yet"
    return (
        "<!doctype html><html lang=en><meta charset=utf-8>"
        f'<meta http-equiv="refresh" content="{max(refresh_s, MIN_REFRESH_S):g}">'
        f'<title>twin watch</title><link rel="stylesheet" href="/watch.css{html.escape(query)}">'
        f"<h1>twin watch: {html.escape(view['source'])}</h1>"
        f'<p id="status">state at {instant} · {view["running"]} running · {view["waiting"]} '
        f"waiting · {view['captures']} captures with a change · {view['open_pairs']} forecasts "
        "waiting for their job to start</p>"
        + (f'<ul id="errors">{errors}</ul>' if errors else "")
        + f'<h2>waiting jobs</h2><table id="jobs">{head}{rows}</table>'
        + "<h2>jobs waiting over the next hours (median, 80% band)</h2>"
        + (fan_chart(band) if band is not None else "<p>no forecast yet</p>")
        + "<h2>score: each forecast against the start the cluster gave</h2>"
        + _score_table("rolling (the pairs scored last)", view["rolling"], "rolling")
        + _score_table("since the watch began", view["score"], "score")
        + f'<p><a href="/watch.json{html.escape(query)}">the same as JSON</a></p></html>\n'
    )


STYLE = """body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{padding:2px 10px;text-align:right}
th{background:#f2f2f2}caption{text-align:left;padding:4px 0}
#fan{width:100%;max-width:680px;height:auto}.band{fill:#8ab4f8;opacity:.45}
.median{fill:none;stroke:#1a5fd0;stroke-width:2}.axis{stroke:#888}.tick{font-size:11px;fill:#555}
#errors{color:#a00}
"""
