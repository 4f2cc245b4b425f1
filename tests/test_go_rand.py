"""The FGD artefact's own draws: Go's math/rand, from the seeded states shipped for its seeds,
reproduce its seed-42 arrival order and node priority, so `twin fill --draws artefact` plays
its runs exactly."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.conftest import TRACES, twin_command
from twin.errors import ConfigError
from twin.fill.go_rand import GoRand, artefact_draws, seeds

OPENB = TRACES / "alibaba-gpu-v2023-openb"


def test_the_generator_gives_what_go_gives_for_seed_42() -> None:
    # Printed by Go 1.19: r := rand.New(rand.NewSource(42)); r.Int63(), r.Int63(),
    # r.Intn(1000), r.Perm(5), then r.Shuffle of 0..9.
    rng = GoRand(42)
    assert (rng.int63(), rng.int63()) == (3440579354231278675, 608747136543856411)
    assert rng.intn(1000) == 668
    assert rng.perm(5) == [0, 4, 1, 2, 3]
    items = list(range(10))
    rng.shuffle(items)
    assert items == [4, 9, 6, 7, 0, 2, 1, 8, 5, 3]


def test_the_artefacts_seed_42_order_and_node_priority_are_drawn_again() -> None:
    with (OPENB / "openb_pod_list_default.csv").open() as f:
        pods = sorted(csv.DictReader(f), key=lambda r: r["name"])
    requests = [(int(p["num_gpu"]), int(p["gpu_milli"]) if int(p["num_gpu"]) else 0) for p in pods]
    order, ranks = artefact_draws(requests, 1213, 42, 1.3, 6_212_000)
    with (OPENB / "fgd/arrivals_seed42.csv").open() as f:
        shipped = [r["base_pod"] for r in csv.DictReader(f)]
    assert [pods[i]["name"] for i in order] == shipped  # 10,866 arrivals, copies included
    with (OPENB / "fgd/node_tiebreak_seed42.csv").open() as f:
        tiebreak = {r["node"]: int(r["tiebreak_rank"]) for r in csv.DictReader(f)}
    assert dict(zip(sorted(tiebreak), ranks, strict=True)) == tiebreak


def test_only_the_artefacts_seeds_are_shipped() -> None:
    assert seeds() == list(range(42, 52))
    with pytest.raises(ConfigError, match="seeds 42-51 only"):
        GoRand(7)


def test_twin_fill_plays_the_artefacts_own_runs(tmp_path: Path) -> None:
    pods, nodes = OPENB / "openb_pod_list_default.csv", OPENB / "openb_node_list_gpu_node.csv"
    args = ["fill", "--trace", str(pods), "--cluster", str(nodes), "--placement", "best_fit",
            "--draws", "artefact", "--out", str(tmp_path)]  # fmt: skip
    done = twin_command(*args, "--seeds", "42")
    assert done.returncode == 0, done.stderr
    with (tmp_path / "fill.csv").open() as f:
        got = {int(r["arrived_pct"]): float(r["unallocated_gpu_pct"]) for r in csv.DictReader(f)}
    assert [round(got[p], 2) for p in (95, 100, 130)] == [7.13, 7.06, 6.87]  # the artefact's
    refused = twin_command(*args, "--seeds", "1-3")
    assert refused.returncode == 2
    assert "no draws for seed 1; the artefact's seeds are 42-51" in " ".join(refused.stderr.split())


def _oversubscribed() -> list[tuple[int, int]]:
    """A multi-GPU-heavy list: 400 pods asking about 15 times a 100-GPU cluster."""
    return [((1, 2, 4, 8)[i % 4], 1000 if i % 4 else (250, 500, 1000)[i % 3]) for i in range(400)]


def test_an_oversubscribed_list_is_tuned_down_as_the_artefact_tunes_it() -> None:
    """The artefact's tuning, restated from Go's draws: after the debug Int and the Shuffle,
    `Intn(pods left)` picks the pod to remove until the list asks at most the target; then the
    start-up draws and the node permutation."""
    requests, capacity, target = _oversubscribed(), 100_000, 1.3 * 100_000
    order, ranks = artefact_draws(requests, 25, 42, 1.3, capacity)
    rng = GoRand(42)
    rng.int63()
    expected = list(range(len(requests)))
    rng.shuffle(expected)
    asked = sum(n * m for n, m in requests)
    assert asked > target
    removed = []
    while asked > target:
        removed.append(expected.pop(rng.intn(len(expected))))
        asked -= requests[removed[-1]][0] * requests[removed[-1]][1]
    for _ in range(10):
        rng.int63()
    assert order == expected
    assert ranks == rng.perm(25)
    kept = sum(requests[i][0] * requests[i][1] for i in order)
    last = requests[removed[-1]][0] * requests[removed[-1]][1]
    assert kept <= target < kept + last  # it stops as soon as the list fits the target
    assert len(set(order)) == len(order)  # removal only: no pod twice


def test_twin_fill_caps_an_oversubscribed_list_at_the_target_both_ways(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n"
                     + "".join(f"n{i},96000,786432,4,G2\n" for i in range(25)))  # fmt: skip
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(
        f"p{i:03},4000,16384,{n},{m}\n" for i, (n, m) in enumerate(_oversubscribed())))  # fmt: skip
    for draws in ("twin", "artefact"):
        out = tmp_path / draws
        done = twin_command("fill", "--trace", str(pods), "--cluster", str(nodes), "--placement",
                            "best_fit", "--seeds", "42-43", "--draws", draws, "--out", str(out),
                            "--workers", "1")  # fmt: skip
        assert done.returncode == 0, done.stderr
        with (out / "fill.csv").open() as f:
            arrived = [int(r["arrived_pct"]) for r in csv.DictReader(f)]
        assert max(arrived) <= 130  # tuned down to the target (it asked ~1,500%)
        assert max(arrived) >= 120
