"""Index rules and rectification (paper 003, Algorithm 2, Theorem 3.1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, special, stats

from evroute.bandit.policies import (
    BayesUCBPolicy,
    GreedyPolicy,
    ThompsonPolicy,
    UCBPolicy,
    beta_bucb,
    beta_ucb,
    bucb_quantile_z,
    eta_bucb,
    make_policy,
    rectified_mean,
)
from evroute.errors import EvrouteError
from evroute.models import BIModel, ExactGPModel
from evroute.priors.prior import DensePrior, DiagonalPrior

# --------------------------------------------------------------------------- β_t and η_t
# Reference values computed separately with mpmath at 40 digits from the paper's formulas:
#   β_UCB = 2 ln(|A| t² / √(2π)),  η = √(2π)^ω / (2 |A|^ω t^ξ),  β_BUCB = 2 erfinv(1 − 2η)².

UCB_CASES = [
    ((1, 5600), 15.423166687037135719),
    ((10, 5600), 24.633507059013318455),
    ((500, 5600), 40.28159908072590269),
    ((37, 120), 22.180778069731644282),
]

BUCB_CASES = [  # (t, |A|, ω, ξ), η, β
    ((1, 5600, 1, 1), 0.00022380609594919647343, 12.322161022876882321),
    ((10, 5600, 1, 1), 0.000022380609594919647343, 16.657996238116395484),
    ((500, 5600, 1, 1), 4.4761219189839294686e-7, 24.141240505496792199),
    ((10, 5600, 1.5, 2), 4.7350314191419823639e-8, 28.479402223494511672),
    ((500, 5600, 1, 0.5), 0.000010008912886424872677, 18.18759677747600724),
    ((3, 40, 2, 1), 0.00065449846949787359135, 10.329795709510724544),
]


@pytest.mark.parametrize(("args", "expected"), UCB_CASES)
def test_beta_ucb_hand_values(args, expected):
    assert beta_ucb(*args) == pytest.approx(expected, rel=1e-13)


def test_beta_ucb_scale():
    assert beta_ucb(10, 5600, scale=0.5) == pytest.approx(12.316753529506659228, rel=1e-13)


@pytest.mark.parametrize(("args", "eta", "beta"), BUCB_CASES)
def test_eta_and_beta_bucb_hand_values(args, eta, beta):
    t, n, w, x = args
    assert eta_bucb(t, n, omega=w, xi=x) == pytest.approx(eta, rel=1e-12)
    assert beta_bucb(t, n, omega=w, xi=x) == pytest.approx(beta, rel=1e-10)
    # the erfinv form of the spec agrees with the quantile form used internally
    assert 2 * special.erfinv(1 - 2 * eta) ** 2 == pytest.approx(beta, rel=1e-8)
    z = bucb_quantile_z(t, n, omega=w, xi=x)
    assert z == pytest.approx(stats.norm.ppf(eta), rel=1e-12)
    assert beta_bucb(t, n, omega=w, xi=x, scale=0.5) == pytest.approx(0.5 * beta, rel=1e-10)


def test_bucb_eta_above_half_gives_signed_beta():
    # |A| = 2, t = 1: η = √(2π)/4 ≈ 0.6267 > 0.5, so the quantile lies above the median
    eta = eta_bucb(1, 2)
    assert eta == pytest.approx(0.6266570686577501256, rel=1e-13)
    z = bucb_quantile_z(1, 2)
    assert z == pytest.approx(0.32301238481909739277, rel=1e-12)
    beta = beta_bucb(1, 2)
    assert beta == pytest.approx(-(z**2), rel=1e-12)
    # tiny η does not underflow
    assert math.isfinite(beta_bucb(10**6, 10**6, omega=40, xi=40))


# --------------------------------------------------------------------------- indices


def small_model():
    rng = np.random.default_rng(0)
    E = 12
    X = rng.normal(size=(E, 2))
    d = np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1))
    K = (1 + np.sqrt(5) * d + 5 / 3 * d**2) * np.exp(-np.sqrt(5) * d)
    model = ExactGPModel(DensePrior(rng.normal(size=E), K), 0.1)
    model.update([0, 0, 3, 5], [1.0, 1.2, -0.4, 0.0])
    return model


def test_ucb_index():
    model = small_model()
    mu, sd = model.mean_std()
    for scale in (1.0, 0.5):
        idx, beta = UCBPolicy(beta_scale=scale).indices(model, 7, None)
        assert beta == pytest.approx(scale * 2 * math.log(12 * 49 / math.sqrt(2 * math.pi)))
        np.testing.assert_allclose(idx, mu - math.sqrt(beta) * sd, rtol=1e-14)
        assert np.all(idx <= mu)  # energy is a cost: optimistic = lower bound


def test_ucb_negative_beta_is_clipped():
    model = BIModel(DiagonalPrior(np.zeros(1), 1.0), 1.0)
    assert beta_ucb(1, 1) < 0
    idx, beta = UCBPolicy().indices(model, 1, None)
    assert beta == 0.0
    np.testing.assert_array_equal(idx, [0.0])


@pytest.mark.parametrize(("omega", "xi", "t"), [(1, 1, 1), (1, 1, 50), (1.5, 2, 9), (1, 0.5, 400)])
def test_bucb_index_is_the_eta_quantile(omega, xi, t):
    model = small_model()
    mu, sd = model.mean_std()
    eta = eta_bucb(t, model.n_arms, omega, xi=xi)
    idx, beta = BayesUCBPolicy(omega=omega, xi=xi).indices(model, t, None)
    np.testing.assert_allclose(idx, stats.norm.ppf(eta, mu, sd), rtol=1e-11, atol=1e-12)
    assert eta < 0.5 and beta > 0
    np.testing.assert_allclose(idx, mu - math.sqrt(beta) * sd, rtol=1e-11, atol=1e-12)


def test_bucb_eta_above_half_index_is_still_the_quantile():
    model = BIModel(DiagonalPrior(np.array([1.0, 2.0]), np.array([1.0, 4.0])), 1.0)
    eta = eta_bucb(1, 2)
    idx, beta = BayesUCBPolicy().indices(model, 1, None)
    mu, sd = model.mean_std()
    np.testing.assert_allclose(idx, stats.norm.ppf(eta, mu, sd), rtol=1e-12)
    assert beta < 0 and np.all(idx > mu)
    np.testing.assert_allclose(idx, mu - np.sign(beta) * math.sqrt(abs(beta)) * sd)


def test_bucb_beta_scale():
    model = small_model()
    mu, sd = model.mean_std()
    idx, beta = BayesUCBPolicy(beta_scale=0.5).indices(model, 10, None)
    assert beta == pytest.approx(0.5 * beta_bucb(10, 12))
    np.testing.assert_allclose(idx, mu - math.sqrt(beta) * sd, rtol=1e-12)


def test_greedy_and_thompson():
    model = small_model()
    mu, sd = model.mean_std()
    idx, beta = GreedyPolicy().indices(model, 3, None)
    assert math.isnan(beta)
    np.testing.assert_array_equal(idx, mu)
    rng = np.random.default_rng(1)
    n = 20_000
    pol = ThompsonPolicy()
    draws = np.array([pol.indices(model, 3, rng)[0] for _ in range(n)])
    assert math.isnan(pol.indices(model, 3, rng)[1])
    assert np.all(np.abs(draws.mean(0) - mu) < 5 * sd / np.sqrt(n))
    var = draws.var(0, ddof=1)
    assert np.all(np.abs(var - sd**2) < 5 * sd**2 * np.sqrt(2.0 / (n - 1)))
    # joint TS: draws from the full posterior covariance
    joint = ThompsonPolicy(joint=True).indices(model, 3, rng)[0]
    assert joint.shape == mu.shape and np.all(np.isfinite(joint))


def test_weights_rectify():
    model = small_model()
    rng = np.random.default_rng(2)
    pol = UCBPolicy()
    idx, beta = pol.indices(model, 5, rng)
    w, beta2 = pol.weights(model, 5, rng)
    assert beta2 == beta
    np.testing.assert_allclose(w, rectified_mean(idx, math.sqrt(model.noise_var)), rtol=1e-15)
    assert np.all(w > 0)
    raw, _ = pol.weights(model, 5, rng, rectify=False)
    np.testing.assert_array_equal(raw, idx)


# --------------------------------------------------------------------------- rectification


def quad_rectified(mu, s):
    """E[max(0, z)] = ς ∫_{−a}^∞ (u + a) φ(u) du, a = μ/ς (substituting z = μ + ς u)."""
    a = mu / s
    lo = -a
    val, _ = integrate.quad(
        lambda u: (u + a) * stats.norm.pdf(u), lo, np.inf, epsabs=0.0, epsrel=1e-13, limit=200
    )
    return s * val


@pytest.mark.parametrize("mu", [-60.0, -30.0, -12.0, -3.0, -0.4, 0.0, 0.7, 4.0, 50.0])
def test_rectified_mean_vs_quad(mu):
    s = 1.5
    got = float(rectified_mean(mu, s))
    ref = quad_rectified(mu, s)
    assert got > 0
    assert got == pytest.approx(ref, rel=1e-9)


@pytest.mark.parametrize("mu", [-2.0, -0.3, 0.0, 1.1])
def test_rectified_mean_vs_monte_carlo(mu):
    rng = np.random.default_rng(3)
    s = 0.8
    z = np.maximum(mu + s * rng.standard_normal(1_000_000), 0.0)
    got = float(rectified_mean(mu, s))
    assert abs(got - z.mean()) < 5 * z.std() / 1e3


def test_rectified_mean_extremes():
    mu = np.array([-1e6, -1e3, -40.0, -37.0, 0.0, 1e3, 1e300, np.inf, -np.inf])
    w = rectified_mean(mu, 1.0)
    assert np.all(np.isfinite(w[:-2])) and not np.any(np.isnan(w))
    assert np.all(w > 0)
    assert w[4] == pytest.approx(1 / math.sqrt(2 * math.pi), rel=1e-15)
    assert w[5] == pytest.approx(1e3, rel=1e-15)
    assert w[7] == np.inf
    # zero noise: max(μ, 0) (floored at the smallest positive float)
    np.testing.assert_allclose(rectified_mean([-1.0, 2.0], 0.0), [np.finfo(float).tiny, 2.0])
    # broadcasting with per-edge noise
    np.testing.assert_allclose(
        rectified_mean([0.0, 0.0], [1.0, 2.0]), np.array([1.0, 2.0]) / math.sqrt(2 * math.pi)
    )
    # monotone in μ
    grid = np.linspace(-30, 30, 2001)
    assert np.all(np.diff(rectified_mean(grid, 1.0)) >= 0)


def test_rectified_mean_bad_input():
    with pytest.raises(EvrouteError):
        rectified_mean([0.0], -1.0)
    with pytest.raises(EvrouteError):
        rectified_mean([np.nan], 1.0)


# --------------------------------------------------------------------------- names and options


def test_policy_names_come_from_the_agents_registry():
    from evroute.bandit.agents import agent_names, policy_family, resolve_policy

    names = agent_names()
    for fam in ("gp", "bi"):
        for rule in ("ucb", "bucb", "ts", "greedy"):
            assert f"{fam}-{rule}" in names
    assert resolve_policy(" GP-TS ").name == "gp-ts" and policy_family("gp-ts") == "gp"
    for bad in ("ts", "gp-", "gp-thompson", "xx-ucb", ""):
        with pytest.raises(EvrouteError):
            resolve_policy(bad)


def test_make_policy():
    assert isinstance(make_policy("ucb"), UCBPolicy)
    p = make_policy("bucb", omega=1.5, xi=2.0)
    assert isinstance(p, BayesUCBPolicy) and (p.omega, p.xi) == (1.5, 2.0)
    assert make_policy("TS", joint=True).joint is True
    assert isinstance(make_policy("greedy"), GreedyPolicy)
    with pytest.raises(EvrouteError, match="unknown policy rule"):
        make_policy("thompson")
    with pytest.raises(EvrouteError, match="unknown option"):
        make_policy("ucb", omega=1.0)


@pytest.mark.parametrize(
    ("rule", "param"),
    [("ucb", "beta_scale"), ("bucb", "omega"), ("bucb", "xi"), ("bucb", "beta_scale")],
)
@pytest.mark.parametrize("value", [float("nan"), -0.5, float("inf"), "abc"])
def test_bad_parameters_raise_one_line(rule, param, value):
    with pytest.raises(EvrouteError, match=param) as exc:
        make_policy(rule, **{param: value})
    assert "\n" not in str(exc.value)


def test_bad_round_raises():
    model = small_model()
    for pol in (UCBPolicy(), BayesUCBPolicy(), ThompsonPolicy(), GreedyPolicy()):
        with pytest.raises(EvrouteError, match="round"):
            pol.indices(model, 0, np.random.default_rng())
    with pytest.raises(EvrouteError):
        beta_ucb(1, 0)
    with pytest.raises(EvrouteError, match="joint"):
        ThompsonPolicy(joint="maybe")
    assert ThompsonPolicy(joint="yes").joint is True  # as gp-ts[joint=yes]: the class's declaration converts


def _fitted_gp():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((12, 3))
    K = X @ X.T + 0.5 * np.eye(12)
    model = ExactGPModel(DensePrior(np.full(12, 5.0), K), noise_var=0.3)
    e = np.array([0, 0, 3, 5, 5, 5, 9])
    model.update(e, rng.normal(5.0, 1.0, e.size))
    return model


def test_paper_radii_are_converted_once():
    """β=001: EK-UCB's index μ̃ − β̃ σ̃ with σ̃² = σ²/λ (the papers' 1/λ-scaled units), written in
    evroute's μ − √β σ form with β = β̃²/λ."""
    from evroute.bandit.policies import gp_beta_from_radius

    model = _fitted_gp()
    mu, sd = model.mean_std()
    idx, beta = UCBPolicy(beta="001", radius=0.1).indices(model, 7, None)
    np.testing.assert_allclose(idx, mu - 0.1 * sd / math.sqrt(0.3), rtol=1e-14)
    assert beta == pytest.approx(gp_beta_from_radius(0.1, 0.3)) == pytest.approx(0.01 / 0.3)


