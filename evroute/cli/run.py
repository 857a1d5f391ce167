"""Commands ``evroute simulate``, ``evroute route`` and ``evroute models``. Thin: parse options,
call the library (imported inside each command, so ``--help`` answers at once)."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Annotated

import typer

from ..errors import EvrouteError, EvrouteWarning
from ..settings import RUN_SETTINGS
from ..validate import int_in
from .options import (
    HELP_STYLE,
    DemOpt,
    JsonOpt,
    OsmOpt,
    OverwriteFileOpt,
    ProgressOpt,
    with_settings,
)

app = typer.Typer(**HELP_STYLE)


@app.command("route")
def route_cmd(
    name: Annotated[str | None, typer.Argument(help="Network name or OSM file (default synthetic, or the "
                                               "network of --prior).", show_default=False)] = None,
    route: Annotated[str | None, typer.Option("--route", help="Named route: A or B (default A).")] = None,
    from_: Annotated[str | None, typer.Option("--from", help="Start point LAT,LON (snapped to an edge).")] = None,
    to: Annotated[str | None, typer.Option("--to", help="End point LAT,LON (snapped to an edge).")] = None,
    vehicle: Annotated[str | None, typer.Option(
        "--vehicle", help="Vehicle preset name or JSON file (default: the paper's SUMO EV, or the vehicle of "
        "--prior).")] = None,
    osm: OsmOpt = None, dem: DemOpt = None,
    geojson: Annotated[str | None, typer.Option(
        "--geojson", help="Write the routes as GeoJSON to this file (- for standard output).")] = None,
    html: Annotated[Path | None, typer.Option(
        "--html", help="Write an interactive map of the routes (HTML, folium) to this file.")] = None,
    drives: Annotated[Path | None, typer.Option(
        "--drives", help="Also the least-energy route under what these drives measured (traversals.parquet of "
        "evroute drives import): each edge's posterior mean and sd, E_det where nobody drove, and each "
        "junction's cost where ten cars or more turned there.")] = None,
    prior: Annotated[Path | None, typer.Option(
        "--prior", help="Also the least-energy route under a prior file of evroute prior fit (its network and "
        "vehicle are taken where none is given): each edge's prior mean and sd as the agents start from them, and "
        "the fleet's turns.")] = None,
    overwrite: OverwriteFileOpt = False,
    as_json: JsonOpt = False, progress: ProgressOpt = None,
) -> None:
    """The energy-optimal (exact, negative energies allowed), shortest and fastest routes, and the
    route under a fleet's drives or its prior file."""
    from ..physics.energy import load_vehicle
    from ..physics.routes import reference_routes, resolve_route
    from ..progress import configure as configure_progress
    from ..reports.report import routes_geojson, write_geojson
    from ..roads.network import load_network

    configure_progress(progress)
    to_stdout = _check_route_outputs(geojson, html, as_json=as_json, overwrite=overwrite)
    if drives is not None and not drives.is_file():
        raise EvrouteError(f"no such drives table: {drives}")
    fleet = None
    if prior is not None:
        from ..world.fleet import read_fleet_prior

        fleet = read_fleet_prior(prior)
        own = fleet.settings()
        if name is None:  # the prior's network as it was loaded
            name, osm, dem = own["network"], osm or own["osm"], dem or own["dem"]
        vehicle = vehicle if vehicle is not None else own["vehicle"]
    veh = load_vehicle(vehicle)
    net = load_network(name or "synthetic", osm=osm, dem=dem)
    spec = resolve_route(net, route, from_, to_point=to)
    routes = reference_routes(net, spec, veh)
    if drives is not None:
        from ..world.drives_prior import drives_route, read_drives

        routes.append(drives_route(net, spec, read_drives(drives, net.n_edges), vehicle=veh))
    if fleet is not None:
        from ..world.fleet import prior_route

        routes.append(prior_route(net, spec, fleet, vehicle=veh))
    if geojson is not None:
        write_geojson(geojson, routes_geojson(net, routes, spec.name), overwrite=overwrite)
    if html is not None:
        from ..reports.export import write_routes_html

        write_routes_html(html, net, routes, route_name=spec.name)
    if to_stdout:
        return
    if as_json:
        print(json.dumps({"network": net.name, "route": spec.name, "vehicle": veh.name,
                          "start_edge": spec.start, "end_edge": spec.end, "routes": routes}))
        return
    print(f"{net.name} route {spec.name}: edge {spec.start} -> edge {spec.end} ({veh.name})")
    for line in _route_lines(routes):
        print(line)
    for path in (geojson, html):
        if path is not None:
            print(f"wrote {path}")


def _check_route_outputs(geojson, html, *, as_json: bool, overwrite: bool) -> bool:
    """``route``'s files checked before any work (the writer rule); whether the GeoJSON goes to
    standard output."""
    from ..io import is_stdout
    from ..runs.directory import check_output_file

    to_stdout = geojson is not None and is_stdout(geojson)
    if to_stdout and as_json:
        raise EvrouteError("--json and --geojson - both write to standard output; give --geojson a file")
    if geojson is not None and not to_stdout:
        check_output_file(geojson, overwrite)
    if html is not None:
        if geojson is not None and not to_stdout and Path(geojson).resolve() == Path(html).resolve():
            raise EvrouteError("--geojson and --html name the same file; give each its own")
        check_output_file(html, overwrite)
    return to_stdout


