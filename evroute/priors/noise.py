"""The observation noise the agents assume: one ς for every edge (paper 003), or a per-edge
model ``edge[a=…,b_per_km=…,tls=…]`` fitted on measured traversals.

A recorded traversal of a road is not a draw of N(f_e, ς²) with one ς: on SUMO's Monaco and
Luxembourg the spread of one edge's traversals grows with its length and is larger where the
edge passes or ends at a traffic signal (a car waits there, or does not). The per-edge model is

    ς_e = a + b_per_km · length_e / 1 km + tls · [edge e passes or ends at a traffic signal],

with the signals read from OSM (``highway=traffic_signals``; the network's ``signals`` column,
the same nodes netconvert makes traffic lights of). :func:`fit_noise_model` fits a, b_per_km
and tls by maximum likelihood of the within-edge deviations of measured traversals (they do
not depend on the prior: Σ_e [(n_e − 1) log ς_e + SS_e / (2 ς_e²)] is minimised), e.g. on the
first half of an energy atlas (``evroute sumo atlas --fit``). Every posterior backend takes
the per-edge noise (:func:`evroute.models.make_model` with an array ``noise_var``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from ..errors import EvrouteError
from ..specs import Option, format_value, parse_spec, resolve_options
from ..validate import in_range

__all__ = ["NOISE_MODEL_OPTIONS", "parse_noise_std", "noise_model_spec", "edge_noise_std", "fit_noise_model",
           "edge_signals"]

_WH = in_range(0, 1e6, why="Wh")

#: The options of the per-edge noise model ``edge[...]`` (Wh; each at least 0, their sum on every
#: edge positive).
NOISE_MODEL_OPTIONS = (
    Option("a", _WH, 0.0, "the noise sd every edge has (Wh)", metavar="WH"),
    Option("b_per_km", _WH, 0.0, "the noise sd per km of the edge's length (Wh/km)", metavar="WH"),
    Option("tls", _WH, 0.0, "the noise sd added where the edge passes or ends at a traffic signal (Wh)",
           metavar="WH"),
)


def noise_model_spec(a: float, b_per_km: float, tls: float) -> str:
    """The spec of a per-edge noise model, ``edge[a=…,b_per_km=…,tls=…]``, its numbers to 4
    significant digits (as ``evroute sumo atlas --fit`` prints it)."""
    return f"edge[a={a:.4g},b_per_km={b_per_km:.4g},tls={tls:.4g}]"


def parse_noise_std(name: str, value):
    """``--noise-std``: a standard deviation in Wh (a float), ``None`` (also ``none``, ``paper``:
    the paper's 0.1 σ_det) or a per-edge model ``edge[a=…,b_per_km=…,tls=…]`` (returned as its
    canonical spec text)."""
    if value is None or value in ("none", "paper"):
        return None
    flag = name if name.startswith("-") else "--" + name.replace("_", "-")
    if isinstance(value, str) and value.strip().lower().startswith("edge"):
        kind, given = parse_spec(value, flag, "edge[a=2,b_per_km=10,tls=5]")
        if kind != "edge":
            raise EvrouteError(f"{flag} {value!r}: expected a number of Wh or edge[a=…,b_per_km=…,tls=…]")
        opts = resolve_options(NOISE_MODEL_OPTIONS, given, "the per-edge noise model edge[...]")
        if not opts["a"] > 0:
            raise EvrouteError(f"{flag} {value!r}: a must be above 0 (every edge needs some noise: the posterior "
                               "conditions on it)")
        return "edge[" + ",".join(f"{k}={format_value(float(v))}" for k, v in opts.items()) + "]"
    try:
        return in_range(0, 1e6, lo_open=True, why="Wh")(name, value)
    except EvrouteError as exc:
        raise EvrouteError(f"{exc}, or a per-edge model edge[a=…,b_per_km=…,tls=…]") from None


def edge_signals(net) -> np.ndarray:
    """Whether each edge passes or ends at a traffic signal (bool, length E): the network's
    ``signals`` column (OSM ``highway=traffic_signals``)."""
    if "signals" not in net.edges.columns:
        return np.zeros(net.n_edges, dtype=bool)
    return net.edges.signals.to_numpy() > 0


def _features(net) -> np.ndarray:
    """(E, 3): 1, length in km, signal flag."""
    return np.column_stack([np.ones(net.n_edges), net.edges.length_m.to_numpy(np.float64) / 1000.0,
                            edge_signals(net).astype(np.float64)])


def edge_noise_std(net, noise) -> np.ndarray | float:
    """The agents' noise sd: ``noise`` itself when it is a number, else the per-edge model's ς_e
    for the spec ``edge[...]``.

    Returns
    -------
    float or numpy.ndarray
        ς in Wh: the number given, or ς_e per edge (length E, every one above 0).
    """
    if not isinstance(noise, str):
        return float(noise)
    _, given = parse_spec(noise, "--noise-std")
    opts = resolve_options(NOISE_MODEL_OPTIONS, given, "the per-edge noise model edge[...]")
    sd = _features(net) @ np.array([opts["a"], opts["b_per_km"], opts["tls"]], dtype=np.float64)
    if not np.all(sd > 0):
        raise EvrouteError(f"--noise-std {noise}: some edges would have no noise (a must be above 0)")
    return sd


def fit_noise_model(net, table: pd.DataFrame, column: str = "edge_wh", *, what: str = "the traversals",
                    min_traversals: int = 2) -> dict:
    """a, b_per_km and tls of the per-edge noise model, by maximum likelihood of the traversals'
    deviations from their edge's mean (see the module docstring), every edge with at least
    ``min_traversals`` traversals of ``column`` in ``table`` (columns ``edge`` and ``column``).

    Returns
    -------
    dict
        ``a``, ``b_per_km``, ``tls`` (Wh), ``spec`` (``edge[...]``), ``edges``, ``traversals``,
        ``median_edge_sd`` (the model's median ς_e over those edges), ``homoscedastic_sd`` (the one ς
        the same likelihood gives), ``neg_log_likelihood`` and ``homoscedastic_neg_log_likelihood``.

    Raises
    ------
    EvrouteError
        Fewer than 10 edges with enough traversals.
    """
    e = table.edge.to_numpy(np.int64)
    y = table[column].to_numpy(np.float64)
    if e.size and (e.min() < 0 or e.max() >= net.n_edges):
        raise EvrouteError(f"{what}: edge ids outside 0..{net.n_edges - 1}: not traversals of this network")
    n = np.bincount(e, minlength=net.n_edges).astype(np.float64)
    s1 = np.bincount(e, weights=y, minlength=net.n_edges)
    keep = np.flatnonzero(n >= max(int(min_traversals), 2))
    if keep.size < 10:
        raise EvrouteError(f"{what} has fewer than 10 edges with {max(int(min_traversals), 2)} traversals: no noise "
                           "model to fit")
    # within-edge sums of squares, about each edge's own mean (centred per edge: no cancellation)
    dev = y - (s1 / np.maximum(n, 1))[e]
    ss = np.bincount(e, weights=dev * dev, minlength=net.n_edges)[keep]
    dof = n[keep] - 1.0
    X = _features(net)[keep]
    scale = float(np.sqrt(ss.sum() / dof.sum())) or 1.0

    def nll(theta):  # the parameters as logs of (a, b, tls) in units of the pooled sd: all positive
        sd = X @ (np.exp(theta) * scale)
        return float(np.sum(dof * np.log(sd) + ss / (2 * sd * sd)))

    best = None
    for x0 in ([0.0, -1.0, -1.0], [-1.0, 0.5, 0.0], [-2.0, 1.0, 1.0]):  # a few starts: the surface is not convex
        res = minimize(nll, np.array(x0), method="L-BFGS-B", bounds=[(-12.0, 6.0)] * 3)
        if best is None or res.fun < best.fun:
            best = res
    a, b, t = (np.exp(best.x) * scale).tolist()
    # a term the likelihood drove to its bound (a thousandth of the pooled sd) is 0; so is tls
    # where no edge has a signal to fit it on (rather than the optimiser's start)
    b = b if b >= 1e-3 * scale else 0.0
    t = t if t >= 1e-3 * scale and X[:, 2].any() else 0.0
    sd = X @ np.array([a, b, t])
    homo = float(np.sum(dof * np.log(scale) + ss / (2 * scale * scale)))
    return {"a": a, "b_per_km": b, "tls": t, "spec": noise_model_spec(a, b, t), "edges": int(keep.size),
            "traversals": int(n[keep].sum()), "signal_edges": int(X[:, 2].sum()),
            "median_edge_sd": float(np.median(sd)), "homoscedastic_sd": scale,
            "neg_log_likelihood": float(best.fun), "homoscedastic_neg_log_likelihood": homo}
