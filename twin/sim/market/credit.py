"""Credit for a committed round: the kernel scores every tenant's allocation as it stands.

A tenant holds its GPUs in each pool (in a shared pool: those its jobs occupy). Its useful GPUs
are its running jobs' GPUs, each weighted by its plan's kernel score (a
job without a model plan by its pool's speed relative to the fastest pool). Its demand is what
its running and queued jobs need, or what it holds if more. The kernel's settlement floors a
tenant that holds more than its fair share while another is short (hoarding) and gives each
its difference reward; a tenant holding no GPUs while its jobs wait, or running degenerate
plans (all-FP8, all-FP32), gets the floor score too. Every tenant's credit is logged.
"""

from __future__ import annotations

from twin.schema import records
from twin.sim.encode import round_credit
from twin.sim.model import TenantOutcome
from twin.sim.pools import own_jobs
from twin.sim.queues import Waiting
from twin.sim.state import ClusterState

FLOOR_SCORE = 0.01


def credit_round(state: ClusterState, waiting: Waiting, out: dict[str, TenantOutcome]) -> None:
    """Score every tenant's allocation after the round and credit it (tenant order)."""
    held, useful, demand, flags = [], [], [], []
    for t in range(len(state.tenant_names)):
        holdings = state.holdings[t]
        running = [job for h in holdings for job in own_jobs(h, t)]
        queued_gpus = waiting.queued_milli[t] / 1000
        held.append(
            float(sum(h.ready + h.pending_gpus for h in holdings if not h.pool.cfg.shared))
            + sum(job.gpus for job in running if state.pools[job.pool].cfg.shared)
        )
        useful.append(sum(job.quality * job.gpus for job in running))
        demand.append(max(held[-1], sum(job.gpus for job in running) + queued_gpus))
        why = sorted({flag for job in running for flag in job.flags})
        if held[-1] == 0 and queued_gpus > 0:
            why.append("degenerate_zero_gpus")
        flags.append(why)
    capacity = float(sum(pool.cfg.max_gpus for pool in state.pools))
    credit = round_credit(held, useful, demand, capacity)
    now = state.env.now
    for t, name in enumerate(state.tenant_names):
        reasons = flags[t] + (["degenerate_hoarding"] if credit.hoarding[t] else [])
        score = FLOOR_SCORE if reasons else credit.score[t]
        o = out[name]
        o.difference_reward, o.score, o.credit_reasons = (
            credit.difference_reward[t],
            score,
            tuple(reasons),
        )
        state.emit(
            records.RoundCredited(
                "round_credited",
                now,
                name,
                held[t],
                demand[t],
                credit.useful_gpus[t],
                score,
                o.difference_reward,
                reasons,
                o.reward,
            )
        )
