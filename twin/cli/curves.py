"""What the training commands write as they go: a progress line a generation, and the learning
curve (`curve.csv`, and `curve.svg` where matplotlib is installed)."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from twin.rl.training import CurvePoint

POLICY_FILE = "policy.json"
CURVE_CSV = "curve.csv"
CURVE_SVG = "curve.svg"
EVALUATION_FILE = "evaluation.json"


def progress(generations: int) -> Callable[[CurvePoint], None]:
    def show(p: CurvePoint) -> None:
        left_s = p.wall_s / p.generation * (generations - p.generation) if p.generation else None
        eta = "" if left_s is None or p.generation >= generations else f" · ~{_span(left_s)} left"
        print(f"generation {p.generation:>3}/{generations} · {p.episodes:,} episodes · "
              f"validation gain {p.gain_usd:+.2f} $ a tenant · {p.wall_s:.0f} s{eta}",
              flush=True)  # fmt: skip

    return show


def _span(seconds: float) -> str:
    """A duration as a person reads it: 40 s, 12 min, 2.5 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def write_curve(out: Path, curve: list[CurvePoint], name: str) -> None:
    tenants = list(curve[0].tenant_gain_usd)
    with (out / CURVE_CSV).open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["generation", "episodes", "wall_s", "cpu_s", "gain_usd",
                    *(f"gain_{t}_usd" for t in tenants)])  # fmt: skip
        for p in curve:
            w.writerow([p.generation, p.episodes, f"{p.wall_s:.3f}", f"{p.cpu_s:.3f}",
                        f"{p.gain_usd:.4f}",
                        *(f"{p.tenant_gain_usd[t]:.4f}" for t in tenants)])  # fmt: skip
    try:
        from twin.eventlog.figures import learning_curve
    except ImportError:  # matplotlib is the analysis extra's
        print(f"(no {CURVE_SVG}: install matplotlib to draw the learning curve)")
        return
    svg = learning_curve([p.episodes for p in curve], [p.gain_usd for p in curve],
                         {t: [p.tenant_gain_usd[t] for p in curve] for t in tenants},
                         f"{name}: validation gain while training")  # fmt: skip
    (out / CURVE_SVG).write_text(svg)
