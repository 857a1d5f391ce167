"""Shared fixtures: a private cache per test session, real networks loaded once, and the rules for
tests that need more than the README's test command installs.

- The reference data (``evroute data fetch``: Monaco, Luxembourg, Luxembourg's terrain) are read
  from the data folder (``$EVROUTE_DATA_DIR``; ``../shared/data`` beside the checkout when it
  exists; else the user data folder). A test marked ``real`` (or asking for a file through
  :func:`data_file`) is skipped without them, with one summary line naming ``evroute data
  fetch``; with ``EVROUTE_REQUIRE_DATA=1`` (CI) a missing file fails the test instead.
- A test marked ``needs("sumo")`` (``ray``, ``svgp``, ``docs``, ``fastsim``) is skipped, with its reason,
  where that extra is not installed.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
_SHARED = REPO.parent / "shared" / "data"
if "EVROUTE_DATA_DIR" not in os.environ and _SHARED.is_dir():
    os.environ["EVROUTE_DATA_DIR"] = str(_SHARED)
os.environ.setdefault("MPLBACKEND", "Agg")

#: The files of the reference datasets the tests read.
MONACO, LUXEMBOURG, LUXEMBOURG_DEM = "monaco-most.osm", "luxembourg-lust.osm", "luxembourg-dem500.tif"

#: extra → the modules it installs (looked up, never imported: importing sumo resets PROJ's paths)
EXTRAS = {"sumo": ("sumo", "sumolib"), "ray": ("ray",), "svgp": ("torch", "gpytorch"),
          "docs": ("mkdocs", "mkdocstrings"), "fastsim": ("fastsim",)}


def has_extra(extra: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in EXTRAS[extra])


def data_file(name: str) -> Path:
    """The reference data file ``name`` from the data folder: the test is skipped without it (an
    error under ``EVROUTE_REQUIRE_DATA=1``)."""
    from evroute.roads.datasets import data_dir

    path = data_dir() / name
    if not path.is_file():
        message = f"real network data missing ({data_dir()}): run `evroute data fetch all`"
        if os.environ.get("EVROUTE_REQUIRE_DATA") == "1":
            pytest.fail(f"{message}; EVROUTE_REQUIRE_DATA=1 forbids skipping")
        pytest.skip(message)
    return path


def pytest_configure(config):
    config.addinivalue_line("markers", "needs(extra): skipped when the extra (sumo, ray, svgp, docs, fastsim) is not installed")


def pytest_runtest_setup(item):
    for mark in item.iter_markers("needs"):
        for extra in mark.args:
            if not has_extra(extra):
                pytest.skip(f"needs the {extra} extra: pip install \"evroute[{extra}]\"")
    for mark in item.iter_markers("real"):
        for name in mark.args or (MONACO, LUXEMBOURG):
            data_file(name)


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    """Every test session gets its own cache folder (shared by all its tests)."""
    if "EVROUTE_CACHE_DIR" not in os.environ or os.environ.get("EVROUTE_TEST_FRESH_CACHE"):
        os.environ["EVROUTE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    yield


@pytest.fixture(scope="session")
def monaco():
    from evroute.roads.network import load_network

    data_file(MONACO)
    return load_network("monaco")


@pytest.fixture(scope="session")
def luxembourg():
    from evroute.roads.network import load_network

    data_file(LUXEMBOURG)
    return load_network("luxembourg")


@pytest.fixture(scope="session")
def synthetic():
    from evroute.roads.network import load_network

    return load_network("synthetic")


@pytest.fixture
def dear_truth():
    """A plug-in truth ``dear`` of edges plus turns that conserves energy: E_det on the edges, each
    turn its change of kinetic level at the speed limits plus what physics says it dissipates
    (cars spread by 2 Wh about it), and one turn dearer: set ``dear_truth["turn"] = (from edge, to
    edge, Wh)`` before the problem is prepared."""
    from evroute.bandit.environments import TRUTHS, Truth, Turns, register_truth
    from evroute.physics.energy import kinetic_energy_wh, potential_energy_wh
    from evroute.world.junctions import physics_turns

    extra: dict = {}

    def factory(setup):
        net = setup.net
        src, dst = np.asarray(net.conn_src), np.asarray(net.conn_dst)
        psi = kinetic_energy_wh(net.edges.speed_mps.to_numpy(), setup.vehicle)
        dissipation = physics_turns(net, setup.vehicle).mean.copy()
        if extra:
            a, b, wh = extra["turn"]
            dissipation[(src == a) & (dst == b)] += wh
        potential = potential_energy_wh(net.edges.length_m.to_numpy(), net.edges.grade.to_numpy(), setup.vehicle)
        return Truth(setup.mean.copy(), setup.noise_std, description={}, potential=potential,
                     turns=Turns(psi[dst] - psi[src] + dissipation, psi, src, dst, noise_std=2.0))

    register_truth("dear", factory, description="E_det plus physics' junctions, one turn dearer")
    yield extra
    TRUTHS.unregister("dear")
