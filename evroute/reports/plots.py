"""Figures of a comparison or of one run (matplotlib, Agg; PNG and SVG).

- ``regret``: cumulative regret over t, mean ± 1 standard error over seeds, one panel per
  route, one line per policy (paper 003 Fig. 2, and Fig. 3 left/middle for β_t variants);
- ``beta``: β_t over t of the UCB / BUCB policies, one panel per network (Fig. 3 right);
- ``regret_lengthscale`` and ``final_regret_vs_lengthscale`` when the grid has several
  lengthscales (Fig. 4 and Fig. 5, error bars ± 1 s.e.);
- ``coverage``: for the policies whose index is a lower confidence bound (capability
  :data:`evroute.bandit.agents.LOWER_CONFIDENCE_BOUND`), the share of the (edge, round) pairs driven so
  far whose bound lay at or below the true expected energy, and the mean gap between the truth
  and the bound on the round's edges, one row per network (paper 000: tighter bounds, still
  valid);
- ``explore-<network>-<route>``: exploration maps, one panel per policy (Fig. 6–9): the
  network in light grey, the edges driven coloured by their visits summed over seeds (log
  scale), the clairvoyant optimal route of seed 0, start and end.

Beside them, as CSV (:mod:`evroute.reports.tables`): ``coverage-table`` (the bounds' coverage per
policy) and ``priors-table`` (paper 004's "which vehicle am I?") where the runs have the data.

The figures are made with :mod:`evroute.reports.figures` (sizes, styles, runs, maps, files).
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from ..bandit.agents import LOWER_CONFIDENCE_BOUND, POLICIES
from ..errors import EvrouteError
from ..io import directory_entries
from ..runs.directory import read_run_json, read_run_table, require_readable_run
from ..runs.summaries import standard_error
from .figures import (
    ATTRIBUTION,
    COLORBAR_W,
    DPI,
    LEGEND_H,
    MAP_H,
    MAP_W,
    PANEL_H,
    PANEL_W,
    FigureSet,
    draw_network,
    figure_legend,
    find_runs,
    load_network_of,
    load_runs,
    main_lengthscale,
    mean_band,
    mean_se,
    network_aspect,
    panels,
    policy_styles,
    pretty_label,
    pyplot,
    run_curves,
    save_figure,
)
from .tables import bound_curves, coverage_table, priors_table


def plot_regret(runs: pd.DataFrame, out_dir: FigureSet | Path) -> list[Path]:
    """Cumulative regret, mean ± 1 s.e., one panel per route (003 Fig. 2)."""
    plt = pyplot()
    ls = main_lengthscale(runs)
    sel = runs[runs.lengthscale == ls]
    routes = list(dict.fromkeys(sel.route))
    policies = list(dict.fromkeys(sel.policy))
    styles = policy_styles(policies)
    fig, axes = panels(plt, len(routes))
    handles = {}
    for ax, route in zip(axes, routes, strict=True):
        for pol in policies:
            g = sel[(sel.route == route) & (sel.policy == pol)]
            if g.empty:
                continue
            handles.setdefault(pol, mean_band(ax, g, "cumulative_regret_wh", style=styles[pol]))
        n = sel[sel.route == route].groupby("policy").size()
        ax.set_title(f"{route}" + (f"  (n = {n.min()} seed{'s' if n.min() != 1 else ''})" if n.min() == n.max() else ""), fontsize="medium")
        ax.set_xlabel("round t")
        ax.set_ylabel("cumulative regret (Wh)")
        ax.grid(alpha=0.3)
    title = "Cumulative regret, mean ± 1 standard error"
    if runs.lengthscale.nunique() > 1:
        title += f" (lengthscale {ls:g})"
    fig.suptitle(title)
    figure_legend(fig, list(handles.values()), [pretty_label(p) for p in handles])
    return save_figure(fig, out_dir, "regret")


def _network_panels(sel: pd.DataFrame, draw, ylabel: str, title: str, out_dir: FigureSet | Path, stem: str) -> list[Path]:
    """One panel per network, one line per policy: ``draw(ax, runs, style)`` plots the runs of
    one (network, policy) and returns its line."""
    plt = pyplot()
    networks = list(dict.fromkeys(sel.network))
    policies = list(dict.fromkeys(sel.policy))
    styles = policy_styles(policies)
    fig, axes = panels(plt, len(networks))
    handles = {}
    for ax, net in zip(axes, networks, strict=True):
        for pol in policies:
            g = sel[(sel.network == net) & (sel.policy == pol)]
            if not g.empty:
                handles.setdefault(pol, draw(ax, g, styles[pol]))
        ax.set_title(net, fontsize="medium")
        ax.set_xlabel("round t")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    figure_legend(fig, list(handles.values()), [pretty_label(p) for p in handles])
    return save_figure(fig, out_dir, stem)


def plot_beta(runs: pd.DataFrame, out_dir: FigureSet | Path) -> list[Path]:
    """β_t over t of the UCB and BUCB policies, one panel per network (003 Fig. 3, right)."""
    sel = runs[runs.policy_name.str.endswith("ucb")]
    if sel.empty:
        return []

    def draw(ax, g, style):
        beta = np.nanmean(run_curves(g.iloc[:1], "beta"), axis=0)  # β_t is the same for every run
        return ax.plot(np.arange(1, len(beta) + 1), beta, lw=1.6, **style)[0]

    return _network_panels(sel, draw, r"$\beta_t$", r"Confidence parameter $\beta_t$", out_dir, "beta")


def _has_column(run_dir, column: str) -> bool:
    import pyarrow.parquet as pq

    return column in pq.read_schema(Path(run_dir) / "rounds.parquet").names


def plot_dictionary(runs: pd.DataFrame, out_dir: FigureSet | Path) -> list[Path]:
    """Dictionary size m against t for the runs of Nyström backends (``nystrom``, ``bkb``), one
    panel per network: mean ± s.e. over seeds (papers 001/002: m should stay ≪ the number of
    observations)."""
    sel = runs[[_has_column(d, "dictionary_size") for d in runs.dir]]
    if sel.empty:
        return []
    return _network_panels(sel, lambda ax, g, style: mean_band(ax, g, "dictionary_size", style=style),
                           "dictionary size m", "Nyström dictionary size", out_dir, "dictionary")


def plot_priors(runs: pd.DataFrame, out_dir: FigureSet | Path) -> list[Path]:
    """Which candidate priors survive, round by round (paper 004's PE-GP-UCB: ``priors.parquet``):
    one panel per run (up to 6), a bar per prior from round 1 to its elimination, dots where
    it was the optimistic choice."""
    dirs = [Path(d) for d in runs.dir if (Path(d) / "priors.parquet").is_file()][:6]
    if not dirs:
        return []
    plt = pyplot()
    fig = plt.figure(figsize=(PANEL_W, PANEL_H * 0.7 * len(dirs) + LEGEND_H), dpi=DPI, layout="constrained")
    axes = fig.subplots(len(dirs), 1, squeeze=False)[:, 0]
    for ax, d in zip(axes, dirs, strict=True):
        pri = read_run_table(d, "priors")
        _, summary = read_run_json(d)
        if not {"t", "chosen"} <= set(pri.columns):
            raise EvrouteError(f"{d} is not a readable run: priors.parquet has no columns t and chosen")
        names = summary.get("priors") if isinstance(summary.get("priors"), list) else list(dict.fromkeys(pri.chosen))
        horizon = int(pri.t.max()) if len(pri) else 1
        elim = summary.get("priors_eliminated_at") if isinstance(summary.get("priors_eliminated_at"), dict) else {}
        for i, name in enumerate(names):
            end = elim.get(name, horizon)
            ax.plot([1, end], [i, i], lw=6, color="tab:green" if name not in elim else "tab:gray", alpha=0.5)
            chosen = pri.t[pri.chosen == name]
            ax.plot(chosen, np.full(len(chosen), i), "k.", ms=3)
            if name in elim:
                ax.plot([end], [i], "rx", ms=8)
        ax.set_yticks(range(len(names)), [Path(n).stem if n.lower().endswith(".json") else n for n in names])
        ax.set_xlim(0, horizon + 1)
        truth = summary.get("truth_prior") or "the run's vehicle"
        ax.set_title(f"{d.name}  (truth around {truth})", fontsize=8)
    axes[-1].set_xlabel("round t")
    fig.suptitle("candidate priors\nalive (green), eliminated (x), chosen (dots)", fontsize=9)
    return save_figure(fig, out_dir, "priors")


def plot_coverage(runs: pd.DataFrame, out_dir: FigureSet | Path) -> list[Path]:
    """Do the lower confidence bounds hold, and how tight are they (paper 000)? For the runs of
    policies declaring :data:`evroute.bandit.agents.LOWER_CONFIDENCE_BOUND`, one row per network: the
    coverage so far (the share of driven (edge, round) pairs whose logged bound
    ``index_before`` lay at or below the edge's true expected energy) and the mean gap
    truth − bound on the round's edges (log scale where every gap is positive), each the mean
    over seeds."""
    bound_policies = set(POLICIES.with_capability(LOWER_CONFIDENCE_BOUND))
    sel = runs[runs.policy_name.isin(bound_policies)]
    if sel.empty:
        return []
    plt = pyplot()
    networks = list(dict.fromkeys(sel.network))
    policies = list(dict.fromkeys(sel.policy))
    styles = policy_styles(policies)
    fig = plt.figure(figsize=(2 * PANEL_W, PANEL_H * len(networks) + LEGEND_H), dpi=DPI, layout="constrained")
    axes = fig.subplots(len(networks), 2, squeeze=False, sharex=True)
    handles = {}
    for (ax_cov, ax_gap), net in zip(axes, networks, strict=True):
        positive, lowest = True, 100.0
        for pol in policies:
            g = sel[(sel.network == net) & (sel.policy == pol)]
            if g.empty:
                continue
            curves = [bound_curves(d) for d in g.dir]
            T = max(c.size for c, _ in curves)
            cov, gap = (np.full((len(curves), T), np.nan) for _ in range(2))
            for i, (c, w) in enumerate(curves):
                cov[i, :c.size], gap[i, :w.size] = c, w
            t = np.arange(1, T + 1)
            with warnings.catch_warnings():  # a round no run reached is NaN, not a warning
                warnings.simplefilter("ignore", RuntimeWarning)
                cov_mean, gap_mean = np.nanmean(cov, axis=0), np.nanmean(gap, axis=0)
            handles.setdefault(pol, ax_cov.plot(t, cov_mean, lw=1.6, **styles[pol])[0])
            ax_gap.plot(t, gap_mean, lw=1.2, **styles[pol])
            positive &= bool(np.all(gap_mean[np.isfinite(gap_mean)] > 0))
            lowest = min(lowest, float(np.nanmin(cov_mean, initial=100.0)))
        ax_cov.set_title(f"{net}: coverage so far", fontsize="medium")
        ax_cov.set_ylabel("bound ≤ truth (% of pairs)")
        ax_cov.set_ylim(min(90.0, 5.0 * math.floor(lowest / 5.0)), 101.0)  # never above 100 %
        ax_gap.set_title(f"{net}: truth − bound, mean on the route", fontsize="medium")
        ax_gap.set_ylabel("gap (Wh)")
        if positive:
            ax_gap.set_yscale("log")
        for ax in (ax_cov, ax_gap):
            ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("round t")
    fig.suptitle("Lower confidence bounds on the edges driven: valid, and how tight (mean over seeds)")
    figure_legend(fig, list(handles.values()), [pretty_label(p) for p in handles])
    return save_figure(fig, out_dir, "coverage")


def _truth_note(runs: pd.DataFrame) -> str:
    """A second title line when each run's truth was sampled with its own lengthscale."""
    if "truth_lengthscale" not in runs:
        return ""
    tl = runs.truth_lengthscale
    return "\ntrue f sampled with the same ℓ" if (tl == runs.lengthscale).all() and (tl != 1.0).any() else ""


def plot_lengthscale(runs: pd.DataFrame, out_dir: FigureSet | Path) -> list[Path]:
    """Cumulative regret per lengthscale (003 Fig. 4) and final regret vs lengthscale (Fig. 5)."""
    plt = pyplot()
    lengthscales = sorted(set(runs.lengthscale))
    if len(lengthscales) < 2:
        return []
    routes = list(dict.fromkeys(runs.route))
    policies = list(dict.fromkeys(runs.policy))
    files = []

    # Fig. 4: rows = policies, columns = routes, one line per lengthscale
    cmap = plt.get_cmap("viridis")
    colors = {ls: cmap(i / max(1, len(lengthscales) - 1)) for i, ls in enumerate(lengthscales)}
    rows, cols = len(policies), len(routes)
    fig = plt.figure(figsize=(PANEL_W * 0.8 * cols, PANEL_H * 0.8 * rows + LEGEND_H), dpi=DPI, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False, sharex=True)
    handles = {}
    for i, pol in enumerate(policies):
        for j, route in enumerate(routes):
            ax = axes[i, j]
            for ls in lengthscales:
                g = runs[(runs.route == route) & (runs.policy == pol) & (runs.lengthscale == ls)]
                if g.empty:
                    continue
                mean, se = mean_se(run_curves(g, "cumulative_regret_wh"))
                t = np.arange(1, len(mean) + 1)
                (line,) = ax.plot(t, mean, color=colors[ls], lw=1.3)
                ax.fill_between(t, mean - se, mean + se, color=colors[ls], alpha=0.15, lw=0)
                handles.setdefault(ls, line)
            ax.set_title(f"{pretty_label(pol)}, {route}", fontsize="small")
            ax.grid(alpha=0.3)
            if i == rows - 1:
                ax.set_xlabel("round t")
            if j == 0:
                ax.set_ylabel("cum. regret (Wh)")
    fig.suptitle(f"Cumulative regret for varying prior lengthscale ℓ (mean ± 1 s.e.){_truth_note(runs)}")
    figure_legend(fig, [handles[k] for k in lengthscales if k in handles],
                  [f"ℓ = {k:g}" for k in lengthscales if k in handles])
    files += save_figure(fig, out_dir, "regret_lengthscale")

    # Fig. 5: final regret vs lengthscale, error bars ± 1 s.e.
    styles = policy_styles(policies)
    fig, axes = panels(plt, len(routes), sharex=False)
    handles = {}
    for ax, route in zip(axes, routes, strict=True):
        for pol in policies:
            g = runs[(runs.route == route) & (runs.policy == pol)]
            if g.empty:
                continue
            stats = g.groupby("lengthscale").final_regret_wh.agg(["mean", standard_error]).sort_index()
            se = np.nan_to_num(stats["standard_error"].to_numpy(), nan=0.0)
            cont = ax.errorbar(stats.index.to_numpy(), stats["mean"].to_numpy(), yerr=se, capsize=3,
                               marker="o", ms=4, lw=1.3, color=styles[pol]["color"],
                               linestyle=styles[pol]["linestyle"])
            handles.setdefault(pol, cont)
        ax.set_title(route, fontsize="medium")
        ax.set_xlabel("lengthscale ℓ")
        ax.set_ylabel(f"cumulative regret at T = {int(runs.horizon.max())} (Wh)")
        ax.grid(alpha=0.3)
    fig.suptitle(f"Final cumulative regret vs lengthscale (± 1 s.e.){_truth_note(runs)}")
    figure_legend(fig, list(handles.values()), [pretty_label(p) for p in handles])
    files += save_figure(fig, out_dir, "final_regret_vs_lengthscale")
    return files


# --------------------------------------------------------------------------------------
# Exploration maps
# --------------------------------------------------------------------------------------


def plot_exploration(runs: pd.DataFrame, out_dir: FigureSet | Path, nets: dict | None = None) -> list[Path]:
    """One figure per route, one panel per policy: edges coloured by visits summed over seeds
    (log scale), the clairvoyant optimal route of the lowest seed shown, start and end
    (003 Fig. 6–9)."""
    plt = pyplot()
    from matplotlib.colors import LogNorm
    from matplotlib.lines import Line2D

    nets = {} if nets is None else nets
    ls = main_lengthscale(runs)
    sel = runs[runs.lengthscale == ls]
    files = []
    for route in dict.fromkeys(sel.route):
        rr = sel[sel.route == route]
        first = Path(rr.dir.iloc[0])
        key = rr.network.iloc[0]
        if key not in nets:
            nets[key] = load_network_of(first)
        net = nets[key]
        policies = list(dict.fromkeys(rr.policy))
        visits = {}
        for pol in policies:
            g = rr[rr.policy == pol]
            v = np.zeros(net.n_edges, dtype=np.int64)
            for d in g.dir:
                e = pd.read_parquet(Path(d) / "edges.parquet", columns=["edge", "visits"])
                if len(e) != net.n_edges:
                    raise EvrouteError(f"{d}: its edges do not match the network {net.name} "
                                       f"({len(e)} vs {net.n_edges} edges)")
                v[e.edge.to_numpy()] += e.visits.to_numpy()
            visits[pol] = v
        seed0 = rr.sort_values("seed").iloc[0]
        _, summary = read_run_json(Path(seed0.dir))
        optimal = [int(x) for x in summary.get("optimal_path", [])]
        start, end = int(summary["start_edge"]), int(summary["end_edge"])
        vmax = max(1, max(int(v.max()) for v in visits.values()))
        norm = LogNorm(vmin=1, vmax=max(vmax, 2))
        cmap = plt.get_cmap("plasma")
        fig, axes = panels(plt, len(policies), kind="map", sharex=False, aspect=network_aspect(net))
        for ax, pol in zip(axes, policies, strict=True):
            v = visits[pol]
            draw_network(ax, net, np.where(v > 0, v, np.nan), norm=norm, cmap=cmap, route=optimal,
                         ends=(start, end))
            n_seeds = int((rr.policy == pol).sum())
            ax.set_title(f"{pretty_label(pol)} ({n_seeds} seed{'s' if n_seeds != 1 else ''})", fontsize="medium")
        sm = plt.cm.ScalarMappable(norm=norm, cmap=cmap)
        fig.colorbar(sm, ax=axes, label="visits (sum over seeds)", shrink=0.8)
        handles = [Line2D([], [], color="black", lw=1.1, ls=(0, (3, 2))),
                   Line2D([], [], marker="o", color="#1a9850", mec="black", ls="none"),
                   Line2D([], [], marker="s", color="#d73027", mec="black", ls="none"),
                   Line2D([], [], color="#d4d4d4", lw=1.5)]
        labels = [f"clairvoyant optimal route (seed {int(seed0.seed)})", "start", "end", "road network"]
        figure_legend(fig, handles, labels, ncols=4)
        fig.suptitle(f"Exploration of {route}")
        synthetic = str(net.meta.get("source", "")).startswith("synthetic")
        fig.text(0.995, 0.005, "synthetic network (evroute)" if synthetic else ATTRIBUTION,
                 ha="right", va="bottom", fontsize=7, color="#555555")
        stem = f"explore-{Path(route.partition(':')[0]).stem}-{route.partition(':')[2]}"
        files += save_figure(fig, out_dir, stem)
    return files


# --------------------------------------------------------------------------------------
# Figures for Python users: each returns (fig, ax) and writes nothing
# --------------------------------------------------------------------------------------


def plot_network(net, values=None, *, route=None, ends=None, ax=None, cmap: str = "plasma", log: bool = False,
                 label: str | None = None):
    """Draw a network, optionally with a value per edge and a route, in the manner of
    ``osmnx.plot_graph``.

    Parameters
    ----------
    net : evroute.roads.network.Network
        The network.
    values : array-like of length E, optional
        A value per edge (visits, a posterior mean, E_det, ...); edges whose value is NaN are left
        grey.
    route : sequence of int, optional
        Edge ids of a route, drawn as a dashed black line.
    ends : (int, int), optional
        A trip's start and end edges (green circle, red square).
    ax : matplotlib.axes.Axes, optional
        Where to draw (default: a new figure).
    cmap : str
        The colour map of ``values``.
    log : bool
        A logarithmic colour scale (positive values).
    label : str, optional
        The colour bar's label (no colour bar without ``values``).

    Returns
    -------
    (matplotlib.figure.Figure, matplotlib.axes.Axes)

    Examples
    --------
    >>> from evroute.roads.network import load_network
    >>> net = load_network("synthetic")
    >>> fig, ax = plot_network(net, net.edges.grade.to_numpy(), label="grade")
    """
    plt = pyplot()
    from matplotlib.colors import LogNorm, Normalize

    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(MAP_W + COLORBAR_W, MAP_H),
                                                                  layout="constrained")
    norm = colormap = None
    if values is not None:
        v = np.asarray(values, dtype=float)
        if v.shape != (net.n_edges,):
            raise EvrouteError(f"plot_network: values need one number per edge ({net.n_edges}), got shape {v.shape}")
        finite = v[np.isfinite(v) & ((v > 0) if log else True)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (1.0, 2.0)
        norm = LogNorm(vmin=lo, vmax=max(hi, lo * 1.0001)) if log else Normalize(vmin=lo, vmax=hi if hi > lo else lo + 1)
        colormap = plt.get_cmap(cmap)
    draw_network(ax, net, values, norm=norm, cmap=colormap, route=route, ends=ends)
    if values is not None:
        fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=colormap), ax=ax, label=label or "", shrink=0.8)
    return fig, ax


