"""Money folded from the log: what each tenant and each pool cost, SLA penalties, and the money
settled trades moved between tenants."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from twin.eventlog.tenant_totals import Tenants, tenants
from twin.schema import records


@dataclass
class MoneyTally:
    """Spend, SLA penalties and net trade money per tenant; spend per pool."""

    tenants: Tenants = field(default_factory=tenants)
    pool_cost_usd: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    # This round's offers (ids are unique within a round): maker, taker, $ each way.
    _offers: dict[str, tuple[str | None, str, float, float]] = field(default_factory=dict)

    def _on_budget_charged(self, rec: records.BudgetCharged) -> None:
        self.tenants[rec.tenant].cost_usd += rec.amount_usd
        self.pool_cost_usd[rec.pool] += rec.amount_usd

    def _on_sla_penalty(self, rec: records.SlaPenalty) -> None:
        self.tenants[rec.tenant].sla_usd += rec.amount_usd

    def _on_offer_made(self, rec: records.OfferMade) -> None:
        self._offers[rec.offer_id] = (rec.tenant, rec.to_tenant, _usd(rec.give), _usd(rec.take))

    def _on_trade_settled(self, rec: records.TradeSettled) -> None:
        offer = self._offers.get(rec.offer_id)
        if rec.applied and offer is not None:
            maker, taker, given, taken = offer
            self.tenants[maker].traded_usd += taken - given
            self.tenants[taker].traded_usd += given - taken

    def _on_market_cleared(self, rec: records.MarketCleared) -> None:
        for tenant, gpus in rec.fills.items():
            self.tenants[tenant].traded_usd -= gpus * rec.price_usd_per_gpu

    def _on_round_committed(self, rec: records.RoundCommitted) -> None:
        self._offers.clear()


def _usd(bundle: Any) -> float:
    """The dollars in a trade bundle, as the sim records it or as JSON decodes it."""
    usd = bundle.get("usd", 0.0) if isinstance(bundle, dict) else bundle.usd
    return float(usd)
