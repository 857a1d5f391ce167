"""Dense and sparse factorisations (linalg.py)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from evroute.errors import EvrouteError
from evroute.priors.linalg import SOLVE_BLOCK, SparseCholesky, SparseSolver


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


# ------------------------------------------------------------ local inverse diagonal
def graph_matern_precision(k: int = 24, nu: int = 2) -> tuple[sp.csr_matrix, float]:
    """(4I + L)^ν on a k×k grid with random positive edge weights, and λ_min ≥ 4^ν (L ⪰ 0)."""
    rng = np.random.default_rng(3)
    n = k * k
    idx = np.arange(n).reshape(k, k)
    u = np.concatenate([idx[:, :-1].ravel(), idx[:-1, :].ravel()])
    v = np.concatenate([idx[:, 1:].ravel(), idx[1:, :].ravel()])
    w = rng.uniform(0.2, 3.0, u.size)
    W = sp.coo_matrix((np.r_[w, w], (np.r_[u, v], np.r_[v, u])), shape=(n, n)).tocsr()
    L = sp.diags(np.asarray(W.sum(axis=1)).ravel()) - W
    P = sp.csr_matrix(4.0 * sp.identity(n) + L)
    A = P
    for _ in range(nu - 1):
        A = A @ P
    return sp.csr_matrix(A), 4.0 ** nu


def test_graph_patches_cover_every_vertex_once_compactly():
    from evroute.priors.linalg import graph_patches

    A, _ = graph_matern_precision(30, 1)
    patches = graph_patches(A.indptr, A.indices, 40)
    allv = np.concatenate(patches)
    assert np.array_equal(np.sort(allv), np.arange(A.shape[0]))  # a partition
    sizes = np.array([p.size for p in patches])
    assert sizes.min() >= 40 // 4 and np.median(sizes) >= 30  # fragments were absorbed
    assert all(np.array_equal(p, np.sort(p)) for p in patches)
    again = graph_patches(A.indptr, A.indices, 40)
    assert all(np.array_equal(a, b) for a, b in zip(patches, again, strict=True))


@pytest.mark.parametrize("with_stamp", [False, True])
def test_graph_ball_is_networkx_s_multi_source_ball(with_stamp):
    """The vertices within r hops of the seeds, against networkx's breadth-first distances;
    with or without the integer scratch, which (like the marks) comes back untouched."""
    import networkx as nx

    from evroute.priors.linalg import graph_ball

    A, _ = graph_matern_precision(20, 2)
    n = A.shape[0]
    G = nx.from_scipy_sparse_array(A)
    mark = np.zeros(n, bool)
    stamp = np.full(n, -1, np.int64) if with_stamp else None
    rng = np.random.default_rng(4)
    for r in (0, 1, 3, 6, 40):
        seeds = np.sort(rng.choice(n, size=5, replace=False))
        dist = nx.multi_source_dijkstra_path_length(G, [int(s) for s in seeds], cutoff=r, weight=lambda u, v, d: 1)
        ball = graph_ball(A.indptr, A.indices, seeds, r=r, mark=mark, stamp=stamp)
        assert np.array_equal(ball, np.array(sorted(dist))), r
        assert not mark.any() and (stamp is None or np.all(stamp == -1))


def test_domain_blocks_are_the_dense_blocks_in_the_order_given():
    """A_ΩΩ (+ an added diagonal) and A_{shell,Ω} against dense slicing, Ω in a scrambled
    order, the shell against its definition, the seeds' positions; the scratch comes back."""
    from evroute.priors.linalg import domain_blocks

    A, _ = graph_matern_precision(12, 2)
    n = A.shape[0]
    rng = np.random.default_rng(5)
    omega = rng.permutation(np.arange(20, 70))
    seeds = omega[[3, 0, 17]]
    where = np.full(n, -1, np.int64)
    on_diagonal = np.flatnonzero(A.indices == np.repeat(np.arange(n), np.diff(A.indptr)))
    add = rng.uniform(0.5, 2.0, omega.size)
    block, rim, shell, at = domain_blocks(A, omega, where, seeds=seeds, diagonal_offset=on_diagonal - A.indptr[:-1], add=add)
    dense = A.toarray()
    np.testing.assert_array_equal(block.toarray(), dense[np.ix_(omega, omega)] + np.diag(add))
    assert block.format == "csc" and block.has_canonical_format
    outside = np.setdiff1d(np.arange(n), omega)
    expect = outside[np.abs(dense[np.ix_(outside, omega)]).sum(axis=1) > 0]
    assert np.array_equal(shell, expect)
    np.testing.assert_array_equal(rim.toarray(), dense[np.ix_(shell, omega)])
    assert np.array_equal(omega[at], seeds) and np.all(where == -1)
    block, _, _, none = domain_blocks(A, omega, where)
    np.testing.assert_array_equal(block.toarray(), dense[np.ix_(omega, omega)])
    assert none is None


def test_domain_blocks_take_a_row_that_stores_nothing():
    """A vertex of Ω with no stored entries (its row and column empty) still gets its empty
    column, and the others theirs."""
    from evroute.priors.linalg import domain_blocks

    A, _ = graph_matern_precision(8, 1)
    A = A.tolil()
    A[10, :] = 0
    A[:, 10] = 0
    A = sp.csr_matrix(A)
    A.eliminate_zeros()
    omega = np.array([12, 10, 11, 3, 19])
    block, rim, shell, _ = domain_blocks(A, omega, np.full(A.shape[0], -1, np.int64))
    dense = A.toarray()
    np.testing.assert_array_equal(block.toarray(), dense[np.ix_(omega, omega)])
    np.testing.assert_array_equal(rim.toarray(), dense[np.ix_(shell, omega)])


