"""Traces in (evroute.world.traces): the files fleets export, each written from a drive whose
per-edge energies are known, imported, and checked against them."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from evroute.errors import EvrouteError
from evroute.world.drives import import_traces
from evroute.world.trace_formats import sniff_csv, trace_files
from evroute.world.traces import COLUMN_ALIASES, UNITS, normal_name, parse_units, read_traces

from .test_drives import SPEED, _drive, _route

EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@pytest.fixture(scope="module")
def drive(synthetic):
    """A drive along a route of the synthetic city at SPEED, 0.15 Wh a metre: its fixes and the
    energy of each edge of the route."""
    route = _route(synthetic)
    energy = 0.15 * synthetic.edges.length_m.to_numpy()[route]
    return route, energy, _drive(synthetic, route, energy)


def _check(table, route, energy, rtol=0.03, *, ends=False):
    """The route's interior edges in order, with their energies (``ends``: the first and last
    edge may come too: the drive begins and ends on a junction)."""
    if ends:
        assert set(table.edge.tolist()) <= set(route)
        table = table[table.edge.isin(route[1:-1])]
    assert table.edge.tolist() == route[1:-1]
    np.testing.assert_allclose(table.energy_wh, energy[1:-1], rtol=rtol)


def _import(paths, net, **kwargs):
    return import_traces([str(p) for p in paths], net, gps_noise_m=5.0, **kwargs)


def test_semicolons_and_decimal_commas(synthetic, drive, tmp_path):
    """A European logger's CSV: ``;`` between fields, a decimal comma, headers of its own."""
    route, energy, fixes = drive
    path = tmp_path / "logger.csv"
    fixes.rename(columns={"time_s": "Time", "lat": "Latitude", "lon": "Longitude", "speed_mps": "Speed",
                          "energy_wh": "Energy_Wh"}).to_csv(path, sep=";", decimal=",", index=False)
    assert "43," in path.read_text() or "," in path.read_text().splitlines()[1]
    table, report = _import([path], synthetic)
    _check(table, route, energy)
    fmt = report.formats[str(path)]
    assert (fmt["separator"], fmt["decimal"]) == (";", ",")
    assert fmt["columns"] == {"time": "Time", "lat": "Latitude", "lon": "Longitude", "energy": "Energy_Wh",
                              "speed": "Speed"}


def test_tabs_and_upper_case_headers(synthetic, drive, tmp_path):
    route, energy, fixes = drive
    path = tmp_path / "trip.tsv"
    fixes.rename(columns=str.upper).rename(columns={"LON": "LNG"}).to_csv(path, sep="\t", index=False)
    table, report = _import([path], synthetic)
    _check(table, route, energy)
    assert report.formats[str(path)]["separator"] == "tab"


@pytest.mark.parametrize("offset", ["Z", "+02:00", "-05:30"])
def test_iso_times_with_offsets(synthetic, drive, tmp_path, offset):
    """ISO-8601 times with any UTC offset are read as the instants they name."""
    route, energy, fixes = drive
    shift = {"Z": 0.0, "+02:00": 7200.0, "-05:30": -19800.0}[offset]
    stamps = pd.to_datetime(EPOCH + fixes.time_s + shift, unit="s").dt.strftime("%Y-%m-%dT%H:%M:%S.%f").str[:-3]
    path = tmp_path / "iso.csv"
    fixes.drop(columns="time_s").assign(timestamp=stamps + offset).to_csv(path, index=False)
    table, report = _import([path], synthetic)
    _check(table, route, energy)
    assert report.formats[str(path)]["time"] == "ISO-8601 with UTC offsets"
    np.testing.assert_allclose(table.enter_s.iat[0] - EPOCH, _import([_csv(fixes, tmp_path)], synthetic)[0].enter_s.iat[0],
                               atol=1e-3)


def _csv(fixes, tmp_path, name="plain.csv"):
    path = tmp_path / name
    fixes.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("scale, kind", [(1e3, "epoch milliseconds"), (1.0, "epoch seconds")])
def test_epoch_seconds_and_milliseconds_are_told_apart(synthetic, drive, tmp_path, scale, kind):
    """An epoch in milliseconds is not read as seconds (which made 487 fixes 5,896 traversals)."""
    route, energy, fixes = drive
    path = tmp_path / "epoch.csv"
    fixes.assign(time_s=np.round((EPOCH + fixes.time_s) * scale)).rename(columns={"time_s": "time"}).to_csv(path, index=False)
    table, report = _import([path], synthetic)
    _check(table, route, energy)
    assert report.formats[str(path)]["time"] == kind


