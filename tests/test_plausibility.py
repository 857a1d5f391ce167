"""What cannot be right (evroute.world.plausibility), on drives whose per-edge energies are known:
each broken trace gives its warning, its count in the report, and loses what is wrong while the
good data stays."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from evroute.world.drives import import_traces, plausible_traversals
from evroute.world.plausibility import (
    METER_DROP_W,
    energy_quantum_wh,
    meter_resets,
    phantom_loops,
    split_jumps,
    too_fast,
    u_turn_legs,
)

from .test_drives import SPEED, _drive, _route


@pytest.fixture(scope="module")
def drive(synthetic):
    route = _route(synthetic)
    energy = 0.15 * synthetic.edges.length_m.to_numpy()[route]
    return route, energy, _drive(synthetic, route, energy)


def _import(fixes, tmp_path, net, name="trip.csv", **kwargs):
    path = tmp_path / name
    fixes.to_csv(path, index=False)
    kwargs.setdefault("gps_noise_m", 5.0)
    return import_traces([path], net, **kwargs)


def _energies(table, route, energy):
    """Each kept traversal is of an edge of the route, once, with its energy."""
    expected = pd.Series(energy, index=route)
    assert table.edge.isin(route).all() and not table.edge.duplicated().any()
    np.testing.assert_allclose(table.energy_wh, expected[table.edge].to_numpy(), rtol=0.03)


def _noisy(fixes, sigma, seed=0):
    rng = np.random.default_rng(seed)
    out = fixes.copy()
    out["lat"] += rng.normal(0, sigma / 111_195, len(out))
    out["lon"] += rng.normal(0, sigma / 111_195 / np.cos(np.radians(out.lat.mean())), len(out))
    return out


def test_repeated_rows_are_dropped_not_the_trip(synthetic, drive, tmp_path):
    """A logger that wrote five rows twice: the repeats go, the trip and its energies stay."""
    route, energy, fixes = drive
    broken = pd.concat([fixes, fixes.iloc[[30, 31, 32, 90, 91]]]).sort_index(kind="stable").reset_index(drop=True)
    table, report = _import(broken, tmp_path, synthetic)
    assert table.edge.tolist() == route[1:-1]
    _energies(table, route, energy)
    assert report.flags == {"duplicate rows": 1} and report.dropped == {"duplicate row": 5}
    assert report.problems[0].startswith(f"{tmp_path / 'trip.csv'} row 33: repeats an earlier row exactly (and 4 more)")


def test_a_trip_meter_reset_drops_the_traversal_across_it(synthetic, drive, tmp_path):
    """The meter falls to zero half-way (a −247 Wh traversal before): the traversal across the
    reset is dropped and named, the meter goes on, every other traversal keeps its energy."""
    route, energy, fixes = drive
    broken = fixes.copy()
    k = len(broken) // 2
    broken.loc[k:, "energy_wh"] -= broken.energy_wh.iat[k] + 0.5
    table, report = _import(broken, tmp_path, synthetic)
    whole, _ = _import(fixes, tmp_path, synthetic, name="whole.csv")
    t = fixes.time_s.to_numpy()
    across = (whole.enter_s < t[k]) & (whole.enter_s + whole.seconds > t[k - 1])
    assert 1 <= across.sum() <= 2 and table.edge.tolist() == whole.edge[~across].tolist()
    _energies(table, route, energy)
    assert report.flags == {"meter reset": 1} and report.dropped == {"traversal across a meter reset": across.sum()}
    assert f"row {k + 2}: trip 'trip': the energy falls" in report.problems[0]
    assert (table.energy_wh > 0).all()


def test_two_vehicles_interleaved_in_one_file_become_two_trips(synthetic, drive, tmp_path):
    """Two cars logging into one file at the same seconds, no trip or vehicle column, the second a
    minute behind the first and at 0.25 Wh a metre: split at the jumps into two trips, each with
    its own energies (without the split: one trip, jumping between the cars every second)."""
    route, energy, fixes = drive
    length = synthetic.edges.length_m.to_numpy()[route]
    second = _drive(synthetic, route, 0.25 * length, t0=160.0)
    both = pd.concat([fixes, second]).sort_values("time_s", kind="stable").reset_index(drop=True)
    table, report = _import(both, tmp_path, synthetic)
    assert table.trip.unique().tolist() == ["trip#1", "trip#2"] == table.vehicle.unique().tolist()
    _energies(table[table.trip == "trip#1"], route, energy)
    _energies(table[table.trip == "trip#2"], route, 0.25 * length)
    assert report.flags == {"jump": 1} and report.trips_kept == 2
    assert "2 vehicles in one trip? split into 'trip#1', 'trip#2'" in report.problems[0]


def test_a_stray_fix_is_dropped(synthetic, drive, tmp_path):
    route, energy, fixes = drive
    broken = fixes.copy()
    broken.loc[50, "lat"] += 0.05  # 5.6 km north for one second
    table, report = _import(broken, tmp_path, synthetic)
    assert table.edge.tolist() == route[1:-1]
    _energies(table, route, energy)
    assert report.flags == {"jump": 1} and report.dropped == {"fix no car could reach": 1}


@pytest.mark.parametrize("step_pct, capacity", [(1.0, 60.0), (0.1, 60.0), (1.0, 300.0)])
def test_a_coarse_state_of_charge_is_named_and_dropped(synthetic, drive, tmp_path, step_pct, capacity):
    """A state of charge in whole percent of 60 kWh (600 Wh a step: every traversal 0 Wh but one),
    in 0.1 % (60 Wh, more than an edge), or in whole percent of a battery so large that it never
    moves on this trip: the trip's traversals dropped, in words; the unrounded state of charge
    gives the energies."""
    route, energy, fixes = drive
    soc = 80.5 - fixes.energy_wh / (capacity * 10.0)
    coarse = fixes.drop(columns="energy_wh").assign(soc_pct=np.floor(soc / step_pct) * step_pct)
    moves = bool(np.diff(coarse.soc_pct).any())
    assert moves == (capacity == 60.0)
    table, report = _import(coarse, tmp_path, synthetic, capacity_kwh=capacity)
    assert len(table) == 0 and report.flags == {"coarse energy": 1}
    assert report.dropped == {"energy coarser than an edge": len(route) - 2}
    steps = f"moves in steps of {10 * step_pct * capacity:.1f} Wh" if moves else "never changes"
    assert steps in report.problems[0], report.problems
    fine = fixes.drop(columns="energy_wh").assign(soc_pct=soc)
    table, report = _import(fine, tmp_path, synthetic, name="fine.csv", capacity_kwh=capacity)
    assert table.edge.tolist() == route[1:-1] and report.flags == {}
    _energies(table, route, energy)


def _parked(fixes, at: int, seconds: int):
    """The drive stopped ``seconds`` at fix ``at`` (speed 0, the meter still)."""
    park = fixes.iloc[[at] * seconds].assign(time_s=fixes.time_s.iat[at] + np.arange(seconds), speed_mps=0.0)
    after = fixes.iloc[at:].assign(time_s=fixes.time_s.iloc[at:] + seconds)
    return pd.concat([fixes.iloc[:at], park, after], ignore_index=True)


def test_a_parked_phones_jitter_makes_no_phantom_edges(synthetic, drive, tmp_path):
    """A phone's trace (10 m of noise, no speed) of a car parked ten minutes near a junction:
    matched on the speed its positions make, no edge off the route and none twice (without it
    the matcher drove U-turn loops between the jittering fixes), the energies about 5 % off."""
    route, energy, fixes = drive
    phone = _noisy(_parked(fixes, int(0.8 * len(fixes)), 600), 10.0).drop(columns="speed_mps")
    table, report = _import(phone, tmp_path, synthetic, gps_noise_m=10.0)
    assert report.trips_speed_estimated == 1
    inner = table[table.edge.isin(route[1:-1])]
    assert table.edge.isin(route).all() and not table.edge.duplicated().any()
    assert inner.edge.tolist() == route[1:-1]
    error = np.abs(inner.energy_wh / energy[1:-1] - 1)
    assert np.median(error) < 0.05 and error.max() < 0.15
    assert table.v_top.max() < 1.5 * SPEED


def test_u_turn_loops_no_fix_supports_are_dropped(synthetic, drive, tmp_path):
    """leuvenmapmatching (positions alone) drives a parked car's jitter round U-turn loops; the
    logged speed says it stood: the loops are dropped, in words, and what is kept is the route,
    each edge once. (Its energies are not checked: the loops' length, which the speed denies,
    moves the positions of the whole trip; evroute's own matcher, which weighs the speed, drives
    no loop, as the test above shows.)"""
    route, energy, fixes = drive
    jitter = _noisy(_parked(fixes, int(0.8 * len(fixes)), 120), 10.0)
    table, report = _import(jitter, tmp_path, synthetic, gps_noise_m=10.0, matcher="leuven")
    assert report.flags == {"phantom loop": 1} and report.dropped["phantom loop"] >= 4
    assert "U-turn legs the car did not drive" in report.problems[0]
    assert table.edge.isin(route).all() and not table.edge.duplicated().any() and len(table) >= len(route) - 6


def test_a_speed_no_car_reaches_on_that_road_is_dropped(synthetic, drive, tmp_path):
    """A logger's glitch reads 93 m/s on one edge: that traversal is dropped and named, the
    others keep their energies."""
    route, energy, fixes = drive
    broken = fixes.copy()
    ends = np.cumsum(synthetic.edges.length_m.to_numpy()[route]) / SPEED + fixes.time_s.iat[0]
    glitch = (broken.time_s > ends[4] + 2) & (broken.time_s < ends[5] - 2)  # inside route[5]
    broken.loc[glitch, "speed_mps"] = 93.0
    table, report = _import(broken, tmp_path, synthetic)
    assert route[5] not in table.edge.tolist() and report.flags == {"too fast": 1}
    assert report.dropped == {"faster than the road allows": 1}
    assert "up to 93.0 m/s" in report.problems[0]
    _energies(table[~table.edge.isin(route[4:7])], route, energy)
    assert len(table) == len(route) - 3


def test_nothing_usable_exits_1_with_a_line_saying_why(synthetic, drive, tmp_path):
    """One row, a header only, nothing on the network: exit 1 and one line why (report.json
    written); a bad option stays exit 2."""
    route, energy, fixes = drive
    fixes.iloc[:1].to_csv(tmp_path / "one.csv", index=False)
    (tmp_path / "header.csv").write_text("time_s,lat,lon,energy_wh\n")
    fixes.assign(lat=fixes.lat + 1.0).to_csv(tmp_path / "elsewhere.csv", index=False)
    base = [sys.executable, "-m", "evroute", "drives", "import", "--network", "synthetic", "--no-progress", "--jobs", "1"]
    for name, why in (("one.csv", "every trip has fewer than 2 fixes"),
                      ("header.csv", "none of the 1 files could be read"),
                      ("elsewhere.csv", "no fix of the 1 trips lies on the network's roads (another network?)")):
        out = tmp_path / f"out-{name}"
        p = subprocess.run(base + [str(tmp_path / name), "--out", str(out)], capture_output=True, text=True)
        errors = [x for x in p.stderr.splitlines() if x.startswith("error:")]
        assert p.returncode == 1 and errors == [f"error: nothing imported: {why} ({out / 'report.json'})"], p.stderr
        assert "Traceback" not in p.stderr
        assert json.loads((out / "report.json").read_text())["traversals"] == 0
    p = subprocess.run(base + [str(tmp_path / "one.csv"), "--out", str(tmp_path / "x"), "--units", "speed=furlongs"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.startswith("error: --units: speed must be one of")


def test_the_checks_by_themselves():
    t = np.arange(6.0)
    north = np.array([0.0, 10.0, 5000.0, 20.0, 5010.0, 30.0])
    assert split_jumps(t, north, np.zeros(6), gps_noise_m=10.0).tolist() == [0, 0, 1, 0, 1, 0]
    assert split_jumps(t, np.arange(6.0) * 10, np.zeros(6), gps_noise_m=10.0).tolist() == [0] * 6
    used = np.array([0.0, 2.0, 4.0, 6.0, -1.0, 1.0])  # a fall of 7 Wh in 1 s: 25 kW, a car's braking
    assert meter_resets(np.arange(6.0), used).size == 0
    fall = METER_DROP_W / 3600.0 + 1.0
    assert meter_resets(np.arange(6.0), np.r_[used[:4], used[4:] - fall]).tolist() == [4]
    meter = np.array([100.0, 102.0, 104.0, 106.0, 0.5, 2.5, 4.5, 6.5, 8.5, 10.5, 12.5])
    assert meter_resets(np.arange(11.0), meter - meter[0], meter=meter).tolist() == [4]  # to zero, however slow
    downhill = 30.0 - 6.0 * np.arange(11.0)  # through zero step by step: no reset
    assert meter_resets(np.arange(11.0), downhill - 30.0, meter=downhill).size == 0
    assert energy_quantum_wh(np.repeat([0.0, 600.0, 1200.0], 100)) == 600.0
    assert energy_quantum_wh(np.zeros(50)) == np.inf
    assert energy_quantum_wh(np.cumsum(np.random.default_rng(0).uniform(1, 3, 100))) == 0.0
    assert energy_quantum_wh(np.r_[np.zeros(200), np.cumsum(np.random.default_rng(1).uniform(0.5, 4, 50))]) == 0.0
    assert too_fast([30.0, 26.0], [8.0, 8.0]).tolist() == [True, False]
    u, v = np.array([0, 1, 1]), np.array([1, 0, 2])  # edges 0: 0→1, 1: 1→0, 2: 1→2
    assert u_turn_legs([0, 1, 0, 2], [1, 0, 2, -1], u=u, v=v).tolist() == [True, True, True, False]
    ts = np.arange(0.0, 41.0)
    standing = np.r_[np.full(20, 10.0), np.zeros(10), np.full(11, 10.0)]  # stood from 20 s to 29 s
    assert phantom_loops([0, 1, 0, 2], [1, 0, 2, -1], enter=[0.0, 10.0, 20.0, 30.0], seconds=[10.0] * 4, t=ts,
                         speed=standing, u=u, v=v, length=np.full(3, 100.0)).tolist() == [False, False, True, False]


def test_plausible_traversals_unlinks_the_turn_into_a_dropped_traversal(synthetic):
    """A kept traversal whose next was dropped no longer names it (its turn was not measured)."""
    table = pd.DataFrame({"edge": [0, 1, 2], "next_edge": [1, 2, -1], "enter_s": [0.0, 10.0, 12.0],
                          "seconds": [10.0, 2.0, 10.0], "energy_wh": [10.0, 10.0, 10.0], "edge_wh": [10.0] * 3,
                          "kin_in_wh": [0.0] * 3, "kin_out_wh": [0.0] * 3, "v_in": [10.0] * 3,
                          "v_top": [10.0, 100.0, 10.0], "v_out": [10.0] * 3, "match_dist_m": [1.0] * 3})
    fixes = pd.DataFrame({"time_s": np.arange(0.0, 23.0), "lat": 45.0, "lon": 7.0,
                          "speed_mps": 10.0, "energy_wh": np.arange(23.0)})
    kept = plausible_traversals(table, fixes, synthetic)
    assert kept.edge.tolist() == [0, 2] and kept.next_edge.tolist() == [-1, -1]
