"""PE-GP-UCB (paper 004) over vehicle priors: the elimination statistics, the true prior kept,
a wrong optimistic prior eliminated, the fallback, the run files."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from evroute.bandit.pe_agents import pe_beta, pe_xi


@pytest.fixture(scope="module")
def small_net():
    from evroute.roads.network import load_network

    return load_network("synthetic", size=70)


@pytest.fixture(scope="module")
def featherweight(tmp_path_factory):
    """A wrong candidate that promises far less energy than any real car (so PE tries it)."""
    p = tmp_path_factory.mktemp("veh") / "featherweight.json"
    p.write_text(json.dumps({"mass_kg": 300.0, "rolling_resistance": 0.002, "frontal_area_m2": 0.8,
                             "drag_coefficient": 0.2, "eta_plus": 1.0, "eta_minus": 1.0, "base": "sumo-ev"}))
    return str(p)


def _run(tmp_path, net, seed, priors, truth_prior, horizon=25, **opts):
    from evroute.runs.config import SimulationConfig
    from evroute.runs.simulation import simulate

    spec = "gp-pe" + (f"[{','.join(f'{k}={v}' for k, v in opts.items())}]" if opts else "")
    cfg = SimulationConfig(policy=spec, horizon=horizon, seed=seed, priors=priors, truth_prior=truth_prior)
    out = tmp_path / f"pe-{seed}"
    simulate(cfg, out, net=net)
    return (pd.read_parquet(out / "priors.parquet"), pd.read_parquet(out / "observations.parquet"),
            json.loads((out / "summary.json").read_text()))


def test_constants_are_the_papers():
    # β_t = √(2 ln(T|X|π²t²/(3δ))) (a square root already), ξ(n) = 2R² ln(|U|π²n²/(3δ))
    assert pe_beta(10, 500, 1000, delta=0.05) == pytest.approx(math.sqrt(2 * math.log(500 * 1000 * math.pi**2 * 100 / 0.15)))
    assert pe_xi(200, 4, 2.0, delta=0.05) == pytest.approx(2 * 2.0 * math.log(4 * math.pi**2 * 200**2 / 0.15))


def test_statistics_follow_the_logged_predictions(tmp_path, small_net, featherweight):
    """H, W and n of priors.parquet are the running sums of the chosen prior's one-step-ahead
    residuals (the predictions logged before the update), β σ and the counts."""
    pri, obs, summary = _run(tmp_path, small_net, 0, f"sumo-ev,{featherweight}", "sumo-ev")
    obs = obs.assign(resid=obs.observed_wh - obs.post_mean_before)
    H, n = {}, {}
    for t, p in zip(pri.t, pri.chosen, strict=True):
        o = obs[obs.t == t]
        H[p] = H.get(p, 0.0) + o.resid.sum()
        n[p] = n.get(p, 0) + len(o)
        row = pri[pri.t == t].iloc[0]
        assert row.H == pytest.approx(H[p], rel=1e-9, abs=1e-6) and row.n == n[p]
    assert summary["priors"][0] == "sumo-ev"
    from evroute.reports.plots import plot_directory

    files = plot_directory(tmp_path / "pe-0", tmp_path / "plots", maps=False)
    assert tmp_path / "plots" / "priors.png" in files


def _pe_run(net, seed, shift_sd, horizon=20, only_low=False, **options):
    """PE over {the truth's own prior, the same shifted down by ``shift_sd`` σ₀} (library API)."""
    from evroute.bandit.agents import AgentSetup, make_agent
    from evroute.runs.config import SimulationConfig
    from evroute.runs.problem import agent_prior, prepare_problem
    from evroute.runs.simulation import run_bandit

    cfg = SimulationConfig(policy="gp-pe", horizon=horizon, seed=seed)
    problem = prepare_problem(cfg, net=net)
    m = problem.prior_mean
    low = m - shift_sd * math.sqrt(problem.prior_var)
    setup = AgentSetup(agent_prior(cfg, problem), problem.noise_var, problem.oracle, problem.route.start,
                       problem.route.end, candidates={"low": low} if only_low else {"true": m, "low": low}, horizon=horizon,
                       seed=seed)
    agent = make_agent("gp-pe", setup, **options)
    run_bandit(cfg, problem, agent=agent)
    return agent


@pytest.mark.parametrize("test", ["edge", "path"])
def test_the_true_prior_is_never_eliminated_and_a_wrong_optimist_is(small_net, test):
    """The truth drawn from candidate "true", the theory's β and ξ: over 20 seeds "true" is
    never eliminated (paper 004, Thm 4.1: with probability ≥ 1 − δ), and a candidate whose mean
    lies 10 σ₀ lower, which PE tries first because it promises less energy, always is; the same
    with the route-level test."""
    true_out = wrong_out = 0
    for seed in range(20):
        agent = _pe_run(small_net, seed, 10.0, test=test)
        true_out += "true" in agent.eliminated_at
        wrong_out += "low" in agent.eliminated_at
    assert true_out == 0
    assert wrong_out == 20
    # a mild shift (1 σ₀) is within the prior's uncertainty: kept as plausible, never the true one dropped
    assert all("true" not in _pe_run(small_net, s, 1.0).eliminated_at for s in range(3))


def test_the_last_prior_is_kept_with_a_logged_fallback(small_net):
    """A lone wrong candidate fails its test but is kept (the documented fallback), logged."""
    agent = _pe_run(small_net, 1, 10.0, only_low=True)
    assert agent.survivors == ["low"] and agent.summary()["prior_left"] == "low"
    assert any(agent.tables()["priors"]["fallback"])


def test_the_baselines_mle_fb_and_rb(small_net):
    """gp-mle picks the prior of highest evidence (the true one once data arrive, against a
    2σ₀-shifted one), gp-fb's weights concentrate on it, gp-rb uses the priors in turn."""
    from evroute.bandit.agents import AgentSetup, make_agent
    from evroute.runs.config import SimulationConfig
    from evroute.runs.problem import agent_prior, prepare_problem
    from evroute.runs.simulation import run_bandit

    cfg = SimulationConfig(policy="gp-pe", horizon=12, seed=4)
    problem = prepare_problem(cfg, net=small_net)
    m = problem.prior_mean
    cands = {"low": m - 2 * math.sqrt(problem.prior_var), "true": m}

    def run(name):
        setup = AgentSetup(agent_prior(cfg, problem), problem.noise_var, problem.oracle, problem.route.start,
                           problem.route.end, candidates=cands, horizon=12, seed=4)
        agent = make_agent(name, setup)
        res = run_bandit(cfg, problem, agent=agent)
        return agent, res

    mle, res = run("gp-mle")
    assert mle.tables()["priors"]["chosen"][1:] == ["true"] * 11
    ev = mle.log_evidence()
    assert ev["true"] > ev["low"]
    # against the dense Gaussian likelihood of every raw observation: y ~ N(m_p(e), K + ς² I)
    from scipy.stats import multivariate_normal

    obs = res.observations
    e, y = obs.edge.to_numpy(), obs.observed_wh.to_numpy()
    C = agent_prior(cfg, problem).dense()[np.ix_(e, e)] + problem.noise_var * np.eye(e.size)
    for name, mean in cands.items():
        assert ev[name] == pytest.approx(multivariate_normal(mean[e], C).logpdf(y), rel=1e-9)
    fb, _ = run("gp-fb")
    assert fb._weights["true"] > 0.99
    rb, _ = run("gp-rb")
    chosen = rb.tables()["priors"]["chosen"]
    assert chosen[:4] == ["low", "true", "low", "true"] or len(rb.survivors) == 1
