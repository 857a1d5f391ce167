"""Reading finished runs and summarising a grid: ``summary.csv`` and ``summary.md``.

Mean ± standard error over seeds (s.e. = sample std (ddof = 1) / √n) of the final
cumulative regret per route × policy × model × lengthscale.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pandas as pd

from ..bandit.agents import resolve_policy
from ..errors import EvrouteError
from ..io import atomic_write_text, atomic_write_with
from ..specs import format_value
from .config import normalise_config_json
from .directory import is_finished_run, read_run_json
from .grid import Grid, fmt_number

__all__ = ["RUN_COLUMNS", "GROUP_COLUMNS", "SUMMARY_COLUMNS", "TIMING_COLUMNS", "ENERGY_COLUMNS", "read_run",
           "collect_runs", "summarize_energy", "energy_markdown",
           "standard_error", "summarize", "summary_markdown", "write_summaries"]

#: Columns of ``summary.csv`` that measure time (they differ between machines and executors).
TIMING_COLUMNS = ("seconds_per_round_mean",)


RUN_COLUMNS = ("name", "network", "route", "policy", "policy_name", "model", "lengthscale", "truth_lengthscale",
               "omega", "xi", "beta_scale", "seed", "horizon", "final_regret_wh", "seconds_per_round", "variant",
               "total_energy_wh", "fastest_total_energy_wh", "shortest_total_energy_wh", "regret_reference")


def read_run(run_dir: str | os.PathLike) -> dict:
    """One row describing a finished run (from its ``config.json`` and ``summary.json``, checked
    by :func:`evroute.runs.directory.read_run_json`).

    Returns
    -------
    dict
        The run's summary and configuration, flattened, with its final regret (``final_regret_wh``) and the directory.
    """
    run_dir = Path(run_dir)
    cfg, summary = read_run_json(run_dir)
    try:  # config.json of any format, its policy as a resolved component
        policy = resolve_policy(normalise_config_json(cfg)["policy"])
    except (EvrouteError, KeyError, TypeError) as exc:
        raise EvrouteError(f"{run_dir / 'config.json'}: {exc}") from None
    route = cfg.get("route") or summary.get("route")
    network = cfg.get("network") or summary.get("network")
    if route and ":" not in route:
        route = f"{network}:{route}"
    backend = cfg.get("resolved", {}).get("backend") or summary.get("model") or cfg.get("model")
    # an agent told the truth's turns is named so in every table (it is an oracle, not a benchmark)
    label = policy.label + (" (oracle turns)" if summary.get("prior_turns") == "oracle" else "")
    return {"name": run_dir.name, "network": network, "route": route or summary.get("route"),
            "policy": label, "policy_name": policy.name, "model": backend,
            "lengthscale": float(cfg.get("lengthscale", 1.0)),
            "truth_lengthscale": float(cfg.get("truth_lengthscale", 1.0)), "omega": float(policy.get("omega", 1.0)),
            "xi": float(policy.get("xi", 1.0)), "beta_scale": float(policy.get("beta_scale", 1.0)),
            "seed": int(cfg.get("seed", summary.get("seed", 0))), "horizon": int(cfg.get("horizon", summary["horizon"])),
            "final_regret_wh": float(summary["final_cumulative_regret_wh"]),
            "seconds_per_round": float(summary.get("mean_seconds_per_round", float("nan"))),
            "regret_reference": summary.get("regret_reference", "paper's rectified route"),
            # the energy driven and the baselines' (runs of earlier versions have none: NaN)
            **{k: _number(summary.get(k)) for k in ("total_energy_wh", "fastest_total_energy_wh",
                                                    "shortest_total_energy_wh")}}


def _number(value) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else float("nan")


def collect_runs(out: str | os.PathLike, grid: Grid | None = None) -> pd.DataFrame:
    """One row per finished run: the grid's cells (in grid order) or every run in ``out/runs``."""
    out = Path(out)
    if grid is not None:
        cells = grid.cells()
        dirs = [out / "runs" / grid.cell_name(c) for c in cells]
        variants = [_variant(c.sweep) for c in cells]
    else:
        dirs = sorted(p for p in (out / "runs").iterdir() if not p.name.startswith(".")) \
            if (out / "runs").is_dir() else []
        variants = [""] * len(dirs)
    rows = [{**read_run(d), "variant": v} for d, v in zip(dirs, variants, strict=True) if is_finished_run(d)]
    return pd.DataFrame(rows, columns=list(RUN_COLUMNS))


def _variant(sweep: tuple) -> str:
    """A cell's swept settings as text: ``kappa=0.5 drift=0.01`` ("" without sweeps)."""
    return " ".join(f"{k}={format_value(v)}" for k, v in sweep)


