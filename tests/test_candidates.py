"""Candidate priors of paper 004 (evroute/priors/candidates.py): parsing of --priors, the priors
built for a run (kernels shared, own settings honoured), and the agents over them: PE over
forgetting rates, the evidence across kernels, the path-level elimination test."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from evroute.errors import EvrouteError
from evroute.priors.candidates import Candidate, candidate_priors, parse_candidates


@pytest.fixture(scope="module")
def small_net():
    from evroute.roads.network import load_network

    return load_network("synthetic", size=70)


def test_presets_settings_and_names():
    from evroute.physics.energy import vehicle_names

    assert [c.name for c in parse_candidates(None)] == list(vehicle_names())
    cands = parse_candidates("sumo-ev, delivery-van[eps=0.01],compact-ev[lengthscale=0.5,kappa=2,name=cev]")
    assert cands[0] == Candidate("sumo-ev", "sumo-ev")
    assert cands[1] == Candidate("delivery-van[eps=0.01]", "delivery-van", eps=0.01)
    assert cands[2] == Candidate("cev", "compact-ev", lengthscale=0.5, kappa=2.0)
    assert cands[2].kernel_settings(1.0, 1.0, 2.0) == (0.5, 2.0, 2.0) and not cands[0].own_kernel


def test_a_candidates_file(tmp_path):
    veh = tmp_path / "light.json"
    veh.write_text(json.dumps({"mass_kg": 900.0, "base": "sumo-ev"}))
    f = tmp_path / "priors.json"
    f.write_text(json.dumps({"candidates": [{"vehicle": "delivery-van", "eps": 0.05, "name": "van-drift"},
                                            {"vehicle": "light.json", "nu": 1}]}))
    cands = parse_candidates(f"{f},sumo-ev")
    assert cands[0] == Candidate("van-drift", "delivery-van", eps=0.05)
    assert cands[1].vehicle == str(veh) and cands[1].nu == 1.0 and cands[1].name == "priors:1"
    assert cands[2].name == "sumo-ev"
    assert parse_candidates(str(veh))[0].vehicle == str(veh)  # a vehicle file stays a vehicle


@pytest.mark.parametrize("text, match", [
    ("delivery-van[eps=1]", "eps"),
    ("delivery-van[speed=3]", "unknown option"),
    ("sumo-ev,sumo-ev", "twice"),
    ("no-such-car", "unknown vehicle"),
    ("sumo-ev[lengthscale=-1]", "lengthscale"),
    (" , ", "empty"),
    ("/nonexistent/p.json", "file not found"),
])
def test_bad_candidates_are_one_line_errors(text, match):
    with pytest.raises(EvrouteError, match=match):
        parse_candidates(text)


def test_bad_candidates_file(tmp_path):
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"candidates": [{"eps": 0.1}]}))
    with pytest.raises(EvrouteError, match="vehicle"):
        parse_candidates(str(f))
    f.write_text("{not json")
    with pytest.raises(EvrouteError, match="not valid JSON"):
        parse_candidates(str(f))


def test_candidate_priors_share_kernels_and_honour_settings(small_net):
    from evroute.physics.energy import load_vehicle
    from evroute.physics.routes import edge_energies
    from evroute.priors.network_prior import NetworkPrior

    m = edge_energies(small_net)
    base = NetworkPrior(small_net, m, "combined", 1.0, 1.0, 2.0, 4.0)
    cands = parse_candidates("sumo-ev,delivery-van,compact-ev[lengthscale=0.5],sumo-ev[lengthscale=0.5,name=b]")
    built = candidate_priors(cands, small_net, base, kernel="combined", lengthscale=1.0, kappa=1.0, nu=2.0,
                             prior_var=4.0)
    np.testing.assert_array_equal(built["delivery-van"].mean, edge_energies(small_net, load_vehicle("delivery-van")))
    assert built["delivery-van"].prior.dense() is base.dense()  # shared, not copied
    own = NetworkPrior(small_net, m, "combined", 0.5, 1.0, 2.0, 4.0)
    np.testing.assert_allclose(built["compact-ev[lengthscale=0.5]"].prior.dense(), own.dense(), rtol=1e-12)
    assert built["b"].prior.dense() is built["compact-ev[lengthscale=0.5]"].prior.dense()  # one per setting


def test_truth_prior_may_name_a_candidate():
    from evroute.runs.config import SimulationConfig

    cfg = SimulationConfig(policy="gp-pe", priors="sumo-ev,delivery-van[eps=0.01,name=van]", truth_prior="van")
    assert cfg.truth_vehicle() == "delivery-van"
    assert SimulationConfig(truth_prior="compact-ev").truth_vehicle() == "compact-ev"


def _pe_setup(net, seed, candidates, eps_truth=0.0, horizon=30):
    from evroute.runs.config import SimulationConfig
    from evroute.runs.problem import prepare_problem

    cfg = SimulationConfig(policy="gp-mle", horizon=horizon, seed=seed, priors=candidates, drift=eps_truth, truth="gp")
    return cfg, prepare_problem(cfg, net=net)


def test_mle_tells_the_forgetting_rate_apart(small_net):
    """Energies that drift with ε = 0.2: the type-II likelihood of the candidate that knows it
    (a time-varying Kalman posterior) beats the static one on every seed."""
    from evroute.runs.simulation import run_bandit

    wins = 0
    for seed in range(3):
        cfg, problem = _pe_setup(small_net, seed, "sumo-ev,sumo-ev[eps=0.2,name=drifting]", eps_truth=0.2)
        from evroute.runs.problem import make_agent

        agent = make_agent(cfg, problem)
        assert type(agent.models["drifting"]).__name__ == "KalmanPosterior"
        run_bandit(cfg, problem, agent=agent)
        ev = agent.log_evidence()
        wins += ev["drifting"] > ev["sumo-ev"]
    assert wins == 3


def test_the_path_test_is_the_route_level_bound(small_net):
    """test=path adds β'_t √(1ᵀΣ_S 1) to W (β'_t = √(2 ln(π²t²/(3δ))), Σ the chosen prior's
    posterior before the round): after round 1, Σ is the prior block of the route; it is never
    above the edge test's W for the same round."""
    from evroute.bandit.pe_agents import pe_path_beta
    from evroute.runs.config import SimulationConfig
    from evroute.runs.problem import agent_prior, make_agent, prepare_problem
    from evroute.runs.simulation import run_bandit

    cfg = SimulationConfig(policy="gp-pe[test=path]", horizon=1, seed=2, priors="sumo-ev")
    problem = prepare_problem(cfg, net=small_net)
    agent = make_agent(cfg, problem)
    res = run_bandit(cfg, problem, agent=agent)
    route = res.observations.edge.to_numpy()
    K = agent_prior(cfg, problem).dense()[np.ix_(route, route)]
    assert agent.W["sumo-ev"] == pytest.approx(pe_path_beta(1, 0.05) * math.sqrt(K.sum()), rel=1e-10)
    edge = make_agent(SimulationConfig(policy="gp-pe", horizon=1, seed=2, priors="sumo-ev"), problem)
    run_bandit(cfg, problem, agent=edge)
    assert agent.W["sumo-ev"] < edge.W["sumo-ev"]


def test_cli_refuses_a_bad_candidate(tmp_path, capsys):
    from evroute.cli import main

    code = main(["simulate", "--network", "synthetic", "--policy", "gp-pe", "--priors", "delivery-van[eps=2]",
                 "--horizon", "2", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error:") and "eps" in err[0]
    assert not (tmp_path / "o").exists()
