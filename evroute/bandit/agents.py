"""Agents: a policy, its posterior model(s) and its call to the route oracle.

An agent is what the bandit loop talks to (besides the environment). Each round it
chooses a route, ``select(t, available, rng) -> Decision``, and learns from what it drove,
``observe(route, values)``. Keeping the oracle call inside the agent lets one agent hold
several posteriors (one per candidate prior, picking the best (route, prior) pair) or
re-rank a few candidate routes, without the loop knowing.

:class:`IndexAgent` is paper 003's agent (Algorithm 1–2): one posterior, one index rule
(GP-UCB, GP-BayesUCB, GP-TS, greedy; :mod:`evroute.bandit.policies`), rectified edge weights and
Dijkstra. Agents are created by policy name from a registry (``gp-ucb``, ``bi-ts``, ...);
new families register their own names with :func:`register_agent`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar

from ..components import POLICIES
from ..errors import EvrouteError
from ..models import (
    COVARIANCE,
    EVIDENCE,
    INFORMATION_GAIN,
    JOINT_SAMPLES,
    make_model,
    require_capability,
    resolve_model,
)
from ..priors.prior import DiagonalPrior, ScaledPrior, ShiftedPrior
from ..specs import Component, Option, parse_spec
from ..validate import choice, flag, in_range, nonneg_float, positive_float, positive_int
from .bounds import DMM_GRID, confidence_widths, information_logdet, q_from_mean, rtilde2
from .policies import (
    BETA_RULES,
    MODEL_FAMILIES,
    RULES,
    make_policy,
    model_noise_std,
    route_weights,
    turn_potential,
)

__all__ = ["Decision", "Agent", "IndexAgent", "BoundAgent", "PathBoundAgent", "PEAgent", "lower_bound_weights",
           "pe_beta", "pe_path_beta", "pe_xi", "AgentSetup", "register_agent", "unregister_agent", "agent_names", "make_agent",
           "agent_options", "policy_family", "resolve_policy", "POLICIES", "LOWER_CONFIDENCE_BOUND", "ONE_NOISE_LEVEL",
           "AGENT_NEEDS"]


@dataclass
class Decision:
    """An agent's choice for one round.

    Attributes
    ----------
    path : int64 array
        The route: edge ids in driving order.
    beta : float
        The confidence parameter β_t used (NaN for rules without one).
    index : float array
        The index μ̃ of each edge of ``path`` before rectification (a lower confidence bound
        or a posterior draw): what the agent believed the edge could cost at best.
    mean, std : float array
        The agent's posterior mean and standard deviation of each edge of ``path`` before
        the round's update.
    prior_mean : float array
        The agent's prior mean of each edge of ``path``.
    """

    path: np.ndarray
    beta: float
    index: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    prior_mean: np.ndarray


class Agent(ABC):
    """Chooses a route each round and learns from the energies it measures."""

    @abstractmethod
    def select(self, t: int, available: np.ndarray | None, rng: np.random.Generator) -> Decision:
        """The route for round ``t`` (≥ 1) using only edges where ``available`` is True (None: all)."""

    @abstractmethod
    def observe(self, path: np.ndarray, values: np.ndarray) -> None:
        """Learn from the energies ``values`` measured on the edges of ``path``."""

    @abstractmethod
    def mean_std(self) -> tuple[np.ndarray, np.ndarray]:
        """The agent's current posterior mean and standard deviation of every edge (for the run files)."""

    @property
    @abstractmethod
    def n_distinct(self) -> int:
        """Number of distinct edges observed so far."""

    def diagnostics(self) -> dict[str, float]:
        """Scalars about the last round, logged as extra columns of ``rounds.parquet`` (the
        same keys every round); none by default."""
        return {}

    def tables(self) -> dict[str, dict[str, list]]:
        """Extra tables of the run, written as ``<name>.parquet`` (columns as lists); none by default."""
        return {}

    def summary(self) -> dict:
        """Extra entries of the run's ``summary.json``; none by default."""
        return {}


class IndexAgent(Agent):
    """One posterior model and one index rule (paper 003, Algorithm 1–2).

    Each round: per-edge indices μ̃ from the rule (:meth:`evroute.bandit.policies.Policy.indices`),
    the oracle's weights by the weight rule (:func:`evroute.bandit.policies.route_weights`: paper 003's
    rectified U = E[max(0, N(μ̃, ς²))], Algorithm 2 line 3, or the floor-and-potential rule that
    keeps regeneration), Dijkstra from the start to the end edge over the available edges, the
    junctions' known costs added where the truth has turns.

    Parameters
    ----------
    policy : evroute.bandit.policies.Policy
    model : evroute.models.PosteriorModel
    oracle : evroute.roads.oracle.Oracle
    start, end : int
        Start and end edge of the trip.
    prior_mean : array (E,)
        The model's prior mean (logged with each observation).
    rectify : bool
        Weigh the indices by ``weights`` (default); False hands μ̃ to the oracle as it is (it
        must then be non-negative).
    weights : {"rectified", "potential"}
        The weight rule; ``potential`` needs ``floor`` and ``potential`` (Wh per edge) and, with
        turns, ``turn_potential`` (:func:`evroute.bandit.policies.turn_potential`).
    turns : evroute.bandit.environments.Turns, optional
        The junctions' costs, known to the agent (the truth's), added to its routes.
    """

    def __init__(self, policy, model, oracle, start: int, end: int, prior_mean, rectify: bool = True, *,
                 weights: str = "rectified", floor=None, potential=None, turns=None, turn_potential=None):
        self.policy = policy
        self.model = model
        self.oracle = oracle
        self.start, self.end = int(start), int(end)
        self.prior_mean = np.asarray(prior_mean, dtype=np.float64)
        self.rectify = bool(rectify)
        self.weights, self.floor, self.potential, self.turns = weights, floor, potential, turns
        self.turn_potential = turn_potential

    def select(self, t, available, rng) -> Decision:
        mu, sd = self.model.mean_std()
        idx, beta = self.policy.indices(self.model, t, rng)
        if self.rectify:
            weights, arc = route_weights(idx, self.weights, model_noise_std(self.model), floor=self.floor,
                                         potential=self.potential, turns=self.turns, turn_potential=self.turn_potential)
        else:
            weights, arc = idx, None
        path = np.asarray(self.oracle.shortest_path(weights, self.start, self.end, available=available,
                                                    turn_weights=arc).edges, dtype=np.int64)
        return Decision(path, float(beta), np.asarray(idx, dtype=np.float64)[path], mu[path].copy(),
                        sd[path].copy(), self.prior_mean[path])

    def observe(self, path, values) -> None:
        self.model.update(path, values)

    def mean_std(self):
        return self.model.mean_std()

    def diagnostics(self):
        return self.model.diagnostics()

    def summary(self) -> dict:
        return self.model.summary()

    @property
    def n_distinct(self) -> int:
        return self.model.n_distinct

    def __repr__(self) -> str:
        return f"IndexAgent({self.policy!r}, {type(self.model).__name__})"


