"""The sessions API: the operator creates, lists and deletes sessions; a session's read token
(or the operator's) reads its status and its event log."""

from __future__ import annotations

import asyncio

from aiohttp import web

from twin.errors import RefusedError, TwinError
from twin.gateway.access import bearer, client_of, unauthorized
from twin.gateway.config import SessionRequest
from twin.gateway.feed import follow
from twin.gateway.http import dumps, json_of, problem, read_body, refusal, validated
from twin.gateway.keys import CONFIG, REGISTRY, REPORTS
from twin.gateway.session import Session
from twin.gateway.tokens import same_token
from twin.schema.codes import ErrorCode


def _operator(request: web.Request) -> bool:
    return same_token(bearer(request), request.app[CONFIG].admin_token)


def _need_operator(request: web.Request, what: str) -> None:
    if not _operator(request):
        raise unauthorized(what)


def _readable(request: web.Request) -> Session:
    """The session named in the path, if the caller's token may read it."""
    session = request.app[REGISTRY].get(request.match_info["session_id"])
    if _operator(request):
        if session is None:
            raise RefusedError(ErrorCode.NOT_FOUND, "no such session")
        return session
    if session is None or not same_token(bearer(request), session.read_token):
        # The same answer whether or not the session exists: ids cannot be probed.
        raise unauthorized("reading a session")
    return session


async def create_session(request: web.Request) -> web.Response:
    try:
        _need_operator(request, "creating a session")
        spec = validated(SessionRequest, await read_body(request, optional=True))
        session = request.app[REGISTRY].create(spec, client_of(request))
    except TwinError as exc:
        return refusal(exc)
    body = {
        "session_id": session.id,
        "tokens": session.tokens,
        "read_token": session.read_token,
        "agents_url": "/v1/agents",
        **session.status().model_dump(mode="json"),
    }
    return web.json_response(body, status=201, dumps=dumps)


async def list_sessions(request: web.Request) -> web.Response:
    try:
        _need_operator(request, "listing sessions")
    except TwinError as exc:
        return refusal(exc)
    statuses = [s.status().model_dump(mode="json") for s in request.app[REGISTRY].sessions.values()]
    return web.json_response(statuses, dumps=dumps)


async def get_session(request: web.Request) -> web.Response:
    try:
        return json_of(_readable(request).status())
    except TwinError as exc:
        return refusal(exc)


async def session_events(request: web.Request) -> web.StreamResponse:
    """The session's event log as JSONL; with `?follow=1`, kept open and streamed as the
    session goes on, until it ends (a live dashboard's feed)."""
    try:
        session = _readable(request)
        following = request.query.get("follow", "0") not in {"0", "false", ""}
        client = client_of(request)
        if following:
            request.app[REGISTRY].limits.claim("event streams", client)
    except TwinError as exc:
        return refusal(exc)
    if not following:
        return web.Response(body=session.events(), content_type="application/x-ndjson")
    response = web.StreamResponse(headers={"Cache-Control": "no-store"})
    response.content_type = "application/x-ndjson"
    try:
        await response.prepare(request)
        async for piece in follow(session):
            await response.write(piece)
        await response.write_eof()
    except ConnectionResetError:
        pass  # the reader went away
    finally:
        request.app[REGISTRY].limits.release("event streams", client)
    return response


REPORT_HEADERS = {  # the report is one page: inline styles and SVG, never a script
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
        "form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
NO_ANALYSIS = "reports need pyarrow and matplotlib, which this install lacks"


async def session_report(request: web.Request) -> web.Response:
    """The session's HTML report (so far, or final once it has ended)."""
    try:
        session = _readable(request)
    except TwinError as exc:
        return refusal(exc)
    cached = session.report_html
    if cached is None:
        try:
            from twin.eventlog.report import render
        except ImportError:
            return problem(501, ErrorCode.NOT_AVAILABLE, NO_ANALYSIS)
        from twin.eventlog.export import parse_events

        ended = session.history.closed
        log = session.events()
        async with request.app[REPORTS]:  # one report drawn at a time
            page = await asyncio.to_thread(
                lambda: render(parse_events(log.splitlines(), f"session {session.id}"))
            )
        cached = page.encode()
        if ended:
            session.report_html = cached
    return web.Response(body=cached, content_type="text/html", charset="utf-8",
                        headers=REPORT_HEADERS)  # fmt: skip


async def delete_session(request: web.Request) -> web.Response:
    try:
        _need_operator(request, "deleting a session")
        if not await request.app[REGISTRY].remove(request.match_info["session_id"]):
            raise RefusedError(ErrorCode.NOT_FOUND, "no such session")
    except TwinError as exc:
        return refusal(exc)
    return web.Response(status=204)


SESSION = "/v1/sessions/{session_id}"
ROUTES = [
    web.route(method, path, handler)
    for method, path, handler in (
        ("POST", "/v1/sessions", create_session),
        ("GET", "/v1/sessions", list_sessions),
        ("GET", SESSION, get_session),
        ("DELETE", SESSION, delete_session),
        ("GET", f"{SESSION}/events", session_events),
        ("GET", f"{SESSION}/report", session_report),
    )
]
