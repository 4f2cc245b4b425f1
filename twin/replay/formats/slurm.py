"""SenseTime Helios and Shanghai AI Lab Acme: Slurm-style job CSVs with datetimes.

`job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue`
(Acme adds `type`, `gpu_time` and failure times). Datetimes may carry `+08:00` offsets.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from twin.replay.common import Rebase, epoch_s, status_of
from twin.replay.reader import BadFieldError, ReadLog, csv_rows, number, required
from twin.sim.jobrecord import JobRecord

COLUMNS = ("job_id", "vc", "gpu_num", "state", "submit_time", "start_time", "end_time")


def read(path: Path, log: ReadLog) -> Iterator[JobRecord]:
    """Jobs by virtual cluster (tenant). A job that never started (no start time) is skipped
    and counted; run time is `duration` when given, else end - start."""
    rebase = Rebase()
    for line, row in csv_rows(path, log, columns=COLUMNS):
        try:
            submit = rebase(epoch_s(row["submit_time"], "submit_time"), "submit_time")
            status = status_of(row["state"])
            if not row["start_time"].strip():
                log.skip(f"never started ({status})")
                continue
            start = epoch_s(row["start_time"], "start_time")
            end = epoch_s(row["end_time"], "end_time") if row["end_time"].strip() else None
            duration = number(row, "duration", optional=True) if "duration" in row else None
            if duration is None:
                if end is None:
                    raise BadFieldError("end_time", "", "empty, and no duration")
                duration = end - start
            gpus = required(row, "gpu_num")
            if duration < 0 or gpus < 0:
                raise BadFieldError(
                    "duration" if duration < 0 else "gpu_num", min(duration, gpus), "negative"
                )
        except BadFieldError as exc:
            log.bad(path, line, str(exc))
            continue
        yield JobRecord(
            job_id=row["job_id"],
            submit_s=submit,
            service_s=duration,
            gpus=gpus,
            tenant=row["vc"] or "default",
            status=status,
            observed_start_s=rebase.shift(start),
            observed_end_s=rebase.shift(end),
            censored=end is None,
            extras={"user": row.get("user", ""), "type": row.get("type", "")},
        )
