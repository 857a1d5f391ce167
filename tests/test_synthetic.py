"""Tests of the embedded synthetic network (evroute.roads.synthetic)."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest

from evroute.errors import EvrouteError
from evroute.roads.synthetic import SYNTHETIC_DEFAULT, synthetic_graph, synthetic_route_points


@pytest.fixture(scope="module")
def G():
    return synthetic_graph(**SYNTHETIC_DEFAULT)


def _dump(g):
    return (
        dict(g.graph),
        list(g.nodes(data=True)),
        list(g.edges(keys=True, data=True)),
    )


def _dist_m(a, b):
    lat0 = math.radians(0.5 * (a[0] + b[0]))
    dy = (a[0] - b[0]) * 111_195.0
    dx = (a[1] - b[1]) * 111_195.0 * math.cos(lat0)
    return math.hypot(dx, dy)


def test_default():
    assert SYNTHETIC_DEFAULT == {"seed": 0, "size": 400}


def test_deterministic(G):
    again = synthetic_graph(seed=0, size=400)
    assert _dump(again) == _dump(G)
    assert _dump(synthetic_graph(seed=1, size=400)) != _dump(G)
    assert _dump(synthetic_graph(seed=0, size=300)) != _dump(G)


def test_shape_like_osmnx(G):
    assert isinstance(G, nx.MultiDiGraph)
    assert G.graph["crs"] == "epsg:4326"
    assert G.graph["name"]
    assert 300 <= len(G) <= 500
    assert 1000 <= G.number_of_edges() <= 1600
    for n, d in G.nodes(data=True):
        assert isinstance(n, int) and n > 0
        assert isinstance(d["x"], float) and isinstance(d["y"], float)
        assert isinstance(d["ele"], float)
        assert 44.9 < d["y"] < 45.1 and 6.9 < d["x"] < 7.1
    for u, v, k, d in G.edges(keys=True, data=True):
        assert k == 0 and u != v
        assert isinstance(d["osmid"], int)
        assert d["highway"] in {"primary", "secondary", "tertiary", "residential"}
        assert isinstance(d["oneway"], bool) and isinstance(d["reversed"], bool)
        assert "maxspeed" not in d or d["maxspeed"].isdigit()
        a, b = G.nodes[u], G.nodes[v]
        assert d["length"] == pytest.approx(_dist_m((a["y"], a["x"]), (b["y"], b["x"])), rel=1e-3)
        assert d["length"] > 1.0
        if not d["oneway"]:
            assert G.has_edge(v, u)
    # the city is a few km across
    xs = [d["x"] for _, d in G.nodes(data=True)]
    ys = [d["y"] for _, d in G.nodes(data=True)]
    width = _dist_m((45.0, min(xs)), (45.0, max(xs)))
    height = _dist_m((min(ys), 7.0), (max(ys), 7.0))
    assert 2_000 < width < 8_000 and 1_500 < height < 8_000


def test_mix_of_roads(G):
    edges = [d for *_, d in G.edges(data=True)]
    classes = {d["highway"] for d in edges}
    assert classes == {"primary", "secondary", "tertiary", "residential"}
    missing = np.mean(["maxspeed" not in d for d in edges])
    assert 0.2 <= missing <= 0.4
    assert any(d["oneway"] for d in edges)
    assert any(d["reversed"] for d in edges)
    # ways span several segments; a way id is shared by its segments
    way_sizes = {}
    for d in edges:
        way_sizes[d["osmid"]] = way_sizes.get(d["osmid"], 0) + 1
    assert max(way_sizes.values()) >= 6
    assert len(way_sizes) < len(edges) / 2
    # a few dead ends (a node whose only neighbour is reached both ways)
    und = G.to_undirected(as_view=True)
    dead = [n for n in G if len(set(und.neighbors(n))) == 1]
    assert len(dead) >= 3


def test_elevation(G):
    ele = np.array([d["ele"] for _, d in G.nodes(data=True)])
    assert ele.min() >= 0 and ele.max() <= 250
    assert ele.max() - ele.min() >= 150
    grades = [
        abs(G.nodes[v]["ele"] - G.nodes[u]["ele"]) / d["length"] for u, v, d in G.edges(data=True)
    ]
    assert max(grades) > 0.03  # real climbs
    assert np.median(grades) < 0.15  # but smooth


def test_connectivity(G):
    lscc = max(nx.strongly_connected_components(G), key=len)
    assert len(lscc) >= 0.8 * len(G)


def test_osmnx_pipeline(G):
    ox = pytest.importorskip("osmnx")
    S = ox.simplify_graph(G.copy())
    assert 0 < len(S) < len(G)
    L = ox.truncate.largest_component(S, strongly=True)
    assert len(L) >= 0.8 * len(S)
    assert all("ele" in d for _, d in L.nodes(data=True))


def test_route_points(G):
    pts = synthetic_route_points(G)
    assert set(pts) == {"A", "B"}
    lats = [d["y"] for _, d in G.nodes(data=True)]
    lons = [d["x"] for _, d in G.nodes(data=True)]
    diam = _dist_m((min(lats), min(lons)), (max(lats), max(lons)))
    coords = {(d["y"], d["x"]): n for n, d in G.nodes(data=True)}
    lscc = max(nx.strongly_connected_components(G), key=len)
    for start, end in pts.values():
        for lat, lon in (start, end):
            assert min(lats) <= lat <= max(lats) and min(lons) <= lon <= max(lons)
            assert coords[(lat, lon)] in lscc
        assert _dist_m(start, end) >= 0.5 * 0.8 * diam  # bbox diagonal overestimates
        assert nx.has_path(G, coords[start], coords[end])
    (a0, a1) = pts["A"]
    assert a0[1] < a1[1]  # west to east
    assert _dist_m((45.0, a0[1]), (45.0, a1[1])) >= 0.8 * _dist_m(
        (45.0, min(lons)), (45.0, max(lons))
    )
    b0, b1 = (G.nodes[coords[p]]["ele"] for p in pts["B"])
    assert b1 - b0 >= 50
    assert synthetic_route_points(G) == pts


@pytest.mark.parametrize("seed", [1, 2, 7])
def test_other_seeds_and_sizes(seed):
    for size in (60, 400):
        g = synthetic_graph(seed=seed, size=size)
        assert 0.6 * size <= len(g) <= 1.4 * size
        lscc = max(nx.strongly_connected_components(g), key=len)
        assert len(lscc) >= 0.8 * len(g)
        pts = synthetic_route_points(g)
        coords = {(d["y"], d["x"]): d["ele"] for _, d in g.nodes(data=True)}
        assert coords[pts["B"][1]] - coords[pts["B"][0]] >= 50


@pytest.mark.parametrize("kwargs", [{"size": 10}, {"size": 4.5}, {"seed": -1}, {"seed": True}])
def test_bad_arguments(kwargs):
    with pytest.raises(EvrouteError):
        synthetic_graph(**kwargs)


# --------------------------------------------------------------------------------------
# sized cities (synthetic-<N>k) and the OSM XML writer
# --------------------------------------------------------------------------------------


def _graph_hash(g) -> str:
    import hashlib

    return hashlib.sha256(repr(sorted((u, v, sorted(d.items())) for u, v, d in g.edges(data=True))).encode()).hexdigest()[:12]


def test_default_city_unchanged_by_the_faster_shortest_paths():
    """Road classes come from SciPy's Dijkstra since the sized cities; the default city is the
    same graph as with networkx's (hash taken before the switch)."""
    assert _graph_hash(synthetic_graph(size=400)) == "baebc144a5f1"
    assert _graph_hash(synthetic_graph(size=2000)) == "8e15cd10188d"


