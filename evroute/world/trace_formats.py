"""Trace files as fleets write them: which files a path names (:func:`trace_files`, a folder
standing for the trace files inside it, gzipped or not), their kind (:func:`trace_kind`), a text
file's encoding (:func:`detect_encoding`), a CSV's separator and decimal mark (:func:`sniff_csv`,
:func:`read_csv_table`), and GPX (:func:`read_gpx`, :func:`write_gpx`). What the columns mean is
:mod:`evroute.world.traces`' business.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import io
import re
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import EvrouteError
from .import_report import ImportReport

__all__ = ["TRACE_SUFFIXES", "trace_kind", "trace_files", "open_trace", "detect_encoding", "sniff_csv",
           "read_csv_table", "read_gpx", "write_gpx"]

#: The files a folder's trace files are found by (each also gzipped, ``.gz``): CSV (``.csv``,
#: ``.tsv``, ``.txt``), GPX, and SUMO's battery output (``.xml``).
TRACE_SUFFIXES = (".csv", ".tsv", ".txt", ".gpx", ".xml")
#: Separators tried, in the order ties are broken.
_SEPARATORS = ("\t", ";", ",", "|")
_SEP_NAMES = {"\t": "tab", ";": ";", ",": ",", "|": "|"}


def trace_kind(path: str | Path) -> str:
    """``gpx``, ``xml`` (SUMO's battery output) or ``csv`` (anything else), by the file's suffix
    (``.gz`` aside).

    Returns
    -------
    str
    """
    name = Path(path).name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    suffix = Path(name).suffix
    return {".gpx": "gpx", ".xml": "xml"}.get(suffix, "csv")


def trace_files(paths) -> list[Path]:
    """The files ``paths`` name, a folder standing for the trace files below it
    (:data:`TRACE_SUFFIXES`, gzipped or not, hidden ones aside) in sorted order; a file named
    twice counts once.

    Returns
    -------
    list of pathlib.Path

    Raises
    ------
    EvrouteError
        A path does not exist, or a folder holds no trace file.
    """
    out: list[Path] = []
    seen: set = set()
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted((f for f in p.rglob("*") if f.is_file() and _is_trace_name(f.relative_to(p))),
                           key=lambda f: f.relative_to(p).as_posix())
            if not found:
                raise EvrouteError(f"no trace files in the folder {p} (looked for {', '.join(TRACE_SUFFIXES)}, "
                                   "gzipped or not)")
        elif p.is_file():
            found = [p]
        else:
            raise EvrouteError(f"no such trace file: {p}")
        for f in found:
            key = f.resolve()
            if key not in seen:
                seen.add(key)
                out.append(f)
    return out


def _is_trace_name(rel: Path) -> bool:
    if any(part.startswith(".") for part in rel.parts):
        return False
    name = rel.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    return name.endswith(TRACE_SUFFIXES)


def open_trace(path: Path):
    """A trace file opened for reading bytes, gunzipped where its name ends in ``.gz``."""
    return gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")


def detect_encoding(path: str | Path) -> str:
    """A text file's encoding: ``utf-8-sig`` or ``utf-16`` by a byte-order mark, else ``utf-8``
    where every byte decodes so, else ``latin-1`` (which decodes any byte).

    Returns
    -------
    str
        The encoding's name, as Python's codecs know it.

    Raises
    ------
    EvrouteError
        The file cannot be read, is not valid gzip, or holds NUL bytes (binary, or UTF-16
        without a byte-order mark).
    """
    path = Path(path)
    try:
        with open_trace(path) as fh:
            head = fh.read(4)
            if head.startswith(codecs.BOM_UTF8):
                return "utf-8-sig"
            if head[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
                return "utf-16"
            dec = codecs.getincrementaldecoder("utf-8")()
            chunk, ok = head, True
            while chunk:
                if b"\x00" in chunk:
                    raise EvrouteError(f"cannot read the trace {path}: not a text file (it holds NUL bytes)")
                if ok:
                    try:
                        dec.decode(chunk)
                    except UnicodeDecodeError:
                        ok = False
                chunk = fh.read(1 << 20)
            if ok:
                try:
                    dec.decode(b"", final=True)
                except UnicodeDecodeError:
                    ok = False
    except (OSError, EOFError, zlib.error) as exc:
        raise EvrouteError(f"cannot read the trace {path}: {getattr(exc, 'strerror', None) or exc}") from None
    return "utf-8" if ok else "latin-1"


def _text_head(path: Path, encoding: str, size: int = 1 << 16) -> tuple[str, bool]:
    """The file's first ``size`` characters, and whether that is all of it."""
    with open_trace(path) as fh:
        text = io.TextIOWrapper(fh, encoding=encoding, newline="").read(size + 1)
    return text[:size], len(text) <= size


def sniff_csv(sample: str, *, complete: bool = True) -> tuple[str, str]:
    """The separator (tab, ``;``, ``,`` or ``|``) and the decimal mark (``.`` or ``,``) of a CSV
    from its first lines: the separator that splits the header into the most fields the data lines
    agree with; a decimal comma where a separator other than ``,`` leaves numbers like ``43,73``.

    Parameters
    ----------
    sample : str
        The file's beginning (lines starting with ``#`` are comments).
    complete : bool
        Whether ``sample`` is the whole file (else its last line may be cut and is not looked at).

    Returns
    -------
    (str, str)
        The separator and the decimal mark.

    Raises
    ------
    EvrouteError
        The sample has no line (an empty file) or no separator splits its header.
    """
    lines = sample.splitlines()
    if not complete and lines:
        lines = lines[:-1]
    lines = [x for x in lines if x.strip() and not x.lstrip().startswith("#")][:200]
    if not lines:
        raise EvrouteError("empty: no header and no fixes")
    best, best_key = None, None
    for rank, sep in enumerate(_SEPARATORS):
        counts = [len(r) for r in csv.reader(lines, delimiter=sep)]
        if counts[0] < 2:
            continue
        agree = sum(c == counts[0] for c in counts[1:]) / max(1, len(counts) - 1)
        key = (agree, counts[0], -rank)
        if best_key is None or key > best_key:
            best, best_key = sep, key
    if best is None:
        raise EvrouteError("no separator (comma, semicolon, tab or |) splits its header into columns")
    decimal = "."
    if best != ",":
        cells = [c.strip() for r in csv.reader(lines[1:], delimiter=best) for c in r]
        comma = sum(bool(re.fullmatch(r"[-+]?\d+,\d+", c)) for c in cells)
        point = sum(bool(re.fullmatch(r"[-+]?\d+\.\d+", c)) for c in cells)
        if comma > point:
            decimal = ","
    return best, decimal


def _ragged_lines(path: Path, encoding: str, sep: str) -> tuple[list[int], int, int]:
    """The lines (1-based) with more fields than the header, the header's field count and the
    number of data lines."""
    with open_trace(path) as fh:
        text = io.TextIOWrapper(fh, encoding=encoding, newline="")
        header, bad, rows = None, [], 0
        for number, fields in enumerate(csv.reader(text, delimiter=sep), 1):
            if not fields or (len(fields) == 1 and not fields[0].strip()) or fields[0].lstrip().startswith("#"):
                continue
            if header is None:
                header = len(fields)
                continue
            rows += 1
            if len(fields) > header:
                bad.append(number)
    return bad, header or 0, rows


def read_csv_table(path: str | Path, report: ImportReport | None = None) -> tuple[pd.DataFrame, dict]:
    """A CSV as it is written: its separator and decimal mark sniffed (:func:`sniff_csv`), its
    encoding detected (:func:`detect_encoding`), gzipped or not. A few rows with more fields than
    the header (at most one in ten) are dropped and named in ``report``.

    Returns
    -------
    (pandas.DataFrame, dict)
        The table, and how it was read (``encoding``, ``separator``, ``decimal``).

    Raises
    ------
    EvrouteError
        The file cannot be read: not text, empty, no separator, a header only, or too many
        ragged rows.
    """
    path = Path(path)
    encoding = detect_encoding(path)
    try:
        sample, complete = _text_head(path, encoding)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        raise EvrouteError(f"cannot read the trace {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        sep, decimal = sniff_csv(sample, complete=complete)
    except EvrouteError as exc:
        raise EvrouteError(f"cannot read the trace {path}: {exc}") from None
    kwargs = dict(sep=sep, decimal=decimal, encoding=encoding, comment="#", low_memory=False, skipinitialspace=True,
                  compression="gzip" if path.name.lower().endswith(".gz") else None)
    meta = {"format": "csv", "encoding": encoding, "separator": _SEP_NAMES[sep], "decimal": decimal}
    try:
        try:
            raw = pd.read_csv(path, **kwargs)
        except pd.errors.ParserError:
            bad, header, rows = _ragged_lines(path, encoding, sep)
            if not bad or len(bad) * 10 > rows:
                where = f"line {bad[0]} has more fields than the header's {header}" if bad else "it is not a table"
                raise EvrouteError(f"cannot read the trace {path}: {len(bad):,} of {rows:,} rows are ragged ({where})") \
                    from None
            raw = pd.read_csv(path, on_bad_lines="skip", **kwargs)
            if report is not None:
                report.flag("ragged rows", f"{path} line {bad[0]}: more fields than the header's {header}"
                            + (f" (and {len(bad) - 1:,} more lines)" if len(bad) > 1 else "") + "; dropped")
                report.drop("ragged row", len(bad))
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise EvrouteError(f"cannot read the trace {path}: {getattr(exc, 'strerror', None) or exc}") from None
    except pd.errors.EmptyDataError:
        raise EvrouteError(f"cannot read the trace {path}: empty: no header and no fixes") from None
    raw.columns = [str(c).replace("\ufeff", "").strip() for c in raw.columns]
    return raw, meta


def _xml_text(path: Path) -> tuple[str, str]:
    """An XML file's text, decoded as it declares (``<?xml ... encoding="..."?>``), else UTF-8
    or Latin-1, its declaration removed; and the encoding used."""
    try:
        with open_trace(path) as fh:
            data = fh.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise EvrouteError(f"cannot read the trace {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if data.startswith(codecs.BOM_UTF8):
        encoding, data = "utf-8", data[3:]
    elif data[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
        encoding = "utf-16"
    else:
        declared = re.match(rb"\s*<\?xml[^>]*?encoding\s*=\s*[\"']([A-Za-z0-9._:-]+)[\"']", data)
        encoding = declared.group(1).decode("ascii") if declared else None
        if encoding is not None:
            try:
                codecs.lookup(encoding)
            except LookupError:
                raise EvrouteError(f"cannot read the trace {path}: it declares the encoding {encoding!r}, "
                                   "which is not known") from None
    if encoding is None:
        try:
            text, encoding = data.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            text, encoding = data.decode("latin-1"), "latin-1"
    else:
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError as exc:
            raise EvrouteError(f"cannot read the trace {path}: not valid {encoding} ({exc.reason} at byte "
                               f"{exc.start:,})") from None
    return re.sub(r"^\ufeff?\s*<\?xml[^>]*\?>", "", text, count=1), encoding


def read_gpx(path: str | Path) -> pd.DataFrame:
    """A GPX file's track points as a table: one trip per track segment (named by the track's
    name, or the file's stem and the track's number; a segment's number where a track has
    several, the track's number where two tracks share a name), ``time`` (seconds since 1970, UTC;
    a time without a zone is read as UTC), ``lat``, ``lon``, the GPX speed where it has one, and
    each extension element as a column of its local name (``<energy_wh>``, ``<power_w>``, Garmin's
    ``<gpxtpx:TrackPointExtension><gpxtpx:speed>`` as ``speed``, ...). The encoding the file
    declares is honoured (UTF-8 without a declaration, Latin-1 where that fails); gzipped files
    are read (``.gpx.gz``).

    Returns
    -------
    pandas.DataFrame

    Raises
    ------
    EvrouteError
        The file is not GPX or has no track points.
    """
    import datetime

    import gpxpy
    import gpxpy.gpx

    path = Path(path)
    text, _ = _xml_text(path)
    try:
        doc = gpxpy.parse(text)
    except (gpxpy.gpx.GPXException, ValueError) as exc:
        raise EvrouteError(f"cannot read the trace {path}: not GPX ({str(exc).splitlines()[0][:120]})") from None
    stem = Path(path.name[:-3] if path.name.lower().endswith(".gz") else path.name).stem
    names = [track.name or f"{stem}-{k + 1}" for k, track in enumerate(doc.tracks)]
    rows = []
    for k, track in enumerate(doc.tracks):
        base = names[k] if names.count(names[k]) == 1 else f"{names[k]}#{k + 1}"
        for j, seg in enumerate(track.segments):
            trip = base if len(track.segments) == 1 else f"{base}-{j + 1}"
            for p in seg.points:
                when = p.time
                if when is not None and when.tzinfo is None:
                    when = when.replace(tzinfo=datetime.UTC)
                row = {"trip": trip, "time": when.timestamp() if when is not None else np.nan,
                       "lat": p.latitude, "lon": p.longitude}
                if p.speed is not None:
                    row["speed"] = p.speed
                for ext in p.extensions:
                    for el in ext.iter():
                        if el.text is not None and el.text.strip():
                            row[el.tag.rsplit("}", 1)[-1]] = el.text.strip()
                rows.append(row)
    if not rows:
        raise EvrouteError(f"cannot read the trace {path}: no GPX track points")
    return pd.DataFrame(rows)


def write_gpx(traces: pd.DataFrame, path: str | Path, creator: str) -> None:
    """Write fixes (``trip, time_s, lat, lon, speed_mps, energy_wh``) as GPX, atomically: one track
    per trip, the time as seconds after 2026-01-01T00:00:00Z, the speed and the energy used so far
    as the extensions ``<speed_mps>`` and ``<energy_wh>`` (what :func:`read_gpx` reads back)."""
    import datetime
    import xml.etree.ElementTree as ET

    import gpxpy.gpx

    from ..io import atomic_write_text

    epoch = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    doc = gpxpy.gpx.GPX()
    doc.creator = creator
    for trip, g in traces.groupby("trip", sort=True):
        track = gpxpy.gpx.GPXTrack(name=str(trip))
        seg = gpxpy.gpx.GPXTrackSegment()
        track.segments.append(seg)
        doc.tracks.append(track)
        for t, lat, lon, v, e in zip(g.time_s.tolist(), g.lat.tolist(), g.lon.tolist(), g.speed_mps.tolist(),
                                     g.energy_wh.tolist(), strict=True):
            p = gpxpy.gpx.GPXTrackPoint(lat, lon, time=epoch + datetime.timedelta(seconds=t))
            for tag, value in (("speed_mps", v), ("energy_wh", e)):
                el = ET.Element(tag)
                el.text = f"{value:.10g}"
                p.extensions.append(el)
            seg.points.append(p)
    atomic_write_text(path, doc.to_xml())
