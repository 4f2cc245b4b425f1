"""Scenario families: negotiable scenarios drawn by seed from a documented space, so an agent is
trained on some members and judged on others (`family:market/17` wherever a scenario goes).

The `market` family keeps what the arena and the learned policies rely on, two pools (`h100`,
`a100`: their order, so an observation's layout is the family's) and four hours decided every 15
minutes, and draws the rest:

- per pool: capacity, price per GPU-hour, provisioning delay (a lognormal whose median is drawn
  log-uniformly from minutes to hours) and billing (from the request or from ready);
- 2 to 6 tenants, each of an archetype (`research`: training jobs peaking in the first third,
  starting with H100s; `inference`: serving that peaks late, starting with few GPUs; `batch`:
  cheap on/off bursts on A100s), the first two of different archetypes, with its value per
  GPU-hour, SLA cost per job-hour, budget, arrival rate, peak time and the GPUs it starts with
  (each drawn from its archetype's range, as long as the pool has them left).

A member is a pure function of its seed (numpy's generator on the family's name and the seed):
the same `family:market/17` everywhere, on every machine. Provisioning takes minutes to two
hours (a median from 10 min to 2 h), and half the pools bill from the request: where GPUs are
an hour away and billed meanwhile, one handed over now is worth more to its buyer than its
rent, which is what makes trade pay. Seeds are split once and for all:
members 0-899 are the **train** split and 900-999 the **held-out** split; a seed past 999 is
refused. The named built-ins `market` and `market-scarce` lie in the space (their values are
each within the ranges drawn), and `twin families` shows them beside it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from twin.errors import ConfigError

PREFIX = "family:"
SPEC = re.compile(r"family:(?P<family>[a-z][a-z0-9-]*)(?:/(?P<seed>\d{1,9}))?")
SEEDS = 1000
TRAIN = range(0, 900)
HELD_OUT = range(900, SEEDS)
SPLITS: dict[str, range] = {"train": TRAIN, "held-out": HELD_OUT}

HORIZON_S = 14_400.0
DECISION_S = 900.0


@dataclass(frozen=True)
class Range:
    """A drawn quantity: uniform on [low, high], or log-uniform where `log`."""

    low: float
    high: float
    log: bool = False

    def draw(self, rng: np.random.Generator) -> float:
        if self.log:
            return float(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))
        return float(rng.uniform(self.low, self.high))


@dataclass(frozen=True)
class PoolSpace:
    name: str
    gpu_type: str
    speed: float
    max_gpus: tuple[int, int]
    price_usd_per_gpu_h: Range
    delay_median_s: Range


@dataclass(frozen=True)
class Archetype:
    """A kind of tenant: its workload's shape, and the ranges its numbers are drawn from (its
    peak, as a share of the horizon; the GPUs per pool it may start with)."""

    name: str
    mode: str  # the kernel's: train or infer
    gpus: tuple[int, ...]
    tokens_median: float
    plan: dict[str, Any]
    rate_per_h: Range
    value_usd_per_gpu_h: Range
    sla_usd_per_job_h: Range
    budget_usd: Range
    priority: int
    peak: Range  # share of the horizon; None-like for on/off bursts
    initial: dict[str, tuple[int, int]]
    onoff: bool = False


POOLS = (
    PoolSpace("h100", "h100", 2.0, (6, 16), Range(3.0, 4.5), Range(600.0, 7200.0, log=True)),
    PoolSpace("a100", "a100-80gb", 1.0, (6, 24), Range(2.0, 3.2), Range(600.0, 7200.0, log=True)),
)
ARCHETYPES = (
    Archetype("research", "train", (2, 4), 2.0e7,
              {"tp": 2, "micro_batch": 1, "seq_len": 2048, "zero": 3, "checkpointing": True},
              Range(1.5, 4.5), Range(7.0, 12.0), Range(0.2, 1.0), Range(800.0, 1600.0), 1,
              Range(0.0, 0.35), {"h100": (2, 8), "a100": (0, 4)}),
    Archetype("inference", "infer", (1, 2), 3.0e6, {"micro_batch": 16, "seq_len": 2048},
              Range(6.0, 16.0), Range(8.0, 13.0), Range(1.0, 3.0), Range(800.0, 1600.0), 2,
              Range(0.55, 0.95), {"h100": (0, 2), "a100": (0, 2)}),
    Archetype("batch", "infer", (1, 2, 4), 4.0e6, {"micro_batch": 64, "seq_len": 1024},
              Range(6.0, 16.0), Range(4.0, 8.0), Range(0.1, 0.4), Range(300.0, 800.0), 0,
              Range(0.0, 1.0), {"a100": (0, 4)}, onoff=True),
)  # fmt: skip
TENANTS = (2, 6)
FROM_REQUEST = 0.5  # the chance a pool bills from the request
MEMBERS = ("market", "market-scarce")
"""The named built-ins that lie in the `market` family's space."""


