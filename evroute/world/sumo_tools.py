"""SUMO's tools: finding and running them, the car they drive, a user's demand, and the SUMO
network of an evroute network.

SUMO is the optional extra ``pip install "evroute[sumo]"`` (eclipse-sumo, sumolib), imported
lazily: :func:`sumo_home` finds it (and restores PROJ's paths, which importing it resets, for
rasterio), :func:`run_tool` runs one of its programs with one error line on failure.
:func:`vtype_xml` is the evroute vehicle as SUMO's vType with the battery device,
:func:`user_demand` a user's route file made that car. :func:`sumo_network` converts the OSM input
evroute read (``netconvert``; its nodes carrying evroute's own elevations,
:func:`osm_with_elevations`) and maps every evroute edge to its chain of SUMO edges
(:func:`evroute.world.sumo_edges.map_edges`).
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd

from ..errors import EvrouteError, EvrouteWarning
from ..physics.energy import Vehicle
from ..progress import stage
from ..roads.network import network_spec, resolve_osm_path
from ..roads.osm import node_elevations, write_osm_xml
from ..roads.synthetic import synthetic_graph
from .sumo_edges import map_edges

__all__ = ["SUMO_INSTALL", "sumo_home", "sumo_version", "run_tool", "vtype_xml", "DEMAND_VEHICLES", "DEMAND_TYPES",
           "user_demand", "osm_input", "osm_with_elevations", "sumo_network"]

#: What to run when SUMO is missing.
SUMO_INSTALL = 'pip install "evroute[sumo]"'


def sumo_home() -> Path:
    """SUMO's folder (``bin/``, ``tools/``) from the ``eclipse-sumo`` package; one error line
    naming the install command when it is missing.

    Returns
    -------
    pathlib.Path
    """
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


def run_tool(args: list[str], what: str, cwd: Path) -> str:
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
    added to every second by :func:`evroute.world.sumo_atlas.build_atlas`, drawn from the battery as it is, not through
    SUMO's efficiencies). SUMO 1.28's energy model reads
    them from ``<param>`` elements, not from the vType's attributes: both are written
    (tests/test_sumo.py: a delivery van at constant speed is Eq. 8 of the van). Two of SUMO's terms
    that Eq. 8 has not are SUMO's: the rotating mass (pinned, the vehicle's: SUMO's 40 kg unless
    it says otherwise; it matters only when the car accelerates) and the radial drag of cornering (its default, 0.5: energy on curves and at
    turns, a physical part of the truth that the prior E_det lacks).

    Returns
    -------
    str
        The ``<vType>`` element.
    """
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


def osm_input(net, network: str | None, folder: Path, *, osm: str | None = None) -> Path:
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


def sumo_network(net, network: str | None, folder: Path, *, osm: str | None = None, dem: str | None = None,
                 unmapped: str = "their truth falls back to E_det", stacklevel: int = 3):
    """``netconvert`` of the OSM input evroute read ``net`` from (elevations from ``dem`` where
    given) into ``folder/net.net.xml``, read back with sumolib, and the chain of SUMO edges of every
    evroute edge (:func:`evroute.world.sumo_edges.map_edges`; a warning names the share without one). Returns
    ``(sumolib net, chains, share mapped)``."""
    osm_path = osm_input(net, network, folder, osm=osm)
    if net.meta.get("elevation_source", "none") != "none":  # one elevation model: SUMO's grades are evroute's
        osm_path = osm_with_elevations(osm_path, folder / "elevated.osm", net, dem=dem)
    with stage(f"SUMO network of {net.name}: netconvert"):
        args = [str(sumo_home() / "bin" / "netconvert"), "--osm-files", str(osm_path), "--osm.elevation", "true",
                "--keep-edges.by-vclass", "passenger", "--remove-edges.isolated", "--geometry.remove",
                "--no-warnings", "-o", "net.net.xml"]
        run_tool(args, "netconvert", folder)
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
