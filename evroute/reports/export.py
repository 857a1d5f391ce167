"""Export a run as GeoJSON (RFC 7946) and as an interactive HTML map (folium).

Layers (property ``layer``):

- ``edge``: every edge of the network with its visits and final posterior mean / std
  (and its prior E_det and true expected energy f);
- ``round``: the route driven in each round (or the last K), with ``t``, its true expected
  energy ``energy_wh``, ``regret_wh``, observed energy and cumulative regret;
- ``optimal``: the clairvoyant optimal route (``optimal_path`` of ``summary.json``).

The same layers can be written as a GeoPackage (one table per layer, EPSG:4326) for GIS
tools (QGIS, ArcGIS), through geopandas.

Coordinates are WGS84 (lon, lat), 6 decimals. Geometry comes from the run's network,
loaded as in the run (``config.json``: network, osm, dem).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from ..errors import EvrouteError
from ..io import atomic_write_text, atomic_write_with, generator, is_stdout
from ..roads.network import load_network
from ..runs.directory import (
    check_output_file,
    is_finished_run,
    read_run_json,
    read_run_table,
    require_readable_run,
)
from ..runs.grid import load_grid
from ..validate import positive_int
from .report import COORD_DECIMALS, layers_geojson, path_geodataframe, write_geojson

ATTRIBUTION = "© OpenStreetMap contributors"

__all__ = ["run_gdfs", "run_geojson", "export", "write_html", "write_routes_html", "write_geopackage", "resolve_run_dir",
           "COORD_DECIMALS"]

#: The colours of ``evroute route``'s routes on its map, by kind (the others grey).
ROUTE_COLOURS = {"energy": "#00a651", "shortest": "#7570b3", "fastest": "#d95f02", "drives": "#2166ac",
                 "prior": "#2166ac"}


def resolve_run_dir(directory: str | os.PathLike, run: str | None = None) -> Path:
    """The run directory to export: ``directory`` itself, or a run of a compare directory
    (``run`` by name, default the first finished run of the grid)."""
    d = Path(directory)
    if not d.is_dir():
        raise EvrouteError(f"{d} is not a directory")
    if is_finished_run(d) and (d / "config.json").is_file():
        if run is not None:
            raise EvrouteError(f"{d} is a run directory; --run is for compare directories")
        return d
    grid = load_grid(d)
    if grid is None and not (d / "runs").is_dir():
        raise EvrouteError(f"{d} is neither a run directory (no summary.json) nor a compare directory (no grid.json)")
    if grid is not None:
        names = [grid.cell_name(c) for c in grid.cells()]
    else:
        names = sorted(p.name for p in (d / "runs").iterdir() if not p.name.startswith("."))
    finished = [n for n in names if is_finished_run(d / "runs" / n)]
    if run is not None:
        if not is_finished_run(d / "runs" / run):
            shown = ", ".join(finished[:5]) + (", ..." if len(finished) > 5 else "")
            raise EvrouteError(f"no finished run {run!r} in {d / 'runs'} (runs: {shown or 'none'})")
        return d / "runs" / run
    if not finished:
        raise EvrouteError(f"{d} has no finished runs yet")
    return d / "runs" / finished[0]


def _num(x) -> float:
    x = float(x)
    return x if math.isfinite(x) else math.nan


def run_gdfs(run_dir: str | os.PathLike, last: int | None = None, net=None) -> dict:
    """A run as GeoDataFrames (EPSG:4326), the layers that ``evroute export`` writes.

    Parameters
    ----------
    run_dir : path-like
        A finished run directory.
    last : int, optional
        Only the last K rounds' routes.
    net : evroute.roads.network.Network, optional
        The run's network (default: loaded as the run did, from its ``config.json``).

    Returns
    -------
    dict of str to geopandas.GeoDataFrame
        ``edge``: every edge with its visits, final posterior mean and standard deviation
        (``post_mean_wh``, ``post_std_wh``), E_det and the true expected energy; ``round``: the
        route driven in each round with ``t``, its energy, regret and the edges; ``optimal``: the
        clairvoyant optimal route; for a truth of edges plus turns, ``turn``: a point at every
        junction the exported routes or the optimal route turn at, with the turn's cost
        (``cost_wh``), how many exported rounds paid it (``rounds``) and ``on_optimal``, and the
        routes' ``turns_wh``. Each frame's ``attrs`` holds the run's description (network,
        route, policy, model, seed, horizon).

    Examples
    --------
    >>> layers = run_gdfs("runs/first")          # doctest: +SKIP
    >>> layers["edge"].plot(column="post_mean_wh")  # doctest: +SKIP
    """
    run_dir = require_readable_run(run_dir)
    cfg, summary = read_run_json(run_dir)
    rounds = read_run_table(run_dir, "rounds")
    edges = read_run_table(run_dir, "edges")
    if last is not None:
        positive_int("--last", last)
        rounds = rounds.tail(last)
    if net is None:
        net = load_network(cfg["network"], osm=cfg.get("osm"), dem=cfg.get("dem"))
    if len(edges) != net.n_edges:
        raise EvrouteError(f"{run_dir}: {len(edges)} edges in the run but {net.n_edges} in network {net.name}; "
                           "the network changed since the run")
    if len(rounds) and any(len(p) and (min(p) < 0 or max(p) >= net.n_edges) for p in rounds.path):
        raise EvrouteError(f"{run_dir} is not a readable run: rounds.parquet names edges outside its network")
    e = edges
    layers = {"edge": path_geodataframe(net, [[int(i)] for i in e.edge], {
        "edge": e.edge.astype(np.int64).to_numpy(), "visits": e.visits.astype(np.int64).to_numpy(),
        "post_mean_wh": e.post_mean_final.to_numpy(float), "post_std_wh": e.post_std_final.to_numpy(float),
        "energy_det_wh": e.energy_det_wh.to_numpy(float), "energy_true_wh": e.energy_true_wh.to_numpy(float),
        "length_m": e.length_m.to_numpy(float), "grade": e.grade.to_numpy(float),
        "osm_way": e.osm_way.astype(np.int64).to_numpy()})}
    paths = [[int(x) for x in p] for p in rounds.path]
    layers["round"] = path_geodataframe(net, paths, {
        "t": rounds.t.astype(np.int64).to_numpy(), "energy_wh": rounds.expected_energy_wh.to_numpy(float),
        "regret_wh": rounds.regret_wh.to_numpy(float), "observed_energy_wh": rounds.observed_energy_wh.to_numpy(float),
        "cumulative_regret_wh": rounds.cumulative_regret_wh.to_numpy(float), "beta": rounds.beta.to_numpy(float),
        "n_edges": np.array([len(p) for p in paths], dtype=np.int64), "edges": paths})
    optimal = [int(x) for x in summary.get("optimal_path", [])]
    layers["optimal"] = path_geodataframe(net, [optimal] if optimal else [], {
        "energy_wh": [_num(summary["optimal_energy_wh"])] if optimal else [], "n_edges": [len(optimal)] if optimal else [],
        "edges": [optimal] if optimal else [], "kind": ["clairvoyant"] if optimal else []})
    turns, cost = _turns_paid(run_dir, net, paths, optimal)
    if turns is not None:
        layers["turn"] = turns
        layers["round"]["turns_wh"] = _turns_sum(cost, paths)
        layers["optimal"]["turns_wh"] = _turns_sum(cost, [optimal] if optimal else [])
    about = {"network": net.name, "route": summary.get("route"), "policy": summary.get("policy"),
             "model": summary.get("model"), "seed": summary.get("seed"), "horizon": summary.get("horizon"),
             "run": run_dir.name, "start_edge": summary.get("start_edge"), "end_edge": summary.get("end_edge"),
             "rounds_exported": int(len(rounds)), "units": "Wh", "attribution": ATTRIBUTION}
    for gdf in layers.values():
        gdf.attrs.update(about)
    return layers


def _turns_paid(run_dir: Path, net, paths: list, optimal: list):
    """The ``turn`` layer of a run whose truth has turns (its ``turns.parquet``): one point at the
    junction of every turn the exported routes or the optimal route pay, with its cost, how many
    exported rounds paid it and whether the optimal route does, and every turn's cost by (from,
    to); (None, None) for a truth of edges only."""
    import geopandas as gpd

    if not (run_dir / "turns.parquet").is_file():
        return None, None
    t = read_run_table(run_dir, "turns", columns=["from_edge", "to_edge", "cost_wh"])
    ends = np.r_[t.from_edge.to_numpy(), t.to_edge.to_numpy()]
    if ends.size and (ends.min() < 0 or ends.max() >= net.n_edges):
        raise EvrouteError(f"{run_dir} is not a readable run: turns.parquet names edges outside its network")
    cost = dict(zip(zip(t.from_edge.astype(np.int64).tolist(), t.to_edge.astype(np.int64).tolist(), strict=True),
                    t.cost_wh.astype(float).tolist(), strict=True))
    taken: dict[tuple[int, int], int] = {}
    for p in paths:
        for a, b in zip(p[:-1], p[1:], strict=False):
            taken[(a, b)] = taken.get((a, b), 0) + 1
    on_opt = set(zip(optimal[:-1], optimal[1:], strict=False))
    keys = sorted((set(taken) | on_opt) & set(cost))
    x = [float(net.geometry[a][-1][0]) for a, _ in keys]  # the junction: where the first edge ends
    y = [float(net.geometry[a][-1][1]) for a, _ in keys]
    gdf = gpd.GeoDataFrame({"from_edge": np.array([a for a, _ in keys], dtype=np.int64),
                            "to_edge": np.array([b for _, b in keys], dtype=np.int64),
                            "cost_wh": np.array([cost[k] for k in keys], dtype=float),
                            "rounds": np.array([taken.get(k, 0) for k in keys], dtype=np.int64),
                            "on_optimal": np.array([k in on_opt for k in keys], dtype=bool)},
                           geometry=gpd.points_from_xy(np.round(x, COORD_DECIMALS), np.round(y, COORD_DECIMALS)),
                           crs="EPSG:4326")
    return gdf, cost


def _turns_sum(cost: dict, paths: list) -> np.ndarray:
    """Σ of the turns' costs each path pays (Wh)."""
    return np.array([sum(cost.get((a, b), 0.0) for a, b in zip(p[:-1], p[1:], strict=False)) for p in paths],
                    dtype=float)