def is_family(spec: object) -> bool:
    return isinstance(spec, str) and spec.startswith(PREFIX)


def parse(spec: str) -> tuple[str, int | None]:
    """`family:NAME/SEED` (or `family:NAME`) as its name and seed; ConfigError if malformed."""
    match = SPEC.fullmatch(spec)
    if match is None:
        raise ConfigError(f"scenario {spec[:80]!r}: a family member is family:NAME/SEED "
                          f"(family:market/17); families: {', '.join(FAMILIES)}")  # fmt: skip
    name = match["family"]
    if name not in FAMILIES:
        raise ConfigError(f"scenario {spec[:80]!r}: no family {name!r}; "
                          f"families: {', '.join(FAMILIES)}")  # fmt: skip
    seed = match["seed"]
    if seed is None:
        return name, None
    n = int(seed)
    if n >= SEEDS:
        raise ConfigError(f"scenario {spec[:80]!r}: a member's seed is 0-{SEEDS - 1} "
                          f"(train {TRAIN.start}-{TRAIN.stop - 1}, held-out "
                          f"{HELD_OUT.start}-{HELD_OUT.stop - 1})")  # fmt: skip
    return name, n


def member(spec: str) -> dict[str, Any]:
    """The raw scenario mapping of `family:NAME/SEED`."""
    name, seed = parse(spec)
    if seed is None:
        raise ConfigError(f"scenario {spec!r} names a family, not a member: "
                          f"add /SEED (family:{name}/17), or pass --seeds train:N or "
                          "held-out:N where a command plays several")  # fmt: skip
    return FAMILIES[name](seed)