GROUP_COLUMNS = ["network", "route", "policy", "model", "lengthscale", "truth_lengthscale", "horizon"]
SUMMARY_COLUMNS = GROUP_COLUMNS + ["n_seeds", "final_regret_mean_wh", "final_regret_se_wh",
                                   "seconds_per_round_mean"]


def standard_error(values) -> float:
    """Sample standard deviation (ddof = 1) / √n; NaN for fewer than two values."""
    v = np.asarray(values, dtype=float)
    return float(np.std(v, ddof=1) / math.sqrt(len(v))) if len(v) >= 2 else float("nan")


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean ± standard error of the final cumulative regret per route × policy × lengthscale.

    Rows keep the order in which the groups first appear in ``runs`` (the grid order).
    """
    if runs.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    # a grid with swept settings (--sweep) has a column saying which values each row has
    swept = "variant" in runs and runs.variant.fillna("").astype(str).str.len().gt(0).any()
    group = GROUP_COLUMNS + (["variant"] if swept else [])
    columns = group + SUMMARY_COLUMNS[len(GROUP_COLUMNS):]
    rows = []
    for key, g in runs.groupby(group, sort=False, dropna=False):
        rows.append({**dict(zip(group, key, strict=True)), "n_seeds": int(len(g)),
                     "final_regret_mean_wh": float(g.final_regret_wh.mean()),
                     "final_regret_se_wh": standard_error(g.final_regret_wh),
                     "seconds_per_round_mean": float(g.seconds_per_round.mean())})
    return pd.DataFrame(rows, columns=columns)


#: ``energy.csv``: per group the energy driven over the run against always driving the fastest
#: and the shortest route (means over seeds; the percentage is of the baseline's mean energy).
ENERGY_COLUMNS = ["n_seeds", "total_energy_mean_wh", "fastest_total_energy_mean_wh", "saved_vs_fastest_mean_wh",
                  "saved_vs_fastest_pct", "shortest_total_energy_mean_wh", "saved_vs_shortest_mean_wh",
                  "saved_vs_shortest_pct"]


def summarize_energy(runs: pd.DataFrame) -> pd.DataFrame:
    """Energy saved per route × policy (× lengthscale, × swept values): the mean energy the agent
    drove over the run, the mean energy of always driving the fastest and the shortest route under
    the same truth, what was saved (Wh) and its share of the baseline's energy (%, where that is
    positive). Runs without the energy columns (earlier versions) are left out."""
    group = GROUP_COLUMNS + (["variant"] if "variant" in runs and runs.variant.fillna("").astype(str).str.len()
                             .gt(0).any() else [])
    runs = runs.dropna(subset=["total_energy_wh", "fastest_total_energy_wh", "shortest_total_energy_wh"])
    rows = []
    for key, g in runs.groupby(group, sort=False, dropna=False):
        row = {**dict(zip(group, key, strict=True)), "n_seeds": int(len(g)),
               "total_energy_mean_wh": float(g.total_energy_wh.mean())}
        for base in ("fastest", "shortest"):
            mean_base = float(g[f"{base}_total_energy_wh"].mean())
            saved = mean_base - row["total_energy_mean_wh"]
            row |= {f"{base}_total_energy_mean_wh": mean_base, f"saved_vs_{base}_mean_wh": saved,
                    f"saved_vs_{base}_pct": 100.0 * saved / mean_base if mean_base > 0 else float("nan")}
        rows.append(row)
    return pd.DataFrame(rows, columns=group + ENERGY_COLUMNS)


def energy_markdown(table: pd.DataFrame) -> str:
    """The energy table as Markdown (appended to ``summary.md``)."""
    if table.empty:
        return ""
    lines = ["Energy driven over the run (mean over seeds) against always driving the fastest and the "
             "shortest route under the same truth:", "",
             "| route | policy | energy (Wh) | saved vs fastest | saved vs shortest |", "| --- | --- | ---: | ---: | ---: |"]

    def saved(r, base):
        pct = getattr(r, f"saved_vs_{base}_pct")
        return f"{getattr(r, f'saved_vs_{base}_mean_wh'):+.0f} Wh" + (f" ({pct:+.1f} %)" if math.isfinite(pct) else "")
    for r in table.itertuples():
        policy = f"{r.policy} {getattr(r, 'variant', '')}".strip()
        lines.append(f"| {r.route} | {policy} | {r.total_energy_mean_wh:.0f} | {saved(r, 'fastest')} | "
                     f"{saved(r, 'shortest')} |")
    return "\n".join(lines + [""])


def _pm(mean: float, se: float) -> str:
    return f"{mean:.1f} ± {se:.1f}" if math.isfinite(se) else f"{mean:.1f}"


#: What each regret reference means, for the summaries (``summary.json``'s ``regret_reference``).
REGRET_REFERENCES = {
    "exact optimum": "Regret against the exact least-energy route of each run's truth (Dijkstra on reduced costs, "
                     "certified per run; never negative).",
    "paper's rectified route": "The paper's regret: against the route the rectified weights pick handed the truth "
                               "(the truth creates energy; 003 Sec. 4.1).",
}


def summary_markdown(table: pd.DataFrame, grid: Grid | None = None, title: str | None = None, *,
                     references=()) -> str:
    """The summary as Markdown: long form, or route × policy by lengthscale for a sweep;
    ``references``: the runs' regret references (:data:`REGRET_REFERENCES`), said once."""
    lines = []
    if title:
        lines += [f"## {title}", ""]
    if table.empty:
        return "\n".join(lines + ["(no finished runs)", ""])
    lines += [REGRET_REFERENCES.get(r, r) for r in dict.fromkeys(references)]
    if table.policy.astype(str).str.contains("(oracle turns)", regex=False).any():
        lines.append("Policies marked (oracle turns) were told the truth's junctions (--turns oracle): "
                     "an oracle, not a benchmark.")
    if "variant" in table:  # swept settings: shown with the policy (``gp-ts kappa=0.5``)
        table = table.assign(policy=[f"{p} {v}".strip() for p, v in zip(table.policy, table.variant, strict=True)])
    hz = sorted(set(table.horizon))
    seeds = sorted(set(table.n_seeds))
    lines.append(f"Final cumulative regret at T = {', '.join(map(str, hz))} (Wh), mean ± standard error "
                 f"over {', '.join(map(str, seeds))} seed(s); model: {', '.join(sorted(set(table.model)))}.")
    truth = table.truth_lengthscale if "truth_lengthscale" in table else pd.Series([1.0])
    if (truth != 1.0).any():
        if "lengthscale" in table and (truth == table.lengthscale).all():
            lines.append("The true f is sampled with each run's lengthscale (ℓ_truth = ℓ).")
        else:
            lines.append("Truth lengthscales: " + ", ".join(fmt_number(x) for x in dict.fromkeys(truth)) + ".")
    lines.append("")
    lengthscales = list(dict.fromkeys(table.lengthscale))
    if len(lengthscales) > 1:
        head = "| route | policy | " + " | ".join(f"ℓ = {fmt_number(x)}" for x in lengthscales) + " |"
        lines += [head, "|" + " --- |" * (2 + len(lengthscales))]
        for (route, policy), g in table.groupby(["route", "policy"], sort=False):
            by_ls = {r.lengthscale: _pm(r.final_regret_mean_wh, r.final_regret_se_wh) for r in g.itertuples()}
            lines.append(f"| {route} | {policy} | " + " | ".join(by_ls.get(x, "–") for x in lengthscales) + " |")
        lines.append("")
        timing = table.groupby("policy", sort=False).seconds_per_round_mean.mean()
        lines.append("Mean seconds per round: " + ", ".join(f"{p} {s:.3f}" for p, s in timing.items()) + ".")
    else:
        lines += ["| route | policy | seeds | final regret (Wh) | s / round |", "| --- | --- | ---: | ---: | ---: |"]
        for r in table.itertuples():
            lines.append(f"| {r.route} | {r.policy} | {r.n_seeds} | {_pm(r.final_regret_mean_wh, r.final_regret_se_wh)} "
                         f"| {r.seconds_per_round_mean:.3f} |")
    lines.append("")
    return "\n".join(lines)


def write_summaries(out: Path, table: pd.DataFrame, grid: Grid | None = None,
                    *,
                    energy: pd.DataFrame | None = None, references=()) -> list[Path]:
    """``summary.csv`` and ``summary.md`` in ``out`` (atomic writes), and ``energy.csv`` (the energy
    saved, :func:`summarize_energy`) when ``energy`` is given."""
    csv_path, md_path = out / "summary.csv", out / "summary.md"
    atomic_write_with(csv_path, lambda p: table.to_csv(p, index=False, float_format="%.10g"))
    title = f"evroute compare{' --preset ' + grid.preset if grid is not None and grid.preset else ''}"
    text = summary_markdown(table, grid, title=title, references=references)
    files = [csv_path, md_path]
    if energy is not None and not energy.empty:
        energy_path = out / "energy.csv"
        atomic_write_with(energy_path, lambda p: energy.to_csv(p, index=False, float_format="%.10g"))
        text += "\n" + energy_markdown(energy)
        files.append(energy_path)
    atomic_write_text(md_path, text)
    return files
