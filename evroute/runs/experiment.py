"""``evroute compare``: run a grid into a compare directory, resume it, summarise it.

A comparison is a grid of cells: route × policy (with its β_t variant) × lengthscale × seed
(paper 003 Sec. 4.2: 6 policies × 4 routes × 5 seeds × T = 500, the β_t parametrisations
of Fig. 3 and the lengthscale sweep of App. C.1). Every cell is one ordinary run directory
(:func:`evroute.runs.directory.write_run`) under ``DIR/runs/<name>``, so the grid inherits the
run's guarantees: a run is written into a temporary sibling folder and renamed at the end,
so a killed run never looks finished.

Resume. Running the same grid into the same ``DIR`` again keeps every finished run whose
``config.json`` matches the cell (not recomputed, files untouched), removes temporary
folders left by killed runs and computes the rest. ``grid.json`` describes the grid;
``summary.csv`` / ``summary.md`` (mean ± standard error over seeds, s.e. = sample std
(ddof = 1) / √n) are written atomically once every run is finished.

Executors. ``local`` (default): a process pool (``--jobs``, default ``os.cpu_count()``;
``jobs = 1`` runs in-process). ``ray``: the same tasks as Ray tasks on a local Ray instance
or a cluster (``pip install "evroute[ray]"``; on a cluster ``DIR`` must be on a shared file
system). A run does not depend on the executor: seeds fix the truth, the noise and the
policy's randomness, and BLAS runs single-threaded in every run (pool, Ray or in-process),
so floating-point reductions are the same everywhere.

Inside a worker, the loaded network, the prepared problem (route, prior, truth) and the
prior kernel matrix are cached in memory, so a process running many cells loads and
builds them once.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..bandit.agents import policy_family
from ..errors import EvrouteError, EvrouteWarning, Interrupted
from ..io import atomic_write_json, directory_entries, short_list
from ..roads.names import network_spec, resolve_osm_path
from ..validate import int_in
from .config import SimulationConfig, flat_config_json
from .directory import is_finished_run, is_run_directory, verify_run
from .executors import cached_network, check_executor, default_jobs, executor_stream
from .grid import Cell, Grid, fmt_number, is_osm_file, load_grid
from .problem import describe_world
from .summaries import collect_runs, summarize, summarize_energy, write_summaries

#: The most processes of a local pool (``--jobs``); more than the CPUs is allowed, with a warning.
MAX_JOBS = 1024

__all__ = ["run_grid", "CompareResult", "GridStatus", "grid_status", "config_matches", "clean_stale",
           "check_compare_dir"]




def config_matches(run_dir: Path, cfg: SimulationConfig) -> tuple[bool, str]:
    """Whether a finished run's ``config.json`` (of any format: :meth:`SimulationConfig.from_json`)
    is the cell's configuration, compared in their canonical JSON form (and what differs)."""
    try:
        saved = json.loads((run_dir / "config.json").read_text())
        json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError) as exc:
        return False, f"unreadable ({exc.__class__.__name__})"
    if not isinstance(saved, dict):
        return False, "config.json is not a JSON object"
    try:
        have = flat_config_json(SimulationConfig.from_json(saved).to_json())
    except EvrouteError as exc:
        return False, f"config.json: {exc}"
    want = flat_config_json(cfg.to_json())
    ignore = {"model"} if cfg.backend == "bi" else set()  # not used by bi-* runs
    for k, v in want.items():
        if k not in ignore and have.get(k) != v:
            return False, f"{k} {have.get(k)!r} ≠ {v!r}"
    return True, ""


def clean_stale(runs_dir: Path) -> list[Path]:
    """Remove temporary folders/files left by killed runs (``.<name>.partial-*``, ``.<name>.old-*``)."""
    removed = []
    if not runs_dir.is_dir():
        return removed
    for p in runs_dir.iterdir():
        if p.name.startswith(".") and (".partial-" in p.name or ".old-" in p.name or p.name.endswith(".tmp")):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            removed.append(p)
    return removed


