"""A tenant's whole action and what it needs to see for it, as Gymnasium spaces: provision, place,
bid, offer, answer and call-market orders (the same moves an agent has over the gateway), every
part discrete so the whole flattens to one `MultiDiscrete` for libraries that take no `Dict`.

Action (a `Dict`):
- `provision`: per pool, GPUs to add or release, shifted by `max_delta`;
- `place`: per queue slot (the head of the queue, in order), 0 to leave the job waiting or 1 + a
  pool's index to start it there now with its own plan, as the kernel scored it;
- `bid`: per pool, a level of `BID_LEVELS_USD`, the sealed bid per GPU for what `provision` asks
  of that pool (it counts under the `auction` mechanism);
- `offer_to`: 0 for no offer, or 1 + the index of the tenant to offer to (itself: no offer);
- `offer_gpus`: per pool, GPUs to give (positive) or take (negative), shifted by `max_delta`;
- `offer_usd`: a signed level of `USD_LEVELS`, dollars to pay (positive) or ask (negative);
- `accept`: per offer slot, 1 to accept the offer shown there (else it is rejected);
- `market`: per pool, a call-market order, shifted by `max_delta`: +n buys n GPUs, -n asks to
  sell n idle ones (it counts where the mechanism clears held GPUs, `call_market`);
- `market_price`: per pool, a level of `BID_LEVELS_USD`, the order's limit per GPU (at most that
  much to buy, at least that much to sell).

Seen beside the tenant's numbers:
- `queue`: per queue slot `[present, gpus, wait_s, then per pool its plan's kernel score where
  the plan is feasible there, else 0]` (a job without a model plan shows no scores: it cannot
  be placed, only scheduled by the queue);
- `offers`: per offer slot, an open offer made to this tenant: `[made, 1 + the maker's index,
  dollars this tenant would get, then per pool the GPUs it would get (negative: give)]`; offers
  beyond the slots lapse unanswered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from gymnasium import spaces

from twin.errors import ActionError
from twin.schema.actions import (
    Bundle,
    Offer,
    Order,
    Placement,
    ProvisionAction,
    TenantObservation,
)

BOUND = 1e12  # finite stand-in for "unbounded" numbers
HEAD_SLOTS = 4
OFFER_SLOTS = 4
BID_LEVELS_USD = (0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0)
USD_LEVELS = (0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0)
QUEUE_FIELDS = 3  # present, gpus, wait_s (then one score per pool)
OFFER_FIELDS = 3  # made, maker, dollars (and GPUs per pool)
PARTS = ("provision", "place", "bid", "offer_to", "offer_gpus", "offer_usd", "accept", "market",
         "market_price")  # fmt: skip


@dataclass(frozen=True)
class Decision:
    """A decoded whole action: the tenant's action, the offer it makes, its answers by id."""

    action: ProvisionAction
    offer: Offer | None
    answers: dict[str, tuple[bool, str]]


