"""Map matching: what a map matcher is (:class:`Matcher`, the protocol both of evroute's
matchers follow and :func:`evroute.testing.check_matcher` checks), and evroute's own, a hidden
Markov model over the roads near each fix, vectorised with numpy (:class:`HMMMatcher`), for fleets
too large for leuvenmapmatching's (:class:`evroute.world.drives.LeuvenMatcher`, about 200 fixes a
second a core).

The model is Newson and Krumm's (2009, "Hidden Markov map matching through noise and
sparseness", ACM GIS): a state is a fix's projection on one road near it; a fix is emitted
with Gaussian noise of its distance to the road, N(d; 0, σ²); a step between two fixes costs
|d_route − d_ref| / β, the route distance between the two projections against the distance
the car drove. Two choices differ from the paper: ``d_ref`` is the trapezoid of the logged
speeds where a trace has them (the paper, without speeds, uses the great-circle distance
between the fixes, which stays the fallback), and β is a multiple of the GPS noise (the paper
fits it to its data; :data:`BETA_PER_NOISE`). The most likely sequence is Viterbi's.

What keeps it fast: the candidate roads of every fix come from one bulk query of a shapely
``STRtree`` of the roads' segments; the route distances of a run of fixes come from one bounded
Dijkstra (``scipy.sparse.csgraph``) on the junctions near those fixes, from the ends of their
candidate roads; every transition of the run is then one vectorised expression, and only
Viterbi's recursion (a few small array operations a fix) runs in Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from ..errors import EvrouteError
from ..geo import EARTH_RADIUS_M

__all__ = ["Matcher", "MatchedPiece", "HMMMatcher", "local_metres", "smooth_track", "fix_speeds", "BETA_PER_NOISE", "CANDIDATES", "WINDOW", "REACH_BETAS",
           "ACCELERATION_NOISE"]

#: β, the scale of a step's cost |d_route − d_ref| / β, per metre of the GPS noise σ: two
#: projections each off by σ make d_route about σ√2 off. Chosen on SUMO's Monaco drives (30
#: vehicles; 0.5, 1, 2 and 4 tried at 10 and 20 m, 1 and 0.2 Hz; benchmarks/map_matching.py
#: --matcher hmm): 2 matched the most driven length at every noise and rate but one.
BETA_PER_NOISE = 2.0
#: The most roads a fix may be on (its nearest ones within reach): where two-way streets meet,
#: each road is two candidates, and 6 left the driven one out at Monaco's junctions (10 drives at
#: 10 m, 1 Hz: 96.2 % of the driven length matched with 6, 99.5 % with 10; 16 gained no more).
CANDIDATES = 10
#: Fixes whose transitions one bounded Dijkstra serves.
WINDOW = 64
#: How far a step's route may exceed the distance driven (beyond 6σ), in β: a route longer costs
#: more than this many units of log-likelihood and is not searched.
REACH_BETAS = 20.0


#: One piece of a matched trip (:meth:`Matcher.match`): the index of its first fix, the matched
#: route's edges in order, each of its fixes' position along the route (m from the route's start;
#: NaN where the fix was not placed) and distance to the road (m).
MatchedPiece = tuple[int, list[int], np.ndarray, np.ndarray]


@runtime_checkable
class Matcher(Protocol):
    """A map matcher of a network: what :func:`evroute.world.drives.match_trip` and the import ask of
    one. Made as ``factory(net, gps_noise_m)`` (:data:`evroute.world.drives.MATCHERS`; a noise that
    is not positive is an :class:`~evroute.errors.EvrouteError`). :func:`evroute.testing.check_matcher`
    checks a matcher against this contract; :class:`HMMMatcher` and
    :class:`evroute.world.drives.LeuvenMatcher` pass it.

    Attributes
    ----------
    noise : float
        The fixes' standard deviation (m) it was made for.
    length : numpy.ndarray
        Each edge's length (m), by edge id: what positions along a matched route add up.
    """

    noise: float
    length: np.ndarray

    def match(self, lat, lon, *, t=None, speed=None) -> list[MatchedPiece]:
        """Match one trip's fixes (degrees; ``t`` their times in s and ``speed`` their speeds in
        m/s, optional, for a matcher that uses them), in pieces: where the car leaves the network
        (no road within reach of a fix) a piece ends and the next begins at a fix it can place.

        Returns
        -------
        list of MatchedPiece
            In the fixes' order, pieces of at least two fixes that do not overlap: ``(first,
            route, s, dist)``, the piece's fixes being ``first .. first + s.size - 1``; ``route`` a
            walk on the network (each edge begins where the one before ends). The same fixes give
            the same pieces, in any process (whatever its hash seed).
        """
        ...


#: The random acceleration of :func:`fix_speeds`' motion model (m²/s³, the spectral density of a
#: white-noise acceleration): how fast a car's velocity may wander between fixes. Chosen on SUMO's
#: Monaco drives without their speeds (benchmarks/map_matching.py --no-speed; docs/performance-matching.md).
ACCELERATION_NOISE = 1.0


def local_metres(lat, lon, *, lat0: float, lon0: float):
    """Local (north, east) metres of positions in degrees, equirectangular about (lat0, lon0):
    under 0.1 % off over a city.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        North and east (m).
    """
    lat, lon = np.asarray(lat, dtype=np.float64), np.asarray(lon, dtype=np.float64)
    north = np.radians(lat - lat0) * EARTH_RADIUS_M
    east = np.radians(lon - lon0) * EARTH_RADIUS_M * math.cos(math.radians(lat0))
    return north, east


def smooth_track(t, coords, *, gps_noise_m: float, acceleration: float | None = None) -> list[np.ndarray]:
    r"""A track as a car drives it, at a nearly constant velocity, from noisy positions: in each
    coordinate a cubic smoothing spline, the maximum a posteriori track of a white-noise
    acceleration of spectral density q (:data:`ACCELERATION_NOISE`) seen through the GPS noise σ
    (Wahba 1978),

    .. math:: \min_x \sum_i (x_i - z_i)^2 / \sigma^2 + \frac1q \sum_i a_i^2 \,(h_{i-1} + h_i) / 2,

    with :math:`a_i` the second divided difference at fix i and :math:`h_i` the time steps: one
    pentadiagonal system a coordinate.

    Parameters
    ----------
    t : array (n,)
        Times (s, increasing).
    coords : sequence of arrays (n,)
        The positions' coordinates (m).
    gps_noise_m : float
        σ (m).
    acceleration : float, optional
        q (m²/s³; default :data:`ACCELERATION_NOISE`).

    Returns
    -------
    list of numpy.ndarray
        The smoothed coordinates.
    """
    from scipy.linalg import solveh_banded

    t = np.asarray(t, dtype=np.float64)
    coords = [np.asarray(z, dtype=np.float64) for z in coords]
    n = t.size
    if n < 3:
        return [z.copy() for z in coords]
    q = float(acceleration if acceleration is not None else ACCELERATION_NOISE)
    h = np.maximum(np.diff(t), 1e-3)
    h0, h1 = h[:-1], h[1:]
    c = 2.0 / (h0 + h1)
    a, b, d = c / h0, -c * (1.0 / h0 + 1.0 / h1), c / h1  # row i of the second differences: fixes i, i+1, i+2
    w = 0.5 * (h0 + h1) / q
    r = 1.0 / float(gps_noise_m) ** 2
    bands = np.zeros((3, n))  # the upper bands of r I + Dᵀ W D (solveh_banded's layout)
    bands[2] = r
    bands[2, :-2] += w * a * a
    bands[2, 1:-1] += w * b * b
    bands[2, 2:] += w * d * d
    bands[1, 1:-1] += w * a * b
    bands[1, 2:] += w * b * d
    bands[0, 2:] += w * a * d
    return [solveh_banded(bands, r * z) for z in coords]


def fix_speeds(t, lat, lon, *, gps_noise_m: float, acceleration: float | None = None) -> np.ndarray:
    """Each fix's speed from the positions alone, for a trace that has none (a phone's): the
    speed of the smoothed track (:func:`smooth_track`, by central differences). A parked car's
    jitter smooths to a crawl, so the matcher no longer drives it around the block between two of
    its fixes.

    Parameters
    ----------
    t, lat, lon : arrays (n,)
        One trip's fixes: times (s, increasing) and degrees.
    gps_noise_m : float
        σ (m).
    acceleration : float, optional
        As :func:`smooth_track`.

    Returns
    -------
    numpy.ndarray
        The speeds (m/s).
    """
    t = np.asarray(t, dtype=np.float64)
    if t.size < 2:
        return np.zeros(t.size)
    north, east = local_metres(lat, lon, lat0=float(np.mean(lat)), lon0=float(np.mean(lon)))
    times = np.r_[0.0, np.cumsum(np.maximum(np.diff(t), 1e-3))]
    vn, ve = (np.gradient(x, times) for x in smooth_track(times, (north, east), gps_noise_m=gps_noise_m,
                                                            acceleration=acceleration))
    return np.hypot(vn, ve)


@dataclass
class _Lattice:
    """One trip's fixes, their candidate roads and Viterbi's scores and back-pointers."""

    north: np.ndarray
    east: np.ndarray
    ref: np.ndarray  # per step: the distance driven (m)
    fix: np.ndarray  # per candidate: its fix, edge, position along the edge, distance to the fix
    edge: np.ndarray
    along: np.ndarray
    dist: np.ndarray
    start: np.ndarray = field(init=False)  # per fix: its first candidate
    count: np.ndarray = field(init=False)
    emit: np.ndarray = field(init=False)
    score: np.ndarray = field(init=False)
    back: np.ndarray = field(init=False)
    #: per window: (distances, predecessors, the sources' rows, its junctions, and per candidate
    #: of its fixes the rows of the junctions its road ends and begins at, the first candidate)
    windows: list = field(default_factory=list)
    step_window: np.ndarray = field(init=False)

    def __post_init__(self):
        n = self.north.size
        self.start = np.searchsorted(self.fix, np.arange(n + 1), side="left")
        self.count = np.diff(self.start)
        self.score = np.full(self.fix.size, -np.inf)
        self.back = np.full(self.fix.size, -1, dtype=np.int64)
        self.step_window = np.full(n, -1, dtype=np.int64)


class HMMMatcher:
    """A hidden-Markov map matcher of ``net`` (module docstring): a :class:`Matcher`.

    Parameters
    ----------
    net : evroute.roads.network.Network
    gps_noise_m : float
        The fixes' standard deviation σ (m).
    max_dist_m : float, optional
        A road farther than this from a fix is not a candidate for it; a fix with none breaks
        the match (default 5σ, at least 50 m).
    candidates : int
        The most roads a fix may be on (:data:`CANDIDATES`).

    Notes
    -----
    Two parallel edges drawn as the same line are equally near every fix: the shorter one (then
    the lower id) is taken.
    """

    def __init__(self, net, gps_noise_m: float = 10.0, max_dist_m: float | None = None, *,
                 candidates: int = CANDIDATES):
        import scipy.sparse as sp
        import shapely

        if not gps_noise_m > 0:
            raise EvrouteError(f"the GPS noise must be > 0 m, got {gps_noise_m:g}")
        self.noise = float(gps_noise_m)
        self.max_dist = float(max_dist_m) if max_dist_m is not None else max(50.0, 5.0 * self.noise)
        self.k = int(candidates)
        self.beta = BETA_PER_NOISE * self.noise
        nodes, e = net.nodes, net.edges
        self.lat0 = float(nodes.lat.mean())
        self.lon0 = float(nodes.lon.mean())
        self.length = e.length_m.to_numpy(np.float64)
        label = {node: k for k, node in enumerate(nodes.index.tolist())}
        self.u = np.array([label[x] for x in e.u.tolist()], dtype=np.int64)
        self.v = np.array([label[x] for x in e.v.tolist()], dtype=np.int64)
        self.node_north, self.node_east = self.project(nodes.lat.to_numpy(), nodes.lon.to_numpy())
        n_nodes = len(label)
        from scipy.spatial import cKDTree

        self.node_tree = cKDTree(np.c_[self.node_north, self.node_east])
        self._index = np.full(n_nodes, -1, dtype=np.int64)  # a window's junctions' rows (reset after each)
        # every edge's segments, in local metres, with where each begins along the edge (all
        # edges' shapes at once: one array of their points, a segment between two of one edge)
        counts = np.fromiter((len(g) for g in net.geometry), dtype=np.int64, count=len(e))
        pts = np.concatenate([np.asarray(g, dtype=np.float64).reshape(-1, 2) for g in net.geometry])
        gy, gx = self.project(pts[:, 1], pts[:, 0])
        owner = np.repeat(np.arange(len(e)), counts)
        seg = np.flatnonzero((owner[:-1] == owner[1:]) & (self.u[owner[:-1]] != self.v[owner[:-1]]))  # no loops
        edge = owner[seg]
        step = np.hypot(gy[seg + 1] - gy[seg], gx[seg + 1] - gx[seg])
        drawn = np.bincount(edge, weights=step, minlength=len(e))
        scale = np.divide(self.length, drawn, out=np.zeros(len(e)), where=drawn > 0)[edge]
        before = np.cumsum(step) - step  # the drawn length before each segment, over all edges
        first = np.r_[True, edge[1:] != edge[:-1]]
        at = before - np.maximum.accumulate(np.where(first, before, 0.0))  # from its edge's start
        self.x0, self.y0, self.x1, self.y1 = gx[seg], gy[seg], gx[seg + 1], gy[seg + 1]
        self.seg_edge, self.seg_at, self.seg_len = edge, at * scale, step * scale
        self.tree = shapely.STRtree(shapely.linestrings(
            np.stack([np.c_[self.x0, self.y0], np.c_[self.x1, self.y1]], axis=1)))
        # the junctions' graph: between two junctions the shortest edge (then the lowest id)
        order = np.lexsort((np.arange(len(e)), self.length))
        keep = order[self.u[order] != self.v[order]]
        pair = self.u[keep] * n_nodes + self.v[keep]
        _, first = np.unique(pair, return_index=True)
        best = keep[first]
        self.graph = sp.csr_matrix((self.length[best], (self.u[best], self.v[best])), shape=(n_nodes, n_nodes))
        self.graph_edge = sp.csr_matrix((best + 1, (self.u[best], self.v[best])), shape=(n_nodes, n_nodes))

    def project(self, lat, lon):
        """Local (north, east) metres of positions in degrees (:func:`local_metres` about the
        network's centre)."""
        return local_metres(lat, lon, lat0=self.lat0, lon0=self.lon0)

    # ----------------------------------------------------------------------------------
    # candidates
    # ----------------------------------------------------------------------------------

    def candidates(self, north, east):
        """Every fix's nearest roads within reach: (fix, edge, position along the edge, distance),
        sorted by fix, then distance, then the edge's length and id; at most ``candidates`` a fix."""
        import shapely

        fix, segi = self.tree.query(shapely.points(east, north), predicate="dwithin", distance=self.max_dist)
        px, py = east[fix], north[fix]
        dx, dy = self.x1[segi] - self.x0[segi], self.y1[segi] - self.y0[segi]
        den = dx * dx + dy * dy
        tt = np.where(den > 0, ((px - self.x0[segi]) * dx + (py - self.y0[segi]) * dy) / np.where(den > 0, den, 1.0), 0.0)
        tt = tt.clip(0.0, 1.0)
        dist = np.hypot(px - (self.x0[segi] + tt * dx), py - (self.y0[segi] + tt * dy))
        edge = self.seg_edge[segi]
        along = self.seg_at[segi] + tt * self.seg_len[segi]
        # the nearest segment of each (fix, edge)
        order = np.lexsort((segi, dist, edge, fix))
        fix, edge, along, dist = fix[order], edge[order], along[order], dist[order]
        first = np.ones(fix.size, dtype=bool)
        first[1:] = (fix[1:] != fix[:-1]) | (edge[1:] != edge[:-1])
        fix, edge, along, dist = fix[first], edge[first], along[first], dist[first]
        # the nearest roads of each fix
        order = np.lexsort((edge, self.length[edge], dist, fix))
        fix, edge, along, dist = fix[order], edge[order], along[order], dist[order]
        start = np.searchsorted(fix, fix, side="left")
        keep = (np.arange(fix.size) - start) < self.k
        return fix[keep], edge[keep], along[keep], dist[keep]

    # ----------------------------------------------------------------------------------
    # matching
    # ----------------------------------------------------------------------------------

    def match(self, lat, lon, *, t=None, speed=None) -> list[tuple]:
        """Match one trip's fixes, in pieces (:meth:`Matcher.match`): a
        fix with no road within reach, or one no road near the last fix leads to, ends a piece.

        Parameters
        ----------
        lat, lon : arrays (n,)
            The fixes (degrees).
        t, speed : arrays (n,), optional
            Their times (s) and speeds (m/s): where both speeds of a step are known, the distance
            driven is their trapezoid; elsewhere the straight distance between the fixes.

        Returns
        -------
        list of (int, list of int, numpy.ndarray, numpy.ndarray)
            Per piece of at least two fixes: its first fix's index, the matched route's edges in
            order, each fix's position along the route (m from its start) and its distance to
            the road (m).
        """
        north, east = self.project(lat, lon)
        n = north.size
        if n < 2:
            return []
        ref = np.hypot(np.diff(north), np.diff(east))
        if t is not None and speed is not None:
            t, speed = np.asarray(t, dtype=np.float64), np.asarray(speed, dtype=np.float64)
            odo = np.diff(t) * 0.5 * (speed[1:] + speed[:-1])
            ref = np.where(np.isfinite(odo), odo, ref)
        lattice = _Lattice(north, east, ref, *self.candidates(north, east))
        lattice.emit = -0.5 * (lattice.dist / self.noise) ** 2
        for w0 in range(0, n - 1, WINDOW):
            w1 = min(w0 + WINDOW, n - 1)  # steps w0 .. w1-1, fixes w0 .. w1
            self._window(lattice, w0, w1)
            lattice.step_window[w0:w1] = len(lattice.windows) - 1
        return self._pieces(lattice)

    def _window(self, lattice: _Lattice, w0: int, w1: int) -> None:
        """Viterbi's recursion over the steps ``w0 .. w1-1``, their transitions from one bounded
        Dijkstra on the junctions near the fixes ``w0 .. w1``."""
        from scipy.sparse.csgraph import dijkstra

        north, east, ref, start, count = lattice.north, lattice.east, lattice.ref, lattice.start, lattice.count
        edge, along, emit, score, back = lattice.edge, lattice.along, lattice.emit, lattice.score, lattice.back

        steps = np.arange(w0, w1)
        ni, nj = count[steps], count[steps + 1]
        pairs = ni * nj
        # the junctions within reach of the window's fixes: a route of a step longer than its
        # reach costs more than any other
        reach = float(ref[steps].max(initial=0.0)) + 6.0 * self.noise + REACH_BETAS * self.beta
        pn, pe = north[w0:w1 + 1], east[w0:w1 + 1]
        centre = ((pn.max() + pn.min()) / 2, (pe.max() + pe.min()) / 2)
        radius = math.hypot(pn.max() - pn.min(), pe.max() - pe.min()) / 2 + reach + self.max_dist
        local = np.sort(np.asarray(self.node_tree.query_ball_point(centre, radius), dtype=np.int64))
        sub = self.graph[local][:, local]
        index = self._index
        index[local] = np.arange(local.size)
        try:  # (the junctions' rows are reset whatever happens: the next window starts clean)
            cands = np.arange(start[w0], start[w1 + 1])
            sources = np.unique(index[self.v[edge[cands]]])
            sources = sources[sources >= 0]
            if sources.size:
                dmat, pred = dijkstra(sub, indices=sources, limit=reach, return_predecessors=True)
            else:
                dmat, pred = np.full((0, local.size), np.inf), np.full((0, local.size), -9999, dtype=np.int32)
            row = np.full(local.size + 1, -1, dtype=np.int64)  # the last: -1 for a junction not in the window
            row[sources] = np.arange(sources.size)
            lattice.windows.append((dmat, pred, row, local, index[self.v[edge[cands]]], index[self.u[edge[cands]]], int(start[w0])))
            # every transition of the window at once: candidate i of fix k to candidate j of fix k+1
            total = int(pairs.sum())
            offset = np.r_[0, np.cumsum(pairs)]
            k = np.repeat(np.arange(steps.size), pairs)
            r = np.arange(total) - offset[k]
            i = start[steps][k] + r // nj[k]
            j = start[steps + 1][k] + r % nj[k]
            a, b = edge[i], edge[j]
            va, ub = index[self.v[a]], index[self.u[b]]
            src = row[va]
            ok = (va >= 0) & (src >= 0) & (ub >= 0)
            via = np.full(total, np.inf)
            via[ok] = dmat[src[ok], ub[ok]]
        finally:
            index[local] = -1
        cost = np.abs((self.length[a] - along[i]) + via + along[j] - ref[steps][k])  # over the junctions
        ds = along[j] - along[i]
        stay = a == b  # on along the road (its projections step back as much as the noise says)
        cost = np.where(stay, np.minimum(np.abs(ds - ref[steps][k]), cost), cost)
        logt = np.where(np.isfinite(cost), -cost / self.beta, -np.inf)
        # Viterbi, one step at a time
        for s in range(steps.size):
            fi, fj = start[w0 + s], start[w0 + s + 1]
            if s == 0 and w0 == 0:
                score[fi:fi + ni[0]] = emit[fi:fi + ni[0]]
            if ni[s] == 0 or nj[s] == 0:
                if nj[s]:
                    score[fj:fj + nj[s]] = emit[fj:fj + nj[s]]
                continue
            m = score[fi:fi + ni[s], None] + logt[offset[s]:offset[s + 1]].reshape(ni[s], nj[s])
            best = np.argmax(m, axis=0)
            top = m[best, np.arange(nj[s])]
            if not np.isfinite(top).any():  # nothing near the last fix leads here: a new piece
                score[fj:fj + nj[s]] = emit[fj:fj + nj[s]]
                continue
            score[fj:fj + nj[s]] = top + emit[fj:fj + nj[s]]
            back[fj:fj + nj[s]] = fi + best

    def _pieces(self, lattice: _Lattice) -> list[tuple]:
        """Viterbi's paths back from each piece's last fix, and the routes between them."""
        n, start, count, fix, score, back = lattice.north.size, lattice.start, lattice.count, lattice.fix, lattice.score, lattice.back
        pieces = []
        last = n - 1
        while last >= 1:
            if count[last] == 0:
                last -= 1
                continue
            fj = start[last]
            c = fj + int(np.argmax(score[fj:fj + count[last]]))
            chain = [c]
            while back[chain[-1]] >= 0:
                chain.append(int(back[chain[-1]]))
            chain.reverse()
            first = int(fix[chain[0]])
            if len(chain) >= 2:
                pieces.append(self._route(lattice, first, chain))
            last = first - 1
        pieces.reverse()
        return pieces

    def _route(self, lattice: _Lattice, first: int, chain: list[int]):
        """One piece's route (its edges in order, the junctions' shortest paths between the
        fixes' roads), each fix's position along it and distance to it."""
        edge, along, dist, ref = lattice.edge, lattice.along, lattice.dist, lattice.ref
        route = [int(edge[chain[0]])]
        begins = 0.0  # where the route's last edge begins
        s = np.empty(len(chain))
        d = dist[np.asarray(chain)]
        s[0] = along[chain[0]]
        for q in range(1, len(chain)):
            i, j = chain[q - 1], chain[q]
            a, b = int(edge[i]), int(edge[j])
            dmat, pred, row, local, va_of, ub_of, c0 = lattice.windows[lattice.step_window[first + q - 1]]
            va, ub = int(va_of[i - c0]), int(ub_of[j - c0])
            ds = along[j] - along[i]
            stays = a == b
            if stays and va >= 0 and ub >= 0 and row[va] >= 0:  # unless around the block fits the step better
                around = self.length[a] - along[i] + dmat[row[va], ub] + along[j]
                stays = abs(ds - ref[first + q - 1]) <= abs(around - ref[first + q - 1])
            if not stays:
                p = pred[row[va]]
                nodes = [ub]
                while nodes[-1] != va:
                    nodes.append(int(p[nodes[-1]]))
                nodes.reverse()
                for x, y in zip(nodes[:-1], nodes[1:], strict=True):
                    begins += self.length[route[-1]]
                    route.append(int(self.graph_edge[local[x], local[y]]) - 1)
                begins += self.length[route[-1]]
                route.append(b)
            s[q] = begins + along[j]
        return first, route, s, d
