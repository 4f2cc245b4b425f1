"""A session survives SIGKILL: a real `twin serve` with --log-dir is killed mid-session and
restarted; the agents reconnect with their hello, and the session ends with the very log an
uninterrupted run with the same seed and actions writes. So does a session the operator
declared with --session-file (how compose runs): the restarted server recognises it."""

from __future__ import annotations

import asyncio
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from twin.bench.server import free_port, start_serve
from twin.schema.wire import SCHEMA_VERSION

ADMIN = "operator-token-for-recovery"
TOKENS = {"t0": "tenant-token-zero-0123456789", "t1": "tenant-token-one-0123456789"}
SCENARIO: dict[str, Any] = {
    "kind": "cluster",
    "name": "recovery",
    "horizon_s": 3600,
    "pools": [{"name": "h100", "gpu_type": "h100", "max_gpus": 6, "price_usd_per_gpu_h": 4.0,
               "provision_delay_s": {"dist": "lognormal", "median": 60, "sigma": 0.5}}],
    "tenants": [
        {"name": t, "budget_usd": 400, "policy": "static",
         "workloads": [{"arrivals": {"process": "poisson", "rate_per_h": 6},
                        "service_s": {"dist": "exponential", "mean": 600}}]}
        for t in TOKENS
    ],
    "decisions": {"interval_s": 300, "triggers": []},
}  # fmt: skip


async def agent(url: str, session_id: str, tenant: str, committed: list[int]) -> None:
    """Answers every decision request the same way (a function of the round); reconnects
    with its hello whenever the connection drops, until the session ends."""
    async with aiohttp.ClientSession() as http:
        while True:
            try:
                async with http.ws_connect(f"{url}/v1/agents") as ws:
                    await ws.send_json({"type": "hello", "schema_version": SCHEMA_VERSION,
                                        "session_id": session_id, "tenant": tenant,
                                        "token": TOKENS[tenant]})  # fmt: skip
                    if await play(ws, tenant, committed):
                        return
            except (aiohttp.ClientError, ConnectionError):
                pass
            await asyncio.sleep(0.1)


async def play(ws: aiohttp.ClientWebSocketResponse, tenant: str, committed: list[int]) -> bool:
    """True when the session ended; False when the connection dropped."""
    seq = 0
    async for msg in ws:
        if msg.type != aiohttp.WSMsgType.TEXT:
            break
        frame = msg.json()
        if frame["type"] == "session_ended":
            return True
        if frame["type"] == "round_committed":
            committed.append(frame["round"])
        if frame["type"] == "decision_requested":
            rnd, seq = frame["round"], seq + 1
            await asyncio.sleep(0.1)  # think: the session lasts long enough to be killed
            gpus = (rnd + len(tenant)) % 3 - (1 if rnd % 4 == 0 else 0)
            await ws.send_json({"type": "propose", "round": rnd, "seq": seq,
                                "provision": {"h100": gpus}, "final": True})  # fmt: skip
    return False


DECLARED = "main"


async def run_session(url: str, crash: Callable[[], None] | None, declared: bool) -> str:
    if declared:
        session_id = DECLARED
    else:
        async with aiohttp.ClientSession() as http:
            resp = await http.post(f"{url}/v1/sessions", json=REQUEST,
                                   headers={"Authorization": f"Bearer {ADMIN}"})  # fmt: skip
            assert resp.status == 201, await resp.text()
            session_id = (await resp.json())["session_id"]
    committed: list[int] = []
    agents = [asyncio.create_task(agent(url, session_id, t, committed)) for t in TOKENS]
    if crash is not None:
        while len(set(committed)) < 4:
            await asyncio.sleep(0.01)
        await asyncio.to_thread(crash)
    await asyncio.wait_for(asyncio.gather(*agents), timeout=120)
    return session_id


REQUEST = {"scenario": SCENARIO, "seed": 3, "agents": list(TOKENS), "tokens": TOKENS,
           "round_timeout_ms": 30_000, "start_timeout_s": 60}  # fmt: skip


