"""EASY backfill: a later job may start now if it cannot delay the blocked head of its queue.

The head reserves the earliest time its GPUs free up in its best pool (the shadow time); a
candidate may run there if it ends by then, or uses only GPUs the head will not need.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from twin.sim.jobs import Job
from twin.sim.placement import Placement
from twin.sim.pools import Holding, Pool
from twin.sim.queues import JobQueue


def backfill_behind(
    head: Job,
    line: JobQueue,
    *,
    now_s: float,
    depth: int,
    placement: Placement,
    fit: Callable[[Job], Holding | None],
    rate: Callable[[Job, Pool], float],
    run: Callable[[Job, Holding], None],
) -> None:
    """Start the jobs within `depth` of the blocked `head` of `line` that cannot delay it."""
    shadow_s, spare_milli, reserved = shadow(head, placement)
    for job in line.first(depth)[1:]:
        where = fit(job)
        if where is None:
            continue
        if where is not reserved or now_s + job.remaining / rate(job, where.pool) <= shadow_s:
            pass
        elif job.milli <= spare_milli:
            spare_milli -= job.milli
        else:
            continue
        line.remove(job)
        run(job, where)


def shadow(head: Job, placement: Placement) -> tuple[float, int, Holding | None]:
    """When the head could start at the earliest, the GPUs it leaves spare then, and where."""
    shadow_s, spare_milli = math.inf, 0
    reserved: Holding | None = None
    for h in placement.candidates(head):
        free = h.ready * 1000 - h.busy_milli
        ends = sorted((j.start_s + j.remaining / j.rate, j.milli) for j in h.running)
        for end_s, milli in ends:
            free += milli
            if free >= head.milli:
                if end_s < shadow_s:
                    shadow_s, spare_milli, reserved = end_s, free - head.milli, h
                break
    return shadow_s, spare_milli, reserved
