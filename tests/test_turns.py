"""Junctions learnt online (evroute.bandit.turns): the turns' conjugate posterior against its
closed form and a Monte-Carlo estimate, the turns raised to their kinetic bound (Johnson's
potential then always exists), the environment's turn observations, and agents that learn a
dear junction after driving it once (``--learn-turns``)."""

from __future__ import annotations

import numpy as np
import pytest

from evroute.bandit.environments import StaticEnvironment, Turns
from evroute.bandit.turns import TurnBelief, learned_turns
from evroute.errors import EvrouteError
from evroute.roads.oracle import Oracle


def test_the_turns_posterior_is_the_conjugate_update_and_its_draws_match_it():
    rng = np.random.default_rng(0)
    m0, v0, s2 = np.array([1.0, -2.0, 5.0, 0.0]), np.array([4.0, 9.0, 1.0, 2.0]), 3.0
    belief = TurnBelief(m0, v0, s2)
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
    np.testing.assert_allclose(draws.mean(0), mean, atol=4 * np.sqrt(var.max() / 20000) * 1.5)
    np.testing.assert_allclose(draws.std(0), np.sqrt(var), rtol=0.03)
    with pytest.raises(EvrouteError, match="positive"):
        TurnBelief(m0, 0.0, s2)


def test_turns_raised_to_their_kinetic_bound_never_make_a_cycle_that_creates_energy(synthetic):
    """Indices far below every turn's cost, raised to ψ(e′) − ψ(e), with the edges at their floors:
    Johnson's potential exists (the bound telescopes around any cycle), and turns above their bound
    keep their index."""
    from evroute.physics.energy import energy_floor_wh
    from evroute.roads.walks import feasible_potential

    net = synthetic
    rng = np.random.default_rng(1)
    src, dst = np.asarray(net.conn_src), np.asarray(net.conn_dst)
    psi = rng.uniform(0.0, 30.0, net.n_edges)
    turns = Turns(np.zeros(src.size), psi, src, dst)
    index = rng.normal(-200.0, 50.0, src.size)
    index[::7] = 1e3  # a few far above
    mine = learned_turns(index, turns)
    bound = psi[dst] - psi[src]
    np.testing.assert_array_equal(mine.costs, np.maximum(index, bound))
    floor, _ = energy_floor_wh(net.edges.length_m.to_numpy(), net.edges.grade.to_numpy())
    assert feasible_potential(net.n_edges, src, dst, weights=floor, turn_weights=mine.costs) is not None
    assert feasible_potential(net.n_edges, src, dst, weights=floor, turn_weights=index) is None  # unraised: cycles


def test_a_turn_is_held_to_the_lower_of_its_bound_and_its_posterior_mean(synthetic):
    """Every turn at least min(bound, posterior mean): below the bound where the prior (a fleet's
    turns) or the agent's own cars say so, never further; with no belief every turn at its bound
    (written out turn by turn)."""
    net = synthetic
    rng = np.random.default_rng(2)
    src, dst = np.asarray(net.conn_src), np.asarray(net.conn_dst)
    psi = rng.uniform(0.0, 30.0, net.n_edges)
    turns = Turns(np.zeros(src.size), psi, src, dst)
    prior = turns.bound + 10.0
    below = rng.choice(src.size, 40, replace=False)
    prior[below] -= 50.0  # a fleet that paid 40 Wh less than the bound at these
    belief = TurnBelief(prior, 100.0, 4.0)
    driven = rng.choice(src.size, 40, replace=False)
    belief.update(driven, rng.normal(-60.0, 30.0, driven.size))  # most driven means far below their bounds
    index = rng.normal(-100.0, 60.0, src.size)
    mine = learned_turns(index, turns, belief)
    mean = belief.mean_std()[0]
    for i in range(src.size):
        bound = psi[dst[i]] - psi[src[i]]
        assert mine.costs[i] == max(index[i], min(bound, mean[i]))
    undriven = np.setdiff1d(below, driven)
    undriven = undriven[index[undriven] < turns.bound[undriven]]
    assert (mine.costs[driven] < turns.bound[driven]).sum() >= 20  # below the bound where the agent drove
    assert undriven.size >= 25 and np.all(mine.costs[undriven] < turns.bound[undriven])  # and where the fleet did
    others = np.setdiff1d(np.arange(src.size), np.r_[below, driven])
    np.testing.assert_array_equal(mine.costs[others], np.maximum(index[others], turns.bound[others]))
    np.testing.assert_array_equal(learned_turns(index, turns).costs, np.maximum(index, turns.bound))


