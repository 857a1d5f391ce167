"""Sparse variational GP posterior in GPyTorch, ``--model svgp`` (paper 003, Algorithm 3): the model.

The paper's scalable backend (003, "GP regression for energy-efficient navigation",
Algorithm 3, App. B.1 and B.3): a sparse variational GP (Titsias 2009; Hensman et al.
2013) over edge–context tuples a = (e, x_e), with q(u) = N(m, S) over the inducing values
u = f(Z). Every round (:meth:`SVGPModel.update`, Algorithm 3):

1. add the path's observations to the history;
2. set the inducing points Z to the edge–context tuples of the M most visited edges
   (ties broken by the smaller edge id; only visited edges, so M_t = min(M, distinct
   edges observed));
3. G times: draw a minibatch of B observations from the history (without replacement,
   with the model's own seeded numpy generator; the whole history while it holds ≤ B
   observations), compute the minibatch ELBO (``gpytorch.mlls.VariationalELBO``), take
   one natural-gradient step on q(u) (``NaturalVariationalDistribution`` +
   ``gpytorch.optim.NGD``, lr 0.1) and one Adam step (lr 0.01) on the kernel
   hyperparameters and on the continuous (context) coordinates of Z;
4. predict the posterior mean and standard deviation of f for every edge (computed on
   the first :meth:`~SVGPModel.mean_std` call after an update, cached until the next).

Defaults follow 003 App. B.3: M = 1000, B = 2500, G = 1, NGD lr 0.1, Adam lr 0.01.

Kernel (003 App. B.1). Inputs are rows (e, x_e) with the edge id e in column 0 and
the standardised context x_e ∈ R³ in the others. For ``kernel_kind="combined"``

    k((e, x), (e', x')) = s · (k_G[e, e'] · k_f(x, x') + k_f'(x, x')),

k_G the cached, normalised graph Matérn matrix (:func:`evroute.priors.graph_prior.graph_kernel`,
looked up by index in a precomputed tensor, never recomputed), k_f and k_f' GPyTorch
``ScaleKernel(MaternKernel(nu=2.5, ard_num_dims=3))`` with their own lengthscales
(initialised to ``lengthscale``) and outputscales (initialised to 1). The constant
s = σ₀² / mean_e(k_G[e, e] · k_f(x_e, x_e) + k_f'(x_e, x_e)) is computed once from the
diagonal at initialisation and kept fixed, so that at initialisation the kernel equals the
``exact`` backend's prior covariance (:class:`evroute.priors.network_prior.NetworkPrior`) = σ₀² · normalise(k_G ∘ k_f + k_f'). ``"graph"``: s · σ_G² · k_G[e, e'] (σ_G²
learnable, initialised to 1); ``"context"``: s · k_f(x, x'). The prior mean is E_det,
looked up by edge id.

Internally everything is in units of σ₀ (targets and prior mean divided by σ₀, kernel
divided by σ₀²), float64, so GPyTorch's default jitter (1e-6) is relative to the prior
variance; outputs are converted back to Wh.

Design decisions
----------------
* **Carry-over when Z changes.** Whenever the set of inducing edges changes, q is
  re-initialised from the current approximate posterior at the new inducing points:
  q_new(u_new) = ∫ p(u_new | u_old) q_old(u_old) du_old, computed exactly in whitened
  coordinates: with L_o, L_n the Cholesky factors of the (jittered) prior covariances at
  the old and new Z and C the cross-covariance (jitter included where a point is kept),
  R = L_n⁻¹ C L_o⁻ᵀ, the new whitened parameters are m' = R m and
  S' = I + R (S − I) Rᵀ. Edges that stay in Z keep their (possibly optimised) context
  coordinates, so their marginal carries over exactly; new edges enter with their own
  context and their current posterior (the conditional under q_old). Adam's moments for
  Z are restarted when Z changes; those of the kernel hyperparameters persist.
* **Edge coordinate of Z is discrete.** Only the context columns of Z receive gradients
  (the edge id enters through an integer lookup); column 0 is also restored after each
  Adam step.
* **Noise.** The likelihood noise stays the known ς² by default (``learn_noise=False``);
  with ``learn_noise=True`` it is learnt with Adam and :attr:`SVGPModel.noise_var`
  reports the learnt value (the policies rectify with it).
* **Randomness.** The only random choice is the minibatch, drawn from a numpy Generator
  seeded with ``seed``; q(u) is initialised deterministically (GPyTorch's random mean
  initialisation is bypassed), so no global torch RNG state is read or written and two
  models built with the same seed give identical output on the CPU.
* **Imports.** This module imports torch and GPyTorch when it is imported: only the ``svgp``
  extra has them. :mod:`evroute.models.svgp` declares the backend's options and registers
  :func:`~evroute.models.svgp.make_svgp` without torch, and imports this module on the first
  model made.
"""

