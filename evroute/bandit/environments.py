"""Environments: what the world reveals to the agent, round by round.

An environment owns a truth (:mod:`evroute.bandit.truths`: the expected energy of every edge, how
a traversal is observed), which edges can be driven in each round, and the reference route
regret is measured against. The bandit loop asks it, round by round:

- ``available(t)``: a boolean mask of the edges open in round t (None: all);
- ``observe(t, path)``: noisy energies r = f_t(e) + ε of the driven edges (its own seeded
  noise generator), and ``observe_turns(t, path)`` the junctions' dissipation;
- ``expected(t)``: f_t over all edges;
- ``reference_route(t)`` and ``optimal_energy(t)``: the exact least-energy route of a truth that
  conserves energy (:func:`evroute.roads.walks.least_energy_walk`), else the route the agents' own
  oracle would pick handed f_t (paper 003's clairvoyant route), and its true energy.

:class:`StaticEnvironment` keeps f fixed (paper 003); :class:`RoadEnvironment` adds energies that
drift and roads that close (paper 004): which are open in each round, the closure patterns of
:mod:`evroute.bandit.closures` say (``--truth NAME[closures=SPEC]``).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np

from ..components import CLOSURES, TRUTHS
from ..errors import EvrouteError
from ..roads.walks import least_energy_walk
from ..specs import Component
from ..validate import unit_rate
from .closures import ClosurePattern, parse_closures, register_closures  # noqa: F401  (here too, for plug-ins)
from .policies import route_weights
from .truths import (  # noqa: F401  (the truths' public names: here too, where plug-ins found them)
    RKHS_ANCHORS,
    Truth,
    TruthSetup,
    Turns,
    gp_truth,
    gp_truth_rkhs_norm,
    make_truth,
    noise_at,
    noise_std_value,
    register_truth,
    resolve_truth,
    rkhs_truth,
    truth_kernel,
    truth_names,
)

__all__ = ["Environment", "StaticEnvironment", "RoadEnvironment", "register_closures", "CLOSURES", "ClosurePattern",
           "parse_closures", "Truth", "Turns", "TruthSetup", "register_truth", "truth_kernel", "noise_at",
           "noise_std_value", "truth_names", "make_truth", "TRUTHS", "gp_truth", "gp_truth_rkhs_norm", "rkhs_truth",
           "RKHS_ANCHORS", "resolve_truth"]


class Environment(ABC):
    """The world a route is driven in (see the module docstring)."""

    #: Number of edges E.
    n_edges: int
    #: Observation noise standard deviation ς.
    noise_std: float
    #: The junctions' energies of a truth of edges plus turns (None: edges only).
    turns: Turns | None = None
    #: Whether regret is measured against the exact least-energy route (a truth that conserves
    #: energy) or, as in paper 003, against the route the agents' own weight rule picks when
    #: handed the truth (a truth that may create energy).
    exact: bool = False

    @abstractmethod
    def expected(self, t: int) -> np.ndarray:
        """f_t: the true expected energy of every edge in round t (read-only)."""

    @abstractmethod
    def observe(self, t: int, path: np.ndarray) -> np.ndarray:
        """Noisy energies of the edges of ``path`` driven in round t."""

    def available(self, t: int) -> np.ndarray | None:
        """Edges that can be driven in round t (boolean mask), or None when all can."""
        return None

    @abstractmethod
    def reference_route(self, t: int) -> np.ndarray:
        """The route regret is measured against in round t (on the available edges): the exact
        least-energy route where the truth conserves energy, else the clairvoyant route (the
        agents' oracle handed f_t)."""

    def observe_turns(self, t: int, path: np.ndarray) -> np.ndarray:
        """The dissipation measured at the turns of ``path`` driven in round t (one fewer than its
        edges), for agents that learn the junctions; an environment without turns has none."""
        truth = getattr(self, "_truth", None)
        if self.turns is None or truth is None:
            raise EvrouteError("this environment has no junctions to observe (a truth of edges plus turns has: "
                               "--truth sumo)")
        return truth.observe_turns(self._turn_rng, self.oracle.turn_index(path))

    def route_energy(self, t: int, path) -> float:
        """The true expected energy of driving ``path`` in round t: f_t over its edges, plus its
        turns' where the truth has them."""
        path = np.asarray(path, dtype=np.int64)
        energy = float(self.expected(t)[path].sum())
        if self.turns is not None:
            energy += float(self.turns.costs[self.oracle.turn_index(path)].sum())
        return energy

    def optimal_energy(self, t: int) -> float:
        """True energy of :meth:`reference_route` in round t."""
        return self.route_energy(t, self.reference_route(t))

    def certificate(self) -> dict | None:
        """How the exact least-energy route was found and why it is exact (the last round's;
        :func:`evroute.roads.walks.least_energy_walk`), or None where regret is the paper's."""
        cert = getattr(self, "_certificate", None)
        return None if cert is None else {k: v for k, v in cert.items() if k != "johnson"}

    def _exact_route(self, f, mask) -> np.ndarray:
        """The exact least-energy route under ``f`` on the open edges ``mask`` (a conserving truth):
        Dijkstra on its reduced costs, Johnson's potential kept while the energies stay the same."""
        johnson = self._johnson if getattr(self, "_johnson_of", None) is f else None
        path, cert = least_energy_walk(self.oracle, f, start=self.start, end=self.end, potential=self._truth.potential,
                                       turn_weights=None if self.turns is None else self.turns.dissipation,
                                       available=mask, johnson=johnson)
        self._johnson, self._johnson_of, self._certificate = cert["johnson"], f, cert
        path = np.asarray(path, dtype=np.int64)
        path.flags.writeable = False
        return path


def _as_truth(truth):
    """``(Truth or None, f)``: a :class:`Truth`, or an array of f (the paper's Gaussian
    observations)."""
    own = truth if isinstance(truth, Truth) else None
    f = np.array(own.values if own is not None else truth, dtype=np.float64)
    if f.ndim != 1 or not np.all(np.isfinite(f)):
        raise EvrouteError("the truth must be a 1-d array of finite numbers")
    return own, f


class StaticEnvironment(Environment):
    """A static truth f and its observations (paper 003, Sec. 4.1).

    Regret's reference route: where the truth conserves energy (:attr:`Truth.conserves`), its
    exact least-energy route (Dijkstra on reduced costs, :func:`evroute.roads.walks.least_energy_walk`);
    else (the paper's Gaussian truth, or f given as an array) the one the agents' oracle returns
    when handed f: Dijkstra on the weights of the run's rule
    (:func:`evroute.bandit.policies.route_weights`: paper 003's rectified E[max(0, N(f_e, ς²))] by
    default), so that regret measures learning, not the weight rule.

    Parameters
    ----------
    truth : array (E,) or Truth
        f, the true expected energy of every edge (a :class:`Truth` also says how a traversal
        is observed; an array gets Gaussian noise of ``noise_std``).
    noise_std : float
        ς.
    oracle : evroute.roads.oracle.Oracle
    start, end : int
        Start and end edge of the trip.
    seed : int
        Seeds the noise generator (stream ``[seed, 2]``; the turns' ``[seed, 6]``).
    rectify : bool
        The paper's reference route on the agents' weights (default) or on f itself.
    weigh : callable, optional
        ``weigh(f) -> (edge weights, turn weights)``: the agents' weight rule
        (:func:`evroute.bandit.policies.route_weights` with the run's rule); default paper 003's
        rectified weights.
    """

    def __init__(self, truth, noise_std: float, oracle, start: int, end: int, seed: int, rectify: bool = True,
                 *,
                 weigh=None):
        self._truth, f = _as_truth(truth)
        f.flags.writeable = False
        self._f = f
        self.n_edges = int(f.size)
        self.noise_std = noise_std_value("noise_std", noise_std)
        self.oracle = oracle
        self.start, self.end = int(start), int(end)
        self.rectify = bool(rectify)
        self.turns = self._truth.turns if self._truth is not None else None
        self.exact = self._truth is not None and self._truth.conserves
        self._weigh = weigh or (lambda f: route_weights(f, "rectified", self.noise_std, turns=self.turns))
        self._rng = np.random.default_rng([int(seed), 2])
        self._turn_rng = np.random.default_rng([int(seed), 6])  # its own stream: the edges' draws stay as they were
        self._reference: np.ndarray | None = None

    @property
    def truth(self) -> np.ndarray:
        return self._f

    def expected(self, t: int) -> np.ndarray:
        return self._f

    def observe(self, t: int, path: np.ndarray) -> np.ndarray:
        if self._truth is not None:
            return self._truth.observe(self._rng, path, self._f)
        return self._f[path] + noise_at(self.noise_std, path) * self._rng.standard_normal(len(path))

    def reference_route(self, t: int) -> np.ndarray:
        if self._reference is None:
            if self.exact:
                self._reference = self._exact_route(self._f, None)
                return self._reference
            if self.rectify:
                w, arc = self._weigh(self._f)
            else:
                w, arc = self._f, (None if self.turns is None else self.turns.costs)
            self._reference = np.asarray(self.oracle.shortest_path(w, self.start, self.end, turn_weights=arc).edges,
                                         dtype=np.int64)
            self._reference.flags.writeable = False
        return self._reference


class RoadEnvironment(Environment):
    """Energies that change and roads that close (paper 004's settings on roads).

    - **Drift** ``eps`` > 0: f_{t+1} = m + √(1−ε)(f_t − m) + √ε g_t with g_t a fresh draw of
      GP(0, K) (``sample_dev(rng)``, stream ``[seed, 4, t]``): every f_t is a draw of GP(m, K) and
      Cov(f_t, f_t′) = (1−ε)^{|t−t′|/2} K, the time-varying kernel of Bogunovic et al. (2016)
      used by paper 004. A truth that drifts through a latent field (:attr:`Truth.transform`, the
      log-normal truth) moves its latent so, and f_t = transform(latent_t) stays physical.
    - **Closures**: a :class:`ClosurePattern` (``alternate``, ``random[rate=r]``; the registry
      :data:`CLOSURES`) says which edges are open in each round.

    Regret is measured against each round's own reference route on the open edges (the exact
    least-energy route of a conserving truth, else the agents' oracle handed f_t, as
    :class:`StaticEnvironment`). Rounds are visited in order. ``truth`` may be a :class:`Truth`
    (its :meth:`Truth.observe` draws the observations) or f.
    """

    def __init__(self, truth, mean, sample_dev, noise_std: float, oracle, start: int, end: int, seed: int, *,
                 eps: float = 0.0, closures=None, weigh=None):
        self._truth, f = _as_truth(truth)
        self.turns = self._truth.turns if self._truth is not None else None
        self.exact = self._truth is not None and self._truth.conserves
        self._m = np.asarray(mean, dtype=np.float64)
        self._f, self._t = f, 1
        self._latent = None
        if self._truth is not None and self._truth.transform is not None:
            self._latent = np.array(self._truth.latent, dtype=np.float64)
            sample_dev = self._truth.innovation
        self.n_edges = int(f.size)
        self.noise_std = noise_std_value("noise_std", noise_std)
        self.eps = unit_rate("drift", eps)
        if self.eps > 0 and self._truth is not None and not self._truth.supports_drift:
            raise EvrouteError(f"--truth [drift=...] cannot be layered on the truth {self._truth.description.get('truth')}")
        self._sample_dev = sample_dev
        self.oracle = oracle
        self.start, self.end = int(start), int(end)
        self.seed = int(seed)
        self._weigh = weigh or (lambda f: route_weights(f, "rectified", self.noise_std, turns=self.turns))
        self._rng = np.random.default_rng([self.seed, 2])
        self._turn_rng = np.random.default_rng([self.seed, 6])
        comp = parse_closures(closures) if not isinstance(closures, Component | ClosurePattern) else closures
        if isinstance(comp, Component):
            comp = CLOSURES.get(comp.name).factory(**comp.options)
        self.closures: ClosurePattern | None = comp
        self._masks: dict[int, np.ndarray | None] = {}
        self._refs: dict[int, np.ndarray] = {}
        if self.closures is not None:
            self.closures.attach(self)

    def route_for(self, f, mask) -> np.ndarray:
        """The reference route under energies ``f`` on the open edges ``mask``."""
        return self._route(f, mask)

    def connected(self, mask) -> bool:
        """Whether the trip's ends are connected through the open edges ``mask``."""
        try:
            self.oracle.shortest_path(np.ones(self.n_edges), self.start, self.end, available=mask)
        except EvrouteError:
            return False
        return True

    def _route(self, f, mask) -> np.ndarray:
        if self.exact:
            return self._exact_route(f, mask)
        w, arc = self._weigh(f)
        return np.asarray(self.oracle.shortest_path(w, self.start, self.end, available=mask, turn_weights=arc).edges,
                          dtype=np.int64)

    def _advance(self, t: int) -> None:
        t = int(t)
        if t < self._t:
            raise EvrouteError(f"round {t} was already left behind (now {self._t}): rounds go in order")
        while self._t < t:
            self._t += 1
            if self.eps > 0:
                g = self._sample_dev(np.random.default_rng([self.seed, 4, self._t]))
                if self._latent is not None:  # the latent drifts; f_t follows it, physical
                    self._latent = math.sqrt(1.0 - self.eps) * self._latent + math.sqrt(self.eps) * g
                    self._f = self._truth.transform(self._latent)
                else:
                    self._f = self._m + math.sqrt(1.0 - self.eps) * (self._f - self._m) + math.sqrt(self.eps) * g

    def expected(self, t: int) -> np.ndarray:
        self._advance(t)
        out = self._f.view()
        out.flags.writeable = False
        return out

    def available(self, t: int) -> np.ndarray | None:
        t = int(t)
        if self.closures is None:
            return None
        if t not in self._masks:
            self._masks = {t: self.closures.mask(t, self)}  # (only the current round is kept)
        return self._masks[t]

    def observe(self, t: int, path: np.ndarray) -> np.ndarray:
        f = self.expected(t)
        if self._truth is not None:
            return self._truth.observe(self._rng, path, f)
        return f[path] + noise_at(self.noise_std, path) * self._rng.standard_normal(len(path))

    def reference_route(self, t: int) -> np.ndarray:
        t = int(t)
        if t not in self._refs:
            self._refs = {t: self._route(self.expected(t), self.available(t))}
        return self._refs[t]
