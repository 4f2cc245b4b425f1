"""Reference training on a job-level scenario: a cross-entropy search over the linear
provisioning policy of `twin_agents.learned`, one row of weights per tenant, on the scenario's
training seeds; its learning curve on fixed validation seeds; its gain over the tenants' own
policies on held-out seeds, with 95% intervals.

Every tenant plays the policy being trained at once (the arena's `mirror`): each generation each
tenant's search draws a population, candidate i of every tenant plays in one episode, and each
tenant keeps the candidates that earned it the most. The search starts at each tenant's own
policy (`autoscale` or `static` as weights), so generation 0 is the scenario itself and a gain is
what training found. An episode here is exactly a gateway session of the same seed with the
policy seated over the websocket: the arena's returns equal these to the cent.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from twin.eventlog.intervals import bootstrap
from twin.rl.cem import Cem, CemSettings
from twin.rl.seeds import seed_split
from twin.schema.scenario import ClusterScenario
from twin.schema.vocabulary import DEFAULT_MECHANISM, MECHANISM_TRAITS, Mechanism
from twin.sim.driver import Driver
from twin_agents.learned import AUTOSCALE_WEIGHTS, FEATURES, MARKET_START, PolicyFile, decide

LEARNED = "learned"  # the policy name the log records for the trained policy's decisions
STATIC_WEIGHTS: tuple[float, ...] = (0.0,) * len(FEATURES)
START: dict[str, tuple[float, ...]] = {"autoscale": AUTOSCALE_WEIGHTS, "static": STATIC_WEIGHTS}
"""The weights that play a scenario's own policy, by its name."""

Seats = Mapping[str, Sequence[float]]
Returns = dict[str, float]


def play(scenario: ClusterScenario, seed: int, seats: Seats,
         mechanism: Mechanism = DEFAULT_MECHANISM) -> Returns:  # fmt: skip
    """One episode: the tenants in `seats` by the linear policy with their weights, the others
    by their own policies; every tenant's return (the summary's `reward_usd`)."""
    driver: Driver[Any, Any] = Driver(scenario, seed=seed)
    defaults = driver.default_policies()
    clears = MECHANISM_TRAITS[mechanism].clears_held
    asked: dict[str, dict[str, int]] = {t: {} for t in seats}  # each seat's asks last round
    while (batch := driver.advance()) is not None:
        book = driver.book(mechanism)
        for tenant in batch.reasons:
            weights = seats.get(tenant)
            if weights is not None:
                action = decide(driver.observe(tenant), weights, clears=clears,
                                asked=asked[tenant])  # fmt: skip
                book.propose(tenant, action, policy=LEARNED)
        driver.commit(book, defaults, announce_defaults=False)
    return {t: driver.settlement(t)[1] for t in driver.tenants}


def start_weights(
    scenario: ClusterScenario, mechanism: Mechanism = DEFAULT_MECHANISM
) -> dict[str, tuple[float, ...]]:
    """Each tenant's own policy as weights (a policy with no such row starts at autoscale),
    and where the mechanism clears held GPUs the call market's parameters after them."""
    return {t.name: start_row(START.get(t.policy, AUTOSCALE_WEIGHTS), mechanism)
            for t in scenario.tenants}  # fmt: skip


def start_row(weights: tuple[float, ...], mechanism: Mechanism) -> tuple[float, ...]:
    """`weights`, and where `mechanism` clears held GPUs, the trading parameters after them
    (those `weights` carries, else `MARKET_START`; a row of the first three gets the rest from
    it): the search then learns to trade as well as to provision. Elsewhere the provisioning
    weights alone."""
    provisioning, trading = weights[: len(FEATURES)], weights[len(FEATURES) :]
    if not MECHANISM_TRAITS[mechanism].clears_held:
        return provisioning
    return provisioning + trading + MARKET_START[len(trading) :]


def searched(row: tuple[float, ...], trading_only: bool) -> np.ndarray:
    """Which parameters of `row` a search moves: all, or with `trading_only` only those after
    the provisioning weights."""
    mask = np.ones(len(row), dtype=bool)
    if trading_only:
        mask[: len(FEATURES)] = False
    return mask


# -- playing many episodes, on one core or a pool -------------------------------------------

