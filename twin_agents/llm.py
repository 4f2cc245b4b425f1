"""An agent backed by a language model on any OpenAI-compatible chat-completions endpoint.

The model decides the whole turn: provisioning, placements among the kernel-scored plans, sealed
bids under the auction, one offer to another tenant, answers to offers, and a stated reason. Its
answer is constrained to a JSON Schema built from the request (response format `json_schema`,
or `json_object` + schema for llama.cpp) and validated with pydantic. An invalid or late answer
is retried once with the problem fed back; a second failure falls back to the configured policy
for that decision. An endpoint that times out or refuses is down for a back-off period, shared
by every agent on it (`twin_agents.health`): they fall back at once, a background probe decides when
it is back, and an ask's patience follows the model's measured latency. Every call is counted.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import orjson
from pydantic import BaseModel, ValidationError

from twin.schema.actions import REASON_CHARS
from twin.schema.wire import DecisionRequested, OfferView, RoundCommitted
from twin_agents import prompting
from twin_agents.health import EndpointHealth
from twin_agents.policy import Answer, Policy, Turn
from twin_agents.turn import BOUND, answer_model, offer_answer_model, shape, to_turn

__all__ = ["BOUND", "ChatError", "EndpointHealth", "LLMPolicy", "LLMStats", "UnreachableError"]
MARGIN_S = 0.05  # answered this long before the round's deadline, to reach the gateway in time


@dataclass
class LLMStats:
    """What the model did: its turns and answers to offers, their validity, the fallbacks, tokens
    and latency."""

    calls: int = 0
    asks: int = 0  # turns and offer answers asked of the model
    decisions: int = 0  # turns
    valid_first_try: int = 0
    valid_after_retry: int = 0
    fallbacks: int = 0  # turns the fallback policy decided
    offers_answered: int = 0
    offer_fallbacks: int = 0  # answers to offers the fallback policy gave
    offers_made: int = 0  # by the model itself
    placements: int = 0  # by the model itself
    invalid: int = 0
    late: int = 0
    http_errors: int = 0
    endpoint_down: int = 0  # asks the fallback answered at once: the endpoint was down
    probes: int = 0  # background probes of a down endpoint
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        lat = sorted(self.latency_ms)
        return {
            "calls": self.calls,
            "asks": self.asks,
            "decisions": self.decisions,
            "valid_first_try": self.valid_first_try,
            "valid_first_try_share": self.valid_first_try / self.asks if self.asks else None,
            "valid_after_retry": self.valid_after_retry,
            "fallbacks": self.fallbacks,
            "offers_answered": self.offers_answered,
            "offer_fallbacks": self.offer_fallbacks,
            "offers_made": self.offers_made,
            "placements": self.placements,
            "invalid": self.invalid,
            "late": self.late,
            "http_errors": self.http_errors,
            "endpoint_down": self.endpoint_down,
            "probes": self.probes,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "latency_ms_p50": lat[len(lat) // 2] if lat else None,
            "latency_ms_max": lat[-1] if lat else None,
        }


class ChatError(Exception):
    """The endpoint is unreachable, answered with an HTTP error, or not with a chat completion."""


class UnreachableError(ChatError):
    """The endpoint refused the connection or dropped it."""


class LLMPolicy:
    """Asks the model for each whole turn, and for answers to offers that arrive after it."""

    name = "llm"

    def __init__(
        self,
        base_url: str,
        model: str,
        fallback: Policy,
        *,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_tokens: int = 256,
        tenant: str = "",
        tenants: tuple[str, ...] = (),
        schema_format: Literal["json_schema", "json_object"] = "json_schema",
        health: EndpointHealth | None = None,
        system_prompt: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.fallback = fallback
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_tokens = max_tokens
        self.tenant = tenant
        self.tenants = tenants
        self.schema_format = schema_format
        self.health = health if health is not None else EndpointHealth()
        self.system_prompt = system_prompt  # a template with {tenant} and {others}, or the default
        self.stats = LLMStats()
        self._http: aiohttp.ClientSession | None = None
        self._decided: dict[str, Answer] = {}  # answers given within the turn, by offer id
        self._round_deadline = 0.0  # monotonic time the open round must be answered by

    # -- Policy ---------------------------------------------------------------------------

    async def decide(self, request: DecisionRequested) -> Turn:
        self.stats.decisions += 1
        self._round_deadline = time.monotonic() + request.deadline_ms / 1000 - MARGIN_S
        tenant = self.tenant or request.view.tenant
        model = answer_model(request, self.tenants or (tenant,))
        messages = [
            {"role": "system", "content": self._system(tenant)},
            {"role": "user", "content": prompting.decision(request, shape(model))},
        ]
        answer = await self._ask(messages, model)
        if answer is None:
            self.stats.fallbacks += 1
            self._decided = {}
            turn = await self.fallback.decide(request)
            turn.reason = f"fallback {self.fallback.name}: {turn.reason}"[:REASON_CHARS]
            return turn
        turn, self._decided = to_turn(answer)
        self.stats.offers_made += len(turn.offers)
        self.stats.placements += len(turn.placements)
        return turn

    async def answer(self, offer: OfferView, request: DecisionRequested | None) -> Answer:
        decided = self._decided.pop(offer.offer_id, None)
        if decided is not None:
            self.stats.offers_answered += 1
            return decided
        if request is None:
            return await self._fall_back(offer, request)
        model = offer_answer_model()
        tenant = self.tenant or request.view.tenant
        messages = [
            {"role": "system", "content": self._system(tenant)},
            {"role": "user", "content": prompting.offer(offer, request, shape(model))},
        ]
        answer = await self._ask(messages, model)
        if answer is None:
            return await self._fall_back(offer, request)
        self.stats.offers_answered += 1
        raw = answer.model_dump()
        return Answer(raw["answer"] == "accept", raw["reason"].strip())

    async def _fall_back(self, offer: OfferView, request: DecisionRequested | None) -> Answer:
        self.stats.offer_fallbacks += 1
        answer = await self.fallback.answer(offer, request)
        reason = f"fallback {self.fallback.name}: {answer.reason}"[:REASON_CHARS]
        return Answer(answer.accept, reason)

    def learn(self, outcome: RoundCommitted) -> None:
        self.fallback.learn(outcome)

    async def close(self) -> None:
        await self.health.close()
        if self._http is not None:
            await self._http.close()

    def _system(self, tenant: str) -> str:
        return prompting.system(tenant, self.tenants, self.system_prompt)

    # -- asking ---------------------------------------------------------------------------

    async def _ask(
        self, messages: list[dict[str, str]], model: type[BaseModel]
    ) -> BaseModel | None:
        """A validated answer within the round's deadline and the endpoint's patience (one
        retry with the problem fed back), or None; None at once while the endpoint is down."""
        self.stats.asks += 1
        health = self.health
        if not health.up():
            if health.probe_due():
                health.probing = asyncio.create_task(self._probe(messages, model))
            self.stats.endpoint_down += 1
            return None
        deadline = min(time.monotonic() + health.ask_timeout_s(self.timeout_s),
                       self._round_deadline)  # fmt: skip
        for attempt in (1, 2):
            left = deadline - time.monotonic()
            if left <= 0:
                self.stats.late += 1
                return None
            content = ""
            started = time.monotonic()
            try:
                content = await asyncio.wait_for(self._chat(messages, model), left)
                health.answered(time.monotonic() - started)
                answer = model.model_validate_json(content)
            except TimeoutError:  # no answer in time (or no endpoint, below): no retry, and
                self.stats.late += 1  # the endpoint is down until a probe finds it back
                health.failed()
                return None
            except UnreachableError:
                self.stats.http_errors += 1
                health.failed()
                return None
            except ChatError as exc:
                self.stats.http_errors += 1
                problem = str(exc)
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
                return answer
            messages = [
                *messages,
                {"role": "assistant", "content": content or "(no answer)"},
                {"role": "user", "content": f"That answer was rejected ({problem}). "
                 "Reply again with the JSON object only."},
            ]  # fmt: skip
        return None

    async def _probe(self, messages: list[dict[str, str]], model: type[BaseModel]) -> None:
        """Ask a down endpoint the question that found it down, with all the patience there
        is (`timeout_s`), off the round's path; its answer (any) brings the endpoint back and
        tells how long answers take."""
        self.stats.probes += 1
        started = time.monotonic()
        try:
            await asyncio.wait_for(self._chat(messages, model), self.timeout_s)
        except (TimeoutError, ChatError):
            self.health.probing = None
            self.health.failed()
        else:
            self.health.probing = None
            self.health.answered(time.monotonic() - started, probe=True)

    # -- the endpoint ---------------------------------------------------------------------

    def _response_format(self, schema: dict[str, Any]) -> dict[str, Any]:
        """The standard `json_schema` form; `json_object` with a `schema` for servers such as
        llama.cpp's that reject the former but enforce the latter as a grammar."""
        if self.schema_format == "json_object":
            return {"type": "json_object", "schema": schema}
        return {
            "type": "json_schema",
            "json_schema": {"name": "proposal", "schema": schema, "strict": True},
        }

    async def _chat(self, messages: list[dict[str, str]], model: type[BaseModel]) -> str:
        if self._http is None:
            self._http = aiohttp.ClientSession()
        body = {
            "model": self.model,
            "messages": messages,
            "temperature": 0,
            "max_tokens": self.max_tokens,
            "response_format": self._response_format(model.model_json_schema()),
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
        except aiohttp.ClientConnectionError as exc:
            # An endpoint that is down is this round's problem, not the gateway connection's.
            why = f"cannot reach the model endpoint {self.base_url}: {exc}"
            raise UnreachableError(why) from None
        except aiohttp.ClientError as exc:
            raise ChatError(f"the model endpoint {self.base_url} failed: {exc}") from None
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
