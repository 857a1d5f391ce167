"""The package's one process pool (evroute.pool.process_map): no pool for one job, results in
order or as they finish, workers that start once, errors, and workers stopped when the consumer
stops; the drives import with one job starts no process."""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import numpy as np
import pytest

from evroute.pool import process_map, worker_count

_STATE: dict = {}


def _remember(value) -> None:
    _STATE["value"] = value


class _Tagged:
    """A function object: the item, the worker's process id and what its start set."""

    def __call__(self, x):
        return x * x, os.getpid(), _STATE.get("value")


def _fail_on_three(x):
    if x == 3:
        raise ValueError("three")
    return x


def _slow(x):
    time.sleep(0.2 if x else 0.0)
    return x


def test_worker_count():
    assert [worker_count(j, n) for j, n in ((1, 10), (4, 1), (4, 0), (None, 5), (4, 3), (2, 10))] == [0, 0, 0, 0, 3, 2]


def test_one_job_is_this_process_without_a_pool(monkeypatch):
    import concurrent.futures

    def refuse(*args, **kwargs):
        raise AssertionError("a pool was started")

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", refuse)
    _STATE.clear()
    out = list(process_map(_Tagged(), [1, 2, 3], jobs=1, initializer=_remember, initargs=("started",)))
    assert out == [(x, (x * x, os.getpid(), None)) for x in (1, 2, 3)]  # the initializer is for workers only
    assert [r for _, r in process_map(_Tagged(), [5], jobs=4)] == [(25, os.getpid(), None)]  # one item: no pool


def test_workers_in_order_and_as_they_finish():
    items = list(range(7))
    ordered = list(process_map(_Tagged(), items, jobs=2, initializer=_remember, initargs=("started",), chunksize=2))
    assert [x for x, _ in ordered] == items
    assert [r[0] for _, r in ordered] == [x * x for x in items]
    assert {r[2] for _, r in ordered} == {"started"} and os.getpid() not in {r[1] for _, r in ordered}
    assert len({r[1] for _, r in ordered}) <= 2
    unordered = list(process_map(_Tagged(), items, jobs=2, ordered=False))
    assert sorted(x for x, _ in unordered) == items and all(r[0] == x * x for x, r in unordered)


def test_errors_raise_or_become_results():
    with pytest.raises(ValueError, match="three"):
        list(process_map(_fail_on_three, [1, 2, 3, 4], jobs=2))
    with pytest.raises(ValueError, match="three"):
        list(process_map(_fail_on_three, [1, 2, 3, 4], jobs=1))
    for ordered in (True, False):
        out = dict(process_map(_fail_on_three, [1, 2, 3, 4], jobs=2, ordered=ordered,
                               on_error=lambda x, exc: f"{type(exc).__name__}: {exc}"))
        assert out == {1: 1, 2: 2, 3: "ValueError: three", 4: 4}


def test_a_consumer_that_stops_stops_the_workers():
    before = set(mp.active_children())
    stream = process_map(_slow, [0] + [1] * 20, jobs=2)
    assert next(stream) == (0, 0)
    stream.close()
    deadline = time.monotonic() + 10
    while set(mp.active_children()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(mp.active_children()) - before == set()


def test_the_import_with_one_job_starts_no_process(synthetic, tmp_path, monkeypatch):
    """``import_traces(jobs=1)`` matches in this process (no pool, no hash seed set), and gives
    the table two jobs give."""
    import concurrent.futures

    import pandas as pd

    from evroute.world.drives import import_traces

    from .test_drives import _drive, _route

    route = _route(synthetic)
    pd.concat([_drive(synthetic, route, np.full(len(route), 20.0 + k)).assign(trip=f"t{k}") for k in range(2)]) \
        .to_csv(tmp_path / "t.csv", index=False)
    two, _ = import_traces([tmp_path / "t.csv"], synthetic, gps_noise_m=5.0, jobs=2)
    saved = dict(os.environ)

    def refuse(*args, **kwargs):
        raise AssertionError("a pool was started")

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", refuse)
    one, report = import_traces([tmp_path / "t.csv"], synthetic, gps_noise_m=5.0, jobs=1)
    assert dict(os.environ) == saved and report.trips_kept == 2
    assert one.equals(two)
