"""Agents: a policy, its posterior model(s) and its call to the route oracle.

An agent is what the bandit loop talks to (besides the environment). Each round it
chooses a route, ``select(t, available, rng) -> Decision``, and learns from what it drove,
``observe(route, values)``. Keeping the oracle call inside the agent lets one agent hold
several posteriors (one per candidate prior, picking the best (route, prior) pair) or
re-rank a few candidate routes, without the loop knowing.

:class:`IndexAgent` is paper 003's agent (Algorithm 1–2): one posterior, one index rule
(GP-UCB, GP-BayesUCB, GP-TS, greedy; :mod:`evroute.bandit.policies`), rectified edge weights and
Dijkstra. Agents are created by policy name from a registry (``gp-ucb``, ``bi-ts``, ...);
new families register their own names with :func:`register_agent`, in a module of their own:
paper 000's confidence-bound agents in :mod:`evroute.bandit.bound_agents`, paper 004's
elimination over candidate priors in :mod:`evroute.bandit.pe_agents`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..components import POLICIES
from ..errors import EvrouteError
from ..models import (
    JOINT_SAMPLES,
    make_model,
    require_capability,
    resolve_model,
)
from ..priors.prior import DiagonalPrior
from ..specs import Component, Option, declared, parse_spec
from .policies import (
    MODEL_FAMILIES,
    RULES,
    RULES_BY_NAME,
    confidence_delta,
    make_policy,
    model_noise_std,
    route_weights,
)
from .turns import TURN_KERNEL, TurnBelief, TurnPrior

__all__ = ["Decision", "Agent", "IndexAgent", "AgentSetup", "register_agent", "unregister_agent", "agent_names",
           "make_agent", "agent_options", "policy_family", "resolve_policy", "POLICIES", "LOWER_CONFIDENCE_BOUND",
           "ONE_NOISE_LEVEL", "AGENT_NEEDS", "RULE_OPTIONS", "confidence_delta", "turn_belief"]


@dataclass
class Decision:
    """An agent's choice for one round.

    Attributes
    ----------
    path : int64 array
        The route: edge ids in driving order.
    beta : float
        The confidence parameter β_t used (NaN for rules without one).
    index : float array
        The index μ̃ of each edge of ``path`` before rectification (a lower confidence bound
        or a posterior draw): what the agent believed the edge could cost at best.
    mean, std : float array
        The agent's posterior mean and standard deviation of each edge of ``path`` before
        the round's update.
    prior_mean : float array
        The agent's prior mean of each edge of ``path``.
    """

    path: np.ndarray
    beta: float
    index: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    prior_mean: np.ndarray


class Agent(ABC):
    """Chooses a route each round and learns from the energies it measures."""

    @abstractmethod
    def select(self, t: int, available: np.ndarray | None, rng: np.random.Generator) -> Decision:
        """The route for round ``t`` (≥ 1) using only edges where ``available`` is True (None: all)."""

    @abstractmethod
    def observe(self, path: np.ndarray, values: np.ndarray) -> None:
        """Learn from the energies ``values`` measured on the edges of ``path``."""

    @abstractmethod
    def mean_std(self) -> tuple[np.ndarray, np.ndarray]:
        """The agent's current posterior mean and standard deviation of every edge (for the run files)."""

    @property
    @abstractmethod
    def n_distinct(self) -> int:
        """Number of distinct edges observed so far."""

    def diagnostics(self) -> dict[str, float]:
        """Scalars about the last round, logged as extra columns of ``rounds.parquet`` (the
        same keys every round); none by default."""
        return {}

    def tables(self) -> dict[str, dict[str, list]]:
        """Extra tables of the run, written as ``<name>.parquet`` (columns as lists); none by default."""
        return {}

    def summary(self) -> dict:
        """Extra entries of the run's ``summary.json``; none by default."""
        return {}


