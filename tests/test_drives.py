"""Drives in (evroute.world.drives): traces read, matched and split into traversals, checked against
drives whose per-edge energies are known by construction."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evroute.errors import EvrouteError
from evroute.physics.energy import ROTATING_MASS_KG, Vehicle
from evroute.roads.oracle import Oracle
from evroute.world.drives import (
    LeuvenMatcher,
    import_traces,
    parse_columns,
    read_traces,
    trip_traversals,
)

SPEED = 10.0  # m/s


def _route(net, hops: int = 12) -> list[int]:
    """A shortest route of at least ``hops`` edges across the synthetic city, with no parallel
    edges on it (the matcher cannot tell those apart) and no junction twice."""
    oracle = Oracle.from_network(net)
    e = net.edges
    pairs = e.groupby(["u", "v"]).size()
    parallel = {k for k, n in pairs.items() if n > 1}
    weights = e.length_m.to_numpy()
    for a in range(0, len(e), 7):
        for b in range(len(e) - 1, 0, -11):
            try:
                path = oracle.shortest_path(weights, a, b).edges
            except EvrouteError:
                continue
            nodes = [e.u.iat[x] for x in path] + [e.v.iat[path[-1]]]
            if len(path) >= hops and len(set(nodes)) == len(nodes) \
                    and not any((e.u.iat[x], e.v.iat[x]) in parallel for x in path):
                return list(path)
    raise AssertionError("no route found")


def _drive(net, route, energy_per_edge, rate_hz: float = 1.0, t0: float = 100.0) -> pd.DataFrame:
    """Fixes of a car driving ``route`` along the straight lines between its junctions at
    ``SPEED``, using ``energy_per_edge[k]`` Wh evenly in time on edge k, every ``1 / rate_hz``
    seconds."""
    e, nodes = net.edges, net.nodes
    times, lat, lon, energy = [t0], [], [], [0.0]
    for k, edge in enumerate(route):
        a = nodes.loc[e.u.iat[edge], ["lat", "lon"]].to_numpy(float)
        b = nodes.loc[e.v.iat[edge], ["lat", "lon"]].to_numpy(float)
        if k == 0:
            lat.append(a[0])
            lon.append(a[1])
        times.append(times[-1] + float(e.length_m.iat[edge]) / SPEED)
        lat.append(b[0])
        lon.append(b[1])
        energy.append(energy[-1] + energy_per_edge[k])
    grid = np.arange(np.ceil(t0), times[-1], 1.0 / rate_hz)
    return pd.DataFrame({"time_s": grid, "lat": np.interp(grid, times, lat), "lon": np.interp(grid, times, lon),
                         "speed_mps": SPEED, "energy_wh": np.interp(grid, times, energy)})


def test_a_clean_drive_is_matched_to_its_route_with_its_energies(synthetic, tmp_path):
    """Every interior edge of the route comes back, in order, with the energy driven on it
    (within the interpolation across a junction), and no kinetic part at a constant speed."""
    route = _route(synthetic)
    f = 20.0 + 3.0 * np.arange(len(route))
    fixes = _drive(synthetic, route, f)
    path = tmp_path / "trip.csv"
    fixes.to_csv(path, index=False)
    table, report = import_traces([path], synthetic, gps_noise_m=5.0)
    assert report.trips_kept == 1 and report.problems == []
    assert table.edge.tolist() == route[1:-1]
    np.testing.assert_allclose(table.energy_wh, f[1:-1], rtol=0.03)
    np.testing.assert_allclose(table.seconds, synthetic.edges.length_m.to_numpy()[route[1:-1]] / SPEED, rtol=0.03)
    assert np.abs(table.kin_in_wh).max() < 1e-9 and np.abs(table.kin_out_wh).max() < 1e-9
    assert table.next_edge.tolist() == route[2:-1] + [-1]
    assert (table.match_dist_m.dropna() < 1.0).all()


def test_noisy_sparse_fixes_still_find_the_route(synthetic, tmp_path):
    """5 m of GPS noise and a fix every 3 s: the route's interior edges all matched, the
    energies within 10 %."""
    route = _route(synthetic)
    f = np.full(len(route), 30.0)
    fixes = _drive(synthetic, route, f, rate_hz=1 / 3)
    rng = np.random.default_rng(0)
    fixes["lat"] += rng.normal(0, 5.0 / 111_195, len(fixes))
    fixes["lon"] += rng.normal(0, 5.0 / 111_195 / np.cos(np.radians(fixes.lat.mean())), len(fixes))
    path = tmp_path / "trip.csv"
    fixes.to_csv(path, index=False)
    table, _ = import_traces([path], synthetic, gps_noise_m=5.0)
    assert set(route[2:-2]) <= set(table.edge.tolist())
    inner = table[table.edge.isin(route[2:-2])]
    assert np.median(np.abs(inner.energy_wh / 30.0 - 1)) < 0.1


def test_a_stop_at_a_junction_is_split_into_the_edges_kinetic_parts():
    """A car braking to a stop at the end of one edge and starting on the next, its steps' energy
    by SUMO's rule (the powers summed, through η⁺ or η⁻ by the total's sign): the start's
    ½ m v² / η⁺ is the next edge's kin_in (the textbook kinetic energy with SUMO's rotating mass),
    the braking's recovered ½ m v² η⁻ less what the braking second's running cost r saves by being
    paid from the kinetic energy, r (1 − η⁺η⁻), that edge's kin_out, and edge_wh is left at the
    constant speed's energy exactly."""
    veh = Vehicle()
    ke = 0.5 * (veh.mass_kg + ROTATING_MASS_KG) * SPEED ** 2 / 3600.0
    length = np.array([100.0, 100.0, 100.0, 100.0])
    route = [0, 1, 2, 3]
    base = 10.0  # Wh an edge at constant speed
    t = np.arange(0.0, 41.0)
    s = np.clip(t * SPEED, 0, 400)
    speed = np.full(t.size, SPEED)
    energy = base * s / 100.0
    # stop at s = 200 m (the end of edge 1) at t = 20: speed 0 there, braking from t = 19
    speed[20] = 0.0
    r = base * SPEED / 100.0  # a second's running cost at the constant speed (Wh, drawn)
    energy[20:] += veh.eta_minus * (r * veh.eta_plus - ke) - r  # the braking second recuperates as a whole
    energy[21:] += ke / veh.eta_plus
    rows = trip_traversals(route, s, t, energy=energy, speed=speed, dist=np.zeros(t.size), length=length, vehicle=veh)
    by_edge = {r[0]: r for r in rows}
    assert sorted(by_edge) == [1, 2]
    edge1, edge2 = by_edge[1], by_edge[2]
    kin_out = -ke * veh.eta_minus - r * (1.0 - veh.eta_plus * veh.eta_minus)
    assert edge1[6] == pytest.approx(0.0, abs=1e-9) and edge1[7] == pytest.approx(kin_out, rel=1e-9)
    assert edge2[6] == pytest.approx(ke / veh.eta_plus, rel=1e-9) and edge2[7] == pytest.approx(0.0, abs=1e-9)
    for r in (edge1, edge2):
        assert r[4] == pytest.approx(r[5] + r[6] + r[7], abs=1e-9)  # energy = edge + kin_in + kin_out
        assert r[5] == pytest.approx(base, rel=1e-9)


