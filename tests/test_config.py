"""The one resolved specification of a run: declared options, components resolved once,
config.json's format (old ones still read), grids as a base plus axes, and simulate and compare
accepting exactly the same specs."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from evroute.bandit.environments import TRUTHS, Truth, register_truth
from evroute.cli import main
from evroute.errors import EvrouteError
from evroute.runs.config import (
    CONFIG_FORMAT,
    RUN_SETTINGS,
    AgentSpec,
    PriorSpec,
    RunControl,
    Scenario,
    SimulationConfig,
    flat_config_json,
    normalise_config_json,
)
from evroute.runs.grid import Grid, load_grid, make_grid, parse_sweep
from evroute.runs.problem import make_agent, prepare_problem
from evroute.runs.summaries import collect_runs, summarize
from evroute.specs import Component


def fields_of(cls) -> list[str]:
    import dataclasses

    return [f.name for f in dataclasses.fields(cls)]


SPECS = {
    "policy": ["gp-ucb", "gp-ucb[beta_scale=0]", "gp-ucb[bs=0.5]", "gp-ucb[beta-scale=0.5]", "gp-bucb[w=2,x=0.5]",
               "gp-ts[joint=true]", "gp-ucb[beta=002,fnorm=3]", "gp-ts[xi=1]", "gp-bucb[xi=-1]", "gp-magic",
               "gp-ucb[beta_scale=0.5,bs=0.5]", "gp-ucb[beta_scale=nan]", "bi-bucb[omega=2]"],
    "model": ["exact", "exact[merge=always]", "svgp[inducing=500,steps=2]", "nystrom[gamma=0.3]", "svgp[rank=2]",
              "oracle", "exact[max_active=0]"],
    "truth": ["gp", "rkhs[B=10]", "rkhs[b=10,anchors=5]", "rkhs", "rkhs[B=-1]", "sumo-magic"],
    "closures": ["alternate", "random[rate=0.1]", "random[rate=2]", "weekly"],
}


def _outcome(fn):
    try:
        return "ok", fn()
    except EvrouteError as exc:
        return "error", str(exc)


@pytest.mark.parametrize("setting,spec", [(k, s) for k, specs in SPECS.items() for s in specs])
def test_simulate_and_compare_accept_exactly_the_same_specs(setting, spec):
    """One declaration per option: the config (simulate) and the grid (compare) resolve a spec by
    the same registry, so they accept and refuse the same specs with the same words (before,
    gp-ucb[beta-scale=0.5] was accepted by compare and refused by simulate, and beta_scale=0
    the other way round)."""
    kind, sim = _outcome(lambda: getattr(SimulationConfig(**{setting: spec}), setting).label)
    key = "policies" if setting == "policy" else setting
    ckind, cmp = _outcome(lambda: getattr(make_grid(network="synthetic", routes="A", seeds=1, **{key: spec})
                                          .config(make_grid(network="synthetic", routes="A", seeds=1,
                                                            **{key: spec}).cells()[0]), setting).label)
    assert kind == ckind, (sim, cmp)
    if kind == "ok":
        assert sim == cmp
    else:
        assert sim in cmp  # compare may add where (the option's flag); the reason is the same


def test_components_resolve_once_with_canonical_labels():
    cfg = SimulationConfig(policy="GP-BUCB[x=0.5, w=1]", model="exact[merge=always]", truth="rkhs[b=10]",
                           closures="random", drift=0.01)
    assert isinstance(cfg.policy, Component) and cfg.policy.label == "gp-bucb[xi=0.5]"
    assert cfg.policy.options == {"omega": 1.0, "xi": 0.5, "beta_scale": 1.0}
    assert (cfg.model.label, cfg.truth.label, cfg.closures.label) == ("exact[merge=always]", "rkhs[B=10]", "random")
    assert cfg.scenario.truth is cfg.truth and cfg.scenario.drift == 0.01
    with pytest.raises(EvrouteError, match="rkhs.*needs B"):
        SimulationConfig(truth="rkhs")
    with pytest.raises(AttributeError):  # a frozen value: a changed setting is a new, checked config
        cfg.horizon = 3  # type: ignore[misc]
    assert cfg.replace(horizon=3).horizon == 3
    with pytest.raises(EvrouteError, match="horizon"):
        cfg.replace(horizon=0)


def test_config_json_round_trip_and_formats_1_and_2_still_read(tmp_path):
    # (the paper's truth: a config.json of format 1 predates --truth and means it)
    cfg = SimulationConfig(policy="gp-ucb[beta_scale=0.5,beta=002]", model="exact[merge=always]",
                           priors="sumo-ev,compact-ev[eps=0.01]", horizon=7, seed=3, drift=0.01, truth="gp")
    data = json.loads(json.dumps(cfg.to_json()))
    # format 4: the world, the agent and the schedule as three objects, every setting in one of them
    assert data["format"] == CONFIG_FORMAT == 4 and set(data) == {"format", "scenario", "agent", "control"}
    assert data["agent"]["policy"] == "gp-ucb[beta_scale=0.5,beta=002]" and data["control"]["horizon"] == 7
    assert data["scenario"]["drift"] == 0.01 and data["scenario"]["priors"][1]["eps"] == 0.01
    assert sorted(k for part in ("scenario", "agent", "control") for k in data[part]) == sorted(RUN_SETTINGS)
    assert SimulationConfig.from_json(data) == cfg
    flat = flat_config_json(data)
    # a config.json of format 3: a fleet's drives as five settings (here at their defaults: none)
    three = {**data, "format": 3, "scenario": {**data["scenario"], "prior_drives": None, "fleet_vehicle": None},
             "agent": {**data["agent"], "vehicle_scale": 0.0, "prior_drives_variance": "prior", "fleet_residual_sd": 0.0}}
    del three["scenario"]["prior"]
    assert SimulationConfig.from_json(three) == cfg
    # a config.json of format 2: one flat object, components as canonical specs
    two = {**{k: v for k, v in flat.items() if k != "format"}, "format": 2}
    assert SimulationConfig.from_json(two) == cfg
    # a config.json of format 1 (the policy's options as fields, the model's apart)
    old = {"network": "synthetic", "route": None, "policy": "gp-ucb", "model": "exact", "horizon": 7, "seed": 3,
           "omega": 1.0, "xi": 1.0, "beta_scale": 0.5, "joint_samples": False, "policy_options": {"beta": "002"},
           "model_options": {"merge": "always"}, "priors": "sumo-ev,compact-ev[eps=0.01]", "drift": 0.01,
           "resolved": {"candidates": flat["priors"]}}
    assert SimulationConfig.from_json(old) == cfg
    assert normalise_config_json(old)["policy"] == "gp-ucb[beta_scale=0.5,beta=002]"
    assert normalise_config_json(data)["policy"] == "gp-ucb[beta_scale=0.5,beta=002]"
    with pytest.raises(EvrouteError, match="JSON object"):
        normalise_config_json([1])
    with pytest.raises(EvrouteError, match="format 3 has no 'agent' object"):
        SimulationConfig.from_json({"format": 3, "scenario": {}, "control": {}})


def test_a_run_is_a_scenario_an_agent_and_a_control():
    """Every setting belongs to exactly one part; a configuration is made from its parts or from
    settings (the same value either way), reads every setting back by name, and the parts are
    frozen, hashable values: equal worlds are one cache key whatever the agents."""
    from evroute.runs.config import SETTING_PART

    assert sorted(SETTING_PART) == sorted(RUN_SETTINGS)
    assert set(fields_of(PriorSpec)) <= set(fields_of(AgentSpec))
    cfg = SimulationConfig(network="synthetic", route="B", policy="bi-ts", horizon=9, seed=4, drift=0.02,
                           lengthscale=0.5)
    again = SimulationConfig(Scenario(network="synthetic", route="B", drift=0.02),
                             AgentSpec(policy="bi-ts", lengthscale=0.5), RunControl(horizon=9, seed=4))
    assert again == cfg and hash(again) == hash(cfg)
    assert {name: getattr(cfg, name) for name in RUN_SETTINGS} == cfg.settings()
    assert (cfg.horizon, cfg.route, cfg.policy.name, cfg.lengthscale) == (9, "B", "bi-ts", 0.5)
    assert cfg.agent.prior == PriorSpec(lengthscale=0.5)
    # a change of agent keeps the world (the problem's cache key); a change of world does not
    other = cfg.replace(policy="gp-ucb", model="kalman", lengthscale=2.0)
    assert other.scenario is cfg.scenario and other.agent != cfg.agent
    assert cfg.replace(truth_lengthscale=0.5).scenario != cfg.scenario
    assert cfg.replace(scenario=Scenario(network="synthetic")).route is None
    assert len({cfg.scenario, other.scenario, cfg.replace(seed=5).scenario}) == 1
    with pytest.raises(AttributeError):
        cfg.scenario.drift = 0.5  # type: ignore[misc]
    with pytest.raises(TypeError, match="unknown setting.*colour"):
        SimulationConfig(colour="red")
    with pytest.raises(TypeError, match="must be a Scenario"):
        SimulationConfig(scenario=AgentSpec())
    with pytest.raises(EvrouteError, match="horizon"):
        RunControl(horizon=0)


def test_candidate_files_are_read_once(tmp_path):
    f = tmp_path / "cands.json"
    f.write_text(json.dumps({"candidates": [{"vehicle": "sumo-ev"}, {"vehicle": "delivery-van", "eps": 0.01}]}))
    cfg = SimulationConfig(policy="gp-pe", priors=str(f), horizon=3)
    f.unlink()  # resolved: nothing reads it again (the problem, the agent, config.json)
    problem = prepare_problem(cfg)
    assert [c.name for c in cfg.candidates()] == ["cands:0", "cands:1"]
    make_agent(cfg, problem)
    assert SimulationConfig.from_json(cfg.to_json()).priors == cfg.priors


@pytest.mark.needs("svgp")
def test_a_missing_capability_names_the_backends_that_have_it():
    cfg = SimulationConfig(policy="gp-ts[joint=true]", model="svgp", horizon=2)
    with pytest.raises(EvrouteError, match=r"joint samples.*backends that can: bi, bkb, eigen, exact, kalman, "
                                           r"nystrom, window"):
        make_agent(cfg, prepare_problem(cfg))


# --------------------------------------------------------------------------------------
# a truth is one module and one registration
# --------------------------------------------------------------------------------------


@pytest.fixture
def flat_truth():
    """A plug-in truth: f = the truth's mean + a constant (declared option ``shift``)."""
    from evroute.specs import Option
    from evroute.validate import nonneg_float

    def factory(setup, shift):
        return Truth(setup.mean + shift, setup.noise_std, description={"flat_shift": shift})

    register_truth("flat", factory, options=(Option("shift", nonneg_float, 0.0, "added to every edge"),),
                   description="E_det plus a constant")
    yield
    TRUTHS.unregister("flat")


