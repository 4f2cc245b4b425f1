"""`leaderboard.html`: the arena on one self-contained page (no script, nothing loaded): per
scenario and mechanism the ranking, a figure per measure with its interval, the per-role table,
the mirror (every tenant one agent) against the bound and the cross-play matrix; and what the
arena ran (versions, scenario hashes, seeds, agents and prompt hashes)."""

from __future__ import annotations

import html
from typing import Any

from twin.arena.board import ALL_ROLES
from twin.arena.chart import ranking_svg
from twin.eventlog.html_page import page

Row = dict[str, Any]

OUTCOME = (
    ("#", "rank", None), ("agent", "agent", None), ("return $", "return_usd", 0),
    ("95% CI", ("return_lo_usd", "return_hi_usd"), 0), ("gain $", "gain_usd", 0),
    ("95% CI", ("gain_lo_usd", "gain_hi_usd"), 0),
    ("diff. reward GPUs", "difference_reward_gpus", 1),
    ("welfare $", "welfare_usd", 0), ("welfare gain $", "welfare_gain_usd", 0),
    ("Jain", "jain_delay", 3), ("Pareto", "pareto_share", 2),
    ("trade gain $", "trade_gain_usd", 1), ("score", "score", 2),
)  # fmt: skip
MIRROR = (
    ("agent", "agent", None), ("trades", "trades", None), ("welfare $", "total_return_usd", 0),
    ("welfare gain $", "welfare_gain_usd", 0),
    ("95% CI", ("welfare_gain_lo_usd", "welfare_gain_hi_usd"), 0),
    ("provisioning gain $", "provisioning_welfare_gain_usd", 0),
    ("95% CI", ("provisioning_welfare_gain_lo_usd", "provisioning_welfare_gain_hi_usd"), 0),
    ("trade gain $", "trade_welfare_gain_usd", 0),
    ("95% CI", ("trade_welfare_gain_lo_usd", "trade_welfare_gain_hi_usd"), 0),
    ("trade headroom $", "trade_headroom_usd", 0), ("repair", "trade_repair", None),
    ("score", "score", 2), ("95% CI", ("score_lo", "score_hi"), 2),
    ("to the bound $", "distance_usd", 0), ("Pareto", "pareto_share", 2),
    ("surplus shares", "shares", None),
)  # fmt: skip
NEGOTIATION = (
    ("agent", "agent", None), ("offers made", "offers_made", 1), ("taken", "offers_taken", 1),
    ("refused", "offers_refused", 1), ("to non-traders", "offers_to_nontraders", 1),
    ("trades", "trades_applied", 1),
    ("valid first", "valid_first_share", 2), ("fallbacks", "fallbacks", 1),
    ("answer p50 ms", "answer_ms_p50", 2), ("p95 ms", "answer_ms_p95", 2),
)  # fmt: skip
Columns = tuple[tuple[str, "str | tuple[str, ...]", "int | None"], ...]
SESSION_WIDE = ("welfare_usd", "welfare_gain_usd", "jain_delay", "pareto_share")
"""Measures of whole sessions: where every agent's row has the same (each played in all the
same sessions), they are shown once, not on every row."""
GLOSSARY = (
    ("return $", "the tenant's return, from the session's summary: the value of its finished "
     "work less GPU cost and SLA penalties, plus money traded; mean over seeds"),
    ("gain $", "the return less the same tenant's return on the same seed in the paired "
     "baseline, where every tenant follows its own policy"),
    ("95% CI", "a 95% percentile bootstrap interval over seeds for the measure on its left"),
    ("diff. reward GPUs", "the difference rewards the kernel credited the agent, summed over a "
     "session's rounds: useful GPUs run less the over-commitment its demand added"),
    ("welfare $", "all tenants' returns together, per session"),
    ("welfare gain $", "welfare less the paired baseline's"),
    ("Jain", "Jain's fairness index over the tenants' mean queueing delays: 1 when equal, "
     "1/n when one tenant does all the waiting"),
    ("Pareto", "the share of sessions in which every tenant is at least as well off as in the "
     "baseline, and one better"),
    ("trade gain $", "the return less the same line-up's with trading switched off"),
    ("provisioning gain $", "in the mirror, welfare with trading switched off less the "
     "baseline's: what the agent's own provisioning gains"),
    ("trade headroom $", "what trade could add at most: the bound with GPUs movable between "
     "tenants less the bound with holdings kept apart"),
    ("repair", "yes where the mirror's trade gain exceeds the trade headroom: trading then makes "
     "up for the agent's own provisioning rather than gaining from trade"),
    ("score", "(welfare - baseline) / (bound - baseline), the bound what a planner with "
     "hindsight reaches (twin bound): 0 at the baseline, 1 at the bound"),
    ("to the bound $", "the bound's welfare less the session's"),
    ("surplus shares", "each tenant's share of the welfare gain"),
    ("offers made, taken, refused", "offers the agent made per session, and how many the other "
     "side took or refused"),
    ("to non-traders", "offers made to tenants whose policy never trades"),
    ("trades", "trades applied that the agent was party to, per session"),
    ("valid first", "of an LLM agent's questions to its model, the share answered validly at "
     "the first try (none for built-ins)"),
    ("fallbacks", "turns and answers the fallback policy gave, per session"),
    ("answer p50 / p95 ms", "how long the agent took to answer a round, wall clock"),
)  # fmt: skip
FigureSpec = tuple[str, list[Row], str, tuple[str, str] | None]
"""A figure to draw: its title, the ranked rows, the field and its interval's fields."""
FIGURES = (
    ("return ($), mean and 95% CI", "return_usd", ("return_lo_usd", "return_hi_usd")),
    ("gain over the paired baseline ($)", "gain_usd", ("gain_lo_usd", "gain_hi_usd")),
    ("difference reward (useful GPUs, summed over a session's rounds)", "difference_reward_gpus",
     None),
    ("trades applied per session", "trades_applied", None),
    ("answer time p95 (ms)", "answer_ms_p95", None),
    ("welfare: all tenants' return ($)", "welfare_usd", None),
    ("Jain's index over tenants' delays", "jain_delay", None),
    ("share of sessions Pareto-dominating the baseline", "pareto_share", None),
)  # fmt: skip


