"""Reports: network statistics, GeoJSON export (RFC 7946), tables and plots."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..io import atomic_write_text, generator, is_stdout
from ..physics.routes import edge_energies
from ..runs.directory import check_output_file


def _energy(wh: float) -> str:
    """An energy as people read it: Wh below 10 kWh, kWh above."""
    return f"{wh / 1000:,.1f} kWh" if abs(wh) >= 10_000 else f"{wh:,.1f} Wh"


def describe_run(summary: dict) -> list[str]:
    """What a run did, in plain lines (the closing lines of ``evroute simulate``).

    Parameters
    ----------
    summary : dict
        A run's ``summary.json``.

    Returns
    -------
    list of str
        The policy and the trip; the energy driven; what it saved against always driving the
        fastest and the shortest route (Wh, and the percentage where that route consumes
        energy); the regret against the best route under the truth; the exact optimum and the
        local updates' error bounds when the run has them.
    """
    s, trips = summary, summary["horizon"]
    lines = [f"{s['policy_label'] if 'policy_label' in s else s['policy']} on the {s['model']} posterior, "
             f"{s['route']}, seed {s['seed']}, {trips:,} trips"]
    fastest = s["fastest_total_energy_wh"] / trips
    if "trip_climb_m" in s:  # what the trip is, physically, beside what the truth says of it
        slope = f"descends {-s['trip_climb_m']:.0f} m" if s["trip_climb_m"] < 0 else f"climbs {s['trip_climb_m']:.0f} m"
        uses = "recovers" if fastest < 0 else "uses"
        lines.append(f"this trip {slope}: under the truth ({s.get('truth', 'gp')}, seed {s['seed']}) the fastest route "
                     f"{uses} {abs(fastest):,.1f} Wh a trip; physics' prior mean E_det says "
                     f"{s['fastest_energy_det_wh']:,.1f} Wh")
    lines.append(f"energy driven: {_energy(s['total_energy_wh'])} in all, {s['total_energy_wh'] / trips:,.1f} Wh a trip")
    parts = []
    for k in ("fastest", "shortest"):
        text = f"{_energy(s[f'saved_vs_{k}_wh'])}"
        if s[f"saved_vs_{k}_pct"] is not None:
            text += f" ({s[f'saved_vs_{k}_pct']:.1f} %)"
        else:  # a percentage of an energy the route recovers would mislead
            text += " (no percentage: that route recovers energy)"
        parts.append(f"{text} against always driving the {k} route")
    lines.append("saved " + "; ".join(parts))
    exact = s.get("regret_reference") == "exact optimum"
    if exact:
        cert = (s.get("exact_optimum") or {}).get("certificate") or {}
        why = "every reduced cost >= 0" if cert.get("potential") == "physical" else "Johnson's potential"
        within = s.get("within_1pct_from_round")
        lines.append(f"regret against the exact optimum ({s['optimal_energy_wh']:,.1f} Wh a trip; Dijkstra on reduced "
                     f"costs, {why}): {_energy(s['final_cumulative_regret_wh'])} in all, "
                     f"{s['last_route_regret_wh']:,.1f} Wh on the last trip; "
                     + (f"within 1 % of it from trip {within} on" if within is not None
                        else "the last trip was more than 1 % above it"))
    else:
        lines.append(f"the paper's rectified regret (against the route the rectified weights pick handed the truth, "
                     f"{s['optimal_energy_wh']:,.1f} Wh a trip; this truth creates energy, so it has no exact "
                     f"least-energy route to learn): {_energy(s['final_cumulative_regret_wh'])} in all, "
                     f"{s['last_route_regret_wh']:,.1f} Wh on the last trip")
    if str(s.get("prior_turns", "")).startswith("oracle"):
        lines.append("the agents were told the truth's turns (--turns oracle): an oracle, not a benchmark")
    o = s.get("exact_optimum")
    if exact:
        pass
    elif s.get("exact_optimal_energy_wh") is not None:
        ends = ", open ends" if o.get("ends") == "open" else ""
        lines.append(f"exact optimum {s['exact_optimal_energy_wh']:,.1f} Wh ({o['method']}, {o['status']}{ends}, "
                     f"{o['seconds']:.1f} s): the {s.get('weights', 'rectified')} weights' best route is "
                     f"{s['rectification_gap_wh']:,.1f} Wh above it")
        if s.get("final_exact_regret_wh") is not None:
            first = s.get("first_round_within_1pct")
            lines.append(f"regret against the exact optimum: {_energy(s['final_exact_regret_wh'])} in all; "
                         + (f"first within 1 % of it on trip {first}" if first is not None
                            else "no trip came within 1 % of it"))
    elif o is not None:
        lines.append(f"exact optimum: no vertex-simple route found ({o['method']}, {o['status']}, {o['seconds']:.1f} s)")
    if s.get("max_mean_error_bound") is not None:
        fallbacks = s["global_mean_solves"] + s["global_variance_solves"]
        lines.append(f"local posterior updates: mean error bound {s['max_mean_error_bound']:.1e} sigma_0 (rigorous), "
                     f"variance error bound {s['max_var_error_bound']:.1e} sigma_0^2 (first order), the largest over "
                     "the rounds" + (f"; {fallbacks} global solve(s)" if fallbacks else ""))
    return lines


def describe_network(net, vehicle=None) -> dict:
    """Statistics of a prepared network (``evroute networks info``)."""
    e = net.edges
    energy = edge_energies(net, vehicle)
    h = net.nodes.elevation_m.to_numpy()
    src = net.meta.get("elevation_source", "none")
    pct = np.percentile(e.grade.to_numpy(), [1, 5, 25, 50, 75, 95, 99])
    return {
        "name": net.name,
        "source": net.meta.get("source"),
        "nodes": int(len(net.nodes)),
        "edges": int(net.n_edges),
        "km": float(e.length_m.sum() / 1000),
        "component_node_share": net.meta.get("component_node_share"),
        "component_edge_share": net.meta.get("component_edge_share"),
        "component_km_share": net.meta.get("component_km_share"),
        "elevation_source": src,
        "elevation_min_m": None if src == "none" else float(h.min()),
        "elevation_max_m": None if src == "none" else float(h.max()),
        "grade_bounded_edges": net.meta.get("grade_bounded_edges"),
        "grade_percentiles": {f"p{q}": float(v) for q, v in zip((1, 5, 25, 50, 75, 95, 99), pct, strict=True)},
        "speed_imputed_share": float(1 - e.maxspeed_known.mean()),
        "energy_mean_wh": float(energy.mean()),
        "energy_std_wh": float(energy.std()),
        "energy_min_wh": float(energy.min()),
        "energy_max_wh": float(energy.max()),
        "energy_negative_share": float((energy < 0).mean()),
        "connections": int(net.n_connections),
        "turn_restrictions_applied": net.meta.get("turn_restrictions_applied"),
        "line_graph_dropped_edges": net.meta.get("line_graph_dropped_edges"),
    }


def path_coordinates(net, edges, decimals: int | None = None) -> list[list[float]]:
    """(lon, lat) vertices of a path of edges, consecutive duplicates removed.

    With ``decimals``, coordinates are rounded first (duplicates are judged after
    rounding). A one-point result is doubled so that it stays a valid LineString.
    """
    coords: list[list[float]] = []
    for e in edges:
        geom = net.geometry[int(e)]
        if decimals is not None:
            geom = np.round(np.asarray(geom, dtype=float), decimals)
        for lon, lat in geom:
            pt = [float(lon), float(lat)]
            if not coords or coords[-1] != pt:
                coords.append(pt)
    if len(coords) == 1:
        coords.append(list(coords[0]))
    return coords


#: Decimals of the coordinates evroute writes (about 0.1 m).
COORD_DECIMALS = 6


def path_geodataframe(net, paths: list, columns: dict):
    """A GeoDataFrame (EPSG:4326) of paths of edges: one LineString per path (coordinates
    rounded to :data:`COORD_DECIMALS`, consecutive duplicates removed) and the given columns."""
    import geopandas as gpd
    import shapely

    geometry = [shapely.LineString(path_coordinates(net, p, decimals=COORD_DECIMALS)) for p in paths]
    return gpd.GeoDataFrame(columns, geometry=geometry, crs="EPSG:4326")


def layers_geojson(layers: dict, **properties) -> dict:
    """One GeoJSON FeatureCollection (RFC 7946) of several layers of GeoDataFrames, written by
    geopandas: every feature's properties begin with ``layer``, NaN is ``null``; the collection
    carries evroute's generator mark, ``properties`` and its ``bbox``."""
    feats = []
    for name, gdf in layers.items():
        if len(gdf) == 0:
            continue
        if name is not None:
            gdf = gdf.copy()
            gdf.insert(0, "layer", name)
        feats += json.loads(gdf.to_json(drop_id=True, na="null"))["features"]
    fc = feature_collection(feats, **properties)
    bounds = np.array([g.total_bounds for g in layers.values() if len(g)])
    if len(bounds):
        fc["bbox"] = [float(bounds[:, 0].min()), float(bounds[:, 1].min()), float(bounds[:, 2].max()),
                      float(bounds[:, 3].max())]
    return fc


