"""Tasks whose result is that of their order, run on one thread or two: the local GMRF update's
scheduling (:mod:`evroute.models.local`), apart from its numerics. Two executors, one contract.

:func:`run_in_order` (the local update's pairs). A task is **attempted** (it reads the shared
state and writes nothing; its result names its **footprint**, the items it read and will write)
and then **committed** (it writes its footprint). Each task ``q`` has a **base** ``base[q] < q``:
the task whose commit it waits for before its first attempt (−1: none). The result is defined
as, for q = 0, 1, …, n − 1 in turn:

1. ``r = attempt(q, fresh=False)``, on the state after at least the tasks up to ``base[q]``;
2. if the footprint of r meets what a task after ``base[q]`` (and before q) wrote:
   ``r = attempt(q, fresh=True)``, on the state after every task before q;
3. ``commit(q, r)``.

It is the same whatever the threads, provided that an attempt reads the state only inside its
footprint and its other inputs only from tasks up to its base (for ``fresh=False``): an attempt
that saw more of the earlier tasks' commits than its base's saw them outside its footprint (or it
is redone), so it read the same values and took the same course. With two threads a task is
attempted while the one before it is still running or committing; commits are in order, by the
thread that attempted the task. One thread keeps the same schedule (each task attempted as soon
as its base is committed, before the tasks between), so the same attempts are checked: a check
that missed a meeting would show on one thread as on two (``tests/test_models_ordered.py``).

:func:`run_in_lanes` (the local update's lanes). Tasks in lanes, the result that of the order
b_0, a_0, b_1, a_1, …; the threads run the lanes side by side and commit out of that order,
claiming footprints and rolling back where two tasks met unordered. Measured side by side
(docs/performance-scale.md, "The ordered executor"), :func:`run_in_order` with each task's base its
lane's previous task gave the same bits but was 4–7 % slower on the lanes' rounds at 100k and
300k edges (commits in order: a lane waits for the other's slower task), so the lanes stay.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ..errors import EvrouteError

__all__ = ["OrderedStats", "run_in_order", "meets", "run_in_lanes", "LaneMemory", "LaneStats", "SEAM", "LANE_TRIES"]


@dataclass
class OrderedStats:
    """What :func:`run_in_order` did: the tasks, and those attempted again (their footprint met
    a write after their base)."""

    tasks: int = 0
    redone: int = 0


def meets(written_by: np.ndarray, footprint: np.ndarray, base: int) -> bool:
    """Whether a task after ``base`` wrote an item of ``footprint`` (``written_by``: the last
    task that wrote each item, −1 for none)."""
    return bool(footprint.size) and int(written_by[footprint].max()) > base


def run_in_order(base: Sequence[int], attempt: Callable, footprint: Callable, *, commit: Callable, n_items: int, threads: int = 1, pool: ThreadPoolExecutor | None = None) -> OrderedStats:
    """Run the tasks 0..n−1 (``n = len(base)``) so that the result is that of the order (module
    docstring), on one thread or two.

    Parameters
    ----------
    base : sequence of int
        Per task, the task whose commit its first attempt waits for (< the task; −1: none).
    attempt : callable
        ``attempt(q, fresh, slot)`` → the task's result, writing nothing; ``slot`` (0 or 1) names
        the thread, for per-thread scratch.
    footprint : callable
        ``footprint(result)`` → the items (int array) the attempt read and the commit writes.
    commit : callable
        ``commit(q, result)`` writes the result.
    n_items : int
        How many items the state has.
    threads : {1, 2}
    pool : concurrent.futures.ThreadPoolExecutor, optional
        Where the second thread runs (default: a pool made for the call).

    Returns
    -------
    OrderedStats
    """
    base = np.asarray(base, dtype=np.int64)
    n = int(base.size)
    if n and (np.any(base >= np.arange(n)) or np.any(base < -1)):
        raise EvrouteError("a task's base must be an earlier task or -1")
    if threads not in (1, 2):
        raise EvrouteError(f"threads must be 1 or 2, got {threads!r}")
    written_by = np.full(int(n_items), -1, np.int64)
    stats = OrderedStats(tasks=n)

    def finish(q: int, result, slot: int) -> None:
        """Check, attempt again where needed, and commit: only ever the next task in the order."""
        fp = np.asarray(footprint(result), dtype=np.int64)
        if meets(written_by, fp, int(base[q])):
            stats.redone += 1
            result = attempt(q, True, slot)
            fp = np.asarray(footprint(result), dtype=np.int64)
        commit(q, result)
        written_by[fp] = q

    if threads == 1 or n < 2:
        # each task attempted as soon as its base is committed, before the tasks between are: the
        # schedule of two threads, on one (so the same attempts are checked, and the same redone)
        pending, ahead = {}, 0
        for q in range(n):
            while ahead < n and base[ahead] < q:
                pending[ahead] = attempt(ahead, False, 0)
                ahead += 1
            finish(q, pending.pop(q), 0)
        return stats

    _two_threads(base, attempt, finish, pool)
    return stats


def _two_threads(base: np.ndarray, attempt: Callable, finish: Callable, pool: ThreadPoolExecutor | None) -> None:
    """The tasks on this thread and one more: each takes the next task once its base is
    committed, attempts it, and finishes it (:func:`run_in_order`) when the one before is
    committed; an error in either stops both and reaches the caller."""
    n = int(base.size)
    cond = threading.Condition()
    shared = {"next": 0, "committed": -1, "stop": False}

    def startable() -> bool:
        return shared["stop"] or shared["next"] >= n or base[shared["next"]] <= shared["committed"]

    def worker(slot: int) -> None:
        try:
            while True:
                with cond:
                    cond.wait_for(startable)
                    if shared["stop"] or shared["next"] >= n:
                        return
                    q = shared["next"]
                    shared["next"] += 1
                result = attempt(q, False, slot)
                with cond:
                    cond.wait_for(lambda q=q: shared["stop"] or shared["committed"] == q - 1)
                    if shared["stop"]:
                        return
                finish(q, result, slot)  # (the other thread may attempt q + 1 meanwhile; it commits after)
                with cond:
                    shared["committed"] = q
                    cond.notify_all()
        except BaseException:
            with cond:
                shared["stop"] = True
                cond.notify_all()
            raise

    own = pool is None
    pool = pool or ThreadPoolExecutor(max_workers=1, thread_name_prefix="evroute-ordered")
    try:
        future = pool.submit(worker, 1)
        error = None
        try:
            worker(0)
        except BaseException as e:  # (the other thread stops at its next wait; then re-raise)
            error = e
        try:
            future.result()
        except BaseException as e:
            error = error or e
        if error is not None:
            raise error
    finally:
        if own:
            pool.shutdown(wait=True)


# -- lanes ---------------------------------------------------------------------------------------

#: The seam between two lanes: the first lane's task n − 1 − d (d = 0 … SEAM, n its tasks) follows
#: the second lane's tasks 0 … SEAM − d (neighbours along the route, when the lanes are its halves).
SEAM = 2
#: Tries of the lanes side by side (each orders the tasks that met in the one before), before the
#: rest runs one task after the other.
LANE_TRIES = 4


@dataclass
class LaneMemory:
    """What :func:`run_in_lanes` keeps from one call to the next: which tasks met in the last
    call of the same lane sizes (a guess that decides how long a task waits, never the result),
    whether the last call's lanes ran to the end side by side, and scratch of ``n_items``."""

    n_items: int
    met_before: dict = field(default_factory=dict)
    went: bool = True
    owner: np.ndarray | None = None
    mark: np.ndarray | None = None

    def __post_init__(self):
        self.owner = np.full(self.n_items, -1, np.int32)
        self.mark = np.zeros(self.n_items, bool)


