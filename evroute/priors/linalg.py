"""Linear algebra shared by priors and posterior backends: one jittered Cholesky, sparse
factorisations, and local computations on the graph of a sparse matrix.

float64 throughout. Every Cholesky factorisation of a covariance in evroute goes through
:func:`cholesky_with_jitter`, so the jitter schedule (none first, then 1e-10, 1e-9, …
times the mean diagonal) is the same everywhere.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp
from scipy.linalg import lapack

from ..errors import EvrouteError
from ..validate import positive_float, positive_int

__all__ = ["cholesky_with_jitter", "jittered_cholesky", "symmetric_splu", "nested_dissection", "METIS_SEED",
           "retain_freed_memory", "SparseSolver", "SparseCholesky", "csr_row_positions", "graph_ball",
           "graph_patches", "domain_blocks", "local_inverse_diagonal"]


def cholesky_with_jitter(K, jitter: float = 1e-10, max_tries: int = 8,
                         *,
                         what: str = "matrix") -> tuple[np.ndarray, float]:
    """Lower Cholesky factor of ``K``, adding diagonal jitter until it succeeds.

    The plain factorisation is tried first; then ``jitter · s · 10^k`` (``k = 0 ..
    max_tries-1``, ``s`` = mean of the diagonal, or 1 if that is not positive) is added.

    Parameters
    ----------
    K : array_like, shape (n, n)
        Symmetric matrix (only the lower triangle is read).
    jitter : float
        Relative jitter of the first jittered attempt (> 0).
    max_tries : int
        Number of jittered attempts (≥ 1).
    what : str
        What the matrix is, for the error message.

    Returns
    -------
    L : numpy.ndarray, shape (n, n)
        Lower-triangular factor, ``L Lᵀ = K + jitter_used · I``.
    jitter_used : float
        The absolute jitter added to the diagonal (0.0 if none was needed).

    Raises
    ------
    EvrouteError
        Bad parameters, or no attempt succeeded.
    """
    jitter = positive_float("jitter", jitter)
    max_tries = positive_int("max_tries", max_tries)
    K = np.asarray(K, dtype=np.float64)
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise EvrouteError(f"K must be a square matrix, got shape {K.shape}")
    if not np.all(np.isfinite(K)):
        raise EvrouteError("K contains NaN or infinite values")
    n = K.shape[0]
    if n == 0:
        return np.zeros((0, 0)), 0.0
    diag_mean = float(np.mean(np.diagonal(K)))
    scale = diag_mean if diag_mean > 0.0 else 1.0
    for k in range(max_tries + 1):
        added = 0.0 if k == 0 else jitter * scale * 10.0 ** (k - 1)
        A = np.array(K, order="F", copy=True)
        if added:
            A[np.diag_indices(n)] += added
        L, info = lapack.dpotrf(A, lower=1, clean=1, overwrite_a=1)
        if info == 0:
            return L, added
    raise EvrouteError(
        f"{what} is not positive definite: Cholesky failed even with jitter {jitter * scale * 10.0 ** (max_tries - 1):.3g} "
        f"(matrix not positive semi-definite?)"
    )


def jittered_cholesky(K, jitter: float = 1e-10, max_tries: int = 8, *, what: str = "matrix") -> np.ndarray:
    """Lower Cholesky factor of ``K`` with growing diagonal jitter.

    See :func:`cholesky_with_jitter` (this returns only the factor).

    Parameters
    ----------
    K : array_like, shape (n, n)
    jitter : float
        Relative jitter of the first jittered attempt; grows ×10 per attempt.
    max_tries : int
        Number of jittered attempts.

    Returns
    -------
    numpy.ndarray, shape (n, n)
        Lower-triangular ``L`` with ``L Lᵀ ≈ K``.
    """
    return cholesky_with_jitter(K, jitter=jitter, max_tries=max_tries, what=what)[0]


def symmetric_splu(A, what: str = "matrix", ordered: bool = False):
    """SciPy's SuperLU of a sparse symmetric positive definite A as a Cholesky factorisation:
    a symmetric ordering (MMD on Aᵀ + A), symmetric mode, no pivoting. Single-threaded and
    deterministic; it releases the GIL while it factorises and solves.

    Parameters
    ----------
    A : scipy.sparse matrix (n, n)
    what : str
        What A is, for error messages.
    ordered : bool
        A's rows and columns are already in a fill-reducing order (a block of a matrix in
        the order of :func:`nested_dissection`): SuperLU keeps it instead of computing MMD,
        which was about a fifth of its factorisation's time on the local posterior's domains.

    Returns
    -------
    scipy.sparse.linalg.SuperLU

    Raises
    ------
    EvrouteError
        When SuperLU fails (A singular).
    """
    from scipy.sparse.linalg import splu

    try:
        return splu(sp.csc_matrix(A, dtype=np.float64), permc_spec="NATURAL" if ordered else "MMD_AT_PLUS_A",
                    diag_pivot_thresh=0.0, options={"SymmetricMode": True})
    except RuntimeError as exc:
        raise EvrouteError(f"{what} could not be factorised ({exc})") from None


#: What :func:`retain_freed_memory` asks of glibc's malloc (bytes): blocks up to this size come
#: from the heap rather than from fresh pages of their own ...
HEAP_MMAP_THRESHOLD = 256 * 2**20
#: ... and up to this much freed memory at the heap's top stays with the process.
HEAP_TRIM_THRESHOLD = 512 * 2**20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
_retained: list[bool] = []


def retain_freed_memory() -> bool:
    """Let the thousands of sparse factorisations of local solves reuse the memory the last ones
    freed (glibc's ``mallopt``; Linux only, once a process, never over the user's own
    ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_``).

    SuperLU allocates its work arrays (tens of MB for a domain of a few thousand edges) afresh
    for every factorisation; by default glibc maps such large blocks as new pages and returns
    them when freed, so every factorisation pays the kernel for zeroed pages again. Keeping
    them in the heap made the local posterior's rounds 6–14 % faster on synthetic-100k
    (``docs/performance-scale.md``), for about 0.15 GB more resident memory. Results do not change.

    Returns
    -------
    bool
        Whether the options are in force in this process (set now or before).
    """
    if _retained:
        return _retained[0]
    ok = False
    if sys.platform.startswith("linux") and not {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"} & set(os.environ):
        try:
            mallopt = ctypes.CDLL(None).mallopt
        except (OSError, AttributeError):  # not glibc (musl has no mallopt)
            mallopt = None
        if mallopt is not None:
            mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
            ok = bool(mallopt(_M_MMAP_THRESHOLD, HEAP_MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, HEAP_TRIM_THRESHOLD))
    _retained.append(ok)
    return ok


#: METIS's random seed for :func:`nested_dissection`, fixed: the same order in every process.
METIS_SEED = 1


def nested_dissection(A) -> np.ndarray:
    """A fill-reducing elimination order of a sparse symmetric matrix: METIS's multilevel
    nested dissection of A's graph (Karypis & Kumar 1998, ``METIS_NodeND``, through pymetis),
    with a fixed seed, so the order is the same in every process.

    A nested-dissection order stays a good one on the blocks of A over any subset of its rows:
    its separators still separate there. The local posterior updates factorise thousands of
    such blocks in the order this returns, without ordering each (:func:`symmetric_splu`,
    ``ordered=True``).

    Parameters
    ----------
    A : scipy.sparse matrix (n, n)
        Its pattern is read (symmetrised); the values are not.

    Returns
    -------
    numpy.ndarray (n,) int64
        ``rank``: ``rank[i]`` is row i's position in the order (so ``argsort(rank)`` lists the
        rows in the order they are eliminated).
    """
    import pymetis

    A = sp.csr_matrix(A)
    n = A.shape[0]
    if A.shape != (n, n):
        raise EvrouteError(f"nested dissection needs a square matrix, got shape {A.shape}")
    if n == 0:
        return np.zeros(0, np.int64)
    C = A.tocoo()
    off = C.row != C.col  # METIS takes the graph without self-loops
    i, j = C.row[off], C.col[off]
    G = sp.csr_matrix((np.ones(2 * i.size, np.int8), (np.concatenate([i, j]), np.concatenate([j, i]))), shape=(n, n))
    G.sum_duplicates()
    _, iperm = pymetis.nested_dissection(pymetis.CSRAdjacency(G.indptr, G.indices),
                                         options=pymetis.Options(seed=METIS_SEED))
    return np.asarray(iperm, dtype=np.int64)


#: Right-hand sides per call of cholespy's solve: as fast per column as blocks of 64–256 here
#: (reference BLAS inside: 100k edges, 128 columns: 1.66 s in blocks of 8, 1.87 s in one
#: block, 4.7 s one by one), and the buffer cholespy keeps stays small (see
#: :meth:`SparseSolver.close`).
SOLVE_BLOCK = 8


class SparseSolver:
    """Solves with a sparse symmetric positive definite A: CHOLMOD's supernodal Cholesky
    factorisation (fill-reducing ordering chosen by CHOLMOD) through cholespy.

    The factor itself is not exposed (cholespy keeps it); :class:`SparseCholesky` adds one
    where it is needed. Measured on the synthetic cities (graph Matérn P² with ν = 2,
    ``benchmarks/scale.py``): a factorisation costs about 300 solves of one right-hand
    side each (in batches of 64), from 3k to 100k edges.

    Parameters
    ----------
    A : scipy.sparse matrix (n, n)
        Symmetric positive definite (both triangles stored).
    what : str
        What A is, for error messages.
    """

    def __init__(self, A, what: str = "precision matrix"):
        import scipy.sparse as sp
        from cholespy import CholeskySolverD, MatrixType

        A = sp.csc_matrix(A, dtype=np.float64)
        A.sort_indices()
        self.n = A.shape[0]
        try:
            self._solver = CholeskySolverD(self.n, A.indptr.astype(np.int32), A.indices.astype(np.int32),
                                           np.ascontiguousarray(A.data), MatrixType.CSC)
        except (RuntimeError, ValueError) as exc:
            raise EvrouteError(f"{what} could not be factorised ({exc})") from None

    def solve(self, b: np.ndarray) -> np.ndarray:
        """A⁻¹ b for a vector or the columns of a matrix (in blocks of :data:`SOLVE_BLOCK`
        columns)."""
        if self._solver is None:
            raise EvrouteError("this sparse solver was closed")
        b = np.asarray(b, dtype=np.float64)
        if b.ndim == 1 or b.shape[1] <= SOLVE_BLOCK:
            b = np.ascontiguousarray(b)
            x = np.empty_like(b)
            self._solver.solve(b, x)
            return x
        x = np.empty(b.shape)
        part = np.empty((b.shape[0], SOLVE_BLOCK))
        for lo in range(0, b.shape[1], SOLVE_BLOCK):
            hi = min(lo + SOLVE_BLOCK, b.shape[1])
            rhs = np.ascontiguousarray(b[:, lo:hi])
            out = part if hi - lo == SOLVE_BLOCK else np.empty_like(rhs)
            self._solver.solve(rhs, out)
            x[:, lo:hi] = out
        return x

    def close(self) -> None:
        """Give back the solver's memory now (call before dropping a solver that did block
        solves, as the exact GMRF posterior does at each refactorisation).

        cholespy (2.x) keeps a buffer of n × k floats for the last block of k right-hand
        sides and does not free it with the solver; one solve of a single right-hand side
        first shrinks what stays behind to n floats.
        """
        if self._solver is not None:
            z = np.zeros(self.n)
            self._solver.solve(z, np.empty_like(z))
            self._solver = None


class SparseCholesky:
    """A sparse symmetric positive definite A factorised as A[q][:, q] = L D Lᵀ (L unit lower),
    q a fill-reducing symmetric ordering.

    Two libraries, each for what it does best: SciPy's SuperLU (``splu``) with a symmetric
    ordering (``MMD_AT_PLUS_A``), symmetric mode and no pivoting, whose LU factors are L and
    D Lᵀ, gives the factor that selected inversion and half solves need; cholespy (CHOLMOD,
    supernodal) does the solves with many right-hand sides, ~6× faster than SuperLU's (30k
    edges, 100 right-hand sides: 0.14 s vs 0.84 s; they agree to 1e-15). scikit-sparse has
    no wheel here; cholespy does not expose the factor.

    Parameters
    ----------
    A : scipy.sparse matrix (n, n)
        Symmetric positive definite.
    what : str
        What A is, for error messages.
    """

    def __init__(self, A, what: str = "precision matrix"):
        A = sp.csc_matrix(A, dtype=np.float64)
        self.n = A.shape[0]
        lu = symmetric_splu(A, what)
        if not np.array_equal(lu.perm_r, lu.perm_c):
            raise EvrouteError(f"{what}: the factorisation pivoted; the matrix is not positive definite")
        self._lu = lu
        self.order = np.argsort(lu.perm_c)  # A[order][:, order] = L D Lᵀ
        self.L = lu.L.tocsc()
        self.L.sort_indices()
        self.D = lu.U.diagonal().copy()
        if not np.all(self.D > 0):
            raise EvrouteError(f"{what} is not positive definite (a non-positive pivot)")
        self._solver = SparseSolver(A, what)

    def solve(self, b: np.ndarray) -> np.ndarray:
        """A⁻¹ b for a vector or the columns of a matrix (CHOLMOD through cholespy)."""
        return self._solver.solve(b)

    def half_solve(self, z: np.ndarray) -> np.ndarray:
        """X with Cov(x) = A⁻¹ when z ~ N(0, I): x[q] = L⁻ᵀ D^(−1/2) z (one triangular solve)."""
        from scipy.sparse.linalg import spsolve_triangular

        y = spsolve_triangular(self.L.T.tocsr(), np.asarray(z, dtype=np.float64) / np.sqrt(self.D),
                               lower=False, unit_diagonal=True)
        x = np.empty(self.n)
        x[self.order] = y
        return x

    def inverse_diagonal(self) -> np.ndarray:
        """diag(A⁻¹), exactly, by selected inversion (Takahashi et al. 1973; Rue & Held 2005,
        Sec. 2.4.1, as R-INLA): Σ = (L D Lᵀ)⁻¹ is computed on the pattern of L only, column by
        column from the last, Σ_{I,j} = −Σ_{I,I} L_{I,j}, Σ_jj = 1/D_j − L_{I,j}ᵀ Σ_{I,j} (I the
        rows below j in column j; the pattern of a Cholesky factor is closed under this
        recursion).

        Supernodal: columns j0..j1 whose patterns nest (below(k) = {k+1} ∪ below(k+1)) share
        one dense block, gathered once from the stored Σ (one vectorised search) and grown by
        a row and a column per column, so each column costs one dense matrix-vector product.
        Cost ~ Σ_j |I_j|² flops (comparable to the factorisation).
        """
        L, n = self.L, self.n
        indptr, indices, data = L.indptr, L.indices, L.data
        sigma = np.zeros_like(data)
        # every stored entry (row i, column j) as one sorted key j·n + i
        keys = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr)) * n + indices
        want_diag = np.arange(n, dtype=np.int64) * (n + 1)
        diag_pos = np.searchsorted(keys, want_diag)
        if np.any(diag_pos >= keys.size) or np.any(keys[np.minimum(diag_pos, keys.size - 1)] != want_diag):
            raise EvrouteError("selected inversion: the factor has no stored diagonal")
        n_below = indptr[1:] - diag_pos - 1
        first_below = np.where(n_below > 0, indices[np.minimum(diag_pos + 1, data.size - 1)], -1)

        def nests(k: int) -> bool:  # does column k − 1 belong to the supernode of column k?
            return (n_below[k - 1] == n_below[k] + 1 and first_below[k - 1] == k and np.array_equal(
                indices[diag_pos[k - 1] + 2:indptr[k]], indices[diag_pos[k] + 1:indptr[k + 1]]))

        j1 = n - 1
        while j1 >= 0:
            j0 = j1
            while j0 > 0 and nests(j0):
                j0 -= 1
            w = j1 - j0 + 1
            rest = indices[diag_pos[j1] + 1:indptr[j1 + 1]].astype(np.int64)
            c = rest.size
            block = np.empty((w + c, w + c))  # Σ over [j0..j1] ∪ rest, filled from the bottom right
            if c:
                tt, uu = np.triu_indices(c)
                want = rest[tt] * n + rest[uu]  # Σ[rest[uu], rest[tt]], lower triangle
                pos = np.searchsorted(keys, want)
                if np.any(pos >= keys.size) or np.any(keys[np.minimum(pos, keys.size - 1)] != want):
                    raise EvrouteError("selected inversion: the factor's pattern is not closed")
                tail = block[w:, w:]
                tail[uu, tt] = sigma[pos]
                tail[tt, uu] = sigma[pos]
            for t in range(w - 1, -1, -1):
                col = j0 + t
                lo, hi = diag_pos[col] + 1, indptr[col + 1]
                lvals = data[lo:hi]
                s = -(block[t + 1:, t + 1:] @ lvals)
                d = 1.0 / self.D[col] - lvals @ s
                sigma[lo:hi] = s
                sigma[diag_pos[col]] = d
                block[t, t] = d
                block[t + 1:, t] = s
                block[t, t + 1:] = s
            j1 = j0 - 1
        out = np.empty(n)
        out[self.order] = sigma[diag_pos]
        return out


# --------------------------------------------------------------------------------------
# Local computations on the graph of a sparse matrix
# --------------------------------------------------------------------------------------


def csr_row_positions(indptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Positions in a CSR matrix's ``indices``/``data`` of the stored entries of ``rows``
    (in the order of ``rows``, then of the stored columns)."""
    starts = indptr[rows]
    counts = indptr[rows + 1] - starts
    ends = np.cumsum(counts)
    return np.repeat(starts - ends + counts, counts) + np.arange(ends[-1] if ends.size else 0)


