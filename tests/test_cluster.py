"""The job-level cluster model: provisioning, queues, money, failures, decisions."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from tests.conftest import drive, kinds, play, tiny
from tests.rounds import commit
from twin.eventlog.log import FLUSH_EVERY, EventLog
from twin.schema.actions import ProvisionAction
from twin.schema.scenario import ClusterScenario
from twin.sim.driver import Driver


def admit(driver: Driver, job_id: str, gpus: float, work_gpu_s: float, priority: float = 0) -> None:
    """Put a job in tenant 0's queue now."""
    driver.model.scheduler.admit(
        0, job_id, gpus=gpus, work=work_gpu_s, priority=priority, gpu_type=None
    )


def workload(**fields: Any) -> dict[str, Any]:
    w: dict[str, Any] = {
        "arrivals": {"process": "poisson", "rate_per_h": 6},
        "service_s": {"dist": "constant", "value": 600},
    }
    w.update(fields)
    return w


def tenant(**fields: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"name": "t", "initial_gpus": {"gpu": 2}, "policy": "static"}
    t.update(fields)
    return t


def held_gpu_s(events: list[dict[str, Any]], end_s: float) -> dict[tuple[str, str], float]:
    """GPU-seconds each (tenant, pool) held ready GPUs, integrated from the log."""
    held: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    delta = {"gpus_ready": 1, "gpus_released": -1}
    for e in events:
        if e["kind"] in delta or e["kind"] == "node_failed":
            n = e["gpus"] * delta[e["kind"]] if e["kind"] in delta else -1
            acc = held[(e["tenant"], e["pool"])]
            acc[2] += acc[0] * (e["t_s"] - acc[1])
            acc[0] += n
            acc[1] = e["t_s"]
    return {k: gpu_s + n * (end_s - since) for k, (n, since, gpu_s) in held.items()}


class TestProvisioning:
    def test_requested_gpus_are_ready_after_the_drawn_delay(self) -> None:
        sc = tiny(
            pools=[
                {"name": "gpu", "gpu_type": "a100", "max_gpus": 8, "price_usd_per_gpu_h": 3.6,
                 "provision_delay_s": {"dist": "constant", "value": 300}}
            ],
            tenants=[tenant(initial_gpus={})],
        )  # fmt: skip
        driver = drive(sc)
        driver.model.apply(0, ProvisionAction(provision={"gpu": 3}))
        driver.advance()
        events = list(driver.log.dicts())
        [req] = kinds(events, "gpus_requested")
        [ready] = kinds(events, "gpus_ready")
        assert (req["t_s"], req["gpus"], req["ready_at_s"]) == (0.0, 3, 300.0)
        assert (ready["t_s"], ready["gpus"]) == (300.0, 3)

    def test_a_job_waits_for_gpus_that_are_still_provisioning(self) -> None:
        sc = tiny(
            pools=[
                {"name": "gpu", "gpu_type": "a100", "max_gpus": 8, "price_usd_per_gpu_h": 3.6,
                 "provision_delay_s": {"dist": "constant", "value": 300}}
            ],
            tenants=[tenant(initial_gpus={}, workloads=[workload(max_jobs=1)])],
        )  # fmt: skip
        driver = drive(sc)
        driver.model.apply(0, ProvisionAction(provision={"gpu": 1}))
        driver.advance()
        events = list(driver.log.dicts())
        [arrived] = kinds(events, "job_arrived")
        [started] = kinds(events, "job_started")
        assert arrived["t_s"] < 300.0
        assert started["t_s"] == 300.0
        assert started["wait_s"] == pytest.approx(300.0 - arrived["t_s"])

    def test_pool_capacity_clamps_requests(self) -> None:
        driver = drive(tiny())
        driver.model.apply(0, ProvisionAction(provision={"gpu": 10}))
        events = list(driver.log.dicts())
        [clamp] = kinds(events, "action_clamped")
        assert (clamp["requested"], clamp["granted"], clamp["reason"]) == (10, 6, "pool_full")
        assert kinds(events, "gpus_requested")[0]["gpus"] == 6

    def test_release_cancels_pending_requests_before_idle_gpus(self) -> None:
        sc = tiny(
            pools=[
                {"name": "gpu", "gpu_type": "a100", "max_gpus": 8, "price_usd_per_gpu_h": 3.6,
                 "provision_delay_s": {"dist": "constant", "value": 600}}
            ]
        )  # fmt: skip
        driver = drive(sc)
        driver.model.apply(0, ProvisionAction(provision={"gpu": 2}))
        driver.model.apply(0, ProvisionAction(provision={"gpu": -3}))
        events = list(driver.log.dicts())
        assert kinds(events, "gpus_cancelled")[0]["gpus"] == 2
        assert kinds(events, "gpus_released")[0]["gpus"] == 1
        driver.advance()
        assert not kinds(list(driver.log.dicts()), "gpus_ready")[1:], "cancelled GPUs never arrive"

    def test_busy_gpus_are_never_released(self) -> None:
        sc = tiny(
            tenants=[
                tenant(workloads=[workload(max_jobs=1, gpus={"dist": "constant", "value": 2})])
            ]
        )
        driver = drive(sc)
        job_started = False
        while not job_started:
            driver.env.step()
            job_started = driver.model.scheduler.running_jobs == 1
        driver.model.apply(0, ProvisionAction(provision={"gpu": -2}))
        events = list(driver.log.dicts())
        assert not kinds(events, "gpus_released")
        [clamp] = kinds(events, "action_clamped")
        assert (clamp["granted"], clamp["reason"]) == (0, "gpus_busy")


