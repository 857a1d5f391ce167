"""The route oracle: shortest paths on the line graph L(G).

Edges of the road network are the nodes of L(G); a route from start edge s to end edge t
is a walk s → … → t along legal turns, and its cost is the sum of the per-edge weights
of every edge on it, s and t included. Entering edge e2 from e1 costs w[e2]; the start
edge's own weight is added once.

- :meth:`Oracle.shortest_path`: Dijkstra (scipy.sparse.csgraph) for non-negative weights;
  it runs every bandit round, so the CSR structure is built once and only its data array
  is refreshed per query.
- :meth:`Oracle.bellman_ford_path`: exact for weights that may be negative; raises
  :class:`~evroute.errors.NegativeCycleError` when a negative cycle is reachable.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse import csgraph

from ..errors import EvrouteError, NegativeCycleError
from ..validate import positive_int


@dataclass(frozen=True)
class Route:
    """A path on the line graph: edge ids from start to end and its total weight."""

    edges: list[int]
    cost: float


class Oracle:
    """Shortest paths between edges on a fixed line graph.

    Parameters
    ----------
    n_edges : int
        Number of road edges (nodes of L(G)).
    conn_src, conn_dst : numpy.ndarray
        The legal turns (connections) of L(G).
    """

    def __init__(self, n_edges: int, conn_src: np.ndarray, conn_dst: np.ndarray):
        self.n_edges = int(n_edges)
        src = np.asarray(conn_src, dtype=np.int64)
        dst = np.asarray(conn_dst, dtype=np.int64)
        #: the legal turns, as given (turn weights are in this order)
        self.conn_src, self.conn_dst = src, dst
        order = np.lexsort((dst, src))
        self._order = order  # CSR position → the connection's index in (conn_src, conn_dst)
        self._indices = dst[order].astype(np.int32)
        indptr = np.searchsorted(src[order], np.arange(self.n_edges + 1)).astype(np.int32)
        # Explicit entries are kept even when their value is 0: csgraph treats explicit
        # zeros in a sparse matrix as zero-weight edges.
        self._csr = sp.csr_matrix(
            (np.ones(len(order)), self._indices, indptr), shape=(self.n_edges, self.n_edges))

    @classmethod
    def from_network(cls, net) -> Oracle:
        """Build the oracle of a :class:`~evroute.roads.network.Network`."""
        return cls(net.n_edges, net.conn_src, net.conn_dst)

    def _check(self, weights, start: int, end: int, available: np.ndarray | None = None) -> np.ndarray:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (self.n_edges,):
            raise EvrouteError(f"expected {self.n_edges} edge weights, got shape {w.shape}")
        finite = np.isfinite(w) if available is None else (np.isfinite(w) | ~available)
        if not np.all(finite):
            raise EvrouteError("edge weights must be finite (on the available edges)")
        for label, e in (("start", start), ("end", end)):
            if not 0 <= int(e) < self.n_edges:
                raise EvrouteError(f"{label} edge {e} is not an edge of the network (0..{self.n_edges - 1})")
        return w

    def _graph(self, w: np.ndarray, turns: np.ndarray | None = None) -> sp.csr_matrix:
        self._csr.data = w[self._indices] if turns is None else w[self._indices] + turns[self._order]
        return self._csr

    def turn_index(self, path) -> np.ndarray:
        """The connection (index into ``conn_src``/``conn_dst``) of each turn a path takes: one
        per consecutive pair of its edges.

        Raises
        ------
        EvrouteError
            When two consecutive edges are not joined by a legal turn.
        """
        p = np.asarray(path, dtype=np.int64)
        if p.size < 2:
            return np.zeros(0, dtype=np.int64)
        a, b = p[:-1], p[1:]
        lo, hi = self._csr.indptr[a], self._csr.indptr[a + 1]
        pos = np.array([lo_ + np.searchsorted(self._indices[lo_:hi_], b_) for lo_, hi_, b_ in zip(lo, hi, b, strict=True)],
                       dtype=np.int64)
        ok = (pos < hi) & (self._indices[np.minimum(pos, len(self._indices) - 1)] == b)
        if not ok.all():
            k = int(np.flatnonzero(~ok)[0])
            raise EvrouteError(f"no legal turn from edge {a[k]} into edge {b[k]}")
        return self._order[pos]

    def _check_turns(self, turns) -> np.ndarray | None:
        if turns is None:
            return None
        t = np.asarray(turns, dtype=np.float64)
        if t.shape != (len(self._order),) or not np.all(np.isfinite(t)):
            raise EvrouteError(f"expected {len(self._order)} finite turn weights, one per connection")
        return t

    @staticmethod
    def _walk_back(pred: np.ndarray, start: int, end: int) -> list[int]:
        path = [end]
        while path[-1] != start:
            p = int(pred[path[-1]])
            if p < 0:
                raise EvrouteError(f"end edge {end} cannot be reached from start edge {start}")
            path.append(p)
        return path[::-1]

    def _available_mask(self, available) -> np.ndarray | None:
        if available is None:
            return None
        mask = np.asarray(available)
        if mask.shape != (self.n_edges,) or mask.dtype != bool:
            raise EvrouteError(f"available edges must be a boolean mask of {self.n_edges} edges, "
                               f"got {mask.dtype} of shape {mask.shape}")
        return mask

    def shortest_path(self, weights, start: int, end: int, available=None, turn_weights=None) -> Route:
        """Dijkstra from ``start`` to ``end`` for non-negative ``weights``.

        Parameters
        ----------
        available : numpy.ndarray of bool, optional
            Edges that may be driven (volatile arms, closures): the others are left out of
            the search, and their weights may be anything, ``inf`` included.
        turn_weights : numpy.ndarray, optional
            A non-negative weight per legal turn (in the order of ``conn_src``), added where the
            route takes the turn: the cost of a junction (a truth of edges plus turns).

        Returns
        -------
        Route
            The edges of the route and its cost (edges and turns).

        Raises
        ------
        EvrouteError
            Negative weights, an unavailable start or end edge, or no (available) route
            from ``start`` to ``end``.
        """
        mask = self._available_mask(available)
        w = self._check(weights, start, end, mask)
        if mask is not None:
            for label, e in (("start", start), ("end", end)):
                if not mask[int(e)]:
                    raise EvrouteError(f"the {label} edge {e} is not available")
            w = np.where(mask, w, 0.0)
        if np.any(w < 0):
            raise EvrouteError("Dijkstra needs non-negative edge weights; use bellman_ford_path")
        turns = self._check_turns(turn_weights)
        if turns is not None and np.any(turns < 0):
            raise EvrouteError("Dijkstra needs non-negative turn weights")
        if mask is None:
            graph = self._graph(w, turns)
        else:
            # keep only the turns into available edges (rows of unavailable edges are then
            # never reached, since nothing enters them)
            keep = mask[self._indices]
            rows = np.repeat(np.arange(self.n_edges), np.diff(self._csr.indptr))
            indptr = np.concatenate([[0], np.cumsum(np.bincount(rows[keep], minlength=self.n_edges))])
            idx = self._indices[keep]
            data = w[idx] if turns is None else w[idx] + turns[self._order[keep]]
            graph = sp.csr_matrix((data, idx, indptr.astype(np.int32)), shape=(self.n_edges, self.n_edges))
        dist, pred = csgraph.dijkstra(graph, directed=True, indices=int(start), return_predecessors=True)
        if not np.isfinite(dist[end]):
            if mask is not None and self.reachable(int(start))[end]:
                raise EvrouteError(f"no route from edge {start} to edge {end} uses only available edges "
                                   f"({int((~mask).sum())} unavailable)")
            raise EvrouteError(f"end edge {end} cannot be reached from start edge {start}")
        path = self._walk_back(pred, int(start), int(end))
        cost = float(w[path].sum()) + (float(turns[self.turn_index(path)].sum()) if turns is not None else 0.0)
        return Route(path, cost)

    def k_shortest_paths(self, weights, start: int, end: int, k: int, available=None,
                         turn_weights=None) -> list[Route]:
        """The ``k`` shortest loopless routes for non-negative ``weights``, cheapest first (Yen
        1971): each next route is the cheapest deviation from a prefix of an earlier one, its
        spur part found by Dijkstra (SciPy's csgraph, as :meth:`shortest_path`) with the
        earlier routes' next turns and the prefix's edges removed. Fewer when fewer exist.
        Ties are broken by the edge sequence, so the result is deterministic. (networkx's
        ``shortest_simple_paths`` gives the same routes, tested, but runs its Dijkstra in
        Python: 5 s a round on Monaco against milliseconds here.) ``turn_weights``: as
        :meth:`shortest_path`'s, added where a route turns; a route's cost includes them."""
        import heapq


        k = positive_int("k", k)
        first = self.shortest_path(weights, start, end, available=available, turn_weights=turn_weights)  # checks
        turns = self._check_turns(turn_weights)
        mask = self._available_mask(available)
        w = np.where(mask, np.asarray(weights, dtype=np.float64), np.inf) if mask is not None \
            else np.asarray(weights, dtype=np.float64)
        rows = np.repeat(np.arange(self.n_edges), np.diff(self._csr.indptr))
        base = w[self._indices] if turns is None else w[self._indices] + turns[self._order]

        def cost(path) -> float:
            return float(w[list(path)].sum()) + (0.0 if turns is None else float(turns[self.turn_index(path)].sum()))

        found = [list(first.edges)]
        seen = {tuple(first.edges)}
        heap: list[tuple[float, tuple[int, ...]]] = []
        while len(found) < k:
            prev = found[-1]
            for i in range(len(prev) - 1):
                spur, root = prev[i], prev[:i + 1]
                data = base.copy()
                for p in found:  # the earlier routes' next turns from this prefix
                    if len(p) > i + 1 and p[:i + 1] == root:
                        data[(rows == p[i]) & (self._indices == p[i + 1])] = np.inf
                if i:  # the prefix's edges (before the spur) may not be entered again
                    data[np.isin(self._indices, root[:-1])] = np.inf
                graph = sp.csr_matrix((data, self._indices, self._csr.indptr), shape=self._csr.shape)
                dist, pred = csgraph.dijkstra(graph, directed=True, indices=int(spur), return_predecessors=True)
                if not np.isfinite(dist[end]):
                    continue
                tail = self._walk_back(pred, int(spur), int(end))
                path = tuple(root[:-1] + tail)
                if path not in seen:
                    seen.add(path)
                    heapq.heappush(heap, (cost(path), path))
            if not heap:
                break
            found.append(list(heapq.heappop(heap)[1]))
        return [Route(p, cost(p)) for p in found]

    def bellman_ford_path(self, weights, start: int, end: int) -> Route:
        """Exact shortest walk for weights of any sign (Bellman–Ford).

        Raises
        ------
        NegativeCycleError
            A cycle of negative total weight is reachable, so no shortest walk exists.
        EvrouteError
            ``end`` unreachable from ``start``.
        """
        w = self._check(weights, start, end)
        try:
            dist, pred = csgraph.bellman_ford(self._graph(w), directed=True, indices=int(start),
                                              return_predecessors=True)
        except csgraph.NegativeCycleError:
            raise NegativeCycleError(
                f"a cycle of negative total energy is reachable from edge {start}: no shortest route exists") from None
        if not np.isfinite(dist[end]):
            raise EvrouteError(f"end edge {end} cannot be reached from start edge {start}")
        path = self._walk_back(pred, int(start), int(end))
        return Route(path, float(w[path].sum()))

    def reachable(self, start: int) -> np.ndarray:
        """Boolean mask of the edges reachable from ``start`` (``start`` included)."""
        order = csgraph.breadth_first_order(self._graph(np.ones(self.n_edges)), int(start),
                                            directed=True, return_predecessors=False)
        mask = np.zeros(self.n_edges, dtype=bool)
        mask[order] = True
        return mask