def test_from_the_speed_change_an_undriven_turn_stays_at_its_bound(synthetic):
    """The speed change between two roads' speeds is never below the kinetic bound (accelerating
    costs ΔKE / η⁺ ≥ η⁻ ΔKE, braking recovers η⁻ of the drop, exactly the bound): a learner that
    starts from it holds a turn below the bound only once it drove it."""
    from evroute.physics.energy import load_vehicle
    from evroute.world.junctions import speed_change_turns

    for vehicle in (None, load_vehicle("delivery-van")):
        sc = speed_change_turns(synthetic, vehicle)
        assert np.all(sc.costs >= sc.bound - 1e-9 * np.abs(sc.bound).max())
        held = learned_turns(np.full(sc.costs.size, -1e3), sc, TurnBelief(sc.costs, 25.0, 4.0))
        np.testing.assert_allclose(held.costs, sc.bound, rtol=0, atol=1e-9)


@pytest.mark.parametrize("policy", ["gp-ts", "bi-ts"])
def test_agents_keep_a_turn_cheaper_than_its_bound_once_they_drove_it(dear_truth, synthetic, policy, monkeypatch):
    """--learn-turns on a truth where one turn off the first route costs 60 Wh less than its kinetic
    bound (a car slower there than the roads' typical speeds): once a Thompson learner has driven
    it, it keeps taking it, its own observations holding the turn below the bound; held to the
    bound for ever (the earlier rule), the turn looks dearer than it is and the learner leaves it
    again."""
    import evroute.bandit.agents as agents
    from evroute.runs.config import SimulationConfig
    from evroute.runs.problem import prepare_problem
    from evroute.runs.simulation import simulate

    cfg = SimulationConfig(network="synthetic", truth="dear", policy=policy, weights="potential", horizon=1,
                           prior_turns="speed-change", learn_turns=True)
    problem = prepare_problem(cfg, net=synthetic)
    first = [int(e) for e in simulate(cfg, net=synthetic).rounds.path.iloc[0]]
    available = np.ones(synthetic.n_edges, dtype=bool)
    available[first[len(first) // 2]] = False  # another route, and a turn on it that the first does not take
    other = Oracle.from_network(synthetic).shortest_path(np.maximum(problem.prior_mean, 1e-3), first[0], first[-1],
                                                         available=available).edges
    taken = set(zip(first[:-1], first[1:], strict=True))
    cheap = [(a, b) for a, b in zip(other[:-1], other[1:], strict=True) if (a, b) not in taken]
    a, b = cheap[len(cheap) // 2]
    dear_truth["turn"] = (a, b, -60.0)

    def drives_it():
        return [(a, b) in set(zip(p[:-1], p[1:], strict=True))
                for p in simulate(cfg.replace(horizon=40), net=synthetic).rounds.path]

    learnt = drives_it()
    assert 0 < learnt.index(True) < 20 and all(learnt[-20:])
    bounded = agents.learned_turns
    monkeypatch.setattr(agents, "learned_turns", lambda index, turns, belief=None: bounded(index, turns))
    assert not all(drives_it()[-20:])


def test_the_environment_observes_turns_on_a_stream_of_their_own(synthetic):
    """observe_turns: the turns' mean cost plus noise of the cars' spread (Monte-Carlo mean and
    sd), one per consecutive pair; calling it leaves the edges' observations as they were; without
    turns it is refused."""
    from evroute.bandit.environments import Truth

    net, oracle = synthetic, Oracle.from_network(synthetic)
    src, dst = np.asarray(net.conn_src), np.asarray(net.conn_dst)
    costs = np.linspace(-5.0, 40.0, src.size)
    turns = Turns(costs, np.zeros(net.n_edges), src, dst, noise_std=3.0)
    f = np.full(net.n_edges, 20.0)
    path = oracle.shortest_path(f, 0, net.n_edges - 1).edges
    arcs = oracle.turn_index(path)

    def env():
        return StaticEnvironment(Truth(f, 1.0, turns=turns), 1.0, oracle, path[0], path[-1], seed=3)

    plain, mixed = env(), env()
    y = np.array([mixed.observe_turns(t, path) for t in range(4000)])
    assert y.shape == (4000, len(path) - 1)
    np.testing.assert_allclose(y.mean(0), costs[arcs], atol=4 * 3.0 / np.sqrt(4000))
    np.testing.assert_allclose(y.std(0), 3.0, rtol=0.05)
    np.testing.assert_array_equal(plain.observe(1, path), mixed.observe(1, path))
    bare = StaticEnvironment(Truth(f, 1.0), 1.0, oracle, path[0], path[-1], seed=3)
    with pytest.raises(EvrouteError, match="no junctions"):
        bare.observe_turns(1, path)


@pytest.mark.parametrize("policy", ["gp-ucb", "gp-ts", "bi-bucb"])
def test_agents_that_learn_the_junctions_leave_a_dear_turn_after_driving_it(dear_truth, synthetic, policy):
    """--learn-turns: agents that believe the speed change drive a turn the truth makes 500 Wh
    dearer in round 1, observe it, and never again; without it they keep driving it (the UCB
    rules every round, Thompson sampling whenever its draws of the edges favour it)."""
    from evroute.runs.config import SimulationConfig
    from evroute.runs.simulation import simulate

    cfg = SimulationConfig(network="synthetic", truth="dear", policy=policy, weights="potential", horizon=1,
                           prior_turns="speed-change")
    path = [int(e) for e in simulate(cfg, net=synthetic).rounds.path.iloc[0]]
    dear_truth["turn"] = (path[1], path[2], 500.0)

    def drives_it(c):
        return [(path[1], path[2]) in set(zip(p[:-1], p[1:], strict=False))
                for p in simulate(c.replace(horizon=8), net=synthetic).rounds.path]

    blind = drives_it(cfg)
    assert blind[0] and sum(blind[1:]) >= (7 if policy != "gp-ts" else 1)
    assert drives_it(cfg.replace(learn_turns=True)) == [True] + [False] * 7


def test_the_turns_prior_is_the_fleets_posterior_or_one_cars_spread(dear_truth, synthetic, tmp_path):
    """The prior variance of a turn: from drives the fleet's posterior variance (τ² where nobody
    turned, the precision 1/τ² + n / s_f² where n cars did, s_f their spread within turns); s²
    where the speed change stands in (s the truth's spread within turns); refused without turns
    and for agents that do not learn them."""
    import pandas as pd

    from evroute.io import atomic_write_parquet
    from evroute.runs.config import SimulationConfig
    from evroute.runs.problem import make_agent, prepare_problem
    from evroute.world.junctions import fleet_turns

    cfg = SimulationConfig(network="synthetic", truth="dear", policy="gp-ucb", weights="potential", horizon=1,
                           prior_turns="speed-change", learn_turns=True)
    problem = prepare_problem(cfg, net=synthetic)
    np.testing.assert_allclose(problem.turn_prior_var, 4.0)
    oracle = Oracle.from_network(synthetic)
    path = oracle.shortest_path(np.ones(synthetic.n_edges), 0, synthetic.n_edges - 1).edges
    turns = ((path[0], path[1], 12, 30.0), (path[1], path[2], 5, -20.0))  # from, to, cars, mean cost
    rows = [{"trip": f"t{j}{k}", "vehicle": f"v{j}{k}", "edge": e, "next_edge": n, "enter_s": 10.0 * i,
             "seconds": 5.0, "energy_wh": 20.0, "edge_wh": 18.0, "kin_in_wh": 0.0,
             "kin_out_wh": (c + 6.0 * (-1) ** k) * (i == 0), "v_in": 5.0, "v_top": 10.0, "v_out": 5.0}
            for j, (a, b, cars, c) in enumerate(turns) for k in range(cars)
            for i, (e, n) in enumerate(((a, b), (b, -1)))]
    table = pd.DataFrame(rows)
    atomic_write_parquet(tmp_path / "fleet.parquet", table)
    fleet = prepare_problem(cfg.replace(prior_turns="drives", prior_drives=str(tmp_path / "fleet.parquet")),
                            net=synthetic)
    np.testing.assert_array_equal(fleet.turn_prior_var, fleet_turns(table, synthetic, fleet.vehicle).variance)
    arcs = oracle.turn_index(path[:3])
    tau2 = np.delete(fleet.turn_prior_var, arcs)
    np.testing.assert_allclose(tau2, tau2[0], rtol=1e-12)
    dev = np.concatenate([np.full(12, 6.0) * (-1) ** np.arange(12) - 0.0, 6.0 * (-1) ** np.arange(5) - 1.2])
    s2 = dev @ dev / (11 + 4)  # the pooled spread within the two turns (the 5 cars' mean is off by 1.2)
    np.testing.assert_allclose(1.0 / fleet.turn_prior_var[arcs], 1.0 / tau2[0] + np.array([12, 5]) / s2, rtol=1e-9)
    assert fleet.agent_turns.noise_std == pytest.approx(2.0)  # the observations: the truth's own spread
    with pytest.raises(EvrouteError, match="edges plus turns"):
        prepare_problem(SimulationConfig(network="synthetic", learn_turns=True), net=synthetic)
    with pytest.raises(EvrouteError, match="does not learn the junctions"):
        make_agent(cfg.replace(policy="gp-pe"), problem)
