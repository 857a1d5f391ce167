"""Environments: the truth and what the world reveals to the agent.

An environment owns the true expected energy of every edge in every round, the observation
noise, which edges can be driven in each round, and the clairvoyant reference route that
regret is measured against. The bandit loop asks it, round by round:

- ``available(t)``: a boolean mask of the edges open in round t (None: all);
- ``observe(t, path)``: noisy energies r = f_t(e) + ε of the driven edges (its own seeded
  noise generator);
- ``expected(t)``: f_t over all edges;
- ``reference_route(t)`` and ``optimal_energy(t)``: the route the agent's own oracle would
  pick if handed f_t, and its true energy.

:class:`StaticEnvironment` is paper 003's: a static f, one draw of GP(E_det, k) (003 Sec. 4.1;
:func:`gp_truth`), Gaussian noise with ς = 0.1 σ_det. Time-varying energies, RKHS-bounded
truths and road closures subclass :class:`Environment`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np

from .cache import cached_arrays, hash_bytes
from .errors import EvrouteError
from .policies import rectified_mean
from .progress import stage
from .specs import Option
from .validate import nonneg_float, positive_float, positive_int

__all__ = ["Environment", "StaticEnvironment", "RoadEnvironment", "parse_closures", "CLOSURES", "TRUTH_KINDS", "gp_truth", "gp_truth_rkhs_norm", "rkhs_truth", "RKHS_ANCHORS"]

#: Anchor edges of the RKHS truth (paper 000 §7 uses 20 inducing points).
RKHS_ANCHORS = 20
#: The kinds of ground truth (``--truth``), a draw from the GP prior (paper 003) or an
#: RKHS-bounded function (paper 000 §7), with their options (``rkhs[B=10,anchors=20]``; B required).
TRUTH_KINDS = {"gp": (), "rkhs": (
    Option("b", positive_float, None, "B, the RKHS norm of f - m (paper 000 Sec. 7: 10)"),
    Option("anchors", positive_int, RKHS_ANCHORS, "anchor edges of f - m (paper 000 Sec. 7: 20 points)"))}


class Environment(ABC):
    """The world a route is driven in (see the module docstring)."""

    #: Number of edges E.
    n_edges: int
    #: Observation noise standard deviation ς.
    noise_std: float

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
        """The clairvoyant route of round t (the oracle handed f_t, on the available edges)."""

    def optimal_energy(self, t: int) -> float:
        """True energy of :meth:`reference_route` in round t."""
        return float(self.expected(t)[self.reference_route(t)].sum())

class StaticEnvironment(Environment):
    """A static truth f and Gaussian observation noise (paper 003, Sec. 4.1).

    The reference route is the one the rectified oracle returns when handed f: Dijkstra on
    E[max(0, N(f_e, ς²))] (SPEC §3), so that regret measures learning, not rectification.

    Parameters
    ----------
    truth : array (E,)
        f, the true expected energy of every edge.
    noise_std : float
        ς.
    oracle : evroute.oracle.Oracle
    start, end : int
        Start and end edge of the trip.
    seed : int
        Seeds the noise generator (stream ``[seed, 2]``).
    rectify : bool
        Reference route on rectified weights (default, as the agents) or on f itself.
    """

    def __init__(self, truth, noise_std: float, oracle, start: int, end: int, seed: int, rectify: bool = True):
        f = np.array(truth, dtype=np.float64)
        if f.ndim != 1 or not np.all(np.isfinite(f)):
            raise EvrouteError("the truth must be a 1-d array of finite numbers")
        f.flags.writeable = False
        self._f = f
        self.n_edges = int(f.size)
        self.noise_std = nonneg_float("noise_std", noise_std)
        self.oracle = oracle
        self.start, self.end = int(start), int(end)
        self.rectify = bool(rectify)
        self._rng = np.random.default_rng([int(seed), 2])
        self._reference: np.ndarray | None = None

    @property
    def truth(self) -> np.ndarray:
        return self._f

    def expected(self, t: int) -> np.ndarray:
        return self._f

    def observe(self, t: int, path: np.ndarray) -> np.ndarray:
        return self._f[path] + self.noise_std * self._rng.standard_normal(len(path))

    def reference_route(self, t: int) -> np.ndarray:
        if self._reference is None:
            w = rectified_mean(self._f, self.noise_std) if self.rectify else self._f
            self._reference = np.asarray(self.oracle.shortest_path(w, self.start, self.end).edges, dtype=np.int64)
            self._reference.flags.writeable = False
        return self._reference

def gp_truth(net, prior_mean, prior_var: float, seed: int, lengthscale: float = 1.0) -> np.ndarray:
    """f = E_det + L z: one draw of GP(E_det, k) with the paper's combined kernel (003 Sec. 4.1),
    cached on disk per (network, seed, σ₀², E_det, lengthscale). On networks of
    :data:`evroute.prior.SPARSE_FROM_EDGES` edges or more it is drawn without an E×E matrix
    (:meth:`evroute.prior.NetworkPrior.sample_features`).

    ``lengthscale`` is the context lengthscale of the kernel (the paper's is 1; κ = 1, ν = 2).
    The same z (stream ``[seed, 1]``) for every lengthscale: the seed fixes the draw, the
    lengthscale its smoothness.
    """
    from .prior import NetworkPrior

    prior_mean = np.asarray(prior_mean, dtype=np.float64)
    prior = NetworkPrior(net, prior_mean, "combined", lengthscale, 1.0, 2.0, prior_var)

    def build():
        with stage(f"drawing the ground truth of seed {seed} on {net.n_edges:,} edges (cached)"):
            return {"value": prior.sample(np.random.default_rng([seed, 1]))}

    params = {"network": net.cache_key, "seed": int(seed), "prior_var": float(prior_var),
              "prior_mean": hash_bytes(np.ascontiguousarray(prior_mean).tobytes())[:20], "what": "truth-v1"}
    if float(lengthscale) != 1.0:  # (ℓ = 1 keeps the key of the entries cached before this option)
        params["lengthscale"] = float(lengthscale)
    if prior.sampler != "dense":  # large networks: drawn without an E×E matrix
        params["sampler"] = prior.sampler
    return cached_arrays("truth", params, build)["value"]


def gp_truth_rkhs_norm(net, prior_mean, prior_var: float, seed: int, lengthscale: float = 1.0) -> float:
    """‖f − m‖ in the RKHS of the truth's kernel K for :func:`gp_truth`'s draw: f − m = L z with
    L Lᵀ = K (jitter included), so ‖f − m‖²_K = zᵀz, z the same standard normals (stream
    ``[seed, 1]``; E draws, no solve). NaN where the truth is drawn by random features (from
    :data:`evroute.prior.SPARSE_FROM_EDGES` edges): its norm needs an E×E solve. About √E."""
    from .prior import NetworkPrior

    prior = NetworkPrior(net, np.asarray(prior_mean, dtype=np.float64), "combined", lengthscale, 1.0, 2.0, prior_var)
    if prior.sampler != "dense":
        return float("nan")
    z = np.random.default_rng([int(seed), 1]).standard_normal(net.n_edges)
    return float(np.sqrt(z @ z))


def rkhs_truth(net, prior_mean, prior_var: float, seed: int, B: float, anchors: int = RKHS_ANCHORS,
               lengthscale: float = 1.0) -> np.ndarray:
    """An RKHS-bounded truth (paper 000 §7's construction, on edges): f = m + b Σ_i w_i K(·, z_i)
    with ``anchors`` distinct random edges z_i, w ~ N(0, I) and b = B/√(wᵀ K_ZZ w), so that
    ‖f − m‖_K = B exactly in the RKHS of the truth's kernel K (the paper's combined kernel,
    σ₀², context lengthscale ``lengthscale``). Rows of K only: no E×E matrix. Stream
    ``[seed, 3]``."""
    from .prior import NetworkPrior

    B = positive_float("B", B)
    anchors = positive_int("anchors", anchors)
    m = np.asarray(prior_mean, dtype=np.float64)
    if anchors > m.size:
        raise EvrouteError(f"rkhs truth: {anchors} anchors but the network has {m.size} edges")
    prior = NetworkPrior(net, m, "combined", lengthscale, 1.0, 2.0, prior_var)
    rng = np.random.default_rng([int(seed), 3])
    Z = np.sort(rng.choice(m.size, size=anchors, replace=False))
    w = rng.standard_normal(anchors)
    KZ = np.asarray(prior.rows(Z), dtype=np.float64)
    norm2 = float(w @ KZ[:, Z] @ w)
    if not norm2 > 0:
        raise EvrouteError("rkhs truth: the anchors' kernel block is degenerate; choose another seed")
    return m + (B / np.sqrt(norm2)) * (KZ.T @ w)


def _rate(name, value) -> float:
    rate = positive_float(name, value)
    if not rate < 1:
        raise EvrouteError(f"closures random: {name} must be below 1, got {rate}")
    return rate


#: Road-closure patterns (``--closures``) and their options: the best corridor closed in every
#: other round (paper 004's alternating domain, on roads) or each edge closed at random.
CLOSURES = {"alternate": (), "random": (Option("rate", _rate, 0.05, "share of the edges closed each round"),)}


def parse_closures(spec) -> tuple[str, dict] | None:
    """``None``, ``alternate`` or ``random[rate=0.05]`` → (kind, options); one-line errors."""
    from .specs import parse_kind

    if spec in (None, "", "none"):
        return None
    return parse_kind(spec, "closures", CLOSURES, "random[rate=0.05]")


class RoadEnvironment(Environment):
    """Energies that change and roads that close (paper 004's settings on roads).

    - **Drift** ``eps`` > 0: f_{t+1} = m + √(1−ε)(f_t − m) + √ε g_t with g_t a fresh draw of
      GP(0, K) (``sample_dev(rng)``, stream ``[seed, 4, t]``): every f_t is a draw of GP(m, K) and
      Cov(f_t, f_t′) = (1−ε)^{|t−t′|/2} K, the time-varying kernel of Bogunovic et al. (2016)
      used by paper 004.
    - **Closures**: ``alternate`` closes the middle third of the round-1 clairvoyant route (a
      sixth, a twelfth if no detour remains) in every even round, the "best corridor" (an
      error if no detour exists); ``random[rate=r]`` closes each other edge with probability r each round
      (stream ``[seed, 5, t]``; a draw that disconnects the trip is redrawn, up to 20 times,
      then the round is left open).

    Regret is measured against each round's own clairvoyant route on the open edges (the
    rectified oracle handed f_t, as :class:`StaticEnvironment`). Rounds are visited in order.
    """

    def __init__(self, truth, mean, sample_dev, noise_std: float, oracle, start: int, end: int, seed: int, *,
                 eps: float = 0.0, closures=None):
        f = np.array(truth, dtype=np.float64)
        if f.ndim != 1 or not np.all(np.isfinite(f)):
            raise EvrouteError("the truth must be a 1-d array of finite numbers")
        self._m = np.asarray(mean, dtype=np.float64)
        self._f, self._t = f, 1
        self.n_edges = int(f.size)
        self.noise_std = nonneg_float("noise_std", noise_std)
        self.eps = nonneg_float("drift", eps)
        if not self.eps < 1:
            raise EvrouteError(f"drift must be in [0, 1), got {eps}")
        self._sample_dev = sample_dev
        self.oracle = oracle
        self.start, self.end = int(start), int(end)
        self.seed = int(seed)
        self._rng = np.random.default_rng([self.seed, 2])
        self.closures = parse_closures(closures) if not isinstance(closures, tuple) else closures
        self._masks: dict[int, np.ndarray | None] = {}
        self._refs: dict[int, np.ndarray] = {}
        self._corridor = None
        if self.closures and self.closures[0] == "alternate":
            route = self._route(f, None)
            for frac in (1 / 3, 1 / 6, 1 / 12):  # the middle of the best route, as wide as still leaves a detour
                k = max(1, int(round(frac * route.size)))
                mid = (route.size - k) // 2
                corridor = np.setdiff1d(route[mid:mid + k], [self.start, self.end])
                mask = np.ones(self.n_edges, bool)
                mask[corridor] = False
                if corridor.size and self._connected(mask):
                    self._corridor = corridor
                    break
            else:
                raise EvrouteError("closures alternate: closing the middle of the best route leaves no route "
                                   "between the trip's ends; choose another route or random closures")

    def _route(self, f, mask) -> np.ndarray:
        w = rectified_mean(f, self.noise_std)
        return np.asarray(self.oracle.shortest_path(w, self.start, self.end, available=mask).edges, dtype=np.int64)

    def _connected(self, mask) -> bool:
        try:
            self.oracle.shortest_path(np.ones(self.n_edges), self.start, self.end, available=mask)
        except EvrouteError:
            return False
        return True

    def _advance(self, t: int) -> None:
        t = int(t)
        if t < self._t:
            raise EvrouteError(f"round {t} was already left behind (now {self._t}): rounds go in order")
        while self._t < t:
            self._t += 1
            if self.eps > 0:
                g = self._sample_dev(np.random.default_rng([self.seed, 4, self._t]))
                self._f = self._m + math.sqrt(1.0 - self.eps) * (self._f - self._m) + math.sqrt(self.eps) * g

    def expected(self, t: int) -> np.ndarray:
        self._advance(t)
        out = self._f.view()
        out.flags.writeable = False
        return out

    def available(self, t: int) -> np.ndarray | None:
        t = int(t)
        if not self.closures:
            return None
        if t not in self._masks:
            kind, opts = self.closures
            mask = None
            if kind == "alternate":
                if t % 2 == 0:
                    mask = np.ones(self.n_edges, bool)
                    mask[self._corridor] = False
            else:
                rng = np.random.default_rng([self.seed, 5, t])
                for _ in range(20):
                    m = rng.random(self.n_edges) >= opts["rate"]
                    m[[self.start, self.end]] = True
                    if self._connected(m):
                        mask = m
                        break
            self._masks = {t: mask}  # (only the current round is kept)
        return self._masks[t]

    def observe(self, t: int, path: np.ndarray) -> np.ndarray:
        f = self.expected(t)
        return f[path] + self.noise_std * self._rng.standard_normal(len(path))

    def reference_route(self, t: int) -> np.ndarray:
        t = int(t)
        if t not in self._refs:
            self._refs = {t: self._route(self.expected(t), self.available(t))}
        return self._refs[t]