def test_units_read_from_the_names(synthetic, drive, tmp_path):
    """speed_kmh, power_kw and energy_kwh are km/h, kW and kWh: the energies come back in Wh."""
    route, energy, fixes = drive
    path = tmp_path / "units.csv"
    fixes.assign(speed_kmh=fixes.speed_mps * 3.6, energy_kwh=fixes.energy_wh / 1000.0).drop(
        columns=["speed_mps", "energy_wh"]).to_csv(path, index=False)
    table, report = _import([path], synthetic)
    _check(table, route, energy)
    assert report.formats[str(path)]["units"] == {"energy": "kWh", "speed": "km/h"}
    assert table.v_top.max() == pytest.approx(SPEED, rel=1e-6)


def test_power_in_kilowatts_named_or_declared(synthetic, tmp_path):
    """A constant 12 kW, as power_kw or as power with --units power=kW: each edge's energy is
    12 kW times its time."""
    route = _route(synthetic)
    seconds = synthetic.edges.length_m.to_numpy()[route] / SPEED
    energy = 12_000.0 * seconds / 3600.0
    fixes = _drive(synthetic, route, energy).drop(columns="energy_wh")
    fixes.assign(power_kw=12.0).to_csv(tmp_path / "named.csv", index=False)
    fixes.assign(power=12.0, speed=fixes.speed_mps * 3.6).drop(columns="speed_mps").to_csv(tmp_path / "declared.csv",
                                                                                          index=False)
    for name, units in (("named.csv", None), ("declared.csv", {"power": "kW", "speed": "km/h"})):
        table, report = _import([tmp_path / name], synthetic, units=units)
        _check(table, route, energy)
        assert report.formats[str(tmp_path / name)]["energy"] == "power"
    # without the unit the energies are a thousand times small: what the option is for
    table, _ = _import([tmp_path / "declared.csv"], synthetic, units={"speed": "km/h"})
    np.testing.assert_allclose(table.energy_wh, energy[1:-1] / 1000.0, rtol=0.03)


def test_gzipped_csv_and_gpx(synthetic, drive, tmp_path):
    from evroute.world.drives import write_gpx

    route, energy, fixes = drive
    with gzip.open(tmp_path / "trip.csv.gz", "wt") as fh:
        fixes.to_csv(fh, index=False)
    write_gpx(fixes.assign(trip="g"), tmp_path / "g.gpx", "test")
    (tmp_path / "g.gpx.gz").write_bytes(gzip.compress((tmp_path / "g.gpx").read_bytes()))
    for name in ("trip.csv.gz", "g.gpx.gz"):
        table, report = _import([tmp_path / name], synthetic)
        _check(table, route, energy)
        assert report.files == 1 and report.trips_kept == 1
    assert table.trip.unique().tolist() == ["g"]


def test_a_folder_stands_for_its_trace_files_and_two_trip_csv_stay_two_trips(synthetic, drive, tmp_path):
    """Folders are expanded (sorted, nested, other files ignored); two files called trip.csv in two
    folders are two trips, named by their files."""
    route, energy, fixes = drive
    for sub in ("b", "a"):
        (tmp_path / "fleet" / sub).mkdir(parents=True)
        fixes.to_csv(tmp_path / "fleet" / sub / "trip.csv", index=False)
    (tmp_path / "fleet" / "notes.md").write_text("not a trace")
    (tmp_path / "fleet" / ".hidden.csv").write_text("x")
    files = trace_files([tmp_path / "fleet"])
    assert [f.relative_to(tmp_path).as_posix() for f in files] == ["fleet/a/trip.csv", "fleet/b/trip.csv"]
    table, report = _import([tmp_path / "fleet"], synthetic)
    a, b = (str(tmp_path / "fleet" / s / "trip.csv") for s in ("a", "b"))
    assert table.trip.unique().tolist() == [f"{a}:trip", f"{b}:trip"] and report.trips_kept == 2
    assert table.file.unique().tolist() == [a, b]
    for _, g in table.groupby("trip"):
        _check(g, route, energy)
    with pytest.raises(EvrouteError, match="no trace files in the folder"):
        (tmp_path / "empty").mkdir()
        trace_files([tmp_path / "empty"])