_WORKER: dict[str, Any] = {}


def _init(scenario: ClusterScenario, mechanism: Mechanism) -> None:
    _WORKER.update(scenario=scenario, mechanism=mechanism)


def _play_seeds(job: tuple[Seats, Sequence[int]]) -> list[Returns]:
    seats, seeds = job
    return [play(_WORKER["scenario"], s, seats, _WORKER["mechanism"]) for s in seeds]


class Episodes:
    """Plays batches of (seats, seeds) in order, in process or on `workers` processes; counts
    the episodes it played."""

    def __init__(self, scenario: ClusterScenario, mechanism: Mechanism, workers: int) -> None:
        self.workers = max(workers, 1)
        self.played = 0
        _init(scenario, mechanism)
        self._pool = (
            ProcessPoolExecutor(self.workers, initializer=_init, initargs=(scenario, mechanism))
            if self.workers > 1
            else None
        )

    def run(self, jobs: Sequence[tuple[Seats, Sequence[int]]]) -> list[list[Returns]]:
        self.played += sum(len(seeds) for _, seeds in jobs)
        if self._pool is None:
            return [_play_seeds(job) for job in jobs]
        return list(self._pool.map(_play_seeds, jobs))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()

    def __enter__(self) -> Episodes:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


# -- training ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainSettings:
    """How long and how widely to search. The defaults train `market` or `market-scarce` in
    a few minutes on two cores (`docs/training.md` has the figures)."""

    generations: int = 40
    seeds_per_generation: int = 16
    validation_seeds: int = 16
    held_out_seeds: int = 30
    cem: CemSettings = field(default_factory=lambda: CemSettings(population=32, elite=8))
    seed: int = 0
    mechanism: Mechanism = DEFAULT_MECHANISM
    workers: int = 1
    start: PolicyFile | None = None
    """A policy to start the search from (its rows), instead of the tenants' own policies."""
    trading_only: bool = False
    """Search only the trading parameters; the provisioning weights keep their start."""


@dataclass(frozen=True)
class CurvePoint:
    """The learning curve after one generation: the current policy's gain over the tenants'
    own policies on the fixed validation seeds (mean over tenants, and per tenant)."""

    generation: int
    episodes: int
    wall_s: float
    cpu_s: float
    gain_usd: float
    tenant_gain_usd: dict[str, float]


@dataclass(frozen=True)
class Trained:
    policy: PolicyFile
    curve: list[CurvePoint]


def _gains(played: list[Returns], base: list[Returns], tenants: Sequence[str]) -> dict[str, float]:
    return {t: float(np.mean([p[t] - b[t] for p, b in zip(played, base, strict=True)]))
            for t in tenants}  # fmt: skip


def train(scenario: ClusterScenario, settings: TrainSettings,
          progress: Callable[[CurvePoint], None] | None = None) -> Trained:  # fmt: skip
    """Search each tenant's weights on the training seeds; the learning curve on validation
    seeds (drawn once from the training split, never searched on)."""
    split = seed_split(scenario.name)
    rng = np.random.default_rng(settings.seed)
    tenants = [t.name for t in scenario.tenants]
    start = start_weights(scenario, settings.mechanism)
    if settings.start is not None:
        start = {t: start_row(settings.start.for_tenant(t), settings.mechanism) for t in start}
    searches = {t: Cem(np.array(w), settings.cem, rng, searched(w, settings.trading_only))
                for t, w in start.items()}  # fmt: skip
    validation = split.draw("train", rng, settings.validation_seeds)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    curve: list[CurvePoint] = []
    with Episodes(scenario, settings.mechanism, settings.workers) as episodes:
        (base,) = episodes.run([({}, validation)])

        def point(generation: int) -> CurvePoint:
            means = {t: tuple(s.mean.tolist()) for t, s in searches.items()}
            (played,) = episodes.run([(means, validation)])
            gains = _gains(played, base, tenants)
            p = CurvePoint(generation, episodes.played, time.perf_counter() - wall0,
                           time.process_time() - cpu0, float(np.mean(list(gains.values()))),
                           gains)  # fmt: skip
            curve.append(p)
            if progress is not None:
                progress(p)
            return p

        point(0)
        for generation in range(1, settings.generations + 1):
            seeds = split.draw("train", rng, settings.seeds_per_generation)
            asked = {t: s.ask() for t, s in searches.items()}
            n = settings.cem.population
            results = episodes.run([({t: tuple(asked[t][i].tolist()) for t in tenants}, seeds)
                                    for i in range(n)])  # fmt: skip
            for t, search in searches.items():
                scores = np.array([np.mean([r[t] for r in rows]) for rows in results])
                search.tell(asked[t], scores)
            point(generation)
    weights = {t: tuple(float(x) for x in s.mean) for t, s in searches.items()}
    how = {
        "method": "cross-entropy search, every tenant at once",
        "generations": settings.generations,
        "population": settings.cem.population,
        "elite": settings.cem.elite,
        "seeds_per_generation": settings.seeds_per_generation,
        "validation_seeds": validation,
        "seed": settings.seed,
        "mechanism": settings.mechanism,
        "start_weights": {t: list(w) for t, w in start.items()},
        "trading_only": settings.trading_only,
        "episodes": curve[-1].episodes,
        "validation_gain_usd": curve[-1].gain_usd,
    }
    return Trained(PolicyFile(scenario.name, weights, trained=how), curve)