def lower_bound_weights(lcb, floor, potential) -> np.ndarray:
    """Dijkstra weights from per-edge lower bounds of the energy: max(LCB, floor) − potential,
    clipped at 0. ``floor`` is a lower bound of the energy itself (so the max stays one) and
    ``potential`` sums to the same constant along every route of the trip (so the shortest
    route is unchanged); see :func:`evroute.physics.energy.energy_floor_wh`."""
    return np.maximum(np.maximum(lcb, floor) - potential, 0.0)


def bound_weights(lcb, floor, potential, turns=None, turn_potential=None):
    """The oracle's (edge, turn) weights of a bound agent: :func:`lower_bound_weights` without
    turns; with a truth's turns (known costs), the potential rule of
    :func:`evroute.bandit.policies.route_weights` on max(LCB, floor), the turns' costs reweighted by
    their Johnson potential, so that a route's weight is its energy under the bounds (edges plus
    turns) less a constant of the trip. Returns ``(edge weights, turn weights or None)``."""
    if turns is None:
        return lower_bound_weights(lcb, floor, potential), None
    return route_weights(np.maximum(lcb, floor), "potential", 0.0, floor=floor, potential=potential, turns=turns, turn_potential=turn_potential)


def _bound_route(oracle, weights, arc, start, end, available) -> tuple[np.ndarray, float]:
    """Dijkstra on a bound agent's weights: the route and its weight, turns included."""
    r = oracle.shortest_path(weights, start, end, available=available, turn_weights=arc)
    return np.asarray(r.edges, dtype=np.int64), float(r.cost)


class BoundAgent(Agent):
    """Paper 000's frequentist confidence bounds as edge weights: ``gp-amm``, ``gp-dmm``,
    ``gp-ay``, ``gp-igp`` (:mod:`evroute.bandit.bounds`).

    Energy is a cost, so the index is the lower bound LCB_e = max_a μ_a(e) − w_a s_a(e) over the
    rule's noise levels a (one posterior model each: DMM keeps five, as the authors' code
    does). Rectification (paper 003's E[max(0, ·)]) would lift it above the bound, so instead
    the weights are max(LCB_e, floor_e) − potential_e, clipped at 0: floor is a physical lower
    bound of the edge's energy (so the max is still a lower bound of any physical energy) and
    the potential sums to a constant along every route between the trip's ends (so the
    shortest route is unchanged); see :func:`evroute.physics.energy.energy_floor_wh`. The logged index
    is the LCB itself, for coverage checks.

    The information gain ln det(I + D^½K_OO D^½/ς²) over the distinct observed edges O is the
    sum of the rounds' batch increments ln det(I + D_t^½ Σ_{B|t−1} D_t^½/ς²), not the looser
    per-edge (Hadamard) sum: the exact backend accumulates them from its update
    (``information_logdet``); for other backends it is recomputed from one |O|×|O| Cholesky.
    An empty confidence set (R̃²(a) < 0 at some a)
    is logged in ``empty_set`` and its width taken as 0, never a crash.
    """

    def __init__(self, rule: str, models: dict, noise_var: float, prior, oracle, start: int, end: int, *,
                 B: float, delta: float = 0.01, eta: float = 0.002, energy_floor=None, potential=None, turns=None,
                 turn_potential=None):
        self.rule = rule
        self.turns, self.turn_potential = turns, turn_potential  # a truth's junctions: known costs
        self.models = models  # noise level a → posterior model (ς² itself among them)
        self.noise_var = float(noise_var)
        if self.noise_var not in models:
            raise EvrouteError("a bound agent needs the model of the noise variance itself")
        self.prior = prior
        self.oracle = oracle
        self.start, self.end = int(start), int(end)
        self.prior_mean = np.asarray(prior.mean, dtype=np.float64)
        self.B, self.delta, self.eta = float(B), float(delta), float(eta)
        E = self.prior_mean.size
        self.floor = np.full(E, -np.inf) if energy_floor is None else np.asarray(energy_floor, dtype=np.float64)
        self.potential = np.zeros(E) if potential is None else np.asarray(potential, dtype=np.float64)
        self._logdet = 0.0
        self._diag = {"bound_beta": float("nan"), "logdet": 0.0, "empty_set": 0.0}

    @property
    def base(self):
        return self.models[self.noise_var]

    def _widths(self) -> dict:
        counts = self.base.counts
        seen = np.flatnonzero(counts)
        n = counts[seen].astype(np.float64)
        q = None
        empty = False
        if self.rule == "dmm":
            r = self.base.sums[seen] / n - self.prior_mean[seen]
            q = {a: q_from_mean(n, r, m.mean_std()[0][seen] - self.prior_mean[seen]) for a, m in self.models.items()}
            empty = any(rtilde2(a, qa, q[self.noise_var], noise_var=self.noise_var, logdet=self._logdet, delta=self.delta, B=self.B) < 0
                        for a, qa in q.items())
        w = confidence_widths(self.rule, logdet=self._logdet, B=self.B, delta=self.delta, noise_var=self.noise_var,
                              n_obs=int(n.sum()), eta=self.eta, q=q)
        self._diag = {"bound_beta": float(w.get(self.noise_var, float("nan"))), "logdet": float(self._logdet),
                      "empty_set": float(empty)}
        return w

    def lower_bounds(self) -> np.ndarray:
        """LCB_e for every edge (the tightest over the rule's noise levels)."""
        lcb = None
        for a, wa in self._widths().items():
            mu, sd = self.models[a].mean_std()
            v = mu - wa * sd
            lcb = v if lcb is None else np.maximum(lcb, v)
        return lcb

    def select(self, t, available, rng) -> Decision:
        mu, sd = self.base.mean_std()
        lcb = self.lower_bounds()
        weights, arc = bound_weights(lcb, self.floor, self.potential, self.turns, self.turn_potential)
        path, _ = _bound_route(self.oracle, weights, arc, self.start, self.end, available)
        beta = self._diag["bound_beta"]
        return Decision(path, beta * beta if np.isfinite(beta) else float("nan"), lcb[path].copy(), mu[path].copy(),
                        sd[path].copy(), self.prior_mean[path])

    def observe(self, path, values) -> None:
        for m in self.models.values():
            m.update(path, values)
        if self.base.offers(INFORMATION_GAIN):  # the exact backend keeps it from its own update
            self._logdet = float(self.base.information_logdet)
        else:
            seen = np.flatnonzero(self.base.counts)
            self._logdet = information_logdet(self.prior.block(seen), self.base.counts[seen], self.noise_var)

    def mean_std(self):
        return self.base.mean_std()

    def diagnostics(self):
        return dict(self._diag)

    @property
    def n_distinct(self) -> int:
        return self.base.n_distinct

    def __repr__(self) -> str:
        return f"BoundAgent({self.rule!r}, {len(self.models)} model(s), B={self.B:g})"


