"""An agent backed by a language model on any OpenAI-compatible chat-completions endpoint.

The model's answer is constrained to the proposal's JSON Schema (response format
`json_schema`) and validated with pydantic. An invalid or late answer is retried once with the
problem fed back; a second failure falls back to the configured policy. Every call is counted:
first-try validity, retries, fallbacks, token usage, latency.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal

import aiohttp
import orjson
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from agents.policy import Policy, Turn
from twin.schema.actions import TenantObservation
from twin.schema.wire import DecisionRequested, OfferView, RoundCommitted

BOUND = 8  # GPUs a pool may move by in one answer


def template(name: str) -> str:
    return (resources.files("agents") / "prompts" / f"{name}.txt").read_text()


@dataclass
class LLMStats:
    """What the model did: answers, their validity, retries, fallbacks, tokens and latency."""

    calls: int = 0
    decisions: int = 0
    valid_first_try: int = 0
    valid_after_retry: int = 0
    fallbacks: int = 0
    invalid: int = 0
    late: int = 0
    http_errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: list[float] = field(default_factory=list)
    answers: list[dict[str, int]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        lat = sorted(self.latency_ms)
        return {
            "calls": self.calls,
            "decisions": self.decisions,
            "valid_first_try": self.valid_first_try,
            "valid_first_try_share": self.valid_first_try / self.decisions
            if self.decisions
            else None,
            "valid_after_retry": self.valid_after_retry,
            "fallbacks": self.fallbacks,
            "invalid": self.invalid,
            "late": self.late,
            "http_errors": self.http_errors,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "latency_ms_p50": lat[len(lat) // 2] if lat else None,
            "latency_ms_max": lat[-1] if lat else None,
        }


class ChatError(Exception):
    """The endpoint answered with an HTTP error or something that is not a chat completion."""


class LLMPolicy:
    """Asks the model for each round's provisioning; offers are left to the fallback policy."""

    name = "llm"

    def __init__(
        self,
        base_url: str,
        model: str,
        fallback: Policy,
        *,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        max_tokens: int = 96,
        tenant: str = "",
        schema_format: Literal["json_schema", "json_object"] = "json_schema",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.fallback = fallback
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_tokens = max_tokens
        self.tenant = tenant
        self.schema_format = schema_format
        self.stats = LLMStats()
        self._http: aiohttp.ClientSession | None = None
        self._answer_model: type[BaseModel] | None = None
        self._pools: tuple[str, ...] = ()

    # -- Policy ---------------------------------------------------------------------------

    async def decide(self, request: DecisionRequested) -> Turn:
        self.stats.decisions += 1
        answer_model = self._model_for(request.view)
        budget_s = min(self.timeout_s, max(request.deadline_ms / 1000 - 0.05, 0.05))
        deadline = time.monotonic() + budget_s
        messages = [
            {
                "role": "system",
                "content": template("system").format(tenant=self.tenant or request.view.tenant),
            },
            {"role": "user", "content": render(request, self._pools)},
        ]
        for attempt in (1, 2):
            left = deadline - time.monotonic()
            if left <= 0:
                self.stats.late += 1
                break
            try:
                content = await asyncio.wait_for(self._chat(messages, answer_model), left)
                answer = answer_model.model_validate_json(content)
            except TimeoutError:
                self.stats.late += 1
                problem = "too late: answer faster, with the JSON object only"
                content = ""
            except ChatError as exc:
                self.stats.http_errors += 1
                problem = str(exc)
                content = ""
            except ValidationError as exc:
                self.stats.invalid += 1
                first = exc.errors()[0]
                where = ".".join(map(str, first["loc"])) or "answer"
                problem = f"invalid answer: {where}: {first['msg']}"
            else:
                if attempt == 1:
                    self.stats.valid_first_try += 1
                else:
                    self.stats.valid_after_retry += 1
                provision = {k: int(v) for k, v in answer.model_dump().items() if v}
                self.stats.answers.append(provision)
                return Turn(provision=provision)
            messages += [
                {"role": "assistant", "content": content or "(no answer)"},
                {
                    "role": "user",
                    "content": f"That answer was rejected ({problem}). "
                    "Reply again with the JSON object only.",
                },
            ]
        self.stats.fallbacks += 1
        return await self.fallback.decide(request)

    def answer(self, offer: OfferView, request: DecisionRequested | None) -> bool:
        return self.fallback.answer(offer, request)

    def learn(self, outcome: RoundCommitted) -> None:
        self.fallback.learn(outcome)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    # -- the endpoint ---------------------------------------------------------------------

    def _model_for(self, view: TenantObservation) -> type[BaseModel]:
        pools = tuple(p.name for p in view.pools)
        if self._answer_model is None or pools != self._pools:
            # An enum of the allowed moves, not min/max: grammar-constrained servers (llama.cpp)
            # enforce enums, and so every answer they give is within bounds.
            moves = Literal[tuple(range(-BOUND, BOUND + 1))]  # type: ignore[valid-type]
            fields: dict[str, Any] = dict.fromkeys(pools, (moves, ...))
            self._answer_model = create_model(
                "Proposal", __config__=ConfigDict(extra="forbid"), **fields
            )
            self._pools = pools
        return self._answer_model

    def _response_format(self, schema: dict[str, Any]) -> dict[str, Any]:
        """The standard `json_schema` form; `json_object` with a `schema` for servers such as
        llama.cpp's that reject the former but enforce the latter as a grammar."""
        if self.schema_format == "json_object":
            return {"type": "json_object", "schema": schema}
        return {
            "type": "json_schema",
            "json_schema": {"name": "proposal", "schema": schema, "strict": True},
        }

    async def _chat(self, messages: list[dict[str, str]], answer_model: type[BaseModel]) -> str:
        if self._http is None:
            self._http = aiohttp.ClientSession()
        body = {
            "model": self.model,
            "messages": messages,
            "temperature": 0,
            "max_tokens": self.max_tokens,
            "response_format": self._response_format(answer_model.model_json_schema()),
        }
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        self.stats.calls += 1
        start = time.perf_counter()
        try:
            async with self._http.post(
                f"{self.base_url}/chat/completions", json=body, headers=headers
            ) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    raise ChatError(f"HTTP {resp.status} from the model endpoint: {raw[:200]!r}")
        except aiohttp.ClientError as exc:
            # An endpoint that is down is this round's problem, not the gateway connection's.
            raise ChatError(f"cannot reach the model endpoint {self.base_url}: {exc}") from None
        finally:
            self.stats.latency_ms.append((time.perf_counter() - start) * 1000)
        try:
            reply = orjson.loads(raw)
            content = reply["choices"][0]["message"]["content"] or ""
            usage = reply.get("usage") or {}
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
            raise ChatError(f"not a chat completion: {exc!r}") from None
        self.stats.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        self.stats.completion_tokens += int(usage.get("completion_tokens") or 0)
        return str(content)


def render(request: DecisionRequested, pools: tuple[str, ...]) -> str:
    """The observation, compactly, from the prompt template."""
    v = request.view
    budget = "unlimited" if v.budget_usd is None else f"${v.budget_usd:,.0f} left"
    pool_lines = "\n".join(
        f"- {p.name}: {p.ready} / {p.busy_gpus:.0f} / {p.pending}; +{p.free_capacity}; "
        f"${p.price_usd_per_gpu_h:.2f}"
        for p in v.pools
    )
    head = (
        "\n".join(
            f"- {j.job_id}: {j.gpus:g} GPUs, waited {j.wait_s:.0f} s, "
            f"runs on {', '.join(j.pools) or 'any pool'}"
            for j in v.head[:4]
        )
        or "- none"
    )
    example = orjson.dumps(dict.fromkeys(pools, 0)).decode()
    return template("decision").format(
        round=request.round,
        t_s=request.t_s,
        budget=budget,
        spent_usd=v.spent_usd,
        queue_length=v.queue_length,
        queued_gpus=v.queued_gpus,
        running_jobs=v.running_jobs,
        pools=pool_lines,
        head=head,
        low=-BOUND,
        high=BOUND,
        example=example,
    )
