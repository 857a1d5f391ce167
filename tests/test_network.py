import json
import math
import os
import subprocess
import sys
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from evroute.errors import EvrouteError
from evroute.roads.line_graph import line_graph
from evroute.roads.network import (
    DEFAULT_SPEEDS_KMH,
    lipschitz_envelope,
    load_network,
    network_fingerprint,
)
from evroute.roads.osm import parse_maxspeed

from .osmxml import WAYS, elevation, write_osm


@pytest.fixture()
def small_osm(tmp_path):
    return write_osm(tmp_path / "small.osm")


@pytest.fixture()
def small(small_osm):
    return load_network(str(small_osm), use_cache=False)


def test_drivable_simplified_component(small):
    e = small.edges
    # the footway spur (nodes 11, 12) is gone, corner nodes 1, 3, 7, 9 are simplified away
    assert set(e.u) | set(e.v) == {2, 4, 5, 6, 8, 10}
    assert len(e) == 16
    # every edge has a geometry from u to v in lon/lat order
    for i, g in enumerate(small.geometry):
        u, v = e.u.iat[i], e.v.iat[i]
        assert np.allclose(g[0], small.nodes.loc[u, ["lon", "lat"]].to_numpy())
        assert np.allclose(g[-1], small.nodes.loc[v, ["lon", "lat"]].to_numpy())
    # the merged corner edge 2 -> 1 -> 4 has both way ids and the length of both segments
    i = int(np.flatnonzero((e.u == 2) & (e.v == 4))[0])
    assert set(small.edge_ways[i]) == {101, 104}
    assert e.length_m.iat[i] == pytest.approx(111.2 + 110.1, rel=0.01)


def test_oneway_respected(small):
    e = small.edges
    assert ((e.u == 2) & (e.v == 5)).any() and not ((e.u == 5) & (e.v == 2)).any()


def test_grades_from_ele_tags(small):
    e, n = small.edges, small.nodes
    for i in range(len(e)):
        hu = elevation(n.lat[e.u.iat[i]], n.lon[e.u.iat[i]])
        hv = elevation(n.lat[e.v.iat[i]], n.lon[e.v.iat[i]])
        assert e.grade.iat[i] == pytest.approx((hv - hu) / e.length_m.iat[i], abs=2e-3)
        assert e.incline_rad.iat[i] == pytest.approx(math.atan(e.grade.iat[i]))
    assert small.meta["elevation_source"] == "osm"


def test_speeds_parsed_and_imputed(small):
    e = small.edges
    sec = e[e.highway == "secondary"]
    assert np.allclose(sec.speed_mps, 50 / 3.6)
    spur = e[(e.u == 6) & (e.v == 10)]
    assert spur.speed_mps.iat[0] == pytest.approx(DEFAULT_SPEEDS_KMH["residential"] / 3.6)
    assert not spur.maxspeed_known.iat[0]


@pytest.mark.parametrize("tag,expected", [("50", 50 / 3.6), ("30 mph", 30 * 0.44704), ("70;50", 70 / 3.6),
                                          (["40", "60"], 40 / 3.6), ("none", math.nan), (None, math.nan)])
def test_parse_maxspeed(tag, expected):
    got = parse_maxspeed(tag)
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


def test_turn_restriction_honoured(small):
    e = small.edges
    east = int(np.flatnonzero((e.u == 4) & (e.v == 5))[0])
    north = int(np.flatnonzero((e.u == 5) & (e.v == 8))[0])
    on = int(np.flatnonzero((e.u == 5) & (e.v == 6))[0])
    conns = set(zip(small.conn_src.tolist(), small.conn_dst.tolist(), strict=True))
    assert (east, north) not in conns and (east, on) in conns


def test_line_graph_is_networkx_line_graph_minus_uturns(small_osm):
    net = load_network(str(small_osm), use_cache=False)
    # rebuild without restrictions and compare with networkx
    e = net.edges
    src, dst, _ = line_graph(e.u.to_numpy(), e.v.to_numpy(), e.length_m.to_numpy(), ways=net.edge_ways, restrictions=[])
    G = nx.MultiDiGraph()
    for i in range(len(e)):
        G.add_edge(int(e.u.iat[i]), int(e.v.iat[i]), key=i)
    L = nx.line_graph(G)
    expected = set()
    for (a, b, k1), (b2, c, k2) in L.edges():
        assert b == b2
        uturn = c == a and abs(e.length_m.iat[k1] - e.length_m.iat[k2]) < 1.0
        dead_end = all(w == a for _, w in G.out_edges(b))
        if not uturn or dead_end:
            expected.add((k1, k2))
    assert set(zip(src.tolist(), dst.tolist(), strict=True)) == expected
    # the dead end (node 10) allows its U-turn; elsewhere there is none
    spur_in = int(np.flatnonzero((e.u == 6) & (e.v == 10))[0])
    spur_out = int(np.flatnonzero((e.u == 10) & (e.v == 6))[0])
    assert (spur_in, spur_out) in expected


