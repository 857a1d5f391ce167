"""Energy conserved: the checks of a truth (evroute.world.conservation), the exact optimum of a
truth that conserves (evroute.roads.walks.least_energy_walk) against networkx's Bellman–Ford and
the weight rules, regret that is never negative, and the bookkeeping of a truth of edges plus
turns (evroute.world.junctions, drive_predictions) on hand-built traversals."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from evroute.bandit.environments import StaticEnvironment, Truth, Turns
from evroute.bandit.policies import route_weights
from evroute.errors import EvrouteError
from evroute.physics.energy import Vehicle, energy_floor_wh, kinetic_energy_wh, potential_energy_wh
from evroute.physics.routes import edge_energies
from evroute.roads.network import load_network
from evroute.roads.oracle import Oracle
from evroute.roads.walks import least_energy_walk
from evroute.world.conservation import route_energy, trip_checks, truth_checks
from evroute.world.junctions import junction_dissipation, speed_change_loss_wh, truth_turns
from evroute.world.sumo_atlas import ATLAS_COLUMNS
from evroute.world.sumo_truth import drive_predictions


@pytest.fixture(scope="module")
def city():
    net = load_network("synthetic", size=150)
    return net, Oracle.from_network(net), edge_energies(net)


def _physical_turns(net, rng, stop_share=0.3):
    """A truth's junctions: each turn its change of kinetic level plus a dissipation ≥ 0 (what one
    car loses braking and accelerating between typical speeds, stopping at some junctions)."""
    src, dst = np.asarray(net.conn_src), np.asarray(net.conn_dst)
    v = rng.uniform(6.0, 20.0, net.n_edges)
    stop = rng.random(src.size) < stop_share
    loss = np.where(stop, speed_change_loss_wh(v[src], 0.0) + speed_change_loss_wh(0.0, v[dst]),
                    speed_change_loss_wh(v[src], v[dst]))
    psi = kinetic_energy_wh(v)
    return Turns(psi[dst] - psi[src] + loss, psi, src, dst)


def _conserving_truth(net, rng, stop_share=0.3):
    """Random energies that conserve: each edge at least its floor (plus a random excess), a
    random physical turn at every junction."""
    e = net.edges
    floor, _ = energy_floor_wh(e.length_m.to_numpy(), e.grade.to_numpy())
    f = floor + rng.exponential(5.0, net.n_edges)
    return f, _physical_turns(net, rng, stop_share)


def _trips(net, oracle, rng, n):
    reach = [oracle.reachable(s) for s in range(net.n_edges)]
    out = []
    while len(out) < n:
        s = int(rng.integers(net.n_edges))
        ends = np.flatnonzero(reach[s])
        ends = ends[ends != s]
        if ends.size:
            out.append((s, int(rng.choice(ends))))
    return out


def _networkx_optimum(net, f, turns, start, end) -> float:
    """The least-energy walk from ``start`` to ``end`` by networkx's Bellman–Ford on the line graph
    with signed weights: an arc e → e′ weighs f(e′) plus the turn's cost; the start edge its own."""
    g = nx.DiGraph()
    costs = np.zeros(len(net.conn_src)) if turns is None else turns.costs
    for a, b, c in zip(np.asarray(net.conn_src).tolist(), np.asarray(net.conn_dst).tolist(), costs.tolist(),
                       strict=True):
        g.add_edge(a, b, weight=float(f[b]) + c)
    return float(f[start]) + nx.bellman_ford_path_length(g, start, end, weight="weight")


def test_physical_truths_pass_the_checks(city):
    """E_det (Eq. 8, grades from node elevations) and E_det plus turns a car could pay: nothing
    below the floor, no cycle creates energy, no turn dissipates less than nothing."""
    net, _, e_det = city
    checks = truth_checks(net, e_det)
    assert checks["below_floor_share"] == 0.0 and not checks["negative_cycle"] and checks["edges_checked"] == net.n_edges
    turns = _physical_turns(net, np.random.default_rng(0))
    checks = truth_checks(net, e_det, turns)
    assert not checks["negative_cycle"] and checks["turn_violations"] == 0


