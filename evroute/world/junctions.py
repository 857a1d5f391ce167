"""The energy of the junctions: what a car pays where it turns from one edge into the next.

A truth of edges plus turns (the "energy conserved" bookkeeping) books each traversal's kinetic
energy at the junctions: braking into one (``kin_out`` of the edge before) and accelerating out
of it (``kin_in`` of the edge after). Here: the kinetic potential ψ of an edge
(:func:`kinetic_potential_wh`), over which no single car's turn goes below ψ_next − ψ_prev; the
battery's energy of a speed change (:func:`speed_change_wh`); and the turns' costs that
traversals measured, an energy atlas's or a fleet's drives (:func:`measured_turns`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import minimize_scalar

from ..bandit.environments import Turns
from ..errors import EvrouteError
from ..physics.energy import ROTATING_MASS_KG, Vehicle

__all__ = ["kinetic_potential_wh", "speed_change_wh", "measured_turns", "fleet_turns", "speed_change_turns",
           "MIN_TURN_CARS"]

#: The cars a turn of a fleet's drives needs before its measured cost is trusted over the speed
#: change (a turn's cost varies by about 21 Wh from car to car on Monaco; see
#: :func:`evroute.world.drives.drives_route`).
MIN_TURN_CARS = 10


@dataclass(frozen=True)
class _Driven:
    """What traversals measured of the turns: the cars per turn and their mean cost, the pooled
    spread of one car's cost within turns, the edges' rms top speed and kinetic potential, and
    each turn's speed change at those speeds."""

    n_arc: np.ndarray
    mean_arc: np.ndarray
    noise: float | None
    v_rms: np.ndarray
    psi: np.ndarray
    model: np.ndarray
    src: np.ndarray
    dst: np.ndarray


def _turns_driven(table: pd.DataFrame, net, vehicle: Vehicle, min_traversals: int) -> _Driven:
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
    dev = cost - mean_arc[arcs]  # the cars' spread within turns, pooled where two or more took one
    dof = int((n_arc[n_arc > 1] - 1).sum())
    noise = float(np.sqrt(dev @ dev / dof)) if dof > 0 else None
    return _Driven(n_arc, mean_arc, noise, v_rms, kinetic_potential_wh(v_rms, vehicle),
                   speed_change_wh(v_rms[src], v_rms[dst], vehicle), src, dst)


def _turn_ratio(seen: _Driven, measured_by: Vehicle, used: np.ndarray) -> tuple[float, np.ndarray]:
    """ρ, this vehicle's speed changes over ``measured_by``'s by least squares over the ``used``
    turns, and ``measured_by``'s speed change of every turn."""
    theirs = speed_change_wh(seen.v_rms[seen.src], seen.v_rms[seen.dst], measured_by)
    denom = float(theirs[used] @ theirs[used])
    return (float(theirs[used] @ seen.model[used]) / denom if denom > 0 else 1.0), theirs


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
    seen = _turns_driven(table, net, vehicle, min_traversals)
    n_arc, mean_arc, model = seen.n_arc, seen.mean_arc, seen.model
    measured = n_arc >= min_traversals
    if measured_by is not None and measured_by != vehicle:  # another vehicle's: its residuals, scaled
        rho, theirs = _turn_ratio(seen, measured_by, measured)
        mean_arc = mean_arc.copy()
        mean_arc[measured] = model[measured] + rho * (mean_arc[measured] - theirs[measured])
    costs = np.where(measured, mean_arc, model)
    return Turns(costs, seen.psi, seen.src, seen.dst, noise_std=seen.noise, counts=np.where(measured, n_arc, 0))


def fleet_turns(table: pd.DataFrame, net, vehicle: Vehicle | None = None, *,
                measured_by: Vehicle | None = None, min_traversals: int = MIN_TURN_CARS) -> Turns:
    """The fleet's per-turn posterior: every turn's cost estimated from all the cars that took
    it, each shrunk towards the speed change by as much as the fleet's turns say it should be (an
    empirical-Bayes hierarchical model, as the edges' conjugate update is a per-edge one).

    A turn j's mean cost μ_j is this vehicle's speed change S_j (:func:`speed_change_wh` of
    the two roads' rms top speeds) plus an offset b common to all turns (the stops the speed
    change ignores) plus N(0, τ²); its n_j cars' mean m_j (in this vehicle's units: S_j + ρ (m′_j −
    S′_j) for another vehicle's, as :func:`measured_turns` moves them) is μ_j plus N(0, ρ² s² / n_j),
    s the pooled spread of one car's cost within turns. b and τ² maximise the marginal likelihood
    of the driven turns' means, Π_j N(m_j − S_j; b, τ² + ρ² s² / n_j) (type II); each turn's
    posterior is then the conjugate one: precision 1/τ² + n_j / (ρ² s²), mean S_j + b + (the
    data's share of the precision) (m_j − S_j − b). A turn nobody took keeps S_j + b with
    variance τ²: how far the fleet's turns stray from the speed change, not one car's spread.

    Parameters
    ----------
    table : pandas.DataFrame
        A fleet's traversals (:data:`evroute.world.drives.TRAVERSAL_COLUMNS`), each car's rows in time order.
    net : evroute.roads.network.Network
    vehicle : Vehicle, optional
        This vehicle (default the paper's EV).
    measured_by : Vehicle, optional
        The vehicle that drove ``table`` where it is not ``vehicle``.
    min_traversals : int
        The traversals an edge needs for its measured rms top speed (its speed limit otherwise).

    Returns
    -------
    Turns
        ``costs`` the posterior means, ``variance`` their posterior variances (Wh²), ``counts``
        the cars each turn's mean is over, ``noise_std`` ρ s (one car's spread in this vehicle's
        units); the edges' kinetic potential.

    Raises
    ------
    EvrouteError
        Where no two cars took the same turn (no spread within turns to weigh the means by).
    """
    vehicle = vehicle or Vehicle()
    seen = _turns_driven(table, net, vehicle, min_traversals)
    n_arc, model = seen.n_arc, seen.model
    driven = n_arc > 0
    if seen.noise is None or not seen.noise > 0:
        raise EvrouteError("the fleet's turns: no two cars took the same turn, so nothing says how much one car's "
                           "cost of a turn varies")
    mean_arc, rho = seen.mean_arc, 1.0
    if measured_by is not None and measured_by != vehicle:
        rho, theirs = _turn_ratio(seen, measured_by, driven)
        mean_arc = model + rho * (mean_arc - theirs)
    noise_var = (rho * seen.noise) ** 2
    d = (mean_arc - model)[driven]
    v = noise_var / n_arc[driven]

    def offset(tau2):  # the marginal likelihood's b for a given τ² (a weighted mean)
        w = 1.0 / (tau2 + v)
        return float(w @ d / w.sum())

    def nll(log_tau2):  # −log Π N(d_j; b, τ² + v_j), up to a constant
        tau2 = math.exp(log_tau2)
        r = d - offset(tau2)
        return 0.5 * float(np.sum(np.log(tau2 + v) + r * r / (tau2 + v)))

    scale = math.log(noise_var)
    fit = minimize_scalar(nll, bounds=(scale - 20.0, scale + 10.0), method="bounded", options={"xatol": 1e-8})
    tau2 = math.exp(fit.x)
    b = offset(tau2)
    prec = 1.0 / tau2 + n_arc / noise_var
    costs = model + b + (n_arc / noise_var) / prec * np.where(driven, mean_arc - model - b, 0.0)
    return Turns(costs, seen.psi, seen.src, seen.dst, noise_std=rho * seen.noise, counts=n_arc, variance=1.0 / prec)


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
