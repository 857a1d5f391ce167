"""The interface every posterior backend implements (SPEC §5).

A backend holds a belief about the expected energy f(e) of every edge e = 0..E-1: it starts
from a :class:`evroute.prior.Prior`, consumes one round's observations at a time
(:meth:`PosteriorModel.update`: edge ids and observed energies r = f(e) + ε, ε ~ N(0, ς²))
and gives, for every edge, the posterior mean and standard deviation
(:meth:`~PosteriorModel.mean_std`) and posterior draws (:meth:`~PosteriorModel.sample`).
Repeated observations of an edge enter as sufficient statistics (count, sum):
:func:`aggregate_observations` groups a round's data per distinct edge.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from ..errors import EvrouteError

__all__ = ["PosteriorModel", "aggregate_observations", "readonly"]


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

    def diagnostics(self) -> dict[str, float]:
        """Scalars describing the last update (logged as extra columns of ``rounds.parquet``,
        the same keys every round); none by default."""
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
