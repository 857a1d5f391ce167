"""Config files and presets: what ``--config FILE`` and ``--preset NAME`` of ``evroute simulate``
and ``evroute compare`` read (:class:`ConfigFile`), the presets (the papers' experiments, named
config files: :data:`PRESETS`) and the axes of a comparison grid.

Declarations only, like :mod:`evroute.settings`: ``--help`` reads them without importing the
numerical libraries; :mod:`evroute.runs.grid` builds grids from them.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from .errors import EvrouteError
from .settings import RUN_SETTINGS, unfold_settings
from .specs import split_list

__all__ = ["ConfigFile", "PRESETS", "PAPER_ROUTES", "DEFAULT_POLICIES", "AXES", "SWEEPABLE", "GRID_KEYS",
           "is_run_config"]

#: The six policies of paper 003 Fig. 2, the default of `evroute compare --policies`.
DEFAULT_POLICIES = ("gp-ucb", "gp-bucb", "gp-ts", "bi-ucb", "bi-bucb", "bi-ts")

#: The axes every grid has, with how ``compare`` gives them (a setting on an axis is not swept
#: as other settings are; ``lengthscale`` is swept with ``--sweep`` all the same).
AXES = {"route": "--routes", "from_point": "--routes", "to_point": "--routes", "policy": "--policies",
        "lengthscale": "--sweep lengthscale=V1,V2", "seed": "--seeds", "network": "--routes", "osm": "--osm",
        "dem": "--dem", "priors": "--priors", "truth_lengthscale": "--truth NAME[lengthscale=...]"}
#: The settings ``--sweep NAME=V1,V2`` may sweep: the agents' lengthscale (an axis of its own) and
#: every setting of a run that is not an axis.
SWEEPABLE = ("lengthscale", *(name for name in RUN_SETTINGS if name not in AXES))

#: A config file's keys beside the run settings: a comparison grid's axes and sweeps (``simulate``
#: runs the grid's first cell: each axis's first value).
GRID_KEYS = ("routes", "policies", "seeds", "lengthscales", "sweep")

PAPER_ROUTES = ("luxembourg:A", "luxembourg:B", "monaco:A", "monaco:B")


def _texts(key: str, value, where: str) -> tuple[str, ...]:
    """A list of texts (or one comma-separated text) of a config file."""
    if isinstance(value, str):
        value = split_list(value)
    if not isinstance(value, list | tuple) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise EvrouteError(f"{where}: {key} must be a non-empty list of texts, got {value!r:.80}")
    return tuple(v.strip() for v in value)


def _numbers(key: str, value, where: str) -> tuple[float, ...]:
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = [value]
    if isinstance(value, str):
        value = split_list(value)
    try:
        out = tuple(float(v) for v in value if not isinstance(v, bool))
    except (TypeError, ValueError):
        out = ()
    if not out or len(out) != len(value):
        raise EvrouteError(f"{where}: {key} must be a non-empty list of numbers, got {value!r:.80}")
    return out


@dataclass(frozen=True)
class ConfigFile:
    """What a config file (``--config FILE``, JSON or TOML) or a preset (``--preset NAME``) holds:
    run settings by name (:data:`evroute.settings.RUN_SETTINGS`; a spec may carry the settings
    folded into it, ``"kernel": "combined[nu=1]"``, as on the command line) and, for ``evroute
    compare``, a grid's axes. ``evroute simulate`` runs the grid's first cell. Options given on
    the command line replace the file's values.

    Checked when made: an unknown key, a value of the wrong type or a setting given twice is one
    :class:`EvrouteError` line naming the file. The settings' values are converted (their bounds
    checked) when the run or the grid is made, as the command line's are.

    Attributes
    ----------
    settings : mapping
        Run settings by name (texts as typed, numbers, or resolved values).
    routes : tuple of str, optional
        The grid's routes, ``NETWORK:ROUTE`` (``compare --routes``).
    policies : tuple of str, optional
        The grid's policies as specs (``compare --policies``).
    seeds : int, optional
        The number of seeds, 0..N-1 (``compare --seeds``).
    lengthscales : tuple of float, optional
        The agents' lengthscales swept (``compare --sweep lengthscale=...``).
    sweep : mapping of str to tuple
        Other settings swept (``compare --sweep NAME=V1,V2``).
    description : str
        What it is (a preset's line in ``--help`` and the docs).
    name : str, optional
        The preset's name, or the file's path (for messages).

    Examples
    --------
    >>> c = ConfigFile.from_dict({"routes": ["monaco:A"], "kernel": "combined[nu=1]", "horizon": 50})
    >>> c.routes, dict(c.settings)
    (('monaco:A',), {'kernel': 'combined', 'horizon': 50, 'nu': '1'})
    """

    settings: Mapping = field(default_factory=dict)
    routes: tuple[str, ...] | None = None
    policies: tuple[str, ...] | None = None
    seeds: int | None = None
    lengthscales: tuple[float, ...] | None = None
    sweep: Mapping = field(default_factory=dict)
    description: str = ""
    name: str | None = None

    def __post_init__(self) -> None:
        where = self.name or "the configuration"
        settings = unfold_settings(dict(self.settings), spell=lambda n: n)
        unknown = sorted(k for k in settings if k not in RUN_SETTINGS)
        if unknown:
            raise EvrouteError(f"{where}: unknown setting(s) {', '.join(unknown)} (settings: "
                               f"{', '.join(RUN_SETTINGS)}; grid keys: {', '.join(GRID_KEYS)})")
        object.__setattr__(self, "settings", MappingProxyType({k: v for k, v in settings.items() if v is not None}))
        for key in ("routes", "policies"):
            if getattr(self, key) is not None:
                object.__setattr__(self, key, _texts(key, getattr(self, key), where))
        if self.lengthscales is not None:
            object.__setattr__(self, "lengthscales", _numbers("lengthscales", self.lengthscales, where))
        if self.seeds is not None and (isinstance(self.seeds, bool) or not isinstance(self.seeds, int)):
            raise EvrouteError(f"{where}: seeds must be a whole number (seeds 0..N-1), got {self.seeds!r:.40}")
        if not isinstance(self.sweep, Mapping):
            raise EvrouteError(f"{where}: sweep must map settings to their values, e.g. {{\"kappa\": [0.5, 1, 2]}}")
        sweep = {}
        for key, values in self.sweep.items():
            values = split_list(values) if isinstance(values, str) else values
            if not isinstance(values, list | tuple) or not values:
                raise EvrouteError(f"{where}: sweep {key} must be a non-empty list of values")
            sweep[str(key)] = tuple(values)
        object.__setattr__(self, "sweep", MappingProxyType(sweep))
        if not isinstance(self.description, str):
            raise EvrouteError(f"{where}: description must be a text")

    @classmethod
    def from_dict(cls, data, name: str | None = None) -> ConfigFile:
        """A config file's object: run settings and grid keys at the top level (``description``
        too)."""
        where = name or "the configuration"
        if not isinstance(data, dict):
            raise EvrouteError(f"{where} holds {type(data).__name__}, not an object of settings")
        grid = {k: data[k] for k in GRID_KEYS if k in data}
        settings = {k: v for k, v in data.items() if k not in GRID_KEYS and k != "description"}
        return cls(settings=settings, **grid, description=data.get("description", ""), name=name)

    @classmethod
    def read(cls, path: str | Path) -> ConfigFile:
        """A config file: JSON, or TOML by its suffix ``.toml``."""
        text = str(path)
        try:
            raw = Path(path).expanduser().read_text(encoding="utf-8")
            data = tomllib.loads(raw) if text.lower().endswith(".toml") else json.loads(raw)
        except FileNotFoundError:
            raise EvrouteError(f"no such configuration: {text}") from None
        except (OSError, ValueError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise EvrouteError(f"{text} is not a readable configuration ({first})") from None
        return cls.from_dict(data, name=text)

    def to_dict(self) -> dict:
        """The object :meth:`from_dict` reads (a preset written as a file)."""
        out: dict = {"description": self.description} if self.description else {}
        for key in GRID_KEYS:
            value = getattr(self, key)
            if value is not None and value != {} and value != MappingProxyType({}):
                out[key] = dict(value) if key == "sweep" else (list(value) if isinstance(value, tuple) else value)
        return {**out, **{k: v for k, v in self.settings.items()}}

    def first_run(self) -> dict:
        """The settings of the grid's first cell (what ``evroute simulate --config`` runs): the
        settings, each axis's first value (seed 0) and each sweep's first value."""
        out = dict(self.settings)
        if self.routes:
            net, sep, _ = self.routes[0].partition(":")
            if sep:
                out.setdefault("network", net)
            out.setdefault("route", self.routes[0])
        if self.policies:
            out.setdefault("policy", self.policies[0])
        if self.lengthscales:
            out.setdefault("lengthscale", self.lengthscales[0])
        for key, values in self.sweep.items():
            out.setdefault(key, values[0])
        if str(out.get("truth_lengthscale", "")).strip().lower() == "same":
            out["truth_lengthscale"] = out.get("lengthscale", RUN_SETTINGS["lengthscale"].default)
        for key in ("osm", "dem"):  # a map of files by network: the run's network's
            if isinstance(out.get(key), Mapping):
                out[key] = out[key].get(out.get("network", RUN_SETTINGS["network"].default))
        return {k: v for k, v in out.items() if v is not None}


def is_run_config(path: Path) -> bool:
    """Whether a ``--config`` path is a run's configuration (a run directory, or a ``config.json``
    evroute wrote: it has a ``format``)."""
    if path.is_dir():
        return True
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "format" in data


def _preset(name: str, description: str, *, policies, routes=PAPER_ROUTES, lengthscales=(1.0,), **settings):
    """A paper's experiment: 5 seeds, T = 500, and the papers' truth (a draw of the GP prior, ``gp``:
    it creates energy, so its regret is the paper's, against the rectified route handed the truth)
    and rectified weights (Algorithm 2), whatever the defaults of ``--truth`` and ``--weights``."""
    return ConfigFile(settings={"horizon": 500, "weights": "rectified", "truth": "gp", **settings},
                      routes=routes, policies=policies, seeds=5, lengthscales=lengthscales,
                      description=description, name=name)


#: The papers' experiments (003 Sec. 4.2 and App. C.1; 000; 004), as config files. The paper's text
#: gives the lengthscale range only ("varying between 0.1 and 2.0"; the values are in its Fig. 4–5).
PRESETS: dict[str, ConfigFile] = {p.name: p for p in (
    _preset("paper-fig2", "003 Fig. 2: GP vs BI with UCB, BUCB and TS (ω = ξ = 1), 4 routes, 5 seeds, T = 500",
            policies=DEFAULT_POLICIES),
    _preset("paper-fig3", "003 Fig. 3: GP-BUCB (ω, ξ) = (1, 1), (1, 0.5); GP-UCB with β_t and 0.5 β_t",
            policies=("gp-bucb", "gp-bucb[xi=0.5]", "gp-ucb", "gp-ucb[beta_scale=0.5]")),
    _preset("bounds", "000 in evroute: AMM, DMM, AY, IGP lower bounds against GP-UCB and GP-TS, monaco:B and "
            "luxembourg:A, 5 seeds, T = 500 (run it with --truth gp and --truth rkhs[B=10])",
            routes=("monaco:B", "luxembourg:A"), policies=("gp-amm", "gp-dmm", "gp-ay", "gp-igp", "gp-ucb", "gp-ts")),
    _preset("priors", "004 in evroute, \"which vehicle am I?\": the truth around delivery-van, the candidates every "
            "vehicle preset; PE-GP-UCB, MLE, FB, RB, and GP-UCB under the run's vehicle (sumo-ev: a wrong prior; add "
            "--vehicle delivery-van --policies gp-ucb for the true one); variants: --truth gp[closures=alternate], "
            "--truth gp[drift=0.01] (with a candidate delivery-van[eps=0.01] in --priors)",
            routes=("monaco:B", "luxembourg:A"), policies=("gp-pe", "gp-mle", "gp-fb", "gp-rb", "gp-ucb"),
            truth_prior="delivery-van"),
    _preset("paper-lengthscale", "003 Fig. 4–5 (App. C.1): GP/BI-BUCB and GP/BI-TS for lengthscales 0.1 to 2.0",
            policies=("gp-bucb", "gp-ts", "bi-bucb", "bi-ts"), lengthscales=(0.1, 0.25, 0.5, 1.0, 1.5, 2.0)),
)}
