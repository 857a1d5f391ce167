"""Least-energy walks on the line graph L(G) under signed weights: Bellman–Ford, the cycles
of negative energy, and Johnson's potential.

A walk's weight is its edges' (the vertices of L(G)) plus its turns' (the arcs). With negative
weights (regeneration) Dijkstra no longer applies directly: :func:`shortest_walk` is
Bellman–Ford (Shimbel 1954; Ford 1956; Bellman 1958) from one edge, :func:`negative_cycle` finds
a cycle that creates energy anywhere (a virtual root joined to every edge),
:func:`feasible_potential` is Johnson's reweighting (Johnson 1977) that makes Dijkstra exact
again where no such cycle exists, and :func:`least_energy_walk` is the exact least-energy route
of a truth that creates no energy: Dijkstra on its reduced costs. The exact optimum over vertex-simple routes (:mod:`evroute.roads.optimum`) starts
here: where the shortest walk is simple, it is the answer.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order

from ..errors import EvrouteError

__all__ = ["as_int_array", "reachable", "shortest_walk", "walk_from_pred", "negative_cycle", "feasible_potential",
           "least_energy_walk"]


def as_int_array(a, name: str) -> np.ndarray:
    """``a`` as a one-dimensional int64 array; one line naming ``name`` where it is not one."""
    arr = np.asarray(a)
    if arr.ndim != 1:
        raise EvrouteError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise EvrouteError(f"{name} must hold integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def reachable(n: int, src: np.ndarray, dst: np.ndarray, *, root: int) -> np.ndarray:
    """Boolean mask of the vertices reachable from ``root`` in the digraph (src -> dst)."""
    g = sp.csr_matrix((np.ones(src.size, dtype=np.int8), (src, dst)), shape=(n, n))
    order = breadth_first_order(g, root, directed=True, return_predecessors=False)
    mask = np.zeros(n, dtype=bool)
    mask[order] = True
    return mask


def _doubled(pred: np.ndarray) -> np.ndarray:
    """Where each node of the predecessor graph (``-1`` = none) is after following its
    predecessors at least n times (pointer doubling): the sentinel n where the chain ends, a node
    on a cycle where it does not."""
    n = pred.size
    p = np.append(np.where(pred < 0, n, pred), n)  # sentinel n points to itself
    for _ in range(int(n).bit_length() + 1):
        p = p[p]
    return p[:n]


def _has_pred_cycle(pred: np.ndarray) -> bool:
    """True if the predecessor graph (``-1`` = none) has a cycle."""
    return bool(np.any(_doubled(pred) != pred.size))


class _Relaxation:
    """What synchronous Bellman–Ford rounds on a fixed digraph share: the arcs grouped by their
    source (to gather the arcs out of the vertices whose distance changed without a pass over all
    arcs) and scratch space to pick each target's best candidate in time linear in the candidates
    (not a sort). The result is the same as relaxing every arc out of a changed vertex in arc
    order and keeping each target's first best."""

    def __init__(self, n: int, src: np.ndarray):
        self.order = np.argsort(src, kind="stable")
        self.indptr = np.searchsorted(src[self.order], np.arange(n + 1))
        self.best = np.full(n, np.inf)
        self.first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)

    def arcs_out(self, changed: np.ndarray) -> np.ndarray:
        """The ids of the arcs out of the vertices ``changed`` (distinct)."""
        starts = self.indptr[changed]
        count = self.indptr[changed + 1] - starts
        total = int(count.sum())
        offset = np.repeat(starts - (np.cumsum(count) - count), count)
        return self.order[offset + np.arange(total)]

    def best_per_target(self, cd: np.ndarray, cand: np.ndarray, key: np.ndarray) -> np.ndarray:
        """Of relaxation candidates (target ``cd``, distance ``cand``, tie key ``key``, distinct),
        the index of each target's best: the lowest distance; ties, the lowest key."""
        best, first = self.best, self.first
        np.minimum.at(best, cd, cand)
        hit = np.flatnonzero(cand == best[cd])
        t, k = cd[hit], key[hit]
        np.minimum.at(first, t, k)
        idx = hit[first[t] == k]
        best[cd] = np.inf  # (the scratch back as it came: linear in the candidates)
        first[t] = np.iinfo(np.int64).max
        return idx


