"""Nyström-dictionary posteriors: ``--model nystrom`` (EK-UCB's incremental KORS dictionary,
paper 001) and ``--model bkb`` (BKB's resampled dictionary, paper 002).

Both papers compute the same approximate posterior for a given dictionary Z of anchor edges,
the DTC (deterministic training conditional) posterior (spec nystrom-dictionaries §0; 001
Prop. 4.2 = 002 Eq. 4); they differ only in how Z is built. One engine,
:class:`NystromPosterior`, holds the posterior; the two dictionary rules are subclasses.

Stable parametrisation (spec §J.2; equal to both papers' formulas, without their squared
condition number or Sherman–Morrison drift). With K_ZZ + jitter·I = R Rᵀ (R lower),
the embedding of every edge e is z_e = R⁻¹ k_Z(e) (the columns of Ze = R⁻¹ K_{Z,:}, m×E, kept
while the dictionary is fixed and extended by one row per new anchor: old coordinates never
change because R is triangular). With per-edge counts c_j and sums of y − m_j (the prior mean
is modelled out and added back; spec wave2-notes), λ = ς²:

    G = Σ_j c_j z_j z_jᵀ,   b = Σ_j (Σ y − c_j m_j) z_j,   V = G + λI = L_V L_Vᵀ,
    μ̃_e = m_e + z_eᵀ V⁻¹ b,
    σ̃²_e = max(0, k_ee − ‖z_e‖²) + λ ‖L_V⁻¹ z_e‖²        (GP units: λ × the papers' σ̃²).

With Z = every observed edge this is the exact GP posterior (tested). Kernel rows come from
the prior operator (:meth:`evroute.priors.prior.Prior.rows`: slices of a dense matrix, or sparse
solves with the graph Matérn precision): never an E×E matrix, m×E floats in all.
"""

from __future__ import annotations

import math
import time

import numpy as np
import scipy.linalg as sla

from ..errors import EvrouteError
from ..specs import Option, declared
from ..validate import flag, nonneg_float, positive_float, positive_int
from .base import JOINT_SAMPLES, PosteriorModel, aggregate_observations, readonly

__all__ = ["SCORING", "DOWNDATE_COST", "NystromPosterior", "KORSPosterior", "BKBPosterior", "make_nystrom", "make_bkb", "NYSTROM_OPTIONS",
           "BKB_OPTIONS"]


#: How the all-edge variances are updated (:meth:`NystromPosterior._score_all`).
SCORING = ("downdate", "full")
#: A downdate is used when it costs less than the full recomputation: its flops 2mBE + B²E
#: against m²E, times this factor (1: the flop counts; both are BLAS-3 with similar rates).
DOWNDATE_COST = 1.0


def _bad_scoring(value):
    raise EvrouteError(f"scoring must be one of {', '.join(SCORING)}, got {value!r}")


def _scoring(name, value):
    v = str(value).strip().lower()
    return v if v in SCORING else _bad_scoring(value)


