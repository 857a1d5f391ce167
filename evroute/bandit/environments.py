"""Environments: the truth and what the world reveals to the agent.

An environment owns the true expected energy of every edge in every round, the observation
noise, which edges can be driven in each round, and the clairvoyant reference route that
regret is measured against. The bandit loop asks it, round by round:

- ``available(t)``: a boolean mask of the edges open in round t (None: all);
- ``observe(t, path)``: noisy energies r = f_t(e) + ε of the driven edges (its own seeded
  noise generator);
- ``expected(t)``: f_t over all edges;
- ``reference_route(t)`` and ``optimal_energy(t)``: the route the agent's own oracle would
  pick if handed f_t, and its true energy.

:class:`StaticEnvironment` is paper 003's: a static f, one draw of GP(E_det, k) (003 Sec. 4.1;
:func:`gp_truth`), Gaussian noise with ς = 0.1 σ_det. :class:`RoadEnvironment` adds energies
that drift and roads that close (paper 004).

Two registries make the world pluggable, like the backends: **truths** (``--truth``:
:func:`register_truth`; ``gp`` and ``rkhs[B=…]`` here) build a :class:`Truth` (the expected
energy f of every edge and how one traversal is observed), and **closure patterns**
(``--closures``: :func:`register_closures`; ``alternate`` and ``random[rate=…]``) say which edges
are open in each round. A new truth is one module with a factory and one registration.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from ..cache import cached_arrays, hash_bytes
from ..components import CLOSURES, TRUTHS
from ..errors import EvrouteError
from ..physics.energy import energy_floor_wh, potential_energy_wh
from ..priors.network_prior import NetworkPrior
from ..progress import stage
from ..roads.walks import least_energy_walk
from ..specs import Component, Option, declared
from ..validate import nonneg_float, positive_float, positive_int, unit_rate
from .policies import route_weights

__all__ = ["Environment", "StaticEnvironment", "RoadEnvironment", "Truth", "Turns", "TruthSetup", "register_truth",
           "truth_kernel", "noise_at", "noise_std_value",
           "truth_names", "make_truth", "TRUTHS", "register_closures", "CLOSURES", "ClosurePattern",
           "gp_truth", "gp_truth_rkhs_norm", "rkhs_truth", "RKHS_ANCHORS", "parse_closures", "resolve_truth"]

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
        Context lengthscale of the truth's kernel (``--truth-lengthscale``; the paper's 1).
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
        Whether energies drifting in time (``--drift``) can be layered on it.
    turns : Turns, optional
        The junctions' energies, for a truth of edges plus turns; a route's energy is then
        Σ f over its edges plus Σ over its turns.
    potential : numpy.ndarray (E,), optional
        A conserving truth's potential per edge (m g Δh, :func:`evroute.physics.energy.potential_energy_wh`:
        its sum along a route depends only on the route's ends); None: the truth may create energy
        (the paper's truths).
    latent, transform, innovation : optional
        A truth that drifts through a latent field (``--drift``): f = ``transform(latent)``; each
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


class Environment(ABC):
    """The world a route is driven in (see the module docstring)."""

    #: Number of edges E.
    n_edges: int
    #: Observation noise standard deviation ς.
    noise_std: float
    #: The junctions' energies of a truth of edges plus turns (None: edges only).
    turns: Turns | None = None
    #: Whether regret is measured against the exact least-energy route (a truth that conserves
    #: energy) or, as in paper 003, against the route the agents' own weight rule picks when
    #: handed the truth (a truth that may create energy).
    exact: bool = False

    @abstractmethod
    def expected(self, t: int) -> np.ndarray:
        """f_t: the true expected energy of every edge in round t (read-only)."""

    @abstractmethod
    def observe(self, t: int, path: np.ndarray) -> np.ndarray:
        """Noisy energies of the edges of ``path`` driven in round t."""

    def available(self, t: int) -> np.ndarray | None:
        """Edges that can be driven in round t (boolean mask), or None when all can."""
        return None

    @abstractmethod
    def reference_route(self, t: int) -> np.ndarray:
        """The route regret is measured against in round t (on the available edges): the exact
        least-energy route where the truth conserves energy, else the clairvoyant route (the
        agents' oracle handed f_t)."""

    def observe_turns(self, t: int, path: np.ndarray) -> np.ndarray:
        """The dissipation measured at the turns of ``path`` driven in round t (one fewer than its
        edges), for agents that learn the junctions; an environment without turns has none."""
        truth = getattr(self, "_truth", None)
        if self.turns is None or truth is None:
            raise EvrouteError("this environment has no junctions to observe (a truth of edges plus turns has: "
                               "--truth sumo)")
        return truth.observe_turns(self._turn_rng, self.oracle.turn_index(path))

    def route_energy(self, t: int, path) -> float:
        """The true expected energy of driving ``path`` in round t: f_t over its edges, plus its
        turns' where the truth has them."""
        path = np.asarray(path, dtype=np.int64)
        energy = float(self.expected(t)[path].sum())
        if self.turns is not None:
            energy += float(self.turns.costs[self.oracle.turn_index(path)].sum())
        return energy

    def optimal_energy(self, t: int) -> float:
        """True energy of :meth:`reference_route` in round t."""
        return self.route_energy(t, self.reference_route(t))

    def certificate(self) -> dict | None:
        """How the exact least-energy route was found and why it is exact (the last round's;
        :func:`evroute.roads.walks.least_energy_walk`), or None where regret is the paper's."""
        cert = getattr(self, "_certificate", None)
        return None if cert is None else {k: v for k, v in cert.items() if k != "johnson"}

    def _exact_route(self, f, mask) -> np.ndarray:
        """The exact least-energy route under ``f`` on the open edges ``mask`` (a conserving truth):
        Dijkstra on its reduced costs, Johnson's potential kept while the energies stay the same."""
        johnson = self._johnson if getattr(self, "_johnson_of", None) is f else None
        path, cert = least_energy_walk(self.oracle, f, start=self.start, end=self.end, potential=self._truth.potential,
                                       turn_weights=None if self.turns is None else self.turns.dissipation,
                                       available=mask, johnson=johnson)
        self._johnson, self._johnson_of, self._certificate = cert["johnson"], f, cert
        path = np.asarray(path, dtype=np.int64)
        path.flags.writeable = False
        return path


def _as_truth(truth):
    """``(Truth or None, f)``: a :class:`Truth`, or an array of f (the paper's Gaussian
    observations)."""
    own = truth if isinstance(truth, Truth) else None
    f = np.array(own.values if own is not None else truth, dtype=np.float64)
    if f.ndim != 1 or not np.all(np.isfinite(f)):
        raise EvrouteError("the truth must be a 1-d array of finite numbers")
    return own, f


class StaticEnvironment(Environment):
    """A static truth f and its observations (paper 003, Sec. 4.1).

    Regret's reference route: where the truth conserves energy (:attr:`Truth.conserves`), its
    exact least-energy route (Dijkstra on reduced costs, :func:`evroute.roads.walks.least_energy_walk`);
    else (the paper's Gaussian truth, or f given as an array) the one the agents' oracle returns
    when handed f: Dijkstra on the weights of the run's rule
    (:func:`evroute.bandit.policies.route_weights`: paper 003's rectified E[max(0, N(f_e, ς²))] by
    default), so that regret measures learning, not the weight rule.

    Parameters
    ----------
    truth : array (E,) or Truth
        f, the true expected energy of every edge (a :class:`Truth` also says how a traversal
        is observed; an array gets Gaussian noise of ``noise_std``).
    noise_std : float
        ς.
    oracle : evroute.roads.oracle.Oracle
    start, end : int
        Start and end edge of the trip.
    seed : int
        Seeds the noise generator (stream ``[seed, 2]``; the turns' ``[seed, 6]``).
    rectify : bool
        The paper's reference route on the agents' weights (default) or on f itself.
    weigh : callable, optional
        ``weigh(f) -> (edge weights, turn weights)``: the agents' weight rule
        (:func:`evroute.bandit.policies.route_weights` with the run's rule); default paper 003's
        rectified weights.
    """

    def __init__(self, truth, noise_std: float, oracle, start: int, end: int, seed: int, rectify: bool = True,
                 *,
                 weigh=None):
        self._truth, f = _as_truth(truth)
        f.flags.writeable = False
        self._f = f
        self.n_edges = int(f.size)
        self.noise_std = noise_std_value("noise_std", noise_std)
        self.oracle = oracle
        self.start, self.end = int(start), int(end)
        self.rectify = bool(rectify)
        self.turns = self._truth.turns if self._truth is not None else None
        self.exact = self._truth is not None and self._truth.conserves
        self._weigh = weigh or (lambda f: route_weights(f, "rectified", self.noise_std, turns=self.turns))
        self._rng = np.random.default_rng([int(seed), 2])
        self._turn_rng = np.random.default_rng([int(seed), 6])  # its own stream: the edges' draws stay as they were
        self._reference: np.ndarray | None = None

    @property
    def truth(self) -> np.ndarray:
        return self._f

    def expected(self, t: int) -> np.ndarray:
        return self._f

    def observe(self, t: int, path: np.ndarray) -> np.ndarray:
        if self._truth is not None:
            return self._truth.observe(self._rng, path, self._f)
        return self._f[path] + noise_at(self.noise_std, path) * self._rng.standard_normal(len(path))

    def reference_route(self, t: int) -> np.ndarray:
        if self._reference is None:
            if self.exact:
                self._reference = self._exact_route(self._f, None)
                return self._reference
            if self.rectify:
                w, arc = self._weigh(self._f)
            else:
                w, arc = self._f, (None if self.turns is None else self.turns.costs)
            self._reference = np.asarray(self.oracle.shortest_path(w, self.start, self.end, turn_weights=arc).edges,
                                         dtype=np.int64)
            self._reference.flags.writeable = False
        return self._reference


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


# --------------------------------------------------------------------------------------
# Closure patterns: which edges are open in each round
# --------------------------------------------------------------------------------------


class ClosurePattern:
    """Which edges are open in each round (volatile arms). :meth:`attach` is called once with the
    environment (its oracle, trip and first truth); :meth:`mask` gives round t's open edges
    (None: all) and may redraw until :meth:`RoadEnvironment.connected` holds."""

    def attach(self, env: RoadEnvironment) -> None:
        """Prepare for ``env`` (e.g. find a corridor on its clairvoyant route)."""

    def mask(self, t: int, env: RoadEnvironment) -> np.ndarray | None:
        raise NotImplementedError


class AlternateClosures(ClosurePattern):
    """The best corridor closed in every even round (paper 004's alternating domain, on roads):
    the middle third of the round-1 clairvoyant route (a sixth, a twelfth if no detour remains);
    an error if no detour exists."""

    def attach(self, env):
        route = env.route_for(env.expected(1), None)
        for frac in (1 / 3, 1 / 6, 1 / 12):  # the middle of the best route, as wide as still leaves a detour
            k = max(1, int(round(frac * route.size)))
            mid = (route.size - k) // 2
            corridor = np.setdiff1d(route[mid:mid + k], [env.start, env.end])
            mask = np.ones(env.n_edges, bool)
            mask[corridor] = False
            if corridor.size and env.connected(mask):
                self.corridor = corridor
                return
        raise EvrouteError("closures alternate: closing the middle of the best route leaves no route "
                           "between the trip's ends; choose another route or random closures")

    def mask(self, t, env):
        if t % 2:
            return None
        mask = np.ones(env.n_edges, bool)
        mask[self.corridor] = False
        return mask


def _rate(name, value) -> float:
    rate = positive_float(name, value)
    if not rate < 1:
        raise EvrouteError(f"closures random: {name} must be below 1, got {rate}")
    return rate


@declared(Option("rate", _rate, 0.05, "share of the edges closed each round", metavar="NUMBER"))
class RandomClosures(ClosurePattern):
    """Each edge other than the trip's ends closed with probability ``rate`` in every round (stream
    ``[seed, 5, t]``); a draw that disconnects the trip is redrawn, up to 20 times, then the
    round is left open."""

    def __init__(self, rate: float = 0.05):
        self.rate = rate

    def mask(self, t, env):
        rng = np.random.default_rng([env.seed, 5, t])
        for _ in range(20):
            m = rng.random(env.n_edges) >= self.rate
            m[[env.start, env.end]] = True
            if env.connected(m):
                return m
        return None


def register_closures(name: str, factory, *, options: tuple[Option, ...] | None = None, description: str = "",
                      overwrite: bool = False) -> None:
    """Register a closure pattern: ``factory(**options) -> ClosurePattern``."""
    CLOSURES.register(name, factory, options, description, overwrite)


register_closures("alternate", AlternateClosures, description="the best corridor closed every other round "
                  "(paper 004's alternating domain)")
register_closures("random", RandomClosures, description="each edge closed at random each round")


def parse_closures(spec) -> Component | None:
    """``None`` (also ``none``), ``alternate`` or ``random[rate=0.05]`` → the resolved pattern."""
    if spec in (None, "", "none"):
        return None
    return CLOSURES.resolve(spec)


def resolve_truth(spec) -> Component:
    """``gp``, ``rkhs[B=10]``, ``sumo[rate=600]``, ... → the resolved truth."""
    return TRUTHS.resolve(spec)




class RoadEnvironment(Environment):
    """Energies that change and roads that close (paper 004's settings on roads).

    - **Drift** ``eps`` > 0: f_{t+1} = m + √(1−ε)(f_t − m) + √ε g_t with g_t a fresh draw of
      GP(0, K) (``sample_dev(rng)``, stream ``[seed, 4, t]``): every f_t is a draw of GP(m, K) and
      Cov(f_t, f_t′) = (1−ε)^{|t−t′|/2} K, the time-varying kernel of Bogunovic et al. (2016)
      used by paper 004. A truth that drifts through a latent field (:attr:`Truth.transform`, the
      log-normal truth) moves its latent so, and f_t = transform(latent_t) stays physical.
    - **Closures**: a :class:`ClosurePattern` (``alternate``, ``random[rate=r]``; the registry
      :data:`CLOSURES`) says which edges are open in each round.

    Regret is measured against each round's own reference route on the open edges (the exact
    least-energy route of a conserving truth, else the agents' oracle handed f_t, as
    :class:`StaticEnvironment`). Rounds are visited in order. ``truth`` may be a :class:`Truth`
    (its :meth:`Truth.observe` draws the observations) or f.
    """

    def __init__(self, truth, mean, sample_dev, noise_std: float, oracle, start: int, end: int, seed: int, *,
                 eps: float = 0.0, closures=None, weigh=None):
        self._truth, f = _as_truth(truth)
        self.turns = self._truth.turns if self._truth is not None else None
        self.exact = self._truth is not None and self._truth.conserves
        self._m = np.asarray(mean, dtype=np.float64)
        self._f, self._t = f, 1
        self._latent = None
        if self._truth is not None and self._truth.transform is not None:
            self._latent = np.array(self._truth.latent, dtype=np.float64)
            sample_dev = self._truth.innovation
        self.n_edges = int(f.size)
        self.noise_std = noise_std_value("noise_std", noise_std)
        self.eps = unit_rate("drift", eps)
        if self.eps > 0 and self._truth is not None and not self._truth.supports_drift:
            raise EvrouteError(f"--drift cannot be layered on the truth {self._truth.description.get('truth')}")
        self._sample_dev = sample_dev
        self.oracle = oracle
        self.start, self.end = int(start), int(end)
        self.seed = int(seed)
        self._weigh = weigh or (lambda f: route_weights(f, "rectified", self.noise_std, turns=self.turns))
        self._rng = np.random.default_rng([self.seed, 2])
        self._turn_rng = np.random.default_rng([self.seed, 6])
        comp = parse_closures(closures) if not isinstance(closures, Component | ClosurePattern) else closures
        if isinstance(comp, Component):
            comp = CLOSURES.get(comp.name).factory(**comp.options)
        self.closures: ClosurePattern | None = comp
        self._masks: dict[int, np.ndarray | None] = {}
        self._refs: dict[int, np.ndarray] = {}
        if self.closures is not None:
            self.closures.attach(self)

    def route_for(self, f, mask) -> np.ndarray:
        """The reference route under energies ``f`` on the open edges ``mask``."""
        return self._route(f, mask)

    def connected(self, mask) -> bool:
        """Whether the trip's ends are connected through the open edges ``mask``."""
        try:
            self.oracle.shortest_path(np.ones(self.n_edges), self.start, self.end, available=mask)
        except EvrouteError:
            return False
        return True

    def _route(self, f, mask) -> np.ndarray:
        if self.exact:
            return self._exact_route(f, mask)
        w, arc = self._weigh(f)
        return np.asarray(self.oracle.shortest_path(w, self.start, self.end, available=mask, turn_weights=arc).edges,
                          dtype=np.int64)

    def _advance(self, t: int) -> None:
        t = int(t)
        if t < self._t:
            raise EvrouteError(f"round {t} was already left behind (now {self._t}): rounds go in order")
        while self._t < t:
            self._t += 1
            if self.eps > 0:
                g = self._sample_dev(np.random.default_rng([self.seed, 4, self._t]))
                if self._latent is not None:  # the latent drifts; f_t follows it, physical
                    self._latent = math.sqrt(1.0 - self.eps) * self._latent + math.sqrt(self.eps) * g
                    self._f = self._truth.transform(self._latent)
                else:
                    self._f = self._m + math.sqrt(1.0 - self.eps) * (self._f - self._m) + math.sqrt(self.eps) * g

    def expected(self, t: int) -> np.ndarray:
        self._advance(t)
        out = self._f.view()
        out.flags.writeable = False
        return out

    def available(self, t: int) -> np.ndarray | None:
        t = int(t)
        if self.closures is None:
            return None
        if t not in self._masks:
            self._masks = {t: self.closures.mask(t, self)}  # (only the current round is kept)
        return self._masks[t]

    def observe(self, t: int, path: np.ndarray) -> np.ndarray:
        f = self.expected(t)
        if self._truth is not None:
            return self._truth.observe(self._rng, path, f)
        return f[path] + noise_at(self.noise_std, path) * self._rng.standard_normal(len(path))

    def reference_route(self, t: int) -> np.ndarray:
        t = int(t)
        if t not in self._refs:
            self._refs = {t: self._route(self.expected(t), self.available(t))}
        return self._refs[t]
