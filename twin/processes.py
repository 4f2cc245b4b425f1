"""Process pools for the long commands (sweep, arena, calibrate, fill), quiet under Ctrl-C.

A terminal sends its interrupt to the whole process group, workers included. Their workers
ignore it (no worker prints a traceback); the parent, on the interrupt or any other exception,
stops them at once and re-raises, so the command alone says what happened and no worker
outlives it."""

from __future__ import annotations

import queue
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, InvalidStateError, ProcessPoolExecutor
from contextlib import contextmanager
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T")


def _start_quietly(initializer: Callable[..., None] | None, *initargs: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if initializer is not None:
        initializer(*initargs)


def quiet_pool(workers: int, initializer: Callable[..., None] | None = None,
               initargs: tuple[Any, ...] = ()) -> ProcessPoolExecutor:  # fmt: skip
    """A pool of `workers` processes that ignore Ctrl-C, each started by `initializer`."""
    return ProcessPoolExecutor(max_workers=workers, initializer=_start_quietly,
                               initargs=(initializer, *initargs))  # fmt: skip


@contextmanager
def stopping(pool: ProcessPoolExecutor) -> Iterator[ProcessPoolExecutor]:
    """Use `pool`, then shut it down; on an exception (Ctrl-C included) stop its workers at
    once and re-raise."""
    try:
        yield pool
    except BaseException:
        # The pool, broken by its stopped workers, fails what had not run; where a future was
        # cancelled already (`Executor.map` cancels the rest when interrupted), Python 3.11's
        # pool thread raises InvalidStateError failing it: not news, so not printed.
        hook = threading.excepthook
        threading.excepthook = partial(_unless_cancelled, hook)
        try:
            for process in list(getattr(pool, "_processes", {}).values()):  # running workers
                process.terminate()
            pool.shutdown(cancel_futures=True)
        finally:
            threading.excepthook = hook
        raise
    pool.shutdown()


def as_finished(futures: Sequence[Future[T]]) -> Iterator[Future[T]]:
    """`futures` as each finishes. Unlike `concurrent.futures.as_completed` and `wait`, which
    take every pending future's lock in turn, it holds none while it waits: an interrupt
    between two takes left some held, and the pool's own thread, failing those futures after
    Ctrl-C, waited for them forever (and the command with it)."""
    finished: queue.SimpleQueue[Future[T]] = queue.SimpleQueue()
    for future in futures:
        future.add_done_callback(finished.put)
    for _ in futures:
        yield finished.get()


def _unless_cancelled(hook: Callable[[threading.ExceptHookArgs], object],
                      args: threading.ExceptHookArgs) -> None:  # fmt: skip
    if args.exc_type is not InvalidStateError:
        hook(args)
