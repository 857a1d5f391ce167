"""Comparison grids: the paper's presets, policy specs and the grid of runs they span.

A comparison is a grid of cells: route × policy (with its β_t variant) × lengthscale × seed
(paper 003 Sec. 4.2: 6 policies × 4 routes × 5 seeds × T = 500, the β_t parametrisations
of Fig. 3 and the lengthscale sweep of App. C.1). :func:`make_grid` builds one from
command-line values; ``grid.json`` (:meth:`Grid.to_dict`) describes it in a compare directory.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .config import SimulationConfig
from .errors import EvrouteError
from .kernels import check_lengthscale
from .specs import split_list
from .validate import int_in, positive_float, positive_int

#: The most seeds of a grid (seeds 0..N-1) and the most runs (cells) a grid may have: a million
#: runs of the paper's size take days on one machine; more is a typo, refused before any work.
MAX_SEEDS = 10_000
MAX_RUNS = 1_000_000

__all__ = ["PRESETS", "PAPER_ROUTES", "DEFAULT_POLICIES", "GRID_FORMAT", "PolicySpec", "parse_policy_spec",
           "Cell", "Grid", "make_grid", "load_grid", "parse_routes", "parse_lengthscales",
           "parse_truth_lengthscale", "parse_file_map", "fmt_number", "is_osm_file"]

GRID_FORMAT = 1
DEFAULT_POLICIES = ("gp-ucb", "gp-bucb", "gp-ts", "bi-ucb", "bi-bucb", "bi-ts")


PAPER_ROUTES = ("luxembourg:A", "luxembourg:B", "monaco:A", "monaco:B")

#: The paper's experiments (003 Sec. 4.2 and App. C.1). The paper's text gives the
#: lengthscale range only ("varying between 0.1 and 2.0"; the values are in its Fig. 4–5).
PRESETS: dict[str, dict] = {
    "paper-fig2": {
        "description": "003 Fig. 2: GP vs BI with UCB, BUCB and TS (ω = ξ = 1), 4 routes, 5 seeds, T = 500",
        "routes": PAPER_ROUTES, "policies": DEFAULT_POLICIES, "seeds": 5, "horizon": 500,
        "lengthscales": (1.0,),
    },
    "paper-fig3": {
        "description": "003 Fig. 3: GP-BUCB (ω, ξ) = (1, 1), (1, 0.5); GP-UCB with β_t and 0.5 β_t",
        "routes": PAPER_ROUTES,
        "policies": ("gp-bucb", "gp-bucb[xi=0.5]", "gp-ucb", "gp-ucb[beta_scale=0.5]"),
        "seeds": 5, "horizon": 500, "lengthscales": (1.0,),
    },
    "bounds": {
        "description": "000 in evroute: AMM, DMM, AY, IGP lower bounds against GP-UCB and GP-TS, monaco:B and "
                       "luxembourg:A, 5 seeds, T = 500 (run it with --truth gp and --truth rkhs[B=10])",
        "routes": ("monaco:B", "luxembourg:A"),
        "policies": ("gp-amm", "gp-dmm", "gp-ay", "gp-igp", "gp-ucb", "gp-ts"),
        "seeds": 5, "horizon": 500, "lengthscales": (1.0,),
    },
    "priors": {
        "description": "004 in evroute, \"which vehicle am I?\": the truth around delivery-van, the candidates every "
                       "vehicle preset; PE-GP-UCB, MLE, FB, RB, and GP-UCB under the run's vehicle (sumo-ev: a wrong "
                       "prior; add --vehicle delivery-van --policies gp-ucb for the true one); variants: "
                       "--closures alternate, --drift 0.01 (with a candidate delivery-van[eps=0.01] in --priors)",
        "routes": ("monaco:B", "luxembourg:A"),
        "policies": ("gp-pe", "gp-mle", "gp-fb", "gp-rb", "gp-ucb"),
        "seeds": 5, "horizon": 500, "lengthscales": (1.0,), "truth_prior": "delivery-van",
    },
    "paper-lengthscale": {
        "description": "003 Fig. 4–5 (App. C.1): GP/BI-BUCB and GP/BI-TS for lengthscales 0.1 to 2.0",
        "routes": PAPER_ROUTES, "policies": ("gp-bucb", "gp-ts", "bi-bucb", "bi-ts"),
        "seeds": 5, "horizon": 500, "lengthscales": (0.1, 0.25, 0.5, 1.0, 1.5, 2.0),
    },
}


# --------------------------------------------------------------------------------------
# Policy specs: "gp-bucb[xi=0.5]"
# --------------------------------------------------------------------------------------

#: Options a policy spec may set, per index rule (SimulationConfig field names).
SPEC_OPTIONS = {"ucb": ("beta_scale",), "bucb": ("omega", "xi", "beta_scale"),
                "ts": ("joint_samples",), "greedy": ()}
_SPEC_ALIASES = {"joint_samples": "joint", "w": "omega", "x": "xi", "bs": "beta_scale",
                 "beta-scale": "beta_scale"}
_SPEC_DEFAULTS = {"omega": 1.0, "xi": 1.0, "beta_scale": 1.0, "joint_samples": False}


def fmt_number(x: float) -> str:
    """A short, exact-enough number for names and labels: 1.0 → "1", 0.25 → "0.25"."""
    return f"{float(x):g}"


@dataclass(frozen=True)
class PolicySpec:
    """A policy name with its β_t / sampling options (a variant, e.g. GP-BUCB with ξ = 0.5)."""

    name: str
    omega: float = 1.0
    xi: float = 1.0
    beta_scale: float = 1.0
    joint_samples: bool = False
    #: the agent's other options as sorted (name, value) pairs (``gp-ucb[beta=002]``)
    extra: tuple = ()

    @property
    def family(self) -> str:
        return self.name.split("-", 1)[0]

    @property
    def rule(self) -> str:
        return self.name.split("-", 1)[1]

    def options(self) -> dict:
        """The non-default options, in a fixed order."""
        out = {k: getattr(self, k) for k in ("omega", "xi", "beta_scale", "joint_samples")
               if getattr(self, k) != _SPEC_DEFAULTS[k]}
        out.update(self.extra)
        return out

    @property
    def label(self) -> str:
        """Canonical spec text: ``gp-bucb[xi=0.5]``; just the name for the defaults."""
        opts = self.options()
        if not opts:
            return self.name
        inner = ",".join(f"{'joint' if k == 'joint_samples' else k}={_fmt_value(v)}" for k, v in opts.items())
        return f"{self.name}[{inner}]"

    @property
    def tag(self) -> str:
        """The run-name part of the options: ``-w1-x0.5``, ``-bs0.5``, ``-joint``."""
        opts = self.options()
        out = ""
        if "omega" in opts or "xi" in opts:
            out += f"-w{fmt_number(self.omega)}-x{fmt_number(self.xi)}"
        if "beta_scale" in opts:
            out += f"-bs{fmt_number(self.beta_scale)}"
        if opts.get("joint_samples"):
            out += "-joint"
        for k, v in self.extra:
            out += f"-{_safe(k)}{_safe(_fmt_value(v))}"
        return out

    @classmethod
    def from_config(cls, cfg: dict) -> PolicySpec:
        """The spec of a saved run's ``config.json`` (options that do not apply are dropped)."""
        name = str(cfg["policy"]).lower()
        rule = name.partition("-")[2]
        kw = {k: cfg.get(k, _SPEC_DEFAULTS[k]) for k in SPEC_OPTIONS.get(rule, ())}
        extra = tuple(sorted((cfg.get("policy_options") or {}).items()))
        return cls(name, **kw, extra=extra)


