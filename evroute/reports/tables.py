"""Tables of a compare directory that ``evroute plot`` writes beside its figures.

- :func:`coverage_table`: do the logged lower confidence bounds hold (paper 000)?
- :func:`priors_table`: which candidate prior did each policy drive under, and when were the others
  eliminated (paper 004's "which vehicle am I?")?

Each takes the runs of :func:`evroute.reports.figures.load_runs` and returns a
:class:`pandas.DataFrame` (empty when no run has the data); :func:`markdown` renders one.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from ..bandit.agents import LOWER_CONFIDENCE_BOUND, POLICIES
from ..runs.config import normalise_config_json
from ..runs.directory import read_run_json, read_run_table

__all__ = ["bound_curves", "coverage_table", "priors_table", "markdown", "read_table"]


def bound_curves(run_dir: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """Per round t = 1..T of a run: the coverage so far (%, (edge, round) pairs with
    index ≤ truth over all pairs up to t) and the mean gap truth − index on the round's edges (Wh)."""
    obs = read_run_table(run_dir, "observations", ["t", "index_before", "expected_wh"])
    t = obs.t.to_numpy(np.int64) - 1
    T = int(t.max()) + 1 if t.size else 0
    index, truth = obs.index_before.to_numpy(float), obs.expected_wh.to_numpy(float)
    pairs = np.bincount(t, minlength=T).astype(float)
    below = np.bincount(t, weights=(index <= truth).astype(float), minlength=T)
    gap = np.bincount(t, weights=truth - index, minlength=T)
    with np.errstate(invalid="ignore", divide="ignore"):
        return 100.0 * np.cumsum(below) / np.cumsum(pairs), gap / pairs


def coverage_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Do the logged lower confidence bounds hold (paper 000)?

    Parameters
    ----------
    runs : pandas.DataFrame
        Runs as :func:`evroute.reports.figures.load_runs` reads them.

    Returns
    -------
    pandas.DataFrame
        One row per (network, policy) whose logged index is a lower confidence bound: ``runs``;
        ``bound_below_truth_pct``, the share of (edge, round) pairs whose bound lay at or below the
        edge's true expected energy over the whole run (mean over runs); ``empty_set_rounds``, the
        rounds with an empty confidence set (all runs); ``route_bound_below_pct``, for gp-cmm the
        share of rounds whose route-level bound lay below the route's true energy (NaN for others).
    """
    columns = ["network", "policy", "runs", "bound_below_truth_pct", "empty_set_rounds", "route_bound_below_pct"]
    sel = runs[runs.policy_name.isin(set(POLICIES.with_capability(LOWER_CONFIDENCE_BOUND)))]
    rows = []
    for (network, policy), g in sel.groupby(["network", "policy"], sort=False):
        coverage, empty, route_below, rounds = [], 0, 0, 0
        for d in g.dir:
            cov, _ = bound_curves(d)
            coverage.append(cov[-1] if cov.size else np.nan)
            r = read_run_table(d, "rounds")
            rounds += len(r)
            empty += int(r.empty_set.sum()) if "empty_set" in r else 0
            if "path_lower_bound" in r:
                route_below += int((r.path_lower_bound <= r.expected_energy_wh).sum())
        route = 100.0 * route_below / rounds if g.policy_name.iloc[0] == "gp-cmm" and rounds else np.nan
        rows.append([network, policy, len(g), float(np.nanmean(coverage)) if np.isfinite(coverage).any() else np.nan,
                     empty, route])
    return pd.DataFrame(rows, columns=columns)


def _priors_row(run_dir: Path) -> dict:
    """A run as one row of :func:`priors_table`: a candidate-prior policy's (it wrote
    ``priors.parquet``) or an index rule's over one vehicle."""
    cfg, summary = read_run_json(run_dir)
    policy = normalise_config_json(cfg)["policy"]  # the canonical spec
    drift, closures = cfg.get("drift"), cfg.get("closures")
    variant = " ".join(x for x in (f"drift {drift:g}" if drift else "", f"closures {closures}" if closures else "")
                       if x) or "static"
    row = {"variant": variant, "route": summary.get("route"), "policy": policy,
           "vehicle": cfg.get("vehicle") or "sumo-ev", "regret": float(summary["final_cumulative_regret_wh"]),
           "on_true": np.nan, "chosen": Counter(), "eliminated": summary.get("priors_eliminated_at") or {}}
    if not (run_dir / "priors.parquet").is_file():
        return row
    pri = read_run_table(run_dir, "priors", ["t", "chosen"])
    row["chosen"] = Counter(pri.chosen)
    truth = summary.get("truth_prior")
    described = (cfg.get("resolved") or {}).get("candidates")
    if described:  # the truth's own candidate: its vehicle, and the run's drift as its ε
        true_names = [c["name"] for c in described if truth in (c["name"], c["vehicle"])
                      and float(c["eps"]) == float(drift or 0.0)]
    else:
        true_names = [p for p in summary.get("priors", []) if p == truth or p.split("[")[0] == truth]
    row["on_true"] = float(pri.chosen.isin(true_names).mean())
    return row


