"""Gateway settings."""

from __future__ import annotations

from pydantic import Field, PositiveFloat, PositiveInt

from twin.schema.base import Frozen
from twin.schema.vocabulary import Clock, Mechanism


class GatewayConfig(Frozen):
    scenario: str = "default"
    max_sessions: PositiveInt = 16
    max_frame_bytes: PositiveInt = 64 * 1024
    rate_per_s: PositiveFloat = Field(500.0, description="Frames a connection may send per second.")
    burst: PositiveInt = 1000
    round_timeout_ms: PositiveInt = 2000
    hello_timeout_s: PositiveFloat = 10.0
    idle_timeout_s: PositiveFloat = 600.0
    reap_every_s: PositiveFloat = 5.0
    log_dir: str | None = None


class SessionRequest(Frozen):
    """POST /v1/sessions: what to simulate and how agents take part."""

    scenario: str | None = None
    seed: int = 0
    mechanism: Mechanism = "proportional"
    clock: Clock = "lockstep"
    speed: PositiveFloat = Field(60.0, description="Realtime clock: virtual seconds per second.")
    round_timeout_ms: PositiveInt | None = None
    agents: list[str] = Field(
        default_factory=list, description="Tenants whose agents the session waits for to start."
    )
    start_timeout_s: PositiveFloat = 30.0
    tokens: dict[str, str] = Field(
        default_factory=dict, description="Per-tenant tokens; generated when not given."
    )
