"""Identity before resources: what a few addresses take, others and the operator still get.

Environments are budgeted per identity (the operator's token, else an address) under a ceiling
no group of addresses reaches: the operator keeps reserved capacity, and under pressure the
oldest idle environment of a client holding more than others is closed (its owner told). Worker
time goes round the identities waiting: a heavy client waits behind its own calls.

A real aiohttp server on loopback; the clients connect from their own loopback addresses
(127.0.0.2-6: Linux routes the whole 127/8 to loopback).
"""

from __future__ import annotations

import asyncio
import gc
import json
import select
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.test_gateway import ADMIN, OPERATOR
from twin.bench.server import free_port, start_serve
from twin.gateway.app import create_app
from twin.gateway.config import GatewayConfig
from twin.gateway.connections import Connection, ConnectionGuard
from twin.gateway.worker_time import WorkerTime

ATTACKERS = [f"127.0.0.{i}" for i in range(2, 6)]
ANONYMOUS = {"Authorization": "Bearer not-a-token"}  # the client is its address
HEAVY = {"overrides": ["tenants.2.workloads.0.arrivals.rate_per_h=200000"], "seed": 1}
FLOOD = "tenants.2.workloads.0.arrivals.rate_per_h=5000000"


# -- worker time ------------------------------------------------------------------------------


