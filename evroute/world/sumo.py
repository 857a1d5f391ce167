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
3. ``randomTrips.py`` makes the background demand (``rate`` vehicles an hour over ``hours``), or
   the user's SUMO route file is the background (``demand``: every vehicle, trip and flow in it
   becomes the run's car; trips may name OSM node ids with ``fromJunction``/``toJunction``), and
   probe vehicles on short walks cover every edge on a route between the trip's ends ``probes``
   times;
4. ``sumo`` runs with the emission output as Parquet (the per-second electricity of every
   vehicle and its lane); per-second rows are summed per vehicle and SUMO edge, chains are
   joined into evroute edges, and a traversal counts only when complete (the first and last
   edge of a trip are partial and dropped). Energy spent on a junction's internal lanes counts
   for the edge before it.

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
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape as xml_escape

import networkx as nx
import numpy as np
import pandas as pd

from ..bandit.truths import Truth, Turns, noise_at, register_truth
from ..cache import CacheEntry, make_key
from ..errors import EvrouteError, EvrouteWarning
from ..geo import EARTH_RADIUS_M
from ..io import atomic_path, atomic_write_text, generator
from ..physics.energy import (
    MAX_SPEED_STEP,
    ROTATING_MASS_KG,
    Vehicle,
    kinetic_wh,
    potential_energy_wh,
)
from ..priors.fitting import FIT_LENGTHSCALES, fit_prior
from ..priors.noise import edge_noise_std, fit_noise_model
from ..progress import stage
from ..roads.network import network_spec, resolve_osm_path
from ..roads.oracle import Oracle
from ..roads.osm import node_elevations, write_osm_xml
from ..roads.synthetic import synthetic_graph
from ..settings import SUMO_TRUTH_OPTIONS
from ..specs import declared
from .drives import degrade
from .junctions import truth_turns

__all__ = ["SUMO_INSTALL", "Atlas", "user_demand", "district_weights", "AtlasTruth", "sumo_truth", "build_atlas",
           "kinetic_wh", "atlas_conservation", "drive_predictions",
           "ROTATING_MASS_KG", "edet_agreement", "fit_hyperparameters", "osm_with_elevations", "sumo_home", "vtype_xml",
           "map_edges", "traversals", "ATLAS_COLUMNS", "SumoDrives", "sumo_drives",
           "TRACE_COLUMNS"]

#: What to run when SUMO is missing.
SUMO_INSTALL = 'pip install "evroute[sumo]"'
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


def sumo_home() -> Path:
    """SUMO's folder (``bin/``, ``tools/``) from the ``eclipse-sumo`` package; one error line
    naming the install command when it is missing."""
    saved = {k: os.environ.get(k) for k in ("PROJ_DATA", "PROJ_LIB")}
    try:
        import sumo  # the eclipse-sumo wheel (binaries and tools)
    except ImportError:
        raise EvrouteError(f"SUMO is not installed: {SUMO_INSTALL}") from None
    finally:  # importing it points PROJ at SUMO's own proj.db, which breaks rasterio's DEM reading
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return Path(sumo.SUMO_HOME)


def sumo_version() -> str:
    """The installed eclipse-sumo version."""
    from importlib.metadata import version

    sumo_home()
    return version("eclipse-sumo")


def _run(args: list[str], what: str, cwd: Path) -> str:
    """Run a SUMO tool; what it printed is returned (its statistics, teleports and warnings); a
    failure is one error line."""
    env = {**os.environ, "SUMO_HOME": str(sumo_home())}
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [x for x in (proc.stderr + proc.stdout).splitlines() if x.strip() and "proj.db" not in x]
        errors = [x for x in lines if x.startswith("Error")] or lines
        raise EvrouteError(f"{what} failed: {errors[0] if errors else f'exit code {proc.returncode}'}")
    return proc.stdout + proc.stderr


def vtype_xml(vehicle: Vehicle, type_id: str = "ev") -> str:
    """A SUMO vType for ``vehicle`` with the battery device, its parameters those of Eq. 8: mass,
    frontal area, drag and rolling coefficients, the power-train and recuperation efficiencies;
    no auxiliary power (SUMO's defaults are the paper's Table 2; a vehicle's auxiliary power is
    added to every second by :func:`build_atlas`, drawn from the battery as it is, not through
    SUMO's efficiencies). SUMO 1.28's energy model reads
    them from ``<param>`` elements, not from the vType's attributes: both are written
    (tests/test_sumo.py: a delivery van at constant speed is Eq. 8 of the van). Two of SUMO's terms
    that Eq. 8 has not are SUMO's: the rotating mass (pinned, the vehicle's: SUMO's 40 kg unless
    it says otherwise; it matters only when the car accelerates) and the radial drag of cornering (its default, 0.5: energy on curves and at
    turns, a physical part of the truth that the prior E_det lacks)."""
    return (f'<vType id="{type_id}" vClass="passenger" emissionClass="Energy/unknown" '
            f'mass="{vehicle.mass_kg!r}" frontSurfaceArea="{vehicle.frontal_area_m2!r}" '
            f'airDragCoefficient="{vehicle.drag_coefficient!r}" rollDragCoefficient="{vehicle.rolling_resistance!r}" '
            f'propulsionEfficiency="{vehicle.eta_plus!r}" recuperationEfficiency="{vehicle.eta_minus!r}" '
            'constantPowerIntake="0">'
            '<param key="has.battery.device" value="true"/>'
            f'<param key="mass" value="{vehicle.mass_kg!r}"/>'
            f'<param key="frontSurfaceArea" value="{vehicle.frontal_area_m2!r}"/>'
            f'<param key="airDragCoefficient" value="{vehicle.drag_coefficient!r}"/>'
            f'<param key="rollDragCoefficient" value="{vehicle.rolling_resistance!r}"/>'
            f'<param key="propulsionEfficiency" value="{vehicle.eta_plus!r}"/>'
            f'<param key="recuperationEfficiency" value="{vehicle.eta_minus!r}"/>'
            f'<param key="rotatingMass" value="{float(vehicle.rotating_mass_kg)!r}"/>'
            # SUMO 1.28 reads the auxiliary power from the parameter (its default is 100 W, measured:
            # tests/test_sumo.py's flat road is 2.5 % above Eq. 8 without it)
            '<param key="constantPowerIntake" value="0"/></vType>')


