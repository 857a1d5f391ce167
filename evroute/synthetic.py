"""The embedded synthetic network: a deterministic, irregular, hilly made-up city.

:func:`synthetic_graph` builds a road graph shaped like what
``osmnx.graph_from_xml(..., simplify=False)`` returns for a real OSM extract (before
simplification), so the same processing pipeline (drivable filter, ``simplify_graph``,
largest strongly connected component, speeds, grades) runs on it unchanged:

* graph attributes ``crs="epsg:4326"`` and ``name``;
* nodes with positive integer ids and attributes ``y`` (lat), ``x`` (lon) and ``ele``
  (metres, a float; osmnx would give the OSM tag as a string);
* directed edges (key 0) with ``osmid`` (the int way id, shared by all segments of a
  street), ``highway``, ``name``, ``maxspeed`` (km/h as a string, missing on ~30% of the
  edges), ``lanes`` (sometimes), ``bridge`` (on bridges), ``oneway`` (bool), ``reversed``
  and ``length`` (great-circle metres between the endpoints, as osmnx computes it).

How the city is made (all randomness from one ``numpy.random.Generator(PCG64(seed))``):

1. intersections are random points with a minimum spacing (dart throwing) inside a
   wobbly ellipse around 45.0 N, 7.0 E, leaving out a sinuous, roughly north–south river;
2. streets are the Gabriel graph of those points (a sub-graph of their Delaunay
   triangulation), minus over-long edges, minus all river crossings but a few bridges,
   minus a random ~12% of the rest; a few cul-de-sacs are added;
3. road classes come from shortest paths: two primary arterials (west–east, south–north),
   a secondary ring road and diagonals, tertiary links between random far-apart points;
   everything else is residential; some long residential/tertiary segments get a bend
   (an extra degree-2 node, as OSM ways have);
4. edges are chained into OSM-like ways by going straight on through intersections;
   some residential and tertiary ways become one-way when that keeps the street network
   strongly connected;
5. elevation is a smooth field: a regional slope, a few Gaussian hills, a ridge and the
   river valley, rescaled to span roughly 0–250 m.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import scipy.sparse as sp
from numpy.random import PCG64, Generator
from scipy.sparse import csgraph
from scipy.spatial import ConvexHull, Delaunay, cKDTree

from evroute.errors import EvrouteError
from evroute.geo import EARTH_RADIUS_M

__all__ = ["NODE_ID0", "SYNTHETIC_DEFAULT", "WAY_ID0", "great_circle_m", "route_points_of", "synthetic_arrays", "synthetic_graph", "synthetic_route_points"]

#: Parameters of the built-in synthetic network.
SYNTHETIC_DEFAULT = {"seed": 0, "size": 400}

_LAT0 = 45.0
_LON0 = 7.0
_SPACING_M = 160.0  # mean distance between neighbouring intersections
_NODE_ID0 = 1_000_001
_WAY_ID0 = 5_000_001
#: The id of node 0 and of way 0 in a synthetic city (OSM-like positive ids).
NODE_ID0, WAY_ID0 = _NODE_ID0, _WAY_ID0
_MIN_SIZE = 50
_MAX_SIZE = 1_000_000  # ~3M edges; the memory check of evroute.network refuses what does not fit

_CLASS_RANK = {"primary": 0, "secondary": 1, "tertiary": 2, "residential": 3}
_NAME_PREFIX = {
    "primary": "Corso",
    "secondary": "Viale",
    "tertiary": "Via",
    "residential": "Vicolo",
}


def great_circle_m(lat1, lon1, lat2, lon2):
    """Haversine distance in metres, the same formula as ``osmnx.distance.great_circle``."""
    y1 = np.deg2rad(lat1)
    y2 = np.deg2rad(lat2)
    dy = y2 - y1
    dx = np.deg2rad(lon2) - np.deg2rad(lon1)
    h = np.sin(dy / 2) ** 2 + np.cos(y1) * np.cos(y2) * np.sin(dx / 2) ** 2
    h = np.minimum(1, h)
    return 2 * np.arcsin(np.sqrt(h)) * EARTH_RADIUS_M


def _check_int(name: str, value, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise EvrouteError(f"synthetic network: {name} must be an integer, got {value!r}")
    if not lo <= int(value) <= hi:
        raise EvrouteError(f"synthetic network: {name} must be in {lo}..{hi}, got {value}")
    return int(value)


class _City:
    """Geometry of the made-up city in local metres (x east, y north, origin at centre)."""

    def __init__(self, rng: Generator, n_points: int):
        self.s = _SPACING_M
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


def _dart_throwing(rng: Generator, city: _City, n: int) -> np.ndarray:
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


def _gabriel_edges(pts: np.ndarray) -> np.ndarray:
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


def _turn_angle(a, b, c) -> float:
    """Angle (radians) between the directions a->b and b->c."""
    v1 = b - a
    v2 = c - b
    cosang = float(np.dot(v1, v2) / (np.linalg.norm(v1) * np.linalg.norm(v2)))
    return math.acos(max(-1.0, min(1.0, cosang)))


def _streets(rng: Generator, city: _City, n_int: int, size: int):
    """Steps 1–2 of the recipe and the cul-de-sacs: (intersection points, every node position
    as a list, street segments (u, v), the bridges as a set of segments)."""
    s = city.s
    # 1. intersections
    pts = _dart_throwing(rng, city, n_int)
    if len(pts) < 10:
        raise EvrouteError("synthetic network: could not place enough intersections")

    # 2. streets: Gabriel graph, no over-long edges, few bridges, random removals
    edges = _gabriel_edges(pts)
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


def _elevation(rng: Generator, city: _City, P: np.ndarray) -> np.ndarray:
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


def _wgs84(P: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Local metres → (lat, lon) around (_LAT0, _LON0), rounded to 7 decimals like OSM."""
    deg = 180.0 / math.pi
    lat = np.round(_LAT0 + P[:, 1] / EARTH_RADIUS_M * deg, 7)
    lon = np.round(_LON0 + P[:, 0] / (EARTH_RADIUS_M * math.cos(math.radians(_LAT0))) * deg, 7)
    return lat, lon


