"""A fleet's drives as knowledge of the roads: the table ``evroute drives import`` writes, read
back and checked; each edge's conjugate posterior from the traversals that drove it (the fleet's
prior mean); the traversals moved to another vehicle (its scale ρ); routes under the drives.

:mod:`evroute.world.fleet` fits these into one prior file (``evroute prior fit``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..bandit.policies import route_weights
from ..errors import EvrouteError
from ..physics.energy import Vehicle, energy_floor_wh
from ..physics.routes import edge_energies
from ..priors.prior import PRIOR_SCALE
from ..roads.oracle import Oracle
from .junctions import fleet_turns, physics_turns

__all__ = ["read_drives", "fleet_prior_mean", "transfer_traversals", "fleet_ratio", "drives_route", "posterior_route"]


def read_drives(path: str | Path, n_edges: int) -> pd.DataFrame:
    """A table of traversals written by ``evroute drives import`` (:data:`evroute.world.drives.TRAVERSAL_COLUMNS`),
    checked against a network of ``n_edges`` edges.

    Returns
    -------
    pandas.DataFrame

    Raises
    ------
    EvrouteError
        The file cannot be read, lacks the columns, or names edges the network does not have (it
        was imported on another network).
    """
    try:
        table = pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise EvrouteError(f"cannot read the drives table {path}: {getattr(exc, 'strerror', None) or exc}") from None
    missing = [c for c in ("edge", "energy_wh", "edge_wh") if c not in table.columns]
    if missing:
        raise EvrouteError(f"{path} is not a drives table of evroute drives import: no column {', '.join(missing)}")
    edges = table.edge.to_numpy()
    if len(edges) and (edges.min() < 0 or edges.max() >= n_edges):
        raise EvrouteError(f"{path} names edge {int(edges.max())} but the network has {n_edges:,} edges: "
                           f"were the drives imported on another network?")
    return table


def fleet_prior_mean(e_det, table: pd.DataFrame, prior_var: float, *, column: str = "edge_wh"):
    """The prior mean a fleet's drives give a new vehicle: per edge, the posterior mean of its
    traversals under the independent prior N(E_det, σ₀²) and the traversals' own noise,
    E_det where the fleet never drove.

    With n traversals of mean ȳ on an edge, m = E_det + n σ₀² / (n σ₀² + ς²) (ȳ − E_det), where
    ς² is the traversals' variance within edges, pooled over every edge driven twice or more (the
    conjugate normal update; paper 003's BI baseline, Sec. 3, is the same update online).

    Parameters
    ----------
    e_det : array (E,)
        The physics prior mean (Wh).
    table : pandas.DataFrame
        Traversals (:func:`read_drives`).
    prior_var : float
        σ₀² (Wh²).
    column : str
        ``edge_wh`` (at a constant kinetic state, as the SUMO truth of edges plus turns books
        an edge) or ``energy_wh`` (whole traversals).

    Returns
    -------
    (numpy.ndarray, numpy.ndarray, float)
        The prior mean per edge, the traversals per edge, and ς² (Wh²).
    """
    e_det = np.asarray(e_det, dtype=np.float64)
    edges = table.edge.to_numpy(np.int64)
    y = table[column].to_numpy(np.float64)
    counts = np.bincount(edges, minlength=e_det.size).astype(np.float64)
    means = np.bincount(edges, weights=y, minlength=e_det.size) / np.maximum(counts, 1.0)
    dof = counts.sum() - np.count_nonzero(counts)
    resid = y - means[edges]
    noise_var = float(resid @ resid / dof) if dof > 0 else float(prior_var)
    denom = counts * prior_var + noise_var  # (0 only where nobody drove and the traversals never differ)
    gain = np.divide(counts * prior_var, denom, out=np.zeros_like(denom), where=denom > 0)
    mean = np.where(counts > 0, e_det + gain * (means - e_det), e_det)
    return mean, counts.astype(np.int64), noise_var


def transfer_traversals(table, e_fleet, e_det, *, rho: float):
    """Another vehicle's traversals in this vehicle's units: each ``edge_wh`` becomes E_det plus ρ
    times what it measured beyond its own vehicle's E_det, E_det + ρ (y − E_fleet), so that the
    conjugate update (:func:`fleet_prior_mean`) weighs their spread, ρ² ς²,
    against this vehicle's σ₀²."""
    edge = table.edge.to_numpy(np.int64)
    moved = e_det[edge] + rho * (table.edge_wh.to_numpy(np.float64) - e_fleet[edge])
    return table.assign(edge_wh=moved)


def fleet_ratio(e_det, fleet_mean) -> float:
    """The fleet's energies over E_det, one factor: least squares through the origin over the edges
    the fleet drove, Σ E_det·m / Σ E_det² (1 where that is undefined)."""
    e_det, fleet_mean = np.asarray(e_det, dtype=np.float64), np.asarray(fleet_mean, dtype=np.float64)
    denom = float(e_det @ e_det)
    return float(e_det @ fleet_mean) / denom if denom > 0 else 1.0


