"""A tenant of a cluster scenario as an environment for TRL's GRPOTrainer (`environment_factory`).

TRL builds one instance per rollout with no arguments, calls `reset(**row)` with the dataset
row's columns (`scenario`, `tenant`, `seed`), offers the public methods below to the model as
tools (their schemas come from the type hints and docstrings), and the reward function reads
`get_reward()`. The other tenants are opponents in process (`negotiator` unless the row names
`opponents`): they make offers to the tenant and answer its own. `make_offer` and
`answer_offer` add to the tenant's turn; `provision`, `place`, `bid`, `sell`, `buy` (the call
market's orders) and `wait` end it, and the other tenants play on until it must decide again.

An episode always settles: `get_reward()` on an episode the model stopped short of its end (a
completion ran out of tokens, say) first plays the rest of it with the tenant's own policy (the
scenario's, `autoscale` in `market`), so the reward is the tenant's true return over the whole
episode and stopping early never pays.

Two row columns shape it for training:
- `view="compact"`: observations as a few hundred characters (time in hours, budget, the head
  of the queue with each job's fitting pools and scores, each pool's GPUs, price, delay
  quantiles and billing, its own value and SLA cost, offers)
  instead of the whole record (`view="full"`, the default);
- `reward="gain"`: `get_reward()` is the return less the paired baseline's, the tenant's return
  on the same seed against the same opponents when it follows its own policy throughout (played
  once per scenario, tenant, seed, opponents and mechanism, and cached), so a group's rewards
  are centred where doing nothing new scores 0.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal

import orjson

from twin.errors import ActionError, SessionEndedError
from twin.rl.opponents import opponents as _opponents
from twin.rl.table import Table
from twin.schema.actions import (
    REASON_CHARS,
    Bundle,
    Offer,
    Order,
    Placement,
    ProvisionAction,
    TenantObservation,
)
from twin.schema.vocabulary import DEFAULT_MECHANISM, mechanism_names
from twin.sim import scenarios
from twin.sim.driver import Driver

MAX_GPUS_PER_CALL = 16
MAX_BID_USD = 1000.0
MAX_OFFER_USD = 10_000.0
MAX_OFFERS_PER_TURN = 8
COMPACT_HEAD = 3  # waiting jobs a compact view shows
VIEWS = ("full", "compact")
REWARDS = ("return", "gain")


def _error(text: str) -> str:
    return orjson.dumps({"error": text}).decode()


class ClusterTenantEnv:
    """One tenant's decisions in a cluster scenario, as tools for a language model."""

    def __init__(self) -> None:
        self._table: Table | None = None
        self._pools: list[str] = []
        self.tenant = ""
        self.reward = 0.0
        self._offers: list[Offer] = []  # made this turn
        self._answers: dict[str, tuple[bool, str]] = {}  # given this turn, by offer id
        self.finished_by: str | None = None  # the policy that played out a cut-short episode
        self.compact = False
        self.relative = False
        self._row: tuple[str, str, int, str, str] = ("", "", 0, "", "")

    def reset(self, *, scenario: str = "market", tenant: str | None = None, seed: int = 0,
              opponents: str = "negotiator", mechanism: str = DEFAULT_MECHANISM,
              view: Literal["full", "compact"] = "full",
              reward: Literal["return", "gain"] = "return", **columns: Any) -> str:  # fmt: skip
        """Start an episode; the tenant's first view, as JSON text for the prompt."""
        if mechanism not in mechanism_names():
            allowed = ", ".join(mechanism_names())
            raise ActionError(f"unknown mechanism {mechanism!r}; allowed: {allowed}")
        if view not in VIEWS or reward not in REWARDS:
            raise ActionError(f"view must be one of {VIEWS} and reward one of {REWARDS}; got "
                              f"{view!r}, {reward!r}")  # fmt: skip
        self.compact, self.relative = view == "compact", reward == "gain"
        loaded = scenarios.load_cluster(scenario)
        driver: Driver[TenantObservation, ProvisionAction] = Driver(loaded, seed=int(seed))
        self._pools = [p.name for p in loaded.pools]
        self.tenant = tenant or driver.tenants[0]
        if self.tenant not in driver.tenants:
            raise ActionError(f"unknown tenant {self.tenant!r}; tenants: {driver.tenants}")
        others = _opponents(opponents, driver.tenants, self.tenant,
                            driver.default_policies(), int(seed))  # fmt: skip
        self._table = Table(driver, self.tenant, others, mechanism)
        self._offers, self._answers = [], {}
        self.finished_by = None
        self._row = (scenario, self.tenant, int(seed), opponents, mechanism)
        self.reward = self._table.to_turn()
        return self.view()

    def view(self) -> str:
        """
        Look at the cluster without acting: your queue, budget, GPUs per pool and prices, the
        offers other tenants made you this turn (with their reasons), what you have offered and
        answered this turn, and how your last turn's trades went.

        Returns:
            The tenant's current observation as JSON.
        """
        table = self._need()
        driver = table.driver
        if driver.ended is not None:
            return orjson.dumps({"ended": driver.ended, "reward": self.reward}).decode()
        if self.compact:
            return orjson.dumps(self._compact()).decode()
        seen: dict[str, Any] = driver.observe(self.tenant).model_dump(exclude_defaults=True)
        seen["offers"] = [o.model_dump(exclude_defaults=True)
                          for o in table.offers_to_ego]  # fmt: skip
        if self._offers:
            seen["my_offers"] = [o.model_dump(exclude_defaults=True)
                                 for o in self._offers]  # fmt: skip
        if self._answers:
            seen["my_answers"] = {oid: yes for oid, (yes, _) in self._answers.items()}
        if table.last is not None and table.last.trades:
            seen["last_trades"] = [
                {"offer_id": t.offer_id, "status": t.status, "reason": t.reason}
                for t in table.last.trades
            ]
        return orjson.dumps(seen).decode()

    def provision(self, pool: str, gpus: int) -> str:
        """
        Add GPUs to one pool (a negative number releases idle ones) and end your turn.

        Args:
            pool: The pool's name, as the observation lists it.
            gpus: GPUs to add (1 to 16) or release (-16 to -1).

        Returns:
            What happened, then your next observation, as JSON.
        """
        pools = self._pools
        if pool not in pools:
            return _error(f"unknown pool {pool!r}; pools: {pools}")
        if not gpus or abs(gpus) > MAX_GPUS_PER_CALL:
            return _error("gpus must be -16..-1 or 1..16")
        return self._act(ProvisionAction(provision={pool: int(gpus)}))

    def place(self, job_id: str, pool: str) -> str:
        """
        Start one of your waiting jobs now on a pool, with its own plan as the kernel scored it
        (the observation's `head` lists waiting jobs and their plans' verdicts), and end your turn.

        Args:
            job_id: The waiting job's id, as the observation lists it.
            pool: The pool to run it on; its plan must be feasible there.

        Returns:
            What happened, then your next observation, as JSON.
        """
        if pool not in self._pools:
            return _error(f"unknown pool {pool!r}; pools: {self._pools}")
        return self._act(ProvisionAction(placements=[Placement(job_id=job_id, pool=pool)]))

    def bid(self, pool: str, gpus: int, usd_per_gpu: float) -> str:
        """
        Ask for GPUs of a scarce pool with a sealed bid, and end your turn. Under the auction
        mechanism the highest bids get the GPUs and every winner pays, once per GPU won, the
        highest losing bid (on top of the pool's hourly price); other mechanisms ignore bids.

        Args:
            pool: The pool's name, as the observation lists it.
            gpus: GPUs to ask for (1 to 16).
            usd_per_gpu: The most you would pay per GPU won, in dollars (0 or more).

        Returns:
            What happened, then your next observation, as JSON.
        """
        wrong = self._priced_wrong(pool, gpus, usd_per_gpu)
        if wrong:
            return wrong
        action = ProvisionAction(provision={pool: int(gpus)},
                                 bids_usd_per_gpu={pool: float(usd_per_gpu)})  # fmt: skip
        return self._act(action)

    def sell(self, pool: str, gpus: int, usd_per_gpu: float) -> str:
        """
        Offer idle GPUs of a pool to the call market, and end your turn. Under the call_market
        mechanism held GPUs change hands at one clearing price per GPU each round; other
        mechanisms ignore orders.

        Args:
            pool: The pool's name, as the observation lists it.
            gpus: Idle GPUs to sell (1 to 16; no more than you hold idle are sold).
            usd_per_gpu: The least you would take per GPU sold, in dollars (0 or more).

        Returns:
            What happened, then your next observation, as JSON.
        """
        return self._order("asks", pool, gpus, usd_per_gpu)

    def buy(self, pool: str, gpus: int, usd_per_gpu: float) -> str:
        """
        Bid for GPUs other tenants hold, on the call market, and end your turn. Under the
        call_market mechanism held GPUs change hands at one clearing price per GPU each round;
        other mechanisms ignore orders.

        Args:
            pool: The pool's name, as the observation lists it.
            gpus: GPUs to buy (1 to 16).
            usd_per_gpu: The most you would pay per GPU bought, in dollars (0 or more).

        Returns:
            What happened, then your next observation, as JSON.
        """
        return self._order("buys", pool, gpus, usd_per_gpu)

    def _priced_wrong(self, pool: str, gpus: int, usd_per_gpu: float) -> str | None:
        """The error to answer a priced request of `gpus` GPUs of `pool` with, if any."""
        if pool not in self._pools:
            return _error(f"unknown pool {pool!r}; pools: {self._pools}")
        if not 1 <= gpus <= MAX_GPUS_PER_CALL:
            return _error("gpus must be 1..16")
        if not 0 <= usd_per_gpu <= MAX_BID_USD:
            return _error(f"usd_per_gpu must be 0..{MAX_BID_USD:g}")
        return None

    def _order(self, side: str, pool: str, gpus: int, usd_per_gpu: float) -> str:
        wrong = self._priced_wrong(pool, gpus, usd_per_gpu)
        if wrong:
            return wrong
        order = {pool: Order(gpus=int(gpus), usd_per_gpu=float(usd_per_gpu))}
        return self._act(ProvisionAction.model_validate({side: order}))

    def make_offer(self, to_tenant: str, pool: str, gpus: int, usd: float,
                   reason: str = "") -> str:  # fmt: skip
        """
        Offer another tenant a trade of GPUs for money (or money for GPUs). It does not end your
        turn: the other tenant answers when your turn ends, and an accepted trade applies then.

        Args:
            to_tenant: The tenant to trade with.
            pool: The pool whose GPUs change hands.
            gpus: Idle GPUs you hand over (1 to 16), or GPUs you ask for (-16 to -1).
            usd: Dollars you pay (positive) or ask to be paid (negative).
            reason: Why, in a few words (the other tenant reads it).

        Returns:
            The offer as made, with its id, as JSON.
        """
        table = self._need()
        others = [t for t in table.driver.tenants if t != self.tenant]
        if to_tenant not in others:
            return _error(f"cannot offer to {to_tenant!r}; other tenants: {others}")
        if pool not in self._pools:
            return _error(f"unknown pool {pool!r}; pools: {self._pools}")
        if abs(gpus) > MAX_GPUS_PER_CALL:
            return _error("gpus must be -16..16")
        if abs(usd) > MAX_OFFER_USD:
            return _error(f"usd must be -{MAX_OFFER_USD:g}..{MAX_OFFER_USD:g}")
        if not gpus:
            return _error("a trade moves GPUs: offer some (gpus 1..16) or ask for some (-16..-1)")
        if len(self._offers) >= MAX_OFFERS_PER_TURN:
            return _error(f"at most {MAX_OFFERS_PER_TURN} offers a turn")
        give = Bundle(gpus={pool: gpus} if gpus > 0 else {}, usd=max(usd, 0.0))
        take = Bundle(gpus={pool: -gpus} if gpus < 0 else {}, usd=max(-usd, 0.0))
        offer_id = f"{self.tenant}-{table.driver.round + 1}-{len(self._offers)}"
        offer = Offer(
            offer_id=offer_id,
            from_tenant=self.tenant,
            to_tenant=to_tenant,
            give=give,
            take=take,
            reason=reason[:REASON_CHARS],
        )
        self._offers.append(offer)
        return offer.model_dump_json(exclude_defaults=True)

    def answer_offer(self, offer_id: str, accept: bool, reason: str = "") -> str:
        """
        Accept or reject an offer another tenant made you this turn (`view` lists them). It does
        not end your turn; an offer you leave unanswered lapses when your turn ends.

        Args:
            offer_id: The offer's id, as the view lists it.
            accept: True to accept the trade, false to reject it.
            reason: Why, in a few words (the other tenant reads it).

        Returns:
            The answer as given, as JSON.
        """
        table = self._need()
        open_ids = [o.offer_id for o in table.offers_to_ego]
        if offer_id not in open_ids:
            return _error(f"no open offer {offer_id!r} to you; open: {open_ids}")
        self._answers[offer_id] = (bool(accept), reason[:REASON_CHARS])
        return orjson.dumps({"offer_id": offer_id, "accept": bool(accept)}).decode()

    def wait(self) -> str:
        """
        Change nothing this turn.

        Returns:
            Your next observation, as JSON.
        """
        return self._act(ProvisionAction())

    def get_reward(self) -> float:
        """The tenant's return over the whole episode (what the reward function reads), or with
        `reward="gain"` that less the paired baseline's: where the episode has not ended, the
        tenant's own policy plays it out first and it settles."""
        table = self._need()
        if table.driver.ended is None:
            self._offers, self._answers = [], {}
            self.reward += table.play_out()
            self.finished_by = table.own.name
        return self.reward - self.baseline_usd if self.relative else self.reward

    @property
    def baseline_usd(self) -> float:
        """The paired baseline: the tenant's return on this seed, against these opponents,
        following its own policy throughout (a property, so that TRL offers no tool for it)."""
        self._need()
        return paired_baseline(*self._row)

    # -- internals ------------------------------------------------------------------------

    def _need(self) -> Table:
        if self._table is None:
            raise SessionEndedError("no episode: reset first")
        return self._table

    def _compact(self) -> dict[str, Any]:
        """The view in brief: what a model needs to decide, in a few hundred characters."""
        table = self._need()
        seen = table.driver.observe(self.tenant)
        out: dict[str, Any] = {"t_h": round(seen.t_s / 3600, 2), "spent_usd": round(seen.spent_usd)}
        if seen.budget_usd is not None:
            out["budget_usd"] = round(seen.budget_usd)
        head = [
            {"id": j.job_id, "gpus": j.gpus, "wait_h": round(j.wait_s / 3600, 2),
             "fits": {v.pool: round(v.score, 2) for v in j.plans if v.feasible}}
            for j in seen.head[:COMPACT_HEAD]
        ]  # fmt: skip
        out["queue"] = {"jobs": seen.queue_length, "gpus": seen.queued_gpus, "head": head}
        out["value_usd_h"], out["sla_usd_job_h"] = seen.value_usd_per_gpu_h, seen.sla_usd_per_job_h
        out["pools"] = {p.name: {"ready": p.ready, "busy": round(p.busy_gpus, 1),
                                 "pending": p.pending, "free": p.free_capacity,
                                 "usd_h": p.price_usd_per_gpu_h,
                                 "delay_h": [round(d / 3600, 2) for d in p.provision_delay_s],
                                 "billed": p.billing.removeprefix("from_")}
                        for p in seen.pools}  # fmt: skip
        offers = table.offers_to_ego
        if offers:
            out["offers"] = [{"id": o.offer_id, "from": o.from_tenant,
                              "give": o.give.model_dump(exclude_defaults=True),
                              "take": o.take.model_dump(exclude_defaults=True)}
                             for o in offers]  # fmt: skip
        if table.last is not None and table.last.trades:
            out["last_trades"] = [t.status for t in table.last.trades]
        return out

    def _act(self, action: ProvisionAction) -> str:
        table = self._need()
        if table.driver.ended is not None:
            return self.view()
        offers, answers = self._offers, self._answers
        self._offers, self._answers = [], {}
        self.reward += table.play(action, offers, answers)
        return self.view()


@lru_cache(maxsize=4096)
def paired_baseline(scenario: str, tenant: str, seed: int, opponents: str, mechanism: str) -> float:
    """The tenant's return on `seed` against `opponents` when it follows its own policy
    throughout (played once per process for each set of arguments)."""
    loaded = scenarios.load_cluster(scenario)
    driver: Driver[TenantObservation, ProvisionAction] = Driver(loaded, seed=seed)
    others = _opponents(opponents, driver.tenants, tenant, driver.default_policies(), seed)
    table = Table(driver, tenant, others, mechanism)
    return table.to_turn() + table.play_out()
