"""The live dashboard, served by the gateway itself: `GET /` lists the sessions and
`/sessions/{id}` shows one as it runs, from its event stream (`/v1/sessions/{id}/events?follow=1`).

The pages and their script and styles are fixed files shipped in the package, read once; they
hold no data and need no token. The data comes from the API with the reader's token as a bearer
header, so the dashboard obeys the same access rules as every other client. Nothing is loaded
from outside the gateway: the content security policy says so to the browser too.
"""

from __future__ import annotations

from importlib import resources

from aiohttp import web

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
ASSETS = {  # name: content type
    "index.html": "text/html",
    "session.html": "text/html",
    "dashboard.js": "text/javascript",
    "dashboard.css": "text/css",
}


def _files() -> dict[str, bytes]:
    folder = resources.files("twin.gateway").joinpath("static")
    return {name: folder.joinpath(name).read_bytes() for name in ASSETS}


def routes() -> list[web.RouteDef]:
    """The dashboard's routes; its files are read now, once."""
    files = _files()

    def serve(name: str) -> web.Response:
        return web.Response(body=files[name], content_type=ASSETS[name], charset="utf-8",
                            headers=HEADERS)  # fmt: skip

    async def index(request: web.Request) -> web.Response:
        return serve("index.html")

    async def session(request: web.Request) -> web.Response:
        return serve("session.html")

    async def asset(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in ASSETS or name.endswith(".html"):
            raise web.HTTPNotFound()
        return serve(name)

    return [
        web.get("/", index),
        web.get("/sessions/{session_id}", session),
        web.get("/static/{name}", asset),
    ]
