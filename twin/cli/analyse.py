"""`twin export` and `twin report`: a run's event log as tables, a timeline and a report; and
the `--export` / `--report` options that `run`, `replay` and `play` share."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from twin.cli.arg_types import out_dir, out_file
from twin.errors import ConfigError
from twin.eventlog.formats import EXPORTERS, formats_help, parse_formats
from twin.schema.vocabulary import EVENTS_FILE, REPORT_FILE

if TYPE_CHECKING:
    from rich.console import Console


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ex = sub.add_parser("export", help="export a run's event log: Parquet, CSV, Perfetto timeline")
    ex.add_argument("run_dir", metavar="RUN_DIR", help=f"a run's directory (or its {EVENTS_FILE})")
    ex.add_argument("--format", default="parquet", help=formats_help())
    ex.add_argument("--out", type=out_dir, help="write here instead of beside the log")
    ex.set_defaults(func=export_command)

    rp = sub.add_parser("report", help="write a run's self-contained HTML report")
    rp.add_argument("run_dir", metavar="RUN_DIR", help=f"a run's directory (or its {EVENTS_FILE})")
    rp.add_argument("--out", type=out_file, help=f"the HTML file (default: RUN_DIR/{REPORT_FILE})")
    rp.set_defaults(func=report_command)


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """`--json` (`render.console_for` and `render.print_json` carry it out)."""
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object on stdout (the summary and what the command "
                        "adds); the tables go to stderr")  # fmt: skip


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """`--export` and `--report` for a command that writes a run directory with `--out`."""
    parser.add_argument("--export", metavar="FORMATS", help=f"also export: {formats_help()}")
    parser.add_argument(
        "--report", action="store_true", help=f"also write {REPORT_FILE} (needs --out)"
    )


def check_output_options(args: argparse.Namespace) -> None:
    """Refuse the options before the run starts rather than after it."""
    if (args.export or args.report) and not args.out:
        raise ConfigError("--export and --report write into the run directory: give --out")
    if args.export:
        parse_formats(args.export)
    if args.export or args.report:
        require_analysis()


def write_outputs(args: argparse.Namespace, console: Console) -> None:
    """The exports and report a finished run asked for."""
    if not args.out:
        return
    run_dir = Path(args.out)
    if args.export:
        _export(run_dir, args.export, None, console)
    if args.report:
        _report(run_dir, None, console)


def require_analysis() -> None:
    """ConfigError, not a traceback, when an install lost a library the analysis needs."""
    import importlib.util

    missing = [m for m in ("pyarrow", "matplotlib") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(
            f"{' and '.join(missing)} not installed, though the twin depends on it: "
            f"pip install {' '.join(missing)}"
        )


def _export(run_dir: Path, spec: str, out: Path | None, console: Console) -> None:
    require_analysis()
    from twin.eventlog.export import export

    formats = parse_formats(spec)
    written = export(run_dir, formats, out)
    target = out or (run_dir if run_dir.is_dir() else run_dir.parent)
    where = ", ".join(str(EXPORTERS[f].output(target)) for f in formats)
    console.print(f"exported {len(written)} files: {where}")


def _report(run_dir: Path, out: Path | None, console: Console) -> None:
    require_analysis()
    from twin.eventlog.report import write_report

    target = out or (run_dir if run_dir.is_dir() else run_dir.parent) / REPORT_FILE
    write_report(run_dir, target)
    console.print(f"wrote {target}")


def export_command(args: argparse.Namespace) -> int:
    from rich.console import Console

    _export(Path(args.run_dir), args.format, Path(args.out) if args.out else None, Console())
    return 0


def report_command(args: argparse.Namespace) -> int:
    from rich.console import Console

    _report(Path(args.run_dir), Path(args.out) if args.out else None, Console())
    return 0
