"""Junctions learnt online (evroute.bandit.turns, evroute.world.junctions): the turns' posterior
against the conjugate closed form and against a dense Gaussian-process computation with the
kernel over turns, a Monte-Carlo estimate of its draws, physics' prior of a turn, the
environment's turn observations, agents that learn a dear junction after driving it once, and
an oracle that is the only way the truth's turns reach an agent."""

from __future__ import annotations

import numpy as np
import pytest

from evroute.bandit.environments import StaticEnvironment, Truth, Turns
from evroute.bandit.turns import TurnBelief, TurnPrior, turn_weights
from evroute.errors import EvrouteError
from evroute.roads.oracle import Oracle


def test_independent_turns_are_the_conjugate_update_and_their_draws_match_it():
    rng = np.random.default_rng(0)
    m0, v0, s2 = np.array([1.0, -2.0, 5.0, 0.0]), np.array([4.0, 9.0, 1.0, 2.0]), 3.0
    belief = TurnBelief(TurnPrior(m0, v0), s2)
    arcs = np.array([0, 0, 2, 0, 1])  # a turn may repeat in a walk
    y = rng.normal(0.0, 3.0, arcs.size)
    belief.update(arcs[:2], y[:2])
    belief.update(arcs[2:], y[2:])
    n = np.bincount(arcs, minlength=4)
    total = np.bincount(arcs, weights=y, minlength=4)
    var = 1.0 / (1.0 / v0 + n / s2)
    mean = var * (m0 / v0 + total / s2)
    mu, sd = belief.mean_std()
    np.testing.assert_allclose(mu, mean, rtol=1e-12)
    np.testing.assert_allclose(sd, np.sqrt(var), rtol=1e-12)
    np.testing.assert_array_equal(belief.counts, n)
    assert belief.n_arms == 4 and belief.noise_var == s2
    draws = np.array([belief.sample(rng) for _ in range(20000)])
    np.testing.assert_allclose(draws.mean(0), mean, atol=6 * np.sqrt(var.max() / 20000))
    np.testing.assert_allclose(draws.std(0), np.sqrt(var), rtol=0.03)
    with pytest.raises(EvrouteError, match="positive"):
        TurnBelief(TurnPrior(m0, np.zeros(4)), s2)
    with pytest.raises(EvrouteError, match="sum to below 1"):
        TurnBelief(TurnPrior(m0, v0, junction=np.zeros(4, int), kind=np.zeros(4, int)), s2, junction_share=0.6,
                   kind_share=0.5)


