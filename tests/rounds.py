"""One round committed through a round book, in a line: the shorthand tests use where a round's
inputs are the point and how they were collected is not."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from twin.schema.actions import Offer
from twin.schema.vocabulary import DEFAULT_MECHANISM, Mechanism
from twin.sim.driver import Driver
from twin.sim.model import TenantOutcome
from twin.sim.tenant_policies import TenantPolicy


def commit(
    driver: Driver[Any, Any],
    actions: Mapping[str, Any] | None = None,
    defaults: Mapping[str, TenantPolicy[Any, Any]] | None = None,
    *,
    offers: Sequence[Offer] = (),
    answers: Mapping[str, bool] | None = None,
    mechanism: Mechanism = DEFAULT_MECHANISM,
    announce_defaults: bool = True,
) -> Mapping[str, TenantOutcome]:
    """Commit the open round: `actions` by tenant, `offers` as made (each answered by the tenant
    it is made to, where `answers` has its id), the silent asked tenants by `defaults`. The
    tenants asked are the decision point's, and whoever acts or offers besides."""
    actions = actions or {}
    asked = list(driver.batch.reasons) if driver.batch is not None else []
    asked += [t for t in [*actions, *(o.from_tenant for o in offers)] if t not in asked]
    book = driver.book(mechanism, asked=dict.fromkeys(asked))
    for tenant, action in actions.items():
        book.propose(tenant, action)
    for o in offers:
        book.offer(o.from_tenant, o.to_tenant, o.give, o.take, reason=o.reason,
                   offer_id=o.offer_id)  # fmt: skip
    for offer_id, accepted in (answers or {}).items():
        book.answer(book.offers[offer_id].to_tenant, offer_id, accepted)
    return driver.commit(book, defaults, announce_defaults=announce_defaults)