def test_lipschitz_envelope_bounds_grades_and_keeps_plausible_input():
    rng = np.random.default_rng(1)
    G = nx.connected_watts_strogatz_graph(60, 4, 0.3, seed=1)
    a = np.array([u for u, v in G.edges()])
    b = np.array([v for u, v in G.edges()])
    length = rng.uniform(5, 200, len(a))
    h = rng.uniform(0, 30, 60)
    out = lipschitz_envelope(60, a, b, length=length, h=h, max_grade=0.1)
    assert np.all(out >= h - 1e-9)
    assert np.all(np.abs(out[a] - out[b]) <= 0.1 * length + 1e-9)
    # minimality: every raised node is pinned by a constraint with some neighbour
    smooth = lipschitz_envelope(60, a, b, length=length, h=np.zeros(60), max_grade=0.1)
    assert np.allclose(smooth, 0)


def test_flat_network_warns(tmp_path):
    path = write_osm(tmp_path / "flat.osm", ele=False)
    with pytest.warns(UserWarning, match="flat"):
        net = load_network(str(path), use_cache=False)
    assert net.meta["elevation_source"] == "none" and np.all(net.edges.grade == 0)


def test_cache_warm_equals_cold_and_detects_corruption(small_osm, tmp_path, monkeypatch):
    monkeypatch.setenv("EVROUTE_CACHE_DIR", str(tmp_path / "cache"))
    cold = load_network(str(small_osm))
    entries = list((tmp_path / "cache" / "networks").iterdir())
    assert len(entries) == 1
    warm = load_network(str(small_osm))
    assert network_fingerprint(warm) == network_fingerprint(cold)
    assert all(np.array_equal(a, b) for a, b in zip(warm.geometry, cold.geometry, strict=True))
    assert warm.edge_ways == cold.edge_ways and warm.meta == cold.meta
    # corrupt a file: the entry is rebuilt and still equal
    target = entries[0] / "edges.parquet"
    target.write_bytes(target.read_bytes()[:100])
    again = load_network(str(small_osm))
    assert network_fingerprint(again) == network_fingerprint(cold)
    assert json.loads((entries[0] / "manifest.json").read_text())["files"]["edges.parquet"]