class Calls:
    """Blocking calls that record when they start and end, and wait to be let go."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.gates: dict[str, threading.Event] = {}

    def make(self, name: str) -> Any:
        gate = self.gates[name] = threading.Event()

        def call() -> str:
            self.order.append(f"{name} starts")
            assert gate.wait(10)
            self.order.append(f"{name} ends")
            return name

        return call


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0.005)


async def test_a_client_s_second_call_waits_behind_its_first_and_not_in_front_of_others() -> None:
    workers, calls = WorkerTime(2, reserved_for="operator"), Calls()
    heavy = [asyncio.create_task(workers.run("a", calls.make(f"a{i}"))) for i in range(3)]
    await settle()
    light = asyncio.create_task(workers.run("b", calls.make("b0")))
    await settle()
    assert calls.order == ["a0 starts", "b0 starts"]  # a's others wait for a0, b does not
    calls.gates["b0"].set()
    assert await light == "b0"
    calls.gates["a0"].set()
    await settle()
    assert calls.order[-1] == "a1 starts"
    for name in ("a1", "a2"):
        calls.gates[name].set()
    assert await asyncio.gather(*heavy) == ["a0", "a1", "a2"]
    workers.close()


async def test_a_free_thread_goes_round_the_clients_waiting() -> None:
    workers, calls = WorkerTime(1, reserved_for="operator"), Calls()
    first = asyncio.create_task(workers.run("a", calls.make("a0")))
    await settle()
    queued = [asyncio.create_task(workers.run(who, calls.make(f"{who}{n}")))
              for n in (1, 2) for who in ("a", "b", "c")]  # fmt: skip
    await settle()
    for name in ["a0", "a1", "b1", "c1", "a2", "b2", "c2"]:
        calls.gates[name].set()
        await settle()
    await asyncio.gather(first, *queued)
    starts = [line.split()[0] for line in calls.order if line.endswith("starts")]
    assert starts == ["a0", "a1", "b1", "c1", "a2", "b2", "c2"]
    workers.close()


async def test_the_operator_has_a_thread_no_one_else_can_take() -> None:
    workers, calls = WorkerTime(1, reserved_for="operator"), Calls()
    busy = [asyncio.create_task(workers.run(who, calls.make(who))) for who in ("a", "b")]
    await settle()
    mine = asyncio.create_task(workers.run("operator", calls.make("operator")))
    await settle()
    assert calls.order == ["a starts", "operator starts"]
    for name in ("operator", "a", "b"):
        calls.gates[name].set()
    assert await mine == "operator"
    await asyncio.gather(*busy)
    workers.close()


@pytest.mark.parametrize("at_once", [False, True], ids=["later", "in-the-same-loop-turn"])
async def test_a_caller_that_gives_up_waiting_frees_its_turn(at_once: bool) -> None:
    """A waiting caller cancelled: the thread goes to the next in line, also when a thread
    comes free before the cancelled task has heard of it (its turn is cancelled at once)."""
    workers, calls = WorkerTime(1, reserved_for="operator"), Calls()
    running = asyncio.create_task(workers.run("a", calls.make("a0")))
    await settle()
    gave_up = asyncio.create_task(workers.run("b", calls.make("b0")))
    then = asyncio.create_task(workers.run("c", calls.make("c0")))
    await settle()
    gave_up.cancel()
    if at_once:
        workers._free("a", "shared")  # as a call ending in that same turn of the loop would
    calls.gates["a0"].set()
    calls.gates["c0"].set()
    assert await then == "c0"
    assert "b0 starts" not in calls.order
    await running
    assert workers.busy() == 0
    workers.close()


# -- environments under a group of addresses --------------------------------------------------


@pytest.fixture
async def gateway(aiohttp_server: Any) -> str:
    # Heavy resets load the worker threads: episodes far past the default per-episode limit,
    # admitted here (each call still stops at max_call_s of simulation).
    server = await aiohttp_server(
        create_app(GatewayConfig(admin_token=ADMIN, max_episode_jobs=10**8, max_client_jobs=10**10))
    )
    return f"http://{server.host}:{server.port}"


def from_address(address: str) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(address, 0)))


async def reset(http: aiohttp.ClientSession, url: str, headers: dict[str, str],
                body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:  # fmt: skip
    async with http.post(f"{url}/reset", json=body or {}, headers=headers) as resp:
        return resp.status, await resp.json()


async def timed_reset_and_step(url: str, address: str, headers: dict[str, str]) -> float:
    """A light reset and one step from `address`, in seconds; both must succeed."""
    async with from_address(address) as http:
        start = time.perf_counter()
        status, body = await reset(http, url, headers)
        assert status == 200, body
        step = {"handle": body["metadata"]["handle"], "action": {}}
        async with http.post(f"{url}/step", json=step, headers=headers) as resp:
            assert resp.status == 200, await resp.text()
        return time.perf_counter() - start


async def test_four_addresses_taking_every_environment_leave_others_and_the_operator_served(
    gateway: str,
) -> None:
    """Four addresses reset until refused: together they hold the shared 56 of the 64 (the
    operator's 8 stay free). A fifth client then gets an environment (the oldest idle of the
    richest address makes room, and its owner is told why), the operator gets its own, and
    the four cannot take the newcomer's back."""
    url, held = gateway, {a: [] for a in ATTACKERS}  # type: dict[str, list[str]]
    sessions = {a: from_address(a) for a in ATTACKERS}
    try:
        for _ in range(16):
            for address in ATTACKERS:
                status, body = await reset(sessions[address], url, ANONYMOUS)
                if status == 200:
                    held[address].append(body["metadata"]["handle"])
                else:
                    assert (status, body["code"]) == (503, "CAPACITY_REACHED"), body
        assert sum(map(len, held.values())) == 56
        waited_s = await timed_reset_and_step(url, "127.0.0.6", ANONYMOUS)
        mine_s = await timed_reset_and_step(url, "127.0.0.6", OPERATOR)
        print(f"\nanother client {waited_s * 1000:.0f} ms, operator {mine_s * 1000:.0f} ms "
              "(a reset and a step, with 56 environments taken)")  # fmt: skip
        evicted = []
        for address, handles in held.items():
            for handle in handles:
                step = {"handle": handle, "action": {}}
                async with sessions[address].post(f"{url}/step", json=step,
                                                  headers=ANONYMOUS) as resp:  # fmt: skip
                    if resp.status == 409:
                        evicted.append((await resp.json())["detail"])
        assert len(evicted) == 1, evicted
        assert "closed to make room" in evicted[0]
        for address in ATTACKERS:  # none holds more than the newcomer by two: none gives way
            status, body = await reset(sessions[address], url, ANONYMOUS)
            assert (status, body["code"]) == (503, "CAPACITY_REACHED"), body
    finally:
        for http in sessions.values():
            await http.close()


async def test_heavy_resets_from_two_addresses_do_not_hold_up_a_third(gateway: str) -> None:
    """Two addresses keep a heavy reset each in flight; a third client's light reset and step
    finish while the heavy ones still run: it waits behind no one's work."""
    url = gateway
    async with from_address("127.0.0.2") as one, from_address("127.0.0.3") as two:
        heavy = [asyncio.create_task(reset(http, url, ANONYMOUS, HEAVY))
                 for http in (one, two) for _ in range(2)]  # fmt: skip
        await asyncio.sleep(0.2)
        waited_s = await timed_reset_and_step(url, "127.0.0.4", ANONYMOUS)
        unfinished = sum(not task.done() for task in heavy)
        print(f"\nlight reset and step {waited_s * 1000:.0f} ms beside heavy resets")
        assert unfinished >= 2, "the heavy resets were not heavy"
        assert all(status == 200 for status, _ in await asyncio.gather(*heavy))