class TestQueues:
    def scenario(self, policy: str, backfill: bool = False) -> ClusterScenario:
        # One GPU; a 1-GPU job holds it from t=0, then jobs with different sizes queue.
        return tiny(
            tenants=[tenant(initial_gpus={"gpu": 1})],
            queue={"policy": policy, "backfill": backfill},
        )

    def run_jobs(
        self, sc: ClusterScenario, jobs: list[tuple[str, float, float, float]]
    ) -> list[str]:
        """Admit (id, gpus, work_gpu_s, priority) at t=0; the order in which they start."""
        driver = drive(sc)
        for job_id, gpus, work, prio in jobs:
            admit(driver, job_id, gpus, work, prio)
        driver.advance()
        return [e["job_id"] for e in kinds(list(driver.log.dicts()), "job_started")]

    JOBS = (("a", 1, 100, 0), ("b", 1, 300, 1), ("c", 1, 50, 2), ("d", 1, 200, 0))

    def test_fifo_runs_jobs_in_arrival_order(self) -> None:
        assert self.run_jobs(self.scenario("fifo"), self.JOBS) == ["a", "b", "c", "d"]

    def test_priority_runs_the_highest_priority_next(self) -> None:
        assert self.run_jobs(self.scenario("priority"), self.JOBS) == ["a", "c", "b", "d"]

    def test_sjf_runs_the_shortest_next(self) -> None:
        assert self.run_jobs(self.scenario("sjf"), self.JOBS) == ["a", "c", "d", "b"]

    def test_without_backfill_a_blocked_head_blocks_everyone(self) -> None:
        sc = tiny(tenants=[tenant(initial_gpus={"gpu": 2})], queue={"policy": "fifo"})
        jobs = [("long", 1, 1000, 0), ("wide", 2, 200, 0), ("short", 1, 100, 0)]
        driver = drive(sc)
        for job_id, gpus, work, prio in jobs:
            admit(driver, job_id, gpus, work, prio)
        driver.advance()
        starts = {e["job_id"]: e["t_s"] for e in kinds(list(driver.log.dicts()), "job_started")}
        assert starts == {"long": 0.0, "wide": 1000.0, "short": 1100.0}

    def test_easy_backfill_starts_a_job_that_ends_before_the_head_could_start(self) -> None:
        sc = tiny(
            tenants=[tenant(initial_gpus={"gpu": 2})], queue={"policy": "fifo", "backfill": True}
        )
        jobs = [
            ("long", 1, 1000, 0),
            ("wide", 2, 200, 0),
            ("short", 1, 100, 0),
            ("slow", 1, 5000, 0),
        ]
        driver = drive(sc)
        for job_id, gpus, work, prio in jobs:
            admit(driver, job_id, gpus, work, prio)
        driver.advance()
        starts = {e["job_id"]: e["t_s"] for e in kinds(list(driver.log.dicts()), "job_started")}
        # "short" fits in the gap before "long" ends; "slow" would delay "wide", so it waits.
        assert starts["short"] == 0.0
        assert starts["wide"] == 1000.0
        assert starts["slow"] == 1100.0  # wide: 200 GPU-s on 2 GPUs ends at 1100


