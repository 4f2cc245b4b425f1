"""Tenants on a real trace: a scenario whose tenants play a trace on its calibrated cluster is
the replay of that trace, plus whatever the tenants do.

The passive identity is the test that the replay half and the agent half are one model: with
every tenant passive and no cloud pools, each job starts and finishes exactly when `twin replay`
has it start and finish, with the same trace, window, params and seed.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.conftest import TRACES, twin_command
from tests.rounds import commit
from twin.errors import ConfigError, TraceError
from twin.eventlog.log import EventLog
from twin.replay.formats.flat import parse_map
from twin.replay.params import read_params
from twin.replay.registry import TraceOptions
from twin.replay.run import ReplayOptions, replay
from twin.replay.tenant_scenario import Extras, build
from twin.replay.workload import reading
from twin.schema.actions import Bundle, Offer, ProvisionAction
from twin.schema.scenario import ClusterScenario
from twin.schema.trace_workload import TraceWorkload
from twin.sim import catalog, scenarios
from twin.sim.driver import Driver
from twin.sim.runner import run_episode

OPENB = TRACES / "alibaba-gpu-v2023-openb"
DLRM = TRACES / "alibaba-gpu-v2025-dlrm"
OPENB_PODS = OPENB / "openb_pod_list_default.csv"
OPENB_NODES = OPENB / "openb_node_list_gpu_node.csv"
DLRM_TRACE = DLRM / "disaggregated_DLRM_trace.csv"
Times = dict[str, list[tuple[str, float]]]


def job_times(events: Path) -> Times:
    """Each job's starts, finishes and failures, in order, with their times."""
    out: Times = {}
    with events.open() as f:
        for line in f:
            e = json.loads(line)
            if e["kind"] in ("job_started", "job_finished", "job_failed"):
                out.setdefault(e["job_id"], []).append((e["kind"], e["t_s"]))
    return out


def tenant_scenario(workload: TraceWorkload, options: ReplayOptions, top: int,
                    **extras: Any) -> ClusterScenario:  # fmt: skip
    read = reading(workload)
    options = replace(options, fmt=read.fmt, trace=read.trace, window=read.window)
    return build(workload, options, top, Extras(name="tenants", **extras))


def both(workload: TraceWorkload, options: ReplayOptions, top: int, seed: int,
         tmp: Path, *, pools: list[dict[str, Any]] | None = None,
         ) -> tuple[Times, Times, ClusterScenario]:  # fmt: skip
    """Job times of the replay and of the passive tenant scenario (beside `pools`), and the
    scenario."""
    scenario = tenant_scenario(workload, options, top, pools=pools or [])
    read = reading(workload)
    options = replace(options, fmt=read.fmt, trace=read.trace, window=read.window, seed=seed)
    replay(Path(workload.path), options, out_dir=tmp / "replay")
    run_episode(scenario, seed=seed, out_dir=tmp / "tenants")
    return job_times(tmp / "replay/events.jsonl"), job_times(tmp / "tenants/events.jsonl"), scenario


def tenants_seen(events: Path) -> set[str]:
    with events.open() as f:
        return {e["tenant"] for e in map(json.loads, f) if e["kind"] == "job_arrived"}


