"""The built-in truths (``--truth``), registered into :data:`evroute.components.TRUTHS`:
``lognormal`` (the default: each edge's physical floor plus a log-normal GP excess with mean
E_det), ``gp`` (paper 003's: a draw of GP(E_det, σ₀² k) per seed) and ``rkhs[B=…]`` (paper 000's:
‖f − m‖ = B exactly in the kernel's RKHS), and the draws they are made of. A truth's interface
(:class:`evroute.bandit.environments.Truth`, :class:`evroute.bandit.environments.TruthSetup`,
:func:`evroute.bandit.environments.register_truth`) is :mod:`evroute.bandit.environments`'s.
"""

from __future__ import annotations

import math

import numpy as np

from ..cache import cached_arrays, hash_bytes
from ..errors import EvrouteError
from ..physics.energy import energy_floor_wh, potential_energy_wh
from ..priors.network_prior import NetworkPrior
from ..progress import stage
from ..specs import Option, declared
from ..validate import positive_float, positive_int
from .environments import Truth, TruthSetup, register_truth

__all__ = ["truth_kernel", "gp_truth", "gp_truth_rkhs_norm", "rkhs_truth", "lognormal_truth", "RKHS_ANCHORS"]

#: Anchor edges of the RKHS truth (paper 000 §7 uses 20 inducing points).
RKHS_ANCHORS = 20


def truth_kernel(net, mean, prior_var: float, *, lengthscale: float = 1.0) -> NetworkPrior:
    """The prior the Gaussian truths are drawn from: GP(mean, σ₀² k) with the paper's combined
    kernel, κ_G = 1, ν_G = 2 and context lengthscale ``lengthscale`` (003 Sec. 4.1, App. B.1);
    also the kernel of a drifting truth's innovations (paper 004).

    Returns
    -------
    evroute.priors.network_prior.NetworkPrior
    """
    return NetworkPrior(net, np.asarray(mean, dtype=np.float64), "combined", lengthscale, 1.0, 2.0, prior_var)


def gp_truth(net, prior_mean, prior_var: float, *, seed: int, lengthscale: float = 1.0) -> np.ndarray:
    """F = E_det + L z: one draw of GP(E_det, k) with the paper's combined kernel (003 Sec. 4.1),
    cached on disk per (network, seed, σ₀², E_det, lengthscale). On networks of
    :data:`evroute.priors.network_prior.SPARSE_FROM_EDGES` edges or more it is drawn without an E×E matrix
    (:meth:`evroute.priors.network_prior.NetworkPrior.sample_features`).

    ``lengthscale`` is the context lengthscale of the kernel (the paper's is 1; κ = 1, ν = 2).
    The same z (stream ``[seed, 1]``) for every lengthscale: the seed fixes the draw, the
    lengthscale its smoothness.

    Returns
    -------
    numpy.ndarray
        The true expected energy f of every edge (Wh), shape (E,): cached, the same for the same arguments.
    """
    prior_mean = np.asarray(prior_mean, dtype=np.float64)
    prior = truth_kernel(net, prior_mean, prior_var, lengthscale=lengthscale)

    def build():
        with stage(f"drawing the ground truth of seed {seed} on {net.n_edges:,} edges (cached)"):
            return {"value": prior.sample(np.random.default_rng([seed, 1]))}

    params = {"network": net.cache_key, "seed": int(seed), "prior_var": float(prior_var),
              "prior_mean": hash_bytes(np.ascontiguousarray(prior_mean).tobytes())[:20], "what": "truth-v1"}
    if float(lengthscale) != 1.0:  # (ℓ = 1 keeps the key of the entries cached before this option)
        params["lengthscale"] = float(lengthscale)
    if prior.sampler != "dense":  # large networks: drawn without an E×E matrix
        params["sampler"] = prior.sampler
    return cached_arrays("truth", params, build)["value"]


