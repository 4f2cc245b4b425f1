"""The welfare bound: what a planner with hindsight could reach, with GPUs movable between tenants
(pooled) and with holdings kept per tenant (separable). No schedule the twin plays beats it: not
the brute-force optimum of a tiny scenario, not the tenants' own policies, not agents that
trade. `market-scarce` has trade headroom; `market` has none."""

from __future__ import annotations

import itertools
import statistics
import subprocess
import sys
from typing import Any

import orjson
import pyarrow.parquet as pq
import pytest

from tests.conftest import kinds
from twin.bound.program import LOOSE, Tightness, lost_s, solve
from twin.bound.run import BOUND_FILE, BOUND_TABLE, SeedBound, bound_seed
from twin.bound.workload import RealisedJob
from twin.eventlog.log import EventLog
from twin.rl.opponents import opponents
from twin.rl.table import Table
from twin.schema.actions import Bundle, ProvisionAction
from twin.schema.scenario import ClusterScenario
from twin.sim import scenarios
from twin.sim.driver import Driver

TRADE_HEADROOM_FLOOR = 0.05  # of the bound, on average over seeds 0-3 of market-scarce


def tiny() -> ClusterScenario:
    """Two tenants, one pool of three GPUs, two decision rounds: small enough to try every
    sequence of moves."""

    def workload(rate_per_h: float, service_s: float) -> dict[str, Any]:
        return {"arrivals": {"process": "poisson", "rate_per_h": rate_per_h},
                "gpus": {"dist": "constant", "value": 1},
                "service_s": {"dist": "constant", "value": service_s}}  # fmt: skip

    return ClusterScenario.model_validate({
        "name": "tiny", "horizon_s": 2700,
        "pools": [{"name": "gpu", "gpu_type": "a100", "max_gpus": 3, "price_usd_per_gpu_h": 2.0,
                   "billing": "from_request",
                   "provision_delay_s": {"dist": "constant", "value": 300}}],
        "tenants": [
            {"name": "a", "initial_gpus": {"gpu": 1}, "value_usd_per_gpu_h": 8.0,
             "sla_usd_per_job_h": 1.0, "policy": "static", "workloads": [workload(4, 900)]},
            {"name": "b", "value_usd_per_gpu_h": 6.0, "sla_usd_per_job_h": 0.5,
             "policy": "static", "workloads": [workload(3, 600)]},
        ],
        "decisions": {"interval_s": 900, "triggers": []},
    })  # fmt: skip


MOVES = (-1, 0, 1, 2)  # GPUs a tenant asks for (or releases) in a round
TRADES = (None, ("a", "b"), ("b", "a"))  # no trade, or one idle GPU handed over for $1


def welfare(scenario: ClusterScenario, seed: int, moves: tuple[int, ...],
            trades: tuple[tuple[str, str] | None, ...]) -> float:  # fmt: skip
    """Every tenant's return together, the tenants moving as `moves` says round by round (in
    tenant order) and trading as `trades` says."""
    driver: Driver[Any, ProvisionAction] = Driver(scenario, seed=seed)
    move, trade = iter(moves), iter(trades)
    while (batch := driver.advance()) is not None:
        book = driver.book()
        for tenant in batch.reasons:
            delta = next(move, 0)
            book.propose(tenant, ProvisionAction(provision={"gpu": delta} if delta else {}))
        deal = next(trade, None)
        if deal is not None:
            made = book.offer(deal[0], deal[1], Bundle(gpus={"gpu": 1}), Bundle(usd=1.0))
            assert made is not None
            book.answer(deal[1], made.offer_id, True)
        driver.commit(book)
    return sum(driver.settlement(t)[1] for t in driver.tenants)


def test_a_gpu_requested_mid_slot_is_lost_to_the_slot_only_while_it_provisions() -> None:
    assert lost_s(0.0, 300.0, 0.0, 900.0) == 300.0
    assert lost_s(0.0, 1200.0, 900.0, 900.0) == 300.0
    assert lost_s(0.0, 300.0, 900.0, 900.0) == 0.0
    assert lost_s(600.0, 600.0, 0.0, 900.0) == 300.0


