"""Queue policies: the order in which a tenant's waiting jobs are considered."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from itertools import islice
from typing import Protocol

from twin.schema.vocabulary import QueuePolicy
from twin.sim.jobs import Job


class FifoQueue:
    """First come, first served; a requeued job goes back to the front."""

    __slots__ = ("_q",)

    def __init__(self) -> None:
        self._q: deque[Job] = deque()

    def __len__(self) -> int:
        return len(self._q)

    def push(self, job: Job, *, requeue: bool = False) -> None:
        if requeue:
            self._q.appendleft(job)
        else:
            self._q.append(job)

    def head(self) -> Job | None:
        return self._q[0] if self._q else None

    def pop(self) -> Job:
        return self._q.popleft()

    def remove(self, job: Job) -> None:
        self._q.remove(job)

    def first(self, n: int) -> list[Job]:
        """The first `n` jobs in queue order."""
        return list(islice(self._q, n))

    def ordered(self) -> Iterator[Job]:
        """The jobs in queue order (read while the queue stays as it is)."""
        return iter(self._q)


COMPACT_AT = 1024  # dead heap entries tolerated beyond the live ones, before a rebuild


class KeyedQueue:
    """Jobs ordered by a key (ties by arrival); removal from the middle is lazy.

    An entry is live while its job is queued and the entry's version is the job's current one,
    so a job removed and later requeued never resurfaces through its old entry.
    """

    __slots__ = ("_heap", "_key", "_n")

    def __init__(self, key: Callable[[Job], float]) -> None:
        self._key = key
        self._heap: list[tuple[float, int, int, Job]] = []
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def push(self, job: Job, *, requeue: bool = False) -> None:
        job.version += 1
        heap = self._heap
        if len(heap) > 2 * self._n + COMPACT_AT:  # mostly entries of jobs gone: drop them
            heap[:] = [e for e in heap if _live(e)]
            heapq.heapify(heap)
        heapq.heappush(heap, (self._key(job), job.seq, job.version, job))
        self._n += 1

    def _prune(self) -> None:
        # Maintain heap invariant: the top entry, if any, is live.
        heap = self._heap
        while heap and not _live(heap[0]):
            heapq.heappop(heap)

    def head(self) -> Job | None:
        self._prune()
        return self._heap[0][3] if self._heap else None

    def pop(self) -> Job:
        self._prune()
        self._n -= 1
        return heapq.heappop(self._heap)[3]

    def remove(self, job: Job) -> None:
        # The caller clears job.queued; the entry is dropped when it reaches the top.
        self._n -= 1

    def first(self, n: int) -> list[Job]:
        return list(islice(self.ordered(), n))

    def ordered(self) -> Iterator[Job]:
        """The jobs in queue order, read off the heap best first: the first n cost about
        n log n, not the whole queue (read while the queue stays as it is)."""
        heap = self._heap
        if not heap:
            return
        frontier = [(heap[0], 0)]  # entries are unique, so the index never breaks a tie
        while frontier:
            entry, i = heapq.heappop(frontier)
            if _live(entry):
                yield entry[3]
            for child in (2 * i + 1, 2 * i + 2):
                if child < len(heap):
                    heapq.heappush(frontier, (heap[child], child))


def _live(entry: tuple[float, int, int, Job]) -> bool:
    job = entry[3]
    return job.queued and job.version == entry[2]


class ClusterQueue:
    """One queue for every tenant's jobs (a cluster whose pools are shared): it schedules in its
    own order, and counts each tenant's jobs for the tenant's view of it (`TenantLine`)."""

    __slots__ = ("_q", "counts")

    def __init__(self, inner: FifoQueue | KeyedQueue, tenants: int) -> None:
        self._q = inner
        self.counts = [0] * tenants

    def __len__(self) -> int:
        return len(self._q)

    def push(self, job: Job, *, requeue: bool = False) -> None:
        self._q.push(job, requeue=requeue)
        self.counts[job.tenant] += 1

    def head(self) -> Job | None:
        return self._q.head()

    def pop(self) -> Job:
        job = self._q.pop()
        self.counts[job.tenant] -= 1
        return job

    def remove(self, job: Job) -> None:
        self._q.remove(job)
        self.counts[job.tenant] -= 1

    def first(self, n: int) -> list[Job]:
        return self._q.first(n)

    def first_of(self, tenant: int, n: int) -> list[Job]:
        """The first `n` of one tenant's jobs, in the cluster's queue order."""
        if n <= 0 or not self.counts[tenant]:
            return []
        mine = (j for j in self._q.ordered() if j.tenant == tenant)
        return list(islice(mine, min(n, self.counts[tenant])))


class TenantLine:
    """A tenant's jobs in the cluster's one queue: what its policy sees and places from (the
    scheduler schedules from the cluster's queue itself)."""

    __slots__ = ("_all", "_tenant")

    def __init__(self, cluster: ClusterQueue, tenant: int) -> None:
        self._all = cluster
        self._tenant = tenant

    def __len__(self) -> int:
        return self._all.counts[self._tenant]

    def push(self, job: Job, *, requeue: bool = False) -> None:
        self._all.push(job, requeue=requeue)

    def remove(self, job: Job) -> None:
        self._all.remove(job)

    def first(self, n: int) -> list[Job]:
        return self._all.first_of(self._tenant, n)


JobQueue = FifoQueue | KeyedQueue | ClusterQueue
TenantQueue = JobQueue | TenantLine
"""What a tenant's policy sees of its jobs: its own queue, or its line in the cluster's."""

QUEUES: Mapping[QueuePolicy, Callable[[], FifoQueue | KeyedQueue]] = {
    "fifo": FifoQueue,
    "priority": lambda: KeyedQueue(lambda j: -j.priority),  # highest first
    "sjf": lambda: KeyedQueue(lambda j: j.remaining / j.nominal_rate),  # shortest run first
    "manual": FifoQueue,  # jobs start only when a placement names them
}


class Waiting(Protocol):
    """Every tenant's queue and the GPUs its queued jobs ask for (in thousandths), as the
    scheduler keeps them and rounds read them."""

    @property
    def queues(self) -> list[TenantQueue]: ...

    @property
    def queued_milli(self) -> list[int]: ...


def make_queue(policy: QueuePolicy) -> FifoQueue | KeyedQueue:
    """A tenant's queue under `policy`."""
    return QUEUES[policy]()