class PathBoundAgent(BoundAgent):
    """``gp-cmm``: paper 000's exact bound (the SOCP of eq. 10), affordable on a few routes only.

    The ``routes`` cheapest routes under the DMM edge weights (Yen's algorithm) are re-ranked by
    the path-level lower bound of spec §1.5, paper 000's 1-D dual (eq. 12) applied to the
    functional g = Σ_{e∈S} k(·, e):

        LCB(S) = max_a Σ_S m + Σ_S μ̂_a − √(R̃²(a)/a) · √(1ᵀ Σ_{a,S} 1),

    which is the SOCP's value where strong duality holds, and a valid bound at any a (weak
    duality): here the maximum over a log grid of 49 noise levels ς²·[10⁻³, 10³] and DMM's five,
    refined by a bounded scalar search (so it is never below DMM's bound of the same route at
    the same level: √(1ᵀΣ1) ≤ Σ_e s_e). Every a costs O(|O|) after one eigendecomposition of
    M = D^½K_OO D^½ per round (the eigen trick of spec §1.3). Not additive over edges, hence the
    re-ranking; the route with the lowest bound is driven. The logged index is DMM's per edge.
    """

    def __init__(self, models, noise_var, prior, oracle, start, end, *, routes: int = 5, **kw):
        super().__init__("dmm", models, noise_var, prior, oracle, start, end, **kw)
        self.k_routes = int(routes)

    def path_lower_bounds(self, paths) -> np.ndarray:
        """LCB(S) of each route S (see the class docstring)."""
        sig2 = self.noise_var
        counts = self.base.counts
        seen = np.flatnonzero(counts)
        n = counts[seen].astype(np.float64)
        sq = np.sqrt(n)
        if seen.size:
            KOO = self.prior.block(seen)
            lam, Q = np.linalg.eigh(sq[:, None] * KOO * sq[None, :])
            lam = np.maximum(lam, 0.0)
            u = Q.T @ (sq * (self.base.sums[seen] / n - self.prior_mean[seen]))
        else:
            lam, Q, u = np.zeros(0), np.zeros((0, 0)), np.zeros(0)
        logdet = float(np.sum(np.log1p(lam / sig2)))
        const = sig2 * logdet + 2.0 * sig2 * math.log(1.0 / self.delta)

        def q(a):
            return a * float(np.sum(u * u / (lam + a)))

        q0 = q(sig2)
        out = []
        for S in paths:
            S = np.asarray(S, dtype=np.int64)
            rows = np.asarray(self.prior.rows(S), dtype=np.float64)
            z = Q.T @ (sq * rows[:, seen].sum(axis=0)) if seen.size else np.zeros(0)
            kss = float(rows[:, S].sum())
            base = float(self.prior_mean[S].sum())

            def lcb(log_a, z=z, kss=kss, base=base):
                a = math.exp(log_a)
                r2 = max(q0 - q(a) + const + a * self.B * self.B, 0.0)
                var = max(kss - float(np.sum(z * z / (lam + a))), 0.0)
                return base + float(np.sum(z * u / (lam + a))) - math.sqrt(r2 / a) * math.sqrt(var)

            grid = np.union1d(np.linspace(math.log(sig2 * 1e-3), math.log(sig2 * 1e3), 49),
                              np.log(sig2 * np.asarray(DMM_GRID)))  # DMM's levels included
            vals = [lcb(x) for x in grid]
            i = int(np.argmax(vals))
            lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
            best = vals[i]
            if hi > lo:
                res = minimize_scalar(lambda x: -lcb(x), bounds=(lo, hi), method="bounded",
                                      options={"xatol": 1e-6})
                best = max(best, -float(res.fun))
            out.append(best)
        return np.asarray(out)

    def select(self, t, available, rng) -> Decision:
        mu, sd = self.base.mean_std()
        lcb = self.lower_bounds()
        weights, arc = bound_weights(lcb, self.floor, self.potential, self.turns, self.turn_potential)
        routes = self.oracle.k_shortest_paths(weights, self.start, self.end, self.k_routes, available=available,
                                              turn_weights=arc)
        bounds = self.path_lower_bounds([r.edges for r in routes])
        if self.turns is not None:  # the junctions' known costs, on top of the edges' bound
            bounds = bounds + np.array([float(self.turns.costs[self.oracle.turn_index(r.edges)].sum())
                                        for r in routes])
        best = int(np.argmin(bounds))  # ties: the cheapest under DMM's weights
        path = np.asarray(routes[best].edges, dtype=np.int64)
        self._diag["path_lower_bound"] = float(bounds[best])
        beta = self._diag["bound_beta"]
        return Decision(path, beta * beta if np.isfinite(beta) else float("nan"), lcb[path].copy(), mu[path].copy(),
                        sd[path].copy(), self.prior_mean[path])

    def diagnostics(self):
        return {"path_lower_bound": float("nan"), **self._diag}


def pe_beta(t: int, horizon: int, n_arms: int, *, delta: float) -> float:
    """Paper 004's β_t for a finite domain (Thm 4.1, δ_A = δ/2): √(2 ln(T |X| π² t² / (3δ))) with
    |X| = E edges and T the horizon. A square root already (UCB = μ + β σ): do not take it twice."""
    T = max(int(horizon), int(t), 1)
    return math.sqrt(2.0 * math.log(T * int(n_arms) * math.pi**2 * float(t) ** 2 / (3.0 * delta)))


def pe_path_beta(t: int, delta: float) -> float:
    """β'_t = √(2 ln(π² t² / (3δ))) of the path-level elimination test (spec confidence-bounds
    §2.5, re-derived): S_t is fixed given D_{t−1}, so under the true prior the route's error
    Σ_{e∈S_t}(f_e − μ_e) is N(0, 1ᵀΣ_{S_t}1) and P(|·| > β'_t √(1ᵀΣ1)) ≤ exp(−β'_t²/2) =
    3δ/(π²t²), which sums over t to δ/2: a union over rounds only, no |X| factor. Same δ
    convention as :func:`pe_beta`."""
    return math.sqrt(2.0 * math.log(math.pi**2 * float(max(t, 1)) ** 2 / (3.0 * delta)))


