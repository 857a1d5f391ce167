"""Per-edge observation noise for every backend, by whitening.

With noise ς_e² = s_e² ς² on edge e (s_e > 0 known), the observations r = f_e + ε_e of f are
those of g = f / s with the same noise ς² on every edge: r / s_e = g_e + ε_e / s_e. The prior of g
is GP(m / s, S⁻¹ K S⁻¹) (S = diag(s)): its rows, diagonal and draws are K's scaled, its sparse
precision S Q S has Q's pattern (the GMRF backends keep their sparse factorisations), so any
backend conditions g exactly as it conditions f with one noise level, and the posterior of f is
S times it: μ_f = s μ_g, σ_f = s σ_g, draws s g̃, covariance blocks s_i s_j Σ_g. Neither the
information gain ln det(I + ς⁻² S⁻¹ K_OO S⁻¹ D) nor the paper's rectification change under it;
the evidence of the data r is that of r / s less Σ ln s_e over the observations.
"""

from __future__ import annotations

import numpy as np

from ..priors.prior import EdgeScaledPrior, Prior
from .base import PosteriorModel, readonly

__all__ = ["WhitenedPrior", "HeteroscedasticModel", "reference_noise_var"]


def reference_noise_var(edge_noise_var) -> float:
    """The one ς² the backends see under per-edge noise: the mean of the per-edge variances (so
    the scales s_e = ς_e / ς are about 1 and a backend's tolerances keep their meaning)."""
    return float(np.mean(np.asarray(edge_noise_var, dtype=np.float64)))


class WhitenedPrior(EdgeScaledPrior):
    """The prior of g = f / s for a prior of f and positive scales s (see the module docstring):
    :class:`evroute.priors.prior.EdgeScaledPrior` with the mean m / s."""

    def __init__(self, base: Prior, scale):
        super().__init__(base, scale)


class HeteroscedasticModel(PosteriorModel):
    """A backend conditioned on g = f / s (its prior a :class:`WhitenedPrior`, its noise ς²), seen
    as a posterior of f under per-edge noise ς_e² = s_e² ς².

    Attributes
    ----------
    inner : PosteriorModel
        The backend on g.
    noise_var : float
        ς², the reference level (the mean of the per-edge variances).
    edge_noise_var : numpy.ndarray
        ς_e² per edge.
    """

    def __init__(self, inner: PosteriorModel, scale):
        self.inner = inner
        self._s = readonly(np.asarray(scale, dtype=np.float64).copy())
        self.n_arms = int(inner.n_arms)
        self.noise_var = float(inner.noise_var)
        self.edge_noise_var = readonly(self.noise_var * self._s ** 2)
        self.capabilities = inner.capabilities
        self._counts = np.zeros(self.n_arms, np.int64)
        self._sums = np.zeros(self.n_arms)
        self._log_scale_sum = 0.0
        self._cache = None

    def update(self, edges, observed) -> None:
        self._record(edges, observed)  # checks the round (first) and keeps counts and sums in Wh
        edges = np.asarray(edges, dtype=np.int64).ravel()
        observed = np.asarray(observed, dtype=np.float64).ravel()
        self.inner.update(edges, observed / self._s[edges])
        self._log_scale_sum += float(np.sum(np.log(self._s[edges])))
        self._cache = None

    def mean_std(self):
        if self._cache is None:
            mu, sd = self.inner.mean_std()
            self._cache = (readonly(np.asarray(mu) * self._s), readonly(np.asarray(sd) * self._s))
        return self._cache

    def sample(self, rng, joint: bool = False):
        return np.asarray(self.inner.sample(rng, joint=joint)) * self._s

    def covariance(self, idx):
        idx = np.asarray(idx, dtype=np.int64)
        return np.asarray(self.inner.covariance(idx)) * np.outer(self._s[idx], self._s[idx])

    @property
    def log_evidence(self) -> float:
        """Ln p(r) = ln p(r / s) − Σ ln s_e over the observations (the change of variables)."""
        return float(self.inner.log_evidence) - self._log_scale_sum

    @property
    def information_logdet(self) -> float:
        return float(self.inner.information_logdet)  # invariant under the whitening

    def diagnostics(self):
        return self.inner.diagnostics()

    def summary(self):
        return {**self.inner.summary(), "edge_noise_std_median_wh": float(np.median(np.sqrt(self.edge_noise_var)))}
