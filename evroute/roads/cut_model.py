"""The exact optimum's MILP (:mod:`evroute.roads.optimum`, whose docstring gives the model and
its sources): the problem reduced to the edges and turns a vertex-simple route can use
(:func:`reduce_problem`), the model with its growing pool of generalised subtour elimination
cuts and their separation (:class:`CutModel`), and its LP relaxation kept warm in one HiGHS
instance (:class:`WarmLP`).
"""

from __future__ import annotations

import heapq
import math

import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse.csgraph import connected_components, dijkstra, maximum_flow

from ..errors import EvrouteError
from .milp_solver import highs_class, milp_here, quiet_stdout, run_highs
from .walks import reachable

__all__ = ["reduce_problem", "CutModel", "WarmLP"]

# capacities of the separation max-flow are y scaled to integers (scipy needs int32)
_FLOW_SCALE = 1 << 20


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


def reduce_problem(n_edges, src, dst, *, eu, ev, start, end, ends):
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


class CutModel:
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
        :class:`MilpSolver`) runs it, else this process."""
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
        res = (solver or milp_here)(
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
        hc = highs_class() if warm else None
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
            self._lp = WarmLP(self, *hc)
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


class WarmLP:
    """The LP relaxation of a :class:`CutModel` kept in one HiGHS instance.

    Cuts enter as rows and each round is a warm-started dual simplex. Cut rows that stay
    slack for ``max_age`` rounds leave the LP again (they stay in the model's pool and
    return once violated), so the LP does not grow with every round.
    """

    def __init__(self, model: CutModel, highs_cls, model_status, max_age: int = 3):
        self.model, self.status_enum, self.max_age = model, model_status, max_age
        with quiet_stdout():  # HiGHS prints its banner on the process's stdout when it is made
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
        run_highs(h)
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
