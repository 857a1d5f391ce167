"""The exact optimum: the best vertex-simple route under per-edge energies that may be negative.

Two optima: the ground-truth energy f is a GP sample, which on real networks
almost always has cycles of negative total energy, so "the shortest walk" does not exist and
the best *simple* path (the paper's Eq. 1) is NP-hard in general. This module computes it:

1. **Bellman–Ford** (Shimbel 1954; Ford 1956; Bellman 1958; :func:`evroute.roads.walks.shortest_walk`)
   on the line graph L(G) from the start edge. If no negative cycle is reachable, the shortest
   walk is optimal over all walks; if it is moreover vertex-simple in G it is the answer
   (``method="bellman-ford"``).
2. Otherwise a **MILP** (``method="milp"``) solved with HiGHS (Huangfu & Hall 2018) through
   :func:`scipy.optimize.milp`: a binary variable x_c per legal turn c of a reduced L(G), flow
   conservation from the start edge to the end edge, every node of G entered at most once,
   and cycle (subtour) elimination constraints added lazily in the cutting-plane manner of
   Dantzig, Fulkerson & Johnson (1954, "Solution of a large-scale traveling-salesman
   problem", Oper. Res. 2:393–410). Because a route need not visit every node, the cuts are
   the *generalised subtour elimination constraints* (GSEC) of the prize-collecting /
   generalised TSP (Balas 1989, "The prize collecting traveling salesman problem", Networks
   19:621–636; Fischetti, Salazar-González & Toth 1997, "A branch-and-cut algorithm for the
   symmetric generalized traveling salesman problem", Oper. Res. 45:378–394), in their
   directed cut form: for every node set S of G not holding the root r (the head of the start
   edge, where the route's chain of distinct nodes begins) and every k in S,

       sum_{edges e = (a, b), a not in S, b in S} y_e  >=  sum_{edges e = (a, k)} y_e ,

   "if k is visited, S is entered from outside", where y_e = sum of x over the turns into e
   (edge e used). Summed with the "entered at most once" rows this is the packing form
   ``y(E(S)) <= sum_{v in S} visit_v - visit_k``, which dominates ``y(E(S)) <= |S| - 1``.
   Cuts come from (a) integer solutions: every cycle disjoint from the s–t path gives its
   node set S with one cut per k in S; (b) LP relaxations, separated exactly by max-flow /
   min-cut from r to each visited k (as in branch-and-cut for the prize-collecting Steiner
   tree and orienteering problems; Fischetti et al. 1997, Sec. 4) plus a cheap
   connected-components heuristic. The LP rounds (a cutting-plane root) run before each MILP
   solve; on the paper's road networks the LP usually ends integral or one MILP solve
   finishes the job.

A solution of the relaxed model (any subset of the cuts) is an s–t path plus cycles that are
vertex-disjoint from it, so the s–t part of every integer solution is a feasible route: it is
kept as the incumbent, and every relaxation's bound is a valid lower bound. The loop stops
when the incumbent meets the bound (``status="optimal"``) or at the time limit
(``status="time_limit"`` with the best incumbent and its relative gap).

What "vertex-simple" means (``ends``): with ``"strict"`` (default) no node of G is visited
twice, the start edge's tail and the end edge's head included. With ``"open"`` only the
nodes *between* consecutive edges of the route must be distinct: the route may pass the
start edge's tail or the end edge's head once more, which is needed when the start (end)
edge leads into (out of) a dead-end spur, e.g. a route snapped to a cul-de-sac, or when
turn restrictions leave no way on but around a block back through the start's tail (as
for monaco:B). ``"auto"`` tries ``"strict"`` and, only if no strict route exists, ``"open"``.

Ctrl-C stops the solvers within a fraction of a second (:class:`_MilpSolver`, :func:`_run_highs`):
HiGHS looks for a user interrupt only between iterations, nodes and heuristics, at times seconds
apart, and Python's signal handlers wait for it to return.
"""

from __future__ import annotations

import contextlib
import heapq
import math
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse.csgraph import (
    connected_components,
    dijkstra,
    maximum_flow,
)

from ..errors import EvrouteError
from ..settings import MAX_TIME_LIMIT
from .walks import (  # noqa: F401  (negative_cycle, feasible_potential: the public API here too)
    as_int_array,
    feasible_potential,
    negative_cycle,
    reachable,
    shortest_walk,
    walk_from_pred,
)

__all__ = ["ENDS", "OptimumResult", "exact_optimum", "is_vertex_simple", "negative_cycle", "feasible_potential", "path_energy",
           "MAX_TIME_LIMIT"]


ENDS = ("strict", "open")
_ENDS_ARG = (*ENDS, "auto")
# "incumbent meets lower bound": absolute tolerance (unit of the weights) and relative one
_ABS_TOL = 1e-9
_REL_TOL = 1e-9
# an LP value this close to 0 or 1 counts as integral
_INT_TOL = 1e-7
# capacities of the separation max-flow are y scaled to integers (scipy needs int32)
_FLOW_SCALE = 1 << 20


@dataclass
class OptimumResult:
    """The best vertex-simple route found by :func:`exact_optimum`.

    Attributes
    ----------
    path : list of int
        Edge ids from the start edge to the end edge, both included; empty if none found.
    energy : float
        Sum of the weights over ``path`` (``nan`` when ``path`` is empty).
    method : str
        ``"bellman-ford"`` or ``"milp"``.
    status : str
        ``"optimal"``; ``"time_limit"`` (best route found, not proven optimal); or
        ``"infeasible"`` (no vertex-simple route exists although the end edge is reachable,
        or the time ran out before any route was found; ``path`` is empty).
    gap : float
        Relative optimality gap ``(energy - lower bound) / max(|energy|, 1e-9)``: 0.0 when
        optimal, ``inf`` without a route or a bound.
    seconds : float
        Wall-clock time of the call.
    stats : dict
        Diagnostics (reduced sizes, LP and MILP rounds, cuts); not a stable interface.
    ends : str
        The meaning of vertex-simple the route satisfies, ``"strict"`` or ``"open"``
        (with ``ends="auto"``: which one was needed).
    """

    path: list[int]
    energy: float
    method: str
    status: str
    gap: float
    seconds: float
    stats: dict = field(default_factory=dict, repr=False, compare=False)
    ends: str = "strict"


