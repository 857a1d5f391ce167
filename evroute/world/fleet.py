"""A fleet's drives as the agents' prior, in one file (``evroute prior fit``).

What used to take eight to ten run options, copied from what ``evroute prior check`` printed, is
fitted once from a drives import (:func:`fit_fleet_prior`) and written as one JSON file
(:func:`write_fleet_prior`): the network and the vehicles it was made for, σ₀, the noise model and
the context lengthscale ℓ (type-II maximum likelihood, :func:`evroute.priors.fitting.fit_prior`), the
fleet's per-edge conjugate posterior (:func:`fleet_edge_posterior`) and per-turn posterior
(:func:`evroute.world.junctions.fleet_turns`) in the agents' vehicle's units, the vehicle scale, and
the residual trust k chosen by cross-validation over held-out trips (:func:`residual_sd_scores`).
``--prior FILE`` of ``simulate``, ``compare`` and ``route`` reads it back (:func:`read_fleet_prior`).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import norm

from ..bandit.turns import TurnPrior
from ..errors import EvrouteError
from ..io import atomic_write_text, generator
from ..physics.energy import Vehicle, load_vehicle, vehicle_names
from ..physics.routes import edge_energies
from ..priors.fitting import check_prior, fit_prior, fitted_settings
from ..priors.noise import edge_noise_std, fit_noise_model, parse_noise_std
from ..priors.prior import NOISE_SCALE, PRIOR_SCALE
from .drives import fleet_prior_mean, fleet_ratio, posterior_route, transfer_traversals
from .junctions import fleet_turns, physics_turns, turn_geometry

__all__ = ["PRIOR_FORMAT", "PRIOR_KIND", "RESIDUAL_SD_GRID", "CV_FOLDS", "FleetPrior", "network_record",
           "vehicle_record", "read_drives_import", "check_import_network", "fleet_edge_posterior", "residual_sd_scores", "fit_fleet_prior",
           "write_fleet_prior", "read_fleet_prior", "check_prior_file", "file_digest", "prior_route",
           "TRANSFER_VEHICLE_SCALE"]

#: The prior file's format; a file of another is refused in one line.
PRIOR_FORMAT = 1
#: The prior file's ``kind`` (beside evroute's generator mark, its first member).
PRIOR_KIND = "evroute fleet prior"
#: The residual trusts k that :func:`fit_fleet_prior` cross-validates: each edge's prior variance
#: gains (k r_e)², r_e what the fleet measured there beyond the agents' physics.
RESIDUAL_SD_GRID = (0.0, 0.1, 0.25, 0.5, 1.0)
#: The folds of trips the cross-validation holds out in turn.
CV_FOLDS = 5
#: The vehicle scale's sd where the fleet drove another vehicle than the agents' (the setting every
#: fleet of another vehicle on the SUMO page was measured with); 0 for the fleet's own vehicle.
TRANSFER_VEHICLE_SCALE = 0.5


def _absolute(path) -> str | None:
    return None if path is None else str(Path(path).expanduser().resolve())


def network_record(net, network: str, *, osm=None, dem=None) -> dict:
    """What a network was loaded as, complete enough to load it again and to tell it apart: its
    name, what :func:`evroute.roads.network.load_network` was given (an OSM file's and a DEM's
    absolute paths), its fingerprint (``net.cache_key``) and its number of edges.

    Returns
    -------
    dict
        ``name``, ``network``, ``osm``, ``dem``, ``fingerprint``, ``edges``.
    """
    spec = str(network)
    if Path(spec).suffix.lower() in (".osm", ".xml") and Path(spec).is_file():
        spec = _absolute(spec)
    return {"name": net.name, "network": spec, "osm": _absolute(osm), "dem": _absolute(dem),
            "fingerprint": net.cache_key, "edges": int(net.n_edges)}


def vehicle_record(vehicle: Vehicle, spec: str | None = None) -> dict:
    """A vehicle as given (a preset's name, a file's absolute path) and its parameters.

    Returns
    -------
    dict
        ``name``, ``spec`` (what :func:`evroute.physics.energy.load_vehicle` takes) and
        ``parameters`` (:meth:`~evroute.physics.energy.Vehicle.to_dict`).
    """
    given = spec if spec is not None else vehicle.name
    if given not in vehicle_names():
        given = _absolute(given)
    return {"name": vehicle.name, "spec": given, "parameters": vehicle.to_dict()}


def file_digest(path) -> str:
    """The SHA-256 of a file's bytes (hex).

    Returns
    -------
    str
    """
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_drives_import(path, *, network: str | None = None, osm=None, dem=None,
                       fleet_vehicle: str | None = None) -> tuple[dict, dict, Path, list[str]]:
    """A drives import (``evroute drives import``'s folder, or its ``traversals.parquet``): what
    to load its network and its vehicle from, as its ``report.json`` records them
    (:func:`network_record`, :func:`vehicle_record`) or as given here.

    An import of an earlier evroute names the network and the vehicle by their names only: a
    built-in network's name and a preset's are taken (with a note: the network's fingerprint
    cannot be checked), anything else must be given (``network``, ``osm``, ``dem``,
    ``fleet_vehicle``). Given for an import that records them, they relocate moved files, and the
    network is then checked against the recorded fingerprint (:func:`check_import_network`).

    Returns
    -------
    (dict, dict, pathlib.Path, list of str)
        The network to load (``network``, ``osm``, ``dem``, ``fingerprint``: None where unknown,
        ``name``), the fleet's vehicle (``spec``, ``name``), the table's path, and the notes to
        say (one line each).

    Raises
    ------
    EvrouteError
        No such import, no report beside the table, a report that cannot be read, or one that
        names neither completely nor by a name this evroute knows.
    """
    from ..roads.names import SYNTHETIC_SIZED, network_names

    path = Path(path)
    table_path = path / "traversals.parquet" if path.is_dir() else path
    if not table_path.is_file():
        raise EvrouteError(f"no drives import at {path}: give the folder of evroute drives import (or its "
                           "traversals.parquet)")
    report_path = table_path.parent / "report.json"
    try:
        report = json.loads(report_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EvrouteError(f"{table_path}: no report.json beside it, which names the network and the vehicle of "
                           "the drives; import them with evroute drives import") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise EvrouteError(f"cannot read {report_path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not isinstance(report, dict):
        raise EvrouteError(f"{report_path} is not the report of evroute drives import")
    notes = []
    rec = report.get("network")
    if isinstance(rec, dict) and {"network", "fingerprint"} <= set(rec):
        where = {"network": rec["network"], "osm": rec.get("osm"), "dem": rec.get("dem"),
                 "fingerprint": rec["fingerprint"], "name": rec.get("name", rec["network"])}
        if network is not None:
            where.update(network=network, osm=None, dem=None)
    else:  # an earlier evroute's: the network's name only
        name = rec if isinstance(rec, str) else None
        if network is None and not (name in network_names() or SYNTHETIC_SIZED.match(str(name))):
            raise EvrouteError(f"{report_path} (an earlier evroute's) names the network "
                               f"{name if name is not None else 'nowhere'}, not how to load it: give it with "
                               "--network (and --osm, --dem as it was imported), or import the traces again")
        where = {"network": network or name, "osm": None, "dem": None, "fingerprint": None,
                 "name": network or name}
        notes.append(f"{report_path} is an earlier evroute's: it names the network {name} without its fingerprint, "
                     f"so the drives are taken as imported on {where['network']} as it loads now"
                     + (" (give --osm and --dem as they were imported)" if osm is None and dem is None else ""))
    if osm is not None:
        where["osm"] = _absolute(osm)
    if dem is not None:
        where["dem"] = _absolute(dem)
    veh = report.get("vehicle")
    complete = isinstance(veh, dict) and {"spec", "parameters"} <= set(veh)
    if complete and fleet_vehicle is not None and _parameters(load_vehicle(fleet_vehicle).to_dict()) != \
            _parameters(veh["parameters"]):
        raise EvrouteError(f"{report_path} records that {veh.get('name', veh['spec'])} drove these drives, not "
                           f"{fleet_vehicle}: leave --fleet-vehicle out (--vehicle is the agents' vehicle)")
    if fleet_vehicle is not None:
        fleet = {"spec": fleet_vehicle}
    elif complete:
        fleet = {"spec": veh["spec"]}
    elif isinstance(veh, str) and veh in vehicle_names():
        fleet = {"spec": veh}
    else:
        raise EvrouteError(f"{report_path} (an earlier evroute's) names the fleet's vehicle "
                           f"{veh if isinstance(veh, str) else 'nowhere'}, not how to load it: give it with "
                           "--fleet-vehicle (a preset or JSON file), or import the traces again")
    return where, {**fleet, "gps_noise_m": report.get("gps_noise_m"), "matcher": report.get("matcher")}, \
        table_path, notes


def _parameters(vehicle: dict) -> dict:
    """A vehicle's parameters without its name."""
    return {k: v for k, v in vehicle.items() if k != "name"}


def check_import_network(net, where: dict) -> None:
    """Refuse (one line) a network that loads otherwise than the one the drives were imported on
    (its fingerprint, where the import records one)."""
    if where.get("fingerprint") is not None and net.cache_key != where["fingerprint"]:
        raise EvrouteError(f"the network {where['name']} loads differently now than when the drives were imported "
                           f"(fingerprint {net.cache_key[:12]}, then {str(where['fingerprint'])[:12]}: its data, "
                           "--osm, --dem or evroute's preparation changed): import the drives again")


def fleet_edge_posterior(e_det, counts, traversal_mean, *, noise_var: float, prior_var: float):
    """Each edge's conjugate posterior under the independent prior N(E_det, σ₀²) after n traversals
    of mean ȳ and noise ς² (:func:`evroute.world.drives.fleet_prior_mean`): mean
    E_det + n σ₀² / (n σ₀² + ς²) (ȳ − E_det), variance σ₀² ς² / (n σ₀² + ς²) (E_det and σ₀² where
    nobody drove).

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        The mean (Wh) and the variance (Wh²) per edge.
    """
    e_det = np.asarray(e_det, dtype=np.float64)
    n = np.asarray(counts, dtype=np.float64)
    ybar = np.asarray(traversal_mean, dtype=np.float64)
    noise_var = max(float(noise_var), 1e-6 * float(prior_var))  # (traversals that never differ: not certainty)
    denom = n * prior_var + noise_var
    mean = np.where(n > 0, e_det + n * prior_var / denom * (ybar - e_det), e_det)
    return mean, prior_var * noise_var / denom


def _edge_statistics(e_det, table: pd.DataFrame, prior_var: float):
    """Per edge: the traversals, their mean (E_det where nobody drove) and the pooled spread ς²."""
    _, counts, noise_var = fleet_prior_mean(e_det, table, prior_var)
    e = table.edge.to_numpy(np.int64)
    sums = np.bincount(e, weights=table.edge_wh.to_numpy(np.float64), minlength=len(e_det))
    ybar = np.where(counts > 0, sums / np.maximum(counts, 1), e_det)
    return counts, ybar, noise_var


def residual_sd_scores(table: pd.DataFrame, e_det, *, prior_var: float, noise_sd, grid=RESIDUAL_SD_GRID,
                       folds: int = CV_FOLDS, seed: int = 0) -> dict:
    """The residual trust k by cross-validation over held-out trips.

    The trips are dealt at random (``seed``) into ``folds`` folds. Holding out each in turn, the
    other folds' traversals give each edge its conjugate posterior (:func:`fleet_edge_posterior`),
    mean m_e and variance v_e, and r_e = m_e − E_det; every held-out traversal y of an edge the other
    folds drove is predicted by N(m_e, min(σ₀², v_e + (k r_e)²) + ς_e²), ς_e the agents' noise. Each k
    of ``grid`` scores the held-out traversals' log predictive density (their mean, nats a
    traversal); the best k is chosen (the smallest of equals).

    Parameters
    ----------
    table : pandas.DataFrame
        Traversals in the agents' units (``trip``, ``edge``, ``edge_wh``).
    e_det : array (E,)
        The agents' E_det.
    prior_var : float
        σ₀² (Wh²).
    noise_sd : float or array (E,)
        ς, or ς_e per edge (Wh).
    grid : sequence of float
        The k tried.
    folds : int
        The folds of trips (at least 2, at most the trips).
    seed : int
        Deals the trips into folds.

    Returns
    -------
    dict
        ``grid``, ``log_density`` (per k, nats a held-out traversal), ``traversals`` (held out and
        scored), ``folds``, ``seed``, ``chosen`` (k).

    Raises
    ------
    EvrouteError
        Fewer trips than folds, or no held-out traversal of an edge the other folds drove.
    """
    e_det = np.asarray(e_det, dtype=np.float64)
    grid = [float(k) for k in grid]
    trips = np.array(sorted(table.trip.astype(str).unique()))
    if folds < 2 or trips.size < folds:
        raise EvrouteError(f"{trips.size} trips: the residual trust's cross-validation holds out {folds} folds of "
                           f"trips and needs at least as many trips")
    fold_of = dict(zip(trips[np.random.default_rng(seed).permutation(trips.size)].tolist(),
                       (np.arange(trips.size) % folds).tolist(), strict=True))
    fold = table.trip.astype(str).map(fold_of).to_numpy(np.int64)
    noise_var = np.broadcast_to(np.asarray(noise_sd, dtype=np.float64) ** 2, e_det.shape)
    total, scored = np.zeros(len(grid)), 0
    for f in range(folds):
        train, test = table[fold != f], table[fold == f]
        counts, ybar, spread = _edge_statistics(e_det, train, prior_var)
        mean, var = fleet_edge_posterior(e_det, counts, ybar, noise_var=spread, prior_var=prior_var)
        e = test.edge.to_numpy(np.int64)
        keep = counts[e] > 0
        e, y = e[keep], test.edge_wh.to_numpy(np.float64)[keep]
        r = mean[e] - e_det[e]
        for i, k in enumerate(grid):
            sd = np.sqrt(np.minimum(prior_var, var[e] + (k * r) ** 2) + noise_var[e])
            total[i] += float(norm.logpdf(y, mean[e], sd).sum())
        scored += int(y.size)
    if scored == 0:
        raise EvrouteError("no held-out traversal of an edge the other trips drove: nothing to choose the residual "
                           "trust by")
    density = total / scored
    best = int(np.flatnonzero(density >= density.max())[0])
    return {"grid": grid, "log_density": density.tolist(), "traversals": scored, "folds": int(folds),
            "seed": int(seed), "chosen": grid[best]}


def _fit_in_units(net, e_fleet, e_det, table: pd.DataFrame, *, kernel: str, seed: int, rho: float) -> dict:
    """σ₀, the noise and ℓ by type-II maximum likelihood in the fleet's units, times ρ.

    One noise level or the per-edge model (:mod:`evroute.priors.noise`): the one that predicts
    half of the trips better when fitted on the other half (:func:`evroute.priors.fitting.check_prior`);
    then fitted again on every trip. Drives too few for the held-out check (fewer than 4 trips, or
    a half with fewer than 10 edges driven twice) are fitted on every trip with one noise level;
    too few for that, σ₀, the noise and ℓ are the paper's (0.25 and 0.1 of σ_det of the agents'
    E_det, ℓ = 1). Either is said in ``note``."""
    try:
        check = check_prior(net, e_fleet, table, kernel=kernel, seed=seed)
    except EvrouteError as exc:  # too few drives to hold half of them out
        try:
            fit = fit_prior(net, e_fleet, table, kernel=kernel)
        except EvrouteError:
            sigma_det = float(np.std(e_det))
            return {"prior_std": PRIOR_SCALE * sigma_det, "noise_std": NOISE_SCALE * sigma_det, "lengthscale": 1.0,
                    "noise_model": "the paper's", "fit": None, "held_out": None,
                    "note": "drives too few for a fit (fewer than 10 edges driven twice): sigma_0, the noise and "
                            "the lengthscale are the paper's (0.25 and 0.1 sigma_det, 1)"}
        settings = fitted_settings({"fit": fit}, rho)
        return {"prior_std": settings["prior_std"], "noise_std": settings["noise_std"],
                "lengthscale": settings["lengthscale"], "noise_model": "one level", "fit": fit, "held_out": None,
                "note": f"drives too few to choose the noise model on held-out trips ({exc}): one noise level"}
    held_out = fitted_settings(check, rho)
    per_edge = isinstance(held_out["noise_std"], str)
    if per_edge:
        nm = fit_noise_model(net, table)
        fit = fit_prior(net, e_fleet, table, kernel=kernel, noise_sd=edge_noise_std(net, nm["spec"]))
        fit["noise_model"] = nm
        settings = fitted_settings({"noise_model": {**nm, "prior_std": fit["prior_std"],
                                                    "lengthscale": fit["lengthscale"]},
                                    "edge_noise": {"log_density": 1.0}, "kernel": {"log_density": 0.0}}, rho)
    else:
        fit = fit_prior(net, e_fleet, table, kernel=kernel)
        settings = fitted_settings({"fit": fit}, rho)
    check_summary = {name: check[name] for name in ("kernel", "independent", "edge_noise") if name in check}
    return {"prior_std": settings["prior_std"], "noise_std": settings["noise_std"],
            "lengthscale": settings["lengthscale"], "noise_model": "per edge" if per_edge else "one level",
            "fit": fit, "held_out": {"train_trips": check["train_trips"], "test_trips": check["test_trips"],
                                     "traversals": check["test_traversals"], **check_summary}}


def fit_fleet_prior(net, table: pd.DataFrame, *, fleet_vehicle: Vehicle, vehicle: Vehicle | None = None,
                    kernel: str = "combined", seed: int = 0, folds: int = CV_FOLDS,
                    residual_sd: float | None = None, vehicle_scale: float | None = None,
                    fitted: dict | None = None) -> dict:
    """A fleet's drives as the agents' prior: what ``evroute prior fit`` writes (the records of the
    network, the vehicles and the drives are the caller's).

    1. ρ, the agents' vehicle's E_det over the fleet's (least squares over the edges driven,
       :func:`evroute.world.drives.fleet_ratio`; 1 for the fleet's own vehicle);
    2. σ₀, the noise (one level or per edge) and ℓ by type-II maximum likelihood on the traversals
       in the fleet's units, times ρ (:func:`evroute.priors.fitting.fit_prior`; drives too few for
       it: the paper's, said in ``notes``);
    3. each traversal moved into the agents' units, E_det + ρ (y − E_fleet)
       (:func:`evroute.world.drives.transfer_traversals`), and each edge's conjugate posterior under
       σ₀ (:func:`fleet_edge_posterior`);
    4. the junctions' per-turn posterior (:func:`evroute.world.junctions.fleet_turns`; none where no
       two cars took the same turn);
    5. the residual trust k (:func:`residual_sd_scores` over :data:`RESIDUAL_SD_GRID`, at most
       ``folds`` folds, one a trip; 0 where fewer than 2 trips) unless given, and the vehicle scale's sd
       (:data:`TRANSFER_VEHICLE_SCALE` for another vehicle, 0 for the fleet's own) unless given.

    ``fitted`` (``prior_std``, ``noise_std``, ``lengthscale`` in the agents' units) replaces step 2.

    Returns
    -------
    dict
        ``rho``, ``kernel``, ``kappa``, ``nu``, ``prior_std``, ``noise_std``, ``lengthscale``,
        ``fit`` (the type-II fit and the held-out check that chose the noise model),
        ``vehicle_scale``, ``residual_sd``, ``residual_sd_from`` (``given``, ``cross-validation`` or
        ``too few trips``), ``cross_validation`` (None where k was given or could
        not be chosen), ``edges``
        (``mean``, ``var``, ``traversals``, ``traversal_mean``, ``noise_var``), ``turns`` (``mean``,
        ``var``, ``cars``, ``noise_var``; None without), ``turns_note`` and ``notes`` (what fell back
        to a default, drives too few: one line each).
    """
    vehicle = vehicle or fleet_vehicle
    e_fleet = edge_energies(net, fleet_vehicle)
    e_det = edge_energies(net, vehicle)
    edges = table.edge.to_numpy(np.int64)
    driven = np.bincount(edges, minlength=net.n_edges) > 0
    rho = 1.0 if vehicle == fleet_vehicle else fleet_ratio(e_fleet[driven], e_det[driven])
    if fitted is None:
        fitted = _fit_in_units(net, e_fleet, e_det, table, kernel=kernel, seed=seed, rho=rho)
    else:
        fitted = {"noise_model": "given", "fit": None, "held_out": None, **fitted}
    prior_var = fitted["prior_std"] ** 2
    moved = transfer_traversals(table, e_fleet, e_det, rho=rho)
    counts, ybar, spread = _edge_statistics(e_det, moved, prior_var)
    mean, var = fleet_edge_posterior(e_det, counts, ybar, noise_var=spread, prior_var=prior_var)
    turns, note = None, None
    try:
        t = fleet_turns(table, net, vehicle, measured_by=fleet_vehicle)
        turns = {"mean": t.mean.tolist(), "var": t.var.tolist(), "cars": np.asarray(t.counts).astype(int).tolist(),
                 "noise_var": float(t.noise_var)}
    except EvrouteError as exc:
        note = str(exc)
    cv, notes = None, [fitted["note"]] if fitted.get("note") else []
    k_from = "given" if residual_sd is not None else "cross-validation"
    if residual_sd is None:
        trips = int(table.trip.nunique())
        try:
            cv = residual_sd_scores(moved, e_det, prior_var=prior_var, noise_sd=edge_noise_std(net, fitted["noise_std"]),
                                    folds=min(folds, trips), seed=seed)
            residual_sd = cv["chosen"]
        except EvrouteError as exc:  # fewer than 2 trips, or none drove what another did
            residual_sd, k_from = 0.0, "too few trips"
            notes.append(f"the residual trust k is 0: no cross-validation ({exc})")
    if vehicle_scale is None:
        vehicle_scale = 0.0 if vehicle == fleet_vehicle else TRANSFER_VEHICLE_SCALE
    return {"rho": rho, "kernel": kernel, "kappa": 1.0, "nu": 2.0, "prior_std": fitted["prior_std"],
            "noise_std": fitted["noise_std"], "lengthscale": fitted["lengthscale"],
            "fit": {k: fitted[k] for k in ("noise_model", "fit", "held_out")},
            "vehicle_scale": float(vehicle_scale), "residual_sd": float(residual_sd),
            "residual_sd_from": k_from, "cross_validation": cv,
            "edges": {"mean": mean.tolist(), "var": var.tolist(), "traversals": counts.astype(int).tolist(),
                      "traversal_mean": ybar.tolist(), "noise_var": float(max(spread, 1e-6 * prior_var))},
            "turns": turns, "turns_note": note, "notes": notes}


def write_fleet_prior(path, prior: dict, *, network: dict, fleet_vehicle: dict, vehicle: dict, drives: dict) -> None:
    """Write a prior file atomically: evroute's generator mark first, the format, the records of
    the network, the vehicles and the drives, then what :func:`fit_fleet_prior` returned. The
    caller checks the path first (the writer rule, :func:`evroute.runs.directory.check_output_file`)."""
    data = {"generator": generator(), "format": PRIOR_FORMAT, "kind": PRIOR_KIND, "network": network,
            "fleet_vehicle": fleet_vehicle, "vehicle": vehicle, "drives": drives, **prior}
    atomic_write_text(path, json.dumps(data, indent=1, allow_nan=False) + "\n")


@dataclass(frozen=True, eq=False)
class FleetPrior:
    """A prior file, read and checked (:func:`read_fleet_prior`).

    Attributes
    ----------
    path, digest : str
        Where it was read and the SHA-256 of its bytes.
    data : dict
        Its JSON object (the records of the network, the vehicles and the drives, the fit, the
        cross-validation).
    edge_mean, edge_var, edge_counts, edge_traversal_mean : numpy.ndarray (E,)
        The fleet's conjugate posterior per edge in the agents' units, the traversals behind it and
        their mean (E_det where nobody drove).
    edge_noise_var : float
        The traversals' spread within edges in the agents' units (ς² of the conjugate update).
    turns : TurnPrior or None
        The fleet's per-turn posterior (its junctions and kinds left to the network: :meth:`turn_prior`).
    """

    path: str
    digest: str
    data: dict
    edge_mean: np.ndarray
    edge_var: np.ndarray
    edge_counts: np.ndarray
    edge_traversal_mean: np.ndarray
    edge_noise_var: float
    turns: TurnPrior | None

    @property
    def prior_std(self) -> float:
        return float(self.data["prior_std"])

    @property
    def noise_std(self):
        return self.data["noise_std"]

    @property
    def lengthscale(self) -> float:
        return float(self.data["lengthscale"])

    @property
    def vehicle_scale(self) -> float:
        return float(self.data["vehicle_scale"])

    @property
    def residual_sd(self) -> float:
        return float(self.data["residual_sd"])

    def settings(self) -> dict:
        """The run settings the file stands for where a run gives none: the network (its name, OSM
        and DEM as loaded), the agents' vehicle, σ₀, the noise and ℓ.

        Returns
        -------
        dict
            ``network``, ``osm``, ``dem``, ``vehicle``, ``prior_std``, ``noise_std``, ``lengthscale``.
        """
        net = self.data["network"]
        return {"network": net["network"], "osm": net.get("osm"), "dem": net.get("dem"),
                "vehicle": self.data["vehicle"]["spec"], "prior_std": self.prior_std, "noise_std": self.noise_std,
                "lengthscale": self.lengthscale}

    def check_network(self, net) -> None:
        """Refuse (one line) a network other than the one the prior was made for."""
        rec = self.data["network"]
        if net.cache_key != rec["fingerprint"]:
            raise EvrouteError(f"the prior {self.path} was made for the network {rec['name']} (fingerprint "
                               f"{rec['fingerprint'][:12]}, {rec['edges']:,} edges), not this run's {net.name} "
                               f"({net.cache_key[:12]}, {net.n_edges:,} edges): fit it on drives imported on this "
                               "network")

    def check_network_name(self, network: str) -> None:
        """Refuse (one line) a run on a network other than the prior's, by its name (before it loads;
        :meth:`check_network` compares the loaded network's fingerprint)."""
        rec = self.data["network"]
        if str(network) != rec["network"] and Path(str(network)).stem != rec["name"]:
            raise EvrouteError(f"the prior {self.path} was made for the network {rec['name']}, not this run's "
                               f"{network}: leave the network out (the prior's is taken), or fit a prior on drives "
                               "imported on it")

    def check_vehicle(self, vehicle: Vehicle) -> None:
        """Refuse (one line) a vehicle other than the one the prior was made for (its parameters)."""
        rec = self.data["vehicle"]
        if _parameters(vehicle.to_dict()) != _parameters(rec["parameters"]):
            raise EvrouteError(f"the prior {self.path} was made for the vehicle {rec['name']}, not this run's "
                               f"{vehicle.name}: leave --vehicle out (the prior's is taken), or fit a prior for it "
                               f"with evroute prior fit DRIVES --vehicle {vehicle.name}")

    def edges(self, e_det, prior_var: float):
        """Each edge's prior mean and variance under σ₀² = ``prior_var``: the file's where σ₀ is its
        own, else the conjugate update again from the traversals' counts and means
        (:func:`fleet_edge_posterior`).

        Returns
        -------
        (numpy.ndarray, numpy.ndarray)
        """
        if math.isclose(prior_var, self.prior_std ** 2, rel_tol=1e-12):
            return self.edge_mean, self.edge_var
        return fleet_edge_posterior(e_det, self.edge_counts, self.edge_traversal_mean, noise_var=self.edge_noise_var,
                                    prior_var=prior_var)

    def turn_prior(self, net) -> TurnPrior | None:
        """The fleet's per-turn posterior with the network's junctions and kinds (None without).

        Returns
        -------
        TurnPrior or None
        """
        if self.turns is None:
            return None
        t = self.turns
        if t.mean.size != len(net.conn_src):
            raise EvrouteError(f"the prior {self.path} has {t.mean.size:,} turns, the network {len(net.conn_src):,}: "
                               "made for another network")
        junction, _, kind = turn_geometry(net)
        return TurnPrior(t.mean, t.var, junction=junction, kind=kind, noise_var=t.noise_var, counts=t.counts,
                         source="drives")


def prior_route(net, spec, prior: FleetPrior, *, vehicle: Vehicle | None = None, oracle=None) -> dict:
    """The least-energy route of a trip under a prior file: each edge at the prior mean the agents
    start from, its sd theirs (the fleet's posterior sd widened by the residual trust k, at most σ₀),
    each junction at the fleet's per-turn posterior of its dissipation (physics' where the file has
    no turns), regeneration kept (:func:`evroute.world.drives.posterior_route`).

    Returns
    -------
    dict
        As :func:`evroute.world.drives.drives_route`, ``kind`` ``prior``.
    """
    vehicle = vehicle or load_vehicle(prior.settings()["vehicle"])
    prior.check_network(net)
    prior.check_vehicle(vehicle)
    e_det = edge_energies(net, vehicle)
    s0 = prior.prior_std
    var = np.minimum(s0 * s0, prior.edge_var + (prior.residual_sd * (prior.edge_mean - e_det)) ** 2)
    turns = prior.turn_prior(net)
    turn_mean = turns.mean if turns is not None else physics_turns(net, vehicle).mean
    return posterior_route(net, spec, edge_mean=prior.edge_mean, edge_sd=np.sqrt(var), edge_counts=prior.edge_counts,
                           turn_mean=turn_mean, vehicle=vehicle, oracle=oracle, kind="prior")


def _array(data: dict, key: str, n: int, where: str, *, minimum: float | None = None) -> np.ndarray:
    try:
        a = np.asarray(data[key], dtype=np.float64)
    except (KeyError, TypeError, ValueError):
        raise EvrouteError(f"{where}: no list of numbers {key!r}") from None
    if a.shape != (n,) or not np.all(np.isfinite(a)) or (minimum is not None and np.any(a < minimum)):
        raise EvrouteError(f"{where}: {key!r} must be {n:,} finite numbers" + (f" of at least {minimum:g}"
                                                                               if minimum is not None else ""))
    a.setflags(write=False)
    return a


_READ: dict = {}


def read_fleet_prior(path) -> FleetPrior:
    """Read and check a prior file (:func:`write_fleet_prior`): its format, its records and its
    arrays. A damaged or foreign file is one :class:`EvrouteError` line. The last files read are
    kept by their path, size and modification time (a run's configuration converts its settings
    each time it is made).

    Returns
    -------
    FleetPrior
    """
    try:
        st = Path(path).stat()
        key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
    except OSError:
        key = None
    if key is not None and key in _READ:
        return _READ[key]
    prior = _read_fleet_prior(path)
    if key is not None:
        _READ.clear()  # (one file at a time: a grid's runs share theirs)
        _READ[key] = prior
    return prior


def _read_fleet_prior(path) -> FleetPrior:
    where = f"the prior file {path}"
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise EvrouteError(f"no such prior file: {path} (make one with evroute prior fit DRIVES --out PRIOR)") from None
    except OSError as exc:
        raise EvrouteError(f"cannot read {where}: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise EvrouteError(f"{where} is not JSON (damaged?): make it again with evroute prior fit") from None
    if not isinstance(data, dict) or data.get("kind") != PRIOR_KIND:
        raise EvrouteError(f"{path} is not a prior file of evroute prior fit")
    if data.get("format") != PRIOR_FORMAT:
        raise EvrouteError(f"{where} has format {data.get('format')!r}; this evroute reads format {PRIOR_FORMAT}: make "
                           "it again with evroute prior fit")
    try:
        net, veh = data["network"], data["vehicle"]
        n = int(net["edges"])
        str(net["fingerprint"]), str(net["network"]), str(veh["spec"]), dict(veh["parameters"])
        dict(data["fleet_vehicle"])
        for key in ("prior_std", "lengthscale", "vehicle_scale", "residual_sd", "rho"):
            if not (isinstance(data[key], int | float) and math.isfinite(data[key]) and data[key] >= 0):
                raise ValueError(key)
        if not data["prior_std"] > 0:
            raise ValueError("prior_std")
        parse_noise_std("the prior file's noise_std", data["noise_std"])
        edges = data["edges"]
        turns = data.get("turns")
    except (KeyError, TypeError, ValueError, EvrouteError) as exc:
        raise EvrouteError(f"{where} is damaged ({exc}): make it again with evroute prior fit") from None
    mean = _array(edges, "mean", n, where)
    var = _array(edges, "var", n, where, minimum=0.0)
    counts = _array(edges, "traversals", n, where, minimum=0.0)
    ybar = _array(edges, "traversal_mean", n, where)
    spread = edges.get("noise_var")
    if not (isinstance(spread, int | float) and math.isfinite(spread) and spread > 0):
        raise EvrouteError(f"{where}: 'noise_var' must be a number above 0")
    turn_prior = None
    if turns is not None:
        if not isinstance(turns, dict):
            raise EvrouteError(f"{where}: 'turns' must be an object or null")
        m = len(turns.get("mean") or [])
        tv = turns.get("noise_var")
        if not (isinstance(tv, int | float) and math.isfinite(tv) and tv > 0):
            raise EvrouteError(f"{where}: the turns' 'noise_var' must be a number above 0")
        turn_prior = TurnPrior(_array(turns, "mean", m, where), _array(turns, "var", m, where, minimum=0.0),
                               noise_var=float(tv), counts=_array(turns, "cars", m, where, minimum=0.0).astype(np.int64),
                               source="drives")
    return FleetPrior(str(path), hashlib.sha256(raw).hexdigest(), data, mean, var, counts.astype(np.int64), ybar,
                      float(spread), turn_prior)


def check_prior_file(name, value) -> str:
    """``--prior``: a prior file that reads (:func:`read_fleet_prior`); its path as given."""
    if value is None or value in ("none",):
        return None
    read_fleet_prior(str(value))
    return str(value)
