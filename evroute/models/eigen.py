"""``--model eigen[eps=…,rank=…]``: time-varying energies on large networks, by a Kalman filter
on the weights of a truncated eigenbasis of the prior kernel (paper 004's kernel
K(e, e′)·(1 − ε)^{|t−t′|/2}; spec wave2-notes "Paper 004 in evroute").

The prior covariance is split as K = Φ Λ Φᵀ + R: the ``rank`` largest eigenpairs (Φ, Λ) and a
remainder R. The model is

    f_t(e) − m(e) = φ_e w_t + u_t(e),   φ_e = Φ[e] Λ^½,
    w_{t+1} = √(1−ε) w_t + √ε g_t,  g_t ~ N(0, I_r),
    u_t(e) ~ N(0, r_e) independent over edges and rounds, r_e = K_ee − ‖φ_e‖²,

i.e. the top-r part keeps the time-varying kernel exactly and the remainder keeps every
edge's prior variance (the "diagonal correction" of FITC; it is learnt from nothing and is
white in time). The state w has covariance P (r×r): a round's measurement on its distinct
edges B (aggregated within the round, exact because they share the round's inputs) is a
rank-|B| Kalman update with S = Φ_B P Φ_Bᵀ + diag(r_B + ς²/c_B); the prediction to the next
round is w ← √(1−ε) w, P ← (1−ε) P + ε I. Cost O(|B| r² + |B|² r + |B|³) a round, and
O(E r²) for all edges' standard deviations: no E×E matrix.

With rank = E the remainder is zero and the model is the exact time-varying posterior
(:mod:`evroute.models.kalman`; tested equal). Below that it is an approximation whose
quality is the share of the prior variance the eigenbasis keeps (``explained_variance``).
Measured (``benchmarks/time_varying.py``, docs/reproductions/paper-004.md): for evroute's kernels that share is
small (the graph Matérn spectrum is flat at its top: 512 of Luxembourg's 5,620 pairs keep
43 %), and the unlearnt remainder leaves errors of several σ₀ on the most driven edges, so
the agents prefer :mod:`evroute.models.window` on large networks.

Eigenpairs: from the dense covariance (networks up to :data:`evroute.priors.prior.DENSE_MAX_EDGES`),
or, for a Gaussian Markov random field prior (the graph kernel with an integer ν), by
Lanczos on K = Q⁻¹ with one sparse solve per step (no dense matrix). Other priors are refused.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg as sla

from ..errors import EvrouteError
from ..priors.linalg import SparseSolver
from ..priors.prior import DENSE_MAX_EDGES
from ..specs import Option, declared
from ..validate import positive_int, unit_rate
from .base import (
    COVARIANCE,
    EVIDENCE,
    JOINT_SAMPLES,
    TIME_VARYING,
    PosteriorModel,
    grouped_log_density,
    readonly,
)

__all__ = ["EigenKalmanPosterior", "kernel_eigenpairs", "make_eigen", "OPTIONS"]



def kernel_eigenpairs(prior, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``rank`` largest eigenvalues (descending) and eigenvectors (E×rank, columns of unit
    norm, each signed so that its largest-magnitude entry is positive) of the prior covariance.

    Dense priors: LAPACK's eigh on the E×E covariance (all of it when rank = E, else the top
    subset). Gaussian Markov random field priors (:attr:`evroute.priors.prior.Prior.is_markov`):
    ARPACK's Lanczos on K = Q⁻¹, each step one solve with the sparse Cholesky factor of Q,
    from a fixed start vector (deterministic).
    """
    E = int(prior.n_edges)
    rank = positive_int("rank", rank)
    if rank > E:
        raise EvrouteError(f"rank {rank} is more than the {E:,} edges")
    if prior.representation == "sparse" or (E > DENSE_MAX_EDGES and prior.is_markov):
        if rank >= E - 1:
            raise EvrouteError(f"rank {rank} of {E:,} edges: use the dense prior (or --model kalman) for a full basis")
        import scipy.sparse.linalg as spla


        solver = SparseSolver(prior.precision(), what="prior precision")
        op = spla.LinearOperator((E, E), matvec=lambda v: solver.solve(np.asarray(v, dtype=np.float64).ravel()),
                                 dtype=np.float64)
        v0 = np.random.default_rng([0, 7]).standard_normal(E)
        vals, vecs = spla.eigsh(op, k=rank, which="LA", v0=v0, tol=1e-10)
    elif prior.is_markov or E <= DENSE_MAX_EDGES:
        K = np.asarray(prior.dense(), dtype=np.float64)
        vals, vecs = sla.eigh(K, subset_by_index=[E - rank, E - 1], check_finite=False)
    else:
        raise EvrouteError(f"the eigenbasis of a {E:,}-edge prior needs its dense covariance (at most "
                           f"{DENSE_MAX_EDGES:,} edges) or a sparse precision (the graph kernel with an integer nu)")
    order = np.argsort(-vals, kind="stable")
    vals, vecs = np.maximum(vals[order], 0.0), vecs[:, order]
    flip = vecs[np.argmax(np.abs(vecs), axis=0), np.arange(vecs.shape[1])] < 0
    vecs[:, flip] *= -1.0
    return vals, vecs


