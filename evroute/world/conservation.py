"""Does a truth conserve energy? Checks of per-edge (and per-turn) expected energies against
physics, and of what the route oracle makes of them.

A truth of expected energies is physical when

- no edge's energy falls below its physical floor (:func:`evroute.physics.energy.energy_floor_wh`: the
  potential energy and rolling resistance, which no driving avoids);
- no cycle of the network has negative total energy (a car driving it would come back with more
  charge than it left with: energy created);
- the kinetic part of its junction costs telescopes (:class:`evroute.bandit.environments.Turns`: a
  turn's cost minus the rise of the kinetic potential is not negative).

Booking a traversal's whole measured energy on its edge breaks the first two: a car that
brakes for a light at the end of an edge recovers its kinetic energy there, although it paid
for it on the edge before. Booking it at the junction instead (edges plus turns) keeps them
(:func:`evroute.world.sumo.traversals`, the kinetic split).

:func:`truth_checks` measures the three, :func:`trip_checks` compares, on one trip, the exact
optimum (:func:`evroute.roads.optimum.exact_optimum`, turns included) with the routes of the weight
rules handed the truth (:func:`evroute.bandit.policies.route_weights`) and the fastest and shortest.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..bandit.environments import Turns
from ..bandit.policies import route_weights, turn_potential
from ..physics.energy import Vehicle, energy_floor_wh
from ..roads.optimum import exact_optimum, is_vertex_simple
from ..roads.walks import break_negative_cycles, negative_cycle
from ..settings import WEIGHT_RULES

__all__ = ["truth_checks", "trip_checks", "route_energy", "conserve_energy"]


def route_energy(oracle, values, path, *, turns: Turns | None = None) -> float:
    """The energy of driving ``path``: ``values`` over its edges plus ``turns``' costs where it
    turns (Wh).

    Parameters
    ----------
    oracle : evroute.roads.oracle.Oracle
        The network's oracle (it knows which connection each turn is).
    values : array (E,)
        Expected energy per edge.
    path : sequence of int
        The route's edges in driving order.
    turns : Turns, optional
        The junctions' energies.

    Returns
    -------
    float
    """
    p = np.asarray(path, dtype=np.int64)
    energy = float(np.asarray(values, dtype=np.float64)[p].sum())
    if turns is not None:
        energy += float(turns.costs[oracle.turn_index(p)].sum())
    return energy


def conserve_energy(net, values, turns: Turns, *, covered=None, vehicle: Vehicle | None = None):
    """Make a truth of edges plus turns create no energy, raising as little as it takes.

    Measured means can make a cycle of negative energy although no single car could drive one:
    a turn's mean over the few cars that took it beside the typical speeds of the roads it joins
    (:func:`evroute.world.junctions.measured_turns`), an edge's mean below its physical floor. Each such cycle
    is broken by :func:`evroute.roads.walks.break_negative_cycles`, which raises first the turns on
    it that lie below their kinetic bound (ψ_next − ψ_prev) and the measured edges below their
    floor (:func:`evroute.physics.energy.energy_floor_wh`), in proportion to how far below they are.
    Everything off such cycles is kept as measured.

    Parameters
    ----------
    net : evroute.roads.network.Network
    values : array (E,)
        Expected energy per edge (Wh).
    turns : Turns
    covered : array of bool (E,), optional
        The measured edges (the others' values come from a model and are not raised first).
    vehicle : Vehicle, optional

    Returns
    -------
    (numpy.ndarray, Turns, int, float)
        The values, the turns, the number of cycles broken and the energy added to them (Wh).
    """
    f = np.asarray(values, dtype=np.float64)
    e = net.edges
    floor, _ = energy_floor_wh(e.length_m.to_numpy(), e.grade.to_numpy(), vehicle)
    measured = np.ones(f.size, dtype=bool) if covered is None else np.asarray(covered, dtype=bool)
    bound = turns.bound
    f2, costs, n, added = break_negative_cycles(f.size, turns.conn_src, turns.conn_dst, weights=f, turn_weights=turns.costs,
                                                weight_room=np.where(measured, floor - f, 0.0), turn_room=bound - turns.costs)
    return f2, replace(turns, costs=costs), n, added


def truth_checks(net, values, turns: Turns | None = None, *, covered=None, vehicle: Vehicle | None = None) -> dict:
    """Physical checks of a truth: the floor, negative cycles, the turns' potential.

    Parameters
    ----------
    net : evroute.roads.network.Network
    values : array (E,)
        The truth's expected energy per edge (Wh).
    turns : Turns, optional
        Its junctions' energies (a truth of edges plus turns).
    covered : array of bool (E,), optional
        The edges the truth measured (the rest fall back on a model); the floor is checked on
        these. Default all.
    vehicle : Vehicle, optional
        For the floor (default the paper's EV).

    Returns
    -------
    dict
        ``edges_checked``; ``below_floor_share`` (of the checked edges; 1e-6 Wh of slack);
        ``negative_cycle`` (bool), ``cycle_edges`` and ``cycle_energy_wh`` (None without one);
        ``turn_violations`` and ``turn_violation_wh`` (turns whose cost minus the rise of the
        kinetic potential is negative, and the sum of those; 0 without turns).
    """
    f = np.asarray(values, dtype=np.float64)
    e = net.edges
    floor, _ = energy_floor_wh(e.length_m.to_numpy(), e.grade.to_numpy(), vehicle)
    ok = np.ones(f.size, dtype=bool) if covered is None else np.asarray(covered, dtype=bool)
    n = int(ok.sum())
    below = float((f[ok] < floor[ok] - 1e-6).mean()) if n else float("nan")
    costs = None if turns is None else turns.costs
    cycle = negative_cycle(net.n_edges, net.conn_src, net.conn_dst, weights=f, turn_weights=costs)
    cycle_energy = None
    if cycle is not None:
        closed = np.asarray(cycle + cycle[:1], dtype=np.int64)
        cycle_energy = float(f[cycle].sum())
        if turns is not None:
            oracle_free = _turn_lookup(net, turns)
            cycle_energy += sum(oracle_free[(int(a), int(b))] for a, b in zip(closed[:-1], closed[1:], strict=True))
    n_bad, bad_wh = turns.violations() if turns is not None else (0, 0.0)
    return {"edges_checked": n, "below_floor_share": below, "negative_cycle": cycle is not None,
            "cycle_edges": None if cycle is None else len(cycle), "cycle_energy_wh": cycle_energy,
            "turn_violations": n_bad, "turn_violation_wh": bad_wh}


def _turn_lookup(net, turns: Turns) -> dict:
    return {(int(a), int(b)): float(c) for a, b, c in zip(np.asarray(net.conn_src).tolist(),
                                                          np.asarray(net.conn_dst).tolist(), turns.costs.tolist(),
                                                          strict=True)}


def trip_checks(net, oracle, values, *, start: int, end: int, turns: Turns | None = None, noise_std: float = 0.0,
                vehicle: Vehicle | None = None, time_limit: float = 60.0, prior_mean=None) -> dict:
    """One trip under a truth: the exact optimum against the routes a driver or an agent would
    take knowing the truth.

    Parameters
    ----------
    net : evroute.roads.network.Network
    oracle : evroute.roads.oracle.Oracle
    values : array (E,)
        Expected energy per edge (Wh).
    start, end : int
        The trip's first and last edge.
    turns : Turns, optional
        The junctions' energies.
    noise_std : float
        ς of the rectified rule (paper 003, Algorithm 2 line 3).
    vehicle : Vehicle, optional
        For the potential rule's floor and potential.
    time_limit : float
        Seconds for the exact optimum (a MILP where the truth has negative cycles).
    prior_mean : array (E,), optional
        The agents' prior mean, for the potential rule with turns (:func:`evroute.bandit.policies.turn_potential`).

    Returns
    -------
    dict
        ``optimum_wh``, ``optimum_status`` (``optimal`` or ``time_limit``), ``optimum_method``
        (with turns, the best walk where no cycle creates energy: the route the oracle can
        drive; :func:`evroute.roads.optimum.exact_optimum` with ``walks``), ``simple_optimum_wh`` and
        its status (the best vertex-simple route, paper 003 Eq. 1); for each weight rule ``<rule>_wh`` (the route it picks handed the truth; its energy under
        the truth, turns included) and for ``fastest`` and ``shortest`` ``<name>_wh``.
    """
    f = np.asarray(values, dtype=np.float64)
    e = net.edges
    floor, potential = energy_floor_wh(e.length_m.to_numpy(), e.grade.to_numpy(), vehicle)
    graph = (net.n_edges, net.conn_src, net.conn_dst)
    trip = {"edge_u": e.u.to_numpy(), "edge_v": e.v.to_numpy(), "weights": f, "start": start, "end": end}
    arcs = None if turns is None else turns.costs
    res = exact_optimum(*graph, **trip, time_limit=time_limit, ends="auto", turn_weights=arcs, walks=turns is not None)
    simple = exact_optimum(*graph, **trip, time_limit=time_limit, ends="auto", turn_weights=arcs) \
        if res.path and not is_vertex_simple(res.path, e.u.to_numpy(), e.v.to_numpy(), ends=res.ends) else res
    out = {"optimum_wh": float(res.energy) if res.path else None, "optimum_status": res.status,
           "optimum_method": res.method,
           "simple_optimum_wh": float(simple.energy) if simple.path else None, "simple_optimum_status": simple.status}
    h = None if turns is None else turn_potential(floor, turns, lift_to=prior_mean)
    for rule in WEIGHT_RULES:
        w, arc = route_weights(f, rule, noise_std, floor=floor, potential=potential, turns=turns, turn_potential=h)
        path = oracle.shortest_path(w, start, end, turn_weights=arc).edges
        out[f"{rule}_wh"] = route_energy(oracle, f, path, turns=turns)
    length = e.length_m.to_numpy()
    for name, w in (("fastest", length / e.speed_mps.to_numpy()), ("shortest", length)):
        out[f"{name}_wh"] = route_energy(oracle, f, oracle.shortest_path(w, start, end).edges, turns=turns)
    return out
