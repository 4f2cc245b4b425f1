"""The leaderboard: per scenario, agent and role, the sessions' figures with 95% confidence
intervals, against the paired baseline.

Each (scenario, agent, role) has one session per seed. Its return is the session summary's
return of the tenant it played; its gain is that minus the same tenant's return in the baseline
session of the same seed. The "all" role is, per seed, the mean over the roles the agent played.
Intervals are percentile bootstraps over seeds: 9,999 resamples of the seeds with replacement
(numpy's `default_rng(0)`, indices drawn as one (resamples, seeds) array), the 2.5th and 97.5th
percentiles of the resampled means. Agents rank by their mean gain over all roles.

Welfare, per session: the total return of all tenants, Jain's index over the tenants' mean
queueing delays, and whether the outcome Pareto-dominates the baseline (no tenant's return lower,
one higher).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

from twin.arena.lineup import BASELINE
from twin.errors import ConfigError

Row = dict[str, Any]
ALL_ROLES = "all"
RESAMPLES = 9_999
CONFIDENCE = 0.95
BOOTSTRAP_SEED = 0
TOLERANCE_USD = 1e-9


def bootstrap(values: list[float], *, resamples: int = RESAMPLES, seed: int = BOOTSTRAP_SEED,
              confidence: float = CONFIDENCE) -> tuple[float, float]:  # fmt: skip
    """The percentile bootstrap interval of the mean of `values` (one per seed)."""
    x = np.asarray(values, dtype=float)
    if len(x) == 1:
        return float(x[0]), float(x[0])
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), (resamples, len(x)))].mean(axis=-1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def _quantile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _pareto(session: Row, base: Row) -> bool:
    mine = {t["tenant"]: t["return_usd"] for t in session["tenants"]}
    theirs = {t["tenant"]: t["return_usd"] for t in base["tenants"]}
    gains = [mine[t] - theirs.get(t, 0.0) for t in mine]
    return all(g >= -TOLERANCE_USD for g in gains) and any(g > TOLERANCE_USD for g in gains)


def baselines(rows: Iterable[Row]) -> dict[tuple[str, int], Row]:
    """The baseline session of each (scenario hash, seed)."""
    return {(r["scenario_sha256"], r["seed"]): r for r in rows if r["kind"] == BASELINE}


def tidy(rows: list[Row]) -> list[Row]:
    """One row per session and tenant, with its gain over the baseline and the session's
    welfare: the form `sessions.parquet` takes."""
    base = baselines(rows)
    out = []
    for r in sorted(rows, key=lambda r: r["key"]):
        paired = base.get((r["scenario_sha256"], r["seed"]))
        if paired is None:
            raise ConfigError(f"session {r['key']} has no baseline session for its seed")
        before = {t["tenant"]: t["return_usd"] for t in paired["tenants"]}
        dominates = _pareto(r, paired) if r["kind"] != BASELINE else None
        for t in r["tenants"]:
            llm = t.get("llm") or {}
            out.append({
                "key": r["key"], "kind": r["kind"], "scenario": r["scenario"],
                "scenario_sha256": r["scenario_sha256"], "seed": r["seed"],
                "rotation": r["rotation"], "tenant": t["tenant"], "agent": t["agent"],
                "return_usd": t["return_usd"],
                "gain_usd": t["return_usd"] - before.get(t["tenant"], 0.0),
                "difference_reward_usd": t.get("difference_reward_usd"),
                "offers_made": t.get("offers_made"), "offers_taken": t.get("offers_taken"),
                "offers_refused": t.get("offers_refused"),
                "trades_applied": t.get("trades_applied"),
                "llm_asks": llm.get("asks"), "llm_valid_first_try": llm.get("valid_first_try"),
                "llm_fallbacks": (llm["fallbacks"] + llm["offer_fallbacks"]) if llm else None,
                "mean_queueing_delay_s": t["mean_queueing_delay_s"],
                "total_return_usd": r["total_return_usd"],
                "welfare_gain_usd": r["total_return_usd"] - paired["total_return_usd"],
                "jain_delay": r["jain_delay"],
                "pareto_dominates": dominates,
                "wall_s": r["wall_s"],
            })  # fmt: skip
    return out


def _interval(values: list[float]) -> tuple[float, float, float]:
    low, high = bootstrap(values)
    return statistics.fmean(values), low, high


def leaderboard(rows: list[Row]) -> list[Row]:
    """The leaderboard's rows: per scenario, each agent over all roles (ranked) then per role."""
    cells = [c for c in tidy(rows) if c["kind"] != BASELINE and c["agent"] is not None]
    raw: dict[tuple[str, str], list[Row]] = defaultdict(list)  # (scenario, agent) -> cells
    for c in cells:
        raw[(c["scenario_sha256"], c["agent"])].append(c)
    sessions = {r["key"]: r for r in rows}
    board: list[Row] = []
    for (_, agent), mine in sorted(raw.items()):
        roles = sorted({c["tenant"] for c in mine})
        for role in [ALL_ROLES, *roles]:
            picked = mine if role == ALL_ROLES else [c for c in mine if c["tenant"] == role]
            board.append(_entry(agent, role, picked, sessions))
    for scenario_hash in {b["scenario_sha256"] for b in board}:
        ranked = sorted((b for b in board if b["scenario_sha256"] == scenario_hash
                         and b["role"] == ALL_ROLES), key=lambda b: -b["gain_usd"])  # fmt: skip
        for rank, b in enumerate(ranked, 1):
            b["rank"] = rank
    return sorted(board, key=lambda b: (b["scenario"], b["scenario_sha256"], b["role"] != ALL_ROLES,
                                        b["rank"] if b["role"] == ALL_ROLES else 0,
                                        b["role"], b["agent"]))  # fmt: skip


