"""``--model bi``: independent conjugate Gaussians per edge (the paper's BI baseline,
Åkerblom et al. 2023; 003 Sec. 4.2)."""

from __future__ import annotations

import numpy as np

from ..errors import EvrouteError
from ..specs import declared
from ..validate import positive_float
from .base import JOINT_SAMPLES, PosteriorModel, readonly

__all__ = ["BIModel", "make_bi", "OPTIONS"]

#: ``bi`` has no options.
OPTIONS = ()


class BIModel(PosteriorModel):
    """Independent conjugate Gaussian per edge with known noise (the paper's BI baseline).

    Prior f(e) ~ N(m_e, σ₀,e²); observations r ~ N(f(e), ς²). After n_e observations with
    sum s_e the posterior is Gaussian with

        precision_e = 1/σ₀,e² + n_e/ς²,   mean_e = (m_e/σ₀,e² + s_e/ς²) / precision_e.

    An update costs O(k) for the k observations of a round.

    Parameters
    ----------
    prior : evroute.priors.prior.Prior
        Its mean and its diagonal (the prior variance per edge) are used; correlations
        are ignored (that is the baseline).
    noise_var : float
        Observation noise variance ς².
    """

    capabilities = frozenset({JOINT_SAMPLES})

    def __init__(self, prior, noise_var: float):
        self._m = np.array(prior.mean, dtype=np.float64)
        self.n_arms = int(self._m.size)
        self.noise_var = positive_float("noise_var", noise_var)
        pv = np.array(prior.diag(), dtype=np.float64)
        if pv.shape != (self.n_arms,):
            raise EvrouteError(f"prior variance must have length {self.n_arms}, got shape {pv.shape}")
        if not np.all(np.isfinite(pv)) or np.any(pv <= 0):
            raise EvrouteError("prior variance must be positive and finite for every edge")
        self._prior_prec = 1.0 / pv
        self._counts = np.zeros(self.n_arms, np.int64)
        self._sums = np.zeros(self.n_arms)
        self._mean = self._m.copy()
        self._var = pv.copy()
        self._cache: tuple[np.ndarray, np.ndarray] | None = None

    def update(self, edges, observed) -> None:
        uniq, dc, ds = self._record(edges, observed)
        if uniq.size == 0:
            return
        prec = self._prior_prec[uniq] + self._counts[uniq] / self.noise_var
        self._mean[uniq] = (
            self._m[uniq] * self._prior_prec[uniq] + self._sums[uniq] / self.noise_var
        ) / prec
        self._var[uniq] = 1.0 / prec
        self._cache = None

    def mean_std(self) -> tuple[np.ndarray, np.ndarray]:
        if self._cache is None:
            self._cache = (readonly(self._mean.copy()), readonly(np.sqrt(self._var)))
        return self._cache

    def sample(self, rng: np.random.Generator, joint: bool = False) -> np.ndarray:
        """Posterior draw; the BI posterior covariance is diagonal, so ``joint`` is the
        same as an independent draw."""
        mu, sd = self.mean_std()
        return mu + sd * rng.standard_normal(self.n_arms)


@declared(*OPTIONS)
def make_bi(prior, *, noise_var, seed=0) -> BIModel:
    """Factory of the ``bi`` backend (see :class:`BIModel`); ``seed`` is unused."""
    return BIModel(prior, noise_var)