#: The elements of a SUMO route file that are vehicles (each gets the run's vType) and the ones
#: that are vehicle types (dropped: every car of the atlas is the run's vehicle).
DEMAND_VEHICLES = ("vehicle", "trip", "flow")
DEMAND_TYPES = ("vType", "vTypeDistribution")


def user_demand(path: str | Path, vehicle: Vehicle, dst: Path) -> int:
    """Write the user's SUMO route file ``path`` to ``dst`` with every ``<vehicle>``, ``<trip>``
    and ``<flow>`` made ``vehicle`` (its vType ``ev``, :func:`vtype_xml`, replaces the file's
    vehicle types), so that the atlas and E_det describe the same car. Returns the number of
    vehicle elements; an unreadable file or one without vehicles is a one-line error naming
    ``path``."""
    try:
        tree = ET.parse(path)
    except (OSError, ET.ParseError) as exc:
        raise EvrouteError(f"cannot read the demand file {path}: {exc}") from None
    root = tree.getroot()
    if root.tag != "routes":
        raise EvrouteError(f"demand file {path}: expected a SUMO route file (<routes>), found <{root.tag}>")
    for child in [c for c in root if c.tag in DEMAND_TYPES]:
        root.remove(child)
    n = 0
    for element in root.iter():
        if element.tag in DEMAND_VEHICLES:
            element.set("type", "ev")
            n += 1
    if n == 0:
        raise EvrouteError(f"demand file {path}: no <vehicle>, <trip> or <flow> in it")
    root.insert(0, ET.fromstring(vtype_xml(vehicle)))
    tree.write(dst, encoding="utf-8", xml_declaration=True)
    return n


# --------------------------------------------------------------------------------------
# evroute edges → chains of SUMO edges
# --------------------------------------------------------------------------------------


def _ways(sumo_edge_id: str) -> frozenset:
    """The OSM way ids a SUMO edge id can stand for: ``W#k`` is a segment of way W, ``-W#k`` of W
    driven against its node order, so ``-31118`` is way -31118 or way 31118 reversed (LuST's
    ways have negative ids) and ``--31118`` way -31118 reversed."""
    m = re.fullmatch(r"(-?)(-?\d+)(?:#\d+)?", sumo_edge_id)
    if m is None:
        return frozenset()
    reversed_, way = m.group(1) == "-", int(m.group(2))
    return frozenset({way} if not reversed_ or way < 0 else {way, -way})


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
        g.add_edge(str(r[1]), str(r[2]), key=str(r[0]), length=float(r[3]), ways=_ways(str(r[0])))
    e = net.edges
    out: dict[int, list[str]] = {}
    for i, (u, v, way, length) in enumerate(zip(e.u.to_numpy(), e.v.to_numpy(), e.osm_way.to_numpy(),
                                                  e.length_m.to_numpy(), strict=True)):
        u, v = str(u), str(v)
        if u not in g or v not in g:
            continue
        tol = 0.05 * length + 5.0

        def weight(a, b, d, way=way):
            return min(x["length"] * (1.0 if way in x["ways"] else 1.5) for x in d.values())
        try:
            nodes = nx.dijkstra_path(g, u, v, weight=weight)
        except nx.NetworkXNoPath:
            continue
        chain, total = [], 0.0
        for a, b in zip(nodes[:-1], nodes[1:], strict=True):
            key, data = min(g[a][b].items(), key=lambda kv: (way not in kv[1]["ways"], kv[1]["length"]))
            chain.append(key)
            total += data["length"]
        same_way = all(way in g[a][b][k]["ways"] for a, b, k in zip(nodes[:-1], nodes[1:], chain, strict=True))
        if same_way or 0.5 * length - tol <= total <= 1.05 * length + tol:
            out[i] = chain
    return out


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


def edet_agreement(e_det: np.ndarray, mean: np.ndarray, min_wh: float = 5.0) -> dict:
    """How well Eq. 8's E_det predicts an atlas's mean energy per edge: the number of edges with a
    mean, their correlation r, R² with E_det as the prediction, and the median ratio SUMO / E_det
    over edges with |E_det| > ``min_wh`` (near-zero energies make ratios meaningless)."""
    ok = np.isfinite(mean)
    x, y = np.asarray(e_det)[ok], np.asarray(mean)[ok]
    big = np.abs(x) > min_wh
    if x.size < 2:
        return {"edges_with_mean": int(x.size), "r_edet_sumo": None, "r2_edet_sumo": None,
                "median_ratio_sumo_edet": None}
    return {"edges_with_mean": int(x.size), "r_edet_sumo": float(np.corrcoef(x, y)[0, 1]),
            "r2_edet_sumo": 1.0 - float(np.sum((y - x) ** 2) / np.sum((y - y.mean()) ** 2)),
            "median_ratio_sumo_edet": float(np.median(y[big] / x[big])) if big.any() else None}


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


