"""A timeline of a run in the Chrome trace-event JSON format, which ui.perfetto.dev opens.

- a process per pool: GPUs held and busy as a counter track;
- a process per tenant: a thread per lane with a slice per job run (`B`/`E` pairs; the slice
  names the job), its queue length and GPU spend as counters;
- instant events for node failures, interruptions, failed jobs, trades and budget alarms.

Events are written as the log streams past, in time order (timestamps in microseconds of
virtual time), so memory holds only the jobs running at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import orjson

from twin.eventlog.occupancy import Occupancy, Row

US_PER_S = 1e6
CLUSTER_PID = 1


class PerfettoWriter(Occupancy):
    """Writes the trace of the events it is given to a binary stream; call `close` at the end."""

    def __init__(self, stream: IO[bytes]) -> None:
        super().__init__()
        self._stream = stream
        self._pids: dict[tuple[str, str], int] = {}
        self._lanes_named: set[tuple[int, int]] = set()
        self._first = True
        stream.write(b'{"displayTimeUnit":"ms","traceEvents":[\n')
        self._write({"ph": "M", "pid": CLUSTER_PID, "name": "process_name",
                     "args": {"name": "cluster"}})  # fmt: skip
        self._write({"ph": "M", "pid": CLUSTER_PID, "name": "process_sort_index",
                     "args": {"sort_index": 0}})  # fmt: skip

    def _write(self, event: Mapping[str, Any]) -> None:
        if not self._first:
            self._stream.write(b",\n")
        self._first = False
        self._stream.write(orjson.dumps(event))

    def _pid(self, what: str, name: str) -> int:
        key = (what, name)
        pid = self._pids.get(key)
        if pid is None:
            pid = self._pids[key] = len(self._pids) + CLUSTER_PID + 1
            self._write({"ph": "M", "pid": pid, "name": "process_name",
                         "args": {"name": f"{what} {name}"}})  # fmt: skip
            self._write({"ph": "M", "pid": pid, "name": "process_sort_index",
                         "args": {"sort_index": pid}})  # fmt: skip
        return pid

    def on_pool(self, t_s: float, pool: str, held: float, busy: float) -> None:
        self._write({"ph": "C", "pid": self._pid("pool", pool), "name": "GPUs",
                     "ts": t_s * US_PER_S, "args": {"held": held, "busy": busy}})  # fmt: skip

    def on_queue(self, t_s: float, tenant: str, jobs: int) -> None:
        self._write({"ph": "C", "pid": self._pid("tenant", tenant), "name": "queued jobs",
                     "ts": t_s * US_PER_S, "args": {"jobs": jobs}})  # fmt: skip

    def on_spend(self, t_s: float, tenant: str, spent_usd: float) -> None:
        self._write({"ph": "C", "pid": self._pid("tenant", tenant), "name": "GPU spend $",
                     "ts": t_s * US_PER_S, "args": {"usd": round(spent_usd, 6)}})  # fmt: skip

    def on_job_start(self, e: Row, lane: int) -> None:
        pid = self._pid("tenant", e["tenant"])
        tid = lane + 1
        if (pid, tid) not in self._lanes_named:
            self._lanes_named.add((pid, tid))
            self._write({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name",
                         "args": {"name": f"jobs {tid}"}})  # fmt: skip
        args = {"pool": e["pool"], "gpus": e["gpus"], "wait_s": e["wait_s"], "run_s": e["run_s"]}
        self._write({"ph": "B", "pid": pid, "tid": tid, "ts": e["t_s"] * US_PER_S,
                     "name": e["job_id"], "cat": "job", "args": args})  # fmt: skip

    def on_job_stop(self, t_s: float, tenant: str, job_id: str, lane: int, how: str) -> None:
        self._write({"ph": "E", "pid": self._pid("tenant", tenant), "tid": lane + 1,
                     "ts": t_s * US_PER_S, "args": {"outcome": how}})  # fmt: skip

    def on_instant(self, e: Row) -> None:
        tenant = e["tenant"]
        pid = CLUSTER_PID if tenant is None else self._pid("tenant", tenant)
        args = {k: v for k, v in e.items() if k not in {"kind", "t_s", "session", "tenant"}}
        self._write({"ph": "i", "s": "p", "pid": pid, "tid": 0, "ts": e["t_s"] * US_PER_S,
                     "name": e["kind"], "cat": "event", "args": args})  # fmt: skip

    def close(self) -> None:
        super().close()
        self._stream.write(b"\n]}\n")


class Timeline:
    """The `perfetto` export: the timeline written to its own file."""

    derived_tables = False

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._stream = path.open("wb")
        self._writer = PerfettoWriter(self._stream)

    def take(self, event: dict[str, Any]) -> None:
        self._writer.take(event)

    def add(self, table: str, row: dict[str, Any]) -> None:
        raise AssertionError("a timeline takes no tables")

    def abandon(self) -> None:
        self._stream.close()

    def close(self) -> list[Path]:
        try:
            self._writer.close()
        finally:
            self._stream.close()
        return [self.path]
