"""A ranking chart as SVG text: one row per agent, a bar from zero to its value, or a dot with its
interval's whisker. Written out directly (a few dozen elements) rather than through matplotlib,
whose import and layout cost a second of every arena's page; the same rows draw the same bytes.

Text stays text (the browser's font); sizes are in CSS pixels.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

WIDTH_PX = 430
ROW_PX = 26
LABEL_PX = 120  # the agents' names, left of the axes
TOP_PX = 24  # the title
BOTTOM_PX = 22  # the tick labels
RIGHT_PX = 16
FONT = 'font-family="sans-serif" font-size="11"'
COLOUR = "#1f77b4"  # matplotlib's C0: the colour the earlier figures used


def nice_ticks(low: float, high: float, most: int = 6) -> list[float]:
    """Round tick values covering [low, high]: steps of 1, 2, 2.5 or 5 times a power of ten,
    about `most` of them (the ends rounded outwards may add one; a span of nothing is widened
    by a tenth of its value either side, or by 1 at zero)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"ticks need finite bounds, got {low}..{high}")
    if high - low <= 0:
        pad = abs(high) * 0.1 or 1.0
        low, high = low - pad, high + pad
    raw = (high - low) / max(most - 1, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * power >= raw)
    first = math.floor(low / step + 1e-9)
    last = math.ceil(high / step - 1e-9)
    return [k * step for k in range(first, last + 1)]


def _label(value: float, step: float) -> str:
    """A tick's text: the decimals the step needs, thousands grouped, no "-0"."""
    decimals = next(d for d in range(12) if abs(step * 10**d - round(step * 10**d)) < 1e-6)
    text = f"{value:,.{decimals}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.,") else text


def ranking_svg(title: str, labels: Sequence[str], values: Sequence[float],
                intervals: Sequence[tuple[float, float]] | None = None) -> str:  # fmt: skip
    """The chart: `labels[i]` at row i (top down) with `values[i]` as a bar from zero, or as a
    dot with whisker `intervals[i]` (low, high) when intervals are given."""
    if len(labels) != len(values) or (intervals is not None and len(intervals) != len(values)):
        raise ValueError("a chart needs one label (and interval) per value")
    # Bars start at zero, so their axis covers it; dots cover their whiskers.
    spans = [v for pair in intervals for v in pair] if intervals is not None else [0.0]
    ticks = nice_ticks(min(*values, *spans), max(*values, *spans))
    low, high = ticks[0], ticks[-1]
    plot_px = WIDTH_PX - LABEL_PX - RIGHT_PX
    height_px = TOP_PX + ROW_PX * len(values) + BOTTOM_PX

    def x(value: float) -> float:
        return LABEL_PX + (value - low) / (high - low) * plot_px

    bottom = TOP_PX + ROW_PX * len(values)
    step = ticks[1] - ticks[0]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH_PX}" height="{height_px}" '
        f'viewBox="0 0 {WIDTH_PX} {height_px}" role="img" {FONT}>',
        f"<title>{html.escape(title)}</title>",
        f'<text x="4" y="14" font-size="12">{html.escape(title)}</text>',
    ]
    for tick in ticks:
        at = x(tick)
        parts.append(f'<line x1="{at:.1f}" y1="{TOP_PX}" x2="{at:.1f}" y2="{bottom}" '
                     'stroke="#ccc" stroke-width="0.8"/>')  # fmt: skip
        parts.append(f'<text x="{at:.1f}" y="{bottom + 15}" text-anchor="middle">'
                     f"{_label(tick, step)}</text>")  # fmt: skip
    parts.append(f'<line x1="{LABEL_PX}" y1="{bottom}" x2="{LABEL_PX + plot_px}" y2="{bottom}" '
                 'stroke="#333"/>')  # fmt: skip
    for row, (label, value) in enumerate(zip(labels, values, strict=True)):
        mid = TOP_PX + ROW_PX * row + ROW_PX / 2
        parts.append(f'<text x="{LABEL_PX - 6}" y="{mid + 4:.1f}" text-anchor="end">'
                     f"{html.escape(label)}</text>")  # fmt: skip
        if intervals is None:
            left, right = sorted((x(0.0), x(value)))
            parts.append(f'<rect x="{left:.1f}" y="{mid - ROW_PX * 0.25:.1f}" '
                         f'width="{right - left:.1f}" height="{ROW_PX * 0.5:.1f}" '
                         f'fill="{COLOUR}"><title>{html.escape(label)}: {value:,.4g}</title>'
                         "</rect>")  # fmt: skip
            continue
        lo, hi = intervals[row]
        parts.append(f'<line x1="{x(lo):.1f}" y1="{mid:.1f}" x2="{x(hi):.1f}" y2="{mid:.1f}" '
                     f'stroke="{COLOUR}" stroke-width="1.5"/>')  # fmt: skip
        parts.extend(f'<line x1="{x(end):.1f}" y1="{mid - 4:.1f}" x2="{x(end):.1f}" '
                     f'y2="{mid + 4:.1f}" stroke="{COLOUR}" stroke-width="1.5"/>'
                     for end in (lo, hi))  # fmt: skip
        parts.append(f'<circle cx="{x(value):.1f}" cy="{mid:.1f}" r="4" fill="{COLOUR}">'
                     f"<title>{html.escape(label)}: {value:,.4g} ({lo:,.4g}..{hi:,.4g})</title>"
                     "</circle>")  # fmt: skip
    parts.append("</svg>")
    return "".join(parts)
