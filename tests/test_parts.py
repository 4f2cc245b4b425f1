"""Each part of the cluster model is built and exercised alone: the cluster's state, and a fake
for every sibling it calls. No part needs a whole model."""

from __future__ import annotations

from typing import Any

import pytest
import simpy

from tests.conftest import tiny
from tests.rounds import commit
from twin.eventlog.log import Record
from twin.schema import records
from twin.schema.actions import ProvisionAction, TenantObservation
from twin.schema.scenario import ClusterScenario, DecisionConfig
from twin.sim import scenarios
from twin.sim.arrivals import record_arrivals
from twin.sim.billing import Billing
from twin.sim.decisions import Decisions, decision_ticks
from twin.sim.driver import Driver
from twin.sim.encode import PlanOption
from twin.sim.failures import node_failures
from twin.sim.jobrecord import JobRecord
from twin.sim.jobs import Job
from twin.sim.ledger import Ledger
from twin.sim.market.mediator import Mediator
from twin.sim.observe import observe, observe_flat
from twin.sim.placement import CounterPlacement
from twin.sim.pools import Holding
from twin.sim.provisioning import Provisioning
from twin.sim.queues import JobQueue, make_queue
from twin.sim.rng import Streams
from twin.sim.round import RoundInputs
from twin.sim.scheduler import Scheduler
from twin.sim.scoring import PlanScorer
from twin.sim.state import ClusterState


def state_of(cfg: ClusterScenario) -> tuple[ClusterState, list[Record]]:
    log: list[Record] = []
    return ClusterState.build(simpy.Environment(), log.append, Streams(0), cfg), log


def kinds(log: list[Record]) -> list[str]:
    return [rec.kind for rec in log]