def plot_run(run_dir: str | os.PathLike, column: str = "visits", *, ax=None, log: bool | None = None):
    """Draw one run on its network: an edge table column per edge, the clairvoyant optimal
    route, the trip's ends.

    Parameters
    ----------
    run_dir : path-like
        A finished run directory.
    column : str
        A column of the run's ``edges.parquet``: ``visits`` (default, log scale),
        ``post_mean_final``, ``post_std_final``, ``energy_true_wh``, ``energy_det_wh``, ...
        Unvisited edges are left grey for ``visits``.
    ax : matplotlib.axes.Axes, optional
        Where to draw (default: a new figure).
    log : bool, optional
        A logarithmic colour scale (default: for ``visits``).

    Returns
    -------
    (matplotlib.figure.Figure, matplotlib.axes.Axes)
    """
    run_dir = require_readable_run(run_dir)
    _, summary = read_run_json(run_dir)
    edges = read_run_table(run_dir, "edges")
    if column not in edges:
        raise EvrouteError(f"{run_dir}: edges.parquet has no column {column!r} (columns: {', '.join(edges.columns)})")
    net = load_network_of(run_dir)
    values = edges[column].to_numpy(dtype=float)
    if column == "visits":
        values = np.where(values > 0, values, np.nan)
    fig, ax = plot_network(net, values, route=summary.get("optimal_path"),
                           ends=(summary["start_edge"], summary["end_edge"]), ax=ax,
                           log=column == "visits" if log is None else log, label=column)
    ax.set_title(f"{summary['policy']} on {summary['route']}, seed {summary['seed']}", fontsize="medium")
    return fig, ax