class TestPassiveIdentity:
    def test_an_openb_day_on_its_calibrated_nodes_is_the_replay(self, tmp_path: Path) -> None:
        workload = TraceWorkload(path=str(OPENB_PODS), start_h=3552, end_h=3576, tenant_by="qos")
        options = ReplayOptions(cluster=OPENB_NODES,
                                params=read_params(OPENB / "calibrated-params.json"))  # fmt: skip
        replayed, played, scenario = both(workload, options, 3, 3, tmp_path)
        assert len(replayed) > 500
        assert played == replayed
        assert {t.name for t in scenario.tenants} == {"ls", "be", "burstable", "other"}
        assert tenants_seen(tmp_path / "tenants/events.jsonl") >= {"ls", "be", "burstable"}

    def test_a_cloud_pool_no_tenant_provisions_keeps_the_identity(self, tmp_path: Path) -> None:
        workload = TraceWorkload(path=str(OPENB_PODS), start_h=3552, end_h=3576, tenant_by="qos")
        options = ReplayOptions(cluster=OPENB_NODES,
                                params=read_params(OPENB / "calibrated-params.json"))  # fmt: skip
        cloud = {"name": "cloud", "gpu_type": "a100-80gb", "max_gpus": 32,
                 "price_usd_per_gpu_h": 2.75}  # fmt: skip
        replayed, played, scenario = both(workload, options, 3, 3, tmp_path, pools=[cloud])
        assert [p.name for p in scenario.pools if not p.shared] == ["cloud"]
        assert played == replayed

    def test_a_dlrm_window_on_its_sized_pool_is_the_replay(self, tmp_path: Path) -> None:
        workload = TraceWorkload(path=str(DLRM_TRACE), start_h=480, end_h=528)
        options = ReplayOptions(params=read_params(DLRM / "calibrated-params.json"))
        replayed, played, scenario = both(workload, options, 3, 5, tmp_path)
        assert len(replayed) > 300
        assert played == replayed
        assert len(scenario.tenants) == 4
        assert scenario.tenants[-1].name == "other"

    def test_a_generic_csv_with_a_blocked_fifo_head_is_the_replay(self, tmp_path: Path) -> None:
        # One 8-GPU pool, no scheduler model: the FIFO head blocks every tenant's jobs behind it.
        rows = ["id,team,submit,gpus,run_s"] + [
            f"j{i},{'ab'[i % 3 == 0]}{i % 5},{i * 37},{1 + (i * 7) % 8},{200 + (i * 53) % 900}"
            for i in range(300)
        ]
        path = tmp_path / "jobs.csv"
        path.write_text("\n".join(rows) + "\n")
        columns = "job_id=id,submit=submit,gpus=gpus,duration=run_s,tenant=team"
        workload = TraceWorkload(path=str(path), columns=columns)
        options = ReplayOptions(trace=TraceOptions(columns=parse_map(columns)), gpus=8)
        replayed, played, _ = both(workload, options, 2, 0, tmp_path)
        assert played == replayed
        waits = [t for times in played.values() for kind, t in times if kind == "job_started"]
        assert len(waits) == 300
        assert len(tenants_seen(tmp_path / "tenants/events.jsonl")) == 3  # two named, other

    def test_a_row_maps_by_the_column_and_the_rest_go_to_other(self, tmp_path: Path) -> None:
        path = tmp_path / "jobs.csv"
        path.write_text("id,team,submit,gpus,run_s\n" + "".join(
            f"j{i},{team},{i},1,10\n" for i, team in enumerate(["Big A", "Big A", "b", "c"])
        ))  # fmt: skip
        columns = "job_id=id,submit=submit,gpus=gpus,duration=run_s,tenant=team"
        workload = TraceWorkload(path=str(path), columns=columns, other="rest")
        options = ReplayOptions(trace=TraceOptions(columns=parse_map(columns)), gpus=2)
        scenario = tenant_scenario(workload, options, 1)
        assert [t.name for t in scenario.tenants] == ["big-a", "rest"]
        run_episode(scenario, out_dir=tmp_path / "run")
        with (tmp_path / "run/events.jsonl").open() as f:
            arrived = [e for e in map(json.loads, f) if e["kind"] == "job_arrived"]
        assert [e["tenant"] for e in arrived] == ["big-a", "big-a", "rest", "rest"]


def two_teams(tmp: Path, *, run_s: int, gpus: int) -> tuple[TraceWorkload, ReplayOptions]:
    """A CSV trace: one job of team b at 0 s, then three of team a, a second apart, each on one
    GPU for `run_s`; replayed on `gpus` GPUs."""
    path = tmp / "jobs.csv"
    path.write_text("id,team,submit,gpus,run_s\n" + f"k0,b,0,1,{run_s}\n" + "".join(
        f"j{i},a,{i + 1},1,{run_s}\n" for i in range(3)))  # fmt: skip
    columns = "job_id=id,submit=submit,gpus=gpus,duration=run_s,tenant=team"
    options = ReplayOptions(trace=TraceOptions(columns=parse_map(columns)), gpus=gpus)
    return TraceWorkload(path=str(path), columns=columns), options


