"""Traces in: the files a fleet exports, read into one table of fixes.

A logger, a car's telematics or a phone app writes the trip as a CSV (any of ``,`` ``;`` or a
tab between fields, a decimal point or a decimal comma, UTF-8 with or without a byte-order mark,
or Latin-1), a GPX file (the encoding it declares; Garmin's speed extension), or SUMO's battery
output; any of them may be gzipped (``.gz``), and a folder stands for the trace files inside it
(how such files are found and read as text: :mod:`evroute.world.trace_formats`).
:func:`read_traces` reads one file: the columns are found by name (:data:`COLUMN_ALIASES`,
case-insensitive, the unit read from the name where it says one, else from ``--units``), the time
is read as ISO-8601 (with or without a UTC offset), epoch seconds or epoch milliseconds (told
apart by their size), and every choice it made is stated in the
:class:`~evroute.world.import_report.ImportReport` (``formats``). What is broken in a file is named
and dropped there, the rest kept (:mod:`evroute.world.plausibility`); a file that cannot be read at
all is one :class:`~evroute.errors.EvrouteError`, which the import turns into a skipped file and a
warning. :func:`read_sumo_battery` reads SUMO's battery output into the same fixes.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import EvrouteError
from .import_report import ImportReport
from .matching import local_metres
from .plausibility import (
    MAX_JUMP_MPS,
    METER_DROP_W,
    MIN_TRACK_FIXES,
    energy_quantum_wh,
    meter_resets,
    split_jumps,
)
from .trace_formats import open_trace, read_csv_table, read_gpx, trace_kind

__all__ = ["TRACE_FIELDS", "COLUMN_ALIASES", "UNITS", "FIX_COLUMNS", "parse_columns", "parse_units", "normal_name",
           "read_traces", "read_sumo_battery"]

#: The fields of a trace and their default column names: the time, the position in degrees, one
#: energy source (the energy used so far, the power drawn, or the state of charge with the
#: battery's capacity); the speed is optional (else estimated from the positions), the trip and
#: the vehicle name the rows (default: one trip per file).
TRACE_FIELDS = {"time": "time_s", "lat": "lat", "lon": "lon", "energy": "energy_wh", "power": "power_w",
                "soc": "soc_pct", "speed": "speed_mps", "trip": "trip", "vehicle": "vehicle"}

#: Every column name a trace's field is found by (after :func:`normal_name`: lower case, runs of
#: other characters than letters, digits and ``%`` as one ``_``, ``%`` as ``pct``), the field it
#: names and the unit the name says (None: the unit of ``--units``, else the field's first in
#: :data:`UNITS`). Where several columns of a file match one field, the one whose name comes first
#: here is taken. docs/guide/drives.md lists the same table.
COLUMN_ALIASES: dict[str, tuple[str, str | None]] = {
    # time: ISO-8601 text, or seconds / milliseconds (epoch or any origin)
    "time_s": ("time", "s"), "time_ms": ("time", "ms"), "timestamp_ms": ("time", "ms"), "epoch_ms": ("time", "ms"),
    "timestamp": ("time", None), "time": ("time", None), "t": ("time", None), "datetime": ("time", None),
    "date_time": ("time", None), "time_utc": ("time", None), "utc": ("time", None), "gps_time": ("time", None),
    "epoch": ("time", None), "unix_time": ("time", None),
    # position (degrees, WGS84)
    "lat": ("lat", None), "latitude": ("lat", None), "lat_deg": ("lat", None), "gps_lat": ("lat", None),
    "lon": ("lon", None), "lng": ("lon", None), "long": ("lon", None), "longitude": ("lon", None),
    "lon_deg": ("lon", None), "gps_lon": ("lon", None),
    # the energy used so far (a trip meter)
    "energy_wh": ("energy", "Wh"), "energy_kwh": ("energy", "kWh"), "energy_used_wh": ("energy", "Wh"),
    "energy_used_kwh": ("energy", "kWh"), "energy_consumed_wh": ("energy", "Wh"),
    "energy_consumed_kwh": ("energy", "kWh"), "energy": ("energy", None), "energy_used": ("energy", None),
    "energy_consumed": ("energy", None),
    # the battery's power (positive drawn, negative recuperated)
    "power_w": ("power", "W"), "power_kw": ("power", "kW"), "battery_power_w": ("power", "W"),
    "battery_power_kw": ("power", "kW"), "power": ("power", None), "battery_power": ("power", None),
    # the state of charge
    "soc_pct": ("soc", "%"), "soc_percent": ("soc", "%"), "battery_pct": ("soc", "%"), "soc": ("soc", None),
    "state_of_charge": ("soc", None),
    # the speed
    "speed_mps": ("speed", "m/s"), "speed_m_s": ("speed", "m/s"), "speed_kmh": ("speed", "km/h"),
    "speed_km_h": ("speed", "km/h"), "speed_kph": ("speed", "km/h"), "speed_mph": ("speed", "mph"),
    "speed": ("speed", None), "velocity": ("speed", None), "gps_speed": ("speed", None),
    "vehicle_speed": ("speed", None),
    # which trip, which vehicle
    "trip": ("trip", None), "trip_id": ("trip", None), "trip_name": ("trip", None), "journey": ("trip", None),
    "journey_id": ("trip", None),
    "vehicle": ("vehicle", None), "vehicle_id": ("vehicle", None), "vin": ("vehicle", None), "car": ("vehicle", None),
    "car_id": ("vehicle", None), "device": ("vehicle", None), "device_id": ("vehicle", None),
}

#: Each field's units (``--units FIELD=UNIT``) and the factor to evroute's (the first of each).
UNITS: dict[str, dict[str, float]] = {
    "time": {"s": 1.0, "ms": 1e-3},
    "speed": {"m/s": 1.0, "km/h": 1.0 / 3.6, "mph": 0.44704},
    "power": {"W": 1.0, "kW": 1e3},
    "energy": {"Wh": 1.0, "kWh": 1e3},
    "soc": {"%": 1.0, "fraction": 100.0},
}

#: The columns of :func:`read_traces`'s table: the trip and vehicle, the fix (time in seconds, the
#: position, the speed in m/s or NaN, the energy used since the trip's first fix in Wh), the file
#: and row it came from, whether the trip meter's step into the fix can be trusted (False: a reset,
#: :func:`evroute.world.plausibility.meter_resets`) and the energy signal's resolution (Wh, 0: fine).
FIX_COLUMNS = ("trip", "vehicle", "time_s", "lat", "lon", "speed_mps", "energy_wh", "file", "row", "meter_ok",
               "quantum_wh")

#: Epoch times are told apart by their size: beyond 1e14 microseconds, beyond 1e11 milliseconds
#: (1973 in milliseconds, the year 5138 in seconds), beyond 1e8 seconds (1973).
_EPOCH_US, _EPOCH_MS, _EPOCH_S = 1e14, 1e11, 1e8


def normal_name(name: str) -> str:
    """A column's name as :data:`COLUMN_ALIASES` spells it: ``"Speed (km/h)"`` → ``speed_km_h``,
    ``"SoC %"`` → ``soc_pct``.

    Returns
    -------
    str
    """
    text = str(name).replace("\ufeff", "").strip().lower().replace("%", " pct ")
    return re.sub(r"[^0-9a-z]+", "_", text).strip("_")


def parse_columns(text: str | None) -> dict[str, str]:
    """``"time=t,lat=latitude"`` to ``{"time": "t", "lat": "latitude"}``; unknown fields are an
    error naming the known ones.

    Returns
    -------
    dict
        Field to column name.
    """
    return dict(_key_values(text, "--columns", "FIELD=COLUMN", TRACE_FIELDS))


def _key_values(text: str | None, flag: str, form: str, fields) -> list[tuple[str, str]]:
    """The ``KEY=VALUE`` pairs of a comma-separated option, each key one of ``fields``."""
    pairs = []
    for part in (text or "").split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not value:
            raise EvrouteError(f"{flag}: expected {form}, got {part.strip()!r}")
        if key not in fields:
            raise EvrouteError(f"{flag}: unknown field {key!r} (fields: {', '.join(fields)})")
        pairs.append((key, value))
    return pairs


def parse_units(text: str | None) -> dict[str, str]:
    """``"speed=km/h,power=kW"`` to ``{"speed": "km/h", "power": "kW"}`` (:data:`UNITS`; a unit's
    case does not matter); an unknown field or unit is an error naming the choices.

    Returns
    -------
    dict
        Field to unit, as :data:`UNITS` spells it.
    """
    out: dict[str, str] = {}
    for key, value in _key_values(text, "--units", "FIELD=UNIT", UNITS):
        match = [u for u in UNITS[key] if u.lower() == value.lower()]
        if not match:
            raise EvrouteError(f"--units: {key} must be one of {', '.join(UNITS[key])}, got {value!r}")
        out[key] = match[0]
    return out


def _resolve(columns, names: dict[str, str], units: dict[str, str], path: Path) -> dict[str, tuple[str, str | None]]:
    """Each field's column in ``columns`` and its unit: the column ``--columns`` names (as written,
    else by :func:`normal_name`), else the first alias of :data:`COLUMN_ALIASES` present; the unit
    the name says, else ``--units``', else the field's first."""
    by_normal: dict[str, str] = {}
    for c in columns:
        by_normal.setdefault(normal_name(c), c)
    found: dict[str, tuple[str, str | None]] = {}
    for fld in TRACE_FIELDS:
        if fld in names:
            want = names[fld]
            col = want if want in columns else by_normal.get(normal_name(want))
            if col is None:
                raise EvrouteError(f"{path}: no column {want!r} (mapped with --columns {fld}={want})")
        else:
            col = next((by_normal[a] for a, (f, _) in COLUMN_ALIASES.items() if f == fld and a in by_normal), None)
            if col is None:
                continue
        said = COLUMN_ALIASES.get(normal_name(col))
        unit = said[1] if said is not None and said[0] == fld and said[1] is not None else units.get(fld)
        found[fld] = (col, unit if unit is not None or fld not in UNITS else next(iter(UNITS[fld])))
    return found


def _times(values: pd.Series, unit: str | None, declared: bool) -> tuple[np.ndarray, str]:
    """Seconds from a time column, and how it was read: numbers as seconds or milliseconds (by
    ``unit``, else by their size: :data:`_EPOCH_MS`), text as ISO-8601 (UTC where no offset)."""
    num = pd.to_numeric(values, errors="coerce").to_numpy(np.float64)
    finite = np.isfinite(num)
    if finite.mean() >= 0.5:
        typical = float(np.median(np.abs(num[finite]))) if finite.any() else 0.0
        if declared:
            kind = {"s": "seconds", "ms": "milliseconds"}[unit or "s"]
            scale = UNITS["time"][unit or "s"]
        elif typical >= _EPOCH_US:
            kind, scale = "epoch microseconds", 1e-6
        elif typical >= _EPOCH_MS:
            kind, scale = "epoch milliseconds", 1e-3
        elif typical >= _EPOCH_S:
            kind, scale = "epoch seconds", 1.0
        else:
            kind, scale = "seconds", 1.0
        return num * scale, kind
    text = values.astype("string").str.strip()
    stamps = pd.to_datetime(text, utc=True, format="ISO8601", errors="coerce")
    seconds = (stamps - pd.Timestamp("1970-01-01", tz="UTC")).dt.total_seconds().to_numpy(np.float64, na_value=np.nan)
    offset = text.str.contains(r"(?:Z|[+-]\d\d:?\d\d)$", regex=True, na=False)
    parsed = np.isfinite(seconds)
    if not parsed.any():
        return seconds, "unreadable"
    share = float(offset.to_numpy(bool)[parsed].mean())
    kind = "ISO-8601 with UTC offsets" if share == 1.0 else "ISO-8601 without offsets, read as UTC" if share == 0.0 \
        else "ISO-8601, partly without offsets (read as UTC)"
    return seconds, kind


def read_traces(path: str | Path, columns: dict[str, str] | None = None, capacity_kwh: float | None = None, *,
                units: dict[str, str] | None = None, gps_noise_m: float = 10.0,
                report: ImportReport | None = None) -> pd.DataFrame:
    """One CSV or GPX file of fixes (:func:`evroute.world.trace_formats.read_csv_table`,
    :func:`evroute.world.trace_formats.read_gpx`) as a table of
    :data:`FIX_COLUMNS`, sorted by trip and time, what cannot be right dropped and named in
    ``report`` (:mod:`evroute.world.plausibility`): rows repeating an earlier one, rows whose time,
    position or energy is not a number, a trip's later fixes at a time it already has, fixes no car
    could reach (a trip of two interleaved vehicles is split in two: ``NAME#1``, ``NAME#2``); a trip
    meter's resets are bridged (the step across marked, ``meter_ok``) and the energy signal's
    resolution kept (``quantum_wh``) for the import to judge.

    Parameters
    ----------
    path : path-like
        The CSV (lines starting with ``#`` are comments) or GPX file (by its suffix), gzipped or not.
    columns : dict, optional
        Field to column name (:data:`TRACE_FIELDS`), where :data:`COLUMN_ALIASES` does not find it.
    capacity_kwh : float, optional
        The battery's capacity, to read a state of charge.
    units : dict, optional
        Field to unit (:data:`UNITS`) where the column's name does not say it.
    gps_noise_m : float
        The fixes' noise (m): a jump between fixes counts beyond it.
    report : ImportReport, optional
        Counts what was dropped, keeps one line per problem and how the file was read.

    Returns
    -------
    pandas.DataFrame

    Raises
    ------
    EvrouteError
        The file cannot be read, a required column is missing, or it has no energy source.
    """
    path = Path(path)
    report = report if report is not None else ImportReport()
    names, units = dict(columns or {}), dict(units or {})
    gpx = trace_kind(path) == "gpx"
    unit = "point" if gpx else "row"  # where a problem is: the GPX file's n-th point, the CSV's line
    first_row = 1 if gpx else 2
    if gpx:
        raw = read_gpx(path)
        meta = {"format": "gpx"}
        names.update(trip="trip", time="time", lat="lat", lon="lon")
    else:
        raw, meta = read_csv_table(path, report)
    if len(raw) == 0:
        raise EvrouteError(f"cannot read the trace {path}: a header only, no fixes")
    found = _resolve(list(raw.columns), names, units, path)
    missing = [TRACE_FIELDS[k] for k in ("time", "lat", "lon") if k not in found]
    if missing:
        raise EvrouteError(f"{path}: no column {', '.join(map(repr, missing))} nor another name of it (map it with "
                           f"--columns, e.g. time=t,lat=latitude,lon=longitude; the names read: docs/guide/drives.md)")
    source = next((k for k in ("energy", "power", "soc") if k in found), None)
    if source is None:
        raise EvrouteError(f"{path}: no energy column: one of {TRACE_FIELDS['energy']!r} (energy used so far), "
                           f"{TRACE_FIELDS['power']!r} (power) or {TRACE_FIELDS['soc']!r} (state of charge, with "
                           "--capacity-kwh), or another name of them (docs/guide/drives.md)")
    if source == "soc" and not (capacity_kwh and capacity_kwh > 0):
        raise EvrouteError(f"{path}: a state of charge needs the battery's capacity (--capacity-kwh)")

    def num(key):
        col, u = found[key]
        values = pd.to_numeric(raw[col], errors="coerce").to_numpy(np.float64)
        return values * UNITS[key][u] if key in UNITS else values

    time_col, time_unit = found["time"]
    if gpx:
        t, time_kind = pd.to_numeric(raw[time_col], errors="coerce").to_numpy(np.float64), "GPX times (UTC)"
    else:
        declared = "time" in units or (COLUMN_ALIASES.get(normal_name(time_col), (None, None))[1] is not None)
        t, time_kind = _times(raw[time_col], time_unit, declared)
        if time_kind == "unreadable":
            sample = str(raw[time_col].dropna().iat[0]) if raw[time_col].notna().any() else ""
            raise EvrouteError(f"{path}: cannot read the times of column {time_col!r} (e.g. {sample[:40]!r}): "
                               "ISO-8601 text, or seconds or milliseconds as numbers")
    meta.update(time=time_kind, columns={k: c for k, (c, _) in found.items()},
                units={k: u for k, (_, u) in found.items() if u is not None and k != "time"}, energy=source)
    report.formats[str(path)] = meta
    report.files += 1
    report.fixes_read += len(raw)

    stem = Path(path.name[:-3] if path.name.lower().endswith(".gz") else path.name).stem
    trip = raw[found["trip"][0]].astype(str).to_numpy() if "trip" in found else np.full(len(raw), stem, dtype=object)
    vehicle = raw[found["vehicle"][0]].astype(str).to_numpy() if "vehicle" in found else trip
    lat, lon = num("lat"), num("lon")
    value = num(source)
    speed = num("speed") if "speed" in found else np.full(len(raw), np.nan)
    rows = np.arange(len(raw)) + first_row

    repeat = raw.duplicated(keep="first").to_numpy()
    if repeat.any():
        where = np.flatnonzero(repeat)
        report.flag("duplicate rows", f"{path} {unit} {where[0] + first_row}: repeats an earlier {unit} exactly"
                    + (f" (and {where.size - 1:,} more)" if where.size > 1 else "") + "; the repeats dropped")
        report.fixes_dropped += int(where.size)
        report.drop("duplicate row", where.size)
    bad = ~repeat & (~(np.isfinite(t) & np.isfinite(lat) & np.isfinite(lon) & np.isfinite(value))
                     | (np.abs(lat) > 90) | (np.abs(lon) > 180))
    if bad.any():
        where = np.flatnonzero(bad)
        report.flag("bad rows", f"{path} {unit} {where[0] + first_row}: a time, position or energy that is "
                    f"not a number or out of range" + (f" (and {where.size - 1:,} more)" if where.size > 1 else "")
                    + "; dropped")
        report.fixes_dropped += int(where.size)
        report.drop("bad row", where.size)
    keep_rows = np.flatnonzero(~(repeat | bad))
    codes, names = pd.factorize(pd.Series(trip[keep_rows], dtype=object).astype(str), sort=True)
    order = keep_rows[np.lexsort((t[keep_rows], codes))]  # by trip, then time (stable)
    start = np.searchsorted(np.sort(codes), np.arange(len(names) + 1))
    cols = {"vehicle": np.asarray(vehicle, dtype=object)[order].astype(str), "time_s": t[order], "lat": lat[order],
            "lon": lon[order], "speed_mps": speed[order], "value": value[order], "row": rows[order]}
    out = []
    for k, name in enumerate(names.tolist()):
        report.trips_read += 1
        part = {c: a[start[k]:start[k + 1]] for c, a in cols.items()}
        out.extend(_trip_fixes(name, part, path=path, unit=unit, source=source, capacity_kwh=capacity_kwh,
                               gps_noise_m=gps_noise_m, report=report))
    if not out:
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("trip", "vehicle", "file") else bool
                                          if c == "meter_ok" else np.int64 if c == "row" else np.float64)
                             for c in FIX_COLUMNS})
    table = pd.DataFrame({c: np.concatenate([p[c] for p in out]) for c in FIX_COLUMNS if c != "file"})
    table["file"] = str(path)
    return table[list(FIX_COLUMNS)]


def _trip_fixes(name: str, g: dict, *, path: Path, unit: str, source: str, capacity_kwh, gps_noise_m,
                report: ImportReport) -> list[dict]:
    """One trip's fixes (arrays, in time order): stray fixes and interleaved vehicles apart, later
    fixes at one time dropped, the energy used so far (resets bridged) and its resolution; as
    columns of :data:`FIX_COLUMNS` (the file aside)."""
    lat, lon, t = g["lat"], g["lon"], g["time_s"]
    north, east = local_metres(lat, lon, lat0=float(lat[0]), lon0=float(lon[0]))
    runs = split_jumps(t, north, east, gps_noise_m=gps_noise_m)
    parts = [(name, np.arange(t.size))]
    if runs.max() > 0:
        sizes = np.bincount(runs)
        big = np.flatnonzero(sizes >= MIN_TRACK_FIXES)
        step = np.flatnonzero(runs[1:] != runs[:-1])[0] + 1  # the first jump
        dist = float(np.hypot(north[step] - north[step - 1], east[step] - east[step - 1]))
        dt = float(t[step] - t[step - 1])
        where = f"{path} {unit} {int(g['row'][step])}: trip {name!r} jumps {dist:,.0f} m in {dt:g} s"
        stray = int(sizes.sum() - sizes[big].sum())
        if big.size >= 2:
            parts = [(f"{name}#{k + 1}", np.flatnonzero(runs == r)) for k, r in enumerate(big.tolist())]
            report.flag("jump", f"{where}, faster than a car ({MAX_JUMP_MPS:g} m/s): {big.size} vehicles in one "
                        f"trip? split into {', '.join(repr(p) for p, _ in parts)}"
                        + (f"; {stray:,} stray fixes dropped" if stray else ""))
        elif big.size == 1:
            parts = [(name, np.flatnonzero(runs == big[0]))]
            report.flag("jump", f"{where}, faster than a car ({MAX_JUMP_MPS:g} m/s): {stray:,} fixes no car could "
                        "reach dropped")
        else:
            parts = []
            report.flag("jump", f"{where}, faster than a car ({MAX_JUMP_MPS:g} m/s), and no run of "
                        f"{MIN_TRACK_FIXES} reachable fixes: trip dropped")
        if stray:
            report.fixes_dropped += stray
            report.drop("fix no car could reach", stray)
        report.trips_read += max(0, len(parts) - 1)
    out = []
    for part, idx in parts:
        p = {c: a[idx] for c, a in g.items()}
        if len(parts) > 1 and (p["vehicle"] == name).all():
            p["vehicle"] = np.full(idx.size, part, dtype=object)
        same = np.r_[False, np.diff(p["time_s"]) <= 0]
        if same.any():
            report.flag("same time", f"{path} {unit} {int(p['row'][same][0])}: trip {part!r} has two fixes "
                        "at one time" + (f" ({same.sum() - 1:,} more)" if same.sum() > 1 else "")
                        + "; the later dropped")
            report.fixes_dropped += int(same.sum())
            report.drop("time already taken", int(same.sum()))
            p = {c: a[~same] for c, a in p.items()}
        v, tt = p.pop("value"), p["time_s"]
        if source == "energy":
            used = v - v[0]
        elif source == "power":  # the trapezoid rule, W·s to Wh
            used = np.r_[0.0, np.cumsum(0.5 * (v[1:] + v[:-1]) * np.diff(tt))] / 3600.0
        else:
            used = (v[0] - v) / 100.0 * capacity_kwh * 1000.0
        quantum = energy_quantum_wh(used)
        ok = np.ones(tt.size, dtype=bool)
        if source != "power" and not quantum:
            resets = meter_resets(tt, used, meter=v if source == "energy" else None)
            if resets.size:
                fall = used[resets - 1] - used[resets]
                for k, f in zip(resets.tolist(), fall.tolist(), strict=True):
                    used[k:] += f  # the meter goes on from where it was
                ok[resets] = False
                k = int(resets[0])
                report.flag("meter reset", f"{path} {unit} {int(p['row'][k])}: trip {part!r}: the energy falls "
                            f"{fall[0]:,.0f} Wh in {tt[k] - tt[k - 1]:g} s (faster than a car recuperates, "
                            f"{METER_DROP_W / 1000:g} kW, or to zero): the meter was reset"
                            + (f" ({resets.size - 1:,} more times)" if resets.size > 1 else "")
                            + "; the traversals across it are dropped, the meter goes on from there")
        out.append({**p, "trip": np.full(tt.size, part, dtype=object), "energy_wh": used, "meter_ok": ok,
                    "quantum_wh": np.full(tt.size, quantum)})
    return out


def _battery_reports(path: Path):
    """The ``<vehicle>`` reports of a SUMO battery export as columns (time_s, vehicle, energy,
    speed, x, y), and how many reports were not numbers (with where the first was)."""
    import xml.etree.ElementTree as ET

    cols: dict[str, list] = {k: [] for k in ("time_s", "vehicle", "energy", "speed", "x", "y")}
    root, bad, first_bad = None, 0, ""
    try:
        with open_trace(path) as fh:
            for event, elem in ET.iterparse(fh, events=("start", "end")):
                if root is None:
                    root = elem.tag
                    if root != "battery-export":
                        raise EvrouteError(f"{path} is not SUMO's battery output (root <{root}>, expected "
                                           "<battery-export>)")
                if event == "start" or elem.tag != "timestep":
                    continue
                for v in elem.iter("vehicle"):
                    try:
                        row = (float(elem.get("time")), str(v.get("id")), float(v.get("energyConsumed")),
                               float(v.get("speed", "nan")), float(v.get("x")), float(v.get("y")))
                    except (TypeError, ValueError):  # one bad report: dropped, named, the others kept
                        bad += 1
                        first_bad = first_bad or f"timestep {elem.get('time')!r}, vehicle {v.get('id')!r}"
                        continue
                    for k, x in zip(cols, row, strict=True):
                        cols[k].append(x)
                elem.clear()
    except ET.ParseError as exc:
        raise EvrouteError(f"{path} is not readable XML ({exc})") from None
    except (OSError, EOFError, zlib.error) as exc:
        raise EvrouteError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    return cols, bad, first_bad


def read_sumo_battery(path: str | Path, sumo_net: str | Path, report: ImportReport | None = None) -> pd.DataFrame:
    """SUMO's battery output (``sumo --battery-output FILE``: a ``<battery-export>`` of timesteps,
    one ``<vehicle>`` each with ``energyConsumed`` (Wh in the step), ``speed`` and its position
    ``x``, ``y`` in the network's coordinates) as the fixes of :func:`read_traces`: one trip per
    vehicle, positions turned into longitude and latitude by the SUMO network the run used
    (``sumo_net``, read with sumolib: the ``sumo`` extra), the energy used since the vehicle's
    first report. A report that is not numbers is dropped and named in ``report``.

    Raises
    ------
    EvrouteError
        The file is not a battery export, the network cannot be read or has no geo-reference,
        or sumolib is not installed.
    """
    path, sumo_net = Path(path), Path(sumo_net)
    report = report if report is not None else ImportReport()
    try:
        import sumolib
    except ImportError:
        raise EvrouteError(f"{path}: reading SUMO's battery output needs sumolib: pip install \"evroute[sumo]\"") \
            from None
    if not sumo_net.is_file():
        raise EvrouteError(f"no such SUMO network: {sumo_net}")
    cols, bad, first_bad = _battery_reports(path)
    if bad:
        report.flag("bad rows", f"{path} {first_bad}: a time, energyConsumed, x or y that is not a number"
                    + (f" (and {bad - 1:,} more)" if bad > 1 else "") + "; dropped")
        report.fixes_read += bad
        report.fixes_dropped += bad
        report.drop("bad row", bad)
    try:
        snet = sumolib.net.readNet(str(sumo_net))
        lon, lat = snet.convertXY2LonLat(np.asarray(cols["x"], dtype=np.float64), np.asarray(cols["y"], np.float64))
    except Exception as exc:  # sumolib raises several kinds
        raise EvrouteError(f"{sumo_net}: not a geo-referenced SUMO network ({str(exc).splitlines()[0][:120]})") from None
    d = pd.DataFrame({"trip": np.asarray(cols["vehicle"], dtype=object), "vehicle": np.asarray(cols["vehicle"], object),
                      "time_s": np.asarray(cols["time_s"], np.float64), "lat": np.asarray(lat, np.float64),
                      "lon": np.asarray(lon, np.float64), "speed_mps": np.asarray(cols["speed"], np.float64),
                      "energy": np.asarray(cols["energy"], np.float64)})
    report.formats[str(path)] = {"format": "sumo battery output", "time": "seconds", "energy": "energyConsumed"}
    report.files += 1
    report.fixes_read += len(d)
    report.trips_read += int(d.trip.nunique())
    d = d.sort_values(["trip", "time_s"], kind="stable")
    # the trip meter: SUMO reports a step's energy at its end, as the emission output does
    by_trip = d.groupby("trip", sort=False).energy
    d["energy_wh"] = by_trip.cumsum() - by_trip.transform("first")
    d = d.reset_index(drop=True).assign(file=str(path), row=np.arange(len(d)) + 1, meter_ok=True, quantum_wh=0.0)
    return d[list(FIX_COLUMNS)]