def run_geojson(run_dir: str | os.PathLike, last: int | None = None, net=None) -> dict:
    """The FeatureCollection of a run: the layers of :func:`run_gdfs` (property ``layer``), as
    geopandas writes them, with the run's description under ``properties``."""
    layers = run_gdfs(run_dir, last=last, net=net)
    return layers_geojson(layers, **layers["edge"].attrs)


def write_html(path: str | os.PathLike, fc: dict) -> None:
    """An interactive folium map of a run's layers. Nothing is fetched while writing; the
    browser loads Leaflet and the OpenStreetMap tiles when the file is opened."""
    import branca.colormap as bcm
    import folium

    w, s, e, n = fc["bbox"]
    m = folium.Map(location=[(s + n) / 2, (w + e) / 2], tiles=None, control_scale=True, prefer_canvas=True)
    folium.TileLayer("https://tile.openstreetmap.org/{z}/{x}/{y}.png", attr=ATTRIBUTION, name="OpenStreetMap",
                     max_zoom=19).add_to(m)
    feats = fc["features"]
    edge_feats = [f for f in feats if f["properties"]["layer"] == "edge"]
    round_feats = [f for f in feats if f["properties"]["layer"] == "round"]
    opt_feats = [f for f in feats if f["properties"]["layer"] == "optimal"]
    vmax = max([f["properties"]["visits"] for f in edge_feats] + [1])
    cmap = bcm.LinearColormap(["#f0f921", "#f89540", "#cc4778", "#7e03a8", "#0d0887"], vmin=0,
                              vmax=max(math.log10(vmax), 1e-9), caption="log10(visits)")

    def edge_style(feature):
        v = feature["properties"]["visits"]
        if v <= 0:
            return {"color": "#a0a0a0", "weight": 1, "opacity": 0.6}
        return {"color": cmap(math.log10(v)), "weight": 3, "opacity": 0.9}

    def slim(features, keep):
        return {"type": "FeatureCollection", "features": [
            {"type": "Feature", "geometry": f["geometry"],
             "properties": {k: f["properties"].get(k) for k in keep}} for f in features]}

    edge_keys = ["edge", "visits", "post_mean_wh", "post_std_wh", "energy_true_wh"]
    folium.GeoJson(slim(edge_feats, edge_keys), name="edges (visits, posterior)", style_function=edge_style,
                   tooltip=folium.GeoJsonTooltip(fields=edge_keys)).add_to(m)
    if round_feats:
        round_keys = ["t", "energy_wh", "regret_wh"]
        folium.GeoJson(slim(round_feats, round_keys), name=f"routes driven ({len(round_feats)} rounds)",
                       style_function=lambda f: {"color": "#2166ac", "weight": 2, "opacity": 0.25},
                       tooltip=folium.GeoJsonTooltip(fields=round_keys), show=False).add_to(m)
    if opt_feats:
        folium.GeoJson(slim(opt_feats, ["energy_wh", "n_edges"]), name="optimal route (clairvoyant)",
                       style_function=lambda f: {"color": "#00a651", "weight": 5, "opacity": 0.8, "dashArray": "6 4"},
                       tooltip=folium.GeoJsonTooltip(fields=["energy_wh", "n_edges"])).add_to(m)
    turn_feats = [f for f in feats if f["properties"]["layer"] == "turn"]
    if turn_feats:  # the junctions' costs where the routes pay them: red a cost, blue energy recovered
        turn_keys = ["from_edge", "to_edge", "cost_wh", "rounds", "on_optimal"]
        big = max(abs(f["properties"]["cost_wh"]) for f in turn_feats) or 1.0
        folium.GeoJson(slim(turn_feats, turn_keys), name=f"turns paid ({len(turn_feats)}, Wh)",
                       marker=folium.CircleMarker(radius=4, fill=True, fill_opacity=0.8, weight=1),
                       style_function=lambda f: {
                           "color": "#b2182b" if f["properties"]["cost_wh"] > 0 else "#2166ac",
                           "fillColor": "#b2182b" if f["properties"]["cost_wh"] > 0 else "#2166ac",
                           "radius": 3 + 7 * math.sqrt(abs(f["properties"]["cost_wh"]) / big)},
                       tooltip=folium.GeoJsonTooltip(fields=turn_keys)).add_to(m)
    cmap.add_to(m)
    folium.LayerControl(collapsed=False).add_to(m)
    m.fit_bounds([[s, w], [n, e]])
    p = fc.get("properties", {})
    title = (f"evroute: {p.get('policy')} on {p.get('route')}, seed {p.get('seed')}, T = {p.get('horizon')}")
    m.get_root().html.add_child(folium.Element(f"<title>{title}</title>"))
    html = m.get_root().render()
    doctype = "<!DOCTYPE html>\n"
    if html.startswith(doctype):  # the generator mark evroute.io.written_by_evroute recognises
        html = f"{doctype}<!-- generator: {generator()} -->\n{html[len(doctype):]}"
    atomic_write_text(path, html)


