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
from ..validate import int_in
from .options import (
    HELP_STYLE,
    OUTPUT,
    RUN,
    WORLD,
    ConfigOpt,
    DemOpt,
    GeojsonOpt,
    HtmlOpt,
    JsonOpt,
    NetworkOpt,
    OsmOpt,
    OverwriteOpt,
    PriorOpt,
    ProgressOpt,
    RouteOpt,
    VehicleOpt,
    out_option,
    with_settings,
)

app = typer.Typer(**HELP_STYLE)


@app.command("route")
def route_cmd(
    network: NetworkOpt = None, route: RouteOpt = None,
    vehicle: VehicleOpt = None, osm: OsmOpt = None, dem: DemOpt = None,
    drives: Annotated[Path | None, typer.Option(
        "--drives", metavar="TRAVERSALS.parquet", help="Also the least-energy route under what these drives "
        "measured (evroute drives import).", rich_help_panel=WORLD)] = None,
    prior: PriorOpt = None,
    geojson: GeojsonOpt = None, html: HtmlOpt = None,
    overwrite: OverwriteOpt = False, as_json: JsonOpt = False, progress: ProgressOpt = None,
) -> None:
    """The energy-optimal (exact, negative energies allowed), shortest and fastest routes, and the
    route under a fleet's drives or its prior file."""
    from ..physics.energy import load_vehicle
    from ..physics.routes import reference_routes, resolve_route
    from ..progress import configure as configure_progress
    from ..reports.report import routes_geojson, write_geojson
    from ..roads.network import load_network
    from ..settings import unfold_settings

    configure_progress(progress)
    to_stdout = _check_route_outputs(geojson, html, as_json=as_json, overwrite=overwrite)
    if drives is not None and not drives.is_file():
        raise EvrouteError(f"no such drives table: {drives}")
    fleet = None
    if prior is not None:
        from ..world.fleet import read_fleet_prior

        fleet = read_fleet_prior(prior)
        own = fleet.settings()
        if network is None:  # the prior's network as it was loaded
            network, osm, dem = own["network"], osm or own["osm"], dem or own["dem"]
        vehicle = vehicle if vehicle is not None else own["vehicle"]
    veh = load_vehicle(vehicle)
    net = load_network(network or "synthetic", osm=osm, dem=dem)
    trip = unfold_settings({"route": route})
    spec = resolve_route(net, trip["route"], trip.get("from_point"), to_point=trip.get("to_point"))
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
    backends (--model), policies (--policy), truths (--truth) and closure patterns (its closures)."""
    from ..bandit.agents import POLICIES
    from ..bandit.environments import CLOSURES, TRUTHS
    from ..models import MODELS

    for title, registry in (("posterior backends (--model NAME[key=value,...])", MODELS),
                            ("policies (--policy, or --policies of evroute compare)", POLICIES),
                            ("ground truths (--truth NAME[key=value,...])", TRUTHS),
                            ("road closures (--truth NAME[closures=SPEC])", CLOSURES)):
        print(f"{title}:")
        registry.load_all()
        for name in registry.names():
            origin = registry.origin(name)
            print("  " + registry.get(name).help().replace("\n", "\n  ")
                  + ("" if origin == "built-in" else f"\n    (from {origin})"))
        print()


@app.command("simulate")
@with_settings()
def simulate_cmd(
    config: ConfigOpt = None,
    out: Annotated[Path | None, out_option("Run directory (default runs/<network>-<route>-<policy>-s<seed>).",
                                           show_default=False)] = None,
    overwrite: OverwriteOpt = False,
    csv: Annotated[bool, typer.Option("--csv", help="Also write CSV copies of the tables.",
                                      rich_help_panel=OUTPUT)] = False,
    progress: ProgressOpt = None,
    blas_threads: Annotated[int, typer.Option(
        help=f"BLAS threads, 0 to {MAX_BLAS_THREADS} (1: the same numbers on any machine; 0: the library's).",
        rich_help_panel=RUN)] = 1,
    **settings,
) -> None:
    """Run one bandit simulation (Algorithm 1) and write a run directory.

    Components take options as a spec, e.g. --policy "gp-bucb[xi=0.5]", --model
    "svgp[inducing=500,steps=2]", --truth "rkhs[B=10,drift=0.01]" (`evroute models` lists them all).
    """
    from ..progress import configure as configure_progress
    from ..reports.report import describe_run
    from ..runs.grid import policy_tag, run_config
    from ..runs.problem import world_tag
    from ..runs.simulation import simulate

    cfg = run_config(config, settings)
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
