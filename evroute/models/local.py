"""Local updates of the exact GMRF posterior with error bounds (``--model exact[update=local]``):
a rigorous bound on every mean, a first-order bound on every variance.

The method (after Rue & Held 2005, Ch. 2, for conditioning a GMRF; the a-posteriori bounds
are evroute's own, derived below): a round's observations are conditioned chunk by
chunk, each on a domain Ω of the precision's graph around the chunk's edges, and what the
truncation to Ω leaves out is kept as the residual of the mean equation, whose effect on every
edge is bounded without any reference solve.

State (all of length E): counts c and sums of the observations, the posterior mean μ and
variances v, the residual ``res`` = b − (Q + D)(μ − m) of the mean equation
(Q + D) x = b, D = diag(c/ς²), b = (sums − c∘m)/ς², and per-edge accumulated variance bounds.

One chunk K (its new counts δc and sums δs):

1. res_K += (δs − δc∘m_K)/ς² − (δc/ς²)∘x_K (the residual of the system after the chunk);
2. Ω = the edges within ``r`` hops of K in the graph of Q, the shell = the edges Q reaches
   from Ω outside it;
3. A = (Q + D)_ΩΩ with the counts before the chunk, factorised in the prior's fill-reducing
   order of Q's graph (:meth:`evroute.priors.prior.Prior.precision_ordering`: nested dissection, which
   stays good on every block, so no domain is ordered on its own); A [W | y] = [E_K | res_Ω];
4. S = W_KK + diag(ς²/δc) = L Lᵀ; Δx = y − W S⁻¹ y_K (Woodbury: the solve with the precision
   after the chunk), v_Ω −= rowsum((W L⁻ᵀ)²);
5. μ_Ω += Δx; res_Ω, res_shell −= (Q + D')_{·,Ω} Δx (computed, not assumed zero).

Bounds (relative to σ₀ = √mean(diag k) and σ₀², as ``tol``):

* **mean, rigorous**: μ − μ* = −(Q + D)⁻¹ res, so |μ_e − μ*_e| ≤ √(k_max/λ_min(Q)) ‖res‖₂
  (the posterior covariance is below the prior's: its diagonal ≤ k_max, its largest eigenvalue
  ≤ 1/λ_min(Q); :meth:`evroute.priors.prior.Prior.precision_min_eigenvalue`);
* **variance, first order**: W_j's error is Σ r_j, r_j = −Q_{shell,Ω} W_j (Σ the posterior
  covariance before the chunk), so at edge e it is ≤ √Σ_ee √(r_jᵀ Σ r_j) ≤ s_e ρ_j
  (Cauchy–Schwarz in Σ's inner product), ρ_j = ‖r_j‖₂/√λ_min(Q) and s_e² = min(k_max, v_e +
  e's own accumulated bound) ≥ Σ_ee; the update's error at e ∈ Ω is then, to first order,
  ≤ (|G_e|·ρ)(2 s_e + |G_e|·s_K), G = W S⁻¹, and outside Ω ≤ k_max ‖ρ‖² max(δc)/ς². (With
  k_max in place of every s_e this is the spec's bound; √(k_max/k_e) is 1.6–2.8 on the middle
  90 % of synthetic-100k's edges.) The columns depend on the exact counts only, so the errors
  add over chunks and rounds (accumulated per edge, never compounded). The bound shown is capped
  at k_max (rigorous: the prior's and the posterior's variances both lie in [0, k_max]), which a
  first-order bound at a large ``tol`` would otherwise exceed.

A round's distinct route edges are cut into an even number of chunks of at most ``chunk``
edges, as equal as can be. A chunk reads and writes only its domain and shell (its
**footprint**), so two chunks whose footprints are disjoint commute. The scheduling is
:mod:`evroute.models.ordered`'s (the numerics are the attempt and the write,
:mod:`evroute.models.local_chunks`, and the sweep and the bounds, here): each chunk is
attempted (it writes nothing), then written, and the result is defined by an order of the
chunks, whatever the threads. From :data:`LANES_FROM` chunks on, the route's two
halves are two **lanes**, a_0, a_1, … and b_0, b_1, …, each chunk's radius and bound outside the
domains coming from its lane's chunks before it, in the order b_0, a_0, b_1, a_1, …
(:func:`~evroute.models.ordered.run_in_lanes`: two threads run the lanes side by side, claiming
footprints and rolling back where two chunks met unordered). With fewer chunks, **pairs**: chunk
i with chunk i + n/2, both attempted on the state after the pair before; the second is kept
where its footprint misses the first's, else attempted again after the first
(:func:`~evroute.models.ordered.run_in_order`). Either way the result is the same, bit for bit,
for one thread or two.
A chunk's radius grows (by one hop of Q) until its share of both bounds fits the tolerance
(tol/(2√chunks) of the round), and the next chunk starts one hop smaller when a chunk fitted
with a wide margin (:data:`evroute.models.local_chunks.SHRINK_BELOW`); after the round a
**sweep** of local solves around the largest residuals brings the mean bound under ``tol``; if it cannot (within ``MAX_SWEEPS``), the round
is solved globally (one sparse factorisation of Q + D) and a one-line warning says so. A
variance bound above ``tol`` is cleared the same way, by exact variances (selected
inversion), with a warning. Never silently worse.
"""