# -- evaluation -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Interval:
        low, high = bootstrap(values)
        return cls(float(np.mean(values)), low, high)

    def to_json(self) -> dict[str, float]:
        return {"mean": self.mean, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class Evaluation:
    """A policy against the tenants' own policies on the same seeds, every tenant seated:
    returns per seed, and the gains with 95% bootstrap intervals over seeds (per tenant; `all`,
    per seed the mean over tenants, the arena's "all roles" row; and welfare)."""

    scenario: str
    seeds: list[int]
    own: list[Returns]
    learned: list[Returns]

    @property
    def tenants(self) -> list[str]:
        return list(self.own[0])

    def own_usd(self, tenant: str) -> float:
        """The tenant's mean return under its own policy."""
        return float(np.mean([r[tenant] for r in self.own]))

    def gain(self, tenant: str) -> Interval:
        return Interval.of([a[tenant] - b[tenant] for a, b in self._pairs()])

    def all_roles(self) -> Interval:
        return Interval.of([float(np.mean([a[t] - b[t] for t in a])) for a, b in self._pairs()])

    def welfare(self) -> Interval:
        return Interval.of([sum(a.values()) - sum(b.values()) for a, b in self._pairs()])

    def _pairs(self) -> list[tuple[Returns, Returns]]:
        return list(zip(self.learned, self.own, strict=True))

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "seeds": self.seeds,
            "gain_usd": {t: self.gain(t).to_json() for t in self.tenants},
            "all_roles_gain_usd": self.all_roles().to_json(),
            "welfare_gain_usd": self.welfare().to_json(),
            "own_usd": {t: self.own_usd(t) for t in self.tenants},
            "learned_usd": {t: float(np.mean([r[t] for r in self.learned])) for t in self.tenants},
            "per_seed": [{"seed": s, "own_usd": b, "learned_usd": a}
                         for s, a, b in zip(self.seeds, self.learned, self.own, strict=True)],
        }  # fmt: skip


def evaluate(scenario: ClusterScenario, policy: PolicyFile, seeds: Sequence[int], *,
             mechanism: Mechanism = DEFAULT_MECHANISM, workers: int = 1) -> Evaluation:  # fmt: skip
    """The policy in every seat against the tenants' own policies, seed by seed."""
    seats = {t.name: policy.for_tenant(t.name) for t in scenario.tenants}
    with Episodes(scenario, mechanism, workers) as episodes:
        chunks = [list(seeds[i :: episodes.workers]) for i in range(episodes.workers)]
        chunks = [c for c in chunks if c]
        own = episodes.run([({}, c) for c in chunks])
        learned = episodes.run([(seats, c) for c in chunks])
    order = [s for c in chunks for s in c]
    by_seed_own = dict(zip(order, (r for rows in own for r in rows), strict=True))
    by_seed_learned = dict(zip(order, (r for rows in learned for r in rows), strict=True))
    return Evaluation(scenario.name, list(seeds), [by_seed_own[s] for s in seeds],
                      [by_seed_learned[s] for s in seeds])  # fmt: skip


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
