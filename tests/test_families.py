"""Scenario families: `family:market/17` is a negotiable scenario drawn by seed, the same
everywhere, wherever a scenario goes; members 0-899 train and 900-999 are held out; the named
built-ins lie in the family's space; and `twin bound` over a family's members reports how much
trade could add, member by member and as a distribution."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import twin_command
from twin.errors import ConfigError
from twin.gateway.config import SessionRequest
from twin.sim import families, scenarios
from twin.sim.scenario_access import ScenarioAccess
from twin.sim.scenarios import load_raw


def test_a_member_is_a_pure_function_of_its_seed() -> None:
    assert families.market(17) == families.market(17)
    assert families.market(17) != families.market(18)
    member = scenarios.as_cluster(scenarios.load("family:market/17"))
    assert member.name == "market-17"
    assert [p.name for p in member.pools] == ["h100", "a100"]  # the family's layout
    assert member.horizon_s == 14_400
    assert member.decisions.interval_s == 900


def test_members_vary_over_the_space_and_stay_inside_it() -> None:
    drawn = [families.market(seed) for seed in range(1000)]
    for seed, raw in enumerate(drawn):
        outside = [c for c in families.membership(raw) if not c.inside]
        assert not outside, (seed, outside)
    tenants = {len(raw["tenants"]) for raw in drawn}
    assert tenants == {2, 3, 4, 5, 6}
    billing = {p["billing"] for raw in drawn for p in raw["pools"]}
    assert billing == {"from_request", "from_ready"}
    delays_min = [p["provision_delay_s"]["median"] / 60 for raw in drawn for p in raw["pools"]]
    assert min(delays_min) < 15
    assert max(delays_min) > 100
    for raw in drawn[:50]:
        archetypes = {t["name"].split("-")[0] for t in raw["tenants"]}
        assert len(archetypes) >= 2  # someone to trade with


@pytest.mark.parametrize("name", families.MEMBERS)
def test_the_named_builtins_lie_in_the_familys_space(name: str) -> None:
    raw, _ = load_raw(name)
    checks = families.membership(raw)
    assert len(checks) > 20
    assert all(c.inside for c in checks), [c for c in checks if not c.inside]


def test_the_splits_are_fixed_and_disjoint() -> None:
    assert families.seeds("market", "train:3") == [0, 1, 2]
    assert families.seeds("market", "held-out:3") == [900, 901, 902]
    assert len(families.seeds("market", "held-out")) == 100
    assert not set(families.TRAIN) & set(families.HELD_OUT)
    assert "held-out split" in families.market(950)["description"]
    assert "train split" in families.market(5)["description"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("family:market", "names a family, not a member"),
        ("family:market/1000", "seed is 0-999"),
        ("family:nope/3", "no family 'nope'"),
        ("family:market/x", "family:NAME/SEED"),
    ],
)
def test_a_bad_family_spec_is_a_coded_error(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        scenarios.load(spec)


def test_a_network_client_may_name_a_member_and_nothing_is_opened(tmp_path: Path) -> None:
    access = ScenarioAccess(directory=tmp_path)
    member = access.load_cluster("family:market/905")
    assert member.name == "market-905"
    request = SessionRequest(scenario="family:market/905", seed=905)
    assert request.scenario == "family:market/905"
    with pytest.raises(ConfigError, match="seed is 0-999"):
        access.load_cluster("family:market/99999")


def test_plays_are_a_familys_members_each_on_its_own_seed() -> None:
    def never(text: str) -> list[int]:
        raise AssertionError(text)

    assert families.plays("family:market", "held-out:2", never) == [
        ("family:market/900", 900), ("family:market/901", 901)]  # fmt: skip
    assert families.plays("market", "2", lambda _: [0, 1]) == [("market", 0), ("market", 1)]
    with pytest.raises(ConfigError, match="name a split"):
        families.plays("family:market", "3", never)


def test_a_member_runs_from_the_command_line(tmp_path: Path) -> None:
    done = twin_command("run", "--scenario", "family:market/17", "--seed", "17", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)["summary"]
    assert (summary["scenario"], summary["seed"]) == ("market-17", 17)
    refused = twin_command("run", "--scenario", "family:market")
    assert refused.returncode == 2
    assert "names a family, not a member" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_families_lists_the_space_the_splits_and_the_builtins_in_it() -> None:
    done = twin_command("families")
    assert done.returncode == 0, done.stderr
    assert "train 0-899, held-out 900-999" in done.stdout
    assert "market: a member" in done.stdout
    assert "market-scarce: a member" in done.stdout
    member = twin_command("families", "--member", "17")
    assert member.returncode == 0
    assert "name: market-17" in member.stdout


def test_bound_over_a_familys_held_out_members_reports_the_trade_headroom() -> None:
    done = twin_command("bound", "--scenario", "family:market", "--seeds", "held-out:20")
    assert done.returncode == 0, done.stderr
    out = " ".join(done.stdout.split())
    assert "market-900 .. market-919" in out
    found = re.search(r"(\d+) of 20 \((\d+)%\) with headroom of 5% of the bound or more", out)
    assert found is not None, out
    assert int(found[1]) >= 5  # a stated share of the members has real gains from trade


def test_the_arena_plays_held_out_members_pooled_as_one_scenario(tmp_path: Path) -> None:
    out = tmp_path / "arena"
    done = twin_command("arena", "--scenario", "family:market", "--seeds", "held-out:2",
                        "--agents", "negotiator", "--regime", "mirror", "--workers", "1",
                        "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "arena.json").read_text())
    assert manifest["seeds"] == [900, 901]
    assert [s["spec"] for s in manifest["scenarios"]] == ["family:market/900", "family:market/901"]
    assert len({s["sha256"] for s in manifest["scenarios"]}) == 1  # pooled: one scenario
    import pyarrow.parquet as pq

    mirrored = pq.read_table(out / "mirror.parquet").to_pylist()
    assert len(mirrored) == 1
    (row,) = mirrored
    assert row["scenario"] == "family:market (held-out:2)"
    assert row["seeds"] == 2
    assert row["welfare_gain_usd"] == pytest.approx(
        row["provisioning_welfare_gain_usd"] + row["trade_welfare_gain_usd"]
    )
    assert row["trade_repair"] in (True, False)


def test_members_are_listed_beside_other_scenarios_but_a_whole_family_plays_alone(
    tmp_path: Path,
) -> None:
    out = tmp_path / "arena"
    listed = "family:market/901,family:market/17,family:market/901"
    done = twin_command("arena", "--scenario", listed,
                        "--seeds", "1", "--agents", "stepper", "--regime", "mirror",
                        "--workers", "1", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "arena.json").read_text())
    assert [s["spec"] for s in manifest["scenarios"]] == ["family:market/901", "family:market/17"]
    assert "6 sessions (6 now" in done.stdout  # three each: a member named twice plays once
    refused = twin_command("arena", "--scenario", "market,family:market", "--seeds", "held-out:2",
                           "--agents", "stepper", "--out", str(tmp_path / "no"))  # fmt: skip
    assert refused.returncode == 2
    assert "a whole family (family:market) is played alone" in refused.stderr
    assert "Traceback" not in refused.stderr
