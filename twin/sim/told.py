"""What a tenant is told of a committed round, as the wire's `RoundCommitted` (the gateway sends
it to agents; in-process opponents of an RL environment learn from it the same way)."""

from __future__ import annotations

from twin.schema.wire import PlacementResult, RoundCommitted, TradeResult
from twin.sim.model import TenantOutcome


def round_committed(number: int, t_s: float, defaulted: bool, o: TenantOutcome) -> RoundCommitted:
    """Round `number` at virtual time `t_s` as one tenant hears it (`defaulted`: its policy
    decided because its agent did not)."""
    return RoundCommitted(
        round=number,
        t_s=t_s,
        defaulted=defaulted,
        granted=o.granted,
        price_usd_per_gpu=o.price_usd_per_gpu,
        placements=[
            PlacementResult(job_id=p.job_id, pool=p.pool, started=p.started,
                            reasons=list(p.reasons), score=p.score,
                            tokens_per_s=p.tokens_per_s)
            for p in o.placements
        ],
        trades=[
            TradeResult(offer_id=t.offer_id, from_tenant=t.from_tenant,
                        to_tenant=t.to_tenant, status=t.status, reason=t.reason)
            for t in o.trades
        ],
        market=o.market,
        market_price_usd_per_gpu=o.market_price_usd_per_gpu,
        reward=o.reward,
        difference_reward=o.difference_reward,
        score=o.score,
        credit_reasons=list(o.credit_reasons),
    )  # fmt: skip
