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
   order of Q's graph (:meth:`evroute.prior.Prior.precision_ordering`: nested dissection, which
   stays good on every block, so no domain is ordered on its own); A [W | y] = [E_K | res_Ω];
4. S = W_KK + diag(ς²/δc) = L Lᵀ; Δx = y − W S⁻¹ y_K (Woodbury: the solve with the precision
   after the chunk), v_Ω −= rowsum((W L⁻ᵀ)²);
5. μ_Ω += Δx; res_Ω, res_shell −= (Q + D')_{·,Ω} Δx (computed, not assumed zero).

Bounds (relative to σ₀ = √mean(diag k) and σ₀², as ``tol``):

* **mean, rigorous**: μ − μ* = −(Q + D)⁻¹ res, so |μ_e − μ*_e| ≤ √(k_max/λ_min(Q)) ‖res‖₂
  (the posterior covariance is below the prior's: its diagonal ≤ k_max, its largest eigenvalue
  ≤ 1/λ_min(Q); :meth:`evroute.prior.Prior.precision_min_eigenvalue`);
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
**footprint**), so two chunks whose footprints are disjoint commute. From :data:`LANES_FROM`
chunks on, the route's two halves are two **lanes**, a_0, a_1, … and b_0, b_1, …, each chunk
after the one before it in its lane and each lane with its own radius; the round's result is
defined as that of the chunks one after the other in the order b_0, a_0, b_1, a_1, …, which is
what one thread does. Two threads (``threads=2``) run the lanes side by side, a chunk after
those of the other lane it must follow: at the seam (the first lane's last chunks follow the
second's first, :data:`SEAM`) and where the lanes met before. Every footprint is claimed
before its chunk writes; a claim that meets the footprint of a chunk it does not follow stops
both threads (of two such chunks, whichever claims second sees the first's claim, whatever the
timing), the writes after the longest prefix of the order both lanes had written are rolled
back exactly (each write's old values were kept), the two chunks are ordered (the order's
earlier first) and the threads go on. Every pair of chunks whose footprints meet is thus
conditioned in the order's sequence, and every other pair commutes, so the result is the same,
bit for bit, for one thread or two. With fewer chunks, **pairs**: chunk i with chunk i + n/2,
both attempted on the same state; when the second's footprint misses the first's, the two
updates commute and both are kept; otherwise the second is conditioned again after the first.
A chunk's radius grows (by one hop of Q) until its share of both bounds fits the tolerance
(tol/(2√chunks) of the round), and the next chunk starts one hop smaller when a chunk fitted
with a wide margin (:data:`SHRINK_BELOW`); after the round a **sweep** of local solves around the largest
residuals brings the mean bound under ``tol``; if it cannot (within ``MAX_SWEEPS``), the round
is solved globally (one sparse factorisation of Q + D) and a one-line warning says so. A
variance bound above ``tol`` is cleared the same way, by exact variances (selected
inversion), with a warning. Never silently worse.
"""

from __future__ import annotations

import math
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from ..errors import EvrouteError, EvrouteWarning
from ..io import usable_cpus
from ..linalg import (
    SparseCholesky,
    SparseSolver,
    domain_blocks,
    graph_ball,
    jittered_cholesky,
    local_inverse_diagonal,
    retain_freed_memory,
    symmetric_splu,
)
from ..prior import LOCAL_VARIANCES_ABOVE, LOCAL_VARIANCES_TOL
from ..validate import positive_float, positive_int
from .base import JOINT_SAMPLES, SPARSE_PRECISION, PosteriorModel, aggregate_observations, readonly

__all__ = ["LocalGMRFPosterior", "TOL_MAX", "CHUNK", "CHUNK_MAX", "MAX_SWEEPS", "MAX_THREADS", "resolve_threads", "LANES_FROM", "SEAM",
           "LANE_TRIES"]

#: The largest tolerance accepted (relative to σ₀ and σ₀²).
TOL_MAX = 1e-2
#: The most route edges conditioned at once: 48 was the fastest of 32–64 at 100k and 1M, and
#: 40–56 are within the noise of each other since the order (docs/performance.md, "The chunk";
#: the spec's prototype found 32 and 64 equally fast per edge on one thread).
CHUNK = 48
#: The largest chunk the option accepts (a chunk's dense work grows as its square).
CHUNK_MAX = 512
#: Local sweeps of the residual after a round before a global solve.
MAX_SWEEPS = 20
#: A chunk whose shares of both bounds came below this fraction of their targets lets the
#: next chunk start one hop smaller: the bounds fall 25–35-fold a hop of Q's graph on
#: synthetic-100k (0.05, with one hop smaller ~1.5 times the target, cost 4 % more work).
SHRINK_BELOW = 0.02
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
#: The seam between the lanes: the first lane's chunk n − 1 − d (d = 0 … SEAM, n its chunks)
#: follows the second lane's chunks 0 … SEAM − d (they are neighbours along the route).
SEAM = 2
#: Tries of the lanes side by side in a round (each orders the chunks that met in the one
#: before), before the chunks are conditioned one after the other.
LANE_TRIES = 4


@dataclass
class _Chunk:
    """One chunk's attempted conditioning: what :meth:`LocalGMRFPosterior._commit` writes."""

    K: np.ndarray
    dc: np.ndarray
    ds: np.ndarray
    r: int = 0
    fits: bool = False
    next_radius: int = 1
    omega: np.ndarray | None = None
    shell: np.ndarray | None = None
    dx: np.ndarray | None = None
    res_omega: np.ndarray | None = None
    new_shell: np.ndarray | None = None
    dvar: np.ndarray | None = None
    inc: np.ndarray | None = None
    out: float = 0.0
    trace: list = field(default_factory=list)
    seconds: dict = field(default_factory=lambda: {"domains": 0.0, "factor": 0.0, "solve_bounds": 0.0})

    @property
    def footprint(self) -> np.ndarray:
        """What the chunk reads and writes: its domain and shell."""
        return np.concatenate((self.omega, self.shell))


@dataclass
class _Lanes:
    """A round's chunks in lanes (consecutive stretches of the route): the order that
    defines the result, which chunk follows which, what each lane has written, and what the
    threads share while they run."""

    lanes: list  # per lane, its chunks in route order
    share: float
    r0: int
    base: float
    order: list = field(default_factory=list)  # (lane, chunk) in the order that defines the result
    place: dict = field(default_factory=dict)  # (lane, chunk) → its place in ``order``
    lane_of: np.ndarray | None = None  # place → lane
    index_of: np.ndarray | None = None  # place → chunk in its lane
    kept: list = field(default_factory=list)  # per lane, the chunks written (a prefix of the lane)
    # one try on two threads: after[q, lane] is the last chunk of that lane that the chunk in
    # place q of the order follows (and so all the lane's chunks before it; -1: none)
    after: np.ndarray | None = None
    cond: threading.Condition = field(default_factory=threading.Condition)
    stop: bool = False
    running: set = field(default_factory=set)  # lanes a thread is conditioning a chunk of
    met: set = field(default_factory=set)  # places in ``order`` of two chunks that met, not ordered
    undo: list = field(default_factory=list)  # (lane, what a write overwrote), in the order written

    def __post_init__(self):
        sizes = [len(lane) for lane in self.lanes]
        # cycles over the lanes from the last to the first: b_0, a_0, b_1, a_1, … for two
        # lanes a (first) and b, so that the first chunks of a lane come before the last
        # chunks of the lane before it (its neighbours along the route, SEAM)
        self.order = [(lane, k) for k in range(max(sizes)) for lane in reversed(range(len(sizes))) if k < sizes[lane]]
        self.place = {x: q for q, x in enumerate(self.order)}
        self.lane_of = np.array([lane for lane, _ in self.order], np.int64)
        self.index_of = np.array([i for _, i in self.order], np.int64)
        self.kept = [[] for _ in sizes]

    def radius(self, lane: int) -> int:
        return self.kept[lane][-1].next_radius if self.kept[lane] else self.r0

    def out(self, lane: int) -> float:
        """The lane's chunks' bounds outside their domains, added up in lane order."""
        total = 0.0
        for c in self.kept[lane]:
            total += c.out
        return total

    def written(self, q: int) -> bool:
        lane, i = self.order[q]
        return i < len(self.kept[lane])

    def chunk(self, q: int) -> _Chunk:
        """The written chunk in place q of the order."""
        lane, i = self.order[q]
        return self.kept[lane][i]


class LocalGMRFPosterior(PosteriorModel):
    """Exact GP posterior on a sparse-precision prior, every update local and bounded (the means
    rigorously, the variances to first order)
    (see the module docstring).

    Parameters
    ----------
    prior : evroute.prior.Prior
        A prior with a sparse precision (``is_markov``) and a known lower bound on its
        precision's smallest eigenvalue (:meth:`~evroute.prior.Prior.precision_min_eigenvalue`).
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
        # scratch, one set per side of a pair of chunks: marks (always all False between uses)
        # and positions in the current domain (always -1 between uses)
        self._mark = (np.zeros(E, bool), np.zeros(E, bool))
        self._where = (np.full(E, -1, np.int64), np.full(E, -1, np.int64))
        self._pool = None
        #: pairs of chunks conditioned, and those whose second chunk had to be redone after
        #: the first (their domains met)
        self.n_pairs = 0
        self.n_redone = 0
        #: rounds conditioned in lanes, tries of the lanes side by side that met, and rounds
        #: whose lanes were finished one chunk after the other
        self.n_lane_rounds = 0
        self.n_lanes_met = 0
        self.n_lanes_serial = 0
        self._owner = None  # per lane: the last chunk that claimed each edge (-1: none)
        self._met_before: dict[tuple, set] = {}  # chunks a lane waited for in the last round
        self._lanes_went = True  # whether the last round's lanes ran to the end side by side
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
            half = -(-n_chunks // 2)  # chunk i is paired with chunk i + half, far along the route
            for i in range(half):
                self._condition_pair(chunks[i], chunks[i + half] if i + half < n_chunks else None, share)
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

    def _ball(self, seeds: np.ndarray, r: int, slot: int = 0) -> np.ndarray:
        """The edges within ``r`` hops of ``seeds`` in the graph of Q, sorted."""
        return graph_ball(self._Q.indptr, self._Q.indices, seeds, r, self._mark[slot], self._where[slot])

    def _domain(self, omega: np.ndarray, slot: int = 0, seeds: np.ndarray | None = None):
        """Ω in the order of :meth:`~evroute.prior.Prior.precision_ordering`, (Q + D)_ΩΩ and
        Q_{shell,Ω} (both CSC) in that order, the shell, and the positions of ``seeds`` in Ω."""
        omega = omega[np.argsort(self._rank[omega], kind="stable")]
        A, B, shell, at = domain_blocks(self._Q, omega, self._where[slot], seeds, self._diag_offset,
                                        self._counts[omega] / self.noise_var)
        return omega, A, B, shell, at

    def _attempt(self, K: np.ndarray, dc: np.ndarray, ds: np.ndarray, r: int, share: float, slot: int,
                 var_out: float | None = None) -> _Chunk:
        """Condition chunk K on the state as it is, growing the radius from ``r`` until the
        chunk's shares of both bounds fit; nothing is written (:meth:`_commit` does that), so
        two chunks whose domains and shells are disjoint can be attempted side by side.
        ``var_out`` is the bound added to every edge's variance (default: the model's; a lane
        passes the round's start plus its own chunks', which bounds the variances before the
        chunk as well: the other lane's data only lowers them)."""
        nv, C = self.noise_var, self._C
        var_out = self._var_out if var_out is None else var_out
        res = self._res
        x_K = self._mu[K] - self._m[K]
        res_K = res[K] + (ds - dc * self._m[K]) / nv - (dc / nv) * x_K  # the system after the chunk
        mean_target = share * self._sigma0
        var_target = share * self._sigma0 ** 2
        k = K.size
        c = _Chunk(K=K, dc=dc, ds=ds)
        while True:
            tic = time.perf_counter()
            omega, A, B, shell, posK = self._domain(self._ball(K, r, slot), slot, K)
            # √ of a bound on each edge's variance before the chunk (its own, to first order)
            sd = np.sqrt(np.minimum(self._kmax, np.maximum(self._var[omega], 0.0) + self._var_acc[omega] + var_out))
            toc = time.perf_counter()
            F = symmetric_splu(A, "a local posterior domain", ordered=True)
            tac = time.perf_counter()
            rhs = np.zeros((omega.size, k + 1), order="F")
            rhs[posK, np.arange(k)] = 1.0
            rhs[:, k] = res[omega]
            rhs[posK, k] = res_K
            sol = F.solve(rhs)
            W, y = sol[:, :k], sol[:, k]
            WKK = W[posK]
            S = 0.5 * (WKK + WKK.T)
            S[np.diag_indices(k)] += nv / dc
            L = jittered_cholesky(S, what="local posterior block + noise")
            dx = y - W @ sla.cho_solve((L, True), y[posK], check_finite=False)
            new_shell = res[shell] - B @ dx
            res_omega = rhs[:, k] - A @ dx
            res_omega[posK] -= (dc / nv) * dx[posK]  # D' = D + δD on the chunk's edges
            mean_share = C * math.sqrt(float(new_shell @ new_shell) + float(res_omega @ res_omega))
            R = B @ W  # the columns' residuals on the shell
            rho = np.sqrt(np.einsum("ij,ij->j", R, R) / self._lam)
            Z = sla.solve_triangular(L, W.T, lower=True, check_finite=False)  # L⁻¹ Wᵀ (the variances' update)
            G = np.abs(sla.solve_triangular(L, Z, lower=True, trans="T", check_finite=False).T)  # W S⁻¹
            inc = (G @ rho) * (2.0 * sd + G @ sd[posK])
            out = self._kmax * float(rho @ rho) * float(dc.max()) / nv
            var_share = float(inc.max()) + out
            c.seconds["domains"] += toc - tic
            c.seconds["factor"] += tac - toc
            c.seconds["solve_bounds"] += time.perf_counter() - tac
            c.trace.append((r, omega.size, mean_share / mean_target, var_share / var_target))
            c.fits = mean_share <= mean_target and var_share <= var_target
            if c.fits or r >= self.max_radius or omega.size == self.n_arms:
                break
            r += 1
        c.r, c.omega, c.shell, c.dx, c.res_omega, c.new_shell = r, omega, shell, dx, res_omega, new_shell
        c.dvar, c.inc, c.out = np.einsum("ij,ij->j", Z, Z), inc, out
        # room to spare: the decay is about tenfold a hop, so one hop less should still fit
        c.next_radius = max(1, r - 1) if c.fits and max(c.trace[-1][2:]) <= SHRINK_BELOW else r
        return c

    def _commit(self, c: _Chunk) -> None:
        self._write(c)
        self._var_out += c.out
        self._account(c)

    def _write(self, c: _Chunk) -> None:
        """Write chunk c's update into the state (its footprint only)."""
        self._mu[c.omega] += c.dx
        self._res[c.omega] = c.res_omega
        self._res[c.shell] = c.new_shell
        self._var[c.omega] -= c.dvar
        self._var_acc[c.omega] += c.inc
        self._counts[c.K] += c.dc.astype(np.int64)
        self._sums[c.K] += c.ds

    def _saved(self, c: _Chunk) -> tuple:
        """What :meth:`_write` would overwrite, for :meth:`_restore` (fancy indexing copies)."""
        return (c, self._mu[c.omega], self._res[c.omega], self._res[c.shell], self._var[c.omega],
                self._var_acc[c.omega], self._counts[c.K], self._sums[c.K])

    def _restore(self, saved: tuple) -> None:
        c, mu, res_omega, res_shell, var, var_acc, counts, sums = saved
        self._mu[c.omega] = mu
        self._res[c.omega] = res_omega
        self._res[c.shell] = res_shell
        self._var[c.omega] = var
        self._var_acc[c.omega] = var_acc
        self._counts[c.K] = counts
        self._sums[c.K] = sums

    def _account(self, c: _Chunk) -> None:
        self._radii.append(c.r)
        self.trace.extend(c.trace)
        for key, value in c.seconds.items():
            self.seconds_split[key] += value

    def _condition_lanes(self, chunks: list, share: float) -> None:
        """Condition the round's chunks in lanes (see the module docstring). The result is
        that of the chunks one after the other in ``_Lanes.order``, which is what one thread
        does. Two threads take the lanes' next chunks as they become free, each chunk after
        those it must follow; when two chunks met that were not ordered, the chunks after the
        longest prefix of that order all lanes had written are rolled back, the two ordered
        (and their neighbours) and the threads go on; after LANE_TRIES such tries, one chunk
        after the other."""
        n_lanes = 2  # (more lanes meet more often: a route that wanders comes back near itself)
        cut = (np.arange(n_lanes + 1) * len(chunks)) // n_lanes
        run = _Lanes(lanes=[chunks[lo:hi] for lo, hi in zip(cut[:-1], cut[1:], strict=True)], share=share,
                     r0=self._radius, base=self._var_out)
        self.n_lane_rounds += 1
        if self.threads > 1:
            if self._owner is None:
                self._owner = np.full(self.n_arms, -1, np.int32)
            # the seams (neighbours along the route), and the pairs that met in the last round
            # (a guess, which decides how long a chunk waits, never the result)
            seam = set()
            for lane in range(n_lanes - 1):
                n = len(run.lanes[lane])
                seam |= {(run.place[lane, n - 1 - d], run.place[lane + 1, j]) for d in range(min(SEAM + 1, n))
                         for j in range(min(SEAM + 1 - d, len(run.lanes[lane + 1])))}
            key = tuple(map(len, run.lanes))
            pairs = seam | self._met_before.get(key, set())
            # (one try after a round whose tries all met: domains that span a small network
            # meet wherever the chunks are)
            for _ in range(LANE_TRIES if self._lanes_went else 1):
                self._lanes_went = self._run_lanes(run, pairs)
                if self._lanes_went:
                    break
                self.n_lanes_met += 1
                pairs = pairs | {(run.place[la, i + di], run.place[lb, j + dj]) for la, i, lb, j in
                                 ((*run.order[p], *run.order[q]) for p, q in run.met)
                                 for di in (-1, 0, 1) for dj in (-1, 0, 1)
                                 if (la, i + di) in run.place and (lb, j + dj) in run.place}
            # kept for the next round: the pairs beyond the seams whose footprints met
            self._met_before = {key: {(p, q) for p, q in pairs - seam if run.written(p) and run.written(q) and
                                      not self._disjoint(run.chunk(p), run.chunk(q))}}
        # (the rest) one after the other, in the order that defines the result
        self.n_lanes_serial += sum(map(len, run.kept)) < len(run.order)
        for q in range(sum(map(len, run.kept)), len(run.order)):
            self._step(run, q, 0, claim=False)
        for c in [c for kept in run.kept for c in kept]:  # (route order)
            self._account(c)
        total = run.base
        for lane in range(n_lanes):
            total += run.out(lane)
        self._var_out = total
        self._radius = max(run.radius(lane) for lane in range(n_lanes))

    def _run_lanes(self, run: _Lanes, pairs: set) -> bool:
        """One try of the lanes on two threads, from the chunks written so far; False when
        two chunks met that were not ordered (in ``run.met``), after the rollback."""
        n = len(run.order)
        # which chunks each chunk follows: the later of a pair (in the order) follows the
        # earlier, a chunk follows its lane's earlier chunks, and what they follow (the order
        # puts every chunk after those it follows, so one pass closes it)
        direct = [[] for _ in range(n)]
        for p, q in pairs:
            direct[max(p, q)].append(min(p, q))
        after = np.full((n, len(run.lanes)), -1, np.int64)
        for q, (lane, i) in enumerate(run.order):
            if i > 0:
                direct[q].append(run.place[lane, i - 1])
            for p in direct[q]:
                np.maximum(after[q], after[p], out=after[q])
                after[q, run.lane_of[p]] = max(after[q, run.lane_of[p]], run.index_of[p])
        run.after, run.stop, run.met, run.undo, run.running = after, False, set(), [], set()
        future = self._second_thread().submit(self._worker, run, 1)
        error = None
        try:
            self._worker(run, 0)
        except BaseException as e:  # (the other thread stops; roll back, then re-raise)
            error = e
        try:
            future.result()
        except BaseException as e:
            error = error or e
        for _, saved in run.undo:
            self._owner[saved[0].footprint] = -1
        if error is None and not run.met:
            return True
        # keep the longest prefix of the order that all lanes wrote: a chunk after it that
        # met a chunk in it followed that chunk, so the rollback, in the reverse order of the
        # writes, restores exactly the prefix's state
        keep = [0] * len(run.lanes)
        if error is None:
            for lane, i in run.order:
                if i >= len(run.kept[lane]):
                    break
                keep[lane] += 1
        for lane, saved in reversed(run.undo):
            if len(run.kept[lane]) > keep[lane]:
                self._restore(saved)
                run.kept[lane].pop()
        if error is not None:
            raise error
        return False

    def _next(self, run: _Lanes) -> int | None:
        """The place in the order of the chunk a free thread takes (under the lock): the next
        chunk of a lane no thread works on, once the chunks it follows are written; None
        when there is none yet, -1 when none is left."""
        if all(len(k) == len(lane) for k, lane in zip(run.kept, run.lanes, strict=True)):
            return -1
        for lane, chunks in enumerate(run.lanes):
            i = len(run.kept[lane])
            if lane not in run.running and i < len(chunks):
                q = run.place[lane, i]
                if all(len(kept) > last for kept, last in zip(run.kept, run.after[q], strict=True)):
                    return q
        return None

    def _worker(self, run: _Lanes, slot: int) -> None:
        """A thread's loop: the next free chunk, until none is left or two chunks met."""
        cond = run.cond
        try:
            while True:
                with cond:
                    cond.wait_for(lambda: run.stop or self._next(run) is not None)
                    q = -1 if run.stop else self._next(run)
                    if q < 0:
                        return
                    run.running.add(run.order[q][0])
                if not self._step(run, q, slot, claim=True):
                    return
        except BaseException:
            with cond:
                run.stop = True
                cond.notify_all()
            raise

    def _step(self, run: _Lanes, q: int, slot: int, claim: bool) -> bool:
        """Attempt the chunk in place q of the order and write it; with ``claim``, only once
        its footprint (domain and shell) is claimed: a footprint that meets one claimed by a
        chunk it does not follow stops the threads (of two such chunks, whichever claims
        second sees the first's claim: a place's latest claim is of the chunk that follows
        all its earlier ones)."""
        lane, i = run.order[q]
        c = self._attempt(*run.lanes[lane][i], run.radius(lane), run.share, slot, var_out=run.base + run.out(lane))
        footprint = c.footprint
        with run.cond:
            run.running.discard(lane)
            if claim:
                if run.stop:
                    return False
                other = self._owner[footprint]
                other = np.unique(other[other >= 0])
                met = other[run.index_of[other] > run.after[q, run.lane_of[other]]]
                if met.size:
                    run.met.update((int(p), q) for p in met)
                    run.stop = True
                    run.cond.notify_all()
                    return False
                self._owner[footprint] = q
                run.undo.append((lane, self._saved(c)))
            self._write(c)
            run.kept[lane].append(c)
            run.cond.notify_all()
        return True

    def _disjoint(self, a: _Chunk, b: _Chunk) -> bool:
        """Whether a's writes (its footprint) miss everything b read or writes."""
        mark, footprint = self._mark[0], a.footprint
        mark[footprint] = True
        hit = bool(mark[b.footprint].any())
        mark[footprint] = False
        return not hit

    def _second_thread(self) -> ThreadPoolExecutor:
        """The thread beside the caller's (made once, for both lanes and pairs)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evroute-local")
        return self._pool

    def _condition_pair(self, a: tuple, b: tuple | None, share: float) -> None:
        """Condition chunk ``a`` then chunk ``b`` (far along the route). Both are attempted on
        the same state, side by side when ``threads`` > 1; b's attempt is kept only when its
        domain and shell miss a's (the two updates then touch disjoint state and commute),
        else b is redone after a's commit. The outcome never depends on the thread count."""
        r = self._radius
        if b is None:
            ca = self._attempt(*a, r, share, 0)
            self._commit(ca)
            self._radius = ca.next_radius
            return
        self.n_pairs += 1
        if self.threads > 1:
            fb = self._second_thread().submit(self._attempt, *b, r, share, 1)
            ca = self._attempt(*a, r, share, 0)
            cb = fb.result()
        else:
            ca = self._attempt(*a, r, share, 0)
            cb = self._attempt(*b, r, share, 1)
        self._commit(ca)
        if not self._disjoint(ca, cb):
            self.n_redone += 1
            cb = self._attempt(*b, r, share, 0)
        self._commit(cb)
        self._radius = max(ca.next_radius, cb.next_radius)

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
