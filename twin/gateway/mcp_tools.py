"""The tools a tenant plays a negotiation session with over MCP: `observe` (the round, the
tenant's view, open offers and their reasons, its draft, the last round's outcome),
`provision`, `place`, `bid`, `sell` and `buy` (each adds to the round's draft proposal),
`make_offer`, `answer_offer`, `forecast` (when its waiting jobs start, and what GPUs added
would save), and `wait` (end the turn with the draft; return when an offer
needs an answer, the next round asks, or the session ends, with what the committed round gave,
the final settlement included). A refusal is a `ToolError` with the gateway's code; each
tool's input schema is in `TOOLS`: a call is checked against it before the tool runs, so a
tool reads its arguments as the schema says they are. (`mcp_tenant` is the endpoint,
`mcp_server` the SDK's server that calls these.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any

from pydantic import ValidationError

from twin.errors import FrameError, RoundError
from twin.gateway.round_intake import Forward, RoundMessage
from twin.gateway.session import Session
from twin.gateway.tenant_link import TenantLink
from twin.schema.actions import Bundle, Placement
from twin.schema.codes import ErrorCode
from twin.schema.wire import (
    MAX_ADD_GPUS,
    AcceptOffer,
    AskForecast,
    MakeOffer,
    OfferReceived,
    Propose,
    RejectOffer,
)

MAX_WAIT_S = 300.0


class ToolError(Exception):
    """A tool refused: its code and what was wrong."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code


Tool = Callable[[Session, TenantLink, dict[str, Any]], Awaitable[dict[str, Any]]]


def _state(link: TenantLink) -> dict[str, Any]:
    r = link.request
    return {
        "tenant": link.tenant,
        "round": None if r is None or link.turn_over else r.round,
        "t_s": None if r is None else r.t_s,
        "mechanism": None if r is None else r.mechanism,
        "traits": None if r is None else asdict(r.traits),
        "view": None if r is None else r.view.model_dump(mode="json"),
        "offers_to_answer": [o.model_dump(mode="json") for o in link.offers.values()],
        "draft": link.draft,
        "last_round": None if link.committed is None else link.committed.model_dump(mode="json"),
        "ended": None if link.ended is None else link.ended.model_dump(mode="json"),
        "recent_errors": link.errors,
    }


def _round(link: TenantLink, *, answering: bool = False) -> int:
    if link.ended is not None:
        raise ToolError(ErrorCode.SESSION_ENDED.value, f"the session ended ({link.ended.reason})")
    if link.request is None or (link.turn_over and not answering):
        raise ToolError(ErrorCode.OUT_OF_ROUND.value, "no round is waiting for you: call wait")
    return link.request.round


async def _deliver(session: Session, link: TenantLink, message: RoundMessage) -> Forward:
    """Hand a message to the session as the tenant's agent (the session forwards what it
    sends on); what was forwarded."""
    try:
        return session.deliver(link.tenant, message)
    except RoundError as exc:
        raise ToolError(exc.code.value, str(exc)) from None


async def _propose(session: Session, link: TenantLink, *, final: bool, reason: str = "",
                   draft: dict[str, Any] | None = None) -> None:  # fmt: skip
    """Send the draft (or `draft`, which becomes the draft once the session takes it)."""
    try:
        message = Propose(round=_round(link), seq=link.next_seq(), final=final,
                          reason=reason, **(link.draft if draft is None else draft))  # fmt: skip
    except ValidationError as exc:
        raise ToolError(ErrorCode.VALIDATION_ERROR.value, first_error(exc)) from None
    await _deliver(session, link, message)
    if draft is not None:
        link.draft = draft


async def observe(session: Session, link: TenantLink, args: dict[str, Any]) -> dict[str, Any]:
    return _state(link)


async def forecast(session: Session, link: TenantLink, args: dict[str, Any]) -> dict[str, Any]:
    """When the tenant's waiting jobs start, as things are and with `add_gpus` more."""
    try:
        ask = AskForecast.model_validate(args)  # the tool's schema names its fields
        ready = await session.forecasts.answer(link.tenant, ask)
    except ValidationError as exc:
        raise ToolError(ErrorCode.VALIDATION_ERROR.value, first_error(exc)) from None
    except FrameError as exc:
        raise ToolError(exc.code.value, str(exc)) from None
    return ready.model_dump(mode="json")


