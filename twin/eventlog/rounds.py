"""The rounds table: one row per tenant per committed decision round.

What the tenant proposed (GPUs to add or release, placements), what it was granted (GPUs
requested minus released in the round), its offers and trades, and its credit (held, demand and
useful GPUs, score, difference reward, the money reward its agent heard), and whether the
session applied its default policy because its agent was absent or late.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

Row = Mapping[str, Any]

ROUNDS_SCHEMA = pa.schema(
    [
        ("session", pa.string()),
        ("round", pa.int64()),
        ("t_s", pa.float64()),
        ("tenant", pa.string()),
        ("asked", pa.bool_()),
        ("policy", pa.string()),
        ("defaulted", pa.bool_()),
        ("provision_gpus", pa.int64()),
        ("placements", pa.int64()),
        ("granted_gpus", pa.int64()),
        ("offers_made", pa.int64()),
        ("offers_received", pa.int64()),
        ("offers_accepted", pa.int64()),
        ("trades", pa.int64()),
        ("traded_usd", pa.float64()),
        ("market_fills", pa.int64()),
        ("market_gpus", pa.int64()),
        ("market_usd", pa.float64()),
        ("held_gpus", pa.float64()),
        ("demand_gpus", pa.float64()),
        ("useful_gpus", pa.float64()),
        ("score", pa.float64()),
        ("difference_reward", pa.float64()),
        ("reward_usd", pa.float64()),
        ("credit_reasons", pa.list_(pa.string())),
    ]
)
CREDIT = ("held_gpus", "demand_gpus", "useful_gpus", "score", "difference_reward", "reward_usd")


def _usd(bundle: Any) -> float:
    return float(bundle.get("usd", 0.0)) if isinstance(bundle, Mapping) else float(bundle.usd)


class RoundTable:
    """Folds round events into rows; `emit` receives each tenant's row as its round commits."""

    def __init__(self, emit: Callable[[dict[str, Any]], None]) -> None:
        self._emit = emit
        self._rows: dict[str, dict[str, Any]] = {}
        self._offers: dict[str, tuple[str, str, float, float]] = {}
        self._open = False
        self._handlers: dict[str, Callable[[Row], None]] = {
            "decision_requested": self._requested,
            "decision_made": self._made,
            "offer_made": self._offer,
            "offer_answered": self._answered,
            "trade_settled": self._settled,
            "market_cleared": self._cleared,
            "gpus_requested": self._granted,
            "gpus_released": self._released,
            "round_credited": self._credited,
            "round_committed": self._committed,
        }

    def take(self, event: Row) -> None:
        """Fold one event (any kind; the ones about rounds count)."""
        handler = self._handlers.get(event["kind"])
        if handler is not None:
            handler(event)

    def _row(self, e: Row, tenant: str | None = None) -> dict[str, Any]:
        name = tenant if tenant is not None else e["tenant"]
        row = self._rows.get(name)
        if row is None:
            row = self._rows[name] = {
                "session": e["session"],
                "tenant": name,
                "asked": False,
                "policy": None,
                "provision_gpus": 0,
                "placements": 0,
                "granted_gpus": 0,
                "offers_made": 0,
                "offers_received": 0,
                "offers_accepted": 0,
                "trades": 0,
                "traded_usd": 0.0,
                "market_fills": 0,
                "market_gpus": 0,
                "market_usd": 0.0,
                "credit_reasons": [],
                **dict.fromkeys(CREDIT),
            }
        return row

    def _requested(self, e: Row) -> None:
        self._open = True
        self._row(e)["asked"] = True

    def _made(self, e: Row) -> None:
        row, action = self._row(e), e["action"]
        row["policy"] = e["policy"]
        row["provision_gpus"] += sum(action.get("provision", {}).values())
        row["placements"] += len(action.get("placements", ()))

    def _offer(self, e: Row) -> None:
        maker, taker = e["tenant"], e["to_tenant"]
        self._offers[e["offer_id"]] = (maker, taker, _usd(e["give"]), _usd(e["take"]))
        self._row(e)["offers_made"] += 1
        self._row(e, taker)["offers_received"] += 1

    def _answered(self, e: Row) -> None:
        offer = self._offers.get(e["offer_id"])
        if e["accepted"] and offer is not None:
            self._row(e, offer[0])["offers_accepted"] += 1

    def _settled(self, e: Row) -> None:
        offer = self._offers.get(e["offer_id"])
        if not e["applied"] or offer is None:
            return
        maker, taker, given, taken = offer
        for name, usd in ((maker, taken - given), (taker, given - taken)):
            row = self._row(e, name)
            row["trades"] += 1
            row["traded_usd"] += usd

    def _cleared(self, e: Row) -> None:
        """A call market's clearing: each tenant filled in it (GPUs bought +, sold -) pays or
        is paid the clearing price a GPU."""
        price = float(e["price_usd_per_gpu"])
        for name, gpus in e["fills"].items():
            if gpus:
                row = self._row(e, name)
                row["market_fills"] += 1
                row["market_gpus"] += gpus
                row["market_usd"] -= gpus * price

    def _granted(self, e: Row) -> None:
        if self._open:
            self._row(e)["granted_gpus"] += e["gpus"]

    def _released(self, e: Row) -> None:
        if self._open:
            self._row(e)["granted_gpus"] -= e["gpus"]

    def _credited(self, e: Row) -> None:
        row = self._row(e)
        for name in CREDIT:
            row[name] = e.get(name)
        row["credit_reasons"] = e["reasons"]

    def _committed(self, e: Row) -> None:
        defaulted = set(e["defaulted"])
        for name in sorted(self._rows):
            row = self._rows[name]
            row.update(round=e["round"], t_s=e["t_s"], defaulted=name in defaulted)
            self._emit(row)
        self._rows = {}
        self._offers.clear()
        self._open = False
