"""The one resolved specification of a run, saved as ``config.json``: a :class:`SimulationConfig`
is a :class:`Scenario`, an :class:`AgentSpec` and a :class:`RunControl`.

* the **scenario** is the world: the network and the trip, the vehicle, the truth (its kernel's
  lengthscale, the vehicle it is drawn around, how it drifts, which roads close), the noise, σ₀,
  a fleet's drives and the candidate priors an agent may doubt between. It is all that
  :func:`evroute.runs.problem.prepare_problem` reads, and the key prepared problems are kept by;
* the **agent**: the policy, the posterior backend, the weight rule and the prior kernel
  (:attr:`AgentSpec.prior`, a :class:`PriorSpec`: the key the agents' priors are kept by);
* the **control**: the schedule (horizon, seed) and what is computed beside the run (the exact
  optimum).

The three are frozen, hashable values. Every setting is declared once, as an
:class:`~evroute.specs.Option` (:data:`RUN_SETTINGS` gathers them: network, routes, energy,
agents, models, loop, kernels, environments, candidates, optimum), belongs to exactly one part
(:data:`SETTING_PART`) and is converted by its declaration when the part is made, so a
configuration that exists is valid: its components resolved (policy, model, truth, closures) and
its candidate priors read, once. A :class:`SimulationConfig` is also made from the settings
alone (``SimulationConfig(network="monaco", policy="gp-ucb", horizon=50)``) and reads them back
by name (``cfg.horizon``).

:meth:`SimulationConfig.to_json` and :meth:`SimulationConfig.from_json` are the one conversion
that ``config.json``, ``grid.json`` and the executors' tasks share. ``config.json`` has a format
version (:data:`CONFIG_FORMAT`): 4 writes the three parts as three objects, a fleet's drives as
one prior file (``prior``); run directories of format 3 (the drives as five settings), 2 (one
flat object) and 1 (before components, with the policy's options as fields) still read
(:func:`flat_config_json`, :func:`normalise_config_json`) unless they used a fleet's drives,
which are refused in one line saying how to make the prior file.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields

from ..bandit.agents import ONE_NOISE_LEVEL, POLICIES, policy_family, resolve_policy
from ..components import CLOSURES, TRUTHS
from ..errors import EvrouteError
from ..models import MODELS, resolve_model
from ..physics.energy import load_vehicle
from ..priors.candidates import (
    Candidate,
    candidates_from_json,
    describe_candidates,
    parse_candidates,
)
from ..settings import RUN_SETTINGS
from ..specs import Component
from ..world.fleet import read_fleet_prior

__all__ = ["SimulationConfig", "Scenario", "AgentSpec", "PriorSpec", "RunControl", "RUN_SETTINGS",
           "SCENARIO_SETTINGS", "AGENT_SPEC_SETTINGS", "CONTROL_SETTINGS", "SETTING_PART", "CONFIG_FORMAT",
           "REMOVED_SETTINGS", "prior_file_settings",
           "flat_config_json", "normalise_config_json"]

#: ``config.json``'s format: 4 names a fleet's drives by one prior file (``prior``); 3 wrote the
#: scenario, the agent and the control as three objects, a fleet's drives as five settings;
#: 2 wrote one flat object, its components as canonical specs and the candidate priors as
#: resolved; 1 had the policy's options as fields.
CONFIG_FORMAT = 4

#: The settings of a fleet's drives before the prior file (format 3 and earlier), at their defaults.
REMOVED_SETTINGS = {"prior_drives": None, "fleet_vehicle": None, "prior_drives_variance": "prior",
                    "vehicle_scale": 0.0, "fleet_residual_sd": 0.0}


def _setting(name: str):
    opt = RUN_SETTINGS[name]
    return field(default=opt.default, metadata={"option": opt})


class _Part:
    """What the three parts share: every field converted by its declaration when made, a checked
    :meth:`replace`, and their ``config.json`` object."""

    def _convert(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, f.metadata["option"](getattr(self, f.name)))

    def replace(self, **changes):
        """A copy with some settings changed, checked again."""
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict:
        """The settings as plain JSON values: components as canonical specs (``gp-bucb[xi=0.5]``),
        candidate priors as resolved (:func:`evroute.priors.candidates.describe_candidates`)."""
        out: dict = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Component):
                v = v.label
            elif f.name == "priors" and v is not None:
                v = describe_candidates(list(v))
            out[f.name] = v
        return out


@dataclass(frozen=True)
class Scenario(_Part):
    """The world of a run: where (network, trip), who drives (vehicle), what is true (truth, its
    kernel's lengthscale, the vehicle it is drawn around, how it drifts, which roads close), how
    it is observed (the noise), what is known beforehand (σ₀, a fleet's drives) and which priors
    an agent may doubt between. Two runs with the same scenario and seed face the same truth and
    the same noise, whatever their agents; :func:`evroute.runs.problem.prepare_problem` reads nothing
    else, and prepared problems are kept by it."""

    network: str = _setting("network")
    osm: str | None = _setting("osm")
    dem: str | None = _setting("dem")
    route: str | None = _setting("route")
    from_point: str | None = _setting("from_point")
    to_point: str | None = _setting("to_point")
    vehicle: str | None = _setting("vehicle")
    truth: Component = _setting("truth")
    truth_lengthscale: float = _setting("truth_lengthscale")
    truth_prior: str | None = _setting("truth_prior")
    priors: tuple[Candidate, ...] | None = _setting("priors")
    drift: float = _setting("drift")
    closures: Component | None = _setting("closures")
    prior_std: float | None = _setting("prior_std")
    #: a number of Wh, or a per-edge model's spec ``edge[a=…,b_per_km=…,tls=…]`` (:mod:`evroute.priors.noise`)
    noise_std: float | str | None = _setting("noise_std")
    #: a prior file of ``evroute prior fit`` (:mod:`evroute.world.fleet`): a fleet's drives as the prior
    prior: str | None = _setting("prior")
    prior_turns: str = _setting("prior_turns")

    def __post_init__(self) -> None:
        self._convert()
        if (self.from_point is None) != (self.to_point is None):
            raise EvrouteError("a trip between two points needs both: --route LAT,LON:LAT,LON")
        if self.from_point is not None and self.route is not None:
            raise EvrouteError("give a named route or two points (--route LAT,LON:LAT,LON), not both")
        fleet = read_fleet_prior(self.prior) if self.prior is not None else None
        if fleet is not None:  # another vehicle or network than the prior's: refused before any work
            fleet.check_vehicle(load_vehicle(self.vehicle))
            fleet.check_network_name(self.network)
        has_turns = fleet is not None and fleet.turns is not None
        if self.prior_turns is None:  # the fleet's turns where its prior file has them, else physics'
            object.__setattr__(self, "prior_turns", self._default_turns())
        if self.prior_turns == "drives" and self.prior is None:
            raise EvrouteError("--turns drives takes the junctions' prior from a fleet's drives: give their "
                               "prior file with --prior (evroute prior fit DRIVES --out PRIOR)")
        if self.prior_turns == "drives" and not has_turns:
            raise EvrouteError(f"--turns drives: the prior {self.prior} has no turns (no two of the fleet's cars "
                               "took the same turn); use --turns physics")
        TRUTHS.get(self.truth.name).check_installed()  # an extra not installed: one line now
        if self.truth_prior is not None:
            load_vehicle(self.truth_vehicle())

    def _default_turns(self) -> str:
        """``--turns``' default: drives where the prior file has the fleet's turns, else physics."""
        return "drives" if self.prior is not None and read_fleet_prior(self.prior).turns is not None else "physics"

    def replace(self, **changes):
        """A copy with some settings changed, checked again; another prior file takes its own default
        of ``--turns`` unless the turns' prior was given otherwise."""
        if "prior" in changes and "prior_turns" not in changes and self.prior_turns == self._default_turns():
            changes["prior_turns"] = None
        return super().replace(**changes)

    @property
    def static(self) -> bool:
        """Whether the world stays as it is: no drift, no road closes."""
        return not self.drift and self.closures is None

    def candidates(self) -> list[Candidate]:
        """The candidate priors (paper 004): :attr:`priors`, or every vehicle preset."""
        return list(self.priors) if self.priors is not None else parse_candidates(None)

    def truth_vehicle(self) -> str | None:
        """The vehicle of :attr:`truth_prior`: a candidate's vehicle when it names one of the
        candidates (its kernel settings and ε are not carried over: see ``truth_lengthscale`` and
        ``drift``), else the preset or file it names; None: the run's vehicle."""
        if self.truth_prior is None:
            return None
        for c in self.candidates():
            if c.name == self.truth_prior:
                return c.vehicle
        return self.truth_prior


@dataclass(frozen=True)
class PriorSpec(_Part):
    """The agents' prior besides the problem's mean and σ₀: its kernel, the vehicle's unknown
    scale, and where each edge's variance comes from (:func:`evroute.runs.problem.agent_prior` reads
    nothing else, and the agents' priors are kept by it)."""

    kernel: str = _setting("kernel")
    lengthscale: float = _setting("lengthscale")
    kappa: float = _setting("kappa")
    nu: float = _setting("nu")

    def __post_init__(self) -> None:
        self._convert()


@dataclass(frozen=True)
class AgentSpec(PriorSpec):
    """The agent of a run: its prior's settings (the fields of :class:`PriorSpec`, read alone
    as :attr:`prior`), the policy (with its options), the posterior backend it uses (when its
    family is ``gp``) and the weight rule."""

    policy: Component = _setting("policy")
    model: Component = _setting("model")
    weights: str = _setting("weights")
    turn_kernel: str = _setting("turn_kernel")

    def __post_init__(self) -> None:
        self._convert()
        if self.family != "gp" and self.model.name not in ("exact", "bi"):
            what = "its own Bayesian-inference model" if self.family == "bi" else "no posterior model"
            raise EvrouteError(f"--model {self.model.label} is a GP backend for the policies that use one; "
                               f"{self.policy.label} uses {what} (leave --model out)")
        if self.family == "gp":  # an extra that is not installed: one line now, not after the network loads
            MODELS.get(self.model.name).check_installed()

    @property
    def family(self) -> str:
        """The posterior family the policy declared: ``gp``, ``bi`` or ``none``."""
        return policy_family(self.policy)

    @property
    def backend(self) -> str:
        """The posterior backend actually used: ``bi`` for the BI policies, ``none`` for a policy
        without a model, else the model's name (:func:`evroute.bandit.agents.policy_family`)."""
        return self.model.name if self.family == "gp" else self.family

    @property
    def prior(self) -> PriorSpec:
        """The prior's settings (:class:`PriorSpec`)."""
        return PriorSpec(**{f.name: getattr(self, f.name) for f in fields(PriorSpec)})


@dataclass(frozen=True)
class RunControl(_Part):
    """The schedule of a run and what is computed beside it: the horizon, the seed (of the truth,
    the noise and the agent), and the exact optimum (a diagnostic)."""

    horizon: int = _setting("horizon")
    seed: int = _setting("seed")
    exact_optimum: bool = _setting("exact_optimum")
    exact_optimum_time_limit: float = _setting("exact_optimum_time_limit")

    def __post_init__(self) -> None:
        self._convert()


#: The settings of each part, by field (the world, the agent, the schedule).
SCENARIO_SETTINGS = tuple(f.name for f in fields(Scenario))
AGENT_SPEC_SETTINGS = tuple(f.name for f in fields(AgentSpec))
CONTROL_SETTINGS = tuple(f.name for f in fields(RunControl))
#: Which part each setting of :data:`RUN_SETTINGS` belongs to (``scenario``, ``agent``, ``control``).
SETTING_PART: dict[str, str] = {**dict.fromkeys(SCENARIO_SETTINGS, "scenario"),
                                **dict.fromkeys(AGENT_SPEC_SETTINGS, "agent"),
                                **dict.fromkeys(CONTROL_SETTINGS, "control")}
_PARTS = (("scenario", Scenario), ("agent", AgentSpec), ("control", RunControl))


@dataclass(frozen=True, init=False)
class SimulationConfig:
    """Everything that defines a run, resolved; saved as ``config.json`` (reproduces it exactly):
    a :class:`Scenario` (the world), an :class:`AgentSpec` (the agent) and a :class:`RunControl`
    (the schedule).

    Made from the parts, from keyword settings (:data:`RUN_SETTINGS`: texts, numbers, or already
    resolved components), or both (the settings then change the parts given); each setting is
    checked and converted by its declaration, and a bad value is one :class:`EvrouteError` line.
    Every setting reads back by name (``cfg.horizon`` is ``cfg.control.horizon``). ``policy``,
    ``model``, ``truth`` and ``closures`` become :class:`~evroute.specs.Component`
    (``SimulationConfig(policy="gp-bucb[xi=0.5]").policy.label``), ``priors`` a tuple of
    :class:`~evroute.priors.candidates.Candidate`.

    Examples
    --------
    >>> cfg = SimulationConfig(network="synthetic", policy="gp-bucb[xi=0.5]", horizon=40)
    >>> cfg.policy.label, cfg.policy["xi"], cfg.backend
    ('gp-bucb[xi=0.5]', 0.5, 'exact')
    >>> cfg.scenario.network, cfg.agent.policy.name, cfg.control.horizon
    ('synthetic', 'gp-bucb', 40)
    """

    scenario: Scenario
    agent: AgentSpec
    control: RunControl

    def __init__(self, scenario: Scenario | None = None, agent: AgentSpec | None = None,
                 control: RunControl | None = None, **settings) -> None:
        unknown = sorted(set(settings) - set(SETTING_PART))
        if unknown:
            raise TypeError(f"SimulationConfig got unknown setting(s): {', '.join(unknown)}")
        if settings.get("prior") is not None and scenario is None and agent is None:
            # what the prior file stands for, where not given (a copy keeps its own: replace)
            settings = {**prior_file_settings(settings["prior"], settings), **settings}
        given = {"scenario": scenario, "agent": agent, "control": control}
        for part, cls in _PARTS:
            mine = {k: v for k, v in settings.items() if SETTING_PART[k] == part}
            value = given[part]
            if value is None:
                value = cls(**mine)
            elif not isinstance(value, cls):
                raise TypeError(f"SimulationConfig's {part} must be a {cls.__name__}, not {type(value).__name__}")
            elif mine:
                value = value.replace(**mine)
            object.__setattr__(self, part, value)
        self._check()

    def _check(self) -> None:
        """What the parts can only check together."""
        if ONE_NOISE_LEVEL in POLICIES.get(self.policy.name).needs and isinstance(self.noise_std, str):
            raise EvrouteError(f"{self.policy.label} assumes one noise level for every edge (its confidence bounds "
                               "take one sigma); give --noise-std a number, or use an index agent (gp-ucb, gp-ts, "
                               "bi-ts, ...) with the per-edge model")

    def __getattr__(self, name: str):
        part = SETTING_PART.get(name)
        if part is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(object.__getattribute__(self, part), name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(SETTING_PART))

    # -- views --------------------------------------------------------------------------

    @property
    def family(self) -> str:
        """The posterior family the policy declared: ``gp``, ``bi`` or ``none``."""
        return self.agent.family

    @property
    def backend(self) -> str:
        """The posterior backend actually used (:attr:`AgentSpec.backend`)."""
        return self.agent.backend

    def settings(self) -> dict:
        """Every setting by name, resolved, in :data:`RUN_SETTINGS`' order."""
        return {name: getattr(self, name) for name in RUN_SETTINGS}

    def candidates(self) -> list[Candidate]:
        """The candidate priors (paper 004): :attr:`Scenario.priors`, or every vehicle preset."""
        return self.scenario.candidates()

    def prior_names(self) -> list[str]:
        """The candidate priors' names."""
        return [c.name for c in self.candidates()]

    def truth_vehicle(self) -> str | None:
        """The vehicle the truth is drawn around (:meth:`Scenario.truth_vehicle`)."""
        return self.scenario.truth_vehicle()

    def replace(self, **changes) -> SimulationConfig:
        """A copy with some settings (or parts) changed, checked again."""
        parts = {part: changes.pop(part, getattr(self, part)) for part, _ in _PARTS}
        return SimulationConfig(**parts, **changes)

    # -- config.json ------------------------------------------------------------------------

    def to_json(self) -> dict:
        """``config.json``'s form (:data:`CONFIG_FORMAT` 4): the three parts as three objects of
        plain JSON values (:meth:`Scenario.to_json`)."""
        return {"format": CONFIG_FORMAT, **{part: getattr(self, part).to_json() for part, _ in _PARTS}}

    @classmethod
    def from_json(cls, data: dict) -> SimulationConfig:
        """A configuration from :meth:`to_json`'s form, or from a ``config.json`` of any format."""
        d = normalise_config_json(data)
        settings = {k: v for k, v in d.items() if k in SETTING_PART}
        settings["priors"] = candidates_from_json(settings.get("priors"))
        return cls(**settings)


def prior_file_settings(prior, given=()) -> dict:
    """The settings a prior file (``--prior``, :func:`evroute.world.fleet.read_fleet_prior`) stands for
    that are not in ``given``: its network (with the OSM and DEM it was loaded with) unless the
    network or a trip's points are given, its agents' vehicle, σ₀, the noise and ℓ
    (:meth:`evroute.world.fleet.FleetPrior.settings`).

    Returns
    -------
    dict
        The settings by name.
    """
    fp = read_fleet_prior(RUN_SETTINGS["prior"](prior, "--prior"))
    out = {k: v for k, v in fp.settings().items() if k not in given}
    if "network" in given:  # another network than the prior's: its files are the run's own
        out.pop("osm", None)
        out.pop("dem", None)
    return out


def _spec(name: str, options: dict) -> str:
    """``name[k=v,...]`` from a name and raw option values (format 1's fields)."""
    inner = ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in options.items())
    return f"{name}[{inner}]" if inner else name


def flat_config_json(data: dict) -> dict:
    """A ``config.json`` of any format as one flat object (the settings by name beside its other
    keys: ``format``, ``evroute_version``, ``resolved``): format 3's three parts merged, formats
    1 and 2 (and a flat object already) as they are. Nothing is resolved or checked
    (:func:`normalise_config_json` does)."""
    if not isinstance(data, dict):
        raise EvrouteError(f"a run configuration must be a JSON object, not {type(data).__name__}")
    if not isinstance(data.get("format"), int) or data["format"] < 3 or not set(data) & set(dict(_PARTS)):
        return dict(data)  # format 1 or 2, or already flat
    out = {k: v for k, v in data.items() if k not in dict(_PARTS)}
    for part, _ in _PARTS:
        section = data.get(part)
        if not isinstance(section, dict):
            raise EvrouteError(f"a run configuration of format {data['format']} has no {part!r} object")
        out.update(section)
    return out


def normalise_config_json(data: dict) -> dict:
    """A ``config.json`` (or a task's configuration) of any format as one flat object of the
    settings by name (:func:`flat_config_json`), its components as canonical specs: format 1 kept
    the policy's options as the fields ``omega``, ``xi``, ``beta_scale``, ``joint_samples`` and
    ``policy_options``, the backend's as ``model_options``, and the candidate priors as text
    (resolved in ``resolved.candidates``). Registries canonicalise the labels; nothing is read
    from disk."""
    d = flat_config_json(data)
    if d.get("format", 1) == 1:
        policy = resolve_policy(str(d.get("policy", "gp-ts")))
        opts = {"omega": d.get("omega"), "xi": d.get("xi"), "beta_scale": d.get("beta_scale"),
                "joint": d.get("joint_samples")}
        declared = {o.name for o in POLICIES.get(policy.name).options}
        given = {k: v for k, v in opts.items() if k in declared and v is not None}
        given.update(d.get("policy_options") or {})
        d["policy"] = POLICIES.resolve(policy.name, **given).label
        d["model"] = MODELS.resolve(_spec(str(d.get("model", "exact")), d.get("model_options") or {})).label
        resolved = d.get("resolved") if isinstance(d.get("resolved"), dict) else {}
        d["priors"] = resolved.get("candidates") if d.get("priors") is not None else None
        for key in ("omega", "xi", "beta_scale", "joint_samples", "policy_options", "model_options"):
            d.pop(key, None)
    else:
        d["policy"] = resolve_policy(d["policy"]).label
        d["model"] = resolve_model(d["model"]).label
    used = {k: d[k] for k, default in REMOVED_SETTINGS.items() if d.get(k, default) not in (default, None)
            and not (k == "prior_drives_variance" and d.get(k) == "prior")}
    if used:
        drives = d.get("prior_drives")
        raise EvrouteError(f"this run configuration (format {d.get('format', 1)}) used a fleet's drives as settings "
                           f"an earlier evroute had ({', '.join('--' + k.replace('_', '-') for k in used)}); a fleet's "
                           f"drives are now one prior file: evroute prior fit {drives or 'DRIVES'} --out prior.json "
                           "(DRIVES the folder of evroute drives import), then --prior prior.json")
    for k in REMOVED_SETTINGS:
        d.pop(k, None)
    d["format"] = CONFIG_FORMAT
    d["truth"] = TRUTHS.resolve(d.get("truth") or "gp").label
    # the junctions' prior by its names before the honest benchmark (learnt always, but the oracle's)
    d["prior_turns"] = {"truth": "oracle", "speed-change": "physics"}.get(d.get("prior_turns"), d.get("prior_turns"))
    if d["prior_turns"] is None:
        d.pop("prior_turns")
    d["closures"] = CLOSURES.resolve(d["closures"]).label if d.get("closures") not in (None, "", "none") else None
    return d
