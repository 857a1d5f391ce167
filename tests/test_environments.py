"""Environments: the static GP truth of paper 003 (Sec. 4.1), its noise and its reference route."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evroute.bandit.environments import StaticEnvironment
from evroute.bandit.policies import rectified_mean
from evroute.bandit.truths import gp_truth
from evroute.priors.network_prior import NetworkPrior
from evroute.runs.config import SimulationConfig
from evroute.runs.problem import make_environment, prepare_problem


@pytest.fixture(scope="module")
def problem(synthetic):
    return prepare_problem(SimulationConfig(seed=5, truth="gp"), net=synthetic)


def test_truth_is_one_draw_of_the_paper_prior(problem):
    prior = NetworkPrior(problem.net, problem.prior_mean, "combined", 1.0, 1.0, 2.0, problem.prior_var)
    want = prior.sample(np.random.default_rng([5, 1]))
    np.testing.assert_array_equal(problem.truth, want)
    again = gp_truth(problem.net, problem.prior_mean, problem.prior_var, seed=5)  # from the cache
    np.testing.assert_array_equal(again, want)


def test_the_default_truth_is_the_floor_plus_a_lognormal_excess_with_mean_e_det(synthetic):
    """The default truth: f = floor + (E_det − floor) exp(s z − s²/2), z the paper's draw (stream
    [seed, 1]) at unit variance per edge, s such that the mean variance over the edges is σ₀².
    Its formula against a Monte-Carlo estimate over draws of z from the kernel (an independent
    Cholesky): the mean of f is E_det on every edge and the edges' mean variance σ₀²; the run's f
    never falls below the floor, it conserves energy, and a drifting f stays above it too."""
    from evroute.bandit.truths import lognormal_truth, truth_kernel
    from evroute.physics.energy import energy_floor_wh

    p = prepare_problem(SimulationConfig(seed=5), net=synthetic)
    e = synthetic.edges
    floor, _ = energy_floor_wh(e.length_m.to_numpy(), e.grade.to_numpy(), p.vehicle)
    assert p.ground_truth.conserves and np.all(p.truth >= floor) and p.ground_truth.description["truth"] == "lognormal"
    f, z, s, transform, innovation = lognormal_truth(synthetic, p.prior_mean, p.prior_var, floor=floor, seed=5)
    np.testing.assert_array_equal(f, p.truth)
    np.testing.assert_allclose(transform(z), f)
    excess = p.prior_mean - floor
    assert math.exp(s * s) - 1 == pytest.approx(p.prior_var / np.mean(excess**2))
    K = truth_kernel(synthetic, np.zeros(synthetic.n_edges), 1.0).dense()
    L = np.linalg.cholesky(K + 1e-10 * np.eye(K.shape[0]))
    draws = (np.random.default_rng(0).standard_normal((8000, synthetic.n_edges)) @ L.T) / np.sqrt(np.diag(K))
    fs = transform(draws)
    se = fs.std(0) / math.sqrt(len(fs))
    assert np.mean(np.abs(fs.mean(0) - p.prior_mean) / se) < 1.2  # |z|'s mean is 0.8 for an unbiased mean
    assert np.mean(fs.var(0)) == pytest.approx(p.prior_var, rel=0.15)
    drift = make_environment(SimulationConfig(seed=5, drift=0.3), p)
    for t in (2, 5, 9):
        assert np.all(drift.expected(t) >= floor) and not np.array_equal(drift.expected(t), f)


def test_observations_are_truth_plus_gaussian_noise(problem):
    env = make_environment(SimulationConfig(seed=5), problem)
    path = env.reference_route(1)
    n = 4000
    obs = np.array([env.observe(t, path) for t in range(1, n + 1)])
    sd = math.sqrt(problem.noise_var)
    assert np.all(np.abs(obs.mean(0) - problem.truth[path]) < 5 * sd / math.sqrt(n))
    assert np.all(np.abs(obs.std(0, ddof=1) / sd - 1) < 5 * math.sqrt(1 / (2 * n)))
    twin = make_environment(SimulationConfig(seed=5), problem)  # same seed, same noise
    np.testing.assert_array_equal(twin.observe(1, path), obs[0])


def test_reference_route_is_the_rectified_oracle_on_the_truth(problem):
    env = StaticEnvironment(problem.truth, math.sqrt(problem.noise_var), problem.oracle, problem.route.start,
                            problem.route.end, seed=0)
    w = rectified_mean(problem.truth, math.sqrt(problem.noise_var))
    ref = env.reference_route(3)
    want = problem.oracle.shortest_path(w, problem.route.start, problem.route.end).edges
    np.testing.assert_array_equal(ref, want)
    assert env.optimal_energy(1) == pytest.approx(float(problem.truth[ref].sum()))
    assert env.available(1) is None
    assert not env.expected(1).flags.writeable


# --- paper 004's environments: drift and closures -------------------------------------------


def _road_env(eps=0.0, closures=None, seed=0):
    from evroute.bandit.environments import RoadEnvironment
    from evroute.physics.routes import edge_energies, resolve_route
    from evroute.priors.network_prior import NetworkPrior
    from evroute.roads.network import load_network
    from evroute.roads.oracle import Oracle

    net = load_network("synthetic", size=70)
    m = edge_energies(net)
    pv = (0.25 * np.std(m)) ** 2
    prior = NetworkPrior(net, np.zeros(net.n_edges), "combined", 1.0, 1.0, 2.0, pv)
    f0 = m + prior.sample(np.random.default_rng(seed))
    trip = resolve_route(net, "A")
    env = RoadEnvironment(f0, m, prior.sample, 0.1 * np.std(m), Oracle.from_network(net), trip.start, trip.end,
                          seed, eps=eps, closures=closures)
    return env, m, prior


def test_drift_has_the_time_varying_kernel():
    """f_t − m stays a draw of GP(0, K) and Cov(f_t, f_{t+k}) = (1 − ε)^{k/2} K (Monte Carlo over
    rounds and edges, normalised by K's diagonal)."""
    eps = 0.2
    env, m, prior = _road_env(eps=eps)
    d = np.sqrt(prior.diag())
    Z = np.array([(env.expected(t) - m) / d for t in range(1, 801)])
    assert np.mean(Z**2) == pytest.approx(1.0, abs=0.08)
    for k in (1, 2, 4):
        corr = np.mean(Z[:-k] * Z[k:]) / np.mean(Z**2)
        assert corr == pytest.approx((1 - eps) ** (k / 2), abs=0.05)


def test_alternate_closures_hide_the_best_corridor_every_other_round(tmp_path):
    env, _, _ = _road_env(closures="alternate")
    first = env.reference_route(1)
    assert env.available(1) is None
    mask = env.available(2)
    assert mask is not None and not mask[env.closures.corridor].any() and mask[[env.start, env.end]].all()
    assert np.intersect1d(env.reference_route(2), env.closures.corridor).size == 0
    assert np.intersect1d(first, env.closures.corridor).size == env.closures.corridor.size
    # an agent only drives open roads
    import pandas as pd

    from evroute.roads.network import load_network
    from evroute.runs.config import SimulationConfig
    from evroute.runs.problem import make_environment, prepare_problem
    from evroute.runs.simulation import simulate

    cfg = SimulationConfig(policy="gp-ucb", horizon=6, closures="alternate")
    net = load_network("synthetic", size=70)
    simulate(cfg, tmp_path / "run", net=net)
    corridor = make_environment(cfg, prepare_problem(cfg, net=net)).closures.corridor  # the run's own
    obs = pd.read_parquet(tmp_path / "run" / "observations.parquet")
    assert obs.edge.isin(corridor).any()  # (driven in the odd rounds)
    assert not obs[(obs.t % 2 == 0) & obs.edge.isin(corridor)].size


def test_random_closures_have_their_rate_and_keep_the_trip_possible():
    env, _, _ = _road_env(closures="random[rate=0.1]", seed=3)
    masks = [env.available(t) for t in range(1, 41)]
    closed = np.mean([1 - mk.mean() for mk in masks])
    assert closed == pytest.approx(0.1, abs=0.03)
    assert all(mk[env.start] and mk[env.end] for mk in masks)
    again, _, _ = _road_env(closures="random[rate=0.1]", seed=3)
    assert np.array_equal(again.available(7), masks[6])
