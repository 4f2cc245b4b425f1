"""Replay fidelity: node-level clusters, placement policies, the scheduler model, calibration."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import TRACES, twin_command
from twin.cli.main import main
from twin.replay import calibrate as calibrate_module
from twin.replay.calibrate import OVERLOAD_P99, Point, fit_score, split_time_s
from twin.replay.run import ReplayOptions, replay
from twin.replay.tenant_delays import ReplayMetrics
from twin.replay.trace import Trace
from twin.replay.window import Window
from twin.schema.scenario import ClusterScenario
from twin.schema.scheduling import ReplayParams, SchedulerConfig
from twin.schema.vocabulary import CALIBRATION_FILE, EVENTS_FILE, PLACEMENTS, WHAT_IF_FILE
from twin.sim.jobrecord import JobRecord
from twin.sim.runner import run_episode

OPENB = TRACES / "alibaba-gpu-v2023-openb/openb_pod_list_default.csv"
OPENB_NODES = TRACES / "alibaba-gpu-v2023-openb/openb_node_list_gpu_node.csv"
SPOT_NODES = TRACES / "alibaba-spot-gpu-v2026-nodes/node_info_df.csv"


def node_scenario(placement: str = "best_fit", **scheduler: object) -> ClusterScenario:
    """Two 4-GPU nodes and one 8-GPU node in one pool, one tenant holding all of it."""
    return ClusterScenario.model_validate({
        "name": "nodes",
        "pools": [{"name": "a", "gpu_type": "a100", "max_gpus": 16, "price_usd_per_gpu_h": 1}],
        "tenants": [{"name": "t", "policy": "static", "initial_gpus": {"a": 16}}],
        "decisions": {"interval_s": None, "triggers": []},
        "nodes": {"placement": placement, "groups": [
            {"pool": "a", "count": 2, "gpus": 4, "cpu_milli": 32000},
            {"pool": "a", "count": 1, "gpus": 8, "cpu_milli": 64000}]},
        "scheduler": scheduler,
    })  # fmt: skip


def job(i: int, submit_s: float, gpus: float, service_s: float = 100.0, **kw: object) -> JobRecord:
    return JobRecord(f"j{i}", submit_s, service_s, gpus, "t", **kw)  # type: ignore[arg-type]


def events(out: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (out / EVENTS_FILE).read_text().splitlines()]


def max_concurrent_gpus(log: list[dict[str, object]]) -> float:
    """The most GPUs running at once according to the log."""
    running: dict[object, float] = {}
    peak = 0.0
    for e in log:
        if e["kind"] == "job_started":
            running[e["job_id"]] = float(e["gpus"])  # type: ignore[arg-type]
            peak = max(peak, sum(running.values()))
        elif e["kind"] in {"job_finished", "job_failed", "job_interrupted"}:
            running.pop(e["job_id"], None)
    return peak


class TestNodeLevelCluster:
    def test_node_groups_must_add_up_to_each_pool(self) -> None:
        with pytest.raises(ValueError, match="its nodes hold 8 GPUs but max_gpus is 16"):
            ClusterScenario.model_validate({
                **node_scenario().model_dump(exclude={"nodes"}),
                "nodes": {"groups": [{"pool": "a", "count": 1, "gpus": 8}]},
            })  # fmt: skip

    def test_a_job_waits_when_the_free_gpus_are_spread_over_nodes(self, tmp_path: Path) -> None:
        # 3 GPUs on each 4-GPU node and 6 on the 8-GPU node leave 1 + 1 + 2 = 4 GPUs free but
        # no node with 4: the 4-GPU job waits for a node to free (a counter pool would not).
        jobs = [job(0, 0, 3, 1000), job(1, 0, 3, 1000), job(2, 0, 6, 1000), job(3, 1, 4, 10)]
        run_episode(node_scenario(), out_dir=tmp_path, sources=[jobs])
        started = {e["job_id"]: e for e in events(tmp_path) if e["kind"] == "job_started"}
        assert started["j3"]["t_s"] == 1000.0
        assert started["j3"]["wait_s"] == 999.0

    def test_shares_of_one_gpu_pack_onto_the_same_gpu(self, tmp_path: Path) -> None:
        # Sixteen 0.5-GPU jobs fill the 16 GPUs exactly (two per GPU); a 17th waits.
        jobs = [job(i, 0, 0.5, 100) for i in range(33)]
        run_episode(node_scenario(), out_dir=tmp_path, sources=[jobs])
        log = events(tmp_path)
        assert max_concurrent_gpus(log) == 16.0
        waits = [e["wait_s"] for e in log if e["kind"] == "job_started"]
        assert waits.count(0.0) == 32
        assert max(waits) == 100.0

    def test_a_gang_spans_nodes_and_cpu_limits_a_node(self, tmp_path: Path) -> None:
        jobs = [job(0, 0, 12, 100), job(1, 1, 0, 50, cpu_milli=40000), job(2, 2, 4, 10)]
        run_episode(node_scenario(), out_dir=tmp_path, sources=[jobs])
        started = {e["job_id"]: e for e in events(tmp_path) if e["kind"] == "job_started"}
        assert started["j0"]["wait_s"] == 0.0  # 12 GPUs: the 8-GPU node and a 4-GPU node
        assert started["j1"]["wait_s"] == 0.0  # 40 cores fit only on the 8-GPU node's 64
        assert started["j2"]["wait_s"] == 0.0  # the other 4-GPU node is still free


def two_pools(placement: str = "best_fit") -> ClusterScenario:
    """A cheap pool of eight 2-GPU nodes and a dearer one of one 8-GPU node (openb's T4 and G2
    nodes, in small), one tenant holding both."""
    return ClusterScenario.model_validate({
        "name": "two-pools",
        "pools": [
            {"name": "small", "gpu_type": "t4", "max_gpus": 16, "price_usd_per_gpu_h": 0.5},
            {"name": "big", "gpu_type": "a100", "max_gpus": 8, "price_usd_per_gpu_h": 2.0}],
        "tenants": [{"name": "t", "policy": "static",
                     "initial_gpus": {"small": 16, "big": 8}}],
        "decisions": {"interval_s": None, "triggers": []},
        "nodes": {"placement": placement, "groups": [
            {"pool": "small", "count": 8, "gpus": 2, "cpu_milli": 16000},
            {"pool": "big", "count": 1, "gpus": 8, "cpu_milli": 64000}]},
    })  # fmt: skip


@pytest.mark.parametrize("policy", PLACEMENTS)
def test_a_pod_spans_nodes_only_when_wider_than_every_node(policy: str, tmp_path: Path) -> None:
    """As Kubernetes has it, a pod lands on one node: a 4-GPU job waits for, or takes, the
    8-GPU node, however cheap the 2-GPU nodes are; only a job wider than every node (10 GPUs
    here) spans several, a gang."""
    jobs = [job(0, 0, 4, 100), job(1, 1, 4, 100), job(2, 2, 10, 10)]
    run_episode(two_pools(policy), out_dir=tmp_path, sources=[jobs])
    log = events(tmp_path)
    started = {e["job_id"]: e for e in log if e["kind"] == "job_started"}
    assert (started["j0"]["pool"], started["j1"]["pool"]) == ("big", "big")
    assert (started["j0"]["wait_s"], started["j1"]["wait_s"]) == (0.0, 0.0)
    gang = started["j2"]  # 10 GPUs: over five 2-GPU nodes, at once
    assert (gang["pool"], gang["wait_s"]) == ("small", 0.0)


def test_a_policy_picks_its_node_among_every_pool_s_nodes() -> None:
    """With the 8-GPU node half used, best fit puts a 1-GPU job on a 2-GPU node (the tightest,
    in whichever pool), spread on the 8-GPU node (the roomiest), whatever the prices."""
    import simpy

    from twin.sim.jobs import Job
    from twin.sim.node_placement import NodePlacement
    from twin.sim.pools import Holding, Pool

    chosen = {}
    for policy in ("best_fit", "spread"):
        scenario = two_pools(policy)
        pools = [Pool(i, cfg, lambda: 0.0, lambda: 0.0) for i, cfg in enumerate(scenario.pools)]
        holdings = [Holding(0, pool, 0.0, ready=pool.cfg.max_gpus) for pool in pools]
        placement = NodePlacement([holdings], scenario.nodes, simpy.Environment())  # type: ignore[arg-type]
        four = Job("a", 0, 4.0, 4000, 0, 0, None, 0, 0, 0, 0, 1, 0)
        assert placement.fit(four) is holdings[1]
        placement.claim(four)
        one = Job("b", 0, 1.0, 1000, 0, 0, None, 0, 0, 0, 0, 1, 0)
        chosen[policy] = placement.fit(one).pool.cfg.name  # type: ignore[union-attr]
    assert chosen == {"best_fit": "small", "spread": "big"}


@pytest.mark.parametrize("policy", PLACEMENTS)
def test_every_policy_replays_openb_within_the_inventory(policy: str, tmp_path: Path) -> None:
    params = ReplayParams(placement=policy, capacity_share=0.01)  # type: ignore[arg-type]
    summary, report = replay(
        OPENB, ReplayOptions(cluster=OPENB_NODES, params=params), out_dir=tmp_path
    )
    assert report.placement is not None
    assert report.placement["placement"] == policy
    assert 0 <= float(report.placement["fragmentation"]) <= 1
    held = {p.name: p.held_gpu_h for p in summary.pools}
    for pool in summary.pools:
        assert pool.busy_gpu_h <= held[pool.name] + 1e-6, pool
    assert sum(report.cluster.values()) < 6212 // 50


def test_placement_policies_choose_different_nodes() -> None:
    """Best fit packs a 1-GPU job onto the partly used node, spread onto an empty one, first
    fit onto the lowest-numbered node that fits."""
    from twin.sim.node_placement import NodePlacement
    from twin.sim.nodes import Claim

    chosen = {}
    for policy in PLACEMENTS:
        scenario = node_scenario(policy)
        import simpy

        from twin.sim.jobs import Job
        from twin.sim.pools import Holding, Pool

        pool = Pool(0, scenario.pools[0], lambda: 0.0, lambda: 0.0)
        holding = Holding(0, pool, 0.0, ready=16)
        placement = NodePlacement([[holding]], scenario.nodes, simpy.Environment())  # type: ignore[arg-type]
        first = Job("a", 0, 6.0, 6000, 0, 0, None, 0, 0, 0, 0, 1, 0)
        assert placement.fit(first) is holding
        placement.claim(first)  # 6 GPUs: only the 8-GPU node (index 2) holds them
        assert first.claim.nodes == (2,)
        second = Job("b", 0, 1.0, 1000, 0, 0, None, 0, 0, 0, 0, 1, 0)
        for shape in (first, second, Job("c", 0, 4.0, 4000, 0, 0, None, 0, 0, 0, 0, 1, 0)):
            placement.arrived(shape)  # the workload FGD weighs: 6-, 1- and 4-GPU tasks
        assert placement.fit(second) is holding
        claim: Claim = second.claim
        chosen[policy] = claim.nodes[0]
    assert chosen["first_fit"] == 0
    assert chosen["best_fit"] == 2  # 2 GPUs left there: the tightest fit
    assert chosen["spread"] == 0  # an empty 4-GPU node (lowest-numbered of the two)
    assert chosen["fgd"] == 2  # a 4-GPU node kept whole still serves a 4-GPU task


class TestSchedulerModel:
    def test_cycles_and_bind_latency_delay_every_start(self, tmp_path: Path) -> None:
        jobs = [job(0, 0.0, 1), job(1, 3.0, 1), job(2, 12.5, 1)]
        run_episode(node_scenario(cycle_s=5.0, bind_s=1.0), out_dir=tmp_path, sources=[jobs])
        waits = [e["wait_s"] for e in events(tmp_path) if e["kind"] == "job_started"]
        assert waits == [1.0, 3.0, 3.5]  # to the next 5 s boundary, plus 1 s to bind

    def test_pods_per_cycle_spill_into_later_cycles(self, tmp_path: Path) -> None:
        jobs = [job(i, 0.5, 0.1) for i in range(5)]
        run_episode(node_scenario(cycle_s=2.0, pods_per_cycle=2), out_dir=tmp_path, sources=[jobs])
        waits = sorted(e["wait_s"] for e in events(tmp_path) if e["kind"] == "job_started")
        assert waits == [1.5, 1.5, 3.5, 3.5, 5.5]

    def test_an_unschedulable_job_waits_for_room_and_its_back_off(self, tmp_path: Path) -> None:
        # The 8-GPU node is busy until 25 s. A second 8-GPU job fails at 0 s (back-off 10 s),
        # is woken when the 1-GPU job ends at 10 s, fails again (back-off 20 s, to 30 s), is
        # woken at 25 s when the node frees, and starts when its back-off ends at 30 s. The
        # 1-GPU job behind it is never blocked.
        jobs = [job(0, 0, 8, 25), job(1, 0, 8, 10), job(2, 0, 1, 10)]
        scenario = node_scenario(cycle_s=1.0, backoff_s=10.0, backoff_max_s=40.0)
        run_episode(scenario, out_dir=tmp_path, sources=[jobs])
        started = {e["job_id"]: e for e in events(tmp_path) if e["kind"] == "job_started"}
        assert started["j2"]["t_s"] == 0.0
        assert started["j1"]["t_s"] == 30.0

    @pytest.mark.parametrize("cycle_s", [0.0, 1.0])
    def test_a_job_no_node_can_hold_fails_and_blocks_nothing(
        self, cycle_s: float, tmp_path: Path
    ) -> None:
        # 100 cores is more than any node has; 17 GPUs more than all 16 (a gang cannot help).
        jobs = [job(0, 0, 1, 10, cpu_milli=100_000), job(1, 0, 17, 10), job(2, 1, 1, 10)]
        run_episode(node_scenario(cycle_s=cycle_s), out_dir=tmp_path, sources=[jobs])
        log = events(tmp_path)
        failed = [(e["job_id"], e["reason"]) for e in log if e["kind"] == "job_failed"]
        assert failed == [("j0", "unschedulable: no node can hold it"),
                          ("j1", "unschedulable: no node can hold it")]  # fmt: skip
        assert [e["job_id"] for e in log if e["kind"] == "job_finished"] == ["j2"]

    def test_preemption_evicts_a_lower_priority_job_that_runs_again(self, tmp_path: Path) -> None:
        jobs = [job(0, 0, 8, 1000, priority=0.0), job(1, 10, 8, 100, priority=2.0)]
        scenario = node_scenario(cycle_s=1.0, preemption=True)
        run_episode(scenario, out_dir=tmp_path, sources=[jobs])
        log = events(tmp_path)
        interrupted = [e for e in log if e["kind"] == "job_interrupted"]
        assert [(e["job_id"], e["reason"]) for e in interrupted] == [("j0", "preempted")]
        assert interrupted[0]["lost_gpu_s"] == 8 * 10.0
        started = [(e["job_id"], e["t_s"]) for e in log if e["kind"] == "job_started"]
        # The victim fails at once (back-off 1 s) and starts when the node frees at 110 s.
        assert started == [("j0", 0.0), ("j1", 10.0), ("j0", 110.0)]

    def test_preemption_works_on_counter_pools_too(self, tmp_path: Path) -> None:
        scenario = node_scenario(cycle_s=1.0, preemption=True).model_copy(update={"nodes": None})
        jobs = [job(0, 0, 12, 1000, priority=0.0), job(1, 0, 4, 1000, priority=1.0),
                job(2, 10, 8, 100, priority=2.0)]  # fmt: skip
        run_episode(scenario, out_dir=tmp_path, sources=[jobs])
        interrupted = [e["job_id"] for e in events(tmp_path) if e["kind"] == "job_interrupted"]
        assert interrupted == ["j0"]  # the lowest priority first; one victim is enough

    @pytest.mark.parametrize("hold_s", [0.0, 60.0])
    def test_a_lost_bind_race_waits_out_the_winners_hold(
        self, hold_s: float, tmp_path: Path
    ) -> None:
        # 15 of 16 GPUs busy: each bind of a 1-GPU job loses its race with a chance of 15/16
        # and is retried every 15 s. With a hold, the winner keeps the node up to 60 s and the
        # first retry after that binds without racing again; without one, every retry races.
        scenario = node_scenario(
            cycle_s=1.0, backoff_s=15.0, backoff_max_s=15.0, bind_conflict=1.0,
            conflict_hold_s=hold_s,
        ).model_copy(update={"nodes": None})  # fmt: skip
        jobs = [job(0, 0, 15, 1e6)] + [job(i, 1000.0 * i, 1, 10) for i in range(1, 201)]
        run_episode(scenario, out_dir=tmp_path, sources=[jobs])
        waits = [e["wait_s"] for e in events(tmp_path) if e["kind"] == "job_started"][1:]
        assert len(waits) == 200
        if hold_s:
            assert set(waits) == {0.0, 15.0, 30.0, 45.0, 60.0}
            assert 0 < waits.count(0.0) < 40  # about 1 in 16 wins at once
        else:
            assert set(waits) <= {15.0 * k for k in range(200)}
            assert max(waits) > 300.0  # geometric: some lose many races in a row

    def test_a_quota_caps_a_tenants_gpus(self, tmp_path: Path) -> None:
        jobs = [JobRecord(f"q{i}", 0.0, 100.0, 4.0, "team") for i in range(4)]
        scenario = node_scenario(cycle_s=1.0, quota_gpus={"team": 8})
        run_episode(scenario, out_dir=tmp_path, sources=[jobs])
        assert max_concurrent_gpus(events(tmp_path)) == 8.0


def test_calibration_splits_the_span_past_a_sparse_lead_in() -> None:
    submits = [0.0] + [1000.0 + i for i in range(999)]
    assert split_time_s(submits) == pytest.approx((1000.0 + 9.99 + 1998.0) / 2, abs=1)


def test_twin_calibrate_writes_params_that_replay_uses(tmp_path: Path) -> None:
    """On DLRM (a few thousand GPU instances, so the search stays quick), fitted on even days:
    the fitted values are in calibration.json, the search improved on the plain scheduler,
    `--params` replays with them, and the odd days' tail is the trace's within 2x (a pool 2%
    below the peak demand: at the peaks new instances wait hours for others to leave)."""
    out = tmp_path / "cal"
    dlrm = TRACES / "alibaba-gpu-v2025-dlrm/disaggregated_DLRM_trace.csv"
    assert main(["calibrate", "--trace", str(dlrm), "--out", str(out), "--workers", "2",
                 "--split", "alternate-days", "--spread-seeds", "2"]) == 0  # fmt: skip
    result = json.loads((out / CALIBRATION_FILE).read_text())
    assert {"params", "ks_fit", "ks_validation", "tenants", "steps"} <= result.keys()
    # The fitted values on seeds 0-1: the first is the calibration's own validation.
    # Both parts' tails are reported: the days fitted on, and the days validated on.
    for part in ("fit_observed_tail_s", "fit_simulated_tail_s", "observed_tail_s",
                 "simulated_tail_s"):  # fmt: skip
        assert result[part]["jobs"] > 1000
        assert result[part]["p99"] is not None
    spread = result["seed_spread"]
    assert spread["seeds"] == [0, 1]
    assert spread["ks_validation"][0] == result["ks_validation"]
    assert spread["p99_simulated_s"][0] == result["simulated_tail_s"]["p99"]
    # The search at least halves the KS of its starting point (a plain 1 s scheduler).
    assert result["ks_fit"] < 0.5 * result["steps"][0]["ks"]
    assert 0 <= result["ks_validation"] <= 1
    seen, simulated = result["observed_tail_s"], result["simulated_tail_s"]
    assert seen["jobs"] == simulated["jobs"] > 0  # the same jobs, side by side
    # Tails by class of GPU count: DLRM's instances all ask one GPU.
    assert [c["gpu_class"] for c in result["class_tails"]] == ["1"]
    assert result["class_tails"][0]["observed"] == seen
    assert seen["p90"] <= seen["p99"] <= seen["max"]
    assert simulated["p90"] <= simulated["p99"] <= simulated["max"]
    assert seen["p99"] / 2 <= simulated["p99"] <= seen["p99"] * 2  # 9,506 s against 11,348 s
    assert result["ks_validation"] <= 0.2  # 0.199
    assert result["params"] == json.loads((dlrm.parent / "calibrated-params.json").read_text())
    replayed = tmp_path / "replay"
    assert main(["replay", "--trace", str(dlrm), "--params", str(out / CALIBRATION_FILE),
                 "--out", str(replayed)]) == 0  # fmt: skip
    report = json.loads((replayed / "replay.json").read_text())
    assert report["params"] == result["params"]
    assert result["params"]["demand_quantile"] == 1.0  # sized to the peak: the scalars queue
    # The replay with the fitted values is the one calibration validated on.
    assert report["queueing_delay"]["ks_distance"] == pytest.approx(result["ks_whole"])


def test_calibrating_a_window_fits_its_first_half_and_replays_on_the_same_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """And `--placement` keeps the node choice given rather than fitting one."""
    window = ["--start-h", "2780", "--max-jobs", "1500"]  # past openb's quiet lead-in
    nodes = ["--cluster", str(OPENB_NODES)]
    out = tmp_path / "cal"
    assert main(["calibrate", "--trace", str(OPENB), *nodes, *window, "--placement", "spread",
                 "--workers", "2", "--out", str(out)]) == 0  # fmt: skip
    assert capsys.readouterr().out.rstrip().endswith(" ".join(window))  # how to replay it
    result = json.loads((out / CALIBRATION_FILE).read_text())
    # Replays in two processes fit exactly what one process does.
    assert main(["calibrate", "--trace", str(OPENB), *nodes, *window, "--placement", "spread",
                 "--workers", "1", "--out", str(tmp_path / "alone")]) == 0  # fmt: skip
    alone = json.loads((tmp_path / "alone" / CALIBRATION_FILE).read_text())
    assert {k: v for k, v in alone.items() if k != "evaluations"} == {
        k: v for k, v in result.items() if k != "evaluations"
    }
    assert result["window"] == "submitted in [2780 h, end), first 1,500 jobs"
    assert result["params"]["placement"] == "spread"
    assert {step["placement"] for step in result["steps"]} == {None}  # never searched
    replayed = tmp_path / "replay"
    assert main(["replay", "--trace", str(OPENB), *nodes, *window, "--out", str(replayed),
                 "--params", str(out / CALIBRATION_FILE)]) == 0  # fmt: skip
    report = json.loads((replayed / "replay.json").read_text())
    assert report["jobs_replayed"] == 1500
    assert report["queueing_delay"]["ks_distance"] == pytest.approx(result["ks_whole"])


def test_tails_by_gpu_class_show_what_the_aggregate_hides() -> None:
    """openb's eight-GPU pods are 44 of 7,255: the aggregate p99 cannot show their tail; the
    per-class tails do (observed beside simulated, the same jobs)."""
    metrics = ReplayMetrics()
    openb = TRACES / "alibaba-gpu-v2023-openb"
    options = ReplayOptions(cluster=openb / "openb_node_list_gpu_node.csv",
                            params=ReplayParams.model_validate_json(
                                (openb / "calibrated-params.json").read_text()))  # fmt: skip
    replay(openb / "openb_pod_list_default.csv", options, metrics=metrics)
    tails = {c.gpu_class: c for c in calibrate_module._class_tails(metrics, lambda t: True)}
    assert {k: c.observed.jobs for k, c in tails.items()} == {
        "share": 3625, "1": 3556, "2": 15, "4": 15, "8+": 44}  # fmt: skip
    assert all(c.observed.jobs == c.simulated.jobs for c in tails.values())
    assert tails["8+"].observed.max == 412.0


def test_a_pool_whose_delay_tail_dwarfs_the_observed_one_scores_as_overloaded() -> None:
    """openb on 0.7% of its nodes matches the body of the observed delays through bursts of
    backlog: its p99 wait is over ten times the observed one. The fit scores such a point 1,
    whatever its KS; a point with a plausible tail scores its KS."""
    options = ReplayOptions(cluster=OPENB_NODES)
    mechanism = Point(cycle_s=1.0, backoff_s=1.0, backoff_max_s=10.0, retry_s=30.0,
                      bind_conflict=0.75, placement="best_fit")  # fmt: skip
    backlogged = replace(mechanism, capacity_share=0.007).params(ReplayParams())
    _, report = replay(OPENB, replace(options, params=backlogged))
    delay = report.queueing_delay
    assert delay is not None
    assert delay.ks_distance < 0.25
    p99 = delay.quantiles.index(0.99)
    assert delay.simulated[p99] > OVERLOAD_P99 * delay.observed[p99]  # type: ignore[operator]
    opened = Trace(OPENB, options.reading)  # read once, handed to each replay
    assert fit_score(opened, options, backlogged) == 1.0
    plausible = replace(mechanism, capacity_share=0.01).params(ReplayParams())
    _, report = replay(OPENB, replace(options, params=plausible))
    assert report.queueing_delay is not None
    assert fit_score(opened, options, plausible) == report.queueing_delay.ks_distance < 1


def test_a_what_if_over_placements_is_one_command(tmp_path: Path) -> None:
    assert main(["replay", "--trace", str(OPENB), "--cluster", str(OPENB_NODES),
                 "--placement", ",".join(PLACEMENTS), "--out", str(tmp_path)]) == 0  # fmt: skip
    rows = (tmp_path / WHAT_IF_FILE).read_text().splitlines()
    assert rows[0].startswith("placement,delay_p50_s,delay_p99_s")
    assert [r.split(",")[0] for r in rows[1:]] == list(PLACEMENTS)


def test_a_placement_to_keep_needs_an_inventory(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["calibrate", "--trace", str(OPENB), "--placement", "fgd", "--out", "unused"]
    assert main(args) == 2
    assert "--placement needs a node inventory (--cluster)" in capsys.readouterr().err


def test_a_trace_without_start_times_cannot_be_calibrated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    itp = Path(__file__).parents[1] / "traces/samples/itp_synthetic.csv"
    assert main(["calibrate", "--trace", str(itp), "--out", str(tmp_path)]) == 2
    assert "itp_synthetic.csv: records no start times" in capsys.readouterr().err


def test_bad_params_files_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "p.json"
    bad.write_text('{"params": {"capacity_share": 2}}')
    assert main(["replay", "--trace", str(OPENB), "--params", str(bad)]) == 2
    assert "p.json: params capacity_share" in capsys.readouterr().err


def test_spot_and_openb_inventories_give_node_groups_with_cpus() -> None:
    from twin.replay.load import inventory
    from twin.replay.reader import ReadLog

    inv = inventory(OPENB_NODES, None, ReadLog())
    assert sum(n for n in inv.shapes.values()) == 1213
    assert sum(g * n for (_, g, _), n in inv.shapes.items()) == 6212
    spot = inventory(SPOT_NODES, None, ReadLog())
    assert all(cpu > 0 for (_, _, cpu) in spot.shapes)
    per_model: dict[str, int] = defaultdict(int)
    for (model, gpus, _), n in spot.shapes.items():
        per_model[model] += gpus * n
    assert per_model == dict(spot.gpus)


def test_the_scheduler_section_is_left_out_of_dumps_when_unused() -> None:
    dumped = node_scenario().model_dump()
    assert "scheduler" not in dumped
    assert "scheduler" in node_scenario(cycle_s=1.0).model_dump()
    assert SchedulerConfig().cycles is False


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from([0, 100, 250, 500, 750, 1000]), min_size=4, max_size=4),
             min_size=1, max_size=12),
    st.sampled_from([(1, 0), (2, 0), (4, 0), (0, 250), (0, 500)]),
)  # fmt: skip
def test_fgd_growth_equals_recomputing_fragmentation(
    rows: list[list[int]], job_shape: tuple[int, int]
) -> None:
    """The per-node growth FGD ranks by is the measured fragmentation after minus before."""
    import numpy as np

    from twin.schema.scheduling import NodeGroup
    from twin.sim.fgd import fragmentation_growth
    from twin.sim.nodes import PoolNodes, TaskClass, fragmentation_milli

    pn = PoolNodes([NodeGroup(pool="a", count=len(rows), gpus=4)])
    for node, row in enumerate(rows):
        pn.change(node, (0, 1, 2, 3), 0, 0)
        for slot, free in enumerate(row):
            pn.change(node, (slot,), free - 1000, 0)
    mix = [(TaskClass(1, 0), 0.3), (TaskClass(2, 0), 0.2), (TaskClass(0, 300), 0.5)]
    whole, share = job_shape
    growth = fragmentation_growth(pn, whole, share, mix)
    before = fragmentation_milli(pn.free, pn.whole, mix)
    for node in np.flatnonzero(pn.feasible(whole, share, 0)):
        slots = pn.slots_for(int(node), whole, share, tight=True)
        pn.change(int(node), slots, -(share or 1000), 0)
        after = fragmentation_milli(pn.free, pn.whole, mix)[node]
        pn.change(int(node), slots, share or 1000, 0)
        assert growth[node] == pytest.approx(after - before[node])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 11), st.integers(1, 8)), max_size=60),
       st.integers(1, 8))  # fmt: skip
def test_whole_gpu_choices_from_the_kept_index_equal_a_pass_over_all_nodes(
    moves: list[tuple[int, int]], asked: int
) -> None:
    """best_fit's and spread's node for a whole-GPU job, read from nodes kept by free GPUs,
    is the one the pass over every node picks (the fewest or most free, lowest number)."""
    import numpy as np

    from twin.schema.scheduling import NodeGroup
    from twin.sim.nodes import PoolNodes

    pn = PoolNodes([NodeGroup(pool="a", count=8, gpus=8), NodeGroup(pool="a", count=4, gpus=4)])
    held: dict[int, list[tuple[int, ...]]] = defaultdict(list)
    for node, gpus in moves:  # take GPUs where they fit, else give back what the node holds
        if pn.whole[node] >= gpus:
            slots = pn.slots_for(node, gpus, 0, tight=True)
            pn.change(node, slots, -1000, 0)
            held[node].append(slots)
        elif held[node]:
            pn.change(node, held[node].pop(), 1000, 0)
        ok = pn.whole >= asked
        fewest = int(np.where(ok, pn.free_sum, np.iinfo(np.int64).max).argmin())
        most = int(np.where(ok, pn.free_sum, -1).argmax())
        expected = (fewest, most) if ok.any() else (None, None)
        assert (pn.whole_only_choice(asked, most_free=False),
                pn.whole_only_choice(asked, most_free=True)) == expected  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0, 1000]), min_size=8, max_size=8), min_size=1,
                max_size=12))  # fmt: skip
def test_whole_gpu_fragmentation_from_summaries_equals_the_per_gpu_measure(
    rows: list[list[int]],
) -> None:
    from twin.schema.scheduling import NodeGroup
    from twin.sim.nodes import PoolNodes, TaskClass, fragmentation_milli, whole_fragmentation_milli

    pn = PoolNodes([NodeGroup(pool="a", count=len(rows), gpus=8)])
    for node, row in enumerate(rows):
        taken = tuple(slot for slot, free in enumerate(row) if free == 0)
        pn.change(node, taken, -1000, 0)
    mix = [(TaskClass(1, 0), 0.5), (TaskClass(4, 0), 0.3), (TaskClass(16, 0), 0.2)]
    assert whole_fragmentation_milli(pn, mix).tolist() == pytest.approx(
        fragmentation_milli(pn.free, pn.whole, mix).tolist()
    )


def test_calibrating_on_alternate_days_fits_even_days_and_validates_on_odd_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    window = ["--start-h", "2780", "--max-jobs", "1500"]
    out = tmp_path / "cal"
    assert main(["calibrate", "--trace", str(OPENB), "--cluster", str(OPENB_NODES), *window,
                 "--placement", "first_fit", "--split", "alternate-days", "--workers", "2",
                 "--out", str(out)]) == 0  # fmt: skip
    printed = " ".join(capsys.readouterr().out.split())
    assert "fitted on the even days" in printed
    assert "validation (odd days)" in printed
    result = json.loads((out / CALIBRATION_FILE).read_text())
    assert result["split"] == "alternate-days"
    # The validation KS is the fitted params' KS over odd-day submissions, recomputed here.
    params = ReplayParams.model_validate(result["params"])
    options = ReplayOptions(cluster=OPENB_NODES, params=params,
                            window=Window(start_s=2780 * 3600, max_jobs=1500))  # fmt: skip
    metrics = ReplayMetrics()
    replay(OPENB, options, metrics=metrics)
    seen = calibrate_module._part(metrics, observed=True, keep=calibrate_module._odd_day)
    simulated = calibrate_module._part(metrics, observed=False, keep=calibrate_module._odd_day)
    assert len(seen) > 100
    assert result["ks_validation"] == pytest.approx(calibrate_module._distance(seen, simulated))


def test_openb_calibrated_on_even_days_validates_on_odd_days_body_and_tail() -> None:
    # The shipped fit of `twin calibrate --split alternate-days` on openb's nodes (its
    # calibrated-params.json): lost bind races that may be lost again at every retry give the
    # long waits; on the odd days the fit never saw, the KS is at most 0.17 (0.160 as fitted
    # with pods never split across nodes) and the p99 within 2x of the observed one.
    params = ReplayParams.model_validate_json((OPENB.parent / "calibrated-params.json").read_text())
    metrics = ReplayMetrics()
    replay(OPENB, ReplayOptions(cluster=OPENB_NODES, params=params), metrics=metrics)
    seen = calibrate_module._part(metrics, observed=True, keep=calibrate_module._odd_day)
    simulated = calibrate_module._part(metrics, observed=False, keep=calibrate_module._odd_day)
    assert calibrate_module._distance(seen, simulated) <= 0.17
    p99_seen, p99_simulated = np.quantile(seen, 0.99), np.quantile(simulated, 0.99)
    assert p99_seen / 2 <= p99_simulated <= p99_seen * 2


def _eight_gpu_p99s(params_file: str) -> tuple[float, float]:
    """Observed and simulated p99 delay of openb's pods of eight GPUs or more (whole trace)."""
    params = ReplayParams.model_validate_json((OPENB.parent / params_file).read_text())
    metrics = ReplayMetrics()
    replay(OPENB, ReplayOptions(cluster=OPENB_NODES, params=params), metrics=metrics)
    wide = calibrate_module.GPU_CLASSES.index("8+")
    seen, simulated = (
        calibrate_module._part(metrics, observed=o, keep=calibrate_module._always, gpu_class=wide)
        for o in (True, False)
    )
    assert len(seen) == 44
    return float(np.quantile(seen, 0.99)), float(np.quantile(simulated, 0.99))


