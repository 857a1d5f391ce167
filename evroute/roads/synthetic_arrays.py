"""The synthetic city built from arrays only (:func:`synthetic_arrays`), for the sizes whose
networkx graph would not fit in memory: the same points, streets and elevation as
:mod:`evroute.roads.synthetic`'s city (:mod:`evroute.roads.synthetic_city`), then its own road classes and
ways, with arrays and SciPy's graph routines.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
from numpy.random import PCG64, Generator
from scipy.sparse import csgraph
from scipy.spatial import cKDTree

from .synthetic_city import (
    CLASS_RANK,
    MAX_SIZE,
    MIN_SIZE,
    City,
    arterials,
    check_int,
    elevation,
    streets,
    wgs84,
)

__all__ = ["synthetic_arrays"]

_TERTIARY_SPAN_M = (1500.0, 4000.0)


def synthetic_arrays(seed: int = 0, size: int = 400) -> dict:
    """The synthetic city built from arrays only, for sizes whose networkx graph would not fit
    in memory (about 24 kB an edge; ``synthetic-1000k`` would need 24 GB).

    The same recipe as :func:`evroute.roads.synthetic.synthetic_graph` for the points, streets, bridges, cul-de-sacs and
    elevation (the same code, so the same (seed, size) gives the same streets as far as there),
    then, with arrays and SciPy's graph routines:

    3. road classes: primary arterials and the secondary ring and diagonals as in
       :func:`evroute.roads.synthetic.synthetic_graph`; tertiary links between random points 1.5–4 km apart (a city's
       arterial grid, not links across the whole map: each is a Dijkstra search limited to a
       few kilometres);
    4. every street segment is its own way (no bends, no chaining): the network needs no
       simplification; speed limits, lanes and one-way streets are drawn per segment, and a
       one-way street that breaks strong connectivity is made two-way again (components by
       SciPy, repeated until nothing changes).

    It is a different city from :func:`evroute.roads.synthetic.synthetic_graph`'s for the same (seed, size) from step 3
    on. Used by :func:`evroute.roads.network.load_network` from
    :data:`evroute.roads.names.ARRAY_BUILD_FROM_EDGES` edges.

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
    seed = check_int("seed", seed, 0, hi=2**63 - 1)
    size = check_int("size", size, MIN_SIZE, hi=MAX_SIZE)
    rng = Generator(PCG64(seed))
    n_int = max(40, round(size * 0.8))
    city = City(rng, n_int)
    pts, pos, edge_list, bridge_set = streets(rng, city, n_int, size=size)
    P = np.asarray(pos, dtype=np.float64)
    seg = np.asarray(edge_list, dtype=np.int64).reshape(-1, 2)
    n, m = len(P), len(seg)
    w = np.linalg.norm(P[seg[:, 0]] - P[seg[:, 1]], axis=1)
    street = sp.csr_matrix((np.r_[w, w], (np.r_[seg[:, 0], seg[:, 1]], np.r_[seg[:, 1], seg[:, 0]])), shape=(n, n))
    key = np.minimum(seg[:, 0], seg[:, 1]) * n + np.maximum(seg[:, 0], seg[:, 1])
    key_order = np.argsort(key, kind="stable")
    rank = np.full(m, CLASS_RANK["residential"], dtype=np.int64)

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
        rank[ids] = np.minimum(rank[ids], CLASS_RANK[cls])

    for a, b, cls in arterials(rng, city, mpts, nearest=nearest):
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
    names = np.array(sorted(CLASS_RANK, key=CLASS_RANK.get))
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
    ele = elevation(rng, city, P)
    lat, lon = wgs84(P)
    return {"lat": lat, "lon": lon, "ele": ele, "u": seg[:, 0].copy(), "v": seg[:, 1].copy(),
            "highway": highway, "maxspeed_kmh": maxspeed, "lanes": lanes, "oneway": oneway, "bridge": bridge}
