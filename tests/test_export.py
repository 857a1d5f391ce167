"""GeoJSON (RFC 7946) and HTML export of a run or of one run of a compare directory."""

from __future__ import annotations

import json
import socket

import numpy as np
import pandas as pd
import pytest

from evroute.cli import main
from evroute.errors import EvrouteError
from evroute.reports.export import export, resolve_run_dir, run_geojson
from evroute.runs.config import SimulationConfig
from evroute.runs.experiment import run_grid
from evroute.runs.grid import make_grid
from evroute.runs.simulation import simulate

HORIZON = 7


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, synthetic):
    out = tmp_path_factory.mktemp("export") / "run"
    simulate(SimulationConfig(policy="gp-ts", route="B", horizon=HORIZON, seed=2), out, net=synthetic)
    return out


def check_linestring(feature, bounds):
    s, w, n, e = bounds
    assert feature["type"] == "Feature"
    geom = feature["geometry"]
    assert geom["type"] == "LineString"
    coords = np.asarray(geom["coordinates"], dtype=float)
    assert coords.ndim == 2 and coords.shape[1] == 2 and len(coords) >= 2
    # RFC 7946: [longitude, latitude]; the synthetic city lies near 45 N 7 E, so the order is unambiguous
    tol = 1e-6
    assert np.all((coords[:, 0] >= w - tol) & (coords[:, 0] <= e + tol)), "longitude first"
    assert np.all((coords[:, 1] >= s - tol) & (coords[:, 1] <= n + tol))
    return coords


def test_geojson_layers_and_rfc7946(run_dir, synthetic, tmp_path, capsys):
    out = tmp_path / "run.geojson"
    code = main(["export", str(run_dir), "--geojson", str(out)])
    assert code == 0 and f"wrote {out}" in capsys.readouterr().out
    fc = json.loads(out.read_text())
    assert fc["type"] == "FeatureCollection"
    assert "crs" not in fc  # RFC 7946: WGS84 only, no crs member
    layers = pd.Series([f["properties"]["layer"] for f in fc["features"]]).value_counts().to_dict()
    assert layers == {"edge": synthetic.n_edges, "round": HORIZON, "optimal": 1}
    all_coords = np.concatenate([check_linestring(f, synthetic.bounds) for f in fc["features"]])
    w, s, e, n = fc["bbox"]
    assert (w, s, e, n) == (all_coords[:, 0].min(), all_coords[:, 1].min(), all_coords[:, 0].max(), all_coords[:, 1].max())
    assert w < e and s < n

    rounds = pd.read_parquet(run_dir / "rounds.parquet")
    edges = pd.read_parquet(run_dir / "edges.parquet")
    summary = json.loads((run_dir / "summary.json").read_text())
    feats = {k: [f for f in fc["features"] if f["properties"]["layer"] == k] for k in layers}
    for f, r in zip(feats["round"], rounds.itertuples(), strict=True):
        p = f["properties"]
        assert p["t"] == r.t and p["edges"] == list(r.path)
        assert p["energy_wh"] == pytest.approx(r.expected_energy_wh) and p["regret_wh"] == pytest.approx(r.regret_wh)
        # the geometry follows the path: first vertex of the start edge, last of the end edge
        assert f["geometry"]["coordinates"][0] == pytest.approx(list(synthetic.geometry[r.path[0]][0]), abs=1e-6)
        assert f["geometry"]["coordinates"][-1] == pytest.approx(list(synthetic.geometry[r.path[-1]][-1]), abs=1e-6)
    for f in feats["edge"]:
        p = f["properties"]
        row = edges.iloc[p["edge"]]
        assert p["visits"] == row.visits
        assert p["post_mean_wh"] == pytest.approx(row.post_mean_final)
        assert p["post_std_wh"] == pytest.approx(row.post_std_final) and p["post_std_wh"] > 0
    assert sum(f["properties"]["visits"] for f in feats["edge"]) == int(rounds.n_edges.sum())
    opt = feats["optimal"][0]["properties"]
    assert opt["edges"] == summary["optimal_path"] and opt["energy_wh"] == pytest.approx(summary["optimal_energy_wh"])
    assert fc["properties"]["attribution"] == "© OpenStreetMap contributors"
    assert fc["properties"]["policy"] == "gp-ts" and fc["properties"]["seed"] == 2


