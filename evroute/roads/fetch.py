"""Download a road network from OpenStreetMap (Overpass API) and add node elevations.

Only the standard library talks to the network (``urllib.request``). The result is an
OSM XML file with an ``ele`` tag on every node, the same shape as the MoST Monaco file,
so :mod:`evroute.roads.network` reads downloaded and local networks alike (with ``"ele"`` in
``osmnx.settings.useful_tags_node``).

Services:

* Overpass API (``DEFAULT_OVERPASS_URL``): the query from :func:`overpass_query`, sent
  as the form field ``data`` of a POST.
* An Open-Elevation-compatible lookup (``DEFAULT_ELEVATION_URL``): ``POST`` of
  ``{"locations": [{"latitude": .., "longitude": ..}, ...]}``, answered with
  ``{"results": [{"latitude": .., "longitude": .., "elevation": ..}, ...]}`` in the
  same order.

Transient failures (HTTP 429 and 5xx, time-outs, dropped connections) are retried a few
times with a short exponential backoff; anything else raises
:class:`~evroute.errors.EvrouteError` with a one-line message. Every file is written
atomically: a failed or killed download never leaves a partial file under its name.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import re
import shutil
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

import numpy as np

from evroute import __version__
from evroute.errors import EvrouteError
from evroute.io import atomic_path

__all__ = [
    "DEFAULT_ELEVATION_URL",
    "DEFAULT_OVERPASS_URL",
    "DRIVABLE_HIGHWAYS",
    "USER_AGENT",
    "check_url",
    "add_elevation_tags",
    "fetch_elevations",
    "fetch_network",
    "fetch_osm_xml",
    "overpass_query",
]

DEFAULT_OVERPASS_URL = "https://overpass-api.de/api/interpreter"
DEFAULT_ELEVATION_URL = "https://api.open-elevation.com/api/v1/lookup"
USER_AGENT = f"evroute/{__version__}"

#: ``highway`` values a car may drive on (``service`` is added on request).
DRIVABLE_HIGHWAYS = (
    "motorway",
    "trunk",
    "primary",
    "secondary",
    "tertiary",
    "unclassified",
    "residential",
    "living_street",
    "motorway_link",
    "trunk_link",
    "primary_link",
    "secondary_link",
    "tertiary_link",
)

_RETRY_STATUS = {429, 500, 502, 503, 504}
_CHUNK = 1 << 20


def _one_line(text: object, limit: int = 200) -> str:
    """Collapse whitespace so a message stays on one line, and shorten it."""
    s = re.sub(r"\s+", " ", str(text)).strip()
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _check_bbox(bbox: Sequence[float]) -> tuple[float, float, float, float]:
    try:
        south, west, north, east = (float(v) for v in bbox)
    except (TypeError, ValueError):
        raise EvrouteError(
            f"bounding box must be four numbers (south, west, north, east), got {bbox!r}"
        ) from None
    if not all(math.isfinite(v) for v in (south, west, north, east)):
        raise EvrouteError(f"bounding box has a non-finite value: {bbox!r}")
    if not (-90 <= south < north <= 90):
        raise EvrouteError(
            f"bounding box needs -90 <= south < north <= 90, got south={south}, north={north}"
        )
    if not (-180 <= west < east <= 180):
        raise EvrouteError(
            f"bounding box needs -180 <= west < east <= 180, got west={west}, east={east}"
        )
    return south, west, north, east


def overpass_query(bbox: Sequence[float], timeout: int = 180, include_service: bool = False) -> str:
    """Overpass QL for the drivable road network in a bounding box, as OSM XML.

    Parameters
    ----------
    bbox : (south, west, north, east)
        Degrees, WGS84.
    timeout : int
        Server-side time limit in seconds (the ``[timeout:..]`` setting).
    include_service : bool
        Also fetch ``highway=service`` roads (without parking aisles, driveways and
        other private service roads).

    Returns
    -------
    str
        A query that outputs the road ways with their tags, the turn-restriction
        relations (``type=restriction``) that have one of those roads as a member, and,
        as a skeleton (id and coordinates), every node of those roads. It is the
        ``out body; >; out skel qt;`` pattern, except that the recursion goes down from
        the roads only: recursing from the relations would repeat member ways as
        tag-less skeletons, which osmnx would read over the tagged ones.
    """
    south, west, north, east = _check_bbox(bbox)
    values = list(DRIVABLE_HIGHWAYS)
    if include_service:
        values.append("service")
    hw = "|".join(values)
    exclude = (
        '["area"!~"yes"]["access"!~"^(private|no)$"]'
        '["motor_vehicle"!~"^(private|no)$"]["motorcar"!~"^(private|no)$"]'
        '["service"!~"^(parking|parking_aisle|driveway|private|emergency_access)$"]'
    )
    return (
        f"[out:xml][timeout:{int(timeout)}][bbox:{south:.7f},{west:.7f},{north:.7f},{east:.7f}];\n"
        f'way["highway"~"^({hw})$"]{exclude}->.roads;\n'
        'rel(bw.roads)["type"="restriction"]->.restrictions;\n'
        "(.roads; .restrictions;);\n"
        "out body;\n"
        "node(w.roads);\n"
        "out skel qt;\n"
    )


def _post(
    url: str,
    data: bytes,
    content_type: str,
    timeout: float,
    what: str,
    retries: int,
    backoff: float,
    sink: Callable[[object], None],
) -> None:
    """POST ``data`` and hand the open response to ``sink``; retry transient failures.

    ``sink`` must be safe to call again on a retry (it restarts from scratch).
    """
    headers = {
        "User-Agent": USER_AGENT,
        "Content-Type": content_type,
        "Accept": "*/*",
    }
    attempts = max(0, int(retries)) + 1
    last = ""
    for attempt in range(attempts):
        if attempt:
            time.sleep(backoff * 2 ** (attempt - 1))
        req = urllib.request.Request(url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                sink(resp)
            return
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code} {_one_line(exc.reason, 60)}"
            exc.close()
            if exc.code not in _RETRY_STATUS:
                raise EvrouteError(f"{what} failed at {url}: {last}") from None
        except TimeoutError as exc:
            last = f"timed out after {timeout:g} s ({_one_line(exc, 60)})"
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, TimeoutError):
                last = f"timed out after {timeout:g} s"
            elif isinstance(reason, ConnectionResetError | ConnectionAbortedError):
                last = f"connection lost ({_one_line(reason, 60)})"
            else:
                raise EvrouteError(
                    f"{what} failed: cannot reach {url} ({_one_line(reason, 100)})"
                ) from None
        except (ConnectionResetError, ConnectionAbortedError, http.client.HTTPException) as exc:
            last = f"connection lost ({_one_line(exc, 60) or type(exc).__name__})"
    raise EvrouteError(f"{what} failed at {url}: {last} (after {attempts} attempts)")


def check_url(url: str, what: str = "URL") -> str:
    """An http(s) URL with a host, or one line naming ``what`` (checked before anything is sent)."""
    parts = urllib.parse.urlsplit(str(url))
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise EvrouteError(f"{what} must be an http:// or https:// URL with a host, got {str(url)!r:.80}")
    return str(url)


def _check_osm_xml(path: Path) -> int:
    """Count the nodes of an OSM XML file; EvrouteError if it is not usable OSM XML."""
    n_nodes = 0
    remark = None
    root_tag = None
    try:
        for event, elem in ET.iterparse(path, events=("start", "end")):
            if event == "start":
                if root_tag is None:
                    root_tag = elem.tag
                    if root_tag != "osm":
                        break
                continue
            if elem.tag == "node":
                n_nodes += 1
            elif elem.tag == "remark":
                remark = elem.text or ""
            if elem.tag in ("node", "way", "relation"):
                elem.clear()
    except ET.ParseError as exc:
        head = path.read_bytes()[:80].decode("utf-8", "replace")
        raise EvrouteError(
            f"Overpass answer is not OSM XML ({_one_line(exc, 80)}; starts with {_one_line(head, 60)!r})"
        ) from None
    if root_tag != "osm":
        raise EvrouteError(f"Overpass answer is not OSM XML (root element <{root_tag}>, not <osm>)")
    if remark is not None and re.search(r"error", remark, re.IGNORECASE):
        raise EvrouteError(f"Overpass reported an error: {_one_line(remark)}")
    if n_nodes == 0:
        raise EvrouteError(
            "Overpass answer holds no nodes: no drivable roads in this bounding box?"
        )
    return n_nodes


def fetch_osm_xml(
    bbox: Sequence[float],
    dest: str | os.PathLike,
    url: str = DEFAULT_OVERPASS_URL,
    *,
    timeout: float = 180,
    include_service: bool = False,
    retries: int = 3,
    backoff: float = 2.0,
) -> Path:
    """Download the drivable road network in ``bbox`` from Overpass as OSM XML.

    Parameters
    ----------
    bbox : (south, west, north, east)
        Degrees, WGS84.
    dest : path-like
        Output file; written atomically, only if the answer is valid OSM XML (root
        element ``osm``, at least one node, no Overpass error remark).
    url : str
        Overpass API interpreter endpoint.
    timeout : float
        Seconds, both the query's server-side limit and the socket time-out.
    include_service : bool
        Also fetch ``highway=service`` roads.
    retries, backoff : int, float
        Retries of a transient failure (HTTP 429/5xx, time-out), waiting
        ``backoff * 2**k`` seconds before retry ``k``.

    Returns
    -------
    pathlib.Path
        ``dest``.
    """
    query = overpass_query(bbox, timeout=int(timeout), include_service=include_service)
    body = urllib.parse.urlencode({"data": query}).encode("utf-8")
    dest = Path(dest)
    with atomic_path(dest) as tmp:

        def sink(resp) -> None:
            with open(tmp, "wb") as fh:
                shutil.copyfileobj(resp, fh, _CHUNK)

        _post(
            url,
            body,
            "application/x-www-form-urlencoded; charset=utf-8",
            timeout,
            "Overpass download",
            retries,
            backoff,
            sink,
        )
        _check_osm_xml(tmp)
    return dest


def fetch_elevations(
    lats: Sequence[float],
    lons: Sequence[float],
    url: str = DEFAULT_ELEVATION_URL,
    *,
    batch_size: int = 100,
    timeout: float = 60,
    retries: int = 3,
    backoff: float = 1.0,
    progress: Callable[[str], None] | None = None,
) -> np.ndarray:
    """Look up ground elevations from an Open-Elevation-compatible API.

    Parameters
    ----------
    lats, lons : sequence of float
        Coordinates in degrees, same length.
    url : str
        The lookup endpoint (``POST`` JSON ``{"locations": [...]}``).
    batch_size : int
        Locations per request.
    timeout : float
        Socket time-out per request, seconds.
    retries, backoff : int, float
        Retries of a transient failure (HTTP 429/5xx, time-out), waiting
        ``backoff * 2**k`` seconds before retry ``k``.
    progress : callable, optional
        Called with a short message after each batch.

    Returns
    -------
    numpy.ndarray
        float64 elevations in metres, in input order; NaN where the service has no
        data (``"elevation": null``).
    """
    lat = np.asarray(lats, dtype=np.float64).ravel()
    lon = np.asarray(lons, dtype=np.float64).ravel()
    if lat.shape != lon.shape:
        raise EvrouteError(f"elevation lookup: {lat.size} latitudes but {lon.size} longitudes")
    if not (np.all(np.isfinite(lat)) and np.all(np.isfinite(lon))):
        raise EvrouteError("elevation lookup: coordinates must be finite")
    if np.any(np.abs(lat) > 90) or np.any(np.abs(lon) > 180):
        raise EvrouteError("elevation lookup: latitude must be within ±90 and longitude ±180")
    batch_size = int(batch_size)
    if batch_size < 1:
        raise EvrouteError(f"elevation lookup: batch size must be >= 1, got {batch_size}")
    out = np.full(lat.size, np.nan)
    n_batches = -(-lat.size // batch_size)
    for b, start in enumerate(range(0, lat.size, batch_size)):
        stop = min(start + batch_size, lat.size)
        locations = [
            {"latitude": float(a), "longitude": float(o)}
            for a, o in zip(lat[start:stop], lon[start:stop], strict=True)
        ]
        body = json.dumps({"locations": locations}).encode("utf-8")
        box: dict[str, bytes] = {}

        def sink(resp, box=box) -> None:
            box["data"] = resp.read()

        _post(url, body, "application/json", timeout, "elevation lookup", retries, backoff, sink)
        try:
            results = json.loads(box["data"].decode("utf-8"))["results"]
            values = [r["elevation"] for r in results]
        except (UnicodeDecodeError, ValueError, KeyError, TypeError):
            head = box["data"][:60].decode("utf-8", "replace")
            raise EvrouteError(
                f"elevation lookup at {url}: answer is not {{'results': [{{'elevation': ..}}]}} "
                f"(starts with {_one_line(head, 60)!r})"
            ) from None
        if len(values) != stop - start:
            raise EvrouteError(
                f"elevation lookup at {url}: asked for {stop - start} points, got {len(values)}"
            )
        try:
            out[start:stop] = [np.nan if v is None else float(v) for v in values]
        except (TypeError, ValueError):
            raise EvrouteError(f"elevation lookup at {url}: a non-numeric elevation") from None
        if progress is not None:
            progress(f"elevations: batch {b + 1}/{n_batches} ({stop}/{lat.size} points)")
    return out


def _format_ele(value: float) -> str:
    return repr(round(float(value), 2))


def _start_tag(elem: ET.Element) -> str:
    attrs = "".join(f" {k}={quoteattr(str(v))}" for k, v in elem.attrib.items())
    return f"<{elem.tag}{attrs}>"


def add_elevation_tags(
    osm_path: str | os.PathLike,
    dest_path: str | os.PathLike,
    elevations: dict[int, float],
) -> None:
    """Copy an OSM XML file, setting ``<tag k="ele" v=".."/>`` on its nodes.

    The file is streamed (``iterparse``), so large extracts need little memory. A node
    whose id is in ``elevations`` with a finite value gets exactly one ``ele`` tag with
    that value (an existing one is replaced); other nodes keep what they had. Comments
    are dropped and empty elements are written as start/end pairs; everything else
    (elements, attributes, order) is kept.

    Parameters
    ----------
    osm_path : path-like
        OSM XML input.
    dest_path : path-like
        Output, written atomically (it may be ``osm_path`` itself).
    elevations : dict
        Node id (int) -> elevation in metres.
    """
    src = Path(osm_path)
    if not src.is_file():
        raise EvrouteError(f"OSM file not found: {src}")
    with atomic_path(dest_path) as tmp, open(tmp, "w", encoding="utf-8") as out:
        out.write("<?xml version='1.0' encoding='UTF-8'?>\n")
        depth = 0
        in_node: int | None = None  # id of the node being copied
        skip_depth: int | None = None  # depth of an element being dropped
        root = None
        try:
            for event, elem in ET.iterparse(src, events=("start", "end")):
                if event == "start":
                    depth += 1
                    if root is None:
                        root = elem
                    if skip_depth is not None:
                        continue
                    if (
                        in_node is not None
                        and elem.tag == "tag"
                        and elem.get("k") == "ele"
                        and math.isfinite(elevations.get(in_node, math.nan))
                    ):
                        skip_depth = depth
                        continue
                    if elem.tag == "node" and depth == 2:
                        try:
                            in_node = int(elem.get("id", ""))
                        except ValueError:
                            in_node = None
                    out.write("\n" + "  " * (depth - 1) + _start_tag(elem))
                    continue
                # end event
                if skip_depth is not None:
                    if depth == skip_depth:
                        skip_depth = None
                    depth -= 1
                    continue
                if elem.tag == "node" and depth == 2 and in_node is not None:
                    value = elevations.get(in_node, math.nan)
                    if math.isfinite(value):
                        out.write(f'\n    <tag k="ele" v="{_format_ele(value)}"></tag>')
                    in_node = None
                if len(elem):
                    out.write("\n" + "  " * (depth - 1))
                elif elem.text and elem.text.strip():
                    out.write(escape(elem.text))
                out.write(f"</{elem.tag}>")
                depth -= 1
                if depth == 1 and root is not None:
                    root.clear()
        except ET.ParseError as exc:
            raise EvrouteError(f"{src} is not valid XML: {_one_line(exc, 120)}") from None
        out.write("\n")


def _node_coordinates(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ids, latitudes and longitudes of the nodes of an OSM XML file."""
    ids: list[int] = []
    lats: list[float] = []
    lons: list[float] = []
    for _event, elem in ET.iterparse(path, events=("end",)):
        if elem.tag == "node":
            try:
                ids.append(int(elem.attrib["id"]))
                lats.append(float(elem.attrib["lat"]))
                lons.append(float(elem.attrib["lon"]))
            except (KeyError, ValueError):
                raise EvrouteError(
                    f"{path.name}: a node without a valid id/lat/lon: {elem.attrib}"
                ) from None
            elem.clear()
        elif elem.tag in ("way", "relation"):
            elem.clear()
    return np.asarray(ids, dtype=np.int64), np.asarray(lats), np.asarray(lons)


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def fetch_network(
    name: str,
    bbox: Sequence[float],
    cache_dir: str | os.PathLike,
    *,
    overpass_url: str = DEFAULT_OVERPASS_URL,
    elevation_url: str = DEFAULT_ELEVATION_URL,
    progress: Callable[[str], None] | None = None,
    overpass_timeout: float = 180,
    elevation_timeout: float = 60,
    batch_size: int = 100,
    retries: int = 3,
    backoff: float = 1.0,
    include_service: bool = False,
) -> Path:
    """Download a network and its node elevations into ``<cache_dir>/<name>.osm``.

    Parameters
    ----------
    name : str
        File stem (letters, digits, ``_``, ``.``, ``-``).
    bbox : (south, west, north, east)
        Degrees, WGS84.
    cache_dir : path-like
        Folder of the result (created if missing).
    overpass_url, elevation_url : str
        Service endpoints (see the module docstring).
    progress : callable, optional
        Called with short status messages.
    overpass_timeout, elevation_timeout, batch_size, retries, backoff, include_service
        Passed on to :func:`fetch_osm_xml` and :func:`fetch_elevations`.

    Returns
    -------
    pathlib.Path
        The OSM XML file, every node with an ``ele`` tag (except points where the
        elevation service has no data). Written atomically; nothing is left behind on
        failure.
    """
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise EvrouteError(
            f"network name {name!r} must be letters, digits, '_', '.' or '-' (a file name)"
        )
    check_url(overpass_url, "--overpass-url")
    check_url(elevation_url, "--elevation-url")
    cache_dir = Path(cache_dir)
    dest = cache_dir / f"{name}.osm"

    def say(msg: str) -> None:
        if progress is not None:
            progress(msg)

    cache_dir.mkdir(parents=True, exist_ok=True)
    fd, raw_name = tempfile.mkstemp(prefix=f".{name}.", suffix=".raw.osm", dir=cache_dir)
    os.close(fd)
    raw = Path(raw_name)
    try:
        say(f"downloading OSM roads for {name} from {overpass_url}")
        fetch_osm_xml(
            bbox,
            raw,
            url=overpass_url,
            timeout=overpass_timeout,
            include_service=include_service,
            retries=retries,
            backoff=backoff,
        )
        ids, lats, lons = _node_coordinates(raw)
        say(f"{ids.size} nodes; looking up elevations at {elevation_url}")
        ele = fetch_elevations(
            lats,
            lons,
            url=elevation_url,
            batch_size=batch_size,
            timeout=elevation_timeout,
            retries=retries,
            backoff=backoff,
            progress=progress,
        )
        missing = int(np.count_nonzero(~np.isfinite(ele)))
        if missing == ele.size:
            raise EvrouteError(f"elevation lookup at {elevation_url}: no data for any node")
        if missing:
            say(f"warning: no elevation for {missing} of {ele.size} nodes")
        add_elevation_tags(raw, dest, dict(zip(ids.tolist(), ele.tolist(), strict=True)))
    finally:
        raw.unlink(missing_ok=True)
    say(f"wrote {dest}")
    return dest
