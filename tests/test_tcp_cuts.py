"""No act is lost when connections are cut: the project's agent client plays a `market` session
for three tenants through a TCP proxy that cuts their connections at seeded moments
mid-session (in the middle of rounds, of offers and of answers). They reconnect, say which
commit they heard last, and the session ends with the very log an uninterrupted run with the
same seed writes. (The agents trade every round and decide by rules that do not depend on the
order in which messages reach them, so two uninterrupted runs write the same log too.)"""

from __future__ import annotations

import asyncio
import contextlib
import random
from pathlib import Path

import aiohttp

from twin.bench.server import free_port, start_serve
from twin.schema.actions import Bundle
from twin.schema.wire import DecisionRequested, OfferView, RoundCommitted
from twin_agents.client import AgentClient, AgentStats
from twin_agents.policy import Answer, OfferToMake, Turn

ADMIN = "operator-token-for-tcp-cuts"
TENANTS = ("research", "inference", "batch")
TOKENS = {t: f"tenant-token-for-{t}-0123456789" for t in TENANTS}
REQUEST = {"scenario": "market", "seed": 5, "agents": list(TENANTS), "tokens": TOKENS,
           "round_timeout_ms": 60_000, "start_timeout_s": 60}  # fmt: skip


class Trader:
    """Every round: moves GPUs by a rule of the round, offers the next tenant one H100 for $2,
    and accepts an offer when its id has an even length; it thinks a moment before each act,
    so cuts land mid-round."""

    name = "trader"

    def __init__(self, tenant: str) -> None:
        self.tenant = tenant
        self.next = TENANTS[(TENANTS.index(tenant) + 1) % len(TENANTS)]

    async def decide(self, request: DecisionRequested) -> Turn:
        await asyncio.sleep(0.02)
        rnd = request.round
        gpus = (rnd + len(self.tenant)) % 3 - (1 if rnd % 4 == 0 else 0)
        offer = OfferToMake(self.next, Bundle(gpus={"h100": 1}), Bundle(usd=2.0), "spare")
        return Turn(provision={"h100": gpus}, offers=[offer], reason=f"round {rnd}")

    async def answer(self, offer: OfferView, request: DecisionRequested | None) -> Answer:
        await asyncio.sleep(0.01)
        return Answer(len(offer.offer_id) % 2 == 0, "even" if len(offer.offer_id) % 2 == 0
                      else "odd")  # fmt: skip

    def learn(self, outcome: RoundCommitted) -> None:
        return None


class Cutter:
    """A TCP proxy to `port` that cuts each of its first `cuts` connections after a seeded
    0.05-0.4 s, then lets connections be."""

    def __init__(self, port: int, cuts: int, seed: int) -> None:
        self.port, self.left, self.rng = port, cuts, random.Random(seed)
        self.done = 0
        self.writers: list[asyncio.StreamWriter] = []
        self.handlers: set[asyncio.Task[None]] = set()

    async def aclose(self) -> None:
        for task in self.handlers:
            task.cancel()
        await asyncio.gather(*self.handlers, return_exceptions=True)
        for writer in self.writers:
            writer.transport.abort()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.handlers.add(asyncio.current_task())  # type: ignore[arg-type]
        self.writers.append(writer)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writers.append(up_writer)
        pipes = [asyncio.ensure_future(self._pipe(reader, up_writer)),
                 asyncio.ensure_future(self._pipe(up_reader, writer))]  # fmt: skip
        if self.left > 0:
            self.left -= 1
            await asyncio.wait(pipes, timeout=self.rng.uniform(0.05, 0.4))
            self.done += not all(p.done() for p in pipes)
        else:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        for pipe in pipes:
            pipe.cancel()
        for w in (writer, up_writer):
            w.transport.abort()  # a cut: no close handshake, in-flight bytes lost

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()


async def play(url: str, proxy: Cutter | None = None) -> tuple[str, dict[str, AgentStats]]:
    async with aiohttp.ClientSession() as http:
        resp = await http.post(f"{url}/v1/sessions", json=REQUEST,
                               headers={"Authorization": f"Bearer {ADMIN}"})  # fmt: skip
        assert resp.status == 201, await resp.text()
        session_id: str = (await resp.json())["session_id"]
    agent_url = url.replace("http", "ws") + "/v1/agents"
    server = None
    if proxy is not None:
        server = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
        agent_url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/agents"
    clients = {
        t: AgentClient(agent_url, session_id, t, TOKENS[t], Trader(t))
        for t in TENANTS
    }  # fmt: skip
    stats = await asyncio.wait_for(asyncio.gather(*(c.run() for c in clients.values())), 120)
    if server is not None and proxy is not None:
        server.close()
        await proxy.aclose()
        await server.wait_closed()
    return session_id, dict(zip(TENANTS, stats, strict=True))


def test_cut_connections_lose_no_act_and_the_log_is_an_uninterrupted_run_s(
    tmp_path: Path,
) -> None:
    port, calm_port = free_port(), free_port()
    cut_dir, calm_dir = tmp_path / "cut", tmp_path / "calm"
    servers = [
        start_serve(port, ADMIN, tmp_path / "cut.log", "--log-dir", str(cut_dir)),
        start_serve(calm_port, ADMIN, tmp_path / "calm.log", "--log-dir", str(calm_dir)),
    ]
    proxies = [Cutter(port, cuts=12, seed=seed) for seed in (3, 11)]  # 11: the end is cut off
    try:
        cut_runs = [asyncio.run(play(f"http://127.0.0.1:{port}", proxy)) for proxy in proxies]
        calm_id, calm_stats = asyncio.run(play(f"http://127.0.0.1:{calm_port}"))
    finally:
        for proc in servers:
            proc.terminate()
            proc.wait(timeout=15)
    for log in (tmp_path / "cut.log", tmp_path / "calm.log"):
        assert "Traceback" not in log.read_text()
    calm = (calm_dir / f"{calm_id}.jsonl").read_bytes().replace(calm_id.encode(), b"S")
    assert b'"kind":"trade_settled"' in calm
    assert b'"kind":"offer_answered"' in calm
    heard = {t: (s.rounds, round(s.reward, 6), s.end_reason) for t, s in calm_stats.items()}
    for proxy, (cut_id, cut_stats) in zip(proxies, cut_runs, strict=True):
        assert proxy.done >= 6, "the proxy cut too few connections mid-session to test anything"
        assert sum(s.reconnects for s in cut_stats.values()) >= 6
        cut = (cut_dir / f"{cut_id}.jsonl").read_bytes().replace(cut_id.encode(), b"S")
        assert cut == calm
        assert {t: (s.rounds, round(s.reward, 6), s.end_reason)
                for t, s in cut_stats.items()} == heard  # fmt: skip
