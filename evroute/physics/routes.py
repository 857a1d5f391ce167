"""Routes: the paper's start/end edges and coordinates snapped to edges.

A route is a start edge and an end edge of a :class:`~evroute.roads.network.Network`. Named
routes (``monaco:A``...) live in ``data/routes.json``; the synthetic network computes its
own from the generated city; any route can be given as two ``LAT,LON`` points, each
snapped to the nearest edge of the component.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import EvrouteError
from ..registry import load_registry
from ..roads.names import SYNTHETIC_SIZED
from ..roads.oracle import Oracle
from ..validate import parse_latlon
from .energy import edge_energy_wh

#: A point farther than this from every edge is "outside the network".
MAX_SNAP_M = 1000.0
#: Radius of the local projection used to snap points to roads (the IUGG mean radius). It
#: differs from :data:`evroute.geo.EARTH_RADIUS_M` (osmnx's) in the 8th digit, and is kept:
#: a named route's end often lies at equal distance from several edges (the two directions
#: of a two-way road, the edges at a node), and which one ``argmin`` picks depends on the
#: last bits of these distances, so changing the radius would change the paper's routes.
#: Breaking such ties by a rule is a behaviour change left to its own issue.
SNAP_EARTH_RADIUS_M = 6_371_008.8


@dataclass(frozen=True)
class RouteSpec:
    """A resolved route: start and end edge ids, with how they were chosen."""

    name: str
    start: int
    end: int
    start_point: tuple[float, float] | None = None  # (lat, lon) asked for, if any
    end_point: tuple[float, float] | None = None

    def to_dict(self) -> dict:
        return {"name": self.name, "start_edge": self.start, "end_edge": self.end,
                "start_point": self.start_point, "end_point": self.end_point}






def route_names(network: str | None = None) -> list[str]:
    """Named routes, optionally only those of one network (a synthetic city, ``synthetic``
    or ``synthetic-<N>k``, has its own routes A and B)."""
    if network is not None and SYNTHETIC_SIZED.match(network):
        return [f"{network}:A", f"{network}:B"]
    names = list(load_registry("routes")) + ["synthetic:A", "synthetic:B"]
    return [n for n in names if network is None or n.split(":")[0] == network]


def _segment_distances(net, lat: float, lon: float) -> np.ndarray:
    """Distance (m) from a point to every edge's polyline (local equirectangular projection)."""
    cos_lat = math.cos(math.radians(lat))
    k = math.radians(1.0) * SNAP_EARTH_RADIUS_M
    offsets = np.cumsum([0] + [len(g) for g in net.geometry])
    coords = np.concatenate(net.geometry)
    x = (coords[:, 0] - lon) * k * cos_lat
    y = (coords[:, 1] - lat) * k
    # segments between consecutive vertices of the same edge
    starts = np.arange(len(coords) - 1)
    valid = np.ones(len(coords) - 1, dtype=bool)
    valid[offsets[1:-1] - 1] = False
    starts = starts[valid]
    ax, ay, bx, by = x[starts], y[starts], x[starts + 1], y[starts + 1]
    dx, dy = bx - ax, by - ay
    seg2 = dx * dx + dy * dy
    t = np.clip(np.where(seg2 > 0, -(ax * dx + ay * dy) / np.where(seg2 > 0, seg2, 1), 0.0), 0, 1)
    d = np.hypot(ax + t * dx, ay + t * dy)
    edge_of_segment = np.searchsorted(offsets, starts, side="right") - 1
    out = np.full(net.n_edges, np.inf)
    np.minimum.at(out, edge_of_segment, d)
    return out


def snap_point(net, lat: float, lon: float, *, candidates: np.ndarray | None = None,
               label: str = "point") -> int:
    """The edge nearest to (lat, lon), among ``candidates`` if given.

    Raises
    ------
    EvrouteError
        When the point lies outside the network (farther than 1 km from every edge).
    """
    s, w, n, e = net.bounds
    margin = 0.01
    if not (s - margin <= lat <= n + margin and w - margin <= lon <= e + margin):
        raise EvrouteError(f"{label} {lat:.5f},{lon:.5f} lies outside the network "
                           f"{net.name} (bounds {s:.4f},{w:.4f} to {n:.4f},{e:.4f})")
    d = _segment_distances(net, lat, lon)
    if candidates is not None and len(candidates):
        mask = np.full(net.n_edges, np.inf)
        mask[candidates] = 0.0
        d = d + mask
    best = int(np.argmin(d))
    if not d[best] <= MAX_SNAP_M:
        raise EvrouteError(f"{label} {lat:.5f},{lon:.5f} is {d[best]:.0f} m from the nearest road of "
                           f"{net.name} (more than {MAX_SNAP_M:.0f} m): outside the network")
    return best