def test_the_kernel_over_turns_is_a_dense_gaussian_process_posterior():
    """Turns of three kinds at five junctions, some driven several times: the weight-space
    posterior equals the dense GP posterior with k(a, b) = s_a s_b (ρ_k [same kind] + ρ_j [same
    junction] + (1 − ρ_k − ρ_j) [a = b]) and one observation per row (no sufficient statistics)."""
    rng = np.random.default_rng(5)
    a = 23
    kind, junction = rng.integers(0, 3, a), rng.integers(0, 5, a)
    m0, v0 = rng.normal(3.0, 2.0, a), rng.uniform(1.0, 9.0, a)
    rho_j, rho_k, s2 = 0.35, 0.2, 2.5
    belief = TurnBelief(TurnPrior(m0, v0, junction=junction, kind=kind), s2, junction_share=rho_j, kind_share=rho_k)
    obs = rng.choice(np.flatnonzero(junction != 4), 30)  # junction 4 never driven
    y = rng.normal(5.0, 3.0, obs.size)
    belief.update(obs, y)
    sd = np.sqrt(v0)
    corr = rho_k * (kind[:, None] == kind[None, :]) + rho_j * (junction[:, None] == junction[None, :]) \
        + (1.0 - rho_k - rho_j) * np.eye(a)
    K = sd[:, None] * sd[None, :] * corr
    Koo = K[np.ix_(obs, obs)] + s2 * np.eye(obs.size)
    Kao = K[:, obs]
    mean = m0 + Kao @ np.linalg.solve(Koo, y - m0[obs])
    cov = K - Kao @ np.linalg.solve(Koo, Kao.T)
    mu, sigma = belief.mean_std()
    np.testing.assert_allclose(mu, mean, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(sigma, np.sqrt(np.diag(cov)), rtol=1e-9, atol=1e-9)
    unseen = np.flatnonzero(junction == 4)
    assert unseen.size and np.all(np.abs(mu[unseen] - m0[unseen]) > 0)  # they learn through their kind alone


def test_physics_prior_of_a_turn(synthetic):
    """Physics' dissipation of a turn: never negative, larger where a signal or a yield makes a stop
    likely, larger for a U-turn than for going straight between the same speeds; its variance at
    least half its square. Nothing of a truth goes into it."""
    from evroute.physics.energy import load_vehicle
    from evroute.world.junctions import physics_turns, speed_change_loss_wh, turn_geometry

    for vehicle in (None, load_vehicle("delivery-van")):
        p = physics_turns(synthetic, vehicle)
        assert np.all(p.mean > 0) and np.all(p.var >= 0.5 * p.mean**2) and not p.known and p.source == "physics"
    p = physics_turns(synthetic)
    junction, angle, kind = turn_geometry(synthetic)
    v = synthetic.edges.speed_mps.to_numpy()
    src, dst = np.asarray(synthetic.conn_src), np.asarray(synthetic.conn_dst)
    same = v[src] == v[dst]
    straight, uturn = same & (kind == 0), same & (kind == 3)
    if straight.any() and uturn.any():
        assert p.mean[uturn].min() > np.median(p.mean[straight])
    assert np.all(speed_change_loss_wh(np.r_[0.0, 10.0, 14.0], np.r_[14.0, 3.0, 14.0]) >= 0)
    assert set(np.unique(kind)) <= {0, 1, 2, 3} and junction.max() < synthetic.n_edges


def test_the_environment_observes_a_turns_dissipation_on_a_stream_of_its_own(synthetic):
    """observe_turns: the turns' mean dissipation plus noise of the cars' spread (Monte-Carlo mean
    and sd), one per consecutive pair; calling it leaves the edges' observations as they were;
    without turns it is refused."""
    net, oracle = synthetic, Oracle.from_network(synthetic)
    src, dst = np.asarray(net.conn_src), np.asarray(net.conn_dst)
    psi = np.linspace(0.0, 30.0, net.n_edges)
    dissipation = np.linspace(0.0, 40.0, src.size)
    turns = Turns(psi[dst] - psi[src] + dissipation, psi, src, dst, noise_std=3.0)
    f = np.full(net.n_edges, 20.0)
    path = oracle.shortest_path(f, 0, net.n_edges - 1).edges
    arcs = oracle.turn_index(path)

    def env():
        return StaticEnvironment(Truth(f, 1.0, turns=turns), 1.0, oracle, path[0], path[-1], seed=3)

    plain, mixed = env(), env()
    y = np.array([mixed.observe_turns(t, path) for t in range(4000)])
    assert y.shape == (4000, len(path) - 1)
    np.testing.assert_allclose(y.mean(0), dissipation[arcs], atol=4 * 3.0 / np.sqrt(4000))
    np.testing.assert_allclose(y.std(0), 3.0, rtol=0.05)
    np.testing.assert_array_equal(plain.observe(1, path), mixed.observe(1, path))
    bare = StaticEnvironment(Truth(f, 1.0), 1.0, oracle, path[0], path[-1], seed=3)
    with pytest.raises(EvrouteError, match="no junctions"):
        bare.observe_turns(1, path)
    np.testing.assert_array_equal(turn_weights([-3.0, 0.0, 2.5]), [0.0, 0.0, 2.5])


@pytest.mark.parametrize("policy", ["gp-ucb", "gp-ts", "bi-bucb"])
def test_agents_learn_a_dear_turn_after_driving_it(dear_truth, synthetic, policy):
    """Agents with physics' prior of the junctions drive a turn the truth makes 500 Wh dearer in
    round 1, observe it, and never again; told the truth's turns (the oracle) they avoid it from
    round 1. Regret is against the exact optimum and never negative."""
    from evroute.runs.config import SimulationConfig
    from evroute.runs.simulation import simulate

    cfg = SimulationConfig(network="synthetic", truth="dear", policy=policy, horizon=1)
    path = [int(e) for e in simulate(cfg, net=synthetic).rounds.path.iloc[0]]
    dear_truth["turn"] = (path[1], path[2], 500.0)

    def drives_it(c):
        res = simulate(c.replace(horizon=8), net=synthetic)
        assert res.summary["regret_reference"] == "exact optimum" and (res.rounds.regret_wh >= 0).all()
        return [(path[1], path[2]) in set(zip(p[:-1], p[1:], strict=False)) for p in res.rounds.path]

    assert drives_it(cfg) == [True] + [False] * 7
    assert drives_it(cfg.replace(prior_turns="oracle")) == [False] * 8


def test_only_an_oracle_hands_the_agents_the_truths_turns(dear_truth, synthetic):
    """The agents' prior of the junctions is physics' whatever the truth's turns are; the truth's
    own dissipation reaches them only with --turns oracle, named so in the summary and the
    closing lines."""
    from evroute.reports.report import describe_run
    from evroute.runs.config import SimulationConfig
    from evroute.runs.problem import prepare_problem
    from evroute.runs.simulation import simulate

    cfg = SimulationConfig(network="synthetic", truth="dear", horizon=2)
    before = prepare_problem(cfg, net=synthetic).agent_turns
    dear_truth["turn"] = (int(synthetic.conn_src[0]), int(synthetic.conn_dst[0]), 300.0)
    after = prepare_problem(cfg, net=synthetic)
    np.testing.assert_array_equal(before.mean, after.agent_turns.mean)
    np.testing.assert_array_equal(before.var, after.agent_turns.var)
    oracle = prepare_problem(cfg.replace(prior_turns="oracle"), net=synthetic)
    assert oracle.agent_turns.known and oracle.agent_turns.source == "oracle"
    np.testing.assert_allclose(oracle.agent_turns.mean, after.ground_truth.turns.dissipation)
    summary = simulate(cfg.replace(prior_turns="oracle"), net=synthetic).summary
    assert summary["prior_turns"] == "oracle"
    assert any("oracle, not a benchmark" in line for line in describe_run(summary))
    assert simulate(cfg, net=synthetic).summary["prior_turns"] == "physics"


def test_the_turns_prior_from_a_fleet_is_its_posterior(dear_truth, synthetic, tmp_path):
    """From drives, a turn's prior is the fleet's posterior of its dissipation: τ² where nobody
    turned, the precision 1/τ² + n / s² where n cars did (s their spread within turns), the mean
    shrunk from physics towards the cars' by the data's share of the precision."""
    import pandas as pd

    from evroute.runs.config import SimulationConfig
    from evroute.runs.problem import prepare_problem
    from evroute.world.junctions import physics_turns

    from .conftest import make_prior_file

    oracle = Oracle.from_network(synthetic)
    path = oracle.shortest_path(np.ones(synthetic.n_edges), 0, synthetic.n_edges - 1).edges
    turns = ((path[0], path[1], 12, 30.0), (path[1], path[2], 5, 8.0))  # from, to, cars, mean dissipation
    rows = [{"trip": f"t{j}{k}", "vehicle": f"v{j}{k}", "edge": e, "next_edge": n, "enter_s": 10.0 * i,
             "seconds": 5.0, "energy_wh": 20.0, "edge_wh": 18.0, "kin_in_wh": 0.0,
             "kin_out_wh": (c + 6.0 * (-1) ** k) * (i == 0), "v_in": 10.0, "v_top": 10.0, "v_out": 10.0}
            for j, (a, b, cars, c) in enumerate(turns) for k in range(cars)
            for i, (e, n) in enumerate(((a, b), (b, -1)))]
    prior = make_prior_file(tmp_path, synthetic, pd.DataFrame(rows), vehicle="sumo-ev", residual_sd=0.0,
                            fitted={"prior_std": 10.0, "noise_std": 2.0, "lengthscale": 1.0})
    cfg = SimulationConfig(truth="dear", prior=str(prior))  # (the fleet's turns: the prior file's)
    assert cfg.prior_turns == "drives"
    fleet = prepare_problem(cfg, net=synthetic).agent_turns
    arcs = oracle.turn_index(path[:3])
    tau2 = np.delete(fleet.var, arcs)
    np.testing.assert_allclose(tau2, tau2[0], rtol=1e-12)
    dev = np.concatenate([6.0 * (-1) ** np.arange(12), 6.0 * (-1) ** np.arange(5) - 1.2])
    s2 = dev @ dev / (11 + 4)  # the pooled spread within the two turns (the 5 cars' mean is off by 1.2)
    assert fleet.noise_var == pytest.approx(s2)
    np.testing.assert_allclose(1.0 / fleet.var[arcs], 1.0 / tau2[0] + np.array([12, 5]) / s2, rtol=1e-9)
    physics = physics_turns(synthetic, load_vehicle_default())
    b = np.delete(fleet.mean - physics.mean, arcs)
    np.testing.assert_allclose(b, b[0], rtol=1e-9)  # the offset common to the turns nobody took
    means = np.array([30.0, 8.0 + 1.2])
    share = (np.array([12, 5]) / s2) * fleet.var[arcs]
    np.testing.assert_allclose(fleet.mean[arcs], physics.mean[arcs] + b[0] + share * (means - physics.mean[arcs] - b[0]),
                               rtol=1e-9)


def load_vehicle_default():
    from evroute.physics.energy import load_vehicle

    return load_vehicle(None)
