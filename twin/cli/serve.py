"""`twin serve`: the gateway (agent sessions + OpenEnv control plane) on one aiohttp server."""

from __future__ import annotations

import argparse
import gc
import ipaddress
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from twin.cli.arg_types import at_least_one, at_least_zero, port, positive_ms, seed
from twin.errors import ConfigError
from twin.gateway.tokens import ADMIN_TOKEN_ENV, MIN_TOKEN_CHARS
from twin.schema.vocabulary import CLOCKS, DEFAULT_MECHANISM, mechanism_names

if TYPE_CHECKING:
    import asyncio

    from aiohttp import web

    from twin.gateway.config import DeclaredSession, GatewayConfig
    from twin.gateway.session import Session


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sv = sub.add_parser("serve", help="run the gateway: agent sessions and the OpenEnv plane")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=port, default=8000)
    sv.add_argument("--scenario", default="default", help="default scenario (built-in or file)")
    sv.add_argument("--max-sessions", type=at_least_one, default=16)
    sv.add_argument(
        "--max-envs-per-client", type=at_least_one, default=16,
        help="OpenEnv environments one address may hold (the operator's token: any number)",
    )  # fmt: skip
    sv.add_argument(
        "--reserved-envs", type=at_least_zero, default=None, metavar="N",
        help="OpenEnv environments only the operator's token may take (default: an eighth "
        "of the 64)",
    )  # fmt: skip
    sv.add_argument(
        "--max-connections", type=at_least_one, default=4096, metavar="N",
        help="open connections in all, kept below the file-descriptor limit: past it, the "
        "oldest idle one closes",
    )  # fmt: skip
    sv.add_argument("--round-timeout-ms", type=positive_ms, default=2000)
    sv.add_argument(
        "--max-tenants", type=at_least_one, default=64, help="tenants a session's scenario may have"
    )
    sv.add_argument(
        "--max-episode-jobs", type=at_least_one, default=100_000, metavar="N",
        help="jobs a session's or environment's scenario may be expected to bring over its "
        "episode, after a client's overrides, and may bring while it runs (default 100,000)",
    )  # fmt: skip
    sv.add_argument(
        "--max-requests-per-s", type=float, default=500.0, metavar="R",
        help="HTTP requests a second one address may make, twice as many at once (default 500; "
        "the operator's token is not limited)",
    )  # fmt: skip
    sv.add_argument(
        "--max-episode-nodes", type=at_least_one, default=20_000, metavar="N",
        help="nodes a session's or environment's scenario may build (default 20,000)",
    )  # fmt: skip
    sv.add_argument(
        "--max-episode-events", type=at_least_one, default=10_000_000, metavar="N",
        help="events an environment's episode may write while it runs (default 10,000,000)",
    )  # fmt: skip
    sv.add_argument(
        "--max-client-jobs", type=at_least_one, default=400_000, metavar="N",
        help="jobs one client's environments together may be expected to bring "
        "(default 400,000; the operator's are not counted)",
    )  # fmt: skip
    sv.add_argument("--log-dir", help="write each session's event log (<session>.jsonl) here")
    sv.add_argument(
        "--export",
        metavar="FORMATS",
        help="with --log-dir: when a session ends, export its log (parquet, csv and/or "
        "perfetto, comma-separated) into <log-dir>/<session>/",
    )
    sv.add_argument(
        "--report", action="store_true", help="with --log-dir: write each ended session's report"
    )
    sv.add_argument(
        "--admin-token-file",
        help=f"the operator token (else ${ADMIN_TOKEN_ENV}; on loopback, generated and printed)",
    )
    sv.add_argument("--scenario-dir", help="clients may name scenario files in this directory")
    sv.add_argument(
        "--open-env-plane",
        action="store_true",
        help="serve the OpenEnv plane without a token on a non-loopback address too",
    )
    sv.add_argument(
        "--session",
        action="store_true",
        help="open one negotiation session at start-up and log its id and tenant tokens",
    )
    sv.add_argument(
        "--agents", default="", help="with --session: tenants to wait for, comma-separated"
    )
    sv.add_argument(
        "--session-file",
        help="declare a session (YAML/JSON: session_id, scenario, seed, agents, tokens, ...) "
        "that agents join by name; tokens may come from $TWIN_TOKEN_<TENANT>",
    )
    sv.add_argument(
        "--session-id",
        metavar="ID",
        help="with --session-file: the declared session's id instead of the file's (play a "
        "session again under a fresh id, beside the earlier one's log)",
    )
    sv.add_argument(
        "--exit-when-done",
        action="store_true",
        help="with --session or --session-file: stop once that session has ended and its "
        "agents have left (a compose service that finishes)",
    )
    sv.add_argument("--mechanism", choices=mechanism_names(), default=DEFAULT_MECHANISM)
    sv.add_argument("--clock", choices=CLOCKS, default="lockstep")
    sv.add_argument("--seed", type=seed, default=0)
    sv.set_defaults(func=serve_command)


