"""Priors as operators: rows, diagonal, dense, samples and the sparse precision agree with
each other and with independent references."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import evroute.prior as prior_mod
from evroute.errors import EvrouteError
from evroute.kernels import graph_matern, incidence_laplacian
from evroute.prior import DensePrior, DiagonalPrior, NetworkPrior, network_kernel, network_prior


@pytest.fixture(scope="module")
def small():
    from evroute.energy import load_vehicle
    from evroute.network import load_network
    from evroute.routes import edge_energies

    net = load_network("synthetic", size=60)
    return net, edge_energies(net, load_vehicle(None))


@pytest.mark.parametrize("kind", ["combined", "graph", "context"])
def test_network_prior_operator_views_agree(small, kind):
    net, pm = small
    p = NetworkPrior(net, pm, kind, 0.8, 1.0, 2.0, 4.0)
    K = network_kernel(net, kind, 0.8, 1.0, 2.0, 4.0)
    np.testing.assert_array_equal(p.dense(), K)
    idx = np.array([5, 0, 77, 5])
    np.testing.assert_array_equal(p.rows(idx), K[idx])
    np.testing.assert_array_equal(p.block(idx), K[np.ix_(idx, idx)])
    np.testing.assert_array_equal(p.diag(), np.diag(K))
    assert p.prior_var == 4.0 and np.mean(p.diag()) == pytest.approx(4.0)
    assert not p.dense().flags.writeable and not p.mean.flags.writeable


def test_graph_prior_precision_inverts_the_kernel(small):
    """Q = (s/σ₀²)(2ν/κ² I + Δ)^ν is the inverse of σ₀² normalise((2ν/κ² I + Δ)^−ν) (003 Eq. 134)."""
    net, pm = small
    for nu, kappa in ((2.0, 1.0), (1.0, 0.5), (3.0, 2.0)):
        p = NetworkPrior(net, pm, "graph", 1.0, kappa, nu, 2.5)
        assert p.is_markov
        Q = p.precision()
        assert sp.issparse(Q)
        if nu == 1.0:  # the precision itself is as sparse as the line graph
            assert Q.nnz < 0.1 * p.n_edges**2
        np.testing.assert_allclose((Q @ p.dense()), np.eye(p.n_edges), atol=1e-8)
    # the dense eigen route of graph_matern agrees (independent of the precision route)
    lap = incidence_laplacian(net.n_edges, net.conn_src, net.conn_dst, net.edges.length_m.to_numpy())
    K_eig = 2.5 * graph_matern(lap, nu=2.0, kappa=1.0, method="eigen")
    Q = NetworkPrior(net, pm, "graph", 1.0, 1.0, 2.0, 2.5).precision()
    np.testing.assert_allclose(Q @ K_eig, np.eye(net.n_edges), atol=1e-7)


def test_only_markov_priors_have_a_precision(small):
    net, pm = small
    for p in (NetworkPrior(net, pm, "combined"), NetworkPrior(net, pm, "graph", nu=1.5),
              DensePrior(np.zeros(2), np.eye(2))):
        assert not p.is_markov
        with pytest.raises(EvrouteError, match="precision|Markov"):
            p.precision()
    d = DiagonalPrior(np.zeros(3), [1.0, 2.0, 4.0])
    assert d.is_markov
    np.testing.assert_allclose(d.precision().toarray(), np.diag([1.0, 0.5, 0.25]))
    np.testing.assert_allclose(d.rows([2, 0]), np.diag([1.0, 2.0, 4.0])[[2, 0]])


def test_samples_have_the_prior_moments():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(5, 5))
    K = A @ A.T / 5 + 0.1 * np.eye(5)
    m = rng.normal(size=5)
    for p, cov in ((DensePrior(m, K), K), (DiagonalPrior(m, np.diag(K)), np.diag(np.diag(K)))):
        n = 20_000
        draws = np.array([p.sample(rng) for _ in range(n)])
        sd = np.sqrt(np.diag(cov))
        assert np.all(np.abs(draws.mean(0) - m) < 5 * sd / np.sqrt(n))
        se = np.sqrt((np.outer(sd**2, sd**2) + cov**2) / n)
        assert np.all(np.abs(np.cov(draws, rowvar=False) - cov) < 5 * se)


def test_network_prior_sample_is_mean_plus_cholesky_draw(small):
    """The ground-truth recipe of 003 Sec. 4.1: f = m + L z, L the (jittered) Cholesky factor."""
    net, pm = small
    p = network_prior(net, pm)  # σ₀ = 0.25 σ_det by default
    assert p.prior_var == pytest.approx((0.25 * np.std(pm)) ** 2)
    K = p.dense()
    L = np.linalg.cholesky(K + 1e-10 * np.mean(np.diag(K)) * np.eye(p.n_edges)) \
        if np.min(np.linalg.eigvalsh(K)) <= 0 else np.linalg.cholesky(K)
    z = np.random.default_rng([3, 1]).standard_normal(p.n_edges)
    np.testing.assert_allclose(p.sample(np.random.default_rng([3, 1])), pm + L @ z, atol=1e-8 * np.sqrt(p.prior_var))


def test_bad_priors_and_the_dense_limit(small, monkeypatch):
    net, pm = small
    with pytest.raises(EvrouteError, match="kernel"):
        NetworkPrior(net, pm, "rbf")
    with pytest.raises(EvrouteError, match="lengthscale"):
        NetworkPrior(net, pm, lengthscale=0.0)
    with pytest.raises(EvrouteError, match="edges"):
        NetworkPrior(net, pm[:-1])
    with pytest.raises(EvrouteError, match="shape"):
        DensePrior(np.zeros(3), np.eye(2))
    with pytest.raises(EvrouteError, match="positive"):
        DiagonalPrior(np.zeros(2), [1.0, 0.0])
    with pytest.raises(EvrouteError, match="0..1"):
        DiagonalPrior(np.zeros(2), 1.0).rows([2])
    monkeypatch.setattr(prior_mod, "DENSE_MAX_EDGES", 50)
    with pytest.raises(EvrouteError, match="does not fit as a dense matrix"):
        NetworkPrior(net, pm).dense()