def path_energy(path, weights, turns: dict | None = None) -> float:
    """Sum of ``weights`` over the edges of ``path`` (0.0 for an empty path), plus the cost of
    each turn the path takes where ``turns`` (``{(edge, next edge): cost}``) has one."""
    if len(path) == 0:
        return 0.0
    total = float(np.asarray(weights, dtype=np.float64)[np.asarray(path, dtype=np.int64)].sum())
    if turns:
        total += sum(turns.get((int(a), int(b)), 0.0) for a, b in zip(path[:-1], path[1:], strict=True))
    return total


def is_vertex_simple(path, edge_u, edge_v, *, ends: str = "strict") -> bool:
    """True if the walk ``path`` visits no node of G twice (see ``ends`` in the module doc).

    ``"strict"``: the nodes tail(path[0]), head(path[0]), ..., head(path[-1]) are distinct.
    ``"open"``: the nodes head(path[0]), ..., head(path[-2]) are distinct and no edge repeats.
    """
    if ends not in ENDS:
        raise EvrouteError(f"unknown ends {ends!r}; use one of: {', '.join(ENDS)}")
    if len(path) == 0:
        return True
    p = np.asarray(path, dtype=np.int64)
    if ends == "strict":
        nodes = np.concatenate([np.asarray(edge_u)[p[:1]], np.asarray(edge_v)[p]])
    else:
        if np.unique(p).size != p.size:
            return False
        nodes = np.asarray(edge_v)[p[:-1]]
    return np.unique(nodes).size == nodes.size


# --------------------------------------------------------------------------------------
# input checks and graph helpers (the walks and negative cycles: evroute.roads.walks)
# --------------------------------------------------------------------------------------


def _check_inputs(n_edges, conn_src, conn_dst, edge_u, edge_v, weights, start, end, turn_weights=None):
    try:
        n_edges, start, end = int(n_edges), int(start), int(end)
    except (TypeError, ValueError) as exc:
        raise EvrouteError(f"n_edges, start and end must be integers ({exc})") from None
    src = as_int_array(conn_src, "conn_src")
    dst = as_int_array(conn_dst, "conn_dst")
    eu = as_int_array(edge_u, "edge_u")
    ev = as_int_array(edge_v, "edge_v")
    w = np.asarray(weights, dtype=np.float64)
    if src.size != dst.size:
        raise EvrouteError(f"conn_src and conn_dst differ in length ({src.size} vs {dst.size})")
    if eu.size != n_edges or ev.size != n_edges or w.shape != (n_edges,):
        raise EvrouteError(
            f"edge_u, edge_v and weights must have length n_edges={n_edges} "
            f"(got {eu.size}, {ev.size}, {w.shape})"
        )
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n_edges):
        raise EvrouteError(f"connection edge ids must lie in 0..{n_edges - 1}")
    if not np.all(np.isfinite(w)):
        raise EvrouteError("weights must be finite")
    arc = np.zeros(src.size) if turn_weights is None else np.asarray(turn_weights, dtype=np.float64)
    if arc.shape != (src.size,) or not np.all(np.isfinite(arc)):
        raise EvrouteError(f"turn_weights must be {src.size} finite numbers, one per connection")
    for name, e in (("start", start), ("end", end)):
        if not 0 <= e < n_edges:
            raise EvrouteError(f"{name} edge {e} is not in 0..{n_edges - 1}")
    bad = ev[src] != eu[dst]
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise EvrouteError(
            f"connection {i} ({src[i]} -> {dst[i]}) does not join the head of edge {src[i]} "
            f"to the tail of edge {dst[i]}"
        )
    return n_edges, src, dst, eu, ev, w, start, end, arc


def _widest_path(n: int, src: np.ndarray, dst: np.ndarray, cap: np.ndarray, root: int):
    """Bottleneck (max–min capacity) of the best root→v path for every v (0 if none).

    Dijkstra's algorithm with (max, min) in place of (min, +) (Pollack 1960).
    """
    order = np.argsort(src, kind="stable")
    src, dst, cap = src[order], dst[order], cap[order]
    start = np.searchsorted(src, np.arange(n + 1))
    dst_l, cap_l, start_l = dst.tolist(), cap.tolist(), start.tolist()
    width = [0.0] * n
    width[root] = math.inf
    heap = [(-math.inf, root)]
    done = [False] * n
    while heap:
        negw, u = heapq.heappop(heap)
        if done[u]:
            continue
        done[u] = True
        wu = -negw
        for i in range(start_l[u], start_l[u + 1]):
            v = dst_l[i]
            b = min(wu, cap_l[i])
            if b > width[v]:
                width[v] = b
                heapq.heappush(heap, (-b, v))
    return np.asarray(width)


# --------------------------------------------------------------------------------------
# the reduced problem and its cut model
# --------------------------------------------------------------------------------------


def _reduce(n_edges, src, dst, eu, ev, start, end, ends):
    """Edges and turns that can lie on a vertex-simple start→end route.

    Dropped: self-loops other than the start/end edge; edges other than the start edge
    entering the start edge's head; with ``ends="strict"`` also edges entering the start
    edge's tail and edges other than the end edge entering its head (and the start/end edge
    itself if it makes the route revisit a node); turns into the start edge or out of the
    end edge; then all not reachable from the start edge or not co-reachable to the end edge.
    Returns ``(alive_edge_mask, kept)`` (``kept``: the indices of the turns kept) or ``None``
    when the end edge is cut off.
    """
    idx = np.arange(n_edges)
    terminal = (idx == start) | (idx == end)
    ok = (eu != ev) | terminal
    ok &= ~((ev == ev[start]) & ~terminal)
    if ends == "strict":
        ok &= ~((ev == ev[start]) & (idx != start))
        ok &= ev != eu[start]
        ok &= ~((ev == ev[end]) & (idx != end))
        if eu[start] == ev[start]:
            return None
    if not (ok[start] and ok[end]):
        return None
    kept = np.flatnonzero(ok[src] & ok[dst] & (dst != start) & (src != end))
    fwd = reachable(n_edges, src[kept], dst[kept], root=start)
    if not fwd[end]:
        return None
    alive = fwd & reachable(n_edges, dst[kept], src[kept], root=end)
    kept = kept[alive[src[kept]] & alive[dst[kept]]]
    return alive, kept