def plot_regret_curves(directory: str | os.PathLike, route: str | None = None, *, ax=None):
    """Cumulative regret over the rounds, mean ± 1 standard error over seeds, one line per
    policy, for one route of a compare directory (or one run).

    Parameters
    ----------
    directory : path-like
        A compare directory or a run directory.
    route : str, optional
        The route (``synthetic:A``); default the first of the grid.
    ax : matplotlib.axes.Axes, optional
        Where to draw (default: a new figure).

    Returns
    -------
    (matplotlib.figure.Figure, matplotlib.axes.Axes)
    """
    plt = pyplot()
    run_dirs, _ = find_runs(directory)
    runs = load_runs(run_dirs)
    runs = runs[runs.lengthscale == main_lengthscale(runs)]
    routes = list(dict.fromkeys(runs.route))
    route = routes[0] if route is None else route
    if route not in routes:
        raise EvrouteError(f"{directory} has no runs on route {route!r} (routes: {', '.join(routes)})")
    sel = runs[runs.route == route]
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(PANEL_W + 1.2, PANEL_H),
                                                                  layout="constrained")
    styles = policy_styles(list(dict.fromkeys(sel.policy)))
    for pol, style in styles.items():
        line = mean_band(ax, sel[sel.policy == pol], "cumulative_regret_wh", style=style)
        line.set_label(pretty_label(pol))
    ax.set_title(route, fontsize="medium")
    ax.set_xlabel("round t")
    ax.set_ylabel("cumulative regret (Wh)")
    ax.grid(alpha=0.3)
    ax.legend(frameon=False, fontsize="small")
    return fig, ax


