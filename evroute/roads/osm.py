"""Reading OpenStreetMap data: OSM XML into an osmnx graph, turn restrictions, elevations,
and the tags of the OSM segments a simplified edge is made of.

This module knows OSM and osmnx; :mod:`evroute.roads.network` turns what it reads into a prepared
:class:`evroute.roads.network.Network`. osmnx is imported only when a graph is read or simplified.
"""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path

import numpy as np

from ..errors import EvrouteError
from ..io import atomic_path

__all__ = ["read_osm_graph", "write_osm_xml", "read_restrictions", "node_elevations", "simplify_graph", "merge_segment_tags",
           "parse_maxspeed", "first_tag", "is_reversed", "SEGMENTS", "SIGNALS"]


def read_osm_graph(path: Path):
    """Read an OSM XML file into an unsimplified osmnx MultiDiGraph."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError as exc:
        raise EvrouteError(f"cannot read {path}: {exc.strerror}") from None
    if path.suffix.lower() == ".pbf":
        raise EvrouteError(f"{path}: .pbf files are not supported by osmnx; convert to OSM XML (osmium cat)")
    if b"<osm" not in head:
        raise EvrouteError(f"{path} is not an OSM XML file (no <osm> root element)")
    import osmnx as ox

    for tag in ("ele", "highway"):  # highway=traffic_signals marks a signalised node
        if tag not in ox.settings.useful_tags_node:
            ox.settings.useful_tags_node = [*ox.settings.useful_tags_node, tag]
    for tag in ("maxspeed", "lanes", "oneway", "highway"):
        if tag not in ox.settings.useful_tags_way:
            ox.settings.useful_tags_way = [*ox.settings.useful_tags_way, tag]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            graph = ox.graph_from_xml(path, simplify=False, retain_all=True)
        except Exception as exc:  # osmnx raises many kinds for bad XML
            raise EvrouteError(f"{path} could not be read as OSM XML: {str(exc).splitlines()[0][:200]}") from None
    if graph.number_of_edges() == 0:
        raise EvrouteError(f"{path} holds no roads")
    return graph


def read_restrictions(path: Path) -> list[dict]:
    """Turn-restriction relations (type=restriction) of an OSM XML file."""
    import xml.etree.ElementTree as ET

    out = []
    try:
        for _, elem in ET.iterparse(path, events=("end",)):
            if elem.tag == "relation":
                tags = {t.get("k"): t.get("v") for t in elem.findall("tag")}
                if tags.get("type") == "restriction":
                    members = {"from": [], "to": [], "via": []}
                    for m in elem.findall("member"):
                        role = m.get("role")
                        if role in members:
                            members[role].append((m.get("type"), int(m.get("ref"))))
                    kind = tags.get("restriction") or next(
                        (v for k, v in tags.items() if k.startswith("restriction:")), "")
                    if (len(members["from"]) == 1 and len(members["to"]) == 1
                            and len(members["via"]) == 1 and members["via"][0][0] == "node"):
                        out.append({"kind": kind, "from": members["from"][0][1],
                                    "to": members["to"][0][1], "via": members["via"][0][1]})
                elem.clear()
            elif elem.tag in ("node", "way"):
                elem.clear()
    except ET.ParseError as exc:
        raise EvrouteError(f"{path} is not well-formed XML: {exc}") from None
    return out


# --------------------------------------------------------------------------------------
# Processing
# --------------------------------------------------------------------------------------


def first_tag(value):
    """The first value of a tag osmnx may have merged into a list."""
    if isinstance(value, (list, tuple)):
        return value[0] if value else None
    return value


#: Edge attribute holding the raw (highway, maxspeed, lanes, length) of every OSM segment.
SEGMENTS = "evroute_segments"

#: Edge attribute counting the traffic signals (nodes tagged ``highway=traffic_signals``) an
#: edge passes or ends at: each segment counts its end node, a simplified edge sums them.
SIGNALS = "evroute_signals"


def _mark_signals(graph) -> None:
    """Set :data:`SIGNALS` on every edge of ``graph``: 1 where its end node is a traffic signal."""
    for _, v, d in graph.edges(data=True):
        d[SIGNALS] = int(first_tag(graph.nodes[v].get("highway")) == "traffic_signals")


def _concat(lists) -> list:
    """Concatenate per-segment lists in path order (an osmnx edge_attr_aggs function)."""
    return [x for part in lists for x in part]


def _unique_in_order(values):
    """The distinct values in path order; one value stays a scalar (as osmnx does)."""
    out = []
    for v in values:
        for x in (v if isinstance(v, list) else [v]):
            if x not in out:
                out.append(x)
    return out[0] if len(out) == 1 else out


def is_reversed(value) -> bool:
    """A merged edge is ``reversed`` only if every segment is driven against its way."""
    values = value if isinstance(value, (list, tuple)) else [value]
    return bool(values) and all(bool(v) for v in values)


def _by_length(pairs) -> object:
    """The value covering the most length; ties go to the smallest value (sorted order)."""
    total: dict = {}
    for value, length in pairs:
        total[value] = total.get(value, 0.0) + length
    if not total:
        return None
    best = max(total.values())
    return min(v for v, w in total.items() if w >= best - 1e-9 * max(best, 1.0))


def merge_segment_tags(segments) -> dict:
    """Road class, speed limit and lanes of an edge made of several OSM segments.

    Parameters
    ----------
    segments : list of (highway, maxspeed, lanes, length_m)
        The raw tags of each segment, in path order.

    Returns
    -------
    dict
        ``highway`` (str), ``maxspeed`` (m/s, NaN if no segment has a readable tag) and
        ``lanes`` (str, ``""`` if none): each is the value covering the most length
        among the segments that have one, ties broken by sorted order (the smallest
        class name, the lowest speed, the smallest lanes string). The rule depends on
        the tags and lengths only, never on set or hash order.
    """
    hw = _by_length((str(h), ln) for h, _, _, ln in segments if h is not None)
    speeds = [(parse_maxspeed(m), ln) for _, m, _, ln in segments]
    ms = _by_length((v, ln) for v, ln in speeds if math.isfinite(v))
    lanes = _by_length((str(first_tag(la)), ln) for _, _, la, ln in segments
                       if la is not None and first_tag(la) is not None)
    return {"highway": "None" if hw is None else hw,
            "maxspeed": math.nan if ms is None else float(ms),
            "lanes": "" if lanes is None else lanes}


def parse_maxspeed(value) -> float:
    """A ``maxspeed`` tag in m/s (``50``, ``50 mph``, ``30;50`` → the first), NaN if unreadable."""
    value = first_tag(value)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return math.nan
    if isinstance(value, (int, float)):
        return float(value) / 3.6 if value > 0 else math.nan
    m = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(mph|km/h|kmh|kph)?", str(value))
    if not m:
        return math.nan
    speed = float(m.group(1))
    if speed <= 0:
        return math.nan
    return speed * 0.44704 if m.group(2) == "mph" else speed / 3.6


def node_elevations(graph, dem: Path | None) -> tuple[dict, str]:
    nodes = list(graph.nodes)
    if dem is not None:
        return dict(zip(nodes, _sample_dem(dem, graph), strict=True)), "dem"
    ele = {}
    for n, d in graph.nodes(data=True):
        v = d.get("ele", d.get("elevation"))
        try:
            ele[n] = float(v)
        except (TypeError, ValueError):
            ele[n] = math.nan
    values = np.array(list(ele.values()), dtype=float)
    if len(values) and np.isfinite(values).mean() > 0.5:
        # fill the few nodes without a tag from the mean of their tagged neighbours
        fill = np.nanmean(values)
        for n, v in ele.items():
            if not math.isfinite(v):
                nb = [ele[m] for m in graph.neighbors(n) if math.isfinite(ele.get(m, math.nan))]
                ele[n] = float(np.mean(nb)) if nb else float(fill)
        return ele, "osm"
    return dict.fromkeys(nodes, 0.0), "none"  # load_network warns on every load


def bilinear(grid: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Bilinear interpolation of a raster at fractional (row, column) positions of its cell
    centres (cell centre (i, j) at row i, column j); positions outside the centres are clamped to
    the border cells; NaN where a cell used is NaN (no data).

    A DEM's cells are far longer than a street segment (500 m in Luxembourg's): the nearest cell
    gives most edges a grade of 0 and the few that cross a cell border a cliff, while the
    bilinear surface is continuous, so the grades of short edges stay those of the terrain.
    """
    n_rows, n_cols = grid.shape
    r = np.clip(np.asarray(rows, dtype=float), 0.0, n_rows - 1)
    c = np.clip(np.asarray(cols, dtype=float), 0.0, n_cols - 1)
    r0 = np.minimum(np.floor(r).astype(np.int64), max(n_rows - 2, 0))
    c0 = np.minimum(np.floor(c).astype(np.int64), max(n_cols - 2, 0))
    r1, c1 = np.minimum(r0 + 1, n_rows - 1), np.minimum(c0 + 1, n_cols - 1)
    fr, fc = r - r0, c - c0
    return ((1 - fr) * (1 - fc) * grid[r0, c0] + (1 - fr) * fc * grid[r0, c1]
            + fr * (1 - fc) * grid[r1, c0] + fr * fc * grid[r1, c1])


