"""GPUs held folded from the log: GPU-seconds each tenant held ready GPUs of each pool."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from twin.schema import records


@dataclass
class GpuTally:
    """Per (tenant, pool): GPUs held now, since when, and GPU-seconds held before."""

    _held: dict[tuple[str | None, str], list[float]] = field(default_factory=dict)

    def _on_gpus_ready(self, rec: records.GpusReady) -> None:
        self._hold(rec.tenant, rec.pool, rec.t_s, rec.gpus)

    def _on_gpus_released(self, rec: records.GpusReleased) -> None:
        self._hold(rec.tenant, rec.pool, rec.t_s, -rec.gpus)

    def _on_node_failed(self, rec: records.NodeFailed) -> None:
        self._hold(rec.tenant, rec.pool, rec.t_s, -1)

    def _hold(self, tenant: str | None, pool: str, t: float, delta: float) -> None:
        acc = self._held.setdefault((tenant, pool), [0.0, t, 0.0])
        acc[2] += acc[0] * (t - acc[1])
        acc[0] += delta
        acc[1] = t

    def held_until(self, end_s: float) -> dict[str, float]:
        """GPU-seconds held per pool up to `end_s`."""
        held: dict[str, float] = defaultdict(float)
        for (_, pool), (n, since, gpu_s) in self._held.items():
            held[pool] += gpu_s + n * (end_s - since)
        return held