@pytest.mark.parametrize("declared", [False, True], ids=["sessions-api", "session-file"])
def test_a_session_killed_mid_way_is_restored_and_ends_as_if_never_interrupted(
    tmp_path: Path, declared: bool
) -> None:
    port, calm_port = free_port(), free_port()
    crashed_dir, calm_dir = tmp_path / "crashed", tmp_path / "calm"
    outputs = [tmp_path / f"server{i}.log" for i in range(3)]
    flags: list[str] = []
    if declared:
        session_file = tmp_path / "session.json"
        session_file.write_bytes(orjson.dumps({"session_id": DECLARED, **REQUEST}))
        flags = ["--session-file", str(session_file)]
    servers = [start_serve(port, ADMIN, outputs[0], "--log-dir", str(crashed_dir), *flags)]

    def crash() -> None:
        servers[0].send_signal(signal.SIGKILL)
        servers[0].wait(timeout=10)
        servers.append(start_serve(port, ADMIN, outputs[1], "--log-dir", str(crashed_dir), *flags))

    try:
        crashed = asyncio.run(run_session(f"http://127.0.0.1:{port}", crash, declared))
        servers.append(
            start_serve(calm_port, ADMIN, outputs[2], "--log-dir", str(calm_dir), *flags)
        )
        calm = asyncio.run(run_session(f"http://127.0.0.1:{calm_port}", None, declared))
    finally:
        for proc in servers:
            proc.terminate()
            proc.wait(timeout=15)
    assert servers[0].returncode == -signal.SIGKILL
    restart = outputs[1].read_text()
    assert "session_restored" in restart, restart  # from its log, with its rounds so far
    assert "Traceback" not in restart, restart
    # Every round an agent heard committed was in the log before it heard: none is lost.
    assert int(re.search(r"rounds\W+(\d+)", restart)[1]) >= 4, restart
    restored = (crashed_dir / f"{crashed}.jsonl").read_bytes()
    uninterrupted = (calm_dir / f"{calm}.jsonl").read_bytes()
    assert b'"kind":"episode_ended"' in restored
    assert restored.count(b'"kind":"round_committed"') == 11
    assert restored.replace(crashed.encode(), b"S") == uninterrupted.replace(calm.encode(), b"S")
    sidecar = orjson.loads((crashed_dir / f"{crashed}.session.json").read_bytes())
    for output in outputs:  # no token is printed: they are in the 0600 sidecar
        assert sidecar["read_token"] not in output.read_text()
        assert all(token not in output.read_text() for token in TOKENS.values())


def test_sigterm_before_the_end_of_an_exit_when_done_session_stops_cleanly(tmp_path: Path) -> None:
    """What `docker compose stop` sends: the server stops with exit 0 and no traceback, and
    leaves the unfinished session restorable."""
    import time

    logs = tmp_path / "logs"
    server = start_serve(free_port(), ADMIN, tmp_path / "serve.log", "--session", "--agents",
                         "research", "--exit-when-done", "--log-dir", str(logs))  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while b"session_open" not in (tmp_path / "serve.log").read_bytes():
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.05)
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0, (tmp_path / "serve.log").read_text()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    output = (tmp_path / "serve.log").read_text()
    assert "Traceback" not in output
    assert "gateway_stopped" in output
    assert len(list(logs.glob("*.session.json"))) == 1  # restorable


def serve_to_its_end(output: Path, *flags: str) -> str:
    """`twin serve FLAGS` (with --exit-when-done) run until it exits 0 by itself; its output."""
    server = start_serve(free_port(), ADMIN, output, *flags)
    try:
        assert server.wait(timeout=60) == 0, output.read_text()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return output.read_text()


def test_a_restart_after_the_declared_session_ended_runs_nothing_again(tmp_path: Path) -> None:
    """`--session-file --exit-when-done` (how compose runs the gateway): once the declared
    session has ended, a restart says so and exits 0, opening no fresh session and leaving the
    ended session's log where it was."""
    logs = tmp_path / "logs"
    session_file = tmp_path / "session.json"
    session_file.write_bytes(orjson.dumps({"session_id": DECLARED, **REQUEST, "agents": []}))
    flags = ["--session-file", str(session_file), "--exit-when-done", "--log-dir", str(logs)]
    for run in ("first", "again"):
        output = serve_to_its_end(tmp_path / f"{run}.log", *flags)
        assert "Traceback" not in output
    assert "session_open" in (tmp_path / "first.log").read_text()
    again = (tmp_path / "again.log").read_text()
    assert "session_already_ended" in again
    assert "--session-id plays it again" in again  # how to play it again
    assert "session_open" not in again
    assert sorted(p.name for p in logs.glob("*.jsonl")) == [f"{DECLARED}.jsonl"]
    assert b'"kind":"episode_ended"' in (logs / f"{DECLARED}.jsonl").read_bytes()