def test_the_sumo_boundary_books_whole_steps_past_the_junction():
    """``boundary="sumo"``: each one-second step counts whole for the edge where it ends, the edges
    ending SUMO_JUNCTION_OFFSET_M past the junction's centre (SUMO's accounting, computed here by
    walking the fixes); ``centre`` interpolates at the centre (a linear energy: exact)."""
    from evroute.world.drives import SUMO_JUNCTION_OFFSET_M

    length = np.array([100.0, 100.0, 100.0, 100.0])
    route = [0, 1, 2, 3]
    t = np.arange(0.0, 41.0)
    s = np.clip(t * 9.7 + 1.3, 0, 400)  # fixes fall between the junctions
    energy = t ** 2  # any trip meter
    rows = {r[0]: r for r in trip_traversals(route, s, t, energy=energy, speed=np.full(t.size, 9.7), dist=np.zeros(t.size), length=length,
                                              boundary="sumo")}
    ends = np.cumsum(length) + SUMO_JUNCTION_OFFSET_M  # edge k ends here, along the route
    edge_of = np.searchsorted(ends, s, side="right")  # the edge each fix (a step's end) lies on
    for k in (1, 2):
        steps = np.flatnonzero(edge_of[1:] == k) + 1  # the steps (i-1, i] ending on edge k
        assert rows[k][4] == pytest.approx(float(np.sum(energy[steps] - energy[steps - 1])), rel=1e-12)
        assert rows[k][2] == t[steps[0] - 1] and rows[k][3] == t[steps[-1]] - t[steps[0] - 1]
    centre = {r[0]: r for r in trip_traversals(route, s, t, energy=5.0 * s, speed=np.full(t.size, 9.7), dist=np.zeros(t.size),
                                                length=length)}
    assert centre[1][4] == pytest.approx(500.0, rel=1e-12) and centre[2][4] == pytest.approx(500.0, rel=1e-12)
    with pytest.raises(EvrouteError, match="boundary"):
        trip_traversals(route, s, t, energy=energy, speed=np.full(t.size, 9.7), dist=np.zeros(t.size), length=length, boundary="edge")


def test_energy_power_and_state_of_charge_read_the_same(tmp_path):
    """The three energy sources give one trip meter: power integrated by the trapezoid rule,
    the state of charge times the capacity."""
    t = np.arange(0.0, 20.0)
    power = 1000.0 + 500.0 * np.sin(t / 3)
    used = np.r_[0.0, np.cumsum(0.5 * (power[1:] + power[:-1]))] / 3600.0
    base = {"time_s": t, "lat": 43.7 + t * 1e-5, "lon": 7.4 + t * 1e-5}
    pd.DataFrame({**base, "energy_wh": used + 5.0}).to_csv(tmp_path / "e.csv", index=False)
    pd.DataFrame({**base, "power_w": power}).to_csv(tmp_path / "p.csv", index=False)
    pd.DataFrame({**base, "battery": 80.0 - used / 500.0}).to_csv(tmp_path / "s.csv", index=False)
    a = read_traces(tmp_path / "e.csv")
    b = read_traces(tmp_path / "p.csv")
    c = read_traces(tmp_path / "s.csv", parse_columns("soc=battery"), capacity_kwh=50.0)
    np.testing.assert_allclose(a.energy_wh, used, atol=1e-9)
    np.testing.assert_allclose(b.energy_wh, used, atol=1e-9)
    np.testing.assert_allclose(c.energy_wh, used, atol=1e-9)
    assert a.trip.unique().tolist() == ["e"]


def test_bad_rows_and_trips_are_named_and_the_good_ones_kept(tmp_path):
    d = pd.DataFrame({"trip": ["a"] * 4 + ["b"] * 3, "time_s": [0, 1, 2, 3, 0, 1, 1],
                      "lat": [43.7, "x", 43.7, 43.7, 43.7, 43.7, 43.7], "lon": [7.4] * 7, "energy_wh": [0, 1, 2, 3, 0, 1, 2]})
    path = tmp_path / "t.csv"
    d.to_csv(path, index=False)
    from evroute.world.drives import ImportReport

    report = ImportReport()
    out = read_traces(path, report=report)
    # the bad row dropped, not its trip; of b's two fixes at one time the later dropped, not the trip
    assert out.trip.tolist() == ["a"] * 3 + ["b"] * 2 and out.time_s.tolist() == [0, 2, 3, 0, 1]
    assert any(p.startswith(f"{path} row 3:") for p in report.problems)  # the row with "x" (line 3 of the file)
    assert any(p.startswith(f"{path} row 8:") and "'b'" in p and "later dropped" in p for p in report.problems)
    assert report.flags == {"bad rows": 1, "same time": 1}
    with pytest.raises(EvrouteError, match="no column 'lat'"):
        pd.DataFrame({"time_s": [0], "lon": [7.4], "energy_wh": [0]}).to_csv(tmp_path / "m.csv", index=False)
        read_traces(tmp_path / "m.csv")
    with pytest.raises(EvrouteError, match="no energy column"):
        pd.DataFrame({"time_s": [0], "lat": [1], "lon": [7.4]}).to_csv(tmp_path / "n.csv", index=False)
        read_traces(tmp_path / "n.csv")
    with pytest.raises(EvrouteError, match="capacity"):
        pd.DataFrame({"time_s": [0], "lat": [1], "lon": [7.4], "soc_pct": [50]}).to_csv(tmp_path / "s.csv", index=False)
        read_traces(tmp_path / "s.csv")
    with pytest.raises(EvrouteError, match="unknown field 'when'"):
        parse_columns("when=t")


def test_matcher_refuses_a_nonpositive_noise(synthetic):
    with pytest.raises(EvrouteError, match="GPS noise"):
        LeuvenMatcher(synthetic, 0.0)


