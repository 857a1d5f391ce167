"""What both synthetic cities are made of (:mod:`evroute.roads.synthetic`, built as a networkx graph,
and :mod:`evroute.roads.synthetic_arrays`, built from arrays for the largest sizes): the city's outline
and river, its intersections (dart throwing), its streets (a Gabriel graph with bridges and
cul-de-sacs), its arterials and its elevation field. The same code for both, so the same
(seed, size) gives the same streets in both as far as the streets go; the recipe is in
:mod:`evroute.roads.synthetic`'s docstring.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.random import Generator
from scipy.spatial import Delaunay, cKDTree

from ..errors import EvrouteError
from ..geo import EARTH_RADIUS_M

__all__ = ['LAT0', 'LON0', 'SPACING_M', 'MIN_SIZE', 'MAX_SIZE', 'CLASS_RANK', 'great_circle_m', 'check_int', 'City', 'dart_throwing', 'gabriel_edges', 'streets', 'elevation', 'wgs84', 'arterials']

LAT0 = 45.0
LON0 = 7.0
SPACING_M = 160.0  # mean distance between neighbouring intersections
MIN_SIZE = 50
MAX_SIZE = 1_000_000  # ~3M edges; the memory check of evroute.roads.network refuses what does not fit

CLASS_RANK = {"primary": 0, "secondary": 1, "tertiary": 2, "residential": 3}


def great_circle_m(lat1, lon1, lat2, *, lon2):
    """Haversine distance in metres, the same formula as ``osmnx.distance.great_circle``."""
    y1 = np.deg2rad(lat1)
    y2 = np.deg2rad(lat2)
    dy = y2 - y1
    dx = np.deg2rad(lon2) - np.deg2rad(lon1)
    h = np.sin(dy / 2) ** 2 + np.cos(y1) * np.cos(y2) * np.sin(dx / 2) ** 2
    h = np.minimum(1, h)
    return 2 * np.arcsin(np.sqrt(h)) * EARTH_RADIUS_M


def check_int(name: str, value, lo: int, *, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise EvrouteError(f"synthetic network: {name} must be an integer, got {value!r}")
    if not lo <= int(value) <= hi:
        raise EvrouteError(f"synthetic network: {name} must be in {lo}..{hi}, got {value}")
    return int(value)


class City:
    """Geometry of the made-up city in local metres (x east, y north, origin at centre)."""

    def __init__(self, rng: Generator, n_points: int):
        self.s = SPACING_M
        self.aspect = rng.uniform(1.2, 1.5)  # wider east-west than north-south
        area = n_points * self.s**2 * 1.08  # a little extra for the river band
        self.ay = math.sqrt(area / (math.pi * self.aspect))
        self.ax = self.ay * self.aspect
        # wobbly outline: radius factor 1 + sum_k a_k cos(k theta + phi_k)
        self.wob_k = np.arange(2, 6)
        self.wob_a = rng.uniform(0.0, 0.07, size=self.wob_k.size)
        self.wob_phi = rng.uniform(0.0, 2 * math.pi, size=self.wob_k.size)
        # river: x_r(y) = off + amp sin(2 pi y / lam + phi) + tilt y
        self.r_off = rng.uniform(-0.15, 0.15) * self.ax
        self.r_amp = rng.uniform(0.05, 0.12) * self.ax
        self.r_lam = rng.uniform(0.9, 1.5) * 2 * self.ay
        self.r_phi = rng.uniform(0.0, 2 * math.pi)
        self.r_tilt = rng.uniform(-0.3, 0.3)
        self.r_half_width = 0.3 * self.s

    def outline_factor(self, x, y):
        """Normalised radius; inside the city where it is <= 1."""
        u = np.asarray(x, dtype=np.float64) / self.ax
        v = np.asarray(y, dtype=np.float64) / self.ay
        theta = np.arctan2(v, u)[..., None]
        r_bound = 1.0 + np.sum(self.wob_a * np.cos(self.wob_k * theta + self.wob_phi), axis=-1)
        return np.hypot(u, v) / r_bound

    def river_dx(self, x, y):
        """Signed east-west distance from the river's centre line."""
        y = np.asarray(y)
        xr = (
            self.r_off
            + self.r_amp * np.sin(2 * math.pi * y / self.r_lam + self.r_phi)
            + self.r_tilt * y
        )
        return np.asarray(x) - xr

    def inside(self, x, y):
        return (self.outline_factor(x, y) <= 1.0) & (
            np.abs(self.river_dx(x, y)) > self.r_half_width + 0.15 * self.s
        )