from __future__ import annotations

import math
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp

from ..errors import EvrouteError, EvrouteWarning
from ..io import usable_cpus
from ..priors.graph_prior import LOCAL_VARIANCES_ABOVE, LOCAL_VARIANCES_TOL
from ..priors.linalg import (
    SparseCholesky,
    SparseSolver,
    local_inverse_diagonal,
    retain_freed_memory,
    symmetric_splu,
)
from ..validate import positive_float, positive_int
from .base import JOINT_SAMPLES, SPARSE_PRECISION, PosteriorModel, aggregate_observations, readonly
from .local_chunks import Chunk, ChunkConditioning, footprint
from .ordered import LaneMemory, run_in_lanes, run_in_order

__all__ = ["LocalGMRFPosterior", "TOL_MAX", "CHUNK", "CHUNK_MAX", "MAX_SWEEPS", "MAX_THREADS", "resolve_threads",
           "LANES_FROM"]

#: The largest tolerance accepted (relative to σ₀ and σ₀²).
TOL_MAX = 1e-2
#: The most route edges conditioned at once: 48 was the fastest of 32–64 at 100k and 1M, and
#: 40–56 are within the noise of each other since the order (docs/performance-scale.md, "The chunk";
#: the spec's prototype found 32 and 64 equally fast per edge on one thread).
CHUNK = 48
#: The largest chunk the option accepts (a chunk's dense work grows as its square).
CHUNK_MAX = 512
#: Local sweeps of the residual after a round before a global solve.
MAX_SWEEPS = 20
#: The most threads a local update uses (chunks are conditioned in two lanes, or in pairs).
MAX_THREADS = 2


def resolve_threads(threads: int | str) -> int:
    """``threads`` of a local update: ``"auto"`` is two where the process may use two CPUs or more
    (the results are the same bits for one thread or two), else one; a number is checked."""
    if str(threads).strip().lower() == "auto":
        return min(MAX_THREADS, usable_cpus())
    return positive_int("threads", threads)
#: A round of at least this many chunks is conditioned in two lanes (the route's two halves),
#: fewer in pairs.
LANES_FROM = 8