@pytest.mark.parametrize("name,target", [("synthetic-2k", 2000), ("synthetic-4.5k", 4500)])
def test_sized_city_has_about_n_thousand_edges_and_the_same_character(name, target):
    from evroute.physics.routes import resolve_route, route_names
    from evroute.roads.network import load_network, network_fingerprint

    net = load_network(name, use_cache=False)
    assert abs(net.n_edges - target) <= 0.15 * target
    assert network_fingerprint(load_network(name, use_cache=False)) == network_fingerprint(net)
    classes = set(net.edges.highway)
    assert {"primary", "secondary", "tertiary", "residential"} <= classes
    assert 0 < net.edges.grade.abs().max() <= 0.25 + 1e-9
    assert route_names(name) == [f"{name}:A", f"{name}:B"]
    for r in ("A", "B"):
        route = resolve_route(net, r)
        assert route.name == f"{name}:{r}" and route.start != route.end


def test_osm_writer_round_trips_through_osmnx(tmp_path):
    """The raw graph written as OSM XML reads back (osmnx) with the same nodes, segments,
    way ids, tags and lengths, and prepares to the same network."""
    from evroute.roads.network import load_network
    from evroute.roads.osm import read_osm_graph, write_osm_xml

    g = synthetic_graph(size=500)
    path = tmp_path / "city.osm"
    n_ways = write_osm_xml(g, path)
    assert n_ways == len({d["osmid"] for *_, d in g.edges(data=True)})
    h = read_osm_graph(path)
    ge = {(u, v): d for u, v, d in g.edges(data=True)}
    he = {(u, v): d for u, v, d in h.edges(data=True)}
    assert set(ge) == set(he) and dict(g.nodes(data="y")) == dict(h.nodes(data="y"))
    for k, d in ge.items():
        e = he[k]
        assert (d["osmid"], d["highway"], d["oneway"], d["reversed"]) == (e["osmid"], e["highway"], e["oneway"], e["reversed"])
        assert str(d.get("maxspeed")) == str(e.get("maxspeed"))
        assert d["length"] == pytest.approx(e["length"], abs=1e-9)
    assert all(float(h.nodes[n]["ele"]) == g.nodes[n]["ele"] for n in g.nodes)
    direct = load_network("synthetic", size=500, use_cache=False)
    via_osm = load_network(str(path), use_cache=False)
    for col in ("u", "v", "speed_mps", "highway"):
        assert direct.edges[col].tolist() == via_osm.edges[col].tolist()
    for col in ("length_m", "grade"):  # (sums of segment lengths: the last bits may differ)
        np.testing.assert_allclose(direct.edges[col], via_osm.edges[col], rtol=1e-12, atol=1e-12)