def _sample_dem(dem: Path, graph) -> np.ndarray:
    try:
        import rasterio
        from rasterio.warp import transform as warp_transform
    except ImportError:  # pragma: no cover - rasterio is a dependency
        raise EvrouteError("reading a DEM needs rasterio (pip install rasterio)") from None
    lon = np.array([d["x"] for _, d in graph.nodes(data=True)])
    lat = np.array([d["y"] for _, d in graph.nodes(data=True)])
    try:
        with rasterio.open(dem) as src:
            xs, ys = (lon, lat)
            if src.crs is not None and src.crs.to_epsg() != 4326:
                xs, ys = warp_transform("EPSG:4326", src.crs, lon.tolist(), lat.tolist())
            xs, ys = np.asarray(xs), np.asarray(ys)
            b = src.bounds
            inside = (xs >= b.left) & (xs <= b.right) & (ys >= b.bottom) & (ys <= b.top)
            if inside.mean() < 0.99:
                raise EvrouteError(f"the DEM {dem} does not cover the network "
                                   f"({100 * (1 - inside.mean()):.1f}% of the nodes lie outside it)")
            grid = src.read(1).astype(float)
            if src.nodata is not None:
                grid[grid == src.nodata] = np.nan
            inv = ~src.transform  # map → fractional pixel coordinates (cell corners at integers)
            cols, rows = inv.a * xs + inv.b * ys + inv.c, inv.d * xs + inv.e * ys + inv.f
            vals = bilinear(grid, rows - 0.5, cols - 0.5)
    except EvrouteError:
        raise
    except Exception as exc:
        raise EvrouteError(f"cannot read the DEM {dem}: {str(exc).splitlines()[0][:200]}") from None
    bad = ~np.isfinite(vals) | ~inside
    if bad.mean() > 0.01:
        raise EvrouteError(f"the DEM {dem} does not cover the network ({100 * bad.mean():.1f}% of the "
                           "nodes have no elevation)")
    if bad.any():
        vals[bad] = np.nanmean(vals[~bad])
    return vals