class EigenKalmanPosterior(PosteriorModel):
    """The time-varying posterior in a truncated eigenbasis (see the module docstring).

    Attributes
    ----------
    explained_variance : float
        Σ_i λ_i / tr K: the share of the prior variance the basis keeps (1 at rank = E).
    log_evidence : float
        ln p(every observation so far) under this model (chain rule over rounds).
    """

    capabilities = frozenset({COVARIANCE, JOINT_SAMPLES, EVIDENCE, TIME_VARYING})

    def __init__(self, prior, noise_var: float, *, eps: float = 0.01, rank: int = 256, seed: int = 0):
        E = int(prior.n_edges)
        self.n_arms = E
        self.noise_var = float(noise_var)
        self.eps = unit_rate("eps", eps)
        rank = min(positive_int("rank", rank), E)
        vals, vecs = kernel_eigenpairs(prior, rank)
        self.rank = rank
        self._m = np.array(prior.mean, dtype=np.float64)
        self._phi = np.ascontiguousarray(vecs * np.sqrt(vals))  # E×r: φ_e = Φ[e] Λ^½
        kdiag = np.asarray(prior.diag(), dtype=np.float64)
        self._resid = np.maximum(kdiag - np.einsum("ij,ij->i", self._phi, self._phi), 0.0)
        if rank == E:
            self._resid[:] = 0.0  # a full basis: nothing is left over (rounding only)
        self.explained_variance = float(vals.sum() / kdiag.sum())
        self._w = np.zeros(rank)
        self._P = np.eye(rank)
        self._counts = np.zeros(E, np.int64)
        self._sums = np.zeros(E)
        self.log_evidence = 0.0
        self._cache = None

    def update(self, edges, observed) -> None:
        uniq, dc, ds, ss = self._record_round(edges, observed)
        if uniq.size:
            self._measure(uniq, dc, ds, ss)
        if self.eps > 0:  # to the next round
            self._w = math.sqrt(1.0 - self.eps) * self._w
            self._P = (1.0 - self.eps) * self._P
            self._P[np.diag_indices_from(self._P)] += self.eps
        self._cache = None

    def _measure(self, uniq, dc, ds, ss) -> None:
        H = self._phi[uniq]  # |B|×r
        HP = H @ self._P
        S = HP @ H.T + np.diag(self._resid[uniq] + self.noise_var / dc)
        S = 0.5 * (S + S.T)
        resid = ds / dc - (self._m[uniq] + H @ self._w)
        self.log_evidence += grouped_log_density(resid, S, dc, within_ss=ss, noise_var=self.noise_var)
        cf = sla.cho_factor(S, lower=True, check_finite=False)
        X = sla.cho_solve(cf, HP, check_finite=False)  # S⁻¹ H P
        self._w = self._w + X.T @ resid
        self._P = self._P - HP.T @ X
        self._P = 0.5 * (self._P + self._P.T)

    def mean_std(self):
        if self._cache is None:
            mu = self._m + self._phi @ self._w
            C = _psd_sqrt(self._P)
            G = self._phi @ C
            var = np.einsum("ij,ij->i", G, G) + self._resid
            self._cache = (readonly(mu), readonly(np.sqrt(np.maximum(var, 0.0))))
        return self._cache

    def covariance(self, idx) -> np.ndarray:
        idx = np.asarray(idx, dtype=np.int64).ravel()
        H = self._phi[idx]
        cov = H @ self._P @ H.T
        cov[np.diag_indices_from(cov)] += self._resid[idx]
        return 0.5 * (cov + cov.T)

    def sample(self, rng: np.random.Generator, joint: bool = False) -> np.ndarray:
        if not joint:
            return PosteriorModel.sample(self, rng, joint=False)
        mu = self.mean_std()[0]
        z = rng.standard_normal(self.rank)
        u = rng.standard_normal(self.n_arms)
        return mu + self._phi @ (_psd_sqrt(self._P) @ z) + np.sqrt(self._resid) * u

    def diagnostics(self) -> dict[str, float]:
        return {"explained_variance": self.explained_variance}


def _psd_sqrt(P: np.ndarray) -> np.ndarray:
    """A C with C Cᵀ = P for a symmetric positive semi-definite P (Cholesky, else eigh)."""
    try:
        return np.linalg.cholesky(P)
    except np.linalg.LinAlgError:
        vals, vecs = np.linalg.eigh(P)
        return vecs * np.sqrt(np.maximum(vals, 0.0))


#: Options of ``--model eigen[...]``.
OPTIONS = (
    Option("eps", unit_rate, 0.01, "forgetting rate of the (1 - eps)^(|t - t'|/2) kernel (paper 004; 0: static)"),
    Option("rank", positive_int, 256, "eigenpairs kept (O(r^2 L + r^3) a round; rank = E is exact)"),
)


@declared(*OPTIONS)
def make_eigen(prior, *, noise_var, seed=0, eps=0.01, rank=256) -> EigenKalmanPosterior:
    """Factory of the ``eigen`` backend."""
    return EigenKalmanPosterior(prior, noise_var, eps=eps, rank=rank, seed=seed)
