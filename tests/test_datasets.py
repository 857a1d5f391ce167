"""`evroute data fetch|list|path` against a local file server: pinned hashes, resumed downloads,
one error line for each failure, nothing half-written under a dataset's name, a user's file never
replaced without --overwrite. Nothing here contacts the internet: every URL is 127.0.0.1."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import evroute.roads.datasets as datasets
from evroute.cli import main
from evroute.errors import EvrouteError

from .conftest import LUXEMBOURG, LUXEMBOURG_DEM, MONACO, data_file

REPO = Path(__file__).resolve().parent.parent


class FileServer:
    """Serves ``files`` (name → bytes) at ``/NAME``, honouring ``Range: bytes=N-``; ``truncate``
    (name → bytes to send) cuts a body short while announcing its full length."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.truncate: dict[str, int] = {}
        self.requests: list[tuple[str, str | None]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802 (the http.server API)
                name = self.path.lstrip("/")
                rng = self.headers.get("Range")
                server.requests.append((name, rng))
                if name not in server.files:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body, start = server.files[name], 0
                if rng and rng.startswith("bytes="):
                    start = int(rng[6:].rstrip("-"))
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                part = body[start:]
                self.send_header("Content-Length", str(len(part)))
                self.end_headers()
                cut = server.truncate.pop(name, None)
                self.wfile.write(part if cut is None else part[:cut])
                if cut is not None:
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = FileServer()
    yield s
    s.close()


PAYLOAD = b"<osm>" + bytes(range(256)) * 400 + b"</osm>"


@pytest.fixture
def fake_registry(monkeypatch):
    """One small dataset, pinned to PAYLOAD, instead of the real ones."""
    reg = {"tiny": {"file": "tiny.osm", "description": "a test file", "url": "https://example.org/pinned/tiny.osm",
                    "sha256": hashlib.sha256(PAYLOAD).hexdigest(), "bytes": len(PAYLOAD), "source": "tests",
                    "licence": "none"}}
    monkeypatch.setattr(datasets, "load_registry", lambda name: reg)
    return reg


def leftovers(folder: Path) -> list[str]:
    """Every name in the data folder except a resumable part."""
    return sorted(p.name for p in folder.rglob("*") if not p.name.endswith(".part"))


def test_fetch_verifies_and_a_second_fetch_downloads_nothing(server, fake_registry, tmp_path, capsys):
    server.files["tiny.osm"] = PAYLOAD
    assert main(["data", "fetch", "tiny", "--data-dir", str(tmp_path), "--base-url", server.url]) == 0
    assert (tmp_path / "tiny.osm").read_bytes() == PAYLOAD and leftovers(tmp_path) == ["tiny.osm"]
    assert "downloaded" in capsys.readouterr().out
    assert main(["data", "fetch", "all", "--data-dir", str(tmp_path), "--base-url", server.url]) == 0
    assert "present" in capsys.readouterr().out and len(server.requests) == 1
    assert main(["data", "list", "--data-dir", str(tmp_path)]) == 0
    assert "present, verified" in capsys.readouterr().out
    assert main(["data", "path", "tiny", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "tiny.osm")


def test_a_wrong_checksum_is_one_line_and_leaves_nothing(server, fake_registry, tmp_path, capsys):
    server.files["tiny.osm"] = PAYLOAD[:-1] + b"!"
    assert main(["data", "fetch", "tiny", "--data-dir", str(tmp_path), "--base-url", server.url]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: tiny.osm from") and "SHA-256" in err[0]
    assert list(tmp_path.iterdir()) == []  # no file, no part, no temporary


def test_a_truncated_download_is_kept_apart_and_resumed(server, fake_registry, tmp_path, capsys):
    server.files["tiny.osm"] = PAYLOAD
    server.truncate["tiny.osm"] = 40_000
    assert main(["data", "fetch", "tiny", "--data-dir", str(tmp_path), "--base-url", server.url]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    kept = (tmp_path / ".tiny.osm.part").stat().st_size  # (at most the last chunk received is lost)
    assert 0 < kept <= 40_000
    assert len(err) == 1 and f"broke off after {kept:,} of 102,411 bytes" in err[0] and "resume" in err[0]
    assert leftovers(tmp_path) == []  # nothing under the dataset's name
    assert datasets.dataset_state("tiny", tmp_path).state == "partial"
    assert main(["data", "fetch", "tiny", "--data-dir", str(tmp_path), "--base-url", server.url]) == 0
    assert "resumed" in capsys.readouterr().out
    assert server.requests[-1] == ("tiny.osm", f"bytes={kept}-")  # only the rest was asked for
    assert (tmp_path / "tiny.osm").read_bytes() == PAYLOAD and sorted(os.listdir(tmp_path)) == ["tiny.osm"]


def test_a_resumed_part_that_does_not_match_is_deleted(server, fake_registry, tmp_path, capsys):
    (tmp_path / ".tiny.osm.part").write_bytes(b"garbage" * 10)
    server.files["tiny.osm"] = PAYLOAD
    assert main(["data", "fetch", "tiny", "--data-dir", str(tmp_path), "--base-url", server.url]) == 2
    assert "SHA-256" in capsys.readouterr().err and list(tmp_path.iterdir()) == []
    assert main(["data", "fetch", "tiny", "--data-dir", str(tmp_path), "--base-url", server.url]) == 0
    assert (tmp_path / "tiny.osm").read_bytes() == PAYLOAD


def test_no_network_and_a_missing_file_are_one_line_each(server, fake_registry, tmp_path, capsys):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    assert main(["data", "fetch", "tiny", "--data-dir", str(tmp_path), "--base-url", closed]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no connection" in err[0] and "tiny.osm" in err[0]
    assert main(["data", "fetch", "tiny", "--data-dir", str(tmp_path), "--base-url", server.url]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "HTTP 404" in err[0]
    assert list(tmp_path.iterdir()) == []
    assert main(["data", "fetch", "atlantis", "--data-dir", str(tmp_path)]) == 2
    assert "unknown dataset 'atlantis'" in capsys.readouterr().err


def test_a_users_file_is_never_replaced_without_overwrite_and_a_link_never(server, fake_registry, tmp_path, capsys):
    server.files["tiny.osm"] = PAYLOAD
    mine = tmp_path / "tiny.osm"
    mine.write_text("my own notes")
    assert datasets.dataset_state("tiny", tmp_path).state == "differs"
    assert main(["data", "fetch", "tiny", "--data-dir", str(tmp_path), "--base-url", server.url]) == 2
    assert "--overwrite" in capsys.readouterr().err and mine.read_text() == "my own notes"
    assert main(["data", "fetch", "tiny", "--data-dir", str(tmp_path), "--base-url", server.url, "--overwrite"]) == 0
    assert mine.read_bytes() == PAYLOAD
    mine.unlink()
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep me")
    mine.symlink_to(target)
    assert main(["data", "fetch", "tiny", "--data-dir", str(tmp_path), "--base-url", server.url, "--overwrite"]) == 2
    assert "symbolic link" in capsys.readouterr().err and target.read_text() == "keep me" and mine.is_symlink()


def test_the_registry_pins_every_dataset_by_commit_and_hash():
    for name in datasets.dataset_names():
        entry = datasets.dataset(name)
        assert entry["url"].startswith("https://raw.githubusercontent.com/")
        commit = entry["url"].split("/")[5]
        assert len(commit) == 40 and all(c in "0123456789abcdef" for c in commit), "pinned to a commit"
        assert len(entry["sha256"]) == 64 and entry["bytes"] > 0 and entry["licence"]


@pytest.mark.real(MONACO, LUXEMBOURG, LUXEMBOURG_DEM)
def test_the_shared_files_are_the_pinned_ones():
    """The files the tests read are the pinned downloads (the terrain model by its values: it
    is converted from the published centimetres)."""
    for name in datasets.dataset_names():
        entry = datasets.dataset(name)
        assert datasets.dataset_state(name, data_file(entry["file"]).parent).state == "present", name


@pytest.mark.real(MONACO, LUXEMBOURG, LUXEMBOURG_DEM)
def test_fetch_all_from_a_mirror_then_the_real_network_tests_run(server, tmp_path, monkeypatch):
    """`evroute data fetch all` into an empty folder from a local mirror of the published files,
    then real-network tests run on that folder in a fresh pytest (none skipped)."""
    import numpy as np
    import rasterio

    for name in ("monaco", "luxembourg"):
        entry = datasets.dataset(name)
        server.files[Path(entry["url"]).name] = data_file(entry["file"]).read_bytes()
    # the published terrain model is centimetres (uint16, 0 = no data): made again from the metres
    dem = datasets.dataset("luxembourg-dem")
    with rasterio.open(data_file(dem["file"])) as src:
        metres, profile = src.read(1), src.profile
    cm = np.where(metres == -9999, 0, np.round(metres.astype(np.float64) * 100)).astype(np.uint16)
    profile.update(dtype="uint16", nodata=0)
    source = tmp_path / "dem500.tif"
    with rasterio.open(source, "w", **profile) as dst:
        dst.write(cm, 1)
    server.files["dem500.tif"] = source.read_bytes()
    reg = {k: dict(v) for k, v in datasets.load_registry("datasets").items()}
    reg["luxembourg-dem"]["sha256"] = hashlib.sha256(server.files["dem500.tif"]).hexdigest()  # our copy's bytes
    monkeypatch.setattr(datasets, "load_registry", lambda name: reg)

    folder = tmp_path / "data"
    done = datasets.fetch_datasets(["all"], folder, base_url=server.url)
    assert [(n, what) for n, _, what in done] == [("monaco", "downloaded"), ("luxembourg", "downloaded"),
                                                  ("luxembourg-dem", "downloaded")]
    # the converted metres carry the pinned values of the real file (registry's values_sha256)
    assert all(datasets.dataset_state(n, folder).state == "present" for n in reg)
    env = {**os.environ, "EVROUTE_DATA_DIR": str(folder), "EVROUTE_REQUIRE_DATA": "1"}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "tests/test_network.py::test_real_network_sizes", "tests/test_routes.py::test_monaco_routes"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and "skipped" not in out.stdout, out.stdout[-3000:]


def test_without_the_data_real_tests_skip_with_one_line_naming_the_fetch(tmp_path):
    env = {**os.environ, "EVROUTE_DATA_DIR": str(tmp_path / "empty")}
    env.pop("EVROUTE_REQUIRE_DATA", None)
    tests = ["tests/test_network.py::test_real_network_sizes", "tests/test_network.py::test_monaco_turn_restrictions_applied",
             "tests/test_routes.py::test_monaco_routes"]
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *tests], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=300)
    skipped = [line for line in out.stdout.splitlines() if line.startswith("SKIPPED")]
    assert out.returncode == 0 and len(skipped) == 1 and "evroute data fetch all" in skipped[0], out.stdout[-2000:]
    env["EVROUTE_REQUIRE_DATA"] = "1"
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", tests[0]], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 1 and "EVROUTE_REQUIRE_DATA=1" in out.stdout


def test_a_missing_builtin_network_names_the_fetch(tmp_path, monkeypatch):
    from evroute.roads.network import load_network

    monkeypatch.setenv("EVROUTE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("EVROUTE_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(EvrouteError, match="evroute data fetch luxembourg"):
        load_network("luxembourg")
