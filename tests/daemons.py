"""Daemons the tests start (dockerd, munged, slurmctld, slurmd): stopped by their PIDs."""

from __future__ import annotations

import os
import signal
import subprocess


def stop(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM to `proc` by its PID, SIGKILL if it is still there after `grace_s`."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