# --------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------


def plot_directory(directory: str | os.PathLike, out: str | os.PathLike | None = None,
                   maps: bool = True, *, overwrite: bool = False) -> list[Path]:
    """Every figure for a compare directory or a run directory; returns the files written.

    Figures go to ``out`` (default ``DIRECTORY/plots``). An existing file there is replaced only
    if evroute wrote it (an earlier plot), or with ``overwrite``; every target is checked before
    anything is written.
    """
    run_dirs, _ = find_runs(directory)
    runs = load_runs(run_dirs)
    out_dir = Path(out) if out is not None else Path(directory) / "plots"

    directory_entries(out_dir, "--out")  # a file or an unreadable folder: one line
    figures = FigureSet(out_dir)
    plot_regret(runs, figures)
    plot_beta(runs, figures)
    plot_lengthscale(runs, figures)
    plot_dictionary(runs, figures)
    plot_priors(runs, figures)
    plot_coverage(runs, figures)
    for stem, table in (("coverage-table", coverage_table(runs)), ("priors-table", priors_table(runs))):
        if not table.empty:
            figures.add_table(table, stem)
    if maps:
        plot_exploration(runs, figures)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EvrouteError(f"cannot create {out_dir}: {exc.strerror}") from None
    return figures.write(overwrite)


