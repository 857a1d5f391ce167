"""Commands ``evroute prior ...``: the agents' prior against measured traversals. Thin: parse
options, call :mod:`evroute.priors.fitting` (imported inside the command)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated

import typer

from .options import (
    AGENT,
    HELP_STYLE,
    DemOpt,
    FleetVehicleOpt,
    JsonOpt,
    NetworkOpt,
    OsmOpt,
    OverwriteOpt,
    ProgressOpt,
    SeedOpt,
    fleet_vehicle_option,
    out_option,
    vehicle_option,
)

app = typer.Typer(help="The agents' prior from measured traversals: fit a fleet's drives into one prior file, check "
                  "the kernel on held-out drives.", no_args_is_help=True, **HELP_STYLE)


@app.command("fit")
def prior_fit_cmd(
    drives: Annotated[Path, typer.Argument(help="The folder of evroute drives import (or its traversals.parquet): "
                                           "its report.json names the network and the vehicle that drove.",
                                           show_default=False)],
    out: Annotated[Path, out_option("The prior file to write (JSON), for --prior of simulate, compare and route.")],
    network: NetworkOpt = None,
    fleet_vehicle: fleet_vehicle_option("the import's") = None,
    vehicle: vehicle_option("the fleet's") = None,
    osm: OsmOpt = None, dem: DemOpt = None,
    residual_sd: Annotated[float | None, typer.Option(
        "--residual-sd", metavar="K", help="Residual trust k, 0 to 10 (default: by cross-validation over held-out "
        "trips).", rich_help_panel=AGENT, show_default=False)] = None,
    vehicle_scale: Annotated[float | None, typer.Option(
        "--vehicle-scale", metavar="SD", help="Sd of the agents' vehicle's scale of the fleet's residuals, 0 to 10.",
        rich_help_panel=AGENT, show_default="0.5, 0 for the fleet's own vehicle")] = None,
    seed: SeedOpt = 0,
    overwrite: OverwriteOpt = False, as_json: JsonOpt = False, progress: ProgressOpt = None,
) -> None:
    """A fleet's drives as the agents' prior, in one file: sigma_0, the noise and the lengthscale by
    type-II maximum likelihood, the fleet's per-edge and per-turn posterior in the agents' units,
    the vehicle scale, and the residual trust k chosen by cross-validation over held-out trips. The
    network and the fleet's vehicle are the import's (its report.json); --network and
    --fleet-vehicle are for an import of an earlier evroute that names them as this one cannot."""
    import warnings

    from ..errors import EvrouteError, EvrouteWarning
    from ..physics.energy import load_vehicle
    from ..progress import configure as configure_progress
    from ..progress import stage
    from ..roads.network import load_network
    from ..runs.directory import check_output_file
    from ..world.drives_prior import read_drives
    from ..world.fleet import (
        check_import_network,
        file_digest,
        fit_fleet_prior,
        network_record,
        read_drives_import,
        read_fleet_prior,
        vehicle_record,
        write_fleet_prior,
    )

    if not 0 <= seed < 2**31:
        raise EvrouteError(f"--seed must be 0 to 2^31-1, got {seed}")
    for flag, value in (("--residual-sd", residual_sd), ("--vehicle-scale", vehicle_scale)):
        if value is not None and not 0 <= value <= 10:
            raise EvrouteError(f"{flag} must be 0 to 10 (a standard deviation of a factor), got {value:g}")
    check_output_file(out, overwrite)  # before any work
    where, fleet_rec, table_path, notes = read_drives_import(drives, network=network, osm=osm, dem=dem,
                                                              fleet_vehicle=fleet_vehicle)
    fleet = load_vehicle(fleet_rec["spec"])
    agents = load_vehicle(vehicle) if vehicle is not None else fleet
    configure_progress(progress)
    net = load_network(where["network"], osm=where["osm"], dem=where["dem"])
    check_import_network(net, where)
    table = read_drives(table_path, net.n_edges)
    if not len(table):
        raise EvrouteError(f"{table_path} holds no traversal: nothing to fit")
    with stage("type-II maximum likelihood, the fleet's posterior, the residual trust's cross-validation"):
        prior = fit_fleet_prior(net, table, fleet_vehicle=fleet, vehicle=agents, seed=seed,
                                residual_sd=residual_sd, vehicle_scale=vehicle_scale)
    with warnings.catch_warnings():
        warnings.simplefilter("always", EvrouteWarning)
        for line in notes + prior["notes"]:
            warnings.warn(line, EvrouteWarning, stacklevel=1)
    drives_rec = {"path": str(table_path.resolve()), "sha256": file_digest(table_path), "traversals": len(table),
                  "trips": int(table.trip.nunique()), "edges": int(table.edge.nunique()),
                  "gps_noise_m": fleet_rec["gps_noise_m"], "matcher": fleet_rec["matcher"]}
    fleet_veh = vehicle_record(fleet, fleet_rec["spec"])
    write_fleet_prior(out, prior, network=network_record(net, where["network"], osm=where["osm"], dem=where["dem"]),
                      fleet_vehicle=fleet_veh, vehicle=vehicle_record(agents, vehicle) if vehicle is not None
                      else fleet_veh, drives=drives_rec)
    written = read_fleet_prior(out)  # (what a run will read)
    if as_json:
        print(json.dumps({k: v for k, v in written.data.items() if k not in ("edges", "turns")}))
        return
    for line in describe_prior(written.data):
        print(line)
    print(f"wrote {out}; learn under it: evroute simulate --prior {shlex.quote(str(out))} (or compare, route)")


def describe_prior(p: dict) -> list[str]:
    """What ``evroute prior fit`` prints of a prior file's contents."""
    d, fit = p["drives"], p["fit"]
    lines = [f"{d['trips']:,} trips of {p['fleet_vehicle']['name']}: {d['traversals']:,} traversals of "
             f"{d['edges']:,} edges of {p['network']['name']}"
             + (f"; for {p['vehicle']['name']}, rho {p['rho']:.3f} (its E_det over the fleet's)"
                if p["vehicle"]["parameters"] != p["fleet_vehicle"]["parameters"] else "")]
    noise = p["noise_std"] if isinstance(p["noise_std"], str) else f"{p['noise_std']:.2f} Wh"
    why = ""
    if fit.get("held_out") and "edge_noise" in fit["held_out"]:
        h = fit["held_out"]
        gain = h["edge_noise"]["log_density"] - h["kernel"]["log_density"]
        why = f" (a noise per edge predicts a held-out half {gain:+.3f} nats a traversal against one level)"
    how = {"the paper's": "the paper's", "given": "given"}.get(fit.get("noise_model"), "type-II maximum likelihood")
    lines.append(f"{how}: sigma_0 {p['prior_std']:.2f} Wh, noise {noise}, lengthscale {p['lengthscale']:g}{why}")
    cv = p.get("cross_validation")
    if cv is None:
        lines.append(f"residual trust k {p['residual_sd']:g} ({p.get('residual_sd_from', 'given')})")
    else:
        lines.append(f"residual trust k by {cv['folds']}-fold cross-validation over trips ({cv['traversals']:,} "
                     "held-out traversals of edges the other folds drove), log predictive density a traversal:")
        for k, score in zip(cv["grid"], cv["log_density"], strict=True):
            lines.append(f"  k = {k:<5g} {score:.4f}" + ("  <- chosen" if k == cv["chosen"] else ""))
    t = p.get("turns")
    if t is not None:
        cars = [c for c in t["cars"] if c > 0]
        lines.append(f"turns: {len(cars):,} of {len(t['cars']):,} driven (median {sorted(cars)[len(cars) // 2]} cars), "
                     f"one car's spread {t['noise_var'] ** 0.5:.2f} Wh")
    else:
        lines.append(f"turns: none ({p.get('turns_note')}); runs take physics' turns")
    lines.append(f"vehicle scale sd {p['vehicle_scale']:g}")
    return lines


