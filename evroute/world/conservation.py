"""Does a truth conserve energy? Checks of per-edge (and per-turn) expected energies against
physics, and of what the route oracle makes of them.

A truth of expected energies is physical when

- no edge's energy falls below its physical floor (:func:`evroute.physics.energy.energy_floor_wh`: the
  potential energy and rolling resistance, which no driving avoids);
- no cycle of the network has negative total energy (a car driving it would come back with more
  charge than it left with: energy created);
- no turn dissipates a negative energy (:class:`evroute.bandit.environments.Turns`: a turn's cost
  less its change of kinetic level).

Booking a traversal's whole measured energy on its edge breaks the first two: a car that
brakes for a light at the end of an edge recovers its kinetic energy there, although it paid
for it on the edge before. Booking it per car at the junction instead, as a change of kinetic
level plus a dissipation (:mod:`evroute.world.junctions`), keeps all three by construction.

:func:`truth_checks` measures the three, :func:`trip_checks` compares, on one trip, the exact
optimum (:func:`evroute.roads.walks.least_energy_walk`, turns included) with the routes of the weight
rules handed the truth (:func:`evroute.bandit.policies.route_weights`) and the fastest and shortest.
"""

from __future__ import annotations

import numpy as np

from ..bandit.policies import route_weights
from ..bandit.truths import Turns
from ..errors import EvrouteError
from ..physics.energy import Vehicle, energy_floor_wh
from ..roads.optimum import exact_optimum
from ..roads.walks import least_energy_walk, negative_cycle
from ..settings import WEIGHT_RULES

__all__ = ["truth_checks", "trip_checks", "route_energy"]


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


def truth_checks(net, values, turns: Turns | None = None, *, covered=None, vehicle: Vehicle | None = None) -> dict:
    """Physical checks of a truth: the floor, negative cycles, the turns' dissipation.

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
        ``turn_violations`` and ``turn_violation_wh`` (turns whose dissipation is negative, and
        the sum of those; 0 without turns).
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
            arc_of = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(np.asarray(net.conn_src).tolist(),
                                                                         np.asarray(net.conn_dst).tolist(), strict=True))}
            cycle_energy += sum(float(turns.costs[arc_of[(int(a), int(b))]])
                                for a, b in zip(closed[:-1], closed[1:], strict=True))
    n_bad, bad_wh = turns.violations() if turns is not None else (0, 0.0)
    return {"edges_checked": n, "below_floor_share": below, "negative_cycle": cycle is not None,
            "cycle_edges": None if cycle is None else len(cycle), "cycle_energy_wh": cycle_energy,
            "turn_violations": n_bad, "turn_violation_wh": bad_wh}


def trip_checks(net, oracle, values, *, start: int, end: int, turns: Turns | None = None, noise_std: float = 0.0,
                vehicle: Vehicle | None = None, time_limit: float = 60.0) -> dict:
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
        Seconds for the exact optimum where the truth creates energy (a MILP over vertex-simple
        routes).

    Returns
    -------
    dict
        ``optimum_wh``, ``optimum_status`` (``optimal`` or ``time_limit``), ``optimum_method``
        (``dijkstra on reduced costs`` where no cycle creates energy: the least-energy walk the
        oracle can drive; else :func:`evroute.roads.optimum.exact_optimum`'s); for each weight rule
        ``<rule>_wh`` (the route it picks handed the truth, its energy under the truth, turns
        included) and for ``fastest`` and ``shortest`` ``<name>_wh``.
    """
    f = np.asarray(values, dtype=np.float64)
    e = net.edges
    floor, potential = energy_floor_wh(e.length_m.to_numpy(), e.grade.to_numpy(), vehicle)
    try:
        path, _ = least_energy_walk(oracle, f, start=start, end=end, potential=potential,
                                    turn_weights=None if turns is None else turns.dissipation)
        out = {"optimum_wh": route_energy(oracle, f, path, turns=turns), "optimum_status": "optimal",
               "optimum_method": "dijkstra on reduced costs"}
    except EvrouteError:  # the truth creates energy: the best vertex-simple route
        res = exact_optimum(net.n_edges, net.conn_src, net.conn_dst, edge_u=e.u.to_numpy(), edge_v=e.v.to_numpy(),
                            weights=f, start=start, end=end, time_limit=time_limit, ends="auto",
                            turn_weights=None if turns is None else turns.costs)
        out = {"optimum_wh": float(res.energy) if res.path else None, "optimum_status": res.status,
               "optimum_method": res.method}
    d = None if turns is None else turns.dissipation
    for rule in WEIGHT_RULES:
        w, arc = route_weights(f, rule, noise_std, floor=floor, potential=potential, turns=d)
        path = oracle.shortest_path(w, start, end, turn_weights=arc).edges
        out[f"{rule}_wh"] = route_energy(oracle, f, path, turns=turns)
    length = e.length_m.to_numpy()
    for name, w in (("fastest", length / e.speed_mps.to_numpy()), ("shortest", length)):
        out[f"{name}_wh"] = route_energy(oracle, f, oracle.shortest_path(w, start, end).edges, turns=turns)
    return out