def shortest_walk(n, src, dst, *, w, start, arc=None):
    """Vectorised Bellman–Ford on L(G) with vertex weights and, where given, arc weights (a
    walk's cost includes ``start``).

    Synchronous rounds that relax only the connections out of edges whose distance changed
    in the previous round. Returns ``(dist, pred, negative_cycle)``. A negative cycle
    reachable from ``start`` shows as an improvement in round ``n_reachable`` or, earlier,
    as a cycle in the predecessor graph (which in Bellman–Ford always has negative weight).
    """
    reach = reachable(n, src, dst, root=start)
    keep = reach[src]
    src, dst = src[keep], dst[keep]
    arc = np.zeros(src.size) if arc is None else np.asarray(arc, dtype=np.float64)[keep]
    n_reach = int(reach.sum())
    dist = np.full(n, np.inf)
    pred = np.full(n, -1, dtype=np.int64)
    dist[start] = w[start]
    relax = _Relaxation(n, src)
    changed = np.array([start], dtype=np.int64)
    for it in range(1, n_reach + 1):
        ci = relax.arcs_out(changed)
        cs, cd = src[ci], dst[ci]
        cand = dist[cs] + w[cd] + arc[ci]
        better = cand < dist[cd]
        if not better.any():
            return dist, pred, False
        cs, cd, cand, ci = cs[better], cd[better], cand[better], ci[better]
        idx = relax.best_per_target(cd, cand, ci)
        changed = cd[idx]
        dist[changed] = cand[idx]
        pred[changed] = cs[idx]
        if it % 32 == 0 and _has_pred_cycle(pred):
            return dist, pred, True
    return dist, pred, True


def negative_cycle(n_edges, conn_src, conn_dst, *, weights, turn_weights=None) -> list[int] | None:
    """A cycle of negative total energy anywhere in the network, or None where there is none.

    A truth with such a cycle creates energy: a car driving it ends where it began with more
    charge. Bellman–Ford (Bellman 1958) on the line graph L(G) from every edge at once (a virtual
    root joined to all), vertex weights ``weights`` and, where given, ``turn_weights`` per legal
    turn; a cycle is read off the predecessor graph and its energy checked.

    Parameters
    ----------
    n_edges : int
        Number of edges E.
    conn_src, conn_dst : array of int
        The legal turns (L(G)).
    weights : array of float (E,)
        Per-edge energy.
    turn_weights : array of float, optional
        Per-turn energy, one per connection.

    Returns
    -------
    list of int or None
        The edges of a negative cycle in driving order, from its lowest edge id (its energy:
        their weights plus the turns between them, the last back into the first), or None.

    Examples
    --------
    >>> negative_cycle(2, [0, 1], [1, 0], weights=[1.0, -2.0])
    [0, 1]
    >>> negative_cycle(2, [0, 1], [1, 0], weights=[1.0, -0.5]) is None
    True
    """
    return _bellman_ford_all(n_edges, conn_src, conn_dst, weights, turn_weights)[1]


