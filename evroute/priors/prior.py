"""Priors over the expected energy of every edge, as operators (003 App. B.1).

A prior is the Gaussian process GP(m, k) restricted to the E edges of a network: a mean
vector m and a covariance k, handed to the posterior backends as one object. Backends ask
it for what they need, never for more:

- ``diag()``: k(e, e) for every edge (length E);
- ``rows(idx)``: k(idx, ·), an |idx|×E block (SVGP, Nyström dictionaries);
- ``dense()``: the whole E×E matrix, only where it fits (the ``exact`` backend);
- ``sample(rng)``: one draw of f ~ GP(m, k) over all edges (ground truths);
- ``precision()``: the sparse precision k⁻¹, for priors that are Gaussian Markov random
  fields (the graph Matérn kernel with integer ν, independent edges).

Implementations: :class:`DiagonalPrior` (independent edges: the BI baseline),
:class:`DensePrior` (a covariance matrix in memory: tests, user-supplied kernels) and
:class:`NetworkPrior`, the paper's σ₀² · normalise(k_G·k_f + k_f′) on a road network
and its two ablations, built lazily from the network (kernel construction lives here).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from ..cache import cached_arrays
from ..errors import EvrouteError
from ..progress import stage
from ..validate import choice, positive_float
from .kernels import (
    KERNEL_KINDS,
    check_kappa,
    check_lengthscale,
    check_nu,
    combined_kernel,
    graph_matern,
    incidence_laplacian,
    matern52,
    standardize_context,
)
from .linalg import (
    METIS_SEED,
    PATCH_BLOCK,
    SparseCholesky,
    jittered_cholesky,
    local_inverse_diagonal,
    nested_dissection,
)

__all__ = ["Prior", "DiagonalPrior", "DensePrior", "VehicleScalePrior", "EdgeScaledPrior", "PointsPrior", "rbf_kernel", "ShiftedPrior", "ScaledPrior", "NetworkPrior", "GraphMaternPrior", "network_prior", "graph_kernel",
           "network_kernel", "DENSE_MAX_EDGES", "KERNEL_KINDS",
           "PRIOR_SCALE", "NOISE_SCALE"]

#: σ₀ = 0.25 σ_det: the prior standard deviation of the paper (003 Sec. 4.1).
PRIOR_SCALE = 0.25
#: ς = 0.1 σ_det: the observation noise standard deviation of the paper (003 Sec. 4.1).
NOISE_SCALE = 0.1



#: ``dense()`` refuses networks with more edges: E² float64 would exceed ~13 GB.
DENSE_MAX_EDGES = 40_000
#: A :class:`NetworkPrior` with the graph kernel and an integer ν works from its sparse
#: precision (:class:`GraphMaternPrior`; the ``exact`` backend then conditions the GMRF)
#: from this many edges on, densely below. Measured (``scripts/bench_scale.py``, docs/performance.md,
#: the scaling ladder): from 1k edges the sparse form builds faster (Luxembourg 0.4 s vs 5.0 s)
#: and runs GP-UCB and GP-BayesUCB faster per round (Luxembourg gp-ucb 0.049 vs 0.074 s),
#: GP-TS about as fast; the two agree to ~1e-10.
GMRF_FROM_EDGES = 1_000
#: From this many edges the paper's combined (and the context) prior is never formed as an
#: E×E matrix unless asked for: rows by k_G solves, the truth by random features
#: (:meth:`NetworkPrior.sample_features`). Below it, the dense forms are exact and cached;
#: lowering it would change the truths of the paper's networks (Luxembourg: 5,620 edges).
SPARSE_FROM_EDGES = 10_000
#: Random Fourier features per context kernel in the draws of the combined prior at scale.
RANDOM_FEATURES = 256


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _as_mean(mean) -> np.ndarray:
    m = np.array(mean, dtype=np.float64, copy=True)
    if m.ndim != 1 or m.size == 0:
        raise EvrouteError(f"prior mean must be a non-empty 1-d array, got shape {m.shape}")
    if not np.all(np.isfinite(m)):
        raise EvrouteError("prior mean contains NaN or infinite values")
    return _readonly(m)


def _as_index(idx, n: int) -> np.ndarray:
    i = np.asarray(idx)
    if i.ndim == 0:
        i = i.reshape(1)
    if i.ndim != 1 or (i.size and not np.issubdtype(i.dtype, np.integer)):
        raise EvrouteError("edge indices must be a 1-d array of integers")
    i = i.astype(np.int64, copy=False)
    if i.size and (i.min() < 0 or i.max() >= n):
        raise EvrouteError(f"edge indices must lie in 0..{n - 1}")
    return i


class Prior(ABC):
    """A Gaussian prior over the expected energy f(e) of the edges e = 0..E-1.

    Attributes
    ----------
    mean : numpy.ndarray (E,)
        Prior mean m (read-only), e.g. the physics model's E_det.
    n_edges : int
        E.
    """

    mean: np.ndarray

    @property
    def n_edges(self) -> int:
        return int(self.mean.size)

    @abstractmethod
    def diag(self) -> np.ndarray:
        """k(e, e) for every edge (length E, read-only)."""

    @abstractmethod
    def rows(self, idx) -> np.ndarray:
        """k(idx, ·): a new |idx|×E array."""

    def block(self, idx) -> np.ndarray:
        """k(idx, idx): a new |idx|×|idx| array."""
        idx = _as_index(idx, self.n_edges)
        return self.rows(idx)[:, idx]

    @property
    def prior_var(self) -> float:
        """σ₀², the mean prior variance over the edges."""
        return float(np.mean(self.diag()))

    def independent_variance(self):
        """The prior variance of each edge the BI baselines take (they ignore correlations): σ₀²,
        one number for every edge (:attr:`prior_var`, paper 003's BI), or an array (length E) where
        part of the variance differs by edge (:class:`VehicleScalePrior`)."""
        return self.prior_var

    def dense(self) -> np.ndarray:
        """The E×E covariance (read-only); refused above :data:`DENSE_MAX_EDGES` edges."""
        self._check_dense()
        return _readonly(self.rows(np.arange(self.n_edges)))

    def _check_dense(self) -> None:
        if self.n_edges > DENSE_MAX_EDGES:
            raise EvrouteError(
                f"the prior over {self.n_edges:,} edges does not fit as a dense matrix (E² floats = "
                f"{8 * self.n_edges ** 2 / 1e9:.0f} GB; at most {DENSE_MAX_EDGES:,} edges); use a backend "
                "that works from kernel rows or the sparse precision")

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """One draw f = m + L z, L Lᵀ = k (jittered Cholesky of the dense covariance, computed
        on the first draw and kept), z ~ N(0, I) drawn from ``rng`` (E standard normals)."""
        chol = getattr(self, "_chol", None)
        if chol is None:
            dense = self.dense()
            with stage(f"factorising the prior covariance of {self.n_edges:,} edges"):
                chol = self._chol = jittered_cholesky(dense, what="prior covariance")
        return self.mean + chol @ rng.standard_normal(self.n_edges)

    @property
    def representation(self) -> str:
        """How the covariance is held: ``"dense"`` (rows are read from an E×E matrix or
        computed directly) or ``"sparse"`` (only the sparse precision: no E×E matrix)."""
        return "dense"

    @property
    def is_markov(self) -> bool:
        """Whether :meth:`precision` is available (a Gaussian Markov random field)."""
        return False

    def precision(self) -> sp.csc_matrix:
        """The sparse precision matrix k⁻¹ (E×E); only for GMRF priors (:attr:`is_markov`)."""
        raise EvrouteError(f"{type(self).__name__} has no sparse precision (not a Gaussian Markov random field)")

    def diag_error_bound(self) -> float:
        """A bound on |diag() − the covariance's true diagonal|, every edge: 0 where the diagonal
        is exact, positive where it comes from local solves (the graph Matérn prior above
        :data:`LOCAL_VARIANCES_ABOVE` edges). A posterior that starts from diag() carries it."""
        return 0.0

    def precision_min_eigenvalue(self) -> float | None:
        """A lower bound on the smallest eigenvalue of :meth:`precision` (so k's largest
        eigenvalue is at most its inverse), where one is known in closed form; None otherwise.
        The local GMRF updates' error bounds need it."""
        return None

    def precision_ordering(self) -> np.ndarray:
        """A fill-reducing order of :meth:`precision`'s graph (nested dissection,
        :func:`evroute.priors.linalg.nested_dissection`) as every edge's rank in it; the local GMRF
        updates factorise their domains in it. Computed once and kept."""
        if getattr(self, "_ordering", None) is None:
            self._ordering = _readonly(np.asarray(self._compute_ordering(), dtype=np.int64))
        return self._ordering

    def _compute_ordering(self) -> np.ndarray:
        """What :meth:`precision_ordering` keeps (a subclass may read it from a cache)."""
        return nested_dissection(self.precision())


class DiagonalPrior(Prior):
    """Independent edges: f(e) ~ N(m_e, v_e) (the BI baseline's prior; Åkerblom et al. 2023).

    Parameters
    ----------
    mean : array (E,)
    var : float or array (E,)
        Prior variance per edge (a scalar is used for every edge), positive.
    """

    def __init__(self, mean, var):
        self.mean = _as_mean(mean)
        v = np.asarray(var, dtype=np.float64)
        if v.ndim == 0:
            v = np.full(self.n_edges, float(v))
        if v.shape != (self.n_edges,):
            raise EvrouteError(f"prior variance must be a scalar or have length {self.n_edges}, got shape {v.shape}")
        if not np.all(np.isfinite(v)) or np.any(v <= 0):
            raise EvrouteError("prior variance must be positive and finite")
        self._var = _readonly(v.copy())

    def diag(self) -> np.ndarray:
        return self._var

    def rows(self, idx) -> np.ndarray:
        idx = _as_index(idx, self.n_edges)
        out = np.zeros((idx.size, self.n_edges))
        out[np.arange(idx.size), idx] = self._var[idx]
        return out

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        return self.mean + np.sqrt(self._var) * rng.standard_normal(self.n_edges)

    @property
    def is_markov(self) -> bool:
        return True

    def precision(self) -> sp.csc_matrix:
        return sp.diags(1.0 / self._var, format="csc")

    def precision_min_eigenvalue(self) -> float:
        return float(1.0 / self._var.max())


def _check_symmetric(K: np.ndarray, scale: float, tile: int = 512) -> None:
    """Finite and symmetric (to 1e-10 relative), checked tile by tile (cache-friendly)."""
    E = K.shape[0]
    worst = 0.0
    for i in range(0, E, tile):
        for j in range(i, E, tile):
            a, b = K[i : i + tile, j : j + tile], K[j : j + tile, i : i + tile]
            with np.errstate(invalid="ignore"):
                diff = np.max(np.abs(a - b.T))
            if not np.isfinite(diff):
                raise EvrouteError("kernel matrix contains NaN or infinite values")
            worst = max(worst, float(diff))
    if worst > 1e-10 * max(scale, 1e-300):
        raise EvrouteError(f"kernel matrix is not symmetric (max |K - K^T| = {worst:.3g})")


class PointsPrior(Prior):
    """A kernel function over a finite set of points (arms that are not edges: the contextual
    benchmarks of papers 001/002, where an arm is a (context, action) point). Rows are computed
    on demand, k(X[idx], X): nothing E×E is held.

    Parameters
    ----------
    mean : array (E,)
    points : array (E, d)
    kernel : callable
        ``kernel(A, B)`` → the |A|×|B| matrix of k(a, b) (e.g. :func:`rbf_kernel`).
    """

    def __init__(self, mean, points, kernel):
        self.mean = _as_mean(mean)
        X = np.ascontiguousarray(points, dtype=np.float64)
        if X.ndim != 2 or X.shape[0] != self.n_edges or not np.all(np.isfinite(X)):
            raise EvrouteError(f"points must be a finite ({self.n_edges}, d) array, got shape {X.shape}")
        self.points = _readonly(X)
        self.kernel = kernel
        d = np.concatenate([np.einsum("ii->i", np.asarray(kernel(X[i:i + 512], X[i:i + 512]), dtype=np.float64))
                            for i in range(0, X.shape[0], 512)]) if X.shape[0] else np.zeros(0)
        if not np.all(np.isfinite(d)) or np.any(d < 0):
            raise EvrouteError("the kernel has a negative or non-finite diagonal on these points")
        self._diag = _readonly(d)

    def diag(self) -> np.ndarray:
        return self._diag

    def rows(self, idx) -> np.ndarray:
        idx = _as_index(idx, self.n_edges)
        return np.asarray(self.kernel(self.points[idx], self.points), dtype=np.float64)


def rbf_kernel(lengthscale: float = 1.0, variance: float = 1.0):
    """The Gaussian kernel k(a, b) = variance · exp(−‖a − b‖² / (2 ℓ²)) as ``kernel(A, B)``."""
    ls2 = 2.0 * positive_float("lengthscale", lengthscale) ** 2
    var = positive_float("variance", variance)

    def kernel(A, B):
        A, B = np.atleast_2d(A), np.atleast_2d(B)
        d2 = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2.0 * A @ B.T
        return var * np.exp(-np.maximum(d2, 0.0) / ls2)

    return kernel


class ShiftedPrior(Prior):
    """Another prior's covariance with a different mean (paper 004's candidate priors that
    differ in their mean only: "which vehicle am I?"). Every covariance view (diagonal, rows,
    dense matrix, sparse precision, factors) is the base prior's own object, not a copy."""

    def __init__(self, base: Prior, mean):
        self._base = base
        self.mean = _as_mean(mean)
        if self.mean.size != base.n_edges:
            raise EvrouteError(f"mean has {self.mean.size} entries, the prior {base.n_edges} edges")

    def __getattr__(self, name):  # every covariance view and attribute: the base prior's
        if name == "_base":
            raise AttributeError(name)
        return getattr(self._base, name)

    def diag(self) -> np.ndarray:
        return self._base.diag()

    def rows(self, idx) -> np.ndarray:
        return self._base.rows(idx)

    def block(self, idx) -> np.ndarray:
        return self._base.block(idx)

    @property
    def prior_var(self) -> float:
        return self._base.prior_var

    def dense(self) -> np.ndarray:
        return self._base.dense()

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        return self._base.sample(rng) - self._base.mean + self.mean

    @property
    def representation(self) -> str:
        return self._base.representation

    @property
    def is_markov(self) -> bool:
        return self._base.is_markov

    def precision(self):
        return self._base.precision()

    def precision_min_eigenvalue(self):
        return self._base.precision_min_eigenvalue()

    def precision_ordering(self) -> np.ndarray:
        return self._base.precision_ordering()

    def diag_error_bound(self) -> float:
        return self._base.diag_error_bound()


class ScaledPrior(Prior):
    """Another prior's covariance times a constant c, the same mean (paper 000's mixture scale c:
    the prior c·K). Served on priors held densely or by rows; a sparse-precision prior is refused."""

    def __init__(self, base: Prior, c: float):
        if base.representation != "dense":
            raise EvrouteError("a scaled prior (c != 1) is served on dense priors only; use c = 1 with the "
                               "sparse graph prior")
        self._base = base
        self.c = positive_float("c", c)
        self.mean = base.mean
        self._dense = None

    def diag(self) -> np.ndarray:
        return _readonly(self.c * np.asarray(self._base.diag()))

    def rows(self, idx) -> np.ndarray:
        return self.c * np.asarray(self._base.rows(idx))

    def dense(self) -> np.ndarray:
        if self._dense is None:
            self._dense = _readonly(self.c * np.asarray(self._base.dense()))
        return self._dense

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        return self.mean + np.sqrt(self.c) * (self._base.sample(rng) - self._base.mean)

    def diag_error_bound(self) -> float:
        return self.c * self._base.diag_error_bound()


class EdgeScaledPrior(Prior):
    """Another prior's covariance with each edge rescaled, its correlations kept: S⁻¹ K S⁻¹ for
    S = diag(s), s > 0, and a mean of its own (default the base's over s).

    Two uses: per-edge observation noise by whitening (:class:`evroute.models.hetero.WhitenedPrior`,
    g = f / s), and a fleet's per-edge posterior as the prior (issue "Drives in": each edge's
    variance σ₀² / s_e², small where the fleet drove often). Every view is computed from the base
    prior's; on a Gaussian Markov random field the precision S Q S keeps Q's pattern (and its
    fill-reducing order), so every backend serves it.

    Parameters
    ----------
    base : Prior
    scale : array (E,)
        s, positive: the covariance is divided by s_i s_j.
    mean : array (E,), optional
        Default ``base.mean / s``.
    """

    def __init__(self, base: Prior, scale, mean=None):
        s = np.asarray(scale, dtype=np.float64)
        if s.shape != (base.n_edges,) or not np.all(np.isfinite(s)) or np.any(s <= 0):
            raise EvrouteError(f"per-edge scales must be {base.n_edges} positive finite numbers")
        self._base = base
        self._s = _readonly(s.copy())
        self._w = _readonly(1.0 / s)
        self.mean = _readonly(np.asarray(base.mean, dtype=np.float64) * self._w) if mean is None else _as_mean(mean)
        if self.mean.size != base.n_edges:
            raise EvrouteError(f"mean has {self.mean.size} entries, the prior {base.n_edges} edges")
        # a draw: the base's, rescaled about the new mean (exactly the base's × 1/s where the mean is the base's / s)
        self._offset = self.mean - np.asarray(base.mean, dtype=np.float64) * self._w
        self._Q = None

    def diag(self) -> np.ndarray:
        return _readonly(np.asarray(self._base.diag(), dtype=np.float64) * self._w ** 2)

    def rows(self, idx) -> np.ndarray:
        idx = np.asarray(idx, dtype=np.int64)
        return np.asarray(self._base.rows(idx), dtype=np.float64) * self._w[idx, None] * self._w[None, :]

    def block(self, idx) -> np.ndarray:
        idx = np.asarray(idx, dtype=np.int64)
        return np.asarray(self._base.block(idx), dtype=np.float64) * np.outer(self._w[idx], self._w[idx])

    def dense(self) -> np.ndarray:
        self._check_dense()
        return _readonly(np.asarray(self._base.dense(), dtype=np.float64) * np.outer(self._w, self._w))

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        return np.asarray(self._base.sample(rng), dtype=np.float64) * self._w + self._offset

    def independent_variance(self):
        return np.asarray(self._base.independent_variance(), dtype=np.float64) * self._w ** 2

    @property
    def representation(self) -> str:
        return self._base.representation

    @property
    def is_markov(self) -> bool:
        return self._base.is_markov

    def precision(self) -> sp.csc_matrix:
        if self._Q is None:
            S = sp.diags(self._s)
            self._Q = sp.csc_matrix(S @ sp.csc_matrix(self._base.precision()) @ S)
        return self._Q

    def precision_min_eigenvalue(self):
        lam = self._base.precision_min_eigenvalue()
        # λ_min(S Q S) ≥ λ_min(Q) · min s² (Rayleigh quotient of S x)
        return None if lam is None else float(lam) * float(np.min(self._s)) ** 2

    def precision_ordering(self) -> np.ndarray:
        return self._base.precision_ordering()  # the same graph

    def diag_error_bound(self) -> float:
        return float(self._base.diag_error_bound()) * float(np.max(self._w)) ** 2


class VehicleScalePrior(Prior):
    """A prior whose vehicle is not known exactly: f = m + (a − 1) d + g with g from the base
    prior (mean 0 about m) and a scale a ~ N(1, s²) shared by every edge, marginalised: mean m,
    covariance K + s² d dᵀ (a rank-one term). With d = m (the default), f = a · m + g: a car unlike
    the one the prior mean describes (a van on a fleet of cars' means) learns a from any edge it
    drives, and every edge moves with it (issue "Drives in": this car = a × the fleet). With d the
    part of m a fleet measured beyond this vehicle's physics (``--fleet-vehicle``), a scales that
    part only. Served on priors held densely or by rows; a sparse-precision prior is refused (its
    precision would no longer be sparse).

    Parameters
    ----------
    base : Prior
    scale_sd : float
        s.
    direction : array (E,), optional
        d (Wh); default the base's mean.
    """

    def __init__(self, base: Prior, scale_sd: float, direction=None):
        if base.representation != "dense":
            raise EvrouteError("--vehicle-scale is served on priors held densely or by rows (networks below "
                               f"{GMRF_FROM_EDGES:,} edges); this prior is a sparse precision")
        self._base = base
        self.scale_sd = positive_float("vehicle scale sd", scale_sd)
        self.mean = base.mean
        self._m = np.asarray(base.mean, dtype=np.float64)
        self._d = self._m if direction is None else np.asarray(direction, dtype=np.float64)
        if self._d.shape != self._m.shape:
            raise EvrouteError(f"the vehicle scale's direction has {self._d.size} values for {self._m.size} edges")
        self._dense = None

    def diag(self) -> np.ndarray:
        return _readonly(np.asarray(self._base.diag(), dtype=np.float64) + self.scale_sd ** 2 * self._d ** 2)

    def rows(self, idx) -> np.ndarray:
        idx = _as_index(idx, self.n_edges)
        return np.asarray(self._base.rows(idx), dtype=np.float64) + self.scale_sd ** 2 * np.outer(self._d[idx], self._d)

    def dense(self) -> np.ndarray:
        if self._dense is None:
            self._check_dense()
            self._dense = _readonly(np.asarray(self._base.dense(), dtype=np.float64)
                                    + self.scale_sd ** 2 * np.outer(self._d, self._d))
        return self._dense

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        g = np.asarray(self._base.sample(rng), dtype=np.float64)  # (the base's draw first, then a's)
        return g + self.scale_sd * rng.standard_normal() * self._d

    def independent_variance(self):
        return np.asarray(self._base.independent_variance(), dtype=np.float64) + self.scale_sd ** 2 * self._d ** 2

    def diag_error_bound(self) -> float:
        return self._base.diag_error_bound()

    def scale_posterior(self, counts, sums, noise_var: float) -> tuple[float, float]:
        """The posterior mean and sd of a given per-edge observation counts and sums (noise
        ``noise_var`` per observation: one ς², or ς_e² per edge): Cov(a, f) = s² d, so with O the observed edges and
        A = K′_OO + diag(ς²/n_O), E[a | y] = 1 + s² d_Oᵀ A⁻¹ (ȳ_O − m_O) and
        Var[a | y] = s² − s⁴ d_Oᵀ A⁻¹ d_O (one |O|×|O| Cholesky)."""
        counts = np.asarray(counts, dtype=np.float64)
        seen = np.flatnonzero(counts)
        s2 = self.scale_sd ** 2
        if seen.size == 0:
            return 1.0, float(self.scale_sd)
        nv = np.asarray(noise_var, dtype=np.float64)
        A = np.array(self.block(seen)) + np.diag((nv if nv.ndim == 0 else nv[seen]) / counts[seen])
        L = jittered_cholesky(A, what="the observed edges' covariance")
        m, d = self._m[seen], self._d[seen]
        u = sla.cho_solve((L, True), np.column_stack([np.asarray(sums, dtype=np.float64)[seen] / counts[seen] - m, d]))
        return float(1.0 + s2 * d @ u[:, 0]), float(np.sqrt(max(s2 - s2 * s2 * d @ u[:, 1], 0.0)))


class DensePrior(Prior):
    """A covariance matrix held in memory (small problems, tests, user-supplied kernels).

    Parameters
    ----------
    mean : array (E,)
    cov : array (E, E)
        Symmetric positive semi-definite covariance. Used without a copy when it is a
        C-contiguous float64 array (it is then made read-only).
    """

    def __init__(self, mean, cov):
        self.mean = _as_mean(mean)
        K = np.ascontiguousarray(cov, dtype=np.float64)
        E = self.n_edges
        if K.shape != (E, E):
            raise EvrouteError(f"kernel matrix must have shape ({E}, {E}), got {K.shape}")
        self._K = _readonly(K)
        self._diag = _readonly(np.diagonal(K).copy())
        if not np.all(np.isfinite(self._diag)) or np.any(self._diag < 0):
            raise EvrouteError("kernel matrix has a negative or non-finite diagonal")
        _check_symmetric(K, float(np.max(self._diag)))

    def diag(self) -> np.ndarray:
        return self._diag

    def rows(self, idx) -> np.ndarray:
        return self._K[_as_index(idx, self.n_edges)]

    def dense(self) -> np.ndarray:
        return self._K


# --------------------------------------------------------------------------------------
# The paper's prior on a road network
# --------------------------------------------------------------------------------------


def graph_laplacian(net) -> sp.csr_matrix:
    """The incidence Laplacian Δ of the network's line graph (003 Eq. 132–133)."""
    return incidence_laplacian(net.n_edges, net.conn_src, net.conn_dst, lengths=net.edges.length_m.to_numpy())


def graph_matern_operator(net, nu: float, kappa: float) -> sp.csc_matrix:
    """P = 2ν/κ² I + Δ, the sparse operator whose −ν-th power is the graph Matérn kernel."""
    return (graph_laplacian(net) + sp.identity(net.n_edges, format="csr") * (2.0 * nu / kappa ** 2)).tocsc()


#: Above this many edges the prior variances of the graph Matérn prior come from local solves
#: with a certified bound (:func:`evroute.priors.linalg.local_inverse_diagonal`: linear time and
#: memory; 15 s at 10⁵ edges on 2 threads), below it from selected inversion of a global factor
#: (exact; 21 s and a 1.5 GB peak at 10⁵ edges, ~18 GB at 3·10⁵).
LOCAL_VARIANCES_ABOVE = 150_000
#: The bound asked of every local prior variance, relative to itself: far below the local
#: posterior's tolerance (``exact[tol=…]``, 1e-8 of σ₀² by default), which carries it.
LOCAL_VARIANCES_TOL = 1e-10


def graph_matern_inverse_diagonal(net, nu: int, kappa: float, local: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """diag(P^−ν), P = 2ν/κ² I + Δ, and a bound on its error, entrywise (cached on disk with
    the network).

    Parameters
    ----------
    net : evroute.roads.network.Network
    nu : int
    kappa : float
    local : bool, optional
        Local solves with a certified bound (:func:`evroute.priors.linalg.local_inverse_diagonal`,
        relative bound :data:`LOCAL_VARIANCES_TOL`), or selected inversion of the sparse
        Cholesky factor of P^ν (exact: the bound is 0). Default: local above
        :data:`LOCAL_VARIANCES_ABOVE` edges.

    Returns
    -------
    value, bound : numpy.ndarray (E,)
    """
    local = net.n_edges > LOCAL_VARIANCES_ABOVE if local is None else bool(local)

    def build():
        A = _matrix_power(graph_matern_operator(net, nu, kappa), nu)
        if local:
            with stage(f"prior variances of the graph Matérn kernel on {net.n_edges:,} edges (local solves, "
                       f"certified to {LOCAL_VARIANCES_TOL:g} relative; cached)"):
                # P ⪰ 2ν/κ² I (Δ ⪰ 0), so λ_min(P^ν) ≥ (2ν/κ²)^ν
                value, bound = local_inverse_diagonal(A, (2.0 * nu / kappa ** 2) ** nu, tol=LOCAL_VARIANCES_TOL,
                                                      threads=2, what="graph Matérn precision")
            return {"value": value, "bound": bound}
        with stage(f"prior variances of the graph Matérn kernel on {net.n_edges:,} edges (selected inversion; cached)"):
            value = SparseCholesky(A, "graph Matérn precision").inverse_diagonal()
        return {"value": value, "bound": np.zeros_like(value)}

    params = {"network": net.cache_key, "nu": float(nu), "kappa": float(kappa), "what": "graph-matern-inverse-diag"}
    if local:
        params.update(method="local", tol=LOCAL_VARIANCES_TOL, block=PATCH_BLOCK)  # (the radii depend on the block)
    out = cached_arrays("kernels", params, build, names=("value", "bound"))
    return out["value"], out["bound"]


def graph_matern_ordering(net, nu: int) -> np.ndarray:
    """A fill-reducing order of the graph of P^ν (the graph Matérn precision's: its pattern
    does not depend on κ), by nested dissection (:func:`evroute.priors.linalg.nested_dissection`), as
    every edge's rank in it; cached on disk with the network (15 s at 10⁶ edges).

    Parameters
    ----------
    net : evroute.roads.network.Network
    nu : int

    Returns
    -------
    numpy.ndarray (E,) int64, read-only
    """

    def build():
        with stage(f"a nested-dissection order of the graph Matérn precision on {net.n_edges:,} edges (cached)"):
            return {"value": nested_dissection(_matrix_power(graph_matern_operator(net, nu, 1.0), nu))}

    params = {"network": net.cache_key, "nu": float(nu), "what": "graph-matern-precision-order", "seed": METIS_SEED}
    return _readonly(np.asarray(cached_arrays("kernels", params, build)["value"], dtype=np.int64))


def _matrix_power(P: sp.csc_matrix, nu: int) -> sp.csc_matrix:
    out = P
    for _ in range(nu - 1):
        out = (out @ P).tocsc()
    out.sort_indices()
    return out


class GraphMaternPrior(Prior):
    """The graph Matérn prior as a Gaussian Markov random field (003 Eq. 134;
    Borovitskiy et al. 2021): k = σ₀² P^−ν / s with P = 2ν/κ² I + Δ and s = mean diag(P^−ν),
    i.e. the same covariance as ``NetworkPrior(kind="graph")``, never formed: the precision
    Q = (s/σ₀²) P^ν is sparse (ν-hop neighbourhoods of the line graph).

    - the normalisation s and the prior variances diag(k) come from selected inversion of
      the sparse Cholesky factor of P^ν (:meth:`evroute.priors.linalg.SparseCholesky.inverse_diagonal`),
      exactly, cached on disk with the network;
    - rows k(idx, ·) are ν sparse solves with the factor of P (sparser than that of P^ν),
      |idx| right-hand sides;
    - a draw is ⌊ν/2⌋ solves (and, for odd ν, one triangular solve) with the factor of P.

    Parameters
    ----------
    net : evroute.roads.network.Network
    mean : array (E,)
    kappa : float
    nu : int
        An integer ν ≥ 1 (other ν have no sparse precision).
    prior_var : float
        σ₀², the mean prior variance.
    """

    def __init__(self, net, mean, kappa: float = 1.0, nu: float = 2.0, prior_var: float = 1.0):
        self.net = net
        self.mean = _as_mean(mean)
        if self.mean.size != net.n_edges:
            raise EvrouteError(f"prior mean has {self.mean.size} entries but the network has {net.n_edges} edges")
        self.kappa = check_kappa("kappa", kappa)
        nu = check_nu("nu", nu)
        if not nu.is_integer():
            raise EvrouteError(f"the graph Matérn kernel with nu={nu:g} has no sparse precision (nu must be an "
                               "integer); the dense prior serves it up to "
                               f"{DENSE_MAX_EDGES:,} edges (exact, svgp and bi backends)")
        self.nu = int(nu)
        self._prior_var = positive_float("prior_var", prior_var)
        self._P = graph_matern_operator(net, self.nu, self.kappa)
        self._chol = SparseCholesky(self._P, "graph Matérn precision")  # P itself: sparser than P^ν
        d, bound = graph_matern_inverse_diagonal(net, self.nu, self.kappa)
        self._s = float(np.mean(d))
        self._scale = self._prior_var / self._s  # k = scale · P^−ν
        self._diag = _readonly(self._scale * d)
        # the covariance is scale · P^−ν exactly (s only sets σ₀²); its diagonal is d up to bound
        self._diag_error = float(self._scale * np.max(bound))

    @property
    def prior_var(self) -> float:
        return self._prior_var

    @property
    def normalisation(self) -> float:
        """S = mean diag(P^−ν)."""
        return self._s

    @property
    def factor_nnz(self) -> int:
        """Stored entries of the sparse Cholesky factor of P (its memory, the cost of a solve)."""
        return int(self._chol.L.nnz)

    @property
    def representation(self) -> str:
        return "sparse"

    def diag(self) -> np.ndarray:
        return self._diag

    def rows(self, idx) -> np.ndarray:
        idx = _as_index(idx, self.n_edges)
        x = np.zeros((self.n_edges, idx.size))
        x[idx, np.arange(idx.size)] = 1.0
        for _ in range(self.nu):  # P^−ν e_idx: ν solves with the factor of P
            x = self._chol.solve(x)
        return np.ascontiguousarray((self._scale * x).T)

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """F = m + √(σ₀²/s) P^−⌊ν/2⌋ x, x = z for even ν and x = L⁻ᵀ D^(−1/2) z (covariance P⁻¹)
        for odd ν: Cov = P^−ν."""
        x = rng.standard_normal(self.n_edges)
        if self.nu % 2:
            x = self._chol.half_solve(x)
        for _ in range(self.nu // 2):
            x = self._chol.solve(x)
        return self.mean + math.sqrt(self._scale) * x

    @property
    def is_markov(self) -> bool:
        return True

    def precision(self) -> sp.csc_matrix:
        return (_matrix_power(self._P, self.nu) / self._scale).tocsc()

    def precision_min_eigenvalue(self) -> float:
        """(2ν/κ²)^ν / scale: P = 2ν/κ² I + Δ with Δ ⪰ 0 (a graph Laplacian), so P ⪰ 2ν/κ² I."""
        return float((2.0 * self.nu / self.kappa ** 2) ** self.nu / self._scale)

    def _compute_ordering(self) -> np.ndarray:
        return graph_matern_ordering(self.net, self.nu)  # cached on disk with the network

    def diag_error_bound(self) -> float:
        """The scale times the largest bound of :func:`graph_matern_inverse_diagonal` (0 up to
        :data:`LOCAL_VARIANCES_ABOVE` edges: selected inversion is exact)."""
        return self._diag_error

def graph_kernel(net, nu: float = 2.0, kappa: float = 1.0) -> np.ndarray:
    """The graph Matérn kernel k_G on the edges of ``net``, normalised to unit mean
    variance (003 Eq. 134; cached on disk with the network)."""

    def build():
        with stage(f"graph Matérn kernel on {net.n_edges:,} edges (cached)"):
            lap = incidence_laplacian(net.n_edges, net.conn_src, net.conn_dst, lengths=net.edges.length_m.to_numpy())
            return {"value": graph_matern(lap, nu=nu, kappa=kappa)}

    params = {"network": net.cache_key, "nu": float(nu), "kappa": float(kappa), "what": "graph_matern"}
    return cached_arrays("kernels", params, build)["value"]


def network_kernel(net, kind: str = "combined", lengthscale: float = 1.0, *, kappa: float = 1.0,
                   nu: float = 2.0, prior_var: float = 1.0) -> np.ndarray:
    """Prior covariance over all edges as a dense matrix: σ₀² · normalise(k_G·k_f + k_f′), or an
    ablation (``kind`` "graph", "context")."""
    x = standardize_context(net.context)
    k_g = graph_kernel(net, nu, kappa) if kind in ("combined", "graph") else None
    if k_g is None:
        k_g = np.ones((1, 1))  # unused by the context-only kernel
    return combined_kernel(k_g, x, lengthscales=lengthscale, kind=kind, prior_var=prior_var)


class NetworkPrior(Prior):
    """The paper's prior on a road network: GP(m, σ₀² · normalise(k_G·k_f + k_f′)).

    k_G is the graph Matérn kernel on the line graph (003 Eq. 134), k_f and k_f′ Matérn-5/2
    kernels on the standardised edge context (003 Eq. 135–136); ``kind`` "graph" and
    "context" are the ablations σ₀² · normalise(k_G) and σ₀² · normalise(k_f). Nothing is
    built until asked for; the dense covariance is built once and kept.

    Parameters
    ----------
    net : evroute.roads.network.Network
    mean : array (E,)
        Prior mean (E_det of the vehicle model).
    kind : {"combined", "graph", "context"}
    lengthscale : float
        Every context lengthscale of k_f and k_f′.
    kappa, nu : float
        Graph Matérn κ and ν.
    prior_var : float
        σ₀², the mean prior variance.
    """

    def __init__(self, net, mean, kind: str = "combined", lengthscale: float = 1.0, kappa: float = 1.0,
                 nu: float = 2.0, prior_var: float = 1.0):
        self.net = net
        self.mean = _as_mean(mean)
        if self.mean.size != net.n_edges:
            raise EvrouteError(f"prior mean has {self.mean.size} entries but the network has {net.n_edges} edges")
        self.kind = choice("kernel", kind, KERNEL_KINDS)
        self.lengthscale = check_lengthscale("lengthscale", lengthscale)
        self.kappa = check_kappa("kappa", kappa)
        self.nu = check_nu("nu", nu)
        self._prior_var = positive_float("prior_var", prior_var)
        self._K: np.ndarray | None = None

    @property
    def prior_var(self) -> float:
        return self._prior_var

    @property
    def context(self) -> np.ndarray:
        """Standardised context x_e of every edge (E×3)."""
        return standardize_context(self.net.context)

    def graph_kernel(self) -> np.ndarray:
        """The normalised graph Matérn matrix k_G (E×E, cached on disk)."""
        return graph_kernel(self.net, self.nu, self.kappa)

    @property
    def _graph_sparse(self) -> bool:
        return float(self.nu).is_integer() and self.n_edges >= SPARSE_FROM_EDGES

    def _unit_graph(self) -> GraphMaternPrior:
        """k_G (unit mean variance) as a GMRF, built once."""
        if getattr(self, "_unit_graph_prior", None) is None:
            self._unit_graph_prior = GraphMaternPrior(self.net, np.zeros(self.n_edges), self.kappa, self.nu, 1.0)
        return self._unit_graph_prior

    def graph_rows(self, idx) -> np.ndarray:
        """Rows k_G(idx, ·) of the normalised graph Matérn kernel: slices of the cached matrix,
        or sparse solves from :data:`SPARSE_FROM_EDGES` edges (integer ν; no E×E matrix)."""
        if self.representation == "sparse":  # (the prior's own GMRF: no second factorisation)
            return self._gmrf().rows(idx) / self._prior_var
        if self._graph_sparse:
            return self._unit_graph().rows(idx)
        return np.array(self.graph_kernel()[_as_index(idx, self.n_edges)])

    def graph_diag(self) -> np.ndarray:
        """Diag k_G (mean 1)."""
        if self.representation == "sparse":
            return _readonly(self._gmrf().diag() / self._prior_var)
        if self._graph_sparse:
            return self._unit_graph().diag()
        return _readonly(np.diagonal(self.graph_kernel()).copy())

    @property
    def representation(self) -> str:
        """``"sparse"`` (the graph kernel with an integer ν on :data:`GMRF_FROM_EDGES` edges
        or more: served by :class:`GraphMaternPrior`) or ``"dense"``."""
        return "sparse" if self.is_markov and self.n_edges >= GMRF_FROM_EDGES else "dense"

    @property
    def factor_nnz(self) -> int | None:
        """Stored entries of the sparse factor of P in the sparse representation (else None)."""
        return self._gmrf().factor_nnz if self.representation == "sparse" else None

    def _gmrf(self) -> GraphMaternPrior:
        if getattr(self, "_gmrf_prior", None) is None:
            self._gmrf_prior = GraphMaternPrior(self.net, self.mean, self.kappa, self.nu, self._prior_var)
        return self._gmrf_prior

    def dense(self) -> np.ndarray:
        if self.representation == "sparse":
            return Prior.dense(self)
        if self._K is None:
            self._check_dense()
            with stage(f"{self.kind} prior kernel on {self.n_edges:,} edges"):
                self._K = _readonly(network_kernel(self.net, self.kind, self.lengthscale, kappa=self.kappa, nu=self.nu,
                                                   prior_var=self._prior_var))
        return self._K

    def diag(self) -> np.ndarray:
        if self.representation == "sparse":
            return self._gmrf().diag()
        if self._direct:
            g = self.graph_diag() if self.kind == "combined" else np.zeros(self.n_edges)
            return _readonly(self._prior_var * (g + 1.0) / (float(np.mean(g)) + 1.0))
        return _readonly(np.diagonal(self.dense()).copy())

    def rows(self, idx) -> np.ndarray:
        if self.representation == "sparse":
            return self._gmrf().rows(idx)
        idx = _as_index(idx, self.n_edges)
        if self._direct:
            # σ₀²·(k_G ∘ k_f + k_f′)/mean diag, k_f = k_f′ (one lengthscale) with unit variance,
            # so mean diag = mean diag(k_G) + 1; k_G rows by sparse solves (no E×E matrix)
            x = self.context
            kf = matern52(x[idx], x, self.lengthscale)
            if self.kind == "context":
                return self._prior_var * kf
            g_mean = float(np.mean(self.graph_diag()))
            return self._prior_var * (self.graph_rows(idx) * kf + kf) / (g_mean + 1.0)
        return self.dense()[idx]

    @property
    def _direct(self) -> bool:
        """Rows and diagonal computed directly on large networks (whether or not a dense matrix
        was built, so that results never depend on what was computed before): the combined
        and context kernels with k_G from its sparse precision."""
        return (self.n_edges >= SPARSE_FROM_EDGES and self.kind != "graph"
                and (self.kind == "context" or float(self.nu).is_integer()))

    @property
    def sampler(self) -> str:
        """How :meth:`sample` draws: ``"dense"`` (Cholesky of the E×E kernel), ``"gmrf"`` or
        ``"features-<R>"`` (:meth:`sample_features`), by :data:`SPARSE_FROM_EDGES`."""
        if self.representation == "sparse":
            return "gmrf"
        if self.kind == "combined" and self.n_edges >= SPARSE_FROM_EDGES and float(self.nu).is_integer():
            return f"features-{RANDOM_FEATURES}"
        return "dense"

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """One draw of the prior: from the dense Cholesky factor below :data:`SPARSE_FROM_EDGES`
        edges; above, without an E×E matrix: the graph kernel from its GMRF, the combined
        kernel by :meth:`sample_features` (see :attr:`sampler`)."""
        sampler = self.sampler
        if sampler == "gmrf":
            return self._gmrf().sample(rng)
        if sampler != "dense":
            return self.sample_features(rng)
        return Prior.sample(self, rng)

    def sample_features(self, rng: np.random.Generator, n_features: int = RANDOM_FEATURES) -> np.ndarray:
        """A draw of the combined prior σ₀²·normalise(k_G·k_f + k_f′) without an E×E matrix.

        k_f and k_f′ (Matérn-5/2, lengthscale ℓ, on the 3-D standardised context) are written as
        random Fourier features (Rahimi & Recht 2007): φ_r(x) = √2 cos(ω_r·x + b_r) with
        ω_r = g √(5/u)/ℓ, g ~ N(0, I₃), u ~ χ²₅ (the Matérn-5/2 spectral density, a Student-t
        with 5 degrees of freedom) and b_r ~ U(0, 2π), so E[φ_r(x) φ_r(x′)] = k_f(x, x′). Then

            f − m = √(σ₀²/2) · ( R^(−1/2) Σ_r φ_r ∘ g_r + R^(−1/2) Σ_r φ′_r w_r ),

        g_r independent draws of the graph Matérn GMRF (covariance k_G, unit mean variance),
        w_r ~ N(0, 1): its covariance is exactly σ₀²·(k_G ∘ k_f + k_f′)/2, the combined kernel (the
        normalisation is exactly 2: k_f(x, x) = k_f′(x, x) = 1 and mean diag k_G = 1). Given the
        features the draw is Gaussian with covariance k_G ∘ (ΦΦᵀ/R) + Φ′Φ′ᵀ/R; over the
        features it is a sum of R independent terms, Gaussian only as R → ∞ (R = 256 by default).
        """
        if self.kind != "combined" or not float(self.nu).is_integer():
            raise EvrouteError("random-feature draws are for the combined kernel with an integer nu")
        R = int(n_features)
        graph = self._unit_graph()
        x = self.context
        out = np.zeros(self.n_edges)
        for part in ("product", "sum"):
            for _ in range(R):
                omega = rng.standard_normal(x.shape[1]) * math.sqrt(5.0 / rng.chisquare(5.0)) / self.lengthscale
                phi = math.sqrt(2.0) * np.cos(x @ omega + rng.uniform(0.0, 2.0 * math.pi))
                out += phi * (graph.sample(rng) if part == "product" else rng.standard_normal())
        return self.mean + math.sqrt(self._prior_var / 2.0 / R) * out

    @property
    def is_markov(self) -> bool:
        return self.kind == "graph" and float(self.nu).is_integer()

    def precision(self) -> sp.csc_matrix:
        """Q = k⁻¹ = (s/σ₀²)(2ν/κ² I + Δ)^ν for the graph kernel with integer ν (003 Eq. 134),
        s = mean diag((2ν/κ² I + Δ)^−ν) by selected inversion (no dense inverse)."""
        if not self.is_markov:
            raise EvrouteError(f"the {self.kind!r} prior with nu={self.nu:g} has no sparse precision "
                               "(only the graph kernel with an integer nu is a Markov random field)")
        return self._gmrf().precision()

    def precision_min_eigenvalue(self) -> float | None:
        return self._gmrf().precision_min_eigenvalue() if self.is_markov else None

    def diag_error_bound(self) -> float:
        if self.representation == "sparse":
            return self._gmrf().diag_error_bound()
        if self._direct and self.kind == "combined" and self._graph_sparse:
            return self._prior_var * self._unit_graph().diag_error_bound() / (float(np.mean(self.graph_diag())) + 1.0)
        return 0.0


def network_prior(net, mean, kind: str = "combined", *, lengthscale: float = 1.0, kappa: float = 1.0,
                  nu: float = 2.0, prior_var: float | None = None) -> NetworkPrior:
    """The paper's prior on ``net`` (see :class:`NetworkPrior`).

    ``prior_var`` defaults to the paper's σ₀² = (:data:`PRIOR_SCALE` σ_det)², σ_det the standard deviation
    of ``mean`` over the edges (003 Sec. 4.1).

    Returns
    -------
    NetworkPrior
        The prior as an operator: ``mean``, ``diag()``, ``rows(idx)``, ``sample(rng)``, and ``precision()`` where it is a Markov random field.
    """
    if prior_var is None:
        sigma_det = float(np.std(np.asarray(mean, dtype=np.float64)))
        if not sigma_det > 0 or not math.isfinite(sigma_det):
            raise EvrouteError("the prior mean is constant: σ_det = 0, give prior_var")
        prior_var = (PRIOR_SCALE * sigma_det) ** 2
    return NetworkPrior(net, mean, kind, lengthscale, kappa, nu, prior_var)
