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
one higher). Against the seed's bound (what a planner with hindsight could reach): the score,
(welfare - baseline) / (bound - baseline), 0 at the baseline and 1 at the bound, and the
distance to the bound in dollars. A line-up played again with trading off gives each tenant's
trade gain: its return with trading less its return without; and the mirror's gain splits in
two: from provisioning (trading off, against the tenants' own policies) and from trade (trading
on against off, the same agent). A trade gain above the bound's trade headroom (the bound with
GPUs movable between tenants less the bound with holdings kept apart) is flagged as repair: it
makes up for the agent's own provisioning rather than gaining from trade.

Three tables: the rotation's leaderboard (per agent, all roles and each), the mirror (every
tenant one agent: the welfare it reaches, its trade gain and score), and the cross-play matrix
(agent A in one seat against agent B in the others: A's gain).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

from twin.arena.lineup import BASELINE, BOUND, NO_TRADE
from twin.errors import ConfigError
from twin.eventlog.intervals import bootstrap
from twin.schema.vocabulary import DEFAULT_MECHANISM

Row = dict[str, Any]
ALL_ROLES = "all"
TOLERANCE_USD = 1e-9


def _quantile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _pareto(session: Row, base: Row) -> bool:
    mine = {t["tenant"]: t["return_usd"] for t in session["tenants"]}
    theirs = {t["tenant"]: t["return_usd"] for t in base["tenants"]}
    gains = [mine[t] - theirs.get(t, 0.0) for t in mine]
    return all(g >= -TOLERANCE_USD for g in gains) and any(g > TOLERANCE_USD for g in gains)


def mechanism_of(row: Row) -> str:
    """The session's mechanism (a row from before arenas named it played the default)."""
    return str(row.get("mechanism", DEFAULT_MECHANISM))


def baselines(rows: Iterable[Row]) -> dict[tuple[str, int, str], Row]:
    """The baseline session of each (scenario hash, seed, mechanism)."""
    return {(r["scenario_sha256"], r["seed"], mechanism_of(r)): r for r in rows
            if r["kind"] == BASELINE}  # fmt: skip


def bounds(rows: Iterable[Row]) -> dict[tuple[str, int], float]:
    """The welfare bound of each (scenario hash, seed), where the program could be built."""
    return {(r["scenario_sha256"], r["seed"]): r["bound_usd"] for r in rows
            if r["kind"] == BOUND and r.get("bound_usd") is not None}  # fmt: skip


def headrooms(rows: Iterable[Row]) -> dict[tuple[str, int], float]:
    """The trade headroom of each (scenario hash, seed): the bound with GPUs movable between
    tenants less the bound with holdings kept per tenant (what trade could add at most)."""
    return {(r["scenario_sha256"], r["seed"]): r["bound_usd"] - r["separable_usd"] for r in rows
            if r["kind"] == BOUND and r.get("bound_usd") is not None
            and r.get("separable_usd") is not None}  # fmt: skip


def tidy(rows: list[Row]) -> list[Row]:
    """One row per session and tenant, with its gain over the baseline, its trade gain, and the
    session's welfare, score and distance to the bound: the form `sessions.parquet` takes."""
    base, ceiling, room_to_trade = baselines(rows), bounds(rows), headrooms(rows)
    by_key = {r["key"]: r for r in rows}
    out = []
    for r in sorted(rows, key=lambda r: r["key"]):
        if r["kind"] == BOUND:
            continue
        paired = base.get((r["scenario_sha256"], r["seed"], mechanism_of(r)))
        if paired is None:
            raise ConfigError(f"session {r['key']} has no baseline session for its seed")
        before = {t["tenant"]: t["return_usd"] for t in paired["tenants"]}
        alone = by_key.get(r["key"] + NO_TRADE)
        untraded = {t["tenant"]: t["return_usd"] for t in alone["tenants"]} if alone else None
        dominates = _pareto(r, paired) if r["kind"] != BASELINE else None
        welfare = r["total_return_usd"]
        surplus = welfare - paired["total_return_usd"]
        bound = ceiling.get((r["scenario_sha256"], r["seed"]))
        room = None if bound is None else bound - paired["total_return_usd"]
        headroom = room_to_trade.get((r["scenario_sha256"], r["seed"]))
        traded = welfare - alone["total_return_usd"] if alone is not None else 0.0
        for t in r["tenants"]:
            llm = t.get("llm") or {}
            gain = t["return_usd"] - before.get(t["tenant"], 0.0)
            out.append({
                "key": r["key"], "kind": r["kind"], "scenario": r["scenario"],
                "scenario_sha256": r["scenario_sha256"], "seed": r["seed"],
                "mechanism": mechanism_of(r), "trading": r.get("trading", True),
                "regimes": ",".join(r.get("regimes") or (["rotation"] if r["kind"] != BASELINE
                                                         else [])),
                "rotation": r["rotation"], "tenant": t["tenant"], "agent": t["agent"],
                "trades": t.get("trades"),
                "return_usd": t["return_usd"],
                "gain_usd": gain,
                "trade_gain_usd": (t["return_usd"] - untraded.get(t["tenant"], 0.0)
                                   if untraded is not None else 0.0),
                "surplus_share": gain / surplus if surplus > TOLERANCE_USD else None,
                "difference_reward_gpus": t.get("difference_reward_gpus"),
                "offers_made": t.get("offers_made"), "offers_taken": t.get("offers_taken"),
                "offers_refused": t.get("offers_refused"),
                "offers_to_nontraders": t.get("offers_to_nontraders"),
                "trades_applied": t.get("trades_applied"),
                "llm_asks": llm.get("asks"), "llm_valid_first_try": llm.get("valid_first_try"),
                "llm_fallbacks": (llm["fallbacks"] + llm["offer_fallbacks"]) if llm else None,
                "mean_queueing_delay_s": t["mean_queueing_delay_s"],
                "total_return_usd": welfare,
                "welfare_gain_usd": surplus,
                "trade_welfare_gain_usd": traded,
                "provisioning_welfare_gain_usd": surplus - traded,  # no trading: all of it
                "trade_headroom_usd": headroom,
                "trade_repair": (traded > headroom + TOLERANCE_USD
                                 if alone is not None and headroom is not None else None),
                "bound_usd": bound,
                "score": surplus / room if room is not None and room > TOLERANCE_USD else None,
                "distance_usd": None if bound is None else bound - welfare,
                "jain_delay": r["jain_delay"],
                "pareto_dominates": dominates,
                "wall_s": r["wall_s"],
            })  # fmt: skip
    return out


def _played(cells: list[Row], regime: str) -> list[Row]:
    """The cells of agents' sessions with trading on, in `regime`."""
    return [c for c in cells if c["kind"] != BASELINE and c["agent"] is not None
            and c["trading"] and regime in c["regimes"].split(",")]  # fmt: skip


def _interval(values: list[float]) -> tuple[float, float, float]:
    low, high = bootstrap(values)
    return statistics.fmean(values), low, high


def leaderboard(rows: list[Row]) -> list[Row]:
    """The leaderboard's rows: per scenario and mechanism, each agent over all roles (ranked)
    then per role, from the rotation's sessions."""
    cells = _played(tidy(rows), "rotation")
    raw: dict[tuple[str, str, str], list[Row]] = defaultdict(list)  # (scenario, mech, agent)
    for c in cells:
        raw[(c["scenario_sha256"], c["mechanism"], c["agent"])].append(c)
    sessions = {r["key"]: r for r in rows}
    board: list[Row] = []
    for (_, _, agent), mine in sorted(raw.items()):
        roles = sorted({c["tenant"] for c in mine})
        for role in [ALL_ROLES, *roles]:
            picked = mine if role == ALL_ROLES else [c for c in mine if c["tenant"] == role]
            board.append(_entry(agent, role, picked, sessions))
    for group in {(b["scenario_sha256"], b["mechanism"]) for b in board}:
        ranked = sorted((b for b in board if (b["scenario_sha256"], b["mechanism"]) == group
                         and b["role"] == ALL_ROLES), key=lambda b: -b["gain_usd"])  # fmt: skip
        for rank, b in enumerate(ranked, 1):
            b["rank"] = rank
    return sorted(board, key=lambda b: (b["scenario"], b["scenario_sha256"], b["mechanism"],
                                        b["role"] != ALL_ROLES,
                                        b["rank"] if b["role"] == ALL_ROLES else 0,
                                        b["role"], b["agent"]))  # fmt: skip


def mirror(rows: list[Row]) -> list[Row]:
    """Per scenario, mechanism and agent, its mirror sessions (every tenant the agent): the
    welfare it reaches, its gain over the baseline and from trading, its score against the
    bound, each with its interval over seeds; its Pareto share and each tenant's share of the
    surplus."""
    cells = _played(tidy(rows), "mirror")
    groups: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    for c in cells:
        groups[(c["scenario_sha256"], c["mechanism"], c["agent"])].append(c)
    out = []
    for (_, mechanism, agent), mine in sorted(groups.items()):
        sessions = {c["key"]: c for c in mine}
        first = mine[0]
        entry: Row = {"scenario": first["scenario"], "scenario_sha256": first["scenario_sha256"],
                      "mechanism": mechanism, "agent": agent, "trades": first["trades"],
                      "seeds": len({c["seed"] for c in mine})}  # fmt: skip
        for field in ("total_return_usd", "welfare_gain_usd", "trade_welfare_gain_usd",
                      "provisioning_welfare_gain_usd", "trade_headroom_usd", "score",
                      "distance_usd"):  # fmt: skip
            entry.update(_summary(field, _session_values(sessions.values(), field)))
        flagged = [float(c["trade_repair"]) for c in sessions.values()
                   if c["trade_repair"] is not None]  # fmt: skip
        entry["repair_share"] = statistics.fmean(flagged) if flagged else None
        entry["trade_repair"] = _repair(entry)
        entry["pareto_share"] = statistics.fmean(
            float(c["pareto_dominates"]) for c in sessions.values()
        )
        shares = defaultdict(list)
        for c in mine:
            if c["surplus_share"] is not None:
                shares[c["tenant"]].append(c["surplus_share"])
        entry["surplus_shares"] = {t: statistics.fmean(v) for t, v in sorted(shares.items())}
        out.append(entry)
    return sorted(out, key=lambda r: (r["scenario"], r["scenario_sha256"], r["mechanism"],
                                      -r["welfare_gain_usd"]))  # fmt: skip


def _repair(entry: Row) -> bool | None:
    """Whether the agent's mean gain from trading exceeds the mean trade headroom the bound
    allows: trading then mostly repairs what its own provisioning left undone (an agent that
    provisions badly alone gains by swapping), not gains from trade."""
    traded, headroom = entry.get("trade_welfare_gain_usd"), entry.get("trade_headroom_usd")
    if traded is None or headroom is None:
        return None
    return bool(traded > headroom + TOLERANCE_USD)


def cross(rows: list[Row]) -> list[Row]:
    """The cross-play matrix: per scenario, mechanism and ordered pair, agent A's gain over the
    baseline in the seat it holds against agent B in every other (the mean over its seats on a
    seed, then its interval over seeds)."""
    cells = _played(tidy(rows), "cross")
    by_session: dict[str, list[Row]] = defaultdict(list)
    for c in cells:
        by_session[c["key"]].append(c)
    pairs: dict[tuple[str, str, str, str], list[Row]] = defaultdict(list)
    for mine in by_session.values():
        agents = [c["agent"] for c in mine]
        for c in mine:
            others = {a for a in agents if a != c["agent"]}
            if agents.count(c["agent"]) == 1 and len(others) == 1:  # the lone seat: A vs B
                pairs[(c["scenario_sha256"], c["mechanism"], c["agent"], others.pop())].append(c)
    out = []
    for (_, mechanism, a, b), mine in sorted(pairs.items()):
        gain, low, high = _interval(_per_seed(mine, "gain_usd"))
        out.append({"scenario": mine[0]["scenario"], "scenario_sha256": mine[0]["scenario_sha256"],
                    "mechanism": mechanism, "agent": a, "against": b,
                    "seeds": len({c["seed"] for c in mine}), "gain_usd": gain,
                    "gain_lo_usd": low, "gain_hi_usd": high,
                    "trade_gain_usd": statistics.fmean(c["trade_gain_usd"]
                                                       for c in mine)})  # fmt: skip
    return out


def _session_values(cells: Iterable[Row], field: str) -> list[float]:
    """A session-wide field per seed (the mean over the seed's sessions); seeds without it
    (no bound, say) left out."""
    by_seed: dict[int, list[float]] = defaultdict(list)
    for c in cells:
        if c[field] is not None:
            by_seed[c["seed"]].append(c[field])
    return [statistics.fmean(by_seed[s]) for s in sorted(by_seed)]


def _summary(field: str, values: list[float]) -> Row:
    name = field.removesuffix("_usd")
    unit = "_usd" if field.endswith("_usd") else ""
    if not values:
        return {f"{name}{unit}": None, f"{name}_lo{unit}": None, f"{name}_hi{unit}": None}
    mean, low, high = _interval(values)
    return {f"{name}{unit}": mean, f"{name}_lo{unit}": low, f"{name}_hi{unit}": high}


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
    trade, trade_lo, trade_hi = _interval(_per_seed(cells, "trade_gain_usd"))
    score = _summary("score", _session_values(per_session.values(), "score"))
    return {
        "scenario": first["scenario"],
        "scenario_sha256": first["scenario_sha256"],
        "mechanism": first["mechanism"],
        "agent": agent,
        "trades": first["trades"],
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
        "trade_gain_usd": trade,
        "trade_gain_lo_usd": trade_lo,
        "trade_gain_hi_usd": trade_hi,
        **score,
        "difference_reward_gpus": statistics.fmean(c["difference_reward_gpus"] for c in cells),
        "offers_made": sum(c["offers_made"] for c in cells) / n,
        "offers_taken": sum(c["offers_taken"] for c in cells) / n,
        "offers_refused": sum(c["offers_refused"] for c in cells) / n,
        "offers_to_nontraders": sum(c["offers_to_nontraders"] or 0 for c in cells) / n,
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