class _DirLock:
    """An exclusive lock on ``DIR/.lock`` (two compares never write one directory at once)."""

    def __init__(self, out: Path):
        self.path = out / ".lock"
        self.fh = None

    def __enter__(self):
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not on POSIX
            return self
        self.fh = open(self.path, "a+")
        try:
            fcntl.flock(self.fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.fh.close()
            self.fh = None
            raise EvrouteError(f"another evroute compare is writing to {self.path.parent}") from None
        return self

    def __exit__(self, *exc):
        if self.fh is not None:
            self.fh.close()  # closing releases the lock


@dataclass
class GridStatus:
    """Which cells of a grid are finished in ``DIR``."""

    finished: list[str]
    pending: list[str]
    mismatched: dict[str, str]
    #: finished runs whose files are damaged (:func:`evroute.runs.directory.verify_run`): recomputed
    damaged: dict[str, str] = dataclasses.field(default_factory=dict)


def grid_status(grid: Grid, out: Path) -> GridStatus:
    """Which cells are finished (settings matching, files intact), which are to compute."""
    finished, pending, mismatched, damaged = [], [], {}, {}
    for cell in grid.cells():
        name = grid.cell_name(cell)
        rd = out / "runs" / name
        if is_finished_run(rd):
            if (broken := verify_run(rd)) is not None:  # damaged: recomputed whatever its settings were
                damaged[name] = broken
                pending.append(name)
                continue
            ok, why = config_matches(rd, grid.config(cell))
            if not ok:
                mismatched[name] = why
                pending.append(name)
            else:
                finished.append(name)
        else:
            pending.append(name)
    return GridStatus(finished, pending, mismatched, damaged)


def _task_order(grid: Grid, cells: list[Cell], sizes: dict | None = None) -> list[Cell]:
    """Longest runs first (GP-UCB/BUCB on the biggest network; BI runs are short and fill
    the tail), then grouped by network, lengthscale, route and seed so that a worker's
    in-process caches (kernel per lengthscale, problem per route and seed) are reused."""
    nets = grid.networks
    sizes = sizes or {}
    rule_weight = {"ucb": 3.0, "bucb": 3.0, "greedy": 1.0, "ts": 1.0}

    def cost(c: Cell) -> float:
        if policy_family(c.policy) == "bi":
            return 0.0
        return -float(sizes.get(c.network, 1)) * rule_weight.get(c.policy.name.partition("-")[2], 1.0)

    order = {p.label: i for i, p in enumerate(grid.policies)}
    return sorted(cells, key=lambda c: (cost(c), nets.index(c.network), c.lengthscale, c.route, c.seed,
                                        order.get(c.policy.label, 0)))


def _warm_tasks(grid: Grid, cells: list[Cell]) -> list[dict]:
    """One task per problem the cells prepare (their scenario and seed: the key the workers keep
    problems by): computes and caches the truth before the runs need it."""
    seen, tasks = set(), []
    for c in cells:
        cfg = grid.config(c)
        key = (cfg.scenario, cfg.seed)
        if key not in seen:
            seen.add(key)
            tl = describe_world(cfg)["truth_lengthscale"]
            what = f" truth ℓ {fmt_number(tl)}" if tl != 1.0 else ""
            tasks.append({"kind": "warm", "name": f"prepare {c.network} seed {c.seed}{what}",
                          "config": cfg.to_json(), "blas_threads": 1})
    return tasks


@dataclass
class CompareResult:
    out: Path
    n_runs: int
    n_kept: int
    n_computed: int
    seconds: float
    summary: pd.DataFrame
    files: list[Path]


def run_grid(grid: Grid, out: str | os.PathLike, *, executor: str = "local", jobs: int | None = None,
             ray_address: str | None = None, overwrite: bool = False, progress: bool | None = None,
             log: Callable[[str], None] | None = None) -> CompareResult:
    """Run (or resume) every cell of ``grid`` into ``out/runs`` and write the summaries.

    Parameters
    ----------
    executor : "local" or "ray"
    jobs : int, optional
        Parallel processes (local) or CPUs of a new local Ray instance; default: the
        CPUs this process may use; 1 runs in-process.
    overwrite : bool
        Recompute finished runs whose configuration differs from the grid's (otherwise
        that is an error: nothing is thrown away silently).
    progress : bool, optional
        Rich progress bar on stderr (default: when stderr is a terminal; otherwise one
        line per finished run).

    Returns
    -------
    CompareResult
        The summary table (per route and policy: mean ± standard error of the final regret), the runs kept and computed, the files written.
    """
    t_start = time.perf_counter()
    check_executor(executor)
    if jobs is not None:
        int_in("--jobs", jobs, 1, hi=MAX_JOBS)
        cpus = os.cpu_count() or 1
        if executor == "local" and jobs > cpus:
            import warnings

            warnings.warn(f"--jobs {jobs} is more than the {cpus} CPUs of this machine; the runs will share "
                          "them (and each holds its own network and kernels in memory)", EvrouteWarning, stacklevel=2)
    if ray_address and executor != "ray":
        raise EvrouteError("a Ray address needs --executor ray[address=...]")
    jobs = jobs or default_jobs()
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    grid.validate()
    _check_network_files(grid)
    out = Path(out)
    check_compare_dir(out)
    try:
        (out / "runs").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EvrouteError(f"cannot create {out}: {exc.strerror}") from None

    with _DirLock(out):
        removed = clean_stale(out / "runs") + clean_stale(out)
        if removed:
            log(f"removed {len(removed)} temporary file(s) left by interrupted runs")
        status = grid_status(grid, out)
        if status.mismatched and not overwrite:
            name, why = next(iter(status.mismatched.items()))
            raise EvrouteError(f"{len(status.mismatched)} run(s) in {out / 'runs'} were made with other settings "
                               f"(e.g. {name}: {why}); use another --out, or --overwrite to recompute them")
        for name, why in status.damaged.items():
            log(f"recomputing {name}: {why}")
        atomic_write_json(out / "grid.json", grid.to_dict())
        cells = grid.cells()
        by_name = {grid.cell_name(c): c for c in cells}
        pending_cells = [by_name[n] for n in status.pending]
        sizes = {}
        if pending_cells:  # the on-disk network cache is built once here, not in every worker, and
            for net in grid.networks:  # a network that cannot be read is one error line before any run
                sizes[net] = cached_network(net, grid.osm.get(net), grid.dem.get(net)).n_edges
        log(f"{len(cells)} runs: {len(status.finished)} already finished, {len(pending_cells)} to compute"
            + (f" ({executor}, {jobs} job{'s' if jobs > 1 else ''})" if pending_cells else ""))
        failures: list[dict] = []
        if pending_cells:
            pending_cells = _task_order(grid, pending_cells, sizes)
            jobs = min(jobs, len(pending_cells))
            parallel = executor == "ray" or jobs > 1
            tasks = [{"kind": "run", "name": grid.cell_name(c), "config": grid.config(c).to_json(),
                      "out": str((out / "runs" / grid.cell_name(c)).resolve()),
                      "blas_threads": 1} for c in pending_cells]  # same arithmetic whatever the executor
            if parallel:
                tasks = _warm_tasks(grid, pending_cells) + tasks
            stream = executor_stream(executor, tasks, jobs, ray_address=ray_address)
            try:
                failures = _consume(stream, total=len(cells), done=len(status.finished), progress=progress,
                                    log=log)
            except KeyboardInterrupt:
                stream.close()  # stops the workers (their unfinished runs leave no directory)
                n_done = sum(is_finished_run(out / "runs" / grid.cell_name(c)) for c in cells)
                raise Interrupted(f"{n_done} runs finished, {len(cells) - n_done} left; "
                                  "rerun the same command to resume") from None
        if failures:
            first = failures[0]
            if first.get("traceback") and os.environ.get("EVROUTE_DEBUG"):
                log(first["traceback"].rstrip())
            raise EvrouteError(f"{len(failures)} of {len(pending_cells)} runs failed (first: {first['name']}: "
                               f"{first['error']}); finished runs are kept, run the same command again to resume")
        runs = collect_runs(out, grid)
        table = summarize(runs)
        files = write_summaries(out, table, grid, energy=summarize_energy(runs),
                                references=runs.regret_reference.dropna().tolist())
    return CompareResult(out, len(cells), len(status.finished), len(pending_cells),
                         time.perf_counter() - t_start, table, files)


def check_compare_dir(out: Path) -> None:
    """Refuse ``--out`` unless it is new, empty or an evroute compare directory.

    A compare directory has a ``grid.json`` of evroute's (resuming is the point), or holds
    nothing but ``runs/`` and ``.lock`` (a compare interrupted before writing it). A
    ``simulate`` run directory and a user's non-empty folder are refused: compare never
    writes into what it did not make.
    """
    contents = directory_entries(out, "--out")
    if not contents:
        return
    if is_run_directory(out):
        raise EvrouteError(f"--out {out} is a simulate run directory; give compare a directory of its own")
    if "grid.json" in contents:
        load_grid(out)  # a one-line error when it is not evroute's grid description
        return
    if set(contents) <= {"runs", ".lock"} and (not (out / "runs").is_dir() or _only_runs(out / "runs")):
        return
    raise EvrouteError(f"--out {out} exists, is not empty and is not an evroute compare directory "
                       f"(it holds {short_list(contents)}); give a new or empty directory")


def _only_runs(runs_dir: Path) -> bool:
    """Whether every entry of ``runs_dir`` is an evroute run or a killed run's temporary folder."""
    return all(is_run_directory(p) or (p.name.startswith(".") and ".partial-" in p.name)
               for p in runs_dir.iterdir())


def _check_network_files(grid: Grid) -> None:
    """One-line error before anything runs when a network's OSM file cannot be found."""
    for net in grid.networks:
        if is_osm_file(net):
            if not Path(net).is_file():
                raise EvrouteError(f"OSM file not found: {net}")
            continue
        if network_spec(net).get("kind") == "osm":
            resolve_osm_path(net, grid.osm.get(net))


def _consume(stream: Iterator[tuple[dict, dict]], total: int, done: int, progress: bool | None,
             log: Callable[[str], None]) -> list[dict]:
    """Drain the executor's results with a progress display; return the failures."""
    failures: list[dict] = []
    use_bar = sys.stderr.isatty() if progress is None else progress
    quiet = progress is False

    def describe(res: dict) -> str:
        if not res.get("ok"):
            return f"{res['name']} FAILED: {res.get('error')}"
        return (f"{res['name']}: regret {res['final_cumulative_regret_wh']:.1f} Wh, "
                f"{res['seconds']:.1f} s")

    if use_bar:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        console = Console(stderr=True)
        with Progress(TextColumn("[bold]runs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.description}"),
                      console=console) as bar:
            task = bar.add_task("", total=total, completed=done)
            for t, res in stream:
                if t.get("kind") == "warm":  # a failed preparation fails its runs too: reported there
                    continue
                if not res.get("ok"):
                    failures.append(res)
                    console.print(f"[red]failed[/red] {res['name']}: {res.get('error')}")
                bar.update(task, advance=1, description=res["name"])
        return failures
    k = 0
    for t, res in stream:
        if t.get("kind") == "warm":
            continue
        if not res.get("ok"):
            failures.append(res)
        k += 1
        if not quiet:
            log(f"[{done + k}/{total}] {describe(res)}")
    return failures
