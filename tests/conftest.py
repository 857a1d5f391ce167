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


def fleet_table(net, *, trips: int = 40, seed: int = 0, vehicle: str = "sumo-ev", noise_wh: float = 3.0):
    """A fleet's traversals of ``net`` as ``evroute drives import`` writes them, known by
    construction: ``trips`` cars each drive a shortest route between two random edges (its first and
    last edge partial, left out); each edge's energy at a constant kinetic state is a truth of its
    own (E_det ± 20 %, plus 2 Wh) plus N(0, ``noise_wh``²) per traversal, and each car dissipates
    1 + |N(0, 1.5²)| Wh at every junction (booked on ``kin_out_wh``, at a constant top speed)."""
    import pandas as pd

    from evroute.physics.energy import load_vehicle
    from evroute.physics.routes import edge_energies
    from evroute.roads.oracle import Oracle

    rng = np.random.default_rng(seed)
    e_det = edge_energies(net, load_vehicle(vehicle))
    truth = e_det + 0.2 * np.abs(e_det) * rng.standard_normal(net.n_edges) + 2.0
    oracle, length = Oracle.from_network(net), net.edges.length_m.to_numpy()
    rows, k = [], 0
    while k < trips:
        a, b = (int(x) for x in rng.integers(net.n_edges, size=2))
        if not oracle.reachable(a)[b]:
            continue
        path = oracle.shortest_path(length, a, b).edges
        if len(path) < 5:
            continue
        inner = [int(x) for x in path[1:-1]]
        for i, edge in enumerate(inner):
            y = truth[edge] + noise_wh * rng.standard_normal()
            d = 1.0 + abs(rng.normal(0.0, 1.5))
            rows.append({"trip": f"t{k:03d}", "vehicle": f"car{k:03d}", "edge": edge,
                         "next_edge": inner[i + 1] if i + 1 < len(inner) else -1, "enter_s": 10.0 * i,
                         "seconds": 10.0, "energy_wh": y + d, "edge_wh": y, "kin_in_wh": 0.0, "kin_out_wh": d,
                         "v_in": 10.0, "v_top": 10.0, "v_out": 10.0, "match_dist_m": 1.0, "file": "fleet.csv"})
        k += 1
    return pd.DataFrame(rows)


def write_drives_import(folder, net, table, *, network: str = "synthetic", vehicle: str = "sumo-ev") -> Path:
    """``table`` as ``evroute drives import`` leaves it: ``folder/traversals.parquet`` and a
    ``report.json`` naming the network and the vehicle."""
    import json

    from evroute.io import atomic_write_parquet, generator
    from evroute.physics.energy import load_vehicle
    from evroute.world.fleet import network_record, vehicle_record

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_parquet(folder / "traversals.parquet", table)
    report = {"generator": generator(), "network": network_record(net, network),
              "vehicle": vehicle_record(load_vehicle(vehicle), vehicle), "gps_noise_m": 5.0, "matcher": "hmm"}
    (folder / "report.json").write_text(json.dumps(report))
    return folder


def make_prior_file(folder, net, table, *, name: str = "prior.json", vehicle: str = "delivery-van",
                    fleet: str = "sumo-ev", **fit) -> Path:
    """``table`` imported (:func:`write_drives_import`) and made a prior file with the library
    (:func:`evroute.world.fleet.fit_fleet_prior`; ``fit`` its options: ``fitted`` gives σ₀, the noise
    and ℓ where the drives are too few for a fit, ``residual_sd`` where too few trips for its
    cross-validation)."""
    import json

    from evroute.physics.energy import load_vehicle
    from evroute.world.fleet import fit_fleet_prior, vehicle_record, write_fleet_prior

    folder = Path(folder)
    drives = write_drives_import(folder / f"drives-{name}", net, table, vehicle=fleet)
    report = json.loads((drives / "report.json").read_text())
    prior = fit_fleet_prior(net, table, fleet_vehicle=load_vehicle(fleet), vehicle=load_vehicle(vehicle), **fit)
    write_fleet_prior(folder / name, prior, network=report["network"], fleet_vehicle=report["vehicle"],
                      vehicle=vehicle_record(load_vehicle(vehicle), vehicle),
                      drives={"path": str(drives), "traversals": len(table), "trips": int(table.trip.nunique()),
                              "edges": int(table.edge.nunique())})
    return folder / name
