"""`sweep.html`: the sweep's main figures, one row per swept input (scenario, policy, each
`--set` path that took more than one value), one column per headline figure, each point the
mean over every other input with its standard deviation. Self-contained, as `report.html`."""

from __future__ import annotations

import html
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from twin.eventlog.figures import WIDTH_IN, svg_of

HEADLINES = (
    ("reward", "reward"),
    ("cost_usd", "cost $"),
    ("queueing_delay_s.p99", "queueing delay p99 s"),
    ("completion_s.mean", "JCT mean s"),
    ("agentic.act_s.mean", "ACT mean s"),
    ("agentic.step_s.mean", "RL step mean s"),
)
PLOT_FILE = "sweep.html"


def _dimensions(rows: dict[str, list[Any]]) -> list[str]:
    names = ["scenario", "policy", *sorted(c for c in rows if c.startswith("set."))]
    return [n for n in names if n in rows and len({str(v) for v in rows[n]}) > 1]


def plot(results: Path, target: Path) -> Path:
    """Draw the sweep in `results` (its results.parquet) to `target`."""
    from matplotlib.figure import Figure

    rows: dict[str, list[Any]] = pq.read_table(results).to_pydict()
    metrics = [(c, label) for c, label in HEADLINES
               if c in rows and any(v is not None for v in rows[c])]  # fmt: skip
    dims = _dimensions(rows)
    body = "<p>Every input took one value: nothing to compare.</p>"
    if dims and metrics:
        fig = Figure(figsize=(WIDTH_IN, 2.4 * len(dims)))
        axes = fig.subplots(len(dims), len(metrics), squeeze=False)
        for i, dim in enumerate(dims):
            for j, (column, label) in enumerate(metrics):
                groups: dict[str, list[float]] = defaultdict(list)
                for key, value in zip(rows[dim], rows[column], strict=True):
                    if value is not None:
                        groups[str(key)].append(float(value))
                names = sorted(groups)
                means = [float(np.mean(groups[n])) for n in names]
                spread = [float(np.std(groups[n])) for n in names]
                ax = axes[i, j]
                ax.errorbar(range(len(names)), means, yerr=spread, fmt="o", capsize=3)
                ax.set_xticks(range(len(names)), names, rotation=30, fontsize=7)
                ax.set_xlabel(dim.removeprefix("set."))
                if i == 0:
                    ax.set_title(label)
        fig.tight_layout()
        body = f"<figure>{svg_of(fig)}</figure>"
    n = len(next(iter(rows.values()), []))
    page = (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; "
        "style-src 'unsafe-inline'\"><title>cluster twin sweep</title>"
        "<style>body{font:14px system-ui,sans-serif;max-width:980px;margin:auto;padding:1rem}"
        "svg{max-width:100%;height:auto}</style></head><body>"
        f"<h1>cluster twin sweep</h1><p>{html.escape(str(results))}: {n} runs; each point is "
        "the mean over the other inputs, bars one standard deviation.</p>"
        f"{body}</body></html>"
    )
    target.write_text(page, encoding="utf-8")
    return target