def graph_ball(indptr: np.ndarray, indices: np.ndarray, seeds: np.ndarray, *, r: int, mark: np.ndarray,
               stamp: np.ndarray | None = None) -> np.ndarray:
    """The vertices within ``r`` hops of ``seeds`` in the graph of a CSR pattern, sorted.

    ``mark`` is a boolean scratch array of length n, all False on entry and on return.
    ``stamp``, optional, is an integer scratch array of length n, all −1 on entry and on
    return: with it each layer's duplicates are dropped without sorting (a quarter faster on
    the local posterior's domains).
    """
    mark[seeds] = True
    layers = [seeds]
    frontier = seeds
    for _ in range(r):
        nb = indices[csr_row_positions(indptr, frontier)]
        nb = nb[~mark[nb]]
        if stamp is None:
            nb = np.unique(nb)
        elif nb.size:  # keep each vertex's last occurrence
            at = np.arange(nb.size)
            stamp[nb] = at
            nb = nb[stamp[nb] == at]
            stamp[nb] = -1
        if nb.size == 0:
            break
        mark[nb] = True
        layers.append(nb)
        frontier = nb
    ball = np.sort(np.concatenate(layers))
    mark[ball] = False
    return ball


def domain_blocks(A: sp.csr_matrix, omega: np.ndarray, where: np.ndarray, *, seeds: np.ndarray | None = None,
                  diagonal_offset: np.ndarray | None = None, add: np.ndarray | None = None):
    """The blocks of a symmetric sparse matrix on a domain Ω, straight from its rows.

    Parameters
    ----------
    A : scipy.sparse.csr_matrix (n, n)
        Symmetric, in canonical form (sorted indices, no duplicates).
    omega : numpy.ndarray of int
        Ω, in the order the blocks should have (a fill-reducing one, say).
    where : numpy.ndarray of int64, length n
        Scratch, all −1 on entry and on return.
    seeds : numpy.ndarray of int, optional
        Vertices of Ω whose positions in ``omega`` are wanted.
    diagonal_offset, add : numpy.ndarray, optional
        Where in its row each of A's (stored) diagonal entries lies, and values (one per
        vertex of Ω) to add to A_ΩΩ's diagonal.

    Returns
    -------
    A_ΩΩ (+ diag(add)) : scipy.sparse.csc_matrix, canonical
        Ω's rows restricted to Ω are its columns (A is symmetric); one conversion sorts them.
    A_{shell,Ω} : scipy.sparse.csc_matrix
        The rows of the shell (the vertices outside Ω that A couples to Ω), by columns.
    shell : numpy.ndarray
        Sorted.
    positions : numpy.ndarray or None
        The positions of ``seeds`` in ``omega``.
    """
    if add is not None and diagonal_offset is None:
        raise ValueError("domain_blocks: adding to the diagonal needs diagonal_offset")
    n = omega.size
    where[omega] = np.arange(n)
    at = None if seeds is None else where[seeds]
    lengths = A.indptr[omega + 1] - A.indptr[omega]
    starts = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=starts[1:])
    pos = csr_row_positions(A.indptr, omega)
    cols = A.indices[pos]
    vals = A.data[pos]
    if add is not None:
        vals[starts[:-1] + diagonal_offset[omega]] += add
    local = where[cols]
    where[omega] = -1
    inside = local >= 0
    seen = np.zeros(inside.size + 1, np.int64)
    np.cumsum(inside, out=seen[1:])
    n_in = seen[starts[1:]] - seen[starts[:-1]]  # each row's entries inside Ω (a row may store none)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(n_in, out=indptr[1:])
    block = sp.csr_matrix((vals[inside], local[inside], indptr), shape=(n, n)).tocsc()
    outside = ~inside
    shell, shell_local = np.unique(cols[outside], return_inverse=True)
    np.cumsum(lengths - n_in, out=indptr[1:])
    rim = sp.csc_matrix((vals[outside], shell_local, indptr), shape=(shell.size, n))
    return block, rim, shell, at