def pe_xi(n: int, n_priors: int, noise_var: float, *, delta: float) -> float:
    """Paper 004's ξ indexed by the observation count n (spec wave2-notes: the union bound of
    Lemma 5.1 runs over counts): ξ(n) = 2 R² ln(|U| π² n² / (3δ)), R² = ς²."""
    return 2.0 * noise_var * math.log(n_priors * math.pi**2 * float(max(n, 1)) ** 2 / (3.0 * delta))


class PEAgent(Agent):
    """``gp-pe``: PE-GP-UCB (paper 004, Algorithm 1) over candidate priors that differ in their
    mean (vehicle presets), on the routing semi-bandit (spec §2.5); with ``rule`` its baselines
    ``mle``, ``fb`` and ``rb`` (``gp-mle``, ``gp-fb``, ``gp-rb``: see :meth:`select`).

    Each round, for every surviving prior p: LCB^p = μ^p − β_t σ^p and one shortest route; the
    (route, prior) pair with the lowest total LCB is driven (doubly optimistic; ties: the
    earlier prior in the list). The chosen prior's predictions μ^{p_t}_{t−1}, σ^{p_t}_{t−1} of
    the driven edges are stored *before* the update; after the round
    H^p += Σ_e (y_e − μ_e), W^p += β_t Σ_e σ_e, n^p += L_t, and p_t is eliminated when
    |H^p| > √(ξ(n^p) n^p) + W^p (ξ indexed by the count n^p). β_t, ξ: :func:`pe_beta`,
    :func:`pe_xi`, times ``beta_scale`` and ``xi_scale`` (1: the theory's values).

    Weights are lower bounds kept non-negative as for the paper-000 agents (a physical floor
    and a route-invariant potential). **Fallback:** the last surviving prior is never
    eliminated; a test it fails is logged (``fallback`` in ``priors.parquet``) and it stays.
    Every prior's posterior sees all the data (fixed hyperparameters, no refits).
    """

    def __init__(self, models: dict, means: dict, oracle, start: int, end: int, *, horizon: int,
                 noise_var: float, delta: float = 0.05, beta_scale: float = 1.0, xi_scale: float = 1.0,
                 energy_floor=None, potential=None, rule: str = "pe", test: str = "edge", priors: dict | None = None,
                 turns=None, turn_potential=None):
        self.rule = rule
        self.turns, self.turn_potential = turns, turn_potential  # a truth's junctions: known costs
        self.test = test
        self.priors = priors or {}  # each candidate's prior (for the evidence's log-determinant)
        if test == "path":
            for m in models.values():
                require_capability(m, COVARIANCE, "gp-pe[test=path] (or use test=edge)")
        self.models = models
        self.means = {k: np.asarray(v, dtype=np.float64) for k, v in means.items()}
        self.names = list(models)
        self.survivors = list(models)
        self.oracle = oracle
        self.start, self.end = int(start), int(end)
        self.horizon = int(horizon)
        self.noise_var = float(noise_var)
        self.delta, self.beta_scale, self.xi_scale = float(delta), float(beta_scale), float(xi_scale)
        E = next(iter(models.values())).n_arms
        self.floor = np.full(E, -np.inf) if energy_floor is None else np.asarray(energy_floor, dtype=np.float64)
        self.potential = np.zeros(E) if potential is None else np.asarray(potential, dtype=np.float64)
        self.H = dict.fromkeys(self.names, 0.0)
        self.W = dict.fromkeys(self.names, 0.0)
        self.n = dict.fromkeys(self.names, 0)
        self.rounds_used = dict.fromkeys(self.names, 0)
        self.route_sum = dict.fromkeys(self.names, 0.0)
        self.eliminated_at: dict[str, int] = {}
        self._sumsq = np.zeros(E)  # per-edge sums of squared observations (the evidence's data term)
        self._rows: dict[str, list] = {k: [] for k in ("t", "chosen", "survivors", "H", "W", "n", "threshold",
                                                       "eliminated", "fallback")}
        self._pending = None
        self._t = 0

    def _lcb_route(self, p, beta, available):
        mu, sd = self.models[p].mean_std()
        lcb = np.maximum(mu - beta * sd, self.floor)
        weights, arc = bound_weights(lcb, self.floor, self.potential, self.turns, self.turn_potential)
        route, cost = _bound_route(self.oracle, weights, arc, self.start, self.end, available)
        return cost, route, mu, sd, lcb  # (the potential: one constant per trip)

    def log_evidence(self) -> dict[str, float]:
        """Ln p(every observation | p) of every prior: comparable across priors whatever their
        kernels and forgetting rates.

        Time-varying backends (``kalman``, ``window``, ``eigen``) accumulate it round by round
        (chain rule).
        For a static prior it is, with O the distinct observed edges, n_e their counts, r̄ the
        residual means about p's mean, N = Σ n_e and SS the within-edge sums of squares,
        −½ [q/ς² + ln det(I + D^½ K_OO D^½/ς²) + N ln(2πς²) + SS/ς²], q from the prior's
        posterior mean (no solve; :func:`evroute.bandit.bounds.q_from_mean`), the log-determinant
        from the exact backend's own tracking or one |O|×|O| Cholesky
        (:func:`evroute.bandit.bounds.information_logdet`)."""
        out = {}
        for p in self.names:
            model = self.models[p]
            if model.offers(EVIDENCE):  # kept round by round (time-varying backends)
                out[p] = float(model.log_evidence)
                continue
            c = model.counts
            seen = np.flatnonzero(c)
            if seen.size == 0:
                out[p] = 0.0
                continue
            n = c[seen].astype(np.float64)
            sums = model.sums[seen]
            r = sums / n - self.means[p][seen]
            fitted = model.mean_std()[0][seen] - self.means[p][seen]
            if model.offers(INFORMATION_GAIN):
                logdet = float(model.information_logdet)
            else:
                if p not in self.priors:
                    raise EvrouteError(f"the evidence of prior {p!r} needs its kernel (give priors=...)")
                logdet = information_logdet(self.priors[p].block(seen), n, self.noise_var)
            ss = float(np.sum(np.maximum(self._sumsq[seen] - sums * sums / n, 0.0)))
            out[p] = -0.5 * (q_from_mean(n, r, fitted) / self.noise_var + logdet
                             + n.sum() * math.log(2 * math.pi * self.noise_var) + ss / self.noise_var)
        return out

    def select(self, t, available, rng) -> Decision:
        beta = self.beta_scale * pe_beta(t, self.horizon, self.floor.size, delta=self.delta)
        if self.rule == "pe":  # doubly optimistic over (route, prior)
            best = None
            for p in self.survivors:
                cost, route, mu, sd, lcb = self._lcb_route(p, beta, available)
                if best is None or cost < best[0]:
                    best = (cost, p, route, mu, sd, lcb)
            _, p, path, mu, sd, lcb = best
        elif self.rule == "mle":  # type-II maximum likelihood prior, then GP-UCB under it
            ev = self.log_evidence()
            p = max(self.names, key=lambda q: (ev[q], -self.names.index(q)))
            _, path, mu, sd, lcb = self._lcb_route(p, beta, available)
        elif self.rule == "fb":  # fully Bayesian: LCBs weighted by P(p | D), uniform hyperprior
            ev = self.log_evidence()
            lw = np.array([ev[q] for q in self.names])
            wts = np.exp(lw - lw.max())
            wts /= wts.sum()
            self._weights = dict(zip(self.names, wts.tolist(), strict=True))
            lcb = sum(w * np.maximum(self.models[q].mean_std()[0] - beta * self.models[q].mean_std()[1], self.floor)
                      for q, w in zip(self.names, wts, strict=True))
            weights, arc = bound_weights(lcb, self.floor, self.potential, self.turns, self.turn_potential)
            path, _ = _bound_route(self.oracle, weights, arc, self.start, self.end, available)
            p = self.names[int(np.argmax(wts))]
            mu, sd = self.models[p].mean_std()
        else:  # rb: regret balancing (paper 004 Alg. 2): the least-used surviving prior
            p = min(self.survivors, key=lambda q: (self.rounds_used[q], self.names.index(q)))
            _, path, mu, sd, lcb = self._lcb_route(p, beta, available)
        width = beta * float(np.sum(sd[path]))  # W's increment: Σ_e β_t σ_{t−1}(e) (spec §2.5)
        if self.test == "path":  # the tighter variant: β'_t √(1ᵀ Σ_S 1), β'_t without the |X| factor
            width = pe_path_beta(t, self.delta) * math.sqrt(max(float(np.sum(self.models[p].covariance(path))), 0.0))
        self._pending = (p, mu[path].copy(), sd[path].copy(), width)
        self._t = int(t)
        return Decision(path, beta * beta, lcb[path].copy(), mu[path].copy(), sd[path].copy(),
                        self.means[p][path].copy())

    def observe(self, path, values) -> None:
        p, mu, sd, width = self._pending
        values = np.asarray(values, dtype=np.float64)
        np.add.at(self._sumsq, np.asarray(path, dtype=np.int64), values * values)
        self.H[p] += float(np.sum(values - mu))  # one-step-ahead residuals (σ_{t−1}: stored before)
        self.W[p] += width
        self.n[p] += int(values.size)
        self.rounds_used[p] += 1
        self.route_sum[p] += float(values.sum())
        eliminated, fallback, threshold = "", False, float("nan")
        if self.rule == "pe":
            xi = self.xi_scale * pe_xi(self.n[p], len(self.names), self.noise_var, delta=self.delta)
            threshold = math.sqrt(xi * self.n[p]) + self.W[p]
            if abs(self.H[p]) > threshold:
                eliminated, fallback = self._eliminate(p)
        elif self.rule == "rb":
            eliminated = self._rb_eliminate(values.size)
        for q in self.survivors:  # (eliminated priors are no longer updated: nothing reads them)
            self.models[q].update(path, values)
        row = (self._t, p, "|".join(self.survivors), self.H[p], self.W[p], self.n[p], threshold, eliminated,
               fallback)
        for k, v in zip(self._rows, row, strict=True):
            self._rows[k].append(v)

    def _eliminate(self, p) -> tuple[str, bool]:
        if len(self.survivors) > 1:
            self.survivors.remove(p)
            self.eliminated_at[p] = self._t
            return p, False
        return "", True  # the documented fallback: the last prior stays

    def _rb_eliminate(self, L: int) -> str:
        """Regret balancing's test (paper 004 Alg. 2, for costs), once every surviving prior has
        driven a round: with U(p) = Ȳ_p + √(ξ_p/|S_p|) the upper bound of the mean route energy
        under p (ξ of :func:`pe_xi` on |S_p| rounds, R² = ς² × the mean route length) and
        w̄_p = W_p/|S_p|, p is dropped when Ȳ_p − √(ξ_p/|S_p|) − w̄_p > min_q U(q): even its
        optimistic value is worse than another prior's pessimistic one."""
        if any(self.rounds_used[q] == 0 for q in self.survivors):
            return ""
        R2 = self.noise_var * max(1.0, sum(self.n[q] for q in self.survivors) / sum(self.rounds_used[q]
                                                                               for q in self.survivors))
        lo, hi = {}, {}
        for q in self.survivors:
            k = self.rounds_used[q]
            conf = math.sqrt(self.xi_scale * pe_xi(k, len(self.names), R2, delta=self.delta) / k)
            mean = self.route_sum[q] / k
            lo[q] = mean - conf - self.W[q] / k
            hi[q] = mean + conf
        best = min(hi.values())
        for q in list(self.survivors):
            if lo[q] > best and len(self.survivors) > 1:
                self.survivors.remove(q)
                self.eliminated_at[q] = self._t
                return q
        return ""

    @property
    def n_distinct(self) -> int:
        return self.models[self.survivors[0]].n_distinct

    def diagnostics(self):
        chosen = self._pending[0] if self._pending else self.names[0]
        return {"prior_index": float(self.names.index(chosen)), "n_priors": float(len(self.survivors))}

    def mean_std(self):
        p = self._pending[0] if self._pending and self._pending[0] in self.survivors else self.survivors[0]
        return self.models[p].mean_std()

    def tables(self):
        return {"priors": dict(self._rows)}

    def summary(self):
        return {"priors": self.names, "prior_left": self.survivors[0] if len(self.survivors) == 1 else None,
                "priors_surviving": list(self.survivors), "priors_eliminated_at": dict(self.eliminated_at)}