def market(seed: int) -> dict[str, Any]:
    """Member `seed` of the `market` family (see the module's docstring)."""
    rng = np.random.default_rng([0x6D61726B, seed])  # "mark"
    pools: list[dict[str, Any]] = []
    for space in POOLS:
        delay_s = space.delay_median_s.draw(rng)
        pools.append({
            "name": space.name, "gpu_type": space.gpu_type, "speed": space.speed,
            "max_gpus": int(rng.integers(space.max_gpus[0], space.max_gpus[1] + 1)),
            "price_usd_per_gpu_h": round(space.price_usd_per_gpu_h.draw(rng), 2),
            "provision_delay_s": {"dist": "lognormal", "median": round(delay_s),
                                  "sigma": round(float(rng.uniform(0.2, 0.5)), 2)},
            "billing": "from_request" if rng.random() < FROM_REQUEST else "from_ready",
        })  # fmt: skip
    count = int(rng.integers(TENANTS[0], TENANTS[1] + 1))
    # Two archetypes at least (the first two tenants differ): someone to trade with.
    first = [int(i) for i in rng.permutation(len(ARCHETYPES))[:2]]
    rest = [int(i) for i in rng.integers(len(ARCHETYPES), size=count - 2)]
    kinds = [ARCHETYPES[i] for i in first + rest]
    left = {p["name"]: int(p["max_gpus"]) for p in pools}
    tenants, seen = [], dict.fromkeys((a.name for a in ARCHETYPES), 0)
    for kind in kinds:
        seen[kind.name] += 1
        name = kind.name if seen[kind.name] == 1 else f"{kind.name}-{seen[kind.name]}"
        tenants.append(_tenant(name, kind, rng, left))
    delays = ", ".join(f"{p['name']} {p['provision_delay_s']['median'] / 60:.0f} min "
                       f"({p['billing'].replace('_', ' ')})" for p in pools)  # fmt: skip
    sizes = " and ".join(f"{p['max_gpus']} {p['name']}" for p in pools)
    names = ", ".join(t["name"] for t in tenants)
    return {
        "kind": "cluster",
        "name": f"market-{seed}",
        "description": f"Member {seed} of the market family ({_split(seed)} split): "
        f"{count} tenants ({names}) share {sizes} GPUs for four hours; new GPUs take {delays}.",
        "horizon_s": HORIZON_S,
        "pools": pools,
        "tenants": tenants,
        "queue": {"policy": "fifo", "backfill": True},
        "decisions": {"interval_s": DECISION_S, "triggers": []},
    }


def _tenant(name: str, kind: Archetype, rng: np.random.Generator,
            left: dict[str, int]) -> dict[str, Any]:  # fmt: skip
    rate = kind.rate_per_h.draw(rng)
    if kind.onoff:
        arrivals: dict[str, Any] = {"process": "onoff", "on_rate_per_h": round(2 * rate, 2),
                                    "mean_on_s": 3600.0, "mean_off_s": 3600.0}  # fmt: skip
    else:
        peak_s = round(kind.peak.draw(rng) * HORIZON_S)
        arrivals = {"process": "diurnal", "mean_rate_per_h": round(rate, 2), "amplitude": 1.0,
                    "period_s": HORIZON_S, "peak_s": peak_s}  # fmt: skip
    initial = {}
    for pool, (low, high) in kind.initial.items():
        held = min(int(rng.integers(low, high + 1)), left[pool])
        if held:
            initial[pool] = held
            left[pool] -= held
    tenant: dict[str, Any] = {
        "name": name,
        "budget_usd": round(kind.budget_usd.draw(rng)),
        "priority": kind.priority,
        "sla_usd_per_job_h": round(kind.sla_usd_per_job_h.draw(rng), 2),
        "value_usd_per_gpu_h": round(kind.value_usd_per_gpu_h.draw(rng), 2),
        "workloads": [{
            "arrivals": arrivals,
            "gpus": {"dist": "choice", "values": list(kind.gpus)},
            "kernel": {"model": "llama-3.1-8b", "mode": kind.mode,
                       "tokens": {"dist": "lognormal", "median": kind.tokens_median,
                                  "sigma": 0.5},
                       "plan": kind.plan},
        }],
    }  # fmt: skip
    if initial:
        tenant["initial_gpus"] = initial
    return tenant


def _split(seed: int) -> str:
    return "train" if seed in TRAIN else "held-out"


def seeds(family: str, selector: str) -> list[int]:
    """The member seeds `selector` names: `train:N` / `held-out:N` (the split's first N), or
    `train` / `held-out` (all of it)."""
    split, _, count = selector.partition(":")
    if split in SPLITS:
        members = SPLITS[split]
        if not count:
            return list(members)
        if not count.isdigit() or not 1 <= int(count) <= len(members):
            raise ConfigError(f"--seeds {selector}: {split}:N takes N from 1 to {len(members)}")
        return list(members[: int(count)])
    raise ConfigError(f"--seeds {selector}: with a family ({PREFIX}{family}) name a split: "
                      f"train:N or held-out:N (train {TRAIN.start}-{TRAIN.stop - 1}, held-out "
                      f"{HELD_OUT.start}-{HELD_OUT.stop - 1})")  # fmt: skip