def sort_merged_tags(graph, drivable=()) -> None:
    """In a graph osmnx simplified, put the values it merged into lists in sorted order: osmnx
    keeps them in a set's order, which follows Python's string-hash seed for text, so the
    first of them (what :func:`first_tag` reads) would change from process to process. A merged
    ``highway`` lists its ``drivable`` classes first (a road merged with a footway at a dead end
    is still a road)."""
    for *_, d in graph.edges(keys=True, data=True):
        for key, value in d.items():
            if isinstance(value, list):
                d[key] = sorted(value, key=lambda x: (key == "highway" and x not in drivable, str(type(x)), str(x)))


def prepare_simplified_graph(graph):
    """A graph osmnx already simplified, made ready as :func:`simplify_graph` leaves a graph:
    each edge's tags recorded as one segment (:data:`SEGMENTS`; osmnx kept no per-segment
    lengths, so a merged tag's smallest value stands for the edge, after
    :func:`sort_merged_tags`), the largest strongly connected component kept."""
    import osmnx as ox

    for *_, d in graph.edges(keys=True, data=True):
        d[SEGMENTS] = [(first_tag(d.get("highway")), first_tag(d.get("maxspeed")), first_tag(d.get("lanes")),
                        float(d.get("length", 0.0)))]
    _mark_signals(graph)  # the interior nodes osmnx removed are gone: the end node only
    return ox.truncate.largest_component(graph, strongly=True)


