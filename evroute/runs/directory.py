"""Run directories: writing them atomically, recognising evroute's own, verifying and reading them.

A run directory holds ``config.json``, ``rounds.parquet``, ``observations.parquet``,
``edges.parquet`` and ``summary.json`` (written last: a run is finished when it exists),
optionally CSV copies of the tables. It appears by renaming a finished temporary sibling
``.NAME.partial-PID-*``; evroute replaces only directories it wrote itself.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .. import io
from ..errors import EvrouteError
from ..io import atomic_write_json, atomic_write_with, directory_entries, make_public, short_list
from .config import SimulationConfig, flat_config_json

__all__ = ["RunResult", "RUN_FILES", "RUN_DIR_NAMES", "COMPARE_DIR_NAMES", "is_finished_run", "verify_run",
           "require_readable_run", "read_run_json", "read_run_table", "read_config", "is_run_directory", "stale_siblings", "check_out_dir",
           "prepare_out_dir", "write_run", "parquet_to_csv", "check_output_file"]


@dataclass
class RunResult:
    """The result of a run: the three tables and the summary.

    ``rounds`` and ``observations`` are DataFrames; a run whose logs were written to a
    run directory as it went reads them from there when asked (``log_dir``).
    """

    _rounds: pd.DataFrame | None
    _observations: pd.DataFrame | None
    edges: pd.DataFrame
    summary: dict
    log_dir: Path | None = None
    #: the agent's extra tables (``priors`` of gp-pe), written as ``<name>.parquet``
    tables: dict = field(default_factory=dict)

    @property
    def rounds(self) -> pd.DataFrame:
        return self._rounds if self._rounds is not None else pd.read_parquet(self.log_dir / "rounds.parquet")

    @property
    def observations(self) -> pd.DataFrame:
        if self._observations is not None:
            return self._observations
        return pd.read_parquet(self.log_dir / "observations.parquet")



RUN_FILES = ("config.json", "rounds.parquet", "observations.parquet", "edges.parquet", "summary.json")


def is_finished_run(path: str | os.PathLike) -> bool:
    """A run directory is finished when its ``summary.json`` exists (it is written last)."""
    return (Path(path) / "summary.json").is_file()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:160]


_NUMBER = (int, float)
_OPT_STR = (str, type(None))
#: What readers of a run directory rely on in ``config.json`` (key → accepted JSON types;
#: keys marked optional may be absent in runs of older versions).
CONFIG_SHAPE = {"network": str, "policy": str, "horizon": int, "seed": int, "model": str, "route": _OPT_STR}
CONFIG_OPTIONAL = {"osm": _OPT_STR, "dem": _OPT_STR, "lengthscale": _NUMBER, "truth_lengthscale": _NUMBER,
                   "omega": _NUMBER, "xi": _NUMBER, "beta_scale": _NUMBER, "policy_options": dict,
                   "model_options": dict, "resolved": dict}
#: ... and in ``summary.json``.
SUMMARY_SHAPE = {"final_cumulative_regret_wh": _NUMBER, "mean_seconds_per_round": _NUMBER, "horizon": int,
                 "optimal_energy_wh": _NUMBER, "optimal_path": list, "start_edge": int, "end_edge": int,
                 "route": str, "policy": str, "seed": int}
#: Columns of the run's tables readers use, with their kind (``int``, ``float`` or ``path``: a
#: list of edge ids); other columns (an agent's diagnostics) may follow.
TABLE_SCHEMA = {
    "rounds": {"t": "int", "path": "path", "n_edges": "int", "expected_energy_wh": "float",
               "observed_energy_wh": "float", "optimal_energy_wh": "float", "regret_wh": "float",
               "cumulative_regret_wh": "float", "beta": "float", "seconds": "float"},
    "observations": {"t": "int", "edge": "int", "observed_wh": "float", "expected_wh": "float",
                     "prior_mean_wh": "float", "post_mean_before": "float", "post_std_before": "float",
                     "index_before": "float"},
    "edges": {"edge": "int", "osm_way": "int", "length_m": "float", "grade": "float", "energy_det_wh": "float",
              "energy_true_wh": "float", "visits": "int", "post_mean_final": "float", "post_std_final": "float"},
}


def _shape_problem(obj, required: dict, optional: dict, what: str) -> str | None:
    """Why the JSON value ``obj`` is not an object with these keys of these types (None: it is)."""
    if not isinstance(obj, dict):
        return f"{what} holds {type(obj).__name__ if obj is not None else 'null'}, not a JSON object"
    for key, types in list(required.items()) + list(optional.items()):
        if key not in obj:
            if key in required:
                return f"{what} has no {key!r}"
            continue
        value = obj[key]
        if isinstance(value, bool) or not isinstance(value, types):
            return f"{what}: {key!r} is {value!r:.40}, not of the expected type"
    return None


def _column_problem(schema, name: str) -> str | None:
    """Why a table's Arrow schema lacks a column readers use, or holds it with another kind."""
    import pyarrow.types as pt

    kinds = {"int": pt.is_integer, "float": lambda t: pt.is_floating(t) or pt.is_integer(t),
             "path": lambda t: (pt.is_list(t) or pt.is_large_list(t)) and pt.is_integer(t.value_type)}
    for col, kind in TABLE_SCHEMA[name].items():
        i = schema.get_field_index(col)
        if i < 0:
            return f"{name}.parquet has no column {col!r}"
        if not kinds[kind](schema.field(i).type):
            return f"{name}.parquet: column {col!r} holds {schema.field(i).type}, not {kind} values"
    return None