def _gpx(points, *, encoding="UTF-8", names=("Trajet à Genève",), extensions=None) -> str:
    """A GPX document of one track per name, each with ``points`` (time_s, lat, lon, energy_wh,
    speed_mps), the energy as an extension and the speed as Garmin's."""
    tracks = []
    for name in names:
        pts = []
        for t, lat, lon, e, v in points:
            stamp = pd.Timestamp(EPOCH + t, unit="s", tz="UTC").strftime("%Y-%m-%dT%H:%M:%SZ")
            ext = extensions(e, v) if extensions else (
                f"<energy_wh>{e:.6f}</energy_wh><gpxtpx:TrackPointExtension><gpxtpx:hr>90</gpxtpx:hr>"
                f"<gpxtpx:speed>{v:.3f}</gpxtpx:speed></gpxtpx:TrackPointExtension>")
            pts.append(f'<trkpt lat="{lat:.8f}" lon="{lon:.8f}"><time>{stamp}</time><extensions>{ext}</extensions></trkpt>')
        tracks.append(f"<trk><name>{name}</name><trkseg>{''.join(pts)}</trkseg></trk>")
    return (f'<?xml version="1.0" encoding="{encoding}"?>\n<gpx version="1.1" creator="a logger" '
            'xmlns="http://www.topografix.com/GPX/1/1" '
            'xmlns:gpxtpx="http://www.garmin.com/xmlschemas/TrackPointExtension/v1">' + "".join(tracks) + "</gpx>")


def _points(fixes):
    return list(zip(fixes.time_s, fixes.lat, fixes.lon, fixes.energy_wh, fixes.speed_mps, strict=True))


def test_gpx_in_its_declared_latin1_with_garmins_speed(synthetic, drive, tmp_path):
    """A GPX file declaring ISO-8859-1, its track named with accents, the speed in Garmin's
    TrackPointExtension: the name comes back as written, the speed is read (none estimated)."""
    route, energy, fixes = drive
    path = tmp_path / "garmin.gpx"
    path.write_bytes(_gpx(_points(fixes), encoding="ISO-8859-1").encode("latin-1"))
    table, report = _import([path], synthetic)
    _check(table, route, energy)
    assert table.trip.unique().tolist() == ["Trajet à Genève"]
    assert report.trips_speed_estimated == 0 and report.formats[str(path)]["columns"]["speed"] == "speed"
    # the same file without the speed: estimated from the positions, the same edges
    path.write_bytes(_gpx(_points(fixes), extensions=lambda e, v: f"<energy_wh>{e:.6f}</energy_wh>").encode())
    table, report = _import([path], synthetic)
    _check(table, route, energy, rtol=0.05, ends=True)
    assert report.trips_speed_estimated == 1


def test_two_gpx_tracks_of_one_name_stay_apart(synthetic, drive, tmp_path):
    route, energy, fixes = drive
    path = tmp_path / "two.gpx"
    path.write_text(_gpx(_points(fixes), names=("commute", "commute")), encoding="utf-8")
    table, report = _import([path], synthetic)
    assert table.trip.unique().tolist() == ["commute#1", "commute#2"] and report.trips_kept == 2
    for _, g in table.groupby("trip"):
        _check(g, route, energy)


@pytest.mark.parametrize("encoding", ["utf-8-sig", "latin-1"])
def test_text_encodings(synthetic, drive, tmp_path, encoding):
    """UTF-8 with a byte-order mark, and Latin-1 (a vehicle named Renault Zoé): read, named as
    written, the encoding stated."""
    route, energy, fixes = drive
    path = tmp_path / "enc.csv"
    fixes.assign(vehicle="Renault Zoé").to_csv(path, index=False, encoding=encoding)
    table, report = _import([path], synthetic)
    _check(table, route, energy)
    assert table.vehicle.unique().tolist() == ["Renault Zoé"]
    assert report.formats[str(path)]["encoding"] == encoding


def test_a_broken_file_is_skipped_and_the_others_import(synthetic, drive, tmp_path):
    """Empty, a header only, not text, no energy, or times of no format: each skipped with a line
    naming it; a row
    with an extra field is dropped and its file kept; the good file's energies are right."""
    route, energy, fixes = drive
    good = _csv(fixes, tmp_path, "good.csv")
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "header.csv").write_text("time_s,lat,lon,energy_wh\n")
    (tmp_path / "binary.csv").write_bytes(b"\x00\x01\x02PK\x00")
    fixes.drop(columns="energy_wh").to_csv(tmp_path / "noenergy.csv", index=False)
    fixes.assign(time_s="noon").to_csv(tmp_path / "badtime.csv", index=False)
    lines = _csv(fixes, tmp_path, "ragged.csv").read_text().splitlines()
    lines[40] += ",99"
    (tmp_path / "ragged.csv").write_text("\n".join(lines) + "\n")
    paths = [tmp_path / n for n in ("empty.csv", "header.csv", "binary.csv", "noenergy.csv", "badtime.csv",
                                    "ragged.csv")] + [good]
    table, report = _import(paths, synthetic)
    assert report.skipped == [str(p) for p in paths[:5]]
    assert report.flags["file skipped"] == 5 and report.flags["ragged rows"] == 1
    for p, why in zip(paths[:5], ("empty", "a header only", "not a text file", "no energy column",
                                  "cannot read the times of column 'time_s' (e.g. 'noon')"), strict=True):
        assert any(str(p) in line and why in line and line.endswith("file skipped") for line in report.problems), why
    assert any(f"{tmp_path / 'ragged.csv'} line 41: more fields than the header's" in x for x in report.problems)
    assert report.trips_kept == 2
    for _, g in table.groupby("trip"):
        _check(g, route, energy)


