"""The ``svgp`` backend's declaration, ``--model svgp`` (paper 003, Algorithm 3): its options, its
factory :func:`make_svgp` and what it requires, all importable without torch, so that
:mod:`evroute.models` registers it, and ``--help`` and ``evroute models`` list it, without the
extra.

The model itself, a sparse variational GP in GPyTorch (the algorithm, the kernel and the
design decisions), is :class:`evroute.models.svgp_gpytorch.SVGPModel`: that module imports
torch, GPyTorch and linear_operator (``pip install "evroute[svgp]"``), and :func:`make_svgp`
imports it on the first model made.
"""

from __future__ import annotations

import numpy as np

from ..errors import EvrouteError
from ..priors.network_prior import NetworkPrior
from ..specs import Option, declared
from ..validate import flag, optional_flag, positive_float, positive_int, text
from .hetero import WhitenedPrior

__all__ = ["make_svgp", "OPTIONS", "REQUIRES"]

#: What the backend imports, and how to get it: PyPI's Linux torch is a multi-GB CUDA build, the
#: CPU build is enough here.
REQUIRES = (("torch", "gpytorch", "linear_operator"),
            'pip install "evroute[svgp]" (for the CPU build of torch, first: pip install torch --index-url '
            "https://download.pytorch.org/whl/cpu)")


def _device(name, value) -> str:
    return text(name, value)


#: The options of ``--model svgp[...]`` (defaults: 003 App. B.3 and GPyTorch's).
OPTIONS = (
    Option("inducing", positive_int, 1000, "M, inducing points: the M most visited edges (003 App. B.3: 1000)"),
    Option("batch_size", positive_int, 2500, "B, observations per minibatch (003 App. B.3: 2500)"),
    Option("steps", positive_int, 1, "G, optimisation steps per round (003 App. B.3: 1)"),
    Option("learn_hyperparameters", flag, True, "Adam on the kernel hyperparameters (003 Algorithm 3)"),
    Option("learn_inducing", optional_flag, None, "Adam on the inducing contexts (default: as learn_hyperparameters)"),
    Option("learn_noise", flag, False, "learn the noise variance too (default: the known ς²)"),
    Option("device", _device, "cpu", "torch device: cpu or cuda"),
    Option("jitter", positive_float, 1e-6, "diagonal jitter of K_ZZ relative to σ₀² (GPyTorch's float64 default)"),
)


@declared(*OPTIONS)
def make_svgp(prior, *, noise_var, seed=0, inducing=1000, batch_size=2500, steps=1, learn_hyperparameters=True,
              learn_inducing=None, learn_noise=False, device="cpu", jitter=1e-6):
    """Factory of the ``svgp`` backend (registered in :mod:`evroute.models`).

    Parameters
    ----------
    prior : evroute.priors.network_prior.NetworkPrior
        The paper's prior on a road network: its mean (E_det), kernel kind, lengthscale,
        κ, ν and σ₀², the network's context and its cached graph Matérn matrix. At
        initialisation this backend's kernel is checked against rows of the prior's
        covariance (a mismatch is an error).
    noise_var : float
        ς² (Wh²).
    seed : int
        Minibatch generator seed.
    inducing, batch_size, steps : int
        M, B, G of Algorithm 3 (paper: 1000, 2500, 1).
    learn_hyperparameters : bool
        Adam on the kernel hyperparameters (and, unless ``learn_inducing`` says otherwise,
        on the inducing contexts).
    learn_inducing : bool, optional
        Adam on the inducing contexts (default: ``learn_hyperparameters``).
    learn_noise : bool
        Learn ς² too (default: keep the known value).
    device : {"cpu", "cuda"}
    jitter : float
        Diagonal jitter of K_ZZ relative to σ₀² (GPyTorch's float64 default, 1e-6).
    """
    if isinstance(prior, WhitenedPrior):
        raise EvrouteError("model 'svgp' takes one noise level for every edge (its Gaussian likelihood; "
                           "learn_noise=true learns it): a per-edge --noise-std edge[...] needs another backend "
                           "(exact, bi, nystrom, ...)")
    if not isinstance(prior, NetworkPrior):
        raise EvrouteError("model 'svgp' needs the prior of a road network "
                           "(evroute.priors.network_prior.NetworkPrior): it works on (edge, context) inputs")
    E = prior.n_edges
    kind = prior.kind
    # k_G by rows from the prior operator (sparse solves on large networks): never E×E here
    k_graph = (prior.graph_rows, prior.graph_diag()) if kind in ("combined", "graph") else None
    from .svgp_gpytorch import SVGPModel  # torch and GPyTorch (the extra): on the first model made

    model = SVGPModel(prior.mean, prior.context, k_graph, noise_var=noise_var, prior_var=prior.prior_var,
                      kernel_kind=kind, lengthscale=prior.lengthscale, seed=seed, inducing=inducing,
                      batch_size=batch_size, steps=steps, learn_hyperparameters=learn_hyperparameters,
                      learn_inducing=learn_inducing, learn_noise=learn_noise, device=device, jitter=jitter)
    rows = np.unique(np.linspace(0, E - 1, min(E, 16)).astype(np.int64))
    ours = model.prior_covariance(rows)
    ref = prior.rows(rows)
    err = float(np.max(np.abs(ours - ref)))
    if not err <= 1e-8 * max(float(np.max(prior.diag())), 1e-300):
        raise EvrouteError(f"the svgp kernel differs from the prior's {kind!r} covariance (max |Δ| = {err:.3g})")
    return model
