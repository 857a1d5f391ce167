"""Road networks: load OSM data, keep drivable roads, add features, build the line graph.

The pipeline is

1. read OSM XML with osmnx (or generate the embedded synthetic city);
2. node elevations from OSM ``ele`` tags, a DEM raster, or flat (with a warning);
3. keep drivable roads, simplify the topology, keep the largest strongly connected
   component (as in paper 003, App. B.2);
4. bound short-edge grade artefacts (a Lipschitz envelope of the node elevations, so
   grades are bounded *and* still come from a potential);
5. per directed edge: length, speed (``maxspeed`` or imputed by road class), grade,
   inclination, WGS84 geometry, OSM way ids;
6. the line graph L(G): legal turns, no U-turn onto the reverse edge except at dead
   ends, OSM turn restrictions honoured.

A prepared :class:`Network` is cached on disk (:mod:`evroute.cache`), keyed by the input's
hash and the processing parameters. Warm loads read only Parquet/NumPy files: osmnx is
imported only when a network has to be built. What a name stands for (a built-in network, a
sized synthetic city, an OSM file) is :mod:`evroute.roads.names`'s; the line graph is
:mod:`evroute.roads.line_graph`'s.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from ..cache import CacheEntry, hash_bytes, hash_file, make_key
from ..errors import EvrouteError, EvrouteWarning
from ..io import atomic_write_with
from ..progress import stage
from ..registry import load_registry
from ..validate import positive_float
from . import names, synthetic
from .line_graph import line_graph, line_graph_arrays, line_graph_component
from .names import (
    SYNTHETIC_MODULES,
    SYNTHETIC_SIZED,
    check_build_memory,
    check_not_a_data_file,
    network_spec,
    resolve_osm_path,
    synthetic_edges_for,
)
from .osm import (
    SEGMENTS,
    SIGNALS,
    first_tag,
    is_reversed,
    merge_segment_tags,
    node_elevations,
    prepare_simplified_graph,
    read_osm_graph,
    read_restrictions,
    simplify_graph,
    sort_merged_tags,
)
from .synthetic import synthetic_graph, synthetic_route_points
from .synthetic_arrays import synthetic_arrays

#: Bump when the processing changes: it is part of every cache key.
PIPELINE_VERSION = 7

#: Drivable ``highway`` values (the standard OSM classes a car may use). Non-standard
#: values such as MoST's ``secondary_tunnel`` are not drivable classes and are dropped,
#: which reproduces the sizes of the MoST and LuST networks read with osmnx.
DRIVABLE = (
    "motorway", "trunk", "primary", "secondary", "tertiary", "unclassified", "residential",
    "living_street", "road", "motorway_link", "trunk_link", "primary_link", "secondary_link",
    "tertiary_link",
)

#: Speed (km/h) imputed where ``maxspeed`` is missing or unreadable.
DEFAULT_SPEEDS_KMH = {
    "motorway": 110.0, "trunk": 90.0, "primary": 50.0, "secondary": 50.0, "tertiary": 50.0,
    "unclassified": 40.0, "residential": 30.0, "living_street": 10.0, "road": 40.0,
    "motorway_link": 60.0, "trunk_link": 50.0, "primary_link": 40.0, "secondary_link": 40.0,
    "tertiary_link": 40.0,
}

#: Largest plausible road grade; steeper short-edge artefacts are bounded to it.
DEFAULT_MAX_GRADE = 0.25

ELEVATION_SOURCES = ("osm", "dem", "none")


@dataclass
class Network:
    """A prepared road network.

    Attributes
    ----------
    name : str
        Network name (``monaco``, ``luxembourg``, ``synthetic`` or a file stem).
    edges : pandas.DataFrame
        One row per directed edge; the row number is the edge id used everywhere.
        Columns: ``u``, ``v`` (node ids), ``key``, ``osm_way`` (first OSM way id),
        ``highway``, ``length_m``, ``speed_mps``, ``maxspeed_known`` (bool), ``grade``,
        ``incline_rad``, ``reversed`` (driven against the way's node order), ``lanes``,
        ``signals`` (OSM traffic signals the edge passes or ends at).
    nodes : pandas.DataFrame
        Indexed by node id: ``lon``, ``lat``, ``elevation_m``.
    geometry : list of numpy.ndarray
        Per edge, a (k, 2) array of (lon, lat) vertices from u to v.
    edge_ways : list of tuple of int
        Per edge, every OSM way id the (simplified) edge is made of.
    conn_src, conn_dst : numpy.ndarray
        The line graph: a legal turn from edge ``conn_src[i]`` into ``conn_dst[i]``.
    meta : dict
        Provenance and statistics (source, hash, elevation source, component share...).
    """

    name: str
    edges: pd.DataFrame
    nodes: pd.DataFrame
    geometry: list
    edge_ways: list
    conn_src: np.ndarray
    conn_dst: np.ndarray
    meta: dict = field(default_factory=dict)

    @property
    def n_edges(self) -> int:
        return len(self.edges)

    @property
    def n_connections(self) -> int:
        return len(self.conn_src)

    @cached_property
    def context(self) -> np.ndarray:
        """Raw context vectors x_e = (length, speed limit, incline), shape (E, 3)."""
        e = self.edges
        return np.column_stack([e["length_m"], e["speed_mps"], e["incline_rad"]]).astype(np.float64)

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        """(south, west, north, east) of the kept nodes."""
        n = self.nodes
        return float(n.lat.min()), float(n.lon.min()), float(n.lat.max()), float(n.lon.max())

    @property
    def cache_key(self) -> str:
        """Identifies the prepared network (input hash + parameters)."""
        return self.meta["cache_key"]

    def to_gdfs(self, nodes: bool = True, edges: bool = True):
        """The network as GeoDataFrames in WGS84 (EPSG:4326), in the manner of
        ``osmnx.graph_to_gdfs``.

        Parameters
        ----------
        nodes, edges : bool
            Which to return.

        Returns
        -------
        geopandas.GeoDataFrame or tuple of them
            ``nodes``: indexed by node id, ``lon``, ``lat``, ``elevation_m`` and Point geometry;
            ``edges``: indexed by edge id (the row numbers every evroute table uses), the
            columns of :attr:`edges` and LineString geometry from ``u`` to ``v``. Both when both
            are asked for, as ``(nodes, edges)``.

        Examples
        --------
        >>> net = load_network("synthetic")
        >>> gdf_nodes, gdf_edges = net.to_gdfs()
        >>> gdf_edges.crs.to_epsg(), len(gdf_edges) == net.n_edges
        (4326, True)
        """
        import geopandas as gpd
        import shapely

        if not (nodes or edges):
            raise EvrouteError("to_gdfs: ask for nodes, edges or both")
        out = []
        if nodes:
            n = self.nodes
            out.append(gpd.GeoDataFrame(n.copy(), geometry=shapely.points(n.lon.to_numpy(), n.lat.to_numpy()),
                                        crs="EPSG:4326"))
        if edges:
            out.append(gpd.GeoDataFrame(self.edges.copy(), geometry=[shapely.LineString(g) for g in self.geometry],
                                        crs="EPSG:4326"))
        return tuple(out) if len(out) == 2 else out[0]

    def edge_midpoints(self) -> np.ndarray:
        """(E, 2) array of (lon, lat) at the middle vertex of each edge's geometry."""
        return np.array([g[len(g) // 2] if len(g) > 2 else g.mean(axis=0) for g in self.geometry])

    def successors(self) -> list[np.ndarray]:
        """Per edge, the edges reachable by one legal turn."""
        order = np.argsort(self.conn_src, kind="stable")
        splits = np.searchsorted(self.conn_src[order], np.arange(self.n_edges + 1))
        dst = self.conn_dst[order]
        return [dst[splits[i]:splits[i + 1]] for i in range(self.n_edges)]


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------


def load_network(
    name: str = "synthetic",
    osm: str | os.PathLike | None = None,
    dem: str | os.PathLike | None = None,
    *,
    max_grade: float = DEFAULT_MAX_GRADE,
    seed: int | None = None,
    size: int | None = None,
    use_cache: bool = True,
) -> Network:
    """Load a prepared network, from the cache when possible.

    Parameters
    ----------
    name : str
        A built-in network name, or the path of an OSM XML file.
    osm : path-like, optional
        OSM XML file to use for a built-in name (overrides the data dir and cache).
    dem : path-like, optional
        A DEM raster (GeoTIFF/HGT) giving node elevations (overrides OSM ``ele`` tags).
    max_grade : float
        Bound on |grade| (short-edge artefacts), default 0.25.
    seed, size : int, optional
        Synthetic network parameters (defaults from the registry).
    use_cache : bool
        Read and write the on-disk cache.

    Returns
    -------
    Network
        The prepared network: edges (the row number is the edge id), nodes, line graph, geometry.
    """
    positive_float("max grade", max_grade)
    name_path = Path(name)
    if osm is None and name not in load_registry("networks") and name_path.suffix.lower() in (".osm", ".xml"):
        osm, name = name_path, name_path.stem
        if not name_path.is_file():
            raise EvrouteError(f"OSM file not found: {name_path}")
    elif osm is None:
        check_not_a_data_file(name)
    elif name in load_registry("networks") and network_spec(name).get("kind") == "synthetic" \
            or SYNTHETIC_SIZED.match(str(name)):
        raise EvrouteError(f"network {name!r} is generated by code: --osm is for networks read from OSM data "
                           "(give the OSM file as the network instead)")
    params: dict = {"pipeline": PIPELINE_VERSION, "max_grade": float(max_grade)}
    if osm is None and network_spec(name).get("kind") == "synthetic":
        spec = network_spec(name)
        seed = spec["seed"] if seed is None else int(seed)
        size = spec["size"] if size is None else int(size)
        if size < 16:
            raise EvrouteError(f"synthetic network size must be >= 16, got {size}")
        arrays = synthetic_edges_for(size) >= names.ARRAY_BUILD_FROM_EDGES  # (read here: tests lower it)
        if arrays and dem is not None:
            raise EvrouteError(f"network {name}: the array-built synthetic city (from "
                               f"{names.ARRAY_BUILD_FROM_EDGES:,} edges) takes its elevation from its own field; "
                               "--dem is for the networkx-built sizes and OSM networks")
        check_build_memory(name, size)

        params.update(kind="synthetic", seed=seed, size=size,
                      generator=hash_bytes(*(hash_file(m.__file__) for m in SYNTHETIC_MODULES))[:16])
        if arrays:
            params["builder"] = "arrays"
        source = None
    else:
        source = resolve_osm_path(name, osm)
        params.update(kind="osm", osm_sha256=hash_file(source))
    if dem is not None:
        dem = Path(dem).expanduser()
        if not dem.is_file():
            raise EvrouteError(f"DEM file not found: {dem}")
        params["dem_sha256"] = hash_file(dem)
    key = f"{name}-{make_key(params)}"
    entry = CacheEntry("networks", key)
    if use_cache:
        net = _read_cached(entry, name)
        if net is not None:
            _warn_if_flat(net)
            return net
    with stage(f"building network {name} (first use; it is cached for the next)"):
        net, meta = _build(params, name, source, dem, max_grade, seed, size)
    if params["kind"] == "synthetic" and dem is None:
        net.meta["elevation_source"] = "synthetic"
    net.meta.update(meta)
    net.meta["cache_key"] = key
    net.meta["params"] = params
    if use_cache:
        _write_cached(entry, net)
    _warn_if_flat(net)
    return net


def _build(params: dict, name: str, source, dem, max_grade: float, seed, size) -> tuple[Network, dict]:
    """Build the network ``params`` describe (synthetic from arrays or networkx, or OSM), with
    the metadata its source adds."""
    if params["kind"] != "synthetic":
        net = build_network(read_osm_graph(source), name=name, dem=dem, max_grade=max_grade,
                            restrictions=read_restrictions(source))
        return net, {"source": str(source), "osm_sha256": params["osm_sha256"]}
    if params.get("builder") == "arrays":
        net = build_network_from_arrays(synthetic_arrays(seed=seed, size=size), name, max_grade)
        points, built = _array_city_route_points(net), ", built from arrays"
    else:
        graph = synthetic_graph(seed=seed, size=size)
        points, built = synthetic_route_points(graph), ""
        net = build_network(graph, name=name, dem=dem, max_grade=max_grade, restrictions=[])
    return net, {"source": f"synthetic(seed={seed}, size={size}{built})",
                 "route_points": {k: [list(a), list(b)] for k, (a, b) in points.items()}}


def _array_city_route_points(net: Network) -> dict:
    """Routes A and B of an array-built synthetic city: among its intersections (nodes whose
    undirected degree is not 2), as :func:`evroute.roads.synthetic.synthetic_route_points` picks them."""
    e = net.edges
    a, b = e.u.to_numpy(), e.v.to_numpy()
    pairs = np.unique(np.column_stack([np.minimum(a, b), np.maximum(a, b)]), axis=0)
    ids, degree = np.unique(pairs.ravel(), return_counts=True)
    nodes = net.nodes.loc[ids[degree != 2]] if np.sum(degree != 2) >= 10 else net.nodes.loc[ids]
    return synthetic.route_points_of(nodes.lat.to_numpy(), nodes.lon.to_numpy(), nodes.elevation_raw_m.to_numpy(),
                                     max_extremes=2000)


def _warn_if_flat(net: Network) -> None:
    """One warning line whenever a flat network (no elevation at all) is used."""
    if net.meta.get("elevation_source") == "none":
        warnings.warn(f"network {net.name!r} has no elevation (no OSM ele tags, no --dem): it is "
                      "treated as flat, so every grade is 0", EvrouteWarning, stacklevel=3)


def lipschitz_envelope(n_nodes: int, a: np.ndarray, b: np.ndarray, *, length: np.ndarray,
                       h: np.ndarray, max_grade: float) -> np.ndarray:
    """The smallest elevation profile h' ≥ h with |h'_a − h'_b| ≤ max_grade·ℓ on every road.

    h'(x) = max_y h(y) − max_grade·d(x, y), d the road distance: one multi-source Dijkstra
    (a virtual source joined to every node y with weight (max h − h(y)) / max_grade).
    Where the input is already plausible it is unchanged; grades of short edges whose
    end elevations disagree by more than the bound are bounded, and grades still come
    from a potential (so E_det keeps having no negative cycles).
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import dijkstra

    top = float(h.max())
    src = np.concatenate([a, b, np.full(n_nodes, n_nodes)])
    dst = np.concatenate([b, a, np.arange(n_nodes)])
    w = np.concatenate([length, length, (top - h) / max_grade])
    w = np.maximum(w, 1e-12)  # csgraph drops explicit zeros
    # keep the shortest of parallel roads (a sparse matrix would sum duplicates)
    order = np.lexsort((w, dst, src))
    src, dst, w = src[order], dst[order], w[order]
    first = np.ones(len(src), dtype=bool)
    first[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    src, dst, w = src[first], dst[first], w[first]
    mat = coo_matrix((w, (src, dst)), shape=(n_nodes + 1, n_nodes + 1)).tocsr()
    dist = dijkstra(mat, directed=True, indices=n_nodes)[:n_nodes]
    return np.maximum(h, top - max_grade * dist)


def build_network(graph, name: str, dem: Path | None = None, *, max_grade: float = DEFAULT_MAX_GRADE,
                  restrictions: list[dict] | None = None, simplified: bool = False) -> Network:
    """Process an unsimplified osmnx-style MultiDiGraph into a :class:`Network` (``simplified``:
    a graph :func:`evroute.roads.osm.prepare_simplified_graph` made ready, not simplified again)."""
    n_input_nodes = graph.number_of_nodes()
    ele, elevation_source = node_elevations(graph, dem)
    for n, v in ele.items():
        graph.nodes[n]["elevation"] = v
    drivable = set(DRIVABLE)
    drop = [(u, v, k) for u, v, k, d in graph.edges(keys=True, data=True)
            if first_tag(d.get("highway")) not in drivable]
    graph.remove_edges_from(drop)
    graph.remove_nodes_from([n for n in list(graph.nodes) if graph.degree(n) == 0])
    if graph.number_of_edges() == 0:
        raise EvrouteError(f"network {name!r} has no drivable roads (highway in {', '.join(DRIVABLE[:7])}, ...)")
    n_drivable_nodes = graph.number_of_nodes()
    n_drivable_edges = graph.number_of_edges()
    km_drivable = sum(d.get("length", 0.0) for *_, d in graph.edges(data=True)) / 1000
    graph = simplify_graph(graph) if not simplified else prepare_simplified_graph(graph)
    if graph.number_of_edges() < 2:
        raise EvrouteError(f"network {name!r} is empty after keeping the largest strongly connected component")

    node_ids = np.array(sorted(graph.nodes), dtype=np.int64)
    node_index = {n: i for i, n in enumerate(node_ids)}
    lon = np.array([graph.nodes[n]["x"] for n in node_ids], dtype=float)
    lat = np.array([graph.nodes[n]["y"] for n in node_ids], dtype=float)
    h_raw = np.array([graph.nodes[n]["elevation"] for n in node_ids], dtype=float)

    rows = sorted(graph.edges(keys=True, data=True), key=lambda r: (r[0], r[1], r[2]))
    u = np.array([r[0] for r in rows], dtype=np.int64)
    v = np.array([r[1] for r in rows], dtype=np.int64)
    ui = np.array([node_index[x] for x in u])
    vi = np.array([node_index[x] for x in v])
    length = np.array([max(float(r[3].get("length", 0.0)), 0.1) for r in rows])

    h = h_raw if elevation_source == "none" else lipschitz_envelope(len(node_ids), ui, vi, length=length, h=h_raw, max_grade=max_grade)
    grade = (h[vi] - h[ui]) / length
    merged = [merge_segment_tags(r[3][SEGMENTS]) for r in rows]
    highway = [m["highway"] for m in merged]
    maxspeed = np.array([m["maxspeed"] for m in merged])
    imputed = np.array([DEFAULT_SPEEDS_KMH.get(hw, 40.0) / 3.6 for hw in highway])
    speed = np.where(np.isfinite(maxspeed), maxspeed, imputed)
    n_segments = np.array([len(r[3][SEGMENTS]) for r in rows], dtype=np.int64)
    ways = []
    for r in rows:
        osmid = r[3].get("osmid")
        ids = osmid if isinstance(osmid, (list, tuple)) else [osmid]
        ways.append(tuple(int(x) for x in ids if x is not None))
    rev = np.array([is_reversed(r[3].get("reversed", False)) for r in rows])
    lanes = [m["lanes"] for m in merged]
    signals = np.array([int(r[3].get(SIGNALS, 0)) for r in rows], dtype=np.int64)
    geometry = []
    for r, a, b in zip(rows, ui, vi, strict=True):
        geom = r[3].get("geometry")
        if geom is not None:
            coords = np.asarray(geom.coords, dtype=float)[:, :2]
        else:
            coords = np.array([[lon[a], lat[a]], [lon[b], lat[b]]])
        geometry.append(coords)

    edges = pd.DataFrame({
        "u": u, "v": v, "key": np.array([r[2] for r in rows], dtype=np.int64),
        "osm_way": np.array([w[0] if w else 0 for w in ways], dtype=np.int64),
        "highway": highway, "length_m": length, "speed_mps": speed,
        "maxspeed_known": np.isfinite(maxspeed), "grade": grade, "incline_rad": np.arctan(grade),
        "reversed": rev, "lanes": lanes, "signals": signals,
    })
    edges.index.name = "edge"
    nodes = pd.DataFrame({"lon": lon, "lat": lat, "elevation_m": h, "elevation_raw_m": h_raw},
                         index=pd.Index(node_ids, name="node"))
    conn_src, conn_dst, n_restricted = line_graph(u, v, length, ways=ways, restrictions=restrictions or [])
    # A few edges of G's component can only be entered through a U-turn or a forbidden
    # turn; keep the largest strongly connected component of L(G) so that every edge can
    # reach every other one along legal turns.
    keep, conn_src, conn_dst = line_graph_component(len(u), conn_src, conn_dst)
    n_dropped = int((~keep).sum())
    if n_dropped:
        edges = edges[keep].reset_index(drop=True)
        edges.index.name = "edge"
        geometry = [g for g, k in zip(geometry, keep, strict=True) if k]
        ways = [w for w, k in zip(ways, keep, strict=True) if k]
        n_segments = n_segments[keep]
        used = np.union1d(edges.u.to_numpy(), edges.v.to_numpy())
        nodes = nodes.loc[used]
    meta = {
        "name": name,
        "elevation_source": elevation_source,
        "max_grade": float(max_grade),
        "grade_bounded_edges": int(np.sum(np.abs((h_raw[vi] - h_raw[ui]) / length) > max_grade + 1e-12)),
        "input_nodes": int(n_input_nodes),
        "drivable_nodes": int(n_drivable_nodes),
        "drivable_edges": int(n_drivable_edges),
        "drivable_km": float(km_drivable),
        # shares of the drivable input kept in the component: OSM segments (a simplified
        # edge is made of several) and length; node counts before and after the
        # simplification are not comparable
        "component_node_share": float(len(nodes) / max(n_drivable_nodes, 1)),
        "component_edge_share": float(n_segments.sum() / max(n_drivable_edges, 1)),
        "component_km_share": float(edges.length_m.sum() / 1000 / max(km_drivable, 1e-9)),
        "turn_restrictions": len(restrictions or []),
        "turn_restrictions_applied": int(n_restricted),
        "line_graph_dropped_edges": n_dropped,
    }
    return Network(name=name, edges=edges, nodes=nodes, geometry=geometry, edge_ways=ways,
                   conn_src=conn_src, conn_dst=conn_dst, meta=meta)


def network_from_graph(graph, name: str = "graph", *, dem: str | os.PathLike | None = None,
                       max_grade: float = DEFAULT_MAX_GRADE) -> Network:
    """A :class:`Network` from an osmnx road graph the user already has
    (``osmnx.graph_from_place``, ``graph_from_bbox``, ``graph_from_xml``, ...).

    The graph may be simplified or not, projected or in WGS84; it is not changed (a copy is
    processed as an OSM file is: drivable roads, the largest strongly connected component of the
    roads and of the line graph, speed limits imputed by road class, grades from node
    elevations). An unsimplified graph (``simplify=False``) gives the network evroute reads from
    the same OSM file; a graph osmnx simplified kept no per-segment tags, so where it merged
    segments of different classes or limits the edge takes the smallest value (a drivable class
    first), not the one covering the most length. Elevations come from the nodes' ``elevation`` (``osmnx.elevation``) or ``ele``
    attributes, or from ``dem``. Turn restrictions are not in an osmnx graph: every turn but a
    U-turn is legal. Not cached: the graph is already in memory.

    Parameters
    ----------
    graph : networkx.MultiDiGraph
        An osmnx graph.
    name : str
        The network's name in tables and figures.
    dem : path-like, optional
        A DEM raster for the node elevations, read bilinearly.
    max_grade : float
        The grade bound of :func:`load_network`.

    Returns
    -------
    Network

    Raises
    ------
    EvrouteError
        When the graph holds no drivable road, or its nodes have no coordinates.
    """
    import osmnx as ox

    g = graph.copy()
    crs = g.graph.get("crs")
    if crs is not None and str(crs).upper() not in ("EPSG:4326", "WGS84", "EPSG:4979"):
        g = ox.projection.project_graph(g, to_latlong=True)
    if any("x" not in d or "y" not in d for _, d in g.nodes(data=True)):
        raise EvrouteError("the graph's nodes need x (longitude) and y (latitude), as osmnx gives them")
    simplified = bool(g.graph.get("simplified"))
    if simplified:
        sort_merged_tags(g, DRIVABLE)
    net = build_network(g, name=name, dem=None if dem is None else Path(dem).expanduser(),
                        max_grade=positive_float("max_grade", max_grade), restrictions=[], simplified=simplified)
    net.meta.update({"source": "osmnx graph", "cache_key": hash_bytes(name, "graph", str(net.n_edges),
                                                                        net.edges.length_m.to_numpy().tobytes())})
    return net


def build_network_from_arrays(city: dict, name: str, max_grade: float = DEFAULT_MAX_GRADE) -> Network:
    """A :class:`Network` from :func:`evroute.roads.synthetic.synthetic_arrays`: every street segment an
    edge each way it can be driven (its way id its own), the largest strongly connected
    component of the roads and then of the line graph kept, elevations made Lipschitz as
    :func:`build_network` does. No networkx graph is held."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    seg_u, seg_v, oneway = city["u"], city["v"], city["oneway"]
    two = ~oneway
    sid = np.r_[np.arange(seg_u.size), np.flatnonzero(two)]
    u = np.r_[seg_u, seg_v[two]]
    v = np.r_[seg_v, seg_u[two]]
    rev = np.r_[np.zeros(seg_u.size, bool), np.ones(int(two.sum()), bool)]
    n_nodes = city["lat"].size
    n_drivable = u.size
    km = float(synthetic.great_circle_m(city["lat"][u], city["lon"][u], city["lat"][v], lon2=city["lon"][v]).sum() / 1000)
    g = coo_matrix((np.ones(u.size), (u, v)), shape=(n_nodes, n_nodes)).tocsr()
    _, lab = connected_components(g, directed=True, connection="strong")
    big = int(np.argmax(np.bincount(lab[np.r_[u, v]], minlength=lab.max() + 1)))
    keep = (lab[u] == big) & (lab[v] == big)
    u, v, sid, rev = u[keep], v[keep], sid[keep], rev[keep]
    order = np.lexsort((v, u))
    u, v, sid, rev = u[order], v[order], sid[order], rev[order]
    used = np.union1d(u, v)
    lat, lon, h_raw = city["lat"][used], city["lon"][used], city["ele"][used]
    ui, vi = np.searchsorted(used, u), np.searchsorted(used, v)
    length = np.maximum(synthetic.great_circle_m(lat[ui], lon[ui], lat[vi], lon2=lon[vi]), 0.1)
    h = lipschitz_envelope(used.size, ui, vi, length=length, h=h_raw, max_grade=max_grade)
    grade = (h[vi] - h[ui]) / length
    highway = city["highway"][sid]
    maxspeed = city["maxspeed_kmh"][sid] / 3.6
    imputed = np.array([DEFAULT_SPEEDS_KMH.get(hw, 40.0) for hw in highway.tolist()]) / 3.6
    way_id = synthetic.WAY_ID0 + sid
    node_id = synthetic.NODE_ID0 + used
    edges = pd.DataFrame({
        "u": node_id[ui], "v": node_id[vi], "key": np.zeros(u.size, dtype=np.int64), "osm_way": way_id,
        "highway": highway.astype(object), "length_m": length,
        "speed_mps": np.where(np.isfinite(maxspeed), maxspeed, imputed), "maxspeed_known": np.isfinite(maxspeed),
        "grade": grade, "incline_rad": np.arctan(grade), "reversed": rev, "lanes": city["lanes"][sid],
        "signals": np.zeros(u.size, dtype=np.int64),  # the generated city has no traffic signals
    })
    conn_src, conn_dst = line_graph_arrays(ui, vi)
    keep, conn_src, conn_dst = line_graph_component(len(u), conn_src, conn_dst)
    n_dropped = int((~keep).sum())
    if n_dropped:
        edges = edges[keep].reset_index(drop=True)
        ui, vi = ui[keep], vi[keep]
    edges.index.name = "edge"
    # the geometry of every edge: views into one (E, 2, 2) array, not E separate arrays
    coords = np.stack([np.column_stack([lon[ui], lat[ui]]), np.column_stack([lon[vi], lat[vi]])], axis=1)
    keep_nodes = np.union1d(ui, vi)
    nodes = pd.DataFrame({"lon": lon[keep_nodes], "lat": lat[keep_nodes], "elevation_m": h[keep_nodes],
                          "elevation_raw_m": h_raw[keep_nodes]}, index=pd.Index(node_id[keep_nodes], name="node"))
    meta = {
        "name": name,
        "elevation_source": "synthetic",
        "max_grade": float(max_grade),
        "grade_bounded_edges": int(np.sum(np.abs((h_raw[vi] - h_raw[ui]) / edges.length_m.to_numpy()) > max_grade + 1e-12)),
        "input_nodes": int(n_nodes),
        "drivable_nodes": int(n_nodes),
        "drivable_edges": int(n_drivable),
        "drivable_km": km,
        "component_node_share": float(len(nodes) / max(n_nodes, 1)),
        "component_edge_share": float(len(edges) / max(n_drivable, 1)),
        "component_km_share": float(edges.length_m.sum() / 1000 / max(km, 1e-9)),
        "turn_restrictions": 0,
        "turn_restrictions_applied": 0,
        "line_graph_dropped_edges": n_dropped,
        "builder": "arrays",
    }
    return Network(name=name, edges=edges, nodes=nodes, geometry=list(coords),
                   edge_ways=[(int(w),) for w in edges.osm_way.to_numpy()], conn_src=conn_src, conn_dst=conn_dst,
                   meta=meta)


# --------------------------------------------------------------------------------------
# Cache
# --------------------------------------------------------------------------------------

_FILES = ("edges.parquet", "nodes.parquet", "arrays.npz", "meta.json")
#: The edge table's columns; a cached network without one of them is rebuilt (a column added
#: later, as ``signals``, leaves every other value and the cache key as they were).
EDGE_COLUMNS = ("u", "v", "key", "osm_way", "highway", "length_m", "speed_mps", "maxspeed_known", "grade",
                "incline_rad", "reversed", "lanes", "signals")


def _write_cached(entry: CacheEntry, net: Network) -> None:
    try:
        entry.prepare()
    except EvrouteError as exc:
        warnings.warn(f"{exc}; continuing without the cache", EvrouteWarning, stacklevel=3)
        return
    offsets = np.cumsum([0] + [len(g) for g in net.geometry])
    coords = np.concatenate(net.geometry) if net.geometry else np.zeros((0, 2))
    way_off = np.cumsum([0] + [len(w) for w in net.edge_ways])
    way_ids = np.array([w for ws in net.edge_ways for w in ws], dtype=np.int64)
    atomic_write_with(entry.path("edges.parquet"), lambda p: net.edges.to_parquet(p))
    atomic_write_with(entry.path("nodes.parquet"), lambda p: net.nodes.to_parquet(p))
    def write_arrays(p: Path) -> None:
        with open(p, "wb") as fh:
            np.savez(fh, conn_src=net.conn_src, conn_dst=net.conn_dst, geom_offsets=offsets,
                     geom_coords=coords, way_offsets=way_off, way_ids=way_ids)

    atomic_write_with(entry.path("arrays.npz"), write_arrays)
    atomic_write_with(entry.path("meta.json"), lambda p: Path(p).write_text(json.dumps(net.meta, default=str)))
    entry.commit(_FILES)


def _read_cached(entry: CacheEntry, name: str) -> Network | None:
    if not entry.is_valid(_FILES):
        return None
    try:
        edges = pd.read_parquet(entry.path("edges.parquet"))
        nodes = pd.read_parquet(entry.path("nodes.parquet"))
        with np.load(entry.path("arrays.npz"), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(entry.path("meta.json").read_text())
    except Exception:  # a valid checksum but unreadable content: rebuild
        return None
    if not set(EDGE_COLUMNS) <= set(edges.columns):  # written before a column was added: rebuild
        return None
    off = arrays["geom_offsets"]
    geometry = [arrays["geom_coords"][off[i]:off[i + 1]] for i in range(len(off) - 1)]
    woff, wids = arrays["way_offsets"], arrays["way_ids"]
    edge_ways = [tuple(int(x) for x in wids[woff[i]:woff[i + 1]]) for i in range(len(woff) - 1)]
    return Network(name=name, edges=edges, nodes=nodes, geometry=geometry, edge_ways=edge_ways,
                   conn_src=arrays["conn_src"], conn_dst=arrays["conn_dst"], meta=meta)


def network_fingerprint(net: Network) -> str:
    """A hash of the prepared network's content (edge table and line graph)."""
    return hash_bytes(
        pd.util.hash_pandas_object(net.edges, index=True).values.tobytes(),
        net.conn_src.tobytes(), net.conn_dst.tobytes())[:16]