class TestMoney:
    @pytest.mark.parametrize("billing", ["from_ready", "from_request"])
    def test_money_charged_equals_gpu_time_held_times_price(self, billing: str) -> None:
        sc = ClusterScenario.model_validate(
            {
                "name": "money",
                "horizon_s": 20_000,
                "pools": [
                    {"name": "a", "gpu_type": "a100", "max_gpus": 16, "price_usd_per_gpu_h": 2.0,
                     "provision_delay_s": {"dist": "exponential", "mean": 200}, "billing": billing,
                     "mtbf_gpu_h": 5},
                    {"name": "b", "gpu_type": "h100", "max_gpus": 8, "price_usd_per_gpu_h": 5.0,
                     "speed": 2.0, "provision_delay_s": {"dist": "constant", "value": 100}},
                ],
                "tenants": [
                    {"name": "x", "workloads": [workload(
                        arrivals={"process": "poisson", "rate_per_h": 30},
                        gpus={"dist": "choice", "values": [1, 2, 4]})]},
                    {"name": "y", "initial_gpus": {"b": 2}, "workloads": [workload()]},
                ],
                "decisions": {"interval_s": 120},
                "checkpoint_interval_s": 300,
            }
        )  # fmt: skip
        events = play(sc, seed=4)
        charged: dict[tuple[str, str], float] = defaultdict(float)
        gpu_s: dict[tuple[str, str], float] = defaultdict(float)
        for e in kinds(events, "budget_charged"):
            charged[(e["tenant"], e["pool"])] += e["amount_usd"]
            gpu_s[(e["tenant"], e["pool"])] += e["gpu_s"]
        price = {"a": 2.0, "b": 5.0}
        for key, amount in charged.items():
            assert amount == pytest.approx(gpu_s[key] * price[key[1]] / 3600)
        if billing == "from_ready":
            held = held_gpu_s(events, 20_000.0)
            assert set(held) == set(gpu_s)
            for key, seconds in held.items():
                assert gpu_s[key] == pytest.approx(seconds)
        assert kinds(events, "node_failed"), "the scenario should exercise failures"

    def test_budget_exhaustion_ends_the_episode_at_the_exact_time(self) -> None:
        # 2 GPUs at $3.60/h burn $0.002/s: $100 lasts 50,000 s.
        sc = tiny(tenants=[tenant(budget_usd=100)], horizon_s=1e6)
        events = play(sc)
        [exhausted] = kinds(events, "budget_exhausted")
        assert exhausted["t_s"] == pytest.approx(50_000.0)
        assert events[-1]["kind"] == "episode_ended"
        assert events[-1]["reason"] == "budget_exhausted"
        assert sum(e["amount_usd"] for e in kinds(events, "budget_charged")) == pytest.approx(100.0)

    def test_budget_thresholds_fire_when_crossed(self) -> None:
        sc = tiny(tenants=[tenant(budget_usd=100)], horizon_s=1e6)
        events = play(sc)
        crossings = [(e["fraction"], round(e["t_s"])) for e in kinds(events, "budget_threshold")]
        assert crossings == [(0.5, 25_000), (0.25, 37_500), (0.1, 45_000)]

    def test_sla_penalty_is_charged_per_job_for_its_wait(self) -> None:
        sc = tiny(tenants=[tenant(initial_gpus={"gpu": 1}, sla_usd_per_job_h=3.6)])
        driver = drive(sc)
        admit(driver, "first", 1, 1000, 0)
        admit(driver, "second", 1, 1000, 0)
        driver.advance()
        [penalty] = kinds(list(driver.log.dicts()), "sla_penalty")
        assert (penalty["job_id"], penalty["wait_s"]) == ("second", 1000.0)
        assert penalty["amount_usd"] == pytest.approx(1.0)