def test_the_command_reads_a_folder_of_exports_and_states_what_it_read(synthetic, drive, tmp_path):
    """The command as a fleet runs it: a folder of a semicolon CSV in kWh, an epoch-ms CSV, a
    broken file; --units for the unit-less speed. report.json says how each was read."""
    route, energy, fixes = drive
    (tmp_path / "fleet").mkdir()
    fixes.assign(speed=fixes.speed_mps * 3.6, energy_kwh=fixes.energy_wh / 1000).drop(
        columns=["speed_mps", "energy_wh"]).to_csv(tmp_path / "fleet" / "a.csv", sep=";", decimal=",", index=False)
    fixes.assign(time_s=(EPOCH + fixes.time_s) * 1000, speed=fixes.speed_mps * 3.6).drop(columns="speed_mps").rename(
        columns={"time_s": "timestamp"}).to_csv(tmp_path / "fleet" / "b.csv", index=False)
    (tmp_path / "fleet" / "c.csv").write_text("")
    cmd = [sys.executable, "-m", "evroute", "drives", "import", str(tmp_path / "fleet"), "--network", "synthetic",
           "--out", str(tmp_path / "out"), "--units", "speed=km/h", "--gps-noise", "5", "--no-progress", "--jobs", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stderr.strip().splitlines() == [f"warning: cannot read the trace {tmp_path / 'fleet' / 'c.csv'}: empty: "
                                             "no header and no fixes; file skipped"]
    table = pd.read_parquet(tmp_path / "out" / "traversals.parquet")
    for _, g in table.groupby("trip"):
        _check(g, route, energy)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    a, b = (report["formats"][str(tmp_path / "fleet" / n)] for n in ("a.csv", "b.csv"))
    assert (a["separator"], a["decimal"], a["units"]) == (";", ",", {"energy": "kWh", "speed": "km/h"})
    assert (b["time"], b["units"]) == ("epoch milliseconds", {"energy": "Wh", "speed": "km/h"})
    assert report["units"] == {"speed": "km/h"} and report["flags"] == {"file skipped": 1}


def test_sniffing_and_names():
    assert sniff_csv("t;lat;lon\n1,5;43,7;7,4\n") == (";", ",")
    assert sniff_csv("t\tlat\tlon\n1.5\t43.7\t7.4\n") == ("\t", ".")
    assert sniff_csv("# logger 2\nt,lat,lon\n1.5,43.7,7.4\n") == (",", ".")
    with pytest.raises(EvrouteError, match="empty"):
        sniff_csv("# only a comment\n")
    assert normal_name("Speed (km/h)") == "speed_km_h" and normal_name("\ufeffSoC %") == "soc_pct"
    assert normal_name("VIN") == "vin" and COLUMN_ALIASES["vin"] == ("vehicle", None)
    for alias, (fld, unit) in COLUMN_ALIASES.items():
        assert alias == normal_name(alias) and (unit is None or unit in UNITS[fld]), alias
    assert parse_units("speed=KM/H, power=kw") == {"speed": "km/h", "power": "kW"}
    with pytest.raises(EvrouteError, match=r"--units: speed must be one of m/s, km/h, mph, got 'kmh'"):
        parse_units("speed=kmh")
    with pytest.raises(EvrouteError, match="unknown field 'volts'"):
        parse_units("volts=V")


def test_the_guide_lists_every_alias():
    """docs/guide/drives.md's table of column names is the code's (COLUMN_ALIASES)."""
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "guide" / "drives.md").read_text(encoding="utf-8")
    listed = set()
    for line in page.splitlines():
        if line.startswith("| ") and "`" in line and "alias" not in line:
            cells = line.split("|")
            if len(cells) > 3 and cells[1].strip() in {"time", "lat", "lon", "energy", "power", "soc", "speed",
                                                         "trip", "vehicle"}:
                listed |= {x.strip("` ") for x in cells[2].split(",") if x.strip()}
    assert listed == set(COLUMN_ALIASES)


def test_read_traces_names_a_missing_mapped_column(tmp_path, drive):
    _, _, fixes = drive
    path = _csv(fixes, tmp_path)
    with pytest.raises(EvrouteError, match="no column 'battery' \\(mapped with --columns soc=battery\\)"):
        read_traces(path, {"soc": "battery"}, 50.0)