def test_a_truth_that_books_recovery_on_the_wrong_edge_creates_energy(city):
    """The whole-traversal booking's flaw, made by hand: a car brakes at the end of the edges of a
    loop (recovering what it paid to speed up at their start, on the edge before); booked on the
    edges, the loop returns more than it took. The checks find the cycle and its energy, and the
    floor check flags the edges; there is then no least-energy walk."""
    net, oracle, e_det = city
    g = nx.DiGraph(zip(np.asarray(net.conn_src).tolist(), np.asarray(net.conn_dst).tolist(), strict=True))
    loop = min(nx.simple_cycles(g, length_bound=6), key=len)
    f = e_det.copy()
    f[loop] = -50.0
    checks = truth_checks(net, f, covered=np.isin(np.arange(net.n_edges), loop))
    assert checks["negative_cycle"] and checks["cycle_energy_wh"] < 0 and checks["below_floor_share"] == 1.0
    assert checks["cycle_edges"] >= 2
    with pytest.raises(EvrouteError, match="creates energy"):
        least_energy_walk(oracle, f, start=loop[0], end=loop[1])


def test_the_reduced_cost_dijkstra_is_networkx_bellman_ford(city):
    """On random conserving truths of edges plus turns: Dijkstra on the reduced costs (the physical
    potential, every reduced cost ≥ 0) and, where some reduced cost is negative, on Johnson's,
    give the least-energy walk's energy of networkx's Bellman–Ford on the signed weights."""
    net, oracle, _ = city
    rng = np.random.default_rng(1)
    e = net.edges
    potential = potential_energy_wh(e.length_m.to_numpy(), e.grade.to_numpy())
    kinds = set()
    for k in range(6):
        f, turns = _conserving_truth(net, rng)
        if k % 2:  # a truth measured, not built: a few edges a little below the potential, no cycle below 0
            f = f.copy()
            idx = rng.choice(net.n_edges, 5, replace=False)
            f[idx] = potential[idx] - 0.5
        for start, end in _trips(net, oracle, rng, 4):
            try:
                want = _networkx_optimum(net, f, turns, start, end)
            except nx.NetworkXUnbounded:
                continue
            path, cert = least_energy_walk(oracle, f, start=start, end=end, potential=potential,
                                           turn_weights=turns.dissipation)
            kinds.add(cert["potential"])
            assert path[0] == start and path[-1] == end
            assert route_energy(oracle, f, path, turns=turns) == pytest.approx(want, abs=1e-6)
    assert kinds == {"physical", "johnson"}


def test_regret_against_the_exact_optimum_is_never_negative(city):
    """Random conserving truths, an environment per trip: whatever route is driven (random walks
    of the line graph to the trip's end), its energy is at least the reference's, which equals
    networkx's Bellman–Ford."""
    net, oracle, _ = city
    rng = np.random.default_rng(2)
    e = net.edges
    potential = potential_energy_wh(e.length_m.to_numpy(), e.grade.to_numpy())
    for start, end in _trips(net, oracle, rng, 6):
        f, turns = _conserving_truth(net, rng)
        env = StaticEnvironment(Truth(f, 1.0, turns=turns, potential=potential), 1.0, oracle, start, end, seed=0)
        assert env.exact
        best = env.optimal_energy(1)
        assert best == pytest.approx(_networkx_optimum(net, f, turns, start, end), abs=1e-6)
        for _ in range(20):  # routes under random weights: never below the optimum
            w = rng.exponential(1.0, net.n_edges)
            path = oracle.shortest_path(w, start, end, turn_weights=rng.exponential(1.0, len(net.conn_src))).edges
            assert env.route_energy(1, path) >= best - 1e-9