class TestJobs:
    def test_every_arrived_job_is_accounted_for_at_the_horizon(self) -> None:
        sc = tiny(
            horizon_s=7200,
            tenants=[
                tenant(workloads=[workload(arrivals={"process": "poisson", "rate_per_h": 30})])
            ],
        )
        driver = drive(sc)
        while driver.advance() is not None:
            commit(driver)
        events = list(driver.log.dicts())
        arrived = {e["job_id"] for e in kinds(events, "job_arrived")}
        finished = {e["job_id"] for e in kinds(events, "job_finished")}
        failed = {e["job_id"] for e in kinds(events, "job_failed")}
        model = driver.model
        queued = {j.job_id for q in model.queues for j in q.first(len(q))}
        running = {j.job_id for hs in model.holdings for h in hs for j in h.running}
        assert arrived == finished | failed | queued | running
        assert len(arrived) == len(finished) + len(failed) + len(queued) + len(running)
        assert queued, "the load should leave jobs waiting at the horizon"
        assert running, "the load should leave jobs running at the horizon"

    def test_run_time_follows_speed_and_scaling_efficiency(self) -> None:
        sc = tiny(
            pools=[{"name": "gpu", "gpu_type": "h100", "max_gpus": 8, "price_usd_per_gpu_h": 1,
                    "speed": 2.0}],
            tenants=[tenant(initial_gpus={"gpu": 4})],
            scaling={"model": "amdahl", "serial_fraction": 0.1},
        )  # fmt: skip
        driver = drive(sc)
        admit(driver, "j", 4, 4000.0, 0)
        driver.advance()
        [started] = kinds(list(driver.log.dicts()), "job_started")
        speedup = 1 / (0.1 + 0.9 / 4)
        assert started["run_s"] == pytest.approx(4000.0 / (2.0 * speedup))

    def test_a_failed_gpu_restarts_its_job_from_the_last_checkpoint(self) -> None:
        sc = tiny(
            pools=[{"name": "gpu", "gpu_type": "a100", "max_gpus": 1, "price_usd_per_gpu_h": 1,
                    "mtbf_gpu_h": 2, "repair_s": {"dist": "constant", "value": 60}}],
            tenants=[tenant(initial_gpus={"gpu": 1}, policy="autoscale", workloads=[
                workload(max_jobs=1, service_s={"dist": "constant", "value": 36000})])],
            decisions={"interval_s": 600, "triggers": ["failure"]},
            checkpoint_interval_s=900,
            max_restarts=100,
        )  # fmt: skip
        events = play(sc, seed=2)
        interrupts = kinds(events, "job_interrupted")
        assert interrupts, "a 10 h job on a GPU with a 2 h MTBF should be interrupted"
        for e in interrupts:
            assert 0 <= e["lost_gpu_s"] < 900
        assert [e["restarts"] for e in interrupts] == list(range(1, len(interrupts) + 1))
        [finished] = kinds(events, "job_finished")
        assert kinds(events, "node_repaired")
        assert events[-1]["reason"] == "drained"
        assert finished["t_s"] > 36000

    def test_a_job_out_of_restarts_fails_for_good(self) -> None:
        sc = tiny(
            pools=[{"name": "gpu", "gpu_type": "a100", "max_gpus": 1, "price_usd_per_gpu_h": 1,
                    "mtbf_gpu_h": 1, "repair_s": {"dist": "constant", "value": 60}}],
            tenants=[tenant(initial_gpus={"gpu": 1}, policy="autoscale", workloads=[
                workload(max_jobs=1, service_s={"dist": "constant", "value": 360000})])],
            decisions={"interval_s": 600, "triggers": ["failure"]},
            max_restarts=0,
        )  # fmt: skip
        events = play(sc, seed=1)
        [failed] = kinds(events, "job_failed")
        assert failed["reason"] == "too_many_restarts"
        assert events[-1]["reason"] == "drained"


