"""The cluster a trace replays on: node groups from an inventory, one pool of --gpus, or one
pool sized from the trace's own demand."""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from twin.errors import ConfigError
from twin.replay import load
from twin.replay.formats.nodes import Inventory
from twin.replay.reader import ReadLog
from twin.schema.scenario import PoolConfig
from twin.schema.scheduling import NodeConfig, NodeGroup, ReplayParams
from twin.schema.vocabulary import Placement
from twin.sim.encode import catalog_gpu, gpu_price_usd_h
from twin.sim.jobrecord import JobRecord

DEFAULT_PRICE_USD_PER_GPU_H = 2.0
DEFAULT_PLACEMENT: Placement = "best_fit"


@dataclass
class Cluster:
    """Pools (and their nodes, from an inventory), and what they came from."""

    pools: list[PoolConfig]
    nodes: NodeConfig | None
    source: str


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9_.-]+", "-", text.lower()).strip("-") or "trace"


def build(
    records: Iterator[JobRecord],
    inventory: tuple[Path, str | None] | None,
    gpus: int | None,
    params: ReplayParams,
) -> Cluster:
    """The cluster: an inventory's nodes, `gpus` in one pool, or one pool sized from `records`
    (read only in that case), each cut to `params.capacity_share`."""
    share = params.capacity_share
    if inventory is None and params.placement is not None:
        raise ConfigError("a placement policy needs a node inventory (--cluster)")
    if inventory is not None:
        path, fmt = inventory
        inv: Inventory = load.inventory(path, fmt, ReadLog())
        if not inv.gpus:
            raise ConfigError(f"{path}: no GPU nodes")
        groups = _share(inv, share)
        kept_kinds = {g.pool for g in groups}
        dropped = sorted({slug(model) for model in inv.gpus} - kept_kinds)
        totals: dict[str, int] = {}
        for g in groups:
            totals[g.pool] = totals.get(g.pool, 0) + g.count * g.gpus
        models = {slug(m): m for m in inv.gpus}
        pools = [pool_of(models[name], n) for name, n in sorted(totals.items())]
        nodes = NodeConfig(groups=groups, placement=params.placement or DEFAULT_PLACEMENT)
        kept = sum(g.count for g in groups)
        source = f"{path} ({kept} GPU nodes" + (f", {share:.3g} of them" if share < 1 else "")
        source += f"; no {', '.join(dropped)} node left at this share)" if dropped else ")"
        return Cluster(pools, nodes, source)
    if gpus is not None:
        if gpus <= 0:
            raise ConfigError(f"--gpus must be a positive number of GPUs, got {gpus}")
        size = max(round(gpus * share), 1)
        return Cluster([pool_of("gpu", size)], None, f"{size} GPUs")
    return _sized(records, share, params.demand_quantile)


def _share(inv: Inventory, share: float) -> list[NodeGroup]:
    """`share` of the inventory's GPU nodes (at least one), apportioned over its node groups by
    largest remainder, so that every kind of node keeps its proportion; empty groups dropped."""
    shapes = sorted(inv.shapes.items())
    total = sum(n for _, n in shapes)
    target = max(round(total * share), 1)
    counts = [math.floor(n * share) for _, n in shapes]
    by_remainder = sorted(range(len(shapes)), key=lambda i: (-(shapes[i][1] * share % 1), i))
    for i in by_remainder[: target - sum(counts)]:
        counts[i] += 1
    return [
        NodeGroup(pool=slug(model), count=count, gpus=gpus, cpu_milli=cpu)
        for ((model, gpus, cpu), _), count in zip(shapes, counts, strict=True)
        if count > 0
    ]


def pool_of(name: str, gpus: int) -> PoolConfig:
    """A pool of `gpus` GPUs of the model `name`, priced from the catalog ($2/GPU-h if unknown)."""
    kernel = catalog_gpu(name)
    price = gpu_price_usd_h(kernel)
    if price is None:
        price = DEFAULT_PRICE_USD_PER_GPU_H
    return PoolConfig(name=slug(name), gpu_type=kernel, max_gpus=gpus, price_usd_per_gpu_h=price)


def _sized(records: Iterator[JobRecord], share: float, q: float) -> Cluster:
    """One pool sized from the trace's demand (every job running from its arrival)."""
    widest = 0.0
    times, deltas = array("d"), array("d")  # 16 bytes a change, not a tuple's 100
    for rec in records:
        times.extend((rec.submit_s, rec.submit_s + rec.service_s))
        deltas.extend((rec.gpus, -rec.gpus))
        widest = max(widest, rec.gpus)
    demand = demand_quantile(times, deltas, q)
    size = max(math.ceil(widest), math.ceil(demand * share), 1)
    why = f"{size} GPUs (the trace's demand, every job running from its arrival, stays at or " \
          f"below this {q * 100:g}% of the time)" if share == 1 else \
          f"{size} GPUs ({share:.3g} of the {math.ceil(demand)} that the trace's demand stays " \
          f"at or below {q * 100:g}% of the time)"  # fmt: skip
    return Cluster([pool_of("gpu", size)], None, why)


def demand_quantile(times: Sequence[float], deltas: Sequence[float], q: float) -> float:
    """The level that the GPUs in demand (+gpus at each submission, -gpus at each job's end
    had it started at once) stay at or below for a fraction `q` of the trace's span. (Packed
    arrays are read in place; temporaries are dropped as soon as they are used.)"""
    if not len(times):
        return 0.0
    t, d = _floats(times), _floats(deltas)
    order = np.lexsort((d, t))  # ends before starts at a tie
    levels = np.cumsum(d[order])
    spans = np.diff(t[order])
    del order
    total = spans.sum()
    if total <= 0:
        return float(levels.max())
    level = levels[:-1]  # the level in effect over each span
    by_level = np.argsort(level, kind="stable")
    covered = np.cumsum(spans[by_level])
    index = min(int(np.searchsorted(covered, q * total)), len(by_level) - 1)
    return float(level[by_level[index]])


def _floats(values: Sequence[float]) -> np.ndarray:
    return (
        np.frombuffer(values, dtype=float)
        if isinstance(values, array)
        else np.asarray(values, dtype=float)
    )
