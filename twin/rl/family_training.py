"""Training across a scenario family: one linear provisioning policy for every seat of every
member (its tenants differ from member to member, so a row per tenant cannot carry over), found
by a cross-entropy search on the family's **train** split and judged on members it never saw.

Each generation draws members from the train split; every candidate plays each of them with
every tenant seated (the arena's `mirror`), and scores the mean over members of its return per
tenant. The search starts at the tenants' own policy (`autoscale`), so generation 0 is the
family itself. Member m plays on episode seed m. The learning curve is the gain per tenant over
the tenants' own policies on fixed validation members, drawn once from the train split and
never searched on.

The evaluation plays held-out members (900-999), each against the tenants' own policies on the
same seed: per member the welfare gain and the mean gain per tenant, pooled with 95% bootstrap
intervals over members, and the share of members where the policy gained. The named built-ins
in the family (`market`, `market-scarce`) are evaluated as any scenario is, on their held-out
seeds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from twin.rl.cem import Cem
from twin.rl.training import (
    CurvePoint,
    Interval,
    Returns,
    Trained,
    TrainSettings,
    play,
    searched,
    start_row,
)
from twin.schema.scenario import ClusterScenario
from twin.schema.vocabulary import Mechanism
from twin.sim import families, scenarios
from twin_agents.learned import AUTOSCALE_WEIGHTS, PolicyFile

Weights = tuple[float, ...] | None  # None: the tenants' own policies


def member_scenario(family: str, seed: int) -> ClusterScenario:
    return scenarios.as_cluster(scenarios.load(f"{families.PREFIX}{family}/{seed}"))


def play_member(family: str, seed: int, weights: Weights, mechanism: Mechanism,
                episode: int = 0) -> Returns:  # fmt: skip
    """Member `seed` on its `episode`-th episode seed (the first is the member's own seed),
    every tenant by `weights` (or by its own policy)."""
    scenario = member_scenario(family, seed)
    seats = {} if weights is None else {t.name: weights for t in scenario.tenants}
    return play(scenario, episode_seed(seed, episode), seats, mechanism)


def episode_seed(member: int, episode: int) -> int:
    """A member's `episode`-th episode seed: its own seed first, then past every member's."""
    return member + families.SEEDS * episode


def _play(job: tuple[str, Weights, Sequence[tuple[int, int]], Mechanism]) -> list[Returns]:
    family, weights, members, mechanism = job
    return [play_member(family, m, weights, mechanism, e) for m, e in members]


class MemberEpisodes:
    """Plays batches of (weights, members) in order, in process or on `workers` processes."""

    def __init__(self, family: str, mechanism: Mechanism, workers: int) -> None:
        self.family, self.mechanism = family, mechanism
        self.played = 0
        self._pool = ProcessPoolExecutor(workers) if workers > 1 else None

    def run(self, jobs: Sequence[tuple[Weights, Sequence[int]]],
            episodes: int = 1) -> list[list[Returns]]:  # fmt: skip
        """Each job's members, each on its first `episodes` episode seeds (member by member)."""
        self.played += sum(len(members) for _, members in jobs) * episodes
        work = [(self.family, w, [(m, e) for m in members for e in range(episodes)],
                 self.mechanism) for w, members in jobs]  # fmt: skip
        if self._pool is None:
            return [_play(job) for job in work]
        return list(self._pool.map(_play, work))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()


def per_tenant(returns: Returns) -> float:
    """A member's return per tenant (members have 2-6 tenants)."""
    return float(np.mean(list(returns.values())))


def train_family(family: str, settings: TrainSettings,
                 progress: Callable[[CurvePoint], None] | None = None) -> Trained:  # fmt: skip
    """Search the one policy's weights on the family's train split (see the module's
    docstring); the policy file's `default` row holds them."""
    rng = np.random.default_rng(settings.seed)
    train = np.array(families.TRAIN)
    start = start_row(
        settings.start.default if settings.start else AUTOSCALE_WEIGHTS, settings.mechanism
    )
    search = Cem(np.array(start), settings.cem, rng, searched(start, settings.trading_only))
    validation = sorted(int(m) for m in rng.choice(train, settings.validation_seeds,
                                                   replace=False))  # fmt: skip
    wall0, cpu0 = time.perf_counter(), time.process_time()
    curve: list[CurvePoint] = []
    episodes = MemberEpisodes(family, settings.mechanism, settings.workers)
    try:
        (base,) = episodes.run([(None, validation)])

        def point(generation: int) -> None:
            mean = tuple(float(x) for x in search.mean)
            (played,) = episodes.run([(mean, validation)])
            gain = float(np.mean([per_tenant(p) - per_tenant(b)
                                  for p, b in zip(played, base, strict=True)]))  # fmt: skip
            p = CurvePoint(generation, episodes.played, time.perf_counter() - wall0,
                           time.process_time() - cpu0, gain, {"all": gain})  # fmt: skip
            curve.append(p)
            if progress is not None:
                progress(p)

        point(0)
        for generation in range(1, settings.generations + 1):
            members = [int(m) for m in rng.choice(train, settings.seeds_per_generation,
                                                  replace=False)]  # fmt: skip
            asked = search.ask()
            results = episodes.run([(tuple(float(x) for x in c), members) for c in asked])
            scores = np.array([np.mean([per_tenant(r) for r in rows]) for rows in results])
            search.tell(asked, scores)
            point(generation)
    finally:
        episodes.close()
    weights = tuple(float(x) for x in search.mean)
    how = {
        "method": "cross-entropy search over a family's train split, one policy in every seat",
        "family": family,
        "generations": settings.generations,
        "population": settings.cem.population,
        "elite": settings.cem.elite,
        "members_per_generation": settings.seeds_per_generation,
        "validation_members": validation,
        "seed": settings.seed,
        "mechanism": settings.mechanism,
        "start_row": list(start),
        "trading_only": settings.trading_only,
        "episodes": curve[-1].episodes,
        "validation_gain_usd": curve[-1].gain_usd,
    }
    name = f"{families.PREFIX}{family}"
    return Trained(PolicyFile(name, {}, default=weights, trained=how), curve)


@dataclass(frozen=True)
class FamilyEvaluation:
    """A policy against the tenants' own policies on a family's members, each on its first
    `episodes` episode seeds (`members` names each episode's member, in order)."""

    family: str
    members: list[int]
    own: list[Returns]
    learned: list[Returns]
    episodes: int = 1

    def welfare_gains(self) -> list[float]:
        return [sum(a.values()) - sum(b.values())
                for a, b in zip(self.learned, self.own, strict=True)]  # fmt: skip

    def tenant_gains(self) -> list[float]:
        return [per_tenant(a) - per_tenant(b) for a, b in zip(self.learned, self.own, strict=True)]

    def welfare(self) -> Interval:
        """The welfare gain, its interval over members (each member's mean over its episodes)."""
        return Interval.of(self.per_member_means(self.welfare_gains()))

    def all_roles(self) -> Interval:
        return Interval.of(self.per_member_means(self.tenant_gains()))

    def per_member_means(self, gains: list[float]) -> list[float]:
        """Each member's mean of `gains` (one per episode) over its episodes."""
        return [float(np.mean(g)) for g in self.by_member(gains).values()]

    def by_member(self, gains: list[float]) -> dict[int, list[float]]:
        """`gains` (one per episode) grouped by member."""
        out: dict[int, list[float]] = {}
        for m, g in zip(self.members, gains, strict=True):
            out.setdefault(m, []).append(g)
        return out

    def share_gaining(self) -> float:
        """The share of members whose mean welfare gain is above zero."""
        gains = self.per_member_means(self.welfare_gains())
        return sum(g > 0 for g in gains) / len(gains)

    def share_significant(self) -> float | None:
        """The share of members whose gain's 95% interval (over its episodes) is above zero;
        None with one episode a member."""
        if self.episodes < 2:
            return None
        gains = list(self.by_member(self.welfare_gains()).values())
        return sum(Interval.of(g).low > 0 for g in gains) / len(gains)

    def to_json(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "members": self.members,
            "welfare_gain_usd": self.welfare().to_json(),
            "all_roles_gain_usd": self.all_roles().to_json(),
            "episodes_per_member": self.episodes,
            "share_of_members_gaining": self.share_gaining(),
            "share_of_members_gaining_significantly": self.share_significant(),
            "per_member": [{"member": m, "tenants": len(b), "own_usd": b, "learned_usd": a}
                           for m, a, b in zip(self.members, self.learned, self.own,
                                              strict=True)],
        }  # fmt: skip


def evaluate_family(family: str, policy: PolicyFile, members: Sequence[int], *,
                    mechanism: Mechanism, workers: int = 1,
                    episodes: int = 1) -> FamilyEvaluation:  # fmt: skip
    """The policy (its `default` row) in every seat of each member, against the tenants' own
    policies on the same seeds: each member on its first `episodes` episode seeds."""
    played = MemberEpisodes(family, mechanism, workers)
    try:
        chunks = [list(members[i::workers]) for i in range(max(workers, 1))]
        chunks = [c for c in chunks if c]
        own = played.run([(None, c) for c in chunks], episodes)
        learned = played.run([(policy.default, c) for c in chunks], episodes)
    finally:
        played.close()
    order = [(m, e) for c in chunks for m in c for e in range(episodes)]
    by_own = dict(zip(order, (r for rows in own for r in rows), strict=True))
    by_learned = dict(zip(order, (r for rows in learned for r in rows), strict=True))
    keys = [(m, e) for m in members for e in range(episodes)]
    return FamilyEvaluation(family, [m for m, _ in keys], [by_own[k] for k in keys],
                            [by_learned[k] for k in keys], episodes)  # fmt: skip
