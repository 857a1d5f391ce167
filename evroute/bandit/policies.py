"""Index rules and rectification (paper 003, Algorithm 2 and Theorem 3.1).

Energy is a cost, so every optimistic index is a *lower* bound on the expected energy.
A policy turns a posterior model into one index μ̃_e per edge:

- ``ucb``    μ̃ = μ − √β_t σ,  β_t = scale · 2 ln(|A| t² / √(2π))           (Thm. 3.1)
- ``bucb``   μ̃ = Q(η_t, N(μ, σ²)) = μ + σ Φ⁻¹(η_t),
             η_t = (√(2π))^ω / (2 |A|^ω t^ξ)                                  (Thm. 3.1)
- ``ts``     μ̃ = a posterior draw (independent per edge, as the paper; joint optional)
- ``greedy`` μ̃ = μ (a reference)

and rectifies it (Algorithm 2, line 3): U_e = E[max(0, z)], z ~ N(μ̃_e, ς²), with ς² the
observation noise variance, so that the weights are non-negative and Dijkstra applies.
(The paper's Algorithm 2 uses ς²; its surrounding text says σ²_{t−1,e}; evroute uses ς².)
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import numpy as np
from scipy.special import erfcx, ndtr, ndtri_exp

from ..errors import EvrouteError
from ..settings import WEIGHT_RULES
from ..specs import Option, declared
from ..validate import flag, in_range, nonneg_float, positive_float, positive_int
from .turns import turn_weights

__all__ = [
    "model_noise_std",
    "beta_ucb",
    "BETA_RULES",
    "gp_beta_from_radius",
    "beta_bkb_code",
    "eta_bucb",
    "log_eta_bucb",
    "beta_bucb",
    "bucb_quantile_z",
    "rectified_mean",
    "WEIGHT_RULES",
    "route_weights",
    "Policy",
    "UCBPolicy",
    "BayesUCBPolicy",
    "ThompsonPolicy",
    "GreedyPolicy",
    "make_policy",
    "confidence_delta",
    "RULES",
    "RULES_BY_NAME",
    "MODEL_FAMILIES",
]

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_HALF_PI = math.sqrt(0.5 * math.pi)
_TINY = np.finfo(np.float64).tiny


# ---------------------------------------------------------------------------------------
# confidence parameters


def _check_t(t) -> float:
    try:
        tf = float(t)
    except (TypeError, ValueError):
        raise EvrouteError(f"round t must be a number >= 1, got {t!r}") from None
    if not math.isfinite(tf) or tf < 1:
        raise EvrouteError(f"round t must be >= 1, got {t!r}")
    return tf


def beta_ucb(t, n_arms, scale: float = 1.0) -> float:
    """GP-UCB confidence parameter β_t = scale · 2 ln(|A| t² / √(2π)) (Theorem 3.1).

    Parameters
    ----------
    t : int
        Round, t ≥ 1.
    n_arms : int
        Number of base arms |A| (edges).
    scale : float
        Multiplier (the paper also runs 0.5).

    Returns
    -------
    float
        The formula's value; it is negative only when |A| t² < √(2π) (one or two arms at
        t = 1), where :class:`UCBPolicy` uses 0.
    """
    tf, n = _check_t(t), positive_int("n_arms", n_arms)
    scale = nonneg_float("beta_scale", scale)
    return scale * 2.0 * (math.log(n) + 2.0 * math.log(tf) - _LOG_SQRT_2PI)


def log_eta_bucb(t, n_arms, omega: float = 1.0, *, xi: float = 1.0) -> float:
    """Ln η_t for GP-BUCB (exact in log space, never underflows)."""
    tf, n = _check_t(t), positive_int("n_arms", n_arms)
    omega = nonneg_float("omega", omega)
    xi = nonneg_float("xi", xi)
    return omega * _LOG_SQRT_2PI - math.log(2.0) - omega * math.log(n) - xi * math.log(tf)


def eta_bucb(t, n_arms, omega: float = 1.0, *, xi: float = 1.0) -> float:
    """GP-BUCB quantile level η_t = (√(2π))^ω / (2 |A|^ω t^ξ) (Theorem 3.1).

    May underflow to 0 for huge ω or t; the policy works with :func:`log_eta_bucb`.
    """
    return math.exp(log_eta_bucb(t, n_arms, omega, xi=xi))


def bucb_quantile_z(t, n_arms, omega: float = 1.0, *, xi: float = 1.0) -> float:
    """Φ⁻¹(η_t): the standard-normal η_t-quantile (negative while η_t < 0.5).

    η_t ≥ 1 (possible only for |A| ≤ 2) is clipped just below 1 so the result is finite.
    """
    log_eta = min(log_eta_bucb(t, n_arms, omega, xi=xi), math.log1p(-(2.0**-52)))
    return float(ndtri_exp(log_eta))


def beta_bucb(t, n_arms, omega: float = 1.0, *, xi: float = 1.0, scale: float = 1.0) -> float:
    """GP-BUCB confidence parameter β_t = scale · 2 (erf⁻¹(1 − 2η_t))² (Theorem 3.1), signed.

    Since 2 (erf⁻¹(1 − 2η))² = (Φ⁻¹(η))², it is computed as scale · (Φ⁻¹(η_t))² from
    ln η_t (accurate even where 1 − 2η_t rounds to 1). The sign is that of 0.5 − η_t, so
    that ``μ − sign(β) √|β| σ`` is always the index: with scale = 1 it is exactly the
    η_t-quantile of N(μ, σ²), also when η_t ≥ 0.5 (then β ≤ 0 and the index lies at or
    above the mean).
    """
    scale = nonneg_float("beta_scale", scale)
    z = bucb_quantile_z(t, n_arms, omega, xi=xi)
    return -math.copysign(scale * z * z, z) if z != 0 else 0.0


# ---------------------------------------------------------------------------------------
# rectification


def rectified_mean(mu_tilde, noise_std) -> np.ndarray:
    """Mean of the rectified Gaussian: E[max(0, z)], z ~ N(μ̃, ς²) (Algorithm 2, line 3).

    U = μ̃ Φ(μ̃/ς) + ς φ(μ̃/ς) = ς h(a), a = μ̃/ς, h(a) = a Φ(a) + φ(a).

    For a < 0 it is evaluated as h(a) = φ(a) (1 + a √(π/2) erfcx(−a/√2)) (Φ(a)/φ(a) via
    the scaled complementary error function, so neither Φ(a) nor the ratio underflows);
    for a ≥ 0 directly. The result is strictly positive: where the exact value underflows
    (a ≲ −37) the smallest normal float64 is returned. ς = 0 gives max(μ̃, 0) (floored the
    same way).

    Parameters
    ----------
    mu_tilde : array_like
        Indices μ̃ (any shape).
    noise_std : float or array_like
        Noise standard deviation ς ≥ 0 (broadcast against ``mu_tilde``).

    Returns
    -------
    numpy.ndarray (float64)
    """
    mu = np.asarray(mu_tilde, dtype=np.float64)
    s = np.asarray(noise_std, dtype=np.float64)
    if np.any(np.isnan(mu)):
        raise EvrouteError("rectified_mean got NaN indices")
    if np.any(~np.isfinite(s)) or np.any(s < 0):
        raise EvrouteError("noise_std must be finite and non-negative")
    mu, s = np.broadcast_arrays(mu, s)
    out = np.empty(mu.shape)
    zero = s == 0
    pos = ~zero
    if np.any(zero):
        out[zero] = np.maximum(mu[zero], 0.0)
    if np.any(pos):
        m, sd = mu[pos], s[pos]
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            a = m / sd
            h = np.empty(a.shape)
            hi = a >= 0
            ah = a[hi]
            h[hi] = ah * ndtr(ah) + _INV_SQRT_2PI * np.exp(-0.5 * ah * ah)
            lo = ~hi
            al = a[lo]
            g = 1.0 + al * _SQRT_HALF_PI * erfcx(-al * math.sqrt(0.5))
            h[lo] = _INV_SQRT_2PI * np.exp(-0.5 * al * al) * np.maximum(g, 0.0)
            r = sd * h
        r = np.where(np.isposinf(m), np.inf, r)
        r = np.where(np.isneginf(m), 0.0, r)
        out[pos] = r
    return np.maximum(out, _TINY)


# ---------------------------------------------------------------------------------------
# policies


def model_noise_std(model):
    """The observation noise sd a model assumes: ς_e per edge (an array) under a per-edge noise
    model (:class:`evroute.models.hetero.HeteroscedasticModel`), else the one ς."""
    per_edge = getattr(model, "edge_noise_var", None)
    return math.sqrt(model.noise_var) if per_edge is None else np.sqrt(per_edge)


class Policy(ABC):
    """An index rule: per-edge indices μ̃ from a posterior model, then rectified weights."""

    name: str = ""

    @abstractmethod
    def indices(self, model, t: int, rng: np.random.Generator) -> tuple[np.ndarray, float]:
        """Per-edge index μ̃ (before rectification) and β_t (NaN for TS and greedy).

        Parameters
        ----------
        model : evroute.models.PosteriorModel
        t : int
            Round, t ≥ 1.
        rng : numpy.random.Generator
            Used by randomised rules (TS).
        """

    def weights(
        self, model, t: int, rng: np.random.Generator, rectify: bool = True
    ) -> tuple[np.ndarray, float]:
        """Edge weights U = E[max(0, N(μ̃, ς²))] (``rectify=True``) or μ̃, and β_t."""
        idx, beta = self.indices(model, t, rng)
        if not rectify:
            return idx, beta
        return rectified_mean(idx, model_noise_std(model)), beta

    @property
    def params(self) -> dict[str, Any]:
        """The policy's parameters (for logs)."""
        return {}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({args})"


