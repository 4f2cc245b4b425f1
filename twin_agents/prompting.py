"""A decision request, or an offer, rendered compactly from the templates in
`twin_agents/prompts/`."""

from __future__ import annotations

from functools import cache
from importlib import resources

from twin.schema.actions import Bundle, PoolView, TenantObservation
from twin.schema.wire import DecisionRequested, OfferView

HEAD_SHOWN = 4  # waiting jobs shown, of the ones the request carries


@cache
def template(name: str) -> str:
    return (resources.files("twin_agents") / "prompts" / f"{name}.txt").read_text()


PROMPT_FIELDS = ("tenant", "others")
"""What a system prompt may name, in braces."""


def system(tenant: str, tenants: tuple[str, ...], text: str | None = None) -> str:
    """The system message: `text` (default: the shipped one) with the tenant and the others."""
    others = ", ".join(t for t in tenants if t != tenant) or "none"
    return (template("system") if text is None else text).format(tenant=tenant, others=others)


def check_system(text: str) -> str | None:
    """What is wrong with a system prompt template (None: nothing)."""
    try:
        text.format(tenant="t", others="o")
    except (KeyError, IndexError) as exc:
        return f"it names {{{exc.args[0]}}}; a prompt may name only {{tenant}} and {{others}}"
    except ValueError as exc:
        return f"{exc} (write a literal brace twice: {{{{ or }}}})"
    return None


def _budget(view: TenantObservation) -> str:
    return "unlimited" if view.budget_usd is None else f"${view.budget_usd:,.0f} left"


def _pool(p: PoolView) -> str:
    return (
        f"- {p.name}: {p.ready} / {p.busy_gpus:.0f} / {p.pending}; +{p.free_capacity}; "
        f"${p.price_usd_per_gpu_h:.2f}; x{p.speed:g}; {p.mean_provision_delay_s / 60:.0f} min"
    )


def _head(view: TenantObservation) -> str:
    lines = []
    for j in view.head[:HEAD_SHOWN]:
        plans = ", ".join(
            f"{v.pool} {v.score:.2f} {v.run_s / 60:.0f} min"
            for v in j.plans
            if v.feasible and v.run_s is not None
        )
        where = plans or ", ".join(j.pools) or "any pool"
        lines.append(f"- {j.job_id}: {j.gpus:g} GPUs, {j.wait_s / 60:.0f} min; {where}")
    return "\n".join(lines) or "- none"


def bundle(b: Bundle) -> str:
    parts = [f"{n} {pool} GPUs" for pool, n in sorted(b.gpus.items())]
    if b.usd:
        parts.append(f"${b.usd:,.2f}")
    return " and ".join(parts) or "nothing"


def _offers(offers: list[OfferView]) -> str:
    return (
        "\n".join(
            f"- {o.offer_id} from {o.from_tenant}: you get {bundle(o.give)}, you pay "
            f'{bundle(o.take)} ("{o.reason}")'
            for o in offers
        )
        or "- none"
    )


def decision(request: DecisionRequested, shape: str) -> str:
    """The user message for a whole turn."""
    v = request.view
    return template("decision").format(
        round=request.round,
        t_h=request.t_s / 3600,
        mechanism=request.mechanism,
        budget=_budget(v),
        spent_usd=v.spent_usd,
        value=v.value_usd_per_gpu_h,
        sla=v.sla_usd_per_job_h,
        queue_length=v.queue_length,
        queued_gpus=v.queued_gpus,
        running_jobs=v.running_jobs,
        pools="\n".join(_pool(p) for p in v.pools),
        head=_head(v),
        offers=_offers(request.offers),
        shape=shape,
    )


def offer(offer: OfferView, request: DecisionRequested, shape: str) -> str:
    """The user message for an answer to one offer made after the turn."""
    v = request.view
    idle = sum(p.idle_gpus for p in v.pools)
    pools = "; ".join(
        f"{p.name} ${p.price_usd_per_gpu_h:.2f} x{p.speed:g} "
        f"{p.mean_provision_delay_s / 60:.0f} min"
        for p in v.pools
    )
    return template("offer").format(
        round=request.round,
        from_tenant=offer.from_tenant,
        give=bundle(offer.give),
        take=bundle(offer.take),
        reason=offer.reason or "none given",
        queue_length=v.queue_length,
        queued_gpus=v.queued_gpus,
        idle=idle,
        budget=_budget(v),
        value=v.value_usd_per_gpu_h,
        pools=pools,
        shape=shape,
    )