_NODE = re.compile(r"<node\b([^>]*?)(/?)>")
_ATTR = re.compile(r"""\b(id|lat|lon)=(?:'([^']*)'|"([^"]*)")""")
_ELE_TAG = re.compile(r"""<tag\s+k=['"]ele['"][^>]*/>""")
#: A node element with its ele tag inside: its id and the elevation.
_NODE_ELE = re.compile(r"""<node\b[^>]*?\bid=['"](-?\d+)['"][^>]*?(?<!/)>(?:(?!</node>).)*?<tag\s+k=['"]ele['"]\s+v=['"]([^'"]*)['"]""",
                       re.S)


def osm_with_elevations(src: Path, dst: Path, net, *, dem=None) -> Path:
    """A copy of the OSM file ``src`` whose nodes carry evroute's elevations, so that SUMO's grades
    are evroute's: evroute's own node elevation where the network kept the node (smoothed:
    :func:`evroute.roads.network.lipschitz_envelope`), linear along the edge between its two ends
    for a node inside one of the network's edges; elsewhere (roads the network left out) the DEM
    sampled as evroute samples it where one is given (netconvert of eclipse-sumo 1.28 reads no
    GeoTIFF), else the node's own ``ele`` tag."""
    raw = src.read_text(encoding="utf-8")
    found, own = [], {}
    for m in _NODE.finditer(raw):
        attrs = {k: a or b for k, a, b in _ATTR.findall(m.group(1))}
        if {"id", "lat", "lon"} <= set(attrs):
            found.append((int(attrs["id"]), float(attrs["lat"]), float(attrs["lon"])))
    for m in _NODE_ELE.finditer(raw):  # the file's own ele tags, for the nodes evroute did not keep
        try:
            own[int(m.group(1))] = float(m.group(2))
        except ValueError:
            pass
    text = _ELE_TAG.sub("", raw)
    ele = dict(net.nodes.elevation_m.to_dict())
    inside = _elevations_inside_edges(net)
    for i, lat, lon in found:
        if i not in ele:
            h = inside.get((round(lon, 7), round(lat, 7)))
            if h is not None:
                ele[i] = h
    missing = [(i, lat, lon) for i, lat, lon in found if i not in ele]
    if missing and dem is not None:
        g = nx.Graph()
        g.add_nodes_from((i, {"x": lon, "y": lat}) for i, lat, lon in missing)
        ele.update(node_elevations(g, Path(dem))[0])
    for i, _, _ in missing:
        if i not in ele and i in own:
            ele[i] = own[i]

    def tagged(m):
        attrs = {k: a or b for k, a, b in _ATTR.findall(m.group(1))}
        if "id" not in attrs or int(attrs["id"]) not in ele:
            return m.group(0)
        tag = f'<tag k="ele" v="{float(ele[int(attrs["id"])]):.3f}"/>'
        return f"<node{m.group(1)}>{tag}</node>" if m.group(2) else f"<node{m.group(1)}>{tag}"
    dst.write_text(_NODE.sub(tagged, text), encoding="utf-8")
    return dst


def _elevations_inside_edges(net) -> dict:
    """The elevation of every inner point of the network's edges' geometries, linear in the
    distance along the edge between its two ends' elevations, by (lon, lat) rounded to 1e-7°."""
    h = net.nodes.elevation_m
    out = {}
    for geom, u, v in zip(net.geometry, net.edges.u.to_numpy(), net.edges.v.to_numpy(), strict=True):
        g = np.asarray(geom, dtype=np.float64)
        if len(g) < 3:
            continue
        lat0 = math.radians(float(g[:, 1].mean()))
        step = np.hypot(np.diff(g[:, 0]) * math.cos(lat0), np.diff(g[:, 1]))
        along = np.r_[0.0, np.cumsum(step)]
        share = along / along[-1] if along[-1] > 0 else np.zeros(len(g))
        hu, hv = float(h.loc[u]), float(h.loc[v])
        for (lon, lat), q in zip(g[1:-1], share[1:-1], strict=True):
            out.setdefault((round(float(lon), 7), round(float(lat), 7)), hu + float(q) * (hv - hu))
    return out


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