def parse_policy_spec(text: str) -> PolicySpec:
    """Parse ``gp-bucb``, ``gp-bucb[xi=0.5]``, ``gp-ucb[beta_scale=0.5]``, ``gp-ts[joint=true]``.

    The options of each policy are those its agent declares (:func:`evroute.agents.agent_options`:
    ucb ``beta_scale``; bucb ``omega``, ``xi``, ``beta_scale`` (003 Theorem 3.1:
    η_t = √(2π)^ω / (2|A|^ω t^ξ)); ts ``joint``), given positive here; short aliases ``w``,
    ``x``, ``bs``. Anything else is a one-line :class:`EvrouteError`.
    """
    from .agents import agent_names, agent_options
    from .specs import parse_spec

    name, raw = parse_spec(text, "policy", "gp-bucb[xi=0.5]")
    if name not in agent_names():
        raise EvrouteError(f"unknown policy {name!r}; choose one of: {', '.join(agent_names())}")
    declared = {o.name: o for o in agent_options(name)}
    kw: dict = {}
    extra: dict = {}
    for key, value in raw.items():
        key = _SPEC_ALIASES.get(key, key)
        field_name = "joint_samples" if key == "joint" else key
        if key not in declared:
            raise EvrouteError(f"policy {text!r}: unknown option {key!r} for {name} "
                               f"(accepted: {', '.join(declared) or 'none'})")
        if key == "joint":
            kw[field_name] = declared[key].convert("joint", value)
        elif field_name in _SPEC_DEFAULTS:
            kw[field_name] = _positive(value, f"policy {text!r}: {key} must be a positive number, got {value!r}")
        else:
            converted = declared[key].convert(key, value)
            if converted != declared[key].default:
                extra[key] = converted
    return PolicySpec(name, **kw, extra=tuple(sorted(extra.items())))


