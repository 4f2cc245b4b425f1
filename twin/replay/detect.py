"""Which format a trace file is in, from its name and first line (an explicit format wins)."""

from __future__ import annotations

import re
from pathlib import Path

from twin.errors import TraceError
from twin.replay.registry import JOB_FORMATS, NODE_FORMATS

SIGNATURES: tuple[tuple[frozenset[str], str], ...] = (
    (frozenset({"job_id", "submission_time", "duration", "num_gpu"}), "itp"),
    (frozenset({"name", "num_gpu", "gpu_milli", "pod_phase", "creation_time"}), "openb"),
    (frozenset({"instance_sn", "role", "app_name", "gpu_request"}), "dlrm"),
    (frozenset({"TIMESTAMP", "ContextTokens", "GeneratedTokens"}), "azure"),
    (frozenset({"job_id", "vc", "gpu_num", "state", "submit_time", "start_time"}), "slurm"),
    (frozenset({"sn", "gpu", "model"}), "openb-nodes"),
    (frozenset({"gpu_model", "gpu_capacity_num"}), "spot-nodes"),
    (frozenset({"machineId", "number of GPUs"}), "philly-machines"),
)


def detect(path: Path) -> str:
    """The format name of `path`; a TraceError says what was seen when nothing matches."""
    try:
        with path.open("rb") as f:
            head = f.read(4096)
    except OSError as exc:
        raise TraceError(f"{path}: cannot open: {exc.strerror}") from None
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    first = text.splitlines()[0].strip() if text.strip() else ""
    if path.with_suffix(".header").is_file():
        return "pai-machines"
    if first.startswith("{") and '"timestamp"' in first:
        return "mooncake"
    if re.match(r"\s*\[\s*[{\]]", text):  # a JSON array of objects
        return "philly"
    columns = {c.strip() for c in first.split(",")}
    for needed, fmt in SIGNATURES:
        if needed <= columns:
            return fmt
    raise TraceError(
        f"{path}: cannot tell the format from its first line {first[:80]!r}; pass --format "
        f"({', '.join(JOB_FORMATS + NODE_FORMATS)}), or --columns for another flat CSV"
    )