def test_the_potential_rule_handed_the_truth_drives_the_exact_optimum(city):
    """Handed a conserving truth (edges at or above their floors, turns that only dissipate), the
    potential rule's Dijkstra route has the exact optimum's energy on every trip; the rectified
    rule, which rounds the recovered energy up to 0, is worse on some trips and never better."""
    net, oracle, e_det = city
    rng = np.random.default_rng(3)
    turns = _physical_turns(net, rng)
    e = net.edges
    floor, potential = energy_floor_wh(e.length_m.to_numpy(), e.grade.to_numpy())
    worse = 0
    for start, end in _trips(net, oracle, rng, 25):
        want = _networkx_optimum(net, e_det, turns, start, end)
        w, arc = route_weights(e_det, "potential", 1.0, floor=floor, potential=potential, turns=turns.dissipation)
        assert w.min() >= 0 and arc.min() >= 0
        got = route_energy(oracle, e_det, oracle.shortest_path(w, start, end, turn_weights=arc).edges, turns=turns)
        assert got == pytest.approx(want, abs=1e-6), (start, end)
        w, arc = route_weights(e_det, "rectified", 1e-6, turns=turns.dissipation)
        rect = route_energy(oracle, e_det, oracle.shortest_path(w, start, end, turn_weights=arc).edges, turns=turns)
        assert rect >= got - 1e-6
        worse += rect > got + 1e-3
    assert worse >= 3


def test_trip_checks_agree_with_the_pieces(city):
    net, oracle, e_det = city
    rng = np.random.default_rng(4)
    turns = _physical_turns(net, rng)
    (start, end), = _trips(net, oracle, rng, 1)
    out = trip_checks(net, oracle, e_det, start=start, end=end, turns=turns, noise_std=0.0)
    assert out["optimum_status"] == "optimal" and out["optimum_method"] == "dijkstra on reduced costs"
    assert out["optimum_wh"] == pytest.approx(_networkx_optimum(net, e_det, turns, start, end), abs=1e-6)
    assert out["potential_wh"] == pytest.approx(out["optimum_wh"], abs=1e-6)
    for key in ("rectified_wh", "fastest_wh", "shortest_wh"):
        assert out[key] >= out["optimum_wh"] - 1e-6
    length = net.edges.length_m.to_numpy()
    assert out["shortest_wh"] == pytest.approx(route_energy(oracle, e_det, oracle.shortest_path(length, start, end).edges,
                                                            turns=turns))


# ----------------------------------------------------------------------------- the atlas's turns


def _row(vehicle, edge, nxt, kin_in, kin_out, edge_wh=10.0, v_top=10.0, enter=0.0, junction=np.nan):
    return {"vehicle": vehicle, "edge": edge, "enter_s": enter, "seconds": 5.0, "energy_wh": edge_wh + kin_in + kin_out,
            "edge_wh": edge_wh, "kin_in_wh": kin_in, "kin_out_wh": kin_out, "v_in": 0.0, "v_top": v_top, "v_out": 0.0,
            "next_edge": nxt, "junction_wh": junction}


def _line():
    """Edges a=0 → b=1 → c=2 and a side road 3 into b: what truth_turns reads of a network."""
    from types import SimpleNamespace

    return SimpleNamespace(n_edges=4, conn_src=np.array([0, 1, 3]), conn_dst=np.array([1, 2, 1]),
                           edges=pd.DataFrame({"speed_mps": np.full(4, 13.89)}))


