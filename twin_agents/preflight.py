"""A model endpoint checked before a session relies on it: the URL is a URL, the server answers,
and one short completion of the model named, with a prompt the size of a turn's, comes back,
timed (where it does not, and the server
lists its models without that one, the error says so: some servers answer under any name).
A session then starts knowing its LLM agents can be answered, and how long a first answer may
take; an endpoint that fails is one clear error before anything runs, not a session of silent
fallbacks."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
import orjson

FIRST_ANSWER_FACTOR = 3.0  # a turn reads about as much as the probe and writes ~4x its tokens
FIRST_ANSWER_FLOOR_S = 2.0
PROBE_TOKENS = 32
CONTEXT_CHARS = 2400  # about a turn's prompt (its view and instructions): ~600 tokens


class PreflightError(Exception):
    """The endpoint cannot serve the LLM agents; the message says why and where."""


@dataclass(frozen=True)
class Preflight:
    """What the check found: the models the endpoint lists (None where it lists none) and how
    long the probe's completion took."""

    base_url: str
    model: str
    models: tuple[str, ...] | None
    latency_s: float

    def first_answer_s(self, ceiling_s: float) -> float:
        """How long LLM agents may wait for a first answer, before their own latencies are
        known: the probe's latency scaled to a whole turn (which reads as much and writes about
        four times the probe's answer), at least two seconds, at most `ceiling_s`."""
        return min(max(FIRST_ANSWER_FLOOR_S, FIRST_ANSWER_FACTOR * self.latency_s), ceiling_s)


def check_url(base_url: str) -> str:
    """The base URL, if it is an http(s) URL with a host; PreflightError if not."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PreflightError(f"{base_url!r} is not an http(s) URL with a host "
                             "(say http://127.0.0.1:8080/v1)")  # fmt: skip
    return base_url.rstrip("/")


async def preflight(base_url: str, model: str, *, api_key: str | None = None,
                    timeout_s: float = 60.0) -> Preflight:  # fmt: skip
    """Check the endpoint (see the module); PreflightError names what failed."""
    url = check_url(base_url)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout, headers=headers) as http:
            models = await _models(http, url)
            try:
                latency_s = await _tiny_completion(http, url, model)
            except PreflightError:
                if models is not None and model not in models:  # the likely reason
                    listed = ", ".join(models[:8]) or "none"
                    raise PreflightError(f"{url} does not serve the model {model!r}; it "
                                         f"lists: {listed}") from None  # fmt: skip
                raise
    except aiohttp.ClientConnectionError as exc:
        raise PreflightError(f"cannot reach the model endpoint {url}: {exc}") from None
    except TimeoutError:
        raise PreflightError(f"the model endpoint {url} did not answer within "
                             f"{timeout_s:g} s") from None  # fmt: skip
    except aiohttp.ClientError as exc:
        raise PreflightError(f"the model endpoint {url} failed: {exc}") from None
    return Preflight(url, model, models, latency_s)


async def _models(http: aiohttp.ClientSession, url: str) -> tuple[str, ...] | None:
    """The model ids `GET /models` lists; None where the endpoint has no such list."""
    async with http.get(f"{url}/models") as resp:
        if resp.status != 200:
            return None
        try:
            data = orjson.loads(await resp.read())
            return tuple(str(m["id"]) for m in data["data"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return None


def probe_messages() -> list[dict[str, str]]:
    """A question the size of a turn's prompt (the shipped prompts, repeated to a turn's
    length) that asks for more than `PROBE_TOKENS` tokens of answer. It opens with a nonce, so
    a server's prompt cache cannot answer it faster than a turn's new prompt would be."""
    from twin_agents.prompting import template

    context = " ".join(template(name) for name in ("system", "decision", "offer"))
    context = (context * (CONTEXT_CHARS // len(context) + 1))[:CONTEXT_CHARS]
    ask = "Count from 1 to 100, the numbers separated by spaces."
    return [{"role": "system", "content": f"[{secrets.token_hex(8)}] {context}"},
            {"role": "user", "content": ask}]  # fmt: skip


async def _tiny_completion(http: aiohttp.ClientSession, url: str, model: str) -> float:
    """The time one short chat completion with a turn-sized prompt takes; PreflightError if it
    is not one."""
    body = {"model": model, "max_tokens": PROBE_TOKENS, "temperature": 0,
            "messages": probe_messages()}  # fmt: skip
    start = time.perf_counter()
    async with http.post(f"{url}/chat/completions", json=body) as resp:
        raw = await resp.read()
        if resp.status != 200:
            raise PreflightError(f"{url}/chat/completions answered HTTP {resp.status} for the "
                                 f"model {model!r}: {raw[:160]!r}")  # fmt: skip
    latency_s = time.perf_counter() - start
    try:
        reply = orjson.loads(raw)
        reply["choices"][0]["message"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        raise PreflightError(f"{url}/chat/completions did not answer with a chat "
                             "completion") from None  # fmt: skip
    return latency_s
