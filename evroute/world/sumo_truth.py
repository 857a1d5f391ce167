"""The truth ``--truth sumo[...]`` an energy atlas makes (:func:`sumo_truth`), and what an atlas is
checked by: how well Eq. 8's E_det predicts it (:func:`edet_agreement`), the drives it predicts
against SUMO's (:func:`drive_predictions`), whether its two bookings create energy
(:func:`atlas_conservation`), and the prior a deployment would fit on it
(:func:`fit_hyperparameters`). The atlas itself: :mod:`evroute.world.sumo_atlas`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..bandit.truths import Truth, Turns, noise_at, register_truth
from ..errors import EvrouteError
from ..physics.energy import Vehicle, potential_energy_wh
from ..priors.fitting import FIT_LENGTHSCALES, fit_prior
from ..priors.noise import edge_noise_std, fit_noise_model
from ..roads.oracle import Oracle
from ..settings import SUMO_TRUTH_OPTIONS
from ..specs import declared
from .junctions import truth_turns
from .sumo_atlas import Atlas, build_atlas
from .sumo_tools import SUMO_INSTALL

__all__ = ["AtlasTruth", "sumo_truth", "edet_agreement", "drive_predictions", "atlas_conservation",
           "fit_hyperparameters"]


# --------------------------------------------------------------------------------------
# the truth: --truth sumo[...]
# --------------------------------------------------------------------------------------


class AtlasTruth(Truth):
    """f from an energy atlas; an observation of an edge is one of its recorded traversals,
    drawn uniformly (real, heteroscedastic, heavy-tailed noise). Edges with fewer than
    ``min_traversals`` traversals keep E_det with Gaussian noise of ς (the fallback). With
    ``turns`` the truth is edges plus turns booked per car (:func:`evroute.world.junctions.truth_turns`):
    f and the observations are the traversals at a constant kinetic state, a turn's observation
    one recorded car's dissipation there (Gaussian about the model's where too few cars took it)."""

    def __init__(self, values, noise_std, energies: np.ndarray, offsets: np.ndarray, counts: np.ndarray,
                 description: dict, turns: Turns | None = None, potential: np.ndarray | None = None,
                 turn_samples: tuple | None = None):
        super().__init__(values, noise_std, float("nan"), description, supports_drift=False, turns=turns,
                         potential=potential)
        self._energies, self._offsets, self._counts = energies, offsets, counts
        self._turn_samples = turn_samples

    def observe(self, rng, path, expected):
        path = np.asarray(path, dtype=np.int64)
        u = rng.random(len(path))
        noise = rng.standard_normal(len(path))
        n = self._counts[path]
        drawn = self._energies[np.minimum(self._offsets[path] + (u * n).astype(np.int64), len(self._energies) - 1)] \
            if len(self._energies) else np.zeros(len(path))
        return np.where(n > 0, drawn, expected[path] + noise_at(self.noise_std, path) * noise)

    def observe_turns(self, rng, arcs):
        """One recorded car's dissipation at each turn of ``arcs`` (drawn uniformly among the cars
        that took it), the model's mean plus Gaussian noise where too few did."""
        arcs = np.asarray(arcs, dtype=np.int64)
        samples, offsets = self._turn_samples
        u = rng.random(len(arcs))
        noise = rng.standard_normal(len(arcs))
        n = self.turns.counts[arcs]
        drawn = samples[np.minimum(offsets[arcs] + (u * n).astype(np.int64), len(samples) - 1)] \
            if len(samples) else np.zeros(len(arcs))
        spread = self.turns.noise_std if self.turns.noise_std is not None else 0.0
        return np.where(n > 0, drawn, self.turns.dissipation[arcs] + spread * noise)


