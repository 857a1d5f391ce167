"""Shared fixtures: a private cache per test session, real networks loaded once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("EVROUTE_DATA_DIR", str(REPO.parent / "shared" / "data"))
os.environ.setdefault("MPLBACKEND", "Agg")
DATA_DIR = Path(os.environ["EVROUTE_DATA_DIR"])


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    """Every test session gets its own cache folder (shared by all its tests)."""
    if "EVROUTE_CACHE_DIR" not in os.environ or os.environ.get("EVROUTE_TEST_FRESH_CACHE"):
        os.environ["EVROUTE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    yield


def _require(file: str) -> Path:
    path = DATA_DIR / file
    if not path.is_file():
        pytest.fail(f"real network data missing: {path} (set EVROUTE_DATA_DIR)")
    return path


@pytest.fixture(scope="session")
def monaco():
    from evroute.network import load_network

    _require("monaco-most.osm")
    return load_network("monaco")


@pytest.fixture(scope="session")
def luxembourg():
    from evroute.network import load_network

    _require("luxembourg-lust.osm")
    return load_network("luxembourg")


@pytest.fixture(scope="session")
def synthetic():
    from evroute.network import load_network

    return load_network("synthetic")