def write_routes_html(path: str | os.PathLike, net, routes: list[dict], *, route_name: str) -> None:
    """An interactive folium map of ``evroute route``'s routes (one line each, its energy, length,
    time and edges in its tooltip) and, for a route under drives or a prior, each of its edges with
    its posterior mean, sd and traversals. Nothing is fetched while writing; the file carries
    evroute's generator mark after the doctype."""
    import folium

    from .report import path_coordinates, routes_geojson

    fc = routes_geojson(net, routes, route_name)
    w, s, e, n = fc["bbox"]
    m = folium.Map(location=[(s + n) / 2, (w + e) / 2], tiles=None, control_scale=True)
    folium.TileLayer("https://tile.openstreetmap.org/{z}/{x}/{y}.png", attr=ATTRIBUTION, name="OpenStreetMap",
                     max_zoom=19).add_to(m)
    keys = ["kind", "energy_wh", "length_m", "time_s", "n_edges"]
    for f in fc["features"]:
        kind = f["properties"]["kind"]
        colour = ROUTE_COLOURS.get(kind, "#555555")
        folium.GeoJson({"type": "FeatureCollection", "features": [
            {"type": "Feature", "geometry": f["geometry"], "properties": {k: f["properties"].get(k) for k in keys}}]},
            name=f"{kind} route ({f['properties']['energy_wh']:,.0f} Wh)",
            style_function=lambda _, c=colour: {"color": c, "weight": 5, "opacity": 0.8},
            tooltip=folium.GeoJsonTooltip(fields=keys)).add_to(m)
    for r in routes:  # a posterior's route: edge by edge
        if "edge_mean_wh" not in r:
            continue
        feats = [{"type": "Feature", "properties": {"edge": int(ed), "mean_wh": round(float(mu), 2),
                                                    "sd_wh": round(float(sd), 2), "traversals": int(c)},
                  "geometry": {"type": "LineString", "coordinates": path_coordinates(net, [ed], decimals=COORD_DECIMALS)}}
                 for ed, mu, sd, c in zip(r["edges"], r["edge_mean_wh"], r["edge_sd_wh"], r["edge_traversals"],
                                          strict=True)]
        folium.GeoJson({"type": "FeatureCollection", "features": feats}, name=f"{r['kind']} route's edges",
                       style_function=lambda f: {"color": "#2166ac" if f["properties"]["traversals"] else "#b2182b",
                                                 "weight": 3, "opacity": 0.9},
                       tooltip=folium.GeoJsonTooltip(fields=["edge", "mean_wh", "sd_wh", "traversals"])).add_to(m)
    folium.LayerControl(collapsed=False).add_to(m)
    m.fit_bounds([[s, w], [n, e]])
    m.get_root().html.add_child(folium.Element(f"<title>evroute: routes of {net.name} {route_name}</title>"))
    html = m.get_root().render()
    doctype = "<!DOCTYPE html>\n"
    if html.startswith(doctype):  # the generator mark evroute.io.written_by_evroute recognises
        html = f"{doctype}<!-- generator: {generator()} -->\n{html[len(doctype):]}"
    atomic_write_text(path, html)


