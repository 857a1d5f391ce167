"""A run's problem, set up from its configuration: the network, the trip, the physics prior
mean, the noise, the ground truth (paper 003 Sec. 4.1), and from them the
environment and the agent the loop runs.

Per seed the true expected energy f is one draw of GP(E_det, k) over all edges, with
σ₀² = (0.25 σ_det)² and ς² = (0.1 σ_det)² (:data:`evroute.priors.prior.PRIOR_SCALE`,
:data:`evroute.priors.prior.NOISE_SCALE`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ..bandit.agents import AgentSetup
from ..bandit.agents import make_agent as make_named_agent
from ..bandit.environments import RoadEnvironment, StaticEnvironment
from ..bandit.policies import route_weights
from ..bandit.truths import Truth, TruthSetup, make_truth, truth_kernel
from ..bandit.turns import TURN_KERNEL, TurnPrior
from ..cache import CacheEntry, hash_bytes, make_key
from ..errors import EvrouteError
from ..io import atomic_write_text
from ..physics.energy import energy_floor_wh, load_vehicle
from ..physics.routes import edge_energies, resolve_route
from ..priors.candidates import candidate_priors, describe_candidates
from ..priors.network_prior import NetworkPrior
from ..priors.noise import edge_noise_std
from ..priors.prior import NOISE_SCALE, PRIOR_SCALE, EdgeScaledPrior, VehicleScalePrior
from ..progress import stage
from ..roads.network import load_network
from ..roads.optimum import exact_optimum
from ..roads.oracle import Oracle
from ..world.drives_prior import fleet_ratio, transfer_traversals
from ..world.fleet import FleetPrior, read_fleet_prior
from ..world.junctions import physics_turns
from .config import AgentSpec, PriorSpec, Scenario, SimulationConfig

__all__ = ["Problem", "prepare_problem", "agent_prior", "make_agent", "make_environment", "exact_optimum_cached",
           "weight_inputs", "fleet_ratio", "transfer_traversals", "check_world", "describe_world", "world_candidates", "world_tag"]


@dataclass
class Problem:
    """A prepared bandit problem (network, route, prior mean and scales, truth) for one seed."""

    net: object
    oracle: object
    route: object
    vehicle: object
    prior_mean: np.ndarray
    sigma_det: float
    prior_var: float
    noise_var: float
    truth: np.ndarray
    seed: int
    #: ‖f − m‖ in the RKHS of the truth's kernel (NaN where it cannot be had without E×E)
    truth_rkhs_norm: float = float("nan")
    #: the truth the run's ``--truth`` names (:class:`evroute.bandit.environments.Truth`: f and how a
    #: traversal is observed)
    ground_truth: Truth | None = None
    #: E_det of the truth's vehicle (the mean the truth is drawn around; ``prior_mean`` unless
    #: ``--truth NAME[prior=...]`` names another vehicle)
    truth_mean: np.ndarray | None = None
    #: E_det of the agents' vehicle where ``prior_mean`` is not it (``--prior``: the fleet's
    #: means); None: ``prior_mean`` is E_det
    e_det: np.ndarray | None = None
    #: ς_e per edge under a per-edge noise model (``--noise-std edge[...]``); None: ``noise_std``
    #: on every edge (``noise_var`` is then the mean of ς_e², the reference level)
    edge_noise_std: np.ndarray | None = None
    #: the fleet's posterior sd per edge over σ₀ (``--prior``: √(ς² / (n σ₀² + ς²)) after n
    #: traversals of noise ς², 1 where it never drove); None without a fleet
    fleet_scale: np.ndarray | None = None
    #: the fleet's traversals per edge (``--prior``); None without a fleet
    fleet_counts: np.ndarray | None = None
    #: what the fleet measured beyond its own vehicle's physics, in this vehicle's units
    #: (``--prior``: ``prior_mean`` − E_det); None without a fleet
    fleet_residual: np.ndarray | None = None
    #: the agents' prior of the junctions' dissipation (``--turns``: physics', a fleet's, or the
    #: truth's for an oracle); None without turns
    agent_turns: TurnPrior | None = None
    #: the prior file of ``--prior`` (:class:`evroute.world.fleet.FleetPrior`: the vehicle scale, the
    #: residual trust k); None without a fleet
    fleet: FleetPrior | None = None
    #: what is derived once from the problem for its runs (:func:`weight_inputs`' results by rule)
    derived: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def noise_std(self) -> float:
        return math.sqrt(self.noise_var)

    @property
    def observation_noise(self):
        """The noise sd of every edge: ς_e per edge (an array) under a per-edge model, else ς."""
        return self.noise_std if self.edge_noise_std is None else self.edge_noise_std


def prepare_problem(scenario: Scenario | SimulationConfig, seed: int | None = None, *, net=None,
                    load=load_network) -> Problem:
    """Load the network, resolve the route, compute E_det, σ_det and the true f for the seed
    (the truth the scenario names, made by its registered factory).

    The only reader of the world: it reads the scenario and the seed, nothing else, so prepared
    problems are kept by ``(scenario, seed)`` (:func:`evroute.runs.executors.cached_problem`).

    Parameters
    ----------
    scenario : Scenario or SimulationConfig
        The world (a run's configuration stands for its scenario and its seed).
    seed : int, optional
        The seed of the truth; required with a :class:`~evroute.runs.config.Scenario`.
    net : Network, optional
        The scenario's network, already loaded (by default loaded here).
    load : callable, optional
        ``load(name, osm=..., dem=...)``: how the scenario's network is loaded when ``net`` is not
        given (:func:`evroute.roads.network.load_network`; a worker passes its in-process cache).

    Returns
    -------
    Problem
        The run's network, trip, prior mean and scales, truth and oracle.
    """
    if isinstance(scenario, SimulationConfig):
        scenario, seed = scenario.scenario, scenario.seed if seed is None else seed
    if seed is None:
        raise TypeError("prepare_problem(scenario, seed): give the seed")
    sc = scenario
    vehicle = load_vehicle(sc.vehicle)
    truth_vehicle = load_vehicle(sc.truth_vehicle()) if sc.truth_prior is not None else vehicle
    net = net or load(sc.network, osm=sc.osm, dem=sc.dem)
    route = resolve_route(net, sc.route, sc.from_point, to_point=sc.to_point)
    oracle = Oracle.from_network(net)
    if not oracle.reachable(route.start)[route.end]:
        raise EvrouteError(f"route {route.name}: the end edge {route.end} cannot be reached from the start edge {route.start}")
    e_det = edge_energies(net, vehicle)
    e_truth = e_det if sc.truth_prior is None else edge_energies(net, truth_vehicle)
    sigma_det = float(np.std(e_truth))
    if not sigma_det > 0:
        raise EvrouteError("the deterministic energies are all equal: σ_det = 0, no prior scale")
    prior_var = (sc.prior_std if sc.prior_std is not None else PRIOR_SCALE * sigma_det) ** 2
    edge_sd = edge_noise_std(net, sc.noise_std) if isinstance(sc.noise_std, str) else None
    if edge_sd is not None:  # a per-edge model: ς² is the mean of ς_e², the reference level
        noise_var = float(np.mean(edge_sd ** 2))
    else:
        noise_var = (sc.noise_std if sc.noise_std is not None else NOISE_SCALE * sigma_det) ** 2
    truth = make_truth(sc.truth, TruthSetup(net, e_truth, prior_var,
                                            math.sqrt(noise_var) if edge_sd is None else edge_sd, seed,
                                            sc.truth_lengthscale, truth_vehicle, route, sc.network, sc.osm,
                                            sc.dem))
    prior_mean, fleet, fleet_scale, counts, residual = e_det, None, None, None, None
    if sc.prior is not None:  # a fleet's drives: its per-edge posterior in this vehicle's units (evroute prior fit)
        fleet = read_fleet_prior(sc.prior)
        fleet.check_network(net)
        fleet.check_vehicle(vehicle)
        prior_mean, fleet_var = fleet.edges(e_det, prior_var)
        counts, residual = fleet.edge_counts, prior_mean - e_det
        fleet_scale = np.sqrt(np.minimum(fleet_var / prior_var, 1.0))
    agent_turns = None
    if truth.turns is not None:  # the agents' own prior of the junctions: nothing of the truth but for an oracle
        if sc.prior_turns == "oracle":
            agent_turns = TurnPrior(truth.turns.dissipation, source="oracle")
        elif sc.prior_turns == "drives":
            agent_turns = fleet.turn_prior(net)
        else:
            agent_turns = physics_turns(net, vehicle)
    return Problem(net, oracle, route, vehicle, prior_mean, sigma_det, prior_var, noise_var, truth.values, seed,
                   truth.rkhs_norm, truth, e_truth, None if prior_mean is e_det else e_det, edge_sd, fleet_scale,
                   counts, residual, agent_turns, fleet)


def _world(scenario: Scenario | SimulationConfig) -> Scenario:
    return scenario.scenario if isinstance(scenario, SimulationConfig) else scenario


def check_world(scenario: Scenario | SimulationConfig) -> None:
    """Check, before any work, what of the world can be checked without its network and the
    scenario has not checked when made: the run's vehicle (a preset or a JSON file) loads. A bad
    one is a one-line :class:`EvrouteError`."""
    load_vehicle(_world(scenario).vehicle)


def world_tag(scenario: Scenario | SimulationConfig) -> str:
    """A short name of the world's trip for run names: the network's name (a file's stem) and
    the route (``monaco-A``; ``custom`` for a trip between two points)."""
    sc = _world(scenario)
    tag = (sc.route or "A") if sc.from_point is None else "custom"
    return f"{Path(sc.network).stem}-{tag.replace(':', '-')}"


def describe_world(scenario: Scenario | SimulationConfig) -> dict:
    """What a run's summary records of its world's settings (the rest of the world is recorded
    from the prepared :class:`Problem`: the network, the trip, σ₀, ς, the truth's own account).

    Returns
    -------
    dict
        ``truth_lengthscale``, ``truth`` (the truth's canonical spec), ``noise_model`` (a per-edge
        noise model's spec; None for one level), ``truth_prior`` and ``static`` (no drift, no
        closures).
    """
    sc = _world(scenario)
    return {"truth_lengthscale": sc.truth_lengthscale, "truth": sc.truth.label,
            "noise_model": sc.noise_std if isinstance(sc.noise_std, str) else None,
            "truth_prior": sc.truth_prior, "static": sc.static}


def world_candidates(scenario: Scenario | SimulationConfig) -> list[dict]:
    """The world's candidate priors as resolved (``config.json``'s record; paper 004).

    Returns
    -------
    list of dict
        One per candidate (:func:`evroute.priors.candidates.describe_candidates`).
    """
    return describe_candidates(_world(scenario).candidates())


def agent_prior(spec: PriorSpec | AgentSpec | SimulationConfig, problem: Problem):
    """The agent's prior: the problem's mean (E_det, or a fleet's per-edge posterior) and σ₀², the
    kernel ``spec`` names (built lazily). With a fleet's prior file (``--prior``,
    :class:`evroute.world.fleet.FleetPrior`) each edge's variance is the fleet's posterior one, the
    kernel's correlations kept (:class:`evroute.priors.prior.EdgeScaledPrior`), plus (k r_e)², k the
    file's residual trust and r_e the edge's prior mean less E_det, capped at σ₀² (a fleet's residual
    is not known better than to within k of itself, whatever its count says); and with the file's
    vehicle scale SD, this vehicle's unknown scale a ~ N(1, SD²) of the fleet's residuals on top
    (:class:`evroute.priors.prior.VehicleScalePrior`: the covariance gains SD² r rᵀ).

    It reads the :class:`~evroute.runs.config.PriorSpec` and the problem only (an agent's
    specification or a run's configuration stands for its prior's), so priors are kept by them
    and the prior file's digest (:func:`evroute.runs.executors.cached_prior`).

    Returns
    -------
    NetworkPrior
        The prior (possibly rescaled per edge, or with the vehicle's scale on top).
    """
    if isinstance(spec, SimulationConfig):
        spec = spec.agent
    if isinstance(spec, AgentSpec):
        spec = spec.prior
    mean = problem.prior_mean
    prior = NetworkPrior(problem.net, mean, spec.kernel, spec.lengthscale, spec.kappa, spec.nu, problem.prior_var)
    fleet = problem.fleet
    if fleet is None:
        return prior
    scale = problem.fleet_scale  # each edge's sd over σ₀
    if fleet.residual_sd > 0:  # the residual's own error: (k r_e)² more
        scale = np.minimum(1.0, np.hypot(scale, fleet.residual_sd * problem.fleet_residual / math.sqrt(problem.prior_var)))
    prior = EdgeScaledPrior(prior, 1.0 / scale, mean)  # variance σ₀² × scale²
    if fleet.vehicle_scale > 0:  # this vehicle's physics its own, the fleet's residuals scaled
        prior = VehicleScalePrior(prior, fleet.vehicle_scale, problem.fleet_residual)
    return prior


def weight_inputs(problem: Problem) -> dict:
    """What the weight rules need (:func:`evroute.bandit.policies.route_weights`): the edges' floor and
    potential of the agents' vehicle (:func:`evroute.physics.energy.energy_floor_wh`), computed once."""
    if "weights" not in problem.derived:
        e = problem.net.edges
        floor, potential = energy_floor_wh(e.length_m.to_numpy(), e.grade.to_numpy(), problem.vehicle)
        problem.derived["weights"] = {"floor": floor, "potential": potential}
    return problem.derived["weights"]


def make_environment(cfg: SimulationConfig, problem: Problem):
    """The environment of a run: the static truth of the problem (paper 003), or, with ``drift``
    or ``closures``, a :class:`evroute.bandit.environments.RoadEnvironment` (energies that change,
    roads that close; paper 004). It reads the scenario, the seed and the agents' weight rule
    (for the clairvoyant route).

    Returns
    -------
    StaticEnvironment or RoadEnvironment
    """
    truth = problem.ground_truth if problem.ground_truth is not None else problem.truth
    w = weight_inputs(problem)

    def weigh(f):  # the agents' weight rule, for the paper's clairvoyant route (a truth that creates energy)
        return route_weights(f, cfg.weights, problem.observation_noise, **w)

    world = cfg.scenario
    if world.static:
        return StaticEnvironment(truth, problem.observation_noise, problem.oracle, problem.route.start,
                                 problem.route.end, cfg.seed, weigh=weigh)
    mean = problem.truth_mean if problem.truth_mean is not None else problem.prior_mean
    dev = truth_kernel(problem.net, np.zeros(problem.net.n_edges), problem.prior_var,
                       lengthscale=world.truth_lengthscale)  # the truth's kernel: the drift's innovations g_t
    return RoadEnvironment(truth, mean, dev.sample, problem.observation_noise, problem.oracle, problem.route.start,
                           problem.route.end, cfg.seed, eps=float(world.drift), closures=world.closures, weigh=weigh)


def make_agent(cfg: SimulationConfig, problem: Problem, prior: NetworkPrior | None = None):
    """The agent ``cfg.agent`` specifies (its policy, a resolved component with its options, on
    its model), for the problem, the scenario's candidate priors and the run's horizon and seed.

    ``prior`` may be handed in when the caller already has it (e.g. an in-process cache
    keeping its dense covariance between runs); by default :func:`agent_prior`.

    Returns
    -------
    Agent
        The registered agent's factory's result.
    """
    agent, control = cfg.agent, cfg.control
    w = weight_inputs(problem)
    prior = prior if prior is not None else agent_prior(agent, problem)
    # the candidate priors (paper 004): E vectors and lazily built kernels, for the agents using them
    candidates = candidate_priors(cfg.scenario.candidates(), problem.net, prior, kernel=agent.kernel,
                                  lengthscale=agent.lengthscale, kappa=agent.kappa, nu=agent.nu,
                                  prior_var=problem.prior_var)
    setup = AgentSetup(prior=prior, noise_var=problem.noise_var, oracle=problem.oracle, start=problem.route.start,
                       end=problem.route.end, model=agent.model, seed=control.seed,
                       truth_rkhs_norm=problem.truth_rkhs_norm, energy_floor=w["floor"], potential=w["potential"],
                       candidates=candidates, horizon=int(control.horizon), weights=agent.weights,
                       turns=problem.agent_turns if agent.turn_kernel != "fixed" or problem.agent_turns is None
                       else replace(problem.agent_turns, var=None),
                       edge_noise_var=None if problem.edge_noise_std is None else problem.edge_noise_std ** 2,
                       turn_kernel=TURN_KERNEL if agent.turn_kernel == "shared" else {"junction": 0.0, "kind": 0.0})
    return make_named_agent(agent.policy, setup)


def exact_optimum_cached(problem: Problem, time_limit: float) -> dict:
    """The best vertex-simple route under f, computed once per truth (keyed by the network, the
    trip and the truth's values); for a truth of edges plus turns (which creates no energy), the
    best walk of the line graph: the least-energy route the agents' oracle can drive."""
    turns = problem.ground_truth.turns if problem.ground_truth is not None else None
    params = {"network": problem.net.cache_key, "start": problem.route.start, "end": problem.route.end,
              "seed": problem.seed, "truth": hash_bytes(np.ascontiguousarray(problem.truth, dtype=np.float64).tobytes()),
              "turns": None if turns is None else hash_bytes(np.ascontiguousarray(turns.costs).tobytes()),
              "what": "exact-optimum-v3"}
    entry = CacheEntry("optimum", make_key(params))
    if entry.is_valid(["optimum.json"]):
        cached = json.loads(entry.path("optimum.json").read_text())
        if cached["status"] == "optimal" or cached.get("time_limit", 0) >= time_limit:
            return cached
    net = problem.net
    with stage(f"exact optimum of {problem.route.name} (MILP, up to {time_limit:g} s; cached)"):
        res = exact_optimum(net.n_edges, net.conn_src, net.conn_dst, edge_u=net.edges.u.to_numpy(), edge_v=net.edges.v.to_numpy(),
                            weights=problem.truth, start=problem.route.start, end=problem.route.end, time_limit=time_limit,
                            ends="auto", turn_weights=None if turns is None else turns.costs,
                            walks=turns is not None)
    out = {"energy": float(res.energy) if res.path else None, "path": [int(x) for x in res.path],
           "method": res.method, "status": res.status, "gap": float(res.gap), "seconds": float(res.seconds),
           "time_limit": float(time_limit), "ends": res.ends}
    try:
        entry.prepare()
        atomic_write_text(entry.path("optimum.json"), json.dumps(out))
        entry.commit(["optimum.json"])
    except (OSError, EvrouteError):
        pass
    return out