def gp_truth_rkhs_norm(net, prior_mean, prior_var: float, *, seed: int, lengthscale: float = 1.0) -> float:
    """‖f − m‖ in the RKHS of the truth's kernel K for :func:`gp_truth`'s draw: f − m = L z with
    L Lᵀ = K (jitter included), so ‖f − m‖²_K = zᵀz, z the same standard normals (stream
    ``[seed, 1]``; E draws, no solve). NaN where the truth is drawn by random features (from
    :data:`evroute.priors.network_prior.SPARSE_FROM_EDGES` edges): its norm needs an E×E solve. About √E."""
    prior = truth_kernel(net, prior_mean, prior_var, lengthscale=lengthscale)
    if prior.sampler != "dense":
        return float("nan")
    z = np.random.default_rng([int(seed), 1]).standard_normal(net.n_edges)
    return float(np.sqrt(z @ z))


def rkhs_truth(net, prior_mean, prior_var: float, *, seed: int, B: float, anchors: int = RKHS_ANCHORS,
               lengthscale: float = 1.0) -> np.ndarray:
    """An RKHS-bounded truth (paper 000 §7's construction, on edges): f = m + b Σ_i w_i K(·, z_i)
    with ``anchors`` distinct random edges z_i, w ~ N(0, I) and b = B/√(wᵀ K_ZZ w), so that
    ‖f − m‖_K = B exactly in the RKHS of the truth's kernel K (the paper's combined kernel,
    σ₀², context lengthscale ``lengthscale``). Rows of K only: no E×E matrix. Stream
    ``[seed, 3]``.

    Returns
    -------
    numpy.ndarray
        The true expected energy f of every edge (Wh), shape (E,), with ‖f − m‖ = B in the kernel's RKHS.
    """
    B = positive_float("B", B)
    anchors = positive_int("anchors", anchors)
    m = np.asarray(prior_mean, dtype=np.float64)
    if anchors > m.size:
        raise EvrouteError(f"rkhs truth: {anchors} anchors but the network has {m.size} edges")
    prior = truth_kernel(net, m, prior_var, lengthscale=lengthscale)
    rng = np.random.default_rng([int(seed), 3])
    Z = np.sort(rng.choice(m.size, size=anchors, replace=False))
    w = rng.standard_normal(anchors)
    KZ = np.asarray(prior.rows(Z), dtype=np.float64)
    norm2 = float(w @ KZ[:, Z] @ w)
    if not norm2 > 0:
        raise EvrouteError("rkhs truth: the anchors' kernel block is degenerate; choose another seed")
    return m + (B / np.sqrt(norm2)) * (KZ.T @ w)


def _gp_truth(setup: TruthSetup) -> Truth:
    """Paper 003's truth: one draw of GP(E_det, σ₀² k) per seed (:func:`gp_truth`)."""
    f = gp_truth(setup.net, setup.mean, setup.prior_var, seed=setup.seed, lengthscale=setup.lengthscale)
    norm = gp_truth_rkhs_norm(setup.net, setup.mean, setup.prior_var, seed=setup.seed, lengthscale=setup.lengthscale)
    return Truth(f, setup.noise_std, norm)


@declared(Option("B", positive_float, None, "the RKHS norm of f - m", "000 Sec. 7: 10", required=True, metavar="NUMBER"),
          Option("anchors", positive_int, RKHS_ANCHORS, "anchor edges of f - m", "000 Sec. 7: 20 points", metavar="INT"))
def _rkhs(setup: TruthSetup, B: float, anchors: int) -> Truth:  # noqa: N803 (the paper's B)
    """Paper 000 §7's truth: ‖f − m‖ = B exactly (:func:`rkhs_truth`)."""
    f = rkhs_truth(setup.net, setup.mean, setup.prior_var, seed=setup.seed, B=B, anchors=anchors, lengthscale=setup.lengthscale)
    return Truth(f, setup.noise_std, float(B))


