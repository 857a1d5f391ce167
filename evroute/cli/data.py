"""Commands ``evroute data fetch|list|path``: the reference datasets (the real networks and the
terrain model that the docs, the papers' reproductions and the tests use). Thin: parse options,
call :mod:`evroute.roads.datasets` (imported inside each command, so ``--help`` answers at once)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from .options import HELP_STYLE, JsonOpt, OverwriteOpt, ProgressOpt

app = typer.Typer(help="The reference datasets (Monaco, Luxembourg, Luxembourg's terrain): download, verify, list.",
                  no_args_is_help=True, **HELP_STYLE)

DataDirOpt = Annotated[Path | None, typer.Option(
    "--data-dir", help="Data folder (default: $EVROUTE_DATA_DIR, else the user data folder).")]


def _progress_bar(show: bool):
    """A rich progress bar on stderr for ``fetch_datasets(progress=...)``, or None."""
    if not show:
        return None, None
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    bar = Progress(TextColumn("{task.description:<16}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                   transient=True, console=None)
    tasks = {}

    def update(name, done, total):
        if name not in tasks:
            tasks[name] = bar.add_task(name, total=total)
        bar.update(tasks[name], completed=done, total=total)

    return bar, update


@app.command("fetch")
def data_fetch(
    names: Annotated[list[str] | None, typer.Argument(
        help="Datasets: monaco, luxembourg, luxembourg-dem, or all (default all).", metavar="[NAME]...")] = None,
    data_dir: DataDirOpt = None,
    base_url: Annotated[str | None, typer.Option(
        "--base-url", help="A mirror holding the published files under their published names (the pinned "
                           "SHA-256 still applies).")] = None,
    overwrite: OverwriteOpt = False,
    progress: ProgressOpt = None,
) -> None:
    """Download the reference datasets from their public sources, pinned by URL and SHA-256, and
    verify them; a download that broke off resumes where it stopped."""
    from ..roads.datasets import fetch_datasets

    show = sys.stderr.isatty() if progress is None else progress
    bar, update = _progress_bar(show)
    if bar is not None:
        bar.start()
    try:
        done = fetch_datasets(names or ["all"], data_dir, base_url=base_url, overwrite=overwrite, progress=update)
    finally:
        if bar is not None:
            bar.stop()
    for name, path, what in done:
        print(f"{name:<15} {what:<10} {path}")


@app.command("list")
def data_list(data_dir: DataDirOpt = None, as_json: JsonOpt = False) -> None:
    """The reference datasets: what each is, whether it is present (and verified), where it lives,
    its source and licence."""
    from ..roads.datasets import data_dir as resolve_data_dir
    from ..roads.datasets import dataset, dataset_names, dataset_state

    rows = []
    for name in dataset_names():
        entry, state = dataset(name), dataset_state(name, data_dir)
        rows.append({"name": name, "state": state.state, "path": str(state.path), "bytes_kept": state.bytes_kept,
                     "description": entry["description"], "source": entry["source"], "licence": entry["licence"]})
    if as_json:
        print(json.dumps({"data_dir": str(resolve_data_dir(data_dir)), "datasets": rows}))
        return
    print(f"data folder: {resolve_data_dir(data_dir)}")
    for r in rows:
        state = {"present": "present, verified", "missing": "missing (evroute data fetch " + r["name"] + ")",
                 "differs": "a file of this name whose checksum differs (evroute data fetch --overwrite " + r["name"]
                            + " replaces it)",
                 "partial": f"partial download, {r['bytes_kept']:,} bytes (evroute data fetch {r['name']} resumes "
                            "it)"}[r["state"]]
        print(f"{r['name']:<15} {r['description']}\n{'':<15} {state}: {r['path']}\n"
              f"{'':<15} source: {r['source']}; {r['licence']}")


@app.command("path")
def data_path(
    name: Annotated[str, typer.Argument(help="A dataset: monaco, luxembourg or luxembourg-dem.")],
    data_dir: DataDirOpt = None,
) -> None:
    """Print a dataset's path (for scripts: --dem "$(evroute data path luxembourg-dem)"); exit code 2
    when it is not present."""
    from ..errors import EvrouteError
    from ..roads.datasets import dataset_state

    state = dataset_state(name, data_dir)
    if state.state != "present":
        raise EvrouteError(f"dataset {name} is {state.state} at {state.path}; run `evroute data fetch {name}`")
    print(state.path)
