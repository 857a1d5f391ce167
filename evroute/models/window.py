"""``--model window[eps=…,every=…,base=…]``: time-varying energies on any network, by a
sliding window of staggered restarts (Bogunovic et al. 2016's R-GP-UCB, made smoother; the
option the wave2-notes name for large networks, outside paper 004's theorem).

Under the drift f_{t+1} = m + √(1−ε)(f_t − m) + √ε g_t every f_t is a draw of the same prior
GP(m, K), and data older than a few 1/ε rounds say little about today's energies. This
backend keeps two ordinary static posteriors (``base``: ``exact`` by default, so the sparse
GMRF form on large graph-kernel networks), each restarted from the prior every H rounds,
half a period apart, and answers from the one holding more rounds: the posterior of the last
H/2 to H rounds' data, treated as current. H = ``every``, by default ⌈1/ε⌉ (after which the
correlation (1 − ε)^{H/2} has fallen to about e^{−1/2}). The cost is twice the base's, plus a
fresh base every H/2 rounds.

It is an approximation (it forgets abruptly, and treats a window's data as if they were all
current); the exact time-varying posterior is ``kalman`` (dense, E ≤ 20,000). ``benchmarks/
time_varying.py`` measures both against each other on Monaco.

``log_evidence``: the chain rule with each round's predictive from the answering posterior
(its joint block where the base gives one, else independent marginals), like the exact
backends' evidence but with that posterior's forgetting.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import EvrouteError
from ..specs import Option, declared
from ..validate import nonneg_int, unit_rate
from .base import (
    COVARIANCE,
    EVIDENCE,
    JOINT_SAMPLES,
    TIME_VARYING,
    PosteriorModel,
    grouped_log_density,
)
from .registry import make_model, resolve_model

__all__ = ["WindowPosterior", "make_window", "OPTIONS"]



def _base(name, value) -> str:
    """A registered static backend's spec (checked here, where it is declared: not first when
    the window builds it)."""
    v = str(value).strip().lower()
    comp = resolve_model(v)  # one line naming the backends for an unknown one
    if comp.name in ("window", "kalman", "eigen"):
        raise EvrouteError(f"{name} must be a static backend (exact, svgp, nystrom, ...), got {value!r}")
    return v


def _every(name, value) -> int:
    """0 (⌈1/ε⌉) or at least 2 rounds: two staggered windows."""
    every = nonneg_int(name, value)
    if every == 1:
        raise EvrouteError(f"{name} must be 0 (1/eps rounds) or at least 2 rounds (two staggered windows)")
    return every


class WindowPosterior(PosteriorModel):
    """Two staggered restarted static posteriors (see the module docstring)."""

    def __init__(self, prior, noise_var: float, *, eps: float = 0.01, every: int = 0, base: str = "exact",
                 seed: int = 0):

        self.n_arms = int(prior.n_edges)
        self.noise_var = float(noise_var)
        self.eps = unit_rate("eps", eps)
        every = _every("every", every)
        if every == 0:
            every = max(2, math.ceil(1.0 / self.eps)) if self.eps > 0 else 0
        self.every = every
        self._make = lambda: make_model(base, prior, noise_var=noise_var, seed=seed)
        self._models = [self._make(), self._make()]
        self._age = [0, 0]  # rounds each has seen since its restart
        self._t = 0
        self._counts = np.zeros(self.n_arms, np.int64)
        self._sums = np.zeros(self.n_arms)
        self.log_evidence = 0.0

    @property
    def _active(self) -> PosteriorModel:
        return self._models[0] if self._age[0] >= self._age[1] else self._models[1]

    def update(self, edges, observed) -> None:
        uniq, dc, ds, ss = self._record_round(edges, observed)
        if uniq.size:
            active = self._active
            mu, sd = active.mean_std()
            try:
                S = np.array(active.covariance(uniq), dtype=np.float64)
            except EvrouteError:
                S = np.diag(sd[uniq] ** 2)
            S[np.diag_indices_from(S)] += self.noise_var / dc
            self.log_evidence += grouped_log_density(ds / dc - mu[uniq], S, dc, within_ss=ss, noise_var=self.noise_var)
            for m in self._models:
                m.update(edges, observed)
        self._t += 1
        self._age = [a + 1 for a in self._age]
        if self.every:
            half = self.every // 2
            if self._t % self.every == 0:
                self._models[0], self._age[0] = self._make(), 0
            if self._t % self.every == half:
                self._models[1], self._age[1] = self._make(), 0

    @property
    def capabilities(self) -> frozenset:
        """Evidence and time-varying inputs, with the covariance blocks and joint draws of its base."""
        return frozenset({EVIDENCE, TIME_VARYING}) | (self._active.capabilities & {COVARIANCE, JOINT_SAMPLES})

    def mean_std(self):
        return self._active.mean_std()

    def sample(self, rng: np.random.Generator, joint: bool = False) -> np.ndarray:
        return self._active.sample(rng, joint=joint)

    def covariance(self, idx) -> np.ndarray:
        return self._active.covariance(idx)

    def diagnostics(self) -> dict[str, float]:
        return {"window_rounds": float(max(self._age))}


#: Options of ``--model window[...]``.
OPTIONS = (
    Option("eps", unit_rate, 0.01, "forgetting rate the window is sized for (paper 004's kernel; 0: never restart)"),
    Option("every", _every, 0, "restart period H in rounds, 0 or at least 2 (0: ceil(1/eps)); answers use the last "
           "H/2 to H rounds"),
    Option("base", _base, "exact", "the static backend restarted (exact: dense or sparse GMRF by itself)"),
)


@declared(*OPTIONS)
def make_window(prior, *, noise_var, seed=0, eps=0.01, every=0, base="exact") -> WindowPosterior:
    """Factory of the ``window`` backend."""
    return WindowPosterior(prior, noise_var, eps=eps, every=every, base=base, seed=seed)
