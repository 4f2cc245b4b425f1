"""Analysis of a big run: a generated 10^6-job trace is replayed once, then its event log is
exported (Parquet, Perfetto) and reported, each in a fresh interpreter so its peak memory is its
own. Rates are events per second per core; wall time stands beside CPU time."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from twin.bench.harness import Result
from twin.eventlog.formats import EXPORTERS
from twin.replay.reader import count_lines
from twin.schema.vocabulary import EVENTS_FILE, REPORT_FILE

TARGET_RSS_MIB = 1024  # an export streams: its memory is bounded, whatever the log's length

_CHILD = """
import json, sys, time
from pathlib import Path
run, what = Path(sys.argv[1]), sys.argv[2]
wall, cpu = time.perf_counter(), time.process_time()
if what == "replay":
    from twin.replay.run import ReplayOptions, replay
    replay(Path(sys.argv[3]), ReplayOptions(), out_dir=run)
elif what == "report":
    from twin.eventlog.report import write_report
    write_report(run, run / sys.argv[3])
else:
    from twin.eventlog.export import export
    export(run, [what])
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
rss_kib = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "rss_mib": rss_kib / 1024}))
"""


def _child(run: Path, what: str, *extra: str) -> dict[str, float]:
    cmd = [sys.executable, "-c", _CHILD, str(run), what, *extra]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    figures: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return figures


def _size_mib(path: Path) -> float:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files) / 2**20


def bench_export(quick: bool) -> Result:
    from twin.replay.synth import generate_itp

    jobs = 100_000 if quick else 1_000_000
    r = Result()
    with tempfile.TemporaryDirectory() as tmp:
        trace, run = Path(tmp) / "trace.csv", Path(tmp) / "run"
        generate_itp(trace, jobs, seed=8)
        made = _child(run, "replay", str(trace))
        log = run / EVENTS_FILE
        events = count_lines(log) or 0
        r.lines.append(
            f"export: a {jobs:,}-job replay's log ({events:,} events, {_size_mib(log):,.0f} MiB), "
            f"fresh process each; the replay itself took {made['cpu_s']:.1f} s CPU"
        )
        r.figures.update(jobs=jobs, events=events, replay_cpu_s=round(made["cpu_s"], 2))
        outputs = {f: EXPORTERS[f].output(run) for f in ("parquet", "perfetto")}
        outputs["report"] = run / REPORT_FILE
        for what, output in outputs.items():
            fig = _child(run, what, REPORT_FILE)
            rate = events / fig["cpu_s"]
            r.lines.append(
                f"  {what:>8}: {fig['cpu_s']:6.1f} s CPU ({fig['wall_s']:.1f} s wall) = "
                f"{rate:,.0f} events/s per core, {fig['cpu_s'] / made['cpu_s']:.2f}x the replay; "
                f"peak RSS {fig['rss_mib']:,.0f} MiB; wrote {_size_mib(output):,.1f} MiB"
            )
            r.figures[f"{what}_cpu_s"] = round(fig["cpu_s"], 2)
            r.figures[f"{what}_wall_s"] = round(fig["wall_s"], 2)
            r.figures[f"{what}_events_per_s"] = round(rate)
            r.figures[f"{what}_vs_replay"] = round(fig["cpu_s"] / made["cpu_s"], 2)
            r.figures[f"{what}_peak_rss_mib"] = round(fig["rss_mib"])
            r.figures[f"{what}_rss_vs_target"] = round(TARGET_RSS_MIB / fig["rss_mib"], 2)
    r.lines.append(f"  target: each under {TARGET_RSS_MIB} MiB peak, however long the log")
    return r
