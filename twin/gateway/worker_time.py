"""Worker time shared fairly between identities.

Environment calls run on threads, so a long stretch of virtual time never blocks the server's
loop. Each identity (the operator, by its token, or an address) runs one call at a time on the
shared threads: Python runs one thread at a time, so a client would gain nothing from two at
once. A thread that comes free goes to the identity that has waited longest (round robin), so a
heavy client waits behind its own work, not in front of others'. Running calls share the
interpreter in slices, so a light call beside heavy ones takes a few times its own time, never
theirs. The operator has a thread of its own besides, which no one else can take.
"""

from __future__ import annotations

import asyncio
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, TypeVar

T = TypeVar("T")
Lane = Literal["shared", "reserved"]


class WorkerTime:
    """`threads` shared threads, one call at a time per identity, and one thread more that
    only `reserved_for` may use."""

    def __init__(self, threads: int, *, reserved_for: str) -> None:
        self.threads = threads
        self.reserved_for = reserved_for
        self.pool = ThreadPoolExecutor(threads + 1, thread_name_prefix="twin-env")
        self.running: Counter[str] = Counter()  # calls on the shared threads, by identity
        self.reserved_busy = False
        self.waiting: OrderedDict[str, deque[asyncio.Future[Lane]]] = OrderedDict()

    async def run(self, who: str, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on a thread, once it is `who`'s turn. A caller that gives up waiting
        frees its turn; one that gives up while its call runs frees the thread when it ends."""
        lane = await self._turn(who)
        done = asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)
        done.add_done_callback(lambda _: self._free(who, lane))
        return await asyncio.shield(done)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    def busy(self) -> int:
        """Calls running now."""
        return sum(self.running.values()) + self.reserved_busy

    async def _turn(self, who: str) -> Lane:
        turn: asyncio.Future[Lane] = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(who, deque()).append(turn)
        self._dispatch()
        try:
            return await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # granted as it was given up
                self._free(who, turn.result())
            else:
                queue = self.waiting.get(who)
                if queue is not None and turn in queue:
                    queue.remove(turn)
                    if not queue:
                        del self.waiting[who]
            raise

    def _lane(self, who: str) -> Lane | None:
        """The thread `who` may start a call on now, if any."""
        if who == self.reserved_for and not self.reserved_busy:
            return "reserved"
        shared_busy = sum(self.running.values())
        if shared_busy < self.threads and not self.running[who]:
            return "shared"
        return None

    def _dispatch(self) -> None:
        """Give free threads to waiting identities, the longest waiting first; one served goes
        to the back of the line."""
        for who in list(self.waiting):
            queue = self.waiting[who]
            while queue and queue[0].done():  # given up, its task not yet told: skip it
                queue.popleft()
            if not queue:
                del self.waiting[who]
                continue
            lane = self._lane(who)
            if lane is None:
                continue
            del self.waiting[who]
            turn = queue.popleft()
            if queue:
                self.waiting[who] = queue  # to the back
            if lane == "reserved":
                self.reserved_busy = True
            else:
                self.running[who] += 1
            turn.set_result(lane)

    def _free(self, who: str, lane: Lane) -> None:
        if lane == "reserved":
            self.reserved_busy = False
        else:
            self.running[who] -= 1
            if self.running[who] <= 0:
                del self.running[who]
        self._dispatch()