def test_a_quota_is_of_the_shared_nodes_and_a_tenant_over_it_runs_on_its_own(
    tmp_path: Path,
) -> None:
    workload, options = two_teams(tmp_path, run_s=100, gpus=4)
    cloud = {"name": "cloud", "gpu_type": "a100", "max_gpus": 8, "price_usd_per_gpu_h": 2.0}
    scenario = tenant_scenario(workload, options, 2, pools=[cloud])
    raw = scenario.model_dump(mode="json")
    raw["scheduler"] = {"quota_gpus": {"a": 1}}  # no scheduler model otherwise
    raw["tenants"][0]["initial_gpus"] = {"cloud": 2}
    run_episode(ClusterScenario.model_validate(raw), out_dir=tmp_path / "run")
    with (tmp_path / "run/events.jsonl").open() as f:
        started = {e["job_id"]: e["pool"] for e in map(json.loads, f) if e["kind"] == "job_started"}
    assert started == {"j0": "gpu", "j1": "cloud", "j2": "cloud", "k0": "gpu"}


def test_tenants_trade_quota_of_the_shared_nodes_for_money(tmp_path: Path) -> None:
    workload, options = two_teams(tmp_path, run_s=9000, gpus=8)
    raw = tenant_scenario(workload, options, 2).model_dump(mode="json")
    raw["scheduler"] = {"quota_gpus": {"a": 1, "b": 4}}
    log = EventLog("quota", keep=True)
    driver: Driver[Any, Any] = Driver(ClusterScenario.model_validate(raw), log=log)
    assert driver.advance() is not None
    view = driver.observe("a")
    assert (view.quota_gpus, view.quota_used_gpus, view.queue_length) == (1.0, 1.0, 2)
    deal = Offer(
        offer_id="q1",
        from_tenant="b",
        to_tenant="a",
        give=Bundle(quota_gpus=2),
        take=Bundle(usd=5.0),
    )
    greedy = Offer(
        offer_id="q2",
        from_tenant="b",
        to_tenant="a",
        give=Bundle(quota_gpus=3),
        take=Bundle(usd=1.0),
    )  # b has 3 spare, now 1
    outcomes = commit(driver, {}, {}, offers=[deal, greedy], answers={"q1": True, "q2": True})
    assert [t.status for t in outcomes["a"].trades] == ["applied", "failed"]
    assert "quota unused" in outcomes["a"].trades[1].reason
    started = [e["job_id"] for e in log.dicts() if e["kind"] == "job_started"]
    assert started == ["k0", "j0", "j1", "j2"]  # a's waiting jobs start on its new quota
    assert driver.observe("a").quota_gpus == 3.0
    assert driver.observe("b").quota_gpus == 2.0


