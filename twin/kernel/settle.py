"""Round-level terms: inverse reward design against hoarding, and difference rewards.

Given per-tenant totals for one decision round (GPUs asked, utility earned, who is short),
a tenant holding more than its fair share of the capacity while another tenant gets less than
it demands is floored; each plan's credit is the tenant's global utility with its allocation
minus without it: D_t = U_t - penalty * (over(N) - over(N - n_t)), over(x) = max(x - cap, 0),
with utility = score x GPUs (useful GPUs) and a penalty per GPU asked beyond the capacity.
"""

from __future__ import annotations

from typing import Any

FLOOR = 0.01
HOARDING = 256


def floor_hoarding(
    O: Any,
    score: Any,
    reasons: Any,
    tenant_gpus: Any,
    others_starving: Any,
    fair_gpus: Any,
    slack: Any,
) -> tuple[Any, Any]:
    """Scores and reasons after flooring hoarders."""
    hoard = (tenant_gpus > fair_gpus * (1.0 + slack)) & (others_starving > 0)
    return (
        O.where(hoard & (score > 0.0), FLOOR, score),
        reasons | O.where(hoard, HOARDING, 0),
    )


def credit(
    O: Any,
    tenant_utility: Any,
    tenant_gpus: Any,
    total_gpus: Any,
    capacity: Any,
    penalty: Any,
) -> Any:
    """Difference reward of the plan's tenant."""
    return tenant_utility - penalty * (
        O.maximum(total_gpus - capacity, 0.0) - O.maximum(total_gpus - tenant_gpus - capacity, 0.0)
    )
