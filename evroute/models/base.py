"""The interface every posterior backend implements.

A backend holds a belief about the expected energy f(e) of every edge e = 0..E-1: it starts
from a :class:`evroute.priors.prior.Prior`, consumes one round's observations at a time
(:meth:`PosteriorModel.update`: edge ids and observed energies r = f(e) + ε, ε ~ N(0, ς²))
and gives, for every edge, the posterior mean and standard deviation
(:meth:`~PosteriorModel.mean_std`) and posterior draws (:meth:`~PosteriorModel.sample`).
Repeated observations of an edge enter as sufficient statistics (count, sum):
:func:`aggregate_observations` groups a round's data per distinct edge.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np
import scipy.linalg as sla

from ..errors import EvrouteError

__all__ = ["PosteriorModel", "aggregate_observations", "readonly", "round_statistics", "grouped_log_density",
           "CAPABILITIES", "COVARIANCE", "JOINT_SAMPLES", "EVIDENCE", "INFORMATION_GAIN", "TIME_VARYING",
           "SPARSE_PRECISION"]

#: ``covariance(idx)``: posterior covariance blocks Σ(idx, idx) (``gp-pe[test=path]`` needs them).
COVARIANCE = "covariance"
#: ``sample(rng, joint=True)``: draws from the full posterior (``gp-ts[joint=true]``).
JOINT_SAMPLES = "joint_samples"
#: ``log_evidence``: ln p(every observation so far), kept round by round (``gp-mle``, ``gp-fb``).
EVIDENCE = "evidence"
#: ``information_logdet``: ln det(I + D^½ K_OO D^½/ς²) of the observed edges, kept by the update
#: (paper 000's bounds; without it the agents recompute it from an |O|×|O| block).
INFORMATION_GAIN = "information_gain"
#: Observations are (edge, round) inputs of a time-varying kernel (paper 004's ε > 0).
TIME_VARYING = "time_varying"
#: Conditions a prior given by its sparse precision without any E×E or E×n matrix.
SPARSE_PRECISION = "sparse_precision"
#: Every capability a backend may declare (:attr:`PosteriorModel.capabilities`).
CAPABILITIES = (COVARIANCE, JOINT_SAMPLES, EVIDENCE, INFORMATION_GAIN, TIME_VARYING, SPARSE_PRECISION)


def readonly(a: np.ndarray) -> np.ndarray:
    """``a`` marked read-only (returned for chaining)."""
    a.flags.writeable = False
    return a


def aggregate_observations(edges, observed, n_arms: int):
    """Validate one round's observations and group them per distinct edge.

    Returns
    -------
    uniq : int64 array (k,)
        Distinct edges of the round, sorted.
    dcount : float64 array (k,)
        Number of observations per distinct edge.
    dsum : float64 array (k,)
        Sum of the observed values per distinct edge.
    """
    e = np.asarray(edges)
    r = np.asarray(observed, dtype=np.float64)
    if e.ndim != 1 or r.ndim != 1:
        raise EvrouteError("update expects 1-d arrays of edges and observed energies")
    if e.shape != r.shape:
        raise EvrouteError(f"update got {e.size} edges but {r.size} observed energies; they must match")
    if e.size == 0:
        return np.empty(0, np.int64), np.empty(0), np.empty(0)
    if not np.issubdtype(e.dtype, np.integer):
        if np.issubdtype(e.dtype, np.floating) and np.all(np.mod(e, 1) == 0):
            e = e.astype(np.int64)
        else:
            raise EvrouteError("edge ids must be integers")
    e = e.astype(np.int64, copy=False)
    if e.min() < 0 or e.max() >= n_arms:
        raise EvrouteError(f"edge ids must lie in 0..{n_arms - 1}, got {e.min()}..{e.max()}")
    if not np.all(np.isfinite(r)):
        raise EvrouteError("observed energies contain NaN or infinite values")
    uniq, inv = np.unique(e, return_inverse=True)
    dcount = np.bincount(inv, minlength=uniq.size).astype(np.float64)
    dsum = np.bincount(inv, weights=r, minlength=uniq.size)
    return uniq, dcount, dsum


def grouped_log_density(resid, S, counts, *, within_ss, noise_var: float) -> float:
    """Ln p of one round's raw observations, given their joint predictive N(μ_B, S) of the
    per-edge round means ȳ_B (S includes ς²/c_B): ln N(ȳ_B − μ_B; 0, S) plus, per edge with c
    observations, the within-edge term −(c−1)/2 ln(2πς²) − ½ ln c − SS_e/(2ς²) (the density of
    the raw values given their mean). Summed over rounds: the log marginal likelihood of every
    observation (chain rule), comparable across priors whatever their kernels."""
    L = sla.cholesky(S, lower=True, check_finite=False)
    z = sla.solve_triangular(L, resid, lower=True, check_finite=False)
    c = np.asarray(counts, dtype=np.float64)
    main = -0.5 * float(z @ z) - float(np.sum(np.log(np.diag(L)))) - 0.5 * c.size * math.log(2 * math.pi)
    within = float(np.sum(-(c - 1) / 2 * math.log(2 * math.pi * noise_var) - 0.5 * np.log(c))
                   - np.sum(within_ss) / (2 * noise_var))
    return main + within


def round_statistics(edges, observed, n_arms: int):
    """(distinct edges, counts, sums, within-edge sums of squares about their means) of a round."""
    uniq, dc, ds = aggregate_observations(edges, observed, n_arms)
    edges = np.asarray(edges, dtype=np.int64).ravel()
    y = np.asarray(observed, dtype=np.float64).ravel()
    inv = np.searchsorted(uniq, edges)
    sq = np.bincount(inv, weights=y * y, minlength=uniq.size)
    ss = np.maximum(sq - ds * ds / np.maximum(dc, 1.0), 0.0)
    return uniq, dc, ds, ss


class PosteriorModel(ABC):
    """Posterior belief about the expected energy f(e) of every edge e = 0..E-1.

    Attributes
    ----------
    n_arms : int
        Number of edges E.
    noise_var : float
        Observation noise variance ς² (known).
    """

    n_arms: int
    noise_var: float
    #: What this model offers beyond means, standard deviations and independent draws
    #: (:data:`CAPABILITIES`); agents ask :meth:`offers`, never ``getattr``.
    capabilities: frozenset = frozenset()

    def offers(self, capability: str) -> bool:
        """Whether this model declares ``capability`` (one of :data:`CAPABILITIES`)."""
        return capability in self.capabilities

    @abstractmethod
    def update(self, edges: np.ndarray, observed: np.ndarray) -> None:
        """Condition on one round's observations.

        Parameters
        ----------
        edges : int array (n,)
            Observed edge ids; an edge may appear several times.
        observed : float array (n,)
            Observed energies r = f(e) + ε, ε ~ N(0, ς²), aligned with ``edges``.
        """

    @abstractmethod
    def mean_std(self) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation of f for every edge (read-only arrays)."""

    def sample(self, rng: np.random.Generator, joint: bool = False) -> np.ndarray:
        """One posterior draw of f over all edges.

        Parameters
        ----------
        rng : numpy.random.Generator
        joint : bool
            False: every edge drawn independently from N(μ_e, σ_e²) (the paper's GP-TS,
            Algorithm 2). True: a draw from the full posterior covariance; backends that
            cannot do this raise :class:`EvrouteError`.
        """
        if joint:
            raise EvrouteError(f"model {type(self).__name__} does not support joint sampling")
        mu, sd = self.mean_std()
        return mu + sd * rng.standard_normal(self.n_arms)

    def covariance(self, idx) -> np.ndarray:
        """The posterior covariance block Σ(idx, idx) (|idx|×|idx|; backends that hold it cheaply:
        ``exact`` on dense priors, ``kalman``, ``eigen``). Others raise :class:`EvrouteError`."""
        raise EvrouteError(f"model {type(self).__name__} does not give posterior covariance blocks")

    def diagnostics(self) -> dict[str, float]:
        """Scalars describing the last update (logged as extra columns of ``rounds.parquet``,
        the same keys every round); none by default."""
        return {}

    def summary(self) -> dict:
        """Entries of the run's ``summary.json`` about the whole run (e.g. the largest error
        bounds of the local GMRF updates); none by default."""
        return {}

    #: Per-edge observation counts (int64, length E); every backend keeps it current.
    _counts: np.ndarray

    def _record(self, edges, observed) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Group a round per distinct edge (:func:`aggregate_observations`) and add it to the
        per-edge counts and sums (``_counts``, ``_sums``); returns (edges, counts, sums)."""
        uniq, dc, ds = aggregate_observations(edges, observed, self.n_arms)
        self._counts[uniq] += dc.astype(np.int64)
        self._sums[uniq] += ds
        return uniq, dc, ds

    def _record_round(self, edges, observed) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`_record` plus the within-edge sums of squares (:func:`round_statistics`), for
        backends that keep a chain-rule evidence (:func:`grouped_log_density`)."""
        uniq, dc, ds, ss = round_statistics(edges, observed, self.n_arms)
        self._counts[uniq] += dc.astype(np.int64)
        self._sums[uniq] += ds
        return uniq, dc, ds, ss

    @property
    def counts(self) -> np.ndarray:
        """Per-edge number of observations (int64, length E, read-only copy)."""
        return readonly(self._counts.copy())

    @property
    def sums(self) -> np.ndarray:
        """Per-edge sums of the observed energies (float64, length E, read-only copy)."""
        return readonly(self._sums.copy())

    @property
    def n_distinct(self) -> int:
        """Number of distinct edges observed so far."""
        return int(np.count_nonzero(self._counts))