def cell(row: Row, field: str | tuple[str, ...], digits: int | None) -> str:
    """One table cell as text ('-' for nothing measured): a field, an interval (two fields), or
    a value with its interval (three)."""
    if isinstance(field, tuple) and len(field) == 3:
        value = cell(row, field[0], digits)
        return value if value == "-" else f"{value} ({cell(row, field[1:], digits)})"
    if isinstance(field, tuple):
        low, high = row[field[0]], row[field[1]]
        if low is None or high is None:
            return "-"
        return f"{_number(low, digits)}..{_number(high, digits)}"
    value = row[field]
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if digits is None or isinstance(value, str):
        return str(value)
    return _number(value, digits)


def _number(value: float, digits: int | None) -> str:
    """`value` with `digits` decimals ("-0" shown as "0")."""
    text = f"{value:,.{digits or 0}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.,") else text


def _grid(columns: Columns, rows: list[Row]) -> str:
    """A table of `rows` by `columns`; text columns (no digits) aligned left."""
    left = ["" if d is not None else ' class="t"' for _, _, d in columns]
    head = "".join(
        f"<th{c}>{html.escape(h)}</th>" for c, (h, _, _) in zip(left, columns, strict=True)
    )
    body = "".join(
        "<tr>" + "".join(f"<td{c}>{html.escape(cell(r, f, d))}</td>"
                         for c, (_, f, d) in zip(left, columns, strict=True)) + "</tr>"
        for r in rows
    )  # fmt: skip
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure(title: str, rows: list[Row], field: str, interval: tuple[str, str] | None) -> str:
    """The ranking chart of `field` (with its interval's whisker), or "" when there is nothing
    to draw (no value, or zero for every agent)."""
    shown = [r for r in rows if r[field] is not None]
    if not shown or all(r[field] == 0 for r in shown):  # no axes for nothing to draw
        return ""
    values = [float(r[field]) for r in shown]
    whiskers = None
    if interval is not None:
        whiskers = [(_or(r[interval[0]], v), _or(r[interval[1]], v))
                    for r, v in zip(shown, values, strict=True)]  # fmt: skip
    labels = [str(r["agent"]) for r in shown]
    return f"<figure>{ranking_svg(title, labels, values, whiskers)}</figure>"


def _or(bound: float | None, value: float) -> float:
    """An interval's end, or the value itself where the interval is missing."""
    return value if bound is None else float(bound)


def shared(rows: list[Row], columns: Columns) -> dict[str, str]:
    """The session-wide measures of `columns` that every row shows alike, as they read."""
    out = {}
    for head, field, digits in columns:
        if isinstance(field, str) and field in SESSION_WIDE and rows:
            texts = {cell(r, field, digits) for r in rows}
            if len(texts) == 1:
                out[head] = texts.pop()
    return out


def _ranked(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r["role"] == ALL_ROLES]


def _figures(rows: list[Row]) -> list[FigureSpec]:
    """The figures of a ranking, to draw."""
    ranked = _ranked(rows)
    return [(t, ranked, f, i) for t, f, i in FIGURES]


def _rotation(title: str, rows: list[Row], figures: list[str]) -> list[str]:
    ranked = _ranked(rows)
    by_role = [r for r in rows if r["role"] != ALL_ROLES]
    zero = [t for (t, f, _), fig in zip(FIGURES, figures, strict=True)
            if not fig and any(r[f] is not None for r in ranked)]  # fmt: skip
    once = shared(ranked, OUTCOME)
    outcome = tuple(c for c in OUTCOME if c[0] not in once)
    role = (("role", "role", None),)
    return [
        _section(f"{title}: ranking by gain over the paired baseline, all roles",
                 _grid(outcome, ranked),
                 _kv([(f"{h} (the sessions, all agents together)", v) for h, v in once.items()])
                 if once else "",
                 _grid(NEGOTIATION, ranked),
                 f'<div class="figs">{"".join(figures)}</div>',
                 f"<p>zero for every agent: {html.escape('; '.join(zero))}</p>" if zero else ""),
        _section(f"{title}: per role", _grid(role + OUTCOME[1:], by_role),
                 _grid(role + NEGOTIATION, by_role)),
    ]  # fmt: skip


