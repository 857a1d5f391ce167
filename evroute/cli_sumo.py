"""Commands ``evroute sumo ...``: SUMO's EV model in simulated traffic as a physical truth. Thin:
parse options, call the library (imported inside each command, so ``--help`` answers at once)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from .cli_settings import (
    HELP_STYLE,
    DemOpt,
    JsonOpt,
    OsmOpt,
    OverwriteFileOpt,
    ProgressOpt,
    VehicleOpt,
)

app = typer.Typer(help="SUMO's EV model in simulated traffic, a physical truth (pip install \"evroute[sumo]\").",
                  no_args_is_help=True, **HELP_STYLE)


@app.command("atlas")
def sumo_atlas_cmd(
    network: Annotated[str, typer.Argument(help="Network name or OSM file.")] = "synthetic",
    route: Annotated[str | None, typer.Option("--route", help="Probe vehicles drive every edge between this "
                                              "trip's ends (A or B; default A).")] = None,
    vehicle: VehicleOpt = None, osm: OsmOpt = None, dem: DemOpt = None,
    rate: Annotated[float, typer.Option(help="Background traffic: random trips an hour; in (0, 1e6].")] = 1800.0,
    hours: Annotated[float, typer.Option(help="Simulated hours; in (0, 24].")] = 0.5,
    probes: Annotated[int, typer.Option(help="Traversals of every edge between the trip's ends by probe "
                                        "vehicles; 0 to 100.")] = 3,
    seed: Annotated[int, typer.Option(help="Seed of the demand and of SUMO; 0 to 2^31-1.")] = 0,
    demand: Annotated[str | None, typer.Option("--demand", metavar="ROUTES.xml", help="A SUMO route file as the "
                                               "background traffic instead of --rate random trips (its vehicles "
                                               "become --vehicle; trips may name OSM node ids with fromJunction/"
                                               "toJunction); --hours then only spreads the probes.")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Folder for atlas.parquet, atlas.json and the plot "
                                             "atlas.png/svg (E_det against SUMO).")] = None,
    fit: Annotated[bool, typer.Option("--fit", help="Also fit sigma_0, the noise and the lengthscale of the "
                                      "agents' prior by type-II maximum likelihood on the atlas's first half.")] = False,
    overwrite: OverwriteFileOpt = False, as_json: JsonOpt = False, progress: ProgressOpt = None,
) -> None:
    """Build (or read from the cache) the energy atlas of a network: one row per traversal of an
    edge in SUMO with traffic; the same atlas --truth sumo[...] uses."""
    from .energy import load_vehicle
    from .environments import TRUTHS
    from .io import atomic_write_parquet, atomic_write_text, generator
    from .network import load_network
    from .oracle import Oracle
    from .plots import plot_atlas
    from .progress import configure as configure_progress
    from .progress import stage
    from .routes import edge_energies, resolve_route
    from .runs import check_output_file
    from .sumo import build_atlas, edet_agreement, fit_hyperparameters

    options = TRUTHS.get("sumo").resolve({"rate": rate, "hours": hours, "probes": probes, "atlas_seed": seed,
                                          "demand": demand})
    configure_progress(progress)
    if out is not None:
        for name in ("atlas.parquet", "atlas.json", "atlas.png", "atlas.svg"):
            check_output_file(out / name, overwrite)  # before any work
    veh = load_vehicle(vehicle)
    net = load_network(network, osm=osm, dem=dem)
    spec = resolve_route(net, route, None, None)
    atlas = build_atlas(net, network, veh, oracle=Oracle.from_network(net), start=spec.start, end=spec.end,
                        rate=options["rate"], hours=options["hours"], probes=options["probes"],
                        seed=options["atlas_seed"], osm=str(osm) if osm else None, dem=str(dem) if dem else None,
                        demand=options["demand"])
    mean, counts = atlas.mean_energy(net.n_edges)
    e_det = edge_energies(net, veh)
    stats = {**atlas.summary, "key": atlas.key, **edet_agreement(e_det, mean)}
    if fit:
        with stage("type-II maximum likelihood on the atlas's first half"):
            stats["fit"] = fit_hyperparameters(atlas, net, e_det)
    files = []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_parquet(out / "atlas.parquet", atlas.table)
        atomic_write_text(out / "atlas.json", json.dumps({"generator": generator(), **stats}, indent=2))
        files = [out / "atlas.parquet", out / "atlas.json",
                 *plot_atlas(e_det, mean, counts, out, title=f"{net.name} ({veh.name})")]
    if as_json:
        print(json.dumps(stats))
        return
    print(f"{net.name}: {stats['traversals']:,} traversals of {stats['edges_traversed']:,} of {net.n_edges:,} edges "
          f"({100 * stats['edges_mapped_share']:.1f} % mapped to SUMO), {stats['probe_vehicles']:,} probe vehicles, "
          f"{stats['teleports']} teleports")
    if stats["r_edet_sumo"] is not None:
        print(f"E_det (Eq. 8) against the mean SUMO energy per edge: r = {stats['r_edet_sumo']:.3f}, median "
              f"ratio SUMO / E_det {stats['median_ratio_sumo_edet']:.3f}")
    background = f"demand={options['demand']}" if options["demand"] else f"rate={options['rate']:g}"
    print(f"atlas {atlas.key} (cached); --truth \"sumo[{background},hours={options['hours']:g},"
          f"probes={options['probes']},atlas_seed={options['atlas_seed']}]\" uses it")
    if fit:
        f = stats["fit"]
        print(f"fitted on {f['traversals']:,} traversals of {f['edges']:,} edges: sigma_0 {f['prior_std']:.1f} Wh "
              f"(the paper's 0.25 sigma_det: {f['paper_prior_std']:.1f}), noise {f['noise_std']:.1f} Wh (0.1 sigma_det: "
              f"{f['paper_noise_std']:.1f}), lengthscale {f['lengthscale']:g}"
              + (" (at the edge of the grid)" if f["lengthscale_at_grid_edge"] else "")
              + f"; run with --prior-std {f['prior_std']:.4g} --noise-std {f['noise_std']:.4g} "
              f"--lengthscale {f['lengthscale']:g}")
    for f in files:
        print(f"wrote {f}")
