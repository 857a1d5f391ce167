"""Frequentist confidence widths for kernel regression (paper 000, Flynn & Reeb 2024), in the
units of a GP posterior, on aggregated data (counts and sums per distinct input).

Units (spec confidence-bounds §1.2, wave2-notes "Paper 000 in evroute"): the model's prior
covariance K plays c·k and its noise variance ς² plays σ²; B is the RKHS norm of the
residual f − m with respect to K (‖g‖²_K = gᵀK⁻¹g on a finite set). Paper 000's regulariser
α (in k units) is a noise level a = c·α of a GP with prior K, and its ρ_α = s_a/√c, so every
width below is a multiple of a GP posterior standard deviation s_a:

- **AMM** (Cor. 4.6, eq. 14 at α = σ²/c; Lemma C.2): UCB = μ + β s with
  β² = ln det(I + M/ς²) + B² + 2 ln(1/δ);
- **AY** (Abbasi-Yadkori 2012, Thm 3.11, with λ = σ²/c): β = √(ln det(I + M/ς²) + 2 ln(1/δ)) + B;
- **IGP** (Chowdhury & Gopalan 2017, Thm 2), its regulariser 1 + η matched to the model's
  noise (c = ς²/(1 + η)): β = B + √(1+η) √(ln det(I + M/ς²) + Nη + 2 ln(1/δ)), N observations;
- **DMM** (eq. 12 on a grid): UCB = min_a μ_a + √(R̃²(a)/a) s_a over a ∈ ς²·{0.1, 0.3, 1, 3, 10},
  R̃²(a) = q(ς²) − q(a) + ς² ln det(I + M/ς²) + 2ς² ln(1/δ) + a B² (Cor. 4.3 in K units),
  q(a) = a s̄ᵀ(M + aI)⁻¹ s̄ (Lemma C.1).

Here O is the set of distinct observed inputs with counts n, D = diag(n), residual sums s
(of y − m), s̄ = s/√n and M = D^½ K_OO D^½: the aggregated forms equal the per-observation
ones (spec §1.5; tested). Energy is a cost, so the agents use the lower bounds (μ − width).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg as sla

from ..errors import EvrouteError

__all__ = ["DMM_GRID", "dual_bounds", "information_logdet", "q_value", "q_from_mean", "rtilde2", "amm_beta", "ay_beta",
           "igp_beta", "confidence_widths"]

#: The DMM grid of paper 000 (§7): A = σ²/c · {0.1, 0.3, 1, 3, 10}, as multiples of ς².
DMM_GRID = (0.1, 0.3, 1.0, 3.0, 10.0)


def _check_prob(delta) -> float:
    d = float(delta)
    if not 0.0 < d < 1.0:
        raise EvrouteError(f"delta must be in (0, 1), got {delta!r}")
    return d


def information_logdet(K_OO, counts, noise_var: float) -> float:
    """Ln det(I + D^½ K_OO D^½ / ς²) (the information gain, times 2, of every observation).

    Computed as ln det(K_OO + ς² D⁻¹) − ln det(ς² D⁻¹) from one Cholesky factor (the matrix
    is at least ς²/max n on its diagonal: no jitter needed). Equal to the sum over rounds of
    the batch increments ln det(I + D_t^½ Σ_{S_t|t−1} D_t^½/ς²) (chain rule), which is what a
    round adds; summing per-edge ln(1 + n σ²/ς²) instead would be the looser Hadamard bound.
    """
    c = np.asarray(counts, dtype=np.float64)
    if c.size == 0:
        return 0.0
    A = np.array(K_OO, dtype=np.float64)
    A[np.diag_indices_from(A)] += noise_var / c
    L = sla.cholesky(A, lower=True, check_finite=False)
    return float(2.0 * np.sum(np.log(np.diag(L))) - np.sum(np.log(noise_var / c)))


def q_value(K_OO, counts, resid_sums, *, a: float) -> float:
    """q(a) = a s̄ᵀ(M + aI)⁻¹ s̄ (Lemma C.1, aggregated; the constant yᵀy − ‖s̄‖² of the
    per-observation form is left out: it cancels in R̃²)."""
    c = np.asarray(counts, dtype=np.float64)
    if c.size == 0:
        return 0.0
    r = np.asarray(resid_sums, dtype=np.float64) / c  # residual means
    A = np.array(K_OO, dtype=np.float64)
    A[np.diag_indices_from(A)] += a / c
    return float(a * r @ sla.cho_solve(sla.cho_factor(A, lower=True, check_finite=False), r, check_finite=False))


def q_from_mean(counts, resid_means, fitted) -> float:
    """q(a) from the noise-a GP posterior mean at the observed inputs: with A = K + aD⁻¹ and
    α = A⁻¹r, the fitted residual μ̂ = Kα = r − aD⁻¹α, so q(a) = a rᵀα = Σ_j n_j r_j (r_j − μ̂_j).
    (No solve: any backend's posterior mean gives it.)"""
    n = np.asarray(counts, dtype=np.float64)
    r = np.asarray(resid_means, dtype=np.float64)
    return float(np.sum(n * r * (r - np.asarray(fitted, dtype=np.float64))))


def rtilde2(a: float, q_a: float, q_noise: float, *, noise_var: float, logdet: float, delta: float, B: float) -> float:
    """R̃²(a) = q(ς²) − q(a) + ς² ln det(I + M/ς²) + 2ς² ln(1/δ) + a B² (Cor. 4.3, K units).
    Negative means the confidence set is empty (a misspecified B, ς or kernel)."""
    return float(q_noise - q_a + noise_var * logdet + 2.0 * noise_var * math.log(1.0 / _check_prob(delta))
                 + a * B * B)


def amm_beta(logdet: float, B: float, delta: float) -> float:
    """AMM's width multiplier (eq. 14 at α = σ²/c, Lemma C.2): √(ln det + B² + 2 ln(1/δ))."""
    return math.sqrt(max(logdet, 0.0) + B * B + 2.0 * math.log(1.0 / _check_prob(delta)))


def ay_beta(logdet: float, B: float, delta: float) -> float:
    """Abbasi-Yadkori's (Thm 3.11 at λ = σ²/c): √(ln det + 2 ln(1/δ)) + B."""
    return math.sqrt(max(logdet, 0.0) + 2.0 * math.log(1.0 / _check_prob(delta))) + B


def igp_beta(logdet: float, n_obs: int, eta: float, *, B: float, delta: float, ratio: float = 1.0) -> float:
    """IGP-UCB's (Chowdhury & Gopalan 2017, Thm 2) multiplier of s_a, a = c(1 + η) its
    regulariser in K units: B + √((1+η) ς²/a) √(ln det(I + M/a) + Nη + 2 ln(1/δ)), ``ratio`` = ς²/a
    and ``logdet`` taken at a. The routing agents match a to the model's noise (ratio 1:
    c = ς²/(1 + η)); paper 000's experiment uses α = 1 + η in its own units (a = c(1 + η))."""
    return B + math.sqrt((1.0 + eta) * ratio) * math.sqrt(max(logdet, 0.0) + n_obs * eta
                                                          + 2.0 * math.log(1.0 / _check_prob(delta)))


def confidence_widths(rule: str, *, logdet: float, B: float, delta: float, noise_var: float, n_obs: int = 0,
                      eta: float = 0.0, q: dict | None = None) -> dict[float, float]:
    """The width multiplier w_a of each noise level a used by ``rule``, so that the bound is
    μ_a ∓ w_a s_a (the tightest over a): ``amm``, ``ay``, ``igp`` use a = ς² alone; ``dmm`` the
    grid ς²·:data:`DMM_GRID` with w_a = √(max(R̃²(a), 0)/a) (``q`` maps a → q(a), ς² included).
    Returns {a: w_a}; an empty set shows as w_a = 0 (see :func:`rtilde2`)."""
    if rule == "amm":
        return {noise_var: amm_beta(logdet, B, delta)}
    if rule == "ay":
        return {noise_var: ay_beta(logdet, B, delta)}
    if rule == "igp":
        return {noise_var: igp_beta(logdet, n_obs, eta, B=B, delta=delta)}
    if rule == "dmm":
        if q is None:
            raise EvrouteError("dmm needs q(a) for every a of the grid")
        out = {}
        for a, qa in q.items():
            r2 = rtilde2(a, qa, q[noise_var], noise_var=noise_var, logdet=logdet, delta=delta, B=B)
            out[a] = math.sqrt(max(r2, 0.0) / a)
        return out
    raise EvrouteError(f"unknown confidence rule {rule!r}; choose one of: amm, dmm, ay, igp")


def dual_bounds(lam, u, Z, *, kss, noise_var: float, delta: float, B: float, upper: bool = True,
                levels=None) -> np.ndarray:
    """Paper 000's exact bound (CMM, eq. 10) through its 1-D dual (eq. 12) for many functionals at
    once, in the eigenbasis of M (spec §1.3's eigen trick): with M = QΛQᵀ (``lam`` = Λ), u = Qᵀs̄
    and one column z = Qᵀ D^½ k_O(g) of ``Z`` per functional g (a point, or Σ_{e∈S} k(·, e) for a
    route), prior variance ``kss`` = k(g, g),

        μ_a = Σ_i z_i u_i/(λ_i + a),  s²_a = k(g, g) − Σ_i z_i²/(λ_i + a),  q(a) = a Σ_i u_i²/(λ_i + a),

    and the bound min_a μ_a + √(R̃²(a)/a) s_a (``upper``; the lower bound: max_a μ_a − …) over the
    noise levels ``levels`` (default: 241 logarithmic steps over ς²·[10⁻⁴, 10⁴] and DMM's five).
    Any a gives a valid bound (weak duality); the extremum over a is the SOCP's value where strong
    duality holds. Prior means are not included (add them). O(|levels| · N · #functionals)."""
    lam = np.maximum(np.asarray(lam, dtype=np.float64), 0.0)
    u = np.asarray(u, dtype=np.float64)
    Z = np.asarray(Z, dtype=np.float64).reshape(lam.size, -1)
    kss = np.broadcast_to(np.asarray(kss, dtype=np.float64), (Z.shape[1],))
    if levels is None:
        levels = np.union1d(noise_var * np.logspace(-4, 4, 241), noise_var * np.asarray(DMM_GRID))
    levels = np.asarray(levels, dtype=np.float64)
    logdet = float(np.sum(np.log1p(lam / noise_var)))
    inv = 1.0 / (lam[:, None] + levels[None, :])  # N × A
    q = levels * ((u * u) @ inv)  # q(a) per level
    q0 = noise_var * float(np.sum(u * u / (lam + noise_var)))
    r2 = np.maximum(q0 - q + noise_var * logdet + 2.0 * noise_var * math.log(1.0 / _check_prob(delta))
                    + levels * B * B, 0.0)
    mu = (inv * u[:, None]).T @ Z  # A × G
    var = np.maximum(kss[None, :] - inv.T @ (Z * Z), 0.0)
    width = np.sqrt(r2 / levels)[:, None] * np.sqrt(var)
    return (mu + width).min(axis=0) if upper else (mu - width).max(axis=0)
