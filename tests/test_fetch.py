"""Tests of evroute.roads.fetch against a local fake Overpass / Open-Elevation server.

Nothing here contacts the internet: every URL points at 127.0.0.1.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from evroute import __version__
from evroute.errors import EvrouteError
from evroute.roads.fetch import (
    add_elevation_tags,
    fetch_elevations,
    fetch_network,
    fetch_osm_xml,
    overpass_query,
)

BBOX = (43.72, 7.40, 43.74, 7.43)

# Ways come before nodes (as Overpass prints them with `out body; ... out skel qt;`);
# node 3 already has an ele tag (to be replaced), node 4 is self-closing with a tag.
OSM_XML = b"""<?xml version="1.0" encoding="UTF-8"?>
<osm version="0.6" generator="fake Overpass">
  <note>test data</note>
  <meta osm_base="2024-01-01T00:00:00Z"/>
  <way id="100">
    <nd ref="1"/>
    <nd ref="2"/>
    <nd ref="3"/>
    <tag k="highway" v="residential"/>
    <tag k="name" v="Rue &amp; &quot;Test&quot;"/>
    <tag k="maxspeed" v="30"/>
  </way>
  <way id="101">
    <nd ref="3"/>
    <nd ref="4"/>
    <tag k="highway" v="primary"/>
    <tag k="oneway" v="yes"/>
  </way>
  <relation id="900">
    <member type="way" ref="100" role="from"/>
    <member type="node" ref="3" role="via"/>
    <member type="way" ref="101" role="to"/>
    <tag k="restriction" v="no_left_turn"/>
    <tag k="type" v="restriction"/>
  </relation>
  <node id="1" lat="43.7300000" lon="7.4100000"/>
  <node id="2" lat="43.7310000" lon="7.4110000"/>
  <node id="3" lat="43.7320000" lon="7.4120000">
    <tag k="ele" v="999"/>
  </node>
  <node id="4" lat="43.7330000" lon="7.4130000"><tag k="highway" v="traffic_signals"/></node>
