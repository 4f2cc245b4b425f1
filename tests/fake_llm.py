"""A tiny deterministic OpenAI-compatible chat endpoint, for the agent's protocol and error paths.

The `model` name picks the behaviour: `valid`, `invalid-once`, `out-of-bounds`, `slow` (5 s),
`http500`, `garbage` (a chat completion whose content is never JSON).
It answers with an instance of the JSON Schema in the request (1 where a number is allowed, 0
in what an offer takes, the last choice of a string enum, one item per array), and records
requests.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import web

REQUESTS = web.AppKey("requests", list)


def _instance(schema: dict[str, Any], value: int, defs: dict[str, Any]) -> Any:
    if "$ref" in schema:
        return _instance(defs[schema["$ref"].rsplit("/", 1)[-1]], value, defs)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        choices = schema["enum"]
        return value if isinstance(choices[0], int) else choices[-1]
    if schema.get("type") == "object":
        props = schema.get("properties", {})
        return {k: _instance(v, 0 if k.startswith("take") else value, defs)
                for k, v in props.items()}  # fmt: skip
    if schema.get("type") == "array":
        return [_instance(schema["items"], value, defs)]
    if schema.get("type") == "string":
        return "fake reason"
    return value


def _answer(schema: dict[str, Any], value: int) -> str:
    return orjson.dumps(_instance(schema, value, schema.get("$defs", {}))).decode()


async def chat(request: web.Request) -> web.Response:
    body = await request.json()
    request.app[REQUESTS].append(body)
    model = body["model"]
    fmt = body.get("response_format", {})
    schema = fmt.get("json_schema", {}).get("schema") or fmt.get("schema") or {}
    calls = sum(1 for r in request.app[REQUESTS] if r["model"] == model)
    if model == "http500":
        return web.json_response({"error": "boom"}, status=500)
    if model == "slow":
        await asyncio.sleep(5)
    if model == "out-of-bounds":
        content = _answer(schema, 99)
    elif (model == "invalid-once" and calls % 2 == 1) or model == "garbage":
        content = "Sure! Here is my answer: {"
    else:
        content = _answer(schema, 1)
    return web.json_response(
        {
            "id": f"chatcmpl-{calls}",
            "object": "chat.completion",
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
        }
    )


def fake_llm_app() -> web.Application:
    app = web.Application()
    app[REQUESTS] = []
    app.router.add_post("/v1/chat/completions", chat)
    return app