def _sumo_network(net, network: str | None, osm: str | None, dem: str | None, folder: Path,
                  unmapped: str = "their truth falls back to E_det", stacklevel: int = 3):
    """``netconvert`` of the OSM input evroute read ``net`` from (elevations from ``dem`` where
    given) into ``folder/net.net.xml``, read back with sumolib, and the chain of SUMO edges of every
    evroute edge (:func:`map_edges`; a warning names the share without one). Returns
    ``(sumolib net, chains, share mapped)``."""
    osm_path = _osm_input(net, network, osm, folder)
    if net.meta.get("elevation_source", "none") != "none":  # one elevation model: SUMO's grades are evroute's
        osm_path = osm_with_elevations(osm_path, folder / "elevated.osm", net, dem=dem)
    with stage(f"SUMO network of {net.name}: netconvert"):
        args = [str(sumo_home() / "bin" / "netconvert"), "--osm-files", str(osm_path), "--osm.elevation", "true",
                "--keep-edges.by-vclass", "passenger", "--remove-edges.isolated", "--geometry.remove",
                "--no-warnings", "-o", "net.net.xml"]
        _run(args, "netconvert", folder)
    import sumolib  # the extra's reader of SUMO's files

    snet = sumolib.net.readNet(str(folder / "net.net.xml"))
    sedges = pd.DataFrame([(x.getID(), x.getFromNode().getID(), x.getToNode().getID(), x.getLength())
                           for x in snet.getEdges(withInternal=False)], columns=["id", "from", "to", "length"])
    chains = map_edges(net, sedges)
    mapped = len(chains) / max(net.n_edges, 1)
    if len(chains) < net.n_edges:
        warnings.warn(f"the SUMO network of {net.name} has no chain for {net.n_edges - len(chains):,} of "
                      f"{net.n_edges:,} edges ({100 * (1 - mapped):.1f} %): {unmapped}",
                      EvrouteWarning, stacklevel=stacklevel)
    return snet, chains, mapped


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
        instead of random trips; its vehicles become ``vehicle`` (:func:`user_demand`). The atlas
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
    _, chains, mapped = _sumo_network(net, run["network"], run["osm"], run["dem"], folder,
                                      stacklevel=5 if trace else 4)
    (folder / "ev.add.xml").write_text(f"<additional>{vtype_xml(vehicle)}</additional>")
    with stage(f"SUMO atlas of {net.name}: demand"):
        if demand is None:
            _run([sys.executable, str(home / "tools" / "randomTrips.py"), "-n", "net.net.xml", "-b", "0",
                  "-e", repr(3600.0 * hours), "-p", repr(3600.0 / run["rate"]), "--fringe-factor", "5", "--validate",
                  "--seed", str(seed), "--trip-attributes", 'type="ev"', "--additional-file", "ev.add.xml",
                  "-o", "trips.xml", "-r", "background.rou.xml"], "randomTrips.py", folder)
        n_probe = _write_probes(net, chains, run["oracle"], run["start"], run["end"], run["probes"], hours,
                                folder / "probes.rou.xml")
    output = (["--fcd-output", "rows.parquet", "--fcd-output.attributes", "lane,speed,z"] if trace else
              ["--device.battery.probability", "1", "--emission-output", "rows.parquet",
               "--emission-output.attributes", "electricity,lane,speed"])
    with stage(f"SUMO atlas of {net.name}: simulation"):
        log = _run([str(home / "bin" / "sumo"), "-n", "net.net.xml", "-r", "background.rou.xml,probes.rou.xml",
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


#: The columns of a trace :func:`sumo_drives` writes, one row per GPS fix (see
#: :mod:`evroute.world.drives` for what ``evroute drives import`` reads).
TRACE_COLUMNS = ("trip", "vehicle", "time_s", "lat", "lon", "speed_mps", "energy_wh")


@dataclass
class SumoDrives:
    """Drives made in SUMO: the GPS traces a logger would record and the answer key.

    ``traces``: one row per fix (:data:`TRACE_COLUMNS`; ``energy_wh`` is the energy used since
    the trip began, as a car's trip meter shows it). ``answer``: SUMO's own traversals of the
    drives (:data:`ATLAS_COLUMNS` plus ``trip``), what a perfect import would produce.
    ``summary``: what was simulated."""

    traces: pd.DataFrame
    answer: pd.DataFrame
    summary: dict


def sumo_drives(net, network: str, vehicle: Vehicle, *, vehicles: int = 20, seed: int = 0, rate: float = 1800.0,
                hours: float = 0.5, gps_noise_m: float = 0.0, sample_hz: float = 1.0, min_distance_m: float = 1000.0,
                osm: str | None = None, dem: str | None = None, battery_dir: Path | None = None,
                around: tuple[float, float, float] | None = None) -> SumoDrives:
    """Realistic drives with an answer key: ``vehicles`` cars (``vehicle``, with SUMO's battery
    device) on random trips of at least ``min_distance_m`` through background traffic as in the
    atlas (``rate`` random trips an hour over ``hours`` hours), recorded as GPS traces.

    With ``around = (lat, lon, km)`` the recorded cars are a district's fleet (taxis, deliveries,
    a town's commuters): each trip begins and ends on an edge whose middle lies within ``km``
    kilometres of the point (every such edge equally likely, :func:`district_weights`), though it
    may drive out of the district between them; the background traffic is the whole network's
    either way.

    Every second SUMO reports each drive's position, speed and electricity; the trace keeps one
    fix every ``1 / sample_hz`` seconds (``sample_hz`` in (0, 1]), its position moved by
    independent Gaussian noise of ``gps_noise_m`` metres in east and north (seeded by ``seed``),
    and the energy used so far. The answer key is SUMO's own traversals of the same cars
    (:func:`traversals`: complete traversals, the kinetic split), against which an import
    (:func:`evroute.world.drives.import_traces`) is measured. With ``battery_dir``, SUMO's own battery
    output of the drives (``battery.xml``, every second, 6 decimals) and the SUMO network
    (``net.net.xml``) are written there too: what a SUMO user would import
    (:func:`evroute.world.drives.read_sumo_battery`).

    Returns
    -------
    SumoDrives
        The traces (one row per fix), the answer key (SUMO's traversals of the same cars) and a
        summary of what was simulated.
    """
    if vehicles < 1 or not rate > 0 or not hours > 0 or not gps_noise_m >= 0 or not 0 < sample_hz <= 1:
        raise EvrouteError("the drives need vehicles >= 1, rate > 0, hours > 0, gps_noise_m >= 0 and sample_hz "
                           "in (0, 1]")
    home = sumo_home()
    with tempfile.TemporaryDirectory(prefix="evroute-sumo-") as tmp:
        folder = Path(tmp)
        snet, chains, mapped = _sumo_network(net, network, osm, dem, folder,
                                             "the answer key has no traversal of them")
        (folder / "ev.add.xml").write_text(f"<additional>{vtype_xml(vehicle)}</additional>")
        (folder / "drive.add.xml").write_text(f"<additional>{vtype_xml(vehicle, 'drive')}</additional>")
        span = 3600.0 * hours
        with stage(f"SUMO drives on {net.name}: demand"):
            common = ["-n", "net.net.xml", "-b", "0", "--fringe-factor", "5", "--validate"]
            _run([sys.executable, str(home / "tools" / "randomTrips.py"), *common, "-e", repr(span),
                  "-p", repr(3600.0 / rate), "--seed", str(seed), "--trip-attributes", 'type="ev"',
                  "--additional-file", "ev.add.xml", "-o", "trips.xml", "-r", "background.rou.xml"],
                 "randomTrips.py", folder)
            district, n_district = [], None
            if around is not None:  # randomTrips draws sources and sinks from these edge weights
                weights = district_weights(snet, around)
                if not weights:
                    raise EvrouteError(f"no road of {net.name} lies within {around[2]:g} km of "
                                       f"{around[0]:g},{around[1]:g}")
                # one element a line: randomTrips reads the file with sumolib.xml.parse_fast
                body = "".join(f'    <edge id="{xml_escape(e, {chr(34): "&quot;"})}" value="1"/>\n' for e in weights)
                for suffix in (".src.xml", ".dst.xml"):
                    (folder / f"district{suffix}").write_text(
                        f'<edgedata>\n  <interval begin="0" end="{span!r}">\n{body}  </interval>\n</edgedata>\n')
                district, n_district = ["--weights-prefix", "district"], len(weights)
            _run([sys.executable, str(home / "tools" / "randomTrips.py"), *common, *district, "-e", repr(0.8 * span),
                  "--trip-attributes", 'type="drive"', "--additional-file", "drive.add.xml",
                  "-p", repr(0.8 * span / vehicles), "--seed", str(seed + 1), "--prefix", "drive",
                  "--min-distance", repr(float(min_distance_m)), "-o", "dtrips.xml", "-r", "drives.rou.xml"],
                 "randomTrips.py", folder)
            if "<trip " not in (folder / "dtrips.xml").read_text():
                where = "" if around is None else f" beginning and ending within {around[2]:g} km of the point"
                raise EvrouteError(f"SUMO's randomTrips.py found no trip of at least {min_distance_m:g} m{where} "
                                   f"on {net.name}")
        with stage(f"SUMO drives on {net.name}: simulation"):
            log = _run([str(home / "bin" / "sumo"), "-n", "net.net.xml", "-r", "background.rou.xml,drives.rou.xml",
                        "--device.battery.probability", "1", "--emission-output", "emissions.parquet",
                        "--emission-output.attributes", "electricity,lane,speed,x,y", "--seed", str(seed),
                        "--no-step-log", "--ignore-route-errors", "--time-to-teleport", "300",
                        "--duration-log.statistics",
                        *(["--battery-output", "battery.xml", "--battery-output.precision", "6"]
                          if battery_dir is not None else [])], "sumo", folder)
        if battery_dir is not None:
            _drives_only(folder / "battery.xml", Path(battery_dir) / "battery.xml")
            with atomic_path(Path(battery_dir) / "net.net.xml") as tmp_net, \
                    open(folder / "net.net.xml", "rb") as src, open(tmp_net, "wb") as dst:
                first = src.readline()  # the XML declaration, then evroute's mark
                dst.write(first if first.startswith(b"<?xml") else b'<?xml version="1.0" encoding="UTF-8"?>\n')
                dst.write(f"<!-- generator: {generator()} -->\n".encode())
                if not first.startswith(b"<?xml"):
                    dst.write(first)
                shutil.copyfileobj(src, dst)
        raw = pd.read_parquet(folder / "emissions.parquet")
        vid = raw.iloc[:, 1].astype(str)
        raw = raw[vid.str.startswith("drive").to_numpy()]
        em = pd.DataFrame({"time": pd.to_numeric(raw.iloc[:, 0]).to_numpy(), "vehicle": raw.iloc[:, 1].astype(str),
                           "electricity": raw.filter(like="electricity").iloc[:, 0].astype(np.float64),
                           "lane": raw.filter(like="lane").iloc[:, 0].astype(str),
                           "speed": raw.filter(like="speed").iloc[:, 0].astype(np.float64),
                           "x": raw.filter(regex=r"(^|_)x$").iloc[:, 0].astype(np.float64),
                           "y": raw.filter(regex=r"(^|_)y$").iloc[:, 0].astype(np.float64)})
        em = em.sort_values(["vehicle", "time"], kind="stable").reset_index(drop=True)
        lon, lat = snet.convertXY2LonLat(em.x.to_numpy().copy(), em.y.to_numpy().copy())
        answer = traversals(em[["time", "vehicle", "electricity", "lane", "speed"]], chains, vehicle)
    answer.insert(0, "trip", answer.vehicle)
    # the trip meter: energy used since the trip's first report; SUMO reports a step's position,
    # speed and electricity at its end
    exact = pd.DataFrame({"trip": em.vehicle.to_numpy(), "vehicle": em.vehicle.to_numpy(),
                          "time_s": em.time.to_numpy(np.float64), "lat": np.asarray(lat, dtype=np.float64),
                          "lon": np.asarray(lon, dtype=np.float64), "speed_mps": em.speed.to_numpy(np.float64),
                          "energy_wh": em.groupby("vehicle", sort=False).electricity.cumsum().to_numpy()})
    traces = degrade(exact, gps_noise_m, sample_hz, seed=seed)
    teleports = re.search(r"Teleports: (\d+)", log)
    summary = {"network": net.name, "vehicle": vehicle.name, "vehicles": int(traces.trip.nunique()),
               "vehicles_asked": int(vehicles), "seed": int(seed), "rate_per_hour": float(rate), "hours": float(hours),
               "gps_noise_m": float(gps_noise_m), "sample_hz": float(sample_hz), "fixes": int(len(traces)),
               "answer_traversals": int(len(answer)), "edges_mapped_share": mapped, "sumo": sumo_version(),
               "teleports": int(teleports.group(1)) if teleports else 0,
               "around": None if around is None else {"lat": float(around[0]), "lon": float(around[1]),
                                                      "km": float(around[2]), "edges": n_district}}
    return SumoDrives(traces, answer, summary)


def district_weights(snet, around: tuple[float, float, float]) -> list[str]:
    """The ids of the SUMO network ``snet``'s edges (sumolib's, no internal ones) whose middle
    (half way along the edge's shape) lies within ``km`` kilometres of ``lat, lon`` (great circle;
    ``around = (lat, lon, km)``), in the network's order: a district's sources and sinks for
    ``randomTrips.py``.

    Returns
    -------
    list of str
        The SUMO edge ids of the district; empty where no edge lies within ``km``.
    """
    lat, lon, km = around
    if not (km > 0 and math.isfinite(km)):
        raise EvrouteError(f"a district's radius must be positive kilometres, got {km:g}")
    import osmnx
    from sumolib.geomhelper import positionAtShapeOffset

    ids, xs, ys = [], [], []
    for e in snet.getEdges():
        x, y = positionAtShapeOffset(e.getShape(), 0.5 * e.getLength())
        ids.append(e.getID())
        xs.append(x)
        ys.append(y)
    if not ids:
        return []
    elon, elat = snet.convertXY2LonLat(np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64))
    dist_m = osmnx.distance.great_circle(lat, lon, np.asarray(elat, dtype=np.float64),
                                         np.asarray(elon, dtype=np.float64), earth_radius=EARTH_RADIUS_M)
    return [i for i, d in zip(ids, np.atleast_1d(dist_m), strict=True) if d <= 1000.0 * km]


def _drives_only(src: Path, dst: Path) -> None:
    """SUMO's battery output ``src`` with only the recorded drives' vehicles (ids ``drive…``; the
    background traffic carries the battery device too), streamed to ``dst`` (temp file, then
    renamed)."""
    from xml.sax.saxutils import quoteattr

    with atomic_path(dst) as tmp, open(tmp, "w", encoding="utf-8") as out:
        out.write(f'<?xml version="1.0" encoding="UTF-8"?>\n<!-- generator: {generator()} -->\n<battery-export>\n')
        for _, elem in ET.iterparse(src, events=("end",)):
            if elem.tag != "timestep":
                continue
            cars = [v for v in elem.iter("vehicle") if v.get("id", "").startswith("drive")]
            if cars:
                out.write(f'  <timestep time={quoteattr(elem.get("time"))}>\n')
                for v in cars:
                    out.write("    <vehicle " + " ".join(f"{k}={quoteattr(x)}" for k, x in v.attrib.items()) + "/>\n")
                out.write("  </timestep>\n")
            elem.clear()
        out.write("</battery-export>\n")


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
    ``min_traversals`` traversals keep E_det with Gaussian noise of ς (the fallback). With
    ``turns`` the truth is edges plus turns booked per car (:func:`evroute.world.junctions.truth_turns`):
    f and the observations are the traversals at a constant kinetic state, a turn's observation
    one recorded car's dissipation there (Gaussian about the model's where too few cars took it)."""

    def __init__(self, values, noise_std, energies: np.ndarray, offsets: np.ndarray, counts: np.ndarray,
                 description: dict, turns: Turns | None = None, potential: np.ndarray | None = None,
                 turn_samples: tuple | None = None):
        super().__init__(values, noise_std, float("nan"), description, supports_drift=False, turns=turns,
                         potential=potential)
        self._energies, self._offsets, self._counts = energies, offsets, counts
        self._turn_samples = turn_samples

    def observe(self, rng, path, expected):
        path = np.asarray(path, dtype=np.int64)
        u = rng.random(len(path))
        noise = rng.standard_normal(len(path))
        n = self._counts[path]
        drawn = self._energies[np.minimum(self._offsets[path] + (u * n).astype(np.int64), len(self._energies) - 1)] \
            if len(self._energies) else np.zeros(len(path))
        return np.where(n > 0, drawn, expected[path] + noise_at(self.noise_std, path) * noise)

    def observe_turns(self, rng, arcs):
        """One recorded car's dissipation at each turn of ``arcs`` (drawn uniformly among the cars
        that took it), the model's mean plus Gaussian noise where too few did."""
        arcs = np.asarray(arcs, dtype=np.int64)
        samples, offsets = self._turn_samples
        u = rng.random(len(arcs))
        noise = rng.standard_normal(len(arcs))
        n = self.turns.counts[arcs]
        drawn = samples[np.minimum(offsets[arcs] + (u * n).astype(np.int64), len(samples) - 1)] \
            if len(samples) else np.zeros(len(arcs))
        spread = self.turns.noise_std if self.turns.noise_std is not None else 0.0
        return np.where(n > 0, drawn, self.turns.dissipation[arcs] + spread * noise)