async def _amend(session: Session, link: TenantLink, part: str, key: str,
                 value: Any) -> dict[str, Any]:  # fmt: skip
    """Set one entry of the round's draft proposal and send the draft (the turn stays open); a
    call the session refuses leaves the draft as it was."""
    draft = {**link.draft, part: {**link.draft[part], key: value}}
    await _propose(session, link, final=False, draft=draft)
    return {"draft": link.draft}


async def provision(session: Session, link: TenantLink, args: dict[str, Any]) -> dict[str, Any]:
    _round(link)
    return await _amend(session, link, "provision", args["pool"], args["gpus"])


async def place(session: Session, link: TenantLink, args: dict[str, Any]) -> dict[str, Any]:
    _round(link)
    try:
        placement = Placement(job_id=args["job_id"], pool=args["pool"])
    except ValidationError as exc:
        raise ToolError(ErrorCode.VALIDATION_ERROR.value, first_error(exc)) from None
    draft = {**link.draft, "placements": [*link.draft["placements"],
                                          placement.model_dump(mode="json")]}  # fmt: skip
    await _propose(session, link, final=False, draft=draft)
    return {"draft": link.draft}


async def bid(session: Session, link: TenantLink, args: dict[str, Any]) -> dict[str, Any]:
    _round(link)
    pool, usd = args["pool"], float(args["usd_per_gpu"])
    return await _amend(session, link, "bids_usd_per_gpu", pool, usd)


async def sell(session: Session, link: TenantLink, args: dict[str, Any]) -> dict[str, Any]:
    return await _order(session, link, "asks", args)


async def buy(session: Session, link: TenantLink, args: dict[str, Any]) -> dict[str, Any]:
    return await _order(session, link, "buys", args)


async def _order(session: Session, link: TenantLink, side: str,
                 args: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    _round(link)
    order = {"gpus": args["gpus"], "usd_per_gpu": float(args["usd_per_gpu"])}
    return await _amend(session, link, side, args["pool"], order)


async def make_offer(session: Session, link: TenantLink, args: dict[str, Any]) -> dict[str, Any]:
    try:
        message = MakeOffer(
            round=_round(link), seq=link.next_seq(), offer_id=f"{link.tenant}-mcp",
            to_tenant=args["to_tenant"],
            give=Bundle(gpus=args.get("give_gpus") or {}, usd=args.get("give_usd") or 0.0),
            take=Bundle(gpus=args.get("take_gpus") or {}, usd=args.get("take_usd") or 0.0),
            reason=str(args.get("reason") or ""),
        )  # fmt: skip
    except ValidationError as exc:
        raise ToolError(ErrorCode.VALIDATION_ERROR.value, first_error(exc)) from None
    forward = await _deliver(session, link, message)
    named = next(out.offer.offer_id for _, out in forward if isinstance(out, OfferReceived))
    return {"offer_id": named}


async def answer_offer(session: Session, link: TenantLink, args: dict[str, Any]) -> dict[str, Any]:
    offer_id, accept = args["offer_id"], args["accept"]
    kind = AcceptOffer if accept else RejectOffer
    try:
        message = kind(round=_round(link, answering=True), seq=link.next_seq(),
                       offer_id=offer_id, reason=str(args.get("reason") or ""))  # fmt: skip
    except ValidationError as exc:
        raise ToolError(ErrorCode.VALIDATION_ERROR.value, first_error(exc)) from None
    await _deliver(session, link, message)
    link.offers.pop(offer_id, None)
    return {"offer_id": offer_id, "accepted": accept}


async def wait(session: Session, link: TenantLink, args: dict[str, Any]) -> dict[str, Any]:
    """End the turn (with the draft) if one is open, then wait for what needs the tenant."""
    timeout_s = float(args.get("timeout_s", 60.0))
    if link.request is not None and not link.turn_over and link.ended is None:
        await _propose(session, link, final=True, reason=str(args.get("reason") or ""))
        link.turn_over = True
    asked = link.request.round if link.request is not None else None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not link.closed:
        waiting = link.request is not None and link.request.round != asked
        if link.ended is not None or link.offers or waiting:
            break
        link.changed.clear()
        try:
            await asyncio.wait_for(link.changed.wait(), deadline - loop.time())
        except TimeoutError:
            break
    return _state(link)


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required,
            "additionalProperties": False}  # fmt: skip


