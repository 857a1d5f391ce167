"""Priors as operators: rows, diagonal, dense, samples and the sparse precision agree with
each other and with independent references."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import evroute.priors.graph_prior as graph_mod
import evroute.priors.network_prior as network_mod
import evroute.priors.prior as prior_mod
from evroute.errors import EvrouteError
from evroute.priors.kernels import graph_matern, incidence_laplacian
from evroute.priors.network_prior import NetworkPrior, network_kernel, network_prior
from evroute.priors.prior import DensePrior, DiagonalPrior


@pytest.fixture(scope="module")
def small():
    from evroute.physics.energy import load_vehicle
    from evroute.physics.routes import edge_energies
    from evroute.roads.network import load_network

    net = load_network("synthetic", size=60)
    return net, edge_energies(net, load_vehicle(None))


@pytest.mark.parametrize("kind", ["combined", "graph", "context"])
def test_network_prior_operator_views_agree(small, kind):
    net, pm = small
    p = NetworkPrior(net, pm, kind, 0.8, 1.0, 2.0, 4.0)
    K = network_kernel(net, kind, 0.8, kappa=1.0, nu=2.0, prior_var=4.0)
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
    lap = incidence_laplacian(net.n_edges, net.conn_src, net.conn_dst, lengths=net.edges.length_m.to_numpy())
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


# --------------------------------------------------------------------------------------
# the sparse graph Matérn prior (a GMRF)
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("nu", [1, 2, 3])
def test_selected_inversion_equals_the_dense_inverse(small, nu):
    from evroute.priors.graph_prior import graph_laplacian
    from evroute.priors.linalg import SparseCholesky

    net, _ = small
    P = (graph_laplacian(net) + sp.identity(net.n_edges) * (2.0 * nu / 0.8**2)).tocsc()
    A = P
    for _ in range(nu - 1):
        A = (A @ P).tocsc()
    chol = SparseCholesky(A)
    dense_inv = np.linalg.inv(A.toarray())
    np.testing.assert_allclose(chol.inverse_diagonal(), np.diag(dense_inv), rtol=1e-10)
    b = np.random.default_rng(0).standard_normal((net.n_edges, 2))
    np.testing.assert_allclose(chol.solve(b), dense_inv @ b, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("fixture", ["monaco", "luxembourg"])
def test_gmrf_prior_equals_the_dense_graph_prior(request, fixture):
    """On the real networks: prior variances, rows and the precision of the sparse prior
    agree with the dense graph Matérn kernel (eigen-free Cholesky route) to 1e-9."""
    from evroute.physics.routes import edge_energies
    from evroute.priors.graph_prior import GraphMaternPrior

    net = request.getfixturevalue(fixture)
    pm = edge_energies(net)
    gmrf = GraphMaternPrior(net, pm, 1.0, 2.0, 3.0)
    K = network_kernel(net, "graph", 1.0, kappa=1.0, nu=2.0, prior_var=3.0)  # the dense computation
    np.testing.assert_allclose(gmrf.diag(), np.diag(K), rtol=1e-9)
    idx = np.array([0, 17, net.n_edges - 1])
    np.testing.assert_allclose(gmrf.rows(idx), K[idx], rtol=1e-9, atol=1e-12 * 3.0)
    Q = gmrf.precision()
    probe = np.random.default_rng(1).standard_normal((net.n_edges, 3))
    np.testing.assert_allclose(Q @ (K @ probe), probe, rtol=1e-7, atol=1e-7)


def test_gmrf_draws_have_the_kernel_as_covariance(small):
    from evroute.priors.graph_prior import GraphMaternPrior

    net, pm = small
    p = GraphMaternPrior(net, pm, 1.0, 2.0, 2.0)
    K = NetworkPrior(net, pm, "graph", 1.0, 1.0, 2.0, 2.0).dense()
    rng = np.random.default_rng(3)
    n = 20_000
    draws = np.array([p.sample(rng) for _ in range(n)]) - pm
    sd = np.sqrt(np.diag(K))
    assert np.all(np.abs(draws.mean(0)) < 5 * sd / np.sqrt(n))
    se = np.sqrt((np.outer(sd**2, sd**2) + K**2) / n)
    assert np.mean(np.abs(np.cov(draws, rowvar=False) - K) < 4 * se) > 0.999


@pytest.mark.parametrize("fixture", ["monaco", "luxembourg"])
def test_exact_backend_on_the_gmrf_equals_the_dense_posterior(request, fixture, monkeypatch):
    """On the sparse prior the exact backend conditions the GMRF (models/gmrf.py): it gives
    the dense posterior (every edge, several rounds) to 1e-8, and GP-UCB drives the same
    routes."""
    monaco = request.getfixturevalue(fixture)
    from evroute.bandit.agents import AgentSetup, make_agent
    from evroute.bandit.environments import StaticEnvironment
    from evroute.bandit.loop import run_loop
    from evroute.models import make_model
    from evroute.physics.routes import edge_energies, resolve_route
    from evroute.priors.graph_prior import GraphMaternPrior
    from evroute.roads.oracle import Oracle

    pm = edge_energies(monaco)
    pv, nv = (0.25 * np.std(pm)) ** 2, (0.1 * np.std(pm)) ** 2
    monkeypatch.setattr(network_mod, "GMRF_FROM_EDGES", 10**9)  # the dense form, as a reference
    dense = NetworkPrior(monaco, pm, "graph", 1.0, 1.0, 2.0, pv)
    assert dense.representation == "dense"
    gmrf = GraphMaternPrior(monaco, pm, 1.0, 2.0, pv)
    truth = dense.sample(np.random.default_rng(9))
    for update, kind in (("global", "GMRFPosterior"), ("local", "LocalGMRFPosterior")):
        a = make_model("exact", dense, noise_var=nv)
        b = make_model(f"exact[update={update}]", gmrf, noise_var=nv)
        assert type(b).__name__ == kind
        rng = np.random.default_rng(5)
        for _ in range(6):
            e = rng.choice(monaco.n_edges, size=40)
            y = truth[e] + np.sqrt(nv) * rng.standard_normal(e.size)
            a.update(e, y)
            b.update(e, y)
            (ma, sa), (mb, sb) = a.mean_std(), b.mean_std()
            np.testing.assert_allclose(mb, ma, rtol=1e-8, atol=1e-8 * np.sqrt(pv))
            np.testing.assert_allclose(sb, sa, rtol=1e-8)
    oracle = Oracle.from_network(monaco)
    trip = resolve_route(monaco, "B")
    paths = []
    for prior in (dense, gmrf):
        env = StaticEnvironment(truth, np.sqrt(nv), oracle, trip.start, trip.end, seed=2)
        agent = make_agent("gp-ucb", AgentSetup(prior, nv, oracle, trip.start, trip.end))
        res = run_loop(env, agent, 25, seed=2)
        paths.append([tuple(p) for p in res.rounds.path])
    assert paths[0] == paths[1]


def test_network_prior_switches_to_the_sparse_representation(small, monkeypatch):
    net, pm = small
    monkeypatch.setattr(network_mod, "GMRF_FROM_EDGES", 50)
    p = NetworkPrior(net, pm, "graph", 1.0, 1.0, 2.0, 2.0)
    assert p.representation == "sparse"
    np.testing.assert_allclose(p.diag(), np.diag(network_kernel(net, "graph", 1.0, kappa=1.0, nu=2.0, prior_var=2.0)), rtol=1e-9)
    assert p._K is None  # no dense matrix was built
    assert NetworkPrior(net, pm, "combined").representation == "dense"
    with pytest.raises(EvrouteError, match="no sparse precision.*integer"):
        graph_mod.GraphMaternPrior(net, pm, 1.0, 1.5)


def test_combined_prior_draws_by_random_features_have_the_kernel_as_covariance(small):
    """Without an E×E matrix: the random-feature draw of σ₀²·normalise(k_G·k_f + k_f′) has
    that covariance (Monte Carlo over draws and features)."""
    net, pm = small
    p = NetworkPrior(net, pm, "combined", 0.8, 1.0, 2.0, 2.0)
    K = network_kernel(net, "combined", 0.8, kappa=1.0, nu=2.0, prior_var=2.0)
    rng = np.random.default_rng(4)
    n = 1500
    draws = np.array([p.sample_features(rng, 16) for _ in range(n)]) - pm
    sd = np.sqrt(np.diag(K))
    assert np.all(np.abs(draws.mean(0)) < 5 * sd / np.sqrt(n))
    se = np.sqrt((np.outer(sd**2, sd**2) + K**2) / n)
    assert np.mean(np.abs(np.cov(draws, rowvar=False) - K) < 4 * se) > 0.995
    with pytest.raises(EvrouteError, match="combined"):
        NetworkPrior(net, pm, "graph").sample_features(rng)


def test_large_networks_draw_their_truth_without_a_dense_kernel(small, monkeypatch):
    from evroute.bandit.truths import gp_truth

    net, pm = small
    monkeypatch.setattr(network_mod, "SPARSE_FROM_EDGES", 50)
    built = []
    monkeypatch.setattr(network_mod, "network_kernel", lambda *a, **k: built.append(1))
    f = gp_truth(net, pm, 2.345, seed=3)  # (a σ₀² no other test caches)
    assert built == [] and f.shape == pm.shape and np.all(np.isfinite(f))
    p = NetworkPrior(net, pm, "combined", 1.0, 1.0, 2.0, 2.345)
    assert p.sampler == f"features-{network_mod.RANDOM_FEATURES}"
    np.testing.assert_array_equal(p.sample(np.random.default_rng([3, 1])), f)  # deterministic
    np.testing.assert_array_equal(gp_truth(net, pm, 2.345, seed=3), f)  # from the cache


@pytest.mark.parametrize("kind", ["combined", "context"])
def test_large_network_priors_give_rows_without_a_dense_matrix(small, kind, monkeypatch):
    """From SPARSE_FROM_EDGES edges the combined and context priors compute rows and the
    diagonal directly (k_G by sparse solves): the dense matrix's values, none built."""
    net, pm = small
    K = network_kernel(net, kind, 0.8, kappa=1.0, nu=2.0, prior_var=2.5)
    monkeypatch.setattr(network_mod, "SPARSE_FROM_EDGES", 50)
    monkeypatch.setattr(network_mod, "network_kernel", lambda *a, **k: pytest.fail("dense kernel built"))
    monkeypatch.setattr(network_mod, "graph_kernel", lambda *a, **k: pytest.fail("dense k_G built"))
    p = NetworkPrior(net, pm, kind, 0.8, 1.0, 2.0, 2.5)
    idx = np.array([3, 0, 90, 3])
    np.testing.assert_allclose(p.rows(idx), K[idx], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(p.diag(), np.diag(K), rtol=1e-9)
    assert p.prior_var == pytest.approx(2.5)


def test_large_networks_prior_variances_come_from_certified_local_solves(synthetic, monkeypatch):
    """Above LOCAL_VARIANCES_ABOVE edges diag(P^−ν) comes from local solves: within its stated
    bound of selected inversion; the prior reports the bound and the local posterior starts
    from it."""
    from evroute.models.local import LocalGMRFPosterior
    from evroute.priors.graph_prior import GraphMaternPrior, graph_matern_inverse_diagonal

    exact, zero = graph_matern_inverse_diagonal(synthetic, 2, 1.0, local=False)
    local, bound = graph_matern_inverse_diagonal(synthetic, 2, 1.0, local=True)
    assert not zero.any() and bound.max() > 0
    assert np.all(np.abs(local - exact) <= bound + 1e-14 * exact)
    assert np.max(bound / local) <= graph_mod.LOCAL_VARIANCES_TOL
    mean = np.linspace(1.0, 2.0, synthetic.n_edges)
    assert GraphMaternPrior(synthetic, mean).diag_error_bound() == 0.0  # small: exact
    monkeypatch.setattr(graph_mod, "LOCAL_VARIANCES_ABOVE", 0)
    gp = GraphMaternPrior(synthetic, mean, prior_var=0.5)
    scale = 0.5 / np.mean(local)
    np.testing.assert_allclose(gp.diag(), scale * local, rtol=1e-15)
    assert gp.diag_error_bound() == pytest.approx(scale * bound.max(), rel=1e-12)
    m = LocalGMRFPosterior(gp, 0.01, tol=1e-8)
    assert m.var_error_bound == pytest.approx(gp.diag_error_bound() / np.mean(gp.diag()), rel=1e-12)


def test_precision_ordering_is_a_nested_dissection_of_the_precision_kept_on_disk(small, tmp_path, monkeypatch):
    """The graph Matérn prior's order is nested dissection of its precision's pattern (any κ),
    the same from a fresh cache and from disk; a prior that shifts the mean keeps its base's;
    other sparse-precision priors compute theirs once."""
    from evroute.priors.graph_prior import GraphMaternPrior
    from evroute.priors.linalg import nested_dissection
    from evroute.priors.prior import ShiftedPrior

    net, pm = small
    monkeypatch.setenv("EVROUTE_CACHE_DIR", str(tmp_path / "cache"))
    gp = GraphMaternPrior(net, pm, 1.0, 2.0, 1.0)
    rank = gp.precision_ordering()
    assert np.array_equal(rank, nested_dissection(gp.precision())) and not rank.flags.writeable
    assert gp.precision_ordering() is rank  # kept
    with monkeypatch.context() as mp:  # another κ: read from disk
        mp.setattr(graph_mod, "nested_dissection", lambda A: pytest.fail("not read from disk"))
        again = GraphMaternPrior(net, pm, 0.5, 2.0, 3.0).precision_ordering()
    assert np.array_equal(again, rank)
    assert ShiftedPrior(gp, pm + 1.0).precision_ordering() is rank
    npr = NetworkPrior(net, pm, "graph", 1.0, 1.0, 1.0, 1.0)
    assert np.array_equal(npr.precision_ordering(), nested_dissection(npr.precision()))
    assert npr.precision_ordering() is npr.precision_ordering()


# --------------------------------------------------------------------------------------
# the vehicle scale: f = a m + g, a ~ N(1, s²)
# --------------------------------------------------------------------------------------


def test_the_vehicle_scale_is_a_rank_one_term_and_is_learnt_as_a_regression():
    """K + s² m mᵀ in every view; with a negligible base prior the posterior of a is Bayesian
    linear regression of the edges' means on m (closed form), and the exact posterior moves an
    edge it never observed by that a (the BI baseline, independent edges, does not)."""
    from evroute.models import make_model
    from evroute.priors.prior import DensePrior, DiagonalPrior, VehicleScalePrior

    rng = np.random.default_rng(0)
    E = 40
    m = rng.uniform(20.0, 200.0, E) * np.where(rng.random(E) < 0.2, -0.3, 1.0)  # some downhill edges
    base = DensePrior(m, 1e-6 * np.eye(E))
    s = 0.5
    p = VehicleScalePrior(base, s)
    dense = base.dense() + s * s * np.outer(m, m)
    np.testing.assert_allclose(p.dense(), dense, rtol=1e-14)
    np.testing.assert_allclose(p.rows([3, 7]), dense[[3, 7]], rtol=1e-14)
    np.testing.assert_allclose(p.diag(), np.diag(dense), rtol=1e-14)
    np.testing.assert_allclose(p.independent_variance(), np.diag(dense), rtol=1e-14)
    draws = np.array([p.sample(np.random.default_rng(i)) for i in range(2000)])
    a = (draws @ m) / (m @ m)  # each draw's scale
    assert a.mean() == pytest.approx(1.0, abs=4 * s / np.sqrt(2000)) and a.std() == pytest.approx(s, rel=0.1)

    truth, nv = 1.6 * m, 25.0
    seen = np.arange(0, E, 3)
    edges = np.repeat(seen, 2)
    y = truth[edges] + 5.0 * rng.standard_normal(edges.size)
    counts = np.bincount(edges, minlength=E)
    sums = np.bincount(edges, weights=y, minlength=E)
    got_mean, got_sd = p.scale_posterior(counts, sums, nv)
    d = (1e-6 + nv / counts[seen])  # the edges' means: ȳ = a m + noise of variance 1e-6 + ς²/n
    prec = 1 / s**2 + np.sum(m[seen] ** 2 / d)
    ref = (1 / s**2 + np.sum(m[seen] * (sums[seen] / counts[seen]) / d)) / prec
    assert got_mean == pytest.approx(ref, rel=1e-9) and got_sd == pytest.approx(prec ** -0.5, rel=1e-6)
    assert got_mean == pytest.approx(1.6, abs=0.01)

    gp = make_model("exact", p, noise_var=nv)
    bi = make_model("bi", DiagonalPrior(m, p.independent_variance()), noise_var=nv)
    for model in (gp, bi):
        model.update(edges, y)
    never = 1  # not in seen
    assert gp.mean_std()[0][never] == pytest.approx(got_mean * m[never], rel=1e-6)
    assert bi.mean_std()[0][never] == m[never]


def test_the_vehicle_scale_along_a_direction_is_a_rank_one_term_and_learnt_from_the_joint_gaussian():
    """f = m + (a − 1) d + g: K + s² d dᵀ in every view, draws move along d, and a's posterior
    is the conditional of the joint Gaussian of (a, the observed edges' means) written densely."""
    from evroute.priors.prior import DensePrior, VehicleScalePrior

    rng = np.random.default_rng(3)
    E = 30
    m = rng.uniform(20.0, 200.0, E)
    d = np.where(rng.random(E) < 0.5, rng.normal(0.0, 30.0, E), 0.0)  # a fleet's residuals: some edges
    A = rng.standard_normal((E, E))
    K = A @ A.T / E * 4.0
    base, s = DensePrior(m, K), 0.4
    p = VehicleScalePrior(base, s, d)
    dense = K + s * s * np.outer(d, d)
    np.testing.assert_allclose(p.dense(), dense, rtol=1e-13)
    np.testing.assert_allclose(p.rows([2, 9]), dense[[2, 9]], rtol=1e-13)
    np.testing.assert_allclose(p.diag(), np.diag(dense), rtol=1e-13)
    assert p.mean is base.mean
    g = base.sample(np.random.default_rng(5))
    z = np.random.default_rng(5)
    z.standard_normal(E)  # (the base's draw first, then a's)
    assert np.allclose(p.sample(np.random.default_rng(5)), g + s * z.standard_normal() * d)

    seen = np.array([0, 3, 4, 8, 15])
    counts = np.zeros(E)
    counts[seen] = [1, 2, 3, 1, 4]
    ybar = m[seen] + 1.3 * d[seen] + rng.normal(0.0, 2.0, seen.size)
    sums = np.zeros(E)
    sums[seen] = ybar * counts[seen]
    nv = 9.0
    C = dense[np.ix_(seen, seen)] + np.diag(nv / counts[seen])  # Cov(ȳ_O)
    c = s * s * d[seen]  # Cov(a, ȳ_O)
    ref_mean = 1.0 + c @ np.linalg.solve(C, ybar - m[seen])
    ref_sd = np.sqrt(s * s - c @ np.linalg.solve(C, c))
    got_mean, got_sd = p.scale_posterior(counts, sums, nv)
    assert got_mean == pytest.approx(ref_mean, rel=1e-10) and got_sd == pytest.approx(ref_sd, rel=1e-8)
    with pytest.raises(EvrouteError, match="direction"):
        VehicleScalePrior(base, s, d[:-1])


def test_the_vehicle_scale_refuses_a_sparse_precision():
    from evroute.priors.graph_prior import GraphMaternPrior
    from evroute.priors.prior import VehicleScalePrior
    from evroute.roads.network import load_network

    net = load_network("synthetic", size=60)
    with pytest.raises(EvrouteError, match="sparse precision"):
        VehicleScalePrior(GraphMaternPrior(net, np.ones(net.n_edges)), 0.3)


def test_edge_scaled_prior_is_d_k_d_with_its_correlations_and_sparse_precision(synthetic):
    """EdgeScaledPrior against the dense D K D (D = S⁻¹): rows, diagonal, dense, a draw, the BI
    variance, the default mean m / s, and on the GMRF the precision S Q S (the inverse of D K D)
    with a valid eigenvalue bound."""
    from evroute.priors.graph_prior import GraphMaternPrior
    from evroute.priors.prior import EdgeScaledPrior

    net = synthetic
    mean = np.linspace(1.0, 2.0, net.n_edges)
    d = np.random.default_rng(0).uniform(0.2, 1.0, net.n_edges)
    new_mean = mean + 0.5
    for base in (NetworkPrior(net, mean, "graph", 1.0, 1.0, 2.0, 0.7), GraphMaternPrior(net, mean, 1.0, 2.0, 0.7)):
        K = np.asarray(base.dense())
        p = EdgeScaledPrior(base, 1.0 / d, new_mean)  # (the covariance divided by s_i s_j)
        expected = d[:, None] * K * d[None, :]
        np.testing.assert_allclose(p.dense(), expected, rtol=1e-12)
        np.testing.assert_allclose(p.rows([3, 1]), expected[[3, 1]], rtol=1e-12)
        np.testing.assert_allclose(p.diag(), np.diag(expected), rtol=1e-12)
        np.testing.assert_allclose(p.independent_variance(), d ** 2 * base.prior_var, rtol=1e-12)
        corr = expected / np.sqrt(np.outer(np.diag(expected), np.diag(expected)))
        np.testing.assert_allclose(corr, K / np.sqrt(np.outer(np.diag(K), np.diag(K))), rtol=1e-10, atol=1e-12)
        draw = p.sample(np.random.default_rng(5))
        np.testing.assert_allclose(draw, new_mean + d * (base.sample(np.random.default_rng(5)) - mean), rtol=1e-12)
        if base.is_markov:
            assert p.is_markov and p.representation == base.representation
            Q = p.precision().toarray()
            np.testing.assert_allclose(Q @ expected, np.eye(net.n_edges), atol=1e-8)
            assert p.precision_min_eigenvalue() <= np.linalg.eigvalsh(Q).min() * (1 + 1e-9)
    with pytest.raises(EvrouteError, match="positive"):
        EdgeScaledPrior(base, np.r_[0.0, d[1:]], mean)
    np.testing.assert_allclose(EdgeScaledPrior(base, 1.0 / d).mean, mean * d, rtol=1e-12)
