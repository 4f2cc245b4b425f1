"""Gateway settings, and what a client may ask for when it opens a session."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    StringConstraints,
    ValidationInfo,
    field_validator,
)

from twin.gateway.tokens import MIN_TOKEN_CHARS
from twin.schema.base import Frozen
from twin.schema.mechanism import RegisteredMechanism
from twin.schema.vocabulary import DEFAULT_MECHANISM, Clock, ExportFormat

Token = Annotated[str, StringConstraints(min_length=MIN_TOKEN_CHARS, max_length=512)]


class GatewayConfig(Frozen):
    """What the operator sets; every resource a client can claim has a cap here."""

    scenario: str = "default"
    scenario_dir: str | None = Field(
        None, description="Clients may name scenario files in this directory, and only here."
    )
    admin_token: str | None = Field(
        None, description="The operator token; generated when the app is created if not set."
    )
    open_env_plane: bool = Field(
        True, description="The OpenEnv plane needs no token (loopback); else the operator's."
    )
    max_sessions: PositiveInt = 16
    max_sessions_per_client: PositiveInt = 8
    max_envs: PositiveInt = 64
    max_envs_per_client: PositiveInt = Field(
        16, description="Environments one address may hold (the operator's token: any number)."
    )
    reserved_envs: NonNegativeInt | None = Field(
        None,
        description="Environments only the operator's token may take: clients without it share "
        "the rest of `max_envs` (unset: an eighth of `max_envs`, and none where it is 1).",
    )
    max_connections: PositiveInt = Field(
        4096,
        description="Open connections in all (and never past the file-descriptor limit less "
        "64): past it, the oldest idle one is closed, or the new one.",
    )
    max_connections_per_client: PositiveInt = Field(
        256, description="Open connections one address may hold, websockets included."
    )
    http_idle_timeout_s: PositiveFloat = Field(
        15.0, description="How long an HTTP connection may stay open with no request."
    )
    max_handshakes_per_client: PositiveInt = Field(
        64,
        description="Sockets one address may hold open before saying who it is; one more "
        "closes the oldest.",
    )
    handshake_grace_s: PositiveFloat = Field(
        0.5,
        description="How long a socket may stay silent and still count as saying hello: past "
        "`max_handshakes_per_client`, only sockets silent this long are closed.",
    )
    env_workers: PositiveInt = Field(
        8,
        description="Threads that run environment calls, apart from the server's own (one call "
        "at a time per client, and one thread more for the operator's).",
    )
    max_call_s: PositiveFloat = Field(
        2.0,
        description="CPU seconds of simulation one reset or step may take; past them the "
        "episode ends with a coded refusal.",
    )
    max_frame_bytes: PositiveInt = Field(64 * 1024, le=1 << 20)
    oversize_strikes: PositiveInt = Field(
        3, description="Oversize frames a connection may send before it is closed."
    )
    rate_per_s: PositiveFloat = Field(500.0, description="Frames a connection may send per second.")
    burst: PositiveInt = 1000
    round_timeout_ms: PositiveInt = 2000
    max_round_timeout_ms: PositiveInt = 60_000
    max_start_timeout_s: PositiveFloat = 300.0
    max_rounds: PositiveInt = 100_000
    max_tenants: PositiveInt = 64
    max_episode_jobs: PositiveInt = Field(
        100_000,
        description="Jobs a session's or environment's scenario may be expected to bring over "
        "its episode (after overrides), read off its config before it is admitted: a client "
        "that raises an arrival rate is refused, not given a queue that grows without bound.",
    )
    max_forecasts: PositiveInt = Field(
        2,
        description="Forecasts (ask_forecast, the MCP forecast tool) under way at once on the "
        "whole server, one per session at most; another is refused as RATE_LIMITED.",
    )
    max_requests_per_s: PositiveFloat = Field(
        500.0,
        description="HTTP requests a second one address may make (twice as many at once); "
        "past them it is answered 429 RATE_LIMITED. The operator's token is not limited.",
    )
    max_episode_nodes: PositiveInt = Field(
        20_000,
        description="Nodes a session's or environment's scenario may build (node groups, an "
        "agentic scenario's GPU nodes); the largest GPU clusters run about 12,500 8-GPU nodes.",
    )
    max_episode_events: PositiveInt = Field(
        10_000_000,
        description="Events one environment's episode may write, counted as it runs: past "
        "them (or past max_episode_jobs jobs brought, however its scenario was sized) the "
        "episode ends with a coded refusal.",
    )
    max_client_jobs: PositiveInt = Field(
        400_000,
        description="Jobs one client's environments together may be expected to bring (the "
        "operator's are not counted): what one identity can make the server simulate and hold.",
    )
    max_missed_commits: PositiveInt = Field(
        1000, description="Round commits kept for an agent that is away, to resend in order."
    )
    hello_timeout_s: PositiveFloat = Field(
        5.0, description="How long a socket may stay silent before its hello (or first frame)."
    )
    idle_timeout_s: PositiveFloat = 600.0
    finished_ttl_s: PositiveFloat = Field(
        60.0, description="How long ended sessions stay readable."
    )
    env_idle_timeout_s: PositiveFloat = 300.0
    reap_every_s: PositiveFloat = 5.0
    log_dir: str | None = None
    export: list[ExportFormat] = Field(
        default_factory=list, description="With log_dir: exports written when a session ends."
    )
    report: bool = Field(False, description="With log_dir: write each ended session's report.")

    @property
    def operator_reserve(self) -> int:
        """Environments the operator's token keeps for itself."""
        if self.reserved_envs is not None:
            return self.reserved_envs
        return max(self.max_envs // 8, 1) if self.max_envs > 1 else 0

    @field_validator("reserved_envs")
    @classmethod
    def _room_for_clients(cls, reserved: int | None, info: ValidationInfo) -> int | None:
        cap = info.data.get("max_envs")
        if reserved is not None and cap is not None and reserved >= cap:
            raise ValueError(
                f"{reserved} of the cap of {cap} environments would leave none to clients "
                "without the operator's token"
            )
        return reserved


SessionId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")]


class SessionRequest(Frozen):
    """POST /v1/sessions: what to simulate and how agents take part."""

    scenario: str | dict[str, Any] | None = Field(
        None,
        description="A built-in name, a family member (family:market/17), a file in the "
        "scenario directory, or a scenario.",
    )
    seed: NonNegativeInt = Field(0, le=2**63 - 1)
    mechanism: RegisteredMechanism = DEFAULT_MECHANISM
    trading: bool = Field(
        True, description="Whether tenants may make offers (off: every offer is refused)."
    )
    clock: Clock = "lockstep"
    speed: PositiveFloat = Field(60.0, description="Realtime clock: virtual seconds per second.")
    round_timeout_ms: PositiveInt | None = None
    agents: list[str] = Field(
        default_factory=list,
        max_length=256,
        description="Tenants whose agents the session waits for to start.",
    )
    start_timeout_s: PositiveFloat = 30.0
    tokens: dict[str, Token] = Field(
        default_factory=dict,
        max_length=256,
        description=f"Per-tenant tokens (at least {MIN_TOKEN_CHARS} characters); generated "
        "when not given.",
    )


class DeclaredSession(SessionRequest):
    """A session the operator declares in a file (`twin serve --session-file`): it opens at
    start-up under a name agents can join by; tokens missing from the file come from
    `$TWIN_TOKEN_<TENANT>` or are generated."""

    session_id: SessionId = "main"