def test_geopackage_holds_the_geojson_layers(run_dir, synthetic, tmp_path, capsys):
    """--gpkg: one table per layer, EPSG:4326, the same features as the GeoJSON (read back
    with pyogrio, GDAL's reader, independently of the writer's geopandas frames)."""
    import pyogrio

    gj, gpkg = tmp_path / "run.geojson", tmp_path / "run.gpkg"
    assert main(["export", str(run_dir), "--geojson", str(gj), "--gpkg", str(gpkg)]) == 0
    fc = json.loads(gj.read_text())
    assert sorted(name for name, _ in pyogrio.list_layers(gpkg)) == ["edge", "optimal", "round"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left
    rounds = pyogrio.read_dataframe(gpkg, layer="round")
    assert rounds.crs.to_epsg() == 4326 and len(rounds) == HORIZON
    want = [f for f in fc["features"] if f["properties"]["layer"] == "round"]
    assert rounds.t.tolist() == [f["properties"]["t"] for f in want]
    np.testing.assert_allclose(rounds.regret_wh, [f["properties"]["regret_wh"] for f in want])
    np.testing.assert_allclose(np.asarray(rounds.geometry.iloc[0].coords), want[0]["geometry"]["coordinates"])
    assert rounds.edges.iloc[0] == " ".join(map(str, want[0]["properties"]["edges"]))
    edges = pyogrio.read_dataframe(gpkg, layer="edge")
    assert len(edges) == synthetic.n_edges and "post_mean_wh" in edges


def test_last_k_and_html_without_network(run_dir, synthetic, tmp_path, monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("export must not open network connections")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    gj, html = tmp_path / "a.geojson", tmp_path / "a.html"
    files = export(run_dir, geojson=gj, html=html, last=3)
    assert files == [gj, html]
    fc = json.loads(gj.read_text())
    ts = [f["properties"]["t"] for f in fc["features"] if f["properties"]["layer"] == "round"]
    assert ts == [HORIZON - 2, HORIZON - 1, HORIZON]
    text = html.read_text()
    assert "leaflet" in text.lower() and "OpenStreetMap contributors" in text
    assert "optimal route" in text and "edges (visits, posterior)" in text


def test_compare_directory_runs(tmp_path, synthetic, capsys):
    grid = make_grid(network="synthetic", routes="A", policies="bi-ts,bi-ucb", seeds=1, horizon=4)
    run_grid(grid, tmp_path, jobs=1, progress=False, log=lambda m: None)
    assert resolve_run_dir(tmp_path).name == "synthetic-A-bi-ts-s0"  # the first run of the grid
    assert resolve_run_dir(tmp_path, "synthetic-A-bi-ucb-s0").name == "synthetic-A-bi-ucb-s0"
    out = tmp_path / "x.geojson"
    assert main(["export", str(tmp_path), "--run", "synthetic-A-bi-ucb-s0", "--geojson", str(out)]) == 0
    assert json.loads(out.read_text())["properties"]["policy"] == "bi-ucb"
    with pytest.raises(EvrouteError, match="no finished run 'nope'"):
        resolve_run_dir(tmp_path, "nope")
    fc = run_geojson(tmp_path / "runs" / "synthetic-A-bi-ts-s0", net=synthetic)
    assert len(fc["features"]) == synthetic.n_edges + 4 + 1


@pytest.mark.parametrize("args,msg", [
    (["--geojson", "{out}"], "neither a run directory"),
    ([], "nothing to write"),
    (["--geojson", "{out}", "--last", "0"], "--last must be a positive integer"),
])
def test_export_bad_input_one_line_exit_2(tmp_path, capsys, args, msg):
    (tmp_path / "notarun").mkdir()
    (tmp_path / "notarun" / "config.json").write_text("{}")  # unfinished: no summary.json
    args = [a.format(out=tmp_path / "o.geojson") for a in args]
    code = main(["export", str(tmp_path / "notarun"), *args])
    err = capsys.readouterr().err
    assert code == 2
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and msg in lines[0], err
    assert not (tmp_path / "o.geojson").exists()


def test_run_gdfs_are_the_geojsons_layers(run_dir, synthetic):
    """The run as GeoDataFrames (EPSG:4326) with the same features the GeoJSON holds (which
    geopandas writes from them)."""
    from evroute.reports.export import run_gdfs

    layers = run_gdfs(run_dir, net=synthetic)
    fc = run_geojson(run_dir, net=synthetic)
    assert {k: len(v) for k, v in layers.items()} == {"edge": synthetic.n_edges, "round": HORIZON, "optimal": 1}
    assert all(g.crs.to_epsg() == 4326 for g in layers.values())
    feats = [f for f in fc["features"] if f["properties"]["layer"] == "round"]
    for f, (_, row) in zip(feats, layers["round"].iterrows(), strict=True):
        assert f["properties"]["edges"] == row.edges
        np.testing.assert_allclose(f["geometry"]["coordinates"], np.asarray(row.geometry.coords))
    edges = pd.read_parquet(run_dir / "edges.parquet")
    np.testing.assert_array_equal(layers["edge"].post_mean_wh.to_numpy(), edges.post_mean_final.to_numpy())
    assert layers["edge"].attrs["policy"] == "gp-ts" and fc["properties"]["seed"] == 2


@pytest.fixture
def turned_truth():
    """A plug-in truth of edges plus turns: E_det on the edges, and each turn the energy one car
    pays changing speed between the two roads' limits, slowing to half the next one's first (its
    change of kinetic energy, and what the efficiencies lose); cars spread by 1 Wh."""
    from evroute.bandit.environments import TRUTHS, Turns, register_truth
    from evroute.physics.energy import kinetic_energy_wh, potential_energy_wh
    from evroute.world.junctions import speed_change_loss_wh

    def factory(setup):
        net = setup.net
        src, dst = np.asarray(net.conn_src), np.asarray(net.conn_dst)
        v = net.edges.speed_mps.to_numpy()
        psi = kinetic_energy_wh(v)
        loss = speed_change_loss_wh(v[src], 0.5 * v[dst]) + speed_change_loss_wh(0.5 * v[dst], v[dst])
        turns = Turns(psi[dst] - psi[src] + loss, psi, src, dst, noise_std=1.0)
        potential = potential_energy_wh(net.edges.length_m.to_numpy(), net.edges.grade.to_numpy())
        return Truth(setup.mean.copy(), setup.noise_std, description={}, turns=turns, potential=potential)

    from evroute.bandit.environments import Truth

    register_truth("turned", factory, description="E_det plus speed changes at the junctions")
    yield
    TRUTHS.unregister("turned")


def test_maps_show_the_turns_where_the_routes_pay_them(turned_truth, synthetic, tmp_path):
    """The run keeps the truth's turns (turns.parquet); the export's ``turn`` layer has a point at
    the junction of every turn the routes pay, with its cost, and a route's edges plus its
    turns_wh are its energy under the truth."""
    out = tmp_path / "run"
    simulate(SimulationConfig(policy="gp-ts", route="B", horizon=HORIZON, seed=1, truth="turned"), out,
             net=synthetic)
    turns = pd.read_parquet(out / "turns.parquet")
    assert len(turns) == synthetic.n_connections and turns.cost_wh.abs().sum() > 0
    gj, html = tmp_path / "t.geojson", tmp_path / "t.html"
    export(out, geojson=gj, html=html)
    fc = json.loads(gj.read_text())
    layer = {k: [f for f in fc["features"] if f["properties"]["layer"] == k] for k in ("turn", "round", "optimal")}
    cost = {(a, b): c for a, b, c in zip(turns.from_edge, turns.to_edge, turns.cost_wh, strict=True)}
    rounds = pd.read_parquet(out / "rounds.parquet")
    paid = {}
    for p in rounds.path:
        for a, b in zip(p[:-1], p[1:], strict=False):
            paid[(int(a), int(b))] = paid.get((int(a), int(b)), 0) + 1
    points = {(f["properties"]["from_edge"], f["properties"]["to_edge"]): f for f in layer["turn"]}
    optimal = json.loads((out / "summary.json").read_text())["optimal_path"]
    assert set(points) == set(paid) | set(zip(optimal[:-1], optimal[1:], strict=False))
    for key, f in points.items():
        assert f["geometry"]["type"] == "Point"
        assert f["properties"]["cost_wh"] == pytest.approx(cost[key], abs=1e-12)
        assert f["properties"]["rounds"] == paid.get(key, 0)
        end = synthetic.geometry[key[0]][-1]  # the junction: where the first edge ends, the next begins
        assert f["geometry"]["coordinates"] == pytest.approx([end[0], end[1]], abs=1e-6)
        assert np.allclose(synthetic.geometry[key[1]][0], end, atol=1e-9)
    f = pd.read_parquet(out / "edges.parquet").energy_true_wh.to_numpy()
    for r, (_, row) in zip(layer["round"], rounds.iterrows(), strict=True):
        energy = f[np.asarray(row.path, dtype=np.int64)].sum() + r["properties"]["turns_wh"]
        assert energy == pytest.approx(r["properties"]["energy_wh"], rel=1e-9)
    assert "turns paid" in html.read_text()


@pytest.mark.parametrize("policy", ["gp-cmm[b=5]", "gp-amm[b=5]"])
def test_bound_agents_run_under_a_truth_with_turns(turned_truth, synthetic, tmp_path, policy):
    """gp-cmm ranks Yen's routes with the turns' dissipation added; each round's energy is its
    edges plus its turns, and regret is against the exact optimum, never negative."""
    out = tmp_path / "run"
    res = simulate(SimulationConfig(policy=policy, route="B", horizon=3, seed=0, truth="turned"), out, net=synthetic)
    f = res.edges.energy_true_wh.to_numpy()
    turns = pd.read_parquet(out / "turns.parquet")
    cost = dict(zip(zip(turns.from_edge, turns.to_edge, strict=True), turns.cost_wh, strict=True))
    for _, row in res.rounds.iterrows():
        p = [int(x) for x in row.path]
        turns_wh = sum(cost[a, b] for a, b in zip(p[:-1], p[1:], strict=True))
        assert row.expected_energy_wh == pytest.approx(f[p].sum() + turns_wh, rel=1e-9)
        assert row.regret_wh >= 0
