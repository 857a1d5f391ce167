"""The residuals of an energy atlas: f − E_det per edge, booked whole (``energy_wh``) and at a
constant kinetic state (``edge_wh``). Needs the sumo extra::

    python reproductions/sumo_residuals.py monaco
    python reproductions/sumo_residuals.py luxembourg --dem "$(evroute data path luxembourg-dem)"

For the edges with at least 5 traversals (route A's atlas, cached by ``evroute sumo atlas``):
the correlation of neighbouring edges' residuals (over the line graph's arcs; a permutation null
beside it), the residuals' spread, the median spread of one edge's traversals, the empirical
correlation binned by the kernel's (the paper's combined kernel, ℓ = 1; 300 edges against all),
the cross-validated R² of a linear model of edge features (5 folds, 10 splits, least squares;
with and without the observed mean travel time) and the share of the residuals' variance that is
per-edge signal rather than traversal noise (1 − mean(var/n) / var of the residuals).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: evroute and the harness
from benchmarks.harness import finish, parser  # noqa: E402
from evroute.physics.energy import load_vehicle  # noqa: E402
from evroute.physics.routes import edge_energies, resolve_route  # noqa: E402
from evroute.priors.network_prior import NetworkPrior  # noqa: E402
from evroute.roads.network import load_network  # noqa: E402
from evroute.roads.oracle import Oracle  # noqa: E402
from evroute.world.sumo_atlas import build_atlas  # noqa: E402


def cv_r2(X: np.ndarray, y: np.ndarray, folds: int = 5, repeats: int = 10, seed: int = 0) -> float:
    """Mean R² of least squares with an intercept over ``folds`` folds, the split repeated
    ``repeats`` times (as scikit-learn's ``cross_val_score(LinearRegression(), X, y,
    scoring="r2")`` with shuffled KFold, averaged over seeds: a few edges far off move one
    split's R² by ±0.07)."""
    rng = np.random.default_rng(seed)
    scores = []
    for _ in range(repeats):
        scores += _fold_scores(X, y, np.array_split(rng.permutation(y.size), folds))
    return float(np.mean(scores))


def _fold_scores(X: np.ndarray, y: np.ndarray, parts: list) -> list[float]:
    folds = len(parts)
    scores = []
    for k in range(folds):
        test = parts[k]
        train = np.concatenate([parts[j] for j in range(folds) if j != k])
        A = np.column_stack([np.ones(train.size), X[train]])
        coef, *_ = np.linalg.lstsq(A, y[train], rcond=None)
        pred = np.column_stack([np.ones(test.size), X[test]]) @ coef
        scores.append(float(1 - np.sum((y[test] - pred) ** 2) / np.sum((y[test] - y[test].mean()) ** 2)))
    return scores


def features(net, e_det: np.ndarray) -> pd.DataFrame:
    e = net.edges
    out_degree = e.groupby("u").size()
    base = pd.DataFrame({
        "length": e.length_m, "speed": e.speed_mps, "known": e.maxspeed_known.astype(float), "grade": e.grade,
        "lanes": pd.to_numeric(e.lanes, errors="coerce").fillna(1.0),
        "signals": (e.signals > 0).astype(float), "end_degree": e.v.map(out_degree).fillna(0.0), "e_det": e_det})
    return pd.concat([base, pd.get_dummies(e.highway.astype(str), prefix="highway").astype(float)], axis=1)


def main(argv=None) -> int:
    ap = parser(__doc__, seed=0)
    ap.add_argument("network")
    ap.add_argument("--dem", default=None)
    ap.add_argument("--route", default="A")
    args = ap.parse_args(argv)
    net = load_network(args.network, dem=args.dem)
    vehicle = load_vehicle(None)
    spec = resolve_route(net, args.route, None, to_point=None)
    atlas = build_atlas(net, args.network, vehicle, oracle=Oracle.from_network(net), start=spec.start, end=spec.end,
                        dem=args.dem)
    e_det = edge_energies(net, vehicle)
    src, dst = np.asarray(net.conn_src), np.asarray(net.conn_dst)
    prior = NetworkPrior(net, e_det, "combined", 1.0, 1.0, 2.0, 1.0)
    X0 = features(net, e_det)
    travel = atlas.table.groupby("edge").seconds.mean().reindex(range(net.n_edges)).to_numpy()
    rng = np.random.default_rng(args.seed)
    lines = []
    for column in ("energy_wh", "edge_wh"):
        mean, _ = atlas.mean_energy(net.n_edges, min_traversals=5, column=column)
        r = mean - e_det
        ok = np.isfinite(r)
        arcs = ok[src] & ok[dst] & (src != dst)
        neighbours = float(np.corrcoef(r[src[arcs]], r[dst[arcs]])[0, 1])
        idx = np.flatnonzero(ok)
        null = [np.corrcoef(r[src[arcs]], r[rng.choice(idx, arcs.sum())])[0, 1] for _ in range(20)]
        spread = float(atlas.table[atlas.table.edge.isin(idx)].groupby("edge")[column].std().median())
        rows = rng.choice(idx, min(300, idx.size), replace=False)
        d = np.sqrt(prior.diag())
        C = (prior.rows(rows) / d[rows][:, None] / d[None, :])[:, idx]
        z = r[ok] - r[ok].mean()
        emp = np.outer(r[rows] - r[ok].mean(), z) / r[ok].var()
        bins = []
        for lo, hi in ((0.0, 0.1), (0.1, 0.2), (0.2, 0.3), (0.3, 0.5), (0.5, 0.99)):
            sel = (C >= lo) & (C < hi)
            if sel.any():
                bins.append(f"[{lo:g}, {hi:g}): kernel {C[sel].mean():.2f}, data {emp[sel].mean():+.3f}")
        X = X0.to_numpy()[ok]
        Xt = np.column_stack([X, np.nan_to_num(travel[ok]), np.nan_to_num(travel[ok] * net.edges.speed_mps.to_numpy()[ok]
                                                                           / net.edges.length_m.to_numpy()[ok])])
        t = atlas.table[atlas.table.edge.isin(idx)].groupby("edge")[column]
        signal = 1.0 - float((t.var() / t.count()).mean()) / float(np.var(r[ok]))
        lines.append(f"{net.name} {column}: {ok.sum():,} edges with 5 traversals or more")
        lines.append(f"  neighbouring edges' residuals correlate at {neighbours:+.2f} (random pairs {np.mean(null):+.2f} "
              f"± {np.std(null):.2f}); residual sd {np.std(r[ok]):.1f} Wh; one edge's traversals' median sd "
              f"{spread:.1f} Wh")
        lines.append("  by the kernel's correlation: " + "; ".join(bins))
        lines.append(f"  edge features' cross-validated R² (linear) {cv_r2(X, r[ok]):.2f}, with the travel time "
              f"{cv_r2(Xt, r[ok]):.2f}; the length times the speed limit squared alone "
              f"{cv_r2((net.edges.length_m * net.edges.speed_mps ** 2).to_numpy()[ok, None], r[ok]):.2f}; "
              f"per-edge signal share {signal:.2f}")
    finish(args.out, f"sumo-residuals-{args.network}", notes=lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
