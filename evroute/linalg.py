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

__all__ = ["cholesky_with_jitter", "jittered_cholesky"]


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