@declared(*SUMO_TRUTH_OPTIONS)
def sumo_truth(setup, rate: float, hours: float, *, probes: int, atlas_seed: int, hour, min_traversals: int,
               demand: str | None = None, turns: bool = True, powertrain: str | None = None, ambient_c: float = 20.0):
    """``--truth sumo[...]``: the atlas of the run's network, vehicle (the truth's) and trip; with
    ``turns`` (default) the truth is edges at a constant kinetic state plus the junctions booked
    per car (:func:`evroute.world.junctions.truth_turns`), which creates no energy by construction,
    else the traversals' whole energies booked on edges (which does: a paper-style truth, its regret
    the rectified one). With ``powertrain`` the same traffic is driven by a FASTSim car at
    ``ambient_c`` °C (:mod:`evroute.world.powertrain`): the truth is that car's, whatever the run's
    vehicle (the agents' prior), and an edge too few cars drove keeps that car's E_det."""
    if hour is not None and not 0 <= hour < hours:  # before the atlas is built
        raise EvrouteError(f"sumo truth: hour={hour:g} is outside the atlas's {hours:g} simulated hours")
    route = setup.route
    vehicle = setup.vehicle or Vehicle()
    atlas = build_atlas(setup.net, setup.network, vehicle, oracle=Oracle.from_network(setup.net),
                        start=None if route is None else route.start, end=None if route is None else route.end,
                        rate=rate, hours=hours, probes=probes, seed=atlas_seed, osm=setup.osm, dem=setup.dem,
                        demand=demand, powertrain=powertrain, ambient_c=ambient_c)
    booked = atlas.vehicle or vehicle  # the car the atlas books: the run's, or the power train's
    n = setup.net.n_edges
    column = "edge_wh" if turns else "energy_wh"
    mean, counts = atlas.mean_energy(n, hour=hour, min_traversals=min_traversals, column=column)
    covered = ~np.isnan(mean)
    fallback = setup.mean
    if powertrain is not None:
        from ..physics.routes import edge_energies

        fallback = edge_energies(setup.net, booked)
    values = np.where(covered, mean, fallback)
    window = atlas.window(hour)
    junctions, samples, potential = None, None, None
    if turns:
        junctions, turn_samples, turn_offsets = truth_turns(window, setup.net, booked, min_traversals=min_traversals)
        samples = (turn_samples, turn_offsets)
        e = setup.net.edges
        potential = potential_energy_wh(e.length_m.to_numpy(), e.grade.to_numpy(), booked)
    t = window[covered[window.edge.to_numpy()]].sort_values(["edge", "vehicle", "enter_s"], kind="stable")
    used = np.bincount(t.edge.to_numpy(), minlength=n)
    offsets = np.concatenate([[0], np.cumsum(used)[:-1]]).astype(np.int64)
    on_route = None if route is None else bool(covered[[route.start, route.end]].all())
    description = {"truth_atlas": atlas.key, "atlas_traversals": int(len(t)),
                   "atlas_edges_covered_share": float(covered.mean()), "atlas_teleports": atlas.summary["teleports"],
                   "atlas_edges_mapped_share": atlas.summary["edges_mapped_share"], "atlas_trip_ends_covered": on_route,
                   "truth_turns": bool(turns)}
    if powertrain is not None:
        description.update({"truth_powertrain": powertrain, "truth_ambient_c": float(ambient_c),
                            "truth_vehicle": booked.to_dict()})
    if junctions is not None:
        description["truth_turns_measured"] = int((junctions.counts > 0).sum())
        if junctions.noise_std is not None:  # how one car's dissipation at a turn spreads
            description["truth_turn_noise_wh"] = junctions.noise_std
    return AtlasTruth(values, setup.noise_std, t[column].to_numpy(np.float64), offsets, used, description,
                      turns=junctions, potential=potential, turn_samples=samples)


