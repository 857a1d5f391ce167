"""Paper 004's agents over candidate priors that differ in their mean: ``gp-pe`` (PE-GP-UCB,
eliminating implausible priors) and its baselines ``gp-mle``, ``gp-fb`` and ``gp-rb``; registered here
(:func:`evroute.bandit.agents.register_agent`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..errors import EvrouteError
from ..models import COVARIANCE, EVIDENCE, INFORMATION_GAIN, make_model, require_capability
from ..priors.prior import ShiftedPrior
from ..specs import Option, declared
from ..validate import choice, nonneg_float, positive_int
from .agents import ONE_NOISE_LEVEL, Agent, AgentSetup, Decision, confidence_delta, register_agent
from .bound_agents import bound_route, bound_weights, known_turns
from .bounds import information_logdet, q_from_mean

__all__ = ["PEAgent", "pe_beta", "pe_path_beta", "pe_xi", "time_varying_backend", "TV_DENSE_MAX_EDGES"]


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
                 turns=None):
        self.rule = rule
        self.turns = turns  # the junctions' dissipation, taken as known (the prior's means)
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
        weights, arc = bound_weights(lcb, self.floor, self.potential, turns=self.turns)
        route, cost = bound_route(self.oracle, weights, arc, start=self.start, end=self.end, available=available)
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
            weights, arc = bound_weights(lcb, self.floor, self.potential, turns=self.turns)
            path, _ = bound_route(self.oracle, weights, arc, start=self.start, end=self.end, available=available)
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


_PE_OPTIONS: tuple[Option, ...] = (
    Option("delta", confidence_delta, 0.05, "confidence delta of beta_t and xi (paper 004's example: 0.05)"),
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


@declared(*_PE_OPTIONS)
def _pe_factory(setup: AgentSetup, delta=0.05, beta_scale=1.0, xi_scale=1.0, tv_model="auto", rank=256,
                test="edge", rule="pe") -> Agent:
    setup.one_noise_level(f"gp-{rule}")
    if not setup.candidates:
        raise EvrouteError("gp-pe needs candidate priors (--priors sumo-ev,compact-ev,...)")
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
                   test=test, priors=priors, turns=known_turns(setup))


#: The time-varying backend ``tv_model=auto`` picks: the exact dense Kalman filter up to this
#: many edges (about 0.1 s a round at 2,145 edges, 0.8 s at 5,620), the sliding window above
#: (the truncated eigenbasis keeps too little of these kernels' variance: benchmarks/time_varying.py).
TV_DENSE_MAX_EDGES = 3_000


def time_varying_backend(tv_model: str, n_edges: int) -> str:
    """The backend of a candidate with ε > 0: ``kalman`` (dense, exact), ``window`` or ``eigen``."""
    if tv_model == "auto":
        return "kalman" if n_edges <= TV_DENSE_MAX_EDGES else "window"
    return tv_model


def _pe_baseline(rule: str) -> Callable[..., Agent]:
    @declared(*_PE_OPTIONS)
    def factory(setup: AgentSetup, **options) -> Agent:
        return _pe_factory(setup, rule=rule, **options)

    return factory


register_agent("gp-pe", _pe_factory, needs=(ONE_NOISE_LEVEL,),
               description="PE-GP-UCB (paper 004): optimistic over (route, prior), eliminates implausible priors")
register_agent("gp-mle", _pe_baseline("mle"), needs=(ONE_NOISE_LEVEL,),
               description="paper 004's baseline: GP-UCB under the type-II maximum-likelihood prior of the round")
register_agent("gp-fb", _pe_baseline("fb"), needs=(ONE_NOISE_LEVEL,),
               description="paper 004's baseline: fully Bayesian, LCBs weighted by P(prior | data)")
register_agent("gp-rb", _pe_baseline("rb"), needs=(ONE_NOISE_LEVEL,),
               description="paper 004's baseline: regret balancing over the priors (its Alg. 2)")