def _fmt_value(v) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int | float):
        return fmt_number(v)
    return str(v)



def _positive(value, error: str) -> float:
    """:func:`evroute.validate.positive_float` with the caller's message."""
    try:
        return positive_float("value", value)
    except EvrouteError:
        raise EvrouteError(error) from None


# --------------------------------------------------------------------------------------
# The grid
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One run of a grid."""

    network: str
    route: str  # fully qualified, e.g. "monaco:A"
    policy: PolicySpec
    lengthscale: float
    seed: int

    @property
    def route_letter(self) -> str:
        return self.route.partition(":")[2]


@dataclass
class Grid:
    """A comparison grid: every route × policy × lengthscale × seed.

    ``osm`` and ``dem`` map a network name to a file (as ``--osm``/``--dem`` of simulate).
    """

    routes: list[str]
    policies: list[PolicySpec]
    seeds: list[int]
    horizon: int = 500
    model: str = "exact"
    lengthscales: list[float] = field(default_factory=lambda: [1.0])
    osm: dict = field(default_factory=dict)
    dem: dict = field(default_factory=dict)
    vehicle: str | None = None
    kernel: str = "combined"
    model_options: dict = field(default_factory=dict)
    preset: str | None = None
    #: lengthscale of the kernel the true f is sampled from: a number (the paper's is 1) or
    #: ``"same"``, each cell's own lengthscale (a sweep then changes the environment too)
    truth_lengthscale: float | str = 1.0
    #: the ground truth of every cell: ``gp`` or ``rkhs[B=…]`` (see :class:`SimulationConfig`)
    truth: str = "gp"
    #: candidate priors (gp-pe) and the truth's vehicle (paper 004; see :class:`SimulationConfig`)
    priors: str | None = None
    truth_prior: str | None = None
    #: the environment: drift rate and road closures (paper 004; see :class:`SimulationConfig`)
    drift: float = 0.0
    closures: str | None = None

    @property
    def networks(self) -> list[str]:
        return list(dict.fromkeys(r.partition(":")[0] for r in self.routes))

    def cells(self) -> list[Cell]:
        """Cells in grid order: route, lengthscale, policy, seed."""
        return [Cell(r.partition(":")[0], r, p, float(ls), int(s))
                for r in self.routes for ls in self.lengthscales for p in self.policies for s in self.seeds]

    def truth_for(self, cell: Cell) -> float:
        """The truth lengthscale of a cell."""
        return float(cell.lengthscale) if self.truth_lengthscale == "same" else float(self.truth_lengthscale)

    def cell_name(self, cell: Cell) -> str:
        """``<network>-<route>-<policy>[-ls<l>][-tl<l>][-w<ω>-x<ξ>][-bs<scale>][-m<model>]-s<seed>``."""
        name = f"{_safe(Path(cell.network).stem)}-{_safe(cell.route_letter)}-{cell.policy.name}"
        if cell.lengthscale != 1.0:
            name += f"-ls{fmt_number(cell.lengthscale)}"
        if self.truth_for(cell) != 1.0:
            name += f"-tl{fmt_number(self.truth_for(cell))}"
        name += cell.policy.tag
        if self.truth != "gp":
            name += f"-{_safe(self.truth)}"
        if self.truth_prior is not None:
            name += f"-tp{_safe(self.truth_prior)}"
        if self.drift:
            name += f"-drift{fmt_number(self.drift)}"
        if self.closures:
            name += f"-{_safe(self.closures)}"
        if cell.policy.family == "gp" and self.model != "exact":
            name += f"-m{_safe(self.model)}"
        return f"{name}-s{cell.seed}"

    def config(self, cell: Cell) -> SimulationConfig:
        """The SimulationConfig of a cell (what ``evroute simulate`` would run)."""
        p = cell.policy
        return SimulationConfig(
            network=cell.network, osm=self.osm.get(cell.network), dem=self.dem.get(cell.network),
            route=cell.route, policy=p.name, model=self.model if p.family == "gp" else "exact",
            horizon=int(self.horizon), seed=int(cell.seed),
            kernel=self.kernel, lengthscale=float(cell.lengthscale), omega=float(p.omega), xi=float(p.xi),
            beta_scale=float(p.beta_scale), joint_samples=bool(p.joint_samples), vehicle=self.vehicle,
            model_options=dict(self.model_options), policy_options=dict(p.extra), truth_lengthscale=self.truth_for(cell),
            truth=self.truth, priors=self.priors, truth_prior=self.truth_prior, drift=float(self.drift),
            closures=self.closures)

    def validate(self) -> None:
        """Check everything that can be checked without loading a network (one-line errors)."""
        from .models import get_backend

        if not self.routes:
            raise EvrouteError("no routes given")
        if not self.policies:
            raise EvrouteError("no policies given")
        if not self.seeds:
            raise EvrouteError("no seeds given")
        if not self.lengthscales:
            raise EvrouteError("no lengthscales given")
        positive_int("--horizon", self.horizon)
        n_runs = len(self.routes) * len(self.policies) * len(self.lengthscales) * len(self.seeds)
        if n_runs > MAX_RUNS:
            raise EvrouteError(f"the grid has {n_runs:,} runs, more than {MAX_RUNS:,}; split it into several compares")
        get_backend(self.model).resolve(self.model_options)
        for ls in self.lengthscales:
            check_lengthscale("lengthscales", ls)
        tl = self.truth_lengthscale
        if tl != "same":
            if isinstance(tl, bool) or not isinstance(tl, (int, float)) or not math.isfinite(tl):
                raise EvrouteError(f"truth lengthscale must be 'same' or a positive number, got {tl!r}")
            check_lengthscale("truth lengthscale", tl)
        for net in sorted(set(self.osm) | set(self.dem)):
            if net not in self.networks:
                raise EvrouteError(f"--osm/--dem given for network {net!r}, which is not in the grid")
        for name, path in list(self.osm.items()) + list(self.dem.items()):
            if not Path(path).expanduser().is_file():
                raise EvrouteError(f"file not found for network {name}: {path}")
        names = [self.cell_name(c) for c in self.cells()]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise EvrouteError(f"the grid has the same run twice ({dup}); remove duplicate policies, routes or lengthscales")
        self.config(self.cells()[0]).validate()

    def to_dict(self) -> dict:
        """``grid.json``: the grid and its cells (read by ``evroute plot``)."""
        cells = []
        for c in self.cells():
            cells.append({"name": self.cell_name(c), "network": c.network, "route": c.route,
                          "policy": c.policy.label, "policy_name": c.policy.name, "lengthscale": c.lengthscale,
                          "truth_lengthscale": self.truth_for(c),
                          "omega": c.policy.omega, "xi": c.policy.xi, "beta_scale": c.policy.beta_scale,
                          "joint_samples": c.policy.joint_samples, "seed": c.seed})
        return {"format": GRID_FORMAT, "preset": self.preset, "networks": self.networks,
                "routes": list(self.routes), "policies": [p.label for p in self.policies],
                "seeds": list(self.seeds), "horizon": self.horizon, "model": self.model,
                "lengthscales": [float(x) for x in self.lengthscales], "kernel": self.kernel,
                "truth_lengthscale": self.truth_lengthscale, "truth": self.truth, "priors": self.priors,
                "truth_prior": self.truth_prior, "drift": self.drift, "closures": self.closures,
                "vehicle": self.vehicle, "osm": dict(self.osm), "dem": dict(self.dem),
                "model_options": dict(self.model_options), "cells": cells}

    @classmethod
    def from_dict(cls, d: dict) -> Grid:
        return cls(routes=list(d["routes"]), policies=[parse_policy_spec(p) for p in d["policies"]],
                   seeds=[int(s) for s in d["seeds"]], horizon=int(d["horizon"]), model=d["model"],
                   lengthscales=[float(x) for x in d["lengthscales"]], osm=dict(d.get("osm") or {}),
                   dem=dict(d.get("dem") or {}), vehicle=d.get("vehicle"), kernel=d.get("kernel", "combined"),
                   model_options=dict(d.get("model_options") or {}), preset=d.get("preset"),
                   truth_lengthscale=d.get("truth_lengthscale", 1.0), truth=d.get("truth", "gp"),
                   priors=d.get("priors"), truth_prior=d.get("truth_prior"), drift=float(d.get("drift", 0.0)),
                   closures=d.get("closures"))


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.]+", "-", str(text)).strip("-") or "x"


def parse_routes(text: str | Iterable[str], network: str | None = None) -> list[str]:
    """``A,B`` (on ``network``, default synthetic) or ``monaco:A,luxembourg:B`` → full names.

    Named routes are checked against the route registry (one-line error when unknown).
    """
    from .network import network_spec
    from .routes import route_names

    items = split_list(text) if isinstance(text, str) else [str(t).strip() for t in text]
    if not items:
        raise EvrouteError("--routes is empty")
    out = []
    for item in items:
        if ":" in item:
            net, _, letter = item.partition(":")
        else:
            net, letter = network or "synthetic", item
        net, letter = net.strip(), letter.strip()
        if not letter:
            raise EvrouteError(f"bad route {item!r}; expected A, B or NETWORK:ROUTE")
        if not is_osm_file(net):
            network_spec(net)  # unknown network → EvrouteError
            known = route_names(net)
            if f"{net}:{letter}" not in known:
                raise EvrouteError(f"unknown route {net}:{letter}; routes of {net}: {', '.join(known) or 'none'}")
        full = f"{net}:{letter}"
        if full not in out:
            out.append(full)
    return out


def is_osm_file(name: str) -> bool:
    """Whether a grid network name is an OSM file (not a registered network)."""
    from .registry import load_registry

    return name not in load_registry("networks") and Path(name).suffix.lower() in (".osm", ".xml")


def parse_lengthscales(text: str) -> list[float]:
    """``0.1,0.5,1`` → [0.1, 0.5, 1.0] (positive numbers, duplicates removed)."""
    out: list[float] = []
    for item in split_list(text):
        v = _positive(item, f"--lengthscales must be positive numbers separated by commas, got {item!r}")
        if v not in out:
            out.append(v)
    if not out:
        raise EvrouteError("--lengthscales is empty")
    return out


def parse_truth_lengthscale(text: str | float) -> float | str:
    """``same`` or a positive number (the ``--truth-lengthscale`` of compare)."""
    if str(text).strip().lower() == "same":
        return "same"
    return _positive(text, f"--truth-lengthscale must be 'same' or a positive number, got {text!r}")


def parse_file_map(text: str | None, networks: list[str], what: str) -> dict:
    """``--dem PATH`` (one network in the grid) or ``--dem luxembourg=PATH,monaco=PATH2``."""
    if not text:
        return {}
    out = {}
    for item in split_list(text):
        net, sep, path = item.partition("=")
        if not sep:
            if len(networks) != 1:
                raise EvrouteError(f"the grid has several networks: give --{what} as NETWORK=PATH[,NETWORK=PATH]")
            net, path = networks[0], item
        out[net.strip()] = str(Path(path.strip()).expanduser())
    return out


def make_grid(*, preset: str | None = None, network: str | None = None, routes: str | None = None,
              policies: str | None = None, seeds: int | None = None, horizon: int | None = None,
              model: str | None = None, lengthscales: str | None = None, osm: str | None = None,
              dem: str | None = None, vehicle: str | None = None,
              truth_lengthscale: str | None = None, truth_kind: str | None = None, priors: str | None = None,
              truth_prior: str | None = None, drift: float | None = None, closures: str | None = None) -> Grid:
    """Build a grid from command-line values; options given override the preset's.

    With a preset and ``network`` but no ``routes``, the preset's route letters are taken
    on ``network`` (``--preset paper-fig2 --network monaco`` → monaco:A, monaco:B).
    """
    base: dict = {}
    if preset is not None:
        if preset not in PRESETS:
            raise EvrouteError(f"unknown preset {preset!r}; choose one of: {', '.join(PRESETS)}")
        base = PRESETS[preset]
    if routes is not None:
        route_list = parse_routes(routes, network)
    elif "routes" in base:
        if network is not None:
            letters = list(dict.fromkeys(r.partition(":")[2] for r in base["routes"]))
            route_list = parse_routes(letters, network)
        else:
            route_list = parse_routes(list(base["routes"]))
    else:
        route_list = parse_routes("A", network)
    policy_specs = [parse_policy_spec(p) for p in (
        split_list(policies) if policies is not None else base.get("policies", DEFAULT_POLICIES))]
    if policies is not None and not policy_specs:
        raise EvrouteError("--policies is empty")
    n_seeds = seeds if seeds is not None else base.get("seeds", 5)
    int_in("--seeds (the number of seeds)", n_seeds, 1, MAX_SEEDS)
    hz = horizon if horizon is not None else base.get("horizon", 500)
    positive_int("--horizon", hz)
    ls = parse_lengthscales(lengthscales) if lengthscales is not None else list(base.get("lengthscales", (1.0,)))
    truth = parse_truth_lengthscale(truth_lengthscale if truth_lengthscale is not None
                                    else base.get("truth_lengthscale", 1.0))
    nets = list(dict.fromkeys(r.partition(":")[0] for r in route_list))
    from .models import parse_model_spec

    model_name, model_options = parse_model_spec(model or "exact")
    grid = Grid(routes=route_list, policies=policy_specs, seeds=list(range(n_seeds)), horizon=hz,
                model=model_name, model_options=model_options, lengthscales=ls, osm=parse_file_map(osm, nets, "osm"),
                dem=parse_file_map(dem, nets, "dem"), vehicle=vehicle, preset=preset,
                truth_lengthscale=truth, truth=str(truth_kind if truth_kind is not None else base.get("truth", "gp")),
                priors=priors if priors is not None else base.get("priors"),
                truth_prior=truth_prior if truth_prior is not None else base.get("truth_prior"),
                drift=float(drift if drift is not None else base.get("drift", 0.0)),
                closures=closures if closures is not None else base.get("closures"))
    grid.validate()
    if vehicle is not None:
        from .energy import load_vehicle

        load_vehicle(vehicle)
    return grid



def load_grid(out: str | os.PathLike) -> Grid | None:
    """The grid of a compare directory (``grid.json``), or None."""
    path = Path(out) / "grid.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise TypeError(f"it holds {type(data).__name__}, not a JSON object")
        return Grid.from_dict(data)
    except EvrouteError as exc:
        raise EvrouteError(f"{path} is not a valid grid description ({exc})") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise EvrouteError(f"{path} is not a valid grid description ({type(exc).__name__}: {exc})") from None
