"""Checks and test doubles for people who write evroute components, shipped with the package.

In the spirit of scikit-learn's ``check_estimator`` and BoTorch's ``MockModel``: a third party
who registers a posterior backend, an agent, a truth or an environment, or writes a map matcher
(:func:`check_matcher`), runs the same checks the project runs on its own
(``tests/test_models_conformance.py``, ``tests/test_agents.py``, ...)::

    from evroute.testing import check_backend
    check_backend("my-backend")             # a registered name, or a spec with options

Every check raises :class:`AssertionError` naming the component and what it broke, and returns
the names of the checks it ran. They run on :func:`small_problem`, a ~130-edge synthetic city
with the paper's prior, noise and a GP truth (a second or two).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from .bandit.agents import AgentSetup, Decision, make_agent, policy_family, resolve_policy
from .bandit.environments import Environment, StaticEnvironment
from .bandit.truths import Truth, TruthSetup, make_truth, truth_kernel
from .errors import EvrouteError
from .models import (
    COVARIANCE,
    EVIDENCE,
    INFORMATION_GAIN,
    JOINT_SAMPLES,
    PosteriorModel,
    make_model,
    resolve_model,
)
from .models.base import readonly, round_statistics
from .physics.energy import energy_floor_wh, load_vehicle
from .physics.routes import edge_energies
from .priors.network_prior import NetworkPrior
from .priors.prior import NOISE_SCALE, PRIOR_SCALE
from .roads.network import load_network
from .roads.oracle import Oracle
from .roads.walks import negative_cycle

__all__ = ["SmallProblem", "small_problem", "observation_rounds", "check_backend", "check_agent",
           "check_environment", "check_truth", "check_matcher", "MockModel"]


@dataclass(frozen=True)
class SmallProblem:
    """A small bandit problem for checks: network, prior (E_det, the paper's kernel and σ₀²),
    noise variance ς², a truth drawn from the prior, the oracle and a trip's start and end edges."""

    net: object
    prior: NetworkPrior
    noise_var: float
    truth: np.ndarray
    oracle: Oracle
    start: int
    end: int

    @property
    def n_edges(self) -> int:
        return self.prior.n_edges

    def setup(self, model="exact", seed: int = 0, horizon: int = 20) -> AgentSetup:
        """An :class:`evroute.bandit.agents.AgentSetup` for an agent on this problem."""
        e = self.net.edges
        floor, potential = energy_floor_wh(e.length_m.to_numpy(), e.grade.to_numpy(), load_vehicle(None))
        return AgentSetup(prior=self.prior, noise_var=self.noise_var, oracle=self.oracle, start=self.start,
                          end=self.end, model=model, seed=seed, truth_rkhs_norm=10.0,  # a stated B
                          energy_floor=floor, potential=potential,
                          candidates={"sumo-ev": self.prior.mean, "shifted": self.prior.mean * 1.1},
                          horizon=horizon)


@cache
def small_problem(size: int = 60, seed: int = 11) -> SmallProblem:
    """The synthetic city of ``size`` nodes with the paper's prior (003 Sec. 4.1: σ₀ = 0.25 σ_det,
    ς = 0.1 σ_det) and one prior draw as the truth; built once per process."""
    net = load_network("synthetic", size=size)
    mean = edge_energies(net, load_vehicle(None))
    sd = float(np.std(mean))
    prior = truth_kernel(net, mean, (PRIOR_SCALE * sd) ** 2)
    truth = readonly(prior.sample(np.random.default_rng(seed)))
    oracle = Oracle.from_network(net)
    reach = oracle.reachable(0)
    end = int(np.flatnonzero(reach)[-1])
    return SmallProblem(net, prior, (NOISE_SCALE * sd) ** 2, truth, oracle, 0, end)


def observation_rounds(problem: SmallProblem, n: int = 6, k: int = 10, *, seed: int = 0) -> list:
    """``n`` rounds of ``k`` noisy observations (edge ids, values), half of them on 12 edges seen
    again and again (as routes repeat)."""
    rng = np.random.default_rng(seed)
    E = problem.n_edges
    hot = rng.choice(E, size=12, replace=False)
    out = []
    for _ in range(n):
        e = np.concatenate([rng.choice(hot, size=k // 2), rng.choice(E, size=k - k // 2)])
        out.append((e, problem.truth[e] + np.sqrt(problem.noise_var) * rng.standard_normal(e.size)))
    return out


def _fail(what: str, message: str) -> None:
    raise AssertionError(f"{what}: {message}")


def _build(spec, problem: SmallProblem, seed: int = 0) -> PosteriorModel:
    if isinstance(spec, type):
        return spec(problem.prior, noise_var=problem.noise_var, seed=seed)
    return make_model(spec, problem.prior, noise_var=problem.noise_var, seed=seed)


def _fed(spec, problem: SmallProblem, seed: int = 0) -> PosteriorModel:
    model = _build(spec, problem, seed)
    for e, y in observation_rounds(problem):
        model.update(e, y)
    return model


def check_backend(backend, problem: SmallProblem | None = None) -> list[str]:
    """The contract of :class:`evroute.models.PosteriorModel`, on a small problem.

    Parameters
    ----------
    backend : str, Component or type
        A registered backend's name or spec (``"svgp[inducing=200]"``), or a class constructed as
        ``cls(prior, noise_var=..., seed=...)``.
    problem : SmallProblem, optional
        Default :func:`small_problem`.

    Returns
    -------
    list of str
        The checks that ran (every one passed).

    Raises
    ------
    AssertionError
        The first check that failed, naming the backend and what it broke.

    Notes
    -----
    Checks: shapes, dtypes and read-only outputs; the prior before any data; counts and sums
    that follow the observations; the same numbers for the same seed; a posterior never wider
    than the prior and narrower on every observed edge; a bad round is a one-line
    :class:`EvrouteError` and an empty one changes nothing; and every declared capability
    (:data:`evroute.models.CAPABILITIES`) works as declared.
    """
    p = problem or small_problem()
    what = f"backend {backend.__name__ if isinstance(backend, type) else resolve_model(backend).label}"
    E = p.n_edges
    ran = []

    fresh = _build(backend, p)
    if not isinstance(fresh, PosteriorModel) or fresh.n_arms != E:
        _fail(what, "must be a PosteriorModel over every edge")
    if not np.isclose(fresh.noise_var, p.noise_var):
        _fail(what, f"noise_var {fresh.noise_var} is not the one given ({p.noise_var})")
    mu0, sd0 = fresh.mean_std()
    if not (np.allclose(mu0, p.prior.mean, rtol=1e-12) and np.allclose(sd0, np.sqrt(p.prior.diag()), rtol=1e-9)):
        _fail(what, "before any data the posterior must be the prior")
    ran.append("prior before data")

    model = _fed(backend, p)
    for m in (fresh, model):
        mu, sd = m.mean_std()
        if not (mu.shape == sd.shape == (E,) and mu.dtype == sd.dtype == np.float64):
            _fail(what, "mean_std must give two float64 arrays of length E")
        if not (np.all(np.isfinite(mu)) and np.all(np.isfinite(sd)) and np.all(sd >= 0)):
            _fail(what, "means and standard deviations must be finite, deviations non-negative")
        if mu.flags.writeable or sd.flags.writeable:
            _fail(what, "mean_std must return read-only arrays (callers share them)")
        draw = m.sample(np.random.default_rng(0))
        if draw.shape != (E,) or not np.all(np.isfinite(draw)):
            _fail(what, "sample must give a finite draw of length E")
    ran.append("shapes and read-only outputs")

    counts, sums = np.zeros(E, np.int64), np.zeros(E)
    for e, y in observation_rounds(p):
        np.add.at(counts, e, 1)
        np.add.at(sums, e, y)
    if not np.array_equal(model.counts, counts) or not np.allclose(model.sums, sums, rtol=1e-12, atol=1e-12):
        _fail(what, "counts and sums must follow the observations")
    if model.n_distinct != np.count_nonzero(counts):
        _fail(what, "n_distinct must count the distinct observed edges")
    ran.append("counts and sums")

    twin = _fed(backend, p, seed=0)
    if not all(np.array_equal(a, b) for a, b in zip(model.mean_std(), twin.mean_std(), strict=True)) or \
            not np.array_equal(model.sample(np.random.default_rng(5)), twin.sample(np.random.default_rng(5))):
        _fail(what, "the same seed and data must give the same numbers")
    ran.append("deterministic")

    _, sd = model.mean_std()
    prior_sd = np.sqrt(p.prior.diag())
    if not np.all(sd <= prior_sd * (1 + 1e-6)):
        _fail(what, "the posterior must never be wider than the prior")
    seen = np.flatnonzero(counts)
    if not np.all(sd[seen] < prior_sd[seen]):
        _fail(what, "every observed edge must have learnt something")
    ran.append("never wider than the prior")

    bad = _build(backend, p)
    for edges, values in (([E], [1.0]), ([0, 1], [1.0]), ([0], [np.nan]), ([0.5], [1.0])):
        try:
            bad.update(np.asarray(edges), np.asarray(values))
        except EvrouteError as exc:
            if "\n" in str(exc):
                _fail(what, f"a bad round must be a one-line error, got {str(exc)!r}")
        else:
            _fail(what, f"update({edges}, {values}) must raise EvrouteError")
    bad.update(np.array([], np.int64), np.array([]))
    if bad.n_distinct != 0:
        _fail(what, "an empty round must change nothing")
    ran.append("bad rounds")

    ran += _check_capabilities(what, model, p)
    return ran


def _check_capabilities(what: str, model: PosteriorModel, p: SmallProblem) -> list[str]:
    ran = []
    caps = model.capabilities
    _, sd = model.mean_std()
    if COVARIANCE in caps:
        idx = np.array([0, 3, 7, int(np.argmax(model.counts))])
        block = np.asarray(model.covariance(idx))
        if block.shape != (4, 4) or not np.allclose(block, block.T, atol=1e-10 * float(p.prior.prior_var)):
            _fail(what, "covariance(idx) must be a symmetric |idx|×|idx| block")
        if not np.allclose(np.diag(block), sd[idx] ** 2, rtol=1e-6, atol=1e-12 * float(p.prior.prior_var)):
            _fail(what, "covariance(idx)'s diagonal must be the variances mean_std gives")
        if np.linalg.eigvalsh(block).min() < -1e-8 * float(p.prior.prior_var):
            _fail(what, "covariance(idx) must be positive semi-definite")
        ran.append(COVARIANCE)
    elif _raises(lambda: model.covariance([0, 1])) is None:
        _fail(what, "gives covariance blocks but does not declare 'covariance'")
    if JOINT_SAMPLES in caps:
        a = model.sample(np.random.default_rng(1), joint=True)
        b = model.sample(np.random.default_rng(1), joint=True)
        if a.shape != (p.n_edges,) or not np.all(np.isfinite(a)) or not np.array_equal(a, b):
            _fail(what, "sample(rng, joint=True) must give a finite draw, the same for the same generator")
        ran.append(JOINT_SAMPLES)
    elif _raises(lambda: model.sample(np.random.default_rng(1), joint=True)) is None:
        _fail(what, "draws joint samples but does not declare 'joint_samples'")
    if EVIDENCE in caps:
        if not np.isfinite(float(model.log_evidence)):
            _fail(what, "declares 'evidence': log_evidence must be a finite number")
        ran.append(EVIDENCE)
    if INFORMATION_GAIN in caps:
        if not float(model.information_logdet) > 0:
            _fail(what, "declares 'information_gain': information_logdet must be positive after data")
        ran.append(INFORMATION_GAIN)
    return ran


def _raises(fn) -> Exception | None:
    try:
        fn()
    except EvrouteError as exc:
        return exc
    return None


def check_agent(policy, problem: SmallProblem | None = None, rounds: int = 5, *, model="exact") -> list[str]:
    """The contract of :class:`evroute.bandit.agents.Agent` for a registered policy (name or spec).

    Checks: each round's :class:`~evroute.bandit.agents.Decision` is a route from the trip's start to
    its end on connected edges, with per-edge arrays of its length; ``observe`` takes the
    round's energies; the same seed gives the same routes; ``mean_std`` covers every edge.
    """
    p = problem or small_problem()
    comp = resolve_policy(policy)
    what = f"agent {comp.label}"
    net = p.net
    ran = []

    def play(seed: int) -> list[np.ndarray]:
        agent = make_agent(comp, p.setup(model=model if policy_family(comp) == "gp" else "exact", seed=seed,
                                         horizon=rounds))
        rng = np.random.default_rng([seed, 3])
        noise = np.random.default_rng([seed, 2])
        paths = []
        for t in range(1, rounds + 1):
            d = agent.select(t, None, rng)
            if not isinstance(d, Decision):
                _fail(what, "select must return a Decision")
            path = np.asarray(d.path)
            if path.size == 0 or path[0] != p.start or path[-1] != p.end:
                _fail(what, f"round {t}: the route must run from edge {p.start} to edge {p.end}")
            if not all(net.edges.v.iat[a] == net.edges.u.iat[b] for a, b in zip(path[:-1], path[1:], strict=True)):
                _fail(what, f"round {t}: consecutive edges of the route must connect")
            for name in ("index", "mean", "std", "prior_mean"):
                if np.asarray(getattr(d, name)).shape != path.shape:
                    _fail(what, f"round {t}: Decision.{name} must have one value per edge of the route")
            agent.observe(path, p.truth[path] + np.sqrt(p.noise_var) * noise.standard_normal(path.size))
            paths.append(path)
        mu, sd = agent.mean_std()
        if np.shape(mu) != (p.n_edges,) or np.shape(sd) != (p.n_edges,):
            _fail(what, "mean_std must cover every edge")
        if agent.n_distinct < 1:
            _fail(what, "n_distinct must count the edges observed")
        return paths

    first = play(0)
    ran.append("routes from start to end")
    if not all(np.array_equal(a, b) for a, b in zip(first, play(0), strict=True)):
        _fail(what, "the same seed must give the same routes")
    ran.append("deterministic")
    return ran


def check_environment(env: Environment, rounds: int = 5) -> list[str]:
    """The contract of :class:`evroute.bandit.environments.Environment` over a few rounds.

    Checks: ``expected(t)`` is a finite vector over the edges; ``available(t)`` is None or a
    boolean mask of that length; ``reference_route(t)`` runs on open edges and
    :meth:`~evroute.bandit.environments.Environment.optimal_energy` is its energy under f_t;
    ``observe`` gives one finite value per edge of a route.
    """
    what = f"environment {type(env).__name__}"
    for t in range(1, rounds + 1):
        f = np.asarray(env.expected(t))
        if f.ndim != 1 or not np.all(np.isfinite(f)):
            _fail(what, f"round {t}: expected(t) must be a finite vector over the edges")
        mask = env.available(t)
        if mask is not None and (np.shape(mask) != f.shape or np.asarray(mask).dtype != bool):
            _fail(what, f"round {t}: available(t) must be None or a boolean mask over the edges")
        ref = np.asarray(env.reference_route(t))
        if ref.size == 0 or (mask is not None and not np.all(np.asarray(mask)[ref])):
            _fail(what, f"round {t}: reference_route(t) must be a route on open edges")
        if not np.isclose(env.optimal_energy(t), env.route_energy(t, ref), rtol=1e-12):
            _fail(what, f"round {t}: optimal_energy(t) must be the reference route's energy under f_t")
        if env.turns is None and not np.isclose(env.route_energy(t, ref), f[ref].sum(), rtol=1e-12):
            _fail(what, f"round {t}: route_energy(t, route) must be f_t over the route's edges")
        y = np.asarray(env.observe(t, ref))
        if y.shape != ref.shape or not np.all(np.isfinite(y)):
            _fail(what, f"round {t}: observe must give one finite value per edge of the route")
    return ["expected", "available", "reference route", "observe"]


def check_truth(truth, problem: SmallProblem | None = None, seed: int = 0) -> list[str]:
    """A registered truth (name or spec, ``rkhs[B=10]``) on the small problem.

    Checks: a :class:`~evroute.bandit.environments.Truth` with finite values over every edge and a
    non-negative noise; the same seed gives the same truth; its observations are finite and of
    the route's length; a truth that says it conserves energy (it carries a ``potential``) has no
    cycle that creates energy, so its exact optimum exists; and a static environment on it passes
    :func:`check_environment`.
    """
    p = problem or small_problem()
    what = f"truth {truth}"
    setup = TruthSetup(p.net, p.prior.mean, float(p.prior.prior_var), float(np.sqrt(p.noise_var)), seed)
    a, b = make_truth(truth, setup), make_truth(truth, setup)
    if not isinstance(a, Truth):
        _fail(what, "the factory must return a Truth")
    if np.shape(a.values) != (p.n_edges,) or not np.all(np.isfinite(a.values)):
        _fail(what, "values must be finite, one per edge")
    if not np.all(np.asarray(a.noise_std) >= 0):
        _fail(what, "noise_std must be non-negative")
    if not np.array_equal(a.values, b.values):
        _fail(what, "the same seed must give the same truth")
    checked = ["values", "deterministic"]
    if a.conserves:
        if np.shape(a.potential) != (p.n_edges,) or not np.all(np.isfinite(a.potential)):
            _fail(what, "potential must be finite, one per edge")
        costs = None if a.turns is None else a.turns.costs
        if negative_cycle(p.n_edges, p.oracle.conn_src, p.oracle.conn_dst, weights=a.values, turn_weights=costs):
            _fail(what, "it says it conserves energy (a potential), but a cycle creates energy")
        checked.append("conserves")
    env = StaticEnvironment(a, a.noise_std, p.oracle, p.start, p.end, seed)
    return [*checked, *check_environment(env)]


def _matcher_route(net, hops: int = 8) -> list[int]:
    """A shortest route of at least ``hops`` edges across ``net``, with no junction twice and no
    parallel edges on it (two roads drawn alike, which no matcher can tell apart)."""
    e = net.edges
    length = e.length_m.to_numpy()
    oracle = Oracle.from_network(net)
    pairs = e.groupby(["u", "v"]).size()
    parallel = {k for k, n in pairs.items() if n > 1}
    for a in range(net.n_edges):
        for b in range(net.n_edges - 1, -1, -1):
            try:
                path = list(oracle.shortest_path(length, a, b).edges)
            except EvrouteError:
                continue
            nodes = [e.u.iat[x] for x in path] + [e.v.iat[path[-1]]]
            if len(path) >= hops and len(set(nodes)) == len(nodes) \
                    and not any((e.u.iat[x], e.v.iat[x]) in parallel for x in path):
                return path
    raise EvrouteError(f"no route of {hops} edges on {net.name}")  # pragma: no cover


def _matcher_drive(net, route: list[int], speed: float = 10.0, rate_hz: float = 1.0):
    """Exact fixes of a car driving ``route`` along its roads' shapes at ``speed`` (m/s), every
    ``1 / rate_hz`` s: latitudes, longitudes, times, speeds, and each fix's distance along the
    route (m)."""
    from .world.matching import local_metres

    lat0, lon0 = float(net.nodes.lat.mean()), float(net.nodes.lon.mean())
    length = net.edges.length_m.to_numpy()
    points, along, before = [], [], 0.0
    for k, edge in enumerate(route):
        g = np.asarray(net.geometry[edge], dtype=np.float64)
        north, east = local_metres(g[:, 1], g[:, 0], lat0=lat0, lon0=lon0)
        step = np.hypot(np.diff(north), np.diff(east))
        at = np.r_[0.0, np.cumsum(step)] * (length[edge] / step.sum())  # in the edge's own metres
        first = 0 if k == 0 else 1
        points.extend(g[first:].tolist())
        along.extend((before + at[first:]).tolist())
        before += float(length[edge])
    points, along = np.asarray(points), np.asarray(along)
    s = np.arange(0.0, along[-1], speed / rate_hz)
    lat, lon = np.interp(s, along, points[:, 1]), np.interp(s, along, points[:, 0])
    return lat, lon, s / speed, np.full(s.size, float(speed)), s


def _matcher_pieces(what: str, net, pieces, n: int) -> None:
    """The shape :meth:`evroute.world.matching.Matcher.match` promises."""
    if not isinstance(pieces, list):
        _fail(what, "match must return a list of pieces")
    e = net.edges
    u, v = e.u.to_numpy(), e.v.to_numpy()
    end = 0
    for piece in pieces:
        if not (isinstance(piece, tuple) and len(piece) == 4):
            _fail(what, "a piece must be a tuple (first, route, s, dist)")
        first, route, s, dist = piece
        s, dist = np.asarray(s), np.asarray(dist)
        if int(first) != first or first < end:
            _fail(what, "pieces must be in the fixes' order and must not overlap")
        if s.ndim != 1 or s.size < 2 or dist.shape != s.shape or first + s.size > n:
            _fail(what, "a piece must hold at least two of the trip's fixes: one position and one distance each")
        end = int(first) + s.size
        route = list(route)
        if not route or not all(int(x) == x and 0 <= x < net.n_edges for x in route):
            _fail(what, "a piece's route must be edge ids of the network")
        if not all(v[a] == u[b] for a, b in zip(route[:-1], route[1:], strict=True)):
            _fail(what, "a piece's route must be a walk: each edge begins where the one before ends")
        ok = np.isfinite(s)
        if not (np.all(s[ok] >= -1e-6) and np.all(s[ok] <= net.edges.length_m.to_numpy()[route].sum() + 1e-6)):
            _fail(what, "positions must lie on the piece's route")
        if not np.all(np.isfinite(dist[ok]) & (dist[ok] >= 0)):
            _fail(what, "a placed fix's distance to the road must be a number >= 0")


def check_matcher(matcher, net=None, *, gps_noise_m: float = 5.0) -> list[str]:
    """A map matcher against the contract of :class:`evroute.world.matching.Matcher`, on a small
    synthetic city (``net``: the 60-junction one by default).

    ``matcher`` is a factory, ``matcher(net, gps_noise_m)`` (a class such as
    :class:`evroute.world.matching.HMMMatcher`), or a name of :data:`evroute.world.drives.MATCHERS`.

    Checks: a noise that is not positive is refused (an :class:`~evroute.errors.EvrouteError`); the
    matcher has the protocol's ``noise`` (the one it was made with) and ``length`` (the edges');
    the pieces have the promised shape (in order, not overlapping, each route a walk on the
    network); a clean drive along a known route gives that route and every fix's position on it
    (within a metre), with or without the fixes' times and speeds; no fix far from every road is
    placed (the trip goes on in a later piece); a trip of fewer than two fixes gives no piece; and
    the same fixes give the same pieces, from the same matcher and a new one.
    """
    from .world.drives import make_matcher
    from .world.matching import Matcher

    net = net if net is not None else load_network("synthetic", size=60)
    factory = (lambda n, noise: make_matcher(matcher, n, noise)) if isinstance(matcher, str) else matcher
    what = f"matcher {matcher if isinstance(matcher, str) else getattr(matcher, '__name__', repr(matcher))}"
    for bad in (0.0, -1.0):
        try:
            factory(net, bad)
        except EvrouteError:
            continue
        _fail(what, f"a GPS noise of {bad:g} m must be refused with an EvrouteError")
    ran = ["refuses a bad noise"]
    m = factory(net, gps_noise_m)
    if not isinstance(m, Matcher):
        _fail(what, "it must have the protocol's noise, length and match")
    if float(m.noise) != float(gps_noise_m):
        _fail(what, "noise must be the GPS noise it was made with")
    if np.shape(m.length) != (net.n_edges,) or not np.allclose(m.length, net.edges.length_m.to_numpy()):
        _fail(what, "length must be each edge's length (m), by edge id")
    ran.append("protocol")

    route = _matcher_route(net)
    lat, lon, t, speed, truth = _matcher_drive(net, route)
    n = lat.size
    length = net.edges.length_m.to_numpy()
    runs = {"with times and speeds": m.match(lat, lon, t=t, speed=speed), "positions only": m.match(lat, lon)}
    for how, pieces in runs.items():
        _matcher_pieces(what, net, pieces, n)
        placed = np.zeros(n, dtype=bool)
        for first, got, s, _ in pieces:
            got, s = list(got), np.asarray(s)
            inner = route[1:-1]
            if not any(got[k:k + len(inner)] == inner for k in range(len(got))):
                _fail(what, f"a clean drive ({how}) must give its route")
            offset = length[got[:got.index(route[1])]].sum() - length[route[0]]
            ok = np.isfinite(s)
            idx = np.arange(first, first + s.size)
            placed[idx[ok]] = True
            if np.max(np.abs(s[ok] - offset - truth[idx[ok]]), initial=0.0) > 1.0:
                _fail(what, f"a clean drive ({how}) must give each fix's position along its route within 1 m")
        if placed.mean() < 0.95:
            _fail(what, f"a clean drive ({how}) must place its fixes ({placed.mean():.0%} placed)")
    ran += ["pieces", "clean drive", "without times and speeds"]

    off = slice(n // 2 - 2, n // 2 + 2)
    far = lat.copy()
    far[off] += 0.05  # 5 km north of every road
    pieces = m.match(far, lon, t=t, speed=speed)
    _matcher_pieces(what, net, pieces, n)
    for first, _, s, _ in pieces:
        idx = np.arange(first, first + np.asarray(s).size)
        if np.isfinite(np.asarray(s)[(idx >= off.start) & (idx < off.stop)]).any():
            _fail(what, "a fix far from every road must not be placed")
    if not pieces or pieces[-1][0] < off.stop:
        _fail(what, "the trip must go on after the fixes far from every road")
    ran.append("off the network")

    for k in (0, 1):
        if m.match(lat[:k], lon[:k], t=t[:k], speed=speed[:k]) != []:
            _fail(what, f"a trip of {k} fixes must give no piece")
    ran.append("short trips")

    def same(a, b):
        return len(a) == len(b) and all(
            x[0] == y[0] and list(x[1]) == list(y[1]) and np.array_equal(x[2], y[2], equal_nan=True)
            and np.array_equal(x[3], y[3], equal_nan=True) for x, y in zip(a, b, strict=True))

    again, fresh = m.match(lat, lon, t=t, speed=speed), factory(net, gps_noise_m).match(lat, lon, t=t, speed=speed)
    if not (same(runs["with times and speeds"], again) and same(again, fresh)):
        _fail(what, "the same fixes must give the same pieces")
    ran.append("deterministic")
    return ran


class MockModel(PosteriorModel):
    """A posterior backend with a fixed belief, for testing agents and policies apart from the
    models (BoTorch's ``MockModel``): ``mean_std`` gives ``mean`` and ``std`` whatever is
    observed; ``update`` records the rounds (in :attr:`rounds`) and the counts and sums.

    Parameters
    ----------
    mean, std : array (E,)
    noise_var : float
    capabilities : iterable of str
        What it declares (:data:`evroute.models.CAPABILITIES`); with ``covariance`` it gives
        diagonal blocks, with ``joint_samples`` independent draws.
    """

    def __init__(self, mean, std, noise_var: float = 1.0, capabilities=()):
        self._mu = readonly(np.array(mean, dtype=np.float64))
        self._sd = readonly(np.array(std, dtype=np.float64))
        if self._mu.shape != self._sd.shape or self._mu.ndim != 1:
            raise EvrouteError("MockModel needs mean and std of the same length")
        self.n_arms = int(self._mu.size)
        self.noise_var = float(noise_var)
        self.capabilities = frozenset(capabilities)
        self._counts = np.zeros(self.n_arms, np.int64)
        self._sums = np.zeros(self.n_arms)
        self.rounds: list[tuple[np.ndarray, np.ndarray]] = []
        self.log_evidence = 0.0

    def update(self, edges, observed) -> None:
        round_statistics(edges, observed, self.n_arms)  # the same checks as every backend
        self._record(edges, observed)
        self.rounds.append((np.asarray(edges).copy(), np.asarray(observed, dtype=float).copy()))

    def mean_std(self):
        return self._mu, self._sd

    def sample(self, rng, joint: bool = False):
        if joint and JOINT_SAMPLES not in self.capabilities:
            return super().sample(rng, joint=True)
        return self._mu + self._sd * rng.standard_normal(self.n_arms)

    def covariance(self, idx):
        if COVARIANCE not in self.capabilities:
            return super().covariance(idx)
        return np.diag(self._sd[np.asarray(idx)] ** 2)