class IndexAgent(Agent):
    """One posterior model and one index rule (paper 003, Algorithm 1–2).

    Each round: per-edge indices μ̃ from the rule (:meth:`evroute.bandit.policies.Policy.indices`),
    the oracle's weights by the weight rule (:func:`evroute.bandit.policies.route_weights`: paper 003's
    rectified U = E[max(0, N(μ̃, ς²))], Algorithm 2 line 3, or the floor-and-potential rule that
    keeps regeneration), Dijkstra from the start to the end edge over the available edges; under a
    truth of edges plus turns the junctions' dissipation is weighed too, from the agent's own
    posterior of the turns (the same index rule's index of each turn) or, told by an oracle, the
    truth's.

    Parameters
    ----------
    policy : evroute.bandit.policies.Policy
    model : evroute.models.PosteriorModel
    oracle : evroute.roads.oracle.Oracle
    start, end : int
        Start and end edge of the trip.
    prior_mean : array (E,)
        The model's prior mean (logged with each observation).
    rectify : bool
        Weigh the indices by ``weights`` (default); False hands μ̃ to the oracle as it is (it
        must then be non-negative).
    weights : {"rectified", "potential"}
        The weight rule; ``potential`` needs ``floor`` and ``potential`` (Wh per edge).
    turns : evroute.bandit.turns.TurnPrior, optional
        The agent's prior of the junctions' dissipation: learnt online where it has variances
        (``turn_belief``), taken as known where it has none (an oracle's).
    turn_belief : evroute.bandit.turns.TurnBelief, optional
        The junctions' posterior: each round the index rule's index of every turn stands for its
        dissipation, and the turns driven are observed (:meth:`observe_turns`).
    """

    def __init__(self, policy, model, oracle, start: int, end: int, prior_mean, rectify: bool = True, *,
                 weights: str = "rectified", floor=None, potential=None, turns=None, turn_belief=None):
        self.policy = policy
        self.model = model
        self.oracle = oracle
        self.start, self.end = int(start), int(end)
        self.prior_mean = np.asarray(prior_mean, dtype=np.float64)
        self.rectify = bool(rectify)
        self.weights, self.floor, self.potential, self.turns = weights, floor, potential, turns
        if turn_belief is not None and (turns is None or not self.rectify):
            raise EvrouteError("learning the junctions needs the turns' prior and a weight rule")
        self.turn_belief = turn_belief

    @property
    def learns_turns(self) -> bool:
        """Whether the agent learns the junctions (:meth:`observe_turns`)."""
        return self.turn_belief is not None

    def select(self, t, available, rng) -> Decision:
        mu, sd = self.model.mean_std()
        idx, beta = self.policy.indices(self.model, t, rng)
        turns = None if self.turns is None else self.turns.mean
        if self.turn_belief is not None:  # this round's turns: the index rule's index of each one's dissipation
            turns = self.policy.indices(self.turn_belief, t, rng)[0]
        if self.rectify:
            weights, arc = route_weights(idx, self.weights, model_noise_std(self.model), floor=self.floor,
                                         potential=self.potential, turns=turns)
        else:
            weights, arc = idx, None
        path = np.asarray(self.oracle.shortest_path(weights, self.start, self.end, available=available,
                                                    turn_weights=arc).edges, dtype=np.int64)
        return Decision(path, float(beta), np.asarray(idx, dtype=np.float64)[path], mu[path].copy(),
                        sd[path].copy(), self.prior_mean[path])

    def observe(self, path, values) -> None:
        self.model.update(path, values)

    def observe_turns(self, path, values) -> None:
        """Learn the dissipation observed at the turns of ``path`` (one per consecutive pair of edges)."""
        self.turn_belief.update(self.oracle.turn_index(path), values)

    def mean_std(self):
        return self.model.mean_std()

    def diagnostics(self):
        return self.model.diagnostics()

    def summary(self) -> dict:
        return self.model.summary()

    @property
    def n_distinct(self) -> int:
        return self.model.n_distinct

    def __repr__(self) -> str:
        return f"IndexAgent({self.policy!r}, {type(self.model).__name__})"




# --------------------------------------------------------------------------------------
# The registry: policy names → agents
# --------------------------------------------------------------------------------------