def _highs_class():
    """HiGHS's Python class and model-status enum (the public ``highspy`` package).

    Used to re-solve the LP relaxation warm-started after adding cuts, which is 5–20×
    faster than a cold :func:`scipy.optimize.milp` call per round.
    """
    import highspy

    return highspy.Highs, highspy.HighsModelStatus


class _CutModel:
    """The reduced MILP plus its growing pool of GSEC cuts.

    Variables: one binary x_c per kept turn c (local edges ``src[c] -> dst[c]``). Derived:
    y_e = sum of x over the turns into e (edge e used), y_start = 1. Interior nodes (those
    the GSECs and the "entered at most once" rows count) are the heads of all used edges but
    the end edge; the root r is the start edge's head.
    """

    def __init__(self, src, dst, eu_idx, ev_idx, w, start, end, n_nodes, arc=None):
        self.src, self.dst = src, dst
        self.eu, self.ev, self.w = eu_idx, ev_idx, w
        self.s, self.t = start, end
        self.root = int(ev_idx[start])
        self.n_nodes = n_nodes
        n_e, n_c = w.size, src.size
        self.n_c = n_c
        self.c = w[dst].astype(np.float64) + (0.0 if arc is None else np.asarray(arc, dtype=np.float64))
        self.const = float(w[start])
        self.into_t = dst == end
        self.head_of_c = ev_idx[dst]  # node entered by turn c
        self.tail_of_c = eu_idx[dst]  # node the entered edge leaves
        cols = np.arange(n_c)
        # flow conservation on L(G): out(e) - in(e) = [e == s] - [e == t]
        flow = sp.csr_matrix(
            (
                np.concatenate([np.ones(n_c), -np.ones(n_c)]),
                (np.concatenate([src, dst]), np.concatenate([cols, cols])),
            ),
            shape=(n_e, n_c),
        )
        rhs = np.zeros(n_e)
        rhs[start] += 1.0
        rhs[end] -= 1.0
        # every interior node entered at most once (the root is entered by s: no other turn)
        inner = ~self.into_t
        nodes, row = np.unique(self.head_of_c[inner], return_inverse=True)
        enter = sp.csr_matrix((np.ones(row.size), (row, cols[inner])), shape=(nodes.size, n_c))
        self.blocks = [flow, enter]
        self.lbs = [rhs, np.full(nodes.size, -np.inf)]
        self.ubs = [rhs, np.ones(nodes.size)]
        self.cut_keys: set = set()
        self.n_cuts = 0
        # cut rows handed to the MILP: those from integer cycles, those tight at the last LP
        # optimum and those an integer solution violated (the rest stay in the pool)
        self.active = np.zeros(0, dtype=bool)
        self._A = None
        self._cuts = None
        self._lp = None
        self._succ = None
        # hand the MILP a compact single-commodity-flow connectivity formulation as well
        self.scf = True

    # -- cuts ----------------------------------------------------------------------------
    def add_gsec(self, nodes, ks, active: bool = False) -> int:
        """Add ``y(delta^-(S)) >= visit_k`` for S = ``nodes`` and each k in ``ks``."""
        in_s = np.zeros(self.n_nodes, dtype=bool)
        in_s[np.asarray(nodes, dtype=np.int64)] = True
        if in_s[self.root]:  # pragma: no cover - separation never proposes such S
            return 0
        base = np.flatnonzero(in_s).tobytes()
        entering = in_s[self.head_of_c] & ~in_s[self.tail_of_c] & ~self.into_t
        ent_idx = np.flatnonzero(entering)
        rows, cols, vals = [], [], []
        r = 0
        for k in np.atleast_1d(ks).tolist():
            key = (base, int(k))
            if key in self.cut_keys:
                continue
            self.cut_keys.add(key)
            # turns entering k from outside S appear on both sides and cancel
            ent_k = ent_idx[self.head_of_c[ent_idx] != k]
            visit_k = np.flatnonzero((self.head_of_c == k) & ~self.into_t & ~entering)
            cols += [ent_k, visit_k]
            vals += [np.ones(ent_k.size), -np.ones(visit_k.size)]
            rows.append(np.full(ent_k.size + visit_k.size, r))
            r += 1
        if r == 0:
            return 0
        block = sp.csr_matrix(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
            shape=(r, self.n_c),
        )
        self.blocks.append(block)
        self.lbs.append(np.zeros(r))
        self.ubs.append(np.full(r, np.inf))
        self.n_cuts += r
        self.active = np.concatenate([self.active, np.full(r, active)])
        self._A = self._cuts = None
        return r

    def _y_visit(self, x):
        y = np.bincount(self.dst, weights=x, minlength=self.w.size)
        y[self.s] = 1.0
        inner = np.ones(self.w.size, dtype=bool)
        inner[[self.s, self.t]] = False  # s enters the root, t's head is not interior
        visit = np.bincount(self.ev[inner], weights=y[inner], minlength=self.n_nodes)
        return y, inner, visit

    def separate(self, x: np.ndarray) -> int:
        """All GSECs violated at an LP solution found by the two separation routines."""
        y, inner, visit = self._y_visit(x)
        return self._separate_components(y, inner, visit) + self._separate_maxflow(
            y, inner, visit
        )

    def _separate_components(self, y, inner, visit, thresholds=(1e-6, 0.25, 0.5)) -> int:
        """Connected-components heuristic: for each θ keep the interior edges with y > θ,
        split the nodes the root cannot reach into weakly connected components K and cut
        ``y(delta^-(K)) >= visit_k`` for the most visited k of K when violated."""
        added = 0
        for theta in thresholds:
            on = inner & (y > theta)
            u, v = self.eu[on], self.ev[on]
            reach = reachable(self.n_nodes, u, v, root=self.root)
            cand = ~reach & (visit > 1e-6)
            if not cand.any():
                continue
            keep = ~reach[u] & ~reach[v]
            g = sp.csr_matrix(
                (np.ones(int(keep.sum())), (u[keep], v[keep])),
                shape=(self.n_nodes, self.n_nodes),
            )
            _, label = connected_components(g, directed=True, connection="weak")
            for lab in np.unique(label[cand]).tolist():
                comp = np.flatnonzero((label == lab) & ~reach)
                k = int(comp[np.argmax(visit[comp])])
                in_k = np.zeros(self.n_nodes, dtype=bool)
                in_k[comp] = True
                inflow = y[inner & in_k[self.ev] & ~in_k[self.eu]].sum()
                if inflow < visit[k] - 1e-6:
                    added += self.add_gsec(comp, [k])
        return added

    def _separate_maxflow(self, y, inner, visit) -> int:
        """Exact separation by max-flow / min-cut (max-flow min-cut theorem).

        All GSECs for k hold iff the maximum r→k flow under capacities y is at least
        visit_k. For each violated k the cut taken is the smallest sink side: the nodes
        that can still reach k in the residual network. Every other k' inside that S whose
        cut is violated as well gets its row too (and no max-flow of its own this round).
        """
        n = self.n_nodes
        on = inner & (y > 1e-9)
        cap = sp.csr_matrix(
            (np.rint(y[on] * _FLOW_SCALE).astype(np.int64), (self.eu[on], self.ev[on])),
            shape=(n, n),
        )
        cap.sum_duplicates()
        cap.data = cap.data.astype(np.int32)
        cap.eliminate_zeros()
        cands = np.flatnonzero(visit > 1e-4)
        cands = cands[cands != self.root]
        # a single r→k path whose every edge has y >= visit_k already certifies k
        width = _widest_path(n, self.eu[on], self.ev[on], y[on], self.root)
        cands = cands[width[cands] < visit[cands] - 1e-6]
        cands = cands[np.argsort(-visit[cands], kind="stable")]
        done = np.zeros(n, dtype=bool)
        eu_in, ev_in, y_in = self.eu[inner], self.ev[inner], y[inner]
        added = 0
        for k in cands.tolist():
            if done[k]:
                continue
            res = maximum_flow(cap, self.root, k)
            if res.flow_value >= (visit[k] - 1e-5) * _FLOW_SCALE:
                continue
            resid = (cap - res.flow).tocoo()
            pos = resid.data > 0
            near_k = reachable(n, resid.col[pos], resid.row[pos], root=k)
            inflow = y_in[near_k[ev_in] & ~near_k[eu_in]].sum()
            ks = np.flatnonzero(near_k & (visit > inflow + 1e-5) & ~done)
            done[ks] = True
            added += self.add_gsec(np.flatnonzero(near_k), ks)
        return added

    # -- solving -------------------------------------------------------------------------
    def _matrix(self):
        if self._A is None:
            self._A = sp.vstack(self.blocks, format="csr")
            self._lb = np.concatenate(self.lbs)
            self._ub = np.concatenate(self.ubs)
        return self._A, self._lb, self._ub

    def _cut_matrix(self) -> sp.csr_matrix:
        if self._cuts is None:
            blocks = self.blocks[2:] or [sp.csr_matrix((0, self.n_c))]
            self._cuts = sp.vstack(blocks, format="csr")
        return self._cuts

    def mark_tight(self, x: np.ndarray) -> None:
        """Activate the pool cuts that are tight at the LP solution ``x`` (all have lb 0)."""
        if self.n_cuts:
            self.active |= self._cut_matrix() @ x < 1e-6

    def activate_violated(self, x: np.ndarray) -> int:
        """Activate the pool cuts an integer solution ``x`` violates; return how many."""
        if not self.n_cuts:
            return 0
        viol = (self._cut_matrix() @ x < -0.5) & ~self.active
        self.active |= viol
        return int(viol.sum())

    def solve_milp(self, time_limit: float, solver=None):
        """The MILP with the active cuts, :func:`scipy.optimize.milp`'s result; ``solver`` (a
        :class:`_MilpSolver`) runs it, else this process."""
        cuts = self._cut_matrix()[np.flatnonzero(self.active)]
        A = sp.vstack(self.blocks[:2] + [cuts], format="csr")
        lb = np.concatenate(self.lbs[:2] + [np.zeros(cuts.shape[0])])
        ub = np.concatenate(self.ubs[:2] + [np.full(cuts.shape[0], np.inf)])
        n_var = self.n_c
        integrality = np.ones(self.n_c, dtype=np.int8)
        upper = np.ones(self.n_c)
        if self.scf:
            A, lb, ub, integrality, upper = self._with_scf(A, lb, ub)
            n_var = A.shape[1]
        options = {
            "time_limit": max(time_limit, 1e-3),
            "mip_rel_gap": 0.0,
            "mip_abs_gap": 0.0,  # HiGHS's default 1e-6 would leave near-ties unresolved
        }
        res = (solver or _milp_here)(
            c=np.concatenate([self.c, np.zeros(n_var - self.n_c)]),
            integrality=integrality,
            bounds=Bounds(0.0, upper),
            constraints=LinearConstraint(A, lb, ub),
            options=options,
        )
        if res.x is not None:
            res.x = res.x[: self.n_c]
        return res

    def _with_scf(self, A, lb, ub):
        """Append a single-commodity-flow connectivity formulation (Gavish & Graves 1978).

        Continuous f_e >= 0 on the interior edges carries one unit from the root to every
        visited node: f(into k) - f(out of k) = visit_k for k != r, and f_e <= (n - 1) y_e.
        A cycle that the root does not feed cannot get its flow, so every integer solution
        is a route and a single MILP solve suffices; the GSEC pool supplies the strong bound
        that this big-M formulation alone lacks.
        """
        n_e, n_c, n = self.w.size, self.n_c, self.n_nodes
        inner = np.ones(n_e, dtype=bool)
        inner[[self.s, self.t]] = False
        ei = np.flatnonzero(inner)
        big_m = float(n - 1)
        y_of_x = sp.csr_matrix((np.ones(n_c), (self.dst, np.arange(n_c))), shape=(n_e, n_c))
        f_of_e = sp.csr_matrix((np.ones(ei.size), (np.arange(ei.size), ei)), shape=(ei.size, n_e))
        cap = sp.hstack([-big_m * y_of_x[ei], f_of_e])  # f_e - M y_e <= 0
        f_in = sp.csr_matrix((np.ones(ei.size), (self.ev[ei], ei)), shape=(n, n_e))
        f_out = sp.csr_matrix((np.ones(ei.size), (self.eu[ei], ei)), shape=(n, n_e))
        keep = np.ones(n, dtype=bool)
        keep[self.root] = False
        bal = sp.hstack([-(f_in @ y_of_x), f_in - f_out]).tocsr()[keep]
        A2 = sp.vstack(
            [sp.hstack([A, sp.csr_matrix((A.shape[0], n_e))]), cap, bal], format="csr"
        )
        lb2 = np.concatenate([lb, np.full(ei.size, -np.inf), np.zeros(bal.shape[0])])
        ub2 = np.concatenate([ub, np.zeros(ei.size), np.zeros(bal.shape[0])])
        upper = np.concatenate([np.ones(n_c), np.where(inner, big_m, 0.0)])
        integ = np.concatenate([np.ones(n_c, dtype=np.int8), np.zeros(n_e, dtype=np.int8)])
        return A2, lb2, ub2, integ, upper

    def solve_lp(self, time_limit: float, warm: bool = True):
        """LP relaxation: ``(status, x, objective)`` with status in
        {"optimal", "infeasible", "time_limit", "error"}; warm-started when possible."""
        hc = _highs_class() if warm else None
        if hc is None:
            A, lb, ub = self._matrix()
            res = milp(
                self.c,
                integrality=np.zeros(self.n_c, dtype=np.int8),
                bounds=Bounds(0.0, 1.0),
                constraints=LinearConstraint(A, lb, ub),
                options={"time_limit": max(time_limit, 1e-3), "presolve": False},
            )
            status = {0: "optimal", 1: "time_limit", 2: "infeasible"}.get(res.status, "error")
            return status, res.x, (res.fun if res.x is not None else None)
        if self._lp is None:
            self._lp = _WarmLP(self, *hc)
        return self._lp.solve(time_limit)

    def separate_lp(self, x: np.ndarray) -> int:
        """Cuts violated at an LP optimum: pool cuts that left the warm LP, then new ones."""
        back = self._lp.reinstate(x) if self._lp is not None else 0
        return back + self.separate(x)

    # -- reading solutions ---------------------------------------------------------------
    def split_integer(self, x: np.ndarray):
        """Split an integer solution into its s–t path (local edges) and its cycles."""
        sel = np.flatnonzero(x > 0.5)
        succ = dict(zip(self.src[sel].tolist(), self.dst[sel].tolist(), strict=True))
        path = [self.s]
        seen = {self.s}
        while path[-1] != self.t:
            nxt = succ.get(path[-1])
            if nxt is None or nxt in seen:  # pragma: no cover - excluded by the flow rows
                raise EvrouteError("internal error: MILP solution is not an s-t flow")
            path.append(nxt)
            seen.add(nxt)
        cycles = []
        for e0 in succ:
            if e0 in seen:
                continue
            cyc = [e0]
            seen.add(e0)
            nxt = succ[e0]
            while nxt != e0:
                cyc.append(nxt)
                seen.add(nxt)
                nxt = succ[nxt]
            cycles.append(cyc)
        return path, cycles

    def cut_cycles(self, cycles) -> int:
        """One GSEC per node of each cycle's node set: removes every way of closing a cycle
        inside that node set without entering it from outside."""
        added = 0
        for cyc in cycles:
            nodes = self.ev[np.asarray(cyc)]
            added += self.add_gsec(nodes, nodes, active=True)
        return added

    def heuristic_path(self, x: np.ndarray | None = None, max_steps: int = 20000):
        """A quick feasible route: depth-first search over simple routes from s.

        Turns are tried in the order of their LP value ``x`` (largest first; none given:
        all equal), then of the Dijkstra distance to t under max(w, 0) (smallest first),
        so that without ``x`` the search follows the rectified shortest route and with an
        LP solution it follows the LP's flow. Returns local edges or ``None`` after
        ``max_steps`` expansions without success.
        """
        n_e = self.w.size
        if self._succ is None:
            order = np.argsort(self.src, kind="stable")
            first = np.searchsorted(self.src[order], np.arange(n_e + 1))
            g = sp.csr_matrix(
                (np.maximum(self.c, 0.0) + 1e-9, (self.dst, self.src)), shape=(n_e, n_e)
            )  # reversed, weight = the entered edge's energy
            to_t = dijkstra(g, indices=self.t)
            self._succ = (order, first, to_t)
        order, first, to_t = self._succ
        xs = np.zeros(self.n_c) if x is None else np.round(x, 6)
        conns = order.tolist()
        first_l = first.tolist()
        key_x, key_d = (-xs).tolist(), to_t[self.dst].tolist()
        dst, ev = self.dst.tolist(), self.ev.tolist()
        t = self.t
        path = [self.s]
        visited = {ev[self.s]}
        cand = []

        def options(e):
            cs = conns[first_l[e]:first_l[e + 1]]
            cs.sort(key=lambda c: (key_x[c], key_d[c]), reverse=True)  # popped from the end
            return cs

        cand.append(options(self.s))
        steps = 0
        while cand and steps < max_steps:
            if not cand[-1]:
                cand.pop()
                e = path.pop()
                visited.discard(ev[e])
                continue
            c = cand[-1].pop()
            f = dst[c]
            steps += 1
            if f == t:
                return path + [f]
            if ev[f] in visited or not math.isfinite(key_d[c]):
                continue
            path.append(f)
            visited.add(ev[f])
            cand.append(options(f))
        return None