def _shares(shares: dict[str, float]) -> str:
    return " · ".join(f"{t} {v:.2f}" for t, v in shares.items()) or "-"


def _matrix(pairs: list[Row]) -> str:
    """Rows: the agent in one seat; columns: the agent in every other; a cell: the row agent's
    gain and its interval."""
    agents = sorted({r["agent"] for r in pairs} | {r["against"] for r in pairs})
    found = {(r["agent"], r["against"]): r for r in pairs}
    head = "".join(f"<th>{html.escape(a)}</th>" for a in agents)
    body = ""
    for a in agents:
        cells = ""
        for b in agents:
            r = found.get((a, b))
            text = (
                ""
                if r is None
                else (f"{r['gain_usd']:,.0f} ({r['gain_lo_usd']:,.0f}..{r['gain_hi_usd']:,.0f})")
            )
            cells += f"<td>{html.escape(text)}</td>"
        body += f'<tr><th class="t">{html.escape(a)}</th>{cells}</tr>'
    return f'<table><thead><tr><th class="t">in one seat</th>{head}</tr></thead>{body}</table>'


def _section(title: str, *parts: str) -> str:
    return f"<section><h2>{html.escape(title)}</h2>{''.join(parts)}</section>"


def _kv(pairs: list[tuple[str, str]]) -> str:
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
                   for k, v in pairs)  # fmt: skip
    return f'<table class="kv">{rows}</table>'


def render(board: list[Row], manifest: dict[str, Any], mirrored: list[Row] | None = None,
           crossed: list[Row] | None = None) -> str:  # fmt: skip
    """The page's HTML."""
    parts = []
    groups = dict.fromkeys((r["scenario_sha256"], r["mechanism"]) for r in board)
    groups.update(dict.fromkeys((r["scenario_sha256"], r["mechanism"])
                                for r in [*(mirrored or []), *(crossed or [])]))  # fmt: skip
    boards = {g: [r for r in board if (r["scenario_sha256"], r["mechanism"]) == g] for g in groups}
    for sha, mechanism in groups:
        rows = boards[sha, mechanism]
        key = (sha, mechanism)
        mine = [r for r in mirrored or [] if (r["scenario_sha256"], r["mechanism"]) == key]
        pairs = [r for r in crossed or [] if (r["scenario_sha256"], r["mechanism"]) == key]
        name = (rows or mine or pairs)[0]["scenario"]
        title = f"{name} ({mechanism})"
        if rows:
            parts += _rotation(title, rows, [_figure(*spec) for spec in _figures(rows)])
        if mine:
            shown = [{**r, "shares": _shares(r["surplus_shares"])} for r in mine]
            parts.append(_section(
                f"{title}: mirror, every tenant one agent, against the baseline and the bound",
                _grid(MIRROR, shown),
                "<p>score: (welfare - baseline) / (bound - baseline), the bound what a planner "
                "with hindsight could reach (<code>twin bound</code>); trade gain: the same "
                "line-up with trading switched off.</p>",
            ))  # fmt: skip
        if pairs:
            parts.append(_section(
                f"{title}: cross-play, the row agent's gain ($) in one seat against the column "
                "agent in the others", _matrix(pairs),
            ))  # fmt: skip
    agents = [(a["name"], ", ".join(f"{k}={v}" for k, v in a.items() if k != "name" and v))
              for a in manifest["agents"]]  # fmt: skip
    scenarios = [(s["name"], f"{s['spec']} · sha256 {s['sha256'][:16]}… · tenants (their own "
                  "policies, the paired baseline's): " + ", ".join(
                      f"{t} ({p})" for t, p in zip(s["tenants"], s["own_policies"], strict=True)))
                 for s in manifest["scenarios"]]  # fmt: skip
    run = [("twin", ", ".join(manifest["twin_versions"])),
           ("seeds", ", ".join(str(s) for s in manifest["seeds"])),
           ("mechanisms", ", ".join(manifest.get("mechanisms") or [manifest["mechanism"]])),
           ("regimes", ", ".join(manifest.get("regimes") or ["rotation"])),
           ("bootstrap", f"{manifest['bootstrap']['resamples']:,} resamples, seed "
                         f"{manifest['bootstrap']['seed']}, percentile "
                         f"{manifest['bootstrap']['confidence']:.0%}")]  # fmt: skip
    parts.append(_section("What the measures mean", _kv(list(GLOSSARY))))
    parts.append(_section("What ran", _kv(run), "<h3>scenarios</h3>", _kv(scenarios),
                          "<h3>agents</h3>", _kv(agents)))  # fmt: skip
    names = ", ".join(s["name"] for s in manifest["scenarios"])
    return page(
        "cluster twin arena",
        html.escape(f"{names} · {len(manifest['seeds'])} seeds"),
        "\n".join(parts),
        "Written by <code>twin arena</code> from its sessions' rows; intervals are 95% "
        "percentile bootstraps over seeds.",
        width="1100px",
    )
