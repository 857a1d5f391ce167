"""Posterior backends against independent references (paper 003, Eq. 2–3)."""

from __future__ import annotations

import numpy as np
import pytest

from evroute.errors import EvrouteError
from evroute.models import (
    BIModel,
    ExactGPModel,
    Option,
    PosteriorModel,
    available_models,
    make_model,
    parse_model_spec,
    register_model,
    unregister_model,
)
from evroute.priors.prior import DensePrior, DiagonalPrior
from evroute.validate import positive_int

from .conftest import has_extra

NOISE = 0.05


def matern52(X: np.ndarray, scale: float = 0.7) -> np.ndarray:
    d = np.sqrt(np.maximum(((X[:, None, :] - X[None, :, :]) ** 2).sum(-1), 0.0))
    r = np.sqrt(5.0) * d
    return scale * (1.0 + r + r * r / 3.0) * np.exp(-r)


def random_problem(E: int = 30, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(E, 3))
    K = matern52(X)
    # a small graph-like (banded, PSD) term
    B = np.zeros((E, E))
    for j in range(3):
        idx = np.arange(E - j)
        B[idx, idx + j] = rng.uniform(0.2, 1.0, E - j)
    K = K + 0.1 * B @ B.T
    K = 0.5 * (K + K.T)
    return rng, K, rng.normal(size=E)


def dense_posterior(K, m, noise, edges, ys):
    """Textbook GP posterior (Eq. 2–3) with every observation listed separately."""
    e = np.asarray(edges, dtype=int)
    y = np.asarray(ys, dtype=float)
    if e.size == 0:
        return m.copy(), np.diag(K).copy(), K.copy()
    gram = K[np.ix_(e, e)] + noise * np.eye(e.size)
    Kx = K[:, e]
    sol = np.linalg.solve(gram, np.column_stack([y - m[e], Kx.T]))
    mean = m + Kx @ sol[:, 0]
    cov = K - Kx @ sol[:, 1:]
    return mean, np.diag(cov).copy(), 0.5 * (cov + cov.T)


def assert_matches(model, K, m, edges, ys, rtol=1e-8):
    mu_ref, var_ref, _ = dense_posterior(K, m, model.noise_var, edges, ys)
    mu, sd = model.mean_std()
    scale = np.max(np.abs(mu_ref)) + 1.0
    np.testing.assert_allclose(mu, mu_ref, rtol=rtol, atol=rtol * 1e-2 * scale)
    np.testing.assert_allclose(sd, np.sqrt(var_ref), rtol=rtol)


# --------------------------------------------------------------------------- exact GP


@pytest.mark.parametrize(
    "opts",
    [
        {},
        {"merge": "always"},
        {"merge": "never"},
        {"merge": "never", "max_active": 6},
        {"refactor_every": 4},
    ],
    ids=["auto", "always", "never", "cap6", "refactor4"],
)
def test_exact_equals_dense_formula_with_every_observation(opts):
    rng, K, m = random_problem(30, seed=1)
    model = ExactGPModel(DensePrior(m, K), NOISE, **opts)
    assert_matches(model, K, m, [], [])
    all_e, all_y = [], []
    for t in range(12):
        # small pool first (many repeats), then the whole network; repeats within a round
        pool = 8 if t < 5 else 30
        e = rng.choice(pool, size=int(rng.integers(1, 14)))
        y = rng.normal(size=e.size)
        model.update(e, y)
        all_e += list(e)
        all_y += list(y)
        assert_matches(model, K, m, all_e, all_y)
    assert model.n_distinct == len(set(all_e))
    np.testing.assert_array_equal(model.counts, np.bincount(all_e, minlength=30))


