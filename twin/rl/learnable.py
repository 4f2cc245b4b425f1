"""What makes a job-level environment learnable: observations scaled to about one, SLA penalties
told as they accrue, and a mask of the action parts that can act.

- **Scaling** (`normalised=True`): time as a share of the horizon, money as a share of the
  tenant's budget, GPUs as a share of the pool (or of the cluster), waits in hours, queue
  lengths and job counts in tens, dollars offered in hundreds, GPUs offered in `max_delta`s;
  every value clipped to [-100, 100] (`NORMALISED_BOUND`), the observation space's bounds.
- **SLA accrued per round**: the summary books a job's SLA penalty when it starts (or at the
  end); told that way, a long wait costs nothing until it is over. `SlaAccrual` tells each
  round the penalty the tenant's waiting jobs ran up in it instead: the booked reward less the
  change in the penalty accrued and not yet booked. That is zero at the start and at the end,
  so the rewards told over an episode still sum to the summary's return, to the cent.
- **Masks** (`Masker`): per choice of the flat `MultiDiscrete` (the layout sb3-contrib's
  MaskablePPO takes), whether it can act: no offer parts where no opponent trades, no bids
  where the mechanism takes none, no placement of an empty slot or on a pool where the job's
  plan does not fit, no answer to an empty offer slot, no release of GPUs the tenant does not
  hold idle or pending, no request beyond what the pool can still provision.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from twin.rl.whole_action import BID_LEVELS_USD, QUEUE_FIELDS, USD_LEVELS, WholeAction
from twin.schema.actions import delay_quantiles_s
from twin.schema.scenario import ClusterScenario
from twin.schema.vocabulary import MECHANISM_TRAITS, Mechanism
from twin.sim.driver import Driver

HEAD_FIELDS = 6  # t_s, budget left, spent, queue length, queued GPUs, running jobs
PER_POOL = 5  # ready, busy, pending, down, free
COUNT_SCALE = 0.1  # queue lengths and running jobs, in tens
USD_SCALE = 0.01  # dollars offered, in hundreds
HOUR_S = 3600.0
DAY_S = 86_400.0


def state_scale(scenario: ClusterScenario, tenant: str) -> np.ndarray:
    """Multipliers that bring the state vector (`Driver.observe_flat`) to about one."""
    t = next(x for x in scenario.tenants if x.name == tenant)
    budget = t.budget_usd or 1000.0
    cluster = max(sum(p.max_gpus for p in scenario.pools), 1)
    head = [1.0 / (scenario.horizon_s or DAY_S), 1.0 / budget, 1.0 / budget, COUNT_SCALE,
            1.0 / cluster, COUNT_SCALE]  # fmt: skip
    pools = [1.0 / max(p.max_gpus, 1) for p in scenario.pools for _ in range(PER_POOL)]
    return np.array(head + pools)


def queue_scale(scenario: ClusterScenario, whole: WholeAction) -> np.ndarray:
    """Multipliers for a queue block's columns: present, GPUs, wait, then the kernel's scores."""
    widest = max((p.max_gpus for p in scenario.pools), default=1) or 1
    return np.array([1.0, 1.0 / widest, 1.0 / HOUR_S] + [1.0] * len(whole.pools))


def offers_scale(whole: WholeAction) -> np.ndarray:
    """Multipliers for an offers block's columns: made, maker, dollars, then GPUs per pool."""
    return np.array([1.0, 1.0 / max(len(whole.tenants), 1), USD_SCALE]
                    + [1.0 / whole.max_delta] * len(whole.pools))  # fmt: skip


TERMS_PER_POOL = 6  # price, provisioning delay p10/p50/p90, billed from the request, capacity
TENANT_TERMS = 3  # value per GPU-hour, SLA cost per job-hour, budget
PRICE_SCALE = 0.1  # dollars per GPU-hour (and per job-hour), in tens
BUDGET_SCALE = 0.001  # a budget, in thousands


def terms(scenario: ClusterScenario, tenant: str, *, normalised: bool) -> np.ndarray:
    """The scenario's terms as the tenant knows them, fixed for an episode: per pool (scenario
    order) its price per GPU-hour, its provisioning delay's 10th/50th/90th percentiles, 1 where
    it bills from the request, its capacity; then the tenant's value per GPU-hour, SLA cost per
    job-hour and budget (0: unlimited). Scaled (`normalised`): dollars in tens, delays in hours,
    capacity as a share of the cluster, the budget in thousands; else in their own units."""
    t = next(x for x in scenario.tenants if x.name == tenant)
    cluster = max(sum(p.max_gpus for p in scenario.pools), 1)
    price_k, delay_k, gpus_k, budget_k = ((PRICE_SCALE, 1.0 / HOUR_S, 1.0 / cluster, BUDGET_SCALE)
                                          if normalised else (1.0, 1.0, 1.0, 1.0))  # fmt: skip
    out: list[float] = []
    for p in scenario.pools:
        delays = [d * delay_k for d in delay_quantiles_s(p.provision_delay_s)]
        out += [p.price_usd_per_gpu_h * price_k, *delays,
                1.0 if p.billing == "from_request" else 0.0, p.max_gpus * gpus_k]  # fmt: skip
    out += [t.value_usd_per_gpu_h * price_k, t.sla_usd_per_job_h * price_k,
            (t.budget_usd or 0.0) * budget_k]  # fmt: skip
    return np.array(out)


UNLIMITED = 1e12  # a state value this large (or infinite) is an unlimited budget
NORMALISED_BOUND = 100.0  # a scaled value is clipped to +-100: a wait of 100 h, 1,000 jobs queued


