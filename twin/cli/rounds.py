"""`twin replay --rounds`: a Gavel workload scheduled in rounds, as Gavel's simulator does."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from twin.errors import ConfigError

if TYPE_CHECKING:
    from rich.console import Console

    from twin.eventlog.log import EventLog
    from twin.rounds.rounds import Append, RoundRun
    from twin.schema.records import AnyRecord

ROUNDS_FILE = "rounds.json"
REFUSED = {  # options of the event-driven replay that a round-based one does not take
    "cluster": "--cluster", "gpus": "--gpus", "backfill": "--backfill",
    "placement": "--placement", "params": "--params", "seeds": "--seeds",
    "columns": "--columns", "include_cpu": "--include-cpu", "report": "--report",
    "end_h": "--end-h", "max_jobs": "--max-jobs",
}  # fmt: skip


def cluster_spec(text: str) -> dict[str, int]:
    """GPUs by worker type from `8:8:8` (V100:P100:K80, Gavel's form) or `v100=8,k80=4`."""
    from twin.replay.formats.gavel import WORKER_TYPES

    text = text.strip()
    if re.fullmatch(r"\d+(:\d+){0,2}", text):
        counts = [int(n) for n in text.split(":")]
        spec = dict(zip(WORKER_TYPES, counts + [0] * (3 - len(counts)), strict=True))
    else:
        spec = {}
        for part in text.split(","):
            name, _, count = part.partition("=")
            name = name.strip().lower()
            if name not in WORKER_TYPES or not count.strip().isdigit():
                raise ConfigError(f"--cluster-spec: {part.strip()!r} is not TYPE=N with TYPE one "
                                  f"of {', '.join(WORKER_TYPES)}")  # fmt: skip
            spec[name] = int(count)
    if not any(spec.values()) or max(spec.values()) > 1_000_000:
        raise ConfigError(f"--cluster-spec: from 1 to 1,000,000 GPUs of some type, got {text!r}")
    return spec


def rounds_command(args: argparse.Namespace) -> int:
    from twin.cli.analyse import write_outputs
    from twin.cli.render import console_for, print_json
    from twin.schema.vocabulary import EVENTS_FILE

    path = _checked_trace(args)
    workers = cluster_spec(args.cluster_spec)
    out = Path(args.out) if args.out else None
    run, round_s = _play(args, path, workers, out)
    summary = _summary(path, args.policy, workers, round_s=round_s, seed=args.seed, run=run)
    console = console_for(args)
    _print(console, path.name, args.policy, summary)
    if out is not None:
        (out / ROUNDS_FILE).write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2) + b"\n")
        console.print(f"wrote {out / EVENTS_FILE} and {out / ROUNDS_FILE}")
    write_outputs(args, console)
    if args.json:
        print_json("replay", rounds={k: v for k, v in summary.items() if k != "per_job"},
                   out=args.out)  # fmt: skip
    return 0


def _checked_trace(args: argparse.Namespace) -> Path:
    """The workload, once the options a round-based replay does not take are refused."""
    from twin.replay.load import job_format
    from twin.replay.registry import DEFAULT_OPTIONS

    given = [flag for name, flag in REFUSED.items() if getattr(args, name, None)]
    if args.start_h:
        given.append("--start-h")
    if given:
        raise ConfigError(f"a round-based replay (--rounds, or --policy {args.policy}) plays the "
                          f"whole workload on --cluster-spec; drop {', '.join(given)}")  # fmt: skip
    path = Path(args.trace)
    fmt = job_format(path, args.format, DEFAULT_OPTIONS)
    if fmt != "gavel":
        raise ConfigError(f"{path}: a round-based replay plays a Gavel workload (its jobs are "
                          f"steps, timed by worker type); this trace is {fmt}")  # fmt: skip
    return path


def _play(
    args: argparse.Namespace, path: Path, workers: dict[str, int], out: Path | None
) -> tuple[RoundRun, float]:
    """The run, its events streamed to `out`/events.jsonl when given; and its round length."""
    from twin.eventlog.log import EventLog, JsonlWriter
    from twin.replay.formats import gavel
    from twin.replay.reader import ReadLog
    from twin.rounds import policies as round_policies
    from twin.rounds import rounds
    from twin.schema.vocabulary import EVENTS_FILE

    jobs = gavel.read(path, ReadLog(skip_bad=args.skip_bad))
    table = gavel.throughputs(Path(args.throughputs) if args.throughputs else None)
    policy: round_policies.RoundPolicy = (
        round_policies.Fifo(args.seed) if args.policy == "fifo"
        else round_policies.MaxMinFairness()
    )  # fmt: skip
    round_s = args.rounds if args.rounds is not None else rounds.ROUND_S
    log = EventLog(f"rounds-{path.stem}", keep=False)
    stream = None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        stream = (out / EVENTS_FILE).open("wb")
        log.subscribe(JsonlWriter(stream, log.session))
    try:
        run = rounds.play(jobs, workers, policy, table, seed=args.seed, round_s=round_s,
                          log=_flushing(log))  # fmt: skip
        log.flush()
    finally:
        if stream is not None:
            stream.close()
    return run, round_s


def _print(console: Console, name: str, policy: str, summary: dict[str, Any]) -> None:
    from twin.cli.render import Table

    shown = Table(title=f"rounds: {name} (gavel, {policy})", show_header=False)
    shown.add_column(style="bold")
    shown.add_column()
    shown.add_row("cluster", ", ".join(f"{t} {n}" for t, n in summary["cluster"].items() if n))
    shown.add_row("rounds", f"{summary['rounds']:,} of {summary['round_s']:g} s")
    shown.add_row("jobs", f"{summary['jobs']} · {summary['finished']} finished · "
                  f"{summary['dropped']} dropped")  # fmt: skip
    jct = summary["average_jct_s"]
    shown.add_row("average JCT", "-" if jct is None else f"{jct:,.3f} s ({jct / 3600:.2f} h)")
    span = summary["makespan_s"]
    shown.add_row("makespan", f"{span:,.3f} s ({span / 3600:.2f} h)")
    shown.add_row("utilisation", f"{summary['utilisation']:.1%} of GPU time busy")
    console.print(shown)


def _flushing(log: EventLog) -> Append:
    """Append to `log`, handing full chunks on as they fill (memory stays bounded)."""

    def append(record: AnyRecord) -> None:
        log.append(record)
        log.maybe_flush()

    return append


def _summary(
    path: Path, policy: str, workers: dict[str, int], *, round_s: float, seed: int, run: RoundRun
) -> dict[str, Any]:
    gpus = sum(workers.values())
    busy_gpu_s = sum(run.busy_gpu_s.values())
    return {
        "trace": str(path), "format": "gavel", "policy": policy, "cluster": workers,
        "round_s": round_s, "seed": seed, "rounds": run.rounds, "jobs": len(run.jobs),
        "finished": len(run.finished), "dropped": len(run.jobs) - len(run.finished),
        "average_jct_s": run.average_jct_s if run.finished else None,
        "makespan_s": run.makespan_s,
        "utilisation": busy_gpu_s / (gpus * run.makespan_s) if run.makespan_s > 0 else 0.0,
        "busy_gpu_s": run.busy_gpu_s,
        "per_job": [
            {"job_id": j.job_id, "line": j.line, "job_type": j.job_type,
             "scale_factor": j.scale_factor, "arrival_s": j.arrival_s, "end_s": j.end_s,
             "jct_s": None if j.dropped else j.jct_s, "rounds": j.rounds, "gpu_s": j.gpu_s,
             "dropped": j.dropped}
            for j in run.jobs
        ],
    }  # fmt: skip