def drives_route(net, spec, table: pd.DataFrame, *, vehicle: Vehicle | None = None, prior_std: float | None = None,
                 oracle=None) -> dict:
    """The least-energy route of a trip under what drives measured, its edges and its junctions.

    An edge weighs its posterior mean at a constant kinetic state (:func:`fleet_prior_mean`: the
    physics prior E_det updated by the drives' ``edge_wh``), with sd √(σ₀² ς² / (n σ₀² + ς²)) (σ₀
    where nobody drove); a junction, the fleet's posterior of its dissipation
    (:func:`evroute.world.junctions.fleet_turns`: what the cars that took it dissipated beyond their
    own change of kinetic energy, shrunk towards physics by as much as the fleet's turns say; physics
    alone where no two cars took the same turn), as the SUMO truth of edges plus turns books them.
    The change of kinetic level a turn also costs is the same along every route between two edges
    and is left out.

    The route minimises Σ max(μ_e, floor_e) over its edges plus its turns' dissipation,
    regeneration kept (the potential weight rule, :func:`evroute.bandit.policies.route_weights`;
    Dijkstra on non-negative weights).

    Parameters
    ----------
    net : evroute.roads.network.Network
    spec : evroute.physics.routes.RouteSpec
        The trip.
    table : pandas.DataFrame
        Traversals (:func:`read_drives`).
    vehicle : Vehicle, optional
        For E_det, the floors and the junctions' physics (default the paper's EV).
    prior_std : float, optional
        σ₀ (Wh; default the paper's 0.25 σ_det).

    Returns
    -------
    dict
        ``kind`` ("drives"), ``energy_wh`` (Σ posterior means plus the junctions' dissipation),
        ``edges_wh`` and ``junctions_wh`` (the two parts), ``energy_sd_wh`` (independent edges),
        ``length_m``, ``time_s``, ``n_edges``, ``edges``, per edge ``edge_mean_wh``, ``edge_sd_wh``
        and ``edge_traversals``, per turn ``turn_wh`` (one fewer), and ``edges_driven_share`` (of the
        route's length, driven by the fleet).
    """
    e_det = edge_energies(net, vehicle)
    s0 = float(prior_std) if prior_std is not None else PRIOR_SCALE * float(np.std(e_det))
    mean, counts, noise_var = fleet_prior_mean(e_det, table, s0 * s0)
    sd = np.sqrt(s0 * s0 * noise_var / (counts * s0 * s0 + noise_var))
    try:
        turns = fleet_turns(table, net, vehicle).mean
    except EvrouteError:  # no two cars took the same turn: physics alone
        turns = physics_turns(net, vehicle).mean
    return posterior_route(net, spec, edge_mean=mean, edge_sd=sd, edge_counts=counts, turn_mean=turns,
                           vehicle=vehicle, oracle=oracle)


def posterior_route(net, spec, *, edge_mean, edge_sd, edge_counts, turn_mean, vehicle: Vehicle | None = None,
                    oracle=None, kind: str = "drives") -> dict:
    """The least-energy route of a trip under a posterior of the edges (at a constant kinetic state)
    and of the junctions' dissipation: Σ max(μ_e, floor_e) over its edges plus its turns'
    dissipation, regeneration kept (the potential weight rule,
    :func:`evroute.bandit.policies.route_weights`; Dijkstra on non-negative weights).

    Parameters
    ----------
    net : evroute.roads.network.Network
    spec : evroute.physics.routes.RouteSpec
        The trip.
    edge_mean, edge_sd, edge_counts : array (E,)
        Each edge's posterior mean and sd (Wh) and the traversals it is measured by.
    turn_mean : array (A,)
        Each legal turn's dissipation (Wh, in the order of ``conn_src``).
    vehicle : Vehicle, optional
        For the floors and the potential (default the paper's EV).
    kind : str
        The route's ``kind``.

    Returns
    -------
    dict
        As :func:`drives_route`.
    """
    mean, sd, counts = (np.asarray(x, dtype=np.float64) for x in (edge_mean, edge_sd, edge_counts))
    e = net.edges
    length = e.length_m.to_numpy(np.float64)
    floor, potential = energy_floor_wh(length, e.grade.to_numpy(), vehicle)
    w, arc = route_weights(mean, "potential", 0.0, floor=floor, potential=potential,
                           turns=np.asarray(turn_mean, dtype=np.float64))
    oracle = oracle or Oracle.from_network(net)
    p = oracle.shortest_path(w, spec.start, spec.end, turn_weights=arc).edges
    turn_wh = arc[oracle.turn_index(p)]
    time_s = length / e.speed_mps.to_numpy()
    driven = counts[p] > 0
    edges_wh = float(mean[p].sum())
    return {"kind": kind, "energy_wh": edges_wh + float(turn_wh.sum()), "edges_wh": edges_wh,
            "junctions_wh": float(turn_wh.sum()), "energy_sd_wh": float(np.sqrt((sd[p] ** 2).sum())),
            "length_m": float(length[p].sum()), "time_s": float(time_s[p].sum()), "n_edges": len(p),
            "edges": [int(x) for x in p], "edge_mean_wh": mean[p].tolist(), "edge_sd_wh": sd[p].tolist(),
            "edge_traversals": counts[p].astype(np.int64).tolist(), "turn_wh": turn_wh.tolist(),
            "edges_driven_share": float(length[p][driven].sum() / length[p].sum()) if len(p) else 0.0}
