"""``--model exact``: the exact GP posterior of paper 003 (Sec. 2.2, Eq. 2–3), incremental."""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg as sla
from scipy.linalg.blas import dgemm

from ..errors import EvrouteError
from ..priors.linalg import jittered_cholesky
from ..specs import Option, declared
from ..validate import choice, in_range, int_range, nonneg_int, positive_float, positive_int
from .base import COVARIANCE, INFORMATION_GAIN, JOINT_SAMPLES, PosteriorModel, readonly
from .gmrf import MERGE_RULES, GMRFPosterior
from .local import CHUNK, CHUNK_MAX, MAX_THREADS, TOL_MAX, LocalGMRFPosterior

__all__ = ["ExactGPModel", "make_exact", "OPTIONS", "MERGE_RULES"]


class ExactGPModel(PosteriorModel):
    """Exact GP posterior over all E edges (paper 003, Sec. 2.2, Eq. 2–3).

    Observations of a distinct edge i enter as one pseudo-observation ȳ_i (the mean of its
    c_i observations) with noise ς²/c_i, which gives exactly the posterior of Eq. 2–3 with
    every observation listed separately. For the observed set S, A = K_SS + diag(ς²/c_S):

        μ = m + K_*S A⁻¹ (ȳ_S − m_S),   σ² = diag(K) − diag(K_*S A⁻¹ K_S*).

    Design (incremental, two levels)
    --------------------------------
    A single-level update that keeps G = K_*S A⁻¹ (E×n) current costs O(E n k) per round
    for k edges with new counts (a rank-k Woodbury GEMM that reads and writes all of G);
    at n = 1,500, k = 60 that is ~1 GFLOP and ~130 MB of memory traffic every round. Here
    the posterior is kept at two levels instead:

    * **base** (frozen since the last merge): the posterior Σ⁰, μ⁰ given the data up to
      the last merge, stored as its cross-covariance columns C₀ = Σ⁰_{:,S₀} (E×n₀), with
      the counts c₀ of that time and the kernel rows K_{S₀,*}. The base column of a base
      edge is read from C₀; that of a never-observed edge q is K_{:,q} − K_{*S₀} v with
      A₀ v = K_{S₀,q}, solved by iterative refinement against the exact A₀ (kernel +
      counts), preconditioned by A₀⁻¹ ≈ D₀⁻¹ − D₀⁻¹ Σ⁰_{S₀S₀} D₀⁻¹ (D₀ = diag(ς²/c₀)); it
      costs O(E n₀) per new edge. (Recovering K_{*S₀}A₀⁻¹ as C₀ D₀⁻¹ instead amplifies
      the rounding errors of C₀ by c/ς² and made the merges drift exponentially.)
    * **active block** Q (the b distinct edges observed since the last merge): their base
      columns W = Σ⁰_{:,Q} (E×b, written once when an edge enters Q, never updated), the
      counts δc_Q and sums of the data since the merge, and the Cholesky factor of
      B = Σ⁰_QQ + diag(ς²/δc_Q) (rebuilt every round, O(b³/3)). The current posterior is
      the base posterior conditioned on these pseudo-observations:

          μ = μ⁰ + W B⁻¹(ȳ_Q − μ⁰_Q),   Σ_{:,I} = W_{:,I} − W B⁻¹ W_{Q,I}.

    A round with k distinct edges I computes Σ_{:,I} (one GEMM, O(E b k)) and updates the
    variances by exact sequential conditioning on the round's per-edge means (noise
    ς²/δc_i): σ² −= rowsum(Z ∘ Z), Z = Σ_{:,I} L⁻ᵀ, L Lᵀ = Σ_II + diag(ς²/δc) (O(E k²));
    the mean is recomputed from W (O(E b)). Active columns are always recomputed from the
    static W and a fresh factor of B, so errors do not compound from round to round.

    A **merge** folds Q into the base, C₀ −= W B⁻¹ Σ⁰_{Q,S₀} (one GEMM, O(E b n₀); Σ⁰_{Q,S₀}
    is taken from W, not from rows of C₀, so that the same numbers enter both sides and
    the S₀-block stays symmetric — this keeps repeated merges stable), appends the columns
    of Q's new edges and empties Q. With ``merge="auto"`` it happens when one more round
    would raise the average cost per round of the current cycle (a renewal-theory rule on
    flop estimates, see ``_merge_pays``): for paths spread uniformly over all observed
    edges this merges every round or two (≈ a single-level O(E n k) update); when routes
    repeat, Q stays small and merges are rare. ``"always"`` merges after every round (the
    single-level scheme), ``"never"`` only when Q exceeds ``max_active`` edges.

    Numerical drift is guarded by a refactorisation from scratch (Cholesky of A,
    O(n³/3 + 2 E n²)) whenever a cheap check fails, and optionally every
    ``refactor_every`` rounds. The checks, after every merge: the base edges' variances
    are known twice (sequentially updated, and as the diagonal of C₀[S₀, :]); μ and σ² of
    four probe edges are recomputed exactly from K and the counts (O(n₀²) each, via the
    refinement above); the refinement must converge. Tolerance: ``check_tol`` times the
    largest prior variance (σ²) or standard deviation (μ). Measured drift without any
    refactorisation on 500 rounds at E = 5,600 (``benchmarks/posterior_updates.py``) stays near
    1e-13, hence no periodic refactorisation by default. Variances are clipped at 0 on
    output; everything is float64.

    :meth:`mean_std` is cached between updates. Joint posterior samples use Matheron's
    rule (pathwise conditioning), f = f₀ + K_*S A⁻¹(ȳ_S − f₀,S − ε), with f₀ a prior draw
    and ε ~ N(0, diag(ς²/c_S)); the prior Cholesky factor of K (jitter added if needed)
    is computed once, O(E³/3), then each draw costs O(E² + E n).

    Parameters
    ----------
    prior : evroute.priors.prior.Prior
        Mean and covariance of f over all edges; its dense covariance is used read-only
        and not copied (it must fit in memory: E² floats).
    noise_var : float
        Observation noise variance ς².
    merge : {"auto", "always", "never"}
        When to fold the active block into the base (see above).
    max_active : int
        Merge whenever the active block holds more edges than this.
    refactor_every : int
        Also rebuild the factorisation from scratch every this many rounds (0, the
        default: only when a check fails).
    check_tol : float
        Tolerance of the drift check, relative to the largest prior variance.
    """

    capabilities = frozenset({COVARIANCE, JOINT_SAMPLES, INFORMATION_GAIN})

    def __init__(
        self,
        prior,
        noise_var: float,
        *,
        merge: str = "auto",
        max_active: int = 2048,
        refactor_every: int = 0,
        check_tol: float = 1e-8,
    ):
        self._m = np.array(prior.mean, dtype=np.float64)
        E = self.n_arms = int(self._m.size)
        self.noise_var = positive_float("noise_var", noise_var)
        # the prior is read through its rows k(S, ·) and its diagonal only: a dense matrix
        # (rows are slices) or a sparse precision (rows are sparse solves) serve alike
        self._prior = prior
        self._kdiag = np.array(prior.diag(), dtype=np.float64)
        if self._kdiag.shape != (E,):
            raise EvrouteError(f"the prior's diagonal must have length {E}, got shape {self._kdiag.shape}")
        if not np.all(np.isfinite(self._kdiag)) or np.any(self._kdiag < 0):
            raise EvrouteError("kernel matrix has a negative or non-finite diagonal")
        self.merge = choice("merge", merge, MERGE_RULES)
        self.max_active = positive_int("max_active", max_active)
        self.refactor_every = nonneg_int("refactor_every", refactor_every)
        self.check_tol = positive_float("check_tol", check_tol)
        scale = float(self._kdiag.max())
        self._var_scale = scale if scale > 0 else 1.0

        self._counts = np.zeros(E, np.int64)
        self._info = 0.0  # ln det(I + D^½ K_OO D^½/ς²) (see information_logdet)
        self._sums = np.zeros(E)
        self._mean = self._m.copy()
        self._var = self._kdiag.copy()
        self._cache: tuple[np.ndarray, np.ndarray] | None = None
        self._rounds_since_refactor = 0
        self._need_refactor = False
        # diagnostics (also used by tests and the benchmark)
        self.n_merges = 0
        self.n_refactors = 0
        self.n_check_failures = 0
        self._reset_levels(0)

    # -- public ---------------------------------------------------------------------------

    @property
    def factor_sizes(self) -> tuple[int, int]:
        """(n₀, b): columns of the base and of the active block (both ≤ n_distinct)."""
        return self._n0, self._b

    def update(self, edges, observed) -> None:
        uniq, dc, ds = self._record(edges, observed)
        if uniq.size == 0:
            return
        self._cache = None
        self._rounds_since_refactor += 1
        if self.refactor_every and self._rounds_since_refactor >= self.refactor_every:
            self.refactor()
            return
        b_old = self._b
        self._add_to_active(uniq[self._act_pos[uniq] < 0])
        if self._need_refactor:  # the refinement did not converge: the base has drifted
            self.refactor()
            return
        self._condition(uniq, dc, ds, b_old)
        if self.merge == "always" or self._b > self.max_active:
            self._merge()
        elif self.merge == "auto" and self._merge_pays(b_old, uniq.size):
            self._merge()

    def _merge_pays(self, b_old: int, k: int) -> bool:
        """The ``auto`` rule: merge when one more round would raise the cycle's average cost.

        A cycle runs from one merge to the next. Its cost (in units of E flops) is the
        active-block work of its rounds, Σ (b_old k + b + b³/3E), plus the final merge,
        ≈ b (n₀ + b_new)(1 + 2n₀/E) + 50 n₀²/E. Continuing one more round costs about
        b k̄ + b + b³/3E now and makes the merge dearer by g (n₀ + b)(1 + 2n₀/E), where k̄
        is the mean round size and g the mean growth of Q per round after the cycle's first
        round (which only refills Q). As in renewal theory, the average cost per round is
        smallest when this marginal cost reaches the current average: then merge.
        """
        E, b, n0 = self.n_arms, self._b, self._n0
        self._cyc_rounds += 1
        self._cyc_cost += b_old * k + b + b**3 / (3.0 * E)
        self._cyc_k += k
        if self._cyc_rounds == 1:
            self._cyc_b1 = b
            return False
        growth = (b - self._cyc_b1) / (self._cyc_rounds - 1)
        widen = 1.0 + 2.0 * n0 / E  # the merge also updates Σ⁰_{S₀S₀} (n₀×b×n₀)
        merge_cost = b * (n0 + self._b_new) * widen + 50.0 * n0 * n0 / E
        average = (self._cyc_cost + merge_cost) / self._cyc_rounds
        k_mean = self._cyc_k / self._cyc_rounds
        marginal = b * k_mean + b + b**3 / (3.0 * E) + growth * (n0 + b) * widen
        return marginal >= average

    def mean_std(self) -> tuple[np.ndarray, np.ndarray]:
        if self._cache is None:
            mean = readonly(self._mean.copy())
            std = readonly(np.sqrt(np.maximum(self._var, 0.0)))
            self._cache = (mean, std)
        return self._cache

    def sample(self, rng: np.random.Generator, joint: bool = False) -> np.ndarray:
        if not joint:
            mu, sd = self.mean_std()
            return mu + sd * rng.standard_normal(self.n_arms)
        f0 = self._prior.sample(rng)  # a prior draw (Matheron's rule below conditions it)
        self._merge()
        n0 = self._n0
        if n0 == 0:
            return f0
        S = self._base_edges[:n0]
        c = self._c0[:n0]
        ybar = self._sums[S] / c
        eps = np.sqrt(self.noise_var / c) * rng.standard_normal(n0)
        u = self._solve_A0((ybar - f0[S] - eps)[:, None])[:, 0]
        return f0 + self._KS0[:n0].T @ u

    @property
    def information_logdet(self) -> float:
        """Ln det(I + D^½ K_OO D^½ / ς²) over the distinct observed edges O with counts D (twice
        the information gain of every observation so far), accumulated from each round's
        batch increment ln det(I + D_t^½ Σ_{I|t−1} D_t^½/ς²), which the update's factor of
        Σ_II + ς²D_t⁻¹ gives for free (rebuilt from scratch at a refactorisation)."""
        return self._info

    def covariance(self, idx) -> np.ndarray:
        """Σ(idx, idx) = K_II − K_IS A⁻¹ K_SI (|idx| prior rows' worth of work)."""
        idx = np.asarray(idx, dtype=np.int64).ravel()
        self._merge()
        n0 = self._n0
        cov = np.array(self._prior.block(idx), dtype=np.float64)
        if n0:
            KS = self._KS0[:n0][:, idx]
            cov -= KS.T @ self._solve_A0(KS)
        return 0.5 * (cov + cov.T)

    def posterior_cov(self) -> np.ndarray:
        """Dense posterior covariance K − K_*S A⁻¹ K_S* (E×E; for checks on small problems)."""
        self._merge()
        n0 = self._n0
        cov = np.array(self._prior.dense())
        if n0:
            KS = self._KS0[:n0]
            cov -= KS.T @ self._solve_A0(KS)
        return 0.5 * (cov + cov.T)

    def refactor(self) -> None:
        """Rebuild the base from scratch (Cholesky of A) and empty the active block."""
        S = np.flatnonzero(self._counts)
        n = S.size
        self._reset_levels(n)
        self._rounds_since_refactor = 0
        self._need_refactor = False
        self.n_refactors += 1
        self._cache = None
        if n == 0:
            self._mean = self._m.copy()
            self._var = self._kdiag.copy()
            self._mean0 = self._mean.copy()
            return
        c = self._counts[S].astype(np.float64)
        ybar = self._sums[S] / c
        d = self.noise_var / c
        self._KS0[:n] = self._prior.rows(S)  # rows = columns (K symmetric)
        KS = self._KS0[:n]
        KSS = KS[:, S]
        A = KSS + np.diag(d)
        L = jittered_cholesky(A, what="K_SS + noise")
        self._info = float(2.0 * np.sum(np.log(np.diag(L))) - np.sum(np.log(d)))  # from scratch
        Gt = sla.cho_solve((L, True), KS, check_finite=False)  # A⁻¹ K_S*  (n×E)
        self._mean = self._m + Gt.T @ (ybar - self._m[S])
        self._var = self._kdiag - np.einsum("ij,ij->j", Gt, KS)
        self._mean0 = self._mean.copy()
        self._C0[:, :n] = Gt.T * d  # Σ_{*S} = G D
        sig = self._C0[S, :n]
        self._sig0 = 0.5 * (sig + sig.T)
        self._C0[S, :n] = self._sig0
        self._KSS[:n, :n] = KSS
        self._base_edges[:n] = S
        self._base_pos[S] = np.arange(n)
        self._c0[:n] = c
        self._n0 = n

    # -- internals ------------------------------------------------------------------------

    def _reset_levels(self, cap0: int) -> None:
        E = self.n_arms
        cap0 = max(cap0, 16)
        self._n0 = 0
        self._C0 = np.zeros((E, cap0), order="F")  # Σ⁰_{:,S₀}
        self._KS0 = np.zeros((cap0, E))  # K_{S₀,*}
        self._c0 = np.zeros(cap0)
        self._base_edges = np.zeros(cap0, np.int64)
        self._base_pos = np.full(E, -1, np.int64)
        self._sig0 = np.zeros((0, 0))  # Σ⁰_{S₀S₀} (symmetric)
        self._KSS = np.zeros((cap0, cap0))  # K_{S₀S₀}
        self._mean0 = self._mean.copy()
        self._clear_active(16)

    def _clear_active(self, cap: int) -> None:
        E = self.n_arms
        self._b = 0
        self._b_new = 0  # active edges not in the base
        self._W = np.zeros((E, cap), order="F")
        self._dcq = np.zeros(cap)
        self._dsq = np.zeros(cap)
        self._act_edges = np.zeros(cap, np.int64)
        self._act_pos = np.full(E, -1, np.int64)
        self._LB = np.zeros((0, 0))
        self._cyc_rounds = 0
        self._cyc_cost = 0.0
        self._cyc_k = 0
        self._cyc_b1 = 0

    @staticmethod
    def _grow(arr: np.ndarray, used: int, need: int, axis: int = -1) -> np.ndarray:
        """``arr`` or a larger copy (capacity doubled) with room for ``need`` entries."""
        cap = arr.shape[axis]
        if need <= cap:
            return arr
        new_cap = max(need, 2 * cap)
        if arr.ndim == 1:
            out = np.zeros(new_cap, arr.dtype)
            out[:used] = arr[:used]
        elif axis in (-1, 1):
            out = np.zeros((arr.shape[0], new_cap), arr.dtype, order="F")
            out[:, :used] = arr[:, :used]
        else:
            out = np.zeros((new_cap, arr.shape[1]), arr.dtype)
            out[:used] = arr[:used]
        return out

    def _solve_A0(self, rhs: np.ndarray) -> np.ndarray:
        """Solve A₀ v = rhs (A₀ = K_{S₀S₀} + D₀) by iterative refinement.

        The preconditioner A₀⁻¹ ≈ D₀⁻¹ − D₀⁻¹ Σ⁰_{S₀S₀} D₀⁻¹ is exact in exact arithmetic;
        the residual uses the exact A₀, so rounding errors accumulated in Σ⁰ only slow the
        convergence. If it does not converge, a direct Cholesky solve is used and a
        refactorisation is scheduled.
        """
        n0 = self._n0
        d = (self.noise_var / self._c0[:n0])[:, None]
        kss, sig = self._KSS[:n0, :n0], self._sig0

        def precond(r):
            t = r / d
            return t - (sig @ t) / d

        v = precond(rhs)
        prev = 1.0  # relative size of the first correction: the whole first iterate
        for _ in range(12):
            dv = precond(rhs - (kss @ v + d * v))
            v += dv
            vmax = float(np.max(np.abs(v)))
            rel = float(np.max(np.abs(dv))) / vmax if vmax > 0 else 0.0
            # Each step multiplies the error by I − P A₀ (contraction ρ); ρ ≈ rel / prev,
            # and the first correction measures ρ itself, since the first iterate's error is
            # (I − P A₀) x. Stop when the error left, ≈ rel ρ/(1 − ρ), is below 1e-14: one
            # step usually (ρ ≈ 1e-10 here), where waiting for a correction ≤ 1e-14 took
            # three (the corrections stagnate at ~1e-13, the rounding level, for n₀ ≳ 300).
            rho = rel / prev
            if rel <= 1e-14 or (rho < 0.5 and rel * rho / (1.0 - rho) <= 1e-14):
                return v
            if rho >= 0.5:  # stagnating at the rounding level, or diverging
                if rel <= 1e-9:
                    return v
                break
            prev = rel
        self.n_check_failures += 1
        self._need_refactor = True
        L = jittered_cholesky(kss + np.diag(d[:, 0]), what="K_SS + noise")
        return sla.cho_solve((L, True), rhs, check_finite=False)

    def _fresh_columns(self, qn: np.ndarray) -> np.ndarray:
        """Base columns Σ⁰_{:,q} = K_{:,q} − K_{*S₀} A₀⁻¹ K_{S₀,q} of never-observed edges."""
        Kq = self._prior.rows(qn)  # rows = columns of K
        cols = np.asfortranarray(Kq.T)
        n0 = self._n0
        if n0:
            v = self._solve_A0(np.ascontiguousarray(Kq[:, self._base_edges[:n0]].T))
            cols = dgemm(-1.0, self._KS0[:n0].T, v, beta=1.0, c=cols, overwrite_c=1)
        return cols

    def _add_to_active(self, q: np.ndarray) -> None:
        """Append edges q (not yet in Q) to the active block with their base columns."""
        if q.size == 0:
            return
        b = self._b
        need = b + q.size
        self._W = self._grow(self._W, b, need)
        self._dcq = self._grow(self._dcq, b, need)
        self._dsq = self._grow(self._dsq, b, need)
        self._act_edges = self._grow(self._act_edges, b, need)
        pos = self._base_pos[q]
        for j in np.flatnonzero(pos >= 0):
            self._W[:, b + j] = self._C0[:, pos[j]]
        fresh = np.flatnonzero(pos < 0)
        if fresh.size:
            cols = self._fresh_columns(q[fresh])
            for i, j in enumerate(fresh):
                self._W[:, b + j] = cols[:, i]
        self._b_new += fresh.size
        self._dcq[b:need] = 0.0
        self._dsq[b:need] = 0.0
        self._act_edges[b:need] = q
        self._act_pos[q] = np.arange(b, need)
        self._b = need

    def _solve_B(self, rhs: np.ndarray) -> np.ndarray:
        return sla.cho_solve((self._LB, True), rhs, check_finite=False)

    def _condition(self, uniq: np.ndarray, dc: np.ndarray, ds: np.ndarray, b_old: int) -> None:
        """Condition on the round's data (all its edges are in Q; the first b_old entries
        of Q carry data from earlier rounds, factorised in self._LB)."""
        ipos = self._act_pos[uniq]
        W = self._W
        X = np.asfortranarray(W[:, ipos])  # Σ⁰_{:,I}
        if b_old:
            T = self._solve_B(W[np.ix_(self._act_edges[:b_old], ipos)])  # B⁻¹ Σ⁰_{Q,I}
            X = dgemm(-1.0, W[:, :b_old], T, beta=1.0, c=X, overwrite_c=1)  # Σ_{:,I}
        M = X[uniq, :]
        M = 0.5 * (M + M.T)
        M[np.diag_indices_from(M)] += self.noise_var / dc
        L = jittered_cholesky(M, what="posterior covariance of the observed edges")
        # the round's batch information gain: ln det(I + D^½ Σ_II D^½/ς²) (chain rule)
        self._info += float(2.0 * np.sum(np.log(np.diag(L))) - np.sum(np.log(self.noise_var / dc)))
        # (dtrtri: OpenBLAS's threaded trsm is very slow on tiny systems)
        Linv, info = sla.lapack.dtrtri(L, lower=1)
        if info != 0:
            raise EvrouteError("posterior covariance of the observed edges is singular")
        Z = X @ np.tril(Linv).T  # Σ_{:,I} L⁻ᵀ
        self._var -= np.einsum("ij,ij->i", Z, Z)
        # data since the merge; refactorise B = Σ⁰_QQ + diag(ς²/δc_Q)
        self._dcq[ipos] += dc
        self._dsq[ipos] += ds
        b = self._b
        Qe = self._act_edges[:b]
        B = W[Qe, :b]
        B = 0.5 * (B + B.T)
        B[np.diag_indices_from(B)] += self.noise_var / self._dcq[:b]
        self._LB = jittered_cholesky(B, what="Sigma0_QQ + noise")
        alpha = self._solve_B(self._dsq[:b] / self._dcq[:b] - self._mean0[Qe])
        self._mean = self._mean0 + W[:, :b] @ alpha

    def _merge(self) -> None:
        """Fold the active block into the base (exact), then check for drift."""
        b, n0 = self._b, self._n0
        if b == 0:
            return
        Qe = self._act_edges[:b].copy()
        W = self._W[:, :b]
        new = np.flatnonzero(self._base_pos[Qe] < 0)
        n_new = new.size
        # T = B⁻¹ [Σ⁰_{Q,S₀}, Σ⁰_{Q,Q_new}], always read from the columns W (Σ⁰_{Q,S₀} as
        # the transpose of W's rows S₀ rather than from rows of C₀): the same numbers
        # then enter both sides, which keeps the S₀-block symmetric and the merges stable.
        S_old = self._base_edges[:n0]
        WS = W[S_old, :]  # Σ⁰_{S₀,Q}
        R = np.empty((b, n0 + n_new))
        R[:, :n0] = WS.T
        R[:, n0:] = self._W[np.ix_(Qe, new)]
        T = self._solve_B(R)
        need = n0 + n_new
        self._C0 = self._grow(self._C0, n0, need)
        self._KS0 = self._grow(self._KS0, n0, need, axis=0)
        if need > self._KSS.shape[0]:
            kss = np.zeros((self._KS0.shape[0],) * 2)
            kss[:n0, :n0] = self._KSS[:n0, :n0]
            self._KSS = kss
        self._c0 = self._grow(self._c0, n0, need)
        self._base_edges = self._grow(self._base_edges, n0, need)
        sig = self._sig0
        if n0:
            dgemm(-1.0, W, T[:, :n0], beta=1.0, c=self._C0[:, :n0], overwrite_c=1)
            sig = sig - WS @ T[:, :n0]  # the same update restricted to rows S₀
        if n_new:
            qn = Qe[new]
            cols = np.asfortranarray(self._W[:, new])
            cols = dgemm(-1.0, W, T[:, n0:], beta=1.0, c=cols, overwrite_c=1)
            self._C0[:, n0:need] = cols
            self._KS0[n0:need] = self._prior.rows(qn)
            self._base_edges[n0:need] = qn
            knew = self._KS0[n0:need][:, self._base_edges[:need]]  # K_{new, S₀'}
            self._KSS[n0:need, :need] = knew
            self._KSS[:need, n0:need] = knew.T
            self._base_pos[qn] = np.arange(n0, need)
            full = np.empty((need, need))
            full[:n0, :n0] = sig
            full[:n0, n0:] = cols[S_old, :]
            full[n0:, :n0] = full[:n0, n0:].T
            full[n0:, n0:] = cols[qn, :]
            sig = full
        self._sig0 = sig
        self._n0 = need
        self._c0[self._base_pos[Qe]] = self._counts[Qe]
        self._mean0 = self._mean.copy()
        self._act_pos[Qe] = -1
        self._b = 0
        self._b_new = 0
        self._dcq[:b] = 0.0
        self._dsq[:b] = 0.0
        self._LB = np.zeros((0, 0))
        self._cyc_rounds = 0
        self._cyc_cost = 0.0
        self._cyc_k = 0
        self._cyc_b1 = 0
        self.n_merges += 1
        if not self._checks_pass(Qe):
            self.n_check_failures += 1
            self.refactor()

    def _checks_pass(self, recent: np.ndarray) -> bool:
        """Cheap drift checks right after a merge (the base is the current posterior).

        1. The base edges' variances are known twice: updated sequentially, and as the
           diagonal of Σ⁰_{S₀S₀} (from the merges).
        2. Spot check against the exact formula: for a few edges (two just merged, two
           spread over the network, changing with every merge) μ_e and σ²_e are recomputed
           from K and the counts, A₀ v = [K_{S₀,e}, ȳ − m_{S₀}] solved by refinement
           (O(n₀²) per edge).
        """
        n0 = self._n0
        S = self._base_edges[:n0]
        tol = self.check_tol * self._var_scale
        if not float(np.max(np.abs(np.diagonal(self._sig0) - self._var[S]))) <= tol:
            return False
        E = self.n_arms
        k = self.n_merges
        probe = np.unique(
            np.concatenate([recent[:2], [(k * 7919 + 17) % E, (k * 104729 + 5 * E // 7) % E]])
        ).astype(np.int64)
        rhs = np.empty((n0, probe.size + 1))
        rhs[:, :-1] = self._KS0[:n0][:, probe]
        rhs[:, -1] = self._sums[S] / self._c0[:n0] - self._m[S]
        v = self._solve_A0(rhs)
        if self._need_refactor:
            return False
        KeS = self._KS0[:n0][:, probe].T  # K_{e,S₀}
        var = self._kdiag[probe] - np.einsum("ij,ji->i", KeS, v[:, :-1])
        mean = self._m[probe] + KeS @ v[:, -1]
        dmean = np.abs(mean - self._mean[probe])
        return bool(
            np.all(np.abs(var - self._var[probe]) <= tol)
            and np.all(dmean <= self.check_tol * (np.abs(mean) + math.sqrt(self._var_scale)))
        )


def _merge_rule(name, value):
    return choice(name, value, MERGE_RULES)


#: How a sparse-precision posterior is updated: ``local`` (with error bounds, on domains around the
#: route) or ``global`` (one factorisation of Q + D per merge).
UPDATE_RULES = ("local", "global")


def _update_rule(name, value):
    return choice(name, value, UPDATE_RULES)


def _threads(name, value):
    """``threads``: ``auto`` or 1..:data:`MAX_THREADS`."""
    if str(value).strip().lower() == "auto":
        return "auto"
    return int_range(1, MAX_THREADS, why="threads of a local update")(name, value)


_threads.bounds = f"auto or [1, {MAX_THREADS}]"


#: The options of ``--model exact[...]`` (defaults: measured in benchmarks/posterior_updates.py).
OPTIONS = (
    Option("merge", _merge_rule, "auto", "when to fold the active block into the base: auto, always or never"),
    Option("max_active", positive_int, 2048, "merge whenever the active block holds more edges than this"),
    Option("refactor_every", nonneg_int, 0, "also refactorise from scratch every this many rounds (0: only when a "
           "drift check fails)"),
    Option("check_tol", positive_float, 1e-8, "drift-check tolerance, relative to the largest prior variance"),
    Option("update", _update_rule, "local", "sparse-precision priors: local (each update on a domain around the "
           "route, with error bounds: rigorous for the means, first-order for the variances) or global (one "
           "factorisation of Q + D; the reference); dense "
           "priors ignore it", "docs/performance-scale.md: local updates"),
    Option("tol", in_range(0, TOL_MAX, lo_open=True, why="relative error bound"), 1e-8, "update=local: bound on the error of every mean (relative to sigma_0; a rigorous "
           "bound) and variance (to sigma_0^2; a first-order bound)"),
    Option("threads", _threads, "auto", "update=local: 1 or 2 threads, or auto: 2 where the process may use two "
           "CPUs or more (chunks are conditioned in two lanes, or in pairs; the results are the same bits for either)",
           "measured: 100k gp-ucb 1.6x faster a round on two threads (docs/performance-scale.md)"),
    Option("chunk", int_range(1, CHUNK_MAX, why="route edges conditioned at once"), CHUNK, "update=local: the most "
           "route edges conditioned at once, on one domain (a round's are cut into an even number of equal chunks; "
           "measured in docs/performance-scale.md)"),
)


@declared(*OPTIONS)
def make_exact(prior, *, noise_var, seed=0, merge="auto", max_active=2048, refactor_every=0,
               check_tol=1e-8, update="local", **local) -> PosteriorModel:
    """Factory of the ``exact`` backend; ``seed`` is unused; ``local`` holds the options of the
    local updates (``tol``, ``threads``, ``chunk``: :class:`~evroute.models.local.LocalGMRFPosterior`'s).

    The representation follows the prior's: :class:`ExactGPModel` (kernel rows and
    diagonal) for a dense prior; for a sparse precision (the prior's ``representation`` is
    ``"sparse"``) :class:`evroute.models.local.LocalGMRFPosterior` (``update="local"``: local
    updates with error bounds ≤ ``tol``: rigorous for the means, first-order for the variances) or :class:`evroute.models.gmrf.GMRFPosterior`
    (``update="global"``). All give the exact posterior of paper 003 Eq. 2–3 (the local one
    within its stated bounds).
    """
    if getattr(prior, "representation", "dense") == "sparse":
        if update == "local" and prior.precision_min_eigenvalue() is not None:
            return LocalGMRFPosterior(prior, noise_var, **local)
        return GMRFPosterior(prior, noise_var, merge=merge, max_active=max_active, refactor_every=refactor_every,
                             check_tol=check_tol)
    return ExactGPModel(prior, noise_var, merge=merge, max_active=max_active, refactor_every=refactor_every,
                        check_tol=check_tol)
