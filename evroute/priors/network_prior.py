"""The paper's prior on a road network (003 App. B.1): GP(m, σ₀² · normalise(k_G·k_f + k_f′)), k_G
the graph Matérn kernel (:mod:`evroute.priors.graph_prior`), k_f and k_f′ Matérn-5/2 kernels on
the edges' context, and its two ablations; as a dense matrix (:func:`network_kernel`) and as the
operator the backends read (:class:`NetworkPrior`, made by :func:`network_prior`), built lazily
from the network, without an E×E matrix on large ones.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from ..errors import EvrouteError
from ..progress import stage
from ..validate import choice, positive_float
from .graph_prior import GraphMaternPrior, graph_kernel
from .kernels import (
    KERNEL_KINDS,
    check_kappa,
    check_lengthscale,
    check_nu,
    combined_kernel,
    matern52,
    standardize_context,
)
from .prior import GMRF_FROM_EDGES, PRIOR_SCALE, Prior, as_index, as_mean, readonly

__all__ = ["NetworkPrior", "network_prior", "network_kernel", "SPARSE_FROM_EDGES", "RANDOM_FEATURES",
           "KERNEL_KINDS"]

#: From this many edges the paper's combined (and the context) prior is never formed as an
#: E×E matrix unless asked for: rows by k_G solves, the truth by random features
#: (:meth:`NetworkPrior.sample_features`). Below it, the dense forms are exact and cached;
#: lowering it would change the truths of the paper's networks (Luxembourg: 5,620 edges).
SPARSE_FROM_EDGES = 10_000
#: Random Fourier features per context kernel in the draws of the combined prior at scale.
RANDOM_FEATURES = 256


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
        self.mean = as_mean(mean)
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
        return np.array(self.graph_kernel()[as_index(idx, self.n_edges)])

    def graph_diag(self) -> np.ndarray:
        """Diag k_G (mean 1)."""
        if self.representation == "sparse":
            return readonly(self._gmrf().diag() / self._prior_var)
        if self._graph_sparse:
            return self._unit_graph().diag()
        return readonly(np.diagonal(self.graph_kernel()).copy())

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
                self._K = readonly(network_kernel(self.net, self.kind, self.lengthscale, kappa=self.kappa, nu=self.nu,
                                                   prior_var=self._prior_var))
        return self._K

    def diag(self) -> np.ndarray:
        if self.representation == "sparse":
            return self._gmrf().diag()
        if self._direct:
            g = self.graph_diag() if self.kind == "combined" else np.zeros(self.n_edges)
            return readonly(self._prior_var * (g + 1.0) / (float(np.mean(g)) + 1.0))
        return readonly(np.diagonal(self.dense()).copy())

    def rows(self, idx) -> np.ndarray:
        if self.representation == "sparse":
            return self._gmrf().rows(idx)
        idx = as_index(idx, self.n_edges)
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
