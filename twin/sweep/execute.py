"""Running a sweep's runs: one run per task on a local process pool or on Ray, each result
written to `runs/<key>.json` as it finishes (so a restart skips it), then `results.parquet`.

A result row is the run's inputs (`key`, `scenario`, `seed`, `policy`, one column per swept
path, prefixed `set.`) and every figure of its summary, flattened to dotted names (pools and
tenants by name).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import orjson

from twin.processes import as_finished, quiet_pool, stopping
from twin.ray_runtime import start_ray
from twin.sweep.spec import Run

Row = dict[str, Any]
T = TypeVar("T")
RUNS_DIR = "runs"
RESULTS_FILE = "results.parquet"


def flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Dotted names for the scalars of a summary's JSON (named lists by their names)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from flatten(v, f"{prefix}{k}.")
    elif isinstance(value, list) and all(isinstance(v, dict) and "name" in v for v in value):
        for item in value:
            rest = {k: v for k, v in item.items() if k != "name"}
            yield from flatten(rest, f"{prefix}{item['name']}.")
    elif isinstance(value, list):
        yield prefix.rstrip("."), orjson.dumps(value).decode()
    else:
        yield prefix.rstrip("."), value


def run_one(run: Run, logs: str | None) -> Row:
    """Play one run; its row. (A top-level function, so worker processes can import it.)"""
    from twin.sim import scenarios
    from twin.sim.runner import run_episode

    scenario = scenarios.load(run.scenario, run.assignments)
    out_dir = Path(logs) / run.key if logs is not None else None
    summary, _ = run_episode(scenario, seed=run.seed, policy=run.policy, out_dir=out_dir)
    row: Row = {"key": run.key, "scenario": run.scenario, "seed": run.seed, "policy": run.policy}
    row.update({f"set.{path}": value for path, value in sorted(run.overrides.items())})
    figures = summary.model_dump(mode="json", exclude={"session", "scenario", "seed"})
    row.update(flatten(figures))
    return row


def warm() -> None:
    """Import what a run needs here, before the pool starts its workers: where workers are
    forked (Linux), each starts with it all. (Not the compiled kernel: a run's few plans are
    evaluated on numpy until a process has evaluated enough to earn loading it.)"""
    from twin.sim import runner, scenarios  # noqa: F401 (imported for the workers to inherit)


def done_keys(out: Path) -> set[str]:
    """Keys of the runs whose results are already written."""
    return {p.stem for p in (out / RUNS_DIR).glob("*.json")}


def save(out: Path, row: Row) -> None:
    """Write one run's row atomically (a crash leaves it whole or absent)."""
    folder = out / RUNS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{row['key']}.tmp"
    tmp.write_bytes(orjson.dumps(row))
    os.replace(tmp, folder / f"{row['key']}.json")


def local(task: Callable[[T], Row], items: Sequence[T], workers: int,
          warmed: Callable[[], None] = warm,
          meanwhile: Callable[[], None] | None = None) -> Iterator[Row]:  # fmt: skip
    """`task(item)` for every item as they finish, on a pool of `workers` processes (started
    warm: see `warm`); `meanwhile` runs on a thread of this process once the workers are
    started (what the results will need, imported while this process only waits). Ctrl-C stops
    the pool at once: its workers ignore the interrupt (no traceback of theirs) and are
    stopped; what finished before it is kept by the caller."""
    warmed()
    with stopping(quiet_pool(workers)) as pool:
        futures = [pool.submit(task, item) for item in items]
        # After the first submit a forking pool has its workers; the thread ends before this
        # does, so no later fork copies it mid-import.
        helper = None if meanwhile is None else in_background(meanwhile)
        for future in as_finished(futures):
            yield future.result()
        if helper is not None:
            helper.join()


def in_background(work: Callable[[], object]) -> threading.Thread:
    """`work` on a daemon thread, started; what it raises is left for the main path to meet
    again."""

    def quietly() -> None:
        with contextlib.suppress(Exception):
            work()

    thread = threading.Thread(target=quietly, name="twin-meanwhile", daemon=True)
    thread.start()
    return thread


def preload_results() -> None:
    """What writing a sweep's results imports: pyarrow, and pandas, which pyarrow imports when
    it first builds an array from Python objects (a quarter of a second, here spent while the
    workers run)."""
    import pyarrow as pa
    import pyarrow.parquet

    pa.array([0])


def _each(task: Callable[[T], Row], chunk: Sequence[T]) -> list[Row]:
    return [task(item) for item in chunk]


CHUNKS_PER_WORKER = 4  # enough to even out the workers' loads, few enough to pay Ray little


def chunked(items: Sequence[T], workers: int) -> list[Sequence[T]]:
    """`items` in consecutive chunks, about CHUNKS_PER_WORKER per worker."""
    size = max(1, -(-len(items) // (max(workers, 1) * CHUNKS_PER_WORKER)))
    return [items[i : i + size] for i in range(0, len(items), size)]


def on_ray(task: Callable[[T], Row], items: Sequence[T], workers: int,
           address: str | None) -> Iterator[Row]:  # fmt: skip
    """`task(item)` for every item, a chunk of items to a Ray task (a local Ray of `workers`
    CPUs, or a cluster), rows as each chunk finishes. (A Ray worker pays its imports in its
    first chunk: a start-up hook made local Ray start a second set of workers, slower.)"""
    import ray

    started_here = not ray.is_initialized()
    if started_here:
        start_ray(workers, address)
    try:
        cpus = int(ray.cluster_resources().get("CPU", workers)) if address else workers  # type: ignore[no-untyped-call]
        remote: Any = ray.remote(_each)
        pending = [remote.remote(task, chunk) for chunk in chunked(items, cpus)]
        while pending:
            finished, pending = ray.wait(pending, num_returns=1)
            for ref in finished:
                yield from ray.get(ref)
    finally:
        if started_here:
            ray.shutdown()


def execute(runs: Iterable[Run], out: Path, *, engine: str, workers: int,
            address: str | None = None, keep_logs: bool = False,
            progress: Callable[[int], None] | None = None) -> int:  # fmt: skip
    """Run what is not done yet, saving each row; how many ran now."""
    done = done_keys(out)
    planned = list(runs)
    todo = [r for r in planned if r.key not in done]
    before = len(planned) - len(todo)
    logs = str(out / "logs") if keep_logs else None
    task = partial(run_one, logs=logs)
    rows = (on_ray(task, todo, workers, address) if engine == "ray"
            else local(task, todo, workers, meanwhile=preload_results))  # fmt: skip
    for n, row in enumerate(rows, 1):
        save(out, row)
        if progress is not None:
            progress(before + n)
    return len(todo)


def assemble(out: Path, keys: Iterable[str]) -> Path:
    """`results.parquet` from the rows of `keys`, in key order (any engine, any order of
    finishing, gives the same file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [orjson.loads((out / RUNS_DIR / f"{k}.json").read_bytes()) for k in sorted(set(keys))]
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    table = pa.Table.from_pylist([{c: row.get(c) for c in columns} for row in rows])
    path = out / RESULTS_FILE
    pq.write_table(table, path, compression="zstd")
    return path