from __future__ import annotations

import contextlib
import functools
import math
from typing import Any

import gpytorch
import numpy as np
import torch
from linear_operator.utils.cholesky import psd_safe_cholesky

from ..errors import EvrouteError
from ..priors.kernels import KERNEL_KINDS
from ..validate import choice, flag, nonneg_int, positive_float, positive_int
from .base import PosteriorModel, aggregate_observations, readonly

__all__ = ["SVGPModel", "GraphRows", "EdgePriorMean", "EdgeContextKernel", "SVGPModule", "NGD_LR", "ADAM_LR"]

#: Natural-gradient learning rate of q(u) (003 App. B.3).
NGD_LR = 0.1
#: Adam learning rate of the hyperparameters and inducing contexts (003 App. B.3).
ADAM_LR = 0.01


# ---------------------------------------------------------------------------------------
# validation helpers


def _kind(value) -> str:
    return choice("kernel kind", value, KERNEL_KINDS)


def _torch_device(device) -> Any:
    if not isinstance(device, str) or not device.strip():
        raise EvrouteError(f"device must be 'cpu' or 'cuda', got {device!r}")
    d = device.strip().lower()
    if d == "cpu":
        return torch.device("cpu")
    if d == "cuda" or d.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise EvrouteError(f"device {device!r} requested but torch sees no CUDA device; use --device cpu")
        try:
            return torch.device(d)
        except RuntimeError:
            raise EvrouteError(f"bad CUDA device {device!r}") from None
    raise EvrouteError(f"device must be 'cpu' or 'cuda', got {device!r}")


# ---------------------------------------------------------------------------------------
# the kernel's pieces and the GPyTorch model


def _edge_ids(x):
    """The edge ids of inputs (column 0) as integers."""
    return x[..., 0].round().long()

class GraphRows:
    """k_G(e, ·) on demand: the rows of the edges asked for, computed once by ``rows_fn``
    (slices of a dense matrix, or sparse solves with the graph Matérn precision) and kept
    until :meth:`keep`; the diagonal of every edge. Nothing E×E is held (only the rows of
    the inducing edges and those of a minibatch that asks for a full block)."""

    def __init__(self, rows_fn, diag, device, dtype):
        self._rows_fn = rows_fn
        self.diag = torch.as_tensor(np.array(diag, dtype=np.float64), dtype=dtype, device=device)
        E = self.diag.shape[0]
        self._pos = torch.full((E,), -1, dtype=torch.long, device=device)
        self._store = torch.zeros((0, E), dtype=dtype, device=device)
        self._edges = torch.zeros(0, dtype=torch.long, device=device)

    def holds(self, idx) -> bool:
        return bool((self._pos[idx] >= 0).all())

    def rows(self, idx):
        """k_G[idx, :] (idx a 1-d tensor of edge ids)."""
        if not self.holds(idx):
            missing = torch.unique(idx[self._pos[idx] < 0])
            new = torch.as_tensor(self._rows_fn(missing.cpu().numpy()), dtype=self._store.dtype,
                                  device=self._store.device)
            self._pos[missing] = torch.arange(self._edges.numel(), self._edges.numel() + missing.numel(),
                                              device=self._pos.device)
            self._store = torch.cat([self._store, new])
            self._edges = torch.cat([self._edges, missing])
        return self._store[self._pos[idx]]

    def keep(self, edges) -> None:
        """Forget every stored row but those of ``edges`` (the inducing edges)."""
        edges = torch.as_tensor(np.asarray(edges, dtype=np.int64), device=self._pos.device)
        have = edges[self._pos[edges] >= 0]
        store = self._store[self._pos[have]]
        self._pos.fill_(-1)
        self._pos[have] = torch.arange(have.numel(), device=self._pos.device)
        self._store, self._edges = store, have

