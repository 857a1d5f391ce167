"""Environments: the static GP truth of paper 003 (Sec. 4.1), its noise and its reference route."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evroute.config import SimulationConfig
from evroute.environments import StaticEnvironment, gp_truth
from evroute.policies import rectified_mean
from evroute.prior import NetworkPrior
from evroute.problem import make_environment, prepare_problem


@pytest.fixture(scope="module")
def problem(synthetic):
    return prepare_problem(SimulationConfig(seed=5), net=synthetic)


def test_truth_is_one_draw_of_the_paper_prior(problem):
    prior = NetworkPrior(problem.net, problem.prior_mean, "combined", 1.0, 1.0, 2.0, problem.prior_var)
    want = prior.sample(np.random.default_rng([5, 1]))
    np.testing.assert_array_equal(problem.truth, want)
    again = gp_truth(problem.net, problem.prior_mean, problem.prior_var, 5)  # from the cache
    np.testing.assert_array_equal(again, want)


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
