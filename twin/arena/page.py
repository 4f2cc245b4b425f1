"""`leaderboard.html`: the arena on one self-contained page (no script, nothing loaded): per
scenario the ranking, a figure per measure with its interval, the per-role table, and what the
arena ran (versions, scenario hashes, seeds, agents and prompt hashes)."""

from __future__ import annotations

import html
from typing import Any

from twin.arena.board import ALL_ROLES
from twin.eventlog import report

Row = dict[str, Any]

OUTCOME = (
    ("#", "rank", None), ("agent", "agent", None), ("return $", "return_usd", 0),
    ("95% CI", ("return_lo_usd", "return_hi_usd"), 0), ("gain $", "gain_usd", 0),
    ("95% CI", ("gain_lo_usd", "gain_hi_usd"), 0), ("diff. reward $", "difference_reward_usd", 1),
    ("welfare $", "welfare_usd", 0), ("welfare gain $", "welfare_gain_usd", 0),
    ("Jain", "jain_delay", 3), ("Pareto", "pareto_share", 2),
)  # fmt: skip
NEGOTIATION = (
    ("agent", "agent", None), ("offers made", "offers_made", 1), ("taken", "offers_taken", 1),
    ("refused", "offers_refused", 1), ("trades", "trades_applied", 1),
    ("valid first", "valid_first_share", 2), ("fallbacks", "fallbacks", 1),
    ("answer p50 ms", "answer_ms_p50", 2), ("p95 ms", "answer_ms_p95", 2),
)  # fmt: skip
Columns = tuple[tuple[str, "str | tuple[str, str]", "int | None"], ...]
FIGURES = (
    ("return ($), mean and 95% CI", "return_usd", ("return_lo_usd", "return_hi_usd")),
    ("gain over the paired baseline ($)", "gain_usd", ("gain_lo_usd", "gain_hi_usd")),
    ("difference reward ($ per session)", "difference_reward_usd", None),
    ("trades applied per session", "trades_applied", None),
    ("answer time p95 (ms)", "answer_ms_p95", None),
    ("welfare: all tenants' return ($)", "welfare_usd", None),
    ("Jain's index over tenants' delays", "jain_delay", None),
    ("share of sessions Pareto-dominating the baseline", "pareto_share", None),
)  # fmt: skip


def cell(row: Row, field: str | tuple[str, str], digits: int | None) -> str:
    """One table cell as text ('-' for nothing measured)."""
    if isinstance(field, tuple):
        low, high = row[field[0]], row[field[1]]
        return f"{low:,.{digits}f}..{high:,.{digits}f}"
    value = row[field]
    if value is None:
        return "-"
    if digits is None or isinstance(value, str):
        return str(value)
    return f"{value:,.{digits}f}"


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
    from matplotlib.figure import Figure

    from twin.eventlog.figures import WIDTH_IN, svg_of

    shown = [r for r in rows if r[field] is not None]
    if not shown:
        return ""
    fig = Figure(figsize=(WIDTH_IN * 0.5, 0.6 + 0.3 * len(shown)))
    ax = fig.subplots()
    ys = list(range(len(shown)))[::-1]
    values = [r[field] for r in shown]
    if interval is not None:
        low = [v - r[interval[0]] for v, r in zip(values, shown, strict=True)]
        high = [r[interval[1]] - v for v, r in zip(values, shown, strict=True)]
        ax.errorbar(values, ys, xerr=[low, high], fmt="o", color="C0", capsize=3)
    else:
        ax.barh(ys, values, color="C0", height=0.5)
    ax.set_yticks(ys, [r["agent"] for r in shown])
    ax.set_title(title, loc="left", fontsize=9)
    return f"<figure>{svg_of(fig)}</figure>"


def _section(title: str, *parts: str) -> str:
    return f"<section><h2>{html.escape(title)}</h2>{''.join(parts)}</section>"


def _kv(pairs: list[tuple[str, str]]) -> str:
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
                   for k, v in pairs)  # fmt: skip
    return f'<table class="kv">{rows}</table>'


def render(board: list[Row], manifest: dict[str, Any]) -> str:
    """The page's HTML."""
    parts = []
    for sha in dict.fromkeys(r["scenario_sha256"] for r in board):
        rows = [r for r in board if r["scenario_sha256"] == sha]
        ranked = [r for r in rows if r["role"] == ALL_ROLES]
        by_role = [r for r in rows if r["role"] != ALL_ROLES]
        name = ranked[0]["scenario"]
        figures = "".join(_figure(t, ranked, f, i) for t, f, i in FIGURES)
        parts.append(_section(
            f"{name}: ranking by gain over the paired baseline, all roles",
            _grid(OUTCOME, ranked), _grid(NEGOTIATION, ranked),
            f'<div class="figs">{figures}</div>',
        ))  # fmt: skip
        role = (("role", "role", None),)
        parts.append(_section(f"{name}: per role", _grid(role + OUTCOME[1:], by_role),
                              _grid(role + NEGOTIATION, by_role)))  # fmt: skip
    agents = [(a["name"], ", ".join(f"{k}={v}" for k, v in a.items() if k != "name" and v))
              for a in manifest["agents"]]  # fmt: skip
    scenarios = [(s["name"], f"{s['spec']} · sha256 {s['sha256'][:16]}… · tenants (their own "
                  "policies, the paired baseline's): " + ", ".join(
                      f"{t} ({p})" for t, p in zip(s["tenants"], s["own_policies"], strict=True)))
                 for s in manifest["scenarios"]]  # fmt: skip
    run = [("twin", ", ".join(manifest["twin_versions"])),
           ("seeds", ", ".join(str(s) for s in manifest["seeds"])),
           ("mechanism", manifest["mechanism"]),
           ("bootstrap", f"{manifest['bootstrap']['resamples']:,} resamples, seed "
                         f"{manifest['bootstrap']['seed']}, percentile "
                         f"{manifest['bootstrap']['confidence']:.0%}")]  # fmt: skip
    parts.append(_section("What ran", _kv(run), "<h3>scenarios</h3>", _kv(scenarios),
                          "<h3>agents</h3>", _kv(agents)))  # fmt: skip
    names = ", ".join(s["name"] for s in manifest["scenarios"])
    return report.page(
        "cluster twin arena",
        html.escape(f"{names} · {len(manifest['seeds'])} seeds"),
        "\n".join(parts),
        "Written by <code>twin arena</code> from its sessions' rows; intervals are 95% "
        "percentile bootstraps over seeds.",
        width="1100px",
    )