class Calls:
    """A fake sibling: records every call made on it, by method name."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> None:
            self.calls.append((name, args))

        return call


def every_trigger() -> Decisions:
    return Decisions(
        DecisionConfig(
            interval_s=None,
            triggers=["arrival", "completion", "gpus_ready", "failure", "budget_threshold"],
        )
    )


POOL = {"name": "gpu", "gpu_type": "a100", "max_gpus": 8, "price_usd_per_gpu_h": 3.6,
        "provision_delay_s": {"dist": "constant", "value": 60}}  # fmt: skip


class TestProvisioning:
    def test_a_request_is_ready_after_its_delay_then_frees_room_and_asks_for_a_decision(
        self,
    ) -> None:
        state, log = state_of(tiny(pools=[POOL], tenants=[{"name": "t", "policy": "static"}]))
        billing, runs, decisions = Calls(), Calls(), every_trigger()
        provisioning = Provisioning(state, billing, runs, decisions)
        provisioning.provision(0, 0, 3)
        state.env.run()
        assert kinds(log) == ["gpus_requested", "gpus_ready"]
        assert state.env.now == 60
        assert state.holdings[0][0].ready == 3
        assert billing.calls == [("set_billed", (state.holdings[0][0], 3))]
        assert runs.calls == [("room_freed", (0,))]
        assert decisions.pending == {0: ["gpus_ready"]}

    def test_a_request_beyond_the_pool_is_clamped_and_said_so(self) -> None:
        state, log = state_of(tiny(pools=[POOL], tenants=[{"name": "t", "policy": "static"}]))
        Provisioning(state, Calls(), Calls(), every_trigger()).provision(0, 0, 20)
        clamped = log[0]
        assert isinstance(clamped, records.ActionClamped)
        assert (clamped.requested, clamped.granted, clamped.reason) == (20, 8, "pool_full")


class TestBilling:
    def test_a_spent_budget_is_logged_and_handed_to_the_exhaustion_hook(self) -> None:
        cfg = tiny(tenants=[{"name": "t", "policy": "static", "budget_usd": 1.0}])
        state, log = state_of(cfg)
        exhausted: list[Ledger] = []
        billing = Billing(state, every_trigger(), exhausted.append)
        billing.set_billed(state.holdings[0][0], 1)  # $3.6/h: a dollar lasts 1000 s
        state.env.run()
        assert exhausted == [state.ledgers[0]]
        assert "budget_exhausted" in kinds(log)
        assert round(state.env.now) == 1000


class TestScheduler:
    def scheduler(self, state: ClusterState, left: list[int]) -> tuple[Scheduler, Calls]:
        billing = Calls()
        cfg = tiny()
        placement = CounterPlacement(state.holdings)
        scheduler = Scheduler(state, cfg, placement, billing=billing, scorer=Calls(),
                              decisions=every_trigger(), left=lambda: left.append(1))  # fmt: skip
        return scheduler, billing

    def test_a_job_that_fits_runs_and_its_end_earns_value_and_leaves_the_system(self) -> None:
        state, log = state_of(tiny())
        state.holdings[0][0].ready = 2
        left: list[int] = []
        scheduler, billing = self.scheduler(state, left)
        scheduler.admit(0, "j", gpus=2, work=600.0, priority=0, gpu_type=None)
        state.env.run()
        assert kinds(log) == ["job_arrived", "job_started", "job_finished"]
        assert [name for name, _ in billing.calls] == ["charge_wait", "earn"]
        assert left == [1]
        assert scheduler.jobs_in_system == 0

    def test_a_job_waits_in_its_queue_while_its_tenant_holds_no_gpus(self) -> None:
        state, log = state_of(tiny())
        scheduler, _ = self.scheduler(state, [])
        scheduler.admit(0, "j", gpus=1, work=60.0, priority=0, gpu_type=None)
        assert kinds(log) == ["job_arrived"]
        assert len(scheduler.queues[0]) == 1
        assert scheduler.queued_milli == [1000]


class TestArrivalsAndFailures:
    def test_trace_records_are_admitted_at_their_submit_times_then_the_source_closes(
        self,
    ) -> None:
        state, _ = state_of(tiny())
        admitted: list[tuple[float, str | None]] = []

        class Admit:
            efficiency = staticmethod(lambda gpus: 1.0)

            def admit(self, tenant: int, job_id: str | None, **_: Any) -> Job:
                admitted.append((state.env.now, job_id))
                return None  # type: ignore[return-value]  # the process ignores it

        closed: list[int] = []
        records = [JobRecord("a", 10.0, 60.0, 1, "t"), JobRecord("b", 25.0, 60.0, 1, "t")]
        state.env.process(record_arrivals(state, Admit(), records, lambda: closed.append(1)))
        state.env.run()
        assert admitted == [(10.0, "a"), (25.0, "b")]
        assert closed == [1]

    def test_a_failure_breaks_a_gpu_of_the_holding_that_holds_its_slot(self) -> None:
        pool = {**POOL, "mtbf_gpu_h": 1.0}
        state, _ = state_of(tiny(pools=[pool], tenants=[{"name": "t", "policy": "static"}]))
        state.holdings[0][0].ready = 8
        provisioning = Calls()
        state.env.process(node_failures(state, state.pools[0], provisioning, lambda: False))
        state.env.run(until=3600)
        assert provisioning.calls
        assert all(name == "fail_gpu" and args[0] is state.holdings[0][0]
                   for name, args in provisioning.calls)  # fmt: skip


class TestDecisions:
    def test_ticks_ask_every_tenant_until_nothing_can_change_for_two_ticks(self) -> None:
        env = simpy.Environment()
        decisions = Decisions(DecisionConfig(interval_s=10.0, triggers=[]))
        asked: list[float] = []
        settled = iter([False, True, True, True])

        def quiet() -> bool:
            asked.append(env.now)
            decisions.pending.clear()
            return next(settled)

        env.process(decision_ticks(env, decisions, tenants=2, interval_s=10.0,
                                   over=lambda: False, settled=quiet))  # fmt: skip
        env.run()
        assert asked == [10.0, 20.0, 30.0]


class TestScorerAndMediator:
    def test_without_kernel_jobs_a_round_scores_nothing(self) -> None:
        state, log = state_of(tiny())
        scorer = PlanScorer(state, tiny(), kernel_jobs=False)
        queues: list[JobQueue] = [make_queue("fifo")]
        scorer.score_round([0], queues)
        assert log == []
        assert scorer.kernel_calls == 0

    def test_a_round_releases_and_grants_through_provisioning_and_credits_every_tenant(
        self,
    ) -> None:
        cfg = tiny(tenants=[{"name": "a", "policy": "static"}, {"name": "b", "policy": "static"}])
        state, log = state_of(cfg)

        class Waiting:
            def __init__(self) -> None:
                self.queues: list[JobQueue] = [make_queue("fifo"), make_queue("fifo")]
                self.queued_milli = [0, 0]

            def start_placed(self, job: Job, pool: int, option: PlanOption) -> bool:
                return False

        provisioning = Calls()
        mediator = Mediator(state, cfg, provisioning=provisioning, billing=Calls(),
                            scheduler=Waiting(), settle_reward=lambda t: 1.5)  # fmt: skip
        out = mediator.commit(RoundInputs([
            ("a", ProvisionAction(provision={"gpu": 3})),
            ("b", ProvisionAction(provision={"gpu": -1})),
        ]))  # fmt: skip
        assert provisioning.calls == [("release", (1, 0, 1)), ("provision", (0, 0, 3))]
        assert out["a"].granted == {"gpu": 3}
        assert out["a"].reward == 1.5
        assert kinds(log) == ["round_credited", "round_credited"]


def test_holdings_start_empty_and_ledgers_unspent() -> None:
    state, _ = state_of(tiny())
    h: Holding = state.holdings[0][0]
    assert (h.ready, h.billed, state.ledgers[0].spent_usd, state.ended) == (0, 0, 0.0, None)


def test_an_observation_reads_the_state_and_the_waiting_jobs_alone() -> None:
    state, _ = state_of(tiny())
    state.holdings[0][0].ready = 2

    class Waiting:
        def __init__(self) -> None:
            self.queues: list[JobQueue] = [make_queue("fifo")]
            self.queued_milli = [0]

    view = observe(state, Waiting(), Calls(), 0, ["tick"])  # type: ignore[arg-type]
    assert (view.tenant, view.reasons, view.queue_length) == ("t", ["tick"], 0)
    assert [(p.name, p.ready) for p in view.pools] == [("gpu", 2)]
    assert observe_flat(state, Waiting(), 0)[:4] == (0.0, float("inf"), 0.0, 0)


def test_a_long_run_collects_rarely_and_puts_the_collector_back() -> None:
    import gc

    from twin.sim.collector import YOUNG, collecting_rarely

    before = gc.get_threshold()
    with collecting_rarely():
        assert gc.get_threshold()[0] == YOUNG
    assert gc.get_threshold() == before


@pytest.mark.parametrize("name", ["market", "default"])
def test_an_observation_validates_again_to_itself_and_its_json(name: str) -> None:
    driver = Driver(scenarios.load_cluster(name), seed=3)
    seen = 0
    while seen < 40 and (batch := driver.advance()) is not None:
        for tenant in batch.reasons:
            view = driver.observe(tenant)
            again = TenantObservation.model_validate(view.model_dump())
            assert again == view
            assert again.model_dump_json() == view.model_dump_json()
            seen += 1
        commit(driver)
    assert seen >= 10
