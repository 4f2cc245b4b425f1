"""Synthetic traces of any size in a supported format, written as a stream."""

from __future__ import annotations

from pathlib import Path

import numpy as np

BLOCK = 65_536
FORMATS = ("itp",)


def generate_itp(path: Path, jobs: int, *, seed: int = 0, rate_per_h: float = 20.0) -> None:
    """An ITP/ElasticFlow-format CSV: Poisson arrivals, power-of-two GPU counts, lognormal run
    times of at least 600 s (as in the real trace), no final newline (also as upstream)."""
    rng = np.random.default_rng(seed)
    gpu_sizes = np.array([1, 2, 4, 8, 16, 32, 64])
    weights = np.array([0.55, 0.15, 0.12, 0.1, 0.05, 0.02, 0.01])
    t_s = 0.0
    with path.open("w", newline="") as f:
        f.write("job_id,submission_time,duration,num_gpu")
        for lo in range(0, jobs, BLOCK):
            n = min(BLOCK, jobs - lo)
            gaps = rng.exponential(3600.0 / rate_per_h, n)
            submits = t_s + np.cumsum(gaps)
            t_s = float(submits[-1])
            durations = np.maximum(600, rng.lognormal(np.log(7200), 1.2, n)).astype(np.int64)
            gpus = rng.choice(gpu_sizes, n, p=weights)
            ids = rng.integers(0, 2**63, n)
            f.write(
                "".join(
                    f"\nsynth-{i:016x},{int(s)},{d},{g}"
                    for i, s, d, g in zip(
                        ids.tolist(),
                        submits.tolist(),
                        durations.tolist(),
                        gpus.tolist(),
                        strict=True,
                    )
                )
            )