class NystromPosterior(PosteriorModel):
    """The DTC posterior of a dictionary of anchor edges (see the module docstring).

    Subclasses decide the dictionary (:meth:`_choose_anchors`, called after the data of a
    round are recorded and before the posterior is recomputed).

    Parameters
    ----------
    prior : evroute.priors.prior.Prior
        Mean, diagonal and rows k(idx, ·) are used.
    noise_var : float
        ς² = λ.
    seed : int
        Seeds the dictionary's random choices.
    m_max : int
        Most anchors (a safety cap: capping voids the papers' guarantees).
    jitter : float
        Added to K_ZZ's diagonal, relative to the largest prior variance (spec §J.7: 1e-8).
    dup_tol : float
        An anchor whose residual variance k(s,s) − ‖R⁻¹k_Z(s)‖² is below dup_tol × the largest
        prior variance is a near-duplicate and is not added (spec §5, §J.7: 1e-6).
    scoring : {"downdate", "full"}
        How the all-edge variances are brought up to date (see :meth:`_score_all`): ``full``
        recomputes ‖L_V⁻¹z_e‖² for every edge (m²E flops); ``downdate`` subtracts the round's
        rank-B Woodbury term while the dictionary is unchanged (2mBE + B²E flops, B the round's
        distinct edges), with a full recomputation every ``refresh`` rounds and whenever the
        dictionary changes. Both are exact in exact arithmetic.
    refresh : int
        Rounds of downdates between two full recomputations.
    """

    capabilities = frozenset({JOINT_SAMPLES})

    #: keep the anchors' kernel rows (for a dictionary rebuilt often: BKB)
    _keep_rows = False

    def __init__(self, prior, noise_var: float, *, seed: int = 0, m_max: int = 2000, jitter: float = 1e-8,
                 dup_tol: float = 1e-6, scoring: str = "downdate", refresh: int = 20):
        self._prior = prior
        self._m = np.array(prior.mean, dtype=np.float64)
        E = self.n_arms = int(self._m.size)
        self.noise_var = positive_float("noise_var", noise_var)
        self.m_max = positive_int("m_max", m_max)
        self._kdiag = np.array(prior.diag(), dtype=np.float64)
        if self._kdiag.shape != (E,) or not np.all(np.isfinite(self._kdiag)) or np.any(self._kdiag < 0):
            raise EvrouteError("the prior's diagonal must be E non-negative finite variances")
        self._kappa2 = float(self._kdiag.max()) or 1.0
        self.jitter = nonneg_float("jitter", jitter) * self._kappa2
        self.dup_tol = nonneg_float("dup_tol", dup_tol) * self._kappa2
        self.seed = int(seed)
        self._rng = np.random.default_rng([self.seed, 0x4E59])
        self._counts = np.zeros(E, np.int64)
        self._sums = np.zeros(E)
        self.scoring = scoring if scoring in SCORING else _bad_scoring(scoring)
        self.refresh = positive_int("refresh", refresh)
        self._reset_dictionary()
        self._LV = np.zeros((0, 0))
        self._w = np.zeros(0)
        self._mean, self._var = self._m.copy(), self._kdiag.copy()
        self._quad = np.zeros(self.n_arms)  # z_eᵀ V⁻¹ z_e of every edge (the data term of σ̃²)
        self._fresh = True  # the all-edge mean and variance are those of the current posterior
        self._since_full = 0  # rounds of rank-B downdates since the last full scoring
        self.n_downdates = 0
        self._round: tuple[np.ndarray, np.ndarray] | None = None  # last update's distinct edges, counts
        self._cache: tuple[np.ndarray, np.ndarray] | None = None
        self.n_duplicates = 0  # anchors refused as near-duplicates
        self.dictionary_sizes: list[int] = []  # m after each update

    # -- dictionary -------------------------------------------------------------------------

    def _reset_dictionary(self) -> None:
        E = self.n_arms
        self._Z = np.zeros(0, np.int64)  # committed anchors (rows of Ze)
        self._pending: list[tuple[int, np.ndarray]] = []  # anchors added this round: (edge, k(edge, ·))
        self._pending_idx = np.zeros(0, np.int64)
        self._Rbuf = np.zeros((16, 16))  # R over committed and pending anchors (grown by doubling)
        self._Ze_buf = np.zeros((16, E))  # rows 0..m-1 are Ze (grown by doubling)
        self._rows = {}  # k(z, ·) of the anchors (reused when BKB resamples)
        self._znorm = np.zeros(E)  # ‖z_e‖²
        self._G = np.zeros((0, 0))  # Σ_j c_j z_j z_jᵀ over the observed edges
        self._b = np.zeros(0)  # Σ_j (Σy − c_j m_j) z_j
        self._changed = True  # the dictionary changed since the last all-edge scoring
        self._reset = True  # ... and was rebuilt from scratch (not only grown)

    @property
    def _Ze(self) -> np.ndarray:
        """Ze = R⁻¹ K_{Z,:} (m×E, a view; committed anchors)."""
        return self._Ze_buf[:self._Z.size]

    @property
    def _R(self) -> np.ndarray:
        """R, the lower Cholesky factor of K_ZZ + jitter·I (a view)."""
        m = self.m
        return self._Rbuf[:m, :m]

    @property
    def _Zall(self) -> np.ndarray:
        """Committed and pending anchors, in order."""
        return np.append(self._Z, self._pending_idx) if self._pending else self._Z

    @property
    def anchors(self) -> np.ndarray:
        """The dictionary's anchor edges, in the order they were added."""
        return readonly(self._Zall.copy())

    @property
    def m(self) -> int:
        return int(self._Z.size + len(self._pending))

    def _coords(self, s: int) -> np.ndarray:
        """z_s = R⁻¹ k_Z(s) over the committed and pending anchors: the committed part is a
        column of Ze, each pending coordinate one step of the triangular solve (O(m) each)."""
        z0 = self._Ze[:, s]
        if not self._pending:
            return z0
        m0, m = self._Z.size, self.m
        kp = np.fromiter((row[s] for _, row in self._pending), dtype=np.float64, count=m - m0)
        kp[self._pending_idx == s] += self.jitter
        R = self._Rbuf
        if m0:
            kp -= R[m0:m, :m0] @ z0
        return np.concatenate([z0, sla.solve_triangular(R[m0:m, m0:m], kp, lower=True, check_finite=False)])

    def _add_anchor(self, s: int, k_row: np.ndarray | None = None) -> bool:
        """Add edge s to the dictionary (a row of R now; its row of Ze at :meth:`_commit`);
        False for a near-duplicate. ``k_row``: k(s, ·) if already at hand (else one row from
        the prior)."""
        if self.m >= self.m_max:
            return False
        r = self._coords(s)
        rho2 = float(self._kdiag[s] + self.jitter - r @ r)
        if not rho2 > self.dup_tol:
            self.n_duplicates += 1
            return False
        m = self.m
        if m == self._Rbuf.shape[0]:
            buf = np.zeros((2 * m, 2 * m))
            buf[:m, :m] = self._Rbuf
            self._Rbuf = buf
        self._Rbuf[m, :m] = r
        self._Rbuf[m, m] = math.sqrt(rho2)
        if k_row is None:
            k_row = self._prior.rows(np.array([s]))[0]
        self._pending.append((int(s), np.asarray(k_row, dtype=np.float64)))
        self._pending_idx = np.append(self._pending_idx, s)
        return True

    def _commit(self) -> None:
        """The pending anchors' rows of Ze in one block, N = R₂₂⁻¹(K_A + jitter − R₂₁ Ze)
        (one GEMM and one triangular solve instead of one pass over Ze per anchor); G and b
        bordered over the observed edges (old coordinates do not change: R is triangular)."""
        if not self._pending:
            return
        m0, k = self._Z.size, len(self._pending)
        A = np.array([a for a, _ in self._pending], dtype=np.int64)
        N = np.array([row for _, row in self._pending], dtype=np.float64)  # k×E (a copy)
        N[np.arange(k), A] += self.jitter
        if m0:
            N -= self._R[m0:, :m0] @ self._Ze
        N = sla.solve_triangular(self._R[m0:, m0:], N, lower=True, check_finite=False)
        if m0 + k > self._Ze_buf.shape[0]:
            size = self._Ze_buf.shape[0]
            while size < m0 + k:
                size *= 2
            buf = np.zeros((size, self.n_arms))
            buf[:m0] = self._Ze
            self._Ze_buf = buf
        self._Ze_buf[m0:m0 + k] = N
        self._znorm += np.einsum("ij,ij->j", N, N)
        S = np.flatnonzero(self._counts)
        c = self._counts[S].astype(np.float64)
        NS = N[:, S]
        G = np.zeros((m0 + k, m0 + k))
        G[:m0, :m0] = self._G
        G[:m0, m0:] = (self._Ze_buf[:m0, S] * c) @ NS.T
        G[m0:, :m0] = G[:m0, m0:].T
        G[m0:, m0:] = (NS * c) @ NS.T
        self._G = G
        self._b = np.append(self._b, NS @ (self._sums[S] - c * self._m[S]))
        if self._keep_rows:
            for a, row in self._pending:
                self._rows[a] = row
        self._Z = np.append(self._Z, A)
        self._pending = []
        self._pending_idx = np.zeros(0, np.int64)
        self._changed = True

    def _set_dictionary(self, edges) -> None:
        """Rebuild the dictionary from scratch with ``edges`` (in that order); kernel rows of
        edges that were anchors before are reused, the others fetched in one call."""
        edges = np.asarray(edges, dtype=np.int64)
        old = self._rows
        missing = np.array([e for e in edges if int(e) not in old], dtype=np.int64)
        fetched = dict(zip(missing.tolist(), self._prior.rows(missing), strict=True)) if missing.size else {}
        self._reset_dictionary()
        for s in edges.tolist():
            self._add_anchor(s, old[s] if s in old else fetched[s])
        self._commit()

    def _choose_anchors(self, uniq: np.ndarray, edges: np.ndarray) -> None:  # pragma: no cover
        raise NotImplementedError

    # -- posterior ----------------------------------------------------------------------------

    def update(self, edges, observed) -> None:
        e = np.asarray(edges)
        uniq, dc, ds = aggregate_observations(edges, observed, self.n_arms)  # validates first
        if uniq.size == 0:
            return
        # paper 002's batch rule: the round's edges were all chosen under the round-(t−1)
        # posterior; 1 + Σ σ̃²_{t−1}(e) (papers' units) bounds the over-count
        stale = 1.0 + float(np.sum(self._variance_at(uniq))) / self.noise_var
        self._counts[uniq] += dc.astype(np.int64)
        self._sums[uniq] += ds
        self._cache = None
        self._stale = stale
        # the round's data in the current coordinates (G += Z_B C Z_Bᵀ: one GEMM)
        ZB = self._Ze[:, uniq]
        self._G += (ZB * dc) @ ZB.T
        self._b += ZB @ (ds - dc * self._m[uniq])
        tic = time.perf_counter()
        self._choose_anchors(uniq, e.astype(np.int64, copy=False))
        self._commit()
        toc = time.perf_counter()
        self.dictionary_sizes.append(self.m)
        self._posterior()
        self._round = (uniq, dc)
        self._seconds = (toc - tic, time.perf_counter() - toc)

    def diagnostics(self) -> dict[str, float]:
        """``dictionary_size`` m, ``stale_ratio`` 1 + Σ_{e∈round} σ̃²_{t−1}(e) (paper 002's batch
        rule, in its units), and the seconds spent on the dictionary, on the posterior update
        (V's factor) and on the last all-edge scoring (means and variances of every edge,
        done when a policy asks for them: the round's selection)."""
        d, p = getattr(self, "_seconds", (0.0, 0.0))
        return {"dictionary_size": float(self.m), "stale_ratio": float(getattr(self, "_stale", 1.0)),
                "seconds_dictionary": d, "seconds_posterior": p,
                "seconds_scoring": float(getattr(self, "_seconds_scoring", 0.0))}

    def _posterior(self) -> None:
        """Factor V = G + λI and solve for w; the all-edge scores follow lazily."""
        self._prev = (self._LV, self._quad, self._fresh)
        self._cache = None
        self._round = None
        m = self.m
        if m == 0 or not np.any(self._counts):
            self._LV, self._w = np.zeros((0, 0)), np.zeros(0)
        else:
            V = self._G + self.noise_var * np.eye(m)
            # cond(V) ≤ 1 + n κ²/λ: no jitter needed
            self._LV = sla.cholesky(V, lower=True, check_finite=False)
            self._w = sla.cho_solve((self._LV, True), self._b, check_finite=False)
        self._fresh = False

    def _score_all(self) -> None:
        """Bring the all-edge mean and variance up to date.

        μ̃ = m + Zeᵀw (2mE flops). The variance σ̃² = max(0, k_ee − ‖z_e‖²) + λ z_eᵀV⁻¹z_e:
        ``full`` computes ‖L_V⁻¹z_e‖² for every edge (m²E). ``downdate``, when last round's
        values are current and the dictionary was kept or only grown (KORS), uses Woodbury on
        the old coordinates, V_A = V_{t−1} + Z_B C Z_Bᵀ (B distinct edges of the round, C their
        counts): z V_A⁻¹ z = z V_{t−1}⁻¹ z − ‖L_M⁻¹ A z‖², A = Z_Bᵀ V_{t−1}⁻¹,
        M = C⁻¹ + Z_Bᵀ V_{t−1}⁻¹ Z_B (paper 001 §4's batch update, on the embedded statistics);
        k new anchors add ‖L₂₂⁻¹(z₂ − L₂₁ L_A⁻¹ z₁)‖² (the bordered factor's new rows, L_A the
        leading block of the new L_V, which is V_A's factor): 2m(B + k)E + (B² + k²)E flops.
        """
        if self._fresh:
            return
        tic = time.perf_counter()
        try:
            self._score_all_now()
        finally:
            self._seconds_scoring = time.perf_counter() - tic

    def _score_all_now(self) -> None:
        self._fresh = True
        if self.m == 0 or not np.any(self._counts):
            self._mean, self._var = self._m.copy(), self._kdiag.copy()
            self._quad = np.zeros(self.n_arms)
            self._changed = self._reset = False
            return
        Ze = self._Ze
        m = self.m
        self._mean = self._m + Ze.T @ self._w
        LV0, q0, fresh0 = self._prev
        m0 = LV0.shape[0]
        uniq, dc = self._round if self._round is not None else (np.zeros(0, np.int64), np.zeros(0))
        B, k = uniq.size, m - m0
        usable = (self.scoring == "downdate" and fresh0 and not self._reset and B and 0 < m0 <= m
                  and self._since_full + 1 < self.refresh)
        if usable and DOWNDATE_COST * (2 * (B + k) + (B * B + k * k) / m0) < m * m / m0:
            # old coordinates: Woodbury on V_prev + Z_B C Z_Bᵀ (the leading block of the new V)
            Z1 = Ze[:m0]
            ZB = Z1[:, uniq]
            P = sla.cho_solve((LV0, True), ZB, check_finite=False)  # V_prev⁻¹ Z_B (m0×B)
            M = np.diag(1.0 / dc) + ZB.T @ P
            LM = sla.cholesky(M, lower=True, check_finite=False)
            W = sla.solve_triangular(LM, P.T @ Z1, lower=True, check_finite=False)  # B×E
            quad = q0 - np.einsum("ij,ij->j", W, W)
            if k:  # new coordinates: the new L_V = [[L_A, 0], [L21, L22]], L_A that leading block
                L = self._LV
                Pm = sla.solve_triangular(L[:m0, :m0], L[m0:, :m0].T, lower=True, trans="T", check_finite=False)
                R2 = sla.solve_triangular(L[m0:, m0:], Ze[m0:] - Pm.T @ Z1, lower=True, check_finite=False)
                quad = quad + np.einsum("ij,ij->j", R2, R2)
            self._quad = quad
            self._since_full += 1
            self.n_downdates += 1
        else:
            U = sla.solve_triangular(self._LV, Ze, lower=True, check_finite=False)
            self._quad = np.einsum("ij,ij->j", U, U)
            self._since_full = 0
        self._var = np.maximum(self._kdiag - self._znorm, 0.0) + self.noise_var * np.maximum(self._quad, 0.0)
        self._changed = self._reset = False

    def _variance_at(self, idx: np.ndarray) -> np.ndarray:
        """σ̃² of the current posterior at the edges ``idx`` only (O(m²|idx|))."""
        idx = np.asarray(idx, dtype=np.int64)
        if self._fresh:
            return self._var[idx]
        if self._LV.shape[0] == 0:
            return self._kdiag[idx].copy()
        Z = self._Ze[:, idx]
        U = sla.solve_triangular(self._LV, Z, lower=True, check_finite=False)
        return (np.maximum(self._kdiag[idx] - np.einsum("ij,ij->j", Z, Z), 0.0)
                + self.noise_var * np.einsum("ij,ij->j", U, U))

    def predict(self, idx) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation at the edges ``idx`` only (O(m²|idx|)),
        without scoring every edge: for callers that need a few arms per round."""
        idx = np.asarray(idx, dtype=np.int64)
        if self._fresh or self._LV.shape[0] == 0:
            mu = self._mean[idx] if self._fresh else self._m[idx].copy()
        else:
            mu = self._m[idx] + self._Ze[:, idx].T @ self._w
        return mu, np.sqrt(np.maximum(self._variance_at(idx), 0.0))

    def mean_std(self) -> tuple[np.ndarray, np.ndarray]:
        if self._cache is None:
            self._score_all()
            self._cache = (readonly(self._mean.copy()), readonly(np.sqrt(np.maximum(self._var, 0.0))))
        return self._cache

    def sample(self, rng: np.random.Generator, joint: bool = False) -> np.ndarray:
        """Independent per edge (the paper's GP-TS), or ``joint``: w ~ N(V⁻¹b, λV⁻¹) inside
        the Nyström span and an independent residual, f_e = m_e + z_eᵀw + √(k_ee − ‖z_e‖²) ξ_e
        (spec §J.4: the marginal variances are exact, correlations are kept in the span only)."""
        if not joint:
            return PosteriorModel.sample(self, rng, joint=False)
        if self.m == 0 or not np.any(self._counts):
            w = np.zeros(self.m)
            LV = math.sqrt(self.noise_var) * np.eye(self.m)  # V = λI: w ~ N(0, I), the prior in the span
        else:
            w, LV = self._w, self._LV
        u = rng.standard_normal(self.m)
        draw_w = w + math.sqrt(self.noise_var) * sla.solve_triangular(LV.T, u, lower=False, check_finite=False) \
            if self.m else w
        resid = np.sqrt(np.maximum(self._kdiag - self._znorm, 0.0))
        return self._m + self._Ze.T @ draw_w + resid * rng.standard_normal(self.n_arms)


class KORSPosterior(NystromPosterior):
    """``--model nystrom``: EK-UCB's incremental dictionary (paper 001, Alg. 1/5; KORS of
    Calandriello et al. 2017). Each observation of the round, in path order, is scored
    against the current dictionary (anchors added earlier in the round included):

        τ̃ = (1 + ε) d / (d + μ),   d = k(s,s) − βᵀ (D K_ZZ D + μI)⁻¹ β,   β = D k_Z(s),

    the closed form of 001 eq. 41 (not the authors' code, whose score is the quadratic form;
    spec §5), D = diag(1/√p_i) the anchors' weights; s is added with probability
    p̃ = min(γ τ̃, 1) and never reconsidered if rejected. The dictionary only grows.
    """

    def __init__(self, prior, noise_var, *, mu=None, eps=0.5, gamma=1.0, **kw):
        super().__init__(prior, noise_var, **kw)
        self.mu = self.noise_var if mu is None else positive_float("mu", mu)
        self.eps = positive_float("eps", eps)
        self.gamma = positive_float("gamma", gamma)
        self._p = np.zeros(0)  # the anchors' sampling probabilities
        self._LMbuf = np.zeros((16, 16))  # Cholesky factor of D K_ZZ D + μI (grown by doubling)
        self.n_scored = 0

    @property
    def _LM(self) -> np.ndarray:
        m = self._p.size
        return self._LMbuf[:m, :m]

    def _tau(self, d):
        """τ̃ = (1 + ε) d / (d + μ) from the residual d (001 eq. 41, closed form)."""
        return (1.0 + self.eps) * d / (d + self.mu)

    def kors_score(self, s: int) -> float:
        """τ̃(s) against the current dictionary (closed form of 001 eq. 41)."""
        return self._kors(s)[0]

    def _kors(self, s: int) -> tuple[float, np.ndarray]:
        """(τ̃, u) with u = L_M⁻¹ D k_Z(s), L_M the Cholesky factor of M = D K_ZZ D + μI (kept
        and bordered as anchors are added: O(m²) per score)."""
        kss = float(self._kdiag[s])
        if self.m == 0:
            u = np.zeros(0)
        else:
            kz = self._R @ self._coords(s)  # k_Z(s) = R z_s (less the jitter where s is an anchor)
            kz[self._Zall == s] -= self.jitter
            u = sla.solve_triangular(self._LM, kz / np.sqrt(self._p), lower=True, check_finite=False)
        d = max(kss - float(u @ u), 0.0)
        return self._tau(d), u

    def _kors_batch(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_kors` for several edges against the committed dictionary (one triangular
        solve with |idx| right-hand sides)."""
        assert not self._pending
        if self.m == 0:
            return self._tau(self._kdiag[idx]), np.zeros((0, idx.size))
        KZ = self._R @ self._Ze[:, idx]
        KZ[self._Z[:, None] == idx[None, :]] -= self.jitter
        U = sla.solve_triangular(self._LM, KZ / np.sqrt(self._p)[:, None], lower=True, check_finite=False)
        d = np.maximum(self._kdiag[idx] - np.einsum("ij,ij->j", U, U), 0.0)
        return self._tau(d), U

    def _kors_extend(self, s: int, u0: np.ndarray) -> tuple[float, np.ndarray]:
        """:meth:`_kors` of s from u0 = L_M⁻¹ D k_Z(s) over the anchors committed before the round
        (the column of :meth:`_kors_batch`): L_M only gains rows as anchors are added, so u0 is
        the leading part of u and only the coordinates of this round's anchors are new, one
        triangular solve of their k rows, O(k m) instead of O(m²); their kernel values k(a, s)
        are read from the rows held for them."""
        m0, M = u0.size, self._p.size
        if M == m0:
            u = u0
        else:
            kz = np.fromiter((row[s] for _, row in self._pending), dtype=np.float64, count=M - m0)
            L = self._LMbuf
            rhs = kz / np.sqrt(self._p[m0:M])
            if m0:
                rhs -= L[m0:M, :m0] @ u0
            u = np.concatenate([u0, sla.solve_triangular(L[m0:M, m0:M], rhs, lower=True, check_finite=False)])
        d = max(float(self._kdiag[s]) - float(u @ u), 0.0)
        return self._tau(d), u

    def _choose_anchors(self, uniq, edges) -> None:
        # one uniform per observation, in path order (as the sequential algorithm draws them)
        u = self._rng.random(edges.size)
        self.n_scored += int(edges.size)
        # τ̃ only falls as anchors are added (a ridge posterior variance): the scores against
        # the dictionary before the round bound this round's probabilities from above, so the
        # kernel rows of every edge that can still be accepted are fetched in one call
        distinct = np.unique(edges)
        tau0, U0 = self._kors_batch(distinct)
        bound = dict(zip(distinct.tolist(), np.minimum(self.gamma * tau0, 1.0).tolist(), strict=True))
        col = {int(e): j for j, e in enumerate(distinct)}
        maybe = [i for i in range(edges.size) if u[i] < bound[int(edges[i])]]
        if not maybe:
            return
        committed = set(self._Z.tolist())
        need = np.array(sorted({int(edges[i]) for i in maybe} - committed), dtype=np.int64)
        rows = dict(zip(need.tolist(), self._prior.rows(need), strict=True)) if need.size else {}
        m_before = self.m
        for i in maybe:  # the exact sequential rule, on the candidates that can pass it
            s = int(edges[i])
            if self.m == m_before:  # nothing added yet this round: the bound is the score
                p, uvec = bound[s], U0[:, col[s]]
            else:
                tau, uvec = self._kors_extend(s, U0[:, col[s]])
                p = min(self.gamma * tau, 1.0)
            if u[i] < p and self._add_anchor(s, rows.get(s)):
                # border M with the new anchor (weight 1/√p): column D k_Z(s)/√p, corner k_ss/p + μ
                m = self._p.size
                if m == self._LMbuf.shape[0]:
                    buf = np.zeros((2 * m, 2 * m))
                    buf[:m, :m] = self._LMbuf
                    self._LMbuf = buf
                l_row = uvec / math.sqrt(p)
                self._LMbuf[m, :m] = l_row
                self._LMbuf[m, m] = math.sqrt(max(self._kdiag[s] / p + self.mu - float(l_row @ l_row), 1e-300))
                self._p = np.append(self._p, p)