@declared(*SUMO_TRUTH_OPTIONS)
def sumo_truth(setup, rate: float, hours: float, *, probes: int, atlas_seed: int, hour, min_traversals: int,
               demand: str | None = None, turns: bool = True, powertrain: str | None = None, ambient_c: float = 20.0):
    """``--truth sumo[...]``: the atlas of the run's network, vehicle (the truth's) and trip; with
    ``turns`` (default) the truth is edges at a constant kinetic state plus the junctions booked
    per car (:func:`evroute.world.junctions.truth_turns`), which creates no energy by construction,
    else the traversals' whole energies booked on edges (which does: a paper-style truth, its regret
    the rectified one). With ``powertrain`` the same traffic is driven by a FASTSim car at
    ``ambient_c`` °C (:mod:`evroute.world.powertrain`): the truth is that car's, whatever the run's
    vehicle (the agents' prior), and an edge too few cars drove keeps that car's E_det.

    Returns
    -------
    AtlasTruth
    """
    if hour is not None and not 0 <= hour < hours:  # before the atlas is built
        raise EvrouteError(f"sumo truth: hour={hour:g} is outside the atlas's {hours:g} simulated hours")
    route = setup.route
    vehicle = setup.vehicle or Vehicle()
    atlas = build_atlas(setup.net, setup.network, vehicle, oracle=Oracle.from_network(setup.net),
                        start=None if route is None else route.start, end=None if route is None else route.end,
                        rate=rate, hours=hours, probes=probes, seed=atlas_seed, osm=setup.osm, dem=setup.dem,
                        demand=demand, powertrain=powertrain, ambient_c=ambient_c)
    booked = atlas.vehicle or vehicle  # the car the atlas books: the run's, or the power train's
    n = setup.net.n_edges
    column = "edge_wh" if turns else "energy_wh"
    mean, counts = atlas.mean_energy(n, hour=hour, min_traversals=min_traversals, column=column)
    covered = ~np.isnan(mean)
    fallback = setup.mean
    if powertrain is not None:
        from ..physics.routes import edge_energies

        fallback = edge_energies(setup.net, booked)
    values = np.where(covered, mean, fallback)
    window = atlas.window(hour)
    junctions, samples, potential = None, None, None
    if turns:
        junctions, turn_samples, turn_offsets = truth_turns(window, setup.net, booked, min_traversals=min_traversals)
        samples = (turn_samples, turn_offsets)
        e = setup.net.edges
        potential = potential_energy_wh(e.length_m.to_numpy(), e.grade.to_numpy(), booked)
    t = window[covered[window.edge.to_numpy()]].sort_values(["edge", "vehicle", "enter_s"], kind="stable")
    used = np.bincount(t.edge.to_numpy(), minlength=n)
    offsets = np.concatenate([[0], np.cumsum(used)[:-1]]).astype(np.int64)
    on_route = None if route is None else bool(covered[[route.start, route.end]].all())
    description = {"truth_atlas": atlas.key, "atlas_traversals": int(len(t)),
                   "atlas_edges_covered_share": float(covered.mean()), "atlas_teleports": atlas.summary["teleports"],
                   "atlas_edges_mapped_share": atlas.summary["edges_mapped_share"], "atlas_trip_ends_covered": on_route,
                   "truth_turns": bool(turns)}
    if powertrain is not None:
        description.update({"truth_powertrain": powertrain, "truth_ambient_c": float(ambient_c),
                            "truth_vehicle": booked.to_dict()})
    if junctions is not None:
        description["truth_turns_measured"] = int((junctions.counts > 0).sum())
        if junctions.noise_std is not None:  # how one car's dissipation at a turn spreads
            description["truth_turn_noise_wh"] = junctions.noise_std
    return AtlasTruth(values, setup.noise_std, t[column].to_numpy(np.float64), offsets, used, description,
                      turns=junctions, potential=potential, turn_samples=samples)