def scale_state(state: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The state vector scaled; an unlimited budget reads as a budget untouched (1)."""
    return np.where(np.abs(state) < UNLIMITED, state * scale, 1.0)


class SlaAccrual:
    """Rewards told with SLA penalties as they accrue (see the module's docstring)."""

    def __init__(self, driver: Driver[Any, Any], tenant: str) -> None:
        self.driver, self.tenant = driver, tenant
        self.accrued_usd = 0.0  # accrued and not yet booked, as of the last reward told

    def tell(self, booked_usd: float) -> float:
        """The reward to tell for `booked_usd` (booked since the last one told)."""
        now = self.driver.waiting_sla_usd(self.tenant)
        told = booked_usd - (now - self.accrued_usd)
        self.accrued_usd = now
        return told


class Masker:
    """The action mask of one tenant's flat action: the parts fixed for an episode (bids, the
    offer's parts, the call market's prices) drawn once, the rest (provision, place, answer,
    call-market orders) filled in per step."""

    def __init__(self, whole: WholeAction, *, tenant: str, trading: bool,
                 mechanism: Mechanism) -> None:  # fmt: skip
        self.whole, self.p, self.d = whole, len(whole.pools), whole.max_delta
        sizes = {name: sum(nvec) for name, nvec in whole.parts().items()}
        ends = np.cumsum(list(sizes.values()))
        self.at = {name: (int(end - size), int(end))
                   for (name, size), end in zip(sizes.items(), ends, strict=True)}  # fmt: skip
        template = np.zeros(int(ends[-1]), dtype=bool)
        bid = np.full(len(BID_LEVELS_USD), MECHANISM_TRAITS[mechanism].takes_bids)
        bid[0] = True
        self._put(template, "bid", np.tile(bid, self.p))
        to = np.array([True] + [trading and t != tenant for t in whole.tenants])
        self._put(template, "offer_to", to)
        gpus = np.full(2 * self.d + 1, trading)
        gpus[self.d] = True
        self._put(template, "offer_gpus", np.tile(gpus, self.p))
        usd = np.full(2 * len(USD_LEVELS) - 1, trading)
        usd[len(USD_LEVELS) - 1] = True
        self._put(template, "offer_usd", usd)
        clears = trading and MECHANISM_TRAITS[mechanism].clears_held
        self.clears = clears
        price = np.full(len(BID_LEVELS_USD), clears)
        price[0] = True
        self._put(template, "market_price", np.tile(price, self.p))
        self.template = template
        self._shift = np.arange(2 * self.d + 1) - self.d

    def _put(self, mask: np.ndarray, part: str, values: np.ndarray) -> None:
        start, end = self.at[part]
        mask[start:end] = values

    def __call__(self, state: np.ndarray, queue: np.ndarray, offers: np.ndarray) -> np.ndarray:
        """Per choice of the flat action, whether it can act now (`state`, `queue` and
        `offers` the raw, unscaled blocks of the observation)."""
        mask = self.template.copy()
        pools = state[HEAD_FIELDS:].reshape(self.p, PER_POOL)
        ready, busy, pending, free = pools[:, 0], pools[:, 1], pools[:, 2], pools[:, 4]
        idle = np.maximum(ready - np.ceil(busy - 1e-9), 0.0)
        releasable = idle + pending
        shift = self._shift
        provision = (shift >= -releasable[:, None]) & (shift <= free[:, None])
        self._put(mask, "provision", provision.ravel())
        place = np.zeros((len(queue), self.p + 1), dtype=bool)
        place[:, 0] = True
        place[:, 1:] = (queue[:, :1] > 0) & (queue[:, QUEUE_FIELDS : QUEUE_FIELDS + self.p] > 0)
        self._put(mask, "place", place.ravel())
        accept = np.ones((len(offers), 2), dtype=bool)
        accept[:, 1] = offers[:, 0] > 0
        self._put(mask, "accept", accept.ravel())
        # Call-market orders: buy up to `max_delta`, ask up to the idle GPUs.
        market = np.zeros_like(provision)
        market[:, self.d] = True
        if self.clears:
            market = (shift >= -idle[:, None]) & (shift <= self.d)
        self._put(mask, "market", market.ravel())
        return mask


Blocks = tuple[np.ndarray, np.ndarray, np.ndarray]  # state, queue, offers


class Lens:
    """One tenant's observation as its learner sees it: the action mask its raw blocks imply,
    and the blocks scaled to about one where `normalised`."""

    def __init__(self, scenario: ClusterScenario, whole: WholeAction, tenant: str, *,
                 trading: bool, mechanism: Mechanism, normalised: bool) -> None:  # fmt: skip
        self.masker = Masker(whole, tenant=tenant, trading=trading, mechanism=mechanism)
        self.scales: Blocks | None = None
        if normalised:
            self.scales = (state_scale(scenario, tenant), queue_scale(scenario, whole),
                           offers_scale(whole))  # fmt: skip

    def __call__(self, state: np.ndarray, queue: np.ndarray,
                 offers: np.ndarray) -> tuple[Blocks, np.ndarray]:  # fmt: skip
        """The blocks to show (scaled or as they are) and the mask."""
        mask = self.masker(state, queue, offers)
        if self.scales is None:
            return (state, queue, offers), mask
        state_k, queue_k, offers_k = self.scales
        bound = NORMALISED_BOUND
        scaled = (np.clip(scale_state(state, state_k), -bound, bound),
                  np.clip(queue * queue_k, -bound, bound),
                  np.clip(offers * offers_k, -bound, bound))  # fmt: skip
        return scaled, mask
