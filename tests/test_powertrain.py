"""A second world (issue: real cars' power trains drive the simulated traffic): FASTSim's cars
re-cost SUMO's traffic. The booking of an auxiliary load by hand; without FASTSim one line; with
it, FASTSim's own formulas and trip energies reproduced, the world conserving energy, the fitted
priors, and "which car am I?" end to end on the synthetic city."""

from __future__ import annotations

import builtins
import importlib.util
import json

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from evroute.cli import main
from evroute.errors import EvrouteError
from evroute.physics.energy import Vehicle, kinetic_energy_wh, kinetic_wh, load_vehicle
from evroute.settings import FASTSIM_INSTALL, POWERTRAINS
from evroute.world.sumo_atlas import traversals

CARS = tuple(POWERTRAINS)
#: The synthetic city's traffic the tests re-cost (as tests/test_sumo.py's atlas).
TRAFFIC = dict(rate=300.0, hours=0.25, probes=1)


def _no_fastsim(monkeypatch):
    real_find, real_import = importlib.util.find_spec, builtins.__import__
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, **k: None if name == "fastsim"
                        else real_find(name, *a, **k))

    def fake(name, *args, **kwargs):
        if name == "fastsim":
            raise ImportError("no fastsim")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake)


def test_without_fastsim_one_line_names_the_install(monkeypatch, tmp_path, capsys):
    _no_fastsim(monkeypatch)
    for args in (["simulate", "--truth", "sumo[powertrain=leaf]", "--horizon", "3", "--out", str(tmp_path / "r")],
                 ["sumo", "atlas", "--network", "synthetic", "--powertrain", "bolt"],
                 ["vehicles", "fit", "zoe", "--out", str(tmp_path / "zoe.json")]):
        assert main(args) == 2
        err = capsys.readouterr().err
        lines = [x for x in err.splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:") and FASTSIM_INSTALL in lines[0], err
        assert "Traceback" not in err
    assert not (tmp_path / "r").exists() and not (tmp_path / "zoe.json").exists()
    from evroute.world.powertrain import car

    with pytest.raises(EvrouteError, match=r'FASTSim is not installed: pip install "evroute\[fastsim\]"'):
        car("leaf")


def test_a_powertrain_is_a_known_car_or_a_fastsim_file(tmp_path):
    from evroute.settings import powertrain_spec

    assert powertrain_spec("powertrain", None) is None and powertrain_spec("powertrain", "none") is None
    with pytest.raises(EvrouteError, match="unknown car 'tractor'; one of leaf, bolt, model3, zoe"):
        powertrain_spec("powertrain", "tractor")
    with pytest.raises(EvrouteError, match="no such FASTSim vehicle file"):
        powertrain_spec("powertrain", str(tmp_path / "mine.yaml"))


def test_an_auxiliary_load_is_booked_where_the_cars_time_went():
    """A car crosses edge 1 (SUMO edge y, its first and last edges partial) at 10 m/s, slows to a
    stop at its end and waits 3 s there, then leaves: with 0.1 Wh of auxiliary energy a second, the
    edge keeps the auxiliary energy of a car at its top speed over the same distance (the share
    v / v_top of each second), the rest (the slowing and the wait) is the junction's, in kin_out;
    the energies still add up, and each kinetic part is at least the car's mechanical change."""
    v = Vehicle(aux_power_w=360.0)
    speeds = [10.0, 10.0, 10.0, 10.0, 5.0, 0.0, 0.0, 0.0, 0.0, 4.0, 8.0]
    lanes = ["x_0", "y_0", "y_0", "y_0", "y_0", "y_0", "y_0", "y_0", "y_0", "z_0", "z_0"]
    aux = 0.1
    prop = [2.0, 2.0, 2.0, 2.0, -3.0, -1.5, 0.0, 0.0, 0.0, 4.0, 5.0]
    em = pd.DataFrame({"time": np.arange(11.0), "vehicle": "a", "lane": lanes, "speed": speeds,
                       "electricity": np.add(prop, aux), "aux": aux})
    t = traversals(em, {1: ["y"]}, v)
    assert len(t) == 1 and t.edge.iat[0] == 1
    row = t.iloc[0]
    on = slice(1, 9)
    assert row.energy_wh == pytest.approx(sum(prop[on]) + 8 * aux)
    assert row.energy_wh == pytest.approx(row.edge_wh + row.kin_in_wh + row.kin_out_wh)
    # the edge's auxiliary energy: Σ aux v / v_top = 0.1 (10 + 10 + 10 + 5) / 10 = 0.35 Wh
    plain = traversals(em.assign(electricity=prop, aux=0.0), {1: ["y"]}, v).iloc[0]
    assert row.edge_wh - plain.edge_wh == pytest.approx(0.35)
    assert row.kin_out_wh - plain.kin_out_wh == pytest.approx(8 * aux - 0.35)  # the slowing and the wait
    assert row.kin_in_wh == pytest.approx(plain.kin_in_wh)
    assert row.kin_out_wh >= float(kinetic_energy_wh(0.0, v) - kinetic_energy_wh(10.0, v))


def test_a_wheel_work_splits_any_losses_and_keeps_both_parts_above_the_mechanics():
    """kinetic_wh with the wheel work given (a power train that is not SUMO's): for any step whose
    battery energy is at least its wheel work, the kinetic part is at least ΔKE and the steady part
    at least the work at a constant kinetic state; a friction brake's loss goes to the kinetic part."""
    rng = np.random.default_rng(0)
    veh = Vehicle(mass_kg=1600.0, eta_plus=0.9, eta_minus=0.85, rotating_mass_kg=30.0)
    n = 10_000
    v0, v = rng.uniform(0, 30, n), rng.uniform(0, 30, n)
    dke = 0.5 * (1630.0) * (v**2 - v0**2) / 3600.0
    w = rng.normal(0, 5, n)  # climb, rolling and drag, Wh
    x = w + dke
    loss = np.abs(x) * rng.uniform(0.0, 0.5, n) + rng.uniform(0, 2, n) * (rng.random(n) < 0.2)
    e = x + loss
    kin = kinetic_wh(v, v0, e, vehicle=veh, wheel=x)
    assert (kin >= dke - 1e-12).all() and (e - kin >= w - 1e-12).all()
    # a stop: 14 m/s to 9 m/s, 90 kW of braking, 40 of them by the friction brake
    dke = 0.5 * 1630.0 * (81.0 - 196.0) / 3600.0
    x = dke + 0.3
    e = (x + 40e3 / 3600.0) * 0.85
    kin = float(kinetic_wh(9.0, 14.0, e, vehicle=veh, wheel=x))
    assert kin == pytest.approx(e - 0.3 / 0.9, rel=1e-9) and kin > dke


# --------------------------------------------------------------------------------------
# with FASTSim
# --------------------------------------------------------------------------------------


@pytest.mark.needs("fastsim")
def test_the_car_is_fastsims_and_its_formulas_are_fastsims():
    """The car as Eq. 8 sees it: FASTSim's mass, rotating mass n I / r², coefficients, g = 9.80 and
    its air; its power at the wheels, step by step, is FASTSim's own (1e-9); FASTSim's propulsion
    energy is never below the wheel work (losses ≥ 0); a hard stop is braked by friction beyond
    the motor's regeneration, and a hard start lags the trace."""
    from evroute.world.powertrain import _walk, car, drive

    c = car("leaf", 20.0)
    v = c.vehicle
    assert v.mass_kg == pytest.approx(1636.03) and v.rotating_mass_kg == pytest.approx(4 * 0.815 / 0.336**2)
    assert v.g == 9.80 and 1.1 < v.air_density < 1.2 and 0.8 < v.eta_plus < 1 and 0.7 < v.eta_minus < 1
    assert 240 < v.aux_power_w < 300 and c.regen_max_w == pytest.approx(78_400.0)
    rng = np.random.default_rng(1)
    walk = np.clip(np.cumsum(rng.normal(0, 0.5, 200)) + 8, 0, 15)
    speed = np.r_[walk[0], walk]  # (the car starts at the trace's first speed)
    rise = np.r_[0.0, rng.normal(0, 0.3, 200)]
    h, met = _walk(c, speed, rise, np.zeros_like(speed))
    assert met
    np.testing.assert_allclose(h["tractive"][1:], c.tractive_w(speed[:-1], speed[1:], rise[1:]), rtol=1e-9, atol=1e-6)
    assert (h["prop"] >= h["tractive"] - 1e-6).all()
    np.testing.assert_allclose(h["electrical"], h["prop"] + h["aux"], atol=1e-6)
    hard = np.r_[0.0, np.arange(3.5, 28.0, 3.5), np.full(20, 28.0), np.arange(28.0, 0.0, -4.5), 0.0, 0.0]
    r = drive(c, hard, np.zeros_like(hard))
    assert r.tries == 1 and r.braked > 0 and r.friction_wh.sum() > 10 and r.lagged > 0
    assert (r.friction_wh >= -1e-9).all() and np.all(np.diff(r.speed) <= c.accel_max + 1e-9)


@pytest.mark.needs("fastsim")
def test_the_cold_costs_heating_where_the_car_has_a_thermal_model():
    from evroute.world.powertrain import car

    for name in ("leaf", "bolt", "model3"):
        assert car(name, -5.0).vehicle.aux_power_w > 1500 > 400 > car(name, 20.0).vehicle.aux_power_w
    assert car("zoe", -5.0).vehicle.aux_power_w == pytest.approx(car("zoe", 20.0).vehicle.aux_power_w)


@pytest.mark.needs("fastsim")
def test_a_fitted_prior_predicts_held_out_drives_better_than_the_papers_car(tmp_path, capsys):
    """evroute vehicles fit: Eq. 8 plus an auxiliary power fitted to each car's steady segments
    predicts held-out segments within a few Wh and whole drives (UDDS, HWFET, a city drive)
    within 5 %, far better than the paper's car; the file is a vehicle file --vehicle reads."""
    out = tmp_path / "leaf.json"
    assert main(["vehicles", "fit", "leaf", "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "held-out segments" in text and "UDDS" in text and str(out) in text
    record = json.loads(out.read_text())
    assert list(record)[0] == "generator"
    v = load_vehicle(str(out))
    assert v.aux_power_w > 200 and v.rotating_mass_kg == pytest.approx(28.876, rel=1e-3) and v.g == 9.80
    report = record["fit"]
    fit, base = report["held_out_segments"]["fit"], report["held_out_segments"]["baseline"]
    assert fit["rmse_wh"] < 5.0 and fit["rmse_wh"] < 0.4 * base["rmse_wh"]
    for d in report["held_out_drives"]:
        assert abs(d["fit_wh"] - d["fastsim_wh"]) < 0.05 * d["fastsim_wh"], d
    assert main(["vehicles", "fit", "leaf", "--out", str(out), "--no-progress"]) == 0  # its own file: replaced
    (tmp_path / "mine.json").write_text("{}")
    assert main(["vehicles", "fit", "leaf", "--out", str(tmp_path / "mine.json")]) == 2
    assert "not written by evroute" in capsys.readouterr().err and (tmp_path / "mine.json").read_text() == "{}"


# --------------------------------------------------------------------------------------
# with FASTSim and SUMO: the powertrain world on the synthetic city
# --------------------------------------------------------------------------------------


def synthetic_trip():
    """The synthetic city and the atlas options of its route A in light traffic (skips without SUMO)."""
    from evroute.physics.routes import resolve_route
    from evroute.roads.network import load_network
    from evroute.roads.oracle import Oracle
    from evroute.world.sumo_tools import sumo_home

    try:
        sumo_home()
    except EvrouteError:
        pytest.skip("needs the sumo extra")
    net = load_network("synthetic")
    route = resolve_route(net, "A")
    return net, dict(oracle=Oracle.from_network(net), start=route.start, end=route.end, **TRAFFIC)


@pytest.fixture(scope="module")
def world():
    pytest.importorskip("fastsim")
    from evroute.world.sumo_atlas import build_atlas

    net, kw = synthetic_trip()
    atlas = build_atlas(net, "synthetic", load_vehicle(None), powertrain="leaf", **kw)
    return net, atlas, kw


def _traffic(atlas) -> pd.DataFrame:
    from evroute.cache import CacheEntry

    return pd.read_parquet(CacheEntry("traffic", atlas.summary["traffic_key"]).path("rows.parquet"))


@pytest.mark.needs("fastsim", "sumo")
def test_the_bookings_reproduce_fastsims_trip_energy(world):
    """For every car whose trip is one cycle and whose traversals follow each other: its
    traversals' energies plus the junctions between them plus its partial ends (the seconds before
    its first traversal and after its last) are FASTSim's battery energy for that trip (1e-6);
    each traversal is its edge plus its two kinetic parts, each kinetic part at least the car's
    mechanical change of ½ (m + m_rot) v²."""
    from evroute.world.powertrain import car, drive

    net, atlas, _ = world
    c = car("leaf", 20.0)
    assert atlas.vehicle == c.vehicle and atlas.summary["recost"]["cycles_refused"] == 0
    t = atlas.table
    np.testing.assert_allclose(t.energy_wh, t.edge_wh + t.kin_in_wh + t.kin_out_wh, atol=1e-9)
    ke_top, ke_in, ke_out = (kinetic_energy_wh(t[k].to_numpy(), c.vehicle) for k in ("v_top", "v_in", "v_out"))
    assert (t.kin_in_wh >= ke_top - ke_in - 1e-9).all() and (t.kin_out_wh >= ke_out - ke_top - 1e-9).all()
    rows = _traffic(atlas).sort_values(["vehicle", "time"], kind="stable")
    checked = 0
    for name, mine in t.groupby("vehicle", sort=False):
        r = rows[rows.vehicle == name]
        v, tt = r.speed.to_numpy(), r.time.to_numpy()
        if len(mine) < 3 or not (np.diff(tt) == 1).all() or (np.abs(np.diff(v)) > 10).any():
            continue  # one cycle a trip: no teleport, no jump
        if not (mine.next_edge.to_numpy()[:-1] == mine.edge.to_numpy()[1:]).all():
            continue
        trip = drive(c, np.r_[v[0], v], np.r_[0.0, 0.0, np.diff(r.z.to_numpy())])
        per_second = trip.electricity_wh[1:]
        first, last = mine.enter_s.iat[0], mine.enter_s.iat[-1] + mine.seconds.iat[-1]
        ends = per_second[(tt < first) | (tt >= last)].sum()
        booked = mine.energy_wh.sum() + mine.junction_wh.iloc[:-1].sum() + ends
        assert booked == pytest.approx(trip.electricity_wh.sum(), rel=1e-6)
        checked += 1
    assert checked > 20


@pytest.mark.needs("fastsim", "sumo")
def test_the_powertrain_world_conserves_energy(world):
    """The truth of edges plus turns booked with the Leaf: no cycle of the network creates energy,
    by evroute's Bellman–Ford and by networkx's on the line graph with the turns' costs (edges
    without a mean at the Leaf's E_det, as the truth falls back); the trip's exact optimum stands."""
    from evroute.physics.routes import edge_energies
    from evroute.world.junctions import junction_dissipation, truth_turns
    from evroute.world.sumo_truth import atlas_conservation

    net, atlas, kw = world
    c = atlas_conservation(atlas, net, atlas.vehicle, start=kw["start"], end=kw["end"])
    split = c["split"]
    assert not split["negative_cycle"] and split["optimum_status"] == "optimal"
    assert split["potential_wh"] == pytest.approx(split["optimum_wh"], abs=1e-6)
    turns, _, _ = truth_turns(atlas.table, net, atlas.vehicle)
    mean, counts = atlas.mean_energy(net.n_edges, min_traversals=3, column="edge_wh")
    f = np.where(np.isfinite(mean), mean, edge_energies(net, atlas.vehicle))  # as the truth falls back
    g = nx.DiGraph()
    g.add_weighted_edges_from((int(a), int(b), float(f[a] + turns.costs[i]))
                              for i, (a, b) in enumerate(zip(net.conn_src, net.conn_dst, strict=True)))
    assert not nx.negative_edge_cycle(g)
    cars = junction_dissipation(atlas.table, net, atlas.vehicle)
    assert cars.dissipation_wh.median() > 0 and cars.dissipation_wh.quantile(0.01) > -5.0


@pytest.mark.needs("fastsim", "sumo")
def test_a_car_waiting_at_a_light_pays_its_auxiliary_energy_on_the_junction(world):
    """The same cars booked with and without their auxiliary load: a traversal that ends at rest
    books the auxiliary energy of its seconds at rest on the junction (its kinetic parts), never on
    the edge; the edge keeps what a car at its top speed would have spent over the same distance."""
    from evroute.cache import CacheEntry
    from evroute.world.powertrain import car, drive

    net, atlas, _ = world
    c = car("leaf", 20.0)
    rows = _traffic(atlas).sort_values(["vehicle", "time"], kind="stable")
    chains = {int(k): v for k, v in json.loads(CacheEntry("traffic", atlas.summary["traffic_key"])
                                               .path("chains.json").read_text()).items()}
    waited = 0
    resting = rows[(rows.speed < 0.01) & ~rows.lane.str.startswith(":")].vehicle.unique()  # (few: light traffic)
    for name in [*resting[:20], *atlas.table.vehicle.unique()[:10]]:
        r = rows[rows.vehicle == name]
        v, tt = r.speed.to_numpy(), r.time.to_numpy()
        if not (np.diff(tt) == 1).all() or (np.abs(np.diff(v)) > 10).any():
            continue
        trip = drive(c, np.r_[v[0], v], np.r_[0.0, 0.0, np.diff(r.z.to_numpy())])
        aux, speed = trip.aux_wh[1:], trip.speed[1:]
        em = r.assign(electricity=trip.electricity_wh[1:], aux=aux, wheel=trip.wheel_wh[1:], speed=speed)
        split = traversals(em, chains, c.vehicle)
        base = traversals(em.assign(electricity=em.electricity - aux, aux=0.0), chains, c.vehicle)  # no load
        for i in range(len(split)):
            x = split.iloc[i]
            on = (tt >= x.enter_s) & (tt < x.enter_s + x.seconds)
            total, at_rest = float(aux[on].sum()), float(aux[on & (speed < 1e-9)].sum())
            on_edge = float((aux[on] * speed[on]).sum() / x.v_top)
            assert x.energy_wh - base.energy_wh.iat[i] == pytest.approx(total, abs=1e-9)
            assert x.edge_wh - base.edge_wh.iat[i] == pytest.approx(on_edge, abs=1e-9)
            junction = x.kin_in_wh + x.kin_out_wh - base.kin_in_wh.iat[i] - base.kin_out_wh.iat[i]
            assert junction == pytest.approx(total - on_edge, abs=1e-9) and junction >= at_rest - 1e-9
            waited += at_rest > 0
    assert waited >= 2


@pytest.mark.needs("fastsim", "sumo")
def test_atlases_are_kept_per_car_and_temperature_over_one_traffic(world):
    import time

    from evroute.world.sumo_atlas import build_atlas

    net, leaf, kw = world
    tic = time.perf_counter()
    again = build_atlas(net, "synthetic", Vehicle(mass_kg=2000.0), powertrain="leaf", **kw)  # the run's car: unused
    assert time.perf_counter() - tic < 2.0 and again.key == leaf.key
    cold = build_atlas(net, "synthetic", load_vehicle(None), powertrain="leaf", ambient_c=-5.0, **kw)
    zoe = build_atlas(net, "synthetic", load_vehicle(None), powertrain="zoe", **kw)
    assert len({leaf.key, cold.key, zoe.key}) == 3
    assert leaf.summary["traffic_key"] == cold.summary["traffic_key"] == zoe.summary["traffic_key"]
    assert cold.table.energy_wh.sum() > 1.2 * leaf.table.energy_wh.sum()  # the heating
    pd.testing.assert_frame_equal(leaf.table[["edge", "vehicle", "enter_s", "seconds"]],
                                  zoe.table[["edge", "vehicle", "enter_s", "seconds"]])


@pytest.mark.needs("fastsim", "sumo")
def test_which_car_am_i(world, tmp_path, capsys):
    """Paper 004's candidate priors over the four cars' fitted priors, the truth the Zoe's world:
    gp-pe runs end to end and keeps the Zoe's prior; the evidence (gp-mle) names the Zoe."""
    files = []
    for name in CARS:
        files.append(str(tmp_path / f"{name}.json"))
        assert main(["vehicles", "fit", name, "--out", files[-1], "--no-progress"]) == 0
    capsys.readouterr()
    truth = "sumo[rate=300,hours=0.25,probes=1,powertrain=zoe]"
    for policy in ("gp-pe", "gp-mle"):
        out = tmp_path / policy
        assert main(["simulate", "--truth", truth, "--policy", policy, "--priors", ",".join(files), "--horizon", "60",
                     "--out", str(out), "--no-progress"]) == 0, capsys.readouterr().err
        s = json.loads((out / "summary.json").read_text())
        assert s["truth_powertrain"] == "zoe" and s["truth_vehicle"]["name"] == "zoe@20C"
        assert files[CARS.index("zoe")] in s["priors_surviving"]
        priors = pd.read_parquet(out / "priors.parquet")
        if policy == "gp-mle":
            assert priors.chosen.tail(10).eq(files[CARS.index("zoe")]).all()


@pytest.mark.needs("fastsim", "sumo")
def test_the_atlas_command_drives_a_powertrain(world, capsys):
    assert main(["sumo", "atlas", "--network", "synthetic", "--rate", "300", "--hours", "0.25", "--probes", "1", "--powertrain",
                 "leaf", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "driven by FASTSim's leaf at 20 degrees C" in text and "no cycle makes energy" in text
    assert world[1].key in text and "powertrain=leaf,ambient_c=20" in text


@pytest.mark.needs("sumo")
def test_sumos_own_world_draws_a_vehicles_auxiliary_power_every_second():
    """Under SUMO's own truth a vehicle with an auxiliary power is the same traffic with P_aux drawn
    every second on top of SUMO's energy: each traversal costs P_aux × its seconds more, the edge
    keeping the share of a car at its top speed."""
    from evroute.world.sumo_atlas import build_atlas

    net, kw = synthetic_trip()
    plain = build_atlas(net, "synthetic", Vehicle(), **kw)
    heated = build_atlas(net, "synthetic", Vehicle(aux_power_w=360.0), **kw)
    assert heated.key != plain.key and heated.vehicle.aux_power_w == 360.0
    a, b = plain.table, heated.table
    pd.testing.assert_frame_equal(a[["edge", "vehicle", "enter_s", "seconds"]], b[["edge", "vehicle", "enter_s",
                                                                                 "seconds"]])
    np.testing.assert_allclose(b.energy_wh - a.energy_wh, 0.1 * a.seconds, atol=1e-9)
    extra = b.edge_wh - a.edge_wh
    assert (extra <= 0.1 * a.seconds + 1e-9).all() and (extra > 0).all()
