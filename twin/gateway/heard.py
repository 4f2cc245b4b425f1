"""What each tenant's agent has heard of the committed rounds: the last commits it was sent (for
an agent that says on its return what it heard) and those it missed while away (resent in order
on its return), each kept to a bound."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from twin.schema.wire import RoundCommitted


class Heard:
    """Per tenant whose agent has connected: the commits told and the backlog still owed."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        # Maintain: while a tenant's backlog is not empty, its new commits join the backlog.
        self._missed: dict[str, deque[RoundCommitted]] = {}
        self._told: dict[str, deque[RoundCommitted]] = {}

    def join(self, tenant: str) -> None:
        """A tenant's agent connected (again): keep what it hears from now on."""
        self._missed.setdefault(tenant, deque(maxlen=self.keep))
        self._told.setdefault(tenant, deque(maxlen=self.keep))

    def restore(self, tenant: str, message: RoundCommitted) -> None:
        """A commit `tenant`'s agent may have heard before the gateway restarted (its log
        replayed): an agent back with what it heard is owed the rest, as if never restarted."""
        self.join(tenant)
        self._told[tenant].append(message)

    def tenants(self) -> Iterator[str]:
        """The tenants whose agents have connected."""
        return iter(self._missed)

    def tell(self, tenant: str, message: RoundCommitted, *, reachable: bool) -> bool:
        """A commit for `tenant`; whether to send it now (False: it joins the backlog, because
        the agent is away or still catching up, and follows in order)."""
        self._told[tenant].append(message)
        backlog = self._missed[tenant]
        if reachable and not backlog:
            return True
        backlog.append(message)
        return False

    def missed(self, tenant: str, message: RoundCommitted) -> None:
        """A commit that could not be sent: it is owed."""
        self._missed[tenant].append(message)

    def after(self, tenant: str, heard_round: int) -> list[RoundCommitted]:
        """The commits told to `tenant` after round `heard_round`."""
        return [m for m in self._told.get(tenant, ()) if m.round > heard_round]

    def owed(self, tenant: str, heard_round: int | None) -> deque[RoundCommitted]:
        """What a returning agent is owed, in order: the commits after `heard_round` where it
        says what it heard, else those that failed to reach it. Pop each once it is sent."""
        backlog = self._missed[tenant]
        if heard_round is not None:
            backlog.clear()
            backlog.extend(self.after(tenant, heard_round))
        return backlog
