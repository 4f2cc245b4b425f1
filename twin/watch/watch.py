"""A twin that follows a running cluster: at each poll it takes a capture of the cluster's
state; where the state changed it re-forecasts (and each `--set` what-if beside it), records
the forecast, and scores the forecasts made before for the jobs this capture shows started.

With an `out` directory every capture it forecast from is kept there (`NNNN/`, with the
scheduler's config beside them), each forecast is a line of `forecasts.jsonl` and the score
so far is `score.json`; a recorded watch played again (`twin watch --replay`) gives the same
forecasts and the same score."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from twin.errors import ConfigError, TwinError
from twin.forecast.forecast import Forecast, forecast
from twin.forecast.snapshot import what_if
from twin.schema.snapshot import Snapshot
from twin.watch.score import LiveScore, Pair, ScoreSummary
from twin.watch.sources import TAKEN_FILE, CaptureError, Source

FORECASTS_FILE = "forecasts.jsonl"
SCORE_FILE = "score.json"
KEPT_ERRORS = 5


class WhatIfError(ConfigError):
    """A `--set` the state refuses: the watch stops, since every capture would refuse it."""


@dataclass(frozen=True)
class Settings:
    samples: int = 50
    horizon_s: float = 6 * 3600.0
    step_s: float = 60.0
    seed: int = 0
    window_s: float = 168 * 3600.0
    what_if: Sequence[str] = ()


class JobView(TypedDict):
    job_id: str
    tenant: str
    gpus: float
    submit_s: float
    start_p10_s: float | None
    start_p50_s: float | None
    start_p90_s: float | None
    estimate_s: float | None  # the cluster's own (Slurm's), where it makes one
    what_if_p50_s: float | None


class BandView(TypedDict):
    name: str
    offsets_s: list[float]
    p10: list[float]
    p50: list[float]
    p90: list[float]


class View(TypedDict):
    """What the page and the JSON endpoint show: the latest forecast and the score."""

    source: str
    captures: int  # changes forecast from
    taken_s: float | None
    at_s: float | None
    running: int
    waiting: int
    what_if: list[str]
    jobs: list[JobView]
    queue: list[BandView]
    score: ScoreSummary
    rolling: ScoreSummary
    open_pairs: int
    errors: list[str]


@dataclass
class Watcher:
    source: Source
    settings: Settings = field(default_factory=Settings)
    out: Path | None = None  # where captures, forecasts and the score are kept (None: nowhere)

    def __post_init__(self) -> None:
        self._home = (
            self.out if self.out is not None else Path(tempfile.mkdtemp(prefix="twin-watch-"))
        )
        self._home.mkdir(parents=True, exist_ok=True)
        self.source.prepare(self._home)
        self.score = LiveScore()
        self.captures = 0  # polls that found a change
        # A watch kept in a folder that holds an earlier one's captures records after them.
        kept = [int(d.name) for d in self._home.iterdir() if d.is_dir() and d.name.isdigit()]
        self._next = max(kept, default=-1) + 1
        self.errors: list[str] = []
        self._digest = ""
        self._last: Path | None = None
        self.view: View = self._view(None, None, [])

    def close(self) -> None:
        if self.out is None:
            shutil.rmtree(self._home, ignore_errors=True)

    def poll(self) -> bool:
        """One capture; re-forecast where the state changed. False where it had not (or the
        capture failed: the error is kept, and the next poll tries again)."""
        into = self._home / f"{self._next:04d}"
        if into.exists():
            shutil.rmtree(into)
        into.mkdir()
        try:
            taken_s = self.source.capture(into)
        except CaptureError as exc:
            shutil.rmtree(into, ignore_errors=True)
            self._error(str(exc))
            return False
        digest = _digest(into)
        if digest == self._digest:
            shutil.rmtree(into)
            return False
        self._digest = digest
        try:
            self.step(into, taken_s)
        except WhatIfError:
            raise
        except TwinError as exc:  # an export the reader refuses: said, and the watch goes on
            shutil.rmtree(into, ignore_errors=True)
            self._error(f"capture {into.name}: {exc}")
            return False
        if self.out is None and self._last is not None:
            shutil.rmtree(self._last, ignore_errors=True)
        self._last = into
        self._next += 1
        return True

    def replay(self, captures: Sequence[Path]) -> None:
        """Recorded captures, in order, as if they had just been taken."""
        for into in captures:
            self.step(into, float((into / TAKEN_FILE).read_text()))

    def step(self, into: Path, taken_s: float) -> None:
        """Forecast from the capture in `into`; score what it shows started."""
        s = self.settings
        state, started, estimates = self.source.read(into, self._home, s.window_s)
        self.score.started(started)
        result = self._forecast(state)
        alternative = None
        if s.what_if:
            try:
                changed = what_if(state, s.what_if)
            except ConfigError as exc:
                raise WhatIfError(str(exc)) from None
            alternative = self._forecast(changed)
        jobs = _jobs(result, alternative, estimates)
        self.score.forecast(Pair(into.name, j["job_id"], j["gpus"], taken_s, j["start_p10_s"],
                                 j["start_p50_s"], j["start_p90_s"], j["estimate_s"])
                            for j in jobs)  # fmt: skip
        self.captures += 1
        self.view = self._view(state, result, jobs, taken_s)
        if self.out is not None:
            self._record(into, taken_s)

    def _forecast(self, state: Snapshot) -> Forecast:
        s = self.settings
        return forecast(state, samples=s.samples, horizon_s=s.horizon_s,
                        step_s=min(s.step_s, s.horizon_s), seed=s.seed)  # fmt: skip

    def _record(self, into: Path, taken_s: float) -> None:
        assert self.out is not None
        v = self.view
        line = {"capture": into.name, "taken_s": taken_s, "at_s": v["at_s"], "jobs": v["jobs"]}
        with (self.out / FORECASTS_FILE).open("a", encoding="utf-8") as f:
            f.write(json.dumps(line, allow_nan=False) + "\n")
        body = {"score": v["score"], "rolling": v["rolling"], "open_pairs": v["open_pairs"],
                "captures": v["captures"]}  # fmt: skip
        tmp = self.out / f".{SCORE_FILE}.tmp"
        tmp.write_text(json.dumps(body, indent=1, allow_nan=False) + "\n")
        tmp.replace(self.out / SCORE_FILE)

    def _error(self, text: str) -> None:
        self.errors = [*self.errors, text][-KEPT_ERRORS:]
        self.view = {**self.view, "errors": list(self.errors)}

    def _view(self, state: Snapshot | None, result: Forecast | None, jobs: list[JobView],
              taken_s: float | None = None) -> View:  # fmt: skip
        queue: list[BandView] = []
        if result is not None:
            offsets = [float(t) for t in result.offsets_s]
            queue = [{"name": b.name, "offsets_s": offsets, "p10": b.quantiles[0].tolist(),
                      "p50": b.quantiles[1].tolist(), "p90": b.quantiles[2].tolist()}
                     for b in result.bands if b.kind == "queue"]  # fmt: skip
        return {
            "source": self.source.described, "captures": self.captures,
            "taken_s": taken_s,
            "at_s": state.at_s if state is not None else None,
            "running": len(state.running) if state is not None else 0,
            "waiting": len(state.waiting) if state is not None else 0,
            "what_if": list(self.settings.what_if), "jobs": jobs, "queue": queue,
            "score": self.score.summary(), "rolling": self.score.rolling(),
            "open_pairs": sum(len(p) for p in self.score.open.values()),
            "errors": list(self.errors),
        }  # fmt: skip


def _jobs(result: Forecast, alternative: Forecast | None,
          estimates: dict[str, float]) -> list[JobView]:  # fmt: skip
    """Each waiting job's forecast start, the cluster's estimate and the what-if's start."""
    other = {j.job_id: j.start_s[1] for j in alternative.jobs if j.start_s} if alternative else {}
    jobs: list[JobView] = []
    for j in result.jobs:
        p10, p50, p90 = j.start_s or (None, None, None)
        jobs.append({"job_id": j.job_id, "tenant": j.tenant, "gpus": j.gpus,
                     "submit_s": j.submit_s, "start_p10_s": p10, "start_p50_s": p50,
                     "start_p90_s": p90, "estimate_s": estimates.get(j.job_id),
                     "what_if_p50_s": other.get(j.job_id)})  # fmt: skip
    return jobs


def _digest(into: Path) -> str:
    """The capture's exports (not when it was taken): equal where nothing changed."""
    h = hashlib.sha256()
    for path in sorted(into.iterdir()):
        if path.name != TAKEN_FILE:
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()
