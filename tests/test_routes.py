import json
import math

import numpy as np
import pytest

from evroute.errors import EvrouteError
from evroute.physics.routes import (
    parse_latlon,
    reference_routes,
    resolve_route,
    route_names,
    snap_point,
)
from evroute.reports.report import routes_geojson, write_geojson


def haversine(lat1, lon1, lat2, lon2):
    r = 6_371_008.8
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dphi, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dphi / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * r * math.asin(math.sqrt(a))


def test_parse_latlon():
    assert parse_latlon(" 43.7, 7.4 ") == (43.7, 7.4)
    for bad in ["43.7", "a,b", "43.7,7.4,1", "95,7", "nan,7"]:
        with pytest.raises(EvrouteError):
            parse_latlon(bad)


def test_snap_matches_nearest_vertex_brute_force(synthetic):
    rng = np.random.default_rng(0)
    s, w, n, e = synthetic.bounds
    for _ in range(10):
        lat, lon = rng.uniform(s, n), rng.uniform(w, e)
        edge = snap_point(synthetic, lat, lon)
        # brute force over densified geometry: the snapped edge is (nearly) the closest
        best = {}
        for i, g in enumerate(synthetic.geometry):
            pts = np.concatenate([np.linspace(g[k], g[k + 1], 50) for k in range(len(g) - 1)])
            best[i] = min(haversine(lat, lon, p[1], p[0]) for p in pts[::7])
        closest = min(best.values())
        assert best[edge] <= closest + 5.0


def test_outside_points_rejected(synthetic):
    with pytest.raises(EvrouteError, match="outside"):
        snap_point(synthetic, 10.0, 10.0)
    with pytest.raises(EvrouteError, match="needs both: --route LAT,LON:LAT,LON"):
        resolve_route(synthetic, None, "45,7", to_point=None)
    with pytest.raises(EvrouteError, match="unknown route"):
        resolve_route(synthetic, "Z")
    with pytest.raises(EvrouteError, match="belongs to network"):
        resolve_route(synthetic, "monaco:A")


def test_synthetic_routes_and_reference_routes(synthetic):
    for r in ("A", "B"):
        spec = resolve_route(synthetic, r)
        assert spec.start != spec.end
        routes = reference_routes(synthetic, spec)
        kinds = {x["kind"]: x for x in routes}
        assert set(kinds) == {"energy", "shortest", "fastest"}
        # each route is optimal for its own criterion
        assert kinds["energy"]["energy_wh"] <= min(x["energy_wh"] for x in routes) + 1e-9
        assert kinds["shortest"]["length_m"] <= min(x["length_m"] for x in routes) + 1e-9
        assert kinds["fastest"]["time_s"] <= min(x["time_s"] for x in routes) + 1e-9
        assert kinds["energy"]["edges"][0] == spec.start and kinds["energy"]["edges"][-1] == spec.end
    b = reference_routes(synthetic, resolve_route(synthetic, "B"))[0]
    assert b["length_m"] > 1500


def test_geojson_routes(synthetic, tmp_path):
    spec = resolve_route(synthetic, "A")
    routes = reference_routes(synthetic, spec)
    path = tmp_path / "r.geojson"
    write_geojson(path, routes_geojson(synthetic, routes, spec.name))
    fc = json.loads(path.read_text())
    assert fc["type"] == "FeatureCollection" and len(fc["features"]) == 3
    s, w, n, e = synthetic.bounds
    for f in fc["features"]:
        assert f["type"] == "Feature" and f["geometry"]["type"] == "LineString"
        coords = np.array(f["geometry"]["coordinates"])
        assert coords.shape[1] == 2 and len(coords) >= 2
        lon, lat = coords[:, 0], coords[:, 1]  # RFC 7946: longitude first
        assert np.all((lon >= w - 1e-9) & (lon <= e + 1e-9) & (lat >= s - 1e-9) & (lat <= n + 1e-9))
        assert {"kind", "energy_wh", "length_m", "time_s", "edges"} <= set(f["properties"])
        # the line starts at the start edge's first vertex
        assert np.allclose(coords[0], synthetic.geometry[spec.start][0])


@pytest.mark.real
@pytest.mark.parametrize("name", ["luxembourg:A", "luxembourg:B"])
def test_paper_routes_on_their_osm_ways(luxembourg, name):
    from evroute.registry import load_registry

    spec = resolve_route(luxembourg, name)
    reg = load_registry("routes")[name]
    for edge, end in ((spec.start, reg["start"]), (spec.end, reg["end"])):
        assert end["way"] in luxembourg.edge_ways[edge]
        assert bool(luxembourg.edges.reversed.iat[edge]) == (end["direction"] == "backward")
        mid = luxembourg.geometry[edge].mean(axis=0)
        assert haversine(end["near"][0], end["near"][1], mid[1], mid[0]) < 400


@pytest.mark.real
@pytest.mark.parametrize("name", ["monaco:A", "monaco:B"])
def test_monaco_routes(monaco, name):
    spec = resolve_route(monaco, name)
    assert 0 <= spec.start < monaco.n_edges and 0 <= spec.end < monaco.n_edges
    routes = reference_routes(monaco, spec)
    assert routes[0]["length_m"] > 3000
    if name == "monaco:B":  # the climb: the end is far above the start
        h = monaco.nodes.elevation_m
        climb = h[monaco.edges.v.iat[spec.end]] - h[monaco.edges.u.iat[spec.start]]
        assert climb > 250


def test_route_names():
    assert {"monaco:A", "monaco:B", "luxembourg:A", "luxembourg:B", "synthetic:A"} <= set(route_names())