def test_a_truths_turn_is_the_change_of_kinetic_level_plus_the_cars_mean_dissipation():
    """Three cars a → b → c: a turn costs ψ(b) − ψ(a) (each edge's cars' mean ½ (m + m_rot) v_top²)
    plus the mean over the cars that took it of kin_out + junction + kin_in − their own change of
    kinetic energy; the side road's turn nobody took dissipates what the speed change between the
    two edges' typical speeds does; each drive's bookings sum to its measured energy."""
    net = _line()
    v = Vehicle()
    a, b, c, side = 0, 1, 2, 3
    rows = []
    for k, (out_a, junction, in_b, top_a) in enumerate([(-3.0, 0.5, 5.0, 12.0), (-1.0, 0.2, 7.0, 11.0),
                                                        (-2.0, 0.3, 6.0, 13.0)]):
        rows += [_row(f"car{k}", a, b, 1.0, out_a, v_top=top_a, junction=junction),
                 _row(f"car{k}", b, c, in_b, -0.5, v_top=8.0, junction=0.0),
                 _row(f"car{k}", c, -1, 0.0, 0.0, v_top=8.0)]
    rows += [_row(f"side{k}", side, -1, 0.0, 0.0, v_top=4.0) for k in range(3)]
    table = pd.DataFrame(rows)[list(ATLAS_COLUMNS)]
    turns, samples, offsets = truth_turns(table, net, v, min_traversals=3)
    arc = {(int(s), int(d)): i for i, (s, d) in enumerate(zip(turns.conn_src, turns.conn_dst, strict=True))}
    ke = kinetic_energy_wh
    psi_a = np.mean([ke(12.0, v), ke(11.0, v), ke(13.0, v)])
    assert turns.potential[a] == pytest.approx(psi_a) and turns.potential[b] == pytest.approx(ke(8.0, v))
    d_ab = [-3 + 0.5 + 5 - (ke(8.0, v) - ke(12.0, v)), -1 + 0.2 + 7 - (ke(8.0, v) - ke(11.0, v)),
            -2 + 0.3 + 6 - (ke(8.0, v) - ke(13.0, v))]
    assert turns.dissipation[arc[(a, b)]] == pytest.approx(np.mean(d_ab))
    assert turns.costs[arc[(a, b)]] == pytest.approx(ke(8.0, v) - psi_a + np.mean(d_ab))
    assert turns.dissipation[arc[(b, c)]] == pytest.approx(-0.5)
    assert turns.dissipation[arc[(side, b)]] == pytest.approx(float(speed_change_loss_wh(4.0, 8.0, v)))
    assert turns.counts.tolist() == [3, 3, 0]
    np.testing.assert_allclose(np.sort(samples[offsets[arc[(a, b)]]:offsets[arc[(a, b)]] + 3]), np.sort(d_ab))
    cars = junction_dissipation(table, net, v)
    assert len(cars) == 6 and set(cars.arc) == {arc[(a, b)], arc[(b, c)]}
    # a drive's bookings sum to what it measured: edges, the junctions (internal lanes included), its ends
    for k in range(3):
        car = table[table.vehicle == f"car{k}"]
        measured = car.energy_wh.sum() + np.nansum(car.junction_wh.iloc[:-1])
        booked = car.edge_wh.sum() + cars[cars.vehicle == f"car{k}"].dissipation_wh.sum() \
            + ke(car.v_top.iloc[-1], v) - ke(car.v_top.iloc[0], v) + car.kin_in_wh.iloc[0] + car.kin_out_wh.iloc[-1]
        assert booked == pytest.approx(measured, rel=1e-12)
    # a drive's prediction: edges, the turns between, its ends' kinetic means
    mean = np.full(net.n_edges, 10.0)
    counts = np.bincount(table.edge, minlength=net.n_edges)
    kin_in = np.bincount(table.edge, weights=table.kin_in_wh, minlength=net.n_edges) / np.maximum(counts, 1)
    kin_out = np.bincount(table.edge, weights=table.kin_out_wh, minlength=net.n_edges) / np.maximum(counts, 1)
    drives = drive_predictions(table, mean, turns, kin_in=kin_in, kin_out=kin_out)
    assert len(drives) == 3 and (drives.edges == 3).all()
    expected = 30.0 + 1.0 + turns.costs[arc[(a, b)]] + turns.costs[arc[(b, c)]] + 0.0
    np.testing.assert_allclose(drives.predicted_wh, expected)
    cars_rows = table[table.vehicle.str.startswith("car")]
    assert drives.measured_wh.sum() == pytest.approx(cars_rows.energy_wh.sum() + 0.5 + 0.2 + 0.3)