def priors_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Paper 004's "which vehicle am I?" (Sec. 6), for the runs of a compare directory.

    Parameters
    ----------
    runs : pandas.DataFrame
        Runs as :func:`evroute.reports.figures.load_runs` reads them.

    Returns
    -------
    pandas.DataFrame
        One row per (truth variant, route, policy, vehicle): ``runs``; ``regret_wh`` and
        ``regret_se_wh``, the final regret's mean and standard error over seeds;
        ``on_true_prior_pct``, the share of rounds driven under the true prior (the candidate with
        the truth's vehicle and the run's drift as its ε; NaN for a policy of one prior);
        ``most_chosen``, the two most chosen priors; ``eliminated``, each elimination as
        ``prior@round (seeds/runs)``, the median round over the seeds that eliminated it. Empty
        unless some run compared candidate priors.
    """
    columns = ["variant", "route", "policy", "vehicle", "runs", "regret_wh", "regret_se_wh", "on_true_prior_pct",
               "most_chosen", "eliminated"]
    found = [_priors_row(Path(d)) for d in runs.dir]
    if not any(r["chosen"] for r in found):
        return pd.DataFrame(columns=columns)
    out = []
    df = pd.DataFrame(found)
    for (variant, route, policy, vehicle), g in df.groupby(["variant", "route", "policy", "vehicle"], sort=True):
        reg = g.regret.to_numpy()
        se = float(reg.std(ddof=1) / np.sqrt(reg.size)) if reg.size > 1 else np.nan
        chosen = sum(g.chosen, Counter())
        total = sum(chosen.values())
        most = ", ".join(f"{p} {100 * c / total:.0f} %" for p, c in
                         sorted(chosen.items(), key=lambda kv: (-kv[1], kv[0]))[:2]) if total else "–"
        elim: dict[str, list[int]] = {}
        for e in g.eliminated:
            for p, t in e.items():
                elim.setdefault(p, []).append(int(t))
        eliminated = "; ".join(f"{p}@{int(np.median(ts))} ({len(ts)}/{len(g)})"
                               for p, ts in sorted(elim.items())) or "–"
        on_true = 100.0 * float(g.on_true.mean()) if g.on_true.notna().any() else np.nan
        out.append([variant, route, policy, vehicle, len(g), float(reg.mean()), se, on_true, most, eliminated])
    return pd.DataFrame(out, columns=columns)


def markdown(table: pd.DataFrame, digits: int = 1) -> str:
    """A Markdown table of ``table`` (numbers to ``digits`` decimals, NaN as –; text left, numbers right)."""
    def cell(v) -> str:
        if isinstance(v, float | np.floating):
            return "–" if not np.isfinite(v) else f"{v:,.{digits}f}"
        return str(v)

    numeric = [pd.api.types.is_numeric_dtype(table[c]) for c in table.columns]
    lines = ["| " + " | ".join(map(str, table.columns)) + " |",
             "| " + " | ".join("---:" if n else "---" for n in numeric) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines)


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """A table ``evroute plot`` wrote (its ``# generator`` line skipped)."""
    return pd.read_csv(path, skiprows=1)
