"""The base of every schema model: frozen, unknown fields rejected."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """A validated, immutable record that rejects fields it does not know and non-finite numbers."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Event(Frozen):
    """Fields every event record carries."""

    t_s: float
    session: str
    tenant: str | None
