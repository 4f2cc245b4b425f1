"""`twin`: run scenarios, list them, benchmark the twin."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from twin import __version__
from twin.cli.arg_types import out_dir, seed
from twin.errors import TwinError
from twin.schema.vocabulary import EVENTS_FILE, SUMMARY_FILE


def _run(args: argparse.Namespace) -> int:
    from twin.cli.analyse import check_output_options, write_outputs
    from twin.cli.progress import horizon_h, progress_bar
    from twin.cli.render import console_for, print_json, print_summary
    from twin.sim import scenarios
    from twin.sim.runner import run_episode

    check_output_options(args)
    scenario = scenarios.load(args.scenario, args.set or ())
    out = Path(args.out) if args.out else None
    console = console_for(args)
    with progress_bar(console, "running (virtual time)", horizon_h(scenario), "h") as advance:
        summary, _ = run_episode(
            scenario, seed=args.seed, policy=args.policy, out_dir=out,
            progress=None if advance is None else lambda t_s: advance(t_s / 3600),
        )  # fmt: skip
    print_summary(summary, console)
    if out is not None:
        console.print(f"wrote {out / EVENTS_FILE} and {out / SUMMARY_FILE}")
    write_outputs(args, console)
    if args.json:
        print_json("run", summary=summary, out=args.out)
    return 0


def _scenarios(args: argparse.Namespace) -> int:
    """A plain listing: name, kind, and the description wrapped beside them (no rich: this
    command answers at once)."""
    import shutil
    import textwrap

    from twin.sim.catalog import listing

    rows = listing()
    name_w = max(len(n) for n, _, _ in rows)
    kind_w = max(len(k) for _, k, _ in rows)
    indent = name_w + kind_w + 4
    width = max(shutil.get_terminal_size((100, 24)).columns - indent, 30)
    print(f"{'name':<{name_w}}  {'kind':<{kind_w}}  description")
    for name, kind, description in rows:
        lines = textwrap.wrap(description, width) or [""]
        print(f"{name:<{name_w}}  {kind:<{kind_w}}  {lines[0]}")
        for more in lines[1:]:
            print(" " * indent + more)
    return 0


def _schema(args: argparse.Namespace) -> int:
    from twin.schema import export

    if args.write:
        for path in export.write_all(Path(args.write)):
            print(path)
        return 0
    if args.name not in export.MODELS:
        raise TwinError(f"unknown schema {args.name!r}; allowed: {', '.join(export.MODELS)}")
    sys.stdout.write(export.render(args.name))
    return 0


def _bench(args: argparse.Namespace) -> int:
    from twin.bench import run_benchmarks

    return run_benchmarks(args.which, as_json=args.json, quick=args.quick, libratio=args.libratio)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="twin", description=__doc__)
    parser.add_argument("--version", action="version", version=f"twin {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    from twin.cli import (
        analyse,
        arena,
        bound,
        compare,
        families,
        fill,
        forecast,
        kernel,
        play,
        replay,
        serve,
        sweep,
        trace_scenario,
        train,
        warm,
        watch,
    )

    run = sub.add_parser("run", help="play a scenario to its end and summarise it")
    run.add_argument("--scenario", default="default", help="built-in name or YAML/JSON file")
    run.add_argument("--seed", type=seed, default=0)
    run.add_argument("--policy", help="policy for every tenant (default: each tenant's own)")
    run.add_argument("--out", type=out_dir, help=f"directory for {EVENTS_FILE} and {SUMMARY_FILE}")
    run.add_argument(
        "--set", action="append", metavar="PATH=VALUE", help="override a scenario field"
    )
    analyse.add_output_options(run)
    analyse.add_json_option(run)
    run.set_defaults(func=_run)

    scen = sub.add_parser("scenarios", help="list the built-in scenarios")
    scen.set_defaults(func=_scenarios)

    schema = sub.add_parser("schema", help="print a model's JSON Schema")
    schema.add_argument("name", nargs="?", default="scenario", help="scenario, event, ...")
    schema.add_argument(
        "--write", type=out_dir, metavar="DIR", help="write every schema as DIR/<name>.json"
    )
    schema.set_defaults(func=_schema)

    analyse.add_parsers(sub)
    compare.add_parser(sub)
    sweep.add_parser(sub)
    kernel.add_parser(sub)
    replay.add_parsers(sub)
    trace_scenario.add_parser(sub)
    fill.add_parser(sub)
    forecast.add_parser(sub)
    forecast.add_backtest_parser(sub)
    watch.add_parser(sub)
    serve.add_parser(sub)
    play.add_parser(sub)
    arena.add_parser(sub)
    bound.add_parser(sub)
    families.add_parser(sub)
    train.add_parser(sub)
    warm.add_parser(sub, entry=main, prepare=keep_parser)

    bench = sub.add_parser("bench", help="measure the twin's speed")
    bench.add_argument(
        "which",
        nargs="?",
        default="all",
        help="sim, rl, kernel, replay, nodes, gateway, hostile, startup, export, sweep, arena, "
        "tenants, fill or all",
    )
    bench.add_argument("--json", action="store_true", help="print only the JSON figures")
    bench.add_argument("--quick", action="store_true", help="fewer repetitions (smoke test)")
    bench.add_argument(
        "--libratio", type=Path, metavar="DIR",
        help="a checkout of SnippyCodes/Libratio: run its kernel_benchmark.py beside the kernel's",
    )  # fmt: skip
    bench.set_defaults(func=_bench)
    return parser


_KEPT: list[argparse.ArgumentParser] = []


def keep_parser() -> None:
    """Build the parser once and keep it (the warm process does, for its workers)."""
    _KEPT[:] = [build_parser()]


def _saved(args: argparse.Namespace) -> str:
    """What an interrupted command kept: for one that saves each run as it finishes (sweep,
    arena), how many are saved and how to go on; for one that writes only at its end
    (calibrate, fill), that nothing was written."""
    if args.command in ("calibrate", "fill"):
        return f"; nothing written (twin {args.command} writes its results when it ends)"
    out = getattr(args, "out", None)
    if args.command not in ("sweep", "arena") or not out:
        return ""
    from pathlib import Path

    from twin.sweep.execute import RUNS_DIR

    done = len(list((Path(out) / RUNS_DIR).glob("*.json")))
    return f"; {done} runs saved in {out}: run the same command again to resume"


def innermost(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command `args` were parsed for: `twin kernel evaluate`'s, say."""
    while True:
        subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = getattr(args, subcommands[0].dest, None) if subcommands else None
        if not subcommands or chosen not in subcommands[0].choices:
            return parser
        parser = subcommands[0].choices[chosen]


