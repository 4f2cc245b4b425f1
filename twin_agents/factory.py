"""Building an agent's policy by name: a built-in one, or an LLM agent with a built-in fallback."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from twin_agents.health import EndpointHealth
from twin_agents.llm import LLMPolicy
from twin_agents.policy import Policy
from twin_agents.registry import LLM, builtin


@dataclass(frozen=True)
class LlmEndpoint:
    """An OpenAI-compatible chat-completions endpoint for LLM agents; the agents made with one
    share its health (a dead endpoint is found dead once for all of them)."""

    base_url: str
    model: str
    api_key: str | None = None
    schema_format: Literal["json_schema", "json_object"] = "json_schema"
    health: EndpointHealth = field(default_factory=EndpointHealth, compare=False)
    system_prompt: str | None = None  # a template with {tenant} and {others}; None: the shipped one


def make_policy(
    name: str,
    tenants: list[str],
    tenant: str,
    *,
    seed: int = 0,
    fallback: str = "stepper",
    llm: LlmEndpoint | None = None,
) -> Policy:
    """The policy called `name` acting for `tenant`; ValueError says what is missing."""
    if name != LLM:
        return builtin(name, tenants, tenant, seed)
    if llm is None:
        raise ValueError("an llm agent needs a model endpoint (base URL and model)")
    return LLMPolicy(
        llm.base_url,
        llm.model,
        builtin(fallback, tenants, tenant, seed),
        api_key=llm.api_key,
        tenant=tenant,
        tenants=tuple(tenants),
        schema_format=llm.schema_format,
        health=llm.health,
        system_prompt=llm.system_prompt,
    )
