"""Training that demonstrably improves an agent: the reference recipe (`twin train`, a
cross-entropy search over a small linear policy) beats the scenario's own policy on held-out
seeds; the trained policy takes a seat over the real gateway (`twin arena --policy`, `twin play
--policy`) and its returns there equal the recipe's own evaluation, to the cent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from twin.rl.cem import CemSettings
from twin.rl.seeds import HELD_OUT, TRAIN, seed_split
from twin.rl.training import TrainSettings, evaluate, play, train
from twin.sim import scenarios
from twin_agents.learned import AUTOSCALE_WEIGHTS, FEATURES, LearnedAgent, PolicyFile
from twin_agents.registry import Seat

REPO = Path(__file__).resolve().parents[1]
TINY = TrainSettings(generations=3, seeds_per_generation=4, validation_seeds=4,
                     cem=CemSettings(population=8, elite=2))  # fmt: skip


def twin(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "twin", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip


def autoscale_seat(seat: Seat) -> LearnedAgent:
    """An importable callable that seats an agent (the autoscaler, as the linear policy)."""
    return LearnedAgent(AUTOSCALE_WEIGHTS, "autoscale-callable")


@pytest.fixture(scope="module")
def scarce_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    scenario = scenarios.load_cluster("market-scarce")
    path = tmp_path_factory.mktemp("train") / "policy.json"
    train(scenario, TINY).policy.save(path)
    return path


@pytest.mark.parametrize("name", ["market", "market-scarce"])
def test_the_linear_policy_at_its_starting_weights_is_the_scenarios_own_policy(name: str) -> None:
    scenario = scenarios.load_cluster(name)
    everyone = {t.name: AUTOSCALE_WEIGHTS for t in scenario.tenants}
    for seed in (0, 1, 2):
        assert play(scenario, seed, everyone) == play(scenario, seed, {})


def test_seed_splits_are_fixed_and_disjoint() -> None:
    split = seed_split("market")
    assert split.train == TRAIN == range(0, 1_000_000)
    assert split.held_out == HELD_OUT == range(1_000_000, 1_001_000)
    assert split.first("held_out", 3) == [1_000_000, 1_000_001, 1_000_002]
    with pytest.raises(ValueError, match="has 1000 seeds"):
        split.first("held_out", 1001)


def test_training_beats_the_own_policy_on_held_out_seeds_and_never_sees_them() -> None:
    scenario = scenarios.load_cluster("market-scarce")
    trained = train(scenario, TINY)
    curve = trained.curve
    assert curve[0].gain_usd == 0.0  # generation 0 is the scenario's own policy
    assert curve[-1].gain_usd > 0.0
    assert all(s in TRAIN for s in trained.policy.trained["validation_seeds"])  # type: ignore[index]
    result = evaluate(scenario, trained.policy, seed_split("market-scarce").first("held_out", 10))
    assert result.all_roles().low > 0.0
    assert result.welfare().low > 0.0


def test_training_is_deterministic_and_the_same_on_any_number_of_workers() -> None:
    scenario = scenarios.load_cluster("market-scarce")
    settings = TrainSettings(generations=1, seeds_per_generation=2, validation_seeds=2,
                             cem=CemSettings(population=4, elite=2))  # fmt: skip
    one = train(scenario, settings).policy
    two = train(scenario, TrainSettings(**{**settings.__dict__, "workers": 2})).policy
    assert one.weights == two.weights


def test_a_policy_file_round_trips_and_a_bad_one_is_refused_by_name(tmp_path: Path) -> None:
    policy = PolicyFile("market", {"batch": tuple(float(i) for i in range(len(FEATURES)))})
    policy.save(tmp_path / "p.json")
    back = PolicyFile.load(tmp_path / "p.json")
    assert back.weights == policy.weights
    assert back.for_tenant("research") == AUTOSCALE_WEIGHTS  # the default row
    data = json.loads((tmp_path / "p.json").read_text())
    data["weights"]["batch"] = [1.0, "x"]
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"bad\.json.*weights of 'batch'.*finite numbers"):
        PolicyFile.load(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="not a cluster-twin/linear-policy file"):
        PolicyFile.from_json({"weights": {}})


def test_twin_train_writes_its_policy_curve_and_held_out_evaluation(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = twin("train", "--scenario", "market-scarce", "--generations", "2", "--population", "6",
                "--elite", "2", "--seeds-per-generation", "3", "--validation-seeds", "3",
                "--held-out", "6", "--workers", "2", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert {p.name for p in out.iterdir()} == {"policy.json", "curve.csv", "curve.svg",
                                               "evaluation.json"}  # fmt: skip
    assert "held-out seeds" in done.stdout
    assert "all roles" in done.stdout
    curve = (out / "curve.csv").read_text().splitlines()
    assert curve[0].startswith("generation,episodes,wall_s,cpu_s,gain_usd,gain_research_usd")
    assert len(curve) == 1 + 3  # generations 0, 1, 2
    assert (out / "curve.svg").read_text().startswith("<svg")
    evaluation = json.loads((out / "evaluation.json").read_text())
    assert evaluation["seeds"] == list(HELD_OUT[:6])
    again = twin("train", "--scenario", "market-scarce", "--evaluate", str(out / "policy.json"),
                 "--held-out", "6", "--out", str(tmp_path / "again"))  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert json.loads((tmp_path / "again" / "evaluation.json").read_text()) == evaluation


def test_twin_train_refuses_impossible_settings_with_a_coded_line(tmp_path: Path) -> None:
    done = twin("train", "--elite", "9", "--population", "4", "--out", str(tmp_path))
    assert done.returncode == 2
    assert "--elite 9 is more than --population 4" in done.stderr
    assert "Traceback" not in done.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    done = twin("train", "--evaluate", str(bad))
    assert done.returncode == 2
    assert "not a cluster-twin/linear-policy file" in done.stderr
    done = twin("train", "--start", str(bad), "--out", str(tmp_path))
    assert done.returncode == 2
    assert "not a cluster-twin/linear-policy file" in done.stderr
    done = twin("train", "--trading-only", "--out", str(tmp_path))
    assert done.returncode == 2
    assert "--trading-only: the proportional mechanism does not clear held GPUs" in done.stderr


def test_the_trained_policy_takes_a_seat_in_the_arena_and_earns_there_what_training_measured(
    tmp_path: Path, scarce_policy: Path
) -> None:
    out = tmp_path / "arena"
    done = twin("arena", "--scenario", "market-scarce", "--policy", f"trained={scarce_policy}",
                "--agents", "trained", "--regime", "rotation,mirror", "--seeds", "held-out:3",
                "--workers", "2", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    board = pq.read_table(out / "leaderboard.parquet").to_pylist()
    row = next(r for r in board if r["agent"] == "trained" and r["role"] == "all")
    scenario = scenarios.load_cluster("market-scarce")
    measured = evaluate(scenario, PolicyFile.load(scarce_policy), list(HELD_OUT[:3]))
    assert row["gain_usd"] == pytest.approx(measured.all_roles().mean, abs=0.005)
    assert row["gain_lo_usd"] > 0.0
    mirror = pq.read_table(out / "mirror.parquet").to_pylist()
    assert mirror[0]["welfare_gain_usd"] == pytest.approx(measured.welfare().mean, abs=0.005)
    assert mirror[0]["score"] > 0.0
    manifest = json.loads((out / "arena.json").read_text())
    trained = next(a for a in manifest["agents"] if a["name"] == "trained")
    assert trained["policy"] == "trained"
    assert len(trained["source_sha256"]) == 64


def test_an_importable_callable_takes_a_seat_in_twin_play(tmp_path: Path) -> None:
    done = twin("play", "--scenario", "market", "--policy",
                "auto=tests.test_training:autoscale_seat", "--agents", "inference=auto",
                "--out", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    returns = {t["name"]: t["reward_usd"] for t in summary["tenants"]}
    own = play(scenarios.load_cluster("market"), 0, {})
    assert returns["inference"] == pytest.approx(own["inference"], abs=0.005)
    agents = json.loads((tmp_path / "agents.json").read_text())
    assert agents["agents"]["inference"]["policy"] == "auto"


def test_a_policy_that_cannot_be_seated_is_refused_with_a_coded_line(tmp_path: Path) -> None:
    done = twin("play", "--policy", "x=no.such.module:make", "--agents", "inference=x")
    assert done.returncode == 2
    assert "cannot import 'no.such.module'" in done.stderr
    done = twin("arena", "--policy", "negotiator=p.json", "--agents", "negotiator", "--out",
                str(tmp_path))  # fmt: skip
    assert done.returncode == 2
    assert "'negotiator' is a built-in agent's name" in done.stderr
    done = twin("arena", "--policy", "x=missing.json", "--agents", "x", "--out", str(tmp_path))
    assert done.returncode == 2
    assert "policy file 'missing.json': cannot read it" in done.stderr
    assert "Traceback" not in done.stderr
