"""Dense and sparse factorisations (linalg.py)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from evroute.errors import EvrouteError
from evroute.linalg import SOLVE_BLOCK, SparseCholesky, SparseSolver


def grid_precision(k: int = 15) -> sp.csc_matrix:
    """A k×k grid Laplacian plus I: sparse, symmetric positive definite, with fill."""
    lap1 = sp.diags([-np.ones(k - 1), 2 * np.ones(k), -np.ones(k - 1)], [-1, 0, 1])
    eye = sp.identity(k)
    return sp.csc_matrix(sp.kron(lap1, eye) + sp.kron(eye, lap1) + sp.identity(k * k))


def test_block_solves_equal_a_dense_solve():
    A = grid_precision()
    n = A.shape[0]
    rng = np.random.default_rng(0)
    B = rng.standard_normal((n, 3 * SOLVE_BLOCK + 5))  # full blocks and a remainder
    solver = SparseSolver(A)
    ref = np.linalg.solve(A.toarray(), B)
    np.testing.assert_allclose(solver.solve(B), ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(solver.solve(B[:, 0]), ref[:, 0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(SparseCholesky(A).solve(B[:, :3]), ref[:, :3], rtol=1e-10, atol=1e-12)


class _Recorder:
    """Stands in for cholespy's solver: records the shape of every right-hand side."""

    def __init__(self, inner):
        self.inner, self.shapes = inner, []

    def solve(self, b, x):
        self.shapes.append(b.shape)
        self.inner.solve(b, x)


def test_solves_go_in_small_blocks_and_close_leaves_one_column():
    """cholespy keeps a buffer of the last block's size after the solver is gone: blocks stay
    at most SOLVE_BLOCK wide, and close() ends with a single right-hand side."""
    A = grid_precision(8)
    solver = SparseSolver(A)
    rec = solver._solver = _Recorder(solver._solver)
    solver.solve(np.ones((A.shape[0], 2 * SOLVE_BLOCK + 3)))
    assert rec.shapes and all(len(s) == 2 and s[1] <= SOLVE_BLOCK for s in rec.shapes)
    solver.close()
    assert rec.shapes[-1] == (A.shape[0],)
    with pytest.raises(EvrouteError, match="closed"):
        solver.solve(np.ones(A.shape[0]))
    solver.close()  # twice is harmless
