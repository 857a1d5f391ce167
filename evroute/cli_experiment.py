"""Commands ``evroute compare``, ``evroute plot`` and ``evroute export`` (registered by
:func:`evroute.cli._register_extra_commands`). Thin: parse options, call the library."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .errors import EvrouteError
from .progress import configure as configure_progress


def compare_cmd(
    out: Annotated[Path, typer.Option("--out", help="Output directory: runs/, grid.json, summary.csv, summary.md.")],
    preset: Annotated[str | None, typer.Option(
        help="paper-fig2, paper-fig3, paper-lengthscale (003 Sec. 4.2, App. C), bounds (000) or priors (004); "
             "other options override it (the README describes each).")] = None,
    network: Annotated[str | None, typer.Option(
        "--network", help="Network of unqualified routes (default synthetic).")] = None,
    routes: Annotated[str | None, typer.Option(
        help="Routes: A,B (on --network) or monaco:A,luxembourg:B (default A).")] = None,
    policies: Annotated[str | None, typer.Option(
        help="Comma-separated policies, variants as gp-bucb[xi=0.5], gp-ucb[beta_scale=0.5] "
             "(default gp-ucb,gp-bucb,gp-ts,bi-ucb,bi-bucb,bi-ts).")] = None,
    seeds: Annotated[int | None, typer.Option(help="Number of seeds: 0..N-1 (default 5).")] = None,
    horizon: Annotated[int | None, typer.Option(help="Rounds T per run (default 500).")] = None,
    model: Annotated[str | None, typer.Option(
        help="GP backend of the gp-* policies (default exact), options as a spec: svgp[inducing=500] "
             "(see `evroute models`).")] = None,
    lengthscales: Annotated[str | None, typer.Option(
        help="Comma-separated lengthscales of the agents' prior kernel (default 1.0).")] = None,
    truth_lengthscale: Annotated[str | None, typer.Option(
        help="Lengthscale of the kernel the true f is sampled from: a number (default 1, the paper's) "
             "or 'same' (each run's --lengthscales value: the sweep then changes the environment too).")] = None,
    priors: Annotated[str | None, typer.Option(
        "--priors", help="Candidate priors of gp-pe/mle/fb/rb (paper 004): comma-separated vehicle presets or "
                    "files, each with optional settings VEHICLE[eps=…,lengthscale=…,kappa=…,nu=…,name=…], or a JSON "
                    "candidates file (default: every preset).")] = None,
    truth_prior: Annotated[str | None, typer.Option(
        "--truth-prior", help="The vehicle whose energies the truth is drawn around, or a --priors candidate's "
                         "name (default: --vehicle).")] = None,
    drift: Annotated[float | None, typer.Option(
        "--drift", help="Time-varying energies with forgetting rate ε (paper 004); default 0: static.")] = None,
    closures: Annotated[str | None, typer.Option(
        "--closures", help="Road closures: alternate or random[rate=0.05] (default none).")] = None,
    truth: Annotated[str | None, typer.Option(
        "--truth", help="The ground truth: gp (a draw from the GP prior, the paper's; default) or "
                        "rkhs[B=10] (an RKHS-bounded function with norm B: paper 000 Sec. 7).")] = None,
    jobs: Annotated[int | None, typer.Option(
        help="Parallel processes (default: number of CPUs; 1 runs in-process).")] = None,
    executor: Annotated[str, typer.Option(help="local (process pool) or ray.")] = "local",
    ray_address: Annotated[str | None, typer.Option(
        "--ray-address", help="Ray cluster address (default: start a local Ray instance).")] = None,
    osm: Annotated[str | None, typer.Option(
        "--osm", help="OSM file: PATH (one network) or NETWORK=PATH[,NETWORK=PATH].")] = None,
    dem: Annotated[str | None, typer.Option(
        "--dem", help="DEM raster: PATH (one network) or NETWORK=PATH[,...] (Luxembourg is flat without one).")] = None,
    vehicle: Annotated[str | None, typer.Option("--vehicle", help="Vehicle preset name or JSON file.")] = None,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Recompute finished runs whose settings differ from this grid.")] = False,
    progress: Annotated[bool | None, typer.Option(
        "--progress/--no-progress", help="Progress bar and build spinners on stderr (default: on a terminal).")] = None,
) -> None:
    """Run a grid of bandit runs (route × policy × lengthscale × seed) and summarise it.

    Re-running the same command resumes: finished runs are kept, interrupted ones recomputed.
    """
    from .experiment import run_grid
    from .grid import make_grid
    from .summaries import summary_markdown

    configure_progress(progress)
    grid = make_grid(preset=preset, network=network, routes=routes, policies=policies, seeds=seeds,
                     horizon=horizon, model=model, lengthscales=lengthscales, osm=osm, dem=dem, vehicle=vehicle,
                     truth_lengthscale=truth_lengthscale, truth_kind=truth, priors=priors,
                     truth_prior=truth_prior, drift=drift, closures=closures)
    res = run_grid(grid, out, executor=executor, jobs=jobs, ray_address=ray_address, overwrite=overwrite,
                   progress=progress)
    print(summary_markdown(res.summary).rstrip())
    print(f"\n{res.n_runs} runs ({res.n_kept} kept, {res.n_computed} computed) in {res.seconds:.1f} s; "
          f"wrote {', '.join(str(f) for f in res.files)}")


def plot_cmd(
    directory: Annotated[Path, typer.Argument(help="A compare directory or a run directory.")],
    out: Annotated[Path | None, typer.Option("--out", help="Folder for the figures (default DIR/plots).")] = None,
    maps: Annotated[bool, typer.Option("--maps/--no-maps", help="Exploration maps (need the network).")] = True,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace figure files evroute did not write (links, folders and devices never).")] = False,
    progress: Annotated[bool | None, typer.Option(
        "--progress/--no-progress", help="Spinners while a network is built (default: on a terminal).")] = None,
) -> None:
    """Figures: cumulative regret, β_t, regret vs lengthscale, exploration maps (PNG and SVG).

    Figures evroute wrote before (an earlier plot) are replaced; any other file is refused
    unless --overwrite is given, and nothing is written until every target has been checked.
    """
    from .plots import plot_directory

    configure_progress(progress)
    files = plot_directory(directory, out, maps=maps, overwrite=overwrite)
    for f in files:
        print(f)


def export_cmd(
    directory: Annotated[Path, typer.Argument(help="A run directory, or a compare directory (see --run).")],
    geojson: Annotated[str | None, typer.Option(
        "--geojson", help="GeoJSON file to write (RFC 7946); - for standard output.")] = None,
    html: Annotated[Path | None, typer.Option("--html", help="Interactive HTML map (folium) to write.")] = None,
    gpkg: Annotated[Path | None, typer.Option("--gpkg", help="GeoPackage to write (one layer each: edge, round, optimal; for GIS tools).")] = None,
    last: Annotated[int | None, typer.Option("--last", help="Only the last K rounds' routes.")] = None,
    run: Annotated[str | None, typer.Option(
        "--run", help="In a compare directory: the run's name (default: the first run).")] = None,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace files evroute did not write (links, folders, devices and a run's own "
                            "files never).")] = False,
    progress: Annotated[bool | None, typer.Option(
        "--progress/--no-progress", help="Spinners while a network is built (default: on a terminal).")] = None,
) -> None:
    """Routes driven, the optimal route and per-edge visits / posterior as GeoJSON, HTML or GeoPackage.

    An existing file is replaced only if evroute wrote it (an earlier export) or with --overwrite.
    """
    import sys

    from .export import export
    from .io import is_stdout

    configure_progress(progress)
    if geojson is None and html is None and gpkg is None:
        raise EvrouteError("nothing to write: give --geojson FILE, --html FILE and/or --gpkg FILE")
    say = sys.stderr if geojson is not None and is_stdout(geojson) else sys.stdout  # stdout holds the GeoJSON
    for f in export(directory, geojson=geojson, html=html, last=last, run=run, gpkg=gpkg, overwrite=overwrite):
        print(f"wrote {f}", file=say)


def register(app: typer.Typer) -> None:
    """Add compare, plot and export to the ``evroute`` app."""
    app.command("compare")(compare_cmd)
    app.command("plot")(plot_cmd)
    app.command("export")(export_cmd)
