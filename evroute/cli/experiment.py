"""Commands ``evroute compare``, ``evroute plot`` and ``evroute export``. Thin: parse options, call
the library (imported inside each command, so ``--help`` answers at once)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ..errors import EvrouteError
from ..presets import AXES, DEFAULT_POLICIES, PRESETS, SWEEPABLE
from ..settings import RUN_SETTINGS
from .options import HELP_STYLE, with_settings

app = typer.Typer(**HELP_STYLE)

#: The run settings ``compare`` takes as ``simulate`` does (the others are its axes: --routes,
#: --policies, --seeds, --lengthscales, --truth-lengthscale, --osm/--dem maps, --sweep).
COMPARE_SETTINGS = tuple(n for n in RUN_SETTINGS if n not in AXES or n == "priors")


def compare_cmd(
    out: Annotated[Path, typer.Option("--out", help="Output directory: runs/, grid.json, summary.csv, summary.md.")],
    preset: Annotated[str | None, typer.Option(
        help=f"{', '.join(PRESETS)} (003 Sec. 4.2, App. C; 000; 004); other options override it (the "
             "documentation's reproduction pages describe each).")] = None,
    network: Annotated[str | None, typer.Option(
        "--network", help="Network of unqualified routes (default synthetic).")] = None,
    routes: Annotated[str | None, typer.Option(
        help="Routes: A,B (on --network) or monaco:A,luxembourg:B (default A).")] = None,
    policies: Annotated[str | None, typer.Option(
        help="Comma-separated policies, as --policy of simulate: variants as gp-bucb[xi=0.5], "
             f"gp-ucb[beta_scale=0.5] (default {','.join(DEFAULT_POLICIES)}).")] = None,
    seeds: Annotated[int | None, typer.Option(help="Number of seeds: 0..N-1 (default 5).")] = None,
    lengthscales: Annotated[str | None, typer.Option(
        help="Comma-separated lengthscales of the agents' prior kernel (default 1.0).")] = None,
    truth_lengthscale: Annotated[str | None, typer.Option(
        help="Lengthscale of the kernel the true f is sampled from: a number (default 1, the paper's) "
             "or 'same' (each run's --lengthscales value: the sweep then changes the environment too).")] = None,
    sweep: Annotated[list[str] | None, typer.Option(
        "--sweep", metavar="NAME=V1,V2",
        help=f"Also sweep a setting, e.g. --sweep kappa=0.5,1,2 or --sweep 'model=exact,nystrom[gamma=0.3]' "
             f"(repeatable; settings: {', '.join(SWEEPABLE)}).")] = None,
    jobs: Annotated[int | None, typer.Option(
        help="Parallel processes (default: number of CPUs; 1 runs in-process).")] = None,
    executor: Annotated[str, typer.Option(help="local (process pool) or ray.")] = "local",
    ray_address: Annotated[str | None, typer.Option(
        "--ray-address", help="Ray cluster address (default: start a local Ray instance).")] = None,
    osm: Annotated[str | None, typer.Option(
        "--osm", help="OSM file: PATH (one network) or NETWORK=PATH[,NETWORK=PATH].")] = None,
    dem: Annotated[str | None, typer.Option(
        "--dem", help="DEM raster: PATH (one network) or NETWORK=PATH[,...] (Luxembourg is flat without one).")] = None,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Recompute finished runs whose settings differ from this grid.")] = False,
    progress: Annotated[bool | None, typer.Option(
        "--progress/--no-progress", help="Progress bar and build spinners on stderr (default: on a terminal).")] = None,
    **settings,
) -> None:
    """Run a grid of bandit runs (route × lengthscale × policy × seed, and any --sweep) and summarise it.

    Every run takes the same settings as `evroute simulate` (same options, same specs).
    Re-running the same command resumes: finished runs are kept, interrupted ones recomputed.
    """
    from ..progress import configure as configure_progress
    from ..runs.experiment import run_grid
    from ..runs.grid import make_grid
    from ..runs.summaries import summary_markdown

    configure_progress(progress)
    grid = make_grid(preset=preset, network=network, routes=routes, policies=policies, seeds=seeds,
                     lengthscales=lengthscales, osm=osm, dem=dem, truth_lengthscale=truth_lengthscale,
                     sweep=sweep, **settings)
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
    """Figures: cumulative regret, β_t, regret vs lengthscale, Nyström dictionary size, the
    candidate priors' survival, the lower bounds' coverage, exploration maps (PNG and SVG).

    Figures evroute wrote before (an earlier plot) are replaced; any other file is refused
    unless --overwrite is given, and nothing is written until every target has been checked.
    """
    from ..progress import configure as configure_progress
    from ..reports.plots import plot_directory

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
    from ..io import is_stdout
    from ..progress import configure as configure_progress
    from ..reports.export import export

    configure_progress(progress)
    if geojson is None and html is None and gpkg is None:
        raise EvrouteError("nothing to write: give --geojson FILE, --html FILE and/or --gpkg FILE")
    say = sys.stderr if geojson is not None and is_stdout(geojson) else sys.stdout  # stdout holds the GeoJSON
    for f in export(directory, geojson=geojson, html=html, last=last, run=run, gpkg=gpkg, overwrite=overwrite):
        print(f"wrote {f}", file=say)


app.command("compare")(with_settings(COMPARE_SETTINGS)(compare_cmd))
app.command("plot")(plot_cmd)
app.command("export")(export_cmd)