def test_the_bound_holds_the_brute_force_optimum_of_a_tiny_scenario() -> None:
    scenario = tiny()
    bound = bound_seed(scenario, 3)
    rounds = 2
    best_alone = max(welfare(scenario, 3, m, ()) for m in itertools.product(MOVES, repeat=4))
    best_trading = max(
        welfare(scenario, 3, m, t)
        for m in itertools.product(MOVES, repeat=4)
        for t in itertools.product(TRADES, repeat=rounds)
    )
    assert best_alone <= bound.separable.welfare_usd
    assert best_trading <= bound.pooled.welfare_usd
    assert bound.separable.welfare_usd <= bound.pooled.welfare_usd + 1e-6
    assert bound.feasible_usd <= best_alone + 1e-9
    assert bound.planner_usd <= bound.separable.welfare_usd
    # How tight: within a few dollars of the optimum on a workload worth about ten.
    assert bound.pooled.welfare_usd - best_trading < 4.0
    # Every tightness is a bound still, and each is at least as tight as the linear program.
    loose = bound_seed(scenario, 3, tightness=LOOSE)
    for tightness in (Tightness(steps_per_slot=3), Tightness(integer_gpus=True)):
        tighter = bound_seed(scenario, 3, tightness=tightness)
        assert best_trading <= tighter.pooled.welfare_usd <= loose.pooled.welfare_usd + 1e-6
        assert best_alone <= tighter.separable.welfare_usd
    assert bound.pooled.welfare_usd <= loose.pooled.welfare_usd + 1e-6


def test_a_job_that_cannot_finish_by_the_horizon_earns_nothing_in_the_bound() -> None:
    """Tenant a holds a GPU; its one job arrives 700 s before the end and needs 1,800 s. The
    linear program earns the 39% it can run; whole jobs earn nothing, as the twin would."""
    late = RealisedJob("late", 0, 2000.0, 1.0, 10.0, 0.0, (1800.0,))
    soon = RealisedJob("soon", 0, 0.0, 1.0, 10.0, 0.0, (1800.0,))
    plans = {
        name: solve(tiny(), jobs, "pooled", slot_s=900.0, delay_s=[300.0], tightness=tightness)
        for name, jobs, tightness in [("loose", [late], LOOSE), ("whole", [late], Tightness()),
                                      ("whole, finishable", [soon], Tightness())]
    }  # fmt: skip
    assert plans["loose"].value_usd == pytest.approx(10.0 * 700 / 1800)
    assert plans["whole"].value_usd == 0.0
    assert plans["whole"].welfare_usd <= plans["loose"].welfare_usd
    assert plans["whole, finishable"].value_usd == pytest.approx(10.0)


@pytest.fixture(scope="module")
def scarce() -> list[SeedBound]:
    scenario = scenarios.as_cluster(scenarios.load("market-scarce"))
    return [bound_seed(scenario, seed) for seed in range(4)]


def test_market_scarce_holds_trade_headroom_above_its_floor(scarce: list[SeedBound]) -> None:
    headroom = statistics.fmean(r.headroom_usd for r in scarce)
    bound = statistics.fmean(r.bound_usd for r in scarce)
    assert headroom >= TRADE_HEADROOM_FLOOR * bound
    assert all(r.headroom_usd > 0 for r in scarce)


def test_the_planner_plays_the_bound_s_holdings_closer_to_it_than_the_own_policies(
    scarce: list[SeedBound],
) -> None:
    assert all(r.planner_usd <= r.separable.welfare_usd for r in scarce)
    planner = statistics.fmean(r.planner_usd for r in scarce)
    assert planner > statistics.fmean(r.feasible_usd for r in scarce)


def test_on_market_the_planner_beats_the_tenants_own_policies() -> None:
    market = scenarios.as_cluster(scenarios.load("market"))
    found = [bound_seed(market, seed) for seed in range(4)]
    assert statistics.fmean(r.planner_usd for r in found) > statistics.fmean(
        r.feasible_usd for r in found
    )
    assert all(0 <= r.planner_gap_usd <= r.bound_usd - r.feasible_usd for r in found)


