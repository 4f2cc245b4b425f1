"""The watch served: the dashboard page (`/`), its stylesheet and the latest view as JSON
(`/watch.json`), while the watch polls the cluster on a worker thread.

On loopback it serves anyone on this host; beyond loopback only with a token (`--token-file`),
given as `Authorization: Bearer TOKEN` or, for a browser, `?token=TOKEN`. Nothing it serves
changes the watch: every route is a GET."""

from __future__ import annotations

import asyncio
import hmac
import json
import signal
from collections.abc import Awaitable, Callable
from contextlib import suppress
from urllib.parse import urlencode

from aiohttp import web

from twin.errors import ConfigError
from twin.schema.codes import ErrorCode
from twin.watch.page import STYLE, render
from twin.watch.score import predictor
from twin.watch.watch import Watcher

HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
WATCHER: web.AppKey[Watcher] = web.AppKey("watcher", Watcher)
TOKEN: web.AppKey[str | None] = web.AppKey("token", str)
REFRESH_S: web.AppKey[float] = web.AppKey("refresh_s", float)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _problem(status: int, code: ErrorCode, detail: str) -> web.Response:
    return web.json_response({"code": code.value, "detail": detail}, status=status,
                             headers=HEADERS)  # fmt: skip


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    token = request.app[TOKEN]
    if token is not None:
        given = request.query.get("token", "")
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            given = auth.removeprefix("Bearer ")
        if not hmac.compare_digest(given.encode(), token.encode()):
            return _problem(401, ErrorCode.UNAUTHORIZED, "this watch needs its token "
                            "(Authorization: Bearer TOKEN, or ?token=TOKEN)")  # fmt: skip
    return await handler(request)


async def _page(request: web.Request) -> web.Response:
    token = request.app[TOKEN]
    query = f"?{urlencode({'token': token})}" if token is not None else ""
    body = render(request.app[WATCHER].view, request.app[REFRESH_S], query)
    return web.Response(text=body, content_type="text/html", headers=HEADERS)


async def _style(request: web.Request) -> web.Response:
    return web.Response(text=STYLE, content_type="text/css", headers=HEADERS)


async def _json(request: web.Request) -> web.Response:
    return web.Response(text=json.dumps(request.app[WATCHER].view, allow_nan=False),
                        content_type="application/json", headers=HEADERS)  # fmt: skip


async def _missing(request: web.Request) -> web.Response:
    return _problem(404, ErrorCode.NOT_FOUND, f"no {request.path} here: / is the page, "
                    "/watch.json the same as JSON")  # fmt: skip


def app(watcher: Watcher, *, token: str | None, refresh_s: float) -> web.Application:
    application = web.Application(middlewares=[_guard])
    application[WATCHER], application[TOKEN], application[REFRESH_S] = watcher, token, refresh_s
    application.router.add_get("/", _page)
    application.router.add_get("/watch.css", _style)
    application.router.add_get("/watch.json", _json)
    application.router.add_route("*", "/{tail:.*}", _missing)
    return application


async def serve(watcher: Watcher, *, host: str, port: int, interval_s: float,
                token: str | None, say: Callable[[str], None], polls: int | None = None,
                stop: asyncio.Event | None = None) -> None:  # fmt: skip
    """Serve the watch and poll every `interval_s` until SIGINT or SIGTERM (or `polls`
    polls, or `stop` is set where one is given)."""
    runner = web.AppRunner(app(watcher, token=token, refresh_s=interval_s), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:  # taken, or not an address of this host
        await runner.cleanup()
        raise ConfigError(f"--host {host} --port {port}: cannot serve there "
                          f"({exc.strerror or exc})") from None  # fmt: skip
    bound = runner.addresses[0]
    say(f"twin watch: serving http://{host}:{bound[1]}/ (JSON: /watch.json), polling "
        f"{watcher.source.described} every {interval_s:g} s")  # fmt: skip
    loop = asyncio.get_running_loop()
    signals = () if stop is not None else (signal.SIGINT, signal.SIGTERM)
    stop = stop if stop is not None else asyncio.Event()
    for s in signals:
        loop.add_signal_handler(s, stop.set)
    try:
        done = 0
        while not stop.is_set() and (polls is None or done < polls):
            errors = len(watcher.errors)
            changed = await asyncio.to_thread(watcher.poll)
            done += 1
            if changed:
                say(progress_line(watcher))
            elif len(watcher.errors) > errors:
                say(f"twin watch: {watcher.errors[-1]}")
            with suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)
    finally:
        for s in signals:
            loop.remove_signal_handler(s)
        await runner.cleanup()


def progress_line(watcher: Watcher) -> str:
    v = watcher.view
    score = v["score"]

    def err(p: str) -> str:
        e = predictor(score, p)["median_abs_error_s"]
        return "-" if e is None else f"{e:.1f} s"

    return (f"capture {v['captures']}: {v['running']} running, {v['waiting']} waiting; "
            f"scored {score['pairs']} forecasts: median |error| twin {err('twin')}, starts now "
            f"{err('starts_now')}, the cluster's estimate {err('estimate')}")  # fmt: skip
