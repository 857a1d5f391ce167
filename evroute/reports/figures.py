"""What every figure of :mod:`evroute.reports.plots` is made with: matplotlib (Agg), the sizes of
panels and maps, the runs and their curves (mean ± 1 standard error over seeds), the policies'
line styles, the network drawn on a map, and the set of files one ``evroute plot`` writes
(PNG and SVG, and the tables beside them as CSV, each with evroute's generator mark, checked
before any is written).

Figures have a fixed size (no tight bounding box), so a PNG is ``size × DPI`` pixels.
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from ..bandit.agents import policy_family
from ..bandit.policies import MODEL_FAMILIES
from ..errors import EvrouteError, EvrouteWarning
from ..io import atomic_write_with, generator
from ..roads.network import load_network
from ..runs.directory import (
    check_output_file,
    is_finished_run,
    read_run_json,
    require_readable_run,
    verify_run,
)
from ..runs.grid import load_grid
from ..runs.summaries import read_run

DPI = 100
PANEL_W, PANEL_H = 4.8, 3.6  # inches per panel of a curve figure
MAP_W, MAP_H = 4.6, 4.2  # inches per panel of an exploration map
LEGEND_H = 0.9  # inches below the panels for the legend
COLORBAR_W = 1.0  # inches right of the maps for the colour bar
ATTRIBUTION = "© OpenStreetMap contributors"


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (imported on first use)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def grid_shape(n: int) -> tuple[int, int]:
    """(rows, columns) of a figure with ``n`` panels."""
    ncols = n if n <= 3 else math.ceil(math.sqrt(n))
    return math.ceil(n / ncols), ncols


def figure_size(n: int, kind: str = "curves", aspect: float = 1.0) -> tuple[float, float]:
    """Figure size in inches for ``n`` panels.

    ``kind`` is ``curves`` or ``map``; a map panel is ``MAP_W`` wide and as high as the
    network's ``aspect`` (height / width on the ground, bounded to 0.4–1.6) asks.
    """
    rows, cols = grid_shape(n)
    if kind == "map":
        h = MAP_W * min(max(aspect, 0.4), 1.6) + 0.5  # + title
        return round(MAP_W * cols + COLORBAR_W, 2), round(h * rows + LEGEND_H + 0.4, 2)
    return PANEL_W * cols, PANEL_H * rows + LEGEND_H


def network_aspect(net) -> float:
    """Height / width of the network's bounding box on the ground (equirectangular)."""
    s, w, n, e = net.bounds
    width = (e - w) * math.cos(math.radians((s + n) / 2))
    return float((n - s) / width) if width > 0 else 1.0


# --------------------------------------------------------------------------------------
# Loading runs
# --------------------------------------------------------------------------------------


def find_runs(directory: str | os.PathLike) -> tuple[list[Path], str]:
    """Finished run directories of a compare directory (grid order) or a single run.

    Returns the runs and the kind (``"run"`` or ``"compare"``).
    """
    d = Path(directory)
    if not d.is_dir():
        raise EvrouteError(f"{d} is not a directory")
    if is_finished_run(d) and (d / "config.json").is_file():
        return [require_readable_run(d)], "run"
    grid = load_grid(d)
    if grid is not None:
        runs = [d / "runs" / grid.cell_name(c) for c in grid.cells()]
    elif (d / "runs").is_dir():
        runs = sorted(p for p in (d / "runs").iterdir() if not p.name.startswith("."))
    else:
        raise EvrouteError(f"{d} is neither a run directory (no summary.json) nor a compare directory "
                           "(no grid.json)")
    runs = [r for r in runs if is_finished_run(r)]
    readable = []
    for r in runs:
        why = verify_run(r)
        if why is None:
            readable.append(r)
        else:  # one line per damaged run; the figures use the others
            warnings.warn(f"skipping run {r.name}: {why} (rerun the compare command to recompute it)", EvrouteWarning,
                          stacklevel=2)
    if not readable:
        raise EvrouteError(f"{d} has no finished{' readable' if runs else ''} runs yet")
    return readable, "compare"


def load_runs(run_dirs: list[Path]) -> pd.DataFrame:
    """One row per run (see :func:`evroute.runs.summaries.read_run`) plus its ``dir``."""
    rows = []
    for r in run_dirs:
        row = read_run(r)
        row["dir"] = r
        rows.append(row)
    return pd.DataFrame(rows)