class TestScenarioShape:
    def test_the_cluster_is_shared_and_the_cloud_pool_is_the_tenants(self) -> None:
        scenario = scenarios.load_cluster("openb-tenants")
        shared = [p for p in scenario.pools if p.shared]
        assert sum(p.max_gpus for p in shared) == 56  # openb's calibrated ten nodes
        assert [p.name for p in scenario.pools if not p.shared] == ["cloud"]
        assert scenario.nodes is not None
        assert scenario.scheduler.cycle_s == 2.0
        assert scenario.trace is not None
        assert scenario.trace.tenant_by == "qos"

    @pytest.mark.parametrize("name", ["openb-tenants", "dlrm-tenants"])
    def test_the_builtins_are_what_trace_scenario_writes(self, name: str, tmp_path: Path) -> None:
        shipped = scenarios.load_cluster(name)
        assert shipped.trace is not None
        args = BUILTIN_ARGS[name]
        out = tmp_path / f"{name}.yaml"
        done = twin_command("trace-scenario", *args, "--description", shipped.description,
                            "--out", str(out))  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert out.read_text() == (catalog.BUILTIN / f"{name}.yaml").read_text()

    def test_no_tenant_starts_holding_a_shared_pool(self) -> None:
        scenario = scenarios.load_cluster("openb-tenants")
        tenants = [{"name": "other", "initial_gpus": {"g2": 1}}]
        with pytest.raises(ValueError, match="shared pool"):
            ClusterScenario.model_validate({**scenario.model_dump(), "tenants": tenants})

    def test_a_shared_pool_is_never_provisioned_released_or_handed_over(self) -> None:
        day = ["trace.start_h=3552", "trace.end_h=3576"]
        log = EventLog("shared", keep=True)
        driver: Driver[Any, Any] = Driver(scenarios.load("openb-tenants", day), log=log)
        assert driver.advance() is not None
        offer = Offer(
            offer_id="o1",
            from_tenant="ls",
            to_tenant="be",
            give=Bundle(gpus={"g2": 1}),
            take=Bundle(usd=1.0),
        )
        outcomes = commit(driver,
            {"ls": ProvisionAction(provision={"g2": 4, "t4": -1}),
             "be": ProvisionAction(provision={"cloud": 2})},
            offers=[offer], answers={"o1": True},
        )  # fmt: skip
        records = list(log.dicts())
        clamped = [(r["pool"], r["reason"]) for r in records if r["kind"] == "action_clamped"]
        assert clamped == [("t4", "shared_pool"), ("g2", "shared_pool")]
        assert outcomes["ls"].trades[0].status == "failed"
        assert "shared" in outcomes["ls"].trades[0].reason
        asked = [r["pool"] for r in records if r["kind"] == "gpus_requested"]
        assert asked == ["cloud"]  # the tenants' own pool is theirs to grow

    def test_an_unknown_tenant_column_says_which_fields_there_are(self) -> None:
        workload = TraceWorkload(path=str(OPENB_PODS), end_h=1, tenant_by="team")
        options = ReplayOptions(cluster=OPENB_NODES)
        with pytest.raises(ConfigError, match="qos"):
            tenant_scenario(workload, options, 2)

    def test_a_tenant_column_the_rows_lack_is_refused_before_the_run(self) -> None:
        raw = scenarios.load_cluster("openb-tenants").model_dump(mode="json")
        raw["trace"]["tenant_by"] = "team"
        with pytest.raises(
            ConfigError, match=r"trace.tenant_by: .*no 'team' to map tenants by.*\(gpu_spec, qos\)"
        ):
            run_episode(ClusterScenario.model_validate(raw))

    def test_a_missing_trace_file_is_named(self, tmp_path: Path) -> None:
        raw = scenarios.load_cluster("openb-tenants").model_dump(mode="json")
        raw["trace"]["path"] = "traces/nowhere.csv"
        with pytest.raises(TraceError, match=r"nowhere\.csv"):
            run_episode(ClusterScenario.model_validate(raw))


BUILTIN_ARGS = {
    "openb-tenants": [
        "--trace", "traces/alibaba-gpu-v2023-openb/openb_pod_list_default.csv",
        "--cluster", "traces/alibaba-gpu-v2023-openb/openb_node_list_gpu_node.csv",
        "--params", "traces/alibaba-gpu-v2023-openb/calibrated-params-ten-nodes.json",
        "--tenants-by", "qos", "--top", "3", "--name", "openb-tenants",
        "--cloud-pool", "cloud:a100-80gb:32:2.75:600", "--decision-interval-s", "3600",
        "--budget-usd", "20000", "--value-usd-per-gpu-h", "6", "--sla-usd-per-job-h", "2",
    ],
    "dlrm-tenants": [
        "--trace", "traces/alibaba-gpu-v2025-dlrm/disaggregated_DLRM_trace.csv",
        "--params", "traces/alibaba-gpu-v2025-dlrm/calibrated-params.json",
        "--top", "3", "--name", "dlrm-tenants",
        "--cloud-pool", "cloud:a100-80gb:64:2.75:600", "--decision-interval-s", "3600",
        "--budget-usd", "50000", "--value-usd-per-gpu-h", "6", "--sla-usd-per-job-h", "2",
    ],
}  # fmt: skip
"""How the built-in tenant scenarios were written (from the project's root)."""


