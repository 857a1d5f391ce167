"""What the physics prior misses: the residuals f − E_det of an energy atlas, measured.

``evroute sumo atlas --residuals`` asks three questions of the residuals r_e = mean energy of
edge e's traversals − E_det(e), over the edges traversed often enough:

1. *Are they smooth on the road graph, as the kernel assumes?* The correlation of neighbouring
   edges' residuals (the line graph's arcs) beside random pairs (a permutation null), and the
   empirical correlation binned by the prior kernel's (paper 003's combined kernel, ℓ = 1,
   Eq. 134–136; a sample of edges against all, never an E×E matrix).
2. *Are they signal or noise?* The share of their variance that is per-edge signal rather than
   the traversals' own scatter: 1 − mean_e(var_e / n_e) / var(r).
3. *Would edge features predict them?* The cross-validated R² of least squares on the edge's
   features (length, speed limit, grade, lanes, signals, road type, E_det), with and without the
   travel time observed, and on length × speed² alone (5 folds, the split repeated 10 times: a
   few edges far off move one split's R² by about 0.07).

Each is computed for the energy booked whole (``energy_wh``) and at a constant kinetic state
(``edge_wh``) when the table has it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import EvrouteError
from ..priors.network_prior import NetworkPrior

__all__ = ["atlas_residuals", "residual_lines", "cv_r2", "edge_features", "MIN_TRAVERSALS"]

#: Traversals an edge needs for its mean to count.
MIN_TRAVERSALS = 5
#: Edges whose kernel rows are compared with the data's correlation.
KERNEL_SAMPLE = 300
#: The kernel-correlation bins, [lo, hi).
KERNEL_BINS = ((0.0, 0.1), (0.1, 0.2), (0.2, 0.3), (0.3, 0.5), (0.5, 0.99))


def cv_r2(X: np.ndarray, y: np.ndarray, *, folds: int = 5, repeats: int = 10, seed: int = 0) -> float:
    """Mean out-of-fold R² of least squares with an intercept: ``folds`` folds, the shuffled split
    repeated ``repeats`` times (scikit-learn's ``cross_val_score(LinearRegression(), X, y,
    scoring="r2")`` over shuffled KFolds, averaged)."""
    X = np.asarray(X, dtype=float).reshape(len(y), -1)
    y = np.asarray(y, dtype=float)
    rng = np.random.default_rng(seed)
    scores = []
    for _ in range(repeats):
        parts = np.array_split(rng.permutation(y.size), folds)
        for k in range(folds):
            test = parts[k]
            train = np.concatenate([parts[j] for j in range(folds) if j != k])
            coef, *_ = np.linalg.lstsq(np.column_stack([np.ones(train.size), X[train]]), y[train], rcond=None)
            pred = np.column_stack([np.ones(test.size), X[test]]) @ coef
            scores.append(1.0 - float(np.sum((y[test] - pred) ** 2) / np.sum((y[test] - y[test].mean()) ** 2)))
    return float(np.mean(scores))


def edge_features(net, e_det: np.ndarray) -> pd.DataFrame:
    """One row per edge: length, speed limit (and whether it was tagged), grade, lanes, signals,
    the out-degree of its end, E_det, and one indicator column per road type."""
    e = net.edges
    out_degree = e.groupby("u").size()
    base = pd.DataFrame({
        "length": e.length_m, "speed": e.speed_mps, "known": e.maxspeed_known.astype(float), "grade": e.grade,
        "lanes": pd.to_numeric(e.lanes, errors="coerce").fillna(1.0), "signals": (e.signals > 0).astype(float),
        "end_degree": e.v.map(out_degree).fillna(0.0), "e_det": np.asarray(e_det, dtype=float)})
    types = pd.get_dummies(e.highway.astype(str), prefix="highway").astype(float)
    return pd.concat([base, types[sorted(types.columns)]], axis=1)


def atlas_residuals(table: pd.DataFrame, net, e_det: np.ndarray, *, seed: int = 0,
                    min_traversals: int = MIN_TRAVERSALS) -> dict:
    """The residuals of an atlas's traversals against E_det (see the module's text).

    Parameters
    ----------
    table : pandas.DataFrame
        One row per traversal: ``edge``, ``energy_wh``, and optionally ``edge_wh`` and ``seconds``
        (:attr:`evroute.world.sumo_atlas.Atlas.table`).
    net : evroute.roads.network.Network
    e_det : array (E,)
        The physics prior's mean.
    seed : int
        Seeds the permutation null, the kernel sample and the folds.

    Returns
    -------
    dict
        Per column (``energy_wh``, ``edge_wh``): ``edges`` (those with ``min_traversals``),
        ``min_traversals``, ``neighbour_r``, ``random_pairs_r`` and
        ``random_pairs_sd``, ``residual_sd_wh``, ``traversal_sd_wh`` (median over edges),
        ``kernel_bins`` (``lo``, ``hi``, ``kernel``, ``data``), ``signal_share``, ``r2_features``,
        ``r2_with_travel_time`` (None without ``seconds``), ``r2_length_speed2``.
    """
    e_det = np.asarray(e_det, dtype=float)
    n = net.n_edges
    src, dst = np.asarray(net.conn_src), np.asarray(net.conn_dst)
    edges = table.edge.to_numpy()
    counts = np.bincount(edges, minlength=n)
    ok = counts >= max(2, min_traversals)
    idx = np.flatnonzero(ok)
    if idx.size < 10:
        raise EvrouteError(f"only {idx.size} edges have {min_traversals} traversals or more; the residuals need 10 "
                           "(more --probes or --hours)")
    prior = NetworkPrior(net, e_det, "combined", 1.0, 1.0, 2.0, 1.0)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(idx, min(KERNEL_SAMPLE, idx.size), replace=False))
    d = np.sqrt(prior.diag())
    kernel = (prior.rows(rows) / d[rows][:, None] / d[None, :])[:, idx]  # correlations, sample × kept edges
    X0 = edge_features(net, e_det).to_numpy()[ok]
    length, speed = net.edges.length_m.to_numpy(), net.edges.speed_mps.to_numpy()
    travel = None
    if "seconds" in table:
        travel = np.bincount(edges, weights=table.seconds.to_numpy(float), minlength=n)[ok] / counts[ok]
    out = {}
    for column in ("energy_wh", "edge_wh"):
        if column not in table:
            continue
        values = table[column].to_numpy(float)
        sums = np.bincount(edges, weights=values, minlength=n)
        squares = np.bincount(edges, weights=values ** 2, minlength=n)
        mean = sums[ok] / counts[ok]
        var = (squares[ok] - counts[ok] * mean ** 2) / (counts[ok] - 1)  # each edge's traversals, ddof 1
        r = np.full(n, np.nan)
        r[ok] = mean - e_det[ok]
        arcs = ok[src] & ok[dst] & (src != dst)
        neighbour = float(np.corrcoef(r[src[arcs]], r[dst[arcs]])[0, 1]) if arcs.sum() > 2 else float("nan")
        null = [float(np.corrcoef(r[src[arcs]], r[rng.choice(idx, arcs.sum())])[0, 1]) for _ in range(20)] \
            if arcs.sum() > 2 else [float("nan")]
        z = r[ok] - r[ok].mean()
        empirical = np.outer(r[rows] - r[ok].mean(), z) / r[ok].var()
        bins = []
        for lo, hi in KERNEL_BINS:
            sel = (kernel >= lo) & (kernel < hi)
            if sel.any():
                bins.append({"lo": lo, "hi": hi, "kernel": float(kernel[sel].mean()),
                             "data": float(empirical[sel].mean()), "pairs": int(sel.sum())})
        with_time = None
        if travel is not None:
            Xt = np.column_stack([X0, travel, travel * speed[ok] / length[ok]])
            with_time = cv_r2(Xt, r[ok], seed=seed)
        out[column] = {
            "edges": int(idx.size), "min_traversals": int(min_traversals), "neighbour_r": neighbour,
            "random_pairs_r": float(np.mean(null)), "random_pairs_sd": float(np.std(null)), "residual_sd_wh": float(np.std(r[ok])),
            "traversal_sd_wh": float(np.median(np.sqrt(np.maximum(var, 0.0)))), "kernel_bins": bins,
            "signal_share": 1.0 - float(np.mean(var / counts[ok])) / float(np.var(r[ok])),
            "r2_features": cv_r2(X0, r[ok], seed=seed), "r2_with_travel_time": with_time,
            "r2_length_speed2": cv_r2((length * speed ** 2)[ok], r[ok], seed=seed)}
    return out


def residual_lines(res: dict, name: str) -> list[str]:
    """:func:`atlas_residuals` for people: four lines a column."""
    lines = []
    for column, x in res.items():
        booked = "booked whole" if column == "energy_wh" else "at a constant kinetic state"
        bins = "; ".join(f"[{b['lo']:g}, {b['hi']:g}): kernel {b['kernel']:.2f}, data {b['data']:+.3f}"
                         for b in x["kernel_bins"])
        time = "" if x["r2_with_travel_time"] is None else f", with the travel time {x['r2_with_travel_time']:.2f}"
        lines += [f"{name}, residuals f - E_det {booked} ({column}), {x['edges']:,} edges with {x['min_traversals']} "
                  f"traversals or more: sd {x['residual_sd_wh']:.1f} Wh, one edge's traversals' median sd "
                  f"{x['traversal_sd_wh']:.1f} Wh, per-edge signal share {x['signal_share']:.2f}",
                  f"  neighbouring edges correlate at {x['neighbour_r']:+.2f} (random pairs "
                  f"{x['random_pairs_r']:+.2f} ± {x['random_pairs_sd']:.2f})",
                  f"  by the kernel's correlation: {bins}",
                  f"  edge features explain R² {x['r2_features']:.2f} (cross-validated, linear){time}; length x "
                  f"speed limit² alone {x['r2_length_speed2']:.2f}"]
    return lines