@dataclass(frozen=True)
class Check:
    """One quantity of a scenario against the family's range for it."""

    what: str
    value: float | str
    allowed: str
    inside: bool


def membership(raw: dict[str, Any]) -> list[Check]:
    """Each quantity the `market` family draws, read off a scenario's raw mapping, against the
    family's range: a scenario every check of which is inside lies in the family's space."""
    checks: list[Check] = []

    def check(what: str, value: float, low: float, high: float) -> None:
        checks.append(Check(what, value, f"{low:g}-{high:g}", low <= value <= high))

    pools = {p["name"]: p for p in raw.get("pools", [])}
    checks.append(Check("pools", ", ".join(pools), ", ".join(p.name for p in POOLS),
                        list(pools) == [p.name for p in POOLS]))  # fmt: skip
    for space in POOLS:
        pool = pools.get(space.name)
        if pool is None:
            continue
        check(f"{space.name}.max_gpus", pool["max_gpus"], *space.max_gpus)
        price = space.price_usd_per_gpu_h
        check(f"{space.name}.price_usd_per_gpu_h", pool["price_usd_per_gpu_h"], price.low,
              price.high)  # fmt: skip
        delay = pool.get("provision_delay_s", {})
        median = delay.get("median", delay.get("value", 0.0))
        check(f"{space.name}.provision_delay median_s", median, space.delay_median_s.low,
              space.delay_median_s.high)  # fmt: skip
    tenants = raw.get("tenants", [])
    check("tenants", len(tenants), *TENANTS)
    for tenant in tenants:
        name = tenant["name"]
        kind = next((a for a in ARCHETYPES if name.startswith(a.name)), None)
        if kind is None:
            checks.append(Check(name, "no archetype", "research, inference, batch", False))
            continue
        for what, drawn in (("value_usd_per_gpu_h", kind.value_usd_per_gpu_h),
                            ("sla_usd_per_job_h", kind.sla_usd_per_job_h),
                            ("budget_usd", kind.budget_usd)):  # fmt: skip
            check(f"{name}.{what}", tenant.get(what, 0.0), drawn.low, drawn.high)
        held = tenant.get("initial_gpus", {})
        for space in POOLS:  # drawn from the archetype's range, cut to what the pool has left
            _, high = kind.initial.get(space.name, (0, 0))
            check(f"{name}.initial_gpus.{space.name}", held.get(space.name, 0), 0, high)
        arrivals = tenant["workloads"][0]["arrivals"]
        if kind.onoff:
            check(f"{name}.on_rate_per_h", arrivals.get("on_rate_per_h", 0.0),
                  2 * kind.rate_per_h.low, 2 * kind.rate_per_h.high)  # fmt: skip
        else:
            check(f"{name}.mean_rate_per_h", arrivals.get("mean_rate_per_h", 0.0),
                  kind.rate_per_h.low, kind.rate_per_h.high)  # fmt: skip
            share = arrivals.get("peak_s", 0.0) / raw.get("horizon_s", HORIZON_S)
            check(f"{name}.peak (share of horizon)", round(share, 3), kind.peak.low,
                  kind.peak.high)  # fmt: skip
    return checks


def plays(
    spec: str, selector: str, parse_seeds: Callable[[str], list[int]]
) -> list[tuple[str, int]]:
    """What a command that plays several seeds plays: (scenario, seed) pairs. A family
    (`family:market`) with `train:N` / `held-out:N` is its members, each on its own seed as
    the episode's; anything else is the one scenario on each seed `parse_seeds` reads."""
    if is_family(spec):
        name, seed = parse(spec)
        if seed is None:
            return [(f"{PREFIX}{name}/{n}", n) for n in seeds(name, selector)]
    return [(spec, n) for n in parse_seeds(selector)]


FAMILIES = {"market": market}