</osm>
"""

EXPECTED_ELE = {1: 4373.0, 2: 4373.1, 3: 4373.2, 4: 4373.3}  # 100 * lat


class FakeServer:
    """Overpass at /interpreter, elevation lookup at /lookup, scripted failures."""

    def __init__(self):
        self.overpass_body = OSM_XML
        self.overpass_status: list[int] = []  # statuses to answer before succeeding
        self.lookup_status: list[int] = []
        self.lookup_always: int | None = None  # answer every lookup with this status
        self.requests: list[tuple[str, dict, bytes]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def _reply(self, status: int, body: bytes, ctype: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server.requests.append((self.path, dict(self.headers), data))
                if self.path == "/interpreter":
                    if server.overpass_status:
                        return self._reply(server.overpass_status.pop(0), b"busy", "text/plain")
                    return self._reply(200, server.overpass_body, "application/osm3s+xml")
                if self.path == "/lookup":
                    if server.lookup_always is not None:
                        return self._reply(server.lookup_always, b"<h1>oops</h1>", "text/html")
                    if server.lookup_status:
                        return self._reply(server.lookup_status.pop(0), b"busy", "text/plain")
                    locs = json.loads(data)["locations"]
                    results = [
                        {
                            "latitude": p["latitude"],
                            "longitude": p["longitude"],
                            "elevation": round(100 * p["latitude"], 6),
                        }
                        for p in locs
                    ]
                    body = json.dumps({"results": results}).encode()
                    return self._reply(200, body, "application/json")
                return self._reply(404, b"not found", "text/plain")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        host, port = self.httpd.server_address[:2]
        self.overpass_url = f"http://{host}:{port}/interpreter"
        self.lookup_url = f"http://{host}:{port}/lookup"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def paths(self, path: str) -> list[tuple[str, dict, bytes]]:
        return [r for r in self.requests if r[0] == path]


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.close()


def _files(folder):
    return sorted(p.name for p in folder.iterdir())


def test_overpass_query_shape():
    q = overpass_query(BBOX)
    assert q.startswith("[out:xml]")
    assert "[bbox:43.7200000,7.4000000,43.7400000,7.4300000]" in q
    for hw in ("motorway", "primary", "residential", "living_street", "tertiary_link"):
        assert hw in q
    assert "service" not in q.split("->.roads")[0].split('"highway"~')[1].split("]")[0]
    assert "service" in overpass_query(BBOX, include_service=True)
    assert '["type"="restriction"]' in q
    assert "out body;" in q and "out skel qt;" in q


@pytest.mark.parametrize(
    "bbox", [(43.74, 7.40, 43.72, 7.43), (43.72, 7.43, 43.74, 7.40), (1, 2, 3), (91, 0, 92, 1)]
)
def test_overpass_query_bad_bbox(bbox):
    with pytest.raises(EvrouteError):
        overpass_query(bbox)


def test_fetch_network_end_to_end(server, tmp_path, monkeypatch):
    ox = pytest.importorskip("osmnx")
    messages: list[str] = []
    path = fetch_network(
        "town",
        BBOX,
        tmp_path / "cache",
        overpass_url=server.overpass_url,
        elevation_url=server.lookup_url,
        progress=messages.append,
        batch_size=3,
        backoff=0,
    )
    assert path == tmp_path / "cache" / "town.osm"
    assert _files(tmp_path / "cache") == ["town.osm"]  # no temporary files left
    assert messages

    # the Overpass request: form-encoded query, our User-Agent
    (_, headers, body) = server.paths("/interpreter")[0]
    assert headers["User-Agent"] == f"evroute/{__version__}"
    query = urllib.parse.parse_qs(body.decode())["data"][0]
    assert query == overpass_query(BBOX, timeout=180)
    # 4 nodes in batches of 3 -> 2 lookups
    lookups = server.paths("/lookup")
    assert [len(json.loads(b)["locations"]) for _, _, b in lookups] == [3, 1]

    monkeypatch.setattr(
        ox.settings, "useful_tags_node", list(ox.settings.useful_tags_node) + ["ele"]
    )
    G = ox.graph_from_xml(path, simplify=False, retain_all=True)
    assert set(G.nodes) == {1, 2, 3, 4}
    for n, expected in EXPECTED_ELE.items():
        assert float(G.nodes[n]["ele"]) == pytest.approx(expected)
    assert G.nodes[4]["highway"] == "traffic_signals"
    assert G.edges[1, 2, 0]["highway"] == "residential"
    assert G.edges[1, 2, 0]["name"] == 'Rue & "Test"'
    assert G.edges[3, 4, 0]["oneway"] is True
    assert not G.has_edge(4, 3)

    # exactly one ele tag per node, relation kept
    import xml.etree.ElementTree as ET

    root = ET.parse(path).getroot()
    for node in root.iter("node"):
        assert len([t for t in node.iter("tag") if t.get("k") == "ele"]) == 1
    assert root.find("relation").get("id") == "900"


def test_fetch_osm_xml_rejects_html(server, tmp_path):
    server.overpass_body = b"<html><body><p>Too many requests<br></body></html>"
    dest = tmp_path / "x.osm"
    with pytest.raises(EvrouteError) as err:
        fetch_osm_xml(BBOX, dest, url=server.overpass_url, backoff=0)
    assert "\n" not in str(err.value)
    assert _files(tmp_path) == []


@pytest.mark.parametrize(
    "body",
    [
        b'<?xml version="1.0"?><html><body>error</body></html>',
        b'<?xml version="1.0"?><osm version="0.6"></osm>',
        b'<?xml version="1.0"?><osm version="0.6"><remark> runtime error: Query timed out'
        b' </remark><node id="1" lat="1" lon="1"/></osm>',
    ],
)
def test_fetch_osm_xml_rejects_non_osm(server, tmp_path, body):
    server.overpass_body = body
    with pytest.raises(EvrouteError):
        fetch_osm_xml(BBOX, tmp_path / "x.osm", url=server.overpass_url, backoff=0)
    assert _files(tmp_path) == []


def test_fetch_osm_xml_retries_then_succeeds(server, tmp_path):
    server.overpass_status = [503, 504]
    dest = fetch_osm_xml(BBOX, tmp_path / "x.osm", url=server.overpass_url, backoff=0)
    assert dest.read_bytes() == OSM_XML
    assert len(server.paths("/interpreter")) == 3


def test_fetch_osm_xml_client_error_not_retried(server, tmp_path):
    server.overpass_status = [400]
    with pytest.raises(EvrouteError, match="HTTP 400"):
        fetch_osm_xml(BBOX, tmp_path / "x.osm", url=server.overpass_url, backoff=0)
    assert len(server.paths("/interpreter")) == 1
    assert _files(tmp_path) == []


def test_fetch_elevations_retries_503(server):
    server.lookup_status = [503]
    ele = fetch_elevations([45.0, 45.5], [7.0, 7.1], url=server.lookup_url, backoff=0)
    np.testing.assert_allclose(ele, [4500.0, 4550.0])
    assert len(server.paths("/lookup")) == 2


def test_fetch_elevations_persistent_500(server):
    server.lookup_always = 500
    with pytest.raises(EvrouteError) as err:
        fetch_elevations([45.0], [7.0], url=server.lookup_url, retries=3, backoff=0)
    msg = str(err.value)
    assert "HTTP 500" in msg and "\n" not in msg
    assert len(server.paths("/lookup")) == 4  # first try + 3 retries


def test_fetch_elevations_batches_and_empty(server):
    lats = np.linspace(40, 41, 7)
    ele = fetch_elevations(lats, np.full(7, 7.0), url=server.lookup_url, batch_size=2)
    np.testing.assert_allclose(ele, 100 * lats)
    assert len(server.paths("/lookup")) == 4
    assert fetch_elevations([], [], url=server.lookup_url).shape == (0,)
    with pytest.raises(EvrouteError):
        fetch_elevations([1.0, 2.0], [1.0], url=server.lookup_url)


def test_fetch_elevations_unreachable():
    # a port nobody listens on: connection refused, reported as one line
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(EvrouteError, match="cannot reach"):
        fetch_elevations([1.0], [1.0], url=f"http://127.0.0.1:{port}/lookup", backoff=0)


def test_fetch_network_failure_leaves_nothing(server, tmp_path):
    server.lookup_always = 500
    cache = tmp_path / "cache"
    with pytest.raises(EvrouteError, match="HTTP 500"):
        fetch_network(
            "town",
            BBOX,
            cache,
            overpass_url=server.overpass_url,
            elevation_url=server.lookup_url,
            retries=1,
            backoff=0,
        )
    assert _files(cache) == []


def test_fetch_network_bad_name(tmp_path):
    with pytest.raises(EvrouteError):
        fetch_network("../evil", BBOX, tmp_path, overpass_url="http://127.0.0.1:9/")


def test_add_elevation_tags_in_place_and_partial(tmp_path):
    src = tmp_path / "in.osm"
    src.write_bytes(OSM_XML)
    add_elevation_tags(src, src, {1: 12.5, 3: float("nan"), 2: 7})
    import xml.etree.ElementTree as ET

    root = ET.parse(src).getroot()
    eles = {
        int(n.get("id")): [t.get("v") for t in n.iter("tag") if t.get("k") == "ele"]
        for n in root.iter("node")
    }
    assert eles == {1: ["12.5"], 2: ["7.0"], 3: ["999"], 4: []}
    assert [w.get("id") for w in root.iter("way")] == ["100", "101"]
    assert root.find("note").text == "test data"
    assert _files(tmp_path) == ["in.osm"]


def test_add_elevation_tags_bad_input(tmp_path):
    with pytest.raises(EvrouteError):
        add_elevation_tags(tmp_path / "missing.osm", tmp_path / "out.osm", {})
    bad = tmp_path / "bad.osm"
    bad.write_text("<osm><node id='1'></osm>")
    with pytest.raises(EvrouteError):
        add_elevation_tags(bad, tmp_path / "out.osm", {1: 1.0})
    assert _files(tmp_path) == ["bad.osm"]


def test_cli_fetch_then_info(server, tmp_path, monkeypatch, capsys):
    """`evroute networks fetch monaco` against the fake services, then load it from the cache."""
    from evroute.cli import main

    from .osmxml import write_osm

    server.overpass_body = write_osm(tmp_path / "grid.osm", ele=False).read_bytes()
    monkeypatch.setenv("EVROUTE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EVROUTE_DATA_DIR", str(tmp_path / "no-data-here"))
    args = ["networks", "fetch", "monaco", "--overpass-url", server.overpass_url,
            "--elevation-url", server.lookup_url]
    assert main(args) == 0
    assert (tmp_path / "cache" / "osm" / "monaco.osm").is_file()
    capsys.readouterr()
    assert main(["networks", "info", "monaco", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["elevation_source"] == "osm" and info["edges"] == 16
    assert info["elevation_min_m"] == pytest.approx(100 * 45.0, abs=0.01)
    assert main(args) == 0 and "already cached" in capsys.readouterr().out
