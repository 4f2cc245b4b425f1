"""The figures `twin compare` tabulates for each scenario kind, read off a run's summary."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from twin.schema.summary import Summary

Figure = Callable[[Summary], float | None]


def _resource(name: str, what: str) -> Figure:
    def get(s: Summary) -> float | None:
        use = (
            next((r for r in s.agentic.resources if r.resource == name), None)
            if s.agentic
            else None
        )
        return None if use is None else getattr(use, what)

    return get


def _utilisation(s: Summary) -> float | None:
    held = sum(p.held_gpu_h for p in s.pools)
    return sum(p.busy_gpu_h for p in s.pools) / held if held else None


AGENTIC: Mapping[str, Figure] = {
    "ACT mean s": lambda s: s.agentic.act_s.mean if s.agentic else None,
    "ACT p99 s": lambda s: s.agentic.act_s.p99 if s.agentic else None,
    "step mean s": lambda s: s.agentic.step_s.mean if s.agentic else None,
    "core-h held": _resource("cpu", "held_unit_h"),
    "GPU-h held": _resource("gpu", "held_unit_h"),
    "CPU utilisation": _resource("cpu", "utilisation"),
    "GPU utilisation": _resource("gpu", "utilisation"),
    "cost $": lambda s: s.cost_usd,
}
CLUSTER: Mapping[str, Figure] = {
    "JCT mean s": lambda s: s.completion_s.mean,
    "JCT p99 s": lambda s: s.completion_s.p99,
    "delay p50 s": lambda s: s.queueing_delay_s.p50,
    "delay p99 s": lambda s: s.queueing_delay_s.p99,
    "GPU-h held": lambda s: sum(p.held_gpu_h for p in s.pools),
    "utilisation": _utilisation,
    "cost $": lambda s: s.cost_usd,
    "reward": lambda s: s.reward,
}
STEP: Mapping[str, Figure] = {
    "steps": lambda s: float(s.steps or 0),
    "cost $": lambda s: s.cost_usd,
    "SLA $": lambda s: s.sla_usd,
    "reward": lambda s: s.reward,
    "score": lambda s: s.score,
}
