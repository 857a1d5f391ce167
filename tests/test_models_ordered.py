"""The ordered executor (evroute.models.ordered) on toy tasks: the result of the defining order
(written out literally here, from snapshots of the state) whatever the threads and the timing,
and a mutation of its check caught."""

from __future__ import annotations

import time

import numpy as np
import pytest

from evroute.errors import EvrouteError
from evroute.models import ordered
from evroute.models.ordered import run_in_order

N_ITEMS = 120


class Toy:
    """Tasks on a state of floats: task q reads item s_q, and from its value how many items after
    it (a footprint that depends on the data, as a chunk's domain does), and writes a function of
    everything it read, of q, of whether it is a fresh attempt, and of its base's result (an input
    fixed by the base, as a lane's radius is)."""

    def __init__(self, n: int, seed: int, base, jitter: float = 0.0):
        rng = np.random.default_rng(seed)
        self.start = rng.integers(0, N_ITEMS - 8, n)
        self.base = np.asarray(base)
        self.x = np.sin(np.arange(N_ITEMS, dtype=float))
        self.done: dict[int, float] = {}
        self.jitter = jitter
        self.delays = rng.uniform(0, 1, n)

    def attempt(self, q: int, fresh: bool, slot: int, x=None):
        x = self.x if x is None else x
        s = int(self.start[q])
        width = 1 + int(abs(x[s]) * 7) % 6
        fp = np.arange(s, s + width)
        if self.jitter:
            time.sleep(self.jitter * self.delays[q])
        b = int(self.base[q])
        inherited = self.done[b] if b >= 0 else 0.0
        values = np.cos(x[fp] * 1.7 + q + inherited + (0.25 if fresh else 0.0))
        return fp, values

    def footprint(self, result):
        return result[0]

    def commit(self, q: int, result):
        fp, values = result
        self.x[fp] = values
        self.done[q] = float(values.sum())


def defined(n: int, seed: int, base) -> np.ndarray:
    """The result of the order, literally: each task first attempted on the state right after
    its base, again on the current state where its footprint met a later write."""
    toy = Toy(n, seed, base)
    snapshots = {-1: toy.x.copy()}
    written_by = np.full(N_ITEMS, -1)
    for q in range(n):
        fp, values = toy.attempt(q, False, 0, x=snapshots[int(base[q])].copy())
        if (written_by[fp] > base[q]).any():
            fp, values = toy.attempt(q, True, 0)
        toy.commit(q, (fp, values))
        written_by[fp] = q
        snapshots[q] = toy.x.copy()
    return toy.x


def lanes(n: int) -> np.ndarray:
    """Two lanes interleaved: each task's base the task two before it (the lane's previous)."""
    return np.maximum(np.arange(n) - 2, -1)