def _unit_latent(net, *, seed: int, lengthscale: float):
    """The paper's truth's draw (stream ``[seed, 1]``, the combined kernel of unit mean variance)
    scaled to unit variance on every edge, and the scale (cached on disk with the draw: the
    kernel's diagonal costs what the draw does), and the kernel (for drift's innovations)."""
    kernel = truth_kernel(net, np.zeros(net.n_edges), 1.0, lengthscale=lengthscale)

    def build():
        with stage(f"drawing the ground truth of seed {seed} on {net.n_edges:,} edges (cached)"):
            scale = 1.0 / np.sqrt(np.asarray(kernel.diag(), dtype=np.float64))
            return {"value": kernel.sample(np.random.default_rng([seed, 1])) * scale, "scale": scale}

    params = {"network": net.cache_key, "seed": int(seed), "lengthscale": float(lengthscale), "sampler": kernel.sampler,
              "what": "unit-latent-v1"}
    got = cached_arrays("truth", params, build, names=("value", "scale"))
    return got["value"], got["scale"], kernel


def lognormal_truth(net, prior_mean, prior_var: float, *, floor, seed: int, lengthscale: float = 1.0):
    """The physical form of paper 003's Gaussian truth: each edge's energy floor plus a log-normal
    excess whose mean is E_det's, f = floor + (E_det − floor) · exp(s z − s²/2).

    z is the paper's truth's draw (stream ``[seed, 1]``: :func:`gp_truth` of the combined kernel,
    κ = 1, ν = 2, context lengthscale ``lengthscale``) scaled to unit variance on every edge, so
    E[f] = E_det exactly and the edges' correlations are the kernel's; one log-scale s for the
    network, chosen so that the mean variance of f over the edges is the paper's σ₀²:
    exp(s²) − 1 = σ₀² / mean((E_det − floor)²). f never falls below the floor (the energy no
    driving avoids, :func:`evroute.physics.energy.energy_floor_wh`), so no cycle creates energy.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray, float, callable, callable)
        f (E,), the latent z (E,), s, ``transform(z) -> f`` and ``innovation(rng) -> z′`` (a fresh
        latent of the same law, for drift).
    """
    m = np.asarray(prior_mean, dtype=np.float64)
    floor = np.asarray(floor, dtype=np.float64)
    excess = np.maximum(m - floor, 0.0)
    ms = float(np.mean(excess ** 2))
    if not ms > 0:
        raise EvrouteError("the log-normal truth: E_det equals the energy floor on every edge (no excess to vary)")
    s = math.sqrt(math.log1p(float(prior_var) / ms))
    z, scale, kernel = _unit_latent(net, seed=seed, lengthscale=lengthscale)

    def transform(latent):
        return floor + excess * np.exp(s * np.asarray(latent) - 0.5 * s * s)

    def innovation(rng):
        return kernel.sample(rng) * scale

    return transform(z), z, s, transform, innovation


def _lognormal(setup: TruthSetup) -> Truth:
    """The default truth: the floor plus a log-normal excess with mean E_det (:func:`lognormal_truth`)."""
    e = setup.net.edges
    floor, _ = energy_floor_wh(e.length_m.to_numpy(), e.grade.to_numpy(), setup.vehicle)
    potential = potential_energy_wh(e.length_m.to_numpy(), e.grade.to_numpy(), setup.vehicle)
    f, z, s, transform, innovation = lognormal_truth(setup.net, setup.mean, setup.prior_var, floor=floor,
                                                     seed=setup.seed, lengthscale=setup.lengthscale)
    return Truth(f, setup.noise_std, description={"truth_log_sd": s}, potential=potential, latent=z,
                 transform=transform, innovation=innovation)


register_truth("lognormal", _lognormal, description="each edge's physical floor plus a log-normal GP excess with "
               "mean E_det: never below the floor, so nothing creates energy and regret is against the exact "
               "optimum (the default)")
register_truth("gp", _gp_truth, description="paper 003's truth: a draw of GP(E_det, sigma_0^2 k) per seed, "
               "Gaussian noise (003 Sec. 4.1); it falls below the physical floor and creates energy, so regret is "
               "the paper's, against the route the rectified weights pick handed the truth")
register_truth("rkhs", _rkhs,
               description="an RKHS-bounded truth with ||f - m|| = B exactly (000 Sec. 7), Gaussian noise")
