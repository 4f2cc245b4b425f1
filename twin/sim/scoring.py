"""The kernel in the decision loop: every decision round scores the plans being decided.

At each decision point the asked tenants' queued kernel jobs (the head of each queue) are
turned into candidate plans, one per pool whose accelerator the kernel knows, and the ones not
seen before are evaluated in one batched kernel call; each round leaves its `plan_evaluated`
records, and observations carry the verdicts. A job that starts runs at the verdict of the
allocation it is granted then: its pool, its GPU count, the pool's power cap. Verdicts are
cached by those inputs, so a repeated plan costs a dictionary lookup.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from twin.schema import records
from twin.schema.scenario import ClusterScenario
from twin.sim.encode import (
    Candidate,
    Evaluated,
    PlanOption,
    evaluate_candidates,
    for_scenario,
    kernel_pools,
)
from twin.sim.jobs import Job
from twin.sim.queues import TenantQueue
from twin.sim.state import ClusterState

HEAD_JOBS = 8  # the queued jobs per tenant a round scores (the ones an observation shows)


class PlanScorer:
    """Kernel verdicts on the plans a round decides, cached by their inputs."""

    def __init__(self, state: ClusterState, cfg: ClusterScenario, *, kernel_jobs: bool) -> None:
        """`kernel_jobs`: whether any workload has kernel plans (else nothing is scored)."""
        self.state = state
        self.cfg = cfg
        self.cache: dict[Candidate, Evaluated] = for_scenario(cfg).setdefault("verdicts", {})
        self.pools = kernel_pools(cfg) if kernel_jobs else []
        self.kernel_s = 0.0  # wall seconds spent in kernel calls
        self.kernel_calls = 0

    def verdicts(self, candidates: list[Candidate]) -> list[Evaluated]:
        """The verdict on each candidate; the uncached ones in one kernel call."""
        missing = list(dict.fromkeys(c for c in candidates if c not in self.cache))
        if missing:
            start = time.perf_counter()
            self.cache.update(zip(missing, evaluate_candidates(self.cfg, missing), strict=True))
            self.kernel_s += time.perf_counter() - start
            self.kernel_calls += 1
        return [self.cache[c] for c in candidates]

    def candidates(self, tenant: int, job: Job) -> list[Candidate]:
        """The job's plan on each pool it may run on (its GPU type, a known accelerator)."""
        gpu_type = job.gpu_type
        pools = self.cfg.pools
        return [
            (tenant, job.workload, job.gpus, p)
            for p in self.pools
            if gpu_type is None or pools[p].gpu_type == gpu_type
        ]

    def score_round(self, tenants: list[int], queues: Sequence[TenantQueue]) -> None:
        """Score the queued kernel jobs of the tenants asked to decide now, and log it."""
        if not self.pools:
            return
        round_candidates: dict[Candidate, None] = {}
        for t in tenants:
            for job in queues[t].first(HEAD_JOBS):
                if job.option is not None and not job.placed:
                    round_candidates.update(dict.fromkeys(self.candidates(t, job)))
        ordered = list(round_candidates)
        now, emit = self.state.env.now, self.state.emit
        for v in self.verdicts(ordered):
            emit(records.PlanEvaluated("plan_evaluated", now, *v))

    def verdict(self, tenant: int, job: Job, pool: int) -> Evaluated:
        """The verdict on the job's own plan on `pool` (cached)."""
        [v] = self.verdicts([(tenant, job.workload, job.gpus, pool)])
        return v

    def option(self, tenant: int, job: Job) -> PlanOption:
        """The job's rates on every pool under the power caps in force now."""
        n_pools = len(self.state.pools)
        rates, stable = [0.0] * n_pools, [False] * n_pools
        reasons: list[tuple[str, ...]] = [("unknown_accelerator",)] * n_pools
        for c, v in zip(cands := self.candidates(tenant, job), self.verdicts(cands), strict=True):
            p = c[3]
            rates[p] = v.tokens_per_s if v.feasible else 0.0
            stable[p] = "unstable" not in v.reasons
            reasons[p] = tuple(v.reasons)
        return PlanOption(tuple(rates), tuple(stable), tuple(reasons))