def _flat(obj, what: str):
    """A ``config.json`` of any format with its settings by name (:func:`evroute.runs.config.flat_config_json`);
    what is not a JSON object is left for the shape check to name."""
    if not isinstance(obj, dict):
        return obj
    try:
        return flat_config_json(obj)
    except EvrouteError as exc:
        raise EvrouteError(f"{what}: {exc}") from None


def read_run_json(run_dir: str | os.PathLike) -> tuple[dict, dict]:
    """``config.json`` and ``summary.json`` of a finished run, checked for the shape readers rely on
    (:data:`CONFIG_SHAPE`, :data:`SUMMARY_SHAPE`); one EvrouteError line naming the run otherwise.
    The configuration comes with its settings by name, whatever its format
    (:func:`evroute.runs.config.flat_config_json`)."""
    import json

    run_dir = Path(run_dir)
    out = []
    for name, required, optional in (("config.json", CONFIG_SHAPE, CONFIG_OPTIONAL),
                                     ("summary.json", SUMMARY_SHAPE, {})):
        try:
            obj = json.loads((run_dir / name).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise EvrouteError(f"{run_dir} is not a finished run directory ({name} is missing)") from None
        except (OSError, ValueError) as exc:
            raise EvrouteError(f"{run_dir}: {name} is unreadable ({_first_line(exc)})") from None
        if name == "config.json":  # of any format: its settings by name (format 3 keeps them in three parts)
            obj = _flat(obj, f"{run_dir} is not a readable run")
        why = _shape_problem(obj, required, optional, name)
        if why is not None:
            raise EvrouteError(f"{run_dir} is not a readable run: {why}")
        out.append(obj)
    return out[0], out[1]


def read_config(path: str | os.PathLike) -> SimulationConfig:
    """The configuration of a run: its ``config.json`` (or the run directory holding it), which
    holds everything that reproduces the run (``evroute simulate --config``).

    Parameters
    ----------
    path : path-like
        A ``config.json`` (of any format evroute wrote) or a run directory.

    Returns
    -------
    evroute.runs.config.SimulationConfig
        The configuration, every setting checked again.

    Raises
    ------
    EvrouteError
        One line naming ``path`` when it is missing, unreadable or not a run's configuration.
    """
    import json

    path = Path(path)
    file = path / "config.json" if path.is_dir() else path
    try:
        obj = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EvrouteError(f"no such configuration: {path}") from None
    except (OSError, ValueError) as exc:
        raise EvrouteError(f"{path} is not a readable configuration ({_first_line(exc)})") from None
    why = _shape_problem(_flat(obj, f"{path} is not a run's configuration"), CONFIG_SHAPE, CONFIG_OPTIONAL,
                         "config.json")
    if why is not None:
        raise EvrouteError(f"{path} is not a run's configuration: {why}")
    try:
        return SimulationConfig.from_json(obj)
    except EvrouteError as exc:
        raise EvrouteError(f"{path}: {exc}") from None


def verify_run(run_dir: str | os.PathLike) -> str | None:
    """Check a finished run directory: ``None`` when it is complete and readable, else
    why not (one phrase).

    Checked: ``config.json`` and ``summary.json`` parse and have the keys and types readers
    use (:data:`CONFIG_SHAPE`, :data:`SUMMARY_SHAPE`); the three Parquet tables can be opened
    and hold the columns readers use with their kinds (:data:`TABLE_SCHEMA`);
    ``rounds.parquet`` has one row per round of the configured horizon, ``observations.parquet``
    one row per edge driven (the sum of ``rounds.n_edges``), and ``edges.parquet`` one row per
    edge, numbered 0..E-1, with the summary's route inside it.

    Returns
    -------
    str or None
        None when the run is complete and readable, else why not (one phrase).
    """
    import pyarrow.parquet as pq

    run_dir = Path(run_dir)
    try:
        cfg, summary = read_run_json(run_dir)
    except EvrouteError as exc:
        return str(exc).removeprefix(f"{run_dir} is not a readable run: ").removeprefix(f"{run_dir}: ")
    rows = {}
    for name in ("rounds", "observations", "edges"):
        path = run_dir / f"{name}.parquet"
        try:
            meta = pq.read_metadata(path)
            rows[name] = meta.num_rows
            why = _column_problem(meta.schema.to_arrow_schema(), name)
        except FileNotFoundError:
            return f"{name}.parquet is missing"
        except Exception as exc:  # pyarrow raises several kinds for damaged files
            return f"{name}.parquet is unreadable ({_first_line(exc)})"
        if why is not None:
            return why
    horizon = cfg["horizon"]
    if rows["rounds"] != horizon:
        return f"rounds.parquet has {rows['rounds']} rows, the run's horizon is {horizon}"
    try:
        driven = int(pq.read_table(run_dir / "rounds.parquet", columns=["n_edges"]).column(0).to_numpy().sum())
        edge_ids = pq.read_table(run_dir / "edges.parquet", columns=["edge"]).column(0).to_numpy()
    except Exception as exc:
        return f"a table is unreadable ({_first_line(exc)})"
    if rows["observations"] != driven:
        return f"observations.parquet has {rows['observations']} rows, the rounds drove {driven} edges"
    if rows["edges"] == 0:
        return "edges.parquet is empty"
    n = len(edge_ids)
    if not np.array_equal(edge_ids, np.arange(n)):
        return "edges.parquet does not list the edges 0..E-1 in order"
    ends = [summary["start_edge"], summary["end_edge"], *summary["optimal_path"]]
    if not all(isinstance(e, int) and not isinstance(e, bool) and 0 <= e < n for e in ends):
        return f"summary.json names edges outside the run's network of {n} edges"
    return None


def require_readable_run(run_dir: str | os.PathLike) -> Path:
    """``run_dir`` if :func:`verify_run` finds nothing wrong, else one EvrouteError line."""
    run_dir = Path(run_dir)
    why = verify_run(run_dir)
    if why is not None:
        raise EvrouteError(f"{run_dir} is not a readable run: {why}")
    return run_dir


def read_run_table(run_dir: str | os.PathLike, name: str, columns: list[str] | None = None) -> pd.DataFrame:
    """``<name>.parquet`` of a run directory; a missing or damaged file is one EvrouteError line.

    Returns
    -------
    pandas.DataFrame
        The table (``rounds``, ``observations`` or ``edges``), read from Parquet.
    """
    path = Path(run_dir) / f"{name}.parquet"
    try:
        return pd.read_parquet(path, columns=columns)
    except FileNotFoundError:
        raise EvrouteError(f"{run_dir} is not a complete run directory (missing {name}.parquet)") from None
    except Exception as exc:  # pyarrow raises several kinds for damaged files
        raise EvrouteError(f"{path} is unreadable ({_first_line(exc)}); rerun the run that wrote it") from None


#: Every name evroute writes into a run directory (the tables' CSV copies included).
RUN_DIR_NAMES = frozenset(RUN_FILES) | {"rounds.csv", "observations.csv", "edges.csv", "priors.parquet", "priors.csv",
                                        "turns.parquet", "turns.csv"}
#: Every name evroute writes into a compare directory (``evroute compare --out``).
COMPARE_DIR_NAMES = frozenset({"grid.json", "summary.csv", "summary.md", "energy.csv", "runs", ".lock"})


def check_output_file(path: str | os.PathLike, overwrite: bool = False) -> None:
    """The rule for a file a command writes at a path the user gave (:func:`evroute.io.check_replaceable`:
    never a link, a directory or a device; an existing file only if evroute wrote it or with
    ``overwrite``), and never a run's or a compare directory's own files, even with ``overwrite``."""
    path = Path(path)
    parent = path.parent
    if path.name in RUN_DIR_NAMES and is_run_directory(parent):
        raise EvrouteError(f"{path} is one of the files of the evroute run {parent}; evroute never writes over "
                           "a run's own files (give another path)")
    if path.name in COMPARE_DIR_NAMES and (parent / "grid.json").is_file():
        raise EvrouteError(f"{path} is one of the files of the evroute compare directory {parent}; evroute "
                           "never writes over them (give another path)")
    io.check_replaceable(path, overwrite=overwrite)


def _damaged_run_directory(contents: list[str]) -> bool:
    """A run directory whose ``config.json`` is damaged: it holds both ``config.json`` and
    ``summary.json`` and nothing but the names evroute writes into a run directory."""
    return {"config.json", "summary.json"} <= set(contents) and set(contents) <= RUN_DIR_NAMES


def _evroute_entry(path: Path) -> bool:
    """A file evroute wrote (:func:`evroute.io.written_by_evroute`), or a folder (not a link)
    holding nothing else: figures or maps exported into a run directory."""
    if path.is_symlink():
        return False
    if path.is_dir():
        try:
            return all(_evroute_entry(p) for p in path.iterdir())
        except OSError:
            return False
    return io.written_by_evroute(path)


def is_run_directory(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an evroute run directory: its ``config.json`` is evroute's own
    (a JSON object with ``evroute_version`` and ``resolved``)."""
    import json

    try:
        cfg = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and "evroute_version" in cfg and "resolved" in cfg


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def stale_siblings(out: Path) -> list[Path]:
    """Temporary folders of ``out`` left by killed runs: ``.NAME.partial-PID-*`` and
    ``.NAME.old-PID`` whose process is gone (``.NAME.partial-XXXX`` of older versions,
    without a pid, count as stale too)."""
    import re

    pattern = re.compile(rf"^\.{re.escape(out.name)}\.(partial|old)-(?:(\d+)(?:-.*)?|[a-z0-9_]{{8}})$")
    stale = []
    try:
        entries = list(out.parent.iterdir())
    except OSError:
        return stale
    for p in sorted(entries):
        m = pattern.match(p.name)
        if m is None or p.is_symlink() or not p.is_dir():
            continue
        if m.group(2) is not None and _pid_alive(int(m.group(2))):
            continue  # another run with this --out is still going
        stale.append(p)
    return stale


def check_out_dir(out: Path, overwrite: bool) -> None:
    """Refuse an output directory that evroute may not write (one-line EvrouteError).

    ``out`` must not exist, be empty, or (with ``overwrite``) be an evroute run
    directory holding nothing but evroute's files: evroute never deletes what it did not
    write. The current directory and its ancestors are refused (a run replaces its
    directory by renaming a finished one into place).
    """
    if out.is_symlink():
        raise EvrouteError(f"--out {out} is a symbolic link; a run replaces its directory by renaming, and "
                           "evroute never replaces a link (give the real directory's path)")
    try:
        resolved, cwd = out.resolve(), Path.cwd().resolve()
    except OSError as exc:
        raise EvrouteError(f"cannot resolve the output path {out}: {exc.strerror}") from None
    if resolved == cwd or resolved in cwd.parents:
        raise EvrouteError(f"--out {out} is the current directory or one of its parents; a run needs a "
                           "directory of its own (e.g. --out runs/NAME)")
    contents = directory_entries(out, "output path")
    if not contents:
        return
    if not overwrite:
        raise EvrouteError(f"output directory {out} exists and is not empty (use --overwrite to replace "
                           "an evroute run directory)")
    if not (is_run_directory(out) or _damaged_run_directory(contents)):
        raise EvrouteError(f"{out} is not an evroute run directory (no evroute config.json), and evroute "
                           "replaces only its own run directories; nothing was deleted")
    foreign = [n for n in contents if n not in RUN_DIR_NAMES and not _evroute_entry(out / n)]
    if foreign:
        raise EvrouteError(f"{out} holds files evroute did not write ({short_list(foreign)}); move them "
                           "away first, nothing was deleted")


def prepare_out_dir(out: Path, overwrite: bool) -> Path:
    """Check the output directory ``out`` (:func:`check_out_dir`), remove temporary
    folders that killed runs left beside it, and return a fresh temporary sibling to
    write the run into (:func:`write_run` renames it to ``out`` when the run is complete)."""
    check_out_dir(out, overwrite)
    for p in stale_siblings(out):
        shutil.rmtree(p, ignore_errors=True)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-{os.getpid()}-", dir=out.parent))
        make_public(tmp, directory=True)  # mkdtemp makes it 0700; the run is renamed to out
        return tmp
    except OSError as exc:
        raise EvrouteError(f"cannot write {out}: {exc.strerror}") from None


def write_run(result: RunResult, config: dict, out: Path, *, overwrite: bool = False, csv: bool = False,
              tmp: Path | None = None) -> Path:
    """Write a run directory: ``config`` (the run's ``config.json``, see
    :func:`evroute.runs.simulation.run_config`), the tables and the summary of ``result``. Files go
    to a temporary folder (``tmp``, else a fresh one) renamed to ``out`` at the end."""
    tmp = tmp or prepare_out_dir(out, overwrite)
    atomic_write_json(tmp / "config.json", config)
    in_memory = {"rounds": result._rounds, "observations": result._observations, "edges": result.edges}
    for name, df in in_memory.items():
        target = tmp / f"{name}.parquet"
        if df is not None:
            atomic_write_with(target, lambda p, df=df: df.to_parquet(p, index=False))
        elif result.log_dir is None or not (result.log_dir / f"{name}.parquet").is_file():
            raise EvrouteError(f"the run's {name} log is neither in memory nor on disk")
        elif result.log_dir.resolve() != tmp.resolve():  # logged elsewhere: copy it in
            atomic_write_with(target, lambda p, src=result.log_dir / f"{name}.parquet": shutil.copyfile(src, p))
        if csv:
            atomic_write_with(tmp / f"{name}.csv", lambda p, src=target: parquet_to_csv(src, p))
    for name, df in result.tables.items():
        target = tmp / f"{name}.parquet"
        atomic_write_with(target, lambda p, df=df: df.to_parquet(p, index=False))
        if csv:
            atomic_write_with(tmp / f"{name}.csv", lambda p, src=target: parquet_to_csv(src, p))
    atomic_write_json(tmp / "summary.json", result.summary)
    if out.exists() or out.is_symlink():
        try:
            check_out_dir(out, overwrite)
        except EvrouteError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise EvrouteError(f"{exc} (it changed while the run was going)") from None
        trash = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, trash)
        os.replace(tmp, out)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(tmp, out)
    if result.log_dir is not None and result.log_dir.resolve() == tmp.resolve():
        result.log_dir = out
    return out


def parquet_to_csv(src: Path, dest: Path, batch_rows: int = 100_000) -> None:
    """A CSV copy of a Parquet table, batch by batch (route paths as space-separated ids)."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(src) as pf:
        header = True
        with open(dest, "w", encoding="utf-8", newline="") as fh:
            for batch in pf.iter_batches(batch_size=batch_rows):
                df = batch.to_pandas()
                if "path" in df:
                    df = df.assign(path=df.path.map(lambda p: " ".join(map(str, p))))
                df.to_csv(fh, index=False, header=header)
                header = False