class EdgePriorMean(gpytorch.means.Mean):
    """Prior mean looked up by edge id (column 0 of the input): m(e, x) = prior[e]."""

    def __init__(self, prior):
        super().__init__()
        self.register_buffer("prior", prior)

    def forward(self, x):
        return self.prior[_edge_ids(x)]

class EdgeContextKernel(gpytorch.kernels.Kernel):
    """s · (k_G[e, e'] · k_f(x, x') + k_f'(x, x')) and its ablations (see the module doc).

    Parameters
    ----------
    kind : {"combined", "graph", "context"}
    k_graph : torch.Tensor (E, E) or None
        Normalised graph Matérn matrix (used by index, never copied or recomputed).
    n_context : int
        Number of context columns after the edge id.
    """

    def __init__(self, kind: str, k_graph, n_context: int):
        super().__init__()
        self.kind = kind
        self.n_context = int(n_context)
        self.k_graph = k_graph if kind in ("combined", "graph") else None  # a GraphRows
        self.register_buffer("scale", torch.ones(()))
        if kind in ("combined", "context"):
            self.k_f = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.MaternKernel(nu=2.5, ard_num_dims=self.n_context))
        if kind == "combined":
            self.k_fp = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.MaternKernel(nu=2.5, ard_num_dims=self.n_context))
        if kind == "graph":
            self.register_parameter("raw_graph_outputscale", torch.nn.Parameter(torch.zeros(())))
            self.register_constraint("raw_graph_outputscale", gpytorch.constraints.Positive())

    @property
    def graph_outputscale(self):
        return self.raw_graph_outputscale_constraint.transform(self.raw_graph_outputscale)

    @graph_outputscale.setter
    def graph_outputscale(self, value):
        value = torch.as_tensor(value, dtype=self.raw_graph_outputscale.dtype,
                                device=self.raw_graph_outputscale.device)
        self.initialize(raw_graph_outputscale=self.raw_graph_outputscale_constraint.inverse_transform(value))

    def initialise(self, lengthscale: float) -> None:
        """Set lengthscales to ``lengthscale`` and outputscales to 1 (call after ``.to``)."""
        for name in ("k_f", "k_fp"):
            k = getattr(self, name, None)
            if k is not None:
                k.base_kernel.lengthscale = torch.full_like(k.base_kernel.lengthscale, lengthscale)
                k.outputscale = torch.ones_like(k.outputscale)
        if self.kind == "graph":
            self.graph_outputscale = 1.0

    def _graph(self, i1, i2, diag):
        g = self.k_graph
        if diag:
            if i1.shape == i2.shape and torch.equal(i1, i2):
                return g.diag[i1]
            return g.rows(i1)[torch.arange(i1.shape[-1], device=i1.device), i2]
        if g.holds(i1) or not g.holds(i2):
            return g.rows(i1)[:, i2]
        return g.rows(i2)[:, i1].T

    def unscaled(self, x1, x2, diag=False):
        """k_G ∘ k_f + k_f' (or the ablation) without the fixed factor s."""
        if self.kind == "graph":
            return self.graph_outputscale * self._graph(_edge_ids(x1), _edge_ids(x2), diag)
        c1, c2 = x1[..., 1:], x2[..., 1:]
        kf = self.k_f.forward(c1, c2, diag=diag)
        if self.kind == "context":
            return kf
        kg = self._graph(_edge_ids(x1), _edge_ids(x2), diag)
        return kg * kf + self.k_fp.forward(c1, c2, diag=diag)

    def forward(self, x1, x2, diag=False, **params):
        return self.scale * self.unscaled(x1, x2, diag=diag)

