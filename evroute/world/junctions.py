"""The energy of the junctions: what a car pays where it turns from one edge into the next.

A truth of edges plus turns (the "energy conserved" bookkeeping) books each traversal's kinetic
energy at the junctions: braking into one (``kin_out`` of the edge before) and accelerating out
of it (``kin_in`` of the edge after). Here: the kinetic potential ψ of an edge
(:func:`kinetic_potential_wh`), over which no single car's turn goes below ψ_next − ψ_prev; the
battery's energy of a speed change (:func:`speed_change_wh`); and the turns' costs that
traversals measured, an energy atlas's or a fleet's drives (:func:`measured_turns`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..bandit.environments import Turns
from ..physics.energy import ROTATING_MASS_KG, Vehicle

__all__ = ["kinetic_potential_wh", "speed_change_wh", "measured_turns", "speed_change_turns", "MIN_TURN_CARS"]

#: The cars a turn of a fleet's drives needs before its measured cost is trusted over the speed
#: change (a turn's cost varies by about 21 Wh from car to car on Monaco; see
#: :func:`evroute.world.drives.drives_route`).
MIN_TURN_CARS = 10


def kinetic_potential_wh(v_top: np.ndarray, vehicle: Vehicle | None = None) -> np.ndarray:
    """η⁻ ½ (m + m_rot) v² per edge (Wh) at its typical top speed v: the energy a car recovers
    braking from it to a stop, at best. Between two edges' potentials a junction's cost telescopes: braking
    from v₁ to v_j recovers at most η⁻ of the drop, accelerating to v₂ costs at least the rise, so
    cost(1 → 2) ≥ ψ₂ − ψ₁ wherever 1/η⁺ ≥ η⁻."""
    vehicle = vehicle or Vehicle()
    return vehicle.eta_minus * 0.5 * (vehicle.mass_kg + ROTATING_MASS_KG) * np.asarray(v_top, dtype=np.float64) ** 2 / 3600.0


def measured_turns(table: pd.DataFrame, net, vehicle: Vehicle | None = None, *, min_traversals: int = 3,
                   measured_by: Vehicle | None = None) -> Turns:
    """The junctions' costs measured by traversals: an atlas's (:data:`evroute.world.sumo.ATLAS_COLUMNS`) or a
    fleet's drives (:data:`evroute.world.drives.TRAVERSAL_COLUMNS`), each car's rows in time order.

    The kinetic potential ψ of an edge is η⁻ ½ (m + m_rot) E[v_top²] over its traversals (its
    speed limit's where it has fewer than ``min_traversals``): :func:`kinetic_potential_wh`. A
    legal turn e → e′ costs the mean over the cars that took it of ``kin_out`` on e plus
    ``kin_in`` on e′ (braking into the junction, accelerating out of it); with fewer than
    ``min_traversals`` such cars, a car that goes from e's typical speed to e′'s without stopping
    (:func:`speed_change_wh` of the two edges' root mean square top speeds): the cost of a turn
    depends on the speed it is entered with, which the edges' marginal means of ``kin_in`` (cars
    from other edges) do not know (they made cycles of turns that create energy).

    Measured costs are kept as measured: a mean over some cars may fall below ψ(e′) − ψ(e), over
    which no single car can go (it cannot recover more than η⁻ of its kinetic energy, nor pay
    less than its rise), because the cars that take a turn are not those that set the edges'
    ψ; :meth:`Turns.violations` counts them (raising them to the bound made the truth
    predict SUMO's drives worse: median error 9.1 % → 11.3 %, bias +2.7 % → +8.5 %, on the
    synthetic city's test atlas), and :func:`evroute.world.conservation.truth_checks` checks that
    no cycle of edges and turns creates energy all the same.

    Traversals of another vehicle (``measured_by``, e.g. a fleet of cars for a van) lend what they
    measured beyond their own physics, as the edges' residuals do (``--fleet-vehicle``): a turn
    costs this vehicle's speed change S plus ρ (mean − S′), S′ the measuring vehicle's speed change
    at the same speeds and ρ the least-squares ratio of S to S′ over the measured turns (the two
    vehicles' kinetic masses and efficiencies).

    Parameters
    ----------
    table : pandas.DataFrame
        Traversals with ``edge``, ``next_edge`` (−1 where the next traversal is not complete),
        ``vehicle``, ``kin_in_wh``, ``kin_out_wh`` and ``v_top``.
    net : evroute.roads.network.Network
    vehicle : Vehicle, optional
        For the kinetic potential and the speed changes (default the paper's EV).
    min_traversals : int
        The cars a turn needs for its measured mean (and an edge for its measured top speed).
    measured_by : Vehicle, optional
        The vehicle that drove ``table`` where it is not ``vehicle`` (default: ``vehicle``).

    Returns
    -------
    Turns
        One cost per legal turn of ``net``, the edges' kinetic potential.
    """
    vehicle = vehicle or Vehicle()
    n = net.n_edges
    src, dst = np.asarray(net.conn_src, np.int64), np.asarray(net.conn_dst, np.int64)
    arc_of = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(src.tolist(), dst.tolist(), strict=True))}
    t = table.reset_index(drop=True)
    e, nxt, car = t.edge.to_numpy(), t.next_edge.to_numpy(), t.vehicle.to_numpy()
    k = np.flatnonzero(nxt[:-1] >= 0) if len(t) > 1 else np.zeros(0, np.int64)
    k = k[(nxt[k] == e[k + 1]) & (car[k] == car[k + 1])]  # rows are per car, in time order
    arcs = np.array([arc_of.get((int(a), int(b)), -1) for a, b in zip(e[k], e[k + 1], strict=True)], dtype=np.int64)
    cost = (t.kin_out_wh.to_numpy()[k] + t.kin_in_wh.to_numpy()[k + 1])[arcs >= 0]
    arcs = arcs[arcs >= 0]
    n_arc = np.bincount(arcs, minlength=src.size)
    mean_arc = np.bincount(arcs, weights=cost, minlength=src.size) / np.maximum(n_arc, 1)
    counts = np.bincount(e, minlength=n)
    v2 = np.bincount(e, weights=t.v_top.to_numpy() ** 2, minlength=n) / np.maximum(counts, 1)
    v_rms = np.sqrt(np.where(counts >= min_traversals, v2, net.edges.speed_mps.to_numpy() ** 2))
    psi = kinetic_potential_wh(v_rms, vehicle)
    dev = cost - mean_arc[arcs]  # the cars' spread within turns, pooled where two or more took one
    dof = int((n_arc[n_arc > 1] - 1).sum())
    noise = float(np.sqrt(dev @ dev / dof)) if dof > 0 else None
    model = speed_change_wh(v_rms[src], v_rms[dst], vehicle)
    measured = n_arc >= min_traversals
    if measured_by is not None and measured_by != vehicle:  # another vehicle's: its residuals, scaled
        theirs = speed_change_wh(v_rms[src], v_rms[dst], measured_by)[measured]
        denom = float(theirs @ theirs)
        rho = float(theirs @ model[measured]) / denom if denom > 0 else 1.0
        mean_arc = mean_arc.copy()
        mean_arc[measured] = model[measured] + rho * (mean_arc[measured] - theirs)
    costs = np.where(measured, mean_arc, model)
    return Turns(costs, psi, src, dst, noise_std=noise, counts=np.where(measured, n_arc, 0))


def speed_change_wh(v_from, v_to, vehicle: Vehicle | None = None) -> np.ndarray:
    """The battery's energy for a car to change speed from ``v_from`` to ``v_to`` (m/s) without
    stopping: ½ (m + m_rot)(v_to² − v_from²) over η⁺ when it speeds up, times η⁻ when it brakes
    (Wh)."""
    vehicle = vehicle or Vehicle()
    dke = 0.5 * (vehicle.mass_kg + ROTATING_MASS_KG) * (np.asarray(v_to, np.float64) ** 2
                                                         - np.asarray(v_from, np.float64) ** 2) / 3600.0
    return np.where(dke > 0, dke / vehicle.eta_plus, dke * vehicle.eta_minus)


def speed_change_turns(net, vehicle: Vehicle | None = None) -> Turns:
    """The junctions' costs without drives: each legal turn the speed change between its two roads'
    speed limits (:func:`speed_change_wh`), the edges' kinetic potential at them; what
    :func:`measured_turns` gives where no car drove."""
    src, dst = np.asarray(net.conn_src, np.int64), np.asarray(net.conn_dst, np.int64)
    v = net.edges.speed_mps.to_numpy(np.float64)
    return Turns(speed_change_wh(v[src], v[dst], vehicle), kinetic_potential_wh(v, vehicle), src, dst)