#: A confidence δ: in (0, 1), as every agent's bounds need it (declared so, not first refused
#: when the agent is built).
_unit_open = in_range(0, 1, lo_open=True, hi_open=True, why="a confidence delta")

_PE_OPTIONS: tuple[Option, ...] = (
    Option("delta", _unit_open, 0.05, "confidence delta of beta_t and xi (paper 004's example: 0.05)"),
    Option("beta_scale", nonneg_float, 1.0, "multiplier of paper 004's beta_t (1: the theory's)"),
    Option("xi_scale", nonneg_float, 1.0, "multiplier of paper 004's xi(n) (1: the theory's; smaller eliminates "
           "sooner and voids the guarantee)"),
    Option("tv_model", lambda n, v: choice(n, v, ("auto", "kalman", "window", "eigen")), "auto",
           "posterior of candidates with eps > 0: kalman (dense, exact), window (restarted static posteriors, "
           "any size), eigen (truncated eigenbasis) or auto (kalman up to 3,000 edges, else window)"),
    Option("rank", positive_int, 256, "eigenpairs of tv_model=eigen"),
    Option("test", lambda n, v: choice(n, v, ("edge", "path")), "edge",
           "elimination test: edge (paper 004, W += beta_t sum sigma_e) or path (the tighter route-level "
           "variant of paper 004's test: W += beta'_t sqrt(1' Sigma_S 1), no |X| factor)"),
)


