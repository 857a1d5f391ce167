"""Kernels on the edges of a road network (paper 003, App. B.1).

Pure functions over numpy / scipy arrays, float64 throughout:

* the line-graph weights and the incidence Laplacian ``Δ = B Bᵀ`` (003 Eq. 132-133),
* the graph Matérn kernel ``k_G = U (2ν/κ² I + Λ)^(−ν) Uᵀ`` on the edges (003 Eq. 134),
  either through a dense eigendecomposition (any real ν > 0) or through a Cholesky
  factorisation of the precision matrix ``P = 2ν/κ² I + Δ`` (integer ν),
* the Matérn-5/2 context kernel with one lengthscale per dimension (003 Eq. 135-136),
* the combined kernel ``σ₀² · normalise(k_G ∘ k_f + k_f′)`` and its two ablations,

Edge ids are the row numbers ``0..E-1``; the line graph is given by two int64 arrays
``conn_src``, ``conn_dst`` (a legal turn from edge ``conn_src[c]`` into ``conn_dst[c]``).
Bad parameters raise :class:`evroute.errors.EvrouteError` with a one-line message.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.linalg import blas, lapack
from scipy.spatial.distance import cdist

from ..errors import EvrouteError
from ..settings import KERNEL_KINDS, check_kappa, check_lengthscale, check_nu
from ..validate import positive_float, positive_int
from .linalg import symmetric_splu

__all__ = [
    "line_graph_weights",
    "incidence_matrix",
    "incidence_laplacian",
    "graph_matern",
    "standardize_context",
    "matern52",
    "normalise_kernel",
    "combined_kernel",
    "KERNEL_KINDS",
    "GRAPH_MATERN_METHODS",
    "check_kappa",
    "check_nu",
    "check_lengthscale",
]

#: Accepted values of ``graph_matern(method=...)``.
GRAPH_MATERN_METHODS = ("auto", "eigen", "precision", "sparse")




# ----------------------------------------------------------------------------- checks
def _positive_vector(name: str, value, dim: int) -> np.ndarray:
    """Broadcast a scalar or a length-``dim`` vector of finite positive numbers."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise EvrouteError(f"{name} must be positive numbers, got {value!r}") from exc
    if arr.ndim == 0:
        arr = np.full(dim, float(arr))
    elif arr.ndim != 1 or arr.shape[0] != dim:
        raise EvrouteError(f"{name} must be a scalar or have length {dim}, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0.0):
        raise EvrouteError(f"{name} must be finite and > 0, got {arr.tolist()!r}")
    return arr


def _as_matrix(name: str, X) -> np.ndarray:
    """``X`` as a finite float64 array of shape (n, d); a 1-D array is one column."""
    try:
        X = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise EvrouteError(f"{name} must be a numeric array") from exc
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise EvrouteError(f"{name} must be a 2-D array (n, d), got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise EvrouteError(f"{name} contains NaN or infinite values")
    return X


def _connections(n_edges: int, conn_src, conn_dst) -> tuple[np.ndarray, np.ndarray]:
    src = np.asarray(conn_src)
    dst = np.asarray(conn_dst)
    if src.ndim != 1 or dst.ndim != 1 or src.shape != dst.shape:
        raise EvrouteError(
            f"conn_src and conn_dst must be 1-D arrays of equal length, "
            f"got shapes {src.shape} and {dst.shape}"
        )
    if src.size and not (
        np.issubdtype(src.dtype, np.integer) and np.issubdtype(dst.dtype, np.integer)
    ):
        raise EvrouteError("conn_src and conn_dst must hold integer edge ids")
    src = src.astype(np.int64, copy=False)
    dst = dst.astype(np.int64, copy=False)
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n_edges):
        raise EvrouteError(f"conn_src/conn_dst hold edge ids outside 0..{n_edges - 1}")
    return src, dst


def _lengths(lengths) -> np.ndarray:
    ell = np.asarray(lengths, dtype=np.float64)
    if ell.ndim != 1 or ell.size == 0:
        raise EvrouteError(f"lengths must be a non-empty 1-D array, got shape {ell.shape}")
    if not np.all(np.isfinite(ell)) or np.any(ell <= 0.0):
        raise EvrouteError("lengths must be finite and > 0 for every edge")
    return ell


# ------------------------------------------------------------------ line graph / Laplacian
def line_graph_weights(lengths, conn_src, conn_dst) -> np.ndarray:
    """Weights of the line-graph connections, ``W(e1, e2) = ℓ̄ / ℓ_{e1}``.

    003 App. B.1: the weight of the connection ``c = (e1, e2)`` is the mean edge length
    divided by the length of the edge the turn starts from.

    Parameters
    ----------
    lengths : array_like, shape (E,)
        Edge lengths (any unit; finite and > 0).
    conn_src, conn_dst : array_like of int, shape (C,)
        Connection ``c`` is the turn from edge ``conn_src[c]`` into ``conn_dst[c]``.

    Returns
    -------
    numpy.ndarray, shape (C,), float64
        The weight of each connection.

    Raises
    ------
    EvrouteError
        Non-positive or non-finite lengths, or edge ids out of range.
    """
    ell = _lengths(lengths)
    src, _ = _connections(ell.shape[0], conn_src, conn_dst)
    return ell.mean() / ell[src]


def incidence_matrix(n_edges: int, conn_src, conn_dst, *, lengths) -> sp.csr_matrix:
    """Weighted incidence matrix ``B`` (E×C) of the line graph (003 Eq. 133).

    ``B[e1, c] = −W_c`` and ``B[e2, c] = +W_c`` for ``c = (e1, e2)``, zero elsewhere.
    A self-connection ``e1 == e2`` gives an all-zero column (the two entries cancel).

    Parameters
    ----------
    n_edges : int
        Number of edges E.
    conn_src, conn_dst : array_like of int, shape (C,)
        The connections of the line graph.
    lengths : array_like, shape (E,)
        Edge lengths.

    Returns
    -------
    scipy.sparse.csr_matrix, shape (E, C), float64
    """
    n_edges = _n_edges(n_edges)
    ell = _lengths(lengths)
    if ell.shape[0] != n_edges:
        raise EvrouteError(f"lengths has {ell.shape[0]} entries but n_edges is {n_edges}")
    src, dst = _connections(n_edges, conn_src, conn_dst)
    w = line_graph_weights(ell, src, dst)
    n_conn = src.shape[0]
    cols = np.arange(n_conn, dtype=np.int64)
    # duplicates (only for e1 == e2) are summed by the COO -> CSR conversion
    B = sp.coo_matrix(
        (np.concatenate([-w, w]), (np.concatenate([src, dst]), np.concatenate([cols, cols]))),
        shape=(n_edges, n_conn),
        dtype=np.float64,
    ).tocsr()
    B.eliminate_zeros()
    return B


def _n_edges(n_edges) -> int:
    if isinstance(n_edges, str):
        raise EvrouteError(f"n_edges must be a positive integer, got {n_edges!r}")
    return positive_int("n_edges", n_edges)


def incidence_laplacian(n_edges: int, conn_src, conn_dst, *, lengths) -> sp.csr_matrix:
    """Incidence Laplacian ``Δ = B Bᵀ`` of the line graph (003 Eq. 132-133).

    ``Δ`` is symmetric positive semi-definite and its rows sum to zero (every column of
    ``B`` sums to zero). ``Δ[e, e] = Σ_c W_c²`` over the connections touching ``e`` and
    ``Δ[e1, e2] = −Σ W_c²`` over the connections between ``e1`` and ``e2`` (either way).

    Parameters
    ----------
    n_edges : int
        Number of edges E.
    conn_src, conn_dst : array_like of int, shape (C,)
        The connections of the line graph.
    lengths : array_like, shape (E,)
        Edge lengths.

    Returns
    -------
    scipy.sparse.csr_matrix, shape (E, E), float64
    """
    B = incidence_matrix(n_edges, conn_src, conn_dst, lengths=lengths)
    lap = (B @ B.T).tocsr()
    lap.sum_duplicates()
    lap.sort_indices()
    return lap


# ------------------------------------------------------------------------ graph Matérn
def _symmetrise_from_lower(A: np.ndarray, block: int = 256) -> np.ndarray:
    """Copy the lower triangle of square ``A`` onto its upper one, in place.

    Blocked so that every copy is a cache-friendly block transpose (a plain
    ``tril + tril.T`` takes seconds at E = 6000). The result is exactly symmetric.
    """
    n = A.shape[0]
    for j0 in range(0, n, block):
        j1 = min(j0 + block, n)
        D = A[j0:j1, j0:j1]
        D[...] = np.tril(D) + np.tril(D, -1).T
        for i0 in range(j1, n, block):
            i1 = min(i0 + block, n)
            A[j0:j1, i0:i1] = A[i0:i1, j0:j1].T
    return A


def _gram(A: np.ndarray, transpose_first: bool) -> np.ndarray:
    """``Aᵀ A`` (``transpose_first``) or ``A Aᵀ`` via BLAS ``syrk``.

    One triangle is computed and mirrored, so the result is exactly symmetric.
    """
    # dsyrk(a, trans=0) = a aᵀ and dsyrk(a, trans=1) = aᵀ a; hand BLAS a Fortran-ordered
    # array (A itself, or the free view Aᵀ of a C-ordered A) to avoid an n² copy.
    if A.flags.f_contiguous:
        a, trans = A, int(transpose_first)
    elif A.flags.c_contiguous:
        a, trans = A.T, int(not transpose_first)
    else:
        a, trans = np.asfortranarray(A), int(transpose_first)
    return _symmetrise_from_lower(blas.dsyrk(1.0, a, trans=trans, lower=1))


def _check_laplacian(laplacian) -> sp.csr_matrix:
    if sp.issparse(laplacian):
        lap = sp.csr_matrix(laplacian, dtype=np.float64)
    else:
        arr = np.asarray(laplacian, dtype=np.float64)
        if arr.ndim != 2:
            raise EvrouteError(f"laplacian must be a square matrix, got shape {arr.shape}")
        lap = sp.csr_matrix(arr)
    n, m = lap.shape
    if n != m or n == 0:
        raise EvrouteError(f"laplacian must be a non-empty square matrix, got shape {lap.shape}")
    if not np.all(np.isfinite(lap.data)):
        raise EvrouteError("laplacian contains NaN or infinite values")
    scale = np.abs(lap.data).max() if lap.nnz else 0.0
    asym = abs(lap - lap.T)
    if asym.nnz and asym.max() > 1e-10 * max(scale, 1.0):
        raise EvrouteError("laplacian must be symmetric")
    return lap


def _integer_nu(nu: float, method: str) -> int:
    if not float(nu).is_integer():
        raise EvrouteError(f"nu must be an integer for method={method!r}, got {nu!r}")
    return int(nu)


def _matern_eigen(lap: sp.csr_matrix, shift: float, nu: float) -> np.ndarray:
    # 003 Eq. 134: Δ = U Λ Uᵀ, k_G = U (2ν/κ² I + Λ)^(−ν) Uᵀ, computed as A Aᵀ with
    # A = U (2ν/κ² I + Λ)^(−ν/2) so the result is exactly symmetric and PSD.
    lam, U = scipy.linalg.eigh(lap.toarray(), overwrite_a=True, check_finite=False)
    lam = np.clip(lam, 0.0, None)  # Δ is PSD; drop round-off negatives
    A = U * (shift + lam) ** (-0.5 * nu)
    return _gram(A, transpose_first=False)


def _matern_precision(lap: sp.csr_matrix, shift: float, nu: int) -> np.ndarray:
    # 003 Eq. 134 for integer ν without an eigendecomposition: k_G = P^(−ν) with the
    # precision P = 2ν/κ² I + Δ (SPD, smallest eigenvalue ≥ 2ν/κ²). Cholesky P = L Lᵀ,
    # Z = L^(−1), G = P^(−1) = Zᵀ Z; then k_G = Aᵀ A with A = G^m (ν = 2m) or
    # A = Z G^m (ν = 2m + 1). All dense BLAS-3; exactly symmetric by construction.
    n = lap.shape[0]
    P = (lap + sp.identity(n, dtype=np.float64, format="csr") * shift).toarray(order="F")
    L, info = lapack.dpotrf(P, lower=1, clean=1, overwrite_a=1)
    if info != 0:  # cannot happen for a PSD Δ and shift > 0
        raise EvrouteError(f"precision matrix is not positive definite (dpotrf info={info})")
    m, odd = divmod(nu, 2)
    Z = None
    if odd and m > 0:
        Z, info = lapack.dtrtri(L, lower=1, overwrite_c=0)
        if info != 0:
            raise EvrouteError(f"triangular inverse failed (dtrtri info={info})")
        # dpotrf(clean=1) zeroed the upper triangle and dtrtri leaves it alone: Z is lower
    G, info = lapack.dpotri(L, lower=1, overwrite_c=1)
    if info != 0:
        raise EvrouteError(f"inverse of the precision matrix failed (dpotri info={info})")
    G = _symmetrise_from_lower(G)  # dpotri fills the lower triangle only
    if nu == 1:
        return G
    A = G
    for _ in range(m - 1):
        A = A @ G
    if odd:
        A = Z @ A
    return _gram(A, transpose_first=True)


def _matern_sparse(lap: sp.csr_matrix, shift: float, nu: int) -> np.ndarray:
    # Literal sparse variant: SuperLU factorisation of the sparse precision P (fill-reducing
    # symmetric ordering) and ν multi-right-hand-side solves, k_G = P^(−1) ⋯ P^(−1) I.
    # Exact in exact arithmetic but slow for large E (SuperLU solves one column at a time).
    n = lap.shape[0]
    P = (lap + sp.identity(n, dtype=np.float64, format="csr") * shift).tocsc()
    lu = symmetric_splu(P, "graph Matérn operator")
    X = np.eye(n, dtype=np.float64, order="F")
    for _ in range(nu):
        X = lu.solve(X)
    return 0.5 * (X + X.T)


def graph_matern(
    laplacian, nu: float = 2.0, kappa: float = 1.0, *, method: str = "auto"
) -> np.ndarray:
    """Graph Matérn kernel on the edges, normalised to unit mean prior variance.

    003 Eq. 134 (Borovitskiy et al. 2021 with the incidence Laplacian of the line graph):
    ``k_G = U (2ν/κ² I + Λ)^(−ν) Uᵀ`` for ``Δ = U Λ Uᵀ``, then divided by the mean of its
    diagonal.

    Parameters
    ----------
    laplacian : scipy.sparse matrix or array_like, shape (E, E)
        Symmetric PSD Laplacian, e.g. from :func:`incidence_laplacian`.
    nu : float, default 2.0
        Smoothness ``ν_G`` > 0.
    kappa : float, default 1.0
        Lengthscale ``κ_G`` > 0.
    method : {"auto", "eigen", "precision", "sparse"}
        ``"eigen"``: dense eigendecomposition of Δ, any real ν (O(E³) with a large
        constant: ≈ 15× slower than ``"precision"`` at E = 6000). ``"precision"``:
        integer ν only; the precision matrix ``P = 2ν/κ² I + Δ`` (assembled sparse) is
        Cholesky-factorised (LAPACK ``potrf``, dense storage) and ``k_G = P^(−ν)`` is
        formed from the triangular factor with BLAS-3 routines (``potri``, ``syrk``), no
        eigendecomposition; ≈ 2E³ flops for ν = 2 (E = 6000: ≈ 11 s of one core).
        ``"sparse"``: integer ν only; SuperLU factorisation of the sparse P and ν solves
        with E right-hand sides (same result, but SuperLU solves the right-hand sides one
        at a time: minutes at E = 6000; meant for cross-checks). ``"auto"``:
        ``"precision"`` for integer ν,
        ``"eigen"`` otherwise.

    Returns
    -------
    numpy.ndarray, shape (E, E), float64
        Exactly symmetric PSD kernel matrix with ``mean(diag) == 1``.

    Raises
    ------
    EvrouteError
        Non-positive / non-finite ``nu`` or ``kappa``, unknown ``method``, non-integer
        ``nu`` for ``"precision"``/``"sparse"``, or a non-square / asymmetric Laplacian.
    """
    nu = check_nu("nu", nu)
    kappa = check_kappa("kappa", kappa)
    if method not in GRAPH_MATERN_METHODS:
        raise EvrouteError(
            f"unknown graph_matern method {method!r} (use one of {GRAPH_MATERN_METHODS})"
        )
    lap = _check_laplacian(laplacian)
    shift = 2.0 * nu / kappa**2  # 2ν/κ² of 003 Eq. 134
    if method == "auto":
        method = "precision" if float(nu).is_integer() else "eigen"
    if method == "eigen":
        K = _matern_eigen(lap, shift, nu)
    elif method == "precision":
        K = _matern_precision(lap, shift, _integer_nu(nu, method))
    else:
        K = _matern_sparse(lap, shift, _integer_nu(nu, method))
    return normalise_kernel(K, name="graph Matérn kernel")


# ---------------------------------------------------------------------- context kernels
def standardize_context(X) -> np.ndarray:
    """Centre every column and scale it to unit population variance.

    A constant column (all values equal) becomes all zeros instead of dividing by zero.

    Parameters
    ----------
    X : array_like, shape (n, d)
        Context features (a 1-D array is one column).

    Returns
    -------
    numpy.ndarray, shape (n, d), float64
        A new array; the input is not modified.
    """
    X = _as_matrix("X", X)
    if X.shape[0] == 0:
        return X.copy()
    mean = X.mean(axis=0)
    std = X.std(axis=0)  # population standard deviation (ddof=0)
    constant = (np.ptp(X, axis=0) == 0.0) | (std == 0.0)
    safe = np.where(constant, 1.0, std)
    Z = (X - mean) / safe
    Z[:, constant] = 0.0
    return Z


def matern52(X1, X2, lengthscales, *, outputscale: float = 1.0) -> np.ndarray:
    """Matérn-5/2 kernel with one lengthscale per dimension (003 Eq. 135-136, ν = 5/2).

    ``k(x, x′) = σ² (1 + √5 D + 5D²/3) exp(−√5 D)`` with
    ``D = ‖(x − x′) / ℓ‖`` (003 Eq. 136); ``σ² = outputscale`` multiplies the kernel
    directly (like GPyTorch's ``ScaleKernel.outputscale``).

    Parameters
    ----------
    X1 : array_like, shape (n, d)
    X2 : array_like, shape (m, d)
        Inputs (1-D arrays are single-column).
    lengthscales : float or array_like, shape (d,)
        Lengthscales ℓ > 0; a scalar is used for every dimension.
    outputscale : float, default 1.0
        Variance σ² > 0.

    Returns
    -------
    numpy.ndarray, shape (n, m), float64
    """
    X1 = _as_matrix("X1", X1)
    X2 = _as_matrix("X2", X2)
    if X1.shape[1] != X2.shape[1]:
        raise EvrouteError(f"X1 and X2 have different dimensions: {X1.shape[1]} and {X2.shape[1]}")
    ell = _positive_vector("lengthscales", lengthscales, X1.shape[1])
    sigma2 = positive_float("outputscale", outputscale)
    if X1.shape[1] == 0:
        return np.full((X1.shape[0], X2.shape[0]), sigma2)
    # Eq. 136: D² = (x − x′)ᵀ diag(ℓ)^(−2) (x − x′); cdist differences are exact, so D = 0
    # on identical rows.
    r = math.sqrt(5.0) * cdist(X1 / ell, X2 / ell, metric="euclidean")
    return sigma2 * (1.0 + r + r * r / 3.0) * np.exp(-r)


def normalise_kernel(K: np.ndarray, name: str = "kernel") -> np.ndarray:
    """Divide a square kernel matrix by the mean of its diagonal (unit mean prior variance).

    Parameters
    ----------
    K : numpy.ndarray, shape (n, n)
    name : str
        Used in the error message.

    Returns
    -------
    numpy.ndarray
        ``K / mean(diag(K))`` (a new array).
    """
    K = np.asarray(K, dtype=np.float64)
    if K.ndim != 2 or K.shape[0] != K.shape[1] or K.shape[0] == 0:
        raise EvrouteError(f"{name} must be a non-empty square matrix, got shape {K.shape}")
    scale = float(np.mean(np.diagonal(K)))
    if not math.isfinite(scale) or scale <= 0.0:
        raise EvrouteError(f"{name} has a non-positive or non-finite mean diagonal ({scale!r})")
    return K / scale


def combined_kernel(
    K_G,
    X,
    lengthscales=1.0,
    *,
    lengthscales_prime=None,
    outputscale_f: float = 1.0,
    outputscale_prime: float = 1.0,
    kind: str = "combined",
    prior_var: float = 1.0,
) -> np.ndarray:
    """Prior covariance of the edge energies (003 App. B.1, Eq. 134-136).

    * ``kind="combined"``: ``σ₀² · normalise(K_G ∘ k_f(X, X) + k_f′(X, X))``
      (elementwise product; ``k_f`` and ``k_f′`` are Matérn-5/2 with their own lengthscales
      and outputscales),
    * ``kind="graph"``: ``σ₀² · normalise(K_G)`` (``X`` may be ``None``),
    * ``kind="context"``: ``σ₀² · normalise(k_f(X, X))`` (``K_G`` may be ``None``),

    where ``normalise`` divides by the mean of the diagonal and ``σ₀² = prior_var``.

    Parameters
    ----------
    K_G : numpy.ndarray, shape (E, E) or None
        Graph kernel, e.g. from :func:`graph_matern`.
    X : array_like, shape (E, d) or None
        Context features of the edges (usually :func:`standardize_context` output).
    lengthscales : float or array_like, shape (d,)
        Lengthscales of ``k_f``.
    lengthscales_prime : float or array_like, shape (d,), optional
        Lengthscales of ``k_f′``; default ``lengthscales``.
    outputscale_f, outputscale_prime : float
        Outputscales (variances) of ``k_f`` and ``k_f′``.
    kind : {"combined", "graph", "context"}
    prior_var : float
        Prior variance σ₀² > 0 (the mean of the returned diagonal).

    Returns
    -------
    numpy.ndarray, shape (E, E), float64
        Symmetric PSD matrix with ``mean(diag) == prior_var``.
    """
    if kind not in KERNEL_KINDS:
        raise EvrouteError(f"unknown kernel kind {kind!r} (use one of {KERNEL_KINDS})")
    prior_var = positive_float("prior_var", prior_var)
    if kind in ("combined", "graph"):
        if K_G is None:
            raise EvrouteError(f"K_G is required for kernel kind {kind!r}")
        K_G = np.asarray(K_G, dtype=np.float64)
        if K_G.ndim != 2 or K_G.shape[0] != K_G.shape[1]:
            raise EvrouteError(f"K_G must be a square matrix, got shape {K_G.shape}")
        if not np.all(np.isfinite(K_G)):
            raise EvrouteError("K_G contains NaN or infinite values")
    if kind == "graph":
        return prior_var * normalise_kernel(K_G, name="K_G")
    if X is None:
        raise EvrouteError(f"X is required for kernel kind {kind!r}")
    X = _as_matrix("X", X)
    if kind == "combined" and X.shape[0] != K_G.shape[0]:
        raise EvrouteError(f"X has {X.shape[0]} rows but K_G is {K_G.shape[0]}×{K_G.shape[1]}")
    k_f = matern52(X, X, lengthscales, outputscale=outputscale_f)
    if kind == "context":
        return prior_var * normalise_kernel(k_f, name="context kernel")
    if lengthscales_prime is None:
        lengthscales_prime = lengthscales
    k_fp = matern52(X, X, lengthscales_prime, outputscale=outputscale_prime)
    # k = σ₀² · normalise(k_G · k_f + k_f′): the Schur product of PSD matrices is PSD.
    k_f *= K_G
    k_f += k_fp
    return prior_var * normalise_kernel(k_f, name="combined kernel")
