"""A fleet's drives as the agents' prior, in one file (evroute.world.fleet, ``evroute prior fit``,
``--prior``): its contents against independent computations, runs under it against what the
options it replaced gave, and its refusals."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from evroute.cli import main
from evroute.errors import EvrouteError
from evroute.io import written_by_evroute
from evroute.physics.energy import load_vehicle
from evroute.physics.routes import edge_energies
from evroute.runs.config import SimulationConfig
from evroute.runs.problem import agent_prior, prepare_problem
from evroute.world.fleet import (
    RESIDUAL_SD_GRID,
    read_fleet_prior,
    residual_sd_scores,
)

from .conftest import fleet_table, make_prior_file, write_drives_import


@pytest.fixture(scope="module")
def fitted(synthetic, tmp_path_factory):
    """A fleet of 40 cars (sumo-ev) on the synthetic city, imported and fitted for the van with
    ``evroute prior fit`` as a user types it."""
    tmp = tmp_path_factory.mktemp("fleet")
    table = fleet_table(synthetic, trips=40, seed=0)
    write_drives_import(tmp / "drives", synthetic, table)
    assert main(["prior", "fit", str(tmp / "drives"), "--vehicle", "delivery-van", "--out", str(tmp / "van.json"),
                 "--no-progress"]) == 0
    return tmp, table


def test_the_prior_file_holds_the_fleets_posterior_in_the_vans_units(synthetic, fitted):
    """The file against an independent computation: its records, ρ (numpy's lstsq through the
    origin), σ₀, the noise and ℓ (the type-II fit on every trip in the car's units, times ρ), each
    edge's conjugate posterior written out edge by edge from the moved traversals, the turns'
    posterior (fleet_turns) and the vehicle scale of another vehicle."""
    from evroute.priors.fitting import fit_prior

    tmp, table = fitted
    path = tmp / "van.json"
    assert written_by_evroute(path) and path.read_text().startswith('{\n "generator": "evroute')
    data = json.loads(path.read_text())
    assert (data["format"], data["kind"]) == (1, "evroute fleet prior")
    assert data["network"]["fingerprint"] == synthetic.cache_key and data["network"]["edges"] == synthetic.n_edges
    assert (data["fleet_vehicle"]["name"], data["vehicle"]["name"]) == ("sumo-ev", "delivery-van")
    assert data["drives"]["traversals"] == len(table) and data["drives"]["trips"] == 40
    car, van = load_vehicle("sumo-ev"), load_vehicle("delivery-van")
    e_car, e_van = edge_energies(synthetic, car), edge_energies(synthetic, van)
    driven = np.unique(table.edge.to_numpy())
    rho = np.linalg.lstsq(e_car[driven, None], e_van[driven], rcond=None)[0][0]
    assert data["rho"] == pytest.approx(rho, rel=1e-12)
    assert data["fit"]["noise_model"] == "one level"  # (the fleet's noise is one level: 3 Wh)
    fit = fit_prior(synthetic, e_car, table)
    assert data["prior_std"] == pytest.approx(rho * fit["prior_std"], rel=1e-9)
    assert data["noise_std"] == pytest.approx(rho * fit["noise_std"], rel=1e-9)
    assert data["lengthscale"] == fit["lengthscale"]
    assert fit["noise_std"] == pytest.approx(3.0, rel=0.2)
    # each edge's conjugate posterior, by hand, from the traversals moved into the van's units
    s0 = data["prior_std"] ** 2
    moved = {e: [] for e in range(synthetic.n_edges)}
    for e, y in zip(table.edge, table.edge_wh, strict=True):
        moved[e].append(e_van[e] + rho * (y - e_car[e]))
    spread = sum(((np.array(v) - np.mean(v)) ** 2).sum() for v in moved.values() if v) / (len(table) - driven.size)
    mean, var = np.array(data["edges"]["mean"]), np.array(data["edges"]["var"])
    for e, ys in moved.items():
        n = len(ys)
        want = e_van[e] + n * s0 / (n * s0 + spread) * (np.mean(ys) - e_van[e]) if n else e_van[e]
        assert mean[e] == pytest.approx(want, rel=1e-9, abs=1e-9)
        assert var[e] == pytest.approx(s0 * spread / (n * s0 + spread), rel=1e-9)
        assert data["edges"]["traversals"][e] == n
    assert data["edges"]["noise_var"] == pytest.approx(spread, rel=1e-9)
    # the junctions: the fleet's per-turn posterior, in the van's units
    from evroute.world.junctions import fleet_turns

    turns = fleet_turns(table, synthetic, van, measured_by=car)
    np.testing.assert_allclose(data["turns"]["mean"], turns.mean, rtol=1e-12)
    np.testing.assert_allclose(data["turns"]["var"], turns.var, rtol=1e-12)
    assert data["turns"]["noise_var"] == pytest.approx(turns.noise_var, rel=1e-12)
    assert data["vehicle_scale"] == 0.5 and data["cross_validation"]["grid"] == list(RESIDUAL_SD_GRID)


def _direct_cv(table, e_det, *, prior_var, noise_sd, grid, folds, seed):
    """The residual trust's cross-validation written out: trips dealt into folds, each fold
    predicted from the others edge by edge."""
    trips = sorted(set(table.trip))
    order = np.random.default_rng(seed).permutation(len(trips))
    fold = {trips[j]: i % folds for i, j in enumerate(order)}
    scores, count = np.zeros(len(grid)), 0
    for f in range(folds):
        train = table[[fold[t] != f for t in table.trip]]
        test = table[[fold[t] == f for t in table.trip]]
        groups = {e: g.edge_wh.to_numpy() for e, g in train.groupby("edge")}
        spread = sum(((v - v.mean()) ** 2).sum() for v in groups.values()) / (len(train) - len(groups))
        for e, y in zip(test.edge, test.edge_wh, strict=True):
            if e not in groups:
                continue
            n, ybar = len(groups[e]), groups[e].mean()
            m = e_det[e] + n * prior_var / (n * prior_var + spread) * (ybar - e_det[e])
            v = prior_var * spread / (n * prior_var + spread)
            for i, k in enumerate(grid):
                scores[i] += norm.logpdf(y, m, math.sqrt(min(prior_var, v + (k * (m - e_det[e])) ** 2) + noise_sd ** 2))
            count += 1
    return scores / count, count


@pytest.mark.parametrize("bias", [0.0, 0.8])
def test_the_residual_trust_is_chosen_as_a_direct_evaluation_of_the_held_out_trips_chooses_it(synthetic, bias):
    """Each k's held-out log predictive density equals a direct evaluation's; a fleet whose trips
    agree chooses k = 0, one whose trips scale each edge's residual by a factor of their own (other
    traffic: 1 + 0.8 N(0, 1)) a k above 0."""
    table = fleet_table(synthetic, trips=30, seed=4, noise_wh=1.0)
    e_det = edge_energies(synthetic, load_vehicle("sumo-ev"))
    factor = 1.0 + bias * np.random.default_rng(5).standard_normal(30)
    trip = table.trip.str[1:].astype(int).to_numpy()
    e = table.edge.to_numpy()
    table = table.assign(edge_wh=e_det[e] + (table.edge_wh - e_det[e]) * factor[trip])
    got = residual_sd_scores(table, e_det, prior_var=100.0, noise_sd=1.5, folds=5, seed=3)
    want, count = _direct_cv(table, e_det, prior_var=100.0, noise_sd=1.5, grid=RESIDUAL_SD_GRID, folds=5, seed=3)
    np.testing.assert_allclose(got["log_density"], want, rtol=1e-10)
    assert got["traversals"] == count and got["chosen"] == RESIDUAL_SD_GRID[int(np.argmax(want))]
    assert (got["chosen"] == 0.0) == (bias == 0.0)


def test_a_run_under_the_prior_file_is_what_the_options_it_replaced_gave(synthetic, fitted, tmp_path):
    """--prior against --prior-drives --fleet-vehicle sumo-ev --vehicle-scale 0.5
    --prior-drives-variance fleet [--fleet-residual-sd k] with the fit's --prior-std, --noise-std and
    --lengthscales, as those options made the prior (written out here: the conjugate update of the
    moved traversals, the fleet's variance per edge plus (k r)² capped at σ₀², D K D plus
    0.25 r rᵀ): the same mean, variances and covariance; σ₀, the noise, ℓ, the vehicle and the
    network come from the file unless given, and a σ₀ given updates the edges under it."""
    from evroute.priors.network_prior import NetworkPrior
    from evroute.priors.prior import EdgeScaledPrior, VehicleScalePrior
    from evroute.world.drives_prior import fleet_prior_mean, transfer_traversals

    tmp, table = fitted
    data = json.loads((tmp / "van.json").read_text())
    cfg = SimulationConfig(prior=str(tmp / "van.json"), horizon=3, policy="gp-ucb")
    assert (cfg.network, cfg.vehicle, cfg.prior_std, cfg.noise_std, cfg.lengthscale) == (
        "synthetic", "delivery-van", data["prior_std"], data["noise_std"], data["lengthscale"])
    assert cfg.prior_turns == "drives"
    car, van = load_vehicle("sumo-ev"), load_vehicle("delivery-van")
    e_car, e_van = edge_energies(synthetic, car), edge_energies(synthetic, van)
    for k in (0.0, 0.3, 10.0):  # (10: every driven edge at σ₀², the cap)
        path = make_prior_file(tmp_path, synthetic, table, name=f"k{k}.json", residual_sd=k,
                      fitted={k2: data[k2] for k2 in ("prior_std", "noise_std", "lengthscale")})
        cfg = SimulationConfig(prior=str(path), horizon=3)
        problem = prepare_problem(cfg, net=synthetic)
        prior = agent_prior(cfg, problem)
        s0 = data["prior_std"] ** 2
        old_mean, counts, spread = fleet_prior_mean(
            e_van, transfer_traversals(table, e_car, e_van, rho=data["rho"]), s0)
        np.testing.assert_allclose(prior.mean, old_mean, rtol=1e-12, atol=1e-9)
        r = old_mean - e_van
        scale = np.sqrt(np.minimum(1.0, spread / (counts * s0 + spread) + (k * r) ** 2 / s0))
        old = VehicleScalePrior(EdgeScaledPrior(NetworkPrior(synthetic, old_mean, "combined", data["lengthscale"], 1.0,
                                                             2.0, s0), 1.0 / scale, old_mean), 0.5, r)
        np.testing.assert_allclose(prior.diag(), old.diag(), rtol=1e-10)
        idx = np.unique(table.edge.to_numpy())[:40]
        np.testing.assert_allclose(prior.rows(idx)[:, idx], old.rows(idx)[:, idx], rtol=1e-9, atol=1e-9)
        assert problem.noise_var == pytest.approx(data["noise_std"] ** 2)
    # σ₀ given: the conjugate update again under it
    own = prepare_problem(SimulationConfig(prior=str(tmp / "van.json"), prior_std=5.0, horizon=2), net=synthetic)
    want, _, _ = fleet_prior_mean(e_van, transfer_traversals(table, e_car, e_van, rho=data["rho"]), 25.0)
    np.testing.assert_allclose(own.prior_mean, want, rtol=1e-12, atol=1e-9)
    assert SimulationConfig(prior=str(tmp / "van.json"), lengthscale=0.5).lengthscale == 0.5


def test_runs_and_grids_take_the_prior_file(synthetic, fitted, tmp_path, monkeypatch, capsys):
    """simulate and compare take --prior alone (the network, the vehicle, σ₀, the noise and ℓ from
    the file), GP and BI alike; config.json records the file's digest; a rerun of the
    configuration reads the same."""
    from evroute.runs.directory import read_config
    from evroute.runs.grid import make_grid

    tmp, _ = fitted
    monkeypatch.chdir(tmp_path)
    prior = str(tmp / "van.json")
    for policy in ("gp-ts", "bi-ts"):
        assert main(["simulate", "--prior", prior, "--policy", policy, "--horizon", "3", "--out", policy,
                     "--no-progress"]) == 0, capsys.readouterr().err
    config = json.loads((tmp_path / "gp-ts" / "config.json").read_text())
    assert config["format"] == 4 and config["scenario"]["prior"] == prior
    assert config["scenario"]["vehicle"] == "delivery-van" and config["resolved"]["prior"]["sha256"] == \
        read_fleet_prior(prior).digest
    assert read_config(tmp_path / "gp-ts") == SimulationConfig.from_json(config)
    grid = make_grid(prior=prior, routes="A,B", policies="gp-ts", seeds=1, horizon=3)
    data = read_fleet_prior(prior).data
    assert grid.routes == ["synthetic:A", "synthetic:B"] and grid.lengthscales == [data["lengthscale"]]
    assert (grid.base.vehicle, grid.base.prior_std) == ("delivery-van", data["prior_std"])
    assert main(["compare", "--prior", prior, "--policies", "gp-ts", "--seeds", "1", "--horizon", "3", "--jobs", "1",
                 "--out", "cmp", "--no-progress"]) == 0, capsys.readouterr().err
    # judged: --sweep prior=none,PRIOR runs with and without the fleet's posterior, all else the file's
    grid = make_grid(sweep=f"prior=none,{prior}", policies="gp-ts", seeds=1, horizon=3)
    without, with_ = (grid.config(c) for c in grid.cells())
    assert (without.prior, with_.prior) == (None, prior) and (without.prior_turns, with_.prior_turns) == (
        "physics", "drives")
    assert without.scenario.replace(prior=prior, prior_turns="drives") == with_.scenario
    assert (without.vehicle, without.prior_std, without.lengthscale) == ("delivery-van", data["prior_std"],
                                                                          data["lengthscale"])


def test_route_under_the_prior_writes_geojson_and_a_map(synthetic, fitted, tmp_path, monkeypatch, capsys):
    """route --prior: the network and the vehicle from the file, the route under the prior's means
    (its sd the agents' prior's), GeoJSON and an HTML map that evroute recognises as its own
    (replaced without --overwrite on a second run)."""
    tmp, _ = fitted
    monkeypatch.chdir(tmp_path)
    args = ["route", "--prior", str(tmp / "van.json"), "--route", "B", "--geojson", "r.geojson", "--html", "r.html",
            "--json"]
    assert main(args) == 0, capsys.readouterr().err
    out = json.loads(capsys.readouterr().out)
    assert (out["network"], out["vehicle"]) == ("synthetic", "delivery-van")
    prior = next(r for r in out["routes"] if r["kind"] == "prior")
    fp = read_fleet_prior(tmp / "van.json")
    assert prior["edge_mean_wh"] == pytest.approx(fp.edge_mean[prior["edges"]].tolist())
    assert prior["energy_wh"] == pytest.approx(prior["edges_wh"] + prior["junctions_wh"])
    fc = json.loads((tmp_path / "r.geojson").read_text())
    assert [f["properties"]["kind"] for f in fc["features"]][-1] == "prior"
    assert written_by_evroute(tmp_path / "r.geojson") and written_by_evroute(tmp_path / "r.html")
    assert "prior route" in (tmp_path / "r.html").read_text()
    assert main(args[:-1]) == 0, capsys.readouterr().err  # its own files: replaced
    assert "prior:" in capsys.readouterr().out


def test_refusals(synthetic, fitted, tmp_path):
    """Another network (its fingerprint), another vehicle than the run's, a damaged or foreign
    file, --turns drives without turns or a prior, and a configuration of the options it
    replaced: each one line saying what to do."""
    tmp, table = fitted
    good = json.loads((tmp / "van.json").read_text())

    def variant(name, **changes):
        (tmp_path / name).write_text(json.dumps({**good, **changes}))
        return str(tmp_path / name)

    other = variant("other.json", network={**good["network"], "fingerprint": "monaco-0123456789ab"})
    with pytest.raises(EvrouteError, match="made for the network synthetic .* fit it on drives imported on this"):
        prepare_problem(SimulationConfig(prior=other, horizon=2), net=synthetic)
    with pytest.raises(EvrouteError, match="made for the vehicle delivery-van, not this run's compact-ev"):
        prepare_problem(SimulationConfig(prior=str(tmp / "van.json"), vehicle="compact-ev", horizon=2), net=synthetic)
    (tmp_path / "cut.json").write_text((tmp / "van.json").read_text()[:500])
    for path, phrase in ((str(tmp_path / "cut.json"), "not JSON"),
                         (variant("f9.json", format=9), "format 9"),
                         (variant("short.json", edges={**good["edges"], "mean": [1.0]}), "'mean' must be"),
                         (variant("negvar.json", edges={**good["edges"], "var": [-1.0] * synthetic.n_edges}),
                          "at least 0"),
                         (variant("sigma.json", prior_std=-1), "damaged"),
                         (variant("foreign.json", kind="something else"), "not a prior file"),
                         (str(tmp_path / "nope.json"), "evroute prior fit")):
        with pytest.raises(EvrouteError, match=phrase) as info:
            SimulationConfig(prior=path)
        assert "\n" not in str(info.value)
    with pytest.raises(EvrouteError, match="give their prior file with --prior"):
        SimulationConfig(prior_turns="drives")
    bare = make_prior_file(tmp_path, synthetic, table[table.trip == "t000"], name="bare.json", residual_sd=0.0,
                  fitted={"prior_std": 10.0, "noise_std": 2.0, "lengthscale": 1.0})  # one trip: no turns
    assert read_fleet_prior(bare).turns is None and SimulationConfig(prior=str(bare)).prior_turns == "physics"
    with pytest.raises(EvrouteError, match="has no turns"):
        SimulationConfig(prior=str(bare), prior_turns="drives")
    # a configuration of the options the prior file replaced (format 3): refused, with the way out
    old = SimulationConfig(horizon=3).to_json()
    old["format"] = 3
    old["scenario"].update(prior_drives="fleet/traversals.parquet", fleet_vehicle="sumo-ev")
    old["scenario"].pop("prior")
    old["agent"].update(vehicle_scale=0.5, prior_drives_variance="fleet", fleet_residual_sd=0.0)
    with pytest.raises(EvrouteError, match=r"prior fit fleet/traversals.parquet --out prior.json .* --prior"):
        SimulationConfig.from_json(old)
    for part in ("scenario", "agent"):  # the same configuration without a fleet still reads
        for key in ("prior_drives", "fleet_vehicle", "vehicle_scale", "prior_drives_variance"):
            old[part].pop(key, None)
    old["scenario"].update(prior_drives=None, fleet_vehicle=None)
    old["agent"].update(vehicle_scale=0.0, prior_drives_variance="prior", fleet_residual_sd=0.0)
    assert SimulationConfig.from_json(old).horizon == 3


def test_prior_fit_command(synthetic, fitted, tmp_path, capsys):
    """What it prints (each k's score, the choice), --residual-sd and --vehicle-scale given, a
    fleet of the run's own vehicle (no scale), and an import without its records refused."""
    tmp, table = fitted
    assert main(["prior", "fit", str(tmp / "drives" / "traversals.parquet"), "--out", str(tmp_path / "own.json"),
                 "--residual-sd", "0.25", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "residual trust k 0.25 (given)" in out and "vehicle scale sd 0" in out
    data = json.loads((tmp_path / "own.json").read_text())
    assert data["rho"] == 1.0 and data["vehicle"] == data["fleet_vehicle"] and data["cross_validation"] is None
    assert main(["prior", "fit", str(tmp / "drives"), "--vehicle", "delivery-van", "--vehicle-scale", "0.2",
                 "--out", str(tmp_path / "van.json"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "<- chosen" in out and out.count("  k = ") == len(RESIDUAL_SD_GRID)
    assert json.loads((tmp_path / "van.json").read_text())["vehicle_scale"] == 0.2
    # an import of an earlier evroute (the network and the vehicle by name only): read, said in a warning,
    # and the same prior as from the import that records them
    old = tmp_path / "old"
    old.mkdir()
    table.to_parquet(old / "traversals.parquet")
    (old / "report.json").write_text(json.dumps({"network": "synthetic", "vehicle": "sumo-ev"}))
    assert main(["prior", "fit", str(old), "--vehicle", "delivery-van", "--vehicle-scale", "0.2", "--out",
                 str(tmp_path / "old.json"), "--no-progress"]) == 0
    assert "an earlier evroute's" in capsys.readouterr().err
    new, got = (json.loads((tmp_path / f).read_text()) for f in ("van.json", "old.json"))
    for key in ("drives", "generator"):
        new.pop(key), got.pop(key)
    assert got == new
    (old / "report.json").write_text(json.dumps({"network": "my-city", "vehicle": "sumo-ev"}))
    assert main(["prior", "fit", str(old), "--out", str(tmp_path / "x.json")]) == 2
    assert "give it with --network" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()
    assert main(["prior", "fit", str(old), "--network", "synthetic", "--out", str(tmp_path / "x.json"),
                 "--no-progress"]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(old / "traversals.parquet"), table)


def test_a_small_fleet_falls_back_in_words(synthetic, tmp_path, capsys):
    """Two trips: too few for a fit or a cross-validation; the paper's sigma_0, noise and ℓ, and
    k = 0, each said in one warning line, and the file still runs."""
    from evroute.priors.prior import NOISE_SCALE, PRIOR_SCALE

    table = fleet_table(synthetic, trips=2, seed=6)
    write_drives_import(tmp_path / "small", synthetic, table)
    assert main(["prior", "fit", str(tmp_path / "small"), "--out", str(tmp_path / "p.json"), "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert "warning: drives too few for a fit" in err and "warning: the residual trust k is 0" in err
    assert "residual trust k 0 (too few trips)" in out and "the paper's: sigma_0" in out
    data = json.loads((tmp_path / "p.json").read_text())
    sigma_det = float(np.std(edge_energies(synthetic, load_vehicle("sumo-ev"))))
    assert data["prior_std"] == pytest.approx(PRIOR_SCALE * sigma_det) and data["lengthscale"] == 1.0
    assert data["noise_std"] == pytest.approx(NOISE_SCALE * sigma_det) and data["residual_sd"] == 0.0
    assert len(data["notes"]) == 2 and data["cross_validation"] is None
    assert main(["simulate", "--prior", str(tmp_path / "p.json"), "--horizon", "3", "--out", str(tmp_path / "run"),
                 "--no-progress"]) == 0, capsys.readouterr().err


def test_prior_fit_is_the_same_whatever_the_hash_seed(fitted, tmp_path):
    """Two processes of other PYTHONHASHSEEDs write the same prior file, byte for byte."""
    import os
    import subprocess
    import sys

    tmp, _ = fitted
    files = []
    for seed in ("1", "2"):
        out = tmp_path / f"h{seed}.json"
        proc = subprocess.run([sys.executable, "-m", "evroute", "prior", "fit", str(tmp / "drives"), "--vehicle",
                               "delivery-van", "--out", str(out), "--no-progress"], capture_output=True, text=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        files.append(out.read_bytes())
    assert files[0] == files[1] == (tmp / "van.json").read_bytes()
