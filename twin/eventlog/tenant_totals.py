"""One tenant's totals over a log, shared by the tallies that fold jobs and money into it."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass


@dataclass
class TenantTotals:
    """Jobs arrived, finished and failed; dollars spent, penalised, earned and traded."""

    arrived: int = 0
    finished: int = 0
    failed: int = 0
    cost_usd: float = 0.0
    sla_usd: float = 0.0
    value_usd: float = 0.0
    traded_usd: float = 0.0


Tenants = defaultdict[str | None, TenantTotals]
"""Every tenant seen, in the order first seen (None: cluster-wide records)."""


def tenants() -> Tenants:
    return defaultdict(TenantTotals)