def test_a_day_of_openb_is_bounded_with_its_shared_nodes_as_every_tenant_s() -> None:
    day = ["trace.start_h=3552", "trace.end_h=3576", "horizon_s=86400"]
    # The separable program stops at its time limit: the bound is the best one the solver proved.
    r = bound_seed(scenarios.as_cluster(scenarios.load("openb-tenants", day)), 0, time_limit_s=5)
    assert r.jobs > 500
    assert r.separable.welfare_usd <= r.pooled.welfare_usd + 1e-6
    assert r.feasible_usd <= r.separable.welfare_usd
    assert "pool" in r.pooled.held_gpus  # the cloud pool, provisioned; the shared nodes are not
    assert set(r.pooled.held_gpus["pool"]) == {"cloud"}


def test_market_has_no_trade_headroom() -> None:
    market = bound_seed(scenarios.as_cluster(scenarios.load("market")), 0)
    assert market.headroom_usd < 0.01 * market.bound_usd


def test_trading_agents_never_beat_the_bound(scarce: list[SeedBound]) -> None:
    scenario = scenarios.as_cluster(scenarios.load("market-scarce"))
    for r in scarce[:2]:
        for kind in ("negotiator", "greedy"):
            log = EventLog("t", keep=True)
            driver: Driver[Any, ProvisionAction] = Driver(scenario, seed=r.seed, log=log)
            ego = driver.tenants[0]
            table = Table(driver, ego, opponents(kind, driver.tenants, ego, {}, r.seed))
            table.to_turn()
            while driver.ended is None:
                table.play(ProvisionAction())
            played = sum(driver.settlement(t)[1] for t in driver.tenants)
            assert kinds(list(log.dicts()), "episode_ended")  # played to its end
            assert played <= r.bound_usd


def test_twin_bound_prints_both_bounds_and_writes_json_and_parquet(tmp_path: Any) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "twin", "bound", "--scenario", "market-scarce", "--seeds", "0-1",
         "--out", str(tmp_path)], capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "pooled" in out.stdout
    assert "separable" in out.stdout
    assert "headroom: what trade adds" in " ".join(out.stdout.split())
    table = pq.read_table(tmp_path / BOUND_TABLE).to_pylist()
    assert [row["seed"] for row in table] == [0, 1]
    assert all(row["pooled_usd"] >= row["separable_usd"] - 1e-6 for row in table)
    assert all(row["planner_usd"] <= row["separable_usd"] for row in table)
    assert (tmp_path / BOUND_FILE).read_text().count('"relaxes"') == 1
    assert all(row["planner_gap_usd"] >= 0 for row in table)
    assert " gap " in out.stdout


def test_twin_bound_fractional_jobs_is_the_looser_linear_program(tmp_path: Any) -> None:
    found = {}
    for flags in ([], ["--fractional-jobs"]):
        out = tmp_path / ("lp" if flags else "milp")
        subprocess.run([sys.executable, "-m", "twin", "bound", "--scenario", "market",
                        "--out", str(out), *flags], capture_output=True, check=True)  # fmt: skip
        found[bool(flags)] = pq.read_table(out / BOUND_TABLE).to_pylist()[0]
        relaxes = " ".join(orjson.loads((out / BOUND_FILE).read_bytes())["relaxes"])
        assert ("earns that fraction" in relaxes) is bool(flags)
    assert found[False]["pooled_usd"] < found[True]["pooled_usd"]  # whole jobs: tighter


def test_a_slot_of_zero_is_refused_where_it_is_parsed() -> None:
    out = subprocess.run([sys.executable, "-m", "twin", "bound", "--slot-s", "0"],
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert out.returncode == 2
    *usage, said = out.stderr.strip().splitlines()
    assert usage[0].startswith("usage: twin bound ")
    assert said == "twin bound: error: argument --slot-s: above 0 (got 0)"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--scenario", "market", "--time-limit-s", "1e-9"], "bound not reached (time_limit)"),
        (["--scenario", "openb-tenants"], "has no horizon_s"),
        (["--scenario", "market", "--seeds", "x"], "--seeds: 'x'"),
    ],
)
def test_a_bound_that_cannot_be_reached_is_one_coded_line(args: list[str], words: str) -> None:
    out = subprocess.run([sys.executable, "-m", "twin", "bound", *args], capture_output=True,
                         text=True, check=False)  # fmt: skip
    assert out.returncode == 2
    assert words in out.stderr
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