#: The confidence widths a GP-UCB agent can use (``gp-ucb[beta=…]``).
BETA_RULES = ("003", "001", "002")


def route_weights(index, rule: str, noise_std, *, floor=None, potential=None, turns=None):
    """The oracle's weights of edges (and turns) from per-edge indices μ̃ under a weight rule.

    ``rectified`` (paper 003, Algorithm 2 line 3): U_e = E[max(0, N(μ̃_e, ς²))]
    (:func:`rectified_mean`).

    ``potential``: the route's energy under max(μ̃, floor), regeneration included, reweighted to
    be non-negative so that Dijkstra finds its least-energy route: w_e = max(μ̃_e, floor_e) −
    potential_e, clipped at 0, where ``floor`` is a physical lower bound of each edge's energy
    and ``potential`` (η⁻ m g Δh) sums to the same along every route between the trip's ends
    (:func:`evroute.physics.energy.energy_floor_wh`). Handed the true energies of a truth that never
    falls below the floor, it finds the least-energy route exactly.

    With a truth of edges plus turns a turn's cost is a change of kinetic level (the same along
    every route between two edges) plus a dissipation ≥ 0: ``turns`` are the turns' indices of
    that dissipation, weighted max(index, 0) under either rule
    (:func:`evroute.bandit.turns.turn_weights`).

    Parameters
    ----------
    index : array (E,)
        The indices μ̃ (an LCB, a Thompson draw, the posterior mean, or the truth itself).
    rule : {"rectified", "potential"}
    noise_std : float or array (E,)
        ς (or ς_e per edge), for the rectified rule.
    floor, potential : array (E,), optional
        For the potential rule.
    turns : array, optional
        One index per legal turn of its dissipation (in the order of the network's
        ``conn_src``), or None without turns.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray or None)
        The edges' weights (E,) and the turns' weights (one per connection), both ≥ 0.
    """
    idx = np.asarray(index, dtype=np.float64)
    arc = None if turns is None else turn_weights(turns)
    if rule == "rectified":
        edge = rectified_mean(idx, noise_std)
    elif rule == "potential":
        if floor is None or potential is None:
            raise EvrouteError("the potential weights need the edges' energy floor and potential")
        edge = np.maximum(np.maximum(idx, floor) - potential, 0.0)
    else:
        raise EvrouteError(f"unknown weight rule {rule!r}; choose one of: {', '.join(WEIGHT_RULES)}")
    return edge, arc


