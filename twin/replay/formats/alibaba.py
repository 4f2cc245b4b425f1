"""Alibaba GPU traces: openb pods (v2023, GPU sharing) and DLRM instances (v2025)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from twin.replay.common import Rebase, status_of
from twin.replay.reader import BadFieldError, ReadLog, csv_rows, number, required
from twin.sim.jobrecord import JobRecord

QOS_PRIORITY = {"Guaranteed": 3.0, "LS": 2.0, "Burstable": 1.0, "BE": 0.0}
OPENB = ("name", "cpu_milli", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
         "creation_time", "deletion_time", "scheduled_time")  # fmt: skip
DLRM = ("instance_sn", "role", "app_name", "gpu_request", "creation_time", "scheduled_time",
        "deletion_time")  # fmt: skip


def read_openb(path: Path, log: ReadLog) -> Iterator[JobRecord]:
    """openb pods: GPUs = num_gpu x gpu_milli / 1000; run time deletion - scheduled. Pods that
    were never scheduled (Pending) are counted, not replayed; Running pods are censored."""
    rebase = Rebase()
    for line, row in csv_rows(path, log, columns=OPENB):
        try:
            submit = rebase(required(row, "creation_time"), "creation_time")
            phase = row["pod_phase"]
            scheduled = number(row, "scheduled_time", optional=True)
            deletion = required(row, "deletion_time")
            gpus = required(row, "num_gpu") * required(row, "gpu_milli") / 1000.0
            cpu_milli = int(required(row, "cpu_milli"))
            if cpu_milli < 0:
                raise BadFieldError("cpu_milli", row["cpu_milli"], "negative")
            if scheduled is None:
                log.skip("never scheduled (Pending)")
                continue
            if deletion < scheduled:
                raise BadFieldError("deletion_time", deletion, "before scheduled_time")
        except BadFieldError as exc:
            log.bad(path, line, str(exc))
            continue
        spec = row["gpu_spec"].strip()
        yield JobRecord(
            job_id=row["name"],
            submit_s=submit,
            service_s=deletion - scheduled,
            gpus=gpus,
            tenant="openb",
            gpu_type=spec if spec and "|" not in spec else None,
            priority=QOS_PRIORITY.get(row["qos"], 0.0),
            status=status_of(phase),
            observed_start_s=rebase.shift(scheduled),
            observed_end_s=rebase.shift(deletion),
            censored=phase == "Running",
            extras={"qos": row["qos"], "gpu_spec": spec},
            cpu_milli=cpu_milli,
        )


def read_dlrm(path: Path, log: ReadLog, *, include_cpu: bool = False) -> Iterator[JobRecord]:
    """DLRM inference instances by service (`app_name`). Rows are not in time order, so the
    file is read whole and sorted (24k rows). Instances alive at the start submit at 0 and are
    marked present at the start (left censored: no completion time is counted for them); those
    alive at the end run to the last event (right censored). CPU-only
    instances are counted, not replayed, unless `include_cpu`."""
    rows: list[tuple[float, int, dict[str, str], float, float | None, float | None, float]] = []
    last = 0.0
    for line, row in csv_rows(path, log, columns=DLRM):
        try:
            created = number(row, "creation_time", optional=True)
            scheduled = number(row, "scheduled_time", optional=True)
            deleted = number(row, "deletion_time", optional=True)
            gpus = required(row, "gpu_request")
            cpus = number(row, "cpu_request", optional=True) or 0.0
        except BadFieldError as exc:
            log.bad(path, line, str(exc))
            continue
        if gpus == 0 and not include_cpu:
            log.skip("CPU-only instance")
            continue
        # Upstream float noise (475.00000000000006): whole seconds.
        created, scheduled, deleted = (
            None if v is None else float(round(v)) for v in (created, scheduled, deleted)
        )
        last = max([last, *(v for v in (created, scheduled, deleted) if v is not None)])
        rows.append((created or 0.0, line, row, gpus, scheduled, deleted, cpus))
    rows.sort(key=lambda r: (r[0], r[1]))
    for created, _, row, gpus, scheduled, deleted, cpus in rows:
        start = scheduled if scheduled is not None else created
        end = deleted if deleted is not None else last
        yield JobRecord(
            job_id=row["instance_sn"],
            submit_s=created,
            service_s=max(end - start, 0.0),
            gpus=gpus,
            tenant=row["app_name"],
            status="running" if deleted is None else "completed",
            observed_start_s=scheduled,
            observed_end_s=deleted,
            censored=deleted is None,
            extras={"role": row["role"]},
            cpu_milli=max(round(cpus * 1000), 0),
            present_at_start=scheduled is None,
        )
