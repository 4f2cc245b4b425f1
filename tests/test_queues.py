"""Queue order: a priority queue reads its first jobs off the heap best first, so a long queue
costs what its first few jobs cost, and in exactly the order a full sort would give."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from twin.sim.jobs import Job
from twin.sim.queues import ClusterQueue, make_queue


def job(seq: int, tenant: int, priority: float) -> Job:
    return Job(f"j{seq}", tenant, 1.0, 1000, 60.0, priority, None, 0.0, seq, 60.0, 60.0, 1.0, 0.0)


# Operations: ("push", tenant, priority), ("pop",), ("remove", which), ("requeue", which).
OPS = st.lists(st.one_of(
    st.tuples(st.just("push"), st.integers(0, 2), st.sampled_from([0.0, 1.0, 2.0, 5.0])),
    st.tuples(st.just("pop")),
    st.tuples(st.just("remove"), st.integers(0, 10_000)),
    st.tuples(st.just("requeue"), st.integers(0, 10_000)),
), max_size=300)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(OPS, st.integers(1, 40))
def test_the_first_jobs_are_those_a_full_sort_puts_first(ops: list[tuple], n: int) -> None:
    """Whatever was pushed, popped, removed from the middle or put back: `first(n)` is the
    queue sorted by priority (then arrival), cut at n; a tenant's line is its jobs in it."""
    queue = ClusterQueue(make_queue("priority"), 3)
    queued: list[Job] = []
    gone: list[Job] = []
    for op in ops:
        if op[0] == "push":
            new = job(len(queued) + len(gone), op[1], op[2])
            new.queued = True
            queue.push(new)
            queued.append(new)
        elif op[0] == "pop" and queued:
            top = queue.pop()
            top.queued = False
            queued.remove(top)
            gone.append(top)
        elif op[0] == "remove" and queued:
            out = queued.pop(op[1] % len(queued))
            out.queued = False
            queue.remove(out)
            gone.append(out)
        elif op[0] == "requeue" and gone:
            back = gone.pop(op[1] % len(gone))
            back.queued = True
            queue.push(back, requeue=True)
            queued.append(back)
    expected = sorted(queued, key=lambda j: (-j.priority, j.seq))
    assert queue.first(n) == expected[:n]
    assert len(queue) == len(queued)
    for tenant in range(3):
        assert queue.first_of(tenant, n) == [j for j in expected if j.tenant == tenant][:n]


def test_a_queue_of_mostly_removed_entries_is_rebuilt_and_keeps_its_order() -> None:
    queue = make_queue("priority")
    jobs = [job(i, 0, float(i % 7)) for i in range(5000)]
    for j in jobs:
        j.queued = True
        queue.push(j)
    for j in jobs[::2] + jobs[1::4]:  # three quarters taken out of the middle
        j.queued = False
        queue.remove(j)
    late = job(5000, 0, 9.0)
    late.queued = True
    queue.push(late)  # past the slack of dead entries: the heap is rebuilt of live ones
    live = [j for j in [*jobs, late] if j.queued]
    assert queue.first(50) == sorted(live, key=lambda j: (-j.priority, j.seq))[:50]
    assert len(queue._heap) == len(live)  # type: ignore[union-attr]