def test_bkb_width_is_the_authors_formula():
    """β=002 is batch-bkb's ``_update_beta`` written out independently: logdet = Σ_j c_j σ̃²_j ·
    ln n (σ̃² = σ²/λ), β̃ = √λ F + √(ς² (logdet + ln(1/δ))), index μ − β̃ σ̃ (λ = ς²)."""
    model = _fitted_gp()
    mu, sd = model.mean_std()
    lam = 0.3
    c = model.counts.astype(float)
    logdet = np.sum(c * sd**2 / lam) * np.log(c.sum())
    radius = math.sqrt(lam) * 2.0 + math.sqrt(lam * (logdet + math.log(1 / 0.1)))
    idx, beta = UCBPolicy(beta="002", fnorm=2.0, delta=0.1).indices(model, 3, None)
    np.testing.assert_allclose(idx, mu - radius * sd / math.sqrt(lam), rtol=1e-12)
    assert beta == pytest.approx(radius**2 / lam)


def test_beta_rules_through_specs_and_configs():
    from evroute.bandit.agents import resolve_policy
    from evroute.runs.config import SimulationConfig
    from evroute.runs.grid import policy_tag

    cfg = SimulationConfig(policy="gp-ucb[beta=002,beta_scale=0.5,fnorm=3]")
    assert (cfg.policy.name, cfg.policy["beta_scale"], cfg.policy["beta"], cfg.policy["fnorm"]) == ("gp-ucb", 0.5, "002", 3.0)
    spec = resolve_policy("gp-ucb[beta=001,radius=0.5]")
    assert spec.label == "gp-ucb[beta=001,radius=0.5]" and policy_tag(spec) == "-beta001-radius0.5"
    assert SimulationConfig.from_json({"policy": "gp-ucb", "policy_options": {"beta": "001", "radius": 0.5}}).policy == spec
    assert resolve_policy("gp-ucb[beta=003]").label == "gp-ucb"  # the default is no variant
    for bad in ("gp-ucb[beta=004]", "gp-ts[beta=001]", "gp-ucb[radius=-1]"):
        with pytest.raises(EvrouteError) as err:
            SimulationConfig(policy=bad)
        assert "\n" not in str(err.value)