def test_a_registered_truth_runs_through_simulate_and_compare(flat_truth, tmp_path, capsys):
    assert "flat" in RUN_SETTINGS["truth"].describe()  # the help is asked when shown, never stale
    code = main(["simulate", "--truth", "flat[shift=5]", "--horizon", "3", "--out", str(tmp_path / "r"),
                 "--no-progress"])
    assert code == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    edges = pd.read_parquet(tmp_path / "r" / "edges.parquet")
    assert summary["truth"] == "flat[shift=5]" and summary["flat_shift"] == 5.0
    np.testing.assert_allclose(edges.energy_true_wh, edges.energy_det_wh + 5.0, rtol=1e-12)
    g = make_grid(network="synthetic", routes="A", policies="bi-ts", seeds=1, truth="flat[shift=5]")
    assert g.cell_name(g.cells()[0]) == "synthetic-A-bi-ts-flat-shift-5-s0"
    with pytest.raises(EvrouteError, match="unknown option.*flat.*scale"):
        SimulationConfig(truth="flat[scale=2]")


# --------------------------------------------------------------------------------------
# a grid is a base run plus axes
# --------------------------------------------------------------------------------------


def test_a_grid_is_a_base_with_replacements():
    g = make_grid(network="synthetic", routes="A,B", policies="gp-ucb,bi-ts", seeds=2, horizon=9, kappa="2",
                  model="exact[merge=always]", sweep=["nu=1,3", "drift=0,0.01"])
    assert len(g.cells()) == 2 * 2 * 2 * 2 * 2
    for cell in g.cells():
        cfg = g.config(cell)
        sweep = dict(cell.sweep)
        assert (cfg.route, cfg.policy, cfg.seed, cfg.horizon, cfg.kappa) == (cell.route, cell.policy, cell.seed, 9, 2.0)
        assert (cfg.nu, cfg.drift) == (sweep["nu"], sweep["drift"])
        assert cfg.backend == ("bi" if cell.policy.name == "bi-ts" else "exact")
        # every other setting is the base's
        for name in ("vehicle", "kernel", "truth", "closures", "lengthscale", "truth_lengthscale"):
            assert getattr(cfg, name) == getattr(g.base, name)
    names = [g.cell_name(c) for c in g.cells()]
    assert len(set(names)) == len(names)
    assert "synthetic-B-gp-ucb-drift0.01-nu3-s1" in names and "synthetic-A-bi-ts-nu1-s0" in names
    back = Grid.from_dict(json.loads(json.dumps(g.to_dict())))
    assert [back.cell_name(c) for c in back.cells()] == names and back.base == g.base


