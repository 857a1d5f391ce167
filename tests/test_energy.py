import json
import math

import numpy as np
import pytest

from evroute.errors import EvrouteError
from evroute.physics.energy import Vehicle, edge_energy_wh, load_vehicle, vehicle_names

M, G, CR, A, CD, RHO, EP, EM = 1830.0, 9.82, 0.01, 2.6, 0.35, 1.2, 0.98, 0.96


def hand(length, grade, v):
    """Eq. 8 written out term by term for the paper's vehicle (Table 2)."""
    alpha = math.atan(grade)
    work = (M * G * length * math.sin(alpha) + M * G * CR * length * math.cos(alpha)
            + 0.5 * CD * A * RHO * length * v * v)
    return work / 3600 / EP if work >= 0 else work * EM / 3600


def test_flat_road_by_hand():
    # 1 km flat at 50 km/h: rolling 179.706 N + drag 0.5*0.35*2.6*1.2*13.889^2 = 105.324 N
    v = 50 / 3.6
    work = (1830 * 9.82 * 0.01 + 0.5 * 0.35 * 2.6 * 1.2 * v * v) * 1000.0
    assert work == pytest.approx(285_030.0, rel=1e-4)
    assert edge_energy_wh(1000.0, 0.0, v) == pytest.approx(work / 3600 / 0.98)
    assert edge_energy_wh(1000.0, 0.0, v) == pytest.approx(80.79, abs=0.01)


@pytest.mark.parametrize("length,grade,v", [(200.0, 0.08, 10.0), (50.0, 0.2, 5.0), (1000.0, 0.01, 25.0)])
def test_uphill_matches_hand(length, grade, v):
    assert edge_energy_wh(length, math.atan(grade), v) == pytest.approx(hand(length, grade, v), rel=1e-12)
    assert edge_energy_wh(length, math.atan(grade), v) > edge_energy_wh(length, 0.0, v)


def test_downhill_regenerates_with_eta_minus():
    length, grade, v = 300.0, -0.10, 8.0
    e = edge_energy_wh(length, math.atan(grade), v)
    assert e < 0
    alpha = math.atan(grade)
    work = M * G * length * (math.sin(alpha) + CR * math.cos(alpha)) + 0.5 * CD * A * RHO * length * v * v
    assert e == pytest.approx(work * 0.96 / 3600, rel=1e-12)


def test_gentle_downhill_still_costs_energy():
    # -0.5 % grade: gravity (-89.9 N) does not beat rolling + drag, so E > 0 with eta_plus
    e = edge_energy_wh(100.0, math.atan(-0.005), 10.0)
    assert e == pytest.approx(hand(100.0, -0.005, 10.0)) and e > 0


def test_vectorised():
    L = np.array([100.0, 200.0, 300.0])
    a = np.arctan([0.05, -0.1, 0.0])
    v = np.array([10.0, 12.0, 14.0])
    out = edge_energy_wh(L, a, v)
    assert out.shape == (3,)
    assert out == pytest.approx([hand(*x) for x in zip(L, [0.05, -0.1, 0.0], v, strict=True)])


def test_presets_and_files(tmp_path):
    assert vehicle_names()[0] == "sumo-ev"
    veh = load_vehicle()
    assert veh == Vehicle(name="sumo-ev")
    f = tmp_path / "van.json"
    # missing keys are not completed silently...
    f.write_text(json.dumps({"mass_kg": 3000, "eta_minus": 0.7}))
    with pytest.raises(EvrouteError, match="missing parameter.*air_density.*\"base\": \"sumo-ev\""):
        load_vehicle(str(f))
    # ...only from an explicit base preset
    f.write_text(json.dumps({"base": "sumo-ev", "mass_kg": 3000, "eta_minus": 0.7}))
    van = load_vehicle(str(f))
    assert van.mass_kg == 3000 and van.eta_minus == 0.7 and van.drag_coefficient == 0.35
    f.write_text(json.dumps({"base": "delivery-van", "mass_kg": 3000}))
    assert load_vehicle(str(f)).frontal_area_m2 == 4.5
    # every key given: no base needed
    full = {**Vehicle().to_dict(), "mass_kg": 2500.0}
    del full["name"]
    f.write_text(json.dumps(full))
    assert load_vehicle(str(f)) == Vehicle(name="van", mass_kg=2500.0)
    assert edge_energy_wh(100.0, 0.1, 10.0, vehicle=van) > edge_energy_wh(100.0, 0.1, 10.0, vehicle=veh)


@pytest.mark.parametrize("content,msg", [("{", "not valid JSON"), ('{"base": "sumo-ev", "mass_kg": -1}', "mass_kg"),
                                         ('{"warp": 9}', "unknown parameter"), ("[1]", "JSON object"),
                                         ('{"base": "tesla"}', "unknown base"), ('{"mass_kg": 1}', "missing"),
                                         ('{"base": "sumo-ev", "g": "9.8"}', "g must be a number")])
def test_bad_vehicle_files(tmp_path, content, msg):
    f = tmp_path / "bad.json"
    f.write_text(content)
    with pytest.raises(EvrouteError, match=msg):
        load_vehicle(str(f))


def test_unknown_vehicle():
    with pytest.raises(EvrouteError, match="unknown vehicle"):
        load_vehicle("tesla-roadster-in-space")


def test_an_auxiliary_power_and_a_rotating_mass_are_optional(tmp_path):
    """A vehicle file may give an auxiliary power (E_det then adds P_aux ℓ / v) and a rotating mass
    (only the kinetic energy counts it); the presets and files without them are what they were:
    their records and cache keys leave the defaults out, and E_det is Eq. 8's."""
    from evroute.physics.energy import OPTIONAL_PARAMETERS, kinetic_energy_wh
    from evroute.world.junctions import physics_turns

    paper = Vehicle()
    assert set(OPTIONAL_PARAMETERS) & set(paper.to_dict()) == set()
    f = tmp_path / "car.json"
    f.write_text(json.dumps({"generator": "evroute test", "base": "sumo-ev", "aux_power_w": 1800.0,
                             "rotating_mass_kg": 30.0, "fit": {"anything": 1}}))
    car = load_vehicle(str(f))
    assert car.to_dict()["aux_power_w"] == 1800.0 and Vehicle(**car.to_dict()) == car
    # 1.8 kW for the 100 s a 1 km edge takes at 10 m/s: 50 Wh more
    assert float(edge_energy_wh(1000.0, 0.0, 10.0, vehicle=car) - edge_energy_wh(1000.0, 0.0, 10.0)) == \
        pytest.approx(50.0)
    assert float(kinetic_energy_wh(10.0, car)) == pytest.approx(0.5 * 1860.0 * 100.0 / 3600.0)
    assert float(kinetic_energy_wh(10.0, paper)) == pytest.approx(0.5 * 1870.0 * 100.0 / 3600.0)
    from evroute.roads.network import load_network

    net = load_network("synthetic")
    cold, mild = physics_turns(net, car), physics_turns(net, Vehicle(rotating_mass_kg=30.0))
    assert (cold.mean > mild.mean).all()  # crossing a junction, and waiting where it stops
    with pytest.raises(EvrouteError, match="aux_power_w"):
        Vehicle(aux_power_w=-1.0)