def test_drives_import_command(synthetic, tmp_path):
    """The command writes the table and the report; a missing file is one error line, exit 2."""
    import json
    import subprocess
    import sys

    route = _route(synthetic)
    fixes = _drive(synthetic, route, np.full(len(route), 25.0))
    fixes.to_csv(tmp_path / "trip.csv", index=False)
    cmd = [sys.executable, "-m", "evroute", "drives", "import", str(tmp_path / "trip.csv"), "--network", "synthetic",
           "--out", str(tmp_path / "out"), "--no-progress"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    table = pd.read_parquet(tmp_path / "out" / "traversals.parquet")
    assert table.edge.tolist() == route[1:-1]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["trips_kept"] == 1 and report["traversals"] == len(route) - 2
    assert (report["matcher"], report["boundary"]) == ("hmm", "centre")  # how they were made, recorded
    p = subprocess.run(cmd[:5] + [str(tmp_path / "nope.csv")] + cmd[6:], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.strip() == f"error: no such trace file: {tmp_path / 'nope.csv'}"
    # leuvenmapmatching's matcher finds the same traversals; a matcher that does not exist is one line
    p = subprocess.run(cmd + ["--matcher", "leuven", "--overwrite", "--json"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["matcher"] == "leuven"
    pd.testing.assert_series_equal(pd.read_parquet(tmp_path / "out" / "traversals.parquet").edge, table.edge)
    p = subprocess.run(cmd + ["--matcher", "fmm", "--overwrite"], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr == "error: unknown --matcher 'fmm'; choose one of: hmm, leuven\n"


def test_the_guide_page_runs(tmp_path, monkeypatch, capsys):
    """docs/guide/drives.md's example: a drive at 0.15 Wh a metre comes back at 0.15 Wh a metre
    on every edge it found (within the interpolation across a junction, and, the trace having no
    speed, within the speed of its smoothed track: its positions run along the straight lines
    between junctions while the roads bend, so that along one road the car seems to slow down
    and speed up again: 5 % on one edge, under 2 % on the others)."""
    import re
    from pathlib import Path

    page = Path(__file__).resolve().parent.parent / "docs" / "guide" / "drives.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)
    assert blocks
    monkeypatch.chdir(tmp_path)
    scope: dict = {"__name__": "__docs__"}
    exec(compile(blocks[0], str(page), "exec"), scope)
    table, route, net = scope["table"], scope["route"], scope["net"]
    assert len(table) >= len(route) - 4 and set(table.edge) <= set(route)
    per_metre = table.energy_wh / net.edges.length_m.to_numpy()[table.edge]
    np.testing.assert_allclose(per_metre, 0.15, rtol=0.06)
    assert np.median(np.abs(per_metre / 0.15 - 1)) < 0.01
    assert "traversals of" in capsys.readouterr().out


@pytest.mark.needs("sumo")
def test_sumo_drives_come_back_through_the_import(synthetic):
    """SUMO's drives on the synthetic city, exact positions at 1 Hz: the import finds the edge of
    ≥ 95 % of the answer key's driven length, and the energy of a whole matched run of edges
    within 5 % of SUMO's (per edge the boundary differs: SUMO's edge ends past the junction)."""
    from evroute.world.drives import LeuvenMatcher, match_trip
    from evroute.world.sumo_drives import sumo_drives

    d = sumo_drives(synthetic, "synthetic", Vehicle(), vehicles=6, seed=1, rate=300.0, hours=0.25)
    assert d.summary["vehicles"] >= 4 and len(d.answer) > 50
    assert list(d.traces.columns) == ["trip", "vehicle", "time_s", "lat", "lon", "speed_mps", "energy_wh"]
    matcher = LeuvenMatcher(synthetic, 5.0)
    found, total, ours, theirs = 0.0, 0.0, 0.0, 0.0
    length = synthetic.edges.length_m.to_numpy()
    for trip, g in d.traces.groupby("trip"):
        rows, _ = match_trip(matcher, g.assign(energy_wh=g.energy_wh - g.energy_wh.iat[0]))
        got = pd.DataFrame([r[:5] for r in rows], columns=["edge", "next_edge", "enter_s", "seconds", "energy_wh"])
        key = d.answer[d.answer.trip == trip]
        for r in key.itertuples(index=False):
            total += length[r.edge]
            hit = got[(got.edge == r.edge) & ((got.enter_s - r.enter_s).abs() <= max(5.0, 0.5 * r.seconds))]
            if len(hit):
                found += length[r.edge]
                ours += float(hit.energy_wh.iat[0])
                theirs += r.energy_wh
    assert found / total >= 0.95
    assert ours == pytest.approx(theirs, rel=0.05)


@pytest.mark.needs("sumo")
def test_a_district_fleet_begins_and_ends_its_trips_in_the_district(synthetic):
    """With ``around`` every drive's first and last fix lie within the radius of the point (plus
    half the longest edge: SUMO departs at an edge's start, the district holds its middle);
    without it the same demand's trips reach well beyond."""
    import osmnx

    from evroute.world.sumo_drives import sumo_drives

    lat = float(np.median(synthetic.nodes.lat))
    lon = float(np.median(synthetic.nodes.lon))
    slack = 0.5 * float(synthetic.edges.length_m.max()) + 5.0

    def ends(d):
        g = d.traces.groupby("trip")
        first, last = g.first(), g.last()
        return np.r_[osmnx.distance.great_circle(lat, lon, first.lat.to_numpy(), first.lon.to_numpy()),
                     osmnx.distance.great_circle(lat, lon, last.lat.to_numpy(), last.lon.to_numpy())]

    d = sumo_drives(synthetic, "synthetic", Vehicle(), vehicles=8, seed=1, rate=300.0, hours=0.25,
                    around=(lat, lon, 0.9))
    assert d.summary["vehicles"] >= 6 and d.summary["around"]["km"] == 0.9 and d.summary["around"]["edges"] > 50
    assert ends(d).max() <= 900.0 + slack
    anywhere = sumo_drives(synthetic, "synthetic", Vehicle(), vehicles=8, seed=1, rate=300.0, hours=0.25)
    assert anywhere.summary["around"] is None and ends(anywhere).max() > 900.0 + slack
    with pytest.raises(EvrouteError, match="found no trip of at least 1000 m beginning and ending within 0.2 km"):
        sumo_drives(synthetic, "synthetic", Vehicle(), vehicles=2, seed=1, rate=300.0, hours=0.25,
                    around=(lat, lon, 0.2))


@pytest.mark.parametrize("args, message", [
    (["--fix-rate", "2"], "--fix-rate must be in (0, 1] fixes a second, got 2"),
    (["--vehicles", "0"], "--vehicles must be 1 to 10000, got 0"),
    (["--gps-noise", "-1"], "--gps-noise must be 0 to 500 metres, got -1"),
    (["--around", "49.6,6.1"], "--around must be LAT,LON,KM with KM in (0, 1000] kilometres, got '49.6,6.1'"),
    (["--around", "49.6,6.1,0"], "--around must be LAT,LON,KM with KM in (0, 1000] kilometres, got '49.6,6.1,0'"),
    (["--around", "95,6.1,3"], "--around '95,6.1' is not a valid latitude,longitude"),
])
def test_sumo_drives_refuses_bad_options_before_any_work(args, message, tmp_path):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "evroute", "sumo", "drives", "--network", "synthetic", "--out", str(tmp_path / "d"),
                        *args], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.strip() == f"error: {message}"
    assert not (tmp_path / "d").exists()


def test_fleet_prior_mean_is_the_conjugate_update():
    """Against a hand computation: ς² pooled within edges, the normal update per edge, E_det
    where nobody drove."""
    from evroute.world.drives_prior import fleet_prior_mean

    e_det = np.array([10.0, 20.0, 30.0])
    table = pd.DataFrame({"edge": [0, 0, 0, 1], "edge_wh": [12.0, 14.0, 16.0, 25.0], "energy_wh": 0.0})
    mean, counts, noise_var = fleet_prior_mean(e_det, table, prior_var=4.0)
    assert noise_var == pytest.approx(((12 - 14) ** 2 + 0 + (16 - 14) ** 2) / (4 - 2))  # dof: 4 rows, 2 edges
    assert counts.tolist() == [3, 1, 0]
    assert mean[0] == pytest.approx(10 + 3 * 4 / (3 * 4 + 4) * (14 - 10))
    assert mean[1] == pytest.approx(20 + 4 / (4 + 4) * (25 - 20))
    assert mean[2] == 30.0


def test_check_prior_supports_the_kernel_only_where_the_data_has_it(synthetic):
    """Traversals drawn from the kernel's own GP: the fit finds its scales and the check says
    the correlations are supported; drawn independently per edge with the same spread: the
    kernel predicts no better than independent edges (a Monte-Carlo reference both ways)."""
    from evroute.physics.routes import edge_energies
    from evroute.priors.fitting import check_prior
    from evroute.priors.network_prior import NetworkPrior

    e_det = edge_energies(synthetic, Vehicle())
    rng = np.random.default_rng(3)
    E = synthetic.n_edges
    edges = rng.choice(E, 300, replace=False)
    prior = NetworkPrior(synthetic, e_det, "combined", 1.0, 1.0, 2.0, 25.0)
    correlated = prior.sample(rng)
    independent = e_det + 5.0 * rng.standard_normal(E)

    def drives(f):
        e = np.repeat(edges, 3)
        y = f[e] + 3.0 * rng.standard_normal(e.size)
        return pd.DataFrame({"trip": [f"t{k}" for k in rng.integers(0, 40, e.size)], "edge": e, "edge_wh": y,
                             "energy_wh": y})

    good = check_prior(synthetic, e_det, drives(correlated), lengthscales=(0.25, 1.0, 4.0))
    assert good["fit"]["noise_std"] == pytest.approx(3.0, rel=0.25)
    assert good["supported"] and good["kernel"]["log_density"] > good["independent"]["log_density"] + 0.05
    assert 0.4 < good["kernel"]["coverage_50"] < 0.6 and 0.85 < good["kernel"]["coverage_90"] < 0.95
    bad = check_prior(synthetic, e_det, drives(independent), lengthscales=(0.25, 1.0, 4.0))
    assert bad["kernel"]["log_density"] < bad["independent"]["log_density"] + 0.02


def test_prior_check_command_prints_the_fit_as_another_vehicles_run_options(synthetic, tmp_path):
    """`prior check --for-vehicle`: the settings are the fit times ρ, the least-squares ratio of the
    other vehicle's E_det to the drives' vehicle's over the edges driven (numpy's lstsq), and the
    text names them as options; without it, ρ = 1."""
    import json
    import shlex
    import subprocess
    import sys

    from evroute.physics.energy import load_vehicle
    from evroute.physics.routes import edge_energies
    from evroute.priors.fitting import fitted_settings

    e_car, e_van = edge_energies(synthetic, load_vehicle("sumo-ev")), edge_energies(synthetic, load_vehicle("delivery-van"))
    rng = np.random.default_rng(7)
    e = np.repeat(rng.choice(synthetic.n_edges, 120, replace=False), 3)
    y = e_car[e] + 3.0 * rng.standard_normal(e.size)
    pd.DataFrame({"trip": [f"t{k}" for k in rng.integers(0, 12, e.size)], "edge": e, "energy_wh": y,
                  "edge_wh": y}).to_parquet(tmp_path / "d.parquet")
    cmd = [sys.executable, "-m", "evroute", "prior", "check", str(tmp_path / "d.parquet"), "--network", "synthetic",
           "--no-progress"]
    own = subprocess.run(cmd + ["--json"], capture_output=True, text=True)
    van = subprocess.run(cmd + ["--json", "--vehicle", "delivery-van"], capture_output=True, text=True)
    assert own.returncode == 0 and van.returncode == 0, own.stderr + van.stderr
    own, van = json.loads(own.stdout), json.loads(van.stdout)
    driven = np.unique(e)
    rho = np.linalg.lstsq(e_car[driven, None], e_van[driven], rcond=None)[0][0]
    assert van["settings"]["vehicle"] == "delivery-van" and van["settings"]["rho"] == pytest.approx(rho, rel=1e-12)
    expected = {**fitted_settings(own, rho), "vehicle": "delivery-van"}
    assert set(van["settings"]) == set(expected)
    for key, value in expected.items():  # a noise model's spec is text, the rest numbers
        assert van["settings"][key] == (value if isinstance(value, str) else pytest.approx(value, rel=1e-12)), key
    assert own["settings"]["rho"] == 1.0
    text = subprocess.run(cmd + ["--vehicle", "delivery-van"], capture_output=True, text=True).stdout
    assert f"to learn under it as delivery-van: --prior-std {van['settings']['prior_std']:.4g} --noise-std" in text
    # what it prints runs as written, in both commands; the drives as the van's prior: prior fit
    lines = text.splitlines()
    fit = next(x for x in lines if x.startswith("to learn under it")).split(": ", 1)[1].split(" (the fit")[0]
    assert "with these drives as its prior: evroute prior fit DRIVES --vehicle delivery-van --out PRIOR" in text
    run = [sys.executable, "-m", "evroute"]
    common = ["--vehicle", "delivery-van", "--horizon", "3", "--no-progress", *shlex.split(fit)]
    for args in (["simulate", "--network", "synthetic", "--out", str(tmp_path / "run")],
                 ["compare", "--routes", "synthetic:A", "--policies", "gp-ts", "--seeds", "1", "--out",
                  str(tmp_path / "cmp")]):
        p = subprocess.run(run + args + common, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["agent"]["lengthscale"] == van["settings"]["lengthscale"]
    own_text = subprocess.run(cmd, capture_output=True, text=True).stdout
    assert "with these drives as its prior" not in own_text  # printed for another vehicle only


def test_prior_check_command_refuses_bad_input(tmp_path):
    import subprocess
    import sys

    base = [sys.executable, "-m", "evroute", "prior", "check"]
    p = subprocess.run(base + [str(tmp_path / "none.parquet"), "--network", "synthetic"], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.strip() == f"error: no such drives table: {tmp_path / 'none.parquet'}"
    (tmp_path / "x.parquet").write_text("not parquet")
    p = subprocess.run(base + [str(tmp_path / "x.parquet"), "--network", "synthetic"], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.startswith(f"error: cannot read the drives table {tmp_path / 'x.parquet'}")
    assert len(p.stderr.strip().splitlines()) == 1


def test_gpx_traces_import_as_their_csv(synthetic, tmp_path):
    """The same drive written as GPX (energy and speed as extensions) and as CSV gives the same
    traversals; a file that is not GPX is one error naming it."""
    from evroute.world.drives import write_gpx

    route = _route(synthetic)
    fixes = _drive(synthetic, route, np.full(len(route), 25.0)).assign(trip="d1", vehicle="d1")
    fixes.to_csv(tmp_path / "d.csv", index=False)
    write_gpx(fixes, tmp_path / "d.gpx", "test")
    a, _ = import_traces([tmp_path / "d.csv"], synthetic, gps_noise_m=5.0)
    b, report = import_traces([tmp_path / "d.gpx"], synthetic, gps_noise_m=5.0)
    assert report.problems == [] and b.edge.tolist() == a.edge.tolist() == route[1:-1]
    np.testing.assert_allclose(b.energy_wh, a.energy_wh, rtol=1e-6)
    np.testing.assert_allclose(b.seconds, a.seconds, rtol=1e-6)
    (tmp_path / "bad.gpx").write_text("<html>not a track</html>")
    with pytest.raises(EvrouteError, match=f"cannot read the trace {tmp_path / 'bad.gpx'}: no GPX track points"):
        read_traces(tmp_path / "bad.gpx")


@pytest.mark.needs("sumo")
def test_sumo_drives_command_writes_csv_gpx_and_the_answer_key(tmp_path):
    """The command's CSV and GPX hold the same fixes, marked as evroute's (so a second run may
    replace them, and a user's file of that name is refused)."""
    import subprocess
    import sys

    from evroute.io import written_by_evroute

    out = tmp_path / "d"
    cmd = [sys.executable, "-m", "evroute", "sumo", "drives", "--network", "synthetic", "--vehicles", "3", "--traffic", "300",
           "--hours", "0.25", "--gps-noise", "5", "--out", str(out), "--no-progress"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    for name in ("traces.csv", "traces.gpx", "answer.parquet", "drives.json"):
        assert written_by_evroute(out / name), name
    csv, gpx = read_traces(out / "traces.csv"), read_traces(out / "traces.gpx")
    assert len(csv) == len(gpx) > 100
    np.testing.assert_allclose(gpx.energy_wh, csv.energy_wh, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(gpx.lat, csv.lat, atol=1e-9)
    (out / "traces.gpx").write_text("mine")
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 2 and "traces.gpx exists and was not written by evroute" in p.stderr


def _traversals(edges, edge_wh, *, trip="t", kin_in=0.0, kin_out=0.0, chained=False) -> pd.DataFrame:
    """Rows of :data:`evroute.world.drives.TRAVERSAL_COLUMNS` for traversals of ``edges``; with
    ``chained`` one car drove them in that order (each row's next edge the following row's)."""
    edges = np.asarray(edges, dtype=np.int64)
    nxt = np.r_[edges[1:], -1] if chained else np.full(edges.size, -1)
    return pd.DataFrame({"trip": trip, "vehicle": trip, "edge": edges, "next_edge": nxt, "enter_s": 0.0,
                         "seconds": 1.0, "energy_wh": np.asarray(edge_wh) + kin_in + kin_out, "edge_wh": edge_wh,
                         "kin_in_wh": kin_in, "kin_out_wh": kin_out, "v_in": 10.0, "v_top": 10.0, "v_out": 10.0,
                         "match_dist_m": 1.0})


def _least_energy_walk(net, weights, turn_costs, start, end):
    """The least Σ weights + Σ turn costs walk by networkx's Bellman–Ford on the line graph."""
    import networkx as nx

    g = nx.DiGraph()
    for i, (a, b) in enumerate(zip(net.conn_src, net.conn_dst, strict=True)):
        g.add_edge(int(a), int(b), w=float(turn_costs[i] + weights[b]))
    path = nx.bellman_ford_path(g, start, end, weight="w")
    return path, float(weights[start]) + nx.path_weight(g, path, "w")


def test_route_under_drives_avoids_what_the_drives_found_expensive(synthetic):
    """Drives that found the E_det-optimal route's edges 300 Wh dearer: the route under the drives
    avoids them, and it is the least Σ max(posterior mean, floor) + Σ junction dissipation route
    (physics' where no two cars took the same turn; networkx's Bellman–Ford on those energies
    agrees); the GeoJSON carries each edge's posterior."""
    from evroute.physics.energy import energy_floor_wh
    from evroute.physics.routes import edge_energies, reference_routes, resolve_route
    from evroute.reports.report import routes_geojson
    from evroute.world.drives_prior import drives_route, fleet_prior_mean
    from evroute.world.junctions import physics_turns

    spec = resolve_route(synthetic, "A", None, to_point=None)
    energy = reference_routes(synthetic, spec)[0]["edges"]
    e_det = edge_energies(synthetic, Vehicle())
    inner = energy[1:-1]
    table = _traversals(np.repeat(inner, 10), np.repeat(e_det[inner] + 300.0, 10)
                        + np.tile(np.linspace(-1, 1, 10), len(inner)))
    r = drives_route(synthetic, spec, table)
    assert r["edges"] != energy and r["edges_driven_share"] < 1.0
    s0 = 0.25 * float(np.std(e_det))
    mean, _, _ = fleet_prior_mean(e_det, table, s0 * s0)
    floor, _ = energy_floor_wh(synthetic.edges.length_m.to_numpy(), synthetic.edges.grade.to_numpy())
    turns = physics_turns(synthetic, Vehicle()).mean
    ref, cost = _least_energy_walk(synthetic, np.maximum(mean, floor), turns, spec.start, spec.end)
    oracle = Oracle.from_network(synthetic)
    got = float(np.maximum(mean, floor)[r["edges"]].sum() + turns[oracle.turn_index(r["edges"])].sum())
    assert got == pytest.approx(cost, rel=1e-9)
    assert r["edges_wh"] == pytest.approx(float(mean[r["edges"]].sum()))
    assert r["junctions_wh"] == pytest.approx(float(sum(r["turn_wh"])))
    assert r["energy_wh"] == pytest.approx(r["edges_wh"] + r["junctions_wh"]) and len(r["turn_wh"]) == r["n_edges"] - 1
    props = [f["properties"] for f in routes_geojson(synthetic, [r], "A")["features"]]
    assert len(props[0]["edge_mean_wh"]) == r["n_edges"] == len(props[0]["edge_sd_wh"])

    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "evroute", "route", "--network", "synthetic", "--drives", "/nonexistent.parquet"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.strip() == "error: no such drives table: /nonexistent.parquet"


def test_a_junction_that_ten_cars_paid_for_is_avoided_and_one_car_is_not(synthetic):
    """A fleet whose cars dissipated what physics says at the junctions they drove (± 30 Wh), and
    one turn of the route under the drives where cars dissipated 400 ± 30 Wh: with ten cars there
    the turn is trusted and the route turns elsewhere; one car moves it less than half way from
    physics (the fleet's turns stray from physics by little)."""
    from evroute.physics.routes import edge_energies, resolve_route
    from evroute.world.drives_prior import drives_route
    from evroute.world.junctions import physics_turns

    spec = resolve_route(synthetic, "A", None, to_point=None)
    e_det = edge_energies(synthetic, Vehicle())
    p = physics_turns(synthetic, Vehicle()).mean
    src, dst = np.asarray(synthetic.conn_src), np.asarray(synthetic.conn_dst)
    rng = np.random.default_rng(0)
    background = pd.concat([_traversals([src[j], dst[j]], e_det[[src[j], dst[j]]], trip=f"b{j}-{i}",
                                        kin_out=np.array([p[j] + rng.normal(0.0, 30.0), 0.0]), chained=True)
                            for j in rng.choice(src.size, 300, replace=False) for i in range(3)], ignore_index=True)
    base = drives_route(synthetic, spec, background)["edges"]
    k = len(base) // 2
    a, b = base[k], base[k + 1]

    def cars(n):
        return pd.concat([background] + [_traversals([a, b], e_det[[a, b]], trip=f"c{i}",
                                                     kin_out=np.array([400.0 + 30.0 * (-1) ** i, 0.0]), chained=True)
                                         for i in range(n)], ignore_index=True)

    from evroute.world.junctions import fleet_turns

    arc = int(np.flatnonzero((src == a) & (dst == b))[0])
    one, ten = fleet_turns(cars(1), synthetic, Vehicle()), fleet_turns(cars(10), synthetic, Vehicle())
    assert ten.mean[arc] > 300.0 and p[arc] < one.mean[arc] < min(0.6 * 430.0, ten.mean[arc] - 100.0)
    path = drives_route(synthetic, spec, cars(10))["edges"]
    assert not any(x == a and y == b for x, y in zip(path[:-1], path[1:], strict=True))


def test_the_import_is_the_same_whatever_the_hash_seed(synthetic, tmp_path):
    """Two processes with different PYTHONHASHSEED import a noisy trace to the same table."""
    import os
    import subprocess
    import sys

    route = _route(synthetic)
    fixes = _drive(synthetic, route, np.full(len(route), 30.0), rate_hz=0.5)
    rng = np.random.default_rng(1)
    fixes["lat"] += rng.normal(0, 8.0 / 111_195, len(fixes))
    fixes["lon"] += rng.normal(0, 8.0 / 80_000, len(fixes))
    fixes.to_csv(tmp_path / "t.csv", index=False)
    tables = []
    for seed in ("0", "4242"):
        out = tmp_path / f"o{seed}"
        p = subprocess.run([sys.executable, "-m", "evroute", "drives", "import", str(tmp_path / "t.csv"), "--network",
                            "synthetic", "--out", str(out), "--no-progress"], capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": seed})
        assert p.returncode == 0, p.stderr
        tables.append(pd.read_parquet(out / "traversals.parquet"))
    assert len(tables[0]) > 5
    pd.testing.assert_frame_equal(tables[0], tables[1])


def test_two_processes_import_the_same_table_as_one(synthetic, tmp_path):
    route = _route(synthetic)
    parts = []
    for k, rate in enumerate((1.0, 0.5, 1 / 3)):
        parts.append(_drive(synthetic, route, np.full(len(route), 20.0 + k), rate_hz=rate).assign(trip=f"t{k}"))
    pd.concat(parts).to_csv(tmp_path / "t.csv", index=False)
    one, r1 = import_traces([tmp_path / "t.csv"], synthetic, gps_noise_m=5.0, jobs=1)
    two, r2 = import_traces([tmp_path / "t.csv"], synthetic, gps_noise_m=5.0, jobs=2)
    assert r1.trips_kept == 3 and r1.to_dict() == r2.to_dict()
    pd.testing.assert_frame_equal(one, two)


def test_check_prior_measures_the_per_edge_noise_model_on_held_out_trips(synthetic):
    """Traversals whose noise grows with the edge's length (ς_e = 1 + 30 Wh/km): the per-edge
    model fitted on half of the trips predicts the other half better than one ς, and its
    intervals cover what they say; with one true ς it gains nothing (Monte Carlo both ways). The
    fit as another vehicle's run settings (fitted_settings) scales σ₀ and the noise."""
    from evroute.physics.routes import edge_energies
    from evroute.priors.fitting import check_prior, fitted_settings
    from evroute.priors.network_prior import NetworkPrior
    from evroute.priors.noise import edge_noise_std, noise_model_spec

    e_det = edge_energies(synthetic, Vehicle())
    rng = np.random.default_rng(4)
    edges = rng.choice(synthetic.n_edges, 300, replace=False)
    f = NetworkPrior(synthetic, e_det, "combined", 1.0, 1.0, 2.0, 25.0).sample(rng)

    def drives(sd):
        e = np.repeat(edges, 4)
        y = f[e] + sd[e] * rng.standard_normal(e.size)
        return pd.DataFrame({"trip": [f"t{k}" for k in rng.integers(0, 40, e.size)], "edge": e, "edge_wh": y})

    hetero = check_prior(synthetic, e_det, drives(edge_noise_std(synthetic, "edge[a=1,b_per_km=30]")),
                         lengthscales=(1.0,))
    assert hetero["noise_model"]["b_per_km"] == pytest.approx(30, rel=0.25)
    assert hetero["edge_noise"]["log_density"] > hetero["kernel"]["log_density"] + 0.03  # (0.05–0.06 over seeds)
    # ~600 held-out traversals: a share's standard error is about 0.02
    assert 0.40 < hetero["edge_noise"]["coverage_50"] < 0.60 and 0.85 < hetero["edge_noise"]["coverage_90"] < 0.95
    flat = check_prior(synthetic, e_det, drives(np.full(synthetic.n_edges, 3.0)), lengthscales=(1.0,))
    assert abs(flat["edge_noise"]["log_density"] - flat["kernel"]["log_density"]) < 0.02
    # as run settings for a vehicle that uses twice the energy: the per-edge model's σ₀ and noise
    # times 2 where it predicted better, one level's otherwise; a ratio that is not > 0 is refused
    nm = hetero["noise_model"]
    assert fitted_settings(hetero, 2.0) == {"prior_std": 2 * nm["prior_std"], "lengthscale": nm["lengthscale"],
                                            "rho": 2.0, "noise_std": noise_model_spec(2 * nm["a"], 2 * nm["b_per_km"],
                                                                                      2 * nm["tls"])}
    worse = {**hetero, "edge_noise": {**hetero["edge_noise"], "log_density": hetero["kernel"]["log_density"] - 0.1}}
    assert fitted_settings(worse, 2.0) == {"prior_std": 2 * hetero["fit"]["prior_std"], "rho": 2.0,
                                           "noise_std": 2 * hetero["fit"]["noise_std"],
                                           "lengthscale": hetero["fit"]["lengthscale"]}
    with pytest.raises(EvrouteError, match="> 0"):
        fitted_settings(hetero, 0.0)


@pytest.mark.needs("sumo")
def test_sumo_battery_output_imports_as_the_trace(synthetic, tmp_path):
    """`sumo drives --battery-xml` keeps SUMO's battery output and network; importing it with
    --sumo-net places the same fixes (lon/lat from sumolib within 1e-6°) on the same edges as
    the CSV trace of the same drives, and its energies are the battery device's (within 1 % of
    the emission output's per trip: two outputs of SUMO); a file that is not one is one line."""
    import subprocess
    import sys

    from evroute.io import written_by_evroute
    from evroute.world.drives import read_sumo_battery

    out = tmp_path / "d"
    cmd = [sys.executable, "-m", "evroute", "sumo", "drives", "--network", "synthetic", "--vehicles", "4", "--traffic", "300",
           "--hours", "0.25", "--battery-xml", "--out", str(out), "--no-progress"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert written_by_evroute(out / "battery.xml") and written_by_evroute(out / "net.net.xml")
    csv = read_traces(out / "traces.csv")
    bat = read_sumo_battery(out / "battery.xml", out / "net.net.xml")
    m = csv.merge(bat, on=["trip", "time_s"], suffixes=("_csv", "_xml"))
    assert len(m) == len(csv) == len(bat) > 100
    assert np.abs(m.lat_csv - m.lat_xml).max() < 1e-6 and np.abs(m.lon_csv - m.lon_xml).max() < 1e-6
    last = m.groupby("trip").last()
    np.testing.assert_allclose(last.energy_wh_xml, last.energy_wh_csv, rtol=0.01, atol=1.0)
    a, _ = import_traces([out / "traces.csv"], synthetic, gps_noise_m=5)
    b, report = import_traces([out / "battery.xml"], synthetic, gps_noise_m=5, sumo_net=out / "net.net.xml")
    assert report.trips_kept == 4 and list(a.edge) == list(b.edge)
    np.testing.assert_allclose(b.energy_wh, a.energy_wh, atol=1.5)
    p = subprocess.run(cmd, capture_output=True, text=True)  # its own files: replaced
    assert p.returncode == 0, p.stderr
    with pytest.raises(EvrouteError, match="not SUMO's battery output"):
        read_sumo_battery(out / "net.net.xml", out / "net.net.xml")
    _, report = import_traces([out / "battery.xml"], synthetic)  # a file of a run: skipped, named
    assert report.skipped == [str(out / "battery.xml")] and "(--sumo-net)" in report.problems[0]
    p = subprocess.run([sys.executable, "-m", "evroute", "drives", "import", str(out / "battery.xml"), "--network",
                        "synthetic", "--out", str(tmp_path / "x")], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.strip().endswith("needs the SUMO network it was recorded on (--sumo-net)")


def test_odometry_positions_are_the_weighted_least_squares_of_gps_and_speed():
    """The tridiagonal solve against the dense least squares of the stacked system (rows
    (x_i − s_i)/σ and (x_{i+1} − x_i − d_i)/q_i, d_i the trapezoid of the speeds)."""
    from evroute.world.drives import ODOMETRY_FLOOR_M, ODOMETRY_SHARE, odometry_positions

    rng = np.random.default_rng(3)
    t = np.cumsum(rng.uniform(0.5, 5.0, 40))
    speed = rng.uniform(0.0, 15.0, 40)
    s = np.cumsum(rng.uniform(0, 30, 40)) + rng.normal(0, 10, 40)
    d = np.diff(t) * 0.5 * (speed[1:] + speed[:-1])
    q = ODOMETRY_FLOOR_M + ODOMETRY_SHARE * np.abs(d)
    a = np.vstack([np.eye(40) / 7.0, (np.eye(40, k=1) - np.eye(40))[:-1] / q[:, None]])
    b = np.r_[s / 7.0, d / q]
    expected = np.linalg.lstsq(a, b, rcond=None)[0]
    np.testing.assert_allclose(odometry_positions(s, t, speed, gps_noise_m=7.0), expected, rtol=1e-10, atol=1e-9)


def test_the_speed_places_a_stop_at_a_junction_despite_gps_noise():
    """A car braking to a stop 15 m before a junction, idling and starting again, its positions
    off by 10 m of noise (20 draws): with its speeds each edge's energy (the braking and the idle
    on the first, the start on the next) comes back within about 5 % (median) of the exact positions';
    from the GPS alone the stop's energy lands on the wrong edge half the time."""
    veh = Vehicle()
    length = np.array([150.0, 150.0, 150.0, 150.0])
    route = [0, 1, 2, 3]
    t = np.arange(0.0, 80.0)
    v = np.where(t < 20, SPEED, np.where(t < 30, SPEED * (30 - t) / 10, np.where(t < 40, 0.0,
                 np.where(t < 50, SPEED * (t - 40) / 10, SPEED))))
    s = np.r_[0.0, np.cumsum(0.5 * (v[1:] + v[:-1]))]
    s = s - s[30] + 285.0  # the stop 15 m before the junction at 300 m
    power = 3.0 + 8.0 * np.maximum(np.gradient(v), 0) - 2.0 * np.maximum(-np.gradient(v), 0)  # Wh a second
    energy = np.r_[0.0, np.cumsum(0.5 * (power[1:] + power[:-1]))]
    keep = (s > 0) & (s < 600)
    t, v, s, energy = t[keep], v[keep], s[keep], energy[keep]
    zeros = np.zeros(t.size)
    exact = {r[0]: r[4] for r in trip_traversals(route, s, t, energy=energy, speed=v, dist=zeros, length=length, vehicle=veh)}
    assert sorted(exact) == [1, 2]
    smooth_err, raw_err = [], []
    for seed in range(20):
        noisy = s + np.random.default_rng(seed).normal(0, 10.0, s.size)
        smooth = {r[0]: r[4] for r in trip_traversals(route, noisy, t, energy=energy, speed=v, dist=zeros, length=length, vehicle=veh, gps_noise_m=10.0)}
        raw = {r[0]: r[4] for r in trip_traversals(route, noisy, t, energy=energy, speed=v, dist=zeros, length=length, vehicle=veh)}
        smooth_err += [abs(smooth[k] / exact[k] - 1) for k in (1, 2)]
        raw_err += [abs(raw[k] / exact[k] - 1) for k in (1, 2)]
    assert np.median(smooth_err) < 0.06 and max(smooth_err) < 0.25
    assert np.median(raw_err) > 3 * np.median(smooth_err)


def _turn_fleet(net, dissipation_by_turn, vehicle, vehicle_prefix="v"):
    """Traversals of cars (``vehicle``) each taking one turn and dissipating there the energy
    given: every edge at its speed limit, the turn's kinetic change in ``kin_out`` of the edge before
    with it."""
    from evroute.physics.energy import kinetic_energy_wh

    src, dst = np.asarray(net.conn_src), np.asarray(net.conn_dst)
    v = net.edges.speed_mps.to_numpy(np.float64)
    rows, k = [], 0
    for j, ds in dissipation_by_turn.items():
        change = float(kinetic_energy_wh(v[dst[j]], vehicle) - kinetic_energy_wh(v[src[j]], vehicle))
        for d in ds:
            for i, (e, n) in enumerate(((int(src[j]), int(dst[j])), (int(dst[j]), -1))):
                rows.append({"trip": f"t{k}", "vehicle": f"{vehicle_prefix}{k}", "edge": e, "next_edge": n,
                             "enter_s": 10.0 * i, "seconds": 5.0, "energy_wh": 20.0, "edge_wh": 20.0,
                             "kin_in_wh": 0.0, "kin_out_wh": float(d) + change if i == 0 else 0.0, "v_in": 5.0,
                             "v_top": float(v[e]), "v_out": 5.0})
            k += 1
    return pd.DataFrame(rows)


def test_fleet_turns_fit_the_hierarchical_model_and_their_posterior_covers_the_true_means(synthetic):
    """fleet_turns on drives drawn from its own model (each turn's mean dissipation physics' + b +
    N(0, τ²), each car's its mean + N(0, s²), 0–8 cars a turn): b and τ² are the maximum of the
    marginal likelihood found by an independent optimiser (Nelder–Mead over (b, log τ²) of the
    Gaussian log densities), recover the true b, τ and s, the posterior is the conjugate one, and
    its 90 % intervals cover about 90 % of the true means, closer to them than the raw means;
    another vehicle's drives give what its dissipations, moved into this vehicle's units by hand
    (the ratio of what a stop and start loses), give."""
    from scipy.optimize import minimize
    from scipy.stats import norm

    from evroute.physics.energy import load_vehicle
    from evroute.world.junctions import fleet_turns, physics_turns, speed_change_loss_wh

    van, car = load_vehicle("delivery-van"), load_vehicle("sumo-ev")
    model = physics_turns(synthetic, van).mean
    rng = np.random.default_rng(41)
    b, tau, s = 12.0, 25.0, 30.0
    mu = model + b + tau * rng.standard_normal(model.size)
    n = rng.choice(9, size=model.size, p=[0.3] + [0.7 / 8] * 8)
    draws = {j: mu[j] + s * rng.standard_normal(n[j]) for j in range(model.size) if n[j] > 0}
    turns = fleet_turns(_turn_fleet(synthetic, draws, van), synthetic, van)
    driven = n > 0
    np.testing.assert_array_equal(turns.counts, n)
    assert turns.source == "drives" and not turns.known
    m = np.array([draws[j].mean() if n[j] else np.nan for j in range(model.size)])
    dev = np.concatenate([draws[j] - draws[j].mean() for j in draws])
    s_hat = np.sqrt(dev @ dev / (n[driven] - 1).sum())
    assert turns.noise_var == pytest.approx(s_hat**2, rel=1e-9)

    def nll(x):  # the marginal likelihood written with scipy's normal density
        return -norm.logpdf(m[driven] - model[driven], loc=x[0], scale=np.sqrt(np.exp(x[1]) + s_hat ** 2 / n[driven])).sum()

    ref = minimize(nll, x0=[0.0, np.log(100.0)], method="Nelder-Mead", options={"xatol": 1e-7, "fatol": 1e-10})
    b_hat, tau2_hat = ref.x[0], np.exp(ref.x[1])
    np.testing.assert_allclose(turns.var[~driven], tau2_hat, rtol=1e-4)
    np.testing.assert_allclose(turns.mean[~driven] - model[~driven], b_hat, rtol=1e-4)
    assert abs(b_hat - b) < 3.0 and abs(np.sqrt(tau2_hat) - tau) < 0.15 * tau and abs(s_hat - s) < 0.05 * s
    prec = 1.0 / tau2_hat + n / s_hat ** 2
    np.testing.assert_allclose(turns.var, 1.0 / prec, rtol=1e-4)
    post = model + b_hat + np.where(driven, (n / s_hat ** 2) / prec * (np.nan_to_num(m) - model - b_hat), 0.0)
    np.testing.assert_allclose(turns.mean, post, rtol=1e-5, atol=1e-6)
    z = (post - mu) / np.sqrt(turns.var)
    assert 0.87 < np.mean(np.abs(z) < norm.ppf(0.95)) < 0.93
    assert np.mean((post - mu)[driven] ** 2) < 0.8 * np.mean((m - mu)[driven] ** 2)
    # another vehicle's drives: its dissipations times ρ, what a stop from 50 km/h and back loses
    rho = float((speed_change_loss_wh(13.9, 0.0, van) + speed_change_loss_wh(0.0, 13.9, van))
                / (speed_change_loss_wh(13.9, 0.0, car) + speed_change_loss_wh(0.0, 13.9, car)))
    moved = {j: rho * d for j, d in draws.items()}
    lent = fleet_turns(_turn_fleet(synthetic, draws, car), synthetic, van, measured_by=car)
    mine = fleet_turns(_turn_fleet(synthetic, moved, van), synthetic, van)
    np.testing.assert_allclose(lent.mean, mine.mean, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(lent.var, mine.var, rtol=1e-6)
    assert lent.noise_var == pytest.approx(rho**2 * s_hat**2, rel=1e-6)
    with pytest.raises(EvrouteError, match="no two cars took the same turn"):
        fleet_turns(_turn_fleet(synthetic, {0: [5.0], 1: [7.0]}, van), synthetic, van)