def gp_beta_from_radius(radius: float, noise_var: float) -> float:
    """The one units conversion between papers 001/002 and evroute (spec nystrom §0).

    The papers write the index μ̃ ± β̃ σ̃ with σ̃² = σ²_GP/λ, λ = ς² (a ridge leverage score) and
    β̃ a radius, not its square. In evroute's form μ − √β σ_GP that is β = β̃²/λ.
    """
    return nonneg_float("radius", radius) ** 2 / positive_float("noise_var", noise_var)


def beta_bkb_code(counts, var, noise_var: float, *, fnorm: float = 1.0, delta: float = 0.5) -> float:
    """BKB's width as the authors' code computes it (luigicarratino/batch-bkb ``_update_beta``;
    spec wave2-notes: no factor 2 and no α, unlike 002 Thm. 2), in evroute's units:

        β̃ = √λ F + √(ς² (Σ_j c_j σ̃²_j · ln n + ln(1/δ))),   σ̃² = σ²/λ,  λ = ς²,

    so β = β̃²/λ = (F + √(Σ_j c_j σ²_j/ς² · ln n + ln(1/δ)))² (n = Σ_j c_j observations).
    """
    counts = np.asarray(counts, dtype=np.float64)
    n = float(counts.sum())
    lam = positive_float("noise_var", noise_var)
    logdet = float(counts @ np.asarray(var, dtype=np.float64)) / lam * (math.log(n) if n > 1 else 0.0)
    radius = math.sqrt(lam) * nonneg_float("fnorm", fnorm) + math.sqrt(
        lam * (logdet + math.log(1.0 / positive_float("delta", delta))))
    return gp_beta_from_radius(radius, lam)