def dart_throwing(rng: Generator, city: City, n: int) -> np.ndarray:
    """``n`` random points inside the city, no two closer than ``0.62 * spacing``."""
    rmin = 0.62 * city.s
    cell = rmin / math.sqrt(2)
    grid: dict[tuple[int, int], int] = {}
    pts: list[tuple[float, float]] = []
    tries = 0
    while len(pts) < n and tries < 200 * n:
        batch = 4 * (n - len(pts)) + 64
        tries += batch
        cx = rng.uniform(-1.3 * city.ax, 1.3 * city.ax, size=batch)
        cy = rng.uniform(-1.3 * city.ay, 1.3 * city.ay, size=batch)
        ok = city.inside(cx, cy)
        for x, y in zip(cx[ok].tolist(), cy[ok].tolist(), strict=True):
            gi, gj = int(math.floor(x / cell)), int(math.floor(y / cell))
            clash = False
            for di in (-2, -1, 0, 1, 2):
                for dj in (-2, -1, 0, 1, 2):
                    k = grid.get((gi + di, gj + dj))
                    if k is not None:
                        px, py = pts[k]
                        if (px - x) ** 2 + (py - y) ** 2 < rmin * rmin:
                            clash = True
                            break
                if clash:
                    break
            if clash:
                continue
            grid[(gi, gj)] = len(pts)
            pts.append((x, y))
            if len(pts) == n:
                break
    return np.asarray(pts, dtype=np.float64)


def gabriel_edges(pts: np.ndarray) -> np.ndarray:
    """Edges (i < j) of the Gabriel graph of ``pts``, from their Delaunay triangulation."""
    tri = Delaunay(pts)
    s = tri.simplices
    e = np.concatenate([s[:, [0, 1]], s[:, [1, 2]], s[:, [0, 2]]])
    e = np.unique(np.sort(e, axis=1), axis=0)
    mid = 0.5 * (pts[e[:, 0]] + pts[e[:, 1]])
    half = 0.5 * np.linalg.norm(pts[e[:, 0]] - pts[e[:, 1]], axis=1)
    tree = cKDTree(pts)
    d, idx = tree.query(mid, k=3)
    keep = np.ones(len(e), dtype=bool)
    for c in range(3):
        other = (idx[:, c] != e[:, 0]) & (idx[:, c] != e[:, 1])
        keep &= ~(other & (d[:, c] < half * (1 - 1e-9)))
    return e[keep]


