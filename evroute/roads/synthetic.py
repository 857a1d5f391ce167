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
from scipy.spatial import ConvexHull, cKDTree

from ..errors import EvrouteError
from ..geo import EARTH_RADIUS_M
from .synthetic_arrays import synthetic_arrays  # noqa: F401  (the array-built city: its own module, importable here too)
from .synthetic_city import (
    CLASS_RANK,
    MAX_SIZE,
    MIN_SIZE,
    City,
    arterials,
    check_int,
    elevation,
    great_circle_m,
    streets,
    wgs84,
)

__all__ = ["NODE_ID0", "SYNTHETIC_DEFAULT", "WAY_ID0", "great_circle_m", "route_points_of", "synthetic_arrays", "synthetic_graph", "synthetic_route_points"]

SYNTHETIC_DEFAULT = {"seed": 0, "size": 400}

_NODE_ID0 = 1_000_001
_WAY_ID0 = 5_000_001
#: The id of node 0 and of way 0 in a synthetic city (OSM-like positive ids).
NODE_ID0, WAY_ID0 = _NODE_ID0, _WAY_ID0
_NAME_PREFIX = {
    "primary": "Corso",
    "secondary": "Viale",
    "tertiary": "Via",
    "residential": "Vicolo",
}


def _turn_angle(a, b, c) -> float:
    """Angle (radians) between the directions a->b and b->c."""
    v1 = b - a
    v2 = c - b
    cosang = float(np.dot(v1, v2) / (np.linalg.norm(v1) * np.linalg.norm(v2)))
    return math.acos(max(-1.0, min(1.0, cosang)))


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
    seed = check_int("seed", seed, 0, hi=2**63 - 1)
    size = check_int("size", size, MIN_SIZE, hi=MAX_SIZE)
    rng = Generator(PCG64(seed))
    n_int = max(40, round(size * 0.8))
    city = City(rng, n_int)
    s = city.s

    pts, pos, edge_list, bridge_set = streets(rng, city, n_int, size=size)

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
            if CLASS_RANK[cls] < CLASS_RANK[old]:
                klass[key] = cls

    for a, b, cls in arterials(rng, city, mpts, nearest=nearest):
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
    order = sorted(range(len(final_edges)), key=lambda k: (CLASS_RANK[seg_class[k]], k))
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
    ele = elevation(rng, city, P)

    lat, lon = wgs84(P)

    # assemble like osmnx: nodes {y, x, tags}; edges {osmid, tags, oneway, reversed, length}
    G = nx.MultiDiGraph(crs="epsg:4326", name=f"evroute synthetic city (seed={seed}, size={size})")
    used_nodes = sorted({n for seq, _c, _b in ways for n in seq})
    node_id = {i: _NODE_ID0 + k for k, i in enumerate(used_nodes)}
    for i in used_nodes:
        G.add_node(node_id[i], y=float(lat[i]), x=float(lon[i]), ele=float(ele[i]))
    for w, (seq, _cls, _b) in enumerate(ways):
        osmid = _WAY_ID0 + w
        for u, v in zip(seq[:-1], seq[1:], strict=True):
            length = float(great_circle_m(lat[u], lon[u], lat[v], lon2=lon[v]))
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
                    *,
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
