"""The agent's websocket client: handshake, one policy call per round, reconnect and resume."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from twin.schema.actions import Bundle
from twin.schema.wire import (
    GATEWAY_MESSAGE,
    RESTARTING,
    SCHEMA_VERSION,
    AcceptOffer,
    Acknowledged,
    DecisionRequested,
    EndTurn,
    Error,
    Hello,
    MakeOffer,
    OfferReceived,
    OfferView,
    Propose,
    RejectOffer,
    RoundCommitted,
    SessionEnded,
    Welcomed,
)
from twin_agents.pacing import Pacer, Unpaced
from twin_agents.policy import Policy


class HandshakeError(Exception):
    """The gateway refused the hello (bad token, unknown session, ...): retrying will not help."""


@dataclass
class AgentStats:
    """What one agent did over its session."""

    rounds: int = 0
    proposals: int = 0
    offers_made: int = 0
    offers_taken: int = 0  # of those made, accepted by the other side
    offers_refused: int = 0  # of those made, rejected (or left unanswered)
    offers_answered: int = 0
    offers_accepted: int = 0  # of those answered, accepted
    trades_applied: int = 0  # trades this tenant was party to that were carried out
    trades_failed: int = 0
    gpus_in: int = 0  # GPUs received, and given, in applied trades
    gpus_out: int = 0
    usd_in: float = 0.0  # budget received, and given, in applied trades
    usd_out: float = 0.0
    market_fills: int = 0  # pools it bought or sold held GPUs in, round by round (call market)
    market_gpus_in: int = 0  # GPUs bought, and sold, in the call market
    market_gpus_out: int = 0
    market_usd_in: float = 0.0  # paid for what it sold, and paid for what it bought, there
    market_usd_out: float = 0.0
    errors: list[str] = field(default_factory=list)
    reconnects: int = 0
    reward: float = 0.0  # every reward the gateway told: its rounds' and the final settlement
    final_reward: float = 0.0  # of that, what accrued after the last round
    difference_reward: float = 0.0
    defaulted_rounds: int = 0
    end_reason: str | None = None
    answer_ms: list[float] = field(default_factory=list)  # each turn's and offer answer's time


class AgentClient:
    """Acts for one tenant in one session until the session ends.

    `url` is the gateway's agent endpoint, e.g. ws://127.0.0.1:8000/v1/agents. A dropped
    connection is retried with exponential backoff (jittered, up to `max_backoff_s`) for up to
    `reconnect_budget_s` since it last had a working connection, and the gateway resends the open
    round and the offers still waiting for an answer on resume. A round asked again is answered
    with the very frames sent the first time (the gateway ignores those it already took), and an
    offer asked again with the same answer, so a cut connection changes nothing the log records.
    `think_s` is waited before each turn (a deliberating agent; the log does not change).
    """

    def __init__(
        self,
        url: str,
        session_id: str,
        tenant: str,
        token: str,
        policy: Policy,
        *,
        reconnect_budget_s: float = 180.0,
        max_backoff_s: float = 5.0,
        think_s: float = 0.0,
    ) -> None:
        self.url = url
        self.hello = Hello(
            schema_version=SCHEMA_VERSION, session_id=session_id, tenant=tenant, token=token
        )
        self.policy = policy
        self.reconnect_budget_s = reconnect_budget_s
        self.max_backoff_s = max_backoff_s
        self.think_s = think_s  # waited before each turn, as a deliberating agent would
        self.stats = AgentStats()
        self.welcome: Welcomed | None = None
        self._seq = itertools.count(1)
        self._request: DecisionRequested | None = None
        self._terms: dict[str, tuple[Bundle, Bundle]] = {}  # offer id -> (received, handed)
        self._offer_seqs: dict[int, str] = {}  # seq of an offer sent -> the id it was sent with
        self._answered: dict[str, str] = {}  # offers answered in the open round: their frames
        self._played: tuple[int, list[str]] = (-1, [])  # the last round played: its frames
        self._alive_s = 0.0  # when a connection last worked (loop time)
        self._heard = -1  # the last round whose commit it heard
        self._welcomed = False  # on this connection
        self._attempt = 0  # reconnects since then
        self._pacer: Pacer | Unpaced = Unpaced()  # the connection's frame budget

    async def run(self) -> AgentStats:
        """Play the session to its end; the agent's statistics."""
        loop = asyncio.get_running_loop()
        self._alive_s = loop.time()
        async with aiohttp.ClientSession() as http:
            while self.stats.end_reason is None:
                try:
                    await self._connect_and_play(http)
                except HandshakeError as exc:
                    if self.welcome is None:
                        raise
                    self.stats.end_reason = f"could not resume ({exc})"  # gone while away
                    break
                except (aiohttp.ClientError, ConnectionError, TimeoutError) as exc:
                    self.stats.errors.append(f"connection: {exc}")
                if self.stats.end_reason is not None:
                    break
                if loop.time() - self._alive_s > self.reconnect_budget_s:
                    self.stats.end_reason = "gave up reconnecting"
                    break
                self._attempt += 1
                self.stats.reconnects += 1
                await asyncio.sleep(
                    min(self.max_backoff_s, 0.05 * 2**self._attempt) * (0.5 + random.random())
                )
        return self.stats

    async def _connect_and_play(self, http: aiohttp.ClientSession) -> None:
        async with http.ws_connect(self.url, heartbeat=30.0, max_msg_size=0) as ws:
            self._welcomed = False
            hello = self.hello
            if self._heard >= 0:  # a resume: what it heard, so missed commits come again
                hello = hello.model_copy(update={"heard_round": self._heard})
            await ws.send_str(hello.model_dump_json())
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    break
                message = GATEWAY_MESSAGE.validate_python(orjson.loads(msg.data))
                await self._handle(ws, message)
                if self.stats.end_reason is not None:
                    return

    async def _handle(self, ws: aiohttp.ClientWebSocketResponse, message: Any) -> None:
        if isinstance(message, Welcomed):
            self.welcome, self._welcomed = message, True
            rate, burst = message.frames_per_s, message.frame_burst
            self._pacer = Pacer(rate, burst or 1) if rate else Unpaced()
            self._alive_s, self._attempt = asyncio.get_running_loop().time(), 0
        elif isinstance(message, DecisionRequested):
            self._request = message
            await self._play(ws, message)
            for offer in message.offers:  # made before this request reached us (a resume)
                await self._answer(ws, message.round, offer)
        elif isinstance(message, OfferReceived):
            await self._answer(ws, message.round, message.offer)
        elif isinstance(message, Acknowledged) and message.offer_id is not None:
            sent = self._offer_seqs.pop(message.seq, None)  # the session renamed our offer
            if sent is not None and sent in self._terms:
                self._terms[message.offer_id] = self._terms.pop(sent)
        elif isinstance(message, RoundCommitted):
            if message.round <= self._heard:
                return  # heard before the connection dropped
            self._heard = message.round
            self.stats.rounds += 1
            self.stats.reward += message.reward
            self.stats.difference_reward += message.difference_reward
            self.stats.defaulted_rounds += message.defaulted
            self._settle(message)
            self.policy.learn(message)
        elif isinstance(message, SessionEnded):
            if message.reason == RESTARTING:  # not an end: back once the server is
                self.stats.errors.append("the server is restarting: reconnecting")
                return
            self.stats.end_reason = message.reason
            self.stats.final_reward = message.reward
            self.stats.reward += message.reward
        elif isinstance(message, Error):
            self.stats.errors.append(f"{message.code}: {message.detail}")
            if not self._welcomed:  # the hello was refused
                raise HandshakeError(f"{message.code}: {message.detail}")

    async def _answer(
        self, ws: aiohttp.ClientWebSocketResponse, round_: int, offer: OfferView
    ) -> None:
        """Answer an offer made to this tenant; asked again, give the same answer."""
        said = self._answered.get(offer.offer_id)
        if said is not None:
            await self._send(ws, said)
            return
        started = time.perf_counter()
        answer = await self.policy.answer(offer, self._request)
        self.stats.answer_ms.append((time.perf_counter() - started) * 1000)
        frame = AcceptOffer if answer.accept else RejectOffer
        # What this tenant would receive (the offer's give) and hand over (its take).
        self._terms[offer.offer_id] = (offer.give, offer.take)
        self.stats.offers_accepted += answer.accept
        said = frame(round=round_, seq=next(self._seq), offer_id=offer.offer_id,
                     reason=answer.reason).model_dump_json()  # fmt: skip
        self._answered[offer.offer_id] = said
        await self._send(ws, said)
        self.stats.offers_answered += 1

    def _settle(self, message: RoundCommitted) -> None:
        """Count the round's trades this tenant was party to (offers, and call-market fills),
        and what moved each way."""
        self._answered.clear()
        self._offer_seqs.clear()
        for pool, gpus in message.market.items():
            if not gpus:
                continue
            usd = abs(gpus) * message.market_price_usd_per_gpu.get(pool, 0.0)
            self.stats.market_fills += 1
            if gpus > 0:
                self.stats.market_gpus_in += gpus
                self.stats.market_usd_out += usd
            else:
                self.stats.market_gpus_out -= gpus
                self.stats.market_usd_in += usd
        for trade in message.trades:
            if trade.from_tenant == self.hello.tenant:
                self.stats.offers_taken += trade.status in ("applied", "failed")
                self.stats.offers_refused += trade.status in ("rejected", "expired")
            terms = self._terms.pop(trade.offer_id, None)
            if trade.status == "failed":
                self.stats.trades_failed += 1
            if trade.status != "applied" or terms is None:
                continue
            received, handed = terms
            self.stats.trades_applied += 1
            self.stats.gpus_in += sum(received.gpus.values())
            self.stats.gpus_out += sum(handed.gpus.values())
            self.stats.usd_in += received.usd
            self.stats.usd_out += handed.usd

    async def _play(self, ws: aiohttp.ClientWebSocketResponse, request: DecisionRequested) -> None:
        rnd = request.round
        if self._played[0] == rnd:  # asked again after a cut: the same turn, frame for frame
            for said in self._played[1]:
                await self._send(ws, said)
            return
        if self.think_s:
            await asyncio.sleep(self.think_s)
        started = time.perf_counter()
        turn = await self.policy.decide(request)
        self.stats.answer_ms.append((time.perf_counter() - started) * 1000)
        frames: list[str] = []
        self._played = (rnd, frames)
        for i, offer in enumerate(turn.offers):
            made = MakeOffer(
                round=rnd,
                seq=next(self._seq),
                offer_id=f"{self.hello.tenant}-{rnd}-{i}",
                to_tenant=offer.to_tenant,
                give=offer.give,
                take=offer.take,
                reason=offer.reason,
            )
            frames.append(made.model_dump_json())
            self._terms[made.offer_id] = (offer.take, offer.give)  # received, handed over
            self._offer_seqs[made.seq] = made.offer_id
            self.stats.offers_made += 1
        proposal = Propose(
            round=rnd,
            seq=next(self._seq),
            provision=turn.provision,
            bids_usd_per_gpu=turn.bids_usd_per_gpu,
            asks=turn.asks,
            buys=turn.buys,
            placements=turn.placements,
            reason=turn.reason,
        )
        frames.append(proposal.model_dump_json())
        self.stats.proposals += 1
        # Offers made to this tenant can still be answered after its turn ends.
        frames.append(EndTurn(round=rnd, seq=next(self._seq)).model_dump_json())
        for said in frames:
            await self._send(ws, said)

    async def _send(self, ws: aiohttp.ClientWebSocketResponse, frame: str) -> None:
        """One frame, within the connection's budget."""
        await self._pacer.wait()
        await ws.send_str(frame)


def run_sync(client: AgentClient) -> AgentStats:
    """The synchronous facade: run an agent to the end of its session."""
    return asyncio.run(client.run())