async def test_a_websocket_closed_to_make_room_is_told_why(aiohttp_server: Any) -> None:
    server = await aiohttp_server(create_app(GatewayConfig(admin_token=ADMIN, max_envs=4,
                                                           reserved_envs=1)))  # fmt: skip
    url = f"http://{server.host}:{server.port}"

    async def opened(http: aiohttp.ClientSession) -> aiohttp.ClientWebSocketResponse:
        ws = await http.ws_connect(f"{url}/ws", headers=ANONYMOUS)
        await ws.send_json({"type": "reset", "data": {}})
        assert (await ws.receive_json(timeout=5))["type"] == "observation"
        return ws

    async with from_address("127.0.0.2") as greedy, from_address("127.0.0.3") as late:
        taken = [await opened(greedy) for _ in range(3)]  # the 3 shared of 4
        mine = await opened(late)
        told = await taken[0].receive_json(timeout=5)  # the oldest idle
        assert (told["type"], told["data"]["code"]) == ("error", "CAPACITY_REACHED")
        assert "closed to make room" in told["data"]["message"]
        closed = await taken[0].receive(timeout=5)
        assert (closed.type, closed.data) == (aiohttp.WSMsgType.CLOSE, 4010)
        for ws in (*taken, mine):
            await ws.close()


# -- connections --------------------------------------------------------------------------------


def test_idle_sockets_past_the_descriptor_limit_never_stop_the_server_accepting(
    tmp_path: Path,
) -> None:
    """A real `twin serve` allowed 256 file descriptors: 400 sockets from one address, half of
    them silent and half part-way through a request, would hold every descriptor (the kernel
    then refuses to accept, and asyncio stops listening). Each connection past the server's cap
    closes the oldest idle one instead, so another address and the operator are still served
    at once."""
    port, output = free_port(), tmp_path / "serve.log"
    proc = start_serve(port, ADMIN, output, files=256)
    idle: list[socket.socket] = []
    try:
        for i in range(400):
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.connect(("127.0.0.1", port))
            if i % 2:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # and never the end
            idle.append(s)
        for headers in ({}, OPERATOR):
            start = time.perf_counter()
            with socket.socket() as other:
                other.bind(("127.0.0.3", 0))
                other.settimeout(5)
                other.connect(("127.0.0.1", port))
                auth = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
                other.sendall(f"GET /health HTTP/1.1\r\nHost: x\r\n{auth}"
                              "Connection: close\r\n\r\n".encode())  # fmt: skip
                assert other.recv(64).startswith(b"HTTP/1.1 200"), "not served"
            print(f"\nserved in {(time.perf_counter() - start) * 1000:.0f} ms beside 400 idle "
                  "sockets")  # fmt: skip
        time.sleep(0.5)
        ended, _, _ = select.select(idle, [], [], 0)  # closed by the server: readable, at EOF
        closed = len(ended)
        assert closed >= 400 - (256 - 64), closed  # the oldest idle gave way
    finally:
        for s in idle:
            s.close()
        proc.terminate()
        proc.wait(timeout=15)
    log = output.read_text()
    assert "Traceback" not in log, log
    assert "accept" not in log.lower(), log  # no "socket.accept() out of system resource"


class Wire:
    """A transport as the guard sees one: a peer address, and whether it was cut."""

    def __init__(self, address: str) -> None:
        self.address, self.cut = address, False

    def get_extra_info(self, name: str) -> Any:
        return (self.address, 40000) if name == "peername" else None

    def abort(self) -> None:
        self.cut = True


async def test_an_address_at_its_cap_gives_way_itself_and_busy_connections_never_do() -> None:
    guard = ConnectionGuard(total=4, per_address=2)

    def connect(address: str) -> tuple[Connection, Wire]:
        conn, wire = guard.wrap(asyncio.Protocol)(), Wire(address)
        assert isinstance(conn, Connection)
        conn.connection_made(wire)  # type: ignore[arg-type]
        return conn, wire

    _, a1_wire = connect("10.0.0.1")
    _, b1_wire = connect("10.0.0.2")
    a2, _ = connect("10.0.0.1")
    a2.busy = 1  # in a request
    a3, a3_wire = connect("10.0.0.1")  # its address at 2: its own oldest idle goes
    assert (a1_wire.cut, b1_wire.cut, a3_wire.cut) == (True, False, False)
    a3.busy = 1
    _, a4_wire = connect("10.0.0.1")  # its own are all busy: the new one is turned away
    assert (a4_wire.cut, b1_wire.cut) == (True, False)
    connect("10.0.0.3")  # 4 open: at the total, still room
    _, d_wire = connect("10.0.0.4")  # past it: the most-holding address's are busy, so the
    assert (b1_wire.cut, d_wire.cut) == (True, False)  # oldest idle of all gives way
    assert len(guard.open) == 4


# -- episodes are their owner's -----------------------------------------------------------------

