"""Node inventories that instantiate a cluster: GPUs per model, and the nodes that hold them.

openb node lists, Alibaba PAI 2020 machines (headerless, `.header` sidecar), Alibaba spot GPU
2026 nodes, Microsoft Philly machine lists (original or revised).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from twin.errors import TraceError
from twin.replay.reader import BadFieldError, ReadLog, csv_rows, required

INVENTORY_COLUMNS: dict[str, tuple[str, str]] = {
    "openb-nodes": ("model", "gpu"),
    "pai-machines": ("gpu_type", "cap_gpu"),
    "spot-nodes": ("gpu_model", "gpu_capacity_num"),
    "philly-machines": ("", "number of GPUs"),
}
"""Each inventory format's (GPU model column, GPU count column); Philly names no model."""

CPU_COLUMNS: dict[str, tuple[str, float]] = {
    "openb-nodes": ("cpu_milli", 1.0),
    "pai-machines": ("cap_cpu", 1000.0),
    "spot-nodes": ("cpu_num", 1000.0),
}
"""Each inventory format's CPU column and its milli-cores per unit (Philly gives no CPUs)."""


@dataclass
class Inventory:
    """GPUs per model, and the GPU nodes that hold them: (model, GPUs, CPU milli) -> nodes."""

    gpus: Counter[str] = field(default_factory=Counter)
    nodes: int = 0
    cpu_only_nodes: int = 0
    shapes: Counter[tuple[str, int, int]] = field(default_factory=Counter)

    def add(self, model: str, gpus: float, cpu_milli: int = 0) -> None:
        self.nodes += 1
        if gpus <= 0 or not model or model == "CPU":
            self.cpu_only_nodes += 1
            return
        self.gpus[model] += int(gpus)
        self.shapes[(model, int(gpus), cpu_milli)] += 1


def read_inventory(path: Path, log: ReadLog, fmt: str) -> Inventory:
    """The inventory of one node-list file in format `fmt`."""
    inv = Inventory()
    header = None
    if fmt == "pai-machines":
        sidecar = path.with_suffix(".header")
        if not sidecar.is_file():
            raise TraceError(
                f"{path}: headerless PAI machine list needs its sidecar {sidecar.name}"
            )
        header = sidecar.read_text().strip().split(",")
    columns = INVENTORY_COLUMNS[fmt]
    cpu_column, cpu_scale = CPU_COLUMNS.get(fmt, ("", 0.0))
    for line, row in csv_rows(path, log, header=header):
        try:
            count = required(row, columns[1])
            cpu = required(row, cpu_column) * cpu_scale if cpu_column else 0.0
            if count < 0 or cpu < 0:
                bad = columns[1] if count < 0 else cpu_column
                raise BadFieldError(bad, row[bad], "negative")
        except (BadFieldError, KeyError) as exc:
            log.bad(path, line, str(exc))
            continue
        model = row.get(columns[0], "").strip() if columns[0] else _philly_model(row)
        inv.add(model, count, round(cpu))
    if inv.nodes == 0:
        raise TraceError(f"{path}: no nodes")
    return inv


def _philly_model(row: dict[str, str]) -> str:
    """Philly does not name its GPUs; the original list gives per-GPU memory (12 or 24 GB)."""
    mem = row.get("single GPU mem", "").strip()
    return f"philly-{mem.lower()}" if mem else "philly"
