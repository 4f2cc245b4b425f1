"""A learned provisioning policy: a small linear policy over normalised features of a tenant's
view, trained by `twin train` and seated like any agent (in the arena, `twin play`, as an RL
opponent).

Each round, per pool, it computes features of the tenant's view (scaled to about one: GPUs as
counts, time in hours, money as shares; among them the scenario's own terms, the pool's
provisioning delay and billing, so one policy can act differently where GPUs are minutes or
hours away) and asks for `round(weights . features)` GPUs there
(negative: release), clipped to what the pool can give and what the tenant holds idle or
pending. The features are chosen so that one setting of the weights is the scenarios' own
`autoscale` policy (`AUTOSCALE_WEIGHTS`): training starts there and moves away only where that
pays.

A row may carry four more numbers (`MARKET`), and then the policy trades where trading is on.
Where the mechanism clears held GPUs (`call_market`): of the idle GPUs it would release it asks
to sell a share (`ask_share`) at a limit of so many provisioning delays' rent (`ask_delays`;
those asked in its last round and still spare it releases, as the reference negotiator does),
and for the GPUs its queue lacks it bids a share (`bid_share`) of what one now is worth to it
(its work's value net of rent, plus the SLA its waiting jobs stop paying, over the wait it
saves); it trades only in pools where a GPU handed over saves at least `min_wait_h` hours
(`saved_wait_h`). Under bilateral offers the same numbers make offers and answer them: its asks
go to the other tenants as offers at the same price, and it accepts GPUs its queue lacks for at
most what it would bid. A row without them never trades; `twin train` searches them under the
call market, where every episode clears its orders.

A policy file (JSON) holds the weights per tenant, with a `default` row for a tenant it was
not trained for; it names the scenario it was trained on and how (see `PolicyFile`).
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twin.schema.actions import Bundle, Order, PoolView, ProvisionAction, TenantObservation
from twin.schema.wire import DecisionRequested, OfferView, RoundCommitted
from twin_agents.policies import (
    ask_usd_per_gpu,
    saved_wait_h,
    sla_saved_usd_per_gpu,
    unmet_gpus,
    usable_pools,
    worth_usd_per_gpu,
)
from twin_agents.policy import Answer, OfferToMake, Policy, Turn
from twin_agents.registry import Maker, Seat

FEATURES: tuple[str, ...] = (
    "deficit",  # GPUs the queue lacks (queued less idle and pending), given to this pool in rank
    "deficit_x_hours",  # the same, times the hours since the episode began
    "deficit_x_spent",  # the same, times the share of the budget spent
    "deficit_x_margin",  # the same, times (value per GPU-hour / the pool's price - 1)
    "usable",  # 1 where a waiting job can run on this pool
    "usable_x_hours",  # the same, times hours
    "idle_if_empty",  # idle GPUs held here when the queue is empty
    "pending_if_empty",  # GPUs on their way here when the queue is empty
    "idle_if_waiting",  # idle GPUs held here while jobs wait (for other pools, say)
    "holding",  # GPUs held here (ready and pending)
    "deficit_x_delay_h",  # the deficit, times the pool's median provisioning delay in hours
    "idle_if_empty_x_delay_h",  # idle GPUs held here when the queue is empty, times that delay
    "idle_if_empty_x_from_request",  # the same, where the pool bills from the request
)
"""The features, in the order of a row of weights."""

AUTOSCALE_WEIGHTS: tuple[float, ...] = (1.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0, -1.0, 0.0, 0.0,
                                         0.0, 0.0, 0.0)  # fmt: skip
"""The weights that make this policy the scenarios' `autoscale` (without its budget reserve)."""

MARKET: tuple[str, ...] = ("ask_share", "ask_delays", "bid_share", "min_wait_h")
"""The trading parameters that may follow a row's weights (see the module's docstring); a row
written with the first three only trades in every pool (`min_wait_h` 0)."""

MARKET_START: tuple[float, ...] = (0.5, 1.0, 0.5, 0.0)
"""Where a search over the trading parameters starts: half the spare GPUs asked at one delay's
rent, bids at half their worth, in every pool."""

FORMAT = "cluster-twin/linear-policy"
VERSION = 2  # 2: the scenario's provisioning delay and billing among the features


