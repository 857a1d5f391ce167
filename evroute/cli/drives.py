"""Commands ``evroute drives ...``: a driver's GPS traces with energy in, as traversals of the
network's edges. Thin: parse options, call :mod:`evroute.world.drives` (imported inside the command)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from .options import (
    HELP_STYLE,
    DemOpt,
    FleetVehicleOpt,
    GpsNoiseOpt,
    JobsOpt,
    JsonOpt,
    NetworkOpt,
    OsmOpt,
    OverwriteOpt,
    ProgressOpt,
    out_option,
)

app = typer.Typer(help="Drives in: GPS traces with energy map-matched into the network's edges.",
                  no_args_is_help=True, **HELP_STYLE)


@app.command("import")
def drives_import_cmd(
    files: Annotated[list[Path], typer.Argument(help="CSV or GPX traces (gzipped or not, or folders of them): "
                                                "time, lat, lon and the energy used so far, the power or the state "
                                                "of charge; optional speed, trip and vehicle (GPX: extensions of "
                                                "those names), found by their usual names (docs/guide/drives.md); "
                                                "or SUMO's battery output (.xml, with --sumo-net).",
                                                show_default=False)],
    network: NetworkOpt,
    out: Annotated[Path, out_option("Folder for traversals.parquet (one row per traversal of an edge) and "
                                    "report.json.")],
    columns: Annotated[str | None, typer.Option("--columns", metavar="FIELD=COLUMN,...",
                                                help="Column names where they differ from the usual ones, e.g. "
                                                "time=t,lat=latitude,soc=battery.")] = None,
    units: Annotated[str | None, typer.Option("--units", metavar="FIELD=UNIT,...",
                                              help="Units a column's name does not say, e.g. "
                                              "speed=km/h,power=kW,energy=kWh.")] = None,
    capacity_kwh: Annotated[float | None, typer.Option("--capacity-kwh", help="The battery's capacity, to read a "
                                                       "state of charge; in (0, 1e4].")] = None,
    gps_noise: GpsNoiseOpt = 10.0,
    sumo_net: Annotated[Path | None, typer.Option("--sumo-net", help="The SUMO network (net.net.xml) a SUMO battery "
                                                 "output was recorded on.")] = None,
    boundary: Annotated[str, typer.Option("--boundary", help="Where a traversal begins and ends: centre (the "
                                          "junction's centre) or sumo (SUMO's own accounting).")] = "centre",
    matcher: Annotated[str, typer.Option("--matcher", help="The map matcher: hmm (evroute's own) or leuven "
                                         "(leuvenmapmatching's, about a hundred times slower).")] = "hmm",
    jobs: JobsOpt = None,
    fleet_vehicle: FleetVehicleOpt = None, osm: OsmOpt = None, dem: DemOpt = None,
    overwrite: OverwriteOpt = False, as_json: JsonOpt = False, progress: ProgressOpt = None,
) -> None:
    """Map-match GPS traces with energy onto a network: one row per complete traversal of an edge
    (energy, its kinetic split as the SUMO truth books it, speeds, match distance). What cannot be
    right is dropped with a warning line; a file that cannot be read is skipped with one. Exit
    code 1 when nothing was imported (no traversal), with a line saying why."""
    import sys
    import warnings

    from ..errors import EvrouteError, EvrouteWarning
    from ..io import atomic_write_json, atomic_write_parquet, generator, usable_cpus
    from ..physics.energy import load_vehicle
    from ..progress import configure as configure_progress
    from ..progress import counter
    from ..roads.network import load_network
    from ..runs.directory import check_output_file
    from ..validate import choice
    from ..world.drives import BOUNDARIES, MATCHERS, import_traces
    from ..world.fleet import network_record, vehicle_record
    from ..world.trace_formats import trace_files, trace_kind
    from ..world.traces import parse_columns, parse_units

    if capacity_kwh is not None and not 0 < capacity_kwh <= 1e4:
        raise EvrouteError(f"--capacity-kwh must be in (0, 1e4], got {capacity_kwh:g}")
    if not 0 < gps_noise <= 500:
        raise EvrouteError(f"--gps-noise must be in (0, 500] metres, got {gps_noise:g}")
    if jobs is not None and not 0 <= jobs <= 256:
        raise EvrouteError(f"--jobs must be 0 to 256, got {jobs}")
    boundary = choice("--boundary", boundary, BOUNDARIES)
    matcher = choice("--matcher", matcher, tuple(MATCHERS))
    names = parse_columns(columns)
    unit_names = parse_units(units)
    paths = trace_files(files)
    if sumo_net is not None and not sumo_net.is_file():
        raise EvrouteError(f"no such SUMO network: {sumo_net}")
    named_xml = [f for f in files if f.is_file() and trace_kind(f) == "xml"]
    if named_xml and sumo_net is None:
        raise EvrouteError(f"{named_xml[0]}: SUMO's battery output needs the SUMO network it was recorded on "
                           "(--sumo-net)")
    configure_progress(progress)
    for name in ("traversals.parquet", "report.json"):
        check_output_file(out / name, overwrite)  # before any work
    veh = load_vehicle(fleet_vehicle)
    net = load_network(network, osm=osm, dem=dem)
    with counter("matching trips") as tick:
        table, report = import_traces(paths, net, columns=names, capacity_kwh=capacity_kwh, units=unit_names,
                                      gps_noise_m=gps_noise, vehicle=veh, progress=tick, jobs=jobs or usable_cpus(),
                                      sumo_net=sumo_net, boundary=boundary, matcher=matcher)
    # the network and the vehicle as they were loaded, so that evroute prior fit asks for neither again
    summary = {"generator": generator(), "network": network_record(net, network, osm=osm, dem=dem),
               "vehicle": vehicle_record(veh, fleet_vehicle), "gps_noise_m": gps_noise,
               "matcher": matcher, "boundary": boundary, "units": unit_names,
               "files": [str(f) for f in paths], **report.to_dict(), "paths": [str(f) for f in paths]}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_parquet(out / "traversals.parquet", table)
    atomic_write_json(out / "report.json", summary)
    with warnings.catch_warnings():
        warnings.simplefilter("always", EvrouteWarning)
        for line in report.problems[:20]:
            warnings.warn(line, EvrouteWarning, stacklevel=1)
        if len(report.problems) > 20:
            warnings.warn(f"and {len(report.problems) - 20:,} more (report.json)", EvrouteWarning, stacklevel=1)
    if as_json:
        print(json.dumps(summary))
    if not report.traversals:
        print(f"error: nothing imported: {report.why_empty()} ({out / 'report.json'})", file=sys.stderr)
        raise typer.Exit(1)
    if as_json:
        return
    print(f"{report.trips_kept:,} of {report.trips_read:,} trips matched on {net.name}: {report.traversals:,} "
          f"traversals; {report.fixes_matched:,} of {report.fixes_read:,} fixes matched"
          + (f", {report.fixes_dropped:,} dropped" if report.fixes_dropped else ""))
    print(f"wrote {out / 'traversals.parquet'}, {out / 'report.json'}")
