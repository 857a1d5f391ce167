"""The energy of the junctions: what a car pays where it turns from one edge into the next.

Booked per car, so that nothing creates energy. A car's traversals split its energy into the
edge at a constant kinetic state and its kinetic parts (:func:`evroute.physics.energy.kinetic_wh`);
at a junction it spends ``kin_out`` of the edge before, the junction's internal lanes and
``kin_in`` of the edge after. That is its own change of kinetic state, ½ (m + m_rot)(v′² − v²)
between its top speeds on the two edges, plus a dissipation D that the efficiencies make
non-negative (:func:`junction_dissipation`). A truth's turn then costs ψ(e′) − ψ(e) plus the mean
D of the cars that took it, ψ one kinetic level per edge over all its cars
(:func:`truth_turns`): the ψ terms telescope along any route, so every cycle costs at least its
edges.

An agent knows none of a truth's junctions: it starts from what physics says a turn dissipates
(:func:`physics_turns`: the speed change between the two roads, a stop's chance at a signal or
a yield, the turn's angle) or from a fleet's drives (:func:`fleet_turns`), and learns the turns
it drives (:class:`evroute.bandit.turns.TurnBelief`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.optimize import minimize_scalar

from ..bandit.truths import Turns
from ..bandit.turns import TurnPrior
from ..errors import EvrouteError
from ..physics.energy import Vehicle, kinetic_energy_wh

__all__ = ["junction_dissipation", "truth_turns", "physics_turns", "fleet_turns", "turn_geometry", "speed_change_wh",
           "speed_change_loss_wh", "STOP_CHANCE", "JUNCTION_M", "JUNCTION_SD", "LATERAL_ACCEL", "STOP_WAIT_S"]

#: The chance that a car stops at a junction (physics prior): at a traffic signal half the time;
#: where it turns across the oncoming traffic, onto a road of a higher class or makes a U-turn
#: (it yields) a fifth; elsewhere one in twenty.
STOP_CHANCE = {"signal": 0.5, "yield": 0.2, "free": 0.05}

#: The length of a junction's internal lanes the physics prior charges rolling and drag on (m).
JUNCTION_M = 10.0

#: What physics does not know of a junction, beside whether the car stops (Wh): how long its
#: internal lanes are, how the car brakes and accelerates through it.
JUNCTION_SD = 1.5

#: The seconds a car that stops at a junction waits there (the physics prior): half a typical
#: signal's red phase. Only a car with an auxiliary load pays for them (P_aux × the wait).
STOP_WAIT_S = 20.0

#: The lateral acceleration a car takes a turn with (m/s²): it slows to √(a r) for a curve of
#: radius r (:func:`physics_turns`).
LATERAL_ACCEL = 2.5

#: The classes of road, highest first (a turn onto a higher class yields).
_ROAD_RANK = {"motorway": 0, "trunk": 1, "primary": 2, "secondary": 3, "tertiary": 4, "unclassified": 5,
              "residential": 6, "living_street": 7, "service": 8}


def speed_change_wh(v_from, v_to, vehicle: Vehicle | None = None) -> np.ndarray:
    """The battery's energy for a car to change speed from ``v_from`` to ``v_to`` (m/s) without
    stopping: ½ (m + m_rot)(v_to² − v_from²) over η⁺ when it speeds up, times η⁻ when it brakes
    (Wh)."""
    vehicle = vehicle or Vehicle()
    dke = kinetic_energy_wh(v_to, vehicle) - kinetic_energy_wh(v_from, vehicle)
    return np.where(dke > 0, dke / vehicle.eta_plus, dke * vehicle.eta_minus)


def speed_change_loss_wh(v_from, v_to, vehicle: Vehicle | None = None) -> np.ndarray:
    """What a speed change from ``v_from`` to ``v_to`` dissipates (Wh, ≥ 0): its battery energy
    (:func:`speed_change_wh`) less the change of kinetic energy."""
    vehicle = vehicle or Vehicle()
    return speed_change_wh(v_from, v_to, vehicle) - (kinetic_energy_wh(v_to, vehicle) - kinetic_energy_wh(v_from, vehicle))


def _arc_index(net):
    src, dst = np.asarray(net.conn_src, np.int64), np.asarray(net.conn_dst, np.int64)
    return {(int(a), int(b)): i for i, (a, b) in enumerate(zip(src.tolist(), dst.tolist(), strict=True))}, src, dst


def junction_dissipation(table: pd.DataFrame, net, vehicle: Vehicle | None = None) -> pd.DataFrame:
    """Each car's dissipation at each junction it drove through: for consecutive traversals e, e′
    of one car (``next_edge`` of e is e′), D = ``kin_out`` of e + the junction's internal lanes
    (``junction_wh``, 0 where the table has none) + ``kin_in`` of e′ − the car's change of kinetic
    energy ½ (m + m_rot)(v_top′² − v_top²)/3600.

    Each step's kinetic part is at least its mechanical change (:func:`evroute.physics.energy.kinetic_wh`),
    so D is at least the steady work on the junction's internal lanes: never negative where the
    junction is flat.

    Parameters
    ----------
    table : pandas.DataFrame
        Traversals (:data:`evroute.world.sumo_atlas.ATLAS_COLUMNS` or :data:`evroute.world.drives.TRAVERSAL_COLUMNS`),
        each car's rows in time order.
    net : evroute.roads.network.Network
    vehicle : Vehicle, optional
        Its mass (default the paper's EV).

    Returns
    -------
    pandas.DataFrame
        One row per junction driven through a legal turn: ``row`` (the traversal before it),
        ``arc`` (the turn's index in ``conn_src``/``conn_dst``), ``vehicle`` and ``dissipation_wh``.
    """
    arc_of, _, _ = _arc_index(net)
    t = table.reset_index(drop=True)
    e, nxt, car = t.edge.to_numpy(), t.next_edge.to_numpy(), t.vehicle.to_numpy()
    k = np.flatnonzero(nxt[:-1] >= 0) if len(t) > 1 else np.zeros(0, np.int64)
    k = k[(nxt[k] == e[k + 1]) & (car[k] == car[k + 1])]  # rows are per car, in time order
    arcs = np.array([arc_of.get((int(a), int(b)), -1) for a, b in zip(e[k], e[k + 1], strict=True)], dtype=np.int64)
    junction = t.junction_wh.to_numpy(np.float64)[k] if "junction_wh" in t else np.zeros(k.size)
    ke = kinetic_energy_wh(t.v_top.to_numpy(np.float64), vehicle)
    d = (t.kin_out_wh.to_numpy(np.float64)[k] + np.nan_to_num(junction) + t.kin_in_wh.to_numpy(np.float64)[k + 1]
         - (ke[k + 1] - ke[k]))
    ok = arcs >= 0
    return pd.DataFrame({"row": k[ok], "arc": arcs[ok], "vehicle": car[k][ok], "dissipation_wh": d[ok]})


def _kinetic_levels(table: pd.DataFrame, net, vehicle: Vehicle | None) -> np.ndarray:
    """ψ per edge: the mean ½ (m + m_rot) v_top² of its traversals (Wh), at its speed limit where
    nobody drove it."""
    n = net.n_edges
    e = table.edge.to_numpy(np.int64)
    counts = np.bincount(e, minlength=n)
    ke = np.bincount(e, weights=kinetic_energy_wh(table.v_top.to_numpy(np.float64), vehicle), minlength=n)
    limit = kinetic_energy_wh(net.edges.speed_mps.to_numpy(np.float64), vehicle)
    return np.where(counts > 0, ke / np.maximum(counts, 1), limit)


def truth_turns(table: pd.DataFrame, net, vehicle: Vehicle | None = None, *, min_traversals: int = 3):
    """The junctions of a truth booked per car (see the module docstring): each turn costs
    ψ(e′) − ψ(e) + D̄, ψ the mean kinetic energy of each edge's cars at their top speed, D̄ the mean
    dissipation of the cars that took the turn (:func:`junction_dissipation`) where at least
    ``min_traversals`` did, else what the speed change between the two edges' typical speeds
    dissipates (:func:`speed_change_loss_wh`, ≥ 0).

    Parameters
    ----------
    table : pandas.DataFrame
        An atlas's traversals (:data:`evroute.world.sumo_atlas.ATLAS_COLUMNS`), each car's rows in time order.
    net : evroute.roads.network.Network
    vehicle : Vehicle, optional
        The atlas's car (default the paper's EV).
    min_traversals : int
        The cars a turn needs for its measured mean.

    Returns
    -------
    (Turns, numpy.ndarray, numpy.ndarray)
        The turns (``noise_std`` the cars' pooled spread of D within turns, ``counts`` the cars of
        each measured turn), and the cars' dissipations sorted by turn with each turn's offset into
        them (empty for a turn of the model): what one car's turn is observed as.
    """
    vehicle = vehicle or Vehicle()
    src, dst = np.asarray(net.conn_src, np.int64), np.asarray(net.conn_dst, np.int64)
    psi = _kinetic_levels(table, net, vehicle)
    cars = junction_dissipation(table, net, vehicle)
    arcs, d = cars.arc.to_numpy(np.int64), cars.dissipation_wh.to_numpy(np.float64)
    n_arc = np.bincount(arcs, minlength=src.size)
    mean = np.bincount(arcs, weights=d, minlength=src.size) / np.maximum(n_arc, 1)
    v = np.sqrt(psi / kinetic_energy_wh(1.0, vehicle))  # each edge's rms top speed
    measured = n_arc >= min_traversals
    dissipation = np.where(measured, mean, speed_change_loss_wh(v[src], v[dst], vehicle))
    dev = d - mean[arcs]
    dof = int((n_arc[n_arc > 1] - 1).sum())
    noise = float(np.sqrt(dev @ dev / dof)) if dof > 0 else None
    keep = measured[arcs]
    order = np.lexsort((np.arange(arcs.size)[keep], arcs[keep]))
    samples = d[keep][order]
    used = np.where(measured, n_arc, 0)
    offsets = np.concatenate([[0], np.cumsum(used)[:-1]]).astype(np.int64)
    turns = Turns(psi[dst] - psi[src] + dissipation, psi, src, dst, noise_std=noise, counts=used)
    return turns, samples, offsets


def turn_geometry(net) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per legal turn: its junction (the node the two edges meet at, as an index), its angle
    (degrees, left positive, from the bearing at the end of the edge before to the bearing at the
    start of the edge after) and its kind (:data:`evroute.bandit.turns.TURN_KINDS`: straight within
    30°, right, left, or a U-turn beyond 150°).

    Returns
    -------
    (numpy.ndarray, numpy.ndarray, numpy.ndarray)
        ``junction`` (int64), ``angle_deg`` (float64), ``kind`` (int64).
    """
    src, dst = np.asarray(net.conn_src, np.int64), np.asarray(net.conn_dst, np.int64)
    head = np.array([_bearing(g[-2], g[-1]) for g in net.geometry])
    tail = np.array([_bearing(g[0], g[1]) for g in net.geometry])
    angle = (head[src] - tail[dst] + 180.0) % 360.0 - 180.0  # bearings clockwise: left turns positive
    kind = np.where(np.abs(angle) <= 30.0, 0, np.where(np.abs(angle) >= 150.0, 3, np.where(angle < 0, 1, 2)))
    _, junction = np.unique(net.edges.v.to_numpy()[src], return_inverse=True)
    return junction.astype(np.int64), angle, kind.astype(np.int64)


def _bearing(a, b) -> float:
    """The compass bearing (degrees clockwise from north) from (lon, lat) ``a`` to ``b``."""
    lat = math.radians(0.5 * (a[1] + b[1]))
    return math.degrees(math.atan2((b[0] - a[0]) * math.cos(lat), b[1] - a[1]))


def physics_turns(net, vehicle: Vehicle | None = None) -> TurnPrior:
    """What physics says each legal turn dissipates, with an honest variance: the agents' prior of
    the junctions when nothing was measured.

    A car leaves the edge before at its speed limit v₁ and reaches the next one's, v₂. It takes
    the turn at v_c = min(v₁, v₂, √(a r)), a the lateral acceleration :data:`LATERAL_ACCEL` and
    r = 6 m / tan(|θ|/2) for a turn of angle θ (at least 3 m), and dissipates the losses of its
    speed changes (:func:`speed_change_loss_wh`) v₁ → v_c → v₂; with chance p it stops instead,
    v₁ → 0 → v₂ (p of :data:`STOP_CHANCE`: a traffic signal on the edge before, a yield where it
    turns left, makes a U-turn or joins a road of a higher class, else free), plus the rolling
    resistance and drag over :data:`JUNCTION_M` metres at v_c. A car with an auxiliary load P_aux
    pays it for the time it takes to cross the junction, :data:`JUNCTION_M` / v_c, and for
    :data:`STOP_WAIT_S` seconds more where it stops. The mean is the mixture's; its
    variance is the stop's Bernoulli variance plus the mean squared (the model's own uncertainty:
    how often and how hard cars brake, how long the junction is) plus (:data:`JUNCTION_SD` Wh)².
    One car's dissipation about its turn's mean (the observations' noise) spreads by the stop's
    Bernoulli variance, averaged over the turns, plus the same (:data:`JUNCTION_SD` Wh)².

    Returns
    -------
    evroute.bandit.turns.TurnPrior
        Per turn its mean and variance of the dissipation (Wh, Wh²), its junction and kind, and
        the observations' noise variance.
    """
    vehicle = vehicle or Vehicle()
    src, dst = np.asarray(net.conn_src, np.int64), np.asarray(net.conn_dst, np.int64)
    e = net.edges
    v = e.speed_mps.to_numpy(np.float64)
    junction, angle, kind = turn_geometry(net)
    half = np.radians(np.minimum(np.abs(angle), 179.0)) / 2.0
    radius = np.maximum(6.0 / np.maximum(np.tan(half), 1e-9), 3.0)
    vc = np.minimum(np.minimum(v[src], v[dst]), np.sqrt(LATERAL_ACCEL * radius))
    go = speed_change_loss_wh(v[src], vc, vehicle) + speed_change_loss_wh(vc, v[dst], vehicle)
    stop = speed_change_loss_wh(v[src], 0.0, vehicle) + speed_change_loss_wh(0.0, v[dst], vehicle)
    rank = np.array([_ROAD_RANK.get(str(h), 6) for h in e.highway.to_numpy()])
    signal = e.signals.to_numpy()[src] > 0
    yields = (kind >= 2) | (rank[dst] < rank[src])
    p = np.where(signal, STOP_CHANCE["signal"], np.where(yields, STOP_CHANCE["yield"], STOP_CHANCE["free"]))
    steady = (vehicle.mass_kg * vehicle.g * vehicle.rolling_resistance
              + 0.5 * vehicle.air_density * vehicle.frontal_area_m2 * vehicle.drag_coefficient * vc**2) \
        * JUNCTION_M / 3600.0 / vehicle.eta_plus
    if vehicle.aux_power_w > 0:  # the auxiliary load while crossing, and while waiting where it stops
        steady = steady + vehicle.aux_power_w * JUNCTION_M / np.maximum(vc, 1.0) / 3600.0
        stop = stop + vehicle.aux_power_w * STOP_WAIT_S / 3600.0
    mean = (1.0 - p) * go + p * stop + steady
    bernoulli = p * (1.0 - p) * (stop - go) ** 2
    return TurnPrior(mean, bernoulli + mean**2 + JUNCTION_SD**2, junction=junction, kind=kind,
                     noise_var=float(np.mean(bernoulli)) + JUNCTION_SD**2)


def fleet_turns(table: pd.DataFrame, net, vehicle: Vehicle | None = None, *,
                measured_by: Vehicle | None = None) -> TurnPrior:
    """The fleet's per-turn posterior of the dissipation: every turn estimated from all the cars
    that took it, each shrunk towards physics (:func:`physics_turns`) by as much as the fleet's turns
    say it should be (an empirical-Bayes hierarchical model, as the edges' conjugate update is a
    per-edge one).

    A turn j's mean dissipation μ_j is physics' P_j plus an offset b common to all turns plus
    N(0, τ²); its n_j cars' mean m_j (in this vehicle's units: another vehicle's dissipations times
    the ratio ρ of the two vehicles' kinetic masses over their efficiencies' losses) is μ_j plus
    N(0, s² / n_j), s the pooled spread of one car's dissipation within turns. b and τ² maximise the
    marginal likelihood of the driven turns' means, Π_j N(m_j − P_j; b, τ² + s² / n_j) (type II);
    each turn's posterior is then the conjugate one: precision 1/τ² + n_j / s², mean
    P_j + b + (the data's share of the precision)(m_j − P_j − b). A turn nobody took keeps P_j + b
    with variance τ²: how far the fleet's turns stray from physics, not one car's spread.

    Parameters
    ----------
    table : pandas.DataFrame
        A fleet's traversals (:data:`evroute.world.drives.TRAVERSAL_COLUMNS`), each car's rows in time order.
    net : evroute.roads.network.Network
    vehicle : Vehicle, optional
        This vehicle (default the paper's EV).
    measured_by : Vehicle, optional
        The vehicle that drove ``table`` where it is not ``vehicle``.

    Returns
    -------
    evroute.bandit.turns.TurnPrior
        Per turn the posterior mean and variance, the cars each turn's mean is over, one car's
        spread (``noise_var``) in this vehicle's units; the junctions and kinds.

    Raises
    ------
    EvrouteError
        Where no two cars took the same turn (no spread within turns to weigh the means by).
    """
    vehicle = vehicle or Vehicle()
    by = measured_by or vehicle
    physics = physics_turns(net, vehicle)
    cars = junction_dissipation(table, net, by)
    a, d = cars.arc.to_numpy(np.int64), cars.dissipation_wh.to_numpy(np.float64)
    n_turns = physics.mean.size
    n_arc = np.bincount(a, minlength=n_turns)
    mean_arc = np.bincount(a, weights=d, minlength=n_turns) / np.maximum(n_arc, 1)
    dev = d - mean_arc[a]
    dof = int((n_arc[n_arc > 1] - 1).sum())
    if dof <= 0 or not dev @ dev > 0:
        raise EvrouteError("the fleet's turns: no two cars took the same turn, so nothing says how much one car's "
                           "dissipation at a turn varies")
    rho = 1.0
    if by != vehicle:  # another vehicle's losses, in this one's: the ratio of what a speed change dissipates
        mine = float(speed_change_loss_wh(0.0, 13.9, vehicle)) + float(speed_change_loss_wh(13.9, 0.0, vehicle))
        theirs = float(speed_change_loss_wh(0.0, 13.9, by)) + float(speed_change_loss_wh(13.9, 0.0, by))
        rho = mine / theirs if theirs > 0 else 1.0
    noise_var = rho * rho * float(dev @ dev / dof)
    driven = n_arc > 0
    y = rho * mean_arc[driven] - physics.mean[driven]
    v = noise_var / n_arc[driven]

    def offset(tau2):  # the marginal likelihood's b for a given τ² (a weighted mean)
        w = 1.0 / (tau2 + v)
        return float(w @ y / w.sum())

    def nll(log_tau2):  # −log Π N(y_j; b, τ² + v_j), up to a constant
        tau2 = math.exp(log_tau2)
        r = y - offset(tau2)
        return 0.5 * float(np.sum(np.log(tau2 + v) + r * r / (tau2 + v)))

    scale = math.log(noise_var)
    fit = minimize_scalar(nll, bounds=(scale - 20.0, scale + 10.0), method="bounded", options={"xatol": 1e-8})
    tau2 = math.exp(fit.x)
    b = offset(tau2)
    prec = 1.0 / tau2 + n_arc / noise_var
    resid = np.where(driven, rho * mean_arc - physics.mean - b, 0.0)
    post = physics.mean + b + (n_arc / noise_var) / prec * resid
    return TurnPrior(post, 1.0 / prec, junction=physics.junction, kind=physics.kind, noise_var=noise_var,
                     counts=n_arc, source="drives")