def test_openbs_eight_gpu_pods_wait_as_they_did_on_the_whole_inventory() -> None:
    """The shipped fit keeps the whole inventory (95% of it), its binds racing as on a cluster
    60% busy with work the trace does not hold: eight-GPU pods' p99 is within 2x of the
    observed 279 s. On ten nodes (the share-of-nodes fit, which matches the aggregate as well)
    long-lived pods hold a GPU on every node and eight-GPU pods wait for days."""
    seen, whole = _eight_gpu_p99s("calibrated-params.json")
    assert seen / 2 <= whole <= seen * 2
    _, ten_nodes = _eight_gpu_p99s("calibrated-params-ten-nodes.json")
    assert ten_nodes > 1000 * seen


def test_calibration_rejects_a_fit_whose_wide_pods_wait_past_every_pods_tail() -> None:
    """On the even days the ten-node fit's KS is as good as the whole inventory's, and its
    p99 over all pods is within 10x of the observed one, but its eight-GPU pods' is not: the
    search scores it as overloaded."""
    params = ReplayParams.model_validate_json(
        (OPENB.parent / "calibrated-params-ten-nodes.json").read_text()
    )
    options = ReplayOptions(cluster=OPENB_NODES, params=params)
    trace = Trace(OPENB, options.reading)
    even = calibrate_module._even_day
    assert fit_score(trace, options, params, even) == 1.0
    aggregate_only = pytest.MonkeyPatch.context()
    with aggregate_only as patch:
        patch.setattr(calibrate_module, "MIN_CLASS_JOBS", 10**9)
        assert fit_score(trace, options, params, even) < 0.13