def graph_patches(indptr: np.ndarray, indices: np.ndarray, size: int) -> list[np.ndarray]:
    """Cover the vertices of a CSR pattern's graph by disjoint compact patches of about
    ``size`` vertices, sorted, each a sorted array.

    From the lowest-numbered vertex not yet covered, a breadth-first search over uncovered
    vertices (lowest numbers first in each layer) takes ``size`` vertices; the fragments this
    leaves between patches (under ``size // 4``) are then handed to their nearest patch
    (breadth first from all patches at once, the lowest patch on a tie). Deterministic: it
    depends on the pattern only.
    """
    n = indptr.size - 1
    owner = np.full(n, -1, np.int64)
    sizes: list[int] = []
    seed = 0
    while True:
        while seed < n and owner[seed] >= 0:  # the next uncovered vertex (seed only grows: O(n) in all)
            free = np.flatnonzero(owner[seed:seed + 4096] < 0)
            seed = seed + int(free[0]) if free.size else seed + 4096
        if seed >= n:
            break
        pid = len(sizes)
        frontier = np.array([seed], dtype=np.int64)
        owner[seed] = pid
        m = 1
        while m < size:
            nb = indices[csr_row_positions(indptr, frontier)]
            nb = np.unique(nb[owner[nb] < 0])[: size - m].astype(np.int64)
            if nb.size == 0:
                break
            owner[nb] = pid
            m += nb.size
            frontier = nb
        sizes.append(m)
    small = np.asarray(sizes) < size // 4
    if small.any() and not small.all():
        owner[small[owner]] = -1
        frontier = np.flatnonzero(owner >= 0)
        while frontier.size:
            counts = indptr[frontier + 1] - indptr[frontier]
            src = np.repeat(frontier, counts)
            nb = indices[csr_row_positions(indptr, frontier)].astype(np.int64)
            free = owner[nb] < 0
            nb, own = nb[free], owner[src[free]]
            order = np.lexsort((own, nb))
            nb, own = nb[order], own[order]
            first = np.ones(nb.size, bool)
            first[1:] = nb[1:] != nb[:-1]
            owner[nb[first]] = own[first]
            frontier = nb[first]
    order = np.argsort(owner, kind="stable")
    cuts = np.flatnonzero(np.diff(owner[order])) + 1
    return [part for part in np.split(order, cuts) if part.size]


