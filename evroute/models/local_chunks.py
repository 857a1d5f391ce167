"""One chunk of a local GMRF update (:mod:`evroute.models.local`): conditioned on its domain of the
precision's graph, steps 1–5 and the bounds of that module's docstring; attempted without
writing, then written, and undone where a lane rolls back.

:class:`ChunkConditioning` holds the numerics; :class:`evroute.models.local.LocalGMRFPosterior`
keeps the state they read and write, and schedules the chunks (lanes, pairs) and the sweeps.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg as sla

from ..priors.linalg import domain_blocks, graph_ball, jittered_cholesky, symmetric_splu

__all__ = ["Chunk", "ChunkConditioning", "footprint", "SHRINK_BELOW"]

#: A chunk whose shares of both bounds came below this fraction of their targets lets the
#: next chunk start one hop smaller: the bounds fall 25–35-fold a hop of Q's graph on
#: synthetic-100k (0.05, with one hop smaller ~1.5 times the target, cost 4 % more work).
SHRINK_BELOW = 0.02


@dataclass
class Chunk:
    """One chunk's attempted conditioning: what :meth:`ChunkConditioning._write` writes."""

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


def footprint(c: Chunk) -> np.ndarray:
    """What chunk ``c`` reads and writes (:attr:`Chunk.footprint`; the schedulers' callable)."""
    return c.footprint


class ChunkConditioning:
    """The conditioning of one chunk on its domain (a mixin of
    :class:`evroute.models.local.LocalGMRFPosterior`, which holds the state): the domain's search
    and assembly, the attempt (a factorisation, the solves and both bounds; nothing written), the
    write and its undo.

    The state it reads and writes (all of length E but the scalars): the prior mean ``_m``, the
    posterior mean ``_mu`` and variances ``_var``, the residual ``_res``, the accumulated variance
    bounds ``_var_acc`` and ``_var_out``, the counts ``_counts`` and sums ``_sums``; the precision
    ``_Q`` (CSR), its fill-reducing ranks ``_rank`` and the positions of its diagonal
    ``_diag_offset``; ``noise_var``, ``_sigma0``, ``_kmax``, ``_lam``, ``_C``, ``max_radius``,
    ``n_arms``; and the scratch of each thread, ``_mark`` and ``_where``.
    """

    def _ball(self, seeds: np.ndarray, r: int, slot: int = 0) -> np.ndarray:
        """The edges within ``r`` hops of ``seeds`` in the graph of Q, sorted."""
        return graph_ball(self._Q.indptr, self._Q.indices, seeds, r=r, mark=self._mark[slot], stamp=self._where[slot])

    def _domain(self, omega: np.ndarray, slot: int = 0, seeds: np.ndarray | None = None):
        """Ω in the order of :meth:`~evroute.priors.prior.Prior.precision_ordering`, (Q + D)_ΩΩ and
        Q_{shell,Ω} (both CSC) in that order, the shell, and the positions of ``seeds`` in Ω."""
        omega = omega[np.argsort(self._rank[omega], kind="stable")]
        A, B, shell, at = domain_blocks(self._Q, omega, self._where[slot], seeds=seeds, diagonal_offset=self._diag_offset,
                                        add=self._counts[omega] / self.noise_var)
        return omega, A, B, shell, at

    def _attempt(self, K: np.ndarray, dc: np.ndarray, ds: np.ndarray, r: int, share: float, slot: int,
                 var_out: float | None = None) -> Chunk:
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
        c = Chunk(K=K, dc=dc, ds=ds)
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

    def _write(self, c: Chunk) -> None:
        """Write chunk c's update into the state (its footprint only)."""
        self._mu[c.omega] += c.dx
        self._res[c.omega] = c.res_omega
        self._res[c.shell] = c.new_shell
        self._var[c.omega] -= c.dvar
        self._var_acc[c.omega] += c.inc
        self._counts[c.K] += c.dc.astype(np.int64)
        self._sums[c.K] += c.ds

    def _saved(self, c: Chunk) -> tuple:
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