def _pe_factory(setup: AgentSetup, delta=0.05, beta_scale=1.0, xi_scale=1.0, tv_model="auto", rank=256,
                test="edge", rule="pe") -> Agent:
    setup.one_noise_level(f"gp-{rule}")
    if not setup.candidates:
        raise EvrouteError("gp-pe needs candidate priors (--priors sumo-ev,compact-ev,...)")
    if not 0 < float(delta) < 1:
        raise EvrouteError(f"delta must be in (0, 1), got {delta!r}")
    models, means, priors = {}, {}, {}
    for name, cand in setup.candidates.items():
        if isinstance(cand, np.ndarray):  # a mean over the agent's own kernel, static
            prior, eps = ShiftedPrior(setup.prior, cand), 0.0
        else:  # an evroute.priors.candidates.CandidatePrior: its own mean, kernel and ε
            prior, eps = cand.prior, float(cand.eps)
        means[name], priors[name] = prior.mean, prior
        if eps > 0:  # time-varying: repeat visits are new inputs (paper 004's (1-ε)^{|t-t'|/2} kernel)
            backend = time_varying_backend(tv_model, prior.n_edges)
            opts = {"eps": eps, "rank": int(rank)} if backend == "eigen" else {"eps": eps}
            models[name] = make_model(backend, prior, noise_var=setup.noise_var, seed=setup.seed, **opts)
        else:
            models[name] = make_model(setup.model, prior, noise_var=setup.noise_var, seed=setup.seed)
    return PEAgent(models, means, setup.oracle, setup.start, setup.end, horizon=setup.horizon,
                   noise_var=setup.noise_var, delta=float(delta), beta_scale=float(beta_scale),
                   xi_scale=float(xi_scale), energy_floor=setup.energy_floor, potential=setup.potential, rule=rule,
                   test=test, priors=priors, turns=setup.turns, turn_potential=_bound_turn_potential(setup))


#: The time-varying backend ``tv_model=auto`` picks: the exact dense Kalman filter up to this
#: many edges (about 0.1 s a round at 2,145 edges, 0.8 s at 5,620), the sliding window above
#: (the truncated eigenbasis keeps too little of these kernels' variance: scripts/check_time_varying.py).
TV_DENSE_MAX_EDGES = 3_000


def _bound_turn_potential(setup: AgentSetup, floor=None):
    """The turns' potential a bound agent's weights need (:func:`bound_weights`): the run's
    (:func:`evroute.bandit.policies.turn_potential` of the physical floor), or, for another floor (the
    RKHS one), that floor's own; None without turns."""
    if setup.turns is None:
        return None
    if floor is None or floor is setup.energy_floor:
        if setup.turn_potential is not None:
            return setup.turn_potential
        floor = setup.energy_floor
    if floor is None:
        raise EvrouteError("a truth with turns needs the edges' energy floor for a bound agent's weights")
    return turn_potential(np.asarray(floor, dtype=np.float64), setup.turns)


def time_varying_backend(tv_model: str, n_edges: int) -> str:
    """The backend of a candidate with ε > 0: ``kalman`` (dense, exact), ``window`` or ``eigen``."""
    if tv_model == "auto":
        return "kalman" if n_edges <= TV_DENSE_MAX_EDGES else "window"
    return tv_model


# --------------------------------------------------------------------------------------
# The registry: policy names → agents
# --------------------------------------------------------------------------------------


@dataclass
class AgentSetup:
    """What an agent factory is given: the problem as the agent may know it.

    Attributes
    ----------
    prior : evroute.priors.prior.Prior
        The agent's prior over the edges (gp families use it whole, bi its mean and σ₀²).
    noise_var : float
        Observation noise variance ς² (known).
    oracle : evroute.roads.oracle.Oracle
    start, end : int
        Start and end edge of the trip.
    model : Component or str
        Posterior backend of GP agents with its options (:func:`evroute.models.resolve_model`;
        a spec such as ``svgp[inducing=500]`` is resolved here).
    seed : int
        Seeds the backend's own randomness.
    """

    prior: object
    noise_var: float
    oracle: object
    start: int
    end: int
    model: Component | str = "exact"
    seed: int = 0
    #: ‖f − m‖ of the truth in its kernel's RKHS, for agents told B (paper 000 gives the true B)
    truth_rkhs_norm: float = float("nan")
    #: a physical lower bound of every edge's energy and a route-invariant potential (Wh;
    #: :func:`evroute.physics.energy.energy_floor_wh`), for agents whose weights are lower bounds
    energy_floor: np.ndarray | None = None
    potential: np.ndarray | None = None
    #: candidate prior means by name (paper 004: "which vehicle am I?"), all with the prior's kernel
    candidates: dict | None = None
    #: the run's horizon T (paper 004's β uses it); 0 when unknown
    horizon: int = 0
    #: how indices become the oracle's weights (:data:`evroute.bandit.policies.WEIGHT_RULES`)
    weights: str = "rectified"
    #: the junctions' costs of a truth of edges plus turns, known to the agents (None: none)
    turns: object = None
    #: with turns, what the potential weight rule needs (:class:`evroute.bandit.policies.TurnPotential`)
    turn_potential: object = None
    #: ς_e² per edge (``--noise-std edge[...]``: :mod:`evroute.priors.noise`); None: ``noise_var`` on every edge
    edge_noise_var: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.model = resolve_model(self.model)

    @property
    def model_noise_var(self):
        """The noise a backend is made with (:func:`evroute.models.make_model`): ς_e² per edge
        where the run has a per-edge model, else ς²."""
        return self.noise_var if self.edge_noise_var is None else self.edge_noise_var

    def one_noise_level(self, who: str) -> None:
        """One line where ``who`` (an agent whose bounds take one ς) is given a per-edge noise model."""
        if self.edge_noise_var is not None:
            raise EvrouteError(f"{who} assumes one noise level for every edge (its confidence bounds take one "
                               "sigma); give --noise-std a number, or use an index agent (gp-ucb, gp-ts, bi-ts, ...) "
                               "with the per-edge model")


