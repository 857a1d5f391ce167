"""Drives in: GPS traces with energy, map-matched into traversals of the network's edges.

A driver's logger (or the car) records, every second or few, the time, the position and the
energy: a trip meter, the battery power, or the state of charge. :func:`read_traces`
(:mod:`evroute.world.traces`) reads such a CSV or GPX file into one table of fixes, whatever
separator, decimal mark, encoding, time format, column names and units the fleet exports;
:func:`match_trip` snaps a trip's fixes to the network with a
hidden-Markov map matcher (:class:`evroute.world.matching.HMMMatcher` by default, after Newson &
Krumm 2009, or leuvenmapmatching's ``DistanceMatcher``, Meert & Verbeke 2018: the state is a point
on an edge, the emission the fix's distance to it, the transition the difference between the
distance driven on the network and the one the fixes suggest);
:func:`trip_traversals` turns the matched positions into one row per complete traversal of an
edge (:data:`TRAVERSAL_COLUMNS`):

- the car's position along its matched route at each fix, and so the time it crossed each
  junction (linear between the two fixes around it);
- the energy used between entering and leaving the edge (the trip meter interpolated at those
  times);
- the kinetic split of :func:`evroute.world.sumo_atlas.traversals`, on the fixes and the two boundary points:
  the kinetic-energy change (½ (m + m_rot)(v² − v₀²), through η⁺ or η⁻ by the sign of the step's
  energy) before the traversal's top speed is ``kin_in_wh``, after it ``kin_out_wh``, and
  ``edge_wh`` is what is left, the edge at a constant kinetic state, as the SUMO truth books it.

The first and the last edge of a trip are partial (the car starts and stops inside them) and
dropped, as in the atlas. :func:`import_traces` does it for many files and reports what it kept,
dropped and why: what cannot be right (a jump between fixes no car makes, a trip meter's reset, an
energy coarser than an edge's, a traversal faster than its road allows, a U-turn loop the car did
not drive: :mod:`evroute.world.plausibility`) is named and dropped, never averaged in. What the
traversals measured becomes a prior (:func:`fleet_prior_mean`) or a route with its junctions
(:func:`drives_route`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd

from ..bandit.policies import route_weights
from ..errors import EvrouteError
from ..geo import EARTH_RADIUS_M
from ..physics.energy import Vehicle, energy_floor_wh, kinetic_wh
from ..physics.routes import edge_energies
from ..pool import process_map
from ..priors.prior import PRIOR_SCALE
from ..roads.oracle import Oracle
from ..validate import choice
from .import_report import ImportReport
from .junctions import fleet_turns, physics_turns
from .matching import HMMMatcher, Matcher, fix_speeds, local_metres
from .plausibility import SPEED_FACTOR, SPEED_SLACK_MPS, phantom_loops, too_fast
from .trace_formats import read_gpx, trace_files, trace_kind, write_gpx
from .traces import TRACE_FIELDS, parse_columns, read_sumo_battery, read_traces

__all__ = ["TRAVERSAL_COLUMNS", "IMPORT_COLUMNS", "TRACE_FIELDS", "BOUNDARIES", "SUMO_JUNCTION_OFFSET_M", "LeuvenMatcher", "MATCHERS", "make_matcher", "degrade", "read_traces", "match_trip", "trip_speeds", "trip_traversals", "odometry_positions",
           "import_traces", "plausible_traversals", "ImportReport", "parse_columns", "read_gpx", "read_sumo_battery", "write_gpx", "fleet_prior_mean", "read_drives", "drives_route",
           "fleet_ratio", "transfer_traversals", "posterior_route"]

#: One row per complete traversal of an edge by a matched trip: the trip and vehicle, the edge and
#: the edge driven next (−1 where that traversal is not complete), when it was entered and for how
#: long (s), the energy used on it and its kinetic split (Wh, as :data:`evroute.world.sumo_atlas.ATLAS_COLUMNS`),
#: the speeds at entry, top and exit (m/s), and the mean distance of its fixes to the matched edge
#: (m; NaN where no fix fell inside it): how confident the match is.
TRAVERSAL_COLUMNS = ("trip", "vehicle", "edge", "next_edge", "enter_s", "seconds", "energy_wh", "edge_wh",
                     "kin_in_wh", "kin_out_wh", "v_in", "v_top", "v_out", "match_dist_m")
#: The columns of :func:`import_traces`' table (``traversals.parquet``): :data:`TRAVERSAL_COLUMNS`
#: and the file each traversal's trip was read from.
IMPORT_COLUMNS = (*TRAVERSAL_COLUMNS, "file")


def degrade(traces: pd.DataFrame, gps_noise_m: float = 0.0, sample_hz: float = 1.0, *, seed: int = 0) -> pd.DataFrame:
    """What a logger would record of exact 1 Hz fixes: one fix every ``1 / sample_hz`` seconds
    from each trip's first, its position moved by independent Gaussian noise of ``gps_noise_m``
    metres east and north.

    Parameters
    ----------
    traces : pandas.DataFrame
        ``trip``, ``time_s``, ``lat``, ``lon`` and any other columns, one row a second.
    gps_noise_m : float
        The noise's standard deviation in each direction (m).
    sample_hz : float
        Fixes a second, in (0, 1].
    seed : int
        Seeds the noise.

    Returns
    -------
    pandas.DataFrame
        The fixes kept, positions moved.
    """
    if not 0 < sample_hz <= 1:
        raise EvrouteError(f"the rate must be in (0, 1] fixes a second, got {sample_hz:g}")
    if not gps_noise_m >= 0:
        raise EvrouteError(f"the GPS noise must be >= 0 m, got {gps_noise_m:g}")
    t = traces.time_s.to_numpy(np.float64)
    first = traces.groupby("trip", sort=False).time_s.transform("min").to_numpy(np.float64)
    keep = np.mod(np.round(t - first).astype(np.int64), round(1.0 / sample_hz)) == 0
    out = traces[keep].reset_index(drop=True)
    if gps_noise_m > 0:
        rng = np.random.default_rng(seed)
        east, north = rng.normal(0.0, gps_noise_m, (2, len(out)))
        lat = out.lat.to_numpy(np.float64)
        out["lat"] = lat + np.degrees(north / EARTH_RADIUS_M)
        out["lon"] = out.lon.to_numpy(np.float64) + np.degrees(east / (EARTH_RADIUS_M * np.cos(np.radians(lat))))
    return out


class LeuvenMatcher:
    """leuvenmapmatching's map matcher of ``net`` (a :class:`evroute.world.matching.Matcher`): its
    roads' shapes (each edge's geometry, in local metres) in leuvenmapmatching's in-memory map, a
    state being a point on one segment of one edge.

    Parameters
    ----------
    net : evroute.roads.network.Network
    gps_noise_m : float
        The fixes' standard deviation (m): the matcher's observation noise.
    max_dist_m : float, optional
        A fix farther than this from every road breaks the match (default 5 × the noise, at
        least 50 m).

    Notes
    -----
    Two parallel edges drawn as the same straight line cannot be told apart: the shorter stands
    for both. Its states are hashed so that ties between equally likely ones are broken alike
    whatever the process's hash seed (:mod:`evroute.world.leuven`).
    """

    def __init__(self, net, gps_noise_m: float = 10.0, max_dist_m: float | None = None):
        from leuvenmapmatching.map.inmem import InMemMap

        try:  # the segment index InMemMap builds (use_rtree): without it only segments that start
            import rtree  # noqa: F401  near a fix are candidates, and matches go wrong
        except ImportError:
            raise EvrouteError("map matching needs the spatial index rtree: pip install rtree") from None

        # its warnings are advice to its own users (an index, a distance): evroute sets both
        logging.getLogger("be.kuleuven.cs.dtai.mapmatching").setLevel(logging.ERROR)
        if not gps_noise_m > 0:
            raise EvrouteError(f"the GPS noise must be > 0 m, got {gps_noise_m:g}")
        self.noise = float(gps_noise_m)
        self.max_dist = float(max_dist_m) if max_dist_m is not None else max(50.0, 5.0 * self.noise)
        nodes, e = net.nodes, net.edges
        self.lat0 = float(nodes.lat.mean())
        self.lon0 = float(nodes.lon.mean())
        self.length = e.length_m.to_numpy(np.float64)
        self.map = InMemMap("evroute", use_latlon=False, use_rtree=True, index_edges=True)
        # labels: the junctions 0..N-1 in the nodes' order, then the shapes' inner points
        label = {node: k for k, node in enumerate(nodes.index.tolist())}
        y, x = self.project(nodes.lat.to_numpy(), nodes.lon.to_numpy())
        for k, (yy, xx) in enumerate(zip(y.tolist(), x.tolist(), strict=True)):
            self.map.add_node(k, (yy, xx))
        n_labels = len(label)
        #: (label, label) of a segment -> (edge, its start along the edge in m, its length in m)
        self.segment: dict[tuple, tuple[int, float, float]] = {}
        order = np.lexsort((np.arange(len(e)), self.length))  # shortest first, then by id
        u, v = [label[x] for x in e.u.tolist()], [label[x] for x in e.v.tolist()]
        for i in order.tolist():
            if u[i] == v[i]:
                continue
            g = np.asarray(net.geometry[i], dtype=np.float64)
            gy, gx = self.project(g[:, 1], g[:, 0])
            step = np.hypot(np.diff(gy), np.diff(gx))
            scale = self.length[i] / step.sum() if step.sum() > 0 else 0.0
            if len(g) == 2 and (u[i], v[i]) in self.segment:
                continue  # a straight parallel edge: the shorter one stands for it
            labels = [u[i], *range(n_labels, n_labels + len(g) - 2), v[i]]
            for k in range(1, len(labels) - 1):
                self.map.add_node(labels[k], (float(gy[k]), float(gx[k])))
            n_labels += len(g) - 2
            at = 0.0
            for k in range(len(labels) - 1):
                self.map.add_edge(labels[k], labels[k + 1])
                self.segment[(labels[k], labels[k + 1])] = (i, at, float(step[k] * scale))
                at += float(step[k] * scale)

    def project(self, lat, lon):
        """Local (north, east) metres of positions in degrees (:func:`evroute.world.matching.local_metres`
        about the network's centre)."""
        return local_metres(lat, lon, lat0=self.lat0, lon0=self.lon0)

    def match(self, lat, lon, *, t=None, speed=None) -> list[tuple]:
        """Match one trip's fixes, in pieces: where no road is within reach of a fix (the car left
        the network) the piece ends, and the next begins at the next fix the matcher can place.
        (``t`` and ``speed`` are not used: leuvenmapmatching matches positions alone.)

        Returns
        -------
        list of (int, list of int, numpy.ndarray, numpy.ndarray)
            Per piece of at least two fixes: its first fix's index, the matched route's edges in
            order, each fix's position along the route (m from its start; NaN where the fix was
            not placed) and its distance to the road (m).
        """
        north, east = self.project(lat, lon)
        path = list(zip(north.tolist(), east.tolist(), strict=True))
        pieces = []
        first = 0
        while first < len(path) - 1:
            n, piece = self._match(path[first:])
            if piece is not None:
                pieces.append((first, *piece))
            first += max(n, 1)
        return pieces

    def _match(self, path):
        from leuvenmapmatching.matcher.distance import DistanceMatcher

        from .leuven import ReproducibleMatching

        matcher = DistanceMatcher(self.map, matching=ReproducibleMatching, max_dist=self.max_dist, obs_noise=self.noise,
                                  obs_noise_ne=2 * self.noise, dist_noise=self.noise, non_emitting_states=True, max_lattice_width=10,
                                  non_emitting_length_factor=0.75, avoid_goingback=True)
        states, last = matcher.match(path)
        if not states or not matcher.lattice_best:
            return 0, None
        n = int(last) + 1
        route: list[int] = []
        pairs = []
        for m in matcher.lattice_best:
            seg = self.segment.get((m.edge_m.l1, m.edge_m.l2))
            if seg is None:
                continue
            edge, at, seg_len = seg
            if not route or route[-1] != edge:
                route.append(edge)
            if m.obs_ne == 0 and m.obs < n:
                ti = min(max(float(m.edge_m.ti), 0.0), 1.0)
                pairs.append((m.obs, len(route) - 1, at + ti * seg_len, float(m.dist_obs)))
        if n < 2 or not route:
            return n, None
        start = np.r_[0.0, np.cumsum(self.length[route])]
        s = np.full(n, np.nan)
        dist = np.full(n, np.nan)
        for obs, k, along, d in pairs:
            s[obs] = start[k] + along
            dist[obs] = d
        return n, (route, s, dist)


#: How a traversal's ends are drawn (:func:`trip_traversals`): ``centre`` interpolates the time,
#: energy and speed where the car passes the junction's centre (the default: the physical
#: boundary); ``sumo`` books each reporting step whole on the edge where it ends, the edges ending
#: :data:`SUMO_JUNCTION_OFFSET_M` past the junction's centre, as SUMO's own per-edge accounting
#: does (its edges stop at the junction's border, its internal lanes count for the edge before).
BOUNDARIES = ("centre", "sumo")

#: How far past a junction's centre SUMO's edge boundary lies, measured on Monaco: with exact
#: positions the ``sumo`` convention then reproduces SUMO's per-traversal energies (median error
#: 0.0 %, against 3.6 % at 3 m and 9.1 % at 0 m; benchmarks/map_matching.py --boundary sumo).
SUMO_JUNCTION_OFFSET_M = 6.0


#: The odometer's error a step (:func:`odometry_positions`): a floor in metres plus a share of the
#: step's length (a logger's speed is a few per cent off, the trapezoid misses the acceleration
#: within a step, and a matched route that is not the driven one has another length). Chosen on
#: SUMO's Monaco drives (benchmarks/map_matching.py; floors 0.5–2 m, shares 5–20 % tried): the
#: loosest was best at 10 and 20 m of noise in SUMO's accounting. Against the import's own
#: accounting of the exact positions (``--odometry``), 1 m and 10 % is a point better at 10 m and
#: worse at 20 m; kept, as every fleet in the docs was imported with these (docs/performance-matching.md).
ODOMETRY_FLOOR_M = 2.0
ODOMETRY_SHARE = 0.2


def odometry_positions(s, t, speed, *, gps_noise_m: float):
    r"""Each fix's position along its route from the GPS and the speed together.

    The matched positions ``s`` are the GPS's, off by its noise (10 m moves a junction's crossing
    by a second at city speeds, and with it the energy of the braking or the start there between
    two edges); the distance driven between two fixes is known far better from the speed (the
    trapezoid of the two speeds). The positions are the least-squares compromise, a local-level
    (Rauch–Tung–Striebel) smoother solved as one tridiagonal system:

    .. math:: \min_x \sum_i (x_i - s_i)^2 / r + \sum_i (x_{i+1} - x_i - d_i)^2 / q_i,

    with ``r`` the GPS noise's variance and ``q_i`` the odometer's (:data:`ODOMETRY_FLOOR_M` plus
    :data:`ODOMETRY_SHARE` of the step ``d_i``, squared). A stopped car stays put, whatever its
    fixes do.

    Parameters
    ----------
    s, t, speed : arrays (n,)
        Matched positions (m), times (s) and speeds (m/s), all finite.
    gps_noise_m : float
        The GPS's standard deviation (m).

    Returns
    -------
    numpy.ndarray
        The positions (m).
    """
    from scipy.linalg import solveh_banded

    s, t, speed = (np.asarray(a, dtype=np.float64) for a in (s, t, speed))
    if s.size < 2:
        return s.copy()
    d = np.diff(t) * 0.5 * (speed[1:] + speed[:-1])
    w = 1.0 / (ODOMETRY_FLOOR_M + ODOMETRY_SHARE * np.abs(d)) ** 2
    r = 1.0 / float(gps_noise_m) ** 2
    diag = np.full(s.size, r)
    diag[:-1] += w
    diag[1:] += w
    upper = np.r_[0.0, -w]
    rhs = r * s
    rhs[:-1] -= w * d
    rhs[1:] += w * d
    return solveh_banded(np.vstack([upper, diag]), rhs)


def trip_traversals(route, s, t, *, energy, speed, dist, length, vehicle: Vehicle | None = None,
                    boundary: str = "centre", gps_noise_m: float | None = None) -> list[tuple]:
    """The complete traversals of one matched trip (:data:`TRAVERSAL_COLUMNS` from ``edge`` on).

    Parameters
    ----------
    route : list of int
        The matched route's edges.
    s, t, energy, speed, dist : arrays (n,)
        Each fix's position along the route (m), time (s), energy used so far (Wh), speed (m/s;
        NaN: from the positions) and distance to the route (m).
    length : array (E,)
        The network's edge lengths (m).
    vehicle : Vehicle, optional
        For the kinetic split (default the paper's EV).
    boundary : {"centre", "sumo"}
        Where a traversal begins and ends (:data:`BOUNDARIES`).
    gps_noise_m : float, optional
        The fixes' noise (m): where every fix has its speed, the positions are the GPS's and the
        speed's together (:func:`odometry_positions`); None: the GPS's alone.

    Returns
    -------
    list of tuple
    """
    boundary = choice("boundary", boundary, BOUNDARIES)
    ok = np.isfinite(s)
    s, t, energy, speed, dist = (np.asarray(a, dtype=np.float64)[ok] for a in (s, t, energy, speed, dist))
    if s.size < 2 or not route:
        return []
    bounds = np.r_[0.0, np.cumsum(np.asarray(length, dtype=np.float64)[route])]
    if gps_noise_m is not None and np.isfinite(speed).all():  # on the matched route, whatever the smoother says
        s = odometry_positions(s, t, speed, gps_noise_m=gps_noise_m).clip(0.0, bounds[-1])
    s = np.maximum.accumulate(s)  # the car does not drive backwards along its route
    if boundary == "sumo":  # the edges end past the junctions' centres
        s = s - SUMO_JUNCTION_OFFSET_M
    if not np.isfinite(speed).all():  # from the positions: central differences
        speed = np.where(np.isfinite(speed), speed, np.abs(np.gradient(s, t)))
    # the junction k is crossed between fixes j-1 and j (the first at or past it)
    # (a fix on a junction itself, at the end of one edge or the start of the next as a matcher
    # breaks the tie, does not make a traversal of either complete: positions within a micrometre)
    inside = (bounds > s[0] + 1e-6) & (bounds < s[-1] - 1e-6)
    j = np.searchsorted(s, bounds, side="left").clip(1, s.size - 1)
    span = s[j] - s[j - 1]
    frac = np.where(span > 0, (bounds - s[j - 1]) / np.where(span > 0, span, 1.0), 1.0).clip(0.0, 1.0)
    if boundary == "sumo":  # a step (fix j-1 to fix j) counts whole for the edge where it ends
        frac = np.zeros_like(frac)
    tb = t[j - 1] + frac * (t[j] - t[j - 1])
    eb = energy[j - 1] + frac * (energy[j] - energy[j - 1])
    vb = speed[j - 1] + frac * (speed[j] - speed[j - 1])
    rows = []
    complete = inside[:-1] & inside[1:]
    for k in np.flatnonzero(complete).tolist():
        a, b = int(j[k]), int(j[k + 1])  # the fixes strictly inside the edge: a .. b-1
        v = np.r_[vb[k], speed[a:b], vb[k + 1]]
        e = np.r_[eb[k], energy[a:b], eb[k + 1]]
        kin = kinetic_wh(v[1:], v[:-1], np.diff(e), vehicle=vehicle)
        top = int(np.argmax(v))
        kin_in, kin_out = float(kin[:top].sum()), float(kin[top:].sum())
        used = float(eb[k + 1] - eb[k])
        nxt = route[k + 1] if k + 1 < complete.size and complete[k + 1] else -1
        rows.append((int(route[k]), int(nxt), float(tb[k]), float(tb[k + 1] - tb[k]), used, used - kin_in - kin_out,
                     kin_in, kin_out, float(vb[k]), float(v[top]), float(vb[k + 1]),
                     float(dist[a:b].mean()) if b > a else float("nan")))
    return rows


def trip_speeds(fixes: pd.DataFrame, gps_noise_m: float) -> np.ndarray:
    """A trip's speeds (m/s): the logged ones, and where a fix has none, the speed of the track
    its positions make (:func:`evroute.world.matching.fix_speeds`, at the noise ``gps_noise_m``).

    Returns
    -------
    numpy.ndarray
        One speed a fix (m/s).
    """
    speed = fixes.speed_mps.to_numpy(np.float64)
    if len(speed) and not np.isfinite(speed).all():
        est = fix_speeds(fixes.time_s.to_numpy(np.float64), fixes.lat.to_numpy(np.float64),
                         fixes.lon.to_numpy(np.float64), gps_noise_m=gps_noise_m)
        speed = np.where(np.isfinite(speed), speed, est)
    return speed


def match_trip(matcher: Matcher, fixes: pd.DataFrame, vehicle: Vehicle | None = None, *, boundary: str = "centre",
               smooth: bool = True):
    """Match one trip (rows of :func:`read_traces`): its traversals as tuples (each piece's, see
    :meth:`evroute.world.matching.Matcher.match`; ``boundary`` as :func:`trip_traversals`) and the
    number of fixes placed on the network. ``smooth``: the positions from the GPS and the speed together
    (:func:`odometry_positions`, at the matcher's noise); False: the matched positions as they are
    (exact fixes, as benchmarks/map_matching.py's reference reads them). A fix without a speed
    takes the speed of the track the positions make (:func:`trip_speeds`), as if logged: for the
    matcher's distances driven, the positions along the route and the kinetic split alike."""
    rows, placed = [], 0
    t, energy = (fixes[c].to_numpy(np.float64) for c in ("time_s", "energy_wh"))
    speed = trip_speeds(fixes, matcher.noise)
    for first, route, s, dist in matcher.match(fixes.lat.to_numpy(), fixes.lon.to_numpy(), t=t, speed=speed):
        n = s.size
        placed += int(np.isfinite(s).sum())
        rows.extend(trip_traversals(route, s, t[first:first + n], energy=energy[first:first + n], speed=speed[first:first + n],
                                    dist=dist, length=matcher.length, vehicle=vehicle, boundary=boundary,
                                    gps_noise_m=matcher.noise if smooth else None))
    return rows, placed


#: The map matchers (``evroute drives import --matcher``): ``hmm``, evroute's own hidden Markov
#: matcher (:class:`evroute.world.matching.HMMMatcher`, the default: more of the driven length
#: on the right edge than leuvenmapmatching at every noise and rate measured, and about a hundred
#: times as fast; benchmarks/map_matching.py), and ``leuven``, leuvenmapmatching's
#: (:class:`LeuvenMatcher`).
MATCHERS = {"hmm": HMMMatcher, "leuven": LeuvenMatcher}


def make_matcher(name: str, net, gps_noise_m: float):
    """The matcher ``name`` (:data:`MATCHERS`) of ``net`` for fixes of noise ``gps_noise_m`` (m)."""
    return MATCHERS[choice("matcher", name, tuple(MATCHERS))](net, gps_noise_m)


class _TripMatching:
    """One trip's fixes to its traversals, its fixes placed and its speeds (:func:`import_traces`,
    :func:`evroute.pool.process_map`'s function: sent to each worker once, the matcher built on the
    first trip and kept)."""

    def __init__(self, net, gps_noise_m: float, vehicle, boundary: str, matcher: str):
        self.net, self.gps_noise_m, self.vehicle, self.boundary, self.name = net, gps_noise_m, vehicle, boundary, matcher
        self.matcher = None

    def __call__(self, fixes: pd.DataFrame):
        if self.matcher is None:
            self.matcher = make_matcher(self.name, self.net, self.gps_noise_m)
        rows, placed = match_trip(self.matcher, fixes, self.vehicle, boundary=self.boundary)
        return rows, placed, trip_speeds(fixes, self.matcher.noise)


def import_traces(paths, net, *, columns: dict[str, str] | None = None, capacity_kwh: float | None = None,
                  units: dict[str, str] | None = None, gps_noise_m: float = 10.0, vehicle: Vehicle | None = None,
                  progress=None, jobs: int = 1, sumo_net: str | Path | None = None, boundary: str = "centre",
                  matcher: str = "hmm"):
    """Read, match and split the traces in ``paths`` on ``net``, and drop what cannot be right.

    A file that cannot be read (empty, a header only, ragged, not text, no time, position or
    energy column) is skipped and named in the report; the other files go on. A trip's name is
    its own where no other file has one of that name, else the file's path and the name
    (``a/trip.csv:trip``): two files of one name in two folders stay two trips. After matching,
    each trip's traversals are judged (:mod:`evroute.world.plausibility`): those across a trip
    meter's reset, all of a trip whose energy moves in steps coarser than its median traversal,
    those faster than :data:`evroute.world.plausibility.SPEED_FACTOR` × the road's limit +
    :data:`evroute.world.plausibility.SPEED_SLACK_MPS`, and U-turn legs the car did not drive are
    dropped, one line each in the report.

    Parameters
    ----------
    paths : sequence of path-like
        CSV or GPX traces (:func:`read_traces`), SUMO's battery output (``.xml``:
        :func:`read_sumo_battery`, with ``sumo_net``), any of them gzipped, or folders of them
        (:func:`evroute.world.trace_formats.trace_files`).
    net : evroute.roads.network.Network
    columns, capacity_kwh, units
        As in :func:`read_traces`.
    gps_noise_m : float
        The fixes' noise (m), for the matcher and the jumps between fixes.
    vehicle : Vehicle, optional
        For the kinetic split.
    progress : callable, optional
        ``progress(done, total)`` after each trip.
    jobs : int
        Processes matching trips side by side (each its own matcher; :func:`evroute.pool.process_map`,
        no pool with one); the table is the same for any number.
    sumo_net : path-like, optional
        The SUMO network a battery output was recorded on.
    boundary : {"centre", "sumo"}
        Where a traversal begins and ends (:func:`trip_traversals`).
    matcher : {"hmm", "leuven"}
        The map matcher (:data:`MATCHERS`).

    Returns
    -------
    (pandas.DataFrame, ImportReport)
        One row per traversal (:data:`IMPORT_COLUMNS`) and what was kept and dropped.
    """
    report = ImportReport()
    boundary = choice("boundary", boundary, BOUNDARIES)
    matcher = choice("matcher", matcher, tuple(MATCHERS))

    def read(p):
        if trace_kind(p) != "xml":
            return read_traces(p, columns, capacity_kwh, units=units, gps_noise_m=gps_noise_m, report=report)
        if sumo_net is None:
            raise EvrouteError(f"{p}: SUMO's battery output needs the SUMO network it was recorded on (--sumo-net)")
        return read_sumo_battery(p, sumo_net, report)

    fixes = []
    for p in trace_files(paths):
        try:
            fixes.append((str(p), read(p)))
        except EvrouteError as exc:
            message = str(exc) if str(p) in str(exc) else f"{p}: {exc}"
            report.flag("file skipped", f"{message}; file skipped")
            report.skipped.append(str(p))
    trips = _trips(fixes)
    todo = [g for _, _, _, g, _, _ in trips if len(g) >= 2]
    # matched in the trips' order, side by side or in this process: the same table for any number
    # of jobs, in any process (neither matcher's result depends on the hash seed)
    results = process_map(_TripMatching(net, gps_noise_m, vehicle, boundary, matcher), todo, jobs=jobs,
                          chunksize=max(1, len(todo) // (8 * max(jobs, 1))))
    roads = _roads(net)
    blocks: dict[str, list] = {"trip": [], "vehicle": [], "rows": [], "next": [], "file": []}
    try:
        for done, (path, name, vehicle_name, g, ok, quantum) in enumerate(trips, 1):
            if len(g) < 2:
                report.drop("fewer than 2 fixes")
                report.problems.append(f"{path}: trip {name!r} has {len(g)} fix; at least 2 are needed")
                continue
            _, (got, n, speed) = next(results)
            report.fixes_matched += n
            report.trips_speed_estimated += int(not np.isfinite(g.speed_mps.to_numpy()).all())
            if n < len(g):
                report.drop("fix off the network", len(g) - n)
            if not got:
                report.drop("no complete traversal")
                report.problems.append(f"{path}: trip {name!r} gave no complete traversal of an edge "
                                       f"({n} of {len(g)} fixes placed on the network)")
            else:
                rows = np.asarray(got, dtype=np.float64)
                keep, nxt = _judge(rows, t=g.time_s.to_numpy(), meter_ok=ok, quantum=quantum, speed=speed,
                                   roads=roads, where=f"{path}: trip {name!r}", report=report)
                if keep.any():
                    report.trips_kept += 1
                    m = int(keep.sum())
                    blocks["rows"].append(rows[keep])
                    blocks["next"].append(nxt[keep])
                    for key, value in (("trip", name), ("vehicle", vehicle_name), ("file", path)):
                        blocks[key].append(np.full(m, value, dtype=object))
            if progress is not None:
                progress(done, len(trips))
    finally:
        results.close()  # (after an error or Ctrl-C: stops the workers)
    table = _table(blocks)
    report.traversals = len(table)
    return table, report


def _trips(fixes: list) -> list[tuple]:
    """Each file's trips (a file's lie in a row each): (file, trip, vehicle, the fixes' numbers a
    worker needs, meter_ok, quantum_wh), a trip named by its file where another file has its name."""
    names = pd.Series([name for _, f in fixes for name in f.trip.unique().tolist()], dtype=object)
    shared = set(names[names.duplicated()].tolist())
    trips = []
    for path, f in fixes:
        trip = f.trip.to_numpy(object)
        starts = np.flatnonzero(np.r_[True, trip[1:] != trip[:-1]]) if len(f) else np.zeros(0, dtype=np.int64)
        ends = np.r_[starts[1:], len(f)].astype(np.int64)
        numbers = f[list(_MATCHED)].astype(np.float64).reset_index(drop=True)  # no text: quick to send
        ok, quantum, vehicles = f.meter_ok.to_numpy(bool), f.quantum_wh.to_numpy(np.float64), f.vehicle.to_numpy(object)
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            name = str(trip[a])
            trips.append((path, name if name not in shared else f"{path}:{name}", str(vehicles[a]),
                          numbers.iloc[a:b].reset_index(drop=True), ok[a:b], float(quantum[a])))
    return trips


def _table(blocks: dict) -> pd.DataFrame:
    """The import's table (:data:`IMPORT_COLUMNS`) from its trips' blocks of rows."""
    rows = np.concatenate(blocks["rows"]) if blocks["rows"] else np.zeros((0, len(TRAVERSAL_COLUMNS) - 2))
    columns = {c: rows[:, k] for k, c in enumerate(TRAVERSAL_COLUMNS[2:])}
    columns["edge"] = columns["edge"].astype(np.int64)
    columns["next_edge"] = (np.concatenate(blocks["next"]) if blocks["next"] else np.zeros(0)).astype(np.int64)
    for key in ("trip", "vehicle", "file"):
        columns[key] = np.concatenate(blocks[key]) if blocks[key] else np.zeros(0, dtype=object)
    return pd.DataFrame({c: columns[c] for c in IMPORT_COLUMNS}).astype({"trip": str, "vehicle": str, "file": str})


#: The columns of a trip's fixes a matching worker is sent.
_MATCHED = ("time_s", "lat", "lon", "speed_mps", "energy_wh")


def _roads(net) -> dict:
    e = net.edges
    return {"u": e.u.to_numpy(), "v": e.v.to_numpy(), "length": e.length_m.to_numpy(np.float64),
            "limit": e.speed_mps.to_numpy(np.float64)}


def plausible_traversals(table: pd.DataFrame, fixes: pd.DataFrame, net, *, speed=None, where: str = "",
                         report: ImportReport | None = None) -> pd.DataFrame:
    """One trip's traversals less what cannot be right (:mod:`evroute.world.plausibility`), each
    kind named once in ``report``: those across a trip meter's reset (the fixes' ``meter_ok``),
    those faster than the road allows, U-turn legs the car did not drive, and all of them where
    the energy moves in steps (``quantum_wh``) coarser than the median of the others. A kept
    traversal whose next one was dropped no longer names it (``next_edge`` −1: that turn was not
    measured).

    Parameters
    ----------
    table : pandas.DataFrame
        The trip's traversals in order (:data:`TRAVERSAL_COLUMNS` from ``edge`` on, or all).
    fixes : pandas.DataFrame
        The trip's fixes (:func:`read_traces`; without ``meter_ok`` and ``quantum_wh``, the meter
        is trusted and fine).
    net : evroute.roads.network.Network
    speed : array, optional
        The fixes' speeds (m/s; default :func:`trip_speeds` at 10 m of noise).
    where : str
        Names the trip in the report's lines.
    report : ImportReport, optional

    Returns
    -------
    pandas.DataFrame
        The traversals kept.
    """
    report = report if report is not None else ImportReport()
    if not len(table):
        return table
    ok = fixes.meter_ok.to_numpy(bool) if "meter_ok" in fixes.columns else np.ones(len(fixes), dtype=bool)
    quantum = float(fixes.quantum_wh.iat[0]) if "quantum_wh" in fixes.columns else 0.0
    speed = trip_speeds(fixes, 10.0) if speed is None else np.asarray(speed, dtype=np.float64)
    rows = table[list(TRAVERSAL_COLUMNS[2:])].to_numpy(np.float64)
    keep, nxt = _judge(rows, t=fixes.time_s.to_numpy(np.float64), meter_ok=ok, quantum=quantum, speed=speed,
                       roads=_roads(net), where=where, report=report)
    return table.assign(next_edge=nxt)[keep].reset_index(drop=True)


def _judge(rows: np.ndarray, *, t, meter_ok, quantum: float, speed, roads: dict, where: str, report: ImportReport):
    """:func:`plausible_traversals` on a trip's traversals as an array (the columns of
    :data:`TRAVERSAL_COLUMNS` from ``edge`` on): which to keep, and each one's next edge."""
    col = {c: k for k, c in enumerate(TRAVERSAL_COLUMNS[2:])}
    edge = rows[:, col["edge"]].astype(np.int64)
    nxt = rows[:, col["next_edge"]].astype(np.int64)
    enter, seconds = rows[:, col["enter_s"]], rows[:, col["seconds"]]
    v_top, energy = rows[:, col["v_top"]], rows[:, col["energy_wh"]]
    leave = enter + seconds
    keep = np.ones(len(rows), dtype=bool)
    reset = np.flatnonzero(~np.asarray(meter_ok, dtype=bool))
    if reset.size:  # (named when the trace was read)
        across = ((enter[:, None] < t[reset][None, :]) & (leave[:, None] > t[reset - 1][None, :])).any(axis=1)
        report.drop("traversal across a meter reset", int(across.sum()))
        keep &= ~across
    fast = keep & too_fast(v_top, roads["limit"][edge])
    if fast.any():
        worst = int(np.argmax(np.where(fast, v_top, -np.inf)))
        report.flag("too fast", f"{where}: {fast.sum():,} traversal{'s' if fast.sum() > 1 else ''} faster than the "
                    f"road allows (up to {v_top[worst]:.1f} m/s where the limit is {roads['limit'][edge[worst]]:.1f} "
                    f"m/s; the bound is {SPEED_FACTOR:g} × the limit + {SPEED_SLACK_MPS:g} m/s): dropped")
        report.drop("faster than the road allows", int(fast.sum()))
        keep &= ~fast
    loops = keep & phantom_loops(edge, nxt, enter=enter, seconds=seconds, t=t, speed=speed, u=roads["u"],
                                 v=roads["v"], length=roads["length"])
    if loops.any():
        report.flag("phantom loop", f"{where}: {loops.sum():,} U-turn leg{'s' if loops.sum() > 1 else ''} the car did "
                    f"not drive (the speeds cover less than half the edge: GPS jitter while it stood, entered at "
                    f"{enter[loops][0]:.0f} s): dropped")
        report.drop("phantom loop", int(loops.sum()))
        keep &= ~loops
    typical = float(np.median(np.abs(energy[keep]))) if keep.any() else np.inf
    if quantum > typical:
        steps = f"moves in steps of {quantum:,.1f} Wh" if np.isfinite(quantum) else "never changes"
        report.flag("coarse energy", f"{where}: its energy {steps}, coarser than its median traversal "
                    f"({typical:,.1f} Wh; a state of charge in whole percent?): its {keep.sum():,} traversals "
                    "dropped (give the energy used, the power, or a finer state of charge)")
        report.drop("energy coarser than an edge", int(keep.sum()))
        keep[:] = False
    nxt = nxt.copy()
    nxt[:-1] = np.where(keep[1:], nxt[:-1], -1)  # (a next_edge ≥ 0 is the next row's edge)
    return keep, nxt


def read_drives(path: str | Path, n_edges: int) -> pd.DataFrame:
    """A table of traversals written by ``evroute drives import`` (:data:`TRAVERSAL_COLUMNS`),
    checked against a network of ``n_edges`` edges.

    Returns
    -------
    pandas.DataFrame

    Raises
    ------
    EvrouteError
        The file cannot be read, lacks the columns, or names edges the network does not have (it
        was imported on another network).
    """
    try:
        table = pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise EvrouteError(f"cannot read the drives table {path}: {getattr(exc, 'strerror', None) or exc}") from None
    missing = [c for c in ("edge", "energy_wh", "edge_wh") if c not in table.columns]
    if missing:
        raise EvrouteError(f"{path} is not a drives table of evroute drives import: no column {', '.join(missing)}")
    edges = table.edge.to_numpy()
    if len(edges) and (edges.min() < 0 or edges.max() >= n_edges):
        raise EvrouteError(f"{path} names edge {int(edges.max())} but the network has {n_edges:,} edges: "
                           f"were the drives imported on another network?")
    return table


def fleet_prior_mean(e_det, table: pd.DataFrame, prior_var: float, *, column: str = "edge_wh"):
    """The prior mean a fleet's drives give a new vehicle: per edge, the posterior mean of its
    traversals under the independent prior N(E_det, σ₀²) and the traversals' own noise,
    E_det where the fleet never drove.

    With n traversals of mean ȳ on an edge, m = E_det + n σ₀² / (n σ₀² + ς²) (ȳ − E_det), where
    ς² is the traversals' variance within edges, pooled over every edge driven twice or more (the
    conjugate normal update; paper 003's BI baseline, Sec. 3, is the same update online).

    Parameters
    ----------
    e_det : array (E,)
        The physics prior mean (Wh).
    table : pandas.DataFrame
        Traversals (:func:`read_drives`).
    prior_var : float
        σ₀² (Wh²).
    column : str
        ``edge_wh`` (at a constant kinetic state, as the SUMO truth of edges plus turns books
        an edge) or ``energy_wh`` (whole traversals).

    Returns
    -------
    (numpy.ndarray, numpy.ndarray, float)
        The prior mean per edge, the traversals per edge, and ς² (Wh²).
    """
    e_det = np.asarray(e_det, dtype=np.float64)
    edges = table.edge.to_numpy(np.int64)
    y = table[column].to_numpy(np.float64)
    counts = np.bincount(edges, minlength=e_det.size).astype(np.float64)
    means = np.bincount(edges, weights=y, minlength=e_det.size) / np.maximum(counts, 1.0)
    dof = counts.sum() - np.count_nonzero(counts)
    resid = y - means[edges]
    noise_var = float(resid @ resid / dof) if dof > 0 else float(prior_var)
    denom = counts * prior_var + noise_var  # (0 only where nobody drove and the traversals never differ)
    gain = np.divide(counts * prior_var, denom, out=np.zeros_like(denom), where=denom > 0)
    mean = np.where(counts > 0, e_det + gain * (means - e_det), e_det)
    return mean, counts.astype(np.int64), noise_var


def transfer_traversals(table, e_fleet, e_det, *, rho: float):
    """Another vehicle's traversals in this vehicle's units: each ``edge_wh`` becomes E_det plus ρ
    times what it measured beyond its own vehicle's E_det, E_det + ρ (y − E_fleet), so that the
    conjugate update (:func:`evroute.world.drives.fleet_prior_mean`) weighs their spread, ρ² ς²,
    against this vehicle's σ₀²."""
    edge = table.edge.to_numpy(np.int64)
    moved = e_det[edge] + rho * (table.edge_wh.to_numpy(np.float64) - e_fleet[edge])
    return table.assign(edge_wh=moved)


def fleet_ratio(e_det, fleet_mean) -> float:
    """The fleet's energies over E_det, one factor: least squares through the origin over the edges
    the fleet drove, Σ E_det·m / Σ E_det² (1 where that is undefined)."""
    e_det, fleet_mean = np.asarray(e_det, dtype=np.float64), np.asarray(fleet_mean, dtype=np.float64)
    denom = float(e_det @ e_det)
    return float(e_det @ fleet_mean) / denom if denom > 0 else 1.0


def drives_route(net, spec, table: pd.DataFrame, *, vehicle: Vehicle | None = None, prior_std: float | None = None,
                 oracle=None) -> dict:
    """The least-energy route of a trip under what drives measured, its edges and its junctions.

    An edge weighs its posterior mean at a constant kinetic state (:func:`fleet_prior_mean`: the
    physics prior E_det updated by the drives' ``edge_wh``), with sd √(σ₀² ς² / (n σ₀² + ς²)) (σ₀
    where nobody drove); a junction, the fleet's posterior of its dissipation
    (:func:`evroute.world.junctions.fleet_turns`: what the cars that took it dissipated beyond their
    own change of kinetic energy, shrunk towards physics by as much as the fleet's turns say; physics
    alone where no two cars took the same turn), as the SUMO truth of edges plus turns books them.
    The change of kinetic level a turn also costs is the same along every route between two edges
    and is left out.

    The route minimises Σ max(μ_e, floor_e) over its edges plus its turns' dissipation,
    regeneration kept (the potential weight rule, :func:`evroute.bandit.policies.route_weights`;
    Dijkstra on non-negative weights).

    Parameters
    ----------
    net : evroute.roads.network.Network
    spec : evroute.physics.routes.RouteSpec
        The trip.
    table : pandas.DataFrame
        Traversals (:func:`read_drives`).
    vehicle : Vehicle, optional
        For E_det, the floors and the junctions' physics (default the paper's EV).
    prior_std : float, optional
        σ₀ (Wh; default the paper's 0.25 σ_det).

    Returns
    -------
    dict
        ``kind`` ("drives"), ``energy_wh`` (Σ posterior means plus the junctions' dissipation),
        ``edges_wh`` and ``junctions_wh`` (the two parts), ``energy_sd_wh`` (independent edges),
        ``length_m``, ``time_s``, ``n_edges``, ``edges``, per edge ``edge_mean_wh``, ``edge_sd_wh``
        and ``edge_traversals``, per turn ``turn_wh`` (one fewer), and ``edges_driven_share`` (of the
        route's length, driven by the fleet).
    """
    e_det = edge_energies(net, vehicle)
    s0 = float(prior_std) if prior_std is not None else PRIOR_SCALE * float(np.std(e_det))
    mean, counts, noise_var = fleet_prior_mean(e_det, table, s0 * s0)
    sd = np.sqrt(s0 * s0 * noise_var / (counts * s0 * s0 + noise_var))
    try:
        turns = fleet_turns(table, net, vehicle).mean
    except EvrouteError:  # no two cars took the same turn: physics alone
        turns = physics_turns(net, vehicle).mean
    return posterior_route(net, spec, edge_mean=mean, edge_sd=sd, edge_counts=counts, turn_mean=turns,
                           vehicle=vehicle, oracle=oracle)


def posterior_route(net, spec, *, edge_mean, edge_sd, edge_counts, turn_mean, vehicle: Vehicle | None = None,
                    oracle=None, kind: str = "drives") -> dict:
    """The least-energy route of a trip under a posterior of the edges (at a constant kinetic state)
    and of the junctions' dissipation: Σ max(μ_e, floor_e) over its edges plus its turns'
    dissipation, regeneration kept (the potential weight rule,
    :func:`evroute.bandit.policies.route_weights`; Dijkstra on non-negative weights).

    Parameters
    ----------
    net : evroute.roads.network.Network
    spec : evroute.physics.routes.RouteSpec
        The trip.
    edge_mean, edge_sd, edge_counts : array (E,)
        Each edge's posterior mean and sd (Wh) and the traversals it is measured by.
    turn_mean : array (A,)
        Each legal turn's dissipation (Wh, in the order of ``conn_src``).
    vehicle : Vehicle, optional
        For the floors and the potential (default the paper's EV).
    kind : str
        The route's ``kind``.

    Returns
    -------
    dict
        As :func:`drives_route`.
    """
    mean, sd, counts = (np.asarray(x, dtype=np.float64) for x in (edge_mean, edge_sd, edge_counts))
    e = net.edges
    length = e.length_m.to_numpy(np.float64)
    floor, potential = energy_floor_wh(length, e.grade.to_numpy(), vehicle)
    w, arc = route_weights(mean, "potential", 0.0, floor=floor, potential=potential,
                           turns=np.asarray(turn_mean, dtype=np.float64))
    oracle = oracle or Oracle.from_network(net)
    p = oracle.shortest_path(w, spec.start, spec.end, turn_weights=arc).edges
    turn_wh = arc[oracle.turn_index(p)]
    time_s = length / e.speed_mps.to_numpy()
    driven = counts[p] > 0
    edges_wh = float(mean[p].sum())
    return {"kind": kind, "energy_wh": edges_wh + float(turn_wh.sum()), "edges_wh": edges_wh,
            "junctions_wh": float(turn_wh.sum()), "energy_sd_wh": float(np.sqrt((sd[p] ** 2).sum())),
            "length_m": float(length[p].sum()), "time_s": float(time_s[p].sum()), "n_edges": len(p),
            "edges": [int(x) for x in p], "edge_mean_wh": mean[p].tolist(), "edge_sd_wh": sd[p].tolist(),
            "edge_traversals": counts[p].astype(np.int64).tolist(), "turn_wh": turn_wh.tolist(),
            "edges_driven_share": float(length[p][driven].sum() / length[p].sum()) if len(p) else 0.0}
