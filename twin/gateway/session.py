"""A negotiation session: one SimPy world, its decision rounds, and the agents acting in them.

Each round: the tenants due to decide get a `DecisionRequested`; their agents propose, make
and answer offers, and end their turn. Lock-step: the round commits when every connected agent
that was asked has ended its turn, or at the deadline; virtual time runs as fast as possible in
between. Realtime: virtual time is also paced to the wall clock (`speed` virtual seconds per
second). A tenant whose agent is absent or late gets its default policy, and the log says so.
Round inputs are committed in canonical order (tenant, then sequence number).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog

from twin.gateway import analysis, recovery
from twin.gateway.config import GatewayConfig, SessionRequest
from twin.gateway.forecasts import ForecastDesk, Slots
from twin.gateway.heard import Heard
from twin.gateway.links import Link
from twin.gateway.round_intake import Forward, Intake, RoundMessage
from twin.gateway.rounds import OpenRound, SessionStatus
from twin.gateway.session_log import SessionLog
from twin.gateway.tokens import new_token
from twin.schema.actions import ProvisionAction, TenantObservation
from twin.schema.base import Frozen
from twin.schema.scenario import ClusterScenario
from twin.schema.vocabulary import MECHANISM_TRAITS, EndReason
from twin.schema.wire import (
    RESTARTING,
    DecisionRequested,
    OfferReceived,
    RoundCommitted,
    SessionEnded,
)
from twin.sim.driver import PAUSED, Driver
from twin.sim.meter import Meter
from twin.sim.reproduce import RecordedRound, play_round
from twin.sim.round import AGENT
from twin.sim.told import round_committed

if TYPE_CHECKING:
    from twin.gateway.tenant_link import TenantLink

log = structlog.get_logger()

ADVANCE_CHUNK = 20_000  # SimPy events between yields to the event loop


class Session:
    """A negotiation session and its run loop (an asyncio task)."""

    def __init__(
        self,
        session_id: str,
        scenario: ClusterScenario,
        request: SessionRequest,
        config: GatewayConfig,
        *,
        owner: str = "",
        read_token: str | None = None,
        recorded: Sequence[RecordedRound] | None = None,
        forecast_slots: Slots | None = None,
    ) -> None:
        """A new session, or (with the `recorded` rounds of its log) one restored after a crash.
        A new session whose name a finished one had (a declared session, run again) keeps that
        one's log and exports aside rather than writing over them."""
        self.id = session_id
        self.scenario = scenario
        self.request = request
        self.config = config
        self.owner = owner
        self.read_token = read_token or new_token()
        self.history = SessionLog(session_id, config.log_dir, restored=recorded is not None)
        self.log = self.history.log
        self.report_html: bytes | None = None  # drawn once the session has ended
        self.driver: Driver[TenantObservation, ProvisionAction] = Driver(
            scenario, seed=request.seed, session=session_id, log=self.log
        )
        self.tenants = self.driver.tenants
        self.tokens = {t: request.tokens.get(t) or new_token() for t in self.tenants}
        self.defaults = self.driver.default_policies()
        self.agents: dict[str, Link] = {}
        self.mcp_links: dict[str, TenantLink] = {}  # tenants played over MCP, by tenant
        self.mcp_joins = {t: asyncio.Lock() for t in self.tenants}  # one MCP join at a time
        self.heard = Heard(config.max_missed_commits)  # the commits each agent has heard
        self.expected = set(request.agents)
        # Expected tenants that stayed away through a whole round (defaulted at its deadline):
        # no round waits for them again until their agent is back.
        self.gone: set[str] = set()
        self.intake = Intake(self._awaited)
        self.round: OpenRound | None = None
        self._sends: set[asyncio.Task[bool]] = set()  # forwards under way, owned till done
        self.forecasts = ForecastDesk(self.driver, scenario, request.seed, lambda: self.ended,
                                      forecast_slots)  # fmt: skip
        self.ended: str | None = None
        self.rounds = 0
        self.round_wall_ms: list[float] = []
        self.loop = asyncio.get_running_loop()
        self.last_active = self.loop.time()
        self.ended_at: float | None = None
        self.connected = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self._replay(recorded or ())
        self._persist()

    def _replay(self, recorded: Sequence[RecordedRound]) -> None:
        """Play a restored session's recorded rounds again; the agents' tenants (those an agent
        decided for, or the session awaits) are owed the commits they may not have heard,
        the last `max_missed_commits` of them, as if the gateway had never stopped."""
        agents = set(self.request.agents)
        for rnd in recorded:
            agents.update(d.tenant for d in rnd.decisions if d.policy == AGENT and d.tenant)
        kept = len(recorded) - self.config.max_missed_commits
        for number, rnd in enumerate(recorded):
            self.driver.advance()
            outcomes = play_round(self.driver, rnd)
            commit = rnd.commit
            if number < kept or commit is None:
                continue
            for tenant in agents & outcomes.keys():
                message = round_committed(commit.round, commit.t_s, tenant in commit.defaulted,
                                          outcomes[tenant])  # fmt: skip
                self.heard.restore(tenant, message)
        self.rounds = len(recorded)

    def _persist(self) -> None:
        """Flush the log and keep what a restart needs beside it."""
        self.history.write_through()
        if self.history.path is None or self.config.log_dir is None:
            return
        request = self.request.model_copy(update={"tokens": self.tokens})
        recovery.save(
            self.config.log_dir,
            recovery.Sidecar(
                session_id=self.id,
                request=request.model_dump(mode="json"),
                read_token=self.read_token,
                scenario=self.scenario,
                owner=self.owner,
            ),
        )

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self.task = asyncio.create_task(self.run(), name=f"session-{self.id}")

    async def run(self) -> None:
        """Wait for the expected agents, then play rounds until the episode ends."""
        bound = log.bind(session_id=self.id)
        try:
            await self._wait_for_agents()
            wall_start = self.loop.time()
            meter = Meter(jobs=self.config.max_episode_jobs,
                          records=self.config.max_episode_events)  # fmt: skip
            while True:
                batch = self.driver.advance(limit=ADVANCE_CHUNK)
                if batch is PAUSED:
                    over = meter.over(self.driver.model.admitted(), self.driver.log.records, 0.0)
                    if over is not None:  # metered as it runs, whatever its size was estimated
                        bound.warning("session_work_limit", detail=over)
                        self.driver.stop("work_limit")
                        break
                    await asyncio.sleep(0)
                    continue
                if batch is None:
                    break
                if self.driver.round >= self.config.max_rounds:
                    self.driver.stop("round_limit")
                    break
                if self.request.clock == "realtime":
                    delay = wall_start + batch.t_s / self.request.speed - self.loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                await self._play()
            self.ended = self.driver.ended or "drained"
        except asyncio.CancelledError:
            self.ended = self.ended or "closed"
            raise
        finally:
            self.ended_at = self.loop.time()
            self.history.close()
            bound.info("session_ended", reason=self.ended, rounds=self.rounds)
            if self.history.path is not None:
                path = self.history.path
                await analysis.write_beside(path, self.config.export, self.config.report)
            for tenant, link in list(self.agents.items()):
                await link.send(self._ended_message(tenant))

    def _ended_message(self, tenant: str) -> SessionEnded:
        """The tenant's last message: why the session ended and, if its episode did, what
        accrued after its last round and its whole return."""
        if self.driver.ended is None:  # closed before its end: nothing was settled
            return SessionEnded(reason=self.ended or "closed")
        reward, total = self.driver.settlement(tenant)
        return SessionEnded(reason=self.ended or "closed", reward=reward, total_reward=total)

    async def close(self, end_reason: EndReason | None = None) -> None:
        """Stop the session (its log is flushed) and close its agents' sockets; with
        `end_reason`, its episode ends first (settled, and `episode_ended` in its log), else it
        stays open in its log for a restart to restore."""
        if end_reason is not None and self.driver.ended is None and not self.history.closed:
            self.driver.stop(end_reason)
            self.ended = end_reason
        elif end_reason is None and self.ended is None and self.history.path is not None:
            self.ended = RESTARTING  # its log stays open: a restart restores it
        if self.task is not None and not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        for send in list(self._sends):
            send.cancel()
        for link in list(self.agents.values()):
            await link.close(code=1001, message=b"session closed")

    async def _wait_for_agents(self) -> None:
        expected = set(self.request.agents)
        deadline = self.loop.time() + self.request.start_timeout_s
        while not expected <= set(self.agents) and self.loop.time() < deadline:
            self.connected.clear()
            try:
                await asyncio.wait_for(self.connected.wait(), deadline - self.loop.time())
            except TimeoutError:
                break

    # -- agents -----------------------------------------------------------------------------

    def attach(self, link: Link) -> Link | None:
        """Connect (or reconnect) a tenant's agent; the link it replaces, if any."""
        old = self.agents.get(link.tenant)
        self.agents[link.tenant] = link
        self.gone.discard(link.tenant)
        self.heard.join(link.tenant)
        self.last_active = self.loop.time()
        self.connected.set()
        return old

    def detach(self, link: Link) -> None:
        if self.agents.get(link.tenant) is link:
            del self.agents[link.tenant]
            if self.round is not None:
                self.round.wake.set()

    def epilogue(self, tenant: str, heard_round: int) -> list[Frozen]:
        """What an agent cut off before the end still has to hear: the commits after
        `heard_round` and the session's end, with its settlement."""
        return [*self.heard.after(tenant, heard_round), self._ended_message(tenant)]

    def open_round_for(self, tenant: str) -> int | None:
        r = self.round
        return r.number if r is not None and tenant in r.book.open_turns else None

    async def resend(self, link: Link, heard_round: int | None = None) -> None:
        """A reconnecting agent gets the commits it missed (those after `heard_round` where it
        says what it heard, else those the session failed to send), in order, then the open
        round's request again, or, if it had ended its turn, the offers still waiting for its
        answer."""
        backlog = self.heard.owed(link.tenant, heard_round)
        while backlog:
            if not await link.send(backlog[0]):
                return
            backlog.popleft()
        r = self.round
        if r is None or link.tenant not in r.book.asked:
            return
        if link.tenant in r.book.open_turns:
            await link.send(self._request(r, link.tenant))  # with the offers made to it
            return
        for offer in r.book.offers_to(link.tenant, unanswered=True):
            await link.send(OfferReceived(round=r.number, offer=offer))

    # -- rounds -----------------------------------------------------------------------------

    def _request(self, r: OpenRound, tenant: str) -> DecisionRequested:
        view = self.driver.observe(tenant)
        left_ms = max(int((r.deadline - self.loop.time()) * 1000), 0)
        offers = r.book.offers_to(tenant)
        return DecisionRequested(
            round=r.number,
            t_s=r.book.t_s,
            deadline_ms=left_ms,
            mechanism=self.request.mechanism,
            traits=MECHANISM_TRAITS[self.request.mechanism],
            trading=self.request.trading,
            view=view,
            offers=offers,
        )

    async def _play(self) -> None:
        timeout_s = (self.request.round_timeout_ms or self.config.round_timeout_ms) / 1000
        opened = self.loop.time()
        book = self.driver.book(self.request.mechanism, trading=self.request.trading)
        r = OpenRound(book, opened + timeout_s)
        self.round = r
        asked = r.book.asked
        connected = [t for t in asked if t in self.agents]
        await asyncio.gather(*(self.agents[t].send(self._request(r, t)) for t in connected))
        if any(self._awaited(t) for t in asked):
            while not r.book.settled(self._awaited):
                left = r.deadline - self.loop.time()
                if left <= 0:
                    break
                r.wake.clear()
                try:
                    await asyncio.wait_for(r.wake.wait(), left)
                except TimeoutError:
                    break
        outcomes = self._commit(r, opened)
        # Encode the round's records now (a little each round, never a long pause at once) and
        # write them through before anyone hears of the commit: a crash loses only open rounds.
        self.history.write_through()
        sent = await asyncio.gather(*(link.send(m) for link, m in outcomes))
        for (link, message), ok in zip(outcomes, sent, strict=True):
            if not ok:
                self.heard.missed(link.tenant, message)
        self.round_wall_ms.append((self.loop.time() - opened) * 1000)

    def _commit(self, r: OpenRound, opened: float) -> list[tuple[Link, RoundCommitted]]:
        self.round = None
        book = r.book
        outcomes = self.driver.commit(book, self.defaults)
        defaulted = book.defaulted()
        self.gone |= {t for t in defaulted if t in self.expected and t not in self.agents}
        self.rounds += 1
        log.info(
            "round_committed",
            session_id=self.id,
            round=r.number,
            sim_time_s=book.t_s,
            asked=len(book.asked),
            defaulted=defaulted,
            offers=len(book.offers),
            wall_ms=round((self.loop.time() - opened) * 1000, 3),
        )
        replies = []
        for tenant in self.heard.tenants():
            o = outcomes.get(tenant)
            if o is None:
                continue
            message = round_committed(r.number, book.t_s, tenant in defaulted, o)
            link = self.agents.get(tenant)
            if self.heard.tell(tenant, message, reachable=link is not None) and link is not None:
                replies.append((link, message))
        return replies

    # -- messages within a round ------------------------------------------------------------

    def deliver(self, tenant: str, message: RoundMessage) -> Forward:
        """Take a round message from `tenant` and send what it forwards to the other agents
        connected (each send a task the session owns till it is done); what was forwarded.
        Raises RoundError."""
        self.last_active = self.loop.time()
        forward = self.intake.take(self.round, tenant, message)
        for to, out in forward:
            target = self.agents.get(to)
            if target is not None:
                send = self.loop.create_task(target.send(out))
                self._sends.add(send)
                send.add_done_callback(self._sends.discard)
        return forward

    def _awaited(self, tenant: str) -> bool:
        """Lock-step waits for connected agents, and for expected ones even while away (an
        agent reconnecting within the round decides it), but not, round after round, for one
        that stayed away through a whole round: its tenant plays its default policy at once
        until its agent is back."""
        return tenant in self.agents or (tenant in self.expected and tenant not in self.gone)

    def events(self) -> bytes:
        """The session's event log so far, as JSONL."""
        return self.history.events()

    def status(self) -> SessionStatus:
        return SessionStatus(
            session_id=self.id,
            scenario=self.scenario.name,
            round=self.driver.round,
            t_s=self.driver.now_s,
            ended=self.ended,
            tenants=self.tenants,
            connected=sorted(self.agents),
            mechanism=self.request.mechanism,
            clock=self.request.clock,
        )