def serve_command(args: argparse.Namespace) -> int:
    import asyncio

    import structlog

    from twin.gateway import serving
    from twin.gateway.app import create_app
    from twin.gateway.config import SessionRequest
    from twin.gateway.keys import REGISTRY
    from twin.logs import configure_logging
    from twin.sim import scenarios
    from twin.sim.encode import warm_kernel
    from twin.sweep.execute import in_background

    configure_logging()
    if args.session_id is not None and not args.session_file:
        raise ConfigError("--session-id names the session --session-file declares: give "
                          "--session-file")  # fmt: skip
    scenarios.load(args.scenario)  # a bad scenario is an error before the server starts
    token = operator_token(args.admin_token_file)
    config = gateway_config(args, token)
    listening = listen(args.host, args.port)  # a busy port: one line, before anything prints
    # A long-lived server loads the compiled kernel before it serves, so that no round of any
    # session stalls on the load or shares the interpreter with it (on a thread started once
    # the input is checked, it overlaps the rest of start-up; a load that fails here fails
    # again, with its error, where a batch needs it).
    loading = in_background(warm_kernel)
    if token is None:
        print(f"operator token (generated): {config.admin_token}", file=sys.stderr, flush=True)
        host = f"[{args.host}]" if ":" in args.host else args.host
        print(f"dashboard: http://{host}:{args.port}/#token={config.admin_token}",
              file=sys.stderr, flush=True)  # fmt: skip
    app = create_app(config)
    stoppers: list[asyncio.Task[None]] = []  # held here: the loop keeps only weak references
    if args.session_file:
        app.on_startup.append(open_declared(args, config, stoppers))
    if args.session:
        request = SessionRequest(
            seed=args.seed,
            mechanism=args.mechanism,
            clock=args.clock,
            agents=[a for a in args.agents.split(",") if a],
            start_timeout_s=config.max_start_timeout_s,
        )

        async def open_session(app: web.Application) -> None:
            session = app[REGISTRY].create(request)
            if args.exit_when_done:
                stoppers.append(asyncio.create_task(stop_after(session)))
            structlog.get_logger().info(
                "session_open",
                session_id=session.id,
                tokens=session.tokens,
                read_token=session.read_token,
            )

        app.on_startup.append(open_session)
    loading.join()
    from twin.kernel.jit import loaded
    from twin.kernel.tables import default_tables

    # Everything made so far (modules, schemas, the app, the kernel) is long-lived: keep it out
    # of the collector's full passes, which otherwise pause the event loop for tens of ms.
    gc.freeze()
    log = structlog.get_logger()
    log.info("gateway_starting", host=args.host, port=args.port, scenario=args.scenario,
             kernel_loaded=loaded(default_tables()))  # fmt: skip
    serving.run(app, listening, _event_loop())
    log.info("gateway_stopped")
    return 0


def listen(host: str, port: int) -> socket.socket:
    """The server's listening socket, bound now; ConfigError naming the port if it cannot be
    (another program listens there, say)."""
    import errno

    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return socket.create_server((host, port), family=family, backlog=128)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"--port {port}: the port is in use on {host} (another program "
                              "listens there); choose another port") from None  # fmt: skip
        raise ConfigError(f"--host {host} --port {port}: cannot listen there "
                          f"({exc.strerror or type(exc).__name__})") from None  # fmt: skip