@dataclass
class AgentSetup:
    """What an agent factory is given: the problem as the agent may know it.

    Attributes
    ----------
    prior : evroute.priors.prior.Prior
        The agent's prior over the edges (gp families use it whole, bi its mean and σ₀²).
    noise_var : float
        Observation noise variance ς² (known).
    oracle : evroute.roads.oracle.Oracle
    start, end : int
        Start and end edge of the trip.
    model : Component or str
        Posterior backend of GP agents with its options (:func:`evroute.models.resolve_model`;
        a spec such as ``svgp[inducing=500]`` is resolved here).
    seed : int
        Seeds the backend's own randomness.
    """

    prior: object
    noise_var: float
    oracle: object
    start: int
    end: int
    model: Component | str = "exact"
    seed: int = 0
    #: ‖f − m‖ of the truth in its kernel's RKHS, for agents told B (paper 000 gives the true B)
    truth_rkhs_norm: float = float("nan")
    #: a physical lower bound of every edge's energy and a route-invariant potential (Wh;
    #: :func:`evroute.physics.energy.energy_floor_wh`), for agents whose weights are lower bounds
    energy_floor: np.ndarray | None = None
    potential: np.ndarray | None = None
    #: candidate prior means by name (paper 004: "which vehicle am I?"), all with the prior's kernel
    candidates: dict | None = None
    #: the run's horizon T (paper 004's β uses it); 0 when unknown
    horizon: int = 0
    #: how indices become the oracle's weights (:data:`evroute.bandit.policies.WEIGHT_RULES`)
    weights: str = "rectified"
    #: under a truth of edges plus turns, the agents' prior of each turn's dissipation
    #: (:class:`evroute.bandit.turns.TurnPrior`: physics', a fleet's, or an oracle's, known); None: no turns
    turns: TurnPrior | None = None
    #: ς_e² per edge (``--noise-std edge[...]``: :mod:`evroute.priors.noise`); None: ``noise_var`` on every edge
    edge_noise_var: np.ndarray | None = None
    #: the kernel over turns: the shares of a turn's prior variance common to its junction and to
    #: its kind (:class:`evroute.bandit.turns.TurnBelief`)
    turn_kernel: dict | None = None

    def __post_init__(self) -> None:
        self.model = resolve_model(self.model)

    @property
    def model_noise_var(self):
        """The noise a backend is made with (:func:`evroute.models.make_model`): ς_e² per edge
        where the run has a per-edge model, else ς²."""
        return self.noise_var if self.edge_noise_var is None else self.edge_noise_var

    def one_noise_level(self, who: str) -> None:
        """One line where ``who`` (an agent whose bounds take one ς) is given a per-edge noise model."""
        if self.edge_noise_var is not None:
            raise EvrouteError(f"{who} assumes one noise level for every edge (its confidence bounds take one "
                               "sigma); give --noise-std a number, or use an index agent (gp-ucb, gp-ts, bi-ts, ...) "
                               "with the per-edge model")


def turn_belief(setup: AgentSetup) -> TurnBelief | None:
    """The posterior of the junctions an agent learns (:class:`evroute.bandit.turns.TurnBelief`):
    from the setup's prior of the turns, its observations' noise the prior's own (a fleet's
    spread) or else the run's ς², the kernel the setup's; None without turns or where the turns
    are known (an oracle's)."""
    if setup.turns is None or setup.turns.known:
        return None
    noise = setup.turns.noise_var if setup.turns.noise_var is not None else float(np.mean(setup.noise_var))
    shares = setup.turn_kernel if setup.turn_kernel is not None else TURN_KERNEL
    return TurnBelief(setup.turns, noise, junction_share=shares["junction"], kind_share=shares["kind"])


#: The registry of agents by policy name (``--policy``; :data:`evroute.components.POLICIES`).
_AGENTS = POLICIES

#: A policy's capability: the index it logs (``index_before`` of ``observations.parquet``) is a
#: lower confidence bound on each edge's expected energy (the UCB and BayesUCB rules, paper
#: 000's bounds), so whether it covers the truth can be checked (``evroute plot``'s
#: ``coverage`` figure); a Thompson draw or a posterior mean is not.
LOWER_CONFIDENCE_BOUND = "lower-confidence-bound"


#: What an agent may declare it needs of a run (``register_agent(..., needs=...)``), checked when
#: the run is configured (:class:`evroute.runs.config.SimulationConfig`), before the network loads:
#: ``one-noise-level``, one observation noise ς for every edge (its confidence bounds take one),
#: so not a per-edge noise model (``--noise-std edge[...]``).
ONE_NOISE_LEVEL = "one-noise-level"
AGENT_NEEDS = (ONE_NOISE_LEVEL,)