def _per_seed(cells: list[Row], field: str) -> list[float]:
    """The field's value per seed, the mean over the roles played on that seed."""
    by_seed: dict[int, list[float]] = defaultdict(list)
    for c in cells:
        by_seed[c["seed"]].append(c[field])
    return [statistics.fmean(by_seed[s]) for s in sorted(by_seed)]


def _entry(agent: str, role: str, cells: list[Row], sessions: dict[str, Row]) -> Row:
    first = cells[0]
    ret, ret_lo, ret_hi = _interval(_per_seed(cells, "return_usd"))
    gain, gain_lo, gain_hi = _interval(_per_seed(cells, "gain_usd"))
    per_session = {c["key"]: c for c in cells}  # a session's cell carries its welfare
    answers = [ms for c in cells
               for t in sessions[c["key"]]["tenants"] if t["tenant"] == c["tenant"]
               for ms in t.get("answer_ms", [])]  # fmt: skip
    asks = [c["llm_asks"] for c in cells if c["llm_asks"] is not None]
    valid = sum(c["llm_valid_first_try"] for c in cells if c["llm_valid_first_try"] is not None)
    n = len(cells)
    return {
        "scenario": first["scenario"],
        "scenario_sha256": first["scenario_sha256"],
        "agent": agent,
        "role": role,
        "rank": None,
        "seeds": len({c["seed"] for c in cells}),
        "sessions": len(per_session),
        "return_usd": ret,
        "return_lo_usd": ret_lo,
        "return_hi_usd": ret_hi,
        "gain_usd": gain,
        "gain_lo_usd": gain_lo,
        "gain_hi_usd": gain_hi,
        "difference_reward_usd": statistics.fmean(c["difference_reward_usd"] for c in cells),
        "offers_made": sum(c["offers_made"] for c in cells) / n,
        "offers_taken": sum(c["offers_taken"] for c in cells) / n,
        "offers_refused": sum(c["offers_refused"] for c in cells) / n,
        "trades_applied": sum(c["trades_applied"] for c in cells) / n,
        "valid_first_share": valid / sum(asks) if asks and sum(asks) else None,
        "fallbacks": _fallbacks(cells) if asks else None,
        "answer_ms_p50": _quantile(answers, 50),
        "answer_ms_p95": _quantile(answers, 95),
        "welfare_usd": statistics.fmean(c["total_return_usd"] for c in per_session.values()),
        "welfare_gain_usd": statistics.fmean(c["welfare_gain_usd"] for c in per_session.values()),
        "jain_delay": _mean_of(c["jain_delay"] for c in per_session.values()),
        "pareto_share": statistics.fmean(
            float(c["pareto_dominates"]) for c in per_session.values()
        ),
    }


def _fallbacks(cells: list[Row]) -> float:
    """Turns and answers a fallback policy gave, per session."""
    return sum(c["llm_fallbacks"] or 0 for c in cells) / len(cells)


def _mean_of(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.fmean(kept) if kept else None
