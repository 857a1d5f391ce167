"""Priors over the expected energy of every edge, as operators (003 App. B.1): the interface and
the wrappers.

A prior is the Gaussian process GP(m, k) restricted to the E edges of a network: a mean
vector m and a covariance k, handed to the posterior backends as one object. Backends ask
it for what they need, never for more:

- ``diag()``: k(e, e) for every edge (length E);
- ``rows(idx)``: k(idx, ·), an |idx|×E block (SVGP, Nyström dictionaries);
- ``dense()``: the whole E×E matrix, only where it fits (the ``exact`` backend);
- ``sample(rng)``: one draw of f ~ GP(m, k) over all edges (ground truths);
- ``precision()``: the sparse precision k⁻¹, for priors that are Gaussian Markov random
  fields (the graph Matérn kernel with integer ν, independent edges).

Implementations here: :class:`DiagonalPrior` (independent edges: the BI baseline),
:class:`DensePrior` (a covariance matrix in memory: tests, user-supplied kernels),
:class:`PointsPrior` (a kernel over points), and the wrappers of another prior
(:class:`ShiftedPrior`, :class:`ScaledPrior`, :class:`EdgeScaledPrior`,
:class:`VehicleScalePrior`). The paper's σ₀² · normalise(k_G·k_f + k_f′) on a road network and
its two ablations are :class:`evroute.priors.network_prior.NetworkPrior`; the graph Matérn
kernel as a Gaussian Markov random field is :class:`evroute.priors.graph_prior.GraphMaternPrior`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from ..errors import EvrouteError
from ..progress import stage
from ..validate import positive_float
from .linalg import jittered_cholesky, nested_dissection

__all__ = ["Prior", "DiagonalPrior", "DensePrior", "VehicleScalePrior", "EdgeScaledPrior", "PointsPrior", "rbf_kernel",
           "ShiftedPrior", "ScaledPrior", "DENSE_MAX_EDGES", "GMRF_FROM_EDGES", "PRIOR_SCALE", "NOISE_SCALE",
           "readonly", "as_mean", "as_index"]

#: σ₀ = 0.25 σ_det: the prior standard deviation of the paper (003 Sec. 4.1).
PRIOR_SCALE = 0.25
#: ς = 0.1 σ_det: the observation noise standard deviation of the paper (003 Sec. 4.1).
NOISE_SCALE = 0.1



#: ``dense()`` refuses networks with more edges: E² float64 would exceed ~13 GB.
DENSE_MAX_EDGES = 40_000
#: A :class:`evroute.priors.network_prior.NetworkPrior` with the graph kernel and an integer ν works from its sparse
#: precision (:class:`evroute.priors.graph_prior.GraphMaternPrior`; the ``exact`` backend then conditions the GMRF)
#: from this many edges on, densely below. Measured (``benchmarks/scale.py``, docs/performance-scale.md,
#: the scaling ladder): from 1k edges the sparse form builds faster (Luxembourg 0.4 s vs 5.0 s)
#: and runs GP-UCB and GP-BayesUCB faster per round (Luxembourg gp-ucb 0.049 vs 0.074 s),
#: GP-TS about as fast; the two agree to ~1e-10. (:mod:`evroute.priors.network_prior` reads it.)
GMRF_FROM_EDGES = 1_000


def readonly(a: np.ndarray) -> np.ndarray:
    """``a`` itself, made read-only (the views a prior hands out)."""
    a.flags.writeable = False
    return a


def as_mean(mean) -> np.ndarray:
    """A prior mean checked and copied: a read-only, non-empty 1-d float64 array of finite numbers."""
    m = np.array(mean, dtype=np.float64, copy=True)
    if m.ndim != 1 or m.size == 0:
        raise EvrouteError(f"prior mean must be a non-empty 1-d array, got shape {m.shape}")
    if not np.all(np.isfinite(m)):
        raise EvrouteError("prior mean contains NaN or infinite values")
    return readonly(m)


def as_index(idx, n: int) -> np.ndarray:
    """Edge indices checked: a 1-d int64 array of values in 0..n-1 (a scalar becomes one index)."""
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
        idx = as_index(idx, self.n_edges)
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
        return readonly(self.rows(np.arange(self.n_edges)))

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
        :data:`evroute.priors.graph_prior.LOCAL_VARIANCES_ABOVE` edges). A posterior that starts from diag() carries it."""
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
            self._ordering = readonly(np.asarray(self._compute_ordering(), dtype=np.int64))
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
        self.mean = as_mean(mean)
        v = np.asarray(var, dtype=np.float64)
        if v.ndim == 0:
            v = np.full(self.n_edges, float(v))
        if v.shape != (self.n_edges,):
            raise EvrouteError(f"prior variance must be a scalar or have length {self.n_edges}, got shape {v.shape}")
        if not np.all(np.isfinite(v)) or np.any(v <= 0):
            raise EvrouteError("prior variance must be positive and finite")
        self._var = readonly(v.copy())

    def diag(self) -> np.ndarray:
        return self._var

    def rows(self, idx) -> np.ndarray:
        idx = as_index(idx, self.n_edges)
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
        self.mean = as_mean(mean)
        X = np.ascontiguousarray(points, dtype=np.float64)
        if X.ndim != 2 or X.shape[0] != self.n_edges or not np.all(np.isfinite(X)):
            raise EvrouteError(f"points must be a finite ({self.n_edges}, d) array, got shape {X.shape}")
        self.points = readonly(X)
        self.kernel = kernel
        d = np.concatenate([np.einsum("ii->i", np.asarray(kernel(X[i:i + 512], X[i:i + 512]), dtype=np.float64))
                            for i in range(0, X.shape[0], 512)]) if X.shape[0] else np.zeros(0)
        if not np.all(np.isfinite(d)) or np.any(d < 0):
            raise EvrouteError("the kernel has a negative or non-finite diagonal on these points")
        self._diag = readonly(d)

    def diag(self) -> np.ndarray:
        return self._diag

    def rows(self, idx) -> np.ndarray:
        idx = as_index(idx, self.n_edges)
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
        self.mean = as_mean(mean)
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
        return readonly(self.c * np.asarray(self._base.diag()))

    def rows(self, idx) -> np.ndarray:
        return self.c * np.asarray(self._base.rows(idx))

    def dense(self) -> np.ndarray:
        if self._dense is None:
            self._dense = readonly(self.c * np.asarray(self._base.dense()))
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
        self._s = readonly(s.copy())
        self._w = readonly(1.0 / s)
        self.mean = readonly(np.asarray(base.mean, dtype=np.float64) * self._w) if mean is None else as_mean(mean)
        if self.mean.size != base.n_edges:
            raise EvrouteError(f"mean has {self.mean.size} entries, the prior {base.n_edges} edges")
        # a draw: the base's, rescaled about the new mean (exactly the base's × 1/s where the mean is the base's / s)
        self._offset = self.mean - np.asarray(base.mean, dtype=np.float64) * self._w
        self._Q = None

    def diag(self) -> np.ndarray:
        return readonly(np.asarray(self._base.diag(), dtype=np.float64) * self._w ** 2)

    def rows(self, idx) -> np.ndarray:
        idx = np.asarray(idx, dtype=np.int64)
        return np.asarray(self._base.rows(idx), dtype=np.float64) * self._w[idx, None] * self._w[None, :]

    def block(self, idx) -> np.ndarray:
        idx = np.asarray(idx, dtype=np.int64)
        return np.asarray(self._base.block(idx), dtype=np.float64) * np.outer(self._w[idx], self._w[idx])

    def dense(self) -> np.ndarray:
        self._check_dense()
        return readonly(np.asarray(self._base.dense(), dtype=np.float64) * np.outer(self._w, self._w))

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
    part of m a fleet measured beyond this vehicle's physics (a prior file of ``evroute prior fit``,
    its vehicle scale), a scales that part only. Served on priors held densely or by rows; a sparse-precision prior is refused (its
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
            raise EvrouteError("a vehicle scale (prior fit --vehicle-scale) is served on priors held densely or by "
                               f"rows (networks below {GMRF_FROM_EDGES:,} edges); this prior is a sparse precision: "
                               "use the combined kernel, or fit the prior file with --vehicle-scale 0")
        self._base = base
        self.scale_sd = positive_float("vehicle scale sd", scale_sd)
        self.mean = base.mean
        self._m = np.asarray(base.mean, dtype=np.float64)
        self._d = self._m if direction is None else np.asarray(direction, dtype=np.float64)
        if self._d.shape != self._m.shape:
            raise EvrouteError(f"the vehicle scale's direction has {self._d.size} values for {self._m.size} edges")
        self._dense = None

    def diag(self) -> np.ndarray:
        return readonly(np.asarray(self._base.diag(), dtype=np.float64) + self.scale_sd ** 2 * self._d ** 2)

    def rows(self, idx) -> np.ndarray:
        idx = as_index(idx, self.n_edges)
        return np.asarray(self._base.rows(idx), dtype=np.float64) + self.scale_sd ** 2 * np.outer(self._d[idx], self._d)

    def dense(self) -> np.ndarray:
        if self._dense is None:
            self._check_dense()
            self._dense = readonly(np.asarray(self._base.dense(), dtype=np.float64)
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
        self.mean = as_mean(mean)
        K = np.ascontiguousarray(cov, dtype=np.float64)
        E = self.n_edges
        if K.shape != (E, E):
            raise EvrouteError(f"kernel matrix must have shape ({E}, {E}), got {K.shape}")
        self._K = readonly(K)
        self._diag = readonly(np.diagonal(K).copy())
        if not np.all(np.isfinite(self._diag)) or np.any(self._diag < 0):
            raise EvrouteError("kernel matrix has a negative or non-finite diagonal")
        _check_symmetric(K, float(np.max(self._diag)))

    def diag(self) -> np.ndarray:
        return self._diag

    def rows(self, idx) -> np.ndarray:
        return self._K[as_index(idx, self.n_edges)]

    def dense(self) -> np.ndarray:
        return self._K
