"""Commands ``evroute sumo ...``: SUMO's EV model in simulated traffic as a physical truth. Thin:
parse options, call the library (imported inside each command, so ``--help`` answers at once)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ..settings import SUMO_TRUTH_OPTIONS
from .options import (
    AGENT,
    HELP_STYLE,
    OUTPUT,
    WORLD,
    DemOpt,
    FleetVehicleOpt,
    GpsNoiseOpt,
    JsonOpt,
    NetworkOpt,
    OsmOpt,
    OverwriteOpt,
    ProgressOpt,
    RouteOpt,
    SeedOpt,
    VehicleOpt,
    out_option,
    with_settings,
)

app = typer.Typer(help="SUMO's EV model in simulated traffic, a physical truth (pip install \"evroute[sumo]\").",
                  no_args_is_help=True, **HELP_STYLE)


def conservation_lines(c: dict, trip: str) -> list[str]:
    """What :func:`evroute.world.sumo_truth.atlas_conservation` found, for people: one line per question."""
    whole, split = c["whole"], c["split"]

    def cycle(x):
        return (f"a cycle of {x['cycle_edges']} edges makes {-x['cycle_energy_wh']:.1f} Wh" if x["negative_cycle"]
                else "no cycle makes energy")

    lines = [f"energy conserved? booked whole on edges: {100 * whole['below_floor_share']:.1f} % of "
             f"{whole['edges_checked']:,} edges below the physical floor, {cycle(whole)}; booked per car as edges "
             f"plus turns: {100 * split['below_floor_share']:.1f} % below the floor, {cycle(split)}, nothing repaired"
             + (f" ({split['turn_violations']:,} turns' mean dissipation below 0, {split['turn_violation_wh']:.1f} Wh "
                "in all: SUMO's 1 s steps on steep junctions)" if split["turn_violations"] else "")]
    if split["drives"]:
        lines.append(f"SUMO's drives ({split['drives']:,}, in-sample): the truth (edges plus turns) predicts them "
                     f"within {100 * split['drive_error_median']:.1f} % (median; bias "
                     f"{100 * split['drive_bias']:+.1f} %), whole traversals on edges within "
                     f"{100 * whole['drive_error_median']:.1f} % (bias {100 * whole['drive_bias']:+.1f} %)")
    if split.get("optimum_wh") is not None:
        status = "" if split["optimum_status"] == "optimal" else f" ({split['optimum_status']})"
        lines.append(f"trip {trip} under the truth: least energy {split['optimum_wh']:.1f} Wh{status} "
                     f"({split['optimum_method']})"
                     + f"; handed the truth, --weights potential drives {split['potential_wh']:.1f} Wh, rectified "
                     f"{split['rectified_wh']:.1f} Wh; fastest {split['fastest_wh']:.1f} Wh, shortest "
                     f"{split['shortest_wh']:.1f} Wh")
    return lines


#: The options of the sumo truth ``evroute sumo atlas`` takes: its flags, help, bounds and defaults
#: come from the truth's own declarations (one atlas for both).
ATLAS_OPTIONS = ("rate", "hours", "probes", "atlas_seed", "demand", "powertrain", "ambient_c")


@app.command("atlas")
@with_settings(ATLAS_OPTIONS, table={o.name: o for o in SUMO_TRUTH_OPTIONS})
def sumo_atlas_cmd(
    network: NetworkOpt = "synthetic", route: RouteOpt = None, vehicle: VehicleOpt = None, osm: OsmOpt = None,
    dem: DemOpt = None,
    fit: Annotated[bool, typer.Option("--fit", help="Also fit sigma_0, the noise and the lengthscale on the atlas's "
                                      "first half (type-II ML).", rich_help_panel=AGENT)] = False,
    residuals: Annotated[bool, typer.Option("--residuals", help="Also measure the residuals f - E_det: smoothness, "
                                            "signal share, what edge features explain.",
                                            rich_help_panel=OUTPUT)] = False,
    out: Annotated[Path | None, out_option("Folder for atlas.parquet, atlas.json and the plot atlas.png/svg.",
                                           show_default=False)] = None,
    overwrite: OverwriteOpt = False, as_json: JsonOpt = False, progress: ProgressOpt = None,
    **truth_options,
) -> None:
    """Build (or read from the cache) the energy atlas of a network: one row per traversal of an
    edge in SUMO with traffic; the same atlas --truth sumo[...] uses (its options are the truth's).

    Probe vehicles drive every edge between the ends of --route."""
    from ..bandit.environments import TRUTHS
    from ..io import atomic_write_parquet, atomic_write_text, generator
    from ..physics.energy import load_vehicle
    from ..physics.routes import edge_energies, resolve_route
    from ..progress import configure as configure_progress
    from ..progress import stage
    from ..reports.plots import plot_atlas
    from ..roads.network import load_network
    from ..roads.oracle import Oracle
    from ..runs.directory import check_output_file
    from ..settings import unfold_settings
    from ..world.atlas_residuals import atlas_residuals, residual_lines
    from ..world.sumo_atlas import build_atlas
    from ..world.sumo_truth import atlas_conservation, edet_agreement, fit_hyperparameters

    options = TRUTHS.get("sumo").resolve(truth_options)
    configure_progress(progress)
    if out is not None:
        for name in ("atlas.parquet", "atlas.json", "atlas.png", "atlas.svg"):
            check_output_file(out / name, overwrite)  # before any work
    veh = load_vehicle(vehicle)
    net = load_network(network, osm=osm, dem=dem)
    trip = unfold_settings({"route": route})
    spec = resolve_route(net, trip["route"], trip.get("from_point"), to_point=trip.get("to_point"))
    atlas = build_atlas(net, network, veh, oracle=Oracle.from_network(net), start=spec.start, end=spec.end,
                        rate=options["rate"], hours=options["hours"], probes=options["probes"],
                        seed=options["atlas_seed"], osm=str(osm) if osm else None, dem=str(dem) if dem else None,
                        demand=options["demand"], powertrain=options["powertrain"], ambient_c=options["ambient_c"])
    mean, counts = atlas.mean_energy(net.n_edges)
    e_det = edge_energies(net, veh)
    stats = {**atlas.summary, "key": atlas.key, **edet_agreement(e_det, mean)}
    booked = atlas.vehicle or veh  # the car the atlas books (a power train's, with powertrain=)
    with stage("energy conservation: floors, cycles, drives and the trip's exact optimum"):
        stats["conservation"] = atlas_conservation(atlas, net, booked, e_det=edge_energies(net, booked),
                                                   start=spec.start, end=spec.end)
    if fit:
        with stage("type-II maximum likelihood on the atlas's first half"):
            stats["fit"] = fit_hyperparameters(atlas, net, e_det)
    if residuals:
        with stage("the residuals f - E_det"):
            stats["residuals"] = atlas_residuals(atlas.table, net, e_det, seed=options["atlas_seed"])
    files = []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_parquet(out / "atlas.parquet", atlas.table)
        atomic_write_text(out / "atlas.json", json.dumps({"generator": generator(), **stats}, indent=2))
        files = [out / "atlas.parquet", out / "atlas.json",
                 *plot_atlas(e_det, mean, counts, out_dir=out, title=f"{net.name} ({veh.name})")]
    if as_json:
        print(json.dumps(stats))
        return
    print(f"{net.name}: {stats['traversals']:,} traversals of {stats['edges_traversed']:,} of {net.n_edges:,} edges "
          f"({100 * stats['edges_mapped_share']:.1f} % mapped to SUMO), {stats['probe_vehicles']:,} probe vehicles, "
          f"{stats['teleports']} teleports")
    if options["powertrain"] is not None:
        r = stats["recost"]
        print(f"driven by FASTSim's {options['powertrain']} at {options['ambient_c']:g} degrees C ({booked.name}: "
              f"{booked.mass_kg:g} kg, eta+ {booked.eta_plus:.3f}, eta- {booked.eta_minus:.3f}, auxiliary "
              f"{booked.aux_power_w:.0f} W): {r['cycles']:,} trips, {r['seconds_lagged']:,} of {r['seconds']:,} seconds "
              f"lagging SUMO's car (more power than it has), {r['seconds_braked_by_friction']:,} braking beyond its "
              f"regeneration, {r['cycles_refused']} trips FASTSim refused (left out)")
    if stats["r_edet_sumo"] is not None:
        print(f"E_det (Eq. 8) against the mean SUMO energy per edge: r = {stats['r_edet_sumo']:.3f}, median "
              f"ratio SUMO / E_det {stats['median_ratio_sumo_edet']:.3f}")
    for line in conservation_lines(stats["conservation"], spec.name):
        print(line)
    background = f"demand={options['demand']}" if options["demand"] else f"rate={options['rate']:g}"
    car = "" if options["powertrain"] is None else \
        f",powertrain={options['powertrain']},ambient_c={options['ambient_c']:g}"
    print(f"atlas {atlas.key} (cached); --truth \"sumo[{background},hours={options['hours']:g},"
          f"probes={options['probes']},atlas_seed={options['atlas_seed']}{car}]\" uses it")
    if fit:
        f = stats["fit"]
        print(f"fitted on {f['traversals']:,} traversals of {f['edges']:,} edges: sigma_0 {f['prior_std']:.1f} Wh "
              f"(the paper's 0.25 sigma_det: {f['paper_prior_std']:.1f}), noise {f['noise_std']:.1f} Wh (0.1 sigma_det: "
              f"{f['paper_noise_std']:.1f}), lengthscale {f['lengthscale']:g}"
              + (" (at the edge of the grid)" if f["lengthscale_at_grid_edge"] else "")
              + f"; run with --prior-std {f['prior_std']:.4g} --noise-std {f['noise_std']:.4g} "
              f"--kernel combined[lengthscale={f['lengthscale']:g}]")
        nm = f["noise_model"]
        print(f"noise per edge (within-edge likelihood {nm['homoscedastic_neg_log_likelihood'] - nm['neg_log_likelihood']:,.0f} "
              f"nats above one sigma of {nm['homoscedastic_sd']:.1f} Wh): sigma_e = {nm['a']:.2f} Wh + "
              f"{nm['b_per_km']:.2f} Wh/km + {nm['tls']:.2f} Wh at a traffic signal ({nm['signal_edges']:,} of "
              f"{nm['edges']:,} edges), median {nm['median_edge_sd']:.1f} Wh; run with --prior-std "
              f"{nm['prior_std']:.4g} --noise-std \"{nm['spec']}\" --kernel combined[lengthscale={nm['lengthscale']:g}]")
    if residuals:
        for line in residual_lines(stats["residuals"], net.name):
            print(line)
    for f in files:
        print(f"wrote {f}")


@app.command("drives")
def sumo_drives_cmd(
    network: NetworkOpt = "synthetic", osm: OsmOpt = None, dem: DemOpt = None,
    fleet_vehicle: FleetVehicleOpt = None,
    vehicles: Annotated[int, typer.Option("--vehicles", help="Cars that record their drives; 1 to 10000.",
                                          rich_help_panel=WORLD)] = 20,
    traffic: Annotated[float, typer.Option("--traffic", help="Background traffic: random trips an hour.",
                                           rich_help_panel=WORLD)] = 1800.0,
    hours: Annotated[float, typer.Option(help="Simulated time span (hours).", rich_help_panel=WORLD)] = 0.5,
    around: Annotated[str | None, typer.Option(
        "--around", metavar="LAT,LON,KM", help="Only trips that begin and end within KM km of LAT,LON "
        "(default: anywhere).", rich_help_panel=WORLD)] = None,
    gps_noise: GpsNoiseOpt = 0.0,
    rate_hz: Annotated[float, typer.Option("--fix-rate", help="GPS fixes a second; in (0, 1].",
                                           rich_help_panel=WORLD)] = 1.0,
    seed: SeedOpt = 0,
    out: Annotated[Path, out_option("Folder for traces.csv, traces.gpx, answer.parquet (the answer key) and "
                                    "drives.json.")] = Path("drives"),
    battery: Annotated[bool, typer.Option("--battery-xml", help="Also write SUMO's battery output (battery.xml) "
                                          "and its network (net.net.xml).", rich_help_panel=OUTPUT)] = False,
    overwrite: OverwriteOpt = False, as_json: JsonOpt = False, progress: ProgressOpt = None,
) -> None:
    """Realistic drives from SUMO with an answer key: GPS traces with energy (CSV) of cars in
    background traffic, and SUMO's own per-edge energies of the same drives kept apart."""
    from ..errors import EvrouteError
    from ..io import atomic_path, atomic_write_parquet, atomic_write_text, generator
    from ..physics.energy import load_vehicle
    from ..progress import configure as configure_progress
    from ..roads.network import load_network
    from ..runs.directory import check_output_file
    from ..validate import parse_latlon
    from ..world.sumo_drives import sumo_drives
    from ..world.trace_formats import write_gpx

    for ok, what in ((1 <= vehicles <= 10000, f"--vehicles must be 1 to 10000, got {vehicles}"),
                     (0 <= seed < 2**31, f"--seed must be 0 to 2^31-1, got {seed}"),
                     (0 <= gps_noise <= 500, f"--gps-noise must be 0 to 500 metres, got {gps_noise:g}"),
                     (0 < rate_hz <= 1, f"--fix-rate must be in (0, 1] fixes a second, got {rate_hz:g}"),
                     (0 < traffic <= 1e6, f"--traffic must be in (0, 1e6] trips an hour, got {traffic:g}"),
                     (0 < hours <= 24, f"--hours must be in (0, 24], got {hours:g}")):
        if not ok:
            raise EvrouteError(what)
    district = None
    if around is not None:
        lat_lon, _, km_text = around.rpartition(",")
        try:
            km = float(km_text) if around.count(",") == 2 else float("nan")
        except ValueError:
            km = float("nan")
        if not (0 < km <= 1000):
            raise EvrouteError(f"--around must be LAT,LON,KM with KM in (0, 1000] kilometres, got {around!r}")
        district = (*parse_latlon(lat_lon, "--around"), km)
    configure_progress(progress)
    names = ["traces.csv", "traces.gpx", "answer.parquet", "drives.json"]
    names += ["battery.xml", "net.net.xml"] if battery else []
    for name in names:
        check_output_file(out / name, overwrite)  # before any work
    veh = load_vehicle(fleet_vehicle)
    net = load_network(network, osm=osm, dem=dem)
    out.mkdir(parents=True, exist_ok=True)
    d = sumo_drives(net, network, veh, vehicles=vehicles, seed=seed, rate=traffic, hours=hours, gps_noise_m=gps_noise,
                    sample_hz=rate_hz, osm=str(osm) if osm else None, dem=str(dem) if dem else None,
                    battery_dir=out if battery else None, around=district)
    with atomic_path(out / "traces.csv") as tmp:
        with open(tmp, "w") as fh:
            fh.write(f"# generator: {generator()}\n")
            d.traces.to_csv(fh, index=False, float_format="%.10g")
    write_gpx(d.traces, out / "traces.gpx", generator())
    atomic_write_parquet(out / "answer.parquet", d.answer)
    atomic_write_text(out / "drives.json", json.dumps({"generator": generator(), **d.summary}, indent=2))
    if as_json:
        print(json.dumps(d.summary))
        return
    s = d.summary
    print(f"{s['vehicles']:,} drives on {net.name}: {s['fixes']:,} fixes at {s['sample_hz']:g} Hz, GPS noise "
          f"{s['gps_noise_m']:g} m; answer key {s['answer_traversals']:,} traversals ({s['teleports']} teleports)")
    print("wrote " + ", ".join(str(out / n) for n in names))
    print(f"import them: evroute drives import {out / 'traces.csv'} --network {network}"
          f"{f' --fleet-vehicle {fleet_vehicle}' if fleet_vehicle else ''}"
          f"{f' --dem {dem}' if dem else ''}{f' --gps-noise {gps_noise:g}' if gps_noise > 0 else ''} --out DRIVES")