def plot_atlas(energy_det, energy_sumo, counts, *, out_dir: FigureSet | Path, title: str = "") -> list[Path]:
    """How good the paper's prior mean is: E_det (Eq. 8) against the mean SUMO energy of each
    edge of an energy atlas (edges with a mean), with the identity line, the correlation r and
    R² = 1 − Σ(SUMO − E_det)² / Σ(SUMO − mean)², E_det taken as the prediction (``atlas.png``)."""
    plt = pyplot()
    ok = np.isfinite(energy_sumo)
    x, y, n = np.asarray(energy_det)[ok], np.asarray(energy_sumo)[ok], np.asarray(counts)[ok]
    if x.size < 2:
        raise EvrouteError("the atlas has fewer than two edges with traversals: nothing to plot")
    r = float(np.corrcoef(x, y)[0, 1])
    r2 = 1.0 - float(np.sum((y - x) ** 2) / np.sum((y - y.mean()) ** 2))
    fig, ax = plt.subplots(figsize=(5.5, 5.0), layout="constrained")
    sc = ax.scatter(x, y, c=np.log10(n), s=6, cmap="viridis", alpha=0.7, linewidths=0)
    lo, hi = float(min(x.min(), y.min())), float(max(x.max(), y.max()))
    ax.plot([lo, hi], [lo, hi], color="0.3", lw=0.8, ls="--", label="E_det = SUMO")
    ax.set_xlabel("E_det, Eq. 8 (Wh)")
    ax.set_ylabel("mean SUMO energy per traversal (Wh)")
    ax.set_title(f"{title}{': ' if title else ''}{x.size:,} edges, r = {r:.3f}, R² = {r2:.3f}", fontsize="small")
    fig.colorbar(sc, ax=ax, label="log10 traversals")
    ax.legend(loc="upper left", frameon=False, fontsize="small")
    return save_figure(fig, out_dir, "atlas")
