"""The mirror's gain split honestly: from provisioning (trading off, against the tenants' own
policies) and from trade (trading on against off, the same agent); a trade gain above the
bound's trade headroom is flagged as repair, not gains from trade."""

from __future__ import annotations

from typing import Any

import pytest

from twin.arena.board import mirror, tidy
from twin.arena.lineup import BASELINE, BOUND, NO_TRADE, SESSION


def session(key: str, kind: str, seed: int, returns: dict[str, float], agent: str | None,
            *, trading: bool = True) -> dict[str, Any]:  # fmt: skip
    return {
        "key": key, "kind": kind, "scenario": "s", "scenario_sha256": "h", "seed": seed,
        "rotation": None, "mechanism": "proportional", "trading": trading,
        "regimes": [] if kind == BASELINE else ["mirror"], "wall_s": 1.0,
        "total_return_usd": sum(returns.values()), "jain_delay": 1.0,
        "tenants": [{"tenant": t, "agent": agent, "return_usd": r, "mean_queueing_delay_s": 0.0,
                     "trades": agent is not None} for t, r in returns.items()],
    }  # fmt: skip


def seed_rows(seed: int, *, base: float, alone: float, traded: float,
              headroom: float) -> list[dict[str, Any]]:  # fmt: skip
    """A seed's baseline, the agent's mirror session with trading and without, and its bound;
    returns split evenly over two tenants."""

    def two(total: float) -> dict[str, float]:
        return {"a": total / 2, "b": total / 2}

    key = f"s.neg.s{seed}"
    return [
        session(f"s.base.s{seed}", BASELINE, seed, two(base), None),
        session(key, SESSION, seed, two(traded), "neg"),
        session(key + NO_TRADE, SESSION, seed, two(alone), "neg", trading=False),
        {"key": f"s.s{seed}.bound", "kind": BOUND, "scenario": "s", "scenario_sha256": "h",
         "seed": seed, "tenants": [], "bound_usd": 500.0, "separable_usd": 500.0 - headroom},
    ]  # fmt: skip


def test_the_mirror_splits_provisioning_from_trade_and_flags_repair() -> None:
    rows = [*seed_rows(0, base=100.0, alone=90.0, traded=150.0, headroom=20.0),
            *seed_rows(1, base=100.0, alone=110.0, traded=115.0, headroom=20.0)]  # fmt: skip
    cells = [c for c in tidy(rows) if c["key"] == "s.neg.s0"]
    assert cells[0]["provisioning_welfare_gain_usd"] == pytest.approx(-10.0)
    assert cells[0]["trade_welfare_gain_usd"] == pytest.approx(60.0)
    assert cells[0]["trade_headroom_usd"] == pytest.approx(20.0)
    assert cells[0]["trade_repair"] is True  # 60 $ from trading where trade could add 20 $
    (entry,) = mirror(rows)
    assert entry["provisioning_welfare_gain_usd"] == pytest.approx(0.0)  # -10 and +10
    assert entry["trade_welfare_gain_usd"] == pytest.approx(32.5)  # 60 and 5
    assert entry["welfare_gain_usd"] == pytest.approx(32.5)  # the two parts add up
    assert entry["trade_headroom_usd"] == pytest.approx(20.0)
    assert entry["repair_share"] == 0.5
    assert entry["trade_repair"] is True


def test_a_trade_gain_within_the_headroom_is_gains_from_trade() -> None:
    rows = seed_rows(0, base=100.0, alone=120.0, traded=130.0, headroom=25.0)
    (entry,) = mirror(rows)
    assert entry["provisioning_welfare_gain_usd"] == pytest.approx(20.0)
    assert entry["trade_welfare_gain_usd"] == pytest.approx(10.0)
    assert entry["trade_repair"] is False


def test_an_agent_that_never_trades_gains_from_provisioning_alone() -> None:
    rows = [
        r
        for r in seed_rows(0, base=100.0, alone=0.0, traded=130.0, headroom=25.0)
        if not r["key"].endswith(NO_TRADE)
    ]  # no session with trading off: it never trades
    (entry,) = mirror(rows)
    assert entry["provisioning_welfare_gain_usd"] == pytest.approx(30.0)
    assert entry["trade_welfare_gain_usd"] == pytest.approx(0.0)
    assert entry["trade_repair"] is False