@pytest.mark.parametrize("nu", [1, 2])
def test_local_inverse_diagonal_is_within_its_bound_of_the_dense_inverse(nu):
    from evroute.priors.linalg import local_inverse_diagonal

    A, lam = graph_matern_precision(24, nu)
    ref = np.diag(np.linalg.inv(A.toarray()))
    d, bound = local_inverse_diagonal(A, lam, tol=1e-12, patch=32)
    assert np.all(np.abs(d - ref) <= bound + 1e-13 * ref)
    assert np.max(bound / d) <= 1e-12
    # a loose tolerance and a small radius: errors large enough to see, still within the bounds,
    # and the bounds not vacuous (within a factor 1000 of the worst error)
    tr = []
    d, bound = local_inverse_diagonal(A, lam, tol=1e-3, patch=32, radius=1, trace=tr)
    err = np.abs(d - ref)
    assert err.max() > 1e-6 * ref.max()
    assert np.all(err <= bound + 1e-13 * ref)
    assert bound.max() <= 1000 * err.max()
    assert np.max(bound / d) <= 1e-3 and min(t[1] for t in tr) == 1


def test_local_inverse_diagonal_gives_the_same_bits_on_any_threads():
    from evroute.priors.linalg import local_inverse_diagonal

    A, lam = graph_matern_precision(24, 2)
    one = local_inverse_diagonal(A, lam, tol=1e-10, patch=24, threads=1)
    for threads, block in ((2, 8), (3, 8), (2, 3)):
        other = local_inverse_diagonal(A, lam, tol=1e-10, patch=24, threads=threads, block=block)
        if block == 8:  # the same blocks: the same bits, whatever the threads
            assert np.array_equal(one[0], other[0]) and np.array_equal(one[1], other[1])
        else:  # other blocks, other radii: other rounding, within the bounds
            assert np.all(np.abs(one[0] - other[0]) <= one[1] + other[1] + 1e-15 * np.abs(one[0]))


def test_local_inverse_diagonal_refuses_what_it_cannot_certify():
    from evroute.priors.linalg import local_inverse_diagonal

    A, lam = graph_matern_precision(12, 2)
    with pytest.raises(EvrouteError, match="more than 1 hops"):
        local_inverse_diagonal(A, lam, tol=1e-14, radius=1, max_radius=1, patch=8)
    for bad in ({"min_eigenvalue": 0.0}, {"tol": -1.0}, {"patch": 0}):
        with pytest.raises(EvrouteError):
            local_inverse_diagonal(A, **{"min_eigenvalue": lam, **bad})


def test_nested_dissection_is_a_fill_reducing_order_that_stays_good_on_blocks():
    """METIS's order, as ranks: a permutation, the same on every call, with far less fill than
    the natural order on a grid (the Cholesky factor's entries, by SuperLU), and still within
    1.5× of a block's own MMD order when restricted to a block (what the local updates do)."""
    from evroute.priors.linalg import nested_dissection, symmetric_splu

    k = 40
    A = sp.csc_matrix(grid_precision(k) @ grid_precision(k))  # two hops, as Q = P²
    rank = nested_dissection(A)
    assert rank.dtype == np.int64 and np.array_equal(np.sort(rank), np.arange(k * k))
    assert np.array_equal(rank, nested_dissection(A))
    order = np.argsort(rank)
    fill = {"natural": symmetric_splu(A, ordered=True).L.nnz,
            "nd": symmetric_splu(A[order][:, order], ordered=True).L.nnz}
    assert fill["nd"] < 0.6 * fill["natural"]
    i, j = np.divmod(np.arange(k * k), k)
    disc = np.flatnonzero((i - 14) ** 2 + (j - 22) ** 2 <= 12 ** 2)
    B = A[disc][:, disc]
    within = np.argsort(rank[disc], kind="stable")
    F = symmetric_splu(B[within][:, within], ordered=True)
    assert F.L.nnz <= 1.5 * symmetric_splu(B).L.nnz
    b = np.random.default_rng(0).standard_normal(disc.size)
    x = np.empty_like(b)
    x[within] = F.solve(b[within])
    np.testing.assert_allclose(x, np.linalg.solve(B.toarray(), b), rtol=1e-10, atol=1e-12)


def test_nested_dissection_is_the_same_in_another_process_and_takes_any_pattern():
    import os
    import subprocess
    import sys

    from evroute.priors.linalg import nested_dissection

    A = sp.random(300, 300, density=0.02, random_state=1, format="csr")  # not symmetric: symmetrised
    rank = nested_dissection(A + sp.identity(300))
    code = ("import numpy as np, scipy.sparse as sp, sys; from evroute.priors.linalg import nested_dissection; "
            "A = sp.random(300, 300, density=0.02, random_state=1, format='csr'); "
            "sys.stdout.write(','.join(map(str, nested_dissection(A + sp.identity(300)))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout
    assert np.array_equal(rank, np.array(out.split(","), dtype=np.int64))
    assert np.array_equal(rank, nested_dissection(A.T + sp.identity(300)))  # the pattern, symmetrised
    assert nested_dissection(sp.csr_matrix((0, 0))).size == 0
    assert np.array_equal(nested_dissection(sp.identity(1)), [0])
    with pytest.raises(EvrouteError, match="square"):
        nested_dissection(sp.csr_matrix((3, 4)))


def test_retain_freed_memory_is_set_once_and_leaves_the_users_malloc_settings_alone():
    import os
    import platform
    import subprocess
    import sys

    code = ("from evroute.priors.linalg import retain_freed_memory as r; import sys; "
            "sys.stdout.write(f'{r()} {r()}')")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert out == ("True True" if glibc else "False False")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**env, "MALLOC_TRIM_THRESHOLD_": "131072"}).stdout
    assert out == "False False"
