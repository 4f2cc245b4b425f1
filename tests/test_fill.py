"""`twin fill`: the FGD paper's fill-to-saturation experiment, as its own simulator runs it.

Pods arrive and never leave; each policy scores every feasible node as the artefact does. On the
artefact's exact seed-42 arrival order and node priority the curves are its own to the decimal.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import TRACES, twin_command
from twin.errors import TraceError
from twin.fill.fill import (
    Cluster,
    Curve,
    Pod,
    Typical,
    arrivals,
    fill,
    fragmentation,
    read_nodes,
    read_pods,
    read_priority,
    typical_pods,
)
from twin.fill.policies import policy as make

OPENB = TRACES / "alibaba-gpu-v2023-openb"
PODS, NODES = OPENB / "openb_pod_list_default.csv", OPENB / "openb_node_list_gpu_node.csv"
SEQUENCE, PRIORITY = OPENB / "fgd/arrivals_seed42.csv", OPENB / "fgd/node_tiebreak_seed42.csv"


def play(cluster: Cluster, pods: list[Pod], policy: str, priority: Sequence[int] | np.ndarray,
         typical: Typical | None = None) -> Curve:  # fmt: skip
    """`pods` on `cluster` under `policy`, typical pods from `pods` unless given."""
    typical = typical or typical_pods(pods)
    return fill(cluster, pods, make(policy, cluster, typical), typical,
                priority=np.asarray(priority))  # fmt: skip


def csv_file(path: Path, header: str, rows: Iterable[str]) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


ARTEFACT_SEED_42 = {"best_fit": (7.13, 7.06, 6.87), "fgd": (5.08, 4.86, 4.71)}  # at 95/100/130%


@pytest.mark.parametrize("policy", sorted(ARTEFACT_SEED_42))
def test_the_artefacts_seed_42_order_gives_its_own_curve(policy: str) -> None:
    cluster = read_nodes(NODES)
    curve = play(cluster, read_pods(SEQUENCE), policy, read_priority(PRIORITY, cluster.names),
                 typical_pods(read_pods(PODS)))  # fmt: skip
    binned = curve.binned()
    got = tuple(binned[pct][0] for pct in (95, 100, 130))
    assert got == pytest.approx(ARTEFACT_SEED_42[policy], abs=0.1)
    assert curve.capacity_milli == 6_212_000


def test_typical_pods_cover_95_percent_with_frequencies_summing_to_one() -> None:
    pods = read_pods(PODS)
    typical = typical_pods(pods)
    specs = {(int(c), int(m), int(k), models) for c, m, k, models in
             zip(typical.cpu_milli, typical.gpu_milli, typical.num_gpu, typical.models,
                 strict=True)}  # fmt: skip
    covered = sum(1 for p in pods if p.spec in specs)
    assert covered >= 0.95 * len(pods)
    assert typical.freq.sum() == pytest.approx(1.0)
    assert list(typical.freq) == sorted(typical.freq, reverse=True)


def tiny() -> Cluster:
    # Node a: 2 GPUs, little memory; node b: 4 GPUs.
    return Cluster(["a", "b"], [32_000, 64_000], [8_000, 256_000], [2, 4])


def test_a_pod_goes_only_where_cpu_memory_and_gpus_all_fit() -> None:
    cluster = tiny()
    share = Pod("s", 1000, 1000, 1, 400)
    assert cluster.feasible(share).tolist() == [True, True]
    hungry = Pod("m", 1000, 10_000, 1, 400)  # more memory than node a has
    assert cluster.feasible(hungry).tolist() == [False, True]
    wide = Pod("w", 1000, 1000, 3, 1000)  # three whole GPUs: only node b has them
    assert cluster.feasible(wide).tolist() == [False, True]
    cluster.place(1, Pod("x", 0, 0, 1, 700), gpu=0)  # node b's first GPU has 300 milli left
    assert cluster.feasible(Pod("y", 0, 0, 4, 1000)).tolist() == [False, False]
    assert cluster.feasible(Pod("z", 0, 0, 1, 300)).tolist() == [True, True]


def test_a_pod_that_fits_nowhere_is_dropped_and_later_ones_still_go() -> None:
    cluster = tiny()
    pods = [Pod("big", 0, 0, 8, 1000), Pod("one", 0, 0, 1, 1000)]
    typical = typical_pods(pods)
    curve = play(cluster, pods, "best_fit", [0, 1], typical)
    assert curve.requested.tolist() == [8000.0, 9000.0]
    assert curve.allocated.tolist() == [0.0, 1000.0]


def test_equal_scores_go_to_the_node_first_in_priority() -> None:
    pods = [Pod("p", 0, 0, 1, 1000)]
    for priority, node in (([0, 1], 0), ([1, 0], 1)):
        cluster = Cluster(["a", "b"], [1000, 1000], [1000, 1000], [2, 2])
        play(cluster, pods, "fgd", priority)
        assert int(cluster.gpu[node].sum()) == 1000  # one of its two GPUs taken


def test_clustering_keeps_a_kind_of_request_together_and_packing_fills_shared_gpus() -> None:
    pods = [Pod("s", 0, 0, 1, 300), Pod("w", 0, 0, 1, 1000), Pod("s2", 0, 0, 1, 300)]
    for policy, second_share_on in (("gpu_clustering", 0), ("gpu_packing", 0)):
        cluster = Cluster(["a", "b", "c"], [64_000] * 3, [64_000] * 3, [4, 4, 4])
        play(cluster, pods, policy, [0, 1, 2])
        shared = [int(n) for n in np.flatnonzero((cluster.gpu % 1000) != 0)]
        assert shared == [second_share_on]  # both shares on one node (one GPU, in fact)
        assert 400 in cluster.gpu[second_share_on].tolist()  # 300 + 300 of one GPU


def test_first_fit_takes_the_first_node_and_spread_the_emptiest() -> None:
    pods = [Pod("a", 0, 0, 1, 1000), Pod("b", 0, 0, 1, 1000)]
    for policy, used in (("first_fit", [0, 0]), ("spread", [0, 1])):
        cluster = Cluster(["a", "b"], [64_000] * 2, [64_000] * 2, [4, 4])
        play(cluster, pods, policy, [0, 1])
        assert [4 - int((cluster.gpu[n, :4] == 1000).sum()) for n in (0, 1)] == [
            used.count(0), used.count(1)]  # fmt: skip


def test_fragmentation_is_what_typical_pods_could_not_use() -> None:
    pods = [Pod("half", 0, 0, 1, 500)]  # the only typical pod: half a GPU
    typical = typical_pods(pods)
    gpu = np.array([[1000, 300, 0, 0, 0, 0, 0, 0]])  # 300 milli is too little for it
    assert fragmentation(np.array([0]), gpu, typical).tolist() == [300.0]
    assert fragmentation(np.array([0]), np.zeros((1, 8), dtype=np.int64), typical).tolist() == [0]


def test_inflation_draws_copies_until_the_next_would_pass_the_target() -> None:
    pods = [Pod(f"p{i}", 0, 0, 1, 1000) for i in range(4)]
    sequence = arrivals(pods, seed=3, inflate=1.5, capacity_milli=4000)
    assert sorted(p.name for p in sequence[:4]) == ["p0", "p1", "p2", "p3"]
    assert sum(p.gpu_request_milli for p in sequence) == 6000
    # As the artefact checks a copy: by one GPU's milli (4,000 + 1,000 is under 6,000), then
    # all four of its GPUs are asked for (8,000); the next draw would pass, so it stops there.
    wide = arrivals([Pod("w", 0, 0, 4, 1000)], seed=3, inflate=1.5, capacity_milli=4000)
    assert sum(p.gpu_request_milli for p in wide) == 8000


def test_twin_fill_writes_the_table_the_csv_and_the_figure(tmp_path: Path) -> None:
    nodes = csv_file(tmp_path / "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model",
                     (f"n{i},64000,262144,{2 + 2 * (i % 3)},G2" for i in range(12)))  # fmt: skip
    pods = csv_file(tmp_path / "pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli",
                    (f"p{i:03},{2000 + 100 * (i % 7)},4096,{1 + (i % 5 == 0)},"
                     f"{(250, 500, 1000)[i % 3]}" for i in range(60)))  # fmt: skip
    out = tmp_path / "fill"
    done = twin_command("fill", "--trace", str(pods), "--cluster", str(nodes), "--placement",
                        "best_fit,fgd,random,gpu-packing,dot-product,gpu_clustering", "--seeds",
                        "1-3", "--out", str(out),
                        "--workers", "2")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "FGD leaves" in done.stdout
    assert "range at" in done.stdout  # the seeds' least and most, beside their median
    with (out / "fill.csv").open() as f:
        rows = list(csv.DictReader(f))
    at_100 = [float(r["unallocated_gpu_pct"]) for r in rows
              if r["policy"] == "fgd" and r["arrived_pct"] == "100"]  # fmt: skip
    shown = " ".join(done.stdout.replace("│", " ").split())
    assert f"{min(at_100):.2f}-{max(at_100):.2f}" in shown
    assert set(rows[0]) == {"policy", "seed", "arrived_pct", "unallocated_gpu_pct", "frag_pct"}
    assert {r["policy"] for r in rows} == {
        "best_fit",
        "fgd",
        "random",
        "gpu_packing",
        "dot_product",
        "gpu_clustering",
    }
    assert {r["seed"] for r in rows} == {"1", "2", "3"}
    assert (out / "fill.svg").read_text().startswith("<?xml")


def test_bad_input_is_named() -> None:
    refused = twin_command("fill", "--trace", str(PODS), "--cluster", str(NODES),
                           "--placement", "tetris", "--out", "/tmp/never")  # fmt: skip
    assert refused.returncode == 2
    allowed = "first_fit, spread, random, dot_product, gpu_clustering, gpu_packing, best_fit, fgd"
    assert f"allowed: {allowed}" in " ".join(refused.stderr.split())
    with pytest.raises(TraceError, match="no column 'sn'"):
        read_nodes(PODS)


def test_a_pod_naming_gpu_models_goes_only_to_nodes_of_one_of_them() -> None:
    cluster = Cluster(["t4", "v100", "none"], [64_000] * 3, [64_000] * 3, [2, 4, 2],
                      ["T4", "V100M16", ""])  # fmt: skip
    assert cluster.feasible(Pod("v", 0, 0, 1, 500, "V100M16|V100M32")).tolist() == [
        False, True, False]  # fmt: skip
    assert cluster.feasible(Pod("t", 0, 0, 2, 1000, "|T4|")).tolist() == [True, False, False]
    assert cluster.feasible(Pod("any", 0, 0, 1, 500)).tolist() == [True, True, True]
    # A pod without GPUs is held to no model (the artefact reads the model only on GPU pods).
    assert cluster.feasible(Pod("cpu", 1000, 0, 0, 0, "T4")).tolist() == [True, True, True]


def test_fragmentation_counts_all_free_gpus_of_a_model_a_typical_pod_cannot_use() -> None:
    """Worked by hand. Typical pods, half each: one whole V100M16 GPU, and half of any GPU.
    A T4 node with 2 free GPUs cannot take the first: its 2,000 milli are a fragment to it,
    0.5 x 2,000 = 1,000. A V100M16 node with 4 free GPUs hosts both: 0. With 300 milli left on
    one of its GPUs, that GPU is too small for either: 0.5 x 300 + 0.5 x 300 = 300."""
    cluster = Cluster(["t4", "v100"], [64_000] * 2, [64_000] * 2, [2, 4], ["T4", "V100M16"])
    typical = typical_pods([Pod("w", 1000, 0, 1, 1000, "V100M16"), Pod("h", 1000, 0, 1, 500)])
    assert set(typical.models) == {"V100M16", ""}
    reach = cluster.typical_reach(typical)
    assert fragmentation(cluster.cpu, cluster.gpu, typical, reach).tolist() == [1000.0, 0.0]
    cluster.place(1, Pod("x", 0, 0, 1, 700), gpu=0)
    assert fragmentation(cluster.cpu, cluster.gpu, typical, reach).tolist() == [1000.0, 300.0]


def test_fgd_keeps_the_constrained_model_for_the_pods_that_need_it() -> None:
    """Worked by hand, the typical pods as above; an unconstrained half-GPU pod arrives, the
    V100M16 node first in priority. On the T4 node F falls from 1,000 to 0.5 x 1,500 = 750
    (score int(100 sigmoid(0.25)) = 56); on the V100M16 node it grows from 0 to 0.5 x 500 = 250
    (43): FGD puts it on the T4. Without the constraint both moves cost 250 and the tie goes to
    the V100M16 node."""
    pods = [Pod("w", 1000, 0, 1, 1000, "V100M16"), Pod("h", 1000, 0, 1, 500)]
    for models, node in ((["T4", "V100M16"], 0), (None, 1)):
        cluster = Cluster(["t4", "v100"], [64_000] * 2, [64_000] * 2, [2, 4], models)
        typical = typical_pods(pods if models else [replace(p, gpu_spec="") for p in pods])
        play(cluster, [Pod("new", 1000, 0, 1, 500)], "fgd", [1, 0], typical)
        assert int(cluster.gpu[node].sum()) == cluster.gpu_count[node] * 1000 - 500


def test_twin_fill_honours_gpu_models_and_refuses_them_without_a_model_column(
    tmp_path: Path,
) -> None:
    """Every pod asks for a V100M16; half the nodes are. Honoured, half the GPUs stay
    unallocated; with the constraint dropped (--ignore-gpu-spec) every GPU is used. A node list
    without models cannot honour it, so that is refused, naming the first such pod."""
    models = ("V100M16", "T4")
    nodes = csv_file(tmp_path / "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model",
                     (f"n{i},64000,262144,4,{models[i % 2]}" for i in range(4)))  # fmt: skip
    pods = csv_file(tmp_path / "pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec",
                    (f"p{i},1000,1024,1,1000,V100M16|V100M32" for i in range(16)))  # fmt: skip
    unallocated = {}
    for extra in ((), ("--ignore-gpu-spec",)):
        out = tmp_path / f"out{len(extra)}"
        done = twin_command("fill", "--trace", str(pods), "--cluster", str(nodes), "--seeds",
                            "1", "--placement", "fgd", "--out", str(out), *extra)  # fmt: skip
        assert done.returncode == 0, done.stderr
        with (out / "fill.csv").open() as f:
            unallocated[extra] = float(list(csv.DictReader(f))[-1]["unallocated_gpu_pct"])
    assert unallocated == {(): 50.0, ("--ignore-gpu-spec",): 0.0}
    bare = csv_file(tmp_path / "bare.csv", "sn,cpu_milli,memory_mib,gpu",
                    (f"n{i},64000,262144,4" for i in range(4)))  # fmt: skip
    args = ["fill", "--trace", str(pods), "--cluster", str(bare), "--seeds", "1",
            "--out", str(tmp_path / "out")]  # fmt: skip
    refused = twin_command(*args)
    assert refused.returncode == 2
    said = " ".join(refused.stderr.split())
    assert "16 of 16 pods name a GPU model (gpu_spec, the first p0: 'V100M16|V100M32')" in said
    assert "has no 'model' column to honour it with. --ignore-gpu-spec fills anyway" in said
    assert not (tmp_path / "out").exists()
    assert twin_command(*args, "--ignore-gpu-spec").returncode == 0
