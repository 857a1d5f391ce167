"""Agents: the index agent against its definition (003 Algorithm 1–2) and networkx, the
registry of policy names, a plug-in agent running through ``simulate``."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from evroute.bandit.agents import (
    Agent,
    AgentSetup,
    Decision,
    IndexAgent,
    agent_names,
    make_agent,
    register_agent,
    unregister_agent,
)
from evroute.bandit.policies import beta_ucb, rectified_mean
from evroute.errors import EvrouteError
from evroute.runs.config import SimulationConfig
from evroute.runs.problem import agent_prior, prepare_problem
from evroute.runs.simulation import simulate


@pytest.fixture(scope="module")
def problem(synthetic):
    return prepare_problem(SimulationConfig(seed=2), net=synthetic)


def setup_of(problem, model="exact"):
    prior = agent_prior(SimulationConfig(), problem)
    return AgentSetup(prior, problem.noise_var, problem.oracle, problem.route.start, problem.route.end, model=model)


def nx_route(net, weights, start, end):
    """Dijkstra on the line graph with networkx: a path's cost is the sum of its edges' weights."""
    g = nx.DiGraph()
    for a, b in zip(net.conn_src, net.conn_dst, strict=True):
        g.add_edge(int(a), int(b), w=float(weights[b]))
    path = nx.dijkstra_path(g, start, end, weight="w")
    return path, float(weights[path].sum())


def test_index_agent_is_algorithm_2(problem):
    """GP-UCB: index μ − √β_t σ, rectified with ς, the cheapest route under those weights."""
    agent = make_agent("gp-ucb", setup_of(problem))
    assert isinstance(agent, IndexAgent)
    rng = np.random.default_rng(0)
    for t in (1, 2, 3):
        mu, sd = (a.copy() for a in agent.mean_std())
        d = agent.select(t, None, rng)
        beta = beta_ucb(t, problem.net.n_edges)
        index = mu - math.sqrt(beta) * sd
        assert d.beta == pytest.approx(beta)
        np.testing.assert_allclose(d.index, index[d.path], rtol=1e-12)
        np.testing.assert_array_equal(d.mean, mu[d.path])
        np.testing.assert_array_equal(d.std, sd[d.path])
        np.testing.assert_array_equal(d.prior_mean, problem.prior_mean[d.path])
        w = rectified_mean(index, math.sqrt(problem.noise_var))
        path, cost = nx_route(problem.net, w, problem.route.start, problem.route.end)
        assert float(w[d.path].sum()) == pytest.approx(cost, rel=1e-12)
        agent.observe(d.path, problem.truth[d.path])
    assert agent.n_distinct > 0


def test_unavailable_edges_are_avoided(problem):
    agent = make_agent("bi-greedy", setup_of(problem))
    first = agent.select(1, None, np.random.default_rng(0)).path
    mask = np.ones(problem.net.n_edges, dtype=bool)
    mask[first[len(first) // 2]] = False
    again = agent.select(1, mask, np.random.default_rng(0)).path
    assert first[len(first) // 2] not in set(again.tolist())


def test_bi_agents_ignore_the_kernel(problem):
    """bi-* agents see the prior mean and σ₀² only: no dense covariance is built."""
    setup = setup_of(problem)
    agent = make_agent("bi-ts", setup)
    assert setup.prior._K is None
    _, sd = agent.mean_std()
    np.testing.assert_allclose(sd, math.sqrt(problem.prior_var))


def test_registry_names_options_and_errors(problem):
    assert agent_names()[:4] == ["gp-ucb", "gp-bucb", "gp-ts", "gp-greedy"]
    with pytest.raises(EvrouteError, match="unknown policy"):
        make_agent("gp-magic", setup_of(problem))
    with pytest.raises(EvrouteError, match="unknown option.*xi.*accepted: beta_scale"):
        make_agent("gp-ucb", setup_of(problem), xi=0.5)
    with pytest.raises(EvrouteError, match="already registered"):
        register_agent("gp-ucb", lambda setup: None)
    agent = make_agent("gp-bucb", setup_of(problem), xi=0.5)
    assert agent.policy.xi == 0.5 and agent.policy.omega == 1.0


class ShortestAgent(Agent):
    """A plug-in agent: always the shortest route (a baseline that never learns)."""

    def __init__(self, setup, net):
        self.setup, self.length = setup, net.edges.length_m.to_numpy()
        self._counts = np.zeros(net.n_edges, np.int64)

    def select(self, t, available, rng):
        path = np.asarray(self.setup.oracle.shortest_path(self.length, self.setup.start, self.setup.end,
                                                          available=available).edges, dtype=np.int64)
        nan = np.full(path.size, np.nan)
        return Decision(path, math.nan, nan, nan, nan, self.setup.prior.mean[path])

    def observe(self, path, values):
        np.add.at(self._counts, path, 1)

    def mean_std(self):
        return self.setup.prior.mean, np.sqrt(self.setup.prior.diag())

    @property
    def n_distinct(self):
        return int(np.count_nonzero(self._counts))


def test_a_registered_agent_runs_through_simulate(tmp_path, synthetic):
    register_agent("test-shortest", lambda setup: ShortestAgent(setup, synthetic), overwrite=True)
    try:
        res = simulate(SimulationConfig(policy="test-shortest", horizon=4, seed=1, kernel="context"),
                       tmp_path / "r", net=synthetic)
    finally:
        unregister_agent("test-shortest")
    assert "test-shortest" not in agent_names()
    paths = res.rounds.path.map(tuple)
    assert paths.nunique() == 1  # the same route every round
    obs = pd.read_parquet(tmp_path / "r" / "observations.parquet")
    assert obs.index_before.isna().all()
    assert res.summary["distinct_edges_observed"] == len(paths.iloc[0])


def test_logged_index_is_the_lower_confidence_bound(tmp_path, synthetic):
    """index_before = post_mean_before − √β_t post_std_before for GP-UCB (β_t from rounds.parquet)."""
    out = tmp_path / "ucb"
    simulate(SimulationConfig(policy="gp-ucb", horizon=8, seed=4), out, net=synthetic)
    obs = pd.read_parquet(out / "observations.parquet")
    beta = pd.read_parquet(out / "rounds.parquet").set_index("t").beta
    want = obs.post_mean_before - np.sqrt(obs.t.map(beta)) * obs.post_std_before
    np.testing.assert_allclose(obs.index_before, want, rtol=1e-10, atol=1e-9)