def test_dlrms_tail_compromise_holds_the_p99_within_2x_on_both_halves() -> None:
    """The shipped KS fit's p99 is 3.7x low on the days it was fitted on; the compromise (a
    pool 0.4% smaller) holds it within 2x on the even and the odd days alike, at a cost in KS
    that docs/replay.md states."""
    from twin.replay.calibrate import _even_day, _odd_day, _part, _tail
    from twin.replay.params import read_params
    from twin.replay.tenant_delays import ReplayMetrics

    dlrm = TRACES / "alibaba-gpu-v2025-dlrm"
    ratios = {}
    for name in ("calibrated-params.json", "calibrated-params-tails.json"):
        metrics = ReplayMetrics()
        options = ReplayOptions(params=read_params(dlrm / name))
        replay(dlrm / "disaggregated_DLRM_trace.csv", options, metrics=metrics)
        for days, keep in (("even", _even_day), ("odd", _odd_day)):
            seen = _tail(_part(metrics, observed=True, keep=keep)).p99
            simulated = _tail(_part(metrics, observed=False, keep=keep)).p99
            assert seen is not None
            assert simulated is not None
            ratios[name, days] = simulated / seen
    assert ratios["calibrated-params.json", "even"] < 0.5  # the KS fit: its tail is low there
    for days in ("even", "odd"):
        assert 0.5 <= ratios["calibrated-params-tails.json", days] <= 2.0


def test_replay_over_seeds_prints_each_figures_median_and_range(tmp_path: Path) -> None:
    """`twin replay --seeds` replays on each seed and reports the spread, so a fidelity figure
    is never one seed's; the JSON holds every seed's value beside the median and range."""
    dlrm = TRACES / "alibaba-gpu-v2025-dlrm"
    args = ["replay", "--trace", str(dlrm / "disaggregated_DLRM_trace.csv"), "--params",
            str(dlrm / "calibrated-params.json"), "--seeds", "0-4"]  # fmt: skip
    done = twin_command(*args, "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["seeds"] == [0, 1, 2, 3, 4]
    ks = answer["per_seed"]["ks_distance"]
    assert len(ks) == 5
    assert len(set(ks)) > 1  # the seed moves it
    spread = answer["spread"]["ks_distance"]
    assert (spread["least"], spread["most"]) == (min(ks), max(ks))
    assert spread["median"] == sorted(ks)[2]
    assert "seeds 0-4: median and range" in " ".join(done.stderr.split())
    refused = twin_command(*args, "--out", str(tmp_path / "run"))
    assert refused.returncode == 2
    assert "drop --out" in refused.stderr