NAME = {"type": "string", "minLength": 1}
USD = {"type": "number", "minimum": 0, "maximum": 1e9}
GPUS = {"type": "object", "additionalProperties": {"type": "integer", "minimum": 1},
        "description": "GPUs per pool"}  # fmt: skip
ORDER = _schema({"pool": NAME, "gpus": {"type": "integer", "minimum": 1, "maximum": 10**6},
                 "usd_per_gpu": USD}, ["pool", "gpus", "usd_per_gpu"])  # fmt: skip
TOOLS: dict[str, tuple[Tool, str, dict[str, Any]]] = {
    "observe": (observe, "The open round: your view (budget, queue with the kernel's plan "
                "verdicts, pools), offers made to you with their reasons, your draft, the last "
                "round's outcome and, at the end, your final settlement.", _schema({}, [])),
    "provision": (provision, "Add (positive) or release (negative) GPUs of a pool this round.",
                  _schema({"pool": NAME, "gpus": {"type": "integer", "minimum": -10**6,
                                                    "maximum": 10**6}},
                          ["pool", "gpus"])),
    "place": (place, "Start a queued job now on a pool, with its own plan as scored.",
              _schema({"job_id": NAME, "pool": NAME},
                      ["job_id", "pool"])),
    "bid": (bid, "A sealed bid in dollars per GPU for a pool (counts where the traits say "
             "the mechanism takes bids).",
            _schema({"pool": NAME, "usd_per_gpu": USD},
                    ["pool", "usd_per_gpu"])),
    "sell": (sell, "Offer idle GPUs of a pool to the call market, at least at usd_per_gpu each "
             "(where the traits say the mechanism clears held GPUs).", ORDER),
    "buy": (buy, "Bid for GPUs of a pool in the call market, at most at usd_per_gpu each.", ORDER),
    "make_offer": (make_offer, "Offer another tenant a trade: what you give and what you take "
                   "(GPUs per pool and/or dollars); its id comes back.",
                   _schema({"to_tenant": NAME, "give_gpus": GPUS, "give_usd": USD,
                            "take_gpus": GPUS, "take_usd": USD,
                            "reason": {"type": "string"}}, ["to_tenant"])),
    "answer_offer": (answer_offer, "Accept or reject an offer made to you, with a reason.",
                     _schema({"offer_id": NAME, "accept": {"type": "boolean"},
                              "reason": {"type": "string"}}, ["offer_id", "accept"])),
    "forecast": (forecast, "When your waiting jobs will start (median and 80% interval, session "
                 "seconds), as things are and with add_gpus more GPUs per pool, and what those "
                 "GPUs save in job-hours of waiting and SLA dollars. Changes nothing; any time.",
                 _schema({"add_gpus": {"type": "object", "additionalProperties": {
                              "type": "integer", "minimum": 1, "maximum": MAX_ADD_GPUS},
                              "description": "GPUs to add per pool"},
                          "horizon_s": {"type": "number", "minimum": 600, "maximum": 86400}},
                         [])),
    "wait": (wait, "End your turn with your draft, then wait until an offer needs your answer, "
             "the next round asks you, or the session ends (at most timeout_s).",
             _schema({"reason": {"type": "string"},
                      "timeout_s": {"type": "number", "minimum": 0, "maximum": MAX_WAIT_S}}, [])),
}  # fmt: skip


def first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    return f"{'.'.join(map(str, first['loc'])) or 'input'}: {first['msg']}"