@pytest.mark.parametrize("items,msg", [
    (["policy=gp-ts"], "--policies"), (["seed=1,2"], "--seeds"), (["lengthscale=1,2"], "an axis of the grid"),
    (["zeta=1"], "not a setting"), (["kappa"], "NAME=VALUE"), (["kappa=1", "kappa=2"], "twice"),
    (["kappa=0"], "kappa"), (["model=exact,oracle"], "unknown model"),
])
def test_bad_sweeps(items, msg):
    with pytest.raises(EvrouteError, match=msg):
        parse_sweep(items)


def test_a_sweep_runs_and_is_summarised_apart(tmp_path, capsys):
    out = tmp_path / "cmp"
    args = ["compare", "--out", str(out), "--routes", "A", "--policies", "bi-ts", "--seeds", "2", "--horizon", "4",
            "--sweep", "closures=none,alternate", "--jobs", "1", "--no-progress"]
    assert main(args) == 0
    first = capsys.readouterr()
    assert "4 runs (0 kept, 4 computed)" in first.out, first.err
    table = pd.read_csv(out / "summary.csv")
    assert list(table.variant) == ["closures=None", "closures=alternate"] and list(table.n_seeds) == [2, 2]
    runs = collect_runs(out, load_grid(out))
    by_hand = runs.groupby("variant", sort=False).final_regret_wh.mean()
    np.testing.assert_allclose(summarize(runs).final_regret_mean_wh, by_hand.to_numpy(), rtol=1e-12)
    assert main(args) == 0  # resumes: the same cells, kept
    assert "4 runs (4 kept, 0 computed)" in capsys.readouterr().out


