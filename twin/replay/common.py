"""Helpers the adapters share: time bases, status vocabularies, datetimes."""

from __future__ import annotations

from datetime import UTC, datetime

from twin.replay.reader import BadFieldError
from twin.sim.jobrecord import Status

COMPLETED = ("completed", "complete", "pass", "passed", "succeed", "succeeded", "success",
             "successful", "finished", "done", "ok", "terminated")  # fmt: skip
FAILED = ("failed", "fail", "failure", "node_fail", "timeout", "timed_out", "error", "oom",
          "out_of_memory", "crashed")  # fmt: skip
KILLED = ("killed", "kill", "cancelled", "canceled", "cancel", "preempted", "evicted", "stopped",
          "aborted")  # fmt: skip
GPU_CLASSES = ("share", "1", "2", "4", "8+")
"""Classes of GPU count a fidelity figure is broken down by: a share of one GPU, 1, 2-3, 4-7,
8 or more."""


def gpu_class(gpus: float) -> str:
    """The class of `gpus` (see GPU_CLASSES)."""
    if gpus < 1:
        return "share"
    if gpus < 2:
        return "1"
    if gpus < 4:
        return "2"
    return "4" if gpus < 8 else "8+"


PENDING = ("pending", "waiting", "queued", "queueing", "submitted", "scheduling")
STATUS: dict[str, Status] = {
    **dict.fromkeys(COMPLETED, "completed"),
    **dict.fromkeys(FAILED, "failed"),
    **dict.fromkeys(KILLED, "killed"),
    **dict.fromkeys(("running",), "running"),
    **dict.fromkeys(PENDING, "pending"),
}


def known_words() -> list[str]:
    """The status words every adapter knows, by the status they map to."""
    return [f"{status}: {'/'.join(w for w, s in STATUS.items() if s == status)}"
            for status in dict.fromkeys(STATUS.values())]  # fmt: skip


def status_of(text: str) -> Status:
    """A trace's status word in the canonical vocabulary ('unknown' when unmapped)."""
    return STATUS.get(text.strip().lower().replace(" ", "_"), "unknown")


def epoch_s(text: str, column: str) -> float:
    """Seconds since the epoch of an ISO-like datetime; naive times are taken as UTC."""
    value = text.strip()
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise BadFieldError(
            column, text, "not a datetime (expected YYYY-MM-DD HH:MM:SS[.f][+HH:MM])"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


class Rebase:
    """Times from the first submission; submissions must not go backwards."""

    __slots__ = ("base_s", "last_s")

    def __init__(self) -> None:
        self.base_s: float | None = None
        self.last_s = float("-inf")

    def __call__(self, submit_s: float, column: str) -> float:
        if submit_s < self.last_s:
            raise BadFieldError(
                column,
                submit_s,
                f"goes back in time (previous {self.last_s}); the trace must be sorted",
            )
        self.last_s = submit_s
        if self.base_s is None:
            self.base_s = submit_s
        return submit_s - self.base_s

    def shift(self, t_s: float | None) -> float | None:
        """Another time of the trace on the same base (None stays None)."""
        if t_s is None or self.base_s is None:
            return t_s
        return t_s - self.base_s
