"""Tests of evroute.priors.kernels against independent dense references on small graphs."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp
from scipy.special import gamma, kv

from evroute.errors import EvrouteError
from evroute.priors.kernels import (
    combined_kernel,
    graph_matern,
    incidence_laplacian,
    incidence_matrix,
    line_graph_weights,
    matern52,
    standardize_context,
)
from evroute.priors.linalg import cholesky_with_jitter, jittered_cholesky

try:  # keep the many tiny BLAS calls of this file fast on small, busy machines
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover
    threadpool_limits = None


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    """Small matrices only: one BLAS thread avoids thread hand-off overhead."""
    if threadpool_limits is None:  # pragma: no cover
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


# ---------------------------------------------------------------------------- helpers
def random_road_graph(n_nodes: int, n_edges: int, seed: int):
    """Random directed graph -> (lengths, conn_src, conn_dst) of its line graph."""
    rng = np.random.default_rng(seed)
    G = nx.gnm_random_graph(n_nodes, n_edges, seed=seed, directed=True)
    edges = list(G.edges())
    index = {e: i for i, e in enumerate(edges)}
    LG = nx.line_graph(G)
    pairs = np.array([(index[a], index[b]) for a, b in LG.edges()], dtype=np.int64).reshape(-1, 2)
    lengths = rng.uniform(5.0, 300.0, size=len(edges))
    return lengths, pairs[:, 0], pairs[:, 1]


GRAPHS = [(8, 12, 0), (15, 40, 1), (20, 60, 2), (12, 30, 3)]


@pytest.fixture(params=GRAPHS, ids=lambda p: f"V{p[0]}E{p[1]}s{p[2]}")
def graph(request):
    return random_road_graph(*request.param)


def dense_laplacian(lengths, src, dst):
    """B Bᵀ with B built entry by entry (003 Eq. 132-133)."""
    E, C = len(lengths), len(src)
    mean = sum(lengths) / E
    B = np.zeros((E, C))
    for c in range(C):
        w = mean / lengths[src[c]]
        B[src[c], c] = -w
        B[dst[c], c] = w
    return B @ B.T


def reference_matern(delta: np.ndarray, nu: float, kappa: float) -> np.ndarray:
    """Textbook (2ν/κ² I + Δ)^(−ν), normalised to unit mean diagonal."""
    P = 2.0 * nu / kappa**2 * np.eye(delta.shape[0]) + delta
    if float(nu).is_integer():
        Pinv = np.linalg.inv(P)
        K = np.linalg.matrix_power(Pinv, int(nu))
    else:
        K = np.real(scipy.linalg.fractional_matrix_power(P, -nu))
    return K / np.mean(np.diag(K))


def general_matern(D: np.ndarray, nu: float) -> np.ndarray:
    """2^(1−ν)/Γ(ν) (√(2ν) D)^ν K_ν(√(2ν) D) (003 Eq. 135), 1 at D = 0."""
    z = np.sqrt(2.0 * nu) * D
    out = np.ones_like(z)
    pos = z > 0
    out[pos] = 2.0 ** (1.0 - nu) / gamma(nu) * z[pos] ** nu * kv(nu, z[pos])
    return out


def assert_sym_psd(K: np.ndarray) -> None:
    assert K.dtype == np.float64
    assert np.array_equal(K, K.T)
    scale = np.abs(K).max()
    assert np.linalg.eigvalsh(K).min() >= -1e-10 * scale


# ------------------------------------------------------------------ line graph / Laplacian
def test_line_graph_weights_match_definition(graph):
    lengths, src, dst = graph
    w = line_graph_weights(lengths, src, dst)
    expected = [np.mean(lengths) / lengths[s] for s in src]
    assert w.dtype == np.float64
    np.testing.assert_allclose(w, expected, rtol=1e-14)


def test_incidence_laplacian_equals_loop_built(graph):
    lengths, src, dst = graph
    E = len(lengths)
    lap = incidence_laplacian(E, src, dst, lengths=lengths)
    assert sp.issparse(lap) and lap.format == "csr" and lap.shape == (E, E)
    assert lap.dtype == np.float64
    ref = dense_laplacian(lengths, src, dst)
    np.testing.assert_allclose(lap.toarray(), ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    B = incidence_matrix(E, src, dst, lengths=lengths)
    assert B.shape == (E, len(src))
    np.testing.assert_allclose(np.asarray(B.sum(axis=0)).ravel(), 0.0, atol=1e-12)
    # symmetric PSD, rows sum to zero
    dense = lap.toarray()
    assert np.allclose(dense, dense.T, rtol=0, atol=1e-12)
    np.testing.assert_allclose(dense.sum(axis=1), 0.0, atol=1e-10 * np.abs(dense).max())
    assert np.linalg.eigvalsh(dense).min() >= -1e-10 * np.abs(dense).max()


def test_laplacian_without_connections_is_zero():
    lap = incidence_laplacian(
        3, np.array([], dtype=np.int64), np.array([], dtype=np.int64), lengths=[1.0, 2.0, 3.0]
    )
    assert lap.shape == (3, 3) and lap.nnz == 0
    K = graph_matern(lap)
    np.testing.assert_allclose(K, np.eye(3), atol=1e-15)


# ------------------------------------------------------------------------ graph Matérn
@pytest.mark.parametrize("nu", [1, 2, 3])
def test_precision_and_sparse_equal_eigen(graph, nu):
    lengths, src, dst = graph
    lap = incidence_laplacian(len(lengths), src, dst, lengths=lengths)
    K_eig = graph_matern(lap, nu=nu, kappa=1.0, method="eigen")
    for method in ("precision", "sparse", "auto"):
        K = graph_matern(lap, nu=nu, kappa=1.0, method=method)
        np.testing.assert_allclose(K, K_eig, rtol=1e-8, atol=1e-10)
        assert_sym_psd(K)
        assert np.mean(np.diag(K)) == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize(
    ("nu", "kappa"), [(2.0, 1.0), (1.0, 0.5), (3.0, 2.0), (1.5, 1.0), (0.7, 3.0)]
)
def test_eigen_equals_textbook_formula(graph, nu, kappa):
    lengths, src, dst = graph
    lap = incidence_laplacian(len(lengths), src, dst, lengths=lengths)
    ref = reference_matern(dense_laplacian(lengths, src, dst), nu, kappa)
    K = graph_matern(lap, nu=nu, kappa=kappa, method="eigen")
    np.testing.assert_allclose(K, ref, rtol=1e-7, atol=1e-9)
    assert_sym_psd(K)
    assert np.mean(np.diag(K)) == pytest.approx(1.0, rel=1e-12)
    if float(nu).is_integer():
        K_prec = graph_matern(lap, nu=nu, kappa=kappa, method="precision")
        np.testing.assert_allclose(K_prec, ref, rtol=1e-8, atol=1e-10)


def test_graph_matern_accepts_dense_laplacian(graph):
    lengths, src, dst = graph
    lap = incidence_laplacian(len(lengths), src, dst, lengths=lengths)
    np.testing.assert_allclose(graph_matern(lap.toarray()), graph_matern(lap), rtol=1e-12)


def test_graph_matern_larger_graph_fast_path():
    lengths, src, dst = random_road_graph(80, 300, seed=7)
    lap = incidence_laplacian(len(lengths), src, dst, lengths=lengths)
    K_prec = graph_matern(lap, nu=2, method="precision")
    K_eig = graph_matern(lap, nu=2, method="eigen")
    np.testing.assert_allclose(K_prec, K_eig, rtol=1e-8, atol=1e-10)
    assert np.array_equal(K_prec, K_prec.T)


# ---------------------------------------------------------------------- context kernels
def test_standardize_context():
    rng = np.random.default_rng(0)
    X = np.column_stack(
        [rng.normal(3.0, 5.0, 50), np.full(50, 7.5), rng.uniform(-1, 1, 50), np.full(50, 0.1)]
    )
    X_orig = X.copy()
    Z = standardize_context(X)
    assert Z.dtype == np.float64 and Z.shape == X.shape
    np.testing.assert_array_equal(X, X_orig)  # input untouched
    np.testing.assert_allclose(Z.mean(axis=0), 0.0, atol=1e-14)
    np.testing.assert_allclose(Z[:, [0, 2]].var(axis=0), 1.0, rtol=1e-12)
    assert np.all(Z[:, 1] == 0.0) and np.all(Z[:, 3] == 0.0)
    assert np.all(np.isfinite(Z))


def test_matern52_hand_values():
    # D = 0 -> σ²; D = 1 -> σ² (1 + √5 + 5/3) e^(−√5)
    X1 = np.array([[0.0, 0.0]])
    X2 = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 0.5]])
    K = matern52(X1, X2, lengthscales=[3.0, 0.5], outputscale=2.0)
    assert K.shape == (1, 3)
    np.testing.assert_allclose(
        K[0], [2.0, 2.0 * 0.5239941088318203, 2.0 * 0.5239941088318203], rtol=1e-14
    )
    r = math.sqrt(5.0)
    assert matern52([[0.0]], [[1.0]], 1.0)[0, 0] == pytest.approx(
        (1 + r + 5 / 3) * math.exp(-r), rel=1e-14
    )


def test_matern52_matches_general_matern_with_bessel():
    rng = np.random.default_rng(3)
    X1 = rng.normal(size=(20, 3))
    X2 = rng.normal(size=(15, 3))
    ell = np.array([0.5, 1.3, 2.0])
    D = np.sqrt((((X1[:, None, :] - X2[None, :, :]) / ell) ** 2).sum(axis=-1))  # Eq. 136
    ref = 1.7 * general_matern(D, 2.5)
    np.testing.assert_allclose(matern52(X1, X2, ell, outputscale=1.7), ref, rtol=1e-10)
    # a scalar lengthscale broadcasts to every dimension
    D1 = np.sqrt(((X1[:, None, :] - X2[None, :, :]) ** 2).sum(axis=-1)) / 0.8
    np.testing.assert_allclose(matern52(X1, X2, 0.8), general_matern(D1, 2.5), rtol=1e-10)


# ---------------------------------------------------------------------- combined kernel
@pytest.mark.parametrize("kind", ["combined", "graph", "context"])
def test_combined_kernel_kinds(graph, kind):
    lengths, src, dst = graph
    E = len(lengths)
    rng = np.random.default_rng(5)
    X = standardize_context(rng.normal(size=(E, 3)))
    K_G = graph_matern(incidence_laplacian(E, src, dst, lengths=lengths))
    ell, ell_p = np.array([0.7, 1.0, 2.0]), np.array([3.0, 0.4, 1.1])
    K = combined_kernel(
        K_G, X, ell, lengthscales_prime=ell_p, outputscale_f=1.3, outputscale_prime=0.4, kind=kind, prior_var=2.5
    )
    assert K.shape == (E, E)
    assert_sym_psd(K)
    assert np.mean(np.diag(K)) == pytest.approx(2.5, rel=1e-12)
    if kind == "combined":
        raw = K_G * matern52(X, X, ell, outputscale=1.3) + matern52(X, X, ell_p, outputscale=0.4)
    elif kind == "graph":
        raw = K_G
    else:
        raw = matern52(X, X, ell, outputscale=1.3)
    np.testing.assert_allclose(K, 2.5 * raw / np.mean(np.diag(raw)), rtol=1e-12)


def test_combined_kernel_default_prime_lengthscales():
    rng = np.random.default_rng(6)
    X = rng.normal(size=(10, 2))
    K_G = np.eye(10)
    K = combined_kernel(K_G, X, lengthscales=[0.5, 2.0])
    raw = K_G * matern52(X, X, [0.5, 2.0]) + matern52(X, X, [0.5, 2.0])
    np.testing.assert_allclose(K, raw / np.mean(np.diag(raw)), rtol=1e-12)
    # the ablations do not need the unused input
    assert combined_kernel(K_G, None, kind="graph").shape == (10, 10)
    assert combined_kernel(None, X, kind="context").shape == (10, 10)


# ---------------------------------------------------------------------- bad parameters
def _raises(match, fn, *args, **kwargs):
    with pytest.raises(EvrouteError, match=match) as info:
        fn(*args, **kwargs)
    assert "\n" not in str(info.value)


def test_bad_parameters_raise():
    lengths, src, dst = random_road_graph(8, 12, seed=0)
    E = len(lengths)
    lap = incidence_laplacian(E, src, dst, lengths=lengths)
    X = np.random.default_rng(0).normal(size=(E, 2))
    K_G = graph_matern(lap)
    _raises("kind", combined_kernel, K_G, X, kind="bogus")
    for bad in (np.nan, 0.0, -1.0, [1.0, np.nan], [1.0, 0.0], [1.0, 2.0, 3.0]):
        _raises("lengthscales", combined_kernel, K_G, X, lengthscales=bad)
        _raises("lengthscales", matern52, X, X, bad)
    _raises("lengthscales", combined_kernel, K_G, X, lengthscales=1.0, lengthscales_prime=-2.0)
    _raises("outputscale", matern52, X, X, 1.0, outputscale=0.0)
    _raises("prior_var", combined_kernel, K_G, X, prior_var=np.nan)
    for bad in (0.0, -1.0, np.nan, np.inf):
        _raises("kappa", graph_matern, lap, kappa=bad)
        _raises("nu", graph_matern, lap, nu=bad)
    _raises("nu", graph_matern, lap, nu=1.5, method="precision")
    _raises("method", graph_matern, lap, method="cholmod")
    _raises("laplacian", graph_matern, np.ones((3, 4)))
    _raises("lengths", line_graph_weights, [1.0, 0.0], [0], [1])
    _raises("lengths", incidence_laplacian, 2, [0], [1], lengths=[1.0, np.nan])
    _raises("edge ids", incidence_laplacian, 2, [0], [2], lengths=[1.0, 1.0])
    _raises("K_G", combined_kernel, None, X, kind="combined")
    _raises("X", combined_kernel, K_G, X[:-1])
    _raises("jitter", jittered_cholesky, np.eye(2), jitter=0.0)


# ------------------------------------------------------------------------- Cholesky
def test_jittered_cholesky_rank_deficient():
    rng = np.random.default_rng(11)
    A = rng.normal(size=(40, 5))
    K = A @ A.T  # PSD, rank 5
    L = jittered_cholesky(K)
    assert L.shape == K.shape and np.all(np.isfinite(L))
    np.testing.assert_array_equal(L, np.tril(L))
    np.testing.assert_allclose(L @ L.T, K, atol=1e-5 * np.mean(np.diag(K)))
    L2, added = cholesky_with_jitter(K)
    assert added > 0.0
    np.testing.assert_allclose(L2 @ L2.T, K + added * np.eye(40), atol=1e-10 * np.abs(K).max())


def test_jittered_cholesky_exact_when_pd_and_fails_when_indefinite():
    K = np.array([[4.0, 2.0], [2.0, 3.0]])
    L, added = cholesky_with_jitter(K)
    assert added == 0.0
    np.testing.assert_allclose(L, np.linalg.cholesky(K), rtol=1e-14)
    _raises("Cholesky", jittered_cholesky, -np.eye(3))
    _raises("Cholesky", jittered_cholesky, np.array([[1.0, 0.0], [0.0, -1.0]]), max_tries=3)