@app.command("check")
def prior_check_cmd(
    drives: Annotated[Path, typer.Argument(help="traversals.parquet of evroute drives import.", show_default=False)],
    network: NetworkOpt,
    fleet_vehicle: FleetVehicleOpt = None,
    vehicle: vehicle_option("the fleet's") = None,
    osm: OsmOpt = None, dem: DemOpt = None,
    kernel: Annotated[str, typer.Option("--kernel", metavar="combined|graph", help="The prior's kernel: combined or "
                                        "graph (its lengthscale is fitted).", rich_help_panel=AGENT)] = "combined",
    whole: Annotated[bool, typer.Option("--whole", help="Whole traversals instead of the edges at a constant "
                                        "kinetic state.")] = False,
    seed: SeedOpt = 0,
    as_json: JsonOpt = False, progress: ProgressOpt = None,
) -> None:
    """Fit sigma_0, the noise and the lengthscale on half of the trips and predict the other
    half's traversals: coverage of the 50 % and 90 % intervals, log predictive density, beside the
    same prior without correlations; says whether the kernel's correlations are supported. The fit
    is printed as the options of a run of --vehicle (default: the fleet's own vehicle), in its units."""
    import numpy as np

    from ..errors import EvrouteError
    from ..physics.energy import load_vehicle
    from ..physics.routes import edge_energies
    from ..priors.fitting import check_prior, fitted_settings
    from ..progress import configure as configure_progress
    from ..progress import stage
    from ..roads.network import load_network
    from ..validate import choice
    from ..world.drives_prior import fleet_ratio, read_drives

    kernel = choice("--kernel", kernel, ("combined", "graph"))
    if not 0 <= seed < 2**31:
        raise EvrouteError(f"--seed must be 0 to 2^31-1, got {seed}")
    if not drives.is_file():
        raise EvrouteError(f"no such drives table: {drives}")
    drove = load_vehicle(fleet_vehicle)
    target = load_vehicle(vehicle) if vehicle is not None else drove
    configure_progress(progress)
    net = load_network(network, osm=osm, dem=dem)
    table = read_drives(drives, net.n_edges)
    e_det = edge_energies(net, drove)
    with stage("type-II maximum likelihood on half of the trips, then the other half predicted"):
        c = check_prior(net, e_det, table, kernel=kernel, seed=seed, column="energy_wh" if whole else "edge_wh")
    driven = np.bincount(table.edge.to_numpy(np.int64), minlength=net.n_edges) > 0
    rho = 1.0 if target == drove else fleet_ratio(e_det[driven], edge_energies(net, target)[driven])
    c["settings"] = {"vehicle": target.name, **fitted_settings(c, rho)}
    if as_json:
        print(json.dumps(c))
        return
    f = c["fit"]
    print(f"fitted on {c['train_trips']} trips ({f['traversals']:,} traversals of {f['edges']:,} edges): sigma_0 "
          f"{f['prior_std']:.2f} Wh, noise {f['noise_std']:.2f} Wh, lengthscale {f['lengthscale']:g}"
          + (" (at the edge of the grid)" if f["lengthscale_at_grid_edge"] else ""))
    print(f"{c['test_traversals']:,} held-out traversals of {c['test_trips']} trips:")
    rows = [("kernel", f"the {kernel} kernel"), ("independent", "no correlation between edges")]
    if "edge_noise" in c:
        rows.append(("edge_noise", "the kernel, noise per edge"))
    for name, label in rows:
        x = c[name]
        print(f"  {label:<30s} 50 % interval covers {100 * x['coverage_50']:.1f} %, 90 % covers "
              f"{100 * x['coverage_90']:.1f} %; log predictive density {x['log_density']:.3f} a traversal")
    if c["neighbour_pairs"] >= 10:
        print(f"neighbouring edges' held-out residuals correlate at {c['neighbour_correlation']:+.2f} "
              f"({c['neighbour_pairs']:,} pairs); the kernel says {c['kernel_neighbour_correlation']:+.2f}")
    if "noise_model" in c:
        nm = c["noise_model"]
        print(f"noise per edge fitted on the same half: {nm['spec']} (sigma_0 {nm['prior_std']:.2f} Wh, lengthscale "
              f"{nm['lengthscale']:g}); it predicts the held-out drives "
              f"{c['edge_noise']['log_density'] - c['kernel']['log_density']:+.3f} nats a traversal against one sigma")
    st = c["settings"]
    noise = f'"{st["noise_std"]}"' if isinstance(st["noise_std"], str) else f"{st['noise_std']:.4g}"
    print(f"to learn under it as {st['vehicle']}: --prior-std {st['prior_std']:.4g} --noise-std {noise} --kernel "
          f"combined[lengthscale={st['lengthscale']:g}]"
          + (f" (the fit times {rho:.3g}, {st['vehicle']}'s energies over {drove.name}'s)" if target != drove else ""))
    if target != drove:
        print(f"with these drives as its prior: evroute prior fit DRIVES --vehicle {shlex.quote(vehicle)} --out "
              "PRIOR, then --prior PRIOR (DRIVES the folder of evroute drives import)")
    gain = c["kernel"]["log_density"] - c["independent"]["log_density"]
    print(("supported: " if c["supported"] else "not supported: ")
          + f"the kernel's correlations predict the held-out drives {'better' if gain > 0 else 'worse'} than "
          f"independent edges ({gain:+.3f} nats a traversal)")
