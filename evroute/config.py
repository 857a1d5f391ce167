"""The one resolved specification of a run (:class:`SimulationConfig`), saved as ``config.json``.

A run is a :class:`Scenario` (the world: network, trip, vehicle, truth, how it changes and which
roads close, the candidate priors) plus the agent (a policy and a posterior backend), the prior
kernel, the horizon and the seed. Every setting is declared once, as an
:class:`~evroute.specs.Option` of the module that owns it (:data:`RUN_SETTINGS` gathers them:
network, routes, energy, agents, models, loop, kernels, environments, candidates, optimum);
nothing else lists them. A :class:`SimulationConfig` converts every value through its
declaration when it is made, so a configuration that exists is valid: its components resolved
(policy, model, truth, closures) and its candidate priors read, once.

:meth:`SimulationConfig.to_json` and :meth:`SimulationConfig.from_json` are the one conversion
that ``config.json``, ``grid.json`` and the executors' tasks share; ``config.json`` has a format
version (:data:`CONFIG_FORMAT`), and run directories of format 1 (before components, with the
policy's options as fields) still read (:func:`normalise_config_json`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields

from .agents import ONE_NOISE_LEVEL, POLICIES, policy_family, resolve_policy
from .candidates import Candidate, candidates_from_json, describe_candidates, parse_candidates
from .energy import load_vehicle
from .environments import CLOSURES, TRUTHS
from .errors import EvrouteError
from .models import MODELS, resolve_model
from .settings import RUN_SETTINGS
from .specs import Component

__all__ = ["SimulationConfig", "Scenario", "RUN_SETTINGS", "SCENARIO_SETTINGS", "CONFIG_FORMAT",
           "normalise_config_json"]

#: ``config.json``'s format: 2 records the policy, the backend, the truth and the closures as
#: canonical specs and the candidate priors as resolved; 1 had the policy's options as fields.
CONFIG_FORMAT = 2

def _setting(name: str):
    opt = RUN_SETTINGS[name]
    return field(default=opt.default, metadata={"option": opt})


@dataclass(frozen=True)
class Scenario:
    """The world of a run: where (network, trip), who drives (vehicle), what is true (truth, its
    kernel's lengthscale, the vehicle it is drawn around, how it drifts, which roads close) and
    which priors an agent may doubt between. Two runs with the same scenario and seed face the
    same truth and the same noise, whatever their agents."""

    network: str
    osm: str | None
    dem: str | None
    route: str | None
    from_point: str | None
    to_point: str | None
    vehicle: str | None
    truth: Component
    truth_lengthscale: float
    truth_prior: str | None
    priors: tuple[Candidate, ...] | None
    drift: float
    closures: Component | None


#: The settings that describe the world, not the agent (:class:`Scenario`'s fields).
SCENARIO_SETTINGS = tuple(f.name for f in fields(Scenario))


@dataclass(frozen=True)
class SimulationConfig:
    """Everything that defines a run, resolved; saved as ``config.json`` (reproduces it exactly).

    Made from keyword settings (:data:`RUN_SETTINGS`: texts, numbers, or already resolved
    components), each checked and converted by its declaration; a bad value is one
    :class:`EvrouteError` line. ``policy``, ``model``, ``truth`` and ``closures`` become
    :class:`~evroute.specs.Component` (``SimulationConfig(policy="gp-bucb[xi=0.5]").policy.label``),
    ``priors`` a tuple of :class:`~evroute.candidates.Candidate`.

    Examples
    --------
    >>> cfg = SimulationConfig(network="synthetic", policy="gp-bucb[xi=0.5]", horizon=40)
    >>> cfg.policy.label, cfg.policy["xi"], cfg.backend
    ('gp-bucb[xi=0.5]', 0.5, 'exact')
    """

    network: str = _setting("network")
    osm: str | None = _setting("osm")
    dem: str | None = _setting("dem")
    route: str | None = _setting("route")
    from_point: str | None = _setting("from_point")
    to_point: str | None = _setting("to_point")
    policy: Component = _setting("policy")
    model: Component = _setting("model")
    weights: str = _setting("weights")
    horizon: int = _setting("horizon")
    seed: int = _setting("seed")
    kernel: str = _setting("kernel")
    lengthscale: float = _setting("lengthscale")
    kappa: float = _setting("kappa")
    nu: float = _setting("nu")
    prior_std: float | None = _setting("prior_std")
    #: a number of Wh, or a per-edge model's spec ``edge[a=…,b_per_km=…,tls=…]`` (:mod:`evroute.noise`)
    noise_std: float | str | None = _setting("noise_std")
    prior_drives: str | None = _setting("prior_drives")
    prior_drives_variance: str = _setting("prior_drives_variance")
    vehicle_scale: float = _setting("vehicle_scale")
    vehicle: str | None = _setting("vehicle")
    exact_optimum: bool = _setting("exact_optimum")
    exact_optimum_time_limit: float = _setting("exact_optimum_time_limit")
    truth_lengthscale: float = _setting("truth_lengthscale")
    truth: Component = _setting("truth")
    priors: tuple[Candidate, ...] | None = _setting("priors")
    truth_prior: str | None = _setting("truth_prior")
    drift: float = _setting("drift")
    closures: Component | None = _setting("closures")

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, f.metadata["option"](getattr(self, f.name)))
        if (self.from_point is None) != (self.to_point is None):
            raise EvrouteError("give both --from and --to (or a --route)")
        if self.from_point is not None and self.route is not None:
            raise EvrouteError("give either --route or --from/--to, not both")
        if self.family != "gp" and self.model.name not in ("exact", "bi"):
            what = "its own Bayesian-inference model" if self.family == "bi" else "no posterior model"
            raise EvrouteError(f"--model {self.model.label} is a GP backend for the policies that use one; "
                               f"{self.policy.label} uses {what} (leave --model out)")
        if ONE_NOISE_LEVEL in POLICIES.get(self.policy.name).needs and isinstance(self.noise_std, str):
            raise EvrouteError(f"{self.policy.label} assumes one noise level for every edge (its confidence bounds "
                               "take one sigma); give --noise-std a number, or use an index agent (gp-ucb, gp-ts, "
                               "bi-ts, ...) with the per-edge model")
        if self.prior_drives_variance == "fleet" and self.prior_drives is None:
            raise EvrouteError("--prior-drives-variance fleet takes the variance from a fleet's drives: give them "
                               "with --prior-drives")
        if self.family == "gp":  # an extra that is not installed: one line now, not after the network loads
            MODELS.get(self.model.name).check_installed()
        TRUTHS.get(self.truth.name).check_installed()
        if self.truth_prior is not None:
            load_vehicle(self.truth_vehicle())

    # -- views --------------------------------------------------------------------------

    @property
    def family(self) -> str:
        """The posterior family the policy declared: ``gp``, ``bi`` or ``none``."""
        return policy_family(self.policy)

    @property
    def backend(self) -> str:
        """The posterior backend actually used: ``bi`` for the BI policies, ``none`` for a policy
        without a model, else the model's name (:func:`evroute.agents.policy_family`)."""
        return self.model.name if self.family == "gp" else self.family

    @property
    def scenario(self) -> Scenario:
        """The world of the run (:class:`Scenario`)."""
        return Scenario(**{name: getattr(self, name) for name in SCENARIO_SETTINGS})

    def candidates(self) -> list[Candidate]:
        """The candidate priors (paper 004): :attr:`priors`, or every vehicle preset."""
        return list(self.priors) if self.priors is not None else parse_candidates(None)

    def prior_names(self) -> list[str]:
        """The candidate priors' names."""
        return [c.name for c in self.candidates()]

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

    def replace(self, **changes) -> SimulationConfig:
        """A copy with some settings changed, checked again."""
        return dataclasses.replace(self, **changes)

    # -- config.json ------------------------------------------------------------------------

    def to_json(self) -> dict:
        """The settings as plain JSON values, components as canonical specs (``gp-bucb[xi=0.5]``),
        candidate priors as resolved (:func:`evroute.candidates.describe_candidates`)."""
        out: dict = {"format": CONFIG_FORMAT}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Component):
                v = v.label
            elif f.name == "priors" and v is not None:
                v = describe_candidates(list(v))
            out[f.name] = v
        return out

    @classmethod
    def from_json(cls, data: dict) -> SimulationConfig:
        """A configuration from :meth:`to_json`'s form, or from a ``config.json`` of any format."""
        d = normalise_config_json(data)
        names = {f.name for f in fields(cls)}
        settings = {k: v for k, v in d.items() if k in names}
        settings["priors"] = candidates_from_json(settings.get("priors"))
        return cls(**settings)


def _spec(name: str, options: dict) -> str:
    """``name[k=v,...]`` from a name and raw option values (format 1's fields)."""
    inner = ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in options.items())
    return f"{name}[{inner}]" if inner else name


def normalise_config_json(data: dict) -> dict:
    """A ``config.json`` (or a task's configuration) in the current format's form, with its
    components as canonical specs: format 1 kept the policy's options as the fields ``omega``,
    ``xi``, ``beta_scale``, ``joint_samples`` and ``policy_options``, the backend's as
    ``model_options``, and the candidate priors as text (resolved in ``resolved.candidates``).
    Registries canonicalise the labels; nothing is read from disk."""
    if not isinstance(data, dict):
        raise EvrouteError(f"a run configuration must be a JSON object, not {type(data).__name__}")
    d = dict(data)
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
        d["format"] = CONFIG_FORMAT
    else:
        d["policy"] = resolve_policy(d["policy"]).label
        d["model"] = resolve_model(d["model"]).label
    d["truth"] = TRUTHS.resolve(d.get("truth") or "gp").label
    d["closures"] = CLOSURES.resolve(d["closures"]).label if d.get("closures") not in (None, "", "none") else None
    return d
