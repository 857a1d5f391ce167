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
    ProgressOpt,
    SeedOpt,
    VehicleOpt,
)

app = typer.Typer(help="The agents' prior against measured traversals: fit it, check it on held-out drives.",
                  no_args_is_help=True, **HELP_STYLE)


@app.command("check")
def prior_check_cmd(
    drives: Annotated[Path, typer.Argument(help="traversals.parquet of evroute drives import.", show_default=False)],
    network: NetworkOpt,
    fleet_vehicle: FleetVehicleOpt = None,
    vehicle: VehicleOpt = None,
    osm: OsmOpt = None, dem: DemOpt = None,
    kernel: Annotated[str, typer.Option("--kernel", metavar="combined|graph", help="The prior's kernel: combined or graph (its lengthscale is fitted).",
                                        rich_help_panel=AGENT)] = "combined",
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
    from ..runs.problem import fleet_ratio
    from ..validate import choice
    from ..world.drives import read_drives

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
          f"combined[lengthscale={st['lengthscale']:g}]" + (f" (the fit times {rho:.3g}, {st['vehicle']}'s energies over {drove.name}'s)"
                                       if target != drove else ""))
    if target != drove:  # the settings every fleet of another vehicle was measured with (docs: SUMO results)
        print(f"with these drives as its prior, add: --prior-drives {shlex.quote(str(drives))} --fleet-vehicle "
              f"{shlex.quote(fleet_vehicle or drove.name)} --vehicle-scale 0.5 --prior-drives-variance fleet")
    gain = c["kernel"]["log_density"] - c["independent"]["log_density"]
    print(("supported: " if c["supported"] else "not supported: ")
          + f"the kernel's correlations predict the held-out drives {'better' if gain > 0 else 'worse'} than "
          f"independent edges ({gain:+.3f} nats a traversal)")