def drive_predictions(table: pd.DataFrame, edge_mean: np.ndarray, turns: Turns | None, *, kin_in: np.ndarray | None = None,
                      kin_out: np.ndarray | None = None, min_edges: int = 3) -> pd.DataFrame:
    """Each drive of an atlas (a car's run of consecutive traversals, at least ``min_edges``
    long) beside what a truth predicts for it: with ``turns``, the edges' means plus the turns'
    costs plus the mean ``kin_in`` of its first edge and ``kin_out`` of its last (its ends); without,
    the edges' means (``edge_mean``: of whole traversals). A drive's measured energy includes the
    junctions' internal lanes between its traversals (``junction_wh``). Drives over an edge without
    a mean are left out.

    Returns
    -------
    pandas.DataFrame
        ``vehicle``, ``edges``, ``measured_wh`` (SUMO's energy of the drive), ``predicted_wh``.
    """
    t = table.reset_index(drop=True)
    e, nxt, car = t.edge.to_numpy(), t.next_edge.to_numpy(), t.vehicle.to_numpy()
    chained = np.zeros(len(t), dtype=bool)  # row i continues into row i + 1
    if len(t) > 1:
        chained[:-1] = (nxt[:-1] == e[1:]) & (car[:-1] == car[1:])
    first = np.r_[True, ~chained[:-1]] if len(t) else np.zeros(0, dtype=bool)
    drive = np.cumsum(first) - 1
    part = np.asarray(edge_mean, dtype=np.float64)[e]
    if turns is not None:
        src, dst = np.asarray(turns.conn_src, np.int64), np.asarray(turns.conn_dst, np.int64)
        arc_of = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(src.tolist(), dst.tolist(), strict=True))}
        k = np.flatnonzero(chained)
        arcs = np.array([arc_of.get((int(e[i]), int(e[i + 1])), -1) for i in k], dtype=np.int64)
        turn_cost = np.where(arcs >= 0, turns.costs[np.maximum(arcs, 0)], np.nan)
        np.add.at(part, k, turn_cost)
        last = np.r_[~chained[:-1], True] if len(t) else first
        part = part + np.where(first, np.asarray(kin_in)[e], 0.0) + np.where(last, np.asarray(kin_out)[e], 0.0)
    measured = t.energy_wh.to_numpy(np.float64).copy()
    if "junction_wh" in t:  # a junction's internal lanes between two traversals of the drive
        measured[chained] += np.nan_to_num(t.junction_wh.to_numpy(np.float64)[chained])
    d = pd.DataFrame({"drive": drive, "vehicle": car, "measured_wh": measured, "predicted_wh": part})
    out = d.groupby("drive", sort=True).agg(vehicle=("vehicle", "first"), edges=("measured_wh", "size"),
                                            measured_wh=("measured_wh", "sum"),
                                            predicted_wh=("predicted_wh", lambda x: x.sum(min_count=len(x))))
    return out[(out.edges >= min_edges) & np.isfinite(out.predicted_wh)].reset_index(drop=True)