def write_geopackage(path: str | os.PathLike, layers: dict) -> None:
    """The layers of :func:`run_gdfs` as a GeoPackage: one table per layer (``edge``,
    ``round``, ``optimal``, ``turn``), WGS84; edge lists are stored as space-separated ids.
    Written to a temporary file and renamed (a half-written file never has the name)."""
    frames = {}
    for layer, gdf in layers.items():
        if len(gdf) == 0:
            continue
        if "edges" in gdf:
            gdf = gdf.assign(edges=gdf["edges"].map(lambda e: " ".join(map(str, e))))
        frames[layer] = gdf

    def write(tmp: Path) -> None:
        staged = tmp.with_name(tmp.name + ".gpkg")  # GDAL wants the .gpkg extension
        try:
            for i, (layer, gdf) in enumerate(frames.items()):
                gdf.to_file(staged, layer=layer, driver="GPKG", mode="a" if i else "w")
            _mark_geopackage(staged)
            os.replace(staged, tmp)
        finally:
            staged.unlink(missing_ok=True)

    atomic_write_with(path, write)


def _mark_geopackage(path: Path) -> None:
    """Describe every layer as evroute's (``gpkg_contents.description``, a standard column), the
    mark :func:`evroute.io.written_by_evroute` recognises."""
    import sqlite3

    con = sqlite3.connect(path)
    try:
        with con:
            con.execute("UPDATE gpkg_contents SET description = ? || ': layer ' || table_name", (generator(),))
    finally:
        con.close()