def features(view: TenantObservation) -> dict[str, list[float]]:
    """Each pool's features (in `FEATURES` order) by pool name, from the tenant's view."""
    pools = view.ranked_pools("value")
    usable = {name for job in view.head for name in job.pools}
    idle = sum(p.ready - p.busy_gpus for p in pools)
    coming = sum(p.pending for p in pools)
    deficit = max(math.ceil(view.queued_gpus - idle - coming), 0) if view.queue_length else 0
    hours = view.t_s / 3600.0
    budget = None if view.budget_usd is None else view.budget_usd + view.spent_usd
    spent = view.spent_usd / budget if budget else 0.0
    empty = view.queue_length == 0
    out: dict[str, list[float]] = {}
    for p in pools:
        share = 0.0
        if p.name in usable and deficit > 0 and not p.shared:
            share = float(min(deficit, p.free_capacity))
            deficit -= int(share)
        margin = (
            view.value_usd_per_gpu_h / p.price_usd_per_gpu_h - 1.0 if p.price_usd_per_gpu_h else 0.0
        )
        is_usable = 1.0 if p.name in usable else 0.0
        delay_h = p.provision_delay_s[1] if p.provision_delay_s else p.mean_provision_delay_s
        delay_h /= 3600.0
        idle_empty = float(p.idle_gpus) if empty else 0.0
        out[p.name] = [
            share, share * hours, share * spent, share * margin,
            is_usable, is_usable * hours,
            float(p.idle_gpus) if empty else 0.0,
            float(p.pending) if empty else 0.0,
            0.0 if empty else float(p.idle_gpus),
            float(p.ready + p.pending),
            share * delay_h, idle_empty * delay_h,
            idle_empty if p.billing == "from_request" else 0.0,
        ]  # fmt: skip
    return out


def decide(view: TenantObservation, weights: Sequence[float], *, clears: bool = False,
           asked: dict[str, int] | None = None) -> ProvisionAction:  # fmt: skip
    """The provisioning `weights` ask for on this view (shared pools are never changed); with
    `clears` (a call market, trading on) and a row's `MARKET` parameters, its orders too.
    `asked`, kept by the caller from round to round, holds the GPUs per pool it asked to sell
    last round (read, then replaced by this round's)."""
    change: dict[str, int] = {}
    provision = weights[: len(FEATURES)]
    for pool, row in features(view).items():
        p = _pool(view.pools, pool)
        if p.shared:
            continue
        want = round(sum(w * f for w, f in zip(provision, row, strict=True)))
        n = max(min(want, p.free_capacity), -(p.idle_gpus + p.pending))
        if n:
            change[pool] = n
    if not clears or len(weights) <= len(FEATURES):
        return ProvisionAction(provision=change)
    memory = {} if asked is None else asked
    action = _to_market(view, change, weights[len(FEATURES) :], dict(memory))
    memory.clear()
    memory.update({name: order.gpus for name, order in action.asks.items()})
    return action


def _to_market(view: TenantObservation, change: dict[str, int], market: Sequence[float],
               asked_before: dict[str, int]) -> ProvisionAction:  # fmt: skip
    """`change` with a share of the idle GPUs it releases asked on the call market instead
    (those asked last round and still spare are released), and a bid for the GPUs the queue
    lacks."""
    ask_share, ask_delays, bid_share, min_wait_h = trading(market)
    asks: dict[str, Order] = {}
    for name, n in list(change.items()):
        pool = _pool(view.pools, name)
        unsold = min(-n, asked_before.get(name, 0)) if n < 0 else 0
        k = min(round(ask_share * (-n - unsold)), pool.idle_gpus) if n < 0 else 0
        k = k if saved_wait_h(pool) >= min_wait_h else 0
        if k > 0:
            asks[name] = Order(gpus=k, usd_per_gpu=round(ask_delays * ask_usd_per_gpu(pool), 2))
            change[name] = n + k
            if not change[name]:
                del change[name]
    buys: dict[str, Order] = {}
    need, best = unmet_gpus(view), usable_pools(view)
    if need > 0 and best and bid_share > 0 and saved_wait_h(best[0]) >= min_wait_h:
        pool = best[0]
        worth = worth_usd_per_gpu(view, pool) + sla_saved_usd_per_gpu(view, pool)
        if worth > 0:
            buys[pool.name] = Order(gpus=need, usd_per_gpu=round(bid_share * worth, 2))
    return ProvisionAction(provision=change, asks=asks, buys=buys)