def test_old_grid_json_still_reads(tmp_path):
    """A grid.json of format 1 (the base's settings at the top, policy options per cell)."""
    old = {"format": 1, "preset": None, "networks": ["synthetic"], "routes": ["synthetic:A"],
           "policies": ["gp-bucb[xi=0.5]", "bi-ts"], "seeds": [0, 1], "horizon": 5, "model": "exact",
           "lengthscales": [1.0], "kernel": "combined", "truth_lengthscale": 1.0, "truth": "rkhs[B=10]",
           "priors": None, "truth_prior": None, "drift": 0.0, "closures": None, "vehicle": None, "osm": {},
           "dem": {}, "model_options": {"merge": "always"}, "cells": []}
    (tmp_path / "grid.json").write_text(json.dumps(old))
    g = load_grid(tmp_path)
    assert [g.cell_name(c) for c in g.cells()] == [
        "synthetic-A-gp-bucb-w1-x0.5-rkhs-B-10-s0", "synthetic-A-gp-bucb-w1-x0.5-rkhs-B-10-s1",
        "synthetic-A-bi-ts-rkhs-B-10-s0", "synthetic-A-bi-ts-rkhs-B-10-s1"]
    assert g.model.label == "exact[merge=always]" and g.horizon == 5


def test_evroute_error_is_a_value_error():
    """As scikit-learn's and BoTorch's input errors: library callers may catch ValueError."""
    with pytest.raises(ValueError, match="unknown policy"):
        SimulationConfig(policy="gp-magic")


class _Recorder:
    """A configuration that records which of its settings are read."""

    def __init__(self, cfg):
        object.__setattr__(self, "_cfg", cfg)
        object.__setattr__(self, "read", set())

    def __getattr__(self, name):
        self.read.add(name)
        return getattr(self._cfg, name)


@pytest.mark.parametrize("extra", [{}, {"truth_prior": "delivery-van", "noise_std": "edge[a=2,b_per_km=10]",
                                        "prior_std": 9.0, "kernel": "graph"}])