def export(directory: str | os.PathLike, geojson: str | os.PathLike | None = None,
           html: str | os.PathLike | None = None, *, last: int | None = None, run: str | None = None,
           gpkg: str | os.PathLike | None = None, overwrite: bool = False) -> list[Path]:
    """Write the GeoJSON (``-``: standard output), HTML map and/or GeoPackage of a run (or of one
    run of a compare directory).

    Every target is checked before anything is computed (:func:`evroute.runs.directory.check_output_file`):
    an existing file is replaced only if evroute wrote it, or with ``overwrite``; links,
    directories, devices and a run's own files never.
    """
    if last is not None:
        positive_int("--last", last)
    targets = [(kind, t) for kind, t in (("geojson", geojson), ("html", html), ("gpkg", gpkg)) if t is not None]
    for kind, t in targets:
        if is_stdout(t) and kind != "geojson":
            raise EvrouteError(f"--{kind} - : only the GeoJSON can be written to standard output")
        if not is_stdout(t):
            check_output_file(t, overwrite)
    paths = [os.path.abspath(t) for _, t in targets if not is_stdout(t)]
    if len(set(paths)) != len(paths):
        raise EvrouteError("--geojson, --html and --gpkg name the same file; give each its own")
    run_dir = resolve_run_dir(directory, run)
    layers = run_gdfs(run_dir, last=last)
    fc = layers_geojson(layers, **layers["edge"].attrs)
    writers = {"geojson": lambda t: write_geojson(t, fc, overwrite=True),  # (checked above)
               "html": lambda t: write_html(t, fc), "gpkg": lambda t: write_geopackage(t, layers)}
    files = []
    for kind, t in targets:
        writers[kind](t)
        if not is_stdout(t):
            files.append(Path(t))
    return files
