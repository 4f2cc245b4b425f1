"""The shape of a language model's whole turn: a JSON Schema built from the decision request,
and the validated answer turned into the agent's `Turn`.

Every choice is an enum of what the request allows (pools, queued jobs, the other tenants, the
offers made to this tenant, bounded integers), so a grammar-constrained server can only produce
answers that validate, and a 135M-parameter model has little to get wrong.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from twin.schema.actions import Bundle, Order, Placement
from twin.schema.wire import DecisionRequested
from twin_agents.policy import Answer, OfferToMake, Turn

BOUND = 8  # GPUs a pool may move by, or change hands, in one answer
PLACE_MAX = 4  # placements in one answer
BID_LEVELS_USD = (0, 1, 2, 3, 4, 6, 8, 12, 16)  # sealed bids per GPU, under the auction
USD_LEVELS = (0, 1, 2, 5, 10, 20, 50)  # dollars offered or asked in one offer
NOBODY = "nobody"
VERDICTS = ("accept", "reject")
SAID_CHARS = 120  # a reason the model writes: shorter than the wire allows, to keep it terse

STRICT = ConfigDict(extra="forbid")


def _enum(values: tuple[Any, ...]) -> Any:
    return Literal[values]


def _per_pool(name: str, pools: tuple[str, ...], values: tuple[int, ...]) -> type[BaseModel]:
    fields: dict[str, Any] = dict.fromkeys(pools, (_enum(values), ...))
    return create_model(name, __config__=STRICT, **fields)


def answer_model(request: DecisionRequested, tenants: tuple[str, ...]) -> type[BaseModel]:
    """The model (and so the JSON Schema) of a whole-turn answer to `request`."""
    view = request.view
    pools = tuple(p.name for p in view.pools)
    others = tuple(t for t in tenants if t != view.tenant)
    fields: dict[str, Any] = {
        "provision": (_per_pool("Provision", pools, tuple(range(-BOUND, BOUND + 1))), ...)
    }
    placeable = tuple(j.job_id for j in view.head if any(v.feasible for v in j.plans))
    if placeable:
        place = create_model("Place", __config__=STRICT, job=(_enum(placeable), ...),
                             pool=(_enum(pools), ...))  # fmt: skip
        fields["place"] = (list[place], Field(max_length=PLACE_MAX))
    if request.traits.takes_bids:
        fields["bids"] = (_per_pool("Bids", pools, BID_LEVELS_USD), ...)
    if request.traits.clears_held and request.trading:  # a call market: held GPUs to trade
        for side in ("sell", "buy"):
            fields[side] = (_per_pool(side.title(), pools, tuple(range(BOUND + 1))), ...)
            fields[f"{side}_usd"] = (_per_pool(f"{side.title()}Usd", pools, BID_LEVELS_USD), ...)
    if others and request.trading:
        gpus = _per_pool("Gpus", pools, tuple(range(BOUND + 1)))
        offer = create_model(
            "Offer", __config__=STRICT, to=(_enum((NOBODY, *others)), ...),
            give_gpus=(gpus, ...), give_usd=(_enum(USD_LEVELS), ...),
            take_gpus=(gpus, ...), take_usd=(_enum(USD_LEVELS), ...),
        )  # fmt: skip
        fields["offer"] = (offer, ...)
    offered = tuple(o.offer_id for o in request.offers)
    if offered:
        verdicts: dict[str, Any] = dict.fromkeys(offered, (_enum(VERDICTS), ...))
        fields["answers"] = (create_model("Answers", __config__=STRICT, **verdicts), ...)
    fields["reason"] = (str, Field(max_length=SAID_CHARS))
    return create_model("Turn", __config__=STRICT, **fields)


@cache
def offer_answer_model() -> type[BaseModel]:
    """The model of an answer to one offer (the same for every offer)."""
    return create_model("OfferAnswer", __config__=STRICT, answer=(_enum(VERDICTS), ...),
                        reason=(str, Field(max_length=SAID_CHARS)))  # fmt: skip


def shape(model: type[BaseModel]) -> str:
    """`model`'s answer format for a prompt: keys and the allowed values, no values to copy."""
    schema = model.model_json_schema()
    return _shape(schema, schema.get("$defs", {}))


def _shape(schema: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in schema:
        return _shape(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    if "const" in schema:
        return f'"{schema["const"]}"'
    if "enum" in schema:
        values = schema["enum"]
        if all(isinstance(v, int) for v in values) and values == list(
            range(values[0], values[-1] + 1)
        ):
            return f"{values[0]}..{values[-1]}"
        return "|".join(str(v) for v in values)
    kind = schema.get("type")
    if kind == "object":
        inner = ", ".join(f'"{k}": {_shape(v, defs)}' for k, v in schema["properties"].items())
        return "{" + inner + "}"
    if kind == "array":
        return f"[{_shape(schema['items'], defs)}, ...]"
    return "<why, in a few words>"


def to_turn(answer: BaseModel) -> tuple[Turn, dict[str, Answer]]:
    """The agent's turn from a validated answer, and its answers to offers, by offer id."""
    raw = answer.model_dump()
    reason = raw["reason"].strip()
    turn = Turn(provision={p: n for p, n in raw["provision"].items() if n}, reason=reason)
    seen: set[str] = set()
    for pl in raw.get("place", []):
        if pl["job"] not in seen:
            seen.add(pl["job"])
            turn.placements.append(Placement(job_id=pl["job"], pool=pl["pool"]))
    turn.bids_usd_per_gpu = {p: float(v) for p, v in raw.get("bids", {}).items() if v}
    turn.asks, turn.buys = _orders(raw, "sell"), _orders(raw, "buy")
    offer = raw.get("offer")
    if offer and offer["to"] != NOBODY:
        give = Bundle(gpus={p: n for p, n in offer["give_gpus"].items() if n},
                      usd=offer["give_usd"])  # fmt: skip
        take = Bundle(gpus={p: n for p, n in offer["take_gpus"].items() if n},
                      usd=offer["take_usd"])  # fmt: skip
        # Money for money (or nothing for nothing) is no trade, and a swap of like for like none.
        if (give.gpus or take.gpus) and give != take:
            turn.offers.append(OfferToMake(offer["to"], give, take, reason))
    answers = {
        oid: Answer(verdict == "accept", reason) for oid, verdict in raw.get("answers", {}).items()
    }
    return turn, answers


def _orders(raw: dict[str, Any], side: str) -> dict[str, Order]:
    """A call market's orders on one side, per pool, from a validated answer."""
    gpus, usd = raw.get(side, {}), raw.get(f"{side}_usd", {})
    return {p: Order(gpus=n, usd_per_gpu=float(usd.get(p, 0))) for p, n in gpus.items() if n}
