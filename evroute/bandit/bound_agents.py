"""Paper 000's frequentist confidence bounds as an agent's edge weights: ``gp-amm``, ``gp-dmm``,
``gp-cmm`` (the path-level bound on a few routes), ``gp-ay`` and ``gp-igp`` (:mod:`evroute.bandit.bounds`
for the widths); registered here (:func:`evroute.bandit.agents.register_agent`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy.optimize import minimize_scalar

from ..errors import EvrouteError
from ..models import INFORMATION_GAIN, make_model
from ..priors.prior import ScaledPrior
from ..specs import Option, declared
from ..validate import nonneg_float, positive_float, positive_int
from .agents import (
    LOWER_CONFIDENCE_BOUND,
    ONE_NOISE_LEVEL,
    Agent,
    AgentSetup,
    Decision,
    confidence_delta,
    register_agent,
)
from .bounds import DMM_GRID, confidence_widths, information_logdet, q_from_mean, rtilde2
from .turns import turn_weights

__all__ = ["BoundAgent", "PathBoundAgent", "lower_bound_weights", "bound_weights", "known_turns", "bound_route",
           "BOUND_OPTIONS"]


def lower_bound_weights(lcb, floor, potential) -> np.ndarray:
    """Dijkstra weights from per-edge lower bounds of the energy: max(LCB, floor) − potential,
    clipped at 0. ``floor`` is a lower bound of the energy itself (so the max stays one) and
    ``potential`` sums to the same constant along every route of the trip (so the shortest
    route is unchanged); see :func:`evroute.physics.energy.energy_floor_wh`."""
    return np.maximum(np.maximum(lcb, floor) - potential, 0.0)


def bound_weights(lcb, floor, potential, *, turns=None):
    """The oracle's (edge, turn) weights of a bound agent: :func:`lower_bound_weights`, and with
    turns (their dissipation, taken as known) each held at 0 (:func:`evroute.bandit.turns.turn_weights`),
    so that a route's weight is its energy under the bounds (edges plus turns) less a constant of
    the trip. Returns ``(edge weights, turn weights or None)``."""
    return lower_bound_weights(lcb, floor, potential), (None if turns is None else turn_weights(turns))


def bound_route(oracle, weights, arc, *, start, end, available) -> tuple[np.ndarray, float]:
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
                 B: float, delta: float = 0.01, eta: float = 0.002, energy_floor=None, potential=None, turns=None):
        self.rule = rule
        self.turns = turns  # the junctions' dissipation, taken as known (the prior's means): the bounds are the edges'
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
        weights, arc = bound_weights(lcb, self.floor, self.potential, turns=self.turns)
        path, _ = bound_route(self.oracle, weights, arc, start=self.start, end=self.end, available=available)
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
        weights, arc = bound_weights(lcb, self.floor, self.potential, turns=self.turns)
        routes = self.oracle.k_shortest_paths(weights, self.start, self.end, self.k_routes, available=available,
                                              turn_weights=arc)
        bounds = self.path_lower_bounds([r.edges for r in routes])
        if self.turns is not None:  # the junctions' dissipation, on top of the edges' bound
            bounds = bounds + np.array([float(turn_weights(self.turns)[self.oracle.turn_index(r.edges)].sum())
                                        for r in routes])
        best = int(np.argmin(bounds))  # ties: the cheapest under DMM's weights
        path = np.asarray(routes[best].edges, dtype=np.int64)
        self._diag["path_lower_bound"] = float(bounds[best])
        beta = self._diag["bound_beta"]
        return Decision(path, beta * beta if np.isfinite(beta) else float("nan"), lcb[path].copy(), mu[path].copy(),
                        sd[path].copy(), self.prior_mean[path])

    def diagnostics(self):
        return {"path_lower_bound": float("nan"), **self._diag}


def known_turns(setup: AgentSetup):
    """The turns' dissipation a bound agent routes with, its prior's means (it bounds the edges, not
    the junctions); None without turns."""
    return None if setup.turns is None else np.asarray(setup.turns.mean, dtype=np.float64)


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
    Option("delta", confidence_delta, 0.01, "confidence 1 - delta (paper 000 Sec. 7: 0.01)"),
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


def _bound_agent_factory(rule: str, options: tuple[Option, ...]) -> Callable[..., Agent]:
    @declared(*options)
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
        levels = [setup.noise_var * g for g in DMM_GRID] if rule in ("dmm", "cmm") else [setup.noise_var]
        models = {a: make_model(setup.model, prior, noise_var=a, seed=setup.seed)
                  for a in levels}
        # the floor of the weights: physics (E_det's potential and rolling terms), or what
        # ‖f − m‖_K ≤ B itself implies, f_e ≥ m_e − B √K_ee (valid for any truth within the ball)
        lower = setup.energy_floor if floor == "physical" else \
            np.asarray(prior.mean) - B * np.sqrt(np.asarray(prior.diag()))
        kw = dict(B=B, delta=float(delta), eta=float(eta), energy_floor=lower, potential=setup.potential,
                  turns=known_turns(setup))
        if rule == "cmm":
            return PathBoundAgent(models, setup.noise_var, prior, setup.oracle, setup.start, setup.end,
                                  routes=routes, **kw)
        return BoundAgent(rule, models, setup.noise_var, prior, setup.oracle, setup.start, setup.end, **kw)

    return factory


_CMM_OPTIONS = BOUND_OPTIONS + (
    Option("routes", positive_int, 5, "gp-cmm: candidate routes (Yen, under DMM's weights) re-ranked by the "
           "path-level bound"),)

for _rule, _what in _BOUND_RULES.items():
    register_agent(f"gp-{_rule}", _bound_agent_factory(_rule, _CMM_OPTIONS if _rule == "cmm" else BOUND_OPTIONS),
                   description=f"lower confidence bounds of {_what}, frequentist: they assume ||f - m|| <= B",
                   capabilities=(LOWER_CONFIDENCE_BOUND,), needs=(ONE_NOISE_LEVEL,))