@dataclass
class LaneStats:
    """What :func:`run_in_lanes` did: tries of the lanes side by side that met (rolled back), and
    whether the rest was run one task after the other."""

    met: int = 0
    serial: bool = False


@dataclass
class _Run:
    """One call's lanes and what the threads share."""

    sizes: list
    order: list = field(default_factory=list)  # (lane, index) in the order that defines the result
    place: dict = field(default_factory=dict)  # (lane, index) → its place in ``order``
    lane_of: np.ndarray | None = None
    index_of: np.ndarray | None = None
    kept: list = field(default_factory=list)  # per lane, the results written (a prefix of the lane)
    after: np.ndarray | None = None  # after[q, lane]: the last task of that lane that q follows
    cond: threading.Condition = field(default_factory=threading.Condition)
    stop: bool = False
    running: set = field(default_factory=set)  # lanes a thread is working on
    met: set = field(default_factory=set)  # places of two tasks that met, not ordered
    undo: list = field(default_factory=list)  # (lane, footprint, token of the write), in the order written

    def __post_init__(self):
        # from the last lane to the first: b_0, a_0, b_1, a_1, … for two lanes a and b
        self.order = [(lane, k) for k in range(max(self.sizes, default=0))
                      for lane in reversed(range(len(self.sizes))) if k < self.sizes[lane]]
        self.place = {x: q for q, x in enumerate(self.order)}
        self.lane_of = np.array([lane for lane, _ in self.order], np.int64)
        self.index_of = np.array([i for _, i in self.order], np.int64)
        self.kept = [[] for _ in self.sizes]

    def written(self, q: int) -> bool:
        lane, i = self.order[q]
        return i < len(self.kept[lane])


