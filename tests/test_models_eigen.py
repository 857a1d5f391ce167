"""The truncated-eigenbasis time-varying posterior (models/eigen.py): exact at full rank, the
chain-rule evidence against a dense Gaussian likelihood, the sparse eigenpairs against LAPACK,
and what truncation keeps."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from evroute.errors import EvrouteError
from evroute.models import make_model
from evroute.priors.graph_prior import GraphMaternPrior
from evroute.priors.network_prior import NetworkPrior
from evroute.priors.prior import DensePrior


@pytest.fixture(scope="module")
def setup():
    from evroute.physics.routes import edge_energies
    from evroute.roads.network import load_network

    net = load_network("synthetic", size=70)
    m = edge_energies(net)
    pv, nv = (0.25 * np.std(m)) ** 2, (0.1 * np.std(m)) ** 2
    return net, m, pv, nv, NetworkPrior(net, m, "combined", 1.0, 1.0, 2.0, pv)


def _rounds(m, pv, E, T=6, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(T):
        e = rng.choice(E, size=12)
        e = np.concatenate([e, e[:3]])  # repeats within a round
        out.append((e, m[e] + rng.normal(0.0, np.sqrt(pv), e.size)))
    return out


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_full_rank_equals_the_dense_kalman_filter(setup, eps):
    net, m, pv, nv, prior = setup
    E = net.n_edges
    a = make_model(f"kalman[eps={eps}]", prior, noise_var=nv)
    b = make_model(f"eigen[eps={eps},rank={E}]", prior, noise_var=nv)
    assert b.explained_variance == pytest.approx(1.0, rel=1e-12)
    for e, y in _rounds(m, pv, E):
        a.update(e, y), b.update(e, y)
    scale = np.sqrt(pv)
    np.testing.assert_allclose(b.mean_std()[0], a.mean_std()[0], atol=1e-8 * scale)
    np.testing.assert_allclose(b.mean_std()[1], a.mean_std()[1], atol=1e-8 * scale)
    idx = np.arange(0, E, 7)
    np.testing.assert_allclose(b.covariance(idx), a.covariance(idx), atol=1e-8 * pv)
    assert b.log_evidence == pytest.approx(a.log_evidence, rel=1e-9)


@pytest.mark.parametrize("eps", [0.0, 0.2])
def test_the_evidence_is_the_dense_likelihood_of_every_observation(setup, eps):
    """Summed over rounds, the chain-rule evidence equals ln N(y; m, K∘(1−ε)^{|t−t′|/2} + ς²I)
    over the raw observations (repeats within a round included)."""
    net, m, pv, nv, prior = setup
    model = make_model(f"kalman[eps={eps}]", prior, noise_var=nv)
    data = _rounds(m, pv, net.n_edges, T=5, seed=3)
    for e, y in data:
        model.update(e, y)
    e = np.concatenate([d[0] for d in data])
    y = np.concatenate([d[1] for d in data])
    tt = np.concatenate([np.full(d[0].size, t) for t, d in enumerate(data)])
    C = prior.dense()[np.ix_(e, e)] * (1 - eps) ** (np.abs(tt[:, None] - tt[None, :]) / 2) + nv * np.eye(e.size)
    assert model.log_evidence == pytest.approx(multivariate_normal(m[e], C).logpdf(y), rel=1e-10)


def test_truncation_keeps_the_prior_variance_and_converges(setup):
    """Below full rank the remainder keeps every prior variance exactly; the posterior error
    against the exact time-varying one falls as the rank grows, and the explained share rises."""
    net, m, pv, nv, prior = setup
    E = net.n_edges
    data = _rounds(m, pv, E, T=8, seed=1)
    exact = make_model("kalman[eps=0.05]", prior, noise_var=nv)
    for e, y in data:
        exact.update(e, y)
    errs, shares = [], []
    for r in (10, 40, 120):
        model = make_model(f"eigen[eps=0.05,rank={r}]", prior, noise_var=nv)
        np.testing.assert_allclose(model.mean_std()[1], np.sqrt(prior.diag()), rtol=1e-10)
        for e, y in data:
            model.update(e, y)
        errs.append(np.max(np.abs(model.mean_std()[0] - exact.mean_std()[0])))
        shares.append(model.explained_variance)
    assert errs[0] > errs[1] > errs[2]
    assert shares[0] < shares[1] < shares[2] < 1.0


def test_sparse_eigenpairs_equal_lapack():
    """Lanczos on K = Q⁻¹ (one sparse solve a step) gives the top eigenpairs of the dense K."""
    from evroute.models.eigen import kernel_eigenpairs
    from evroute.roads.network import load_network

    net = load_network("synthetic", size=70)
    gm = GraphMaternPrior(net, np.zeros(net.n_edges), 1.0, 2, 3.0)
    assert gm.representation == "sparse"
    vals, vecs = kernel_eigenpairs(gm, 12)
    dense = DensePrior(np.zeros(net.n_edges), np.linalg.inv(gm.precision().toarray()))
    ref_vals, ref_vecs = kernel_eigenpairs(dense, 12)
    np.testing.assert_allclose(vals, ref_vals, rtol=1e-8)
    gaps = np.abs(np.diff(ref_vals)) > 1e-6 * ref_vals[0]  # eigenvectors are defined where values are simple
    simple = np.flatnonzero(np.r_[gaps, True] & np.r_[True, gaps])
    np.testing.assert_allclose(np.abs(np.sum(vecs[:, simple] * ref_vecs[:, simple], axis=0)), 1.0, atol=1e-6)


def test_bad_settings_are_refused(setup):
    net, m, pv, nv, prior = setup
    assert make_model(f"eigen[rank={net.n_edges + 5}]", prior, noise_var=nv).rank == net.n_edges  # a full basis
    with pytest.raises(EvrouteError, match="rank"):
        make_model("eigen[rank=0]", prior, noise_var=nv)
    with pytest.raises(EvrouteError, match="eps"):
        make_model("eigen[eps=1]", prior, noise_var=nv)
