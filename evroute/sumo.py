"""SUMO's electric-vehicle model in simulated traffic as a ground truth: the energy atlas.

The paper's energy model (003 Eq. 8, Table 2) is the constant-speed form of SUMO's battery model
(Table 2's parameters are SUMO's defaults). An **energy atlas** drives the network in SUMO, with
background traffic and probe vehicles, every vehicle carrying the battery device with the
parameters of the evroute vehicle, and records one row per traversal of an evroute edge: which
edge, which vehicle, when it entered, how long it took and the electricity it used (Wh, negative
where it recuperated). The truth ``--truth sumo[...]`` (:func:`sumo_truth`) takes an edge's
expected energy as the mean of its traversals and an observation as one recorded traversal.

Pipeline (:func:`build_atlas`), each step a SUMO tool of the optional extra
``pip install "evroute[sumo]"`` (eclipse-sumo, sumolib):

1. ``netconvert`` converts the same OSM input evroute reads (passenger roads, elevations from
   the ``ele`` tags or the DEM given);
2. every evroute edge is mapped to its chain of SUMO edges (junction ids are the OSM node ids;
   a chain follows the edge's OSM way from its tail node to its head node); the share mapped is
   reported and an edge without a chain is a warning, never a silent gap;
3. ``randomTrips.py`` makes the background demand (``rate`` vehicles an hour over ``hours``) and
   probe vehicles cover every edge on a route between the trip's ends ``probes`` times;
4. ``sumo`` runs with the emission output as Parquet (the per-second electricity of every
   vehicle and its lane); per-second rows are summed per vehicle and SUMO edge, chains are
   joined into evroute edges, and a traversal counts only when complete (the first and last
   edge of a trip are partial and dropped). Energy spent on a junction's internal lanes counts
   for the edge before it.

The atlas is cached like every other artefact (keyed by the network, the vehicle, the demand,
the seed and SUMO's version): a second call is instant.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd

from .cache import CacheEntry, make_key
from .energy import Vehicle
from .environments import Truth, register_truth
from .errors import EvrouteError, EvrouteWarning
from .io import atomic_write_text
from .network import network_spec, resolve_osm_path
from .osm import write_osm_xml
from .progress import stage
from .specs import Option
from .synthetic import synthetic_graph
from .validate import in_range, int_range, nonneg_float

__all__ = ["SUMO_INSTALL", "Atlas", "AtlasTruth", "sumo_truth", "build_atlas", "sumo_home", "vtype_xml", "map_edges", "traversals",
           "ATLAS_COLUMNS"]

#: What to run when SUMO is missing.
SUMO_INSTALL = 'pip install "evroute[sumo]"'
#: The atlas's table: one row per complete traversal of an evroute edge.
ATLAS_COLUMNS = ("edge", "vehicle", "enter_s", "seconds", "energy_wh")
ATLAS_VERSION = 2  # 2: no auxiliary power (the constantPowerIntake parameter)


def sumo_home() -> Path:
    """SUMO's folder (``bin/``, ``tools/``) from the ``eclipse-sumo`` package; one error line
    naming the install command when it is missing."""
    try:
        import sumo  # the eclipse-sumo wheel (binaries and tools)
    except ImportError:
        raise EvrouteError(f"SUMO is not installed: {SUMO_INSTALL}") from None
    return Path(sumo.SUMO_HOME)


def sumo_version() -> str:
    """The installed eclipse-sumo version."""
    from importlib.metadata import version

    sumo_home()
    return version("eclipse-sumo")


def _run(args: list[str], what: str, cwd: Path) -> str:
    """Run a SUMO tool; its stderr is returned (warnings); a failure is one error line."""
    env = {**os.environ, "SUMO_HOME": str(sumo_home())}
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [x for x in (proc.stderr + proc.stdout).splitlines() if x.strip() and "proj.db" not in x]
        raise EvrouteError(f"{what} failed: {lines[-1] if lines else f'exit code {proc.returncode}'}")
    return proc.stderr


def vtype_xml(vehicle: Vehicle, type_id: str = "ev") -> str:
    """A SUMO vType for ``vehicle`` with the battery device, its parameters those of Eq. 8: mass,
    frontal area, drag and rolling coefficients, the power-train and recuperation efficiencies;
    no auxiliary power, no radial drag (SUMO's defaults are the paper's Table 2; the rotating
    mass, which Eq. 8 has not, is SUMO's and matters only when the car accelerates)."""
    return (f'<vType id="{type_id}" vClass="passenger" emissionClass="Energy/unknown" '
            f'mass="{vehicle.mass_kg!r}" frontSurfaceArea="{vehicle.frontal_area_m2!r}" '
            f'airDragCoefficient="{vehicle.drag_coefficient!r}" rollDragCoefficient="{vehicle.rolling_resistance!r}" '
            f'propulsionEfficiency="{vehicle.eta_plus!r}" recuperationEfficiency="{vehicle.eta_minus!r}" '
            'constantPowerIntake="0" radialDragCoefficient="0">'
            '<param key="has.battery.device" value="true"/>'
            # SUMO 1.28 reads the auxiliary power from the parameter (its default is 100 W, measured:
            # tests/test_sumo.py's flat road is 2.5 % above Eq. 8 without it)
            '<param key="constantPowerIntake" value="0"/></vType>')


# --------------------------------------------------------------------------------------
# evroute edges → chains of SUMO edges
# --------------------------------------------------------------------------------------


def _way(sumo_edge_id: str) -> int | None:
    m = re.fullmatch(r"-?(\d+)(?:#\d+)?", sumo_edge_id)
    return int(m.group(1)) if m else None


def map_edges(net, sumo_edges: pd.DataFrame) -> dict[int, list[str]]:
    """The chain of SUMO edges of every evroute edge that has one.

    ``sumo_edges``: one row per SUMO edge (``id``, ``from``, ``to``, ``length``). A chain runs
    from the evroute edge's tail node to its head node (SUMO's junction ids are the OSM node
    ids), preferring SUMO edges of the edge's own OSM way; a chain on other ways is accepted
    only when its length is plausible (SUMO's edges stop at the junctions' borders, so a chain
    is up to a few junction radii shorter than the evroute edge between junction centres).
    """
    g = nx.MultiDiGraph()
    for r in sumo_edges.itertuples(index=False):
        g.add_edge(str(r[1]), str(r[2]), key=str(r[0]), length=float(r[3]), way=_way(str(r[0])))
    e = net.edges
    out: dict[int, list[str]] = {}
    for i, (u, v, way, length) in enumerate(zip(e.u.to_numpy(), e.v.to_numpy(), e.osm_way.to_numpy(),
                                                  e.length_m.to_numpy(), strict=True)):
        u, v = str(u), str(v)
        if u not in g or v not in g:
            continue
        tol = 0.05 * length + 5.0

        def weight(a, b, d, way=way):
            return min(x["length"] * (1.0 if x["way"] == way else 1.5) for x in d.values())
        try:
            nodes = nx.dijkstra_path(g, u, v, weight=weight)
        except nx.NetworkXNoPath:
            continue
        chain, total = [], 0.0
        for a, b in zip(nodes[:-1], nodes[1:], strict=True):
            key, data = min(g[a][b].items(), key=lambda kv: (kv[1]["way"] != way, kv[1]["length"]))
            chain.append(key)
            total += data["length"]
        same_way = all(g[a][b][k]["way"] == way for a, b, k in zip(nodes[:-1], nodes[1:], chain, strict=True))
        if same_way or 0.5 * length - tol <= total <= 1.05 * length + tol:
            out[i] = chain
    return out


def traversals(emissions: pd.DataFrame, chains: dict[int, list[str]]) -> pd.DataFrame:
    """One row per complete traversal of an evroute edge (:data:`ATLAS_COLUMNS`) from SUMO's
    per-second emission rows (``time``, ``vehicle``, ``lane``, ``electricity`` in Wh per second of
    a 1 s step).

    Rows on a junction's internal lanes (``:...``) count for the edge before them; a vehicle's
    first and last SUMO edge are partial (it departs and arrives inside them) and dropped; an
    evroute edge's traversal is its whole chain, in order, by the same vehicle.
    """
    d = emissions.sort_values(["vehicle", "time"], kind="stable").reset_index(drop=True)
    lane = d.lane.astype(str)
    edge = lane.str.rsplit("_", n=1).str[0].where(~lane.str.startswith(":"))
    d["sumo_edge"] = edge.groupby(d.vehicle, sort=False).ffill()
    d = d[d.sumo_edge.notna()]
    new = (d.sumo_edge != d.sumo_edge.shift()) | (d.vehicle != d.vehicle.shift())
    d = d.assign(seg=new.cumsum())
    seg = d.groupby("seg", sort=True).agg(vehicle=("vehicle", "first"), sumo_edge=("sumo_edge", "first"),
                                          enter=("time", "min"), leave=("time", "max"),
                                          energy=("electricity", "sum"))
    seg["leave"] += 1.0  # the last second of the edge ends a step later
    first = seg.groupby("vehicle", sort=False).cumcount() == 0
    last = seg.groupby("vehicle", sort=False).cumcount(ascending=False) == 0
    seg = seg[~first & ~last].reset_index(drop=True)
    where = {s: (edge_id, k, len(chain)) for edge_id, chain in chains.items() for k, s in enumerate(chain)}
    info = [where.get(s, (-1, -1, 0)) for s in seg.sumo_edge]
    seg["edge"] = np.array([x[0] for x in info], dtype=np.int64)
    seg["pos"] = np.array([x[1] for x in info], dtype=np.int64)
    seg["n"] = np.array([x[2] for x in info], dtype=np.int64)
    seg = seg[seg.edge >= 0].reset_index(drop=True)
    rows = []
    veh, e_, pos, n = seg.vehicle.to_numpy(), seg.edge.to_numpy(), seg.pos.to_numpy(), seg.n.to_numpy()
    enter, leave, energy = seg.enter.to_numpy(), seg.leave.to_numpy(), seg.energy.to_numpy()
    i = 0
    while i < len(seg):
        if pos[i] == 0:
            j = i
            while j + 1 < len(seg) and veh[j + 1] == veh[i] and e_[j + 1] == e_[i] and pos[j + 1] == pos[j] + 1 \
                    and enter[j + 1] == leave[j]:
                j += 1
            if pos[j] == n[i] - 1:
                rows.append((int(e_[i]), str(veh[i]), float(enter[i]), float(leave[j] - enter[i]),
                             float(energy[i:j + 1].sum())))
            i = j + 1
        else:
            i += 1
    out = pd.DataFrame(rows, columns=list(ATLAS_COLUMNS))
    return out.astype({"edge": np.int64, "enter_s": np.float64, "seconds": np.float64, "energy_wh": np.float64})


# --------------------------------------------------------------------------------------
# the atlas
# --------------------------------------------------------------------------------------


@dataclass
class Atlas:
    """An energy atlas: the traversals (:data:`ATLAS_COLUMNS`) and what was done to get them."""

    table: pd.DataFrame
    summary: dict
    key: str

    def mean_energy(self, n_edges: int, hour: float | None = None, min_traversals: int = 1):
        """Per evroute edge: the mean energy of its traversals (entered in hour ``hour`` of the
        simulation when given) and their number; NaN where fewer than ``min_traversals``."""
        t = self.table
        if hour is not None:
            t = t[(t.enter_s >= 3600.0 * hour) & (t.enter_s < 3600.0 * (hour + 1))]
        counts = np.bincount(t.edge.to_numpy(), minlength=n_edges)
        sums = np.bincount(t.edge.to_numpy(), weights=t.energy_wh.to_numpy(), minlength=n_edges)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(counts >= max(1, min_traversals), sums / counts, np.nan)
        return mean, counts


def _osm_input(net, network: str | None, osm: str | None, folder: Path) -> Path:
    """The OSM file evroute read the network from (a synthetic city is written out as OSM)."""
    if osm is not None:
        return Path(osm)
    m = re.fullmatch(r"synthetic\(seed=(\d+), size=(\d+)\)", str(net.meta.get("source", "")))
    if m is not None:  # the synthetic city this network was built from, whatever its name
        path = folder / "network.osm"
        write_osm_xml(synthetic_graph(seed=int(m.group(1)), size=int(m.group(2))), path)
        return path
    if network is None:
        raise EvrouteError("the sumo truth needs the run's network name or OSM file")
    spec = network_spec(network) if not Path(network).suffix else None
    if spec is not None and spec.get("kind") == "synthetic":
        path = folder / "network.osm"
        write_osm_xml(synthetic_graph(seed=spec["seed"], size=spec["size"]), path)
        return path
    return resolve_osm_path(network, None) if spec is not None else Path(network)


def _corridor_routes(net, oracle, start: int, end: int, probes: int) -> list[list[int]]:
    """Routes from ``start`` to ``end`` (each driven by a probe vehicle) through every edge that
    lies on some route between them, each edge on at least ``probes`` routes (greedy: the
    fastest route through each edge not yet covered enough)."""
    e = net.edges
    w = e.length_m.to_numpy() / e.speed_mps.to_numpy()
    on = oracle.reachable(start) & _reaches(net, end)
    covered = np.zeros(net.n_edges, np.int64)
    routes = []
    for edge in np.flatnonzero(on):
        while covered[edge] < probes:
            try:
                a = oracle.shortest_path(w, start, int(edge)).edges
                b = oracle.shortest_path(w, int(edge), end).edges
            except EvrouteError:
                break
            route = list(a) + list(b[1:])
            if len(set(route)) != len(route) and covered[edge] > 0:
                break  # a loop through the edge: one probe is enough
            routes.append(route)
            np.add.at(covered, np.unique(route), 1)
    return routes


def _reaches(net, end: int) -> np.ndarray:
    """Edges from which ``end`` can be reached (on the line graph)."""
    g = nx.DiGraph()
    g.add_nodes_from(range(net.n_edges))
    g.add_edges_from(zip(net.conn_src.tolist(), net.conn_dst.tolist(), strict=True))
    mask = np.zeros(net.n_edges, bool)
    mask[list(nx.ancestors(g, end) | {end})] = True
    return mask


def build_atlas(net, network: str, vehicle: Vehicle, *, oracle=None, start: int | None = None,
                end: int | None = None, rate: float = 1800.0, hours: float = 0.5, probes: int = 3,
                seed: int = 0, osm: str | None = None, dem: str | None = None, use_cache: bool = True) -> Atlas:
    """The energy atlas of ``net`` (see the module docstring), built once and cached.

    Parameters
    ----------
    net : evroute.network.Network
    network : str
        Its name (or OSM file), as given to :func:`evroute.network.load_network`.
    vehicle : evroute.energy.Vehicle
        Every vehicle of the simulation, background and probes, is this car.
    oracle, start, end : optional
        With a trip, probe vehicles drive every edge on a route between its ends ``probes``
        times.
    rate, hours : float
        Background demand: ``rate`` random trips an hour over ``hours`` hours (SUMO's
        ``randomTrips.py``, fringe factor 5).
    seed : int
        Seeds the demand and SUMO.
    osm, dem : str, optional
        The OSM file and DEM raster the network was read with.
    """
    if not rate > 0 or not hours > 0:
        raise EvrouteError("the atlas's demand needs rate > 0 and hours > 0")
    version = sumo_version()
    params = {"what": f"sumo-atlas-v{ATLAS_VERSION}", "network": net.cache_key, "vehicle": vehicle.to_dict(),
              "rate": float(rate), "hours": float(hours), "probes": int(probes), "seed": int(seed),
              "trip": None if start is None else [int(start), int(end)], "sumo": version,
              "dem": None if dem is None else str(dem)}
    key = make_key(params)
    entry = CacheEntry("atlas", key)
    if use_cache and entry.is_valid(["atlas.parquet", "atlas.json"]):
        return Atlas(pd.read_parquet(entry.path("atlas.parquet")), json.loads(entry.path("atlas.json").read_text()),
                     key)
    home = sumo_home()
    with tempfile.TemporaryDirectory(prefix="evroute-sumo-") as tmp:
        folder = Path(tmp)
        osm_path = _osm_input(net, network, osm, folder)
        with stage(f"SUMO atlas of {net.name}: netconvert"):
            args = [str(home / "bin" / "netconvert"), "--osm-files", str(osm_path), "--osm.elevation", "true",
                    "--keep-edges.by-vclass", "passenger", "--remove-edges.isolated", "--geometry.remove",
                    "--no-warnings", "-o", "net.net.xml"]
            if dem is not None:
                args += ["--heightmap.geotiffs", str(dem)]
            _run(args, "netconvert", folder)
        import sumolib  # the extra's reader of SUMO's files

        snet = sumolib.net.readNet(str(folder / "net.net.xml"))
        sedges = pd.DataFrame([(x.getID(), x.getFromNode().getID(), x.getToNode().getID(), x.getLength())
                               for x in snet.getEdges()], columns=["id", "from", "to", "length"])
        chains = map_edges(net, sedges)
        mapped = len(chains) / max(net.n_edges, 1)
        if len(chains) < net.n_edges:
            warnings.warn(f"the SUMO network of {net.name} has no chain for {net.n_edges - len(chains):,} of "
                          f"{net.n_edges:,} edges ({100 * (1 - mapped):.1f} %): their truth falls back to E_det",
                          EvrouteWarning, stacklevel=2)
        (folder / "ev.add.xml").write_text(f"<additional>{vtype_xml(vehicle)}</additional>")
        with stage(f"SUMO atlas of {net.name}: demand"):
            _run([sys.executable, str(home / "tools" / "randomTrips.py"), "-n", "net.net.xml", "-b", "0",
                  "-e", repr(3600.0 * hours), "-p", repr(3600.0 / rate), "--fringe-factor", "5", "--validate",
                  "--seed", str(seed), "--trip-attributes", 'type="ev"', "--additional-file", "ev.add.xml",
                  "-o", "trips.xml", "-r", "background.rou.xml"], "randomTrips.py", folder)
            n_probe = _write_probes(net, chains, oracle, start, end, probes, hours, folder / "probes.rou.xml")
        with stage(f"SUMO atlas of {net.name}: simulation"):
            log = _run([str(home / "bin" / "sumo"), "-n", "net.net.xml", "-r", "background.rou.xml,probes.rou.xml",
                        "--device.battery.probability", "1", "--emission-output", "emissions.parquet",
                        "--emission-output.attributes", "electricity,lane", "--seed", str(seed), "--no-step-log",
                        "--ignore-route-errors", "--time-to-teleport", "300", "--duration-log.statistics"],
                       "sumo", folder)
        raw = pd.read_parquet(folder / "emissions.parquet")
        em = pd.DataFrame({"time": pd.to_numeric(raw.iloc[:, 0]), "vehicle": raw.iloc[:, 1].astype(str),
                           "electricity": raw.filter(like="electricity").iloc[:, 0].astype(np.float64),
                           "lane": raw.filter(like="lane").iloc[:, 0].astype(str)})
        table = traversals(em, chains)
    counts = np.bincount(table.edge.to_numpy(), minlength=net.n_edges)
    teleports = re.search(r"Teleports: (\d+)", log)
    summary = {"network": net.name, "vehicle": vehicle.name, "rate_per_hour": rate, "hours": hours, "seed": seed,
               "probes": probes, "probe_vehicles": n_probe, "sumo": version, "edges_mapped": len(chains),
               "edges_mapped_share": mapped, "traversals": len(table),
               "edges_traversed": int(np.count_nonzero(counts)),
               "traversals_per_edge_median": float(np.median(counts[counts > 0])) if counts.any() else 0.0,
               "teleports": int(teleports.group(1)) if teleports else 0}
    try:
        entry.prepare()
        table.to_parquet(entry.path("atlas.parquet"), index=False)
        atomic_write_text(entry.path("atlas.json"), json.dumps(summary))
        entry.commit(["atlas.parquet", "atlas.json"])
    except OSError:
        pass
    return Atlas(table, summary, key)


def _write_probes(net, chains, oracle, start, end, probes, hours, path: Path) -> int:
    """Probe trips through every edge on a route between the trip's ends (``via`` the SUMO
    chains of its edges; SUMO's router joins them where its turns differ)."""
    lines = ["<routes>"]
    n = 0
    if oracle is not None and start is not None and probes > 0:
        routes = _corridor_routes(net, oracle, start, end, probes)
        span = max(3600.0 * hours - 60.0, 1.0)
        for k, route in enumerate(routes):
            sumo_edges = [s for e in route if e in chains for s in chains[e]]
            if len(sumo_edges) < 2:
                continue
            via = " ".join(sumo_edges[1:-1])
            depart = span * k / max(len(routes), 1)
            lines.append(f'<trip id="probe{k}" type="ev" depart="{depart:.1f}" from="{sumo_edges[0]}" '
                         f'to="{sumo_edges[-1]}"' + (f' via="{via}"' if via else "") + "/>")
            n += 1
    lines.append("</routes>")
    path.write_text("\n".join(lines))
    return n


# --------------------------------------------------------------------------------------
# the truth: --truth sumo[...]
# --------------------------------------------------------------------------------------


class AtlasTruth(Truth):
    """f from an energy atlas; an observation of an edge is one of its recorded traversals,
    drawn uniformly (real, heteroscedastic, heavy-tailed noise). Edges with fewer than
    ``min_traversals`` traversals keep E_det with Gaussian noise of ς (the fallback)."""

    def __init__(self, values, noise_std, energies: np.ndarray, offsets: np.ndarray, counts: np.ndarray,
                 description: dict):
        super().__init__(values, noise_std, float("nan"), description, supports_drift=False)
        self._energies, self._offsets, self._counts = energies, offsets, counts

    def observe(self, rng, path, expected):
        path = np.asarray(path, dtype=np.int64)
        u = rng.random(len(path))
        noise = rng.standard_normal(len(path))
        n = self._counts[path]
        drawn = self._energies[np.minimum(self._offsets[path] + (u * n).astype(np.int64), len(self._energies) - 1)] \
            if len(self._energies) else np.zeros(len(path))
        return np.where(n > 0, drawn, expected[path] + self.noise_std * noise)


def sumo_truth(setup, rate: float, hours: float, probes: int, atlas_seed: int, hour, min_traversals: int):
    """``--truth sumo[...]``: the atlas of the run's network, vehicle (the truth's) and trip."""
    from .oracle import Oracle

    route = setup.route
    atlas = build_atlas(setup.net, setup.network, setup.vehicle or Vehicle(), oracle=Oracle.from_network(setup.net),
                        start=None if route is None else route.start, end=None if route is None else route.end,
                        rate=rate, hours=hours, probes=probes, seed=atlas_seed, osm=setup.osm, dem=setup.dem)
    n = setup.net.n_edges
    if hour is not None and not 0 <= hour < hours:
        raise EvrouteError(f"sumo truth: hour={hour:g} is outside the atlas's {hours:g} simulated hours")
    mean, counts = atlas.mean_energy(n, hour=hour, min_traversals=min_traversals)
    covered = ~np.isnan(mean)
    values = np.where(covered, mean, setup.mean)
    t = atlas.table
    if hour is not None:
        t = t[(t.enter_s >= 3600.0 * hour) & (t.enter_s < 3600.0 * (hour + 1))]
    t = t[covered[t.edge.to_numpy()]].sort_values(["edge", "vehicle", "enter_s"], kind="stable")
    used = np.bincount(t.edge.to_numpy(), minlength=n)
    offsets = np.concatenate([[0], np.cumsum(used)[:-1]]).astype(np.int64)
    on_route = None if route is None else bool(covered[[route.start, route.end]].all())
    description = {"truth_atlas": atlas.key, "atlas_traversals": int(len(t)),
                   "atlas_edges_covered_share": float(covered.mean()), "atlas_teleports": atlas.summary["teleports"],
                   "atlas_edges_mapped_share": atlas.summary["edges_mapped_share"], "atlas_trip_ends_covered": on_route}
    return AtlasTruth(values, setup.noise_std, t.energy_wh.to_numpy(np.float64), offsets, used, description)


def _hour(name, value):
    return None if value in (None, "none") else nonneg_float(name, value)


register_truth("sumo", sumo_truth, options=(
    Option("rate", in_range(0, 1e6, lo_open=True, why="random trips an hour"), 1800.0,
           "background traffic: random trips an hour", "sumo-notes: 1,800 trips over 30 min on Monaco"),
    Option("hours", in_range(0, 24, lo_open=True, why="simulated hours"), 0.5, "simulated time span (hours)"),
    Option("probes", int_range(0, 100, why="traversals of every edge between the trip's ends"), 3,
           "probe vehicles drive every edge on a route between the trip's ends this many times"),
    Option("atlas_seed", int_range(0, 2**31 - 1, why="SUMO's seed"), 0, "seed of the demand and of SUMO (the "
           "run's seed draws the observations)"),
    Option("hour", _hour, None, "only traversals entered in this hour of the simulation (rush hour and night "
           "differ); default all"),
    Option("min_traversals", int_range(1, 10_000), 3, "fewer traversals: the edge keeps E_det (the fallback)"),
), description="per-edge energies from SUMO's EV model in simulated traffic (an atlas; needs "
               f"{SUMO_INSTALL}); an observation is one recorded traversal")