def feature_collection(features: list[dict], **properties) -> dict:
    """A GeoJSON FeatureCollection (foreign members kept under ``properties``), marked as
    evroute's by a ``generator`` member (RFC 7946 §6.1 allows foreign members)."""
    fc = {"type": "FeatureCollection", "generator": generator(), "features": features}
    if properties:
        fc["properties"] = properties
    return fc


def write_geojson(path: str | Path, collection: dict, overwrite: bool = False) -> None:
    """Write a FeatureCollection atomically; ``-`` writes it to standard output.

    An existing file is replaced only if evroute wrote it or with ``overwrite``
    (:func:`evroute.runs.directory.check_output_file`).
    """
    if not is_stdout(path):
        check_output_file(path, overwrite)
    atomic_write_text(path, json.dumps(collection, separators=(",", ":")) + "\n")


def routes_geodataframe(net, routes: list[dict], route_name: str):
    """The routes of :func:`evroute.physics.routes.reference_routes` as a GeoDataFrame (EPSG:4326)."""
    return path_geodataframe(net, [r["edges"] for r in routes], {
        "kind": [r["kind"] for r in routes], "route": [route_name] * len(routes),
        "energy_wh": [r["energy_wh"] for r in routes], "length_m": [r["length_m"] for r in routes],
        "time_s": [r["time_s"] for r in routes], "n_edges": [r["n_edges"] for r in routes],
        "edges": [list(r["edges"]) for r in routes],
        # a route under drives (evroute route --drives) carries each edge's posterior
        **({k: [r.get(k) for r in routes] for k in ("edge_mean_wh", "edge_sd_wh", "edge_traversals")}
           if any("edge_mean_wh" in r for r in routes) else {})})


def routes_geojson(net, routes: list[dict], route_name: str) -> dict:
    """FeatureCollection of the routes from :func:`evroute.physics.routes.reference_routes`."""
    return layers_geojson({None: routes_geodataframe(net, routes, route_name)}, network=net.name,
                          attribution="© OpenStreetMap contributors")