def feasible_potential(n_edges, conn_src, conn_dst, *, weights, turn_weights=None) -> np.ndarray | None:
    """A potential h per edge with ``turn_weights[i] + weights[conn_dst[i]] + h[conn_src[i]] −
    h[conn_dst[i]] ≥ 0`` on every legal turn i, or None where a negative cycle makes one
    impossible.

    Johnson's reweighting (Johnson 1977, "Efficient algorithms for shortest paths in sparse
    networks", J. ACM 24:1–13) on the line graph: h is the Bellman–Ford distance from a virtual
    root joined to every edge at cost 0. Along any route the reduced weights sum to its weight
    plus h(start) − h(end) less the start edge's weight, the same for every route between two
    edges, so Dijkstra on them finds the route that is shortest under the signed weights.

    Parameters
    ----------
    n_edges : int
        Number of edges E.
    conn_src, conn_dst : array of int
        The legal turns (L(G)).
    weights : array of float (E,)
        Per-edge weights (may be negative).
    turn_weights : array of float, optional
        Per-turn weights (may be negative).

    Returns
    -------
    numpy.ndarray (E,) or None

    Examples
    --------
    >>> h = feasible_potential(3, [0, 1], [1, 2], weights=[1.0, -2.0, 1.0])
    >>> bool(np.all(np.array([0.0, 0.0]) + np.array([-2.0, 1.0]) + h[[0, 1]] - h[[1, 2]] >= 0))
    True
    """
    dist, cycle, _ = _bellman_ford_all(n_edges, conn_src, conn_dst, weights, turn_weights, root_cost_zero=True)
    return None if cycle is not None else dist


def least_energy_walk(oracle, weights, *, start: int, end: int, potential=None, turn_weights=None, available=None,
                      johnson=None):
    """The least-energy walk from ``start`` to ``end`` under signed energies that create no energy:
    Dijkstra on reduced costs, certified.

    Along any walk between two edges a potential's terms telescope, so the walk's energy is its
    reduced costs' sum plus a constant of the trip. With the physical ``potential`` (the edges'
    η⁻ m g Δh, :func:`evroute.physics.energy.energy_floor_wh`) a truth that never falls below its
    edges' floors and whose turns only dissipate has every reduced cost ``weights − potential`` and
    ``turn_weights`` non-negative: Dijkstra on them is then the exact least-energy walk (Dijkstra
    1959). Where some reduced cost is negative (a truth measured, not built) Johnson's potential
    (:func:`feasible_potential`, Bellman–Ford) takes over; only a cycle of negative energy makes
    the walk undefined, and that is an error.

    Parameters
    ----------
    oracle : evroute.roads.oracle.Oracle
    weights : array (E,)
        Each edge's energy (Wh).
    start, end : int
        The trip's first and last edge.
    potential : array (E,), optional
        A potential per edge whose sum along a walk depends only on its ends (default 0).
    turn_weights : array, optional
        Each legal turn's energy beyond the potential (a junction's dissipation), one per
        connection; default none.
    available : array of bool (E,), optional
        The open edges.
    johnson : array (E,), optional
        A Johnson potential already found for these weights (:func:`feasible_potential` of the
        reduced costs), to skip Bellman–Ford.

    Returns
    -------
    (list of int, dict)
        The walk's edges and its certificate: ``potential`` (``physical``: every reduced cost
        ≥ 0; ``johnson``: Bellman–Ford's), ``min_reduced_cost_wh`` (the least reduced cost
        before Johnson) and ``johnson`` (the potential used, or None).

    Raises
    ------
    EvrouteError
        Where a cycle of negative energy exists (no least-energy walk).
    """
    w = np.asarray(weights, dtype=np.float64)
    if potential is not None:
        w = w - np.asarray(potential, dtype=np.float64)
    arc = None if turn_weights is None else np.asarray(turn_weights, dtype=np.float64)
    least = min(float(w.min()), float(arc.min()) if arc is not None and arc.size else np.inf)
    if least >= 0.0:
        path = oracle.shortest_path(w, start, end, available=available, turn_weights=arc).edges
        return list(path), {"potential": "physical", "min_reduced_cost_wh": least, "johnson": None}
    h = johnson
    if h is None:
        h = feasible_potential(oracle.n_edges, oracle.conn_src, oracle.conn_dst, weights=w, turn_weights=arc)
    if h is None:
        cycle = negative_cycle(oracle.n_edges, oracle.conn_src, oracle.conn_dst, weights=w, turn_weights=arc)
        raise EvrouteError(f"the energies make a cycle of {len(cycle or [])} edges that creates energy: "
                           "no least-energy route exists")
    src, dst = oracle.conn_src, oracle.conn_dst
    reduced = (0.0 if arc is None else arc) + w[dst] + h[src] - h[dst]
    reduced = np.maximum(reduced, 0.0)  # (Bellman–Ford's tolerance: −1e-12 relative at most)
    path = oracle.shortest_path(np.zeros(oracle.n_edges), start, end, available=available, turn_weights=reduced).edges
    return list(path), {"potential": "johnson", "min_reduced_cost_wh": least, "johnson": h}