def open_declared(
    args: argparse.Namespace, config: GatewayConfig, stoppers: list[asyncio.Task[None]]
) -> Callable[[web.Application], Awaitable[None]]:
    """The start-up hook that opens the session `--session-file` declares, or resumes it where
    a restarted gateway restored it from its log."""
    import asyncio

    import structlog

    from twin.gateway.config import SessionRequest
    from twin.gateway.keys import REGISTRY
    from twin.gateway.recovery import SIDECAR
    from twin.sim import scenarios

    declared = declared_session(Path(args.session_file), os.environ, args.session_id)
    spec = declared.scenario
    if isinstance(spec, str):  # the operator's own file may name any scenario or file
        spec = scenarios.load(spec).model_dump(mode="json")
    fields = declared.model_dump(exclude={"session_id"}, exclude_unset=True)
    request = SessionRequest.model_validate({**fields, "scenario": spec,
                                             "tokens": declared.tokens})  # fmt: skip

    async def hook(app: web.Application) -> None:
        registry = app[REGISTRY]
        session = registry.get(declared.session_id)  # restored from its log after a crash
        ended = _ended_log(config, declared.session_id) if session is None else None
        if ended is not None and args.exit_when_done:
            # A restart after the declared session ended: nothing is left to run.
            structlog.get_logger().info(
                "session_already_ended",
                session_id=declared.session_id,
                log=str(ended),
                hint="--session-id plays it again under a fresh id (compose: TWIN_SESSION=...)",
            )
            asyncio.get_running_loop().call_soon(signal.raise_signal, signal.SIGTERM)
            return
        if session is None or session.ended is not None:
            session = registry.create(request, session_id=declared.session_id)
        if args.exit_when_done:
            stoppers.append(asyncio.create_task(stop_after(session)))
        generated = {t: k for t, k in session.tokens.items() if t not in request.tokens}
        where: dict[str, object] = {"generated_tokens": generated}
        if config.log_dir is not None:  # the tokens are in the session's 0600 sidecar
            sidecar = Path(config.log_dir) / f"{session.id}{SIDECAR}"
            where = {"generated_tokens": sorted(generated), "tokens_file": str(sidecar)}
        # Never the read token: the operator's token reads every session.
        structlog.get_logger().info("session_open", session_id=session.id, **where)

    return hook


def _ended_log(config: GatewayConfig, session_id: str) -> Path | None:
    """The log of a session `session_id` that ended, if the log directory holds one (one that
    had not ended would have been restored)."""
    from twin.gateway.recovery import log_path

    if config.log_dir is None:
        return None
    log = log_path(config.log_dir, session_id)
    ended = log.is_file() and b'"kind":"episode_ended"' in log.read_bytes()[-65536:]
    return log if ended else None


def gateway_config(args: argparse.Namespace, token: str | None) -> GatewayConfig:
    """The gateway's settings from the command line, refused before the server starts."""
    from pydantic import ValidationError

    from twin.cli.analyse import require_analysis
    from twin.eventlog.formats import parse_formats
    from twin.gateway.config import GatewayConfig
    from twin.gateway.tokens import new_token

    loopback = is_loopback(args.host)
    if token is None and not loopback:
        raise ConfigError(
            f"serving on {args.host} (not loopback) needs an operator token: "
            f"--admin-token-file FILE or ${ADMIN_TOKEN_ENV}"
        )
    if (args.export or args.report) and not args.log_dir:
        raise ConfigError("--export and --report write beside the session logs: give --log-dir")
    formats = parse_formats(args.export) if args.export else []
    if args.export or args.report:
        require_analysis()
    if args.scenario_dir is not None and not Path(args.scenario_dir).is_dir():
        raise ConfigError(f"--scenario-dir {args.scenario_dir}: not a directory")
    if args.log_dir is not None:
        require_writable(Path(args.log_dir))
    try:
        return GatewayConfig(
            scenario=args.scenario,
            scenario_dir=args.scenario_dir,
            admin_token=token or new_token(),
            open_env_plane=loopback or args.open_env_plane,
            max_sessions=args.max_sessions,
            max_envs_per_client=args.max_envs_per_client,
            reserved_envs=args.reserved_envs,
            max_tenants=args.max_tenants,
            max_episode_jobs=args.max_episode_jobs,
            max_episode_events=args.max_episode_events,
            max_episode_nodes=args.max_episode_nodes,
            max_requests_per_s=args.max_requests_per_s,
            max_client_jobs=args.max_client_jobs,
            max_connections=args.max_connections,
            max_connections_per_client=max(256, 4 * args.max_tenants),
            round_timeout_ms=args.round_timeout_ms,
            log_dir=args.log_dir,
            export=formats,
            report=args.report,
        )
    except ValidationError as exc:
        raise ConfigError("; ".join(
            f"--{'-'.join(str(p) for p in e['loc']).replace('_', '-')}: "
            f"{e['msg'].removeprefix('Value error, ')} (got {e['input']!r})"
            for e in exc.errors()
        )) from None  # fmt: skip