@dataclass(frozen=True)
class WholeAction:
    """The spaces and codecs of one scenario's tenants' whole action."""

    tenants: tuple[str, ...]
    pools: tuple[str, ...]
    max_delta: int = 4
    head_slots: int = HEAD_SLOTS
    offer_slots: int = OFFER_SLOTS

    # -- spaces ---------------------------------------------------------------------------

    def parts(self) -> dict[str, list[int]]:
        """Each part's choices, as MultiDiscrete `nvec`s (a Discrete part has one)."""
        p, shifted = len(self.pools), 2 * self.max_delta + 1
        return {
            "provision": [shifted] * p,
            "place": [p + 1] * self.head_slots,
            "bid": [len(BID_LEVELS_USD)] * p,
            "offer_to": [len(self.tenants) + 1],
            "offer_gpus": [shifted] * p,
            "offer_usd": [2 * len(USD_LEVELS) - 1],
            "accept": [2] * self.offer_slots,
            "market": [shifted] * p,
            "market_price": [len(BID_LEVELS_USD)] * p,
        }

    def action_space(self) -> spaces.Dict:
        out: dict[str, spaces.Space[Any]] = {}
        for name, nvec in self.parts().items():
            if name in ("offer_to", "offer_usd"):
                out[name] = spaces.Discrete(nvec[0])
            elif name == "accept":
                out[name] = spaces.MultiBinary(len(nvec))
            else:
                out[name] = spaces.MultiDiscrete(nvec)
        return spaces.Dict(out)

    def flat_action_space(self) -> spaces.MultiDiscrete:
        return spaces.MultiDiscrete([n for nvec in self.parts().values() for n in nvec])

    def unflatten(self, vector: Any) -> dict[str, Any]:
        """A flat action as the `Dict` action."""
        flat = np.asarray(vector, dtype=np.int64).reshape(-1)
        out: dict[str, Any] = {}
        at = 0
        for name, nvec in self.parts().items():
            out[name] = flat[at : at + len(nvec)]
            at += len(nvec)
        out["offer_to"], out["offer_usd"] = int(out["offer_to"][0]), int(out["offer_usd"][0])
        return out

    @property
    def queue_shape(self) -> tuple[int, int]:
        return self.head_slots, QUEUE_FIELDS + len(self.pools)

    @property
    def offers_shape(self) -> tuple[int, int]:
        return self.offer_slots, OFFER_FIELDS + len(self.pools)

    def queue_space(self, bound: float = BOUND) -> spaces.Box:
        return spaces.Box(low=-bound, high=bound, shape=self.queue_shape, dtype=np.float64)

    def offers_space(self, bound: float = BOUND) -> spaces.Box:
        return spaces.Box(low=-bound, high=bound, shape=self.offers_shape, dtype=np.float64)

    def idle(self) -> dict[str, Any]:
        """The action that changes nothing, makes no offer and accepts none."""
        p = len(self.pools)
        hold = np.full(p, self.max_delta, dtype=np.int64)
        return {"provision": hold, "place": np.zeros(self.head_slots, dtype=np.int64),
                "bid": np.zeros(p, dtype=np.int64), "offer_to": 0, "offer_gpus": hold.copy(),
                "offer_usd": len(USD_LEVELS) - 1,
                "accept": np.zeros(self.offer_slots, dtype=np.int8),
                "market": hold.copy(), "market_price": np.zeros(p, dtype=np.int64)}  # fmt: skip

    # -- what the tenant sees -------------------------------------------------------------

    def queue_block(self, view: TenantObservation) -> np.ndarray:
        out = np.zeros(self.queue_shape)
        column = {name: QUEUE_FIELDS + k for k, name in enumerate(self.pools)}
        for row, job in zip(out, view.head, strict=False):
            row[:QUEUE_FIELDS] = (1.0, job.gpus, job.wait_s)
            for v in job.plans:
                if v.feasible and v.pool in column:
                    row[column[v.pool]] = v.score
        return out

    def offers_block(self, offers: Sequence[Offer]) -> np.ndarray:
        """`offers` (made to one tenant, in order) in their slots; the rest stay zero."""
        out = np.zeros(self.offers_shape)
        for row, o in zip(out, offers, strict=False):
            row[0], row[1] = 1.0, 1.0 + self.tenants.index(o.from_tenant)
            for k, pool in enumerate(self.pools):
                row[OFFER_FIELDS + k] = o.give.gpus.get(pool, 0) - o.take.gpus.get(pool, 0)
            row[2] = o.give.usd - o.take.usd
        return out

    # -- decoding -------------------------------------------------------------------------

    def flatten(self, action: Any) -> np.ndarray:
        """The action as one checked integer vector (a `Dict` action or a flat one);
        ActionError names the first part that is missing or outside its space."""
        if isinstance(action, Mapping):
            missing = [name for name in PARTS if name not in action]
            if missing:
                raise ActionError(f"action part {missing[0]!r} is missing; parts: "
                                  f"{', '.join(PARTS)}")  # fmt: skip
            try:
                parts = [np.asarray(action[name]).reshape(-1) for name in PARTS]
                vector = np.concatenate(parts)
            except (TypeError, ValueError) as exc:
                raise ActionError(f"action parts must be integers: {exc}") from None
        else:
            vector = np.asarray(action).reshape(-1)
        nvec, owner = self._layout
        if vector.shape != nvec.shape or not np.issubdtype(vector.dtype, np.integer):
            raise ActionError(f"a flat action is {nvec.size} integers, not {vector.size} "
                              f"{vector.dtype}")  # fmt: skip
        bad = np.flatnonzero((vector < 0) | (vector >= nvec))
        if bad.size:
            k = int(bad[0])
            raise ActionError(f"action part {owner[k]!r} is outside 0..{nvec[k] - 1}: "
                              f"{int(vector[k])}")  # fmt: skip
        return vector.astype(np.int64, copy=False)

    @cached_property
    def _layout(self) -> tuple[np.ndarray, tuple[str, ...]]:
        nvecs = self.parts()
        nvec = np.array([n for v in nvecs.values() for n in v], dtype=np.int64)
        return nvec, tuple(name for name, v in nvecs.items() for _ in v)

    def decide(self, tenant: str, action: Mapping[str, Any], view: TenantObservation | None,
               offers_to_me: Sequence[Offer], offer_id: str) -> Decision:  # fmt: skip
        """`tenant`'s whole action: `view` names its queue's slots (None: place nothing),
        `offers_to_me` the offers in its slots, `offer_id` the id of an offer it makes."""
        d = self.max_delta
        provision = np.asarray(action["provision"], dtype=np.int64).reshape(-1) - d
        bids = np.asarray(action["bid"], dtype=np.int64).reshape(-1)
        placements = []
        if view is not None:
            for job, slot in zip(view.head, np.asarray(action["place"]).reshape(-1), strict=False):
                if slot > 0:
                    placements.append(Placement(job_id=job.job_id, pool=self.pools[int(slot) - 1]))
        orders = np.asarray(action["market"], dtype=np.int64).reshape(-1) - d
        limits = np.asarray(action["market_price"], dtype=np.int64).reshape(-1)
        priced = [(p, int(n), Order(gpus=abs(int(n)), usd_per_gpu=BID_LEVELS_USD[int(k)]))
                  for p, n, k in zip(self.pools, orders, limits, strict=True) if n]  # fmt: skip
        chosen = ProvisionAction(
            provision={p: int(n) for p, n in zip(self.pools, provision, strict=True) if n},
            bids_usd_per_gpu={p: BID_LEVELS_USD[int(b)]
                              for p, b in zip(self.pools, bids, strict=True) if b},
            placements=placements,
            asks={p: order for p, n, order in priced if n < 0},
            buys={p: order for p, n, order in priced if n > 0},
        )  # fmt: skip
        accept = np.asarray(action["accept"]).reshape(-1)
        answers = {
            o.offer_id: (bool(yes), "accepted" if yes else "rejected")
            for o, yes in zip(offers_to_me, accept, strict=False)
        }
        return Decision(chosen, self._offer(tenant, action, offer_id), answers)

    def _offer(self, tenant: str, action: Mapping[str, Any], offer_id: str) -> Offer | None:
        target = int(np.asarray(action["offer_to"]).reshape(-1)[0])
        if target == 0 or target > len(self.tenants) or self.tenants[target - 1] == tenant:
            return None
        gpus = np.asarray(action["offer_gpus"], dtype=np.int64).reshape(-1) - self.max_delta
        level = int(np.asarray(action["offer_usd"]).reshape(-1)[0]) - (len(USD_LEVELS) - 1)
        usd = USD_LEVELS[abs(level)] * (1 if level > 0 else -1)
        give = Bundle(gpus={p: int(n) for p, n in zip(self.pools, gpus, strict=True) if n > 0},
                      usd=max(usd, 0.0))  # fmt: skip
        take = Bundle(gpus={p: int(-n) for p, n in zip(self.pools, gpus, strict=True) if n < 0},
                      usd=max(-usd, 0.0))  # fmt: skip
        if not (give.gpus or take.gpus):  # money for money (or nothing) is no trade
            return None
        return Offer(
            offer_id=offer_id,
            from_tenant=tenant,
            to_tenant=self.tenants[target - 1],
            give=give,
            take=take,
        )
