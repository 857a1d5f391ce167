"""Commands ``evroute compare``, ``evroute plot`` and ``evroute export``. Thin: parse options, call
the library (imported inside each command, so ``--help`` answers at once)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ..errors import EvrouteError
from ..presets import AXES, DEFAULT_POLICIES
from ..settings import FLAG_SETTINGS, RUN_SETTINGS
from .options import (
    AGENT,
    HELP_STYLE,
    OUTPUT,
    RUN,
    WORLD,
    ConfigOpt,
    GeojsonOpt,
    HtmlOpt,
    JobsOpt,
    OverwriteOpt,
    ProgressOpt,
    out_option,
    with_settings,
)

app = typer.Typer(**HELP_STYLE)

#: The run settings ``compare`` takes as ``simulate`` does (the others are its axes: --routes,
#: --policies, --seeds, --osm/--dem maps, and the lengthscales of --sweep and --truth's spec).
COMPARE_SETTINGS = tuple(n for n in FLAG_SETTINGS if n not in AXES or n == "priors")


def compare_cmd(
    out: Annotated[Path, out_option("Output directory: runs/, grid.json, summary.csv, summary.md.")],
    config: ConfigOpt = None,
    routes: Annotated[str | None, typer.Option(
        metavar="NETWORK:ROUTE,...", help="Routes, e.g. monaco:A,luxembourg:B (default synthetic:A).",
        rich_help_panel=WORLD, show_default=False)] = None,
    osm: Annotated[str | None, typer.Option(
        "--osm", metavar="[NETWORK=]PATH,...", help=RUN_SETTINGS["osm"].describe(brief=True) + ".",
        rich_help_panel=WORLD)] = None,
    dem: Annotated[str | None, typer.Option(
        "--dem", metavar="[NETWORK=]PATH,...", help=RUN_SETTINGS["dem"].describe(brief=True) + ".",
        rich_help_panel=WORLD)] = None,
    policies: Annotated[str | None, typer.Option(
        metavar="SPEC,...", help="Policies as specs, e.g. gp-ucb,gp-bucb[xi=0.5].", rich_help_panel=AGENT,
        show_default=",".join(DEFAULT_POLICIES))] = None,
    seeds: Annotated[int | None, typer.Option(help="Number of seeds: 0..N-1.", rich_help_panel=RUN,
                                              show_default="5")] = None,
    sweep: Annotated[list[str] | None, typer.Option(
        "--sweep", metavar="NAME=V1,V2", help="Also sweep a setting, e.g. lengthscale=0.5,1 (repeatable).",
        rich_help_panel=RUN)] = None,
    jobs: JobsOpt = None,
    executor: Annotated[str, typer.Option(
        metavar="local|ray[address=...]", help="Where the runs go: a process pool, or a Ray cluster.",
        rich_help_panel=RUN)] = "local",
    overwrite: OverwriteOpt = False,
    progress: ProgressOpt = None,
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
    from ..specs import parse_spec

    configure_progress(progress)
    kind, options = parse_spec(executor, "--executor", "ray[address=HOST:PORT]")
    if set(options) - {"address"} or (options and kind != "ray"):
        raise EvrouteError(f"--executor {executor!r}: local, ray or ray[address=HOST:PORT]")
    grid = make_grid(preset=_config(config), routes=routes, policies=policies, seeds=seeds, osm=osm, dem=dem,
                     lengthscales=settings.pop("lengthscale", None),
                     truth_lengthscale=settings.pop("truth_lengthscale", None), sweep=sweep, **settings)
    res = run_grid(grid, out, executor=kind, jobs=jobs, ray_address=options.get("address"), overwrite=overwrite,
                   progress=progress)
    print(summary_markdown(res.summary).rstrip())
    print(f"\n{res.n_runs} runs ({res.n_kept} kept, {res.n_computed} computed) in {res.seconds:.1f} s; "
          f"wrote {', '.join(str(f) for f in res.files)}")


def _config(value):
    """``--config``/``--preset`` read (None: none given)."""
    if value is None:
        return None
    from ..runs.grid import read_config_file

    return read_config_file(value)


def plot_cmd(
    directory: Annotated[Path, typer.Argument(help="A compare directory or a run directory.")],
    out: Annotated[Path | None, out_option("Folder for the figures (default DIR/plots).", show_default=False)] = None,
    maps: Annotated[bool, typer.Option("--maps/--no-maps", help="Exploration maps (they load the network).",
                                       rich_help_panel=OUTPUT)] = True,
    overwrite: OverwriteOpt = False, progress: ProgressOpt = None,
) -> None:
    """Figures: cumulative regret, β_t, regret vs lengthscale, Nyström dictionary size, the
    candidate priors' survival, the lower bounds' coverage, exploration maps (PNG and SVG).

    Tables beside them (CSV, and printed): the bounds' coverage per policy, the candidate priors
    (which one each policy drove under, when the others were eliminated).

    Files evroute wrote before (an earlier plot) are replaced; any other file is refused
    unless --overwrite is given, and nothing is written until every target has been checked.
    """
    from ..progress import configure as configure_progress
    from ..reports.plots import plot_directory
    from ..reports.tables import markdown, read_table

    configure_progress(progress)
    files = plot_directory(directory, out, maps=maps, overwrite=overwrite)
    for f in files:
        print(f)
    for f in files:
        if f.suffix == ".csv":
            print(f"\n{f.stem}:\n{markdown(read_table(f))}")


def export_cmd(
    directory: Annotated[Path, typer.Argument(help="A run directory, or a compare directory (see --run).")],
    run: Annotated[str | None, typer.Option(
        "--run", help="In a compare directory: the run's name (default: the first run).")] = None,
    last: Annotated[int | None, typer.Option("--last", help="Only the last K rounds' routes.")] = None,
    geojson: GeojsonOpt = None,
    html: HtmlOpt = None,
    gpkg: Annotated[Path | None, typer.Option("--gpkg", help="GeoPackage to write (for GIS tools).",
                                              rich_help_panel=OUTPUT)] = None,
    overwrite: OverwriteOpt = False, progress: ProgressOpt = None,
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


app.command("compare")(with_settings(COMPARE_SETTINGS, axes=("lengthscale", "truth_lengthscale"))(compare_cmd))
app.command("plot")(plot_cmd)
app.command("export")(export_cmd)
