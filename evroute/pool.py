"""Processes side by side: the one process pool of the package.

:func:`process_map` calls a function on each of a list of items, in worker processes when more
than one job is asked for and there is more than one item, else in this process with no pool at
all. Every pool of the package is this one: ``evroute compare``'s local executor
(:mod:`evroute.runs.executors`: results as they finish) and ``evroute drives import``
(:func:`evroute.world.drives.import_traces`: results in the items' order).

The workers are spawned (a fresh interpreter each: no state of this process leaks into them, on
every platform alike), ignore Ctrl-C (this process stops them: on an interruption, an error, or
when the consumer stops reading, the workers still running are terminated), and die with this
process on Linux. The function is sent to each worker once, when it starts, not with every item:
a callable object may build what it needs (a map matcher, a prepared network) on its first call
and keep it for the worker's life. A result never depends on the number of jobs: nothing of a
worker's but its results comes back, and a worker sets no state a result could read (its hash
seed included: the package's results do not depend on it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

__all__ = ["process_map", "worker_count"]

Item = TypeVar("Item")
Result = TypeVar("Result")

#: The function a worker calls on each item (sent once, as the worker starts).
_TASK: dict[str, Callable] = {}


def worker_count(jobs: int | None, items: int) -> int:
    """How many worker processes :func:`process_map` starts for ``items`` items and ``jobs``
    jobs: at most one per item; 0 (no pool, this process does the work) where that is one or
    fewer.

    Returns
    -------
    int
    """
    n = min(int(jobs or 1), int(items))
    return n if n > 1 else 0


def _start(fn: Callable, initializer: Callable | None, initargs: tuple) -> None:
    """A worker's start: Ctrl-C left to the parent (which stops the workers itself), death with
    the parent (Linux), then the caller's ``initializer``; ``fn`` kept for the items."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no orphan keeps working
            if os.getppid() == 1:  # the parent died before prctl
                os._exit(1)
        except OSError:  # pragma: no cover
            pass
    if initializer is not None:
        initializer(*initargs)
    _TASK["fn"] = fn


def _call(item):
    """One item, in a worker: the function its start was given."""
    return _TASK["fn"](item)


def _call_chunk(chunk: list) -> list:
    """Items in a row, in a worker."""
    fn = _TASK["fn"]
    return [fn(item) for item in chunk]


def process_map(fn: Callable[[Item], Result], items: Sequence[Item], *, jobs: int | None = 1,
                ordered: bool = True, initializer: Callable[..., Any] | None = None, initargs: tuple = (),
                chunksize: int = 1,
                on_error: Callable[[Item, BaseException], Result] | None = None) -> Iterator[tuple[Item, Result]]:
    """``(item, fn(item))`` for every item, computed in up to ``jobs`` worker processes.

    Parameters
    ----------
    fn : callable
        Called on each item; picklable (a module's function, or an object of a module's class)
        where a pool is used. Sent to each worker once, as it starts.
    items : sequence
        The work; with a pool each item is pickled to a worker and its result back.
    jobs : int, optional
        The most worker processes (one per item at most). With one job, or one item, there is no
        pool: ``fn`` runs in this process, in the items' order, and ``initializer`` is not called.
    ordered : bool
        True: results in the items' order (read lazily; a worker may run ahead by its chunk).
        False: as they finish.
    initializer, initargs : optional
        Called as ``initializer(*initargs)`` in each worker process as it starts, after the
        pool's own start (Ctrl-C ignored, death with the parent). Never in this process.
    chunksize : int
        Items sent to a worker at a time (``ordered`` only).
    on_error : callable, optional
        ``on_error(item, exception) -> result``: what a pooled item yields whose worker failed
        (it died, its result could not be sent back, or ``fn`` raised; with ``chunksize`` > 1,
        every item of its chunk), instead of raising. In this process an exception of ``fn``
        propagates as it is.

    Returns
    -------
    iterator of (item, result)
        A generator: the work starts at its first item and stops (the workers with it) when it is
        closed.
    """
    items = list(items)
    workers = worker_count(jobs, len(items))
    if not workers:
        for item in items:
            yield item, fn(item)
        return
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    ctx = mp.get_context("spawn")
    before = set(mp.active_children())
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_start,
                               initargs=(fn, initializer, initargs))
    finished = False
    try:
        if ordered:
            size = max(1, int(chunksize))
            chunks = [items[i:i + size] for i in range(0, len(items), size)]
            futures = [pool.submit(_call_chunk, chunk) for chunk in chunks]
            for chunk, future in zip(chunks, futures, strict=True):
                try:
                    results = future.result()
                except Exception as exc:
                    if on_error is None:
                        raise
                    results = [on_error(item, exc) for item in chunk]
                yield from zip(chunk, results, strict=True)
        else:
            futures = {pool.submit(_call, item): item for item in items}
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    item = futures[future]
                    try:
                        result = future.result()
                    except Exception as exc:
                        if on_error is None:
                            raise
                        result = on_error(item, exc)
                    yield item, result
        finished = True
    finally:
        if not finished:  # interrupted, an error, or the consumer stopped: stop the workers now
            for proc in mp.active_children():
                if proc not in before:
                    proc.terminate()
        pool.shutdown(wait=finished, cancel_futures=True)