def atlas_conservation(atlas: Atlas, net, vehicle: Vehicle | None = None, *, e_det: np.ndarray | None = None,
                       start: int | None = None, end: int | None = None, min_traversals: int = 3,
                       noise_std: float | None = None, time_limit: float = 60.0) -> dict:
    """The two truths an atlas gives, side by side: ``whole`` (each traversal's measured energy
    booked on its edge) and ``split`` (edges at a constant kinetic state plus the junctions booked
    per car, as ``--truth sumo`` is by default). For each, :func:`evroute.world.conservation.truth_checks`
    (the floor on the edges the atlas measured, negative cycles, the turns' dissipation), the
    drives' energies it predicts against SUMO's (:func:`drive_predictions`; in-sample: the means
    include the drive) and, with a trip, :func:`evroute.world.conservation.trip_checks`. Uncovered
    edges fall back on ``e_det`` (Eq. 8) as in the truth.

    Returns
    -------
    dict
        ``{"whole": {...}, "split": {...}}``; each with the checks' keys, ``drives``,
        ``drive_error_median`` (median |predicted − measured| / |measured| over drives) and
        ``drive_bias`` ((Σ predicted − Σ measured) / Σ |measured|).
    """
    from .conservation import trip_checks, truth_checks

    vehicle = vehicle or Vehicle()
    n = net.n_edges
    if e_det is None:
        from ..physics.routes import edge_energies

        e_det = edge_energies(net, vehicle)
    if noise_std is None:
        noise_std = 0.1 * float(np.std(e_det))  # paper 003's ς = 0.1 σ_det
    oracle = Oracle.from_network(net)
    t = atlas.table
    counts = np.bincount(t.edge.to_numpy(), minlength=n)
    covered = counts >= min_traversals
    mean_in = np.bincount(t.edge.to_numpy(), weights=t.kin_in_wh.to_numpy(), minlength=n) / np.maximum(counts, 1)
    mean_out = np.bincount(t.edge.to_numpy(), weights=t.kin_out_wh.to_numpy(), minlength=n) / np.maximum(counts, 1)
    out = {}
    for booking, column, turns in (("whole", "energy_wh", None),
                                   ("split", "edge_wh", truth_turns(t, net, vehicle, min_traversals=min_traversals)[0])):
        mean, _ = atlas.mean_energy(n, min_traversals=min_traversals, column=column)
        values = np.where(covered, mean, e_det)
        checks = truth_checks(net, values, turns, covered=covered, vehicle=vehicle)
        drives = drive_predictions(t, np.where(covered, mean, np.nan), turns, kin_in=np.where(covered, mean_in, np.nan),
                                   kin_out=np.where(covered, mean_out, np.nan))
        err = np.abs(drives.predicted_wh - drives.measured_wh) / np.maximum(np.abs(drives.measured_wh), 1e-9)
        checks.update({"drives": len(drives), "drive_error_median": float(np.median(err)) if len(drives) else None,
                       "drive_bias": float((drives.predicted_wh.sum() - drives.measured_wh.sum())
                                           / max(float(np.abs(drives.measured_wh).sum()), 1e-9)) if len(drives) else None})
        if start is not None and end is not None:
            checks.update(trip_checks(net, oracle, values, start=start, end=end, turns=turns, noise_std=noise_std,
                                      vehicle=vehicle, time_limit=time_limit))
        out[booking] = checks
    return out


