"""SUMO's electric-vehicle model in simulated traffic as a ground truth: the energy atlas.

The paper's energy model (003 Eq. 8, Table 2) is the constant-speed form of SUMO's battery model
(Table 2's parameters are SUMO's defaults). An **energy atlas** drives the network in SUMO, with
background traffic and probe vehicles, every vehicle carrying the battery device with the
parameters of the evroute vehicle, and records one row per traversal of an evroute edge: which
edge, which vehicle, when it entered, how long it took and the electricity it used (Wh, negative
where it recuperated). The truth ``--truth sumo[...]``
(:func:`evroute.world.sumo_truth.sumo_truth`) takes an edge's expected energy as the mean of its
traversals and an observation as one recorded traversal.

Pipeline (:func:`build_atlas`), each step a SUMO tool of the optional extra
``pip install "evroute[sumo]"`` (eclipse-sumo, sumolib):

1. ``netconvert`` converts the same OSM input evroute reads (passenger roads, evroute's own node
   elevations; :func:`evroute.world.sumo_tools.sumo_network`);
2. every evroute edge is mapped to its chain of SUMO edges (:mod:`evroute.world.sumo_edges`:
   junction ids are the OSM node ids; a chain follows the edge's OSM way from its tail node to its
   head node); the share mapped is reported and an edge without a chain is a warning, never a
   silent gap;
3. ``randomTrips.py`` makes the background demand (``rate`` vehicles an hour over ``hours``), or
   the user's SUMO route file is the background (``demand``: every vehicle, trip and flow in it
   becomes the run's car; trips may name OSM node ids with ``fromJunction``/``toJunction``), and
   probe vehicles on short walks cover every edge on a route between the trip's ends ``probes``
   times;
4. ``sumo`` runs with the emission output as Parquet (the per-second electricity of every
   vehicle and its lane); per-second rows are summed per vehicle and SUMO edge, chains are
   joined into evroute edges, and a traversal counts only when complete (the first and last
   edge of a trip are partial and dropped), each booked per car (:func:`traversals`: the kinetic
   split; a junction's internal lanes are the junction's, ``junction_wh``).

The atlas is cached like every other artefact (keyed by the network, the vehicle, the demand,
the seed and SUMO's version): a second call is instant.

A second world (``powertrain=``): the same traffic, SUMO's per-second speeds and elevations of
every car, driven by a real car's power train in FASTSim (:mod:`evroute.world.powertrain`) at an
ambient temperature, booked the same way with that car's mass and efficiencies. The traffic is
cached apart and shared by every car and temperature.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd

from ..cache import CacheEntry, make_key
from ..errors import EvrouteError
from ..io import atomic_write_text
from ..physics.energy import MAX_SPEED_STEP, Vehicle, kinetic_wh
from ..progress import stage
from .sumo_tools import run_tool, sumo_home, sumo_network, sumo_version, user_demand, vtype_xml

__all__ = ["ATLAS_COLUMNS", "ATLAS_VERSION", "traversals", "Atlas", "build_atlas", "PROBE_WALK", "TRAFFIC_VERSION"]

#: The atlas's table: one row per complete traversal of an evroute edge: its energy as SUMO
#: measured it (``energy_wh``), and split (:func:`traversals`) into the part spent at a constant
#: kinetic state (``edge_wh``) and the kinetic-energy changes moved out of it, the one before the
#: traversal's top speed (``kin_in_wh``: leaving the junction behind) and the one after it
#: (``kin_out_wh``: arriving at the next), with the speeds at entry, top and exit, the edge the
#: car drove next (``next_edge``, −1 where its next traversal is not complete or not adjacent) and
#: the energy on the internal lanes of the junction between them (``junction_wh``, NaN without).
ATLAS_COLUMNS = ("edge", "vehicle", "enter_s", "seconds", "energy_wh", "edge_wh", "kin_in_wh", "kin_out_wh",
                 "v_in", "v_top", "v_out", "next_edge", "junction_wh")
# 2: no auxiliary power; 3: probes on short walks; 5: teleports counted, their edges dropped;
# 6: speeds recorded, kinetic energy split out of the edges (the rotating mass pinned in the vType)
# 7: the vType's energy parameters also as params, where SUMO 1.28 reads them (a vehicle other than
#    the paper's was simulated with SUMO's defaults for some of them)
# 8: a step's constant-speed part through its own sign's efficiency (a car braking on a climb, or
#    accelerating downhill, no longer puts its edge below the physical floor)
# 9: booked per car so that nothing creates energy: a coasting step's kinetic part is its mechanical
#    change; a junction's internal lanes booked on the junction (junction_wh), not on the edge
#    before it; SUMO's node elevations evroute's own (smoothed) on every network
ATLAS_VERSION = 9


def traversals(emissions: pd.DataFrame, chains: dict[int, list[str]], vehicle: Vehicle | None = None) -> pd.DataFrame:
    """One row per complete traversal of an evroute edge (:data:`ATLAS_COLUMNS`) from SUMO's
    per-second emission rows (``time``, ``vehicle``, ``lane``, ``electricity`` in Wh per second of
    a 1 s step, and ``speed`` in m/s).

    A traversal is its edge's whole chain of SUMO edges, in order, by the same vehicle, with the
    junctions SUMO keeps inside the chain; a vehicle's first and last SUMO edge are partial (it
    departs and arrives inside them) and dropped. The rows on the internal lanes of the junction
    after a traversal, up to the next traversal of the same car, are that junction's
    (``junction_wh``; with ``next_edge``, the edge the car drove next; −1 and NaN where the next
    traversal is not complete or does not follow at once).

    The kinetic split (:func:`kinetic_wh`, ``vehicle``'s mass and efficiencies): each step's
    kinetic part is moved out of the edge, the steps up to the traversal's top speed into
    ``kin_in_wh``, the later ones into ``kin_out_wh``; ``edge_wh`` is what is left, the traversal
    at a constant kinetic state, and ``energy_wh = edge_wh + kin_in_wh + kin_out_wh`` exactly. A
    step whose previous second is missing (a departure, a teleport) has no kinetic part. Without a
    ``speed`` column nothing is split. A car's junction between two traversals then costs
    ``kin_out_wh + junction_wh + kin_in_wh`` of the next, which is its change of kinetic energy
    between the two top speeds plus a dissipation that is never negative where the junction is
    flat (:func:`evroute.world.junctions.junction_dissipation`).

    Two optional columns describe a car whose power train is not SUMO's
    (:mod:`evroute.world.powertrain`): ``wheel`` (Wh, the step's work at the wheels, which the
    split then takes as it is: :func:`kinetic_wh`) and ``aux`` (Wh, the auxiliary load included in
    ``electricity``). The split is then made on the propulsion energy alone, and the auxiliary
    energy goes where the car's time went: a step at speed v books the share v / v_top of its
    auxiliary energy on the edge (what a car at the traversal's top speed v_top would have spent
    over the same distance), the rest on the junction (``kin_in_wh`` before the top speed,
    ``kin_out_wh`` after it). A car waiting at a light pays its auxiliary energy on that junction.

    Returns
    -------
    pandas.DataFrame
        One row per complete traversal, the columns :data:`ATLAS_COLUMNS`.
    """
    d = emissions.sort_values(["vehicle", "time"], kind="stable").reset_index(drop=True)
    aux = d.aux.to_numpy(np.float64) if "aux" in d else np.zeros(len(d))
    lane = d.lane.astype(str)
    internal = lane.str.startswith(":").to_numpy()
    same = (d.vehicle == d.vehicle.shift()) & (d.time == d.time.shift() + 1)
    if "speed" in d:
        # a speed that jumps by more than any car brakes or accelerates (SUMO inserting a car at its
        # departure speed, a teleport) is no driving: its step has no kinetic part, and no traversal
        # or junction spans it (its kinetic energy came from nowhere)
        same &= (d.speed - d.speed.shift()).abs() <= MAX_SPEED_STEP
        last = np.where(same, d.speed.shift(), d.speed).astype(np.float64)
        wheel = d.wheel.to_numpy(np.float64) if "wheel" in d else None
        d["kin"] = kinetic_wh(d.speed.to_numpy(np.float64), last, d.electricity.to_numpy(np.float64) - aux,
                              vehicle=vehicle, wheel=wheel)
        d["v_last"] = last
    else:
        d["speed"], d["kin"], d["v_last"] = np.nan, 0.0, np.nan
    # segments: runs of one SUMO edge (a junction's internal lanes are one run, marked "")
    d["sumo_edge"] = np.where(internal, "", lane.str.rsplit("_", n=1).str[0])
    new = (d.sumo_edge != d.sumo_edge.shift()) | (d.vehicle != d.vehicle.shift())
    new |= ~same  # (a gap or a jump: a teleport, a departure)
    steady_run = same.to_numpy()  # each row follows the one before in the same car's drive
    d["seg"] = new.cumsum()
    seg = d.groupby("seg", sort=True).agg(vehicle=("vehicle", "first"), sumo_edge=("sumo_edge", "first"),
                                          enter=("time", "min"), leave=("time", "max"))
    seg["first_row"] = np.flatnonzero(new.to_numpy())
    seg["last_row"] = np.r_[seg.first_row.to_numpy()[1:] - 1, len(d) - 1]
    seg["leave"] += 1.0  # the last second of the edge ends a step later
    real = seg.sumo_edge != ""
    # a vehicle's first and last real edge are partial (it departs and arrives inside them)
    rank = seg[real].groupby("vehicle", sort=False).cumcount()
    rank_back = seg[real].groupby("vehicle", sort=False).cumcount(ascending=False)
    partial = pd.Series(False, index=seg.index)
    partial[rank.index[(rank == 0).to_numpy() | (rank_back == 0).to_numpy()]] = True
    where = {s: (edge_id, k, len(chain)) for edge_id, chain in chains.items() for k, s in enumerate(chain)}
    info = [where.get(x, (-1, -1, 0)) if x else (-2, -1, 0) for x in seg.sumo_edge]
    e_ = np.array([x[0] for x in info], dtype=np.int64)  # −2: a junction's internal lanes
    pos = np.array([x[1] for x in info], dtype=np.int64)
    n = np.array([x[2] for x in info], dtype=np.int64)
    veh, enter, leave = seg.vehicle.to_numpy(), seg.enter.to_numpy(), seg.leave.to_numpy()
    r0, r1, bad = seg.first_row.to_numpy(), seg.last_row.to_numpy(), partial.to_numpy()
    energy_cum = np.r_[0.0, np.cumsum(d.electricity.to_numpy(np.float64))]
    kin_cum = np.r_[0.0, np.cumsum(d.kin.to_numpy(np.float64))]
    speed, v_last = d.speed.to_numpy(np.float64), d.v_last.to_numpy(np.float64)
    aux_cum = np.r_[0.0, np.cumsum(aux)]  # the auxiliary energy, and the same weighted by the speed
    aux_v_cum = np.r_[0.0, np.cumsum(aux * np.nan_to_num(speed))]
    rows, spans = [], []
    i = 0
    while i < len(seg):
        if e_[i] < 0 or pos[i] != 0 or bad[i]:
            i += 1
            continue
        j, k = i, 0  # k: the chain's position reached
        while k < n[i] - 1:  # on through the chain, junctions inside it included
            nxt = j + 1
            if nxt < len(seg) and e_[nxt] == -2 and veh[nxt] == veh[i] and enter[nxt] == leave[j]:
                nxt += 1
            if nxt < len(seg) and veh[nxt] == veh[i] and e_[nxt] == e_[i] and pos[nxt] == k + 1 \
                    and enter[nxt] == leave[nxt - 1] and not bad[nxt]:
                j, k = nxt, k + 1
            else:
                break
        ends = j + 1 < len(seg) and veh[j + 1] == veh[i] and enter[j + 1] == leave[j]  # (not stuck: no teleport)
        if k == n[i] - 1 and ends:
            a, b = int(r0[i]), int(r1[j])  # the traversal's rows
            top = a + (int(np.nanargmax(speed[a:b + 1])) if np.isfinite(speed[a:b + 1]).any() else b - a)
            kin_in, kin_out = kin_cum[top + 1] - kin_cum[a], kin_cum[b + 1] - kin_cum[top + 1]
            if aux_cum[b + 1] > aux_cum[a] and np.isfinite(speed[top]):  # the auxiliary energy beyond a car at the top speed: the junction's
                v_top = speed[top]
                share = 1.0 / v_top if v_top > 0 else 0.0
                kin_in += (aux_cum[top + 1] - aux_cum[a]) - share * (aux_v_cum[top + 1] - aux_v_cum[a])
                kin_out += (aux_cum[b + 1] - aux_cum[top + 1]) - share * (aux_v_cum[b + 1] - aux_v_cum[top + 1])
            energy = energy_cum[b + 1] - energy_cum[a]
            rows.append((int(e_[i]), str(veh[i]), float(enter[i]), float(leave[j] - enter[i]), float(energy),
                         float(energy - kin_in - kin_out), float(kin_in), float(kin_out), float(v_last[a]),
                         float(speed[top]), float(speed[b])))
            spans.append((a, b, j))
        i = j + 1
    out = pd.DataFrame(rows, columns=list(ATLAS_COLUMNS[:-2]))
    # the next edge the car drove: its next traversal starts as this one ends, or right after the
    # junction's internal lanes (booked on the junction)
    nxt = np.full(len(out), -1, dtype=np.int64)
    junction = np.full(len(out), np.nan)
    for t in range(len(out) - 1):
        a, b, j = spans[t]
        a2 = spans[t + 1][0]
        if out.vehicle.iat[t] != out.vehicle.iat[t + 1] or out.enter_s.iat[t + 1] < out.enter_s.iat[t] + out.seconds.iat[t]:
            continue
        between = np.arange(b + 1, a2)
        if steady_run[b + 1:a2 + 1].all() and internal[between].all():
            nxt[t] = out.edge.iat[t + 1]
            junction[t] = energy_cum[a2] - energy_cum[b + 1]
    out["next_edge"] = nxt
    out["junction_wh"] = junction
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
    #: The car whose energies the table books (its mass and efficiencies split them): the run's
    #: vehicle, or a powertrain world's FASTSim car as Eq. 8 sees it.
    vehicle: Vehicle | None = None

    def window(self, hour: float | None = None) -> pd.DataFrame:
        """The traversals entered in hour ``hour`` of the simulation (all when None)."""
        t = self.table
        return t if hour is None else t[(t.enter_s >= 3600.0 * hour) & (t.enter_s < 3600.0 * (hour + 1))]

    def mean_energy(self, n_edges: int, hour: float | None = None, min_traversals: int = 1,
                    column: str = "energy_wh"):
        """Per evroute edge: the mean energy of its traversals (entered in hour ``hour`` of the
        simulation when given; ``column``: ``energy_wh`` as measured, ``edge_wh`` at a constant
        kinetic state) and their number; NaN where fewer than ``min_traversals``."""
        t = self.window(hour)
        counts = np.bincount(t.edge.to_numpy(), minlength=n_edges)
        sums = np.bincount(t.edge.to_numpy(), weights=t[column].to_numpy(), minlength=n_edges)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(counts >= max(1, min_traversals), sums / counts, np.nan)
        return mean, counts


#: Edges a probe vehicle drives: it enters on the first (partial), drives the rest whole but the
#: last (partial, where it arrives); short walks keep probes cheap and out of each other's way.
PROBE_WALK = 12


def _corridor_routes(net, oracle, start: int, end: int, probes: int) -> list[list[int]]:
    """Probe routes: short walks on the line graph so that every edge that lies on some route
    between the trip's ends is driven whole at least ``probes`` times. Greedy and deterministic:
    from each edge not yet covered enough (in id order), a walk enters from its first
    predecessor and goes on, at each junction, to the least-covered successor (the lowest id on
    ties), for :data:`PROBE_WALK` edges."""
    on = oracle.reachable(start) & _reaches(net, end)
    succ = [[] for _ in range(net.n_edges)]
    pred = [[] for _ in range(net.n_edges)]
    for a, b in sorted(zip(net.conn_src.tolist(), net.conn_dst.tolist(), strict=True)):
        succ[a].append(b)
        pred[b].append(a)
    covered = np.zeros(net.n_edges, np.int64)
    routes = []
    for edge in np.flatnonzero(on):
        while covered[edge] < probes and pred[edge]:
            walk = [pred[edge][0], int(edge)]
            while len(walk) < PROBE_WALK and succ[walk[-1]]:
                walk.append(min(succ[walk[-1]], key=lambda x: (covered[x], x)))
            whole = walk[1:-1] if len(walk) > 2 else []
            if edge not in whole:
                break  # a dead end right after the edge: it cannot be driven whole
            np.add.at(covered, np.unique(whole), 1)
            routes.append(walk)
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
                seed: int = 0, osm: str | None = None, dem: str | None = None, demand: str | None = None,
                powertrain: str | None = None, ambient_c: float = 20.0, use_cache: bool = True) -> Atlas:
    """The energy atlas of ``net`` (see the module docstring), built once and cached.

    Parameters
    ----------
    net : evroute.roads.network.Network
    network : str
        Its name (or OSM file), as given to :func:`evroute.roads.network.load_network`.
    vehicle : evroute.physics.energy.Vehicle
        Every vehicle of the simulation, background and probes, is this car (its auxiliary power,
        where it has one, drawn every second on top of SUMO's energy). Unused with ``powertrain``.
    oracle, start, end : optional
        With a trip, probe vehicles drive every edge on a route between its ends ``probes``
        times.
    rate, hours : float
        Background demand: ``rate`` random trips an hour over ``hours`` hours (SUMO's
        ``randomTrips.py``, fringe factor 5); with ``demand``, ``hours`` only spreads the
        probes and ``rate`` is unused.
    demand : str, optional
        A SUMO route file (of the network netconvert makes from the same OSM input; trips may
        name OSM node ids with ``fromJunction``/``toJunction``) as the background traffic
        instead of random trips; its vehicles become ``vehicle`` (:func:`evroute.world.sumo_tools.user_demand`). The atlas
        is keyed by the file's content.
    seed : int
        Seeds the demand and SUMO.
    osm, dem : str, optional
        The OSM file and DEM raster the network was read with.
    powertrain, ambient_c : optional
        A FASTSim car (:data:`evroute.settings.POWERTRAINS` or a FASTSim vehicle file) and the
        ambient temperature (°C): the same traffic (SUMO's per-second speeds and elevations of
        every car, cached apart and shared by every car and temperature) driven by that car
        (:func:`evroute.world.powertrain.recost`), booked with its own mass and efficiencies
        (:attr:`Atlas.vehicle`).

    Returns
    -------
    Atlas
        The traversals, what was simulated (``summary``) and the cache key.
    """
    if not rate > 0 or not hours > 0:
        raise EvrouteError("the atlas's demand needs rate > 0 and hours > 0")
    version = sumo_version()
    params = {"what": f"sumo-atlas-v{ATLAS_VERSION}", "network": net.cache_key, "vehicle": vehicle.to_dict(),
              "rate": float(rate), "hours": float(hours), "probes": int(probes), "seed": int(seed),
              "trip": None if start is None else [int(start), int(end)], "sumo": version,
              "dem": None if dem is None else str(dem)}
    if demand is not None:  # keyed by content; random-demand keys stay as they were
        try:
            params["demand"] = hashlib.sha256(Path(demand).read_bytes()).hexdigest()
        except OSError as exc:
            raise EvrouteError(f"cannot read the demand file {demand}: {exc.strerror or exc}") from None
        params["rate"] = None
    run = {"net": net, "network": network, "oracle": oracle, "start": start, "end": end, "rate": rate, "hours": hours,
           "probes": probes, "seed": seed, "osm": osm, "dem": dem, "demand": demand}
    if powertrain is not None:
        return _powertrain_atlas(params, run, powertrain, ambient_c, use_cache)
    key = make_key(params)
    entry = CacheEntry("atlas", key)
    files = ["atlas.parquet", "atlas.json"]
    if use_cache and entry.is_valid(files):
        return Atlas(pd.read_parquet(entry.path("atlas.parquet")), json.loads(entry.path("atlas.json").read_text()),
                     key, vehicle)
    with tempfile.TemporaryDirectory(prefix="evroute-sumo-") as tmp:
        em, chains, info = _simulate(run, vehicle, Path(tmp), trace=False)
    if vehicle.aux_power_w > 0:  # the auxiliary load, drawn from the battery every second
        em["aux"] = vehicle.aux_power_w / 3600.0
        em["electricity"] = em.electricity + em.aux
    table = traversals(em, chains, vehicle)
    summary = _atlas_summary(net, vehicle, run, version, info, table, len(chains))
    _store(entry, files, table, summary)
    return Atlas(table, summary, key, vehicle)


#: The version of the traffic a powertrain world re-costs (:func:`_powertrain_atlas`).
TRAFFIC_VERSION = 1


def _powertrain_atlas(params: dict, run: dict, powertrain: str, ambient_c: float, use_cache: bool) -> Atlas:
    """The atlas of the traffic ``params`` describes driven by the FASTSim car ``powertrain`` at
    ``ambient_c`` °C: SUMO's per-second rows (speed, lane, elevation) are cached apart, keyed by
    what SUMO simulated (the run's vehicle left out: SUMO's cars drive alike whatever their energy
    model), then re-costed (:func:`evroute.world.powertrain.recost`) and booked with the car's own
    Vehicle; keyed by the traffic, the car (its name or file content), the temperature and the
    versions of FASTSim and of the re-costing."""
    from .powertrain import POWERTRAIN_VERSION, car, fastsim_version, powertrain_key, recost

    net = run["net"]
    traffic = {**params, "what": f"sumo-traffic-v{TRAFFIC_VERSION}", "vehicle": None}
    tkey = make_key(traffic)
    tentry = CacheEntry("traffic", tkey)
    tfiles = ["rows.parquet", "chains.json", "traffic.json"]
    spec_key = powertrain_key(powertrain)  # (a vehicle file read before any SUMO work)
    key = make_key({"what": f"sumo-atlas-v{ATLAS_VERSION}", "traffic": tkey, "powertrain": spec_key,
                    "ambient_c": float(ambient_c), "powertrain_version": POWERTRAIN_VERSION,
                    "fastsim": fastsim_version()})
    entry = CacheEntry("atlas", key)
    files = ["atlas.parquet", "atlas.json"]
    if use_cache and entry.is_valid(files):
        summary = json.loads(entry.path("atlas.json").read_text())
        return Atlas(pd.read_parquet(entry.path("atlas.parquet")), summary, key, Vehicle(**summary["booked_vehicle"]))
    if use_cache and tentry.is_valid(tfiles):
        rows = pd.read_parquet(tentry.path("rows.parquet"))
        chains = {int(k): v for k, v in json.loads(tentry.path("chains.json").read_text()).items()}
        info = json.loads(tentry.path("traffic.json").read_text())
    else:
        with tempfile.TemporaryDirectory(prefix="evroute-sumo-") as tmp:
            rows, chains, info = _simulate(run, Vehicle(), Path(tmp), trace=True)
        try:
            tentry.prepare()
            rows.to_parquet(tentry.path("rows.parquet"), index=False)
            atomic_write_text(tentry.path("chains.json"), json.dumps({str(k): v for k, v in chains.items()}))
            atomic_write_text(tentry.path("traffic.json"), json.dumps(info))
            tentry.commit(tfiles)
        except OSError:
            pass
    with stage(f"FASTSim: {powertrain} at {float(ambient_c):g} °C drives the traffic of {net.name}"):
        c = car(powertrain, ambient_c)
        recosted, done = recost(rows, c)
    table = traversals(recosted, chains, c.vehicle)
    summary = _atlas_summary(net, c.vehicle, run, params["sumo"], info, table, len(chains))
    summary.update({"powertrain": powertrain, "ambient_c": float(ambient_c), "fastsim": fastsim_version(),
                    "traffic_key": tkey, "recost": done, "booked_vehicle": c.vehicle.to_dict()})
    _store(entry, files, table, summary)
    return Atlas(table, summary, key, c.vehicle)


def _store(entry, files, table: pd.DataFrame, summary: dict) -> None:
    """An atlas into its cache entry (a cache that cannot be written is no error)."""
    try:
        entry.prepare()
        table.to_parquet(entry.path("atlas.parquet"), index=False)
        atomic_write_text(entry.path("atlas.json"), json.dumps(summary))
        entry.commit(files)
    except OSError:
        pass


def _atlas_summary(net, vehicle: Vehicle, run: dict, version: str, info: dict, table: pd.DataFrame,
                   n_chains: int) -> dict:
    counts = np.bincount(table.edge.to_numpy(), minlength=net.n_edges)
    demand = run["demand"]
    return {"network": net.name, "vehicle": vehicle.name, "rate_per_hour": None if demand is not None else run["rate"],
            "hours": run["hours"], "seed": run["seed"], "demand": None if demand is None else str(demand),
            "demand_vehicles": info["demand_vehicles"], "vehicles_inserted": info["vehicles_inserted"],
            "probes": run["probes"], "probe_vehicles": info["probe_vehicles"], "sumo": version, "edges_mapped": n_chains,
            "edges_mapped_share": info["edges_mapped_share"], "traversals": len(table),
            "edges_traversed": int(np.count_nonzero(counts)),
            "traversals_per_edge_median": float(np.median(counts[counts > 0])) if counts.any() else 0.0,
            "teleports": info["teleports"]}


def _simulate(run: dict, vehicle: Vehicle, folder: Path, *, trace: bool):
    """SUMO on the run's network (``run``: :func:`build_atlas`'s arguments) in ``folder``, every car
    ``vehicle``. Returns its per-second rows (``time``, ``vehicle``, ``lane``, ``speed`` and
    ``electricity`` (Wh), or with ``trace`` ``z`` (m) instead of the energy: SUMO's floating car
    data), the chains of SUMO edges of the evroute edges and what was simulated."""
    net, demand, hours, seed = run["net"], run["demand"], run["hours"], run["seed"]
    home = sumo_home()
    # the user's demand read first: a bad file is one line before any SUMO work
    n_demand = None if demand is None else user_demand(demand, vehicle, folder / "background.rou.xml")
    # (the warning names the caller of build_atlas)
    _, chains, mapped = sumo_network(net, run["network"], folder, osm=run["osm"], dem=run["dem"],
                                     stacklevel=5 if trace else 4)
    (folder / "ev.add.xml").write_text(f"<additional>{vtype_xml(vehicle)}</additional>")
    with stage(f"SUMO atlas of {net.name}: demand"):
        if demand is None:
            run_tool([sys.executable, str(home / "tools" / "randomTrips.py"), "-n", "net.net.xml", "-b", "0",
                  "-e", repr(3600.0 * hours), "-p", repr(3600.0 / run["rate"]), "--fringe-factor", "5", "--validate",
                  "--seed", str(seed), "--trip-attributes", 'type="ev"', "--additional-file", "ev.add.xml",
                  "-o", "trips.xml", "-r", "background.rou.xml"], "randomTrips.py", folder)
        n_probe = _write_probes(net, chains, run["oracle"], run["start"], run["end"], run["probes"], hours,
                                folder / "probes.rou.xml")
    output = (["--fcd-output", "rows.parquet", "--fcd-output.attributes", "lane,speed,z"] if trace else
              ["--device.battery.probability", "1", "--emission-output", "rows.parquet",
               "--emission-output.attributes", "electricity,lane,speed"])
    with stage(f"SUMO atlas of {net.name}: simulation"):
        log = run_tool([str(home / "bin" / "sumo"), "-n", "net.net.xml", "-r", "background.rou.xml,probes.rou.xml",
                    *output, "--seed", str(seed), "--no-step-log", "--ignore-route-errors", "--time-to-teleport", "300",
                    "--duration-log.statistics", *(["--junction-taz"] if demand is not None else [])], "sumo", folder)
    raw = pd.read_parquet(folder / "rows.parquet")
    raw = raw[raw.iloc[:, 1].notna().to_numpy()]  # (a second without any car is one empty row)
    rows = pd.DataFrame({"time": pd.to_numeric(raw.iloc[:, 0]), "vehicle": raw.iloc[:, 1].astype(str),
                         "lane": raw.filter(like="lane").iloc[:, 0].astype(str),
                         "speed": raw.filter(like="speed").iloc[:, 0].astype(np.float64)})
    if trace:
        z = raw.filter(regex=r"(^|_)z$")
        rows["z"] = z.iloc[:, 0].astype(np.float64) if z.shape[1] else 0.0  # a flat network has no z
    else:
        rows.insert(2, "electricity", raw.filter(like="electricity").iloc[:, 0].astype(np.float64))
    teleports = re.search(r"Teleports: (\d+)", log)
    inserted = re.search(r"Inserted: (\d+)", log)
    info = {"demand_vehicles": n_demand, "vehicles_inserted": int(inserted.group(1)) if inserted else None,
            "probe_vehicles": n_probe, "edges_mapped_share": mapped,
            "teleports": int(teleports.group(1)) if teleports else 0}
    return rows, chains, info


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