def run_in_lanes(sizes: Sequence[int], attempt: Callable, footprint: Callable, *, write: Callable, restore: Callable,
                 memory: LaneMemory, threads: int = 1, pool: ThreadPoolExecutor | None = None):
    """Run tasks in lanes so that the result is that of the order b_0, a_0, b_1, a_1, … (for two
    lanes a and b; from the last lane to the first in general), each task's inputs from its own
    lane's tasks before it, on one thread or two.

    One thread runs the order. Two threads take the lanes' next tasks as they become free, each
    task after those it must follow (the seam, :data:`SEAM`, and the tasks that met in the last
    call). Every footprint is claimed before its task writes; a claim that meets the footprint of
    a task it does not follow stops both threads (whichever of the two claims second sees the
    first's claim, whatever the timing), the writes after the longest prefix of the order that
    every lane had written are rolled back in reverse (each write's token restores what it
    overwrote), the two tasks and their neighbours are ordered and the threads go on; after
    :data:`LANE_TRIES` such tries (or one, after a call whose tries all met), the rest runs one
    task after the other. Every pair of tasks whose footprints meet is thus run in the order's
    sequence, and every other pair commutes: the same result for one thread or two, provided a
    task reads and writes only its footprint.

    Parameters
    ----------
    sizes : sequence of int
        Tasks per lane.
    attempt : callable
        ``attempt(lane, index, previous, slot)`` → the task's result, writing nothing;
        ``previous`` is the list of the lane's results written before it.
    footprint : callable
        ``footprint(result)`` → the items it read and writes.
    write : callable
        ``write(result)`` writes it and returns a token of what it overwrote.
    restore : callable
        ``restore(token)`` puts back what a write overwrote.
    memory : LaneMemory
        Kept by the caller from one call to the next.
    threads : {1, 2}
    pool : concurrent.futures.ThreadPoolExecutor, optional

    Returns
    -------
    (list of list, LaneStats)
        Per lane, its results in order; what the lanes did.
    """
    run = _Run(sizes=list(sizes))
    stats = LaneStats()
    lanes = len(run.sizes)
    if threads > 1 and len(run.order) > 1:
        seam = set()
        for lane in range(lanes - 1):
            n = run.sizes[lane]
            seam |= {(run.place[lane, n - 1 - d], run.place[lane + 1, j]) for d in range(min(SEAM + 1, n))
                     for j in range(min(SEAM + 1 - d, run.sizes[lane + 1]))}
        key = tuple(run.sizes)
        pairs = seam | memory.met_before.get(key, set())
        own = pool is None
        pool = pool or ThreadPoolExecutor(max_workers=1, thread_name_prefix="evroute-lanes")
        try:
            for _ in range(LANE_TRIES if memory.went else 1):
                memory.went = _try_lanes(run, pairs, attempt, footprint, write, restore, memory, pool)
                if memory.went:
                    break
                stats.met += 1
                pairs = pairs | {(run.place[la, i + di], run.place[lb, j + dj]) for la, i, lb, j in
                                 ((*run.order[p], *run.order[q]) for p, q in run.met)
                                 for di in (-1, 0, 1) for dj in (-1, 0, 1)
                                 if (la, i + di) in run.place and (lb, j + dj) in run.place}
        finally:
            if own:
                pool.shutdown(wait=True)
        # kept for the next call: the pairs beyond the seams whose footprints met
        memory.met_before = {key: {(p, q) for p, q in pairs - seam if run.written(p) and run.written(q)
                                   and _meet(memory.mark, footprint(_result(run, p)), footprint(_result(run, q)))}}
    done = sum(map(len, run.kept))
    stats.serial = done < len(run.order)
    for q in range(done, len(run.order)):  # (the rest) one after the other, in the order
        lane, i = run.order[q]
        result = attempt(lane, i, run.kept[lane], 0)
        write(result)
        run.kept[lane].append(result)
    return run.kept, stats


def _result(run: _Run, q: int):
    lane, i = run.order[q]
    return run.kept[lane][i]