def trading(market: Sequence[float]) -> tuple[float, float, float, float]:
    """A row's trading parameters (`MARKET`, each at least 0) from the numbers after its
    weights; a row of the first three trades in every pool (`min_wait_h` 0)."""
    ask_share, ask_delays, bid_share, min_wait_h = (max(x, 0.0) for x in (*market, 0.0)[:4])
    return ask_share, ask_delays, bid_share, min_wait_h


def _pool(pools: Sequence[PoolView], name: str) -> PoolView:
    return next(p for p in pools if p.name == name)


@dataclass(frozen=True)
class PolicyFile:
    """A trained linear policy: weights per tenant (and `default` for any other tenant), the
    scenario it was trained on, and how it was trained (free-form: method, seeds, figures)."""

    scenario: str
    weights: Mapping[str, tuple[float, ...]]
    default: tuple[float, ...] = AUTOSCALE_WEIGHTS
    trained: Mapping[str, Any] | None = None

    def for_tenant(self, tenant: str) -> tuple[float, ...]:
        return self.weights.get(tenant, self.default)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "features": list(FEATURES),
            "market": list(MARKET),
            "scenario": self.scenario,
            "weights": {t: list(w) for t, w in sorted(self.weights.items())},
            "default": list(self.default),
            "trained": dict(self.trained or {}),
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def from_json(cls, data: Any, where: str = "policy") -> PolicyFile:
        """A policy from its JSON form; ValueError names what is wrong and where."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"{where}: not a {FORMAT} file (no matching 'format')")
        if data.get("version") != VERSION:
            raise ValueError(f"{where}: version {data.get('version')!r}; this twin reads {VERSION}")
        if data.get("features") != list(FEATURES):
            raise ValueError(f"{where}: its features {data.get('features')!r} are not this "
                             f"twin's {list(FEATURES)}")  # fmt: skip
        weights = data.get("weights")
        if not isinstance(weights, dict):
            raise ValueError(f"{where}: 'weights' must map tenant names to rows of weights")
        rows = {str(t): _row(w, f"{where}: weights of {t!r}") for t, w in weights.items()}
        return cls(
            scenario=str(data.get("scenario", "")),
            weights=rows,
            default=_row(data.get("default", list(AUTOSCALE_WEIGHTS)), f"{where}: default"),
            trained=data.get("trained") if isinstance(data.get("trained"), dict) else None,
        )

    @classmethod
    def load(cls, path: str | Path) -> PolicyFile:
        """Read a policy file; ValueError names the file and what is wrong with it."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"policy file {str(path)!r}: cannot read it "
                             f"({exc.__class__.__name__})") from None  # fmt: skip
        return cls.from_json(data, f"policy file {str(path)!r}")


def _row(value: Any, where: str) -> tuple[float, ...]:
    numbers = isinstance(value, list) and all(
        isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in value
    )
    lengths = (len(FEATURES), len(FEATURES) + len(MARKET) - 1, len(FEATURES) + len(MARKET))
    if not numbers or len(value) not in lengths:
        raise ValueError(f"{where}: must be {len(FEATURES)} finite numbers (or "
                         f"{len(FEATURES) + len(MARKET)}, the trading parameters after them, "
                         "or all but the last of them)")  # fmt: skip
    return tuple(float(x) for x in value)