@contextlib.contextmanager
def _quiet_stdout():
    """The process's standard output (file descriptor 1) sent to /dev/null for the duration: a
    library's C code that prints there (HiGHS's banner, before any option can be set) would
    otherwise end up in evroute's output (``--json``, ``--geojson -``)."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no file descriptor 1 (an embedding host): nothing to protect
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


# --------------------------------------------------------------------------------------
# Ctrl-C: the solvers stop within a fraction of a second
# --------------------------------------------------------------------------------------


# the signals whose Python handlers stop a command (the CLI turns SIGTERM into KeyboardInterrupt)
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _ctrl_c_stops_here() -> bool:
    """True in the main thread while SIGINT has a Python handler (KeyboardInterrupt by default):
    there Ctrl-C must stop a solver at once. Elsewhere (another thread, where no handler can be set;
    a pool worker of ``evroute compare``, which ignores SIGINT) the solvers run undisturbed."""
    return threading.current_thread() is threading.main_thread() and callable(signal.getsignal(signal.SIGINT))


def _run_highs(h) -> None:
    """``h.run()`` on a :class:`highspy.Highs`, stopped within milliseconds by Ctrl-C.

    Python runs a signal's handler only between two bytecodes of the main thread, so while HiGHS
    runs there Ctrl-C waits for it. Here, while it runs, the Python handlers of SIGINT and SIGTERM
    only note the signal; Python runs that note in HiGHS's interrupt callbacks (between simplex and
    IPM iterations and MIP nodes), which then stop the solver; once it has returned the noted
    signal's own handler runs: Ctrl-C's raises KeyboardInterrupt (one that returns lets the solve
    go on). A raising handler must not run inside a callback: HiGHS would swallow its exception and
    report a solver error. The handlers and callbacks are put back whatever happens; where Ctrl-C
    does not stop anything (:func:`_ctrl_c_stops_here`) it is ``h.run()``.
    """
    if not _ctrl_c_stops_here():
        h.run()
        return
    handlers = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}
    handlers = {sig: handler for sig, handler in handlers.items() if callable(handler)}
    caught: list[int] = []

    def note(signum, frame):
        caught.append(signum)

    def check(event):
        if event.data_in is not None:  # (HiGHS keeps the flag from an earlier interrupted run)
            event.data_in.user_interrupt = bool(caught)

    events = (h.cbSimplexInterrupt, h.cbIpmInterrupt, h.cbMipInterrupt)
    while True:
        try:
            _set_handlers(dict.fromkeys(handlers, note))
            for event in events:
                event.subscribe(check)
            h.run()
        finally:
            for event in events:
                event.unsubscribe(check)
            _set_handlers(handlers)
        if not caught:
            return
        signum = caught[0]
        caught.clear()
        handlers[signum](signum, None)


def _set_handlers(handlers: dict) -> None:
    """``signal.signal(sig, handler)`` for each item, every one of them even where a handler set
    first runs in between and raises (Ctrl-C's KeyboardInterrupt): that is raised at the end."""
    raised = None
    done = False
    while not done:
        try:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            done = True
        except BaseException as exc:
            raised = exc
    if raised is not None:
        raise raised


def _milp_here(**kwargs):
    """:func:`scipy.optimize.milp` in this process."""
    with warnings.catch_warnings():
        # scipy hands options it does not know (mip_abs_gap) to HiGHS verbatim, and warns
        warnings.simplefilter("ignore", RuntimeWarning)
        return milp(**kwargs)


# the child process of _MilpSolver: sys.path, then requests (milp's keyword arguments) on standard
# input, each answered by milp's result (or its exception) on the original standard output; it
# ends at the end of its input (the parent closed the pipe or died)
_MILP_PROCESS = r"""
import os, pickle, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it kills this process
try:
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nothing a library prints may enter the answers
    requests = sys.stdin.buffer
    sys.path[:] = pickle.load(requests)
    import warnings
    from scipy.optimize import milp
    while True:
        kwargs = pickle.load(requests)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            try:
                out = milp(**kwargs)
            except Exception as exc:
                out = exc
        pickle.dump(out, answers, protocol=pickle.HIGHEST_PROTOCOL)
        answers.flush()
except (EOFError, OSError):
    pass
"""


class _MilpSolver:
    """:func:`scipy.optimize.milp` in a child process that Ctrl-C kills at once.

    HiGHS checks for a user interrupt only between nodes and heuristics, which can be seconds apart
    (5.4 s in the root's sub-MIP heuristics on synthetic:A; highspy 1.16's parallel search checks
    every ~100 nodes, 2–3 s), so a MILP in this process cannot promise to stop within 2 s of
    Ctrl-C. The child makes the very same call (the same SciPy and HiGHS: the same results, the
    same time limit); Ctrl-C (or SIGTERM) interrupts the wait for its answer and kills it. It
    starts at the first MILP (~0.6 s, not taken from the MILP's time), serves every MILP round
    of one :func:`exact_optimum` call and ends with it (:meth:`close`). Where Ctrl-C stops nothing
    (:func:`_ctrl_c_stops_here`), or the child cannot start or dies, the MILP runs in this process.
    """

    def __init__(self):
        self._proc = None
        self._here = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __call__(self, **kwargs):
        if self._proc is None and not self._here:
            self._start()
        if self._proc is None:
            return _milp_here(**kwargs)
        try:
            pickle.dump(kwargs, self._proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self._proc.stdin.flush()
            out = pickle.load(self._proc.stdout)
        except (OSError, EOFError, pickle.UnpicklingError):  # the child died: solve here
            self.close()
            self._here = True
            return _milp_here(**kwargs)
        except BaseException:  # Ctrl-C: stop the solver now
            self.close()
            raise
        if isinstance(out, BaseException):
            raise out
        return out

    def _start(self) -> None:
        self._here = not (_ctrl_c_stops_here() and sys.executable)
        if self._here:
            return
        try:
            self._proc = subprocess.Popen([sys.executable, "-I", "-c", _MILP_PROCESS],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            pickle.dump(list(sys.path), self._proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        except OSError:
            self.close()
            self._here = True
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Kill the child (idle or not) and wait for it."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                pipe.close()


class _WarmLP:
    """The LP relaxation of a :class:`_CutModel` kept in one HiGHS instance.

    Cuts enter as rows and each round is a warm-started dual simplex. Cut rows that stay
    slack for ``max_age`` rounds leave the LP again (they stay in the model's pool and
    return once violated), so the LP does not grow with every round.
    """

    def __init__(self, model: _CutModel, highs_cls, model_status, max_age: int = 3):
        self.model, self.status_enum, self.max_age = model, model_status, max_age
        with _quiet_stdout():  # HiGHS prints its banner on the process's stdout when it is made
            h = highs_cls()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("presolve", "off")  # keeps the basis valid between rounds
        h.setOptionValue("simplex_scale_strategy", 0)  # measured: faster warm re-solves
        n_c = model.n_c
        h.addVars(n_c, np.zeros(n_c), np.ones(n_c))
        h.changeColsCost(n_c, np.arange(n_c, dtype=np.int32), model.c)
        self.h = h
        base = sp.vstack(model.blocks[:2], format="csr")
        self._add_rows(base, np.concatenate(model.lbs[:2]), np.concatenate(model.ubs[:2]))
        self.n_base = base.shape[0]
        self.rows = np.zeros(0, dtype=np.int64)  # pool index of each cut row, in LP order
        self.in_lp = np.zeros(0, dtype=bool)
        self.age = np.zeros(0, dtype=np.int64)

    def _add_rows(self, A: sp.csr_matrix, lb, ub) -> None:
        inf = self.h.getInfinity()
        self.h.addRows(
            A.shape[0],
            np.where(np.isfinite(lb), lb, -inf).astype(np.float64),
            np.where(np.isfinite(ub), ub, inf).astype(np.float64),
            A.nnz,
            A.indptr[:-1].astype(np.int32),
            A.indices.astype(np.int32),
            A.data.astype(np.float64),
        )

    def _add_cuts(self, idx: np.ndarray) -> None:
        if idx.size == 0:
            return
        self._add_rows(self.model._cut_matrix()[idx], np.zeros(idx.size), np.full(idx.size, np.inf))
        self.rows = np.concatenate([self.rows, idx])
        self.in_lp[idx] = True
        self.age[idx] = 0

    def reinstate(self, x: np.ndarray) -> int:
        """Put back the pool cuts outside the LP that ``x`` violates."""
        out = np.flatnonzero(~self.in_lp)
        if out.size == 0:
            return 0
        viol = out[self.model._cut_matrix()[out] @ x < -1e-6]
        self._add_cuts(viol)
        return int(viol.size)

    def solve(self, time_limit: float):
        m, h = self.model, self.h
        n_new = m.n_cuts - self.in_lp.size
        if n_new:
            self.in_lp = np.concatenate([self.in_lp, np.zeros(n_new, dtype=bool)])
            self.age = np.concatenate([self.age, np.zeros(n_new, dtype=np.int64)])
            self._add_cuts(np.arange(m.n_cuts - n_new, m.n_cuts))
        # HiGHS measures time_limit on a clock that runs across calls
        h.setOptionValue("time_limit", float(h.getRunTime() + max(time_limit, 1e-3)))
        _run_highs(h)
        st = h.getModelStatus()
        if st == self.status_enum.kInfeasible:
            return "infeasible", None, None
        if st == self.status_enum.kTimeLimit:
            return "time_limit", None, None
        if st != self.status_enum.kOptimal:  # pragma: no cover - HiGHS trouble
            return "error", None, None
        x = np.clip(np.asarray(h.getSolution().col_value, dtype=np.float64), 0.0, 1.0)
        if self.rows.size:
            slack = m._cut_matrix()[self.rows] @ x
            self.age[self.rows] = np.where(slack > 1e-6, self.age[self.rows] + 1, 0)
            drop = self.age[self.rows] >= self.max_age
            if drop.any():
                pos = np.flatnonzero(drop)
                h.deleteRows(pos.size, (self.n_base + pos).astype(np.int32))
                self.in_lp[self.rows[pos]] = False
                self.rows = self.rows[~drop]
        return "optimal", x, float(m.c @ x)


def _relative_gap(best: float, bound: float) -> float:
    if not (math.isfinite(best) and math.isfinite(bound)):
        return math.inf
    return max(0.0, best - bound) / max(abs(best), 1e-9)


def _solve_milp(n_edges, src, dst, eu, ev, w, start, end, ends, deadline, t0, stats,
                warm_lp=True, arc=None, milp_solver=None):
    def result(path, energy, status, gap):
        stats["cuts"] = model.n_cuts if model is not None else 0
        return OptimumResult(path, energy, "milp", status, gap, time.perf_counter() - t0, stats, ends)

    model = None
    red = _reduce(n_edges, src, dst, eu, ev, start, end, ends)
    if red is None:
        return result([], math.nan, "infeasible", math.inf)
    alive, kept = red
    rsrc, rdst = src[kept], dst[kept]
    arc = np.zeros(src.size) if arc is None else arc
    turns = {(int(a), int(b)): float(c) for a, b, c in zip(src, dst, arc, strict=True) if c != 0.0}
    local_to_edge = np.flatnonzero(alive)
    edge_to_local = np.full(n_edges, -1, dtype=np.int64)
    edge_to_local[local_to_edge] = np.arange(local_to_edge.size)
    m = local_to_edge.size
    node_ids, node_idx = np.unique(np.concatenate([eu[alive], ev[alive]]), return_inverse=True)
    model = _CutModel(
        edge_to_local[rsrc], edge_to_local[rdst], node_idx[:m], node_idx[m:], w[alive],
        int(edge_to_local[start]), int(edge_to_local[end]), node_ids.size, arc=arc[kept],
    )
    stats.update(reduced_edges=int(m), reduced_connections=int(model.n_c),
                 reduced_nodes=int(node_ids.size), lp_rounds=0, milp_rounds=0)

    best_path: list[int] = []
    best = math.inf
    bound = -math.inf

    def offer(local_path):
        nonlocal best, best_path
        path = local_to_edge[np.asarray(local_path)].tolist()
        energy = path_energy(path, w, turns)
        if energy < best and is_vertex_simple(path, eu, ev, ends=ends):
            best, best_path = energy, path

    def proven():
        return math.isfinite(best) and best <= bound + max(_ABS_TOL, _REL_TOL * abs(best))

    def left():
        return deadline - time.perf_counter()

    h = model.heuristic_path()
    if h is not None:
        offer(h)

    status = "time_limit"
    while left() > 0:
        # cutting-plane rounds on the LP relaxation; they may use half of the time left
        lp_deadline = time.perf_counter() + 0.5 * left()
        last_x = lp_x = None  # the last LP optimum; the same if no cut was violated there
        while time.perf_counter() < lp_deadline:
            st, x, obj = model.solve_lp(lp_deadline - time.perf_counter(), warm=warm_lp)
            stats["lp_rounds"] += 1
            if st == "infeasible":  # a relaxation: no route at all
                return result([], math.nan, "infeasible", math.inf)
            if st != "optimal":
                break
            bound = max(bound, obj + model.const)
            last_x = x
            h = model.heuristic_path(x)
            if h is not None:
                offer(h)
            if model.separate_lp(x) == 0:
                lp_x = x
                break
        if last_x is not None:
            model.mark_tight(last_x)
        if proven():
            status = "optimal"
            break
        if lp_x is not None and np.all(np.minimum(lp_x, 1.0 - lp_x) < _INT_TOL):
            # the LP optimum is integral and satisfies every GSEC: it is the optimum
            local_path, cycles = model.split_integer(lp_x)
            offer(local_path)
            if not cycles:
                bound = max(bound, best)
                status = "optimal"
                break
        if left() <= 0:
            break
        res = model.solve_milp(left(), milp_solver)
        stats["milp_rounds"] += 1
        if res.status == 2:
            if best_path:  # pragma: no cover - only by numerical trouble
                break
            return result([], math.nan, "infeasible", math.inf)
        if res.status not in (0, 1):
            raise EvrouteError(f"MILP solver failed: {res.message}")
        rb = res.fun if res.status == 0 else getattr(res, "mip_dual_bound", None)
        if rb is not None and math.isfinite(rb):
            bound = max(bound, float(rb) + model.const)
        if res.x is None:
            break  # time ran out before HiGHS found an integer point
        local_path, cycles = model.split_integer(res.x)
        offer(local_path)
        if res.status == 0 and not cycles:
            # the relaxation's optimum is itself a route: optimal (bound == best up to rounding)
            bound = max(bound, best)
        if proven():
            status = "optimal"
            break
        if res.status == 1:
            break  # time limit inside HiGHS
        model.cut_cycles(cycles)
        model.activate_violated(res.x)

    if not best_path:
        stats["timed_out_without_route"] = True
        return result([], math.nan, "infeasible", math.inf)
    gap = 0.0 if status == "optimal" else _relative_gap(best, bound)
    return result(best_path, best, status, gap)


# --------------------------------------------------------------------------------------
# public entry point
# --------------------------------------------------------------------------------------


def exact_optimum(
    n_edges,
    conn_src,
    conn_dst,
    *,
    edge_u,
    edge_v,
    weights,
    start,
    end,
    time_limit: float = 60.0,
    ends: str = "strict",
    method: str = "auto",
    turn_weights=None,
    walks: bool = False,
) -> OptimumResult:
    """Best vertex-simple route from ``start`` to ``end`` under ``weights`` (paper 003 Eq. 1).

    Parameters
    ----------
    n_edges : int
        Number of edges E of G; edge ids are 0..E-1.
    conn_src, conn_dst : array of int
        The line graph L(G): a legal turn from edge ``conn_src[i]`` into ``conn_dst[i]``.
    edge_u, edge_v : array of int, length E
        Tail and head node of every edge (arbitrary integer ids).
    weights : array of float, length E
        Per-edge energy; may be negative, negative cycles allowed.
    start, end : int
        Start and end edge; both are part of the route and of its energy.
    time_limit : float
        Wall-clock budget in seconds for the whole call.
    ends : {"strict", "open", "auto"}
        ``"strict"``: no node visited twice, the start edge's tail and the end edge's head
        included. ``"open"``: only the nodes between consecutive route edges must be
        distinct (for start/end edges on dead-end spurs; see the module docstring).
        ``"auto"``: ``"strict"`` if such a route exists, else ``"open"`` (within the same
        time limit); :attr:`OptimumResult.ends` says which.
    method : {"auto", "milp"}
        ``"auto"``: Bellman–Ford first and the MILP only if needed; ``"milp"``: MILP only.
    turn_weights : array of float, length of ``conn_src``, optional
        A cost per legal turn (the energy of the junction between two edges, which a truth of
        edges plus turns has), added where a route takes the turn; may be negative.
    walks : bool
        Where no negative cycle is reachable, return the best walk of L(G) (the least-energy
        route Dijkstra's oracle can drive, which may pass a node of G twice: around a block
        rather than through a costly turn) instead of the best vertex-simple route. With
        negative cycles the best walk does not exist and the vertex-simple optimum is returned.

    Returns
    -------
    OptimumResult

    Raises
    ------
    EvrouteError
        On malformed input, or when ``end`` cannot be reached from ``start`` at all.
    KeyboardInterrupt
        Within a fraction of a second of Ctrl-C in the main thread, the solvers stopped.
    """
    t0 = time.perf_counter()
    if method not in ("auto", "milp"):
        raise EvrouteError(f"unknown method {method!r}; use 'auto' or 'milp'")
    if ends not in _ENDS_ARG:
        raise EvrouteError(f"unknown ends {ends!r}; use one of: {', '.join(_ENDS_ARG)}")
    if not time_limit > 0:
        raise EvrouteError(f"time_limit must be positive, got {time_limit!r}")
    if ends == "auto":
        res = exact_optimum(n_edges, conn_src, conn_dst, edge_u=edge_u, edge_v=edge_v, weights=weights, start=start, end=end,
                            time_limit=time_limit, ends="strict", method=method, turn_weights=turn_weights, walks=walks)
        left = float(time_limit) - (time.perf_counter() - t0)
        if res.status != "infeasible" or res.stats.get("timed_out_without_route") or left <= 0:
            return res
        res = exact_optimum(n_edges, conn_src, conn_dst, edge_u=edge_u, edge_v=edge_v, weights=weights, start=start, end=end,
                            time_limit=left, ends="open", method=method, turn_weights=turn_weights, walks=walks)
        res.seconds = time.perf_counter() - t0
        return res
    n_edges, src, dst, eu, ev, w, start, end, arc = _check_inputs(
        n_edges, conn_src, conn_dst, edge_u, edge_v, weights, start, end, turn_weights
    )
    turns = {(int(a), int(b)): float(c) for a, b, c in zip(src, dst, arc, strict=True) if c != 0.0}
    stats: dict = {}
    if start == end:
        ok = is_vertex_simple([start], eu, ev, ends=ends)
        return OptimumResult([start] if ok else [], float(w[start]) if ok else math.nan,
                             "bellman-ford", "optimal" if ok else "infeasible",
                             0.0 if ok else math.inf, time.perf_counter() - t0, stats, ends)
    if not reachable(n_edges, src, dst, root=start)[end]:
        raise EvrouteError(f"end edge {end} cannot be reached from start edge {start}")
    if method == "auto":
        _, pred, negative_cycle = shortest_walk(n_edges, src, dst, w=w, start=start, arc=arc)
        stats["negative_cycle"] = negative_cycle
        if not negative_cycle:
            path = walk_from_pred(pred, start, end)
            stats["walk_vertex_simple"] = is_vertex_simple(path, eu, ev, ends=ends)
            if stats["walk_vertex_simple"] or walks:
                return OptimumResult(path, path_energy(path, w, turns), "bellman-ford", "optimal",
                                     0.0, time.perf_counter() - t0, stats, ends)
    with _MilpSolver() as solver:
        return _solve_milp(n_edges, src, dst, eu, ev, w, start, end, ends,
                           t0 + float(time_limit), t0, stats, arc=arc, milp_solver=solver)