#: The registry of agents by policy name (``--policy``; :data:`evroute.components.POLICIES`).
_AGENTS = POLICIES

#: A policy's capability: the index it logs (``index_before`` of ``observations.parquet``) is a
#: lower confidence bound on each edge's expected energy (the UCB and BayesUCB rules, paper
#: 000's bounds), so whether it covers the truth can be checked (``evroute plot``'s
#: ``coverage`` figure); a Thompson draw or a posterior mean is not.
LOWER_CONFIDENCE_BOUND = "lower-confidence-bound"


#: What an agent may declare it needs of a run (``register_agent(..., needs=...)``), checked when
#: the run is configured (:class:`evroute.runs.config.SimulationConfig`), before the network loads:
#: ``one-noise-level``, one observation noise ς for every edge (its confidence bounds take one),
#: so not a per-edge noise model (``--noise-std edge[...]``).
ONE_NOISE_LEVEL = "one-noise-level"
AGENT_NEEDS = (ONE_NOISE_LEVEL,)


def register_agent(name: str, factory: Callable[..., Agent], *, options: tuple[Option, ...] = (),
                   description: str = "", overwrite: bool = False, capabilities: tuple[str, ...] = (),
                   model: str = "gp", needs: tuple[str, ...] = ()) -> None:
    """Register an agent under a policy name (``--policy NAME``).

    ``factory(setup: AgentSetup, **options) -> Agent`` receives every declared option (the
    given value converted, else its default). A second registration of a name is an error
    unless ``overwrite``. ``capabilities`` declares what the policy offers
    (:data:`LOWER_CONFIDENCE_BOUND`), shown by ``evroute policies``. ``model`` declares which
    posterior it keeps (:func:`policy_family`): ``gp`` (the run's ``--model``, swept by ``compare``
    and named in its runs), ``bi`` (its own independent model) or ``none``. ``needs`` declares
    what it needs of the run (:data:`AGENT_NEEDS`), checked before any work.
    """
    unknown = sorted(set(needs) - set(AGENT_NEEDS))
    if unknown:
        raise EvrouteError(f"policy {name!r}: unknown needs {', '.join(unknown)} (known: {', '.join(AGENT_NEEDS)})")
    _AGENTS.register(name, factory, options, description, overwrite, capabilities, model=model, needs=needs)


def unregister_agent(name: str) -> None:
    """Remove a registration (tests, plug-ins that replace an agent)."""
    _AGENTS.unregister(name)


def agent_names() -> list[str]:
    """Registered policy names, in registration order (the paper's first)."""
    return _AGENTS.names()


def agent_options(name: str) -> tuple[Option, ...]:
    """The options a policy accepts (``beta_scale``, ``omega``, ``xi``, ``joint``, ...)."""
    return _AGENTS.get(name).options


def resolve_policy(spec) -> Component:
    """The resolved policy :class:`~evroute.specs.Component` of a spec (``gp-bucb[xi=0.5]``): the
    agent's declared options, given ones converted (aliases ``w``, ``x``, ``bs``), the others at
    their defaults."""
    return _AGENTS.resolve(spec)


def policy_family(name) -> str:
    """The model family a policy declared at registration (:func:`register_agent`): ``gp`` (it
    uses the run's ``--model``), ``bi`` or ``none``; of a policy name, spec or component."""
    text = name.name if isinstance(name, Component) else parse_spec(str(name), "policy")[0]
    return _AGENTS.get(text).model


def make_agent(name, setup: AgentSetup, **options) -> Agent:
    """Create the agent of a policy (a name, a spec ``gp-bucb[xi=0.5]`` or a resolved component) for
    ``setup``, with options as declared by the policy.

    Returns
    -------
    Agent
        The agent: ``select(t, available, rng)`` a route, ``observe(path, values)``.
    """
    comp = _AGENTS.resolve(name, **options)
    return _AGENTS.get(comp.name).factory(setup, **comp.options)


def _beta_rule(name, value) -> str:
    v = str(value).strip().lower()
    if v not in BETA_RULES:
        raise EvrouteError(f"{name} must be one of {', '.join(BETA_RULES)} (the paper whose width is used), "
                           f"got {value!r}")
    return v


_BETA_SCALE = Option("beta_scale", nonneg_float, 1.0, "multiplier of β_t", "003 Thm. 3.1 (Fig. 3 also runs 0.5)",
                     aliases=("bs",), metavar="NUMBER")
#: The options of each index rule (003 Theorem 3.1: β_t of GP-UCB, η_t(ω, ξ) of GP-BUCB).
RULE_OPTIONS: dict[str, tuple[Option, ...]] = {
    "ucb": (_BETA_SCALE,
            Option("beta", _beta_rule, "003", "whose width: 003 (beta_t of 003 Thm. 3.1), 001 (EK-UCB's fixed radius), "
                   "002 (BKB's radius as its authors' code computes it); papers' radii converted once, "
                   "beta = radius^2 / noise variance"),
            Option("radius", nonneg_float, 0.1, "with beta=001: the radius in the papers' 1/lambda-scaled units "
                   "(001's experiments and code: 0.1)"),
            Option("fnorm", nonneg_float, 1.0, "with beta=002: the RKHS-norm bound F (the BKB code's default 1)"),
            Option("delta", _unit_open, 0.5, "with beta=002: the confidence delta (the BKB code's default 0.5)")),
    "bucb": (Option("omega", nonneg_float, 1.0, "GP-BUCB ω of η_t = √(2π)^ω / (2|A|^ω t^ξ)", "003 Thm. 3.1",
                    aliases=("w",), metavar="NUMBER"),
             Option("xi", nonneg_float, 1.0, "GP-BUCB ξ of η_t", "003 Thm. 3.1 (Fig. 3 also runs 0.5)", aliases=("x",),
                    metavar="NUMBER"),
             _BETA_SCALE),
    "ts": (Option("joint", flag, False, "one joint posterior draw instead of independent per-edge draws",
                  "003 Algorithm 2 draws each edge independently", aliases=("joint_samples",), metavar="FLAG"),),
    "greedy": (),
}