def require_writable(directory: Path) -> None:
    """`directory` exists (made if missing) and this process can create files in it; refused
    before the server starts, naming the directory, its owner and who we run as."""
    import tempfile

    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".twin-write-check-"):
            pass
    except OSError as exc:
        try:
            owner = f", owned by uid {directory.stat().st_uid}"
        except OSError:
            owner = ""
        raise ConfigError(
            f"--log-dir {directory}: cannot write there as uid {os.getuid()}{owner}: "
            f"{exc.strerror or exc}"
        ) from None


async def stop_after(session: Session, linger_s: float = 10.0) -> None:
    """Stop the server (as SIGTERM would) once `session` has ended and its agents have left,
    or `linger_s` after it ended."""
    import asyncio
    import signal

    while session.task is None:
        await asyncio.sleep(0.1)
    await asyncio.wait([session.task])
    if session.task.cancelled():  # the server is stopping already (a SIGTERM, say)
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + linger_s
    while session.agents and loop.time() < deadline:
        await asyncio.sleep(0.1)
    signal.raise_signal(signal.SIGTERM)


def operator_token(path: str | None) -> str | None:
    """The operator token from `path`, else from the environment; None if neither is set."""
    if path is not None:
        from twin.text_files import read_text

        token = read_text(Path(path), f"--admin-token-file {path}").strip()
        where = f"--admin-token-file {path}"
    else:
        token = os.environ.get(ADMIN_TOKEN_ENV, "").strip()
        where = f"${ADMIN_TOKEN_ENV}"
        if not token:
            return None
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"{where}: the operator token needs {MIN_TOKEN_CHARS}+ characters")
    return token


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback address (or `localhost`)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _event_loop() -> asyncio.AbstractEventLoop:
    """uvloop where it is installed (a faster event loop for the websocket traffic),
    else asyncio's own loop."""
    import asyncio

    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def declared_session(
    path: Path, environ: Mapping[str, str], session_id: str | None = None
) -> DeclaredSession:
    """The session a file declares, with tenant tokens from `$TWIN_TOKEN_<TENANT>` where the
    file gives none, a scenario file named relative to the session file, and `session_id`
    (`--session-id`) in place of the file's where given; errors name the file and the field."""
    from pydantic import ValidationError

    from twin.gateway.config import DeclaredSession
    from twin.sim.scenarios import describe, parse_text
    from twin.text_files import read_text

    where = f"--session-file {path}"
    raw = parse_text(read_text(path, where), where, as_json=False, quote=True)
    if not isinstance(raw, dict):
        raise ConfigError(f"--session-file {path}: a session must be a mapping")
    scenario = raw.get("scenario")
    if isinstance(scenario, str) and scenario.endswith((".yaml", ".yml", ".json")):
        raw["scenario"] = str(path.parent / scenario)  # an absolute path stays as it is
    agents, tokens = raw.get("agents"), raw.get("tokens", {})
    if isinstance(agents, list) and isinstance(tokens, dict):  # else validation says what
        env = {t: environ.get(f"TWIN_TOKEN_{str(t).upper().replace('-', '_')}") for t in agents}
        tokens = {**{t: k for t, k in env.items() if k}, **tokens}
    if session_id is not None:
        try:
            DeclaredSession.model_validate({"session_id": session_id})
        except ValidationError as exc:
            raise ConfigError(f"--session-id: {describe(exc, quote=False)}") from None
        raw["session_id"] = session_id
    try:
        return DeclaredSession.model_validate({**raw, "tokens": tokens})
    except ValidationError as exc:
        raise ConfigError(f"--session-file {path}: {describe(exc, quote=False)}") from None