class TestAgentsOnTheTrace:
    def test_negotiators_burst_and_are_credited_on_openb(self, tmp_path: Path) -> None:
        """They burst to the cloud pool and are credited; they hold no idle cloud GPU for a buyer
        (a new one is ten minutes away, a round an hour: holding it unsold costs more than a
        sale could bring)."""
        agents = ",".join(f"{t}=negotiator" for t in ("ls", "be", "burstable", "other"))
        done = twin_command("play", "--scenario", "openb-tenants", "--agents", agents,
                            "--out", str(tmp_path))  # fmt: skip
        assert done.returncode == 0, done.stderr
        with (tmp_path / "events.jsonl").open() as f:
            events = [json.loads(line) for line in f]
        assert not [e for e in events if e["kind"] == "offer_made"]
        credited = [e for e in events if e["kind"] == "round_credited"]
        assert any(e["difference_reward"] != 0 for e in credited)
        assert {e["tenant"] for e in credited} == {"ls", "be", "burstable", "other"}
        bursts = [e for e in events if e["kind"] == "gpus_requested"]
        assert bursts
        assert {e["pool"] for e in bursts} == {"cloud"}
        assert events[-1]["kind"] == "episode_ended"
        report = json.loads((tmp_path / "agents.json").read_text())["agents"]
        assert set(report) == {"ls", "be", "burstable", "other"}

    def test_a_gymnasium_tenant_steps_against_negotiators(self) -> None:
        from twin.rl.cluster_env import ClusterEnv

        env = ClusterEnv("openb-tenants", tenant="ls", opponents="negotiator")
        obs, _ = env.reset(seed=1)
        rewards = []
        for _ in range(40):
            obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            rewards.append(reward)
            if terminated or truncated:
                break
        assert env.observation_space.contains(obs)
        assert len(rewards) == 40
        env.close()

    def test_every_tenant_steps_in_pettingzoo(self) -> None:
        from twin.rl.parallel_env import ClusterParallelEnv

        env = ClusterParallelEnv("openb-tenants")
        obs, _ = env.reset(seed=2)
        assert set(obs) == {"ls", "be", "burstable", "other"}
        for _ in range(10):
            actions = {a: env.action_space(a).sample() for a in env.agents}
            obs, rewards, *_ = env.step(actions)
        assert set(rewards) <= set(env.possible_agents)
        env.close()


def test_compare_and_sweep_play_it_like_any_scenario(tmp_path: Path) -> None:
    day = ["--set", "trace.start_h=3552", "--set", "trace.end_h=3576"]
    compared = twin_command("compare", "--scenario", "openb-tenants", "--policy",
                            "static,autoscale", "--seeds", "1", *day)  # fmt: skip
    assert compared.returncode == 0, compared.stderr
    assert "autoscale" in compared.stdout
    swept = twin_command("sweep", "--scenario", "openb-tenants", "--policy", "static,autoscale",
                         "--out", str(tmp_path / "sweep"), "--workers", "1", *day)  # fmt: skip
    assert swept.returncode == 0, swept.stderr
    rows = pq.read_table(tmp_path / "sweep/results.parquet").to_pylist()
    assert len(rows) == 2


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--name", "BAD_NAME"], "field name: String should match pattern"),
        (["--name", "x", "--other", "BAD"], "field other: String should match pattern"),
        (["--name", "x", "--decision-interval-s", "-5"], "argument --decision-interval-s: above 0"),
        (["--name", "x", "--top", "0"], "--top must name at least one tenant"),
        (["--name", "x", "--cloud-pool", "c:a100:x:1"], "--cloud-pool 'c:a100:x:1': expected"),
    ],
)
def test_trace_scenario_names_what_is_wrong(args: list[str], said: str) -> None:
    done = twin_command("trace-scenario", "--trace", str(OPENB_PODS), "--end-h", "1", *args)
    assert done.returncode == 2
    assert said in done.stderr
    assert "Traceback" not in done.stderr


def test_any_tenant_value_becomes_a_tenant_name() -> None:
    from twin.replay.workload import tenant_key

    assert [tenant_key(v) for v in ("LS", "_x y", "", "Team/A", "-.-")] == [
        "ls", "x-y", "x", "team-a", "x"]  # fmt: skip