register_truth("sumo", sumo_truth, description="per-edge energies from SUMO's EV model in simulated traffic (an atlas; needs "
               f"{SUMO_INSTALL}); an observation is one recorded traversal", requires=(("sumo", "sumolib"), SUMO_INSTALL))


# --------------------------------------------------------------------------------------
# type-II maximum likelihood on an atlas: what a deployment would fit
# --------------------------------------------------------------------------------------


def fit_hyperparameters(atlas: Atlas, net, e_det: np.ndarray, *, kernel: str = "combined", kappa: float = 1.0,
                        nu: float = 2.0, lengthscales=FIT_LENGTHSCALES,
                        column: str = "edge_wh") -> dict:
    """σ₀, ς and the context lengthscale ℓ of the agents' prior GP(E_det, σ₀² k_ℓ) with noise ς,
    by type-II maximum likelihood (:func:`evroute.priors.fitting.fit_prior`) on the first half of the
    atlas (traversals entered in the first half of the simulated span; the rest is held out).
    ``column``: what the agents observe, ``edge_wh`` under the default truth of edges plus turns
    (``energy_wh`` with ``turns=false``).

    Returns
    -------
    dict
        As :func:`evroute.priors.fitting.fit_prior`, and ``noise_model``: the per-edge noise model fitted on
        the same traversals (:func:`evroute.priors.noise.fit_noise_model`) with σ₀ and ℓ fitted under it.
    """
    t = atlas.table
    span = float(atlas.summary["hours"]) * 3600.0
    half = t[t.enter_s < span / 2]
    what = "the atlas's first half"
    out = fit_prior(net, e_det, half, kernel=kernel, kappa=kappa, nu=nu, lengthscales=lengthscales,
                    column=column, what=what)
    # the per-edge noise model (evroute.priors.noise) on the same traversals, then σ₀ and ℓ under it
    noise = fit_noise_model(net, half, column=column, what=what)
    under = fit_prior(net, e_det, half, kernel=kernel, kappa=kappa, nu=nu, lengthscales=lengthscales,
                      column=column, what=what, noise_sd=edge_noise_std(net, noise["spec"]))
    out["noise_model"] = {**noise, "prior_std": under["prior_std"], "lengthscale": under["lengthscale"],
                          "neg_log_likelihood_with_prior": under["neg_log_likelihood"]}
    return out
