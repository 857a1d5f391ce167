"""Sparse Cholesky libraries side by side on the graph Matérn precision: which library, and why.

For one network, Q = P^ν + I (the pattern of the posterior precision Q + D, ν = 2, κ = 1):
the time to factorise Q (the symbolic analysis included) and to solve with a block of
right-hand sides (unit vectors: the columns the exact posterior needs for newly observed
edges), the median of ``--repeats`` runs, and the largest difference of the solutions from
those of cholespy. A library that is not installed is skipped with a note: only cholespy and
SciPy are evroute's dependencies; the others are measured to justify the choice.

* ``cholespy``: CHOLMOD (supernodal) as evroute uses it (:class:`evroute.priors.linalg.SparseSolver`).
* ``superlu``: SciPy's SuperLU, symmetric mode, ordering the matrix itself (MMD on Aᵀ + A;
  :func:`evroute.priors.linalg.symmetric_splu`, :class:`evroute.priors.linalg.SparseCholesky`'s factor).
* ``superlu_ordered``: the same, keeping the order the matrix comes in (``ordered=True``): with
  ``--domain R --network-order`` that is the network's nested-dissection order restricted to
  the domain, as the local posterior updates factorise their domains.
* ``cvxopt``: CHOLMOD again, from CVXOPT's wheel (linked to OpenBLAS; GPL-3, not a dependency).
* ``pardiso``: Intel MKL PARDISO through pypardiso (about 1 GB of MKL; not a dependency).
* ``qdldl``: the QDLDL LDLᵀ factorisation (OSQP's; a wheel; one right-hand side a call).
* ``sksparse_minimal``: a fork of cholespy with scikit-sparse's CHOLMOD settings (a wheel, with
  reference BLAS).

``--domain R``: instead of the whole network, the local posterior updates' problem
(:mod:`evroute.models.local`): the domain within R hops of Q's
graph around the first ``--edges`` edges of route A (32 unless told), its block of Q + I, and
one right-hand side more than edges. It also measures whether a library can use the second
core: the same factorisations and solves run twice one after the other, then on two threads at
once; the ratio is the speed-up (about 2 when the library releases the GIL, about 1 when it
holds it). ``--network-order`` hands every library the domain's block in the network's
nested-dissection order (:func:`evroute.priors.linalg.nested_dissection` of the whole Q, restricted).

Usage::

    python benchmarks/sparse_solvers.py synthetic-100k
    python benchmarks/sparse_solvers.py luxembourg --rhs 64 --repeats 5
    python benchmarks/sparse_solvers.py synthetic-100k --domain 8 --repeats 7   # a local update's domain
    python benchmarks/sparse_solvers.py synthetic-100k --domain 8 --edges 48 --network-order --libraries superlu,superlu_ordered
    python benchmarks/sparse_solvers.py synthetic-1000k --libraries cholespy --rhs 8 --repeats 1   # the global fallback at 1M
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: evroute and the harness
from benchmarks.harness import Table, finish, parser, peak_rss_gb  # noqa: E402
from evroute.priors.graph_prior import graph_matern_operator  # noqa: E402
from evroute.priors.linalg import (  # noqa: E402
    SparseSolver,
    domain_blocks,
    graph_ball,
    nested_dissection,
    retain_freed_memory,
    symmetric_splu,
)
from evroute.roads.network import load_network  # noqa: E402


def _cholespy(Q):
    t = time.perf_counter()
    S = SparseSolver(Q)
    return time.perf_counter() - t, S.solve


def _superlu(Q):
    t = time.perf_counter()
    lu = symmetric_splu(Q)
    return time.perf_counter() - t, lu.solve


def _superlu_ordered(Q):
    t = time.perf_counter()
    lu = symmetric_splu(Q, ordered=True)
    return time.perf_counter() - t, lu.solve


def _cvxopt(Q):
    from cvxopt import cholmod, matrix, spmatrix

    C = sp.coo_matrix(Q)
    A = spmatrix(C.data, C.row.tolist(), C.col.tolist(), Q.shape)
    t = time.perf_counter()
    F = cholmod.symbolic(A)
    cholmod.numeric(A, F)
    seconds = time.perf_counter() - t

    def solve(B):
        X = matrix(np.asfortranarray(B))
        cholmod.solve(F, X)
        return np.array(X)

    return seconds, solve


def _pardiso(Q):
    import pypardiso

    A = sp.triu(Q, format="csr")
    A.sort_indices()
    solver = pypardiso.PyPardisoSolver(mtype=2)  # real symmetric positive definite
    t = time.perf_counter()
    solver.factorize(A)
    return time.perf_counter() - t, lambda B: solver.solve(A, B)


def _qdldl(Q):
    import qdldl

    t = time.perf_counter()
    F = qdldl.Solver(sp.csc_matrix(Q))
    seconds = time.perf_counter() - t
    return seconds, lambda B: np.column_stack([F.solve(np.ascontiguousarray(b)) for b in B.T])


def _sksparse_minimal(Q):
    from sksparse_minimal import SparseCholesky

    A = sp.csc_matrix(Q)
    A.sort_indices()
    t = time.perf_counter()
    F = SparseCholesky(A)
    return time.perf_counter() - t, lambda B: F.solve_A(np.ascontiguousarray(B))


LIBRARIES = {"cholespy": _cholespy, "superlu": _superlu, "superlu_ordered": _superlu_ordered, "qdldl": _qdldl,
             "cvxopt": _cvxopt, "pardiso": _pardiso, "sksparse_minimal": _sksparse_minimal}


def two_thread_speedup(library, Q, B, n: int = 10) -> float:
    """Time of 2n factorisations and solves one after the other over the time of n on each of
    two threads at once."""
    from concurrent.futures import ThreadPoolExecutor

    def work():
        for _ in range(n):
            library(Q)[1](B)

    t = time.perf_counter()
    work()
    work()
    serial = time.perf_counter() - t
    with ThreadPoolExecutor(max_workers=2) as pool:
        t = time.perf_counter()
        for f in [pool.submit(work) for _ in range(2)]:
            f.result()
        both = time.perf_counter() - t
    return serial / both


def domain(net, Q, radius: int, edges: int = 32, rank: np.ndarray | None = None) -> tuple[sp.csc_matrix, np.ndarray]:
    """The block of Q on the ball of ``radius`` hops of Q's graph around the first ``edges``
    edges of route A, and the unit right-hand sides of those edges plus one dense one; in the
    order of ``rank`` (an order of all of Q's rows, restricted) when given."""
    from evroute.physics.routes import edge_energies, resolve_route
    from evroute.roads.oracle import Oracle

    trip = resolve_route(net, "A")
    route = np.asarray(Oracle.from_network(net).shortest_path(np.maximum(edge_energies(net), 0.01), trip.start, trip.end).edges)
    seeds = np.unique(route[:edges])
    Q = sp.csr_matrix(Q)
    Q.sum_duplicates()
    omega = graph_ball(Q.indptr, Q.indices, seeds, r=radius, mark=np.zeros(Q.shape[0], bool))  # as the local updates
    if rank is not None:
        omega = omega[np.argsort(rank[omega], kind="stable")]
    A, _, _, at = domain_blocks(Q, omega, np.full(Q.shape[0], -1, np.int64), seeds=seeds)
    B = np.zeros((omega.size, seeds.size + 1))
    B[at, np.arange(seeds.size)] = 1.0
    B[:, -1] = 1.0
    return A, B


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("network", help="a network name, e.g. luxembourg or synthetic-100k")
    p.add_argument("--rhs", type=int, default=256, help="right-hand sides per solve (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--libraries", default=",".join(LIBRARIES), help="comma-separated (default: %(default)s)")
    p.add_argument("--domain", type=int, default=None, metavar="R",
                   help="a local update's domain of R hops of Q's graph instead of the whole network")
    p.add_argument("--edges", type=int, default=32, help="with --domain: route edges at its centre (default: %(default)s)")
    p.add_argument("--network-order", action="store_true",
                   help="with --domain: its block in the network's nested-dissection order (as the local updates)")
    args = p.parse_args(argv)
    names = [s.strip() for s in args.libraries.split(",") if s.strip()]
    unknown = [n for n in names if n not in LIBRARIES]
    if unknown:
        p.error(f"unknown librar{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)} (known: {', '.join(LIBRARIES)})")
    if args.edges < 1:
        p.error("--edges must be at least 1")
    if args.network_order and args.domain is None:
        p.error("--network-order needs --domain")
    retain_freed_memory()  # as the local updates run (freed work arrays stay in the heap)
    net = load_network(args.network)
    P = graph_matern_operator(net, 2, 1.0)
    Q = sp.csc_matrix(P @ P + sp.identity(net.n_edges))
    if args.domain is not None:
        rank = nested_dissection(Q) if args.network_order else None
        Q, B = domain(net, Q, args.domain, args.edges, rank)
        E = Q.shape[0]
        how = " in the network's nested-dissection order" if rank is not None else ""
        title = (f"{args.network}, a domain of {args.domain} hops{how}: {E:,} edges, nnz = {Q.nnz:,}, {B.shape[1]} "
                 f"right-hand sides, median of {args.repeats}")
    else:
        E = Q.shape[0]
        B = np.zeros((E, args.rhs))
        B[(np.arange(args.rhs) * 7919) % E, np.arange(args.rhs)] = 1.0
        title = (f"{args.network}: {E:,} edges, nnz(Q) = {Q.nnz:,}, {args.rhs} right-hand sides, "
                 f"median of {args.repeats}")
    overlap = args.domain is not None
    table = Table(["library", "factorise s", "solve s", "solve ms per right-hand side", "max difference",
                   *(["two threads ×"] if overlap else [])], title=title)
    # the repeats go round the libraries in turn, so that a slow spell of the machine falls on
    # all of them alike (medians of interleaved runs)
    runs: dict[str, list] = {}
    solutions: dict[str, np.ndarray] = {}
    missing: dict[str, str] = {}
    for _ in range(args.repeats):
        for name in names:
            if name in missing:
                continue
            try:
                seconds, solve = LIBRARIES[name](Q)
            except ImportError as exc:
                missing[name] = exc.name or name
                continue
            t = time.perf_counter()
            solutions[name] = solve(B)
            runs.setdefault(name, []).append((seconds, time.perf_counter() - t))
    reference = None
    for name in names:
        if name in missing:
            table.add(name, f"not installed ({missing[name]})", "", "", "", *([""] if overlap else []))
            continue
        f, s = np.median(np.array(runs[name]), axis=0)
        X = solutions[name]
        if reference is None:
            reference = X
        diff = float(np.abs(X - reference).max() / np.abs(reference).max())
        table.add(name, f"{f:.4f}", f"{s:.4f}", f"{1000 * s / B.shape[1]:.2f}", f"{diff:.1e}",
                  *([f"{two_thread_speedup(LIBRARIES[name], Q, B):.2f}"] if overlap else []))
    finish(args.out, f"sparse-solvers-{args.network}", table,
           notes=[f"peak RSS of the process: {peak_rss_gb():.2f} GB"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
