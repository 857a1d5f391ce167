"""Drives made in SUMO, with an answer key: the GPS traces a logger would record of cars driving
through SUMO's traffic, and SUMO's own traversals of the same cars (:func:`sumo_drives`), against
which an import (:func:`evroute.world.drives.import_traces`) is measured; a district's fleet
(:func:`district_weights`); SUMO's battery output of the drives, as a SUMO user would import it.
"""

from __future__ import annotations

import math
import re
import shutil
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape as xml_escape

import numpy as np
import pandas as pd

from ..errors import EvrouteError
from ..geo import EARTH_RADIUS_M
from ..io import atomic_path, generator
from ..physics.energy import Vehicle
from ..progress import stage
from .drives import degrade
from .sumo_atlas import traversals
from .sumo_tools import run_tool, sumo_home, sumo_network, sumo_version, vtype_xml

__all__ = ["TRACE_COLUMNS", "SumoDrives", "sumo_drives", "district_weights"]


#: The columns of a trace :func:`sumo_drives` writes, one row per GPS fix (see
#: :mod:`evroute.world.drives` for what ``evroute drives import`` reads).
TRACE_COLUMNS = ("trip", "vehicle", "time_s", "lat", "lon", "speed_mps", "energy_wh")


@dataclass
class SumoDrives:
    """Drives made in SUMO: the GPS traces a logger would record and the answer key.

    ``traces``: one row per fix (:data:`TRACE_COLUMNS`; ``energy_wh`` is the energy used since
    the trip began, as a car's trip meter shows it). ``answer``: SUMO's own traversals of the
    drives (:data:`evroute.world.sumo_atlas.ATLAS_COLUMNS` plus ``trip``), what a perfect import would produce.
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
    (:func:`evroute.world.sumo_atlas.traversals`: complete traversals, the kinetic split), against which an import
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
        snet, chains, mapped = sumo_network(net, network, folder, osm=osm, dem=dem,
                                            unmapped="the answer key has no traversal of them")
        (folder / "ev.add.xml").write_text(f"<additional>{vtype_xml(vehicle)}</additional>")
        (folder / "drive.add.xml").write_text(f"<additional>{vtype_xml(vehicle, 'drive')}</additional>")
        span = 3600.0 * hours
        with stage(f"SUMO drives on {net.name}: demand"):
            common = ["-n", "net.net.xml", "-b", "0", "--fringe-factor", "5", "--validate"]
            run_tool([sys.executable, str(home / "tools" / "randomTrips.py"), *common, "-e", repr(span),
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
            run_tool([sys.executable, str(home / "tools" / "randomTrips.py"), *common, *district, "-e", repr(0.8 * span),
                  "--trip-attributes", 'type="drive"', "--additional-file", "drive.add.xml",
                  "-p", repr(0.8 * span / vehicles), "--seed", str(seed + 1), "--prefix", "drive",
                  "--min-distance", repr(float(min_distance_m)), "-o", "dtrips.xml", "-r", "drives.rou.xml"],
                 "randomTrips.py", folder)
            if "<trip " not in (folder / "dtrips.xml").read_text():
                where = "" if around is None else f" beginning and ending within {around[2]:g} km of the point"
                raise EvrouteError(f"SUMO's randomTrips.py found no trip of at least {min_distance_m:g} m{where} "
                                   f"on {net.name}")
        with stage(f"SUMO drives on {net.name}: simulation"):
            log = run_tool([str(home / "bin" / "sumo"), "-n", "net.net.xml", "-r", "background.rou.xml,drives.rou.xml",
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