class LearnedAgent:
    """A tenant played by a trained linear policy. Where its row carries `MARKET` parameters and
    trading is on, it trades: on a call market by orders; under a mechanism of bilateral offers,
    its asks become offers of the same GPUs at the same price to the other tenants, and its bid
    becomes its acceptance rule (it accepts GPUs its queue lacks for at most what it would bid
    for them). A row without them never trades."""

    def __init__(self, weights: Sequence[float], name: str = "learned",
                 tenants: Sequence[str] = (), me: str = "") -> None:  # fmt: skip
        self.weights = tuple(weights)
        self.name = name
        self.others = [t for t in tenants if t != me]
        self.asked: dict[str, int] = {}  # GPUs per pool asked to sell last round
        self._bought = 0  # GPUs of offers it accepted this round

    @property
    def trades(self) -> bool:
        return len(self.weights) > len(FEATURES)

    async def decide(self, request: DecisionRequested) -> Turn:
        clears = request.traits.clears_held and request.trading
        offers = request.trading and not clears and self.trades and bool(self.others)
        action = decide(request.view, self.weights, clears=clears or offers, asked=self.asked)
        self._bought = 0
        turn = Turn(provision=dict(action.provision), reason="a trained linear policy")
        if clears:
            turn.asks, turn.buys = dict(action.asks), dict(action.buys)
        elif offers:
            turn.offers = _offers(action.asks, self.others)
        return turn

    async def answer(self, offer: OfferView, request: DecisionRequested | None) -> Answer:
        if not self.trades or request is None:
            return Answer(False, "this policy does not trade")
        if offer.take.gpus or not offer.give.gpus:
            return Answer(False, "I buy GPUs for money only")
        view = request.view
        n = sum(offer.give.gpus.values())
        need = unmet_gpus(view) - self._bought
        if need < n:
            return Answer(False, f"my queue lacks {max(need, 0)} GPUs, not {n}")
        usable = {p.name: p for p in usable_pools(view)}
        _, _, bid_share, min_wait_h = trading(self.weights[len(FEATURES) :])
        limit = 0.0
        for name, k in offer.give.gpus.items():
            pool = usable.get(name)
            if pool is None:
                return Answer(False, f"my waiting jobs cannot use {name}")
            if saved_wait_h(pool) < min_wait_h:
                return Answer(False, f"new {name} GPUs are too near to pay for one now")
            limit += k * bid_share * (worth_usd_per_gpu(view, pool)
                                      + sla_saved_usd_per_gpu(view, pool))  # fmt: skip
        if view.budget_usd is not None and view.budget_usd < offer.take.usd:
            return Answer(False, "not enough budget left")
        if offer.take.usd > limit:
            return Answer(False, f"${offer.take.usd:.2f} is above my bid of ${limit:.2f}")
        self._bought += n
        return Answer(True, f"${offer.take.usd:.2f} for {n} GPUs, within my bid of ${limit:.2f}")

    def learn(self, outcome: RoundCommitted) -> None:
        return None


def _offers(asks: Mapping[str, Order], others: Sequence[str]) -> list[OfferToMake]:
    """Asks as bilateral offers: each pool's GPUs in lots, one to each other tenant, at the
    asked price a GPU."""
    out = []
    for name, order in asks.items():
        left = order.gpus
        lot = math.ceil(left / len(others))
        for buyer in others:
            n = min(lot, left)
            if n <= 0:
                break
            left -= n
            out.append(OfferToMake(buyer, Bundle(gpus={name: n}),
                                   Bundle(usd=round(n * order.usd_per_gpu, 2)),
                                   f"{n} {name} GPUs my queue does not need"))  # fmt: skip
    return out


def load_maker(source: str, name: str = "learned") -> Maker:
    """How to seat a trained policy named by `source`: a policy file (`*.json`, as `twin train`
    writes) or an importable callable, `package.module:attribute`, that takes a `Seat` and
    returns a `Policy`. ValueError names what is wrong."""
    if source.endswith(".json"):
        policy = PolicyFile.load(source)
        return lambda seat: LearnedAgent(policy.for_tenant(seat.tenant), name, seat.tenants,
                                         seat.tenant)  # fmt: skip
    module_name, sep, attribute = source.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"policy {source!r} is neither a policy file (*.json) nor "
                         "package.module:attribute")  # fmt: skip
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"policy {source!r}: cannot import {module_name!r} ({exc})") from None
    found = getattr(module, attribute, None)
    if not callable(found):
        raise ValueError(f"policy {source!r}: {module_name} has no callable {attribute!r}")
    make: Callable[[Seat], Policy] = found
    return make


def trades(source: str) -> bool:
    """Whether the policy `source` names trades: a policy file does where a row carries the call
    market's parameters (it places orders there); a callable does when it says so (an attribute
    `trades = True`)."""
    if source.endswith(".json"):
        policy = PolicyFile.load(source)
        rows = [*policy.weights.values(), policy.default]
        return any(len(row) > len(FEATURES) for row in rows)
    module_name, _, attribute = source.partition(":")
    found = getattr(importlib.import_module(module_name), attribute, None)
    return bool(getattr(found, "trades", False))
