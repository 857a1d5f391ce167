"""evroute.testing, the checks shipped for third parties, run on every registered agent, truth
and environment (and shown to fail on broken ones)."""

from __future__ import annotations

import numpy as np
import pytest

from evroute.bandit.agents import IndexAgent, agent_names
from evroute.bandit.environments import RoadEnvironment, StaticEnvironment, truth_names
from evroute.bandit.policies import make_policy, rectified_mean
from evroute.models import COVARIANCE
from evroute.testing import MockModel, check_agent, check_environment, check_truth, small_problem

EXAMPLE_OPTIONS = {"rkhs": "rkhs[B=10]"}


@pytest.mark.parametrize("policy", agent_names())
def test_every_agent_passes_the_shipped_checks(policy):
    assert check_agent(policy, rounds=4) == ["routes from start to end", "deterministic"]


#: truths that need an extra installed
TRUTH_EXTRAS = {"sumo": "sumo"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.needs(TRUTH_EXTRAS[n])] if n in TRUTH_EXTRAS else [])
                                  for n in truth_names()])
def test_every_truth_passes_the_shipped_checks(name):
    assert "observe" in check_truth(EXAMPLE_OPTIONS.get(name, name))


@pytest.mark.parametrize("closures,eps", [("alternate", 0.0), ("random[rate=0.05]", 0.0), (None, 0.05)])
def test_road_environments_pass_the_shipped_checks(closures, eps):
    p = small_problem()
    env = RoadEnvironment(p.truth, p.prior.mean, p.prior.sample, float(np.sqrt(p.noise_var)), p.oracle, p.start,
                          p.end, 0, eps=eps, closures=closures)
    check_environment(env, rounds=4)


def test_check_environment_fails_on_a_lying_environment():
    p = small_problem()

    class Lying(StaticEnvironment):
        def optimal_energy(self, t):
            return super().optimal_energy(t) + 1.0

    with pytest.raises(AssertionError, match="optimal_energy"):
        check_environment(Lying(p.truth, 1.0, p.oracle, p.start, p.end, 0))


def test_mock_model_drives_an_index_agent_without_a_gp():
    """BoTorch-style: a fixed belief makes the policy's choice predictable. Greedy's index is the
    mean, so the route is Dijkstra's on the rectified mean (Algorithm 2, line 3), computed here
    independently with networkx."""
    import networkx as nx

    p = small_problem()
    rng = np.random.default_rng(4)
    mean = p.prior.mean + rng.normal(0, 5.0, p.n_edges)  # a belief that is not the prior
    model = MockModel(mean, np.full(p.n_edges, 1e-3), noise_var=p.noise_var, capabilities={COVARIANCE})
    agent = IndexAgent(make_policy("greedy"), model, p.oracle, p.start, p.end, p.prior.mean)
    d = agent.select(1, None, np.random.default_rng(0))
    w = rectified_mean(mean, np.sqrt(p.noise_var))
    g = nx.DiGraph()  # the network's line graph (its allowed turns), weight w[b] on entering edge b
    for a, b in zip(p.net.conn_src, p.net.conn_dst, strict=True):
        g.add_edge(int(a), int(b), weight=w[b])
    best = nx.dijkstra_path_length(g, p.start, p.end) + w[p.start]
    assert d.path[0] == p.start and d.path[-1] == p.end
    assert w[d.path].sum() == pytest.approx(best, rel=1e-12)
    agent.observe(d.path, mean[d.path])
    assert len(model.rounds) == 1 and model.n_distinct == len(set(d.path.tolist()))
    np.testing.assert_array_equal(agent.mean_std()[0], mean)  # the mock ignores the data
    assert model.covariance([0, 1]).shape == (2, 2)