def run_curves(runs: pd.DataFrame, column: str) -> np.ndarray:
    """Per-run curve of ``column`` from rounds.parquet, stacked (runs × T, NaN-padded)."""
    arrays = [pd.read_parquet(Path(d) / "rounds.parquet", columns=["t", column])[column].to_numpy(float)
              for d in runs.dir]
    T = max(len(a) for a in arrays)
    out = np.full((len(arrays), T), np.nan)
    for i, a in enumerate(arrays):
        out[i, :len(a)] = a
    return out


def mean_se(curves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error (ddof = 1, √n) over rows; s.e. is 0 for one row."""
    n = np.sum(np.isfinite(curves), axis=0)
    mean = np.nanmean(curves, axis=0)
    if curves.shape[0] < 2:
        return mean, np.zeros_like(mean)
    sd = np.nanstd(curves, axis=0, ddof=1)
    return mean, np.where(n > 1, sd / np.sqrt(np.maximum(n, 1)), 0.0)


def main_lengthscale(runs: pd.DataFrame) -> float:
    """The lengthscale the figures of one lengthscale show: 1.0 where the runs have it, else their first."""
    ls = list(dict.fromkeys(runs.lengthscale))
    return 1.0 if 1.0 in ls else ls[0]


def mean_band(ax, runs: pd.DataFrame, column: str, *, style: dict):
    """The mean of ``column`` over the runs against t, with a ±1 s.e. band; returns the line."""
    mean, se = mean_se(run_curves(runs, column))
    t = np.arange(1, len(mean) + 1)
    (line,) = ax.plot(t, mean, lw=1.6, **style)
    ax.fill_between(t, mean - se, mean + se, color=style["color"], alpha=0.2, lw=0)
    return line


# --------------------------------------------------------------------------------------
# Styles
# --------------------------------------------------------------------------------------


def policy_styles(labels: list[str]) -> dict:
    """Colour per index rule/variant, solid for a policy on the GP and dashed for one on its own
    independent model: the family each policy declared at registration
    (:func:`evroute.bandit.agents.policy_family`), not its name; a GP policy and its BI twin
    (``gp-ucb``, ``bi-ucb``) share a colour."""
    plt = pyplot()
    cmap = plt.get_cmap("tab10")
    keys: list[str] = []
    styles = {}
    for label in labels:
        family = _family(label)
        twin = family in MODEL_FAMILIES and label.startswith(family + "-")
        key = label[len(family) + 1:] if twin else label
        if key not in keys:
            keys.append(key)
        styles[label] = {"color": cmap(keys.index(key) % 10), "linestyle": "--" if family == "bi" else "-"}
    return styles


def _family(label: str) -> str | None:
    """The model family a run's policy declared; None for a policy not registered here (a
    plug-in not installed on this machine)."""
    try:
        return policy_family(label)
    except EvrouteError:
        return None


def pretty_label(label: str) -> str:
    """A policy's label as the figures show it: its name in capitals, then its options."""
    name, _, rest = label.partition("[")
    return name.upper() + (f" [{rest}" if rest else "")


def panels(plt, n: int, *, kind: str = "curves", sharex: bool = True, aspect: float = 1.0):
    """A figure of ``n`` panels (:func:`grid_shape`, :func:`figure_size`) and its ``n`` axes; the
    grid's spare cells hidden."""
    rows, cols = grid_shape(n)
    fig = plt.figure(figsize=figure_size(n, kind, aspect), dpi=DPI, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False, sharex=sharex)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


#: The formats every figure is written in.
FORMATS = ("png", "svg")


