"""Energy conserved: the checks of a truth (evroute.world.conservation), the weight rule that keeps
regeneration (evroute.bandit.policies.route_weights, turn_potential) against the exact optimum, and
the kinetic bookkeeping of a truth of edges plus turns (evroute.world.junctions.measured_turns,
drive_predictions) on hand-built traversals."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evroute.bandit.environments import Turns
from evroute.bandit.policies import route_weights, turn_potential
from evroute.physics.energy import Vehicle, energy_floor_wh
from evroute.physics.routes import edge_energies
from evroute.roads.network import load_network
from evroute.roads.optimum import exact_optimum, is_vertex_simple
from evroute.roads.oracle import Oracle
from evroute.world.conservation import route_energy, trip_checks, truth_checks
from evroute.world.junctions import kinetic_potential_wh, measured_turns, speed_change_wh
from evroute.world.sumo import ATLAS_COLUMNS, drive_predictions


@pytest.fixture(scope="module")
def city():
    net = load_network("synthetic", size=150)
    return net, Oracle.from_network(net), edge_energies(net)


def _physical_turns(net, rng, stop_share=0.3):
    """Turn costs as one car would pay them: from a typical speed on e to one on e′, braking to
    a stop first at some junctions (what SUMO's kinetic split books there)."""
    src, dst = np.asarray(net.conn_src), np.asarray(net.conn_dst)
    v = rng.uniform(6.0, 20.0, net.n_edges)
    stop = rng.random(src.size) < stop_share
    costs = np.where(stop, speed_change_wh(v[src], 0.0) + speed_change_wh(0.0, v[dst]),
                     speed_change_wh(v[src], v[dst]))
    return Turns(costs, kinetic_potential_wh(v), src, dst)


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


def test_physical_truths_pass_the_checks(city):
    """E_det (Eq. 8, grades from node elevations) and E_det plus turns a car could pay: nothing
    below the floor, no cycle creates energy, no turn below the kinetic bound."""
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
    floor check flags the edges."""
    net, oracle, e_det = city
    import networkx as nx

    g = nx.DiGraph(zip(np.asarray(net.conn_src).tolist(), np.asarray(net.conn_dst).tolist(), strict=True))
    loop = min(nx.simple_cycles(g, length_bound=6), key=len)
    f = e_det.copy()
    f[loop] = -50.0
    checks = truth_checks(net, f, covered=np.isin(np.arange(net.n_edges), loop))
    assert checks["negative_cycle"] and checks["cycle_energy_wh"] < 0 and checks["below_floor_share"] == 1.0
    assert checks["cycle_edges"] >= 2


def test_the_potential_rule_finds_the_exact_optimum_where_rectified_does_not(city):
    """Handed the truth (E_det with its descents, plus physical turn costs of either sign), the
    potential rule's Dijkstra route has the exact optimum's energy (the MILP/Bellman–Ford of
    evroute.roads.optimum, turns included) on every trip; the rectified rule, which rounds the
    recovered energy up to 0, is worse on some trips and never better."""
    net, oracle, e_det = city
    rng = np.random.default_rng(1)
    turns = _physical_turns(net, rng)
    floor, potential = energy_floor_wh(net.edges.length_m.to_numpy(), net.edges.grade.to_numpy())
    h = turn_potential(floor, turns)
    worse = walks = 0
    for start, end in _trips(net, oracle, rng, 25):
        opt = exact_optimum(net.n_edges, net.conn_src, net.conn_dst, edge_u=net.edges.u.to_numpy(), edge_v=net.edges.v.to_numpy(),
                            weights=e_det, start=start, end=end, ends="auto", turn_weights=turns.costs, method="milp")
        w, arc = route_weights(e_det, "potential", 1.0, floor=floor, potential=potential, turns=turns, turn_potential=h)
        assert w.min() >= 0 and arc.min() >= 0
        path = oracle.shortest_path(w, start, end, turn_weights=arc).edges
        walk_ok = is_vertex_simple(path, net.edges.u.to_numpy(), net.edges.v.to_numpy(), ends=opt.ends)
        got = route_energy(oracle, e_det, path, turns=turns)
        if walk_ok:
            assert got == pytest.approx(opt.energy, abs=1e-6), (start, end)
        else:
            assert got <= opt.energy + 1e-6  # a walk that passes a node twice may beat every simple route
            walks += 1
        w, arc = route_weights(e_det, "rectified", 1e-6, turns=turns)
        rect = route_energy(oracle, e_det, oracle.shortest_path(w, start, end, turn_weights=arc).edges, turns=turns)
        assert rect >= got - 1e-6
        worse += rect > got + 1e-3
    assert worse >= 3 and walks <= 5


def test_trip_checks_agree_with_the_pieces(city):
    net, oracle, e_det = city
    rng = np.random.default_rng(2)
    turns = _physical_turns(net, rng)
    (start, end), = _trips(net, oracle, rng, 1)
    out = trip_checks(net, oracle, e_det, start=start, end=end, turns=turns, noise_std=0.0)
    assert out["optimum_status"] == "optimal" and out["potential_wh"] == pytest.approx(out["optimum_wh"], abs=1e-6)
    for key in ("rectified_wh", "fastest_wh", "shortest_wh"):
        assert out[key] >= out["optimum_wh"] - 1e-6
    length = net.edges.length_m.to_numpy()
    assert out["shortest_wh"] == pytest.approx(route_energy(oracle, e_det, oracle.shortest_path(length, start, end).edges,
                                                            turns=turns))


def test_turn_potential_without_a_feasible_one_warns_and_raises_the_turns(city):
    """Turn costs that make energy around a loop even over the floors: a warning, and weights
    that are still non-negative."""
    from evroute.errors import EvrouteWarning

    net, _, _ = city
    floor, _ = energy_floor_wh(net.edges.length_m.to_numpy(), net.edges.grade.to_numpy())
    src, dst = np.asarray(net.conn_src), np.asarray(net.conn_dst)
    turns = Turns(np.full(src.size, -100.0), np.zeros(net.n_edges), src, dst)
    with pytest.warns(EvrouteWarning, match="create energy"):
        h = turn_potential(floor, turns)
    assert h.cycles > 0 and (h.costs >= turns.costs).all() and (h.floor == floor).all()
    _, arc = route_weights(floor, "potential", 1.0, floor=floor, potential=np.zeros(net.n_edges), turns=turns, turn_potential=h)
    assert arc.min() >= 0
    # lifting the floors toward a prior mean first: the cycles' edges take the deficit before their turns
    with pytest.warns(EvrouteWarning, match="lift"):
        lifted = turn_potential(floor, turns, lift_to=floor + 1000.0)
    assert (lifted.floor >= floor).all() and (lifted.floor > floor).any()
    assert (lifted.costs - turns.costs).sum() < (h.costs - turns.costs).sum()


# ----------------------------------------------------------------------------- the atlas's turns


def _row(vehicle, edge, nxt, kin_in, kin_out, edge_wh=10.0, v_top=10.0, enter=0.0):
    return {"vehicle": vehicle, "edge": edge, "enter_s": enter, "seconds": 5.0, "energy_wh": edge_wh + kin_in + kin_out,
            "edge_wh": edge_wh, "kin_in_wh": kin_in, "kin_out_wh": kin_out, "v_in": 0.0, "v_top": v_top, "v_out": 0.0,
            "next_edge": nxt}


def _line():
    """Edges a=0 → b=1 → c=2 and a side road 3 into b: what measured_turns reads of a network."""
    from types import SimpleNamespace

    return SimpleNamespace(n_edges=4, conn_src=np.array([0, 1, 3]), conn_dst=np.array([1, 2, 1]),
                           edges=pd.DataFrame({"speed_mps": np.full(4, 13.89)}))


def test_measured_turns_average_the_cars_that_turned_and_fall_back_on_a_speed_change():
    net = _line()
    a, b, c, side = 0, 1, 2, 3
    rows = []
    for k, (out_a, in_b) in enumerate([(-3.0, 5.0), (-1.0, 7.0), (-2.0, 6.0)]):  # three cars a → b → c
        rows += [_row(f"car{k}", a, b, 1.0, out_a, v_top=12.0), _row(f"car{k}", b, c, in_b, -0.5, v_top=8.0),
                 _row(f"car{k}", c, -1, 0.0, 0.0, v_top=8.0)]
    rows += [_row(f"side{k}", side, -1, 0.0, 0.0, v_top=4.0) for k in range(3)]
    table = pd.DataFrame(rows)[list(ATLAS_COLUMNS)]
    turns = measured_turns(table, net, Vehicle(), min_traversals=3)
    arc = {(int(s), int(d)): i for i, (s, d) in enumerate(zip(turns.conn_src, turns.conn_dst, strict=True))}
    assert turns.costs[arc[(a, b)]] == pytest.approx(np.mean([-3 + 5, -1 + 7, -2 + 6]))
    assert turns.costs[arc[(b, c)]] == pytest.approx(-0.5)
    # the side road's turn was never taken: a car going from 4 m/s to b's 8 m/s without stopping
    assert turns.costs[arc[(side, b)]] == pytest.approx(float(speed_change_wh(4.0, 8.0, Vehicle())))
    assert turns.potential[a] == pytest.approx(float(kinetic_potential_wh(12.0, Vehicle())))
    # a drive's prediction: edges, the turns between, its ends' kinetic means
    mean = np.full(net.n_edges, 10.0)
    kin_in = np.bincount(table.edge, weights=table.kin_in_wh, minlength=net.n_edges) / np.maximum(
        np.bincount(table.edge, minlength=net.n_edges), 1)
    kin_out = np.bincount(table.edge, weights=table.kin_out_wh, minlength=net.n_edges) / np.maximum(
        np.bincount(table.edge, minlength=net.n_edges), 1)
    drives = drive_predictions(table, mean, turns, kin_in=kin_in, kin_out=kin_out)
    assert len(drives) == 3 and (drives.edges == 3).all()
    expected = 30.0 + 1.0 + turns.costs[arc[(a, b)]] + turns.costs[arc[(b, c)]] + 0.0
    np.testing.assert_allclose(drives.predicted_wh, expected)
    np.testing.assert_allclose(drives.measured_wh.sum(), table.energy_wh[table.vehicle.str.startswith("car")].sum())
    # booked on edges instead, the same drives' sum is the same in mean (the split moves, never makes)
    whole = drive_predictions(table, np.bincount(table.edge, weights=table.energy_wh, minlength=net.n_edges)
                              / np.maximum(np.bincount(table.edge, minlength=net.n_edges), 1), None)
    assert whole.predicted_wh.sum() == pytest.approx(drives.predicted_wh.sum())


def test_conserve_energy_breaks_every_cycle_and_touches_only_cycles(city):
    """Turn means below their kinetic bound on a loop make it return energy; conserve_energy
    raises the loop's costs by the deficit (the violating turn and the edge below its floor
    first) and nothing off the loops."""
    import networkx as nx

    net, _, e_det = city
    turns = _physical_turns(net, np.random.default_rng(3), stop_share=0.0)
    g = nx.DiGraph(zip(np.asarray(net.conn_src).tolist(), np.asarray(net.conn_dst).tolist(), strict=True))
    loop = min(nx.simple_cycles(g, length_bound=6), key=len)
    arc = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(turns.conn_src, turns.conn_dst, strict=True))}
    on_loop = [arc[(a, b)] for a, b in zip(loop, loop[1:] + loop[:1], strict=True)]
    costs = turns.costs.copy()
    costs[on_loop[0]] -= 1000.0  # a turn's mean far below what a car can pay
    bad = Turns(costs, turns.potential, turns.conn_src, turns.conn_dst)
    assert truth_checks(net, e_det, bad)["negative_cycle"]
    from evroute.world.conservation import conserve_energy

    f, fixed, n_cycles, added = conserve_energy(net, e_det, bad)
    assert n_cycles >= 1 and added > 0 and not truth_checks(net, f, fixed)["negative_cycle"]
    raised = np.flatnonzero(fixed.costs > bad.costs + 1e-12)
    assert on_loop[0] in raised and np.all(f >= e_det) and (fixed.costs >= bad.costs).all()
    assert added == pytest.approx((fixed.costs - bad.costs).sum() + (f - e_det).sum())
    assert fixed.costs[on_loop[0]] <= turns.costs[on_loop[0]] + 1e-9  # no higher than what a car could pay