def register_agent(name: str, factory: Callable[..., Agent], *, options: tuple[Option, ...] | None = None,
                   description: str = "", overwrite: bool = False, capabilities: tuple[str, ...] = (),
                   model: str = "gp", needs: tuple[str, ...] = ()) -> None:
    """Register an agent under a policy name (``--policy NAME``).

    ``factory(setup: AgentSetup, **options) -> Agent`` receives every declared option (the
    given value converted, else its default). A second registration of a name is an error
    unless ``overwrite``. ``capabilities`` declares what the policy offers
    (:data:`LOWER_CONFIDENCE_BOUND`), shown by ``evroute policies``. ``model`` declares which
    posterior it keeps (:func:`policy_family`): ``gp`` (the run's ``--model``, swept by ``compare``
    and named in its runs), ``bi`` (its own independent model) or ``none``. ``needs`` declares
    what it needs of the run (:data:`AGENT_NEEDS`), checked before any work.
    """
    unknown = sorted(set(needs) - set(AGENT_NEEDS))
    if unknown:
        raise EvrouteError(f"policy {name!r}: unknown needs {', '.join(unknown)} (known: {', '.join(AGENT_NEEDS)})")
    _AGENTS.register(name, factory, options, description, overwrite, capabilities, model=model, needs=needs)


def unregister_agent(name: str) -> None:
    """Remove a registration (tests, plug-ins that replace an agent)."""
    _AGENTS.unregister(name)


def agent_names() -> list[str]:
    """Registered policy names, in registration order (the paper's first)."""
    return _AGENTS.names()


def agent_options(name: str) -> tuple[Option, ...]:
    """The options a policy accepts (``beta_scale``, ``omega``, ``xi``, ``joint``, ...)."""
    return _AGENTS.get(name).options


def resolve_policy(spec) -> Component:
    """The resolved policy :class:`~evroute.specs.Component` of a spec (``gp-bucb[xi=0.5]``): the
    agent's declared options, given ones converted (aliases ``w``, ``x``, ``bs``), the others at
    their defaults."""
    return _AGENTS.resolve(spec)


def policy_family(name) -> str:
    """The model family a policy declared at registration (:func:`register_agent`): ``gp`` (it
    uses the run's ``--model``), ``bi`` or ``none``; of a policy name, spec or component."""
    text = name.name if isinstance(name, Component) else parse_spec(str(name), "policy")[0]
    return _AGENTS.get(text).model


def make_agent(name, setup: AgentSetup, **options) -> Agent:
    """Create the agent of a policy (a name, a spec ``gp-bucb[xi=0.5]`` or a resolved component) for
    ``setup``, with options as declared by the policy.

    Returns
    -------
    Agent
        The agent: ``select(t, available, rng)`` a route, ``observe(path, values)``.
    """
    comp = _AGENTS.resolve(name, **options)
    return _AGENTS.get(comp.name).factory(setup, **comp.options)


#: The options of each index rule, as its policy class declares them (003 Theorem 3.1: β_t of
#: GP-UCB, η_t(ω, ξ) of GP-BUCB; :mod:`evroute.bandit.policies`).
RULE_OPTIONS: dict[str, tuple[Option, ...]] = {rule: cls.options for rule, cls in RULES_BY_NAME.items()}


def _index_agent_factory(family: str, rule: str) -> Callable[..., Agent]:
    @declared(*RULE_OPTIONS[rule])
    def factory(setup: AgentSetup, **options) -> Agent:
        policy = make_policy(rule, **options)
        if family == "bi":  # the BI baseline: independent edges with the prior's mean and σ₀²
            model = make_model("bi", DiagonalPrior(setup.prior.mean, setup.prior.independent_variance()),
                               noise_var=setup.model_noise_var)
        else:
            model = make_model(setup.model, setup.prior, noise_var=setup.model_noise_var, seed=setup.seed)
        if options.get("joint"):
            require_capability(model, JOINT_SAMPLES, f"{family}-{rule}[joint=true]")
        return IndexAgent(policy, model, setup.oracle, setup.start, setup.end, setup.prior.mean,
                          weights=setup.weights, floor=setup.energy_floor, potential=setup.potential,
                          turns=setup.turns, turn_belief=turn_belief(setup))

    return factory


for _family in MODEL_FAMILIES:
    for _rule in RULES:
        register_agent(f"{_family}-{_rule}", _index_agent_factory(_family, _rule), model=_family,
                       description=f"{_rule} index rule on the {'GP' if _family == 'gp' else 'BI'} posterior",
                       capabilities=(LOWER_CONFIDENCE_BOUND,) if _rule in ("ucb", "bucb") else ())