class BKBPosterior(NystromPosterior):
    """``--model bkb``: BKB's resampled dictionary (paper 002, Alg. 1). After each round the
    dictionary is drawn again from scratch: every distinct observed edge j enters with
    probability p_j = min(1, q̄ · c_j · σ̃²_j), σ̃²_j its current posterior variance in the
    papers' units (GP variance / λ) and c_j its count (the authors' code rule, one Bernoulli
    per distinct arm; spec wave2-notes). With ``lazy`` (BBKB), the dictionary is kept while
    1 + Σ σ̃²_e over the observations since the last resampling is ≤ ``ratio`` (the batch rule
    of BBKB's code, accumulated as there; σ̃² of each round under the previous posterior).
    """

    _keep_rows = True

    def __init__(self, prior, noise_var, *, qbar=3.0, lazy=False, ratio=2.0, **kw):
        super().__init__(prior, noise_var, **kw)
        self.qbar = positive_float("qbar", qbar)
        self.lazy = flag("lazy", lazy)
        self.ratio = positive_float("ratio", ratio)
        self.n_resamples = 0
        self.stale_ratios: list[float] = []
        self._since_resample = 0.0

    def _choose_anchors(self, uniq, edges) -> None:
        stale = self._stale
        self.stale_ratios.append(stale)
        self._since_resample += stale - 1.0  # Σ σ̃² of the observations since the last resampling
        if self.lazy and self.m and 1.0 + self._since_resample <= self.ratio:
            return
        self._since_resample = 0.0
        S = np.flatnonzero(self._counts)
        var_scaled = self._variance_at(S) / self.noise_var  # σ̃²_{t−1} in the papers' units (before this round)
        p = np.minimum(1.0, self.qbar * self._counts[S] * var_scaled)
        keep = S[self._rng.random(S.size) < p]
        self._set_dictionary(keep)
        self.n_resamples += 1


