"""`twin train --scenario family:market`: one policy for every seat, searched on the family's
train split only, and evaluated where it was not trained (held-out members, each named built-in
in the family on its held-out seeds), per scenario and pooled, with intervals."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import twin_command
from twin.rl.cem import CemSettings
from twin.rl.family_training import evaluate_family, play_member, train_family
from twin.rl.training import TrainSettings
from twin.sim import families
from twin_agents.learned import AUTOSCALE_WEIGHTS, FEATURES, PolicyFile

TINY = TrainSettings(generations=1, seeds_per_generation=2, validation_seeds=2,
                     cem=CemSettings(population=2, elite=1), seed=3)  # fmt: skip


def test_the_search_plays_train_members_only_and_is_reproducible() -> None:
    first = train_family("market", TINY)
    again = train_family("market", TINY)
    assert first.policy.default == again.policy.default
    assert len(first.policy.default) == len(FEATURES)
    trained = first.policy.trained or {}
    assert all(m in families.TRAIN for m in trained["validation_members"])
    assert first.policy.scenario == "family:market"
    assert first.curve[0].gain_usd == 0.0  # generation 0 is the tenants' own policy


def test_autoscale_weights_in_every_seat_are_the_tenants_own_policy() -> None:
    """The family's tenants autoscale: seated with autoscale's weights they earn what their own
    policy earns, so a gain over them is what training found."""
    own = play_member("market", 905, None, "proportional")
    seated = play_member("market", 905, AUTOSCALE_WEIGHTS, "proportional")
    assert own.keys() == seated.keys()
    policy = PolicyFile("family:market", {}, default=AUTOSCALE_WEIGHTS)
    result = evaluate_family("market", policy, [905, 906], mechanism="proportional")
    assert result.members == [905, 906]
    assert len(result.welfare_gains()) == 2


def test_train_over_a_family_writes_the_policy_and_its_held_out_evaluation(
    tmp_path: Path,
) -> None:
    out = tmp_path / "fam"
    done = twin_command("train", "--scenario", "family:market", "--generations", "1",
                        "--population", "2", "--elite", "1", "--seeds-per-generation", "2",
                        "--validation-seeds", "2", "--held-out", "3", "--workers", "1",
                        "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "training on family:market (train members 0-899)" in done.stdout
    policy = PolicyFile.load(out / "policy.json")
    assert policy.weights == {}
    assert len(policy.default) == len(FEATURES)
    report = json.loads((out / "evaluation.json").read_text())
    rows = report["scenarios"]
    assert list(rows) == ["held-out members (3)", "market", "market-scarce", "pooled"]
    assert [rows[k]["episodes"] for k in rows] == [3, 3, 3, 9]
    assert [m["member"] for m in report["held_out_members"]["per_member"]] == [900, 901, 902]
    for row in rows.values():
        gain = row["welfare_gain_usd"]
        assert gain["low"] <= gain["mean"] <= gain["high"]
    again = twin_command("train", "--scenario", "family:market", "--evaluate",
                         str(out / "policy.json"), "--held-out", "3", "--workers", "1")  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "pooled" in again.stdout
    too_many = twin_command("train", "--scenario", "family:market", "--held-out", "101",
                            "--out", str(tmp_path / "x"))  # fmt: skip
    assert too_many.returncode == 2
    assert "100 held-out members" in too_many.stderr


def test_each_member_may_be_judged_on_several_episodes_with_its_own_interval() -> None:
    policy = PolicyFile("family:market", {}, default=AUTOSCALE_WEIGHTS)
    once = evaluate_family("market", policy, [905, 906], mechanism="proportional")
    twice = evaluate_family("market", policy, [905, 906], mechanism="proportional", episodes=2)
    assert once.share_significant() is None  # one episode a member: no interval of its own
    assert twice.members == [905, 905, 906, 906]
    assert twice.own[0] == once.own[0]  # a member's first episode is on its own seed
    assert twice.own[1] != twice.own[0]  # the second on another
    share = twice.share_significant()
    assert share is not None
    assert 0.0 <= share <= 1.0
    assert len(twice.per_member_means(twice.welfare_gains())) == 2
