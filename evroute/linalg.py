"""Dense linear algebra shared by priors and posterior backends: one jittered Cholesky.

float64 throughout. Every Cholesky factorisation of a covariance in evroute goes through
:func:`cholesky_with_jitter`, so the jitter schedule (none first, then 1e-10, 1e-9, …
times the mean diagonal) is the same everywhere.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import lapack

from .errors import EvrouteError
from .validate import positive_float, positive_int

__all__ = ["cholesky_with_jitter", "jittered_cholesky", "SparseSolver", "SparseCholesky"]


def cholesky_with_jitter(K, jitter: float = 1e-10, max_tries: int = 8,
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


def jittered_cholesky(K, jitter: float = 1e-10, max_tries: int = 8, what: str = "matrix") -> np.ndarray:
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
    ``scripts/bench_scale.py``): a factorisation costs about 300 solves of one right-hand
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
        import scipy.sparse as sp
        from scipy.sparse.linalg import splu

        A = sp.csc_matrix(A, dtype=np.float64)
        self.n = A.shape[0]
        try:
            lu = splu(A, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0, options={"SymmetricMode": True})
        except RuntimeError as exc:
            raise EvrouteError(f"{what} could not be factorised ({exc})") from None
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