def _meet(mark: np.ndarray, a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two footprints share an item (``mark``: all False, left so)."""
    mark[a] = True
    hit = bool(mark[b].any())
    mark[a] = False
    return hit


def _try_lanes(run: _Run, pairs: set, attempt, footprint, write, restore, memory: LaneMemory, pool) -> bool:
    """One try of the lanes on two threads, from the tasks written so far; False when two tasks
    met that were not ordered (in ``run.met``), after the rollback."""
    n = len(run.order)
    # which tasks each task follows: the later of a pair (in the order) follows the earlier, a
    # task follows its lane's earlier tasks, and what they follow (one pass closes it)
    direct = [[] for _ in range(n)]
    for p, q in pairs:
        direct[max(p, q)].append(min(p, q))
    after = np.full((n, len(run.sizes)), -1, np.int64)
    for q, (lane, i) in enumerate(run.order):
        if i > 0:
            direct[q].append(run.place[lane, i - 1])
        for p in direct[q]:
            np.maximum(after[q], after[p], out=after[q])
            after[q, run.lane_of[p]] = max(after[q, run.lane_of[p]], run.index_of[p])
    run.after, run.stop, run.met, run.undo, run.running = after, False, set(), [], set()
    future = pool.submit(_lane_worker, run, 1, attempt, footprint, write, memory)
    error = None
    try:
        _lane_worker(run, 0, attempt, footprint, write, memory)
    except BaseException as e:  # (the other thread stops; roll back, then re-raise)
        error = e
    try:
        future.result()
    except BaseException as e:
        error = error or e
    for _, fp, _ in run.undo:
        memory.owner[fp] = -1
    if error is None and not run.met:
        return True
    # keep the longest prefix of the order that all lanes wrote: a task after it that met one in
    # it followed that task, so the rollback, in the reverse order of the writes, restores exactly
    # the prefix's state
    keep = [0] * len(run.sizes)
    if error is None:
        for lane, i in run.order:
            if i >= len(run.kept[lane]):
                break
            keep[lane] += 1
    for lane, _, token in reversed(run.undo):
        if len(run.kept[lane]) > keep[lane]:
            restore(token)
            run.kept[lane].pop()
    if error is not None:
        raise error
    return False


def _next(run: _Run) -> int | None:
    """The place of the task a free thread takes (under the lock): the next task of a lane no
    thread works on, once the tasks it follows are written; None when there is none yet, −1 when
    none is left."""
    if all(len(k) == size for k, size in zip(run.kept, run.sizes, strict=True)):
        return -1
    for lane, size in enumerate(run.sizes):
        i = len(run.kept[lane])
        if lane not in run.running and i < size:
            q = run.place[lane, i]
            if all(len(kept) > last for kept, last in zip(run.kept, run.after[q], strict=True)):
                return q
    return None


def _lane_worker(run: _Run, slot: int, attempt, footprint, write, memory: LaneMemory) -> None:
    """A thread's loop: the next free task, until none is left or two tasks met."""
    cond = run.cond
    try:
        while True:
            with cond:
                cond.wait_for(lambda: run.stop or _next(run) is not None)
                q = -1 if run.stop else _next(run)
                if q < 0:
                    return
                run.running.add(run.order[q][0])
            if not _lane_step(run, q, slot, attempt, footprint, write, memory):
                return
    except BaseException:
        with cond:
            run.stop = True
            cond.notify_all()
        raise


def _lane_step(run: _Run, q: int, slot: int, attempt, footprint, write, memory: LaneMemory) -> bool:
    """Attempt the task in place q and write it once its footprint is claimed: a footprint that
    meets one claimed by a task it does not follow stops the threads (of two such tasks,
    whichever claims second sees the first's claim: an item's latest claim is of the task that
    follows all its earlier ones)."""
    lane, i = run.order[q]
    result = attempt(lane, i, run.kept[lane], slot)
    fp = np.asarray(footprint(result), dtype=np.int64)
    with run.cond:
        run.running.discard(lane)
        if run.stop:
            return False
        other = memory.owner[fp]
        other = np.unique(other[other >= 0])
        met = other[run.index_of[other] > run.after[q, run.lane_of[other]]]
        if met.size:
            run.met.update((int(p), q) for p in met)
            run.stop = True
            run.cond.notify_all()
            return False
        memory.owner[fp] = q
        run.undo.append((lane, fp, write(result)))
        run.kept[lane].append(result)
        run.cond.notify_all()
    return True
