"""Junctions learnt online: a posterior of each turn's cost beside the edges' model.

Under a truth of edges plus turns (:class:`evroute.bandit.environments.Turns`) the agents are
otherwise handed the junctions' costs. A :class:`TurnBelief` instead starts from a prior mean per
turn (the truth's, a fleet's or the speed change: ``--prior-turns``) and learns each turn from
the cars' costs observed where the agent turns, as the BI baseline learns edges: independent
conjugate Gaussians (paper 003's Bayesian inference, Sec. 4.1, per turn). It answers the index
rules as an edge model does (:meth:`mean_std`, :meth:`sample`, ``n_arms``, ``noise_var``,
``counts``), so a GP-UCB agent takes a lower confidence bound of each turn, GP-TS a draw.

An index below a turn's kinetic bound ψ(e′) − ψ(e) is raised to it (no car's turn at the roads'
typical speeds costs less: :class:`~evroute.bandit.environments.Turns`), as an edge's index is
raised to its physical floor, except where its posterior mean (the fleet's cars', the agent's
own) lies below the bound: then to that mean (:func:`learned_turns`). With every turn at or above
its bound and every edge at or above its floor no cycle creates energy; the cycles the turns held
below their bounds may close are broken for the round (:func:`evroute.bandit.policies.turn_potential`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..errors import EvrouteError
from .environments import Turns

__all__ = ["TurnBelief", "learned_turns"]


class TurnBelief:
    """Independent Gaussian posteriors of the turns' costs (conjugate updates).

    Parameters
    ----------
    prior_mean : array (A,)
        Each turn's prior mean (Wh).
    prior_var : array (A,) or float
        Each turn's prior variance (Wh²; > 0).
    noise_var : float
        One car's cost of a turn about its mean: the observations' variance (Wh²; > 0).
    """

    def __init__(self, prior_mean, prior_var, noise_var: float):
        self.prior_mean = np.array(prior_mean, dtype=np.float64)
        var = np.broadcast_to(np.asarray(prior_var, dtype=np.float64), self.prior_mean.shape)
        if not (np.all(var > 0) and np.isfinite(var).all() and noise_var > 0):
            raise EvrouteError("a turn belief needs positive prior variances and a positive noise variance")
        self.noise_var = float(noise_var)
        self._prec = 1.0 / var  # the posterior precision and precision-weighted mean, per turn
        self._eta = self.prior_mean * self._prec
        self.counts = np.zeros(self.prior_mean.size, dtype=np.int64)

    @property
    def n_arms(self) -> int:
        return int(self.prior_mean.size)

    def update(self, arcs, values) -> None:
        """Observe one car's cost of each turn in ``arcs`` (a turn may repeat)."""
        arcs = np.asarray(arcs, dtype=np.int64)
        y = np.asarray(values, dtype=np.float64)
        np.add.at(self._prec, arcs, 1.0 / self.noise_var)
        np.add.at(self._eta, arcs, y / self.noise_var)
        np.add.at(self.counts, arcs, 1)

    def mean_std(self) -> tuple[np.ndarray, np.ndarray]:
        """The posterior mean and sd of every turn."""
        return self._eta / self._prec, np.sqrt(1.0 / self._prec)

    def sample(self, rng: np.random.Generator, joint: bool = False) -> np.ndarray:
        """One posterior draw of every turn (independent: ``joint`` changes nothing)."""
        mu, sd = self.mean_std()
        return mu + sd * rng.standard_normal(mu.size)


def learned_turns(index, turns: Turns, belief: TurnBelief | None = None) -> Turns:
    """The turns an agent routes with this round: its indices, each at least the lower of the turn's
    kinetic bound ψ(e′) − ψ(e) (:attr:`~evroute.bandit.environments.Turns.bound`) and its posterior
    mean.

    The bound holds for one car at the roads' typical speeds; a turn's mean over the cars of a
    truth can go below it (they brake from, or accelerate to, other speeds than the typical), and a
    learner held to it takes such a turn for dearer than it is for ever (on SUMO's truth that is
    most of a junction learner's regret: scripts/fleet_prior_error.py). So a turn is held only to
    what the cars say, its posterior mean, where that is below the bound: the fleet's cars (a
    prior from drives, :func:`evroute.world.junctions.fleet_turns`) and the agent's own; its
    optimism (a lower confidence bound, a draw) never goes further below. From the speed change
    (never below the bound, :func:`evroute.world.junctions.speed_change_turns`) a turn stays at its
    bound until the agent drove it. The cycles such turns may close are broken for the round by
    the weight rule (:func:`evroute.bandit.policies.turn_potential`, toward the bound). Held below
    the bound only where the agent itself drove (the rule until 2026-11-27) a learner ignored
    what the fleet said of the turns it had not yet taken (on monaco:B from the fleet's turns, the
    best regret 14 % higher than now: docs/reproductions/sumo.md).

    Parameters
    ----------
    index : array (A,)
        The index rule's value of every turn.
    turns : Turns
        The junctions (their bounds).
    belief : TurnBelief, optional
        The agent's posterior of the turns (their means); None: every turn held to its bound.

    Returns
    -------
    Turns
        ``turns`` with ``costs`` the held indices.
    """
    index, bound = np.asarray(index, dtype=np.float64), turns.bound
    if belief is not None:
        bound = np.minimum(bound, belief.mean_std()[0])
    return replace(turns, costs=np.maximum(index, bound))
