"""The agents' prior against measured traversals: type-II maximum likelihood of σ₀, ς and ℓ, and
a held-out check of the fitted prior.

Measured traversals (an energy atlas, imported drives) are grouped per edge into sufficient
statistics (n_e, ȳ_e, SS_e = Σ (y − ȳ_e)²). Under the prior GP(E_det, σ₀² k_ℓ) with independent
noise ς per traversal, the log marginal likelihood (Rasmussen & Williams 2006, Eq. 2.30, with
repeated inputs grouped) is log N(ȳ | E_det, σ₀² K_ℓ + ς² diag(1/n)) + Σ_e [−(n_e − 1)/2 log(2π ς²)
− SS_e / (2 ς²) − ½ log n_e]: :func:`fit_prior` maximises it (ℓ on a grid, σ₀ and ς by L-BFGS).
:func:`check_prior` fits on one part of the trips and predicts the others' traversals: the
coverage of the predictive intervals and the log predictive density, beside the same prior
without correlations between edges (what the Bayesian-inference baselines assume).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.linalg import cho_solve
from scipy.optimize import minimize
from scipy.stats import norm

from ..errors import EvrouteError
from .linalg import jittered_cholesky
from .network_prior import NetworkPrior
from .noise import edge_noise_std, fit_noise_model, noise_model_spec

__all__ = ["FIT_LENGTHSCALES", "FIT_MAX_EDGES", "edge_statistics", "fit_prior", "check_prior", "fitted_settings"]

#: At most this many of the best-covered edges enter a fit (the dense |O|×|O| block).
FIT_MAX_EDGES = 3000

#: The grid of context lengthscales :func:`fit_prior` tries.
FIT_LENGTHSCALES = (0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)


def edge_statistics(table: pd.DataFrame, n_edges: int, column: str = "edge_wh"):
    """Per edge: the traversals' number, sum and sum of squares of ``column``.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray, numpy.ndarray)
    """
    e = table.edge.to_numpy(np.int64)
    y = table[column].to_numpy(np.float64)
    n = np.bincount(e, minlength=n_edges).astype(np.float64)
    return n, np.bincount(e, weights=y, minlength=n_edges), np.bincount(e, weights=y * y, minlength=n_edges)


def fit_prior(net, e_det, table: pd.DataFrame, *, kernel: str = "combined", kappa: float = 1.0, nu: float = 2.0,
              lengthscales=FIT_LENGTHSCALES, column: str = "edge_wh", what: str = "the traversals",
              noise_sd=None) -> dict:
    """σ₀, ς and the context lengthscale ℓ of the prior GP(E_det, σ₀² k_ℓ) with noise ς, by type-II
    maximum likelihood on ``table``'s traversals (see the module docstring). At most
    :data:`FIT_MAX_EDGES` of the best-covered edges with two traversals or more enter (the dense
    |O|×|O| block);
    ``what`` names the traversals in the error. ``noise_sd`` (length E): a per-edge noise model's
    ς_e (:func:`evroute.priors.noise.fit_noise_model`), held fixed; σ₀ and ℓ are then fitted under it
    and ``noise_std`` reports the root mean square of ς_e over the edges that entered.

    Returns
    -------
    dict
        ``prior_std``, ``noise_std``, ``lengthscale`` (and whether it is at the grid's edge),
        ``edges``, ``traversals``, ``neg_log_likelihood``, ``sigma_det`` and the paper's values.

    Raises
    ------
    EvrouteError
        Fewer than 10 edges with two traversals.
    """
    e_det = np.asarray(e_det, dtype=np.float64)
    n, s1, s2 = edge_statistics(table, net.n_edges, column)
    edges = np.flatnonzero(n >= 2)
    edges = np.sort(edges[np.argsort(-n[edges], kind="stable")[:FIT_MAX_EDGES]])
    if edges.size < 10:
        raise EvrouteError(f"{what} has fewer than 10 edges with two traversals: nothing to fit")
    ne, ybar = n[edges], s1[edges] / n[edges]
    ss = np.maximum(s2[edges] - ne * ybar**2, 0.0)
    resid = ybar - e_det[edges]
    sd0 = float(np.std(e_det))
    fixed = None if noise_sd is None else np.asarray(noise_sd, dtype=np.float64)[edges] ** 2
    best = None
    for ls in lengthscales:
        K = NetworkPrior(net, np.zeros(net.n_edges), kernel, ls, kappa, nu, 1.0).block(edges)

        def nll(theta, K=K):
            s0 = np.exp(2 * theta[0])
            sn = np.exp(2 * theta[1]) if fixed is None else fixed
            L = jittered_cholesky(s0 * K + np.diag(sn / ne), what="the traversals' marginal covariance")
            a = np.linalg.solve(L, resid)
            within = np.sum((ne - 1) * np.log(2 * np.pi * sn) + ss / sn + np.log(ne)) / 2
            return 0.5 * a @ a + np.log(np.diag(L)).sum() + 0.5 * len(resid) * np.log(2 * np.pi) + within
        x0 = np.log([0.25 * sd0, 0.1 * sd0])[: 2 if fixed is None else 1]
        res = minimize(nll, x0=x0, method="L-BFGS-B", bounds=[(np.log(1e-3 * sd0), np.log(10 * sd0))] * x0.size)
        if best is None or res.fun < best[0]:
            sn = float(np.exp(res.x[1])) if fixed is None else float(np.sqrt(np.mean(fixed)))
            best = (float(res.fun), ls, float(np.exp(res.x[0])), sn)
    nll_best, ls, s0, sn = best
    return {"prior_std": s0, "noise_std": sn, "lengthscale": ls,
            "lengthscale_at_grid_edge": ls in (min(lengthscales), max(lengthscales)), "edges": int(edges.size),
            "traversals": int(ne.sum()), "neg_log_likelihood": nll_best, "sigma_det": sd0,
            "paper_prior_std": 0.25 * sd0, "paper_noise_std": 0.1 * sd0}


def _predict(K, m, n, s1, observed, target, noise_var):
    """Posterior mean and variance at ``target`` given the per-edge sums at ``observed`` (indices
    into K's rows), GP(m, K) with noise ``noise_var`` per traversal."""
    ybar = s1[observed] / n[observed]
    nv = noise_var if np.ndim(noise_var) == 0 else np.asarray(noise_var)[observed]  # one ς², or per row of K
    A = K[np.ix_(observed, observed)] + np.diag(nv / n[observed])
    L = jittered_cholesky(A, what="the training traversals' covariance")
    Kto = K[np.ix_(target, observed)]
    mean = m[target] + Kto @ cho_solve((L, True), ybar - m[observed])
    v = np.linalg.solve(L, Kto.T)
    var = np.maximum(np.diag(K)[target] - np.sum(v * v, axis=0), 0.0)
    return mean, var


def check_prior(net, e_det, table: pd.DataFrame, *, kernel: str = "combined", kappa: float = 1.0, nu: float = 2.0,
                seed: int = 0, column: str = "edge_wh", lengthscales=FIT_LENGTHSCALES) -> dict:
    """Fit the prior on half of the trips and predict the other half's traversals.

    The trips are split at random (``seed``) into a training and a held-out half; σ₀, ς and ℓ
    are fitted on the training half (:func:`fit_prior`, on the grid ``lengthscales``); every held-out
    traversal of an edge the training half also drove, or that shares the block, is predicted by
    the posterior N(μ_e, v_e + ς²) of its edge, under the fitted kernel and under the same prior
    without correlations between edges (σ₀² I: each edge learns only from itself).

    Returns
    -------
    dict
        ``fit`` (the hyperparameters), ``train_trips``, ``test_trips``, ``test_traversals``;
        for ``kernel`` and ``independent``: ``coverage_50``, ``coverage_90`` and ``log_density``
        (mean per held-out traversal, nats); ``neighbour_correlation`` of the held-out per-edge
        residuals ȳ − E_det over the line graph's arcs, ``kernel_neighbour_correlation`` (the
        kernel's mean correlation over the same arcs) and ``supported`` (the kernel predicts the
        held-out traversals better than the independent prior).
    """
    e_det = np.asarray(e_det, dtype=np.float64)
    trips = np.array(sorted(table.trip.astype(str).unique()))
    if trips.size < 4:
        raise EvrouteError(f"{trips.size} trips: a check needs at least 4 (half to fit, half to predict)")
    rng = np.random.default_rng(seed)
    train_trips = set(trips[rng.permutation(trips.size)[: trips.size // 2]].tolist())
    is_train = table.trip.astype(str).isin(train_trips).to_numpy()
    train, test = table[is_train], table[~is_train]
    fit = fit_prior(net, e_det, train, kernel=kernel, kappa=kappa, nu=nu, lengthscales=lengthscales, column=column)
    s0, sn = fit["prior_std"] ** 2, fit["noise_std"] ** 2
    n, s1, _ = edge_statistics(train, net.n_edges, column)
    obs = np.flatnonzero(n > 0)
    obs = np.sort(obs[np.argsort(-n[obs], kind="stable")[:FIT_MAX_EDGES]])
    tn, ts1, _ = edge_statistics(test, net.n_edges, column)
    tgt = np.flatnonzero(tn > 0)
    block = np.union1d(obs, tgt)
    if block.size > 2 * FIT_MAX_EDGES:
        tgt = np.intersect1d(tgt, obs)
        block = obs
    where = {int(e): i for i, e in enumerate(block.tolist())}
    o_i = np.array([where[int(e)] for e in obs])
    t_i = np.array([where[int(e)] for e in tgt])
    Kc = s0 * NetworkPrior(net, np.zeros(net.n_edges), kernel, fit["lengthscale"], kappa, nu, 1.0).block(block)
    m = e_det[block]
    nn, ss1 = np.zeros(block.size), np.zeros(block.size)
    nn[o_i], ss1[o_i] = n[obs], s1[obs]
    out = {"fit": fit, "train_trips": len(train_trips), "test_trips": int(trips.size - len(train_trips))}
    rows = test[test.edge.isin(tgt)]
    y = rows[column].to_numpy(np.float64)
    pos = np.searchsorted(tgt, rows.edge.to_numpy())
    out["test_traversals"] = int(y.size)
    cases = [("kernel", Kc, sn), ("independent", s0 * np.eye(block.size), sn)]
    try:  # the per-edge noise model (evroute.priors.noise), fitted on the same half, σ₀ and ℓ under it
        nm = fit_noise_model(net, train, column=column, what="the training half")
    except EvrouteError:
        nm = None
    if nm is not None:
        sd_e = edge_noise_std(net, nm["spec"])
        f2 = fit_prior(net, e_det, train, kernel=kernel, kappa=kappa, nu=nu, lengthscales=lengthscales,
                       column=column, noise_sd=sd_e)
        K2 = f2["prior_std"] ** 2 * NetworkPrior(net, np.zeros(net.n_edges), kernel, f2["lengthscale"], kappa, nu,
                                                  1.0).block(block)
        cases.append(("edge_noise", K2, sd_e[block] ** 2))
        out["noise_model"] = {**nm, "prior_std": f2["prior_std"], "lengthscale": f2["lengthscale"]}
    for name, K, noise in cases:
        mean, var = _predict(K, m, nn, ss1, o_i, t_i, noise)
        mu = mean[pos]
        sd = np.sqrt(var[pos] + (noise if np.ndim(noise) == 0 else noise[t_i][pos]))
        z = np.abs(y - mu) / sd
        out[name] = {"coverage_50": float(np.mean(z <= norm.ppf(0.75))),
                     "coverage_90": float(np.mean(z <= norm.ppf(0.95))),
                     "log_density": float(np.mean(norm.logpdf(y, mu, sd)))}
    # the held-out residuals between neighbours, beside the kernel's correlation there
    r = np.full(net.n_edges, np.nan)
    r[tgt] = ts1[tgt] / tn[tgt] - e_det[tgt]
    src, dst = np.asarray(net.conn_src), np.asarray(net.conn_dst)
    ok = np.isfinite(r[src]) & np.isfinite(r[dst]) & (src != dst) & np.isin(src, block) & np.isin(dst, block)
    out["neighbour_pairs"] = int(ok.sum())
    if ok.sum() >= 10:
        out["neighbour_correlation"] = float(np.corrcoef(r[src[ok]], r[dst[ok]])[0, 1])
        a = np.array([where[int(x)] for x in src[ok]])
        b = np.array([where[int(x)] for x in dst[ok]])
        d = np.sqrt(np.diag(Kc))
        out["kernel_neighbour_correlation"] = float(np.mean(Kc[a, b] / (d[a] * d[b])))
    else:
        out["neighbour_correlation"] = out["kernel_neighbour_correlation"] = math.nan
    out["supported"] = bool(out["kernel"]["log_density"] > out["independent"]["log_density"])
    return out


def fitted_settings(check: dict, rho: float = 1.0) -> dict:
    """The run settings a :func:`check_prior` fit stands for, in another vehicle's units.

    The per-edge noise model's fit where it predicted the held-out traversals better than one
    noise level, the one level's otherwise; σ₀ and the noise (its a, b_per_km and tls) times
    ``rho``, the ratio of the other vehicle's energies to those of the vehicle that drove (as
    ``evroute prior fit --vehicle`` moves a fleet's residuals: :func:`evroute.world.drives.fleet_ratio`), the
    lengthscale as fitted.

    Returns
    -------
    dict
        ``prior_std`` (Wh), ``noise_std`` (Wh, or an ``edge[...]`` spec), ``lengthscale``, ``rho``.
    """
    rho = float(rho)
    if not rho > 0:
        raise EvrouteError(f"the ratio of the two vehicles' energies must be > 0, got {rho:g}")
    if "noise_model" in check and check["edge_noise"]["log_density"] > check["kernel"]["log_density"]:
        nm = check["noise_model"]
        return {"prior_std": rho * nm["prior_std"], "lengthscale": nm["lengthscale"], "rho": rho,
                "noise_std": noise_model_spec(rho * nm["a"], rho * nm["b_per_km"], rho * nm["tls"])}
    fit = check["fit"]
    return {"prior_std": rho * fit["prior_std"], "noise_std": rho * fit["noise_std"],
            "lengthscale": fit["lengthscale"], "rho": rho}