def pairs(n: int) -> np.ndarray:
    """Pairs: both tasks of a pair wait for the pair before."""
    return (np.arange(n) // 2) * 2 - 1


@pytest.mark.parametrize("make_base", [lanes, pairs])
@pytest.mark.parametrize("threads", [1, 2])
def test_the_result_is_that_of_the_order(make_base, threads):
    """Against the literal definition, on 10 draws of the tasks (footprints that meet and that
    miss), on one thread and on two with the attempts' times jittered."""
    redone = 0
    for seed in range(10):
        n = 40
        base = make_base(n)
        toy = Toy(n, seed, base, jitter=0.002 if threads == 2 else 0.0)
        stats = run_in_order(base, toy.attempt, toy.footprint, commit=toy.commit, n_items=N_ITEMS, threads=threads)
        np.testing.assert_array_equal(toy.x, defined(n, seed, base))
        assert stats.tasks == n
        redone += stats.redone
    assert 0 < redone < 10 * 40  # both kinds occur: kept as attempted, and attempted again


def test_a_check_that_misses_a_meeting_is_caught(monkeypatch):
    """The mutation: the check never finds a meeting, so a task keeps an attempt made before a
    write into its footprint; the result then differs from the order's."""
    base = pairs(40)
    monkeypatch.setattr(ordered, "meets", lambda written_by, footprint, b: False)
    differ = []
    for seed in range(10):
        toy = Toy(40, seed, base)
        run_in_order(base, toy.attempt, toy.footprint, commit=toy.commit, n_items=N_ITEMS, threads=1)
        differ.append(not np.array_equal(toy.x, defined(40, seed, base)))
    assert any(differ)


def test_an_error_in_one_thread_stops_both():
    """An attempt that raises stops the other thread and reaches the caller; nothing after the
    failing task is committed."""
    base = lanes(30)
    toy = Toy(30, 1, base, jitter=0.001)
    real = toy.attempt

    def attempt(q, fresh, slot):
        if q == 11:
            raise RuntimeError("boom")
        return real(q, fresh, slot)

    with pytest.raises(RuntimeError, match="boom"):
        run_in_order(base, attempt, toy.footprint, commit=toy.commit, n_items=N_ITEMS, threads=2)
    assert max(toy.done) < 11


def test_bad_bases_are_refused():
    toy = Toy(3, 0, [-1, 1, 0])
    with pytest.raises(EvrouteError, match="earlier task"):
        run_in_order([-1, 1, 0], toy.attempt, toy.footprint, commit=toy.commit, n_items=N_ITEMS)
    with pytest.raises(EvrouteError, match="threads"):
        run_in_order([-1, 0, 1], toy.attempt, toy.footprint, commit=toy.commit, n_items=N_ITEMS, threads=3)


class LaneToy:
    """Lane tasks on the same state: lane l's task k reads from a start of its own (lanes meet
    where starts come close), and its input from the lane's previous result (as a chunk's radius)."""

    def __init__(self, sizes, seed: int, jitter: float = 0.0, hold: tuple | None = None):
        rng = np.random.default_rng(seed)
        self.sizes = sizes
        self.start = [rng.integers(0, N_ITEMS - 8, n) for n in sizes]
        self.delays = [rng.uniform(0, 1, n) for n in sizes]
        self.x = np.sin(np.arange(N_ITEMS, dtype=float))
        self.jitter = jitter
        self.hold = hold
        self.held = False

    def attempt(self, lane: int, k: int, previous: list, slot: int):
        s = int(self.start[lane][k])
        width = 1 + int(abs(self.x[s]) * 7) % 6
        fp = np.arange(s, s + width)
        if self.jitter:
            time.sleep(self.jitter * self.delays[lane][k])
        if self.hold == (lane, k) and not self.held:
            self.held = True
            time.sleep(0.3)
        inherited = previous[-1][1].sum() if previous else 0.0
        return fp, np.cos(self.x[fp] * 1.3 + lane + 0.1 * k + inherited)

    def footprint(self, result):
        return result[0]

    def write(self, result):
        fp, values = result
        token = (fp, self.x[fp].copy())
        self.x[fp] = values
        return token

    def restore(self, token):
        fp, old = token
        self.x[fp] = old


def lanes_defined(sizes, seed: int) -> np.ndarray:
    """The order b_0, a_0, b_1, a_1, …, one task after the other."""
    toy = LaneToy(sizes, seed)
    kept = [[] for _ in sizes]
    for k in range(max(sizes)):
        for lane in reversed(range(len(sizes))):
            if k < sizes[lane]:
                r = toy.attempt(lane, k, kept[lane], 0)
                toy.write(r)
                kept[lane].append(r)
    return toy.x


@pytest.mark.parametrize("threads", [1, 2])
def test_lanes_give_the_result_of_their_order(threads):
    """Against the order written out, on 12 draws (lanes that meet, rolled back, and that do
    not), on one thread and on two with jittered attempts; the memory carried between calls."""
    from evroute.models.ordered import LaneMemory, run_in_lanes

    memory = LaneMemory(N_ITEMS)
    met = 0
    for seed in range(12):
        sizes = [9, 8]
        toy = LaneToy(sizes, seed, jitter=0.002 if threads == 2 else 0.0)
        kept, stats = run_in_lanes(sizes, toy.attempt, toy.footprint, write=toy.write, restore=toy.restore, memory=memory, threads=threads)
        np.testing.assert_array_equal(toy.x, lanes_defined(sizes, seed))
        assert [len(k) for k in kept] == sizes
        met += stats.met
        if threads == 1:
            assert stats.serial and stats.met == 0
    assert (met > 0) == (threads == 2)  # two threads met, rolled back and went on


@pytest.mark.parametrize("mutate", [False, True])
def test_a_lane_rollback_restores_every_write(mutate):
    """The second lane's first task held back, the first lane runs ahead and meets it: the
    rollback gives the order's result; a restore that leaves its write in place (the mutation)
    gives another."""
    from evroute.models.ordered import LaneMemory, run_in_lanes

    differ = []
    for seed in range(6):
        sizes = [6, 6]
        toy = LaneToy(sizes, seed, hold=(1, 0))
        restore = (lambda token: None) if mutate else toy.restore
        run_in_lanes(sizes, toy.attempt, toy.footprint, write=toy.write, restore=restore, memory=LaneMemory(N_ITEMS), threads=2)
        differ.append(not np.array_equal(toy.x, lanes_defined(sizes, seed)))
    assert any(differ) == mutate
