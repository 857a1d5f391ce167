"""Junctions learnt online: a posterior of each turn's dissipation beside the edges' model.

Under a truth of edges plus turns (:class:`evroute.bandit.environments.Turns`) a turn costs a
change of kinetic level, which telescopes along any route and so never decides between two
routes, plus a dissipation D ≥ 0 (:mod:`evroute.world.junctions`). An agent knows a prior of each
turn's D (:class:`TurnPrior`: physics', or a fleet's drives) and observes one car's D at every turn
it drives; :class:`TurnBelief` is the posterior, a Gaussian process over the turns whose kernel
couples the turns of one junction and the turns of one kind (straight, right, left, U-turn):

    k(a, b) = s_a s_b (ρ_kind [kind a = kind b] + ρ_junction [junction a = junction b]
                       + (1 − ρ_kind − ρ_junction) [a = b]),

s_a² the prior variance of turn a. With ρ_kind = ρ_junction = 0 the turns are independent, the
conjugate update per turn (paper 003's Bayesian inference, Sec. 4.1, per turn). It answers the
index rules as an edge model does (:meth:`TurnBelief.mean_std`, :meth:`TurnBelief.sample`,
``n_arms``, ``noise_var``, ``counts``), so GP-UCB takes a lower confidence bound of each turn and
GP-TS a draw; the index is held at 0 (:func:`turn_weights`: no car's turn dissipates less).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as la

from ..errors import EvrouteError

__all__ = ["TurnPrior", "TurnBelief", "turn_weights", "TURN_KINDS", "TURN_KERNEL"]

#: The kinds of turn (:func:`evroute.world.junctions.turn_geometry`), by index.
TURN_KINDS = ("straight", "right", "left", "u-turn")

#: The default shares of a turn's prior variance common to its junction's turns and to the turns of
#: its kind (:class:`TurnBelief`).
TURN_KERNEL = {"junction": 0.3, "kind": 0.1}


@dataclass
class TurnPrior:
    """An agent's prior of the junctions: each legal turn's dissipation (Wh).

    Attributes
    ----------
    mean : numpy.ndarray (A,)
        The prior mean per turn (in the order of the network's ``conn_src``).
    var : numpy.ndarray (A,) or None
        The prior variance per turn (Wh²); None: known exactly (the truth's, an oracle), nothing
        to learn.
    junction, kind : numpy.ndarray (A,), optional
        Each turn's junction and kind (:data:`TURN_KINDS`), for the kernel over turns.
    noise_var : float, optional
        One car's spread about a turn's mean (Wh²; a fleet's), where known.
    counts : numpy.ndarray (A,), optional
        The cars a prior's turn is measured by (a fleet's drives).
    source : str
        Where it comes from: ``physics``, ``drives`` or ``oracle`` (the truth's own).
    """

    mean: np.ndarray
    var: np.ndarray | None = None
    junction: np.ndarray | None = None
    kind: np.ndarray | None = None
    noise_var: float | None = None
    counts: np.ndarray | None = None
    source: str = "physics"

    @property
    def known(self) -> bool:
        """Whether the turns are known exactly (no variance: the oracle)."""
        return self.var is None


class TurnBelief:
    """The Gaussian-process posterior of the turns' dissipation (see the module docstring).

    Exact inference in weight space: the kernel is a sum of random effects, one per kind b_k and
    one per junction b_j (unit variance, scaled by s_a √ρ) and one per turn, so a turn's mean of
    n_a observations is m_a + φ_aᵀ θ + ε_a + noise with θ = (b_kinds, b_junctions seen),
    ε_a ~ N(0, s_a² ρ_turn) and noise ~ N(0, σ²/n_a). θ's posterior has the precision
    P = I + Σ_a φ_a φ_aᵀ / v_a (v_a = s_a² ρ_turn + σ²/n_a), a few hundred dimensions however
    many turns the network has; each turn's marginal follows from θ's and, for a turn driven, its
    own observations (Rasmussen & Williams 2006, Sec. 2.1, the weight-space view).

    Parameters
    ----------
    prior : TurnPrior
        The prior (its ``var`` must be given).
    noise_var : float
        One car's dissipation about its turn's mean: the observations' variance (Wh²; > 0).
    junction_share, kind_share : float
        ρ_junction and ρ_kind, in [0, 1) with their sum below 1 (0, 0: independent turns).
    """

    def __init__(self, prior: TurnPrior, noise_var: float, *, junction_share: float = 0.0, kind_share: float = 0.0):
        if prior.var is None:
            raise EvrouteError("a turn belief needs the turns' prior variances")
        self.prior_mean = np.array(prior.mean, dtype=np.float64)
        var = np.broadcast_to(np.asarray(prior.var, dtype=np.float64), self.prior_mean.shape)
        if not (np.all(var > 0) and np.isfinite(var).all() and noise_var > 0):
            raise EvrouteError("a turn belief needs positive prior variances and a positive noise variance")
        rho_j, rho_k = float(junction_share), float(kind_share)
        if rho_j < 0 or rho_k < 0 or rho_j + rho_k >= 1:
            raise EvrouteError("the kernel over turns needs shares >= 0 that sum to below 1")
        if (rho_j > 0 and prior.junction is None) or (rho_k > 0 and prior.kind is None):
            raise EvrouteError("the kernel over turns needs each turn's junction and kind")
        self.noise_var = float(noise_var)
        self._sd = np.sqrt(var)
        self._rho = (rho_k, rho_j, 1.0 - rho_j - rho_k)
        a = self.prior_mean.size
        self._kind = np.zeros(a, np.int64) if prior.kind is None else np.asarray(prior.kind, np.int64)
        self._junction = np.zeros(a, np.int64) if prior.junction is None else np.asarray(prior.junction, np.int64)
        self.counts = np.zeros(a, dtype=np.int64)
        self._sums = np.zeros(a)
        self._cache = None

    @property
    def n_arms(self) -> int:
        return int(self.prior_mean.size)

    def update(self, arcs, values) -> None:
        """Observe one car's dissipation at each turn in ``arcs`` (a turn may repeat)."""
        arcs = np.asarray(arcs, dtype=np.int64)
        np.add.at(self.counts, arcs, 1)
        np.add.at(self._sums, arcs, np.asarray(values, dtype=np.float64))
        self._cache = None

    def mean_std(self) -> tuple[np.ndarray, np.ndarray]:
        """The posterior mean and sd of every turn's dissipation."""
        if self._cache is None:
            self._cache = self._posterior()
        return self._cache

    def _posterior(self) -> tuple[np.ndarray, np.ndarray]:
        rho_k, rho_j, rho_e = self._rho
        sd, m = self._sd, self.prior_mean
        seen = np.flatnonzero(self.counts)
        mean, var = m.copy(), sd**2 * (rho_k + rho_j + rho_e)
        if seen.size == 0:
            return mean, np.sqrt(var)
        n = self.counts[seen]
        r = self._sums[seen] / n - m[seen]  # each driven turn's mean residual
        v = sd[seen] ** 2 * rho_e + self.noise_var / n
        if rho_k == 0 and rho_j == 0:  # independent turns: the conjugate update, per turn
            share = sd[seen] ** 2 * rho_e / v
            mean[seen] = m[seen] + share * r
            var[seen] = sd[seen] ** 2 * rho_e * (1.0 - share)
            return mean, np.sqrt(var)
        n_kind = int(self._kind.max()) + 1
        junctions, j_of_seen = np.unique(self._junction[seen], return_inverse=True)
        p = n_kind + junctions.size
        rows = np.concatenate([self._kind[seen], n_kind + j_of_seen])  # φ's two non-zeros per driven turn
        cols = np.concatenate([np.arange(seen.size)] * 2)
        vals = np.concatenate([sd[seen] * np.sqrt(rho_k), sd[seen] * np.sqrt(rho_j)])
        phi = np.zeros((p, seen.size))
        np.add.at(phi, (rows, cols), vals)
        P = np.eye(p) + (phi / v) @ phi.T
        c, lower = la.cho_factor(P, lower=True)
        theta = la.cho_solve((c, lower), phi @ (r / v))
        C = la.cho_solve((c, lower), np.eye(p))
        # every turn: its kind's and (where seen) its junction's effects
        j_all = np.searchsorted(junctions, self._junction)
        j_seen = (j_all < junctions.size) & (junctions[np.minimum(j_all, junctions.size - 1)] == self._junction)
        jj = n_kind + np.minimum(j_all, junctions.size - 1)
        k = self._kind
        q = sd * (np.sqrt(rho_k) * theta[k] + np.where(j_seen, np.sqrt(rho_j) * theta[jj], 0.0))
        s = sd**2 * (rho_k * C[k, k] + np.where(j_seen, rho_j * C[jj, jj] + 2.0 * np.sqrt(rho_k * rho_j) * C[k, jj],
                                                 rho_j))
        mean = m + q
        var = s + sd**2 * rho_e
        share = sd[seen] ** 2 * rho_e / v  # a driven turn: its own observations beside θ
        mean[seen] = m[seen] + (1.0 - share) * q[seen] + share * r
        var[seen] = (1.0 - share) ** 2 * s[seen] + sd[seen] ** 2 * rho_e * (1.0 - share)
        return mean, np.sqrt(np.maximum(var, 0.0))

    def sample(self, rng: np.random.Generator, joint: bool = False) -> np.ndarray:
        """One posterior draw of every turn (each turn from its marginal: ``joint`` changes nothing)."""
        mu, sd = self.mean_std()
        return mu + sd * rng.standard_normal(mu.size)


def turn_weights(index) -> np.ndarray:
    """The oracle's weight of each turn from its index (a lower bound, a draw, a mean of its
    dissipation): held at 0, since no car's turn dissipates less."""
    return np.maximum(np.asarray(index, dtype=np.float64), 0.0)