class LocalGMRFPosterior(ChunkConditioning, PosteriorModel):
    """Exact GP posterior on a sparse-precision prior, every update local and bounded (the means
    rigorously, the variances to first order)
    (see the module docstring).

    Parameters
    ----------
    prior : evroute.priors.prior.Prior
        A prior with a sparse precision (``is_markov``) and a known lower bound on its
        precision's smallest eigenvalue (:meth:`~evroute.priors.prior.Prior.precision_min_eigenvalue`).
    noise_var : float
        ς².
    tol : float
        Target of both bounds, relative to σ₀ (means) and σ₀² (variances); in (0, 1e-2].
    chunk : int
        The most route edges conditioned at once, 1 to :data:`CHUNK_MAX` (a round's are cut
        into an even number of chunks, as equal as can be).
    radius : int
        First radius tried (hops of the precision's graph); it adapts from chunk to chunk.
    max_radius : int
        A chunk never grows its domain beyond this many hops (the sweep and the global
        fallback take over).
    threads : int or "auto"
        1 or 2: the two lanes (or the two chunks of a pair) are conditioned side by side on two
        threads (SciPy's SuperLU releases the GIL). The results are the same, bit for bit, for
        either value. ``"auto"`` (the default): two where this process may run on two CPUs or
        more (:func:`evroute.io.usable_cpus`), else one.

    Attributes
    ----------
    n_global_mean, n_global_var : int
        Rounds whose mean (variances) had to be made exact globally.
    n_pairs, n_redone : int
        Pairs of chunks conditioned, and those whose domains met, so that the second was
        conditioned again after the first.
    n_lane_rounds, n_lanes_met, n_lanes_serial : int
        Rounds conditioned in two lanes, tries of the lanes side by side that were rolled back
        because two chunks met that were not ordered, and rounds whose lanes were finished one
        chunk after the other (with one thread, every round).
    seconds_split : dict
        Seconds spent, over the run, on the domains (search and assembly), the factorisations,
        the solves and the bounds, and the sweeps.
    """

    capabilities = frozenset({JOINT_SAMPLES, SPARSE_PRECISION})

    def __init__(self, prior, noise_var: float, *, tol: float = 1e-8, chunk: int = CHUNK, radius: int = 4,
                 max_radius: int = 40, threads: int | str = "auto"):
        if not getattr(prior, "is_markov", False):
            raise EvrouteError(f"{type(prior).__name__} has no sparse precision; the dense exact backend serves it")
        lam = prior.precision_min_eigenvalue()
        if lam is None or not lam > 0:
            raise EvrouteError(f"{type(prior).__name__} gives no bound on its precision's spectrum; "
                               "use --model exact[update=global]")
        self.noise_var = positive_float("noise_var", noise_var)
        self.tol = positive_float("tol", tol)
        if self.tol > TOL_MAX:
            raise EvrouteError(f"tol must be in (0, {TOL_MAX:g}], got {tol!r}")
        self.chunk = positive_int("chunk", chunk)
        if self.chunk > CHUNK_MAX:
            raise EvrouteError(f"chunk must be 1 to {CHUNK_MAX}, got {chunk!r}")
        self.max_radius = positive_int("max_radius", max_radius)
        self.threads = resolve_threads(threads)
        if self.threads > MAX_THREADS:
            raise EvrouteError(f"threads must be 1 or {MAX_THREADS} (chunks are conditioned in two lanes, or in pairs), got {threads!r}")
        self._radius = min(positive_int("radius", radius), self.max_radius)
        self._prior = prior
        self._m = np.array(prior.mean, dtype=np.float64)
        E = self.n_arms = int(self._m.size)
        Q = sp.csr_matrix(prior.precision(), dtype=np.float64)
        Q.sum_duplicates()  # (sorted, one entry a position)
        if Q.shape != (E, E):
            raise EvrouteError(f"the prior's precision must be {E}×{E}, got {Q.shape}")
        on_diagonal = np.flatnonzero(Q.indices == np.repeat(np.arange(E), np.diff(Q.indptr)))
        if on_diagonal.size != E:
            raise EvrouteError("the prior's precision must store its (positive) diagonal")
        self._diag_offset = on_diagonal - Q.indptr[:-1]  # where in its row each diagonal entry is
        self._Q = Q
        # the domains are factorised in this fill-reducing order of Q's graph (nested
        # dissection: it stays good on every block), instead of ordering each one
        self._rank = np.asarray(prior.precision_ordering(), dtype=np.int64)
        if self._rank.shape != (E,):
            raise EvrouteError(f"the prior's precision ordering must rank the {E} edges, got shape {self._rank.shape}")
        retain_freed_memory()  # thousands of domain factorisations: reuse their memory
        kdiag = np.array(prior.diag(), dtype=np.float64)
        if kdiag.shape != (E,) or not np.all(np.isfinite(kdiag)) or np.any(kdiag <= 0):
            raise EvrouteError("the prior's diagonal must be E positive finite variances")
        self._sigma0 = math.sqrt(float(kdiag.mean()))
        self._lam = float(lam)
        self._kmax = float(kdiag.max())
        self._C = math.sqrt(self._kmax / lam)  # |μ − μ*|_∞ ≤ C ‖res‖₂
        self._counts = np.zeros(E, np.int64)
        self._sums = np.zeros(E)
        self._mu = self._m.copy()
        self._var = kdiag
        self._res = np.zeros(E)
        self._var_acc = np.zeros(E)  # per-edge accumulated first-order variance bounds
        # the same, added to every edge (the part outside the domains); it starts at the prior
        # diagonal's own bound (local solves on large networks): v starts from that diagonal
        self._var_out = float(prior.diag_error_bound())
        # scratch, one set per thread: marks (always all False between uses)
        # and positions in the current domain (always -1 between uses)
        self._mark = (np.zeros(E, bool), np.zeros(E, bool))
        self._where = (np.full(E, -1, np.int64), np.full(E, -1, np.int64))
        self._pool = None
        #: pairs of chunks conditioned; second chunks of a pair attempted again after the first
        #: wrote into their footprint; rounds conditioned in lanes
        self.n_pairs = 0
        self.n_redone = 0
        self.n_lane_rounds = 0
        #: tries of the lanes side by side that met (rolled back), and rounds whose lanes were
        #: finished one chunk after the other (with one thread, every round)
        self.n_lanes_met = 0
        self.n_lanes_serial = 0
        self._lane_memory = None  # what the lanes keep between rounds (ordered.LaneMemory)
        self._cache = None
        self._joint = None
        self._radii: list[int] = []
        #: (radius, domain size, mean share / target, variance share / target) of every domain
        #: tried in the last round (the benchmark reads it)
        self.trace: list[tuple[int, int, float, float]] = []
        self.mean_error_bound = 0.0
        self.var_error_bound = self._var_out / self._sigma0 ** 2
        self.max_mean_error_bound = 0.0
        self.max_var_error_bound = self.var_error_bound
        self.n_global_mean = 0
        self.n_global_var = 0
        self.seconds_split = {"domains": 0.0, "factor": 0.0, "solve_bounds": 0.0, "sweeps": 0.0}

    # -- public ---------------------------------------------------------------------------

    def update(self, edges, observed) -> None:
        uniq, dc_all, ds_all = aggregate_observations(edges, observed, self.n_arms)  # (validated; sorted)
        if uniq.size == 0:
            return
        # the distinct edges in driving order (first appearance on the route)
        order = np.argsort(np.unique(np.asarray(edges, dtype=np.int64), return_index=True)[1], kind="stable")
        route, dc_all, ds_all = uniq[order], dc_all[order], ds_all[order]
        self._cache = None
        self._joint = None
        # chunks of at most `chunk` edges, as equal as can be and an even number of them, so
        # that the pairs (below) balance the two threads
        n_chunks = -(-route.size // self.chunk)
        n_chunks = min(n_chunks + n_chunks % 2, route.size) if n_chunks > 1 else 1
        share = self.tol / (2.0 * math.sqrt(n_chunks))
        self._radii = []
        self.trace = []
        cut = (np.arange(n_chunks + 1) * route.size) // n_chunks
        chunks = [(route[lo:hi], dc_all[lo:hi], ds_all[lo:hi]) for lo, hi in zip(cut[:-1], cut[1:], strict=True)]
        if n_chunks >= LANES_FROM:
            self._condition_lanes(chunks, share)
        else:
            self._condition_pairs(chunks, share)
        tic = time.perf_counter()
        self._sweep()
        self._check_variances()
        self.seconds_split["sweeps"] += time.perf_counter() - tic
        self.max_mean_error_bound = max(self.max_mean_error_bound, self.mean_error_bound)
        self.max_var_error_bound = max(self.max_var_error_bound, self.var_error_bound)

    def mean_std(self) -> tuple[np.ndarray, np.ndarray]:
        if self._cache is None:
            self._cache = (readonly(self._mu.copy()), readonly(np.sqrt(np.maximum(self._var, 0.0))))
        return self._cache

    def sample(self, rng: np.random.Generator, joint: bool = False) -> np.ndarray:
        """Independent draws are local (μ + σ z). Joint draws are global: a prior draw f₀
        conditioned on all the data by Matheron's rule, f = f₀ + (Q + D)⁻¹ D (ȳ − f₀ − ε),
        one sparse factorisation of Q + D per round (its cost: a global factorisation, as
        ``update=global``'s merges)."""
        if not joint:
            mu, sd = self.mean_std()
            return mu + sd * rng.standard_normal(self.n_arms)
        f = np.array(self._prior.sample(rng), dtype=np.float64)
        seen = np.flatnonzero(self._counts)
        if seen.size == 0:
            return f
        if self._joint is None:
            self._joint = SparseSolver(self._precision_now(), "posterior precision Q + D")
        c = self._counts[seen].astype(np.float64)
        eps = np.sqrt(self.noise_var / c) * rng.standard_normal(seen.size)
        rhs = np.zeros(self.n_arms)
        rhs[seen] = c * (self._sums[seen] / c - f[seen] - eps) / self.noise_var
        return f + self._joint.solve(rhs)

    def diagnostics(self) -> dict[str, float]:
        """``mean_error_bound`` and ``var_error_bound`` after the round (relative to σ₀ and
        σ₀²: the mean's is rigorous, the variances' first order) and ``update_radius``, the
        largest domain radius the round used (hops of the precision's graph)."""
        return {"mean_error_bound": float(self.mean_error_bound), "var_error_bound": float(self.var_error_bound),
                "update_radius": float(max(self._radii, default=0))}

    def summary(self) -> dict:
        return {"max_mean_error_bound": float(self.max_mean_error_bound),
                "max_var_error_bound": float(self.max_var_error_bound),
                "global_mean_solves": int(self.n_global_mean), "global_variance_solves": int(self.n_global_var)}

    # -- internals ------------------------------------------------------------------------

    def _precision_now(self) -> sp.csc_matrix:
        return (self._Q + sp.diags(self._counts / self.noise_var, format="csr")).tocsc()

    def _commit(self, c: Chunk) -> None:
        self._write(c)
        self._var_out += c.out
        self._account(c)

    def _account(self, c: Chunk) -> None:
        self._radii.append(c.r)
        self.trace.extend(c.trace)
        for key, value in c.seconds.items():
            self.seconds_split[key] += value

    def _condition_lanes(self, chunks: list, share: float) -> None:
        """Condition the round's chunks in two lanes (the route's halves a and b) with
        :func:`evroute.models.ordered.run_in_lanes`: the result is that of the order b_0, a_0,
        b_1, a_1, …, each chunk's radius and bound outside the domains from its lane's chunks
        before it; on two threads the lanes run side by side."""
        cut = (np.arange(3) * len(chunks)) // 2
        lanes = [chunks[cut[0]:cut[1]], chunks[cut[1]:cut[2]]]
        r0, start = self._radius, self._var_out
        self.n_lane_rounds += 1
        if self._lane_memory is None:
            self._lane_memory = LaneMemory(self.n_arms)

        def lane_out(previous: list) -> float:  # the lane's chunks' bounds outside their domains, in lane order
            total = 0.0
            for c in previous:
                total += c.out
            return total

        def attempt(lane: int, k: int, previous: list, slot: int) -> Chunk:
            r = previous[-1].next_radius if previous else r0
            return self._attempt(*lanes[lane][k], r, share, slot, var_out=start + lane_out(previous))

        def write(c: Chunk) -> tuple:
            saved = self._saved(c)
            self._write(c)
            return saved

        kept, stats = run_in_lanes([len(lane) for lane in lanes], attempt, footprint, write=write, restore=self._restore,
                                   memory=self._lane_memory, threads=self.threads,
                                   pool=self._second_thread() if self.threads > 1 else None)
        self.n_lanes_met += stats.met
        self.n_lanes_serial += stats.serial
        for c in kept[0] + kept[1]:  # (route order)
            self._account(c)
        total = start
        for lane in range(2):
            total += lane_out(kept[lane])
        self._var_out = total
        self._radius = max(kept[lane][-1].next_radius if kept[lane] else r0 for lane in range(2))

    def _condition_pairs(self, chunks: list, share: float) -> None:
        """Condition chunk i with chunk i + n/2 (far along the route), pair after pair: both
        attempted on the state after the pair before, with its radius and bound outside the
        domains; the second kept where its footprint misses the first's, else attempted again
        after the first is written (:func:`evroute.models.ordered.run_in_order`)."""
        half = -(-len(chunks) // 2)
        tasks, base, pair_of = [], [], []
        for i in range(half):
            before = len(tasks) - 1
            for c in (chunks[i], chunks[i + half]) if i + half < len(chunks) else (chunks[i],):
                tasks.append(c)
                base.append(before)
                pair_of.append(i)
            self.n_pairs += i + half < len(chunks)
        radius = {0: self._radius}  # pair → its radius: the larger next radius of the pair before
        var_after = {-1: self._var_out}  # task → the bound outside the domains after its commit

        def attempt(q: int, fresh: bool, slot: int) -> Chunk:
            return self._attempt(*tasks[q], radius[pair_of[q]], share, slot,
                                 var_out=self._var_out if fresh else var_after[base[q]])

        def commit(q: int, c: Chunk) -> None:
            self._commit(c)
            var_after[q] = self._var_out
            p = pair_of[q]
            radius[p + 1] = max(radius.get(p + 1, 0), c.next_radius)

        stats = run_in_order(base, attempt, footprint, commit=commit, n_items=self.n_arms, threads=self.threads,
                             pool=self._second_thread() if self.threads > 1 else None)
        self.n_redone += stats.redone
        self._radius = radius[pair_of[-1] + 1]

    def _second_thread(self) -> ThreadPoolExecutor:
        """The thread beside the caller's (made once)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evroute-local")
        return self._pool

    def _bounds(self) -> None:
        self.mean_error_bound = self._C * float(np.linalg.norm(self._res)) / self._sigma0
        # first order (module docstring); capped at k_max, which bounds it rigorously: the prior's and
        # the posterior's variances both lie in [0, k_max]
        self.var_error_bound = min(float(self._var_acc.max()) + self._var_out, self._kmax) / self._sigma0 ** 2

    def _sweep(self) -> None:
        """Local solves around the largest residuals until the mean bound fits ``tol``; a
        global solve (one line) when they cannot."""
        self._bounds()
        sweeps = 0
        while self.mean_error_bound > self.tol and sweeps < MAX_SWEEPS:
            res = self._res
            seeds = np.sort(np.argpartition(-np.abs(res), self.chunk)[:self.chunk]) if res.size > self.chunk \
                else np.arange(res.size)
            omega, A, B, shell, _ = self._domain(self._ball(seeds, self._radius + 1))
            dx = symmetric_splu(A, "a local posterior domain", ordered=True).solve(res[omega])
            self._mu[omega] += dx
            res[shell] -= B @ dx
            res[omega] -= A @ dx
            sweeps += 1
            self._bounds()
        if self.mean_error_bound > self.tol:
            before = self.mean_error_bound
            P = self._precision_now()
            b = (self._sums - self._counts * self._m) / self.noise_var
            self._mu = self._m + SparseSolver(P, "posterior precision Q + D").solve(b)
            self._res = b - P @ (self._mu - self._m)
            self.n_global_mean += 1
            self._bounds()
            warnings.warn(f"local posterior update: the mean bound {before:.2g} σ₀ stayed above tol={self.tol:g} "
                          f"after {MAX_SWEEPS} local sweeps (largest radius {max(self._radii, default=0)}); "
                          f"solved globally (bound now {self.mean_error_bound:.2g})", EvrouteWarning, stacklevel=4)

    def _check_variances(self) -> None:
        if self.var_error_bound <= self.tol:
            return
        before = self.var_error_bound
        P = self._precision_now()
        if self.n_arms > LOCAL_VARIANCES_ABOVE:
            # selected inversion would peak at ~18 GB from 3·10⁵ edges: certified local solves
            # instead (as the prior's own variances), each entry to a tenth of tol at most;
            # λ_min(Q + D) ≥ λ_min(Q)
            rel = min(LOCAL_VARIANCES_TOL, 0.1 * self.tol * self._sigma0 ** 2 / self._kmax)
            self._var, bound = local_inverse_diagonal(P, self._lam, tol=rel, threads=self.threads,
                                                      what="posterior precision Q + D")
            how = f"by certified local solves, {rel:.0e} relative"
        else:
            self._var, bound = SparseCholesky(P, "posterior precision Q + D").inverse_diagonal(), 0.0
            how = "exactly (selected inversion of Q + D)"
        self._var_acc[:] = bound
        self._var_out = 0.0
        self.n_global_var += 1
        self._bounds()
        warnings.warn(f"local posterior update: the variance bound {before:.2g} σ₀² exceeded tol={self.tol:g}; "
                      f"variances recomputed {how}", EvrouteWarning, stacklevel=4)