#: A confidence δ: in (0, 1), as every agent's bounds need it (declared so, not first refused
#: when the agent is built); the option converter of every agent's ``delta``.
confidence_delta = in_range(0, 1, lo_open=True, hi_open=True, why="a confidence delta")


def _beta_rule(name, value) -> str:
    v = str(value).strip().lower()
    if v not in BETA_RULES:
        raise EvrouteError(f"{name} must be one of {', '.join(BETA_RULES)} (the paper whose width is used), "
                           f"got {value!r}")
    return v


_BETA_SCALE = Option("beta_scale", nonneg_float, 1.0, "multiplier of β_t", "003 Thm. 3.1 (Fig. 3 also runs 0.5)",
                     aliases=("bs",), metavar="NUMBER")


@declared(
    _BETA_SCALE,
    Option("beta", _beta_rule, "003", "whose width: 003 (beta_t of 003 Thm. 3.1), 001 (EK-UCB's fixed radius), "
           "002 (BKB's radius as its authors' code computes it); papers' radii converted once, "
           "beta = radius^2 / noise variance"),
    Option("radius", nonneg_float, 0.1, "with beta=001: the radius in the papers' 1/lambda-scaled units "
           "(001's experiments and code: 0.1)"),
    Option("fnorm", nonneg_float, 1.0, "with beta=002: the RKHS-norm bound F (the BKB code's default 1)"),
    Option("delta", confidence_delta, 0.5, "with beta=002: the confidence delta (the BKB code's default 0.5)"))
class UCBPolicy(Policy):
    """GP-UCB lower confidence bound μ − √β σ. The width β:

    - ``beta="003"`` (default): β_t = scale · 2 ln(|A| t²/√(2π)) (paper 003 Thm. 3.1);
    - ``beta="001"``: EK-UCB's fixed radius β̃ = ``radius`` in the papers' 1/λ-scaled units
      (001 §6 and the authors' code: 0.1), β = β̃²/λ by :func:`gp_beta_from_radius`;
    - ``beta="002"``: BKB's data-driven radius as the authors' code computes it
      (:func:`beta_bkb_code`, with ``fnorm`` F and ``delta`` δ).

    ``beta_scale`` multiplies every rule's β. Returns the β actually used, max(β, 0). Its options
    are declared on the class (:func:`evroute.specs.declared`: checked before ``__init__`` stores
    them).
    """

    name = "ucb"

    def __init__(self, beta_scale: float = 1.0, beta: str = "003", radius: float = 0.1, fnorm: float = 1.0,
                 delta: float = 0.5):
        self.beta_scale, self.beta, self.radius, self.fnorm, self.delta = beta_scale, beta, radius, fnorm, delta

    @property
    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {"beta_scale": self.beta_scale}
        if self.beta != "003":
            out.update(beta=self.beta, radius=self.radius, fnorm=self.fnorm, delta=self.delta)
        return out

    def width(self, model, t) -> float:
        """β of this round (GP units), before the clip at 0."""
        if self.beta == "001":
            _check_t(t)
            return self.beta_scale * gp_beta_from_radius(self.radius, model.noise_var)
        if self.beta == "002":
            _check_t(t)
            _, sd = model.mean_std()
            return self.beta_scale * beta_bkb_code(model.counts, np.square(sd), model.noise_var, fnorm=self.fnorm,
                                                   delta=self.delta)
        return beta_ucb(t, model.n_arms, self.beta_scale)

    def indices(self, model, t, rng):
        beta = max(self.width(model, t), 0.0)
        mu, sd = model.mean_std()
        return mu - math.sqrt(beta) * sd, beta