def _check_text(argv: Sequence[str]) -> None:
    """Refuse an argument that is not UTF-8 text (bytes a terminal or a script passed through):
    every name and path the twin prints or writes is UTF-8."""
    for position, arg in enumerate(argv, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            shown = repr(arg.encode("utf-8", "surrogateescape"))[2:-1]
            raise TwinError(
                f"argument {position} ({shown}) is not UTF-8 text; give names and paths in UTF-8"
            ) from None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `twin` console script: the command runs in the warm process when
    one runs (`twin warm start`), else here."""
    if argv is None:
        from twin.cli.warm_client import forward

        forwarded = forward(sys.argv[1:])
        if forwarded is not None:
            return forwarded
    try:  # an argument's value can be refused while parsing (a trace file that is nowhere)
        _check_text(sys.argv[1:] if argv is None else argv)
        parser = _KEPT[0] if _KEPT else build_parser()
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # refused by the subcommand's parser, whose usage the user needs
            innermost(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    except TwinError as exc:
        print(f"twin: error: {exc}", file=sys.stderr)
        return 2
    return run_command(args)


def run_command(args: argparse.Namespace) -> int:
    """Run the parsed command: a refusal is one line (exit 2), Ctrl-C one line saying what is
    kept (exit 130). An error raised while an interrupt was arriving is the interrupt: a C
    extension that meets a pending KeyboardInterrupt mid-call reports its own error instead (a
    pybind11 call's "incompatible function arguments"), and the user asked to stop."""
    interrupted = _InterruptSeen()
    try:
        code: int = args.func(args)
    except TwinError as exc:
        print(f"twin: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"twin: interrupted{_saved(args)}", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`twin scenarios | head`): stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception:
        if not interrupted.seen:
            raise
        print(f"twin: interrupted{_saved(args)}", file=sys.stderr)
        return 130
    finally:
        interrupted.restore()
    return code


class _InterruptSeen:
    """Notes a SIGINT (then raises KeyboardInterrupt as Python's own handler does), where this
    is the main thread and the handler is Python's own."""

    def __init__(self) -> None:
        import signal
        import threading

        self.seen = False
        self._previous: object = None
        if threading.current_thread() is threading.main_thread() and (
            signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self._previous = signal.signal(signal.SIGINT, self._on_interrupt)

    def _on_interrupt(self, signum: int, frame: object) -> None:
        import signal

        self.seen = True
        signal.default_int_handler(signum, frame)  # type: ignore[arg-type]

    def restore(self) -> None:
        if self._previous is not None:
            import signal

            signal.signal(signal.SIGINT, self._previous)  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
