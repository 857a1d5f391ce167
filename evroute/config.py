"""The configuration of one run (:class:`SimulationConfig`), saved as ``config.json``."""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import EvrouteError
from .kernels import KERNEL_KINDS, check_kappa, check_lengthscale, check_nu
from .validate import MAX_SEED, int_in, number_in, positive_float, positive_int

#: The longest time limit of the exact optimum's MILP (a week).
MAX_TIME_LIMIT = 7 * 24 * 3600.0

__all__ = ["SimulationConfig", "MAX_HORIZON", "LOG_BYTES_PER_ROUND", "LOG_BYTES_PER_EDGE"]

#: The longest run accepted. Each round is logged (one row, plus one per edge driven) and
#: its time kept for the summary's median; beyond 10⁸ rounds the logs alone would be
#: hundreds of GB and the run would take days at ~1 ms a round.
MAX_HORIZON = 100_000_000

#: Rough size of the logs (in memory, as DataFrames): per round and per edge driven.
LOG_BYTES_PER_ROUND = 250
LOG_BYTES_PER_EDGE = 100


@dataclass
class SimulationConfig:
    """Everything that defines a run; saved as ``config.json`` (reproduces it exactly).

    ``model`` may be a spec with options, ``"svgp[inducing=500]"``: it is split into the
    backend name and :attr:`model_options` on construction.
    """

    network: str = "synthetic"
    osm: str | None = None
    dem: str | None = None
    route: str | None = None
    from_point: str | None = None
    to_point: str | None = None
    policy: str = "gp-ts"
    model: str = "exact"
    horizon: int = 500
    seed: int = 0
    kernel: str = "combined"
    lengthscale: float = 1.0
    kappa: float = 1.0
    nu: float = 2.0
    omega: float = 1.0
    xi: float = 1.0
    beta_scale: float = 1.0
    joint_samples: bool = False
    vehicle: str | None = None
    exact_optimum: bool = False
    exact_optimum_time_limit: float = 300.0
    model_options: dict = field(default_factory=dict)
    #: the policy's options other than the four fields above (``gp-ucb[beta=002]``)
    policy_options: dict = field(default_factory=dict)
    #: context lengthscale of the kernel the ground truth f is sampled from (the paper's
    #: kernel lengthscales are 1); ``lengthscale`` is the agent's prior only
    truth_lengthscale: float = 1.0
    #: the ground truth: ``gp`` (a draw from the GP prior, paper 003) or ``rkhs[B=…,anchors=20]``
    #: (‖f − m‖_K = B exactly, paper 000 §7)
    truth: str = "gp"
    #: candidate priors of gp-pe & co. (paper 004): comma-separated vehicle presets or JSON files
    #: (None: every vehicle preset)
    priors: str | None = None
    #: the vehicle whose E_det is the truth's mean (paper 004: the truth drawn from one candidate);
    #: None: ``vehicle``. When given, σ₀ and ς come from its E_det, for the truth and every agent.
    truth_prior: str | None = None
    #: time-varying energies: f_{t+1} = m + √(1−ε)(f_t − m) + √ε g_t (paper 004); 0: static
    drift: float = 0.0
    #: road closures: None, ``alternate`` or ``random[rate=0.05]`` (:class:`evroute.environments.RoadEnvironment`)
    closures: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.policy, str) and "[" in self.policy:
            from .specs import parse_spec

            name, opts = parse_spec(self.policy, "policy", "gp-ucb[beta=002]")
            self.policy = name
            fields = {"beta_scale": "beta_scale", "bs": "beta_scale", "omega": "omega", "w": "omega", "xi": "xi",
                      "x": "xi", "joint": "joint_samples", "joint_samples": "joint_samples"}
            other = {}
            for key, value in opts.items():
                if key in fields:
                    from .agents import agent_options

                    declared = {o.name: o for o in agent_options(name)} if name in _agent_names() else {}
                    opt = declared.get("joint" if fields[key] == "joint_samples" else fields[key])
                    if opt is None and name in _agent_names():
                        raise EvrouteError(f"unknown option(s) for policy {name!r}: {key} "
                                           f"(accepted: {', '.join(declared) or 'none'})")
                    setattr(self, fields[key], opt.convert(key, value) if opt else value)
                else:
                    other[key] = value
            both = sorted(set(other) & set(self.policy_options or {}))
            if both:
                raise EvrouteError(f"policy option(s) given twice: {', '.join(both)}")
            self.policy_options = {**(self.policy_options or {}), **other}
        if isinstance(self.model, str) and "[" in self.model:
            from .models import parse_model_spec

            name, opts = parse_model_spec(self.model)
            both = sorted(set(opts) & set(self.model_options or {}))
            if both:
                raise EvrouteError(f"model option(s) given twice: {', '.join(both)}")
            self.model = name
            self.model_options = {**(self.model_options or {}), **opts}

    def validate(self) -> None:
        """Raise EvrouteError (one line) on a bad value."""
        from .agents import agent_names, policy_family

        if isinstance(self.horizon, bool) or not isinstance(self.horizon, int):
            raise EvrouteError(f"horizon must be a positive integer, got {self.horizon!r}")
        positive_int("horizon", self.horizon)
        if self.horizon > MAX_HORIZON:
            raise EvrouteError(
                f"horizon {self.horizon:,} is too long: at most {MAX_HORIZON:,} rounds (every round is "
                f"logged, ~{LOG_BYTES_PER_ROUND + 50 * LOG_BYTES_PER_EDGE:,} bytes for a 50-edge route, and "
                "its time kept for the summary; 10⁸ rounds would already be ~500 GB of logs and days of "
                "computing)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise EvrouteError(f"seed must be a non-negative integer, got {self.seed!r}")
        int_in("seed", self.seed, 0, MAX_SEED, why="seeds are stored as 64-bit integers")
        if self.kernel not in KERNEL_KINDS:
            raise EvrouteError(f"unknown kernel {self.kernel!r}; choose one of: {', '.join(KERNEL_KINDS)}")
        check_lengthscale("lengthscale", self.lengthscale)
        check_lengthscale("truth lengthscale", self.truth_lengthscale)
        check_kappa("kappa", self.kappa)
        check_nu("nu", self.nu)
        for name in ("omega", "xi", "beta_scale"):
            positive_float(name, getattr(self, name))
        number_in("exact optimum time limit", self.exact_optimum_time_limit, 0, MAX_TIME_LIMIT, lo_open=True,
                  why="seconds")
        if str(self.policy).strip().lower() not in agent_names():
            raise EvrouteError(f"unknown policy {self.policy!r}; choose one of: {', '.join(agent_names())}")
        from .models import get_backend

        backend = get_backend(self.model)
        if policy_family(self.policy) == "bi":
            if self.model not in ("exact", "bi"):
                raise EvrouteError(f"--model {self.model} is a GP backend for the gp-* policies; {self.policy} "
                                   "uses its own Bayesian-inference model (leave --model out)")
        else:
            backend.resolve(self.model_options or {})
        self.truth_options()
        self.prior_names()
        from .environments import parse_closures

        parse_closures(self.closures)
        if isinstance(self.drift, bool) or not isinstance(self.drift, int | float) or not 0 <= self.drift < 1:
            raise EvrouteError(f"drift must be a number in [0, 1), got {self.drift!r}")
        if self.truth_prior is not None:
            from .energy import load_vehicle

            load_vehicle(self.truth_vehicle())
        from .agents import agent_options

        declared = {o.name: o for o in agent_options(self.policy)}
        unknown = sorted(set(self.policy_options or {}) - set(declared))
        if unknown:
            raise EvrouteError(f"unknown option(s) for policy {self.policy!r}: {', '.join(unknown)} "
                               f"(accepted: {', '.join(declared) or 'none'})")
        for key, value in (self.policy_options or {}).items():
            declared[key].convert(key, value)

    def candidates(self) -> list:
        """The candidate priors of :attr:`priors` (:func:`evroute.candidates.parse_candidates`),
        checked; every vehicle preset by default."""
        from .candidates import parse_candidates

        return parse_candidates(self.priors)

    def truth_vehicle(self) -> str | None:
        """The vehicle of :attr:`truth_prior`: a candidate's vehicle when it names one of
        :attr:`priors` (its kernel settings and ε are not carried over: see ``truth_lengthscale``
        and ``drift``), else the preset or file it names; None: the run's vehicle."""
        if self.truth_prior is None:
            return None
        for c in self.candidates():
            if c.name == self.truth_prior:
                return c.vehicle
        return self.truth_prior

    def prior_names(self) -> list[str]:
        """The candidate priors' names."""
        return [c.name for c in self.candidates()]

    def truth_options(self) -> tuple[str, dict]:
        """(kind, options) of :attr:`truth`, checked: ``("gp", {})`` or ``("rkhs", {"B": …,
        "anchors": …})`` (B required)."""
        from .environments import TRUTH_KINDS
        from .specs import parse_kind

        kind, opts = parse_kind(self.truth, "truth", TRUTH_KINDS, "rkhs[B=10]")
        return kind, ({"B": opts["b"], "anchors": opts["anchors"]} if kind == "rkhs" else {})

    @property
    def backend(self) -> str:
        """The posterior backend actually used: ``bi`` for bi-* policies, else ``model``."""
        from .agents import policy_family

        return "bi" if policy_family(self.policy) == "bi" else self.model


def _agent_names() -> tuple[str, ...]:
    from .agents import agent_names

    return tuple(agent_names())