def _route_lines(routes: list[dict]) -> list[str]:
    """``route``'s table, and a line for a route under drives or a prior."""
    lines = [f"{'kind':<10}{'energy Wh':>12}{'length m':>12}{'time s':>10}{'edges':>8}"]
    lines += [f"{r['kind']:<10}{r['energy_wh']:>12.1f}{r['length_m']:>12.0f}{r['time_s']:>10.0f}{r['n_edges']:>8}"
              for r in routes]
    for d in routes:
        if d["kind"] in ("drives", "prior"):
            under = "the drives' posterior" if d["kind"] == "drives" else "the prior"
            lines.append(f"{d['kind']}: {d['energy_wh']:.1f} ± {d['energy_sd_wh']:.1f} Wh under {under}, "
                         f"{d['edges_wh']:.1f} on the edges and {d['junctions_wh']:.1f} at the junctions (the other "
                         f"routes: E_det, no junctions); the fleet drove {100 * d['edges_driven_share']:.0f} % of its "
                         "length")
    return lines


# --------------------------------------------------------------------------------------
# simulate
# --------------------------------------------------------------------------------------


#: The most BLAS threads a run may ask for.
MAX_BLAS_THREADS = 1024


def check_blas_threads(n: int) -> int:
    """``--blas-threads`` in [0, :data:`MAX_BLAS_THREADS`]; above the CPUs a warning says so."""
    n = int_in("--blas-threads", n, 0, hi=MAX_BLAS_THREADS)
    cpus = os.cpu_count() or 1
    if n > cpus:
        warnings.warn(f"--blas-threads {n} is more than the {cpus} CPUs of this machine; the threads will "
                      "share them", EvrouteWarning, stacklevel=2)
    return n


@app.command("models")
def models_cmd() -> None:
    """List the registered components with their options, defaults and capabilities: posterior
    backends (--model), policies (--policy), truths (--truth) and closure patterns (--closures)."""
    from ..bandit.agents import POLICIES
    from ..bandit.environments import CLOSURES, TRUTHS
    from ..models import MODELS

    for title, registry in (("posterior backends (--model NAME[key=value,...])", MODELS),
                            ("policies (--policy, or --policies of evroute compare)", POLICIES),
                            ("ground truths (--truth)", TRUTHS), ("road closures (--closures)", CLOSURES)):
        print(f"{title}:")
        registry.load_all()
        for name in registry.names():
            origin = registry.origin(name)
            print("  " + registry.get(name).help().replace("\n", "\n  ")
                  + ("" if origin == "built-in" else f"\n    (from {origin})"))
        print()


@app.command("simulate")
@with_settings(tuple(RUN_SETTINGS))
def simulate_cmd(
    config: Annotated[Path | None, typer.Option(
        "--config", metavar="CONFIG.json", help="Run a run directory's configuration again (its config.json, or "
        "the directory); settings given as well replace its values.")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Run directory (default runs/<network>-<route>-<policy>-s<seed>).")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing run directory.")] = False,
    csv: Annotated[bool, typer.Option("--csv", help="Also write CSV copies of the tables.")] = False,
    progress: Annotated[bool | None, typer.Option("--progress/--no-progress", help="Progress bar and build spinners (default: on a terminal).")] = None,
    blas_threads: Annotated[int, typer.Option(help=f"BLAS threads, 0 to {MAX_BLAS_THREADS} (1: the same numbers whatever the core count, as compare uses; 0: the library default).")] = 1,
    **settings,
) -> None:
    """Run one bandit simulation (Algorithm 1) and write a run directory.

    Components take options as a spec, e.g. --policy "gp-bucb[xi=0.5]", --model
    "svgp[inducing=500,steps=2]", --truth "rkhs[B=10]" (`evroute models` lists them all).
    """
    from ..progress import configure as configure_progress
    from ..reports.report import describe_run
    from ..runs.config import SimulationConfig
    from ..runs.directory import read_config
    from ..runs.grid import policy_tag
    from ..runs.problem import world_tag
    from ..runs.simulation import simulate

    cfg = SimulationConfig(**settings) if config is None else read_config(config).replace(**settings)
    check_blas_threads(blas_threads)
    configure_progress(progress)
    if out is None:
        name = f"{world_tag(cfg)}-{cfg.policy.name}{policy_tag(cfg.policy)}-s{cfg.seed}"
        out = Path("runs") / name
    result = simulate(cfg, out=out, overwrite=overwrite, csv=csv, show_progress=progress, blas_threads=blas_threads)
    s = result.summary
    for line in describe_run({**s, "policy_label": cfg.policy.label}):
        print(line)
    print(f"{s['mean_seconds_per_round'] * 1000:.1f} ms a round; wrote {out}")
