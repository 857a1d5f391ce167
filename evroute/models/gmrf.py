"""The exact GP posterior on a sparse-precision prior (a Gaussian Markov random field).

``--model exact`` uses this class by itself when the prior has a sparse precision and no
dense covariance (the graph Matérn kernel with an integer ν on large networks: the prior's
``representation`` is ``"sparse"``); the user does not choose it.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.linalg.blas import dgemm, dtrmm

from ..errors import EvrouteError
from ..priors.linalg import SparseCholesky, SparseSolver, jittered_cholesky
from ..validate import choice, nonneg_int, positive_float, positive_int
from .base import JOINT_SAMPLES, SPARSE_PRECISION, PosteriorModel, readonly

__all__ = ["GMRFPosterior", "FACTOR_FLOPS_PER_NNZ", "MERGE_RULES"]

#: When the two-level exact posteriors fold their active block into the base.
MERGE_RULES = ("auto", "always", "never")

#: Cost model of the merge rule: a refactorisation of Q + D costs about as much time as this
#: many dense BLAS-3 flops per stored entry of the prior's factor of P (measured on the
#: synthetic cities, 3k–100k edges: a factorisation ≈ 300 solves, a solve ≈ 3.3 ns per
#: entry, dense triangular products ≈ 35 GFLOP/s on 2 cores). It only decides *when* to
#: merge, from sizes alone (never from timings, so the results do not depend on the machine).
FACTOR_FLOPS_PER_NNZ = 3.5e4

_CHUNK = 16384  # rows of the E×b blocks handled at once (bounds the temporary memory)
#: The columns W (E×b, float64) never take more than this: with ``max_active`` it bounds the
#: active block (1 GB: 1,250 columns at 100k edges, 125 at 1M).
COLUMN_BYTES = 1_000_000_000


class GMRFPosterior(PosteriorModel):
    """Exact GP posterior over all E edges when the prior is given by its sparse precision Q
    (paper 003 Eq. 2–3; Rue & Held 2005, Ch. 2: conditioning a GMRF on noisy observations
    adds a diagonal to the precision).

    With the counts c and sums of the observations per edge, D = diag(c/ς²):

        posterior precision Q + D,   μ = m + (Q + D)⁻¹ (sums − c∘m)/ς²,   σ² = diag((Q + D)⁻¹),

    which equals the exact posterior of the dense backend (observations of an edge enter as
    one pseudo-observation, their mean with noise ς²/c). Nothing E×E is ever formed.

    Two levels (as :class:`evroute.models.ExactGPModel`, with a sparse factor as the base):

    * **base** (the posterior at the last merge, counts c₀): a sparse Cholesky factor of
      Q + D₀ (CHOLMOD), the base mean μ⁰ (one solve: exact) and variances σ⁰² (carried from
      the level above at each merge; before any data the prior's, from selected inversion).
    * **columns** W = Σ⁰_{:,j} = (Q + D₀)⁻¹ e_j of the edges seen since the merge (one sparse
      solve each, E×b), and the **active** ones among them (δc = c − c₀ > 0): the current
      posterior is the base conditioned on their pseudo-observations (mean of the new data,
      noise ς²/δc). With B = W_AA + diag(ς²/δc_A) = L Lᵀ (b×b):

          μ = μ⁰ + W_A B⁻¹ (ȳ_A − μ⁰_A),   σ² = σ⁰² − rowsum((W_A L⁻ᵀ)²),

      recomputed from W each round (O(E b²) in BLAS-3, no drift from round to round).

    A **merge** refactorises Q + D with all the data (its symbolic analysis is redone by
    CHOLMOD), sets μ⁰ by one exact solve and σ⁰² = σ², and carries the columns of the last
    round's edges to the new base exactly, Σ¹_{:,R} = W_R − W_A B⁻¹ W_{A,R} (one GEMM instead
    of |R| solves: a repeated route needs no new solves). With ``merge="auto"`` a merge
    happens when one more round of the active block would cost more than the average cost
    per round of the current cycle (dense work E·b² per round against a refactorisation of
    :data:`FACTOR_FLOPS_PER_NNZ` × nnz(L) flops; renewal theory, as the exact backend).

    Checks after every merge: the sequential mean against the exact solve, and the
    variances of two probe edges against (Q + D)⁻¹ e_p; on failure the variances are
    recomputed exactly by selected inversion (:meth:`evroute.priors.linalg.SparseCholesky.inverse_diagonal`).

    Joint draws (``sample(joint=True)``) use Matheron's rule twice, without a merge: a prior
    draw f₀ conditioned on the base data, f₁ = f₀ + (Q + D₀)⁻¹ D₀ (ȳ₀ − f₀ − ε₀), then on the
    active pseudo-observations, f = f₁ + W_A B⁻¹ (ȳ_A − f₁,A − ε_A), ε ~ N(0, ς²/count).

    Parameters
    ----------
    prior : evroute.priors.prior.Prior
        A prior with a sparse precision (``prior.is_markov``); its diagonal and
        :meth:`~evroute.priors.prior.Prior.precision` are used, and its draws for joint samples.
    noise_var : float
        ς².
    merge : {"auto", "always", "never"}
        When to refactorise (see above); ``"never"`` only when more than ``max_active``
        columns are held.
    max_active : int
        Merge whenever more columns than this are held (and than :data:`COLUMN_BYTES` allow).
    refactor_every : int
        Also merge every this many rounds (0: by the rule only).
    check_tol : float
        Tolerance of the checks, relative to the largest prior variance (σ²) or standard
        deviation (μ).
    """

    capabilities = frozenset({JOINT_SAMPLES, SPARSE_PRECISION})

    def __init__(self, prior, noise_var: float, *, merge: str = "auto", max_active: int = 2048,
                 refactor_every: int = 0, check_tol: float = 1e-8):
        if not getattr(prior, "is_markov", False):
            raise EvrouteError(f"{type(prior).__name__} has no sparse precision; the dense exact backend serves it")
        self._m = np.array(prior.mean, dtype=np.float64)
        E = self.n_arms = int(self._m.size)
        self.noise_var = positive_float("noise_var", noise_var)
        self.merge = choice("merge", merge, MERGE_RULES)
        self.max_active = positive_int("max_active", max_active)
        self._max_cols = max(16, min(self.max_active, COLUMN_BYTES // (8 * E)))
        self.refactor_every = nonneg_int("refactor_every", refactor_every)
        self.check_tol = positive_float("check_tol", check_tol)
        self._prior = prior
        self._Q = sp.csc_matrix(prior.precision(), dtype=np.float64)
        if self._Q.shape != (E, E):
            raise EvrouteError(f"the prior's precision must be {E}×{E}, got {self._Q.shape}")
        self._kdiag = np.array(prior.diag(), dtype=np.float64)
        if self._kdiag.shape != (E,) or not np.all(np.isfinite(self._kdiag)) or np.any(self._kdiag <= 0):
            raise EvrouteError("the prior's diagonal must be E positive finite variances")
        self._var_scale = float(self._kdiag.max())
        nnz = getattr(prior, "factor_nnz", None) or 3 * self._Q.nnz
        self._merge_flops = FACTOR_FLOPS_PER_NNZ * float(nnz)

        self._counts = np.zeros(E, np.int64)
        self._sums = np.zeros(E)
        self._c0 = np.zeros(E)  # counts and sums at the last merge
        self._s0 = np.zeros(E)
        self._F0: SparseSolver | None = None  # factor of Q + D₀ (None before the first merge)
        self._mean0 = self._m.copy()
        self._var0 = self._kdiag.copy()
        self._mean = self._mean0
        self._var = self._var0
        self._cache: tuple[np.ndarray, np.ndarray] | None = None
        # the column block at its bound at once: np.zeros takes untouched (zero) pages from the
        # system, so only the columns written cost memory, and W is never copied to grow (a
        # doubling would hold the old and the new block together: the peak of large networks)
        cap = self._max_cols + 256
        self._W = np.zeros((E, cap), order="F")
        self._col_edges = np.zeros(cap, np.int64)
        self._col_pos = np.full(E, -1, np.int64)
        self._p = 0  # columns held
        self._a = 0  # active columns: the first _a of W
        self._LB = np.zeros((0, 0))
        self._last_round = np.empty(0, np.int64)
        self._rounds_since_merge = 0
        self._cycle_cost = 0.0
        # diagnostics (tests, the benchmark)
        self.n_merges = 0
        self.n_solves = 0  # sparse solves (one per right-hand side) for new columns
        self.n_check_failures = 0

    # -- public ---------------------------------------------------------------------------

    @property
    def n_columns(self) -> int:
        """Columns of the base posterior held (edges seen since the last merge)."""
        return self._p

    def update(self, edges, observed) -> None:
        uniq, _, _ = self._record(edges, observed)
        if uniq.size == 0:
            return
        self._cache = None
        self._last_round = uniq
        self._add_columns(uniq[self._col_pos[uniq] < 0])
        self._condition()
        self._rounds_since_merge += 1
        b = self._a
        round_cost = self.n_arms * float(b) * b
        self._cycle_cost += round_cost
        if (self.merge == "always" or self._p > self._max_cols
                or (self.refactor_every and self._rounds_since_merge >= self.refactor_every)):
            self._merge()
        elif self.merge == "auto":
            # renewal rule: merge when the next round (≈ this one's cost) would raise the
            # cycle's average cost per round, merge included
            carry = self.n_arms * float(b) * self._last_round.size
            average = (self._cycle_cost + self._merge_flops + carry) / self._rounds_since_merge
            if round_cost >= average:
                self._merge()

    def mean_std(self) -> tuple[np.ndarray, np.ndarray]:
        if self._cache is None:
            self._cache = (readonly(self._mean.copy()), readonly(np.sqrt(np.maximum(self._var, 0.0))))
        return self._cache

    def sample(self, rng: np.random.Generator, joint: bool = False) -> np.ndarray:
        if not joint:
            mu, sd = self.mean_std()
            return mu + sd * rng.standard_normal(self.n_arms)
        f = np.array(self._prior.sample(rng), dtype=np.float64)
        S0 = np.flatnonzero(self._c0)
        if S0.size:  # condition the prior draw on the base data
            c0 = self._c0[S0]
            eps = np.sqrt(self.noise_var / c0) * rng.standard_normal(S0.size)
            rhs = np.zeros(self.n_arms)
            rhs[S0] = c0 * (self._s0[S0] / c0 - f[S0] - eps) / self.noise_var
            f = f + self._F0.solve(rhs)
        a = self._a
        if a:  # then on the active pseudo-observations
            edges = self._col_edges[:a]
            dc = self._counts[edges] - self._c0[edges]
            eps = np.sqrt(self.noise_var / dc) * rng.standard_normal(a)
            r = (self._sums[edges] - self._s0[edges]) / dc - f[edges] - eps
            f = f + self._W[:, :a] @ sla.cho_solve((self._LB, True), r, check_finite=False)
        return f

    # -- internals ------------------------------------------------------------------------

    def _base_columns(self, q: np.ndarray) -> np.ndarray:
        """Σ⁰_{:,q} (E×|q|): prior rows before the first merge, else solves with Q + D₀."""
        self.n_solves += q.size
        if self._F0 is None:
            return np.asfortranarray(self._prior.rows(q).T)
        rhs = np.zeros((self.n_arms, q.size))
        rhs[q, np.arange(q.size)] = 1.0
        return self._F0.solve(rhs)

    def _add_columns(self, q: np.ndarray) -> None:
        if q.size == 0:
            return
        p, need = self._p, self._p + q.size
        if need > self._W.shape[1]:
            cap = need + 256  # (a round with more new edges than the bound: a merge follows)
            W = np.zeros((self.n_arms, cap), order="F")
            W[:, :p] = self._W[:, :p]
            self._W = W
            edges = np.zeros(cap, np.int64)
            edges[:p] = self._col_edges[:p]
            self._col_edges = edges
        for start in range(0, q.size, 256):  # bounded right-hand-side blocks
            part = q[start:start + 256]
            self._W[:, p + start:p + start + part.size] = self._base_columns(part)
        self._col_edges[p:need] = q
        self._col_pos[q] = np.arange(p, need)
        self._p = need

    def _compact(self) -> int:
        """Move the active columns (δc > 0) to the front of W by swaps; return their number."""
        held = self._col_edges[:self._p]
        active = (self._counts[held] - self._c0[held]) > 0
        a = int(np.count_nonzero(active))
        idle_front = np.flatnonzero(~active[:a])
        busy_back = a + np.flatnonzero(active[a:])
        for i, j in zip(idle_front, busy_back, strict=True):  # (few: columns carried but not re-observed)
            tmp = self._W[:, i].copy()
            self._W[:, i] = self._W[:, j]
            self._W[:, j] = tmp
            ei, ej = self._col_edges[i], self._col_edges[j]
            self._col_edges[i], self._col_edges[j] = ej, ei
            self._col_pos[ej], self._col_pos[ei] = i, j
        return a

    def _condition(self) -> None:
        """μ, σ² from the base and the active columns (fresh every round)."""
        a = self._a = self._compact()
        if a == 0:
            self._mean, self._var, self._LB = self._mean0, self._var0, np.zeros((0, 0))
            return
        edges = self._col_edges[:a]
        dc = self._counts[edges] - self._c0[edges]
        WA = self._W[:, :a]  # a view: no copy of the E×b block
        WAA = WA[edges]
        B = 0.5 * (WAA + WAA.T)
        B[np.diag_indices_from(B)] += self.noise_var / dc
        self._LB = jittered_cholesky(B, what="base posterior block + noise")
        alpha = sla.cho_solve((self._LB, True), (self._sums[edges] - self._s0[edges]) / dc - self._mean0[edges],
                              check_finite=False)
        self._mean = self._mean0 + WA @ alpha
        Linv = sla.solve_triangular(self._LB, np.eye(a), lower=True, check_finite=False)
        var = self._var0.copy()
        for lo in range(0, self.n_arms, _CHUNK):  # σ² −= rowsum((W_A L⁻ᵀ)²), in row blocks
            Z = dtrmm(1.0, Linv, WA[lo:lo + _CHUNK], side=1, lower=1, trans_a=1)  # (triangular: E·b² flops)
            var[lo:lo + _CHUNK] -= np.einsum("ij,ij->i", Z, Z)
        self._var = var

    def _merge(self) -> None:
        """Refactorise Q + D with all the data; carry the last round's columns to the new base."""
        nv = self.noise_var
        keep = self._last_round
        a = self._a
        carried = None
        if keep.size and a:  # Σ¹_{:,R} = W_R − W_A B⁻¹ W_{A,R}
            R = self._col_pos[keep]
            T = sla.cho_solve((self._LB, True), self._W[np.ix_(self._col_edges[:a], R)], check_finite=False)
            carried = dgemm(-1.0, self._W[:, :a], T, beta=1.0, c=np.asfortranarray(self._W[:, R]), overwrite_c=1)
        self._c0 = self._counts.astype(np.float64)
        self._s0 = self._sums.copy()
        D = sp.diags(self._c0 / nv, format="csc")
        if self._F0 is not None:  # (its memory back before the new factor is built)
            self._F0.close()
            self._F0 = None
        self._F0 = SparseSolver(self._Q + D, "posterior precision Q + D")
        mean_seq = self._mean
        self._mean0 = self._m + self._F0.solve((self._s0 - self._c0 * self._m) / nv)
        self._var0 = self._var
        # empty the columns, keep the carried ones
        self._col_pos[self._col_edges[:self._p]] = -1
        self._p = 0
        self._a = 0
        self._LB = np.zeros((0, 0))
        if carried is not None:
            self._W[:, :keep.size] = carried
            self._col_edges[:keep.size] = keep
            self._col_pos[keep] = np.arange(keep.size)
            self._p = keep.size
        self._mean, self._var = self._mean0, self._var0
        self._rounds_since_merge = 0
        self._cycle_cost = 0.0
        self.n_merges += 1
        if not self._checks_pass(mean_seq):
            self.n_check_failures += 1
            self._var0 = self._var = SparseCholesky(self._Q + D, "posterior precision Q + D").inverse_diagonal()

    def _checks_pass(self, mean_seq: np.ndarray) -> bool:
        E = self.n_arms
        tol = self.check_tol * self._var_scale
        if not np.all(np.abs(mean_seq - self._mean0) <= self.check_tol * (np.abs(self._mean0)
                                                                           + math.sqrt(self._var_scale))):
            return False
        k = self.n_merges
        probe = np.unique(np.array([(k * 7919 + 17) % E, (k * 104729 + 5 * E // 7) % E], np.int64))
        rhs = np.zeros((E, probe.size))
        rhs[probe, np.arange(probe.size)] = 1.0
        exact = self._F0.solve(rhs)[probe, np.arange(probe.size)]
        return bool(np.all(np.abs(exact - self._var0[probe]) <= tol))
