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

The MILP, its cuts and its warm LP relaxation are :mod:`evroute.roads.cut_model`'s. Ctrl-C stops
the solvers within a fraction of a second (:mod:`evroute.roads.milp_solver`): HiGHS looks for a
user interrupt only between iterations, nodes and heuristics, at times seconds apart, and
Python's signal handlers wait for it to return.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ..errors import EvrouteError
from ..settings import MAX_TIME_LIMIT
from .cut_model import CutModel, reduce_problem
from .milp_solver import MilpSolver
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
# input checks (the walks and negative cycles: evroute.roads.walks; the MILP: evroute.roads.cut_model)
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
    red = reduce_problem(n_edges, src, dst, eu=eu, ev=ev, start=start, end=end, ends=ends)
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
    model = CutModel(
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
    with MilpSolver() as solver:
        return _solve_milp(n_edges, src, dst, eu, ev, w, start, end, ends,
                           t0 + float(time_limit), t0, stats, arc=arc, milp_solver=solver)
