"""Per-edge observation noise (models/hetero.py): every backend against the textbook posterior
with diag(ς_e² / c_e), computed densely here."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from evroute.errors import EvrouteError
from evroute.models import make_model
from evroute.models.gmrf import GMRFPosterior
from evroute.models.hetero import HeteroscedasticModel, WhitenedPrior
from evroute.models.local import LocalGMRFPosterior
from evroute.physics.routes import edge_energies
from evroute.priors.graph_prior import GraphMaternPrior
from evroute.priors.network_prior import NetworkPrior
from evroute.priors.prior import DiagonalPrior


@pytest.fixture(scope="module")
def small():
    from evroute.physics.energy import load_vehicle
    from evroute.roads.network import load_network

    net = load_network("synthetic", size=80)
    pm = edge_energies(net, load_vehicle(None))
    sd = float(np.std(pm))
    pv = (0.25 * sd) ** 2
    rng = np.random.default_rng(5)
    noise_sd = 0.1 * sd * np.exp(rng.uniform(-1.2, 1.2, net.n_edges))  # a factor 11 between edges
    dense = NetworkPrior(net, pm, "graph", 1.0, 1.0, 2.0, pv)
    return {"net": net, "pm": pm, "pv": pv, "nsd": noise_sd, "dense": dense,
            "gmrf": GraphMaternPrior(net, pm, 1.0, 2.0, pv), "truth": dense.sample(np.random.default_rng(3))}


def rounds(s, n_rounds=8, seed=0):
    rng = np.random.default_rng(seed)
    E = s["net"].n_edges
    core = rng.choice(E, size=12, replace=False)
    out = []
    for t in range(n_rounds):
        e = np.concatenate([core, rng.choice(E, size=8), core[:3]]) if t % 3 else rng.choice(E, size=20)
        out.append((e, s["truth"][e] + s["nsd"][e] * rng.standard_normal(e.size)))
    return out


def textbook(K, m, noise_var, counts, sums):
    """μ, Σ from the dense kernel, each observed edge's mean a pseudo-observation of noise ς_e²/c_e."""
    S = np.flatnonzero(counts)
    A = K[np.ix_(S, S)] + np.diag(noise_var[S] / counts[S])
    G = np.linalg.solve(A, K[S])
    return m + G.T @ (sums[S] / counts[S] - m[S]), K - K[:, S] @ G


@pytest.mark.parametrize(("spec", "which", "tol"), [
    ("exact", "dense", 1e-9), ("exact[update=global]", "gmrf", 1e-9), ("exact[tol=1e-10]", "gmrf", 1e-8),
    ("bi", "diag", 1e-12), ("kalman[eps=0]", "dense", 1e-9), ("window[eps=0]", "dense", 1e-9),
    ("eigen[eps=0,rank=FULL]", "dense", 1e-8), ("nystrom[gamma=1e9]", "dense", 1e-5), ("bkb[qbar=1e9]", "dense", 1e-5)])
def test_every_backend_gives_the_heteroscedastic_posterior(small, spec, which, tol):
    prior = {"dense": small["dense"], "gmrf": small["gmrf"],
             "diag": DiagonalPrior(small["pm"], np.full(small["net"].n_edges, small["pv"]))}[which]
    nv = small["nsd"] ** 2
    spec = spec.replace("FULL", str(small["net"].n_edges))
    model = make_model(spec, prior, noise_var=nv)
    assert isinstance(model, HeteroscedasticModel)
    if which == "gmrf":
        inner = GMRFPosterior if "global" in spec else LocalGMRFPosterior
        assert isinstance(model.inner, inner)  # the sparse backends stay sparse
    K = np.diag(prior.diag()) if which == "diag" else np.asarray(small["dense"].dense())
    for e, y in rounds(small):
        model.update(e, y)
        mean, cov = textbook(K, small["pm"], nv, model.counts.astype(float), model.sums)
        mu, sd = model.mean_std()
        scale = np.sqrt(small["pv"])
        assert np.abs(mu - mean).max() <= tol * scale
        assert np.abs(sd ** 2 - np.diag(cov)).max() <= tol * small["pv"]
    # a homoscedastic model at the mean variance is measurably different: the test can fail
    homo = make_model(spec, prior, noise_var=float(np.mean(nv)))
    for e, y in rounds(small):
        homo.update(e, y)
    assert np.abs(homo.mean_std()[0] - mean).max() > 1e3 * tol * np.sqrt(small["pv"])


def test_covariance_draws_and_evidence_are_of_f(small):
    nv = small["nsd"] ** 2
    model = make_model("kalman[eps=0]", small["dense"], noise_var=nv)
    K = np.asarray(small["dense"].dense())
    data = rounds(small, n_rounds=5)
    for e, y in data:
        model.update(e, y)
    mean, cov = textbook(K, small["pm"], nv, model.counts.astype(float), model.sums)
    idx = np.array([0, 5, 17, int(np.argmax(model.counts))])
    assert np.allclose(model.covariance(idx), cov[np.ix_(idx, idx)], rtol=0, atol=1e-9 * small["pv"])
    # the evidence: every observation jointly Gaussian, N(m_e, K + diag(ς_e²))
    e = np.concatenate([d[0] for d in data])
    y = np.concatenate([d[1] for d in data])
    ref = multivariate_normal(small["pm"][e], K[np.ix_(e, e)] + np.diag(nv[e])).logpdf(y)
    assert model.log_evidence == pytest.approx(ref, rel=1e-9, abs=1e-7)
    # independent draws: mean ± sd of f, edge by edge
    draws = np.array([model.sample(np.random.default_rng(i)) for i in range(400)])
    z = (draws.mean(0) - mean) / np.sqrt(np.diag(cov) / 400)
    assert np.abs(z).max() < 5


def test_the_whitened_prior_keeps_the_precisions_pattern_and_bounds(small):
    s = small["nsd"] / small["nsd"].mean()
    w = WhitenedPrior(small["gmrf"], s)
    Q, Qw = small["gmrf"].precision(), w.precision()
    assert (abs(Q) > 0).nnz == (abs(Qw) > 0).nnz
    assert np.allclose(np.linalg.inv(Qw.toarray()), np.asarray(small["dense"].dense()) / np.outer(s, s), rtol=1e-8,
                       atol=1e-12 * small["pv"])
    assert 0 < w.precision_min_eigenvalue() <= np.linalg.eigvalsh(Qw.toarray()).min() * (1 + 1e-9)


def test_bad_per_edge_noise_is_one_line(small):
    with pytest.raises(EvrouteError, match="positive finite"):
        make_model("exact", small["dense"], noise_var=np.zeros(small["net"].n_edges))
    with pytest.raises(EvrouteError, match="positive finite"):
        make_model("exact", small["dense"], noise_var=np.ones(3))