def _arterials(rng: Generator, city: _City, mpts: np.ndarray, nearest) -> list[tuple[int, int, str]]:
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


def synthetic_graph(seed: int = 0, size: int = 400) -> nx.MultiDiGraph:
    """Build the synthetic city as an unsimplified osmnx-style ``MultiDiGraph``.

    Parameters
    ----------
    seed : int
        Seed of the ``numpy.random.Generator(PCG64(seed))`` that draws everything.
        The same ``(seed, size)`` gives the same graph, attribute for attribute.
    size : int
        Approximate number of nodes (intersections, bends and dead ends), 50..200000.
        ``size=400`` gives roughly 1,000–1,600 directed edges over a city ~4 km across.

    Returns
    -------
    networkx.MultiDiGraph
        Graph shaped like ``osmnx.graph_from_xml(..., simplify=False)``; see the module
        docstring for its attributes.
    """
    seed = _check_int("seed", seed, 0, 2**63 - 1)
    size = _check_int("size", size, _MIN_SIZE, _MAX_SIZE)
    rng = Generator(PCG64(seed))
    n_int = max(40, round(size * 0.8))
    city = _City(rng, n_int)
    s = city.s

    pts, pos, edge_list, bridge_set = _streets(rng, city, n_int, size)

    # 3. road classes from shortest paths on the undirected street graph (SciPy's Dijkstra:
    # one single-source search per path, in C; the city's size grows the number of paths)
    ug = nx.Graph()
    ug.add_nodes_from(range(len(pos)))
    for u, v in edge_list:
        ug.add_edge(u, v, w=math.dist(pos[u], pos[v]))
    main = sorted(max(nx.connected_components(ug), key=lambda c: (len(c), -min(c))))
    und = np.array([(u, v) for u, v in ug.edges()], dtype=np.int64).reshape(-1, 2)
    und_w = np.array([ug.edges[u, v]["w"] for u, v in und], dtype=float)
    street = sp.csr_matrix((np.concatenate([und_w, und_w]), (np.concatenate([und[:, 0], und[:, 1]]),
                                                             np.concatenate([und[:, 1], und[:, 0]]))),
                           shape=(len(pos), len(pos)))
    mpts = np.asarray([pos[i] for i in main])
    mtree = cKDTree(mpts)

    def nearest(x: float, y: float) -> int:
        return main[int(mtree.query([x, y])[1])]

    klass: dict[tuple[int, int], str] = {}

    def mark(a: int, b: int, cls: str) -> None:
        if a == b:
            return
        pred = csgraph.dijkstra(street, indices=a, return_predecessors=True)[1]
        path = [b]
        while path[-1] != a:
            path.append(int(pred[path[-1]]))
        for u, v in zip(path[:-1], path[1:], strict=True):
            key = (min(u, v), max(u, v))
            old = klass.get(key, "residential")
            if _CLASS_RANK[cls] < _CLASS_RANK[old]:
                klass[key] = cls

    for a, b, cls in _arterials(rng, city, mpts, nearest):
        mark(a, b, cls)
    xmin, ymin = mpts.min(axis=0)
    xmax, ymax = mpts.max(axis=0)
    diam = float(np.hypot(xmax - xmin, ymax - ymin))
    n_tert = max(3, size // 70)
    done = 0
    for _ in range(50 * n_tert):
        if done >= n_tert:
            break
        a, b = (main[int(k)] for k in rng.integers(0, len(main), size=2))
        if math.dist(pos[a], pos[b]) < 0.35 * diam:
            continue
        mark(a, b, "tertiary")
        done += 1

    # bends: split some long minor segments with a slightly offset degree-2 node
    seg_class: list[str] = []
    bridge_flag: list[bool] = []
    final_edges: list[tuple[int, int]] = []
    for u, v in edge_list:
        key = (min(u, v), max(u, v))
        cls = klass.get(key, "residential")
        is_bridge = key in bridge_set
        length = math.dist(pos[u], pos[v])
        if (
            not is_bridge
            and cls in ("tertiary", "residential")
            and length > 1.05 * s
            and rng.random() < 0.3
        ):
            (ux, uy), (vx, vy) = pos[u], pos[v]
            off = rng.uniform(-0.12, 0.12) * length
            nx_, ny_ = -(vy - uy) / length, (vx - ux) / length
            m = len(pos)
            pos.append((0.5 * (ux + vx) + off * nx_, 0.5 * (uy + vy) + off * ny_))
            for a, b in ((u, m), (m, v)):
                final_edges.append((a, b))
                seg_class.append(cls)
                bridge_flag.append(False)
        else:
            final_edges.append((u, v))
            seg_class.append(cls)
            bridge_flag.append(is_bridge)

    # 4. chain segments into ways: go as straight as possible through intersections
    P = np.asarray(pos)
    inc: dict[int, list[int]] = {i: [] for i in range(len(pos))}
    for k, (u, v) in enumerate(final_edges):
        inc[u].append(k)
        inc[v].append(k)
    used = np.zeros(len(final_edges), dtype=bool)
    ways: list[tuple[list[int], str, bool]] = []
    order = sorted(range(len(final_edges)), key=lambda k: (_CLASS_RANK[seg_class[k]], k))
    max_segments = 14
    for k0 in order:
        if used[k0]:
            continue
        used[k0] = True
        key0 = (seg_class[k0], bridge_flag[k0])
        seq = list(final_edges[k0])
        for at_end in (True, False):
            while len(seq) - 1 < max_segments:
                a, b = (seq[-2], seq[-1]) if at_end else (seq[1], seq[0])
                best, best_ang = None, math.radians(40)
                for k in inc[b]:
                    if used[k] or (seg_class[k], bridge_flag[k]) != key0:
                        continue
                    c = final_edges[k][0] if final_edges[k][1] == b else final_edges[k][1]
                    if c in seq:
                        continue
                    ang = _turn_angle(P[a], P[b], P[c])
                    if ang < best_ang:
                        best, best_ang = (k, c), ang
                if best is None:
                    break
                used[best[0]] = True
                if at_end:
                    seq.append(best[1])
                else:
                    seq.insert(0, best[1])
        ways.append((seq, key0[0], key0[1]))

    # way tags
    n_seg_total = len(final_edges)
    no_speed = np.zeros(len(ways), dtype=bool)
    count = 0
    for w in rng.permutation(len(ways)).tolist():
        if count >= 0.3 * n_seg_total:
            break
        no_speed[w] = True
        count += len(ways[w][0]) - 1
    speed_choices = {
        "primary": (["70", "50"], [0.5, 0.5]),
        "secondary": (["50", "60"], [0.8, 0.2]),
        "tertiary": (["50", "40"], [0.6, 0.4]),
        "residential": (["30", "50", "20"], [0.6, 0.3, 0.1]),
    }
    tags: list[dict] = []
    for w, (_seq, cls, is_bridge) in enumerate(ways):
        t: dict = {"highway": cls, "name": f"{_NAME_PREFIX[cls]} {w + 1}"}
        choices, probs = speed_choices[cls]
        speed = str(rng.choice(choices, p=probs))
        if not no_speed[w]:
            t["maxspeed"] = speed
        if cls == "primary":
            t["lanes"] = "4"
        elif cls == "secondary":
            t["lanes"] = "2"
        elif cls == "tertiary" and rng.random() < 0.5:
            t["lanes"] = "2"
        if is_bridge:
            t["bridge"] = "yes"
        tags.append(t)

    # one-way streets, only where the street network stays strongly connected
    dg = nx.DiGraph()
    dg.add_nodes_from(range(len(pos)))
    for seq, _cls, _b in ways:
        for u, v in zip(seq[:-1], seq[1:], strict=True):
            dg.add_edge(u, v)
            dg.add_edge(v, u)
    oneway = np.zeros(len(ways), dtype=bool)
    for w in rng.permutation(len(ways)).tolist():
        seq, cls, is_bridge = ways[w]
        p = {"residential": 0.3, "tertiary": 0.12}.get(cls, 0.0)
        if is_bridge or rng.random() >= p:
            continue
        if rng.random() < 0.5:
            seq.reverse()
        back = list(zip(seq[1:], seq[:-1], strict=True))
        dg.remove_edges_from(back)
        if nx.has_path(dg, seq[-1], seq[0]):
            oneway[w] = True
        else:
            dg.add_edges_from(back)

    # 5. elevation
    ele = _elevation(rng, city, P)

    lat, lon = _wgs84(P)

    # assemble like osmnx: nodes {y, x, tags}; edges {osmid, tags, oneway, reversed, length}
    G = nx.MultiDiGraph(crs="epsg:4326", name=f"evroute synthetic city (seed={seed}, size={size})")
    used_nodes = sorted({n for seq, _c, _b in ways for n in seq})
    node_id = {i: _NODE_ID0 + k for k, i in enumerate(used_nodes)}
    for i in used_nodes:
        G.add_node(node_id[i], y=float(lat[i]), x=float(lon[i]), ele=float(ele[i]))
    for w, (seq, _cls, _b) in enumerate(ways):
        osmid = _WAY_ID0 + w
        for u, v in zip(seq[:-1], seq[1:], strict=True):
            length = float(great_circle_m(lat[u], lon[u], lat[v], lon[v]))
            directions = [(u, v, False)] if oneway[w] else [(u, v, False), (v, u, True)]
            for a, b, rev in directions:
                attrs = {"osmid": osmid, **tags[w], "oneway": bool(oneway[w])}
                attrs["reversed"] = rev
                attrs["length"] = length
                G.add_edge(node_id[a], node_id[b], key=0, **attrs)
    return G


def _lscc_nodes(graph: nx.MultiDiGraph) -> list:
    comps = list(nx.strongly_connected_components(graph))
    if not comps:
        raise EvrouteError("synthetic route points: the graph has no nodes")
    best = max(comps, key=lambda c: (len(c), -min(c)))
    return sorted(best)


def synthetic_route_points(
    graph: nx.MultiDiGraph,
) -> dict[str, tuple[tuple[float, float], tuple[float, float]]]:
    """Start and end points of the synthetic network's two routes.

    Parameters
    ----------
    graph : networkx.MultiDiGraph
        The synthetic graph (raw from :func:`synthetic_graph`, or processed: any graph
        whose nodes carry ``x``, ``y`` and ``ele``).

    Returns
    -------
    dict
        ``{"A": ((lat, lon), (lat, lon)), "B": (...)}``, start then end, each an
        intersection of the largest strongly connected component. ``A`` crosses the
        city from its west edge to its east edge (over the river, many alternative
        routes); ``B`` climbs from a low point to a high point at least half the city's
        diameter away, maximising the height gained.
    """
    nodes = _lscc_nodes(graph)
    und = graph.to_undirected(as_view=True)
    junctions = [n for n in nodes if len(set(und.neighbors(n))) != 2]
    if len(junctions) >= 10:
        nodes = junctions
    try:
        lat = np.array([float(graph.nodes[n]["y"]) for n in nodes])
        lon = np.array([float(graph.nodes[n]["x"]) for n in nodes])
        ele = np.array([float(graph.nodes[n]["ele"]) for n in nodes])
    except (KeyError, TypeError, ValueError) as exc:
        raise EvrouteError(f"synthetic route points: node without x/y/ele ({exc})") from None
    return route_points_of(lat, lon, ele)


def route_points_of(lat: np.ndarray, lon: np.ndarray, ele: np.ndarray,
                    max_extremes: int | None = None) -> dict[str, tuple[tuple[float, float], tuple[float, float]]]:
    """The two routes' end points (see :func:`synthetic_route_points`) among candidate
    intersections given as arrays.

    Parameters
    ----------
    lat, lon, ele : numpy.ndarray
        The candidates (intersections of the largest strongly connected component).
    max_extremes : int, optional
        At most this many lowest and highest candidates are paired for route B (the pairing
        is a q×q distance matrix; None: a quarter of the candidates, as for every networkx-built
        city).
    """
    nodes = np.arange(lat.size)
    lat0 = float(np.mean(lat))
    m_per_deg = EARTH_RADIUS_M * math.pi / 180.0
    X = (lon - float(np.mean(lon))) * m_per_deg * math.cos(math.radians(lat0))
    Y = (lat - lat0) * m_per_deg
    XY = np.column_stack([X, Y])

    # city diameter: the largest distance between convex-hull vertices
    try:
        hull = XY[ConvexHull(XY).vertices]
    except Exception:  # degenerate (collinear) point sets
        hull = XY
    diam = float(np.max(np.linalg.norm(hull[:, None, :] - hull[None, :, :], axis=2)))

    # A: west edge -> east edge, near the middle latitude
    ymid = float(np.median(Y))
    west = int(np.argmin(X - X.min() + 0.5 * np.abs(Y - ymid)))
    east = int(np.argmin(X.max() - X + 0.5 * np.abs(Y - ymid)))

    # B: the biggest climb between points at least half the diameter apart
    order = np.argsort(ele, kind="stable")
    q = max(10, len(nodes) // 4)
    if max_extremes is not None:
        q = min(q, max_extremes)
    low, high = order[:q], order[-q:]
    dist = np.linalg.norm(XY[low][:, None, :] - XY[high][None, :, :], axis=2)
    gain = ele[high][None, :] - ele[low][:, None]
    gain = np.where(dist >= 0.5 * diam, gain, -np.inf)
    if np.isfinite(gain).any():
        i, j = np.unravel_index(int(np.argmax(gain)), gain.shape)
        start, end = int(low[i]), int(high[j])
    else:  # no pair far enough apart among the extremes: lowest and farthest-from-it
        start = int(order[0])
        end = int(np.argmax(np.linalg.norm(XY - XY[start], axis=1)))

    def pt(k: int) -> tuple[float, float]:
        return (float(lat[k]), float(lon[k]))

    return {"A": (pt(west), pt(east)), "B": (pt(start), pt(end))}


#: Tertiary links of the array-built city join points this far apart (metres): an arterial
#: grid at a city's scale, whatever the city's size.
_TERTIARY_SPAN_M = (1500.0, 4000.0)


def synthetic_arrays(seed: int = 0, size: int = 400) -> dict:
    """The synthetic city built from arrays only, for sizes whose networkx graph would not fit
    in memory (about 24 kB an edge; ``synthetic-1000k`` would need 24 GB).

    The same recipe as :func:`synthetic_graph` for the points, streets, bridges, cul-de-sacs and
    elevation (the same code, so the same (seed, size) gives the same streets as far as there),
    then, with arrays and SciPy's graph routines:

    3. road classes: primary arterials and the secondary ring and diagonals as in
       :func:`synthetic_graph`; tertiary links between random points 1.5–4 km apart (a city's
       arterial grid, not links across the whole map: each is a Dijkstra search limited to a
       few kilometres);
    4. every street segment is its own way (no bends, no chaining): the network needs no
       simplification; speed limits, lanes and one-way streets are drawn per segment, and a
       one-way street that breaks strong connectivity is made two-way again (components by
       SciPy, repeated until nothing changes).

    It is a different city from :func:`synthetic_graph`'s for the same (seed, size) from step 3
    on. Used by :func:`evroute.network.load_network` from
    :data:`evroute.network.ARRAY_BUILD_FROM_EDGES` edges.

    Parameters
    ----------
    seed : int
    size : int
        Approximate number of intersections.

    Returns
    -------
    dict of numpy.ndarray
        ``lat``, ``lon``, ``ele`` per node; per street segment ``u``, ``v`` (node indices),
        ``highway`` (str), ``maxspeed_kmh`` (NaN where the tag is missing), ``lanes`` (str,
        ``""`` if none), ``oneway`` (bool; one-way segments run u → v) and ``bridge`` (bool).
    """
    seed = _check_int("seed", seed, 0, 2**63 - 1)
    size = _check_int("size", size, _MIN_SIZE, _MAX_SIZE)
    rng = Generator(PCG64(seed))
    n_int = max(40, round(size * 0.8))
    city = _City(rng, n_int)
    pts, pos, edge_list, bridge_set = _streets(rng, city, n_int, size)
    P = np.asarray(pos, dtype=np.float64)
    seg = np.asarray(edge_list, dtype=np.int64).reshape(-1, 2)
    n, m = len(P), len(seg)
    w = np.linalg.norm(P[seg[:, 0]] - P[seg[:, 1]], axis=1)
    street = sp.csr_matrix((np.r_[w, w], (np.r_[seg[:, 0], seg[:, 1]], np.r_[seg[:, 1], seg[:, 0]])), shape=(n, n))
    key = np.minimum(seg[:, 0], seg[:, 1]) * n + np.maximum(seg[:, 0], seg[:, 1])
    key_order = np.argsort(key, kind="stable")
    rank = np.full(m, _CLASS_RANK["residential"], dtype=np.int64)

    # 3. road classes
    _, comp = csgraph.connected_components(street, directed=False)
    sizes = np.bincount(comp)
    main = np.flatnonzero(comp == int(np.argmax(sizes)))  # (argmax: the lowest label on a tie)
    mpts = P[main]
    mtree = cKDTree(mpts)

    def nearest(x: float, y: float) -> int:
        return int(main[int(mtree.query([x, y])[1])])

    def mark(a: int, b: int, cls: str, limit: float = np.inf) -> None:
        if a == b:
            return
        pred = csgraph.dijkstra(street, indices=a, return_predecessors=True, limit=limit)[1]
        if pred[b] < 0:
            return
        path = [b]
        while path[-1] != a:
            path.append(int(pred[path[-1]]))
        path = np.asarray(path, dtype=np.int64)
        k = np.minimum(path[:-1], path[1:]) * n + np.maximum(path[:-1], path[1:])
        ids = key_order[np.searchsorted(key, k, sorter=key_order)]
        rank[ids] = np.minimum(rank[ids], _CLASS_RANK[cls])

    for a, b, cls in _arterials(rng, city, mpts, nearest):
        mark(a, b, cls)
    n_tert = max(3, size // 70)
    lo_span, hi_span = _TERTIARY_SPAN_M
    for _ in range(n_tert):
        a = int(main[int(rng.integers(0, main.size))])
        dist = rng.uniform(lo_span, hi_span)
        ang = rng.uniform(0.0, 2 * math.pi)
        b = nearest(P[a, 0] + dist * math.cos(ang), P[a, 1] + dist * math.sin(ang))
        mark(a, b, "tertiary", limit=2.0 * hi_span)

    # 4. tags per segment
    names = np.array(sorted(_CLASS_RANK, key=_CLASS_RANK.get))
    highway = names[rank]
    bridge = np.zeros(m, dtype=bool)
    for u, v in bridge_set:
        bridge[key_order[np.searchsorted(key, min(u, v) * n + max(u, v), sorter=key_order)]] = True
    speed_choices = {"primary": ([70, 50], [0.5, 0.5]), "secondary": ([50, 60], [0.8, 0.2]),
                     "tertiary": ([50, 40], [0.6, 0.4]), "residential": ([30, 50, 20], [0.6, 0.3, 0.1])}
    maxspeed = np.empty(m)
    for cls, (choices, probs) in speed_choices.items():
        sel = np.flatnonzero(highway == cls)
        maxspeed[sel] = rng.choice(np.asarray(choices, dtype=np.float64), size=sel.size, p=probs)
    maxspeed[rng.random(m) < 0.3] = np.nan
    lanes = np.full(m, "", dtype=object)
    lanes[highway == "primary"] = "4"
    lanes[highway == "secondary"] = "2"
    lanes[(highway == "tertiary") & (rng.random(m) < 0.5)] = "2"
    p_oneway = np.where(highway == "residential", 0.3, np.where(highway == "tertiary", 0.12, 0.0))
    oneway = (rng.random(m) < p_oneway) & ~bridge
    flip = rng.random(m) < 0.5
    seg[flip] = seg[flip][:, ::-1]
    used = np.zeros(n, dtype=bool)
    used[seg.ravel()] = True
    while True:  # one-way streets only where the street network stays strongly connected
        src = np.r_[seg[:, 0], seg[~oneway, 1]]
        dst = np.r_[seg[:, 1], seg[~oneway, 0]]
        g = sp.csr_matrix((np.ones(src.size), (src, dst)), shape=(n, n))
        _, lab = csgraph.connected_components(g, directed=True, connection="strong")
        cut = oneway & (lab[seg[:, 0]] != lab[seg[:, 1]])
        if not cut.any():
            break
        oneway &= ~cut

    # 5. elevation
    ele = _elevation(rng, city, P)
    lat, lon = _wgs84(P)
    return {"lat": lat, "lon": lon, "ele": ele, "u": seg[:, 0].copy(), "v": seg[:, 1].copy(),
            "highway": highway, "maxspeed_kmh": maxspeed, "lanes": lanes, "oneway": oneway, "bridge": bridge}