def simplify_graph(graph):
    """Simplify the topology (osmnx) and keep the largest strongly connected component
    (003 App. B.2), carrying every segment's tags along (:data:`SEGMENTS`).

    Tag values of the segments a simplified edge is made of are merged later by a fixed
    rule (:func:`merge_segment_tags`), never through a set: osmnx keeps the unique values
    of other attributes as list(set(...)), whose order follows Python's string-hash seed.
    """
    import osmnx as ox

    for *_, d in graph.edges(keys=True, data=True):
        d[SEGMENTS] = [(first_tag(d.get("highway")), d.get("maxspeed"), d.get("lanes"),
                        float(d.get("length", 0.0)))]
    _mark_signals(graph)
    aggs = {"length": sum, SEGMENTS: _concat, SIGNALS: sum, "osmid": _unique_in_order,
            "reversed": _unique_in_order, "oneway": _unique_in_order}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = ox.simplify_graph(graph, edge_attr_aggs=aggs)
        return ox.truncate.largest_component(graph, strongly=True)


#: Way tags written by :func:`write_osm_xml` (besides ``oneway``), in this order.
_WAY_TAGS = ("highway", "name", "maxspeed", "lanes", "bridge")


def write_osm_xml(graph, path, generator: str = "evroute") -> int:
    """Write an unsimplified osmnx-style road graph (as :func:`evroute.roads.synthetic.synthetic_graph`
    returns) as an OSM XML file, so that the OSM reading path can be run on it.

    Nodes keep their ids, ``lat``/``lon`` and an ``ele`` tag (exact float text); every way id
    (edge attribute ``osmid``) becomes one ``<way>`` whose nodes are its forward segments
    (``reversed`` False) chained in driving order, with the tags ``highway``, ``name``,
    ``maxspeed``, ``lanes``, ``bridge`` present on its edges and ``oneway=yes`` for one-way
    ways. Written to a temporary file and renamed. Returns the number of ways.
    """
    from xml.sax.saxutils import quoteattr


    segments: dict[int, dict] = {}
    tags: dict[int, dict] = {}
    for u, v, d in graph.edges(data=True):
        if d.get("reversed"):
            continue  # the other direction of a two-way way: implied by the way
        wid = int(d["osmid"])
        nxt = segments.setdefault(wid, {})
        if u in nxt:
            raise EvrouteError(f"way {wid} branches at node {u}: not a simple path, cannot be written as one way")
        nxt[u] = v
        tags.setdefault(wid, {**{k: d[k] for k in _WAY_TAGS if d.get(k) is not None},
                              **({"oneway": "yes"} if d.get("oneway") else {})})
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.write(f'<?xml version="1.0" encoding="UTF-8"?>\n<osm version="0.6" generator={quoteattr(generator)}>\n')
        for n, d in sorted(graph.nodes(data=True)):
            ele = f'<tag k="ele" v="{float(d["ele"])!r}"/>' if d.get("ele") is not None else ""
            fh.write(f'<node id="{int(n)}" lat="{float(d["y"])!r}" lon="{float(d["x"])!r}" version="1">{ele}</node>\n')
        for wid in sorted(segments):
            nxt = segments[wid]
            heads = set(nxt) - set(nxt.values())
            node = min(heads) if heads else min(nxt)  # a closed way starts anywhere
            seq = [node]
            while node in nxt and len(seq) <= len(nxt):
                node = nxt[node]
                seq.append(node)
            body = "".join(f'<nd ref="{int(n)}"/>' for n in seq)
            body += "".join(f"<tag k={quoteattr(k)} v={quoteattr(str(v))}/>" for k, v in tags[wid].items())
            fh.write(f'<way id="{wid}" version="1">{body}</way>\n')
        fh.write("</osm>\n")
    return len(segments)