def test_the_problem_reads_the_world_and_the_prior_its_spec(synthetic, extra):
    """prepare_problem reads the scenario and the seed, agent_prior the PriorSpec: the keys the
    compare workers keep them by are these values themselves (a world setting cannot be left out
    of a key). Handed only those, they build what the whole configuration builds, and they read
    most of what they are handed (the world's settings they leave are those of the environment
    and the agents: drift, closures, candidate priors)."""
    from evroute.runs.problem import agent_prior, prepare_problem

    cfg = SimulationConfig(network="synthetic", horizon=3, **extra)
    rec = _Recorder(cfg.scenario)
    problem = prepare_problem(rec, cfg.seed, net=synthetic)
    whole = prepare_problem(cfg, net=synthetic)
    np.testing.assert_array_equal(problem.truth, whole.truth)
    np.testing.assert_array_equal(problem.prior_mean, whole.prior_mean)
    assert problem.noise_var == whole.noise_var and problem.prior_var == whole.prior_var
    derived = {"truth_vehicle"}  # a method of the scenario reading vehicle and truth_prior
    unread = set(fields_of(Scenario)) - (rec.read - derived)
    assert unread <= {"osm", "dem", "from_point", "to_point", "drift", "closures", "priors", "vehicle",
                      "truth_prior", "prior_turns"}, unread  # (the turns' prior: read under a truth with turns)
    rec = _Recorder(cfg.agent.prior)
    prior = agent_prior(rec, problem)
    assert rec.read >= {"kernel", "lengthscale"}
    np.testing.assert_array_equal(prior.diag(), agent_prior(cfg, problem).diag())
    with pytest.raises(TypeError, match="give the seed"):
        prepare_problem(cfg.scenario, net=synthetic)


@pytest.fixture
def declared_agents():
    """Two plug-in agents whose names say nothing of their model: one declares the BI model, one
    none."""
    from evroute.bandit.agents import POLICIES, register_agent
    from evroute.testing import small_problem  # noqa: F401 (the agents below are never built)

    register_agent("counter", lambda setup: None, description="declares bi", model="bi")
    register_agent("fixed-route", lambda setup: None, description="declares none", model="none")
    yield
    POLICIES.unregister("counter")
    POLICIES.unregister("fixed-route")


def test_a_policys_model_is_what_it_declared_not_its_name(declared_agents):
    """The model family comes from the registration, not from a gp-/bi- prefix: the backend a run
    reports, the --model check, and a compare model sweep (the runs of a policy without the run's
    model are not multiplied by the sweep, nor named after it)."""
    from evroute.bandit.agents import policy_family
    from evroute.runs.grid import make_grid

    assert [policy_family(p) for p in ("gp-ts", "bi-ucb[delta=0.1]", "counter", "fixed-route", "gp-amm")] == \
        ["gp", "bi", "bi", "none", "gp"]
    assert SimulationConfig(policy="counter").backend == "bi"
    assert SimulationConfig(policy="fixed-route").backend == "none"
    with pytest.raises(EvrouteError, match="no posterior model"):
        SimulationConfig(policy="fixed-route", model="nystrom")
    g = make_grid(network="synthetic", routes="A", policies="gp-ts,fixed-route", seeds=1, sweep="model=exact,nystrom")
    names = [g.cell_name(c) for c in g.cells()]
    assert len(names) == len(set(names))
    assert {g.config(c).model.name for c in g.cells() if c.policy.name == "fixed-route"} == {"exact"}
    assert any("mnystrom" in n for n in names if "gp-ts" in n)


def test_what_an_agent_needs_is_declared_and_checked_before_any_work():
    """An agent whose bounds take one noise level declares it (ONE_NOISE_LEVEL): a per-edge noise
    model is refused when the run is configured, in one line; and the declaration is what the
    agent does: every registered policy built with a per-edge model refuses it exactly when it
    declares the need."""
    import dataclasses

    from evroute.bandit.agents import (
        ONE_NOISE_LEVEL,
        POLICIES,
        agent_names,
        make_agent,
        resolve_policy,
    )
    from evroute.testing import small_problem

    with pytest.raises(EvrouteError, match="one noise level"):
        SimulationConfig(policy="gp-amm", noise_std="edge[a=1,b_per_km=2]")
    with pytest.raises(EvrouteError, match="--prior"):
        SimulationConfig(prior_turns="drives")
    SimulationConfig(policy="gp-ucb", noise_std="edge[a=1,b_per_km=2]")  # an index agent takes it
    p = small_problem()
    for name in agent_names():
        setup = dataclasses.replace(p.setup(), edge_noise_var=np.full(p.n_edges, p.noise_var))
        try:
            make_agent(resolve_policy(name), setup)
            refused = False
        except EvrouteError as exc:
            refused = "one noise level" in str(exc)
        assert refused == (ONE_NOISE_LEVEL in POLICIES.get(name).needs), name
    with pytest.raises(EvrouteError, match="unknown needs"):
        from evroute.bandit.agents import register_agent

        register_agent("needy", lambda setup: None, needs=("a-gpu",))
