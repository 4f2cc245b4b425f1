"""The report's figures, drawn with matplotlib and returned as inline SVG text.

SVG keeps the report one offline file with crisp, searchable plots and no script; text stays
text (the browser's font) and element ids are salted by a constant, so the same run draws the
same bytes. Long series are reduced to a fixed number of time bins, each bin drawn at the
highest value it held, so spikes survive the reduction.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

BINS = 1200
WIDTH_IN = 9.0
mpl.rcParams.update(
    {
        "svg.fonttype": "none",
        "svg.hashsalt": "cluster-twin",
        "font.size": 9,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "figure.dpi": 100,
    }
)

Step = tuple[np.ndarray, np.ndarray]  # change times (s) and the value from each time on


def envelope(times_s: np.ndarray, values: np.ndarray, end_s: float, bins: int = BINS) -> Step:
    """A step series reduced to at most `bins` steps: each bin's highest value in effect."""
    if len(times_s) <= bins or end_s <= 0:
        return times_s, values
    edges = np.linspace(0.0, end_s, bins + 1)[:-1]
    at_edge = np.maximum(np.searchsorted(times_s, edges, side="right") - 1, 0)
    inside = np.searchsorted(edges, times_s, side="right") - 1
    peak = values[at_edge].astype(float)
    np.maximum.at(peak, np.clip(inside, 0, bins - 1), values)
    return edges, peak


def svg_of(fig: Figure) -> str:
    """The figure as inline SVG text."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _unit_s(end_s: float) -> float:
    """Hours on the time axis, or days past three of them."""
    return 86400.0 if end_s > 3 * 86400 else 3600.0


def _hours(ax: Axes, end_s: float) -> None:
    ax.set_xlabel("virtual time (d)" if _unit_s(end_s) == 86400.0 else "virtual time (h)")


def _step(ax: Axes, series: Step, end_s: float, **style: object) -> None:
    t, v = series
    if len(t) == 0:
        return
    x = np.append(t, end_s) / _unit_s(end_s)
    y = np.append(v, v[-1])
    ax.step(x, y, where="post", **style)  # type: ignore[arg-type]


def pools(held: Mapping[str, Step], busy: Mapping[str, Step], end_s: float) -> str:
    """GPUs held and busy per pool over time, a panel per pool."""
    names = sorted(held)
    fig = Figure(figsize=(WIDTH_IN, 1.9 * len(names) + 0.4))
    axes = fig.subplots(len(names), 1, sharex=True, squeeze=False)
    for ax, name in zip(axes[:, 0], names, strict=True):
        _step(ax, held[name], end_s, color="#4c78a8", label="held")
        _step(ax, busy.get(name, (np.zeros(0), np.zeros(0))), end_s, color="#f58518",
              label="busy")  # fmt: skip
        ax.set_ylabel(f"{name}\nGPUs")
        ax.legend(loc="upper right", frameon=False)
    _hours(axes[-1, 0], end_s)
    return svg_of(fig)


def per_tenant(series: Mapping[str, Step], end_s: float, ylabel: str,
               limits: Mapping[str, float | None] | None = None) -> str:  # fmt: skip
    """One line per tenant over time (queue length, spend); `limits` as dashed lines."""
    fig = Figure(figsize=(WIDTH_IN, 2.8))
    ax = fig.subplots()
    for i, name in enumerate(sorted(series)):
        color = f"C{i % 10}"
        _step(ax, series[name], end_s, color=color, label=name)
        limit = (limits or {}).get(name)
        if limit is not None:
            ax.axhline(limit, color=color, linestyle="--", linewidth=0.8)
    ax.set_ylabel(ylabel)
    _hours(ax, end_s)
    ax.legend(loc="upper left", frameon=False, ncols=min(len(series), 5))
    return svg_of(fig)


def cdfs(panels: Sequence[tuple[str, Mapping[str, np.ndarray]]]) -> str:
    """Empirical CDFs side by side: (x label, {name: values}) per panel; log x past 0."""
    fig = Figure(figsize=(WIDTH_IN, 3.0))
    axes = fig.subplots(1, len(panels), squeeze=False)
    for ax, (label, samples) in zip(axes[0], panels, strict=True):
        for i, (name, values) in enumerate(sorted(samples.items())):
            if len(values) == 0:
                continue
            x = np.sort(values)
            if len(x) > 2 * BINS:
                x = np.quantile(x, np.linspace(0, 1, 2 * BINS))
            y = np.linspace(0, 1, len(x))
            ax.step(x, y, where="post", color=f"C{i % 10}", label=f"{name} ({len(values):,})")
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of jobs")
        ax.set_ylim(0, 1.02)
        ax.legend(loc="lower right", frameon=False)
    return svg_of(fig)


def delay_curves(levels: Sequence[float], observed: Sequence[float],
                 simulated: Sequence[float], ks: float) -> str:  # fmt: skip
    """Observed against simulated queueing delay, as CDFs, with the KS distance."""
    fig = Figure(figsize=(WIDTH_IN * 0.6, 3.0))
    ax = fig.subplots()
    ax.step(observed, levels, where="post", color="black", label="observed (trace)")
    ax.step(simulated, levels, where="post", color="#e45756", label="simulated (twin)")
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel("queueing delay (s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(f"KS distance {ks:.3f}")
    ax.legend(loc="lower right", frameon=False)
    return svg_of(fig)


def rounds(by_tenant: Mapping[str, Mapping[str, np.ndarray]]) -> str:
    """The negotiation per round and tenant: reward, difference reward, offers made and taken,
    GPUs granted."""
    fig = Figure(figsize=(WIDTH_IN, 7.0))
    axes = fig.subplots(4, 1, sharex=True)
    for i, name in enumerate(sorted(by_tenant)):
        r, color = by_tenant[name], f"C{i % 10}"
        axes[0].plot(r["round"], r["reward_usd"], color=color, marker=".", label=name)
        axes[1].plot(r["round"], r["difference_reward"], color=color, marker=".", label=name)
        axes[2].plot(r["round"], r["offers_made"], color=color, linestyle=":", marker="^")
        axes[2].plot(r["round"], r["offers_accepted"], color=color, marker="o")
        axes[3].step(r["round"], r["granted_gpus"], where="mid", color=color)
    axes[0].set_ylabel("reward ($)")
    axes[1].set_ylabel("difference\nreward (GPUs)")
    axes[2].set_ylabel("offers made (^)\naccepted (o)")
    axes[3].set_ylabel("GPUs granted")
    axes[3].set_xlabel("round")
    axes[0].legend(loc="upper left", frameon=False, ncols=min(len(by_tenant), 5))
    return svg_of(fig)


def learning_curve(episodes: Sequence[int], gain_usd: Sequence[float],
                   tenant_gain_usd: Mapping[str, Sequence[float]], title: str) -> str:  # fmt: skip
    """A training run's learning curve: the policy's gain over the tenants' own policies on
    validation seeds (the mean over tenants, bold, and each tenant's) against episodes played."""
    fig = Figure(figsize=(WIDTH_IN * 0.7, 3.2))
    ax = fig.add_subplot()
    for tenant, gains in tenant_gain_usd.items():
        ax.plot(episodes, gains, linewidth=1, alpha=0.7, label=tenant)
    ax.plot(episodes, gain_usd, color="black", linewidth=2, label="mean over tenants")
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xlabel("episodes played")
    ax.set_ylabel("gain over own policy ($ a tenant)")
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    return svg_of(fig)
