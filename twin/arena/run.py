"""Running an arena: what is not done yet, on a local process pool or on Ray, each session's row
saved as it finishes (a restart skips it), then the leaderboard drawn from all of them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twin.arena import store
from twin.arena.lineup import (
    AgentSpec,
    Regime,
    ScenarioEntry,
    SessionTask,
    manifest_agents,
    scenario_record,
)
from twin.arena.sessions import run_task, warm
from twin.errors import ConfigError
from twin.eventlog import intervals
from twin.schema.vocabulary import Mechanism
from twin.sweep.execute import done_keys, local, on_ray, save

Row = dict[str, Any]
Progress = Callable[[int, int], None]  # (done, running)


def manifest(scenarios: list[ScenarioEntry], seeds: list[int], agents: list[AgentSpec], *,
             mechanisms: list[Mechanism], regimes: tuple[Regime, ...],
             round_timeout_ms: int, trade_gain: bool = True) -> dict[str, Any]:  # fmt: skip
    """What the arena runs, as `arena.json` records it (enough to run it again)."""
    import platform

    return {
        "twin_versions": [store.twin_version()],
        "python": platform.python_version(),
        "scenarios": [scenario_record(s) for s in scenarios],
        "seeds": seeds,
        "agents": manifest_agents(agents),
        "mechanism": mechanisms[0],
        "mechanisms": mechanisms,
        "regimes": list(regimes),
        "round_timeout_ms": round_timeout_ms,
        "rotation": "tenant i plays agent (i + r) mod k, r = 0..k-1",
        "trade_gain": trade_gain,  # each line-up with a trading agent played again, trading off
        "score": "(welfare - baseline) / (bound - baseline), the bound from twin bound (pooled)",
        "bootstrap": {"resamples": intervals.RESAMPLES, "seed": intervals.BOOTSTRAP_SEED,
                      "confidence": intervals.CONFIDENCE, "method": "percentile, over seeds"},
    }  # fmt: skip


def prepare(out: Path, wanted: dict[str, Any]) -> None:
    """Create the directory, or check that the arena in it is this one (seeds may differ:
    more can be added); write the manifest."""
    found = store.read_manifest(out)
    if found is not None and store.identity(found) != store.identity(wanted):
        differ = [k for k, v in store.identity(wanted).items() if found.get(k) != v]
        raise ConfigError(f"{out} holds another arena (its {', '.join(differ)} differ); "
                          "give a new --out, or the same scenarios and agents")  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    if found is not None:
        wanted = {**wanted, "seeds": sorted({*found["seeds"], *wanted["seeds"]})}
    store.write_json(out / store.MANIFEST_FILE, wanted)


def execute(tasks: list[SessionTask], out: Path, *, engine: str, workers: int,
            address: str | None = None, progress: Progress | None = None) -> int:  # fmt: skip
    """Play the sessions not done yet, saving each row; how many were played now."""
    done = done_keys(out)
    todo = [t for t in tasks if t.key not in done]
    before = len(tasks) - len(todo)
    if progress is not None:
        progress(before, min(workers, len(todo)))
    played = (on_ray(run_task, todo, workers, address) if engine == "ray"
              else local(run_task, todo, workers, warm, store.preload))  # fmt: skip
    for n, row in enumerate(played, 1):
        save(out, row)
        if progress is not None:
            progress(before + n, min(workers, len(todo) - n))
    return len(todo)


def finish(out: Path, tasks: list[SessionTask]) -> store.Boards:
    """The boards of this arena's sessions (the ones its tasks name), written out."""
    keys = {t.key for t in tasks}
    found = [r for r in store.rows(out) if r["key"] in keys]
    manifest = store.read_manifest(out)
    assert manifest is not None
    manifest = {**manifest, "seeds": sorted({t.seed for t in tasks})}
    return store.write_outputs(out, manifest, found)


class Ticker:
    """Progress for a log (no terminal): a line at most every `every_s` as sessions finish, the
    last one, and while none finishes (a long LLM session, say) still a line every `every_s`,
    from a heartbeat thread while the ticker is entered (`with Ticker(...) as tick`)."""

    def __init__(self, say: Callable[[str], None], total: int, every_s: float = 10.0) -> None:
        self.say, self.total, self.every_s = say, total, every_s
        self.started = time.monotonic()
        self.last = -every_s
        self.first: int | None = None  # sessions done before this run
        self.done, self.running = 0, 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def __call__(self, done: int, running: int) -> None:
        with self._lock:
            self.done, self.running = done, running
            if self.first is None:
                self.first = done
            now = time.monotonic() - self.started
            if now - self.last < self.every_s and done < self.total:
                return
            self._line(now)

    def _line(self, now: float) -> None:
        self.last = now
        first = self.first if self.first is not None else self.done
        rate = (self.done - first) / now if now > 0 else 0.0
        left = self.total - self.done
        eta = f", eta {left / rate:.0f} s" if rate > 0 and left > 0 else ""
        self.say(f"arena: {self.done} of {self.total} sessions done, {self.running} running, "
                 f"{now:.0f} s{eta}")  # fmt: skip

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.every_s / 4):
            with self._lock:
                now = time.monotonic() - self.started
                if now - self.last >= self.every_s and self.done < self.total:
                    self._line(now)

    def __enter__(self) -> Ticker:
        self._beat = threading.Thread(target=self._heartbeat, name="arena-ticker", daemon=True)
        self._beat.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