@declared(Option("omega", nonneg_float, 1.0, "GP-BUCB ω of η_t = √(2π)^ω / (2|A|^ω t^ξ)", "003 Thm. 3.1",
                 aliases=("w",), metavar="NUMBER"),
          Option("xi", nonneg_float, 1.0, "GP-BUCB ξ of η_t", "003 Thm. 3.1 (Fig. 3 also runs 0.5)", aliases=("x",),
                 metavar="NUMBER"),
          _BETA_SCALE)
class BayesUCBPolicy(Policy):
    """GP-BUCB: the η_t-quantile μ + σ Φ⁻¹(η_t) (with ``beta_scale`` ≠ 1: μ − √β_t σ).

    Returns the signed β_t of :func:`beta_bucb`, so the index is μ − sign(β)√|β| σ.
    """

    name = "bucb"

    def __init__(self, omega: float = 1.0, xi: float = 1.0, beta_scale: float = 1.0):
        self.omega, self.xi, self.beta_scale = omega, xi, beta_scale

    @property
    def params(self) -> dict[str, Any]:
        return {"omega": self.omega, "xi": self.xi, "beta_scale": self.beta_scale}

    def indices(self, model, t, rng):
        z = bucb_quantile_z(t, model.n_arms, self.omega, xi=self.xi)
        beta = beta_bucb(t, model.n_arms, self.omega, xi=self.xi, scale=self.beta_scale)
        mu, sd = model.mean_std()
        return mu + (math.sqrt(self.beta_scale) * z) * sd, beta


@declared(Option("joint", flag, False, "one joint posterior draw instead of independent per-edge draws",
                 "003 Algorithm 2 draws each edge independently", aliases=("joint_samples",), metavar="FLAG"))
class ThompsonPolicy(Policy):
    """GP-TS: a posterior draw (independent per edge as the paper, or joint)."""

    name = "ts"

    def __init__(self, joint: bool = False):
        self.joint = joint

    @property
    def params(self) -> dict[str, Any]:
        return {"joint": self.joint}

    def indices(self, model, t, rng):
        _check_t(t)
        return np.asarray(model.sample(rng, joint=self.joint), dtype=np.float64), math.nan


@declared()
class GreedyPolicy(Policy):
    """The posterior mean (no exploration; a reference)."""

    name = "greedy"

    def __init__(self):
        pass

    def indices(self, model, t, rng):
        _check_t(t)
        mu, _ = model.mean_std()
        return mu, math.nan


#: The index rules by name; the agents registry (:mod:`evroute.bandit.agents`) names the policies
#: (``gp-ucb``, ``bi-ts``, ...) and declares their options once.
RULES_BY_NAME: dict[str, type[Policy]] = {
    "ucb": UCBPolicy,
    "bucb": BayesUCBPolicy,
    "ts": ThompsonPolicy,
    "greedy": GreedyPolicy,
}
RULES: tuple[str, ...] = tuple(RULES_BY_NAME)
#: The posterior families an index rule runs on: the GP (``gp-*``) and independent edges (``bi-*``).
MODEL_FAMILIES: tuple[str, ...] = ("gp", "bi")


def make_policy(rule: str, **options: Any) -> Policy:
    """Create an index rule by name: ``ucb``, ``bucb``, ``ts`` or ``greedy``, with its keyword
    arguments (``beta_scale``; ``omega``, ``xi``, ``beta_scale``; ``joint``). The agents registry
    declares, checks and converts these options (``gp-bucb[xi=0.5]``); a bad value here raises
    :class:`EvrouteError`."""
    key = str(rule).strip().lower()
    if key not in RULES_BY_NAME:
        raise EvrouteError(f"unknown policy rule {rule!r}; choose one of: {', '.join(RULES)}")
    try:
        return RULES_BY_NAME[key](**options)
    except TypeError:
        raise EvrouteError(f"unknown option(s) for policy rule {key!r}: {', '.join(sorted(options))}") from None