def _index_agent_factory(family: str, rule: str) -> Callable[..., Agent]:
    def factory(setup: AgentSetup, **options) -> Agent:
        policy = make_policy(rule, **options)
        if family == "bi":  # the BI baseline: independent edges with the prior's mean and σ₀²
            model = make_model("bi", DiagonalPrior(setup.prior.mean, setup.prior.independent_variance()),
                               noise_var=setup.model_noise_var)
        else:
            model = make_model(setup.model, setup.prior, noise_var=setup.model_noise_var, seed=setup.seed)
        if options.get("joint"):
            require_capability(model, JOINT_SAMPLES, f"{family}-{rule}[joint=true]")
        return IndexAgent(policy, model, setup.oracle, setup.start, setup.end, setup.prior.mean,
                          weights=setup.weights, floor=setup.energy_floor, potential=setup.potential,
                          turns=setup.turns, turn_potential=setup.turn_potential)

    return factory


for _family in MODEL_FAMILIES:
    for _rule in RULES:
        register_agent(f"{_family}-{_rule}", _index_agent_factory(_family, _rule), options=RULE_OPTIONS[_rule],
                       model=_family,
                       description=f"{_rule} index rule on the {'GP' if _family == 'gp' else 'BI'} posterior",
                       capabilities=(LOWER_CONFIDENCE_BOUND,) if _rule in ("ucb", "bucb") else ())


def _choice(name, value, choices):
    v = str(value).strip().lower()
    if v not in choices:
        raise EvrouteError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return v


def _bound_b(name, value):
    if value in (None, "", "oracle"):
        return "oracle"
    return nonneg_float(name, value)


#: The options of the paper-000 bound agents.
BOUND_OPTIONS: tuple[Option, ...] = (
    Option("b", _bound_b, "oracle", "B, the RKHS-norm bound of f - m in the prior's RKHS (gp-amm[b=10]); "
           "'oracle': the truth's own norm, as paper 000's experiments give the true B"),
    Option("delta", _unit_open, 0.01, "confidence 1 - delta (paper 000 Sec. 7: 0.01)"),
    Option("eta", nonneg_float, 0.002, "gp-igp's eta (paper 000 Sec. 7: 2/T at T = 1000)"),
    Option("c", positive_float, 1.0, "the mixture scale c, fixed in advance: the model's prior is c times the "
           "prior's covariance (1: the prior's own sigma_0^2; paper 000 uses c = 1 for RBF)"),
    Option("floor", lambda name, v: _choice(name, v, ("physical", "rkhs")), "physical",
           "lower limit of the weights: 'physical' (potential and rolling energy: valid for physical energies) "
           "or 'rkhs' (m - B sqrt(k_ee): valid for any truth with ||f - m|| <= B; weights below the route "
           "potential are then clipped at 0)"),
)
_BOUND_RULES = {"amm": "AMM (paper 000 eq. 14, analytic)", "dmm": "DMM (paper 000, minimum over a grid of 5)",
                "cmm": "CMM (paper 000 eq. 10 via its 1-D dual, path-level, on the k cheapest DMM routes)",
                "ay": "Abbasi-Yadkori's bound (paper 000's baseline)", "igp": "IGP-UCB's bound (paper 000's baseline)"}


def _bound_agent_factory(rule: str) -> Callable[..., Agent]:
    def factory(setup: AgentSetup, b="oracle", delta=0.01, eta=0.002, floor="physical", c=1.0, routes=5) -> Agent:
        setup.one_noise_level(f"gp-{rule}")
        B = b
        prior = setup.prior
        if float(c) != 1.0:  # the mixture scale, fixed in advance: the model's prior is c·K
            prior = ScaledPrior(setup.prior, float(c))
        if B == "oracle":  # the truth's norm in the RKHS of c·K: ‖g‖_{cK} = ‖g‖_K / √c
            B = float(setup.truth_rkhs_norm) / math.sqrt(float(c))
            if not np.isfinite(B):
                raise EvrouteError(f"gp-{rule}: the truth's RKHS norm is not known here; pass gp-{rule}[b=...]")
        if not 0 < float(delta) < 1:
            raise EvrouteError(f"delta must be in (0, 1), got {delta!r}")
        levels = [setup.noise_var * g for g in DMM_GRID] if rule in ("dmm", "cmm") else [setup.noise_var]
        models = {a: make_model(setup.model, prior, noise_var=a, seed=setup.seed)
                  for a in levels}
        # the floor of the weights: physics (E_det's potential and rolling terms), or what
        # ‖f − m‖_K ≤ B itself implies, f_e ≥ m_e − B √K_ee (valid for any truth within the ball)
        lower = setup.energy_floor if floor == "physical" else \
            np.asarray(prior.mean) - B * np.sqrt(np.asarray(prior.diag()))
        kw = dict(B=B, delta=float(delta), eta=float(eta), energy_floor=lower, potential=setup.potential,
                  turns=setup.turns, turn_potential=_bound_turn_potential(setup, lower))
        if rule == "cmm":
            return PathBoundAgent(models, setup.noise_var, prior, setup.oracle, setup.start, setup.end,
                                  routes=routes, **kw)
        return BoundAgent(rule, models, setup.noise_var, prior, setup.oracle, setup.start, setup.end, **kw)

    return factory


_CMM_OPTIONS = BOUND_OPTIONS + (
    Option("routes", positive_int, 5, "gp-cmm: candidate routes (Yen, under DMM's weights) re-ranked by the "
           "path-level bound"),)

for _rule, _what in _BOUND_RULES.items():
    register_agent(f"gp-{_rule}", _bound_agent_factory(_rule), options=_CMM_OPTIONS if _rule == "cmm" else BOUND_OPTIONS,
                   description=f"lower confidence bounds of {_what}, frequentist: they assume ||f - m|| <= B",
                   capabilities=(LOWER_CONFIDENCE_BOUND,), needs=(ONE_NOISE_LEVEL,))

register_agent("gp-pe", _pe_factory, options=_PE_OPTIONS, needs=(ONE_NOISE_LEVEL,),
               description="PE-GP-UCB (paper 004): optimistic over (route, prior), eliminates implausible priors")
register_agent("gp-mle", lambda setup, **o: _pe_factory(setup, rule="mle", **o), options=_PE_OPTIONS, needs=(ONE_NOISE_LEVEL,),
               description="paper 004's baseline: GP-UCB under the type-II maximum-likelihood prior of the round")
register_agent("gp-fb", lambda setup, **o: _pe_factory(setup, rule="fb", **o), options=_PE_OPTIONS, needs=(ONE_NOISE_LEVEL,),
               description="paper 004's baseline: fully Bayesian, LCBs weighted by P(prior | data)")
register_agent("gp-rb", lambda setup, **o: _pe_factory(setup, rule="rb", **o), options=_PE_OPTIONS, needs=(ONE_NOISE_LEVEL,),
               description="paper 004's baseline: regret balancing over the priors (its Alg. 2)")