def _bellman_ford_all(n_edges, conn_src, conn_dst, weights, turn_weights=None, root_cost_zero: bool = False):
    """Bellman–Ford on L(G) from a virtual root joined to every edge: ``(dist, cycle)``, cycle a
    negative cycle (list of edges) or None. Synchronous rounds relax only the turns out of edges
    whose distance changed."""
    n = int(n_edges)
    src, dst = as_int_array(conn_src, "conn_src"), as_int_array(conn_dst, "conn_dst")
    w = np.asarray(weights, dtype=np.float64)
    arc = np.zeros(src.size) if turn_weights is None else np.asarray(turn_weights, dtype=np.float64)
    if w.shape != (n,) or arc.shape != src.shape or src.shape != dst.shape:
        raise EvrouteError(f"weights must have length {n} and turn_weights one entry per connection")
    if not (np.all(np.isfinite(w)) and np.all(np.isfinite(arc))):
        raise EvrouteError("weights must be finite")
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
        raise EvrouteError(f"connection edge ids must lie in 0..{n - 1}")
    dist = np.zeros(n) if root_cost_zero else np.minimum(w, 0.0)
    pred = np.full(n, -1, dtype=np.int64)
    pred_arc = np.full(n, -1, dtype=np.int64)  # the turn each edge's distance came through
    relax = _Relaxation(n, src)
    ci = np.arange(src.size)  # every vertex changed at first: every arc
    for it in range(1, n + 2):
        cs, cd = src[ci], dst[ci]
        cand = dist[cs] + arc[ci] + w[cd]
        now = dist[cd]
        better = cand < now - 1e-12 * (1.0 + np.abs(now))
        if not better.any():
            return dist, None, None
        cs, cd, cand, ci = cs[better], cd[better], cand[better], ci[better]
        idx = relax.best_per_target(cd, cand, ci)
        changed = cd[idx]
        dist[changed] = cand[idx]
        pred[changed] = cs[idx]
        pred_arc[changed] = ci[idx]
        ci = relax.arcs_out(changed)
        if it % 16 == 0 or it > n:
            cycle = _pred_cycle(pred)
            if cycle is not None:
                turns = pred_arc[np.roll(np.asarray(cycle), -1)]  # the turn out of each edge of the cycle
                if float(w[cycle].sum()) + float(arc[turns].sum()) < 0:
                    return dist, cycle, turns
    cycle = _pred_cycle(pred)  # improving after n rounds: a negative cycle, whatever the predecessors say
    return dist, (cycle if cycle is not None else []), (pred_arc[np.roll(np.asarray(cycle), -1)] if cycle else None)


def _pred_cycle(pred: np.ndarray) -> list[int] | None:
    """A cycle of the predecessor graph, in forward (driving) order, or None."""
    p = _doubled(pred)  # (one doubling, not one to test and another to find)
    on = np.flatnonzero(p != pred.size)
    if on.size == 0:
        return None
    v = int(p[on[0]])  # after doubling, a node on a cycle
    cycle = [v]
    u = int(pred[v])
    while u != v:
        cycle.append(u)
        u = int(pred[u])
    cycle.reverse()  # pred points backwards
    i = cycle.index(min(cycle))
    return cycle[i:] + cycle[:i]


def walk_from_pred(pred, start, end) -> list[int]:
    """The walk from ``start`` to ``end`` read off a predecessor array (``-1``: none)."""
    path = [int(end)]
    while path[-1] != start:
        path.append(int(pred[path[-1]]))
        if path[-1] < 0 or len(path) > pred.size:  # pragma: no cover - defensive
            raise EvrouteError("internal error: broken predecessor chain")
    return path[::-1]
