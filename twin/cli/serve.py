"""`twin serve`: the gateway (agent sessions + OpenEnv control plane) on one aiohttp server."""

from __future__ import annotations

import argparse
import gc

import structlog
from aiohttp import web

from twin.gateway.app import create_app
from twin.gateway.config import GatewayConfig, SessionRequest
from twin.gateway.keys import REGISTRY
from twin.logs import configure_logging
from twin.schema.vocabulary import CLOCKS, MECHANISMS


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sv = sub.add_parser("serve", help="run the gateway: agent sessions and the OpenEnv plane")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8000)
    sv.add_argument("--scenario", default="default", help="default scenario (built-in or file)")
    sv.add_argument("--max-sessions", type=int, default=16)
    sv.add_argument("--round-timeout-ms", type=int, default=2000)
    sv.add_argument("--log-dir", help="write each session's event log (<session>.jsonl) here")
    sv.add_argument(
        "--session",
        action="store_true",
        help="open one negotiation session at start-up and log its id and tenant tokens",
    )
    sv.add_argument(
        "--agents", default="", help="with --session: tenants to wait for, comma-separated"
    )
    sv.add_argument("--mechanism", choices=MECHANISMS, default="proportional")
    sv.add_argument("--clock", choices=CLOCKS, default="lockstep")
    sv.add_argument("--seed", type=int, default=0)
    sv.set_defaults(func=serve_command)


def serve_command(args: argparse.Namespace) -> int:
    from twin.sim import scenarios

    configure_logging()
    scenarios.load(args.scenario)  # a bad scenario is an error before the server starts
    config = GatewayConfig(
        scenario=args.scenario,
        max_sessions=args.max_sessions,
        round_timeout_ms=args.round_timeout_ms,
        log_dir=args.log_dir,
    )
    app = create_app(config)
    if args.session:
        request = SessionRequest(
            seed=args.seed,
            mechanism=args.mechanism,
            clock=args.clock,
            agents=[a for a in args.agents.split(",") if a],
            start_timeout_s=3600.0,
        )

        async def open_session(app: web.Application) -> None:
            session = app[REGISTRY].create(request)
            structlog.get_logger().info(
                "session_open", session_id=session.id, tokens=session.tokens
            )

        app.on_startup.append(open_session)
    # Everything made so far (modules, schemas, the app) is long-lived: keep it out of the
    # collector's full passes, which otherwise pause the event loop for tens of milliseconds.
    gc.freeze()
    log = structlog.get_logger()
    log.info("gateway_starting", host=args.host, port=args.port, scenario=args.scenario)
    web.run_app(app, host=args.host, port=args.port, print=None, handle_signals=True)
    log.info("gateway_stopped")
    return 0