def test_exact_long_run_exercises_every_path():
    """Many rounds: active-block updates, new-edge columns, merges, refactorisations."""
    rng, K, m = random_problem(30, seed=2)
    model = ExactGPModel(DensePrior(m, K), NOISE, refactor_every=25, max_active=12)
    all_e, all_y = [], []
    n0_seen = set()
    for t in range(80):
        pool = min(30, 4 + t // 3)  # the set of observed edges grows slowly
        e = rng.choice(pool, size=int(rng.integers(3, 12)))
        y = np.sin(e) + 0.2 * rng.normal(size=e.size)
        model.update(e, y)
        all_e += list(e)
        all_y += list(y)
        n0_seen.add(model.factor_sizes)
        if t % 16 == 0 or t == 79:
            assert_matches(model, K, m, all_e, all_y)
    assert model.n_merges > 5
    assert model.n_refactors >= 3
    assert any(b > 0 for _, b in n0_seen)  # the active block was used


def test_exact_detects_drift_and_refactorises():
    rng, K, m = random_problem(30, seed=8)
    model = ExactGPModel(DensePrior(m, K), NOISE, merge="always")
    all_e, all_y = [], []

    def step(edges):
        y = rng.normal(size=len(edges))
        model.update(edges, y)
        all_e.extend(edges)
        all_y.extend(y)

    for _ in range(5):
        step(list(rng.choice(12, size=8)))
    # corrupt the stored base columns: the checks after the next merge must notice
    n0 = model.factor_sizes[0]
    model._C0[:, :n0] += 1e-4 * rng.normal(size=(30, n0))
    step([0, 1, 2])
    assert model.n_check_failures >= 1 and model.n_refactors >= 1
    assert_matches(model, K, m, all_e, all_y)
    # corrupt the preconditioner: the refinement for a never-seen edge must fall back
    failures = model.n_check_failures
    model._sig0 = model._sig0 + 10.0
    step([29, 28])
    assert model.n_check_failures > failures
    assert_matches(model, K, m, all_e, all_y)


@pytest.mark.parametrize("perturb", [0.0, 1e-8, 1e-7, 1e-6, 1e-5], ids=["exact", "1e-8", "1e-7", "1e-6", "1e-5"])
def test_exact_base_solve_is_accurate_however_good_the_preconditioner(perturb):
    """The refinement's stopping rule (error left ≈ rel·ρ/(1−ρ)) against a direct solve.

    With an exact preconditioner one step suffices; a perturbed one (a drifted Σ⁰, larger
    contraction ρ) must take more steps, not return early; a bad one falls back.
    """
    rng, K, m = random_problem(160, seed=4)
    model = ExactGPModel(DensePrior(m, K), NOISE, merge="always")
    for t in range(30):
        e = rng.choice(min(160, 20 + 5 * t), size=25)
        model.update(e, rng.normal(size=e.size))
    n0 = model.factor_sizes[0]
    assert n0 > 100
    S = model._base_edges[:n0]
    A0 = K[np.ix_(S, S)] + np.diag(NOISE / model.counts[S])
    rhs = rng.normal(size=(n0, 7))
    ref = np.linalg.solve(A0, rhs)
    sig = model._sig0.copy()
    noise = rng.normal(size=sig.shape)
    model._sig0 = sig + perturb * np.max(np.abs(sig)) * 0.5 * (noise + noise.T)
    v = model._solve_A0(rhs)
    assert np.max(np.abs(v - ref)) <= 1e-11 * np.max(np.abs(ref))
    # up to 1e-6 the refinement converges (more steps); at 1e-5 it diverges and falls back
    # to a direct solve, scheduling a refactorisation
    assert model._need_refactor == (perturb >= 1e-5)


def test_exact_diagonal_kernel_equals_bi():
    rng = np.random.default_rng(3)
    E = 25
    pv = rng.uniform(0.5, 2.0, E)
    m = rng.normal(size=E)
    gp = ExactGPModel(DensePrior(m, np.diag(pv)), 0.3)
    bi = BIModel(DiagonalPrior(m, pv), 0.3)
    for _ in range(10):
        e = rng.choice(E, size=15)
        y = rng.normal(size=15)
        gp.update(e, y)
        bi.update(e, y)
        for a, b in zip(gp.mean_std(), bi.mean_std(), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_exact_cost_depends_on_distinct_edges():
    rng, K, m = random_problem(30, seed=4)
    for merge in ("auto", "always", "never"):
        model = ExactGPModel(DensePrior(m, K), NOISE, merge=merge)
        model.update(np.full(800, 7), rng.normal(size=800))
        for _ in range(200):
            model.update([7], rng.normal(size=1))
            assert max(model.factor_sizes) <= 1
        assert model.n_distinct == 1
        assert model.counts[7] == 1000
        # one distinct edge: closed form
        c = 1000
        ybar = model._sums[7] / c
        k = K[7, 7]
        mu, sd = model.mean_std()
        np.testing.assert_allclose(mu[7], m[7] + k / (k + NOISE / c) * (ybar - m[7]), rtol=1e-10)
        np.testing.assert_allclose(sd[7] ** 2, k - k * k / (k + NOISE / c), rtol=1e-8)


def test_exact_joint_samples_have_posterior_covariance():
    rng, K, m = random_problem(8, seed=5)
    model = ExactGPModel(DensePrior(m, K), 0.2)
    edges = np.array([0, 0, 1, 3, 3, 3, 5])
    ys = rng.normal(size=edges.size)
    model.update(edges[:4], ys[:4])
    model.update(edges[4:], ys[4:])
    mu_ref, _, cov_ref = dense_posterior(K, m, 0.2, edges, ys)
    np.testing.assert_allclose(model.posterior_cov(), cov_ref, atol=1e-10)
    n = 8_000
    draws = np.array([model.sample(rng, joint=True) for _ in range(n)])
    sd = np.sqrt(np.diag(cov_ref))
    assert np.all(np.abs(draws.mean(0) - mu_ref) < 5 * sd / np.sqrt(n))
    emp = np.cov(draws, rowvar=False)
    se = np.sqrt((np.outer(sd**2, sd**2) + cov_ref**2) / n)
    assert np.all(np.abs(emp - cov_ref) < 5 * se + 1e-12)
    # correlated posterior: joint draws are not independent per edge
    assert np.max(np.abs(cov_ref - np.diag(np.diag(cov_ref)))) > 0.05


@pytest.mark.parametrize("kind", ["exact", "bi"])
def test_independent_samples_match_marginals(kind):
    rng, K, m = random_problem(10, seed=6)
    model = make_model(kind, DensePrior(m, K), noise_var=0.2)
    model.update([1, 1, 2, 4], [0.3, 0.1, -1.0, 2.0])
    mu, sd = model.mean_std()
    n = 20_000
    draws = np.array([model.sample(rng) for _ in range(n)])
    assert np.all(np.abs(draws.mean(0) - mu) < 5 * sd / np.sqrt(n))
    var = draws.var(0, ddof=1)
    assert np.all(np.abs(var - sd**2) < 5 * sd**2 * np.sqrt(2.0 / (n - 1)))
    # independent per edge (the paper's TS): empirical correlations vanish
    corr = np.corrcoef(draws, rowvar=False)
    assert np.max(np.abs(corr - np.eye(10))) < 5 / np.sqrt(n)


def test_mean_std_cached_and_read_only():
    _, K, m = random_problem(10, seed=7)
    model = ExactGPModel(DensePrior(m, K), NOISE)
    a = model.mean_std()
    assert model.mean_std()[0] is a[0] and model.mean_std()[1] is a[1]
    with pytest.raises(ValueError):
        a[0][0] = 1.0
    before = a[0].copy()
    model.update([3], [5.0])
    b = model.mean_std()
    assert b[0] is not a[0]
    np.testing.assert_array_equal(a[0], before)  # earlier results are not changed in place
    assert b[0][3] != before[3]


# --------------------------------------------------------------------------- BI


def test_bi_conjugate_formulas_by_hand():
    m = np.array([1.0, -2.0, 0.5])
    pv = np.array([4.0, 1.0, 0.25])
    s2 = 0.5
    model = BIModel(DiagonalPrior(m, pv), s2)
    model.update([0, 0, 2], [3.0, 1.0, 0.0])
    model.update([0], [2.0])
    mu, sd = model.mean_std()
    # edge 0: 3 observations summing to 6: precision 1/4 + 3/0.5 = 6.25
    # mean (1/4 + 6/0.5) / 6.25 = 12.25 / 6.25 = 1.96
    # edge 1: prior; edge 2: precision 4 + 2 = 6, mean (0.5*4 + 0)/6 = 1/3
    np.testing.assert_allclose(mu, [1.96, -2.0, 1.0 / 3.0], rtol=1e-14)
    np.testing.assert_allclose(sd**2, [1 / 6.25, 1.0, 1.0 / 6.0], rtol=1e-14)
    np.testing.assert_array_equal(model.counts, [3, 0, 1])
    assert model.n_distinct == 2


def test_bi_scalar_prior_var_and_kernel_diagonal():
    m = np.zeros(4)
    a = make_model("bi", DiagonalPrior(m, 2.0), noise_var=1.0)
    b = make_model("bi", DensePrior(m, 2.0 * np.eye(4)), noise_var=1.0)
    for model in (a, b):
        model.update([1, 1], [1.0, 3.0])
        mu, sd = model.mean_std()
        # precision 1/2 + 2 = 2.5, mean 4/2.5 = 1.6
        np.testing.assert_allclose(mu, [0, 1.6, 0, 0], rtol=1e-14)
        np.testing.assert_allclose(sd**2, [2, 0.4, 2, 2], rtol=1e-14)


# --------------------------------------------------------------------------- registry, errors


def test_registry_names_and_errors():
    assert {"bi", "exact", "svgp"} <= set(available_models())
    p = DensePrior(np.zeros(3), np.eye(3))
    with pytest.raises(EvrouteError, match="unknown model"):
        make_model("svgp-typo", p, noise_var=1.0)
    with pytest.raises(EvrouteError, match="unknown option.*lengthscale.*accepted: merge"):
        make_model("exact", p, noise_var=1.0, lengthscale=2.0)
    with pytest.raises(EvrouteError, match="noise_var"):
        make_model("bi", p, noise_var=-1.0)
    with pytest.raises(EvrouteError, match="merge"):
        make_model("exact", p, noise_var=1.0, merge="sometimes")
    with pytest.raises(EvrouteError, match="merge"):
        make_model("exact[merge=sometimes]", p, noise_var=1.0)
    with pytest.raises(EvrouteError, match="given twice"):
        make_model("exact[merge=always]", p, noise_var=1.0, merge="never")
    with pytest.raises(EvrouteError, match="max_active must be a positive integer"):
        make_model("exact[max_active=0.5]", p, noise_var=1.0)
    with pytest.raises(EvrouteError, match="NetworkPrior" if has_extra("svgp") else r"evroute\[svgp\]"):
        make_model("svgp", p, noise_var=1.0)


def test_model_specs_parse_and_convert():
    assert parse_model_spec("exact") == ("exact", {})
    assert parse_model_spec(" SVGP[inducing=500, learn_hyperparameters=false] ") == (
        "svgp", {"inducing": 500, "learn_hyperparameters": False})
    assert parse_model_spec("exact[merge=ALWAYS,check_tol=1e-9]") == ("exact", {"merge": "always", "check_tol": 1e-9})
    for bad, msg in [("svgp[inducing]", "key=value"), ("svgp[inducing=1,inducing=2]", "twice"),
                     ("svgp[inducing=-3]", "positive integer"), ("svgp[learn_noise=maybe]", "true or false"),
                     ("svgp[[x]]", "cannot parse"), ("nope[x=1]", "unknown model")]:
        with pytest.raises(EvrouteError, match=msg):
            parse_model_spec(bad)
    # the spec and the options given separately build the same model
    rng, K, m = random_problem(12, seed=2)
    a = make_model("exact[merge=always,max_active=3]", DensePrior(m, K), noise_var=NOISE)
    b = make_model("exact", DensePrior(m, K), noise_var=NOISE, merge="always", max_active=3)
    assert (a.merge, a.max_active) == (b.merge, b.max_active) == ("always", 3)


def test_register_model_plugs_in_a_backend():
    calls = {}

    def factory(prior, *, noise_var, seed, rank):
        calls["rank"], calls["seed"] = rank, seed
        return BIModel(prior, noise_var)

    opts = (Option("rank", positive_int, 5, "a rank"),)
    register_model("test-dummy", factory, options=opts, overwrite=True)
    try:
        p = DiagonalPrior(np.zeros(2), 1.0)
        model = make_model("test-dummy", p, noise_var=1.0, rank=7, seed=3)
        assert isinstance(model, PosteriorModel) and calls == {"rank": 7, "seed": 3}
        make_model("test-dummy[rank=9]", p, noise_var=1.0)
        assert calls["rank"] == 9
        make_model("test-dummy", p, noise_var=1.0)
        assert calls["rank"] == 5  # the declared default
        with pytest.raises(EvrouteError, match="already registered"):
            register_model("test-dummy", factory, options=opts)
        with pytest.raises(EvrouteError, match="unknown option"):
            make_model("test-dummy", p, noise_var=1.0, ranks=7)
        with pytest.raises(EvrouteError, match="model name"):
            register_model("bad name[x=1]", factory)
    finally:
        unregister_model("test-dummy")
    assert "test-dummy" not in available_models()


@pytest.mark.parametrize("kind", ["exact", "bi"])
def test_bad_updates_raise(kind):
    model = make_model(kind, DensePrior(np.zeros(4), np.eye(4)), noise_var=1.0)
    with pytest.raises(EvrouteError, match="0..3"):
        model.update([4], [1.0])
    with pytest.raises(EvrouteError, match="match"):
        model.update([1, 2], [1.0])
    with pytest.raises(EvrouteError, match="NaN"):
        model.update([1], [np.nan])
    with pytest.raises(EvrouteError, match="integers"):
        model.update([1.5], [1.0])
    model.update([], [])  # an empty round is a no-op
    assert model.n_distinct == 0


def test_bad_kernels_raise():
    with pytest.raises(EvrouteError, match="symmetric"):
        ExactGPModel(DensePrior(np.zeros(2), np.array([[1.0, 0.5], [0.0, 1.0]])), 1.0)
    with pytest.raises(EvrouteError, match="shape"):
        ExactGPModel(DensePrior(np.zeros(3), np.eye(2)), 1.0)
    with pytest.raises(EvrouteError, match="positive definite"):
        model = ExactGPModel(DensePrior(np.zeros(2), np.array([[1.0, 2.0], [2.0, 1.0]])), 1e-9)
        model.update([0, 1], [0.0, 0.0])
    with pytest.raises(EvrouteError, match="joint"):
        PosteriorModel.sample(BIModel(DiagonalPrior(np.zeros(2), 1.0), 1.0), np.random.default_rng(), joint=True)