def drive_predictions(table: pd.DataFrame, edge_mean: np.ndarray, turns: Turns | None, *, kin_in: np.ndarray | None = None,
                      kin_out: np.ndarray | None = None, min_edges: int = 3) -> pd.DataFrame:
    """Each drive of an atlas (a car's run of consecutive traversals, at least ``min_edges``
    long) beside what a truth predicts for it: with ``turns``, the edges' means plus the turns'
    costs plus the mean ``kin_in`` of its first edge and ``kin_out`` of its last (its ends); without,
    the edges' means (``edge_mean``: of whole traversals). A drive's measured energy includes the
    junctions' internal lanes between its traversals (``junction_wh``). Drives over an edge without
    a mean are left out.

    Returns
    -------
    pandas.DataFrame
        ``vehicle``, ``edges``, ``measured_wh`` (SUMO's energy of the drive), ``predicted_wh``.
    """
    t = table.reset_index(drop=True)
    e, nxt, car = t.edge.to_numpy(), t.next_edge.to_numpy(), t.vehicle.to_numpy()
    chained = np.zeros(len(t), dtype=bool)  # row i continues into row i + 1
    if len(t) > 1:
        chained[:-1] = (nxt[:-1] == e[1:]) & (car[:-1] == car[1:])
    first = np.r_[True, ~chained[:-1]] if len(t) else np.zeros(0, dtype=bool)
    drive = np.cumsum(first) - 1
    part = np.asarray(edge_mean, dtype=np.float64)[e]
    if turns is not None:
        src, dst = np.asarray(turns.conn_src, np.int64), np.asarray(turns.conn_dst, np.int64)
        arc_of = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(src.tolist(), dst.tolist(), strict=True))}
        k = np.flatnonzero(chained)
        arcs = np.array([arc_of.get((int(e[i]), int(e[i + 1])), -1) for i in k], dtype=np.int64)
        turn_cost = np.where(arcs >= 0, turns.costs[np.maximum(arcs, 0)], np.nan)
        np.add.at(part, k, turn_cost)
        last = np.r_[~chained[:-1], True] if len(t) else first
        part = part + np.where(first, np.asarray(kin_in)[e], 0.0) + np.where(last, np.asarray(kin_out)[e], 0.0)
    measured = t.energy_wh.to_numpy(np.float64).copy()
    if "junction_wh" in t:  # a junction's internal lanes between two traversals of the drive
        measured[chained] += np.nan_to_num(t.junction_wh.to_numpy(np.float64)[chained])
    d = pd.DataFrame({"drive": drive, "vehicle": car, "measured_wh": measured, "predicted_wh": part})
    out = d.groupby("drive", sort=True).agg(vehicle=("vehicle", "first"), edges=("measured_wh", "size"),
                                            measured_wh=("measured_wh", "sum"),
                                            predicted_wh=("predicted_wh", lambda x: x.sum(min_count=len(x))))
    return out[(out.edges >= min_edges) & np.isfinite(out.predicted_wh)].reset_index(drop=True)


def atlas_conservation(atlas: Atlas, net, vehicle: Vehicle | None = None, *, e_det: np.ndarray | None = None,
                       start: int | None = None, end: int | None = None, min_traversals: int = 3,
                       noise_std: float | None = None, time_limit: float = 60.0) -> dict:
    """The two truths an atlas gives, side by side: ``whole`` (each traversal's measured energy
    booked on its edge) and ``split`` (edges at a constant kinetic state plus the junctions booked
    per car, as ``--truth sumo`` is by default). For each, :func:`evroute.world.conservation.truth_checks`
    (the floor on the edges the atlas measured, negative cycles, the turns' dissipation), the
    drives' energies it predicts against SUMO's (:func:`drive_predictions`; in-sample: the means
    include the drive) and, with a trip, :func:`evroute.world.conservation.trip_checks`. Uncovered
    edges fall back on ``e_det`` (Eq. 8) as in the truth.

    Returns
    -------
    dict
        ``{"whole": {...}, "split": {...}}``; each with the checks' keys, ``drives``,
        ``drive_error_median`` (median |predicted − measured| / |measured| over drives) and
        ``drive_bias`` ((Σ predicted − Σ measured) / Σ |measured|).
    """
    from .conservation import trip_checks, truth_checks

    vehicle = vehicle or Vehicle()
    n = net.n_edges
    if e_det is None:
        from ..physics.routes import edge_energies

        e_det = edge_energies(net, vehicle)
    if noise_std is None:
        noise_std = 0.1 * float(np.std(e_det))  # paper 003's ς = 0.1 σ_det
    oracle = Oracle.from_network(net)
    t = atlas.table
    counts = np.bincount(t.edge.to_numpy(), minlength=n)
    covered = counts >= min_traversals
    mean_in = np.bincount(t.edge.to_numpy(), weights=t.kin_in_wh.to_numpy(), minlength=n) / np.maximum(counts, 1)
    mean_out = np.bincount(t.edge.to_numpy(), weights=t.kin_out_wh.to_numpy(), minlength=n) / np.maximum(counts, 1)
    out = {}
    for booking, column, turns in (("whole", "energy_wh", None),
                                   ("split", "edge_wh", truth_turns(t, net, vehicle, min_traversals=min_traversals)[0])):
        mean, _ = atlas.mean_energy(n, min_traversals=min_traversals, column=column)
        values = np.where(covered, mean, e_det)
        checks = truth_checks(net, values, turns, covered=covered, vehicle=vehicle)
        drives = drive_predictions(t, np.where(covered, mean, np.nan), turns, kin_in=np.where(covered, mean_in, np.nan),
                                   kin_out=np.where(covered, mean_out, np.nan))
        err = np.abs(drives.predicted_wh - drives.measured_wh) / np.maximum(np.abs(drives.measured_wh), 1e-9)
        checks.update({"drives": len(drives), "drive_error_median": float(np.median(err)) if len(drives) else None,
                       "drive_bias": float((drives.predicted_wh.sum() - drives.measured_wh.sum())
                                           / max(float(np.abs(drives.measured_wh).sum()), 1e-9)) if len(drives) else None})
        if start is not None and end is not None:
            checks.update(trip_checks(net, oracle, values, start=start, end=end, turns=turns, noise_std=noise_std,
                                      vehicle=vehicle, time_limit=time_limit))
        out[booking] = checks
    return out