#: :func:`local_inverse_diagonal` tries one hop less for the next block when every bound of a
#: block is below this share of the tolerance.
SHRINK_BELOW = 1e-3
#: :func:`local_inverse_diagonal`'s patches started from the same radius: what threads share
#: out (a pair left one thread waiting for the slower patch: 1.2× on two threads at 10⁶ edges).
PATCH_BLOCK = 8


def local_inverse_diagonal(A, min_eigenvalue: float, tol: float = 1e-12, *, patch: int = 128, radius: int = 3,
                           max_radius: int = 64, threads: int = 1, what: str = "matrix",
                           trace: list | None = None, block: int = PATCH_BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """diag(A⁻¹) of a sparse symmetric positive definite A from local solves, each entry with a
    rigorous a-posteriori error bound; no global factorisation (selected inversion of a global
    factor peaks at ~18 GB at 3·10⁵ edges of the graph Matérn precision).

    The vertices are covered by compact patches K (:func:`graph_patches`). For each patch,
    Ω = the vertices within r hops of K in the graph of A, W = (A_ΩΩ)⁻¹ E_K (extended by zero),
    and d_j = W_jj. The exact column x_j = A⁻¹ e_j differs from w_j by A⁻¹ ρ_j, where
    ρ_j = (A w_j − e_j) lives on the shell S (the vertices one hop outside Ω):
    ρ_j = A_{S,Ω} w_j. Since x_j − w_j = −A⁻¹ρ_j and (A⁻¹e_j)ᵀρ_j = x_jᵀρ_j with
    (x_j)_S = (x_j − w_j)_S,

        |(A⁻¹)_jj − d_j| = |x_jᵀ ρ_j| ≤ ‖A⁻¹ρ_j‖ ‖ρ_j‖ ≤ ‖ρ_j‖₂² / λ_min(A),

    a bound of second order in the shell residual (the Galerkin error of a local solve). The
    radius grows by one hop until every entry of the patch has bound ≤ tol · d_j (or Ω is the
    whole graph: exact). Patches go in blocks of ``block``, every patch of a block from the same
    radius (side by side on ``threads`` threads: SciPy's SuperLU releases the GIL), the next
    block from the largest of their radii, one hop less when all had room to spare: the result
    does not depend on ``threads``.

    Parameters
    ----------
    A : scipy.sparse matrix (n, n)
        Symmetric positive definite, both triangles stored.
    min_eigenvalue : float
        A lower bound on A's smallest eigenvalue (> 0).
    tol : float
        Relative bound wanted for every entry.
    patch : int
        Vertices per patch (right-hand sides of one local solve).
    radius, max_radius : int
        First radius tried and the cap (a patch that needs more raises an error).
    threads : int
        Patches of a block solved side by side (the same result for any number).
    what : str
        What A is, for error messages.
    trace : list, optional
        Receives (|K|, r, |Ω|, max_j bound_j / d_j) for every domain tried.
    block : int
        Patches started from the same radius (what the threads share out).

    Returns
    -------
    d : numpy.ndarray (n,)
        The estimates of diag(A⁻¹).
    bound : numpy.ndarray (n,)
        |diag(A⁻¹) − d| ≤ bound, entrywise (rounding apart).

    Raises
    ------
    EvrouteError
        A bad parameter, a domain that cannot be factorised, or a patch whose bound does not
        fit ``tol`` within ``max_radius`` hops.
    """
    lam = positive_float("min_eigenvalue", min_eigenvalue)
    tol = positive_float("tol", tol)
    patch = positive_int("patch", patch)
    r = positive_int("radius", radius)
    max_radius = positive_int("max_radius", max_radius)
    threads = positive_int("threads", threads)
    block = positive_int("block", block)
    A = sp.csr_matrix(A, dtype=np.float64)
    A.sum_duplicates()  # (canonical: sorted, one entry a position)
    n = A.shape[0]
    indptr, indices = A.indptr, A.indices
    retain_freed_memory()
    per_thread = threading.local()  # scratch of each thread: marks all False, positions all -1 between uses

    def one(K: np.ndarray, r: int):
        """The patch's estimates and bounds, growing the radius from r; nothing shared written."""
        if not hasattr(per_thread, "mark"):
            per_thread.mark, per_thread.where = np.zeros(n, bool), np.full(n, -1, np.int64)
        mark, where = per_thread.mark, per_thread.where
        k = np.arange(K.size)
        tried = []
        while True:
            omega = graph_ball(indptr, indices, K, r=r, mark=mark, stamp=where)
            m = omega.size
            A_oo, B, _, posK = domain_blocks(A, omega, where, seeds=K)
            rhs = np.zeros((m, K.size), order="F")
            rhs[posK, k] = 1.0
            W = symmetric_splu(A_oo, f"a local block of the {what}").solve(rhs)
            est = W[posK, k]
            R = B @ W
            bnd = np.einsum("ij,ij->j", R, R) / lam
            tried.append((K.size, r, m, float(np.max(bnd / np.abs(est)))))
            if np.all(bnd <= tol * est) or m == n:
                break
            if r >= max_radius:
                raise EvrouteError(f"{what}: the local inverse diagonal needs more than {max_radius} hops "
                                   f"(bound {tried[-1][3]:.2e} relative, tol {tol:g})")
            r += 1
        if np.any(est <= 0):
            raise EvrouteError(f"{what} is not positive definite (a non-positive local inverse diagonal)")
        # the bound falls about a hundredfold a hop: with room to spare, one hop less next time
        shrink = r > 1 and bool(np.all(bnd <= SHRINK_BELOW * tol * est))
        return est, bnd, r - shrink, tried

    d = np.empty(n)
    bound = np.empty(n)
    patches = graph_patches(indptr, indices, patch)
    pool = ThreadPoolExecutor(threads) if threads > 1 else None
    try:
        for lo in range(0, len(patches), block):  # a block at a time, all from the same radius
            group = patches[lo:lo + block]
            starts = [r] * len(group)
            done = list(pool.map(one, group, starts)) if pool is not None else list(map(one, group, starts))
            for K, (est, bnd, _, tried) in zip(group, done, strict=True):
                d[K] = est
                bound[K] = bnd
                if trace is not None:
                    trace.extend(tried)
            r = max(item[2] for item in done)
    finally:
        if pool is not None:
            pool.shutdown()
    return d, bound