def streets(rng: Generator, city: City, n_int: int, *, size: int):
    """Steps 1–2 of the recipe and the cul-de-sacs: (intersection points, every node position
    as a list, street segments (u, v), the bridges as a set of segments)."""
    s = city.s
    # 1. intersections
    pts = dart_throwing(rng, city, n_int)
    if len(pts) < 10:
        raise EvrouteError("synthetic network: could not place enough intersections")

    # 2. streets: Gabriel graph, no over-long edges, few bridges, random removals
    edges = gabriel_edges(pts)
    elen = np.linalg.norm(pts[edges[:, 0]] - pts[edges[:, 1]], axis=1)
    edges = edges[elen < 2.0 * s]
    side = np.sign(city.river_dx(pts[:, 0], pts[:, 1]))
    crossing = side[edges[:, 0]] != side[edges[:, 1]]
    cross_idx = np.flatnonzero(crossing)
    n_bridges = max(3, round(math.sqrt(n_int) / 5))
    bridge_set: set[tuple[int, int]] = set()
    if cross_idx.size:
        midy = 0.5 * (pts[edges[cross_idx, 0], 1] + pts[edges[cross_idx, 1], 1])
        order = cross_idx[np.argsort(midy, kind="stable")]
        for chunk in np.array_split(order, min(n_bridges, order.size)):
            lens = np.linalg.norm(pts[edges[chunk, 0]] - pts[edges[chunk, 1]], axis=1)
            b = chunk[int(np.argmin(lens))]
            bridge_set.add((int(edges[b, 0]), int(edges[b, 1])))
    keep = ~crossing
    for u, v in bridge_set:
        keep |= (edges[:, 0] == u) & (edges[:, 1] == v)
    edges = edges[keep]

    deg = np.bincount(edges.ravel(), minlength=len(pts))
    removed = np.zeros(len(edges), dtype=bool)
    for k in rng.permutation(len(edges)).tolist():
        if rng.random() >= 0.14:
            continue
        u, v = int(edges[k, 0]), int(edges[k, 1])
        if (u, v) in bridge_set or deg[u] <= 2 or deg[v] <= 2:
            continue
        removed[k] = True
        deg[u] -= 1
        deg[v] -= 1
    edges = edges[~removed]

    pos = [tuple(p) for p in pts.tolist()]
    edge_list: list[tuple[int, int]] = [(int(u), int(v)) for u, v in edges.tolist()]

    # cul-de-sacs: a short spur into the widest angular gap of a few intersections
    adj: dict[int, list[int]] = {i: [] for i in range(len(pos))}
    for u, v in edge_list:
        adj[u].append(v)
        adj[v].append(u)
    tree = cKDTree(pts)
    n_dead = max(3, size // 40)
    dead_nodes: set[int] = set()
    gap = 0.4 * s  # cul-de-sac ends at least this far apart, found through a grid of cells this wide
    dead_cells: dict[tuple[int, int], list[int]] = {}
    for i in rng.permutation(len(pts)).tolist():
        if len(dead_nodes) >= n_dead:
            break
        if not 2 <= len(adj[i]) <= 4:
            continue
        px, py = pos[i]
        angs = sorted(math.atan2(pos[j][1] - py, pos[j][0] - px) for j in adj[i])
        gaps = [(angs[(k + 1) % len(angs)] - angs[k]) % (2 * math.pi) for k in range(len(angs))]
        k = int(np.argmax(gaps))
        if gaps[k] < math.radians(120):
            continue
        direction = angs[k] + gaps[k] / 2
        dist = rng.uniform(0.45, 0.7) * s
        qx, qy = px + dist * math.cos(direction), py + dist * math.sin(direction)
        if not city.inside(qx, qy) or tree.query([qx, qy])[0] < 0.4 * s:
            continue
        cx, cy = math.floor(qx / gap), math.floor(qy / gap)
        if any(math.dist((qx, qy), pos[j]) < gap for gx in (cx - 1, cx, cx + 1) for gy in (cy - 1, cy, cy + 1)
               for j in dead_cells.get((gx, gy), ())):
            continue
        new = len(pos)
        pos.append((qx, qy))
        adj[new] = [i]
        adj[i].append(new)
        edge_list.append((i, new))
        dead_nodes.add(new)
        dead_cells.setdefault((cx, cy), []).append(new)

    return pts, pos, edge_list, bridge_set


def elevation(rng: Generator, city: City, P: np.ndarray) -> np.ndarray:
    """Step 5: a smooth field (slope + hills + ridge − river valley) at the points ``P`` (local
    metres), rescaled to roughly 0–250 m."""
    s = city.s
    X, Y = P[:, 0], P[:, 1]
    R = max(city.ax, city.ay)
    slope_dir = rng.uniform(0, 2 * math.pi)
    field = rng.uniform(0.3, 0.8) * (X * math.cos(slope_dir) + Y * math.sin(slope_dir)) / R
    for _ in range(int(rng.integers(3, 7))):
        cx, cy = rng.uniform(-city.ax, city.ax), rng.uniform(-city.ay, city.ay)
        rad = rng.uniform(0.15, 0.35) * R
        amp = rng.uniform(0.4, 1.0) * (1 if rng.random() < 0.8 else -0.6)
        field += amp * np.exp(-((X - cx) ** 2 + (Y - cy) ** 2) / (2 * rad**2))
    rdir = rng.uniform(0, math.pi)
    rcx, rcy = rng.uniform(-0.6, 0.6) * city.ax, rng.uniform(-0.6, 0.6) * city.ay
    along = (X - rcx) * math.cos(rdir) + (Y - rcy) * math.sin(rdir)
    across = -(X - rcx) * math.sin(rdir) + (Y - rcy) * math.cos(rdir)
    field += rng.uniform(0.5, 0.9) * np.exp(
        -(along**2) / (2 * (0.45 * R) ** 2) - across**2 / (2 * (0.08 * R) ** 2)
    )
    field -= rng.uniform(0.3, 0.6) * np.exp(-((city.river_dx(X, Y) / (2.5 * s)) ** 2))
    lo, hi = rng.uniform(2.0, 20.0), rng.uniform(200.0, 250.0)
    fmin, fmax = float(field.min()), float(field.max())
    ele = np.round(lo + (field - fmin) / max(fmax - fmin, 1e-12) * (hi - lo), 1)

    return ele


def wgs84(P: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Local metres → (lat, lon) around (LAT0, LON0), rounded to 7 decimals like OSM."""
    deg = 180.0 / math.pi
    lat = np.round(LAT0 + P[:, 1] / EARTH_RADIUS_M * deg, 7)
    lon = np.round(LON0 + P[:, 0] / (EARTH_RADIUS_M * math.cos(math.radians(LAT0))) * deg, 7)
    return lat, lon


def arterials(rng: Generator, city: City, mpts: np.ndarray, *, nearest) -> list[tuple[int, int, str]]:
    """Step 3's skeleton, as (from, to, class) of the street paths to mark: two primary axes
    across the main component ``mpts`` (points), a secondary ring of six points and the two
    secondary diagonals; ``nearest(x, y)`` names the vertex nearest a point (one draw of ``rng``)."""
    xmin, ymin = mpts.min(axis=0)
    xmax, ymax = mpts.max(axis=0)
    ymid = float(np.median(mpts[:, 1]))
    xmid = float(np.median(mpts[:, 0]))
    out = [(nearest(xmin, ymid), nearest(xmax, ymid), "primary"), (nearest(xmid, ymin), nearest(xmid, ymax), "primary")]
    phase = rng.uniform(0, 2 * math.pi)
    ring = [nearest(0.55 * city.ax * math.cos(phase + t), 0.55 * city.ay * math.sin(phase + t))
            for t in np.linspace(0, 2 * math.pi, 7)[:-1].tolist()]
    out += [(a, b, "secondary") for a, b in zip(ring, ring[1:] + ring[:1], strict=True)]
    out += [(nearest(xmin, ymin), nearest(xmax, ymax), "secondary"), (nearest(xmin, ymax), nearest(xmax, ymin), "secondary")]
    return out