class TestDecisions:
    def test_periodic_ticks_ask_every_tenant(self) -> None:
        sc = tiny(
            horizon_s=1000,
            tenants=[tenant(), tenant(name="u", initial_gpus={})],
            decisions={"interval_s": 300, "triggers": []},
        )
        events = play(sc)
        ticks = [(e["t_s"], e["tenant"]) for e in kinds(events, "decision_requested")]
        assert ticks == [(t, n) for t in (300.0, 600.0, 900.0) for n in ("t", "u")]

    def test_decisions_due_at_one_instant_form_one_batch(self) -> None:
        sc = tiny(decisions={"interval_s": None, "triggers": ["arrival"]})
        driver = drive(sc)
        admit(driver, "a", 1, 10, 0)
        admit(driver, "b", 1, 10, 0)
        batch = driver.advance()
        assert batch is not None
        assert batch.t_s == 0.0
        assert batch.reasons == {"t": ["arrival"]}

    def test_unknown_pool_in_an_action_is_an_error_naming_it(self) -> None:
        from twin.errors import ActionError

        driver = drive(tiny())
        with pytest.raises(ActionError, match=r"'nope'.*pools are \['gpu'\]"):
            driver.model.apply(0, ProvisionAction(provision={"nope": 1}))


class TestArrivals:
    def count(self, process: dict[str, Any], horizon_s: float, seed: int = 0) -> list[float]:
        sc = tiny(
            horizon_s=horizon_s,
            tenants=[tenant(initial_gpus={"gpu": 8}, workloads=[workload(arrivals=process,
                     service_s={"dist": "constant", "value": 1})])],
        )  # fmt: skip
        return [e["t_s"] for e in kinds(play(sc, seed=seed), "job_arrived")]

    def test_poisson_arrivals_come_at_the_configured_rate(self) -> None:
        times = self.count({"process": "poisson", "rate_per_h": 100}, 100 * 3600)
        assert len(times) == pytest.approx(10_000, rel=0.05)

    def test_onoff_arrivals_are_burstier_than_poisson(self) -> None:
        import numpy as np

        times = self.count(
            {"process": "onoff", "on_rate_per_h": 300, "mean_on_s": 1800, "mean_off_s": 5400},
            200 * 3600,
        )
        per_hour = np.bincount(np.asarray(times, dtype=int) // 3600)
        assert per_hour.mean() == pytest.approx(75, rel=0.25)
        assert per_hour.var() > 5 * per_hour.mean(), "Poisson counts have variance = mean"

    def test_diurnal_arrivals_peak_at_the_peak_hour(self) -> None:
        import numpy as np

        process = {"process": "diurnal", "mean_rate_per_h": 200, "amplitude": 0.8, "peak_s": 43200}
        times = np.asarray(self.count(process, 20 * 86400))
        hour_of_day = (times % 86400) // 3600
        per_hour = np.bincount(hour_of_day.astype(int), minlength=24)
        assert per_hour.argmax() in (11, 12)
        assert per_hour[12] > 5 * per_hour[0]

    def test_mmpp_switches_between_rates(self) -> None:
        times = self.count(
            {"process": "mmpp", "rates_per_h": [10, 1000], "mean_dwell_s": [3600, 360]}, 100 * 3600
        )
        # Long-run rate: (10 * 3600 + 1000 * 360) / 3960 per hour.
        assert len(times) / 100 == pytest.approx((10 * 3600 + 1000 * 360) / 3960, rel=0.2)

    @pytest.mark.parametrize(
        "process",
        [
            {"process": "onoff", "on_rate_per_h": 1e-300, "mean_on_s": 1, "mean_off_s": 1},
            {"process": "mmpp", "rates_per_h": [1e-300, 0], "mean_dwell_s": [1, 1]},
        ],
    )
    def test_a_process_that_almost_never_brings_a_job_still_lets_each_step_end(
        self, process: dict[str, Any]
    ) -> None:
        """Each gap draws a bounded number of values; where none brought an arrival the time
        drawn comes out as a silent gap that the workload waits out, so a step returns (and a
        server's limits can stop the episode) instead of spinning inside one draw."""
        import threading

        import numpy as np

        from twin.schema.scenario import WorkloadConfig
        from twin.sim.arrivals import DRAWS_PER_GAP, Silent, gaps

        arrivals = WorkloadConfig.model_validate(
            {"arrivals": process, "service_s": {"dist": "constant", "value": 1}}
        ).arrivals
        drawn: list[float] = []
        rng = np.random.default_rng(0)
        reader = threading.Thread(target=lambda: drawn.append(next(gaps(arrivals, rng))),
                                  daemon=True)  # fmt: skip
        reader.start()
        reader.join(timeout=10)
        assert drawn, f"no gap came out of {DRAWS_PER_GAP} draws: the process spins"
        assert isinstance(drawn[0], Silent)
        assert drawn[0] > 0
        assert self.count(process, 3600) == []

    def test_a_diurnal_period_under_a_second_is_refused_naming_the_field(self) -> None:
        from pydantic import ValidationError

        with pytest.raises(ValidationError, match=r"arrivals\.diurnal\.period_s"):
            self.count({"process": "diurnal", "mean_rate_per_h": 60, "period_s": 5e-324}, 60)

    @pytest.mark.parametrize(
        "process",
        [
            {"process": "onoff", "on_rate_per_h": 3600, "mean_on_s": 1, "mean_off_s": 60},
            {"process": "diurnal", "mean_rate_per_h": 60, "amplitude": 1.0, "period_s": 600},
        ],
    )
    def test_silent_gaps_leave_the_arrival_times_as_they_were(
        self, process: dict[str, Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The same seed brings its jobs at the same times however many silent gaps the
        workload waits out on the way (here a gap of at most 2 draws: most are silent)."""
        import twin.sim.arrivals

        unbounded = self.count(process, 6 * 3600)
        monkeypatch.setattr(twin.sim.arrivals, "DRAWS_PER_GAP", 2)
        assert len(unbounded) > 50
        assert self.count(process, 6 * 3600) == pytest.approx(unbounded, abs=1e-6)


class TestEventCost:
    def test_work_grows_with_events_not_with_the_simulated_span(self) -> None:
        """The same 500 jobs stretched over 100x the time produce the same number of records."""

        def records(stretch: float) -> int:
            sc = tiny(
                tenants=[tenant(workloads=[workload(
                    max_jobs=500, arrivals={"process": "poisson", "rate_per_h": 6 / stretch},
                    service_s={"dist": "constant", "value": 600 * stretch})])],
            )  # fmt: skip
            return len(play(sc))

        assert records(100.0) == records(1.0)

    def test_a_run_without_decision_points_streams_its_log_in_bounded_chunks(self) -> None:
        """Nothing waits for the end of a replay-like run: memory stays bounded by the chunk."""
        sc = tiny(
            tenants=[tenant(workloads=[workload(
                max_jobs=20_000, arrivals={"process": "poisson", "rate_per_h": 60},
                service_s={"dist": "constant", "value": 60})])],
        )  # fmt: skip
        driver = Driver(sc, seed=0, log=EventLog("test", keep=False))
        chunks: list[int] = []
        driver.log.subscribe(lambda chunk: chunks.append(len(chunk)))
        assert driver.advance() is None
        assert sum(chunks) > 4 * FLUSH_EVERY
        assert max(chunks) < 2 * FLUSH_EVERY


class TestJobRecordSource:
    def test_records_arrive_at_their_submit_times_and_run_for_their_service_time(self) -> None:
        from twin.sim.jobrecord import JobRecord

        records = [
            JobRecord("r1", submit_s=10.0, service_s=100.0, gpus=2, tenant="t"),
            JobRecord("r2", submit_s=10.0, service_s=50.0, gpus=1, tenant="t"),
            JobRecord("r3", submit_s=500.0, service_s=20.0, gpus=0.5, tenant="t"),
        ]
        sc = tiny(
            tenants=[tenant(initial_gpus={"gpu": 3})],
            scaling={"model": "amdahl", "serial_fraction": 0.2},
        )
        events = play(sc, sources=[records])
        arrived = [(e["job_id"], e["t_s"]) for e in kinds(events, "job_arrived")]
        assert arrived == [("r1", 10.0), ("r2", 10.0), ("r3", 500.0)]
        # The observed service time is reproduced on the reference GPU, whatever the scaling.
        finished = {e["job_id"]: e["run_s"] for e in kinds(events, "job_finished")}
        assert finished == pytest.approx({"r1": 100.0, "r2": 50.0, "r3": 20.0})
        assert events[-1]["reason"] == "drained"
