"""Each tenant's settlements: what it earned since its last round (its reward for a round), and
at the end what accrued after its last round, kept until a caller claims it."""

from __future__ import annotations

from collections.abc import Sequence

from twin.schema import records
from twin.sim.ledger import Accrual, Ledger
from twin.sim.state import Emit


class Settlements:
    """The tenants' books as they were last settled."""

    def __init__(self, ledgers: Sequence[Ledger]) -> None:
        self.ledgers = ledgers
        self._settled = [Accrual() for _ in ledgers]  # each tenant's books at its last round
        self._unclaimed: dict[int, float] = {}  # the final settlement, until a caller takes it

    def settle(self, tenant: int, now_s: float) -> tuple[float, Accrual]:
        """The reward since the tenant's last settlement, and what made it up."""
        now, before = self.ledgers[tenant].accrual(now_s), self._settled[tenant]
        self._settled[tenant] = now
        return now.reward_usd - before.reward_usd, now - before

    def close(self, names: Sequence[str], now_s: float, emit: Emit) -> None:
        """The final settlement of every tenant, logged as `episode_settled` and kept."""
        for t, name in enumerate(names):
            reward, final = self.settle(t, now_s)
            self._unclaimed[t] = reward
            emit(records.EpisodeSettled(
                "episode_settled", now_s, name, reward, self._settled[t].reward_usd,
                final.value_usd, final.traded_usd, final.spent_usd, final.sla_usd,
            ))  # fmt: skip

    def claim(self, tenant: int) -> float:
        """The tenant's final settlement, once (then 0)."""
        return self._unclaimed.pop(tenant, 0.0)