SECOND_PROCESS = """
import json, sys, urllib.error, urllib.request
url = sys.argv[1]
def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)
tried = {
    "step by its episode id": call("POST", "/step", {"episode_id": "mine", "action": {}}),
    "step without a handle": call("POST", "/step", {"action": {}}),
    "state by its episode id": call("GET", "/state?episode_id=mine"),
    "state without a handle": call("GET", "/state"),
    "state by a guessed handle": call("GET", "/state?handle=mine"),
}
own = call("POST", "/reset", {"episode_id": "mine"})
tried["state of its own reset"] = call("GET", "/state?handle=" + own[1]["metadata"]["handle"])
print(json.dumps({k: [s, b.get("step_count")] for k, (s, b) in tried.items()}))
"""


async def test_a_second_process_cannot_read_or_step_another_s_http_episode(
    gateway: str,
) -> None:
    """Two processes on one host share an address: the second, naming the first's episode id
    (or nothing), reaches nothing; a reset of its own under the same id is a new episode."""
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{gateway}/reset", json={"episode_id": "mine", "seed": 3},
                             headers=ANONYMOUS) as resp:  # fmt: skip
            handle = (await resp.json())["metadata"]["handle"]
        step = {"handle": handle, "action": {}}
        async with http.post(f"{gateway}/step", json=step, headers=ANONYMOUS) as resp:
            assert resp.status == 200
        second = await asyncio.create_subprocess_exec(
            sys.executable, "-c", SECOND_PROCESS, gateway, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await second.communicate()
        tried = json.loads(out)
        own = tried.pop("state of its own reset")
        assert own == [200, 0], "its own reset is a new episode"
        assert all(status == 409 for status, _ in tried.values()), tried
        async with http.get(f"{gateway}/state?handle={handle}", headers=ANONYMOUS) as resp:
            state = await resp.json()
        assert (state["episode_id"], state["step_count"]) == ("mine", 1), "untouched"


async def test_environments_with_steps_queued_behind_their_own_cannot_pin_the_budget(
    aiohttp_server: Any,
) -> None:
    """Four addresses fill the shared environments, each with a heavy call running and a step
    queued on every other environment it holds (each identity runs one call at a time, so
    the queued steps wait behind its own). Queued work is no shield: a newcomer is admitted
    within a second (the oldest environment of the richest address, idle but for its queued
    step, makes room), and that queued step is answered with the eviction."""
    config = GatewayConfig(admin_token=ADMIN, max_envs=16, max_envs_per_client=4,
                           max_episode_jobs=10**9, max_client_jobs=10**12, env_workers=8,
                           max_call_s=0.6)  # fmt: skip
    # As `twin serve` does before it serves: what earlier tests left on the heap is frozen, so
    # no full collection of it pauses the loop mid-test (this test's timing is its subject).
    gc.collect()
    gc.freeze()
    server = await aiohttp_server(create_app(config))
    url = f"http://{server.host}:{server.port}"
    sessions = {a: from_address(a) for a in ATTACKERS}
    calls: list[asyncio.Task[tuple[int, dict[str, Any]]]] = []
    try:
        handles: dict[str, list[str]] = {a: [] for a in ATTACKERS}
        for address in ATTACKERS:
            for _ in range(4 if address != ATTACKERS[-1] else 2):  # 14: the shared share
                status, body = await reset(sessions[address], url, ANONYMOUS)
                assert status == 200, body
                handles[address].append(body["metadata"]["handle"])

        async def call(address: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
            async with sessions[address].post(f"{url}/{path}", json=body,
                                              headers=ANONYMOUS) as resp:  # fmt: skip
                return resp.status, await resp.json()

        for address in ATTACKERS:  # a heavy reset runs; a step waits on each other env
            first, *rest = handles[address]
            heavy = {"overrides": [FLOOD], "seed": 1, "handle": first}  # runs to max_call_s
            calls.append(asyncio.create_task(call(address, "reset", heavy)))
            await asyncio.sleep(0.05)
            calls += [asyncio.create_task(call(address, "step", {"handle": h, "action": {}}))
                      for h in rest]  # fmt: skip
        await asyncio.sleep(0.3)
        start = time.perf_counter()
        async with from_address("127.0.0.6") as newcomer:
            status, body = await reset(newcomer, url, ANONYMOUS)
        admitted_s = time.perf_counter() - start
        assert status == 200, body
        assert admitted_s < 1.0, admitted_s
        answered = await asyncio.gather(*calls)
        evicted = [b for s, b in answered if s == 409 and "waited its turn" in b["detail"]]
        assert len(evicted) == 1, answered
        assert "closed to make room" in evicted[0]["detail"]
    finally:
        gc.unfreeze()
        for task in calls:
            task.cancel()
        for http in sessions.values():
            await http.close()