def test_unwritable_cache_still_loads(small_osm, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("EVROUTE_CACHE_DIR", str(blocker / "sub"))
    with pytest.warns(UserWarning, match="not writable"):
        net = load_network(str(small_osm))
    assert net.n_edges == 16


def test_bad_inputs(tmp_path):
    with pytest.raises(EvrouteError, match="not found"):
        load_network(str(tmp_path / "missing.osm"))
    notosm = tmp_path / "notosm.osm"
    notosm.write_text("hello, world\n")
    with pytest.raises(EvrouteError, match="not an OSM XML"):
        load_network(str(notosm))
    footways = write_osm(tmp_path / "foot.osm", ways=[(1, [1, 2, 3], {"highway": "footway"})],
                         relations=False)
    with pytest.raises(EvrouteError, match="no drivable roads"):
        load_network(str(footways))
    oneway = write_osm(tmp_path / "oneway.osm", relations=False,
                       ways=[(1, [1, 2], {"highway": "residential", "oneway": "yes"})])
    with pytest.raises(EvrouteError, match="empty"):
        load_network(str(oneway))
    with pytest.raises(EvrouteError, match="unknown network"):
        load_network("atlantis")
    broken = tmp_path / "broken.osm"
    broken.write_text('<?xml version="1.0"?><osm><node id="1" lat="1" lon="1"></osm>')
    with pytest.raises(EvrouteError):
        load_network(str(broken))


def test_missing_builtin_file_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("EVROUTE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("EVROUTE_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(EvrouteError, match="evroute data fetch monaco"):
        load_network("monaco")


def test_synthetic_network_is_deterministic(synthetic):
    again = load_network("synthetic", use_cache=False)
    assert network_fingerprint(again) == network_fingerprint(synthetic)
    other = load_network("synthetic", seed=1, use_cache=False)
    assert network_fingerprint(other) != network_fingerprint(synthetic)
    assert 300 <= synthetic.n_edges <= 5000
    assert synthetic.meta["elevation_source"] == "synthetic"
    assert np.ptp(synthetic.nodes.elevation_m) > 50


# --- the real networks (sizes from ../shared/data/README.md, osmnx 2.1.1) -----------------

@pytest.mark.real
@pytest.mark.parametrize("fixture,nodes,edges,km,elev", [
    ("monaco", 1007, 2148, 360, (0.5, 614.6)),
    ("luxembourg", 2133, 5626, 971, None),
])
def test_real_network_sizes(request, fixture, nodes, edges, km, elev):
    net = request.getfixturevalue(fixture)
    assert len(net.nodes) == pytest.approx(nodes, rel=0.005)
    # a handful of edges reachable only through a U-turn are dropped from L(G)'s component
    assert net.n_edges == pytest.approx(edges, rel=0.005)
    assert net.edges.length_m.sum() / 1000 == pytest.approx(km, rel=0.01)
    if elev is None:
        assert net.meta["elevation_source"] == "none"
    else:
        assert net.meta["elevation_source"] == "osm"
        assert net.nodes.elevation_raw_m.min() == pytest.approx(elev[0], abs=0.5)
        assert net.nodes.elevation_raw_m.max() == pytest.approx(elev[1], abs=0.5)
    assert np.all(np.abs(net.edges.grade) <= net.meta["max_grade"] + 1e-9)
    s, w, n, e = net.bounds
    assert -90 < s < n < 90 and -180 < w < e < 180


@pytest.mark.real
def test_real_line_graph_strongly_connected(monaco, luxembourg):
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    for net in (monaco, luxembourg):
        m = sp.coo_matrix((np.ones(net.n_connections), (net.conn_src, net.conn_dst)),
                          shape=(net.n_edges,) * 2)
        assert connected_components(m, directed=True, connection="strong")[0] == 1


@pytest.mark.real
def test_monaco_turn_restrictions_applied(monaco):
    assert monaco.meta["turn_restrictions"] == 18
    assert monaco.meta["turn_restrictions_applied"] >= 1


def test_osm_from_cache_dir_when_the_data_folder_lacks_it(monkeypatch, tmp_path, small_osm):
    monkeypatch.setenv("EVROUTE_DATA_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("EVROUTE_CACHE_DIR", str(tmp_path / "c"))
    (tmp_path / "c" / "osm").mkdir(parents=True)
    (tmp_path / "c" / "osm" / "monaco.osm").write_bytes(Path(small_osm).read_bytes())
    net = load_network("monaco")
    assert net.n_edges == 16 and os.fspath(net.meta["source"]).endswith("monaco.osm")


def test_ways_fixture_sanity():
    assert any(t.get("highway") == "footway" for _, _, t in WAYS)


# --- merged tags: a fixed rule, never set order (issue: reproducible across processes) ---

def test_merge_segment_tags_rule():
    from evroute.roads.osm import merge_segment_tags

    # the class covering the most length wins, whatever the segment order
    segs = [("secondary", "50", "2", 40.0), ("residential", "30", None, 70.0), ("secondary", None, "2", 20.0)]
    for order in (segs, segs[::-1], [segs[1], segs[0], segs[2]]):
        m = merge_segment_tags(order)
        assert m["highway"] == "residential"  # 70 m against 60 m
        # speeds: only tagged segments count; 30 km/h covers 70 m, 50 km/h covers 40 m
        assert m["maxspeed"] == pytest.approx(30 / 3.6)
        assert m["lanes"] == "2"
    # ties go to sorted order: the smaller class name, the lower speed
    tie = [("tertiary", "50", None, 10.0), ("residential", "30 mph", None, 10.0)]
    assert merge_segment_tags(tie)["highway"] == "residential"
    assert merge_segment_tags(tie)["maxspeed"] == pytest.approx(30 * 0.44704)  # 13.4 < 13.9 m/s
    assert merge_segment_tags(tie[::-1]) == merge_segment_tags(tie)
    # "50" and "50 km/h" are the same limit: their lengths add up
    m = merge_segment_tags([("primary", "50", None, 10.0), ("primary", "50 km/h", None, 10.0),
                            ("primary", "70", None, 15.0)])
    assert m["maxspeed"] == pytest.approx(50 / 3.6)
    # no readable tag at all
    m = merge_segment_tags([("primary", None, None, 10.0), ("primary", "none", None, 5.0)])
    assert math.isnan(m["maxspeed"]) and m["lanes"] == ""


def test_merged_edge_tags_in_a_network(small):
    e = small.edges
    # edge 2 -> 1 -> 4: way 101 (residential, 30 km/h, 0.0014° of longitude at 45° N:
    # 110.1 m) then way 104 (tertiary, 20 mph, 0.001° of latitude: 111.2 m): the tertiary
    # segment is the longer one, so its class and limit win
    i = int(np.flatnonzero((e.u == 2) & (e.v == 4))[0])
    assert e.highway.iat[i] == "tertiary"
    assert e.speed_mps.iat[i] == pytest.approx(20 * 0.44704)
    assert small.edge_ways[i] == (101, 104)  # path order


# --- GeoDataFrames and osmnx graphs ---------------------------------------------------------

def test_to_gdfs_are_the_networks_own_arrays(small):
    nodes, edges = small.to_gdfs()
    assert nodes.crs.to_epsg() == 4326 and edges.crs.to_epsg() == 4326
    assert list(edges.index) == list(range(small.n_edges)) and list(nodes.index) == list(small.nodes.index)
    for e in range(small.n_edges):
        np.testing.assert_array_equal(np.asarray(edges.geometry.iloc[e].coords), small.geometry[e])
    np.testing.assert_array_equal(edges.length_m.to_numpy(), small.edges.length_m.to_numpy())
    np.testing.assert_array_equal(nodes.geometry.x.to_numpy(), small.nodes.lon.to_numpy())
    assert small.to_gdfs(nodes=False).shape[0] == small.n_edges
    with pytest.raises(EvrouteError):
        small.to_gdfs(nodes=False, edges=False)


def _edge_table(net, tags=True):
    e = net.edges
    cols = [e.u, e.v, e.length_m.round(6), e.grade.round(9), e.speed_mps.round(9)] + ([e.highway] if tags else [])
    return sorted(zip(*cols, strict=True))


def test_a_network_from_an_osmnx_graph_is_the_one_from_its_file(small_osm, small):
    """An unsimplified osmnx graph of an OSM file gives the same edges as the file read by
    path (turn restrictions aside: an osmnx graph has none); a simplified one of its drivable
    roads, and the same projected, the same geometry, lengths, grades and speeds."""
    import osmnx as ox

    from evroute.roads.network import DRIVABLE, network_from_graph
    from evroute.roads.osm import first_tag, read_osm_graph

    raw = read_osm_graph(small_osm)
    before = raw.number_of_edges()
    net = network_from_graph(raw, name="mine")
    assert raw.number_of_edges() == before  # the user's graph is not changed
    assert _edge_table(net) == _edge_table(small) and net.name == "mine"
    assert net.n_connections >= small.n_connections  # (the file's restriction removes turns)
    drive = raw.copy()
    drive.remove_edges_from([(u, v, k) for u, v, k, d in raw.edges(keys=True, data=True)
                             if first_tag(d.get("highway")) not in DRIVABLE])
    drive.remove_nodes_from([n for n in list(drive.nodes) if drive.degree(n) == 0])
    simplified = ox.simplify_graph(drive)
    a = network_from_graph(simplified)
    assert _edge_table(a, tags=False) == _edge_table(small, tags=False)
    b = network_from_graph(ox.projection.project_graph(simplified))
    assert _edge_table(b) == _edge_table(a)


def test_merged_tags_of_a_simplified_graph_do_not_follow_the_hash_seed(small_osm, tmp_path):
    code = ("import sys, osmnx as ox\nfrom evroute.roads.network import network_from_graph\n"
            f"g = ox.graph_from_xml({str(small_osm)!r}, simplify=True, retain_all=True)\n"
            "print(sorted(zip(network_from_graph(g).edges.u, network_from_graph(g).edges.highway)))")
    outs = {subprocess.run([sys.executable, "-W", "ignore", "-c", code], env={**os.environ, "PYTHONHASHSEED": str(h)},
                           capture_output=True, text=True, timeout=120).stdout for h in (1, 2, 3)}
    assert len(outs) == 1 and "residential" in outs.pop()
