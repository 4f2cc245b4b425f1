"""An episode's reward and score from its money: value earned less spend and SLA penalties, and
that reward as a share of the value (clamped to [0, 1]; 0 when nothing was earned)."""

from __future__ import annotations


def money_reward(value_usd: float, cost_usd: float, sla_usd: float) -> tuple[float, float]:
    reward = value_usd - cost_usd - sla_usd
    return reward, min(max(reward / value_usd, 0.0), 1.0) if value_usd > 0 else 0.0