def test_too_large_a_city_is_refused_before_building(capsys, monkeypatch):
    import evroute.roads.names as names_mod
    from evroute.cli import main

    monkeypatch.setattr(names_mod, "available_memory", lambda: 1_000_000_000)
    for name in ("synthetic-300k", "synthetic-1000k"):  # networkx-built, array-built
        assert main(["networks", "info", name]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "needs about" in err[0] and "1.0 GB is available" in err[0]


# ----------------------------------------------------------------- the array-built city
@pytest.fixture(scope="module")
def array_city():
    """synthetic-6k built from arrays (the threshold lowered for the test)."""
    import evroute.roads.names as names_mod
    from evroute.roads.network import load_network

    old = names_mod.ARRAY_BUILD_FROM_EDGES
    names_mod.ARRAY_BUILD_FROM_EDGES = 0
    try:
        return load_network("synthetic-6k", use_cache=False)
    finally:
        names_mod.ARRAY_BUILD_FROM_EDGES = old


def test_the_vectorised_line_graph_is_the_line_graph(array_city):
    """line_graph_arrays against the reference line_graph (no turn restrictions) on a city
    with at most one edge each way between two nodes: the same connections, U-turns only at
    dead ends."""
    from evroute.roads.line_graph import line_graph, line_graph_arrays

    net = array_city
    ids = net.nodes.index.to_numpy()
    u = np.searchsorted(ids, net.edges.u.to_numpy())
    v = np.searchsorted(ids, net.edges.v.to_numpy())
    src, dst, _ = line_graph(u, v, net.edges.length_m.to_numpy(), ways=net.edge_ways, restrictions=[])
    src2, dst2 = line_graph_arrays(u, v)
    assert np.array_equal(src, src2) and np.array_equal(dst, dst2)


def test_the_array_built_city_is_a_drivable_city(array_city):
    """The array-built city: about the size asked, strongly connected line graph, lengths the
    great-circle distances of the end nodes, grades bounded, the four road classes, one-way
    streets, and both routes resolved with a path between their ends."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    from evroute.physics.routes import resolve_route
    from evroute.roads.oracle import Oracle

    net = array_city
    assert net.meta["builder"] == "arrays" and "built from arrays" in net.meta["source"]
    assert abs(net.n_edges - 6000) <= 0.15 * 6000
    E = net.n_edges
    L = sp.coo_matrix((np.ones(net.n_connections), (net.conn_src, net.conn_dst)), shape=(E, E))
    assert connected_components(L, directed=True, connection="strong")[0] == 1
    e, n = net.edges, net.nodes
    a, b = n.loc[e.u], n.loc[e.v]
    for k in np.linspace(0, E - 1, 25).astype(int):
        d = _dist_m((a.lat.iloc[k], a.lon.iloc[k]), (b.lat.iloc[k], b.lon.iloc[k]))
        assert e.length_m.iloc[k] == pytest.approx(max(d, 0.1), rel=2e-3)
    assert {"primary", "secondary", "tertiary", "residential"} <= set(e.highway)
    assert 0 < e.grade.abs().max() <= 0.25 + 1e-9
    pairs = set(zip(e.u, e.v, strict=True))
    oneway = sum((v, u) not in pairs for u, v in pairs)
    assert 0.03 * E < oneway < 0.3 * E
    assert len(net.geometry) == E and all(g.shape == (2, 2) for g in net.geometry[:50])
    oracle = Oracle.from_network(net)
    for r in ("A", "B"):
        route = resolve_route(net, r)
        path = oracle.shortest_path(net.edges.length_m.to_numpy(), route.start, route.end).edges
        assert path[0] == route.start and path[-1] == route.end and len(path) > 5


def test_the_array_built_city_is_the_same_in_every_process(tmp_path):
    import subprocess
    import sys

    code = ("import evroute.roads.names as n, evroute.roads.network as m; n.ARRAY_BUILD_FROM_EDGES = 0; "
            "print(m.network_fingerprint(m.load_network('synthetic-3k', use_cache=False)))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**__import__("os").environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "77")}
    assert len(outs) == 1 and len(next(iter(outs)).strip()) > 8


def test_the_array_built_city_refuses_a_dem(monkeypatch):
    import evroute.roads.names as names_mod
    from evroute.roads.network import load_network

    monkeypatch.setattr(names_mod, "ARRAY_BUILD_FROM_EDGES", 0)
    dem = __import__("pathlib").Path(__file__)  # any existing file: refused before it is read
    with pytest.raises(EvrouteError, match="elevation from its own field"):
        load_network("synthetic-2k", dem=dem, use_cache=False)


def test_networks_osm_refuses_an_array_built_size(tmp_path, capsys):
    from evroute.cli import main

    assert main(["networks", "osm", "synthetic-1000k", "--out", str(tmp_path / "city.osm")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "built from arrays" in err[0] and not (tmp_path / "city.osm").exists()
