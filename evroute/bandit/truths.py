"""Truths: the expected energy of every edge, and how one traversal is observed.

A truth is what the environment hides from the agent (:mod:`evroute.bandit.environments` turns
it into rounds). ``--truth NAME[...]`` names one from the registry :data:`TRUTHS`
(:func:`register_truth`; a new truth is one module with a factory and one registration):

- ``lognormal`` (the default): each edge's physical floor plus a log-normal excess whose mean is
  E_det (:func:`lognormal_truth`): it creates no energy, so regret is against its exact optimum;
- ``gp``: paper 003's, one draw of GP(E_det, k) per seed (Sec. 4.1; :func:`gp_truth`), Gaussian
  noise ς = 0.1 σ_det; it falls below the physical floor and creates energy, so its regret is the
  paper's;
- ``rkhs[B=…]``: paper 000's, ‖f − m‖ = B exactly (:func:`rkhs_truth`);
- ``sumo[...]``: SUMO's EV model in traffic (:mod:`evroute.world.sumo_truth`).

A truth of edges plus turns also carries its junctions (:class:`Turns`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..cache import cached_arrays, hash_bytes
from ..components import TRUTHS
from ..errors import EvrouteError
from ..physics.energy import energy_floor_wh, potential_energy_wh
from ..priors.network_prior import NetworkPrior
from ..progress import stage
from ..specs import Component, Option, declared
from ..validate import nonneg_float, positive_float, positive_int

__all__ = ["Truth", "Turns", "TruthSetup", "register_truth", "truth_kernel", "noise_at", "noise_std_value",
           "truth_names", "make_truth", "TRUTHS", "gp_truth", "gp_truth_rkhs_norm", "rkhs_truth", "lognormal_truth",
           "RKHS_ANCHORS", "resolve_truth"]

#: Anchor edges of the RKHS truth (paper 000 §7 uses 20 inducing points).
RKHS_ANCHORS = 20


# --------------------------------------------------------------------------------------
# Truths: the expected energies and how a traversal is observed
# --------------------------------------------------------------------------------------


@dataclass
class TruthSetup:
    """What a truth factory is given: the network, the truth's prior mean (E_det of the truth's
    vehicle) and scales, the run's seed and the truth kernel's lengthscale.

    Attributes
    ----------
    net : evroute.roads.network.Network
    mean : numpy.ndarray (E,)
        E_det of the truth's vehicle (the mean the truth is drawn around).
    prior_var : float
        σ₀² = (0.25 σ_det)² (003 Sec. 4.1).
    noise_std : float or numpy.ndarray (E,)
        ς = 0.1 σ_det, the observation noise of the Gaussian truths (ς_e per edge under
        ``--noise-std edge[...]``).
    seed : int
    lengthscale : float
        Context lengthscale of the truth's kernel (``--truth NAME[lengthscale=...]``; the paper's 1).
    vehicle : evroute.physics.energy.Vehicle, optional
        The truth's vehicle (a simulated truth drives it).
    route : evroute.physics.routes.RouteSpec, optional
        The trip (a simulated truth covers the roads between its ends).
    network, osm, dem : str, optional
        The network's name, OSM file and DEM raster as the run gave them.
    """

    net: object
    mean: np.ndarray
    prior_var: float
    noise_std: float
    seed: int
    lengthscale: float = 1.0
    vehicle: object = None
    route: object = None
    #: the network's name (or OSM file), OSM file and DEM as the run gave them (a simulated
    #: truth converts the same input)
    network: str | None = None
    osm: str | None = None
    dem: str | None = None


@dataclass
class Turns:
    """The energy of the junctions: a truth of edges plus turns (SUMO's cars booked per car,
    :mod:`evroute.world.booking`).

    A turn e → e′ costs ψ(e′) − ψ(e) plus a dissipation D ≥ 0: ψ is one kinetic level per edge
    (its cars' mean ½ (m + m_rot) v² at their top speed on it), so its terms telescope along any
    route (a constant of the trip), and D is what the cars that took the turn spent at the
    junction beyond their own change of kinetic state (efficiencies only lose). Every cycle of
    edges and turns then costs at least its edges: nothing creates energy.

    Attributes
    ----------
    costs : numpy.ndarray
        The expected energy of each legal turn (Wh), in the order of the network's
        ``conn_src``/``conn_dst``: ψ(e′) − ψ(e) + D, paid by a route where it turns from one edge
        into the next.
    potential : numpy.ndarray (E,)
        The kinetic level ψ per edge (Wh).
    conn_src, conn_dst : numpy.ndarray
        The turns (the network's line graph).
    noise_std : float, optional
        The spread of one car's dissipation about its turn's mean (Wh; the cars' pooled sd within
        turns): how a turn driven is observed. None: unknown.
    counts : numpy.ndarray, optional
        The cars each turn's mean is over (0 where it is a model's); None: not measured.
    """

    costs: np.ndarray
    potential: np.ndarray
    conn_src: np.ndarray
    conn_dst: np.ndarray
    noise_std: float | None = None
    counts: np.ndarray | None = None

    @property
    def bound(self) -> np.ndarray:
        """Each turn's change of kinetic level ψ(e′) − ψ(e) (Wh): its cost less its dissipation."""
        return self.potential[self.conn_dst] - self.potential[self.conn_src]

    @property
    def dissipation(self) -> np.ndarray:
        """Each turn's mean dissipation D = cost − (ψ(e′) − ψ(e)) (Wh; ≥ 0 on a truth)."""
        return self.costs - self.bound

    def violations(self, tol: float = 1e-9) -> tuple[int, float]:
        """The turns whose dissipation is below −``tol``, and the sum of those (Wh, ≤ 0): none on a
        truth booked per car."""
        d = self.dissipation
        bad = d < -tol
        return int(bad.sum()), float(d[bad].sum())


@dataclass
class Truth:
    """A ground truth: the expected energy f of every edge, and how one traversal is observed.

    The default observation is paper 003's: f(e) + ε, ε ~ N(0, ς²). A truth whose traversals are
    not Gaussian (a traffic simulation's recorded ones) overrides :meth:`observe`.

    A truth that **conserves energy** carries its ``potential``: every edge's energy less it, and
    every turn's dissipation, is non-negative, so Dijkstra on those reduced costs is its exact
    least-energy route and regret is measured against it
    (:func:`evroute.roads.walks.least_energy_walk`). The paper's Gaussian truth (003 Sec. 4.1) has
    none: its draws fall below the physical floor and make cycles that create energy, and its
    regret is the paper's, against the route the agents' own weight rule picks when handed f.

    Attributes
    ----------
    values : numpy.ndarray (E,)
        f (Wh).
    noise_std : float or numpy.ndarray (E,)
        ς of the Gaussian observations (and the agents' assumed noise), or ς_e per edge.
    rkhs_norm : float
        ‖f − m‖ in the RKHS of the truth's kernel (NaN where unknown).
    description : dict
        What the run's summary records about it.
    supports_drift : bool
        Whether energies drifting in time (``--truth NAME[drift=...]``) can be layered on it.
    turns : Turns, optional
        The junctions' energies, for a truth of edges plus turns; a route's energy is then
        Σ f over its edges plus Σ over its turns.
    potential : numpy.ndarray (E,), optional
        A conserving truth's potential per edge (m g Δh, :func:`evroute.physics.energy.potential_energy_wh`:
        its sum along a route depends only on the route's ends); None: the truth may create energy
        (the paper's truths).
    latent, transform, innovation : optional
        A truth that drifts through a latent field (``--truth NAME[drift=...]``): f = ``transform(latent)``; each
        round the latent moves as AR(1) with innovations ``innovation(rng)`` of the latent's own
        law (None: f itself drifts, paper 004's form).
    """

    values: np.ndarray
    noise_std: float
    rkhs_norm: float = float("nan")
    description: dict = field(default_factory=dict)
    supports_drift: bool = True
    turns: Turns | None = None
    potential: np.ndarray | None = None
    latent: np.ndarray | None = None
    transform: object = None
    innovation: object = None

    @property
    def conserves(self) -> bool:
        """Whether the truth creates no energy by construction (it carries its potential)."""
        return self.potential is not None

    def observe(self, rng: np.random.Generator, path: np.ndarray, expected: np.ndarray) -> np.ndarray:
        """The energies measured on the edges of ``path`` when their expected energies are
        ``expected`` (f, or f_t under drift): Gaussian noise of :attr:`noise_std`."""
        return expected[path] + noise_at(self.noise_std, path) * rng.standard_normal(len(path))

    def observe_turns(self, rng: np.random.Generator, arcs: np.ndarray) -> np.ndarray:
        """The dissipation measured at the turns ``arcs`` (what one car spent there beyond its own
        change of kinetic state): the turn's mean plus Gaussian noise of the cars' spread within
        turns (:attr:`Turns.noise_std`)."""
        if self.turns is None:
            raise EvrouteError("this truth has no junctions to observe (a truth of edges plus turns has: --truth sumo)")
        if self.turns.noise_std is None:
            raise EvrouteError("the truth's junctions say nothing of how one car's dissipation at a turn spreads")
        arcs = np.asarray(arcs, dtype=np.int64)
        return self.turns.dissipation[arcs] + self.turns.noise_std * rng.standard_normal(len(arcs))


def noise_std_value(name: str, value):
    """A noise sd as environments take it: one ς ≥ 0 (a float), or ς_e ≥ 0 per edge (a read-only
    float64 array; ``--noise-std edge[...]``)."""
    if np.ndim(value) == 0:
        return nonneg_float(name, value)
    sd = np.array(value, dtype=np.float64)
    if sd.ndim != 1 or not np.all(np.isfinite(sd)) or np.any(sd < 0):
        raise EvrouteError(f"{name} per edge must be a 1-d array of finite numbers >= 0")
    sd.flags.writeable = False
    return sd


def noise_at(noise_std, path) -> float | np.ndarray:
    """ς for the edges of ``path``: the one ς, or ς_e of each (per-edge noise)."""
    return noise_std if np.ndim(noise_std) == 0 else noise_std[np.asarray(path, dtype=np.int64)]


def register_truth(name: str, factory, *, options: tuple[Option, ...] | None = None, description: str = "",
                   overwrite: bool = False, requires: tuple = ()) -> None:
    """Register a ground truth under ``name`` (``--truth NAME[key=value,...]``).

    ``factory(setup: TruthSetup, **options) -> Truth`` receives every declared option (given
    values converted, the others at their defaults). ``requires``: ``(modules, install)`` of an
    extra it needs, checked when a run names it (one line naming the install command).
    """
    TRUTHS.register(name, factory, options, description, overwrite, requires=requires)


def truth_names() -> list[str]:
    """The registered truths, in registration order (the paper's first)."""
    return TRUTHS.names()


def make_truth(spec, setup: TruthSetup) -> Truth:
    """The :class:`Truth` a spec or resolved component names, for ``setup``."""
    comp = TRUTHS.resolve(spec)
    entry = TRUTHS.get(comp.name)
    entry.check_installed()
    truth = entry.factory(setup, **comp.options)
    truth.description = {"truth": comp.label, **truth.description}
    return truth


def truth_kernel(net, mean, prior_var: float, *, lengthscale: float = 1.0) -> NetworkPrior:
    """The prior the Gaussian truths are drawn from: GP(mean, σ₀² k) with the paper's combined
    kernel, κ_G = 1, ν_G = 2 and context lengthscale ``lengthscale`` (003 Sec. 4.1, App. B.1);
    also the kernel of a drifting truth's innovations (paper 004).

    Returns
    -------
    evroute.priors.prior.NetworkPrior
    """
    return NetworkPrior(net, np.asarray(mean, dtype=np.float64), "combined", lengthscale, 1.0, 2.0, prior_var)


def gp_truth(net, prior_mean, prior_var: float, *, seed: int, lengthscale: float = 1.0) -> np.ndarray:
    """F = E_det + L z: one draw of GP(E_det, k) with the paper's combined kernel (003 Sec. 4.1),
    cached on disk per (network, seed, σ₀², E_det, lengthscale). On networks of
    :data:`evroute.priors.prior.SPARSE_FROM_EDGES` edges or more it is drawn without an E×E matrix
    (:meth:`evroute.priors.prior.NetworkPrior.sample_features`).

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
    :data:`evroute.priors.prior.SPARSE_FROM_EDGES` edges): its norm needs an E×E solve. About √E."""
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


def resolve_truth(spec) -> Component:
    """``gp``, ``rkhs[B=10]``, ``sumo[rate=600]``, ... → the resolved truth."""
    return TRUTHS.resolve(spec)