class FigureSet:
    """The figures of one ``evroute plot``, kept until every target is known to be writable:
    :meth:`add` collects, :meth:`write` checks every file (:func:`evroute.runs.directory.check_output_file`:
    replaced only if evroute wrote it, or with ``overwrite``) and then writes them all, so a
    refused target leaves nothing half-done. Each file carries evroute's generator mark (PNG
    ``Software``, SVG ``Creator``) and no date, so the same runs give the same bytes."""

    def __init__(self, out_dir: FigureSet | Path):
        self.out_dir = Path(out_dir)
        self._figs: list[tuple[object, str]] = []
        self._tables: list[tuple[pd.DataFrame, str]] = []

    def add(self, fig, stem: str) -> list[Path]:
        self._figs.append((fig, stem))
        return [self.out_dir / f"{stem}.{fmt}" for fmt in FORMATS]

    def add_table(self, table: pd.DataFrame, stem: str) -> Path:
        """A table to write as ``stem.csv`` (a first line ``# generator: ...``, then the CSV)."""
        self._tables.append((table, stem))
        return self.out_dir / f"{stem}.csv"

    def write(self, overwrite: bool = False) -> list[Path]:
        plt = pyplot()
        try:
            targets = [(fig, self.out_dir / f"{stem}.{fmt}", fmt) for fig, stem in self._figs for fmt in FORMATS]
            tables = [(table, self.out_dir / f"{stem}.csv") for table, stem in self._tables]
            for path in [t[1] for t in targets] + [t[1] for t in tables]:
                check_output_file(path, overwrite)
            meta = {"png": {"Software": generator()}, "svg": {"Creator": generator(), "Date": None}}
            for fig, path, fmt in targets:
                atomic_write_with(path, lambda p, f=fig, fmt=fmt: f.savefig(p, format=fmt, dpi=DPI,
                                                                           metadata=meta[fmt]))
            for table, path in tables:
                atomic_write_with(path, lambda p, t=table: _write_csv(p, t))
            return [path for _, path, _ in targets] + [path for _, path in tables]
        finally:
            self._tables.clear()
            for fig, _ in self._figs:
                plt.close(fig)
            self._figs.clear()


def _write_csv(path: Path, table: pd.DataFrame) -> None:
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write(f"# generator: {generator()}\n")
        table.to_csv(fh, index=False, float_format="%.10g")


def save_figure(fig, out: FigureSet | Path, stem: str) -> list[Path]:
    """Add the figure to a :class:`FigureSet`, or (a folder given) write it there now."""
    if isinstance(out, FigureSet):
        return out.add(fig, stem)
    figures = FigureSet(Path(out))
    figures.add(fig, stem)
    return figures.write()


def figure_legend(fig, handles, labels, *, ncols: int | None = None) -> None:
    """The figure's one legend, below its panels (none without handles)."""
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=ncols or min(len(labels), 6),
                   frameon=False, fontsize="small")


# --------------------------------------------------------------------------------------
# The network on a map
# --------------------------------------------------------------------------------------


def load_network_of(run_dir: Path):
    """The network a run's configuration names (from the cache when it is there)."""
    cfg, _ = read_run_json(run_dir)
    return load_network(cfg["network"], osm=cfg.get("osm"), dem=cfg.get("dem"))


#: Networks with more edges draw their grey background as pixels in vector outputs.
RASTERIZE_FROM_EDGES = 20_000


def draw_network(ax, net, values=None, *, norm=None, cmap=None, route=None, ends=None, linewidth: float = 1.6):
    """The network in light grey on ``ax``; the edges with a finite value coloured by it (the
    largest on top); a route as a dashed black line; the trip's start and end edges."""
    from matplotlib.collections import LineCollection

    segs = [np.asarray(g, dtype=float) for g in net.geometry]
    # the grey network as pixels in the SVG of a large network (100k edges: 16 MB of paths)
    ax.add_collection(LineCollection(segs, colors="#d4d4d4", linewidths=0.5, zorder=1,
                                     rasterized=len(segs) > RASTERIZE_FROM_EDGES))
    if values is not None:
        v = np.asarray(values, dtype=float)
        idx = np.flatnonzero(np.isfinite(v))
        idx = idx[np.argsort(v[idx], kind="stable")]
        if len(idx):
            ax.add_collection(LineCollection([segs[i] for i in idx], colors=cmap(norm(v[idx])),
                                             linewidths=linewidth, zorder=2))
    if route is not None and len(route):
        xy = np.concatenate([segs[int(i)] for i in route])
        ax.plot(xy[:, 0], xy[:, 1], color="black", lw=1.1, ls=(0, (3, 2)), zorder=3)
    if ends is not None:
        ax.plot(*segs[int(ends[0])][0], marker="o", ms=7, color="#1a9850", mec="black", zorder=4)
        ax.plot(*segs[int(ends[1])][-1], marker="s", ms=7, color="#d73027", mec="black", zorder=4)
    ax.set_aspect(1.0 / math.cos(math.radians(float(np.mean(net.nodes.lat)))))
    ax.autoscale_view()
    ax.set_xticks([])
    ax.set_yticks([])
