"""A tenant over MCP: any MCP client (a desktop assistant, an IDE, an agent framework) plays one
tenant of a negotiation session through tools, on the streamable HTTP transport.

`POST /v1/sessions/{id}/mcp` with the tenant's token as a bearer token carries one JSON-RPC
message; requests are answered with JSON, notifications with 202. `initialize` joins the session
as the tenant (replacing an agent connected for it) and names an `Mcp-Session-Id` that later
requests carry; `DELETE` leaves. The tools are `mcp_tools`'. Refusals are tool results with
`isError` and the gateway's code; malformed messages are JSON-RPC errors. This module checks
who calls and what may reach the server; the official SDK's server (`mcp_server`) answers.
"""

from __future__ import annotations

import secrets
from typing import Any

import orjson
from aiohttp import web
from multidict import CIMultiDict

from twin.gateway.access import bearer
from twin.gateway.http import rpc_id_ok
from twin.gateway.keys import REGISTRY
from twin.gateway.malformed import refusal
from twin.gateway.session import Session
from twin.gateway.tenant_link import TenantLink
from twin.gateway.tokens import same_token
from twin.schema.codes import ErrorCode

SESSION_HEADER = "Mcp-Session-Id"
MAX_BODY_BYTES = 64 * 1024


def _rpc_error(id_: Any, code: int, message: str, status: int = 200) -> web.Response:
    body = {"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message}}
    return web.json_response(body, status=status)


def _tenant_of(session: Session, token: str | None) -> str | None:
    found = None
    for tenant, expected in session.tokens.items():  # every token compared: constant time
        if same_token(token, expected):
            found = tenant
    return found


async def tenant_mcp(request: web.Request) -> web.StreamResponse:
    """The gateway's checks (the tenant's token, the body cap, one JSON-RPC object, a known
    `Mcp-Session-Id`), then the SDK's server answers."""
    session = request.app[REGISTRY].get(request.match_info["session_id"])
    tenant = None if session is None else _tenant_of(session, bearer(request))
    if session is None or tenant is None:  # a foreign session answers like a missing one
        return web.json_response({"code": ErrorCode.UNAUTHORIZED.value,
                                  "detail": "no such session, or not your tenant token"},
                                 status=401)  # fmt: skip
    mcp_id = request.headers.get(SESSION_HEADER)
    if request.method == "GET":
        detail = "GET opens no stream here: POST JSON-RPC messages, DELETE to leave"
        return refusal(405, ErrorCode.VALIDATION_ERROR, detail, {"Allow": "POST, DELETE"})
    if request.method == "DELETE":
        async with session.mcp_joins[tenant]:  # not in the middle of a join of the tenant's
            link = _known(session, tenant, mcp_id)
            if link is None:
                return refusal(404, ErrorCode.NOT_FOUND, UNKNOWN_ID)
            await _leave(session, link)
        return web.Response(status=204)
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        return _rpc_error(None, -32600, f"a message is at most {MAX_BODY_BYTES} bytes", 413)
    raw = await request.content.read(MAX_BODY_BYTES + 1)
    if len(raw) > MAX_BODY_BYTES:
        return _rpc_error(None, -32600, f"a message is at most {MAX_BODY_BYTES} bytes", 413)
    try:
        message = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return _rpc_error(None, -32700, f"not JSON: {exc}", 400)
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return _rpc_error(None, -32600, "one JSON-RPC 2.0 message (an object) a request", 400)
    method, id_, params = message.get("method"), message.get("id"), message.get("params") or {}
    if not rpc_id_ok(id_):
        return _rpc_error(None, -32600, "id must be a string, an integer or null", 400)
    if not isinstance(method, str) or not isinstance(params, dict):
        return _rpc_error(id_, -32600, "method must be a string and params an object", 400)
    headers = _as_json(request)
    if method == "initialize" and "id" in message:
        refused = _cannot_initialize(session, id_, message)
        if refused is not None:
            return refused
        # One join of the tenant at a time, answered before the next begins: the last
        # initialize wins, and none answers on a link a later one has already closed.
        async with session.mcp_joins[tenant]:
            link = await _join(session, tenant)
            headers.popall(SESSION_HEADER, None)  # a new session: whatever the client held goes
            return await _answer(link, request, raw, headers)
    link = _known(session, tenant, mcp_id)  # looked up now: the body's read may have waited
    if link is None:
        return refusal(404, ErrorCode.NOT_FOUND, UNKNOWN_ID)
    answered = await _answer(link, request, raw, headers)
    if request.app[REGISTRY].get(session.id) is not session:  # deleted while it was answered
        return refusal(404, ErrorCode.NOT_FOUND, "the session was deleted while this ran")
    return answered


UNKNOWN_ID = "unknown or expired Mcp-Session-Id: initialize"


def _known(session: Session, tenant: str, mcp_id: str | None) -> TenantLink | None:
    """The tenant's MCP link if `mcp_id` names it (any text: never a 500)."""
    link = session.mcp_links.get(tenant)
    return link if link is not None and same_token(mcp_id, link.mcp_id) else None


async def _answer(link: TenantLink, request: web.Request, raw: bytes,
                  headers: CIMultiDict[str]) -> web.Response:  # fmt: skip
    """The SDK's answer on `link`; a link closed meanwhile (replaced or deleted) is refused as
    unknown, as a later request with its id would be."""
    serving = link.serving
    if serving is None:
        return refusal(404, ErrorCode.NOT_FOUND, UNKNOWN_ID)
    answered = await serving.answer(request, raw, headers)
    return answered or refusal(404, ErrorCode.NOT_FOUND, UNKNOWN_ID)


def _as_json(request: web.Request) -> CIMultiDict[str]:
    """The request's headers for the SDK, which answers JSON here: a body without a media type,
    or a client that accepts anything, is taken as JSON."""
    headers = CIMultiDict(request.headers)
    if "Content-Type" not in headers:
        headers["Content-Type"] = "application/json"
    accept = headers.get("Accept", "*/*")
    if "application/json" not in accept:
        headers["Accept"] = "application/json" if "*/*" in accept or not accept else accept
    return headers


def _cannot_initialize(session: Session, id_: Any,
                       message: dict[str, Any]) -> web.Response | None:  # fmt: skip
    """Why an `initialize` cannot start a session (it leaves the tenant's current one alone)."""
    if session.ended is not None:
        return _rpc_error(id_, -32000, f"session {session.id!r} ended ({session.ended})")
    from twin.gateway import mcp_server  # the SDK, imported when a client first needs it

    wrong = mcp_server.initialize_problem(message)
    if wrong is not None:
        return _rpc_error(id_, -32602, f"initialize: {wrong}", 400)
    return None


async def _join(session: Session, tenant: str) -> TenantLink:
    """A new MCP session for `tenant`, replacing the agent or MCP client that played it."""
    from twin.gateway import mcp_server

    old = session.mcp_links.get(tenant)
    if old is not None:
        await _leave(session, old)
    link = TenantLink(tenant, secrets.token_urlsafe(24))
    serving = mcp_server.serving(session, link)
    await serving.start()
    link.serving = serving
    session.mcp_links[tenant] = link
    replaced = session.attach(link)
    if replaced is not None:
        await replaced.close(code=4000, message=b"replaced by an MCP client")
    await session.resend(link)
    return link


async def _leave(session: Session, link: TenantLink) -> None:
    await link.close()
    session.detach(link)
    if session.mcp_links.get(link.tenant) is link:
        del session.mcp_links[link.tenant]


ROUTES = [web.route("*", "/v1/sessions/{session_id}/mcp", tenant_mcp)]
