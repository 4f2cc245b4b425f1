"""Running an arena: what is not done yet, on a local process pool or on Ray, each session's row
saved as it finishes (a restart skips it), then the leaderboard drawn from all of them."""

from __future__ import annotations

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
              else local(run_task, todo, workers, warm))  # fmt: skip
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
    """Progress for a log (no terminal): a line at most every `every_s`, and the last, with the
    time left at the rate so far."""

    def __init__(self, say: Callable[[str], None], total: int, every_s: float = 10.0) -> None:
        self.say, self.total, self.every_s = say, total, every_s
        self.started = time.monotonic()
        self.last = -every_s
        self.first: int | None = None  # sessions done before this run

    def __call__(self, done: int, running: int) -> None:
        now = time.monotonic() - self.started
        if self.first is None:
            self.first = done
        if now - self.last < self.every_s and done < self.total:
            return
        self.last = now
        rate = (done - self.first) / now if now > 0 else 0.0
        eta = f", eta {(self.total - done) / rate:.0f} s" if rate > 0 and done < self.total else ""
        self.say(f"arena: {done} of {self.total} sessions done, {running} running, "
                 f"{now:.0f} s{eta}")  # fmt: skip