register_truth("sumo", sumo_truth, description="per-edge energies from SUMO's EV model in simulated traffic (an atlas; needs "
               f"{SUMO_INSTALL}); an observation is one recorded traversal", requires=(("sumo", "sumolib"), SUMO_INSTALL))


def edet_agreement(e_det: np.ndarray, mean: np.ndarray, min_wh: float = 5.0) -> dict:
    """How well Eq. 8's E_det predicts an atlas's mean energy per edge: the number of edges with a
    mean, their correlation r, R² with E_det as the prediction, and the median ratio SUMO / E_det
    over edges with |E_det| > ``min_wh`` (near-zero energies make ratios meaningless).

    Returns
    -------
    dict
        ``edges_with_mean``, ``r_edet_sumo``, ``r2_edet_sumo``, ``median_ratio_sumo_edet`` (None
        where fewer than two edges have a mean).
    """
    ok = np.isfinite(mean)
    x, y = np.asarray(e_det)[ok], np.asarray(mean)[ok]
    big = np.abs(x) > min_wh
    if x.size < 2:
        return {"edges_with_mean": int(x.size), "r_edet_sumo": None, "r2_edet_sumo": None,
                "median_ratio_sumo_edet": None}
    return {"edges_with_mean": int(x.size), "r_edet_sumo": float(np.corrcoef(x, y)[0, 1]),
            "r2_edet_sumo": 1.0 - float(np.sum((y - x) ** 2) / np.sum((y - y.mean()) ** 2)),
            "median_ratio_sumo_edet": float(np.median(y[big] / x[big])) if big.any() else None}


# --------------------------------------------------------------------------------------
# type-II maximum likelihood on an atlas: what a deployment would fit
# --------------------------------------------------------------------------------------


def fit_hyperparameters(atlas: Atlas, net, e_det: np.ndarray, *, kernel: str = "combined", kappa: float = 1.0,
                        nu: float = 2.0, lengthscales=FIT_LENGTHSCALES,
                        column: str = "edge_wh") -> dict:
    """σ₀, ς and the context lengthscale ℓ of the agents' prior GP(E_det, σ₀² k_ℓ) with noise ς,
    by type-II maximum likelihood (:func:`evroute.priors.fitting.fit_prior`) on the first half of the
    atlas (traversals entered in the first half of the simulated span; the rest is held out).
    ``column``: what the agents observe, ``edge_wh`` under the default truth of edges plus turns
    (``energy_wh`` with ``turns=false``).

    Returns
    -------
    dict
        As :func:`evroute.priors.fitting.fit_prior`, and ``noise_model``: the per-edge noise model fitted on
        the same traversals (:func:`evroute.priors.noise.fit_noise_model`) with σ₀ and ℓ fitted under it.
    """
    t = atlas.table
    span = float(atlas.summary["hours"]) * 3600.0
    half = t[t.enter_s < span / 2]
    what = "the atlas's first half"
    out = fit_prior(net, e_det, half, kernel=kernel, kappa=kappa, nu=nu, lengthscales=lengthscales,
                    column=column, what=what)
    # the per-edge noise model (evroute.priors.noise) on the same traversals, then σ₀ and ℓ under it
    noise = fit_noise_model(net, half, column=column, what=what)
    under = fit_prior(net, e_det, half, kernel=kernel, kappa=kappa, nu=nu, lengthscales=lengthscales,
                      column=column, what=what, noise_sd=edge_noise_std(net, noise["spec"]))
    out["noise_model"] = {**noise, "prior_std": under["prior_std"], "lengthscale": under["lengthscale"],
                          "neg_log_likelihood_with_prior": under["neg_log_likelihood"]}
    return out
