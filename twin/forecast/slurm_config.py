"""A Slurm cluster's scheduler, as `scontrol show config` reports it: which scheduler runs
(sched/backfill or sched/builtin), how often backfill passes (`bf_interval`, default 30 s),
their resolution (`bf_resolution`, 60 s), how many jobs a pass tries (`bf_max_job_test`, 500),
and the priority plugin with its weights. Without the file, Slurm's defaults."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from twin.errors import ConfigError
from twin.text_files import read_text

_LINE = re.compile(r"^\s*([A-Za-z][\w]*)\s*=\s*(.*?)\s*$")


@dataclass(frozen=True)
class SlurmConfig:
    scheduler: str = "sched/backfill"
    bf_interval_s: float = 30.0
    bf_resolution_s: float = 60.0
    bf_max_job_test: int = 500
    priority: str = "priority/basic"
    weights: dict[str, int] = field(default_factory=dict)  # PriorityWeightAge -> Age, ...
    source: str = "Slurm's defaults (no scontrol show config given)"

    @property
    def backfill(self) -> bool:
        return self.scheduler == "sched/backfill"

    def described(self) -> str:
        """One line for a reader: what the twin schedules as."""
        if not self.backfill:
            return f"{self.scheduler}: priority order only, no backfill ({self.source})"
        weights = ", ".join(f"{k} {v}" for k, v in sorted(self.weights.items()) if v)
        prio = f"{self.priority}" + (f" ({weights}; held as each job's priority now)"
                                     if weights else "")  # fmt: skip
        return (f"{self.scheduler} every {self.bf_interval_s:g} s on time limits "
                f"(resolution {self.bf_resolution_s:g} s, {self.bf_max_job_test} jobs a pass), "
                f"{prio}; {self.source}")  # fmt: skip


def read_config(path: Path) -> SlurmConfig:
    """`scontrol show config` output (its `Key = Value` lines); a coded error naming the file
    where it holds none of the keys the scheduler is told by."""
    values: dict[str, str] = {}
    for line in read_text(path, "scontrol show config").splitlines():
        if match := _LINE.match(line):
            values[match[1]] = match[2]
    if "SchedulerType" not in values:
        raise ConfigError(f"{path}: not scontrol show config output (no SchedulerType)")
    params = dict(_param(p) for p in values.get("SchedulerParameters", "").split(",") if p)
    weights = {k.removeprefix("PriorityWeight"): _int(v, path, k) for k, v in values.items()
               if k.startswith("PriorityWeight") and k != "PriorityWeightTRES"}  # fmt: skip
    tested = _seconds(params.get("bf_max_job_test", "500"), path, "bf_max_job_test")
    return SlurmConfig(
        scheduler=values["SchedulerType"],
        bf_interval_s=_seconds(params.get("bf_interval", "30"), path, "bf_interval"),
        bf_resolution_s=_seconds(params.get("bf_resolution", "60"), path, "bf_resolution"),
        bf_max_job_test=max(int(tested), 1),
        priority=values.get("PriorityType", "priority/basic"),
        weights=weights,
        source=f"from {path.name}",
    )


def _param(text: str) -> tuple[str, str]:
    key, _, value = text.strip().partition("=")
    return key, value


def _seconds(text: str, path: Path, key: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{path}: SchedulerParameters {key}={text!r} is not a number") from None
    if not value >= 0 or value > 1e7:
        raise ConfigError(f"{path}: SchedulerParameters {key}={text!r} is out of range")
    return value


def _int(text: str, path: Path, key: str) -> int:
    try:
        return int(text.split(maxsplit=1)[0]) if text.strip() else 0
    except ValueError:
        raise ConfigError(f"{path}: {key} = {text!r} is not a whole number") from None