def _opt_mu(name, value):
    return None if value in (None, "", "noise") else positive_float(name, value)


_COMMON = (
    Option("m_max", positive_int, 2000, "most anchors (a safety cap; capping voids the guarantees)"),
    Option("jitter", nonneg_float, 1e-8, "jitter on K_ZZ, relative to the largest prior variance"),
    Option("dup_tol", nonneg_float, 1e-6, "near-duplicate anchors below this residual variance, relative to the "
           "largest prior variance, are not added"),
    Option("scoring", _scoring, "downdate", "all-edge variances: 'downdate' (rank-B Woodbury term of the round "
           "while the dictionary is fixed, exact) or 'full' (recomputed, m^2 E flops)"),
    Option("refresh", positive_int, 20, "rounds of downdates between full recomputations"),
)
#: Options of ``--model nystrom[...]``.
NYSTROM_OPTIONS = (
    Option("mu", _opt_mu, None, "KORS ridge mu; default the noise variance (001 Sec. 4: mu = lambda)"),
    Option("eps", positive_float, 0.5, "KORS accuracy epsilon (001 Prop. 4.1 and the authors' code: 0.5)"),
    Option("gamma", positive_float, 1.0, "KORS oversampling gamma (practice 1-10, paper 001 App. F; the theory's "
           "12 log(n/delta) keeps nearly every edge)"),
) + _COMMON
#: Options of ``--model bkb[...]``.
BKB_OPTIONS = (
    Option("qbar", positive_float, 3.0, "oversampling qbar of the resampling (practice 3-10; the authors' code "
           "default is 1)"),
    Option("lazy", flag, False, "BBKB: keep the dictionary while 1 + sum of the round's variances <= ratio"),
    Option("ratio", positive_float, 2.0, "the BBKB trigger C (the authors' code default: 2)"),
) + _COMMON


@declared(*NYSTROM_OPTIONS)
def make_nystrom(prior, *, noise_var, seed=0, mu=None, eps=0.5, gamma=1.0, m_max=2000, jitter=1e-8,
                 dup_tol=1e-6, scoring="downdate", refresh=20) -> KORSPosterior:
    """Factory of the ``nystrom`` backend (:class:`KORSPosterior`)."""
    return KORSPosterior(prior, noise_var, seed=seed, mu=mu, eps=eps, gamma=gamma, m_max=m_max, jitter=jitter,
                         dup_tol=dup_tol, scoring=scoring, refresh=refresh)


@declared(*BKB_OPTIONS)
def make_bkb(prior, *, noise_var, seed=0, qbar=3.0, lazy=False, ratio=2.0, m_max=2000, jitter=1e-8,
             dup_tol=1e-6, scoring="downdate", refresh=20) -> BKBPosterior:
    """Factory of the ``bkb`` backend (:class:`BKBPosterior`)."""
    return BKBPosterior(prior, noise_var, seed=seed, qbar=qbar, lazy=lazy, ratio=ratio, m_max=m_max, jitter=jitter,
                        dup_tol=dup_tol, scoring=scoring, refresh=refresh)
