"""``--model kalman[eps=…]``: the exact posterior under time-varying energies (paper 004).

With the forgetting rate ε the kernel over (edge, round) is K(e, e′)·(1 − ε)^{|t−t′|/2}
(Bogunovic et al. 2016, the kernel of paper 004). Repeat visits are then different inputs,
so the counts-and-sums aggregation of the other backends does not hold. Because
(1 − ε)^{|t−t′|/2} is an AR(1) correlation, f_{t+1} − m = √(1−ε)(f_t − m) + √ε g_t with g_t ~ GP(0, K),
and the posterior is a Kalman filter on the E edges (spec confidence-bounds §2.3):

- measurement (the round's observations, aggregated per edge within the round, which is exact
  because they share the round): S = P_BB + diag(ς²/c_B), G = P_{:,B} S⁻¹,
  μ += G(ȳ_B − μ_B), P −= G P_{B,:};
- prediction to the next round: μ ← m + √(1−ε)(μ − m), P ← (1−ε) P + ε K.

mean_std() and sample() give the prediction for the round to come. The covariance is dense
E×E (O(E²B) a round): for networks of at most :data:`KALMAN_MAX_EDGES` edges. With ε = 0 it
is the exact static posterior (tested), and for ε > 0 it equals the batch GP with the
time-varying kernel (tested on a small graph).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg as sla

from ..errors import EvrouteError
from ..priors.linalg import jittered_cholesky
from ..specs import Option, declared
from ..validate import unit_rate
from .base import (
    COVARIANCE,
    EVIDENCE,
    JOINT_SAMPLES,
    TIME_VARYING,
    PosteriorModel,
    grouped_log_density,
    readonly,
)

__all__ = ["KalmanPosterior", "make_kalman", "OPTIONS", "KALMAN_MAX_EDGES"]

#: The dense state covariance holds E² floats: refused above this many edges.
KALMAN_MAX_EDGES = 20_000


class KalmanPosterior(PosteriorModel):
    """The posterior under the (1−ε)^{|t−t′|/2} time-varying kernel (see the module docstring)."""

    capabilities = frozenset({COVARIANCE, JOINT_SAMPLES, EVIDENCE, TIME_VARYING})

    def __init__(self, prior, noise_var: float, *, eps: float = 0.01, seed: int = 0):
        E = int(prior.n_edges)
        if E > KALMAN_MAX_EDGES:
            raise EvrouteError(f"--model kalman keeps a dense E×E covariance: {E:,} edges is more than "
                               f"{KALMAN_MAX_EDGES:,} ({8 * E * E / 1e9:.0f} GB)")
        self.n_arms = E
        self.noise_var = float(noise_var)
        self.eps = unit_rate("eps", eps)
        self._m = np.array(prior.mean, dtype=np.float64)
        self._K = np.asarray(prior.dense(), dtype=np.float64)
        self._mu = self._m.copy()
        self._P = self._K.copy()
        self._counts = np.zeros(E, np.int64)
        self._sums = np.zeros(E)
        #: ln p(every observation so far) under this model (chain rule over rounds; see
        #: :func:`evroute.models.base.grouped_log_density`)
        self.log_evidence = 0.0
        self._cache = None

    def update(self, edges, observed) -> None:
        uniq, dc, ds, ss = self._record_round(edges, observed)
        if uniq.size:
            S = self._P[np.ix_(uniq, uniq)] + np.diag(self.noise_var / dc)
            resid = ds / dc - self._mu[uniq]
            self.log_evidence += grouped_log_density(resid, S, dc, within_ss=ss, noise_var=self.noise_var)
            L = sla.cholesky(S, lower=True, check_finite=False)
            PB = self._P[:, uniq]
            X = sla.cho_solve((L, True), PB.T, check_finite=False)  # S⁻¹ P_{B,:}
            self._mu = self._mu + X.T @ resid
            self._P = self._P - PB @ X
            self._P = 0.5 * (self._P + self._P.T)
        if self.eps > 0:  # to the next round
            a = math.sqrt(1.0 - self.eps)
            self._mu = self._m + a * (self._mu - self._m)
            self._P = (1.0 - self.eps) * self._P + self.eps * self._K
        self._cache = None

    def mean_std(self):
        if self._cache is None:
            self._cache = (readonly(self._mu.copy()), readonly(np.sqrt(np.maximum(np.diag(self._P), 0.0))))
        return self._cache

    def covariance(self, idx) -> np.ndarray:
        idx = np.asarray(idx, dtype=np.int64).ravel()
        return np.array(self._P[np.ix_(idx, idx)])

    def sample(self, rng: np.random.Generator, joint: bool = False) -> np.ndarray:
        if not joint:
            return PosteriorModel.sample(self, rng, joint=False)

        L = jittered_cholesky(self._P, what="Kalman covariance")
        return self._mu + L @ rng.standard_normal(self.n_arms)


#: Options of ``--model kalman[...]``.
OPTIONS = (Option("eps", unit_rate, 0.01, "forgetting rate of the (1 - eps)^(|t - t'|/2) kernel (paper 004; "
                  "0: static energies)"),)


@declared(*OPTIONS)
def make_kalman(prior, *, noise_var, seed=0, eps=0.01) -> KalmanPosterior:
    """Factory of the ``kalman`` backend."""
    return KalmanPosterior(prior, noise_var, eps=eps, seed=seed)