def test_a_fresh_session_id_plays_the_declared_session_again_beside_the_first(
    tmp_path: Path,
) -> None:
    """`--session-id` (compose's TWIN_SESSION) in place of the file's id: the ended session's
    log stays as it was, and the same file plays again under the new id to its end."""
    logs = tmp_path / "logs"
    session_file = tmp_path / "session.json"
    session_file.write_bytes(orjson.dumps({"session_id": DECLARED, **REQUEST, "agents": []}))
    flags = ["--session-file", str(session_file), "--exit-when-done", "--log-dir", str(logs)]
    played = {}
    for run, extra in (("first", []), ("again", ["--session-id", "again"])):
        assert "session_open" in serve_to_its_end(tmp_path / f"{run}.log", *flags, *extra)
        played[run] = sorted(p.name for p in logs.glob("*.jsonl"))
    assert played == {"first": [f"{DECLARED}.jsonl"],
                      "again": sorted([f"{DECLARED}.jsonl", "again.jsonl"])}  # fmt: skip
    first = (logs / f"{DECLARED}.jsonl").read_bytes().splitlines()
    again = (logs / "again.jsonl").read_bytes().splitlines()
    assert orjson.loads(again[0])["session"] == "again"
    assert orjson.loads(again[-1])["kind"] == orjson.loads(first[-1])["kind"] == "episode_ended"
    assert len(again) == len(first)  # the same session, played again


class Thinking:
    """A built-in policy that takes `think_s` a decision (so a session lasts long enough to be
    stopped mid-way); it decides, answers and learns as the policy does."""

    def __init__(self, policy: Any, think_s: float) -> None:
        self.policy, self.name, self.think_s = policy, policy.name, think_s

    async def decide(self, request: Any) -> Any:
        await asyncio.sleep(self.think_s)
        return await self.policy.decide(request)

    async def answer(self, offer: Any, request: Any) -> Any:
        return await self.policy.answer(offer, request)

    def learn(self, committed: Any) -> None:
        self.policy.learn(committed)


async def project_agents(url: str, stop: Callable[[], None] | None) -> list[Any]:
    """The project's own agents (negotiators) play the declared session; `stop`, if given, is
    called on a thread once four rounds are committed. One agent answers at once and waits for
    the other, which thinks, so a stop finds one listening and one deciding. Each agent's
    statistics."""
    from twin_agents.client import AgentClient
    from twin_agents.registry import builtin

    tenants = list(TOKENS)
    clients = [AgentClient(url.replace("http://", "ws://") + "/v1/agents", DECLARED, t,
                           TOKENS[t], Thinking(builtin("negotiator", tenants, t), 0.2 * i))
               for i, t in enumerate(tenants)]  # fmt: skip
    runs = [asyncio.create_task(c.run()) for c in clients]
    if stop is not None:
        while min(c.stats.rounds for c in clients) < 4:
            await asyncio.sleep(0.01)
        await asyncio.to_thread(stop)
    return await asyncio.wait_for(asyncio.gather(*runs), timeout=120)


def test_the_project_s_agents_ride_through_a_sigterm_restart_to_the_same_outcome(
    tmp_path: Path,
) -> None:
    """SIGTERM mid-session (`docker compose restart`): the server tells the agents it is
    restarting, they reconnect to the restarted server with what they heard and play on with
    their state, and the session ends as an uninterrupted one does, log and returns alike."""
    session_file = tmp_path / "session.json"
    session_file.write_bytes(orjson.dumps({"session_id": DECLARED, **REQUEST}))
    flags = ["--session-file", str(session_file)]
    port, calm_port = free_port(), free_port()
    stopped_dir, calm_dir = tmp_path / "stopped", tmp_path / "calm"
    outputs = [tmp_path / f"server{i}.log" for i in range(3)]
    servers = [start_serve(port, ADMIN, outputs[0], "--log-dir", str(stopped_dir), *flags)]

    def restart() -> None:
        servers[0].send_signal(signal.SIGTERM)
        assert servers[0].wait(timeout=30) == 0
        servers.append(start_serve(port, ADMIN, outputs[1], "--log-dir", str(stopped_dir),
                                   *flags))  # fmt: skip

    try:
        stopped = asyncio.run(project_agents(f"http://127.0.0.1:{port}", restart))
        servers.append(
            start_serve(calm_port, ADMIN, outputs[2], "--log-dir", str(calm_dir), *flags)
        )
        calm = asyncio.run(project_agents(f"http://127.0.0.1:{calm_port}", None))
    finally:
        for proc in servers:
            proc.terminate()
            proc.wait(timeout=15)
    assert "session_restored" in outputs[1].read_text()
    assert all(s.end_reason == "horizon" for s in stopped), [s.end_reason for s in stopped]
    assert all(s.reconnects >= 1 for s in stopped)
    assert [(s.rounds, round(s.reward, 9)) for s in stopped] == [
        (s.rounds, round(s.reward, 9)) for s in calm
    ]
    log = (stopped_dir / f"{DECLARED}.jsonl").read_bytes()
    assert log == (calm_dir / f"{DECLARED}.jsonl").read_bytes()
