"""The per-edge noise model (noise.py): its spec, its features, its fit (Monte-Carlo recovery of
known parameters), and a run under it (the truth's observations and the agents' posterior)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from evroute.errors import EvrouteError
from evroute.physics.routes import edge_energies
from evroute.priors.noise import edge_noise_std, edge_signals, fit_noise_model, parse_noise_std
from evroute.roads.network import load_network


@pytest.fixture(scope="module")
def net():
    """The synthetic city with every seventh edge made to pass a traffic signal."""
    base = load_network("synthetic", size=120)
    edges = base.edges.copy()
    edges["signals"] = (np.arange(base.n_edges) % 7 == 0).astype(np.int64)
    return dataclasses.replace(base, edges=edges)


def test_the_spec_is_checked_and_made_canonical():
    assert parse_noise_std("noise_std", "edge[tls=3, a=2]") == "edge[a=2,b_per_km=0,tls=3]"
    assert parse_noise_std("noise_std", "EDGE[a=1.5,b_per_km=12]") == "edge[a=1.5,b_per_km=12,tls=0]"
    assert parse_noise_std("noise_std", "4.5") == 4.5 and parse_noise_std("noise_std", "paper") is None
    for bad, why in [("edge[b_per_km=3]", "a must be above 0"), ("edge[a=1,c=2]", "unknown option"),
                     ("edge[a=-1]", "a must be"), ("edges[a=1]", "expected a number"), ("x", "per-edge model"),
                     ("edge[a=1,a=2]", "twice")]:
        with pytest.raises(EvrouteError, match=why):
            parse_noise_std("--noise-std", bad)


def test_each_edge_gets_a_plus_b_length_plus_tls(net):
    sd = edge_noise_std(net, "edge[a=2,b_per_km=10,tls=5]")
    expected = 2 + 10 * net.edges.length_m.to_numpy() / 1000 + 5 * (np.arange(net.n_edges) % 7 == 0)
    np.testing.assert_allclose(sd, expected, rtol=1e-15)
    assert edge_noise_std(net, 3.0) == 3.0


def test_osm_signals_reach_the_edges_that_pass_or_end_at_them(tmp_path):
    """A triangle of junctions 1, 4, 7 around a centre 9; the way 1–2–3–4 has a signal at the
    interior node 3 (the simplification removes it) and at the junction 4. The edge 1→4 counts
    both, 4→1 the one at 3; every other edge into 4 counts one, every edge out of it none."""
    import networkx as nx

    from evroute.roads.network import network_from_graph

    g = nx.MultiDiGraph(crs="epsg:4326")
    pts = {1: (6.0, 49.0), 2: (6.001, 49.0), 3: (6.002, 49.0), 4: (6.003, 49.0), 5: (6.0025, 49.0015),
           7: (6.0015, 49.003), 6: (6.0005, 49.0015), 9: (6.0015, 49.001)}
    for n, (x, y) in pts.items():
        g.add_node(n, x=x, y=y, elevation=0.0)
    g.nodes[3]["highway"] = "traffic_signals"
    g.nodes[4]["highway"] = "traffic_signals"
    for a, b in [(1, 2), (2, 3), (3, 4), (4, 5), (5, 7), (7, 6), (6, 1), (1, 9), (4, 9), (7, 9)]:
        for u, v, rev in [(a, b, False), (b, a, True)]:
            g.add_edge(u, v, osmid=a * 10 + b, highway="residential", length=80.0, reversed=rev, oneway=False)
    n = network_from_graph(g, "signals")
    count = {(int(r.u), int(r.v)): int(r.signals) for r in n.edges.itertuples()}
    assert len(count) == 12
    assert count.pop((1, 4)) == 2 and count.pop((4, 1)) == 1
    assert all(c == (v == 4) for (_, v), c in count.items())
    assert edge_signals(n).sum() == 4


def traversals(net, sd, per_edge, seed):
    rng = np.random.default_rng(seed)
    e = np.repeat(np.arange(net.n_edges), per_edge)
    mean = edge_energies(net)[e]
    return pd.DataFrame({"edge": e, "edge_wh": mean + sd[e] * rng.standard_normal(e.size)})


def test_the_fit_recovers_known_parameters(net):
    """Monte Carlo: traversals drawn with ς_e = 1.5 + 12 km + 4 tls, 30 per edge; the fit is
    within a few standard errors and the homoscedastic likelihood is worse."""
    sd = edge_noise_std(net, "edge[a=1.5,b_per_km=12,tls=4]")
    fit = fit_noise_model(net, traversals(net, sd, 30, 1))
    assert fit["edges"] == net.n_edges and fit["traversals"] == 30 * net.n_edges
    assert fit["a"] == pytest.approx(1.5, abs=0.3)
    assert fit["b_per_km"] == pytest.approx(12, rel=0.15)
    assert fit["tls"] == pytest.approx(4, rel=0.2)
    assert fit["neg_log_likelihood"] < fit["homoscedastic_neg_log_likelihood"] - 100
    assert parse_noise_std("noise_std", fit["spec"]) == parse_noise_std("noise_std", fit["spec"])
    # one noise level for every edge is found as a with the others near 0
    flat = fit_noise_model(net, traversals(net, np.full(net.n_edges, 6.0), 30, 2))
    assert flat["a"] == pytest.approx(6.0, rel=0.05) and flat["b_per_km"] < 0.5 and flat["tls"] < 0.3


def test_too_few_traversals_is_one_line(net):
    t = pd.DataFrame({"edge": [0, 0, 1], "edge_wh": [1.0, 2.0, 3.0]})
    with pytest.raises(EvrouteError, match="fewer than 10 edges"):
        fit_noise_model(net, t, what="the drives")


def test_fit_hyperparameters_fits_the_noise_model_on_the_first_half(net):
    from evroute.world.sumo_atlas import Atlas
    from evroute.world.sumo_truth import fit_hyperparameters

    sd = edge_noise_std(net, "edge[a=2,b_per_km=20,tls=6]")
    first = traversals(net, sd, 8, 3).assign(enter_s=10.0, vehicle="v")
    second = traversals(net, 40 * sd, 8, 4).assign(enter_s=1000.0, vehicle="w")  # held out: must not matter
    fit = fit_hyperparameters(Atlas(pd.concat([first, second]), {"hours": 0.5}, "test"), net, edge_energies(net))
    nm = fit["noise_model"]
    assert nm["traversals"] == 8 * net.n_edges
    assert nm["a"] == pytest.approx(2, abs=0.8) and nm["b_per_km"] == pytest.approx(20, rel=0.3)
    assert nm["tls"] == pytest.approx(6, rel=0.35)
    assert nm["spec"].startswith("edge[") and nm["prior_std"] > 0


def test_a_run_under_the_per_edge_model(net, tmp_path):
    """The Gaussian truth observes edge e with ς_e (Monte Carlo), the agents' model is per edge,
    the summary names the model, and the bound agents refuse it in one line."""
    from evroute.runs.config import SimulationConfig
    from evroute.runs.problem import make_agent, make_environment, prepare_problem

    spec = "edge[a=1,b_per_km=40,tls=8]"
    cfg = SimulationConfig(network="synthetic", policy="gp-ts", horizon=5, noise_std=spec)
    problem = prepare_problem(cfg, net=net)
    sd = edge_noise_std(net, spec)
    np.testing.assert_allclose(problem.edge_noise_std, sd)
    assert problem.noise_var == pytest.approx(np.mean(sd ** 2))
    env = make_environment(cfg, problem)
    path = np.repeat(np.array([0, 7, 50]), 4000)  # edges 0 and 7 pass a signal
    obs = env.observe(1, path).reshape(3, -1)
    np.testing.assert_allclose(obs.std(axis=1), sd[[0, 7, 50]], rtol=0.05)
    agent = make_agent(cfg, problem)
    np.testing.assert_allclose(agent.model.edge_noise_var, sd ** 2, rtol=1e-12)
    with pytest.raises(EvrouteError, match="one noise level"):
        make_agent(dataclasses.replace(cfg, policy="gp-amm"), problem)


def test_the_cli_takes_the_model(tmp_path, capsys):
    from evroute.cli import main

    out = tmp_path / "run"
    assert main(["simulate", "--network", "synthetic", "--policy", "bi-ucb", "--horizon", "5", "--noise-std",
                 "edge[a=2,b_per_km=20]", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["noise_model"] == "edge[a=2,b_per_km=20,tls=0]" and summary["edge_noise_std_median_wh"] > 2
    capsys.readouterr()
    assert main(["simulate", "--network", "synthetic", "--policy", "gp-ay", "--noise-std", "edge[a=2]", "--out",
                 str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "one noise level" in err and len(err.strip().splitlines()) == 1