class SVGPModule(gpytorch.models.ApproximateGP):
    """ApproximateGP with a whitened ``VariationalStrategy`` and a
    ``NaturalVariationalDistribution`` over the inducing values (for NGD)."""

    def __init__(self, inducing_points, mean_module, covar_module, learn_inducing: bool):
        q = gpytorch.variational.NaturalVariationalDistribution(inducing_points.size(-2))
        strategy = gpytorch.variational.VariationalStrategy(
            self, inducing_points, q, learn_inducing_locations=learn_inducing)
        super().__init__(strategy)
        self.mean_module = mean_module
        self.covar_module = covar_module

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


class _DenseRows:
    """Rows of a dense matrix (picklable, unlike a lambda)."""

    def __init__(self, K):
        self.K = K

    def __call__(self, idx):
        return self.K[idx]


# ---------------------------------------------------------------------------------------
# the posterior model


class SVGPModel(PosteriorModel):
    """SVGP posterior over the expected energy of every edge (003 Algorithm 3, App. B).

    A :class:`evroute.models.PosteriorModel`; made by :func:`evroute.models.svgp.make_svgp`
    (``make_model("svgp", ...)``). See the module docstring for the algorithm and design.

    Parameters
    ----------
    prior_mean : array (E,)
        Prior mean of f (E_det), Wh.
    context : array (E, d)
        Standardised context x_e of every edge (:func:`evroute.priors.kernels.standardize_context`).
    k_graph : array (E, E) or None
        Normalised graph Matérn matrix (required for ``kernel_kind`` "combined"/"graph").
        Used without a copy when it is a writable C-contiguous float64 array: do not
        modify it afterwards.
    noise_var : float
        Observation noise variance ς² (Wh²).
    prior_var : float
        σ₀², the mean prior variance of f (Wh²).
    kernel_kind : {"combined", "graph", "context"}
    lengthscale : float
        Initial lengthscale of every context dimension of k_f and k_f'.
    seed : int
        Seeds the minibatch generator.
    inducing : int
        M, the maximum number of inducing points (the M most visited edges).
    batch_size : int
        B, observations per minibatch.
    steps : int
        G, optimisation steps per update.
    learn_hyperparameters : bool
        Adam on the kernel hyperparameters (lengthscales and outputscales).
    learn_inducing : bool, optional
        Adam on the context coordinates of Z; default: ``learn_hyperparameters``.
    learn_noise : bool
        Adam on the likelihood noise too (default False: the known ς²).
    device : {"cpu", "cuda"}
    jitter : float
        Diagonal jitter of the inducing covariance, relative to σ₀² (GPyTorch's float64
        default is 1e-6).

    Attributes
    ----------
    elbo_trace : list of float
        Minibatch ELBO per datum (units of σ₀) before every optimisation step.
    last_batch : numpy.ndarray or None
        History positions of the last minibatch.
    n_inducing_changes : int
        How often Z changed (and q was carried over).
    """

    def __init__(self, prior_mean, context, k_graph, *, noise_var, prior_var,
                 kernel_kind: str = "combined", lengthscale: float = 1.0, seed: int = 0,
                 inducing: int = 1000, batch_size: int = 2500, steps: int = 1,
                 learn_hyperparameters: bool = True, learn_inducing: bool | None = None,
                 learn_noise: bool = False, device: str = "cpu", jitter: float = 1e-6):
        self._m = np.array(prior_mean, dtype=np.float64)
        if self._m.ndim != 1 or self._m.size == 0 or not np.all(np.isfinite(self._m)):
            raise EvrouteError("prior_mean must be a non-empty 1-d array of finite numbers")
        E = self.n_arms = int(self._m.size)
        self._noise_var_known = positive_float("noise_var", noise_var)
        self.prior_var = positive_float("prior_var", prior_var)
        self._sigma0 = math.sqrt(self.prior_var)
        self.kernel_kind = _kind(kernel_kind)
        self.lengthscale = positive_float("lengthscale", lengthscale)
        self.seed = nonneg_int("seed", seed)
        self.inducing = positive_int("inducing", inducing)
        self.batch_size = positive_int("batch_size", batch_size)
        self.steps = positive_int("steps", steps)
        self.learn_hyperparameters = flag("learn_hyperparameters", learn_hyperparameters)
        li = self.learn_hyperparameters if learn_inducing is None else learn_inducing
        self.learn_inducing = flag("learn_inducing", li) and self.kernel_kind != "graph"
        self.learn_noise = flag("learn_noise", learn_noise)
        self.jitter = positive_float("jitter", jitter)
        self._device = _torch_device(device)
        self._dtype = torch.float64

        ctx = np.asarray(context, dtype=np.float64)
        if ctx.ndim == 1:
            ctx = ctx[:, None]
        if ctx.ndim != 2 or ctx.shape[0] != E or ctx.shape[1] < 1:
            raise EvrouteError(f"context must have shape ({E}, d), got {ctx.shape}")
        if not np.all(np.isfinite(ctx)):
            raise EvrouteError("context contains NaN or infinite values")
        kg = None
        if self.kernel_kind in ("combined", "graph"):
            if k_graph is None:
                raise EvrouteError(f"kernel kind {self.kernel_kind!r} needs the graph kernel (a matrix, or "
                                   "(rows_fn, diagonal))")
            if isinstance(k_graph, tuple):  # rows on demand (a prior operator)
                rows_fn, kg_diag = k_graph
            else:
                kg_np = np.asarray(k_graph, dtype=np.float64)
                if kg_np.shape != (E, E):
                    raise EvrouteError(f"graph kernel must have shape ({E}, {E}), got {kg_np.shape}")
                rows_fn, kg_diag = _DenseRows(kg_np), np.diagonal(kg_np)
            if np.shape(kg_diag) != (E,):
                raise EvrouteError(f"the graph kernel's diagonal must have length {E}")
            kg = GraphRows(rows_fn, kg_diag, self._device, self._dtype)

        t = functools.partial(torch.as_tensor, dtype=self._dtype, device=self._device)
        self._X = torch.cat([t(np.arange(E, dtype=np.float64))[:, None], t(ctx)], dim=1)
        self._mean_module = EdgePriorMean(t(self._m / self._sigma0))
        self._covar = EdgeContextKernel(self.kernel_kind, kg, ctx.shape[1])
        self._covar.to(dtype=self._dtype, device=self._device)
        self._covar.initialise(self.lengthscale)
        lik = gpytorch.likelihoods.GaussianLikelihood(noise_constraint=gpytorch.constraints.GreaterThan(1e-10))
        lik.to(dtype=self._dtype, device=self._device)
        lik.noise = t(self._noise_var_known / self.prior_var)
        self._likelihood = lik
        with torch.no_grad():
            # s = σ₀² / mean diag (σ₀² = 1 in internal units); fixed from now on
            diag = self._covar.unscaled(self._X, self._X, diag=True)
            c = float(diag.mean())
            if not (math.isfinite(c) and c > 0):
                raise EvrouteError(f"the svgp kernel has a non-positive mean prior variance ({c!r})")
            self._covar.scale.fill_(1.0 / c)
            self._norm_const = c
            self._prior_std = readonly(self._sigma0 * np.sqrt(np.maximum(
                (diag / c).cpu().numpy(), 0.0)))

        for p in self._covar.parameters():
            p.requires_grad_(self.learn_hyperparameters)
        for p in lik.parameters():
            p.requires_grad_(self.learn_noise)
        hyper = [p for p in self._covar.parameters() if p.requires_grad]
        hyper += [p for p in lik.parameters() if p.requires_grad]
        self._hyper_opt = torch.optim.Adam(hyper, lr=ADAM_LR) if hyper else None

        self._rng = np.random.default_rng([self.seed, 0x5347])
        self._counts = np.zeros(E, np.int64)
        self._sums = np.zeros(E)
        self._hist_e = np.zeros(1024, np.int64)
        self._hist_y = np.zeros(1024)  # observations in units of σ₀
        self._n = 0
        self._gp = None
        self._Z_edges = np.zeros(0, np.int64)
        self._ngd = None
        self._z_opt = None
        self._cache: tuple[np.ndarray, np.ndarray] | None = None
        self.elbo_trace: list[float] = []
        self.last_batch: np.ndarray | None = None
        self.n_inducing_changes = 0

    # -- PosteriorModel -------------------------------------------------------------------

    @property
    def noise_var(self) -> float:
        """ς²: the known noise variance, or the learnt one with ``learn_noise=True``."""
        if not self.learn_noise:
            return self._noise_var_known
        return float(self._likelihood.noise.detach().cpu()) * self.prior_var

    @property
    def n_observations(self) -> int:
        """Size of the history (every observation, not distinct edges)."""
        return self._n

    @property
    def inducing_edges(self) -> np.ndarray:
        """Edge ids of the current inducing points (sorted)."""
        return readonly(self._Z_edges.copy())

    @property
    def inducing_points(self) -> np.ndarray:
        """Current inducing inputs (M_t, 1 + d): edge id, then context (standardised)."""
        if self._gp is None:
            return np.zeros((0, self._X.shape[1]))
        return self._gp.variational_strategy.inducing_points.detach().cpu().numpy().copy()

    def update(self, edges, observed) -> None:
        """Algorithm 3: add the observations, reselect Z, G optimisation steps."""
        uniq, dc, ds = aggregate_observations(edges, observed, self.n_arms)
        if uniq.size == 0:
            return
        e = np.asarray(edges).astype(np.int64)
        y = np.asarray(observed, dtype=np.float64) / self._sigma0
        self._append(e, y)
        self._counts[uniq] += dc.astype(np.int64)
        self._sums[uniq] += ds
        self._cache = None
        self._select_inducing()
        self._optimise(self.steps)

    def optimise(self, steps: int = 1) -> list[float]:
        """Take ``steps`` more optimisation steps on the current history (no new data).

        Returns the minibatch ELBO (per datum, units of σ₀) before each step.
        """
        steps = positive_int("steps", steps)
        if self._n == 0:
            raise EvrouteError("svgp has no observations to optimise on yet")
        self._cache = None
        return self._optimise(steps)

    def mean_std(self) -> tuple[np.ndarray, np.ndarray]:
        if self._cache is None:
            if self._gp is None:
                self._cache = (readonly(self._m.copy()), self._prior_std)
            else:
                self._cache = self._predict()
        return self._cache

    # -- diagnostics ----------------------------------------------------------------------

    def elbo(self) -> float:
        """ELBO per datum (units of σ₀) on the whole history (no gradient step)."""
        if self._n == 0:
            raise EvrouteError("svgp has no observations yet")
        gp = self._gp
        gp.train()
        self._likelihood.train()
        mll = gpytorch.mlls.VariationalELBO(self._likelihood, gp, num_data=self._n)
        with torch.no_grad(), self._settings():
            x = self._X[torch.as_tensor(self._hist_e[: self._n], device=self._device)]
            y = torch.as_tensor(self._hist_y[: self._n], dtype=self._dtype, device=self._device)
            return float(mll(gp(x), y))

    def hyperparameters(self) -> dict:
        """Current kernel hyperparameters (lengthscales in standardised context units,
        outputscales before the fixed factor), the fixed factor s·σ₀² (Wh²) and ς² (Wh²)."""
        out: dict[str, Any] = {"kernel_kind": self.kernel_kind,
                               "scale_wh2": self.prior_var / self._norm_const,
                               "noise_var": self.noise_var}
        for name in ("k_f", "k_fp"):
            k = getattr(self._covar, name, None)
            if k is not None:
                out[f"lengthscale_{name[2:]}"] = k.base_kernel.lengthscale.detach().cpu().numpy().ravel().tolist()
                out[f"outputscale_{name[2:]}"] = float(k.outputscale.detach().cpu())
        if self.kernel_kind == "graph":
            out["outputscale_graph"] = float(self._covar.graph_outputscale.detach().cpu())
        return out

    def prior_covariance(self, rows=None, cols=None) -> np.ndarray:
        """Current prior covariance k(a_i, a_j) (Wh²) between edges ``rows`` and ``cols``
        (default: all), each edge with its own context (for checks)."""
        r = np.arange(self.n_arms) if rows is None else np.asarray(rows, dtype=np.int64)
        c = np.arange(self.n_arms) if cols is None else np.asarray(cols, dtype=np.int64)
        with torch.no_grad():
            K = self._covar.forward(self._X[torch.as_tensor(r, device=self._device)],
                                    self._X[torch.as_tensor(c, device=self._device)])
        return K.cpu().numpy() * self.prior_var

    # -- internals ------------------------------------------------------------------------

    def _settings(self):
        stack = contextlib.ExitStack()
        stack.enter_context(gpytorch.settings.max_cholesky_size(10**9))
        stack.enter_context(gpytorch.settings.fast_computations(
            covar_root_decomposition=False, log_prob=False, solves=False))
        return stack

    def _append(self, e: np.ndarray, y: np.ndarray) -> None:
        need = self._n + e.size
        if need > self._hist_e.size:
            cap = max(need, 2 * self._hist_e.size)
            self._hist_e = np.concatenate([self._hist_e[: self._n], np.zeros(cap - self._n, np.int64)])
            self._hist_y = np.concatenate([self._hist_y[: self._n], np.zeros(cap - self._n)])
        self._hist_e[self._n:need] = e
        self._hist_y[self._n:need] = y
        self._n = need

    def _top_edges(self) -> np.ndarray:
        """The M most visited edges (ties: smaller id first), returned sorted by id."""
        visited = np.flatnonzero(self._counts)
        if visited.size > self.inducing:
            order = np.lexsort((visited, -self._counts[visited]))
            visited = np.sort(visited[order[: self.inducing]])
        return visited

    def _select_inducing(self) -> None:
        new = self._top_edges()
        if self._gp is not None and np.array_equal(new, self._Z_edges):
            return
        Z = self._X[torch.as_tensor(new, device=self._device)].clone()
        if self._gp is None:
            nat_vec = torch.zeros(new.size, dtype=self._dtype, device=self._device)
            nat_mat = -0.5 * torch.eye(new.size, dtype=self._dtype, device=self._device)
        else:
            old_pos = {int(e): i for i, e in enumerate(self._Z_edges)}
            kept_new = np.array([i for i, e in enumerate(new) if int(e) in old_pos], dtype=np.int64)
            kept_old = np.array([old_pos[int(new[i])] for i in kept_new], dtype=np.int64)
            Z_old = self._gp.variational_strategy.inducing_points.detach()
            if kept_new.size:
                Z[torch.as_tensor(kept_new, device=self._device)] = Z_old[
                    torch.as_tensor(kept_old, device=self._device)]
            nat_vec, nat_mat = self._carry_over(Z_old, Z, kept_old, kept_new)
            self.n_inducing_changes += 1
        self._build(Z, nat_vec, nat_mat)
        self._Z_edges = new
        if self._covar.k_graph is not None:
            self._covar.k_graph.keep(new)

    def _chol(self, K):
        return psd_safe_cholesky(K)

    def _carry_over(self, Z_old, Z_new, kept_old, kept_new):
        """Natural parameters of q_new(u_new) = ∫ p(u_new | u_old) q_old(u_old) du_old in
        whitened coordinates: m' = R m, S' = I + R (S − I) Rᵀ, R = L_n⁻¹ C L_o⁻ᵀ."""
        q = self._gp.variational_strategy._variational_distribution
        jit = self.jitter
        with torch.no_grad(), self._settings():
            eye_o = torch.eye(Z_old.shape[0], dtype=self._dtype, device=self._device)
            eye_n = torch.eye(Z_new.shape[0], dtype=self._dtype, device=self._device)
            L_o = self._chol(self._covar.forward(Z_old, Z_old) + jit * eye_o)
            L_n = self._chol(self._covar.forward(Z_new, Z_new) + jit * eye_n)
            C = self._covar.forward(Z_new, Z_old)
            if kept_new.size:  # a kept point is the same random variable: include its jitter
                C[torch.as_tensor(kept_new, device=self._device),
                  torch.as_tensor(kept_old, device=self._device)] += jit
            X = torch.linalg.solve_triangular(L_o, C.mT, upper=False)  # L_o⁻¹ Cᵀ
            R = torch.linalg.solve_triangular(L_n, X.mT, upper=False)  # L_n⁻¹ C L_o⁻ᵀ
            P_old = -2.0 * q.natural_mat.detach()
            P_old = 0.5 * (P_old + P_old.mT)
            L_p = self._chol(P_old)
            S_old = torch.cholesky_inverse(L_p)
            m_old = torch.cholesky_solve(q.natural_vec.detach().unsqueeze(-1), L_p).squeeze(-1)
            m_new = R @ m_old
            S_new = eye_n + R @ (S_old - eye_o) @ R.mT
            S_new = 0.5 * (S_new + S_new.mT)
            L_s = self._chol(S_new)
            P_new = torch.cholesky_inverse(L_s)
            P_new = 0.5 * (P_new + P_new.mT)
            return P_new @ m_new, -0.5 * P_new

    def _build(self, Z, nat_vec, nat_mat) -> None:
        gp = SVGPModule(Z, self._mean_module, self._covar, self.learn_inducing)
        gp.to(dtype=self._dtype, device=self._device)
        strategy = gp.variational_strategy
        strategy.jitter_val = self.jitter
        q = strategy._variational_distribution
        with torch.no_grad():
            q.natural_vec.copy_(nat_vec)
            q.natural_mat.copy_(nat_mat)
        strategy.variational_params_initialized.fill_(1)  # skips GPyTorch's random init
        self._gp = gp
        self._ngd = gpytorch.optim.NGD([q.natural_vec, q.natural_mat], num_data=max(self._n, 1), lr=NGD_LR)
        self._z_opt = torch.optim.Adam([strategy.inducing_points], lr=ADAM_LR) if self.learn_inducing else None

    def _optimise(self, steps: int) -> list[float]:
        gp, lik = self._gp, self._likelihood
        n = self._n
        gp.train()
        lik.train()
        mll = gpytorch.mlls.VariationalELBO(lik, gp, num_data=n)
        self._ngd.num_data = n
        opts = [o for o in (self._ngd, self._hyper_opt, self._z_opt) if o is not None]
        strategy = gp.variational_strategy
        z_ids = strategy.inducing_points.detach()[:, 0].clone()
        hist_e, hist_y = self._hist_e[:n], self._hist_y[:n]
        elbos = []
        with self._settings():
            for _ in range(steps):
                if n > self.batch_size:
                    idx = self._rng.choice(n, size=self.batch_size, replace=False)
                    e, y = hist_e[idx], hist_y[idx]
                else:
                    idx = np.arange(n)
                    e, y = hist_e, hist_y
                self.last_batch = idx
                x = self._X[torch.as_tensor(e, device=self._device)]
                yt = torch.as_tensor(y, dtype=self._dtype, device=self._device)
                for o in opts:
                    o.zero_grad(set_to_none=True)
                elbo = mll(gp(x), yt)
                (-elbo).backward()
                for o in opts:
                    o.step()
                if self._z_opt is not None:
                    with torch.no_grad():
                        strategy.inducing_points[:, 0] = z_ids
                value = float(elbo.detach())
                elbos.append(value)
        self.elbo_trace.extend(elbos)
        return elbos

    def _predict(self) -> tuple[np.ndarray, np.ndarray]:
        gp = self._gp
        gp.eval()
        self._likelihood.eval()
        gp.variational_strategy._clear_cache()
        E = self.n_arms
        chunk = max(256, int(4_000_000 // max(1, self._Z_edges.size)))
        mean = np.empty(E)
        var = np.empty(E)
        with torch.no_grad(), self._settings():
            for s in range(0, E, chunk):
                out = gp(self._X[s : s + chunk])
                mean[s : s + chunk] = out.mean.cpu().numpy()
                var[s : s + chunk] = out.lazy_covariance_matrix.diagonal().cpu().numpy()
        gp.variational_strategy._clear_cache()
        mean *= self._sigma0
        std = self._sigma0 * np.sqrt(np.maximum(var, 0.0))
        return readonly(mean), readonly(std)
