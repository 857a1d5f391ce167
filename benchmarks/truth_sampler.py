"""The truth sampler of large networks against the exact one: the error its random features add.

The combined kernel σ₀²·normalise(k_G·k_f + k_f′) has no sparse precision; above
``SPARSE_FROM_EDGES`` edges evroute draws its truth by random Fourier features of the context
Matérn times GMRF draws of k_G (:meth:`evroute.priors.network_prior.NetworkPrior.sample_features`). Its
covariance is exact in expectation; this script measures, on a real network where the dense
kernel fits (luxembourg, 5,620 edges), how far the empirical covariance of N feature draws
lies from the kernel, beside N draws of the exact dense sampler (Cholesky of K): the two
errors should be alike (the Monte-Carlo error of N draws), and the feature sampler's excess
is the error it adds.

Usage::

    python benchmarks/truth_sampler.py --draws 1000

Prints a Markdown table: relative Frobenius error of the covariance, mean |error| of the
variances and of the covariances of line-graph neighbours (in units of σ₀²), and the excess
kurtosis of the draws (0 for a Gaussian; features give a slightly heavier tail for finite R).
``tests/test_truth_sampler.py`` runs the same measurement on a small network and checks it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: evroute and the harness
from benchmarks.harness import Table, finish, parser  # noqa: E402
from evroute.physics.routes import edge_energies  # noqa: E402
from evroute.priors.network_prior import RANDOM_FEATURES, NetworkPrior  # noqa: E402
from evroute.roads.network import load_network  # noqa: E402


def stats(draws: np.ndarray, K: np.ndarray, pairs: tuple[np.ndarray, np.ndarray], pv: float) -> dict:
    z = draws - draws.mean(0)
    C = z.T @ z / (len(draws) - 1)
    sd = np.sqrt(np.diag(K))
    kurt = float(np.mean((z / sd) ** 4) - 3.0)
    i, j = pairs
    return {"frob": float(np.linalg.norm(C - K) / np.linalg.norm(K)),
            "var": float(np.mean(np.abs(np.diag(C) - np.diag(K))) / pv),
            "neighbours": float(np.mean(np.abs(C[i, j] - K[i, j])) / pv),
            "kurtosis": kurt}


def measure(net, draws: int, features: int = RANDOM_FEATURES, seed: int = 0) -> dict:
    """``draws`` draws of the exact dense sampler and of the random-feature sampler of the combined
    prior on ``net``, each summarised by :func:`stats` (with its seconds a draw), and σ₀²."""
    pm = edge_energies(net)
    pv = (0.25 * np.std(pm)) ** 2
    prior = NetworkPrior(net, pm, "combined", 1.0, 1.0, 2.0, pv)
    K = np.array(prior.dense())
    pairs = (np.asarray(net.conn_src), np.asarray(net.conn_dst))
    rng = np.random.default_rng(seed)
    t = time.perf_counter()
    dense = np.array([prior.sample(rng) for _ in range(draws)]) - pm
    t_dense = time.perf_counter() - t
    t = time.perf_counter()
    feats = np.array([prior.sample_features(rng, features) for _ in range(draws)]) - pm
    t_feat = time.perf_counter() - t
    return {"prior_var": pv,
            "dense": {**stats(dense, K, pairs, pv), "seconds": t_dense / draws},
            "features": {**stats(feats, K, pairs, pv), "seconds": t_feat / draws}}


def main(argv=None) -> int:
    p = parser(__doc__, seed=0)
    p.add_argument("--network", default="luxembourg")
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--features", type=int, default=RANDOM_FEATURES)
    args = p.parse_args(argv)
    net = load_network(args.network)
    m = measure(net, args.draws, args.features, args.seed)
    table = Table(["sampler", "rel. Frobenius error of Cov", "mean abs error of variances / σ₀²",
                   "mean abs error of neighbour covariances / σ₀²", "excess kurtosis", "s per draw"],
                  title=f"{args.network}: {net.n_edges:,} edges, {args.draws} draws each, σ₀² = {m['prior_var']:.4g} Wh²",
                  stream=False)
    for name, key in (("dense Cholesky (exact)", "dense"), (f"random features R = {args.features} × GMRF", "features")):
        s = m[key]
        table.add(name, f"{s['frob']:.4f}", f"{s['var']:.4f}", f"{s['neighbours']:.4f}", f"{s['kurtosis']:+.3f}",
                  f"{s['seconds']:.3f}")
    finish(args.out, f"truth-sampler-{args.network}", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
