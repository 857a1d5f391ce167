"""The graph Matérn prior on a road network's line graph (003 Eq. 132–134; Borovitskiy et al.
2021): the Laplacian Δ, the operator P = 2ν/κ² I + Δ, the kernel k_G ∝ P^−ν as a dense matrix
(:func:`graph_kernel`), and as a Gaussian Markov random field (:class:`GraphMaternPrior`: the
sparse precision, its prior variances and fill-reducing order, cached on disk with the network).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from ..cache import cached_arrays
from ..errors import EvrouteError
from ..progress import stage
from ..validate import positive_float
from .kernels import check_kappa, check_nu, graph_matern, incidence_laplacian
from .linalg import (
    METIS_SEED,
    PATCH_BLOCK,
    SparseCholesky,
    local_inverse_diagonal,
    nested_dissection,
)
from .prior import DENSE_MAX_EDGES, Prior, as_index, as_mean, readonly

__all__ = ["graph_laplacian", "graph_matern_operator", "graph_matern_inverse_diagonal", "graph_matern_ordering",
           "GraphMaternPrior", "graph_kernel", "LOCAL_VARIANCES_ABOVE", "LOCAL_VARIANCES_TOL"]


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


def graph_matern_inverse_diagonal(net, nu: int, kappa: float, *, local: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
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
    return readonly(np.asarray(cached_arrays("kernels", params, build)["value"], dtype=np.int64))


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
        self.mean = as_mean(mean)
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
        self._diag = readonly(self._scale * d)
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
        idx = as_index(idx, self.n_edges)
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
            return {"value": graph_matern(graph_laplacian(net), nu=nu, kappa=kappa)}

    params = {"network": net.cache_key, "nu": float(nu), "kappa": float(kappa), "what": "graph_matern"}
    return cached_arrays("kernels", params, build)["value"]