def _endpoint(net, spec: dict, label: str) -> tuple[int, tuple[float, float]]:
    lat, lon = spec["near"]
    candidates = None
    if "way" in spec:
        want_reversed = spec.get("direction", "forward") == "backward"
        cand = [i for i, ws in enumerate(net.edge_ways) if spec["way"] in ws]
        cand = [i for i in cand if bool(net.edges.reversed.iat[i]) == want_reversed] or cand
        candidates = np.array(cand, dtype=np.int64) if cand else None
    return snap_point(net, lat, lon, candidates=candidates, label=label), (lat, lon)


def resolve_route(net, route: str | None = None, from_point: str | None = None,
                  *,
                  to_point: str | None = None) -> RouteSpec:
    """Resolve a named route (``A``, ``B`` or ``NET:A``) or two ``LAT,LON`` points.

    With neither given, the network's route ``A``.

    Returns
    -------
    RouteSpec
        The trip: its name, start and end edge ids and the points asked for.
    """
    if (from_point is None) != (to_point is None):
        raise EvrouteError("a trip between two points needs both: --route LAT,LON:LAT,LON")
    if from_point is not None:
        if route is not None:
            raise EvrouteError("give a named route or two points (--route LAT,LON:LAT,LON), not both")
        a = parse_latlon(from_point, "--route's start")
        b = parse_latlon(to_point, "--route's end")
        start = snap_point(net, *a, label="the start")
        end = snap_point(net, *b, label="the end")
        if start == end:
            raise EvrouteError(f"the points {from_point} and {to_point} snap to the same edge {start} of {net.name}; "
                               "a trip needs two different ends")
        return RouteSpec(f"{a[0]:.5f},{a[1]:.5f}->{b[0]:.5f},{b[1]:.5f}", start, end, a, b)
    route = route or "A"
    full = route if ":" in route else f"{net.name}:{route}"
    net_name, _, letter = full.partition(":")
    if net_name != net.name:
        raise EvrouteError(f"route {full!r} belongs to network {net_name!r}, not {net.name!r}")
    if "route_points" in net.meta:  # the synthetic city computes its own routes
        points = net.meta["route_points"]
        if letter not in points:
            raise EvrouteError(f"unknown route {full!r}; routes of {net.name}: "
                               + ", ".join(f"{net.name}:{k}" for k in points))
        a, b = (tuple(p) for p in points[letter])
        return RouteSpec(full, snap_point(net, *a, label="start"), snap_point(net, *b, label="end"), a, b)
    reg = load_registry("routes")
    if full not in reg:
        known = [k for k in reg if k.startswith(net.name + ":")]
        raise EvrouteError(f"unknown route {full!r}; routes of {net.name}: {', '.join(known) or 'none'} "
                           "(or give two points: --route LAT,LON:LAT,LON)")
    spec = reg[full]
    start, a = _endpoint(net, spec["start"], "start")
    end, b = _endpoint(net, spec["end"], "end")
    return RouteSpec(full, start, end, a, b)


def edge_energies(net, vehicle=None) -> np.ndarray:
    """E_det (Wh) of every edge of ``net`` for ``vehicle``; an energy that is not a
    finite number is one line naming the vehicle.

    Returns
    -------
    numpy.ndarray
        E_det of every edge, Wh (negative where the car recuperates), shape (E,).
    """
    e = net.edges
    with np.errstate(over="ignore", invalid="ignore"):
        out = edge_energy_wh(e.length_m.to_numpy(), e.incline_rad.to_numpy(), e.speed_mps.to_numpy(), vehicle=vehicle)
    if not np.all(np.isfinite(out)):
        name = getattr(vehicle, "name", "sumo-ev")
        raise EvrouteError(f"vehicle {name!r} gives energies that are not finite numbers on network {net.name}; "
                           "check its parameters")
    return out


def reference_routes(net, spec: RouteSpec, vehicle=None, *, oracle=None) -> list[dict]:
    """The energy-optimal, shortest and fastest routes of ``spec``.

    The energy route is exact with negative energies (Bellman–Ford on E_det, which has no
    negative cycles when grades come from node elevations); shortest minimises length and
    fastest minimises length / speed (Dijkstra).

    Returns
    -------
    list of dict
        One dict per kind with ``kind``, ``energy_wh``, ``length_m``, ``time_s``,
        ``n_edges`` and ``edges``.
    """
    oracle = oracle or Oracle.from_network(net)
    energy = edge_energies(net, vehicle)
    length = net.edges.length_m.to_numpy()
    time_s = length / net.edges.speed_mps.to_numpy()
    out = []
    for kind, route in (("energy", oracle.bellman_ford_path(energy, spec.start, spec.end)),
                        ("shortest", oracle.shortest_path(length, spec.start, spec.end)),
                        ("fastest", oracle.shortest_path(time_s, spec.start, spec.end))):
        p = route.edges
        out.append({"kind": kind, "energy_wh": float(energy[p].sum()), "length_m": float(length[p].sum()),
                    "time_s": float(time_s[p].sum()), "n_edges": len(p), "edges": [int(x) for x in p]})
    return out
