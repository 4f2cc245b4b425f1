"""The twin's Slurm mode (`queue.backfill_interval_s` above 0): the main scheduler starts jobs
in priority order and stops at the first that does not fit; a backfill pass every interval
plans on time limits (never run times), reserves each blocked job a node at its earliest
start, and starts a later job now only where it cannot delay one; a run stops at its limit."""

from __future__ import annotations

from collections.abc import Sequence

from twin.eventlog.metrics import Metrics
from twin.replay.cluster import Cluster, pool_of
from twin.replay.run import Queue, replay_scenario
from twin.schema import records
from twin.schema.scheduling import NodeConfig, NodeGroup, SchedulerConfig
from twin.sim.jobrecord import JobRecord
from twin.sim.runner import run_episode


class Seen(Metrics):
    def __post_init__(self) -> None:
        super().__post_init__()
        self.started_s: dict[str, float] = {}
        self.failed: dict[str, str] = {}

    def _on_job_started(self, rec: records.JobStarted) -> None:
        self.started_s.setdefault(rec.job_id, rec.t_s)

    def _on_job_failed(self, rec: records.JobFailed) -> None:
        self.failed[rec.job_id] = rec.reason


def job(name: str, submit_s: float, gpus: int, run_s: float, limit_s: float | None) -> JobRecord:
    priority = -float(ord(name[0]))  # submission order, as priority/basic gives
    return JobRecord(job_id=name, submit_s=submit_s, service_s=run_s, gpus=float(gpus),
                     tenant="slurm", priority=priority, time_limit_s=limit_s)  # fmt: skip


def play(jobs: Sequence[JobRecord], *, nodes: int = 1, interval_s: float = 10.0,
         phase_s: float = 0.0, resolution_s: float = 0.0, depth: int = 64,
         grid_s: float = 0.0) -> Seen:  # fmt: skip
    cluster = Cluster([pool_of("h100", nodes * 8)],
                      NodeConfig(groups=[NodeGroup(pool="h100", count=nodes, gpus=8)],
                                 placement="first_fit"), "test")  # fmt: skip
    queue = Queue("priority", backfill=True, backfill_interval_s=interval_s,
                  backfill_resolution_s=resolution_s, backfill_phase_s=phase_s,
                  backfill_depth=depth, backfill_grid_s=grid_s)  # fmt: skip
    seen = Seen()
    run_episode(replay_scenario("slurm", "test", cluster, queue, SchedulerConfig()),
                sources=[sorted(jobs, key=lambda j: j.submit_s)], metrics=seen)  # fmt: skip
    return seen


def test_a_job_that_ends_by_its_limit_before_the_blocked_head_could_start_backfills_at_a_pass():
    seen = play([job("a", 0, 6, 100, 200), job("b", 1, 4, 50, 300),
                 job("c", 2, 2, 20, 150), job("d", 3, 2, 20, 250)])  # fmt: skip
    assert seen.started_s["a"] == 0  # the main scheduler, at its submission
    # b waits for a's GPUs by a's limit (200 s): reserved. c's limit ends by then: it backfills
    # at the first pass (10 s), not when it came; d's limit would delay b: it waits, although
    # its run (20 s) would have ended in time.
    assert seen.started_s["c"] == 10
    assert seen.started_s["b"] == 100  # a ended early: the main scheduler starts b at once
    assert seen.started_s["d"] == 100


def test_backfill_starts_fall_on_the_passes_only():
    seen = play([job("a", 0, 4, 500, 600), job("b", 1, 8, 10, 600), job("c", 2, 1, 5, 60),
                 job("d", 8, 1, 5, 60)], interval_s=30, phase_s=7)  # fmt: skip
    # b waits for a (reserved from 600 s); c and d fit now and end by then, but the main
    # scheduler stops at b: they start at the next pass (7 s, 37 s), not when they came.
    assert seen.started_s["c"] == 7
    assert seen.started_s["d"] == 37
    assert seen.started_s["b"] == 500


def test_a_reservation_holds_its_whole_node_so_a_job_that_fits_beside_it_waits():
    seen = play([job("a", 0, 6, 100, 100), job("b", 1, 4, 10, 100), job("c", 2, 1, 10, 300)],
                resolution_s=0)  # fmt: skip
    # b is reserved the node from a's limit (100 s); c would fit in the 2 GPUs left, but its
    # limit overlaps b's reservation: Slurm keeps the node.
    assert seen.started_s["b"] == 100
    assert seen.started_s["c"] == 100


def test_reservations_round_down_on_the_epochs_grid_of_bf_resolution():
    # b's reservation would begin at 200 s (a's limit). On a 60 s grid through 0 it is rounded
    # to 180 s and c, whose limit ends at 185 s, would delay it; Slurm rounds epoch seconds, so
    # where the episode's 0 is 40 s past a multiple of 60 the grid falls at 20, 80, 140, 200
    # and c backfills at the first pass.
    jobs = [job("a", 0, 6, 100, 200), job("b", 1, 4, 50, 300), job("c", 2, 2, 20, 175)]
    assert play(jobs, resolution_s=60.0).started_s["c"] > 10
    assert play(jobs, resolution_s=60.0, grid_s=20.0).started_s["c"] == 10


def test_a_job_whose_limit_ends_as_a_reservation_begins_would_delay_it():
    # b is reserved from 200 s (a's limit); at the pass at 10 s, c's limit ends at 200 s
    # exactly: Slurm's map counts a window that begins at the job's end, so c waits; a second
    # shorter, it backfills
    def c_start(limit_s: float) -> float:
        jobs = [job("a", 0, 6, 100, 200), job("b", 1, 4, 50, 300), job("c", 2, 2, 20, limit_s)]
        return play(jobs).started_s["c"]

    assert c_start(190) > 10
    assert c_start(189) == 10


def test_a_run_longer_than_its_limit_is_stopped_there():
    seen = play([job("a", 0, 1, 500, 60), job("b", 0, 1, 30, None)])
    assert seen.failed == {"a": "time_limit"}
    assert seen.started_s == {"a": 0, "b": 0}


def test_the_second_node_takes_what_the_first_cannot_hold_in_node_order():
    seen = play([job("a", 0, 6, 100, 200), job("b", 1, 4, 10, 20), job("c", 2, 2, 10, 20)],
                nodes=2)  # fmt: skip
    assert seen.started_s == {"a": 0, "b": 1, "c": 2}  # b on the second node, c beside a


def test_a_job_without_a_limit_is_planned_as_never_ending_and_blocks_nothing_forever():
    seen = play([job("a", 0, 8, 100, None), job("b", 1, 8, 10, None), job("c", 2, 1, 10, 60)])
    # a never ends by its limit: b can be planned no start, and c none behind it; both start
    # when a's GPUs come back (the main scheduler, at a's end).
    assert seen.started_s == {"a": 0, "b": 100, "c": 110}


def test_a_pass_tries_only_as_many_jobs_as_bf_max_job_test():
    jobs = [job("a", 0, 6, 100, 200), job("b", 1, 4, 50, 300), job("c", 2, 2, 20, 150)]
    assert play(jobs, depth=2).started_s["c"] == 10  # tried at the first pass: backfilled
    # A pass that tries one waiting job tries b only: c waits for the main scheduler, behind b.
    assert play(jobs, depth=1).started_s["c"] == 100
