"""Grids of runs (policy comparisons), executors, resume and summary tables.

A comparison is a grid of cells: route × policy (with its β_t variant) × lengthscale × seed
(paper 003 Sec. 4.2: 6 policies × 4 routes × 5 seeds × T = 500, the β_t parametrisations
of Fig. 3 and the lengthscale sweep of App. C.1). Every cell is one ordinary run directory
(:func:`evroute.simulate.write_run`) under ``DIR/runs/<name>``, so the grid inherits the
run's guarantees: a run is written into a temporary sibling folder and renamed at the end,
so a killed run never looks finished.

Resume. Running the same grid into the same ``DIR`` again keeps every finished run whose
``config.json`` matches the cell (not recomputed, files untouched), removes temporary
folders left by killed runs and computes the rest. ``grid.json`` describes the grid;
``summary.csv`` / ``summary.md`` (mean ± standard error over seeds, s.e. = sample std
(ddof = 1) / √n) are written atomically once every run is finished.

Executors. ``local`` (default): a process pool (``--jobs``, default ``os.cpu_count()``;
``jobs = 1`` runs in-process). ``ray``: the same tasks as Ray tasks on a local Ray instance
or a cluster (``pip install "evroute[ray]"``; on a cluster ``DIR`` must be on a shared file
system). A run does not depend on the executor: seeds fix the truth, the noise and the
policy's randomness, and BLAS runs single-threaded in every run (pool, Ray or in-process),
so floating-point reductions are the same everywhere.

Inside a worker, the loaded network, the prepared problem (route, prior, truth) and the
prior kernel matrix are cached in memory, so a process running many cells loads and
builds them once.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import shutil
import sys
import time
import traceback
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import EvrouteError, Interrupted
from .io import atomic_write_json, atomic_write_text, atomic_write_with
from .simulate import SimulationConfig, is_finished_run, limit_blas

GRID_FORMAT = 1
DEFAULT_POLICIES = ("gp-ucb", "gp-bucb", "gp-ts", "bi-ucb", "bi-bucb", "bi-ts")
EXECUTORS = ("local", "ray")
RAY_HINT = 'pip install "evroute[ray]"'

#: Columns of ``summary.csv`` that measure time (they differ between machines and executors).
TIMING_COLUMNS = ("seconds_per_round_mean",)

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
_SPEC_ALIASES = {"joint": "joint_samples", "w": "omega", "x": "xi", "bs": "beta_scale",
                 "beta-scale": "beta_scale"}
_SPEC_DEFAULTS = {"omega": 1.0, "xi": 1.0, "beta_scale": 1.0, "joint_samples": False}


def _fmt(x: float) -> str:
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

    @property
    def family(self) -> str:
        return self.name.split("-", 1)[0]

    @property
    def rule(self) -> str:
        return self.name.split("-", 1)[1]

    def options(self) -> dict:
        """The non-default options, in a fixed order."""
        return {k: getattr(self, k) for k in ("omega", "xi", "beta_scale", "joint_samples")
                if getattr(self, k) != _SPEC_DEFAULTS[k]}

    @property
    def label(self) -> str:
        """Canonical spec text: ``gp-bucb[xi=0.5]``; just the name for the defaults."""
        opts = self.options()
        if not opts:
            return self.name
        inner = ",".join(f"{'joint' if k == 'joint_samples' else k}="
                         f"{str(v).lower() if isinstance(v, bool) else _fmt(v)}" for k, v in opts.items())
        return f"{self.name}[{inner}]"

    @property
    def tag(self) -> str:
        """The run-name part of the options: ``-w1-x0.5``, ``-bs0.5``, ``-joint``."""
        opts = self.options()
        out = ""
        if "omega" in opts or "xi" in opts:
            out += f"-w{_fmt(self.omega)}-x{_fmt(self.xi)}"
        if "beta_scale" in opts:
            out += f"-bs{_fmt(self.beta_scale)}"
        if opts.get("joint_samples"):
            out += "-joint"
        return out

    @classmethod
    def from_config(cls, cfg: dict) -> PolicySpec:
        """The spec of a saved run's ``config.json`` (options that do not apply are dropped)."""
        name = str(cfg["policy"]).lower()
        rule = name.split("-", 1)[1]
        kw = {k: cfg.get(k, _SPEC_DEFAULTS[k]) for k in SPEC_OPTIONS.get(rule, ())}
        return cls(name, **kw)


def split_list(text: str) -> list[str]:
    """Split a comma-separated list, keeping commas inside ``[...]``: ``a[x=1,y=2],b``."""
    items, depth, cur = [], 0, ""
    for ch in str(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    return [i.strip() for i in items if i.strip()]


def parse_policy_spec(text: str) -> PolicySpec:
    """Parse ``gp-bucb``, ``gp-bucb[xi=0.5]``, ``gp-ucb[beta_scale=0.5]``, ``gp-ts[joint=true]``.

    Options per rule: ucb ``beta_scale``; bucb ``omega``, ``xi``, ``beta_scale``
    (003 Theorem 3.1: η_t = √(2π)^ω / (2|A|^ω t^ξ)); ts ``joint``. Anything else is a
    one-line :class:`EvrouteError`.
    """
    from .policies import parse_policy_name

    m = re.fullmatch(r"\s*([A-Za-z0-9_-]+)\s*(?:\[([^\[\]]*)\])?\s*", str(text))
    if not m:
        raise EvrouteError(f"cannot parse policy {text!r}; expected NAME or NAME[key=value,...], "
                           "e.g. gp-bucb[xi=0.5]")
    family, rule = parse_policy_name(m.group(1))
    name = f"{family}-{rule}"
    allowed = SPEC_OPTIONS[rule]
    kw: dict = {}
    for part in (p.strip() for p in (m.group(2) or "").split(",")):
        if not part:
            continue
        key, sep, value = (s.strip() for s in part.partition("="))
        key = _SPEC_ALIASES.get(key.lower(), key.lower())
        if not sep or not value:
            raise EvrouteError(f"policy {text!r}: option {part!r} must be key=value")
        if key not in allowed:
            shown = ", ".join("joint" if a == "joint_samples" else a for a in allowed) or "none"
            raise EvrouteError(f"policy {text!r}: unknown option {key!r} for {name} (accepted: {shown})")
        if key == "joint_samples":
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise EvrouteError(f"policy {text!r}: joint must be true or false, got {value!r}")
            kw[key] = value.lower() in ("true", "1", "yes")
        else:
            kw[key] = _positive(value, f"policy {text!r}: {key} must be a positive number, got {value!r}")
    return PolicySpec(name, **kw)


def _positive(value, error: str) -> float:
    """``float(value)`` if that is a finite number > 0, else :class:`EvrouteError` ``error``."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise EvrouteError(error) from None
    if not (math.isfinite(v) and v > 0):
        raise EvrouteError(error)
    return v


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
            name += f"-ls{_fmt(cell.lengthscale)}"
        if self.truth_for(cell) != 1.0:
            name += f"-tl{_fmt(self.truth_for(cell))}"
        name += cell.policy.tag
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
            model_options=dict(self.model_options), truth_lengthscale=self.truth_for(cell))

    def validate(self) -> None:
        """Check everything that can be checked without loading a network (one-line errors)."""
        from .models import available_models

        if not self.routes:
            raise EvrouteError("no routes given")
        if not self.policies:
            raise EvrouteError("no policies given")
        if not self.seeds:
            raise EvrouteError("no seeds given")
        if not self.lengthscales:
            raise EvrouteError("no lengthscales given")
        if not isinstance(self.horizon, int) or self.horizon <= 0:
            raise EvrouteError(f"--horizon must be a positive integer, got {self.horizon!r}")
        if self.model not in available_models():
            raise EvrouteError(f"unknown model {self.model!r}; choose one of: {', '.join(available_models())}")
        for ls in self.lengthscales:
            if not (isinstance(ls, (int, float)) and math.isfinite(ls) and ls > 0):
                raise EvrouteError(f"lengthscales must be positive numbers, got {ls!r}")
        tl = self.truth_lengthscale
        if tl != "same" and not (isinstance(tl, (int, float)) and not isinstance(tl, bool)
                                 and math.isfinite(tl) and tl > 0):
            raise EvrouteError(f"truth lengthscale must be 'same' or a positive number, got {tl!r}")
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
                "truth_lengthscale": self.truth_lengthscale,
                "vehicle": self.vehicle, "osm": dict(self.osm), "dem": dict(self.dem),
                "model_options": dict(self.model_options), "cells": cells}

    @classmethod
    def from_dict(cls, d: dict) -> Grid:
        return cls(routes=list(d["routes"]), policies=[parse_policy_spec(p) for p in d["policies"]],
                   seeds=[int(s) for s in d["seeds"]], horizon=int(d["horizon"]), model=d["model"],
                   lengthscales=[float(x) for x in d["lengthscales"]], osm=dict(d.get("osm") or {}),
                   dem=dict(d.get("dem") or {}), vehicle=d.get("vehicle"), kernel=d.get("kernel", "combined"),
                   model_options=dict(d.get("model_options") or {}), preset=d.get("preset"),
                   truth_lengthscale=d.get("truth_lengthscale", 1.0))


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
        if not _is_osm_file(net):
            network_spec(net)  # unknown network → EvrouteError
            known = route_names(net)
            if f"{net}:{letter}" not in known:
                raise EvrouteError(f"unknown route {net}:{letter}; routes of {net}: {', '.join(known) or 'none'}")
        full = f"{net}:{letter}"
        if full not in out:
            out.append(full)
    return out


def _is_osm_file(name: str) -> bool:
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
              truth_lengthscale: str | None = None) -> Grid:
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
    if not isinstance(n_seeds, int) or n_seeds < 1:
        raise EvrouteError(f"--seeds must be a positive integer (the number of seeds), got {n_seeds!r}")
    hz = horizon if horizon is not None else base.get("horizon", 500)
    if not isinstance(hz, int) or hz < 1:
        raise EvrouteError(f"--horizon must be a positive integer, got {hz!r}")
    ls = parse_lengthscales(lengthscales) if lengthscales is not None else list(base.get("lengthscales", (1.0,)))
    truth = parse_truth_lengthscale(truth_lengthscale if truth_lengthscale is not None
                                    else base.get("truth_lengthscale", 1.0))
    nets = list(dict.fromkeys(r.partition(":")[0] for r in route_list))
    grid = Grid(routes=route_list, policies=policy_specs, seeds=list(range(n_seeds)), horizon=hz,
                model=model or "exact", lengthscales=ls, osm=parse_file_map(osm, nets, "osm"),
                dem=parse_file_map(dem, nets, "dem"), vehicle=vehicle, preset=preset,
                truth_lengthscale=truth)
    grid.validate()
    if vehicle is not None:
        from .energy import load_vehicle

        load_vehicle(vehicle)
    return grid


# --------------------------------------------------------------------------------------
# Running one cell (in a worker): in-process caches
# --------------------------------------------------------------------------------------

_NETS: OrderedDict = OrderedDict()
_PROBLEMS: OrderedDict = OrderedDict()
_KERNELS: OrderedDict = OrderedDict()
_CACHE_SIZES = {"nets": 4, "problems": 64, "kernels": 2}


def _lru_get(cache: OrderedDict, key, build: Callable, size: int):
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    value = build()
    cache[key] = value
    while len(cache) > size:
        cache.popitem(last=False)
    return value


def clear_worker_caches() -> None:
    """Forget the in-process networks, problems and kernels."""
    _NETS.clear()
    _PROBLEMS.clear()
    _KERNELS.clear()


def cached_network(name: str, osm: str | None = None, dem: str | None = None):
    """The prepared network, loaded once per process."""
    from .network import load_network

    return _lru_get(_NETS, (name, osm, dem), lambda: load_network(name, osm=osm, dem=dem), _CACHE_SIZES["nets"])


def cached_problem(cfg: SimulationConfig):
    """The prepared problem of a run (network, route, prior, truth), once per process.

    It depends on the network, the route, the vehicle, the seed and the truth lengthscale only.
    """
    from .simulate import prepare_problem

    key = (cfg.network, cfg.osm, cfg.dem, cfg.vehicle, cfg.route, cfg.from_point, cfg.to_point, cfg.seed,
           float(cfg.truth_lengthscale))

    def build():
        net = cached_network(cfg.network, cfg.osm, cfg.dem)
        return prepare_problem(cfg, net=net)

    return _lru_get(_PROBLEMS, key, build, _CACHE_SIZES["problems"])


def cached_kernel(cfg: SimulationConfig, problem) -> np.ndarray:
    """The prior covariance of a gp-* run (:func:`evroute.simulate.network_kernel`), once per process.

    Read-only: a model that wants to change it must copy it.
    """
    from .simulate import network_kernel

    key = (problem.net.cache_key, cfg.kernel, float(cfg.lengthscale), float(cfg.kappa), float(cfg.nu),
           float(problem.prior_var))

    def build():
        k = network_kernel(problem.net, cfg.kernel, cfg.lengthscale, cfg.kappa, cfg.nu, problem.prior_var)
        k.setflags(write=False)
        return k

    return _lru_get(_KERNELS, key, build, _CACHE_SIZES["kernels"])


def build_agent(cfg: SimulationConfig, problem):
    """The policy and model of a run, as :func:`evroute.simulate.make_agent` builds them,
    with the prior kernel from the in-process cache."""
    from .simulate import make_agent

    kernel = None if cfg.backend == "bi" else cached_kernel(cfg, problem)
    return make_agent(cfg, problem, kernel=kernel)


def run_cell(cfg: SimulationConfig, out: str | os.PathLike) -> dict:
    """Run one cell and write its run directory ``out`` (replacing an unfinished one).

    Same tables as ``simulate(cfg, out)``; the directory appears (renamed from a
    temporary sibling) only when complete. Returns the run's summary.
    """
    from .simulate import prepare_out_dir, run_bandit, write_run

    cfg.validate()
    out = Path(out)
    tmp = prepare_out_dir(out, overwrite=True)
    try:
        problem = cached_problem(cfg)
        agent = build_agent(cfg, problem)
        result = run_bandit(cfg, problem, agent=agent, log_dir=tmp)
        write_run(result, cfg, problem, out, overwrite=True, tmp=tmp)
        tmp = None
        return result.summary
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def execute_task(task: dict) -> dict:
    """Run one task (picklable in, picklable out; errors are returned, not raised).

    ``task``: ``{"kind": "run" | "warm", "name", "config": dict, "out": str, "blas_threads"}``.
    """
    tic = time.perf_counter()
    try:
        cfg = SimulationConfig(**task["config"])
        with limit_blas(task.get("blas_threads")):
            if task.get("kind") == "warm":
                cached_problem(cfg)
                return {"name": task["name"], "ok": True, "seconds": time.perf_counter() - tic}
            summary = run_cell(cfg, task["out"])
        return {"name": task["name"], "ok": True, "seconds": time.perf_counter() - tic,
                "final_cumulative_regret_wh": summary["final_cumulative_regret_wh"],
                "mean_seconds_per_round": summary["mean_seconds_per_round"]}
    except EvrouteError as exc:
        return {"name": task["name"], "ok": False, "error": str(exc), "traceback": None}
    except Exception as exc:  # reported by the driver with the run's name
        return {"name": task["name"], "ok": False, "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()}


# --------------------------------------------------------------------------------------
# Executors
# --------------------------------------------------------------------------------------


def default_jobs() -> int:
    """CPUs this process may use (``os.sched_getaffinity`` where available, else ``os.cpu_count``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _worker_init(blas_threads: int | None) -> None:
    """Pool worker start: die with the parent (Linux), leave Ctrl-C to the parent (which
    stops the workers itself), single-threaded BLAS."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    warnings.simplefilter("ignore")  # the driver has said it once (e.g. a flat network)
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            import signal

            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no orphan keeps writing
            if os.getppid() == 1:  # the parent died before prctl
                os._exit(1)
        except OSError:  # pragma: no cover
            pass
    limit_blas(blas_threads)  # not as a context: the limit stays for the worker's life


def _local_executor(tasks: list[dict], jobs: int) -> Iterator[tuple[dict, dict]]:
    """Yield (task, result) as tasks finish, on a spawn-based process pool (or in-process)."""
    if jobs <= 1:
        for t in tasks:
            yield t, execute_task(t)
        return
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    ctx = mp.get_context("spawn")
    before = set(mp.active_children())
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_worker_init, initargs=(1,))
    finished = False
    try:
        futures = {pool.submit(execute_task, t): t for t in tasks}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                t = futures[fut]
                try:
                    res = fut.result()
                except BrokenProcessPool:
                    res = {"name": t["name"], "ok": False, "error": "a worker process died (out of memory?)"}
                except Exception as exc:  # pragma: no cover - pickling problems and the like
                    res = {"name": t["name"], "ok": False, "error": f"{type(exc).__name__}: {exc}"}
                yield t, res
        finished = True
    finally:
        if not finished:  # interrupted (Ctrl-C, or the consumer stopped): stop the workers now
            for proc in mp.active_children():
                if proc not in before:
                    proc.terminate()
        pool.shutdown(wait=finished, cancel_futures=True)


def _import_ray():
    try:
        import ray
    except ImportError:
        raise EvrouteError(f"the ray executor needs Ray, which is not installed: {RAY_HINT}") from None
    return ray


def _ray_executor(tasks: list[dict], jobs: int | None, address: str | None) -> Iterator[tuple[dict, dict]]:
    """Yield (task, result) as Ray tasks finish (local instance, or the cluster at ``address``)."""
    ray = _import_ray()
    started = False
    if not ray.is_initialized():
        try:
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(num_cpus=jobs or default_jobs(), include_dashboard=False, log_to_driver=False,
                         logging_level=logging.ERROR)
        except Exception as exc:
            raise EvrouteError(f"cannot start or reach Ray{' at ' + address if address else ''}: "
                               f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
        started = True
    pending: list = []
    finished = False
    try:
        remote = ray.remote(num_cpus=1, max_retries=2)(execute_task)
        refs = {remote.remote(t): t for t in tasks}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                t = refs[ref]
                try:
                    res = ray.get(ref)
                except Exception as exc:
                    msg = str(exc).strip().splitlines()
                    res = {"name": t["name"], "ok": False, "error": f"ray task failed: {msg[-1] if msg else exc!r}"}
                yield t, res
        finished = True
    finally:
        if not finished:  # interrupted: cancel what is still queued or running
            for ref in pending:
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # pragma: no cover - already finished or gone
                    pass
        if started:
            ray.shutdown()


# --------------------------------------------------------------------------------------
# The run directory of a grid: resume, stale files, lock
# --------------------------------------------------------------------------------------


_CONFIG_DEFAULTS = {f.name: f.default for f in dataclasses.fields(SimulationConfig)
                    if f.default is not dataclasses.MISSING}


def _config_dict(cfg: SimulationConfig) -> dict:
    return json.loads(json.dumps(asdict(cfg)))


def config_matches(run_dir: Path, cfg: SimulationConfig) -> tuple[bool, str]:
    """Whether a finished run's ``config.json`` is the cell's configuration (and what differs)."""
    try:
        saved = json.loads((run_dir / "config.json").read_text())
        json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError) as exc:
        return False, f"unreadable ({exc.__class__.__name__})"
    want = _config_dict(cfg)
    ignore = {"model", "model_options"} if cfg.backend == "bi" else set()  # not used by bi-* runs
    for k, v in want.items():
        if k in ignore:
            continue
        # a key missing from an older config.json had the default value then
        have = saved.get(k, _CONFIG_DEFAULTS.get(k))
        if have != v:
            return False, f"{k} {have!r} ≠ {v!r}"
    return True, ""


def clean_stale(runs_dir: Path) -> list[Path]:
    """Remove temporary folders/files left by killed runs (``.<name>.partial-*``, ``.<name>.old-*``)."""
    removed = []
    if not runs_dir.is_dir():
        return removed
    for p in runs_dir.iterdir():
        if p.name.startswith(".") and (".partial-" in p.name or ".old-" in p.name or p.name.endswith(".tmp")):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            removed.append(p)
    return removed


class _DirLock:
    """An exclusive lock on ``DIR/.lock`` (two compares never write one directory at once)."""

    def __init__(self, out: Path):
        self.path = out / ".lock"
        self.fh = None

    def __enter__(self):
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not on POSIX
            return self
        self.fh = open(self.path, "a+")
        try:
            fcntl.flock(self.fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.fh.close()
            self.fh = None
            raise EvrouteError(f"another evroute compare is writing to {self.path.parent}") from None
        return self

    def __exit__(self, *exc):
        if self.fh is not None:
            self.fh.close()  # closing releases the lock


@dataclass
class GridStatus:
    """Which cells of a grid are finished in ``DIR``."""

    finished: list[str]
    pending: list[str]
    mismatched: dict[str, str]
    #: finished runs whose files are damaged (:func:`evroute.simulate.verify_run`): recomputed
    damaged: dict[str, str] = dataclasses.field(default_factory=dict)


def grid_status(grid: Grid, out: Path) -> GridStatus:
    """Which cells are finished (settings matching, files intact), which are to compute."""
    from .simulate import verify_run

    finished, pending, mismatched, damaged = [], [], {}, {}
    for cell in grid.cells():
        name = grid.cell_name(cell)
        rd = out / "runs" / name
        if is_finished_run(rd):
            ok, why = config_matches(rd, grid.config(cell))
            if not ok:
                mismatched[name] = why
                pending.append(name)
            elif (broken := verify_run(rd)) is not None:
                damaged[name] = broken
                pending.append(name)
            else:
                finished.append(name)
        else:
            pending.append(name)
    return GridStatus(finished, pending, mismatched, damaged)


def _task_order(grid: Grid, cells: list[Cell], sizes: dict | None = None) -> list[Cell]:
    """Longest runs first (GP-UCB/BUCB on the biggest network; BI runs are short and fill
    the tail), then grouped by network, lengthscale, route and seed so that a worker's
    in-process caches (kernel per lengthscale, problem per route and seed) are reused."""
    nets = grid.networks
    sizes = sizes or {}
    rule_weight = {"ucb": 3.0, "bucb": 3.0, "greedy": 1.0, "ts": 1.0}

    def cost(c: Cell) -> float:
        if c.policy.family == "bi":
            return 0.0
        return -float(sizes.get(c.network, 1)) * rule_weight.get(c.policy.rule, 1.0)

    order = {p.label: i for i, p in enumerate(grid.policies)}
    return sorted(cells, key=lambda c: (cost(c), nets.index(c.network), c.lengthscale, c.route, c.seed,
                                        order.get(c.policy.label, 0)))


def _warm_tasks(grid: Grid, cells: list[Cell]) -> list[dict]:
    """One task per (network, seed, truth lengthscale): computes and caches the truth
    before the runs need it."""
    seen, tasks = set(), []
    for c in cells:
        tl = grid.truth_for(c)
        key = (c.network, c.seed, tl)
        if key not in seen:
            seen.add(key)
            what = f" truth ℓ {_fmt(tl)}" if tl != 1.0 else ""
            tasks.append({"kind": "warm", "name": f"prepare {c.network} seed {c.seed}{what}",
                          "config": asdict(grid.config(c)), "blas_threads": 1})
    return tasks


@dataclass
class CompareResult:
    out: Path
    n_runs: int
    n_kept: int
    n_computed: int
    seconds: float
    summary: pd.DataFrame
    files: list[Path]


def run_grid(grid: Grid, out: str | os.PathLike, *, executor: str = "local", jobs: int | None = None,
             ray_address: str | None = None, overwrite: bool = False, progress: bool | None = None,
             log: Callable[[str], None] | None = None) -> CompareResult:
    """Run (or resume) every cell of ``grid`` into ``out/runs`` and write the summaries.

    Parameters
    ----------
    executor : "local" or "ray"
    jobs : int, optional
        Parallel processes (local) or CPUs of a new local Ray instance; default: the
        CPUs this process may use; 1 runs in-process.
    overwrite : bool
        Recompute finished runs whose configuration differs from the grid's (otherwise
        that is an error: nothing is thrown away silently).
    progress : bool, optional
        Rich progress bar on stderr (default: when stderr is a terminal; otherwise one
        line per finished run).
    """
    t_start = time.perf_counter()
    if executor not in EXECUTORS:
        raise EvrouteError(f"unknown executor {executor!r}; choose one of: {', '.join(EXECUTORS)}")
    if jobs is not None and (not isinstance(jobs, int) or jobs < 1):
        raise EvrouteError(f"--jobs must be a positive integer, got {jobs!r}")
    if ray_address and executor != "ray":
        raise EvrouteError("--ray-address needs --executor ray")
    if executor == "ray":
        _import_ray()
    jobs = jobs or default_jobs()
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    grid.validate()
    _check_network_files(grid)
    out = Path(out)
    check_compare_dir(out)
    try:
        (out / "runs").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EvrouteError(f"cannot create {out}: {exc.strerror}") from None

    with _DirLock(out):
        removed = clean_stale(out / "runs") + clean_stale(out)
        if removed:
            log(f"removed {len(removed)} temporary file(s) left by interrupted runs")
        status = grid_status(grid, out)
        if status.mismatched and not overwrite:
            name, why = next(iter(status.mismatched.items()))
            raise EvrouteError(f"{len(status.mismatched)} run(s) in {out / 'runs'} were made with other settings "
                               f"(e.g. {name}: {why}); use another --out, or --overwrite to recompute them")
        for name, why in status.damaged.items():
            log(f"recomputing {name}: {why}")
        atomic_write_json(out / "grid.json", grid.to_dict())
        cells = grid.cells()
        by_name = {grid.cell_name(c): c for c in cells}
        pending_cells = [by_name[n] for n in status.pending]
        log(f"{len(cells)} runs: {len(status.finished)} already finished, {len(pending_cells)} to compute"
            + (f" ({executor}, {jobs} job{'s' if jobs > 1 else ''})" if pending_cells else ""))
        failures: list[dict] = []
        if pending_cells:
            sizes = {}
            for net in grid.networks:  # build the on-disk network cache once, not in every worker
                sizes[net] = cached_network(net, grid.osm.get(net), grid.dem.get(net)).n_edges
            pending_cells = _task_order(grid, pending_cells, sizes)
            jobs = min(jobs, len(pending_cells))
            parallel = executor == "ray" or jobs > 1
            tasks = [{"kind": "run", "name": grid.cell_name(c), "config": asdict(grid.config(c)),
                      "out": str((out / "runs" / grid.cell_name(c)).resolve()),
                      "blas_threads": 1} for c in pending_cells]  # same arithmetic whatever the executor
            if parallel:
                tasks = _warm_tasks(grid, pending_cells) + tasks
            stream = (_ray_executor(tasks, jobs, ray_address) if executor == "ray"
                      else _local_executor(tasks, jobs))
            try:
                failures = _consume(stream, total=len(cells), done=len(status.finished), progress=progress,
                                    log=log)
            except KeyboardInterrupt:
                stream.close()  # stops the workers (their unfinished runs leave no directory)
                n_done = sum(is_finished_run(out / "runs" / grid.cell_name(c)) for c in cells)
                raise Interrupted(f"{n_done} runs finished, {len(cells) - n_done} left; "
                                  "rerun the same command to resume") from None
        if failures:
            first = failures[0]
            if first.get("traceback"):
                log(first["traceback"].rstrip())
            raise EvrouteError(f"{len(failures)} of {len(pending_cells)} runs failed (first: {first['name']}: "
                               f"{first['error']}); finished runs are kept, run the same command again to resume")
        runs = collect_runs(out, grid)
        table = summarize(runs)
        files = write_summaries(out, table, grid)
    return CompareResult(out, len(cells), len(status.finished), len(pending_cells),
                         time.perf_counter() - t_start, table, files)


def check_compare_dir(out: Path) -> None:
    """Refuse ``--out`` unless it is new, empty or an evroute compare directory.

    A compare directory has a ``grid.json`` of evroute's (resuming is the point), or holds
    nothing but ``runs/`` and ``.lock`` (a compare interrupted before writing it). A
    ``simulate`` run directory and a user's non-empty folder are refused: compare never
    writes into what it did not make.
    """
    from .io import directory_entries, short_list
    from .simulate import is_run_directory

    contents = directory_entries(out, "--out")
    if not contents:
        return
    if is_run_directory(out):
        raise EvrouteError(f"--out {out} is a simulate run directory; give compare a directory of its own")
    if "grid.json" in contents:
        load_grid(out)  # a one-line error when it is not evroute's grid description
        return
    if set(contents) <= {"runs", ".lock"} and (not (out / "runs").is_dir() or _only_runs(out / "runs")):
        return
    raise EvrouteError(f"--out {out} exists, is not empty and is not an evroute compare directory "
                       f"(it holds {short_list(contents)}); give a new or empty directory")


def _only_runs(runs_dir: Path) -> bool:
    """Whether every entry of ``runs_dir`` is an evroute run or a killed run's temporary folder."""
    from .simulate import is_run_directory

    return all(is_run_directory(p) or (p.name.startswith(".") and ".partial-" in p.name)
               for p in runs_dir.iterdir())


def _check_network_files(grid: Grid) -> None:
    """One-line error before anything runs when a network's OSM file cannot be found."""
    from .network import network_spec, resolve_osm_path

    for net in grid.networks:
        if _is_osm_file(net):
            if not Path(net).is_file():
                raise EvrouteError(f"OSM file not found: {net}")
            continue
        if network_spec(net).get("kind") == "osm":
            resolve_osm_path(net, grid.osm.get(net))


def _consume(stream: Iterator[tuple[dict, dict]], total: int, done: int, progress: bool | None,
             log: Callable[[str], None]) -> list[dict]:
    """Drain the executor's results with a progress display; return the failures."""
    failures: list[dict] = []
    use_bar = sys.stderr.isatty() if progress is None else progress
    quiet = progress is False

    def describe(res: dict) -> str:
        if not res.get("ok"):
            return f"{res['name']} FAILED: {res.get('error')}"
        return (f"{res['name']}: regret {res['final_cumulative_regret_wh']:.1f} Wh, "
                f"{res['seconds']:.1f} s")

    if use_bar:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        console = Console(stderr=True)
        with Progress(TextColumn("[bold]runs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.description}"),
                      console=console) as bar:
            task = bar.add_task("", total=total, completed=done)
            for t, res in stream:
                if t.get("kind") == "warm":  # a failed preparation fails its runs too: reported there
                    continue
                if not res.get("ok"):
                    failures.append(res)
                    console.print(f"[red]failed[/red] {res['name']}: {res.get('error')}")
                bar.update(task, advance=1, description=res["name"])
        return failures
    k = 0
    for t, res in stream:
        if t.get("kind") == "warm":
            continue
        if not res.get("ok"):
            failures.append(res)
        k += 1
        if not quiet:
            log(f"[{done + k}/{total}] {describe(res)}")
    return failures


# --------------------------------------------------------------------------------------
# Reading runs and summarising
# --------------------------------------------------------------------------------------

RUN_COLUMNS = ("name", "network", "route", "policy", "policy_name", "model", "lengthscale", "truth_lengthscale",
               "omega", "xi", "beta_scale", "seed", "horizon", "final_regret_wh", "seconds_per_round")


def read_run(run_dir: str | os.PathLike) -> dict:
    """One row describing a finished run (from its ``config.json`` and ``summary.json``)."""
    run_dir = Path(run_dir)
    try:
        cfg = json.loads((run_dir / "config.json").read_text())
        summary = json.loads((run_dir / "summary.json").read_text())
    except FileNotFoundError:
        raise EvrouteError(f"{run_dir} is not a finished run directory (no config.json/summary.json)") from None
    except ValueError as exc:
        raise EvrouteError(f"{run_dir}: unreadable run files ({exc})") from None
    spec = PolicySpec.from_config(cfg)
    route = cfg.get("route") or summary.get("route")
    network = cfg.get("network") or summary.get("network")
    if route and ":" not in route:
        route = f"{network}:{route}"
    backend = cfg.get("resolved", {}).get("backend") or summary.get("model") or cfg.get("model")
    return {"name": run_dir.name, "network": network, "route": route or summary.get("route"),
            "policy": spec.label, "policy_name": spec.name, "model": backend,
            "lengthscale": float(cfg.get("lengthscale", 1.0)),
            "truth_lengthscale": float(cfg.get("truth_lengthscale", 1.0)), "omega": float(cfg.get("omega", 1.0)),
            "xi": float(cfg.get("xi", 1.0)), "beta_scale": float(cfg.get("beta_scale", 1.0)),
            "seed": int(cfg.get("seed", summary.get("seed", 0))), "horizon": int(cfg.get("horizon", summary["horizon"])),
            "final_regret_wh": float(summary["final_cumulative_regret_wh"]),
            "seconds_per_round": float(summary.get("mean_seconds_per_round", float("nan")))}


def collect_runs(out: str | os.PathLike, grid: Grid | None = None) -> pd.DataFrame:
    """One row per finished run: the grid's cells (in grid order) or every run in ``out/runs``."""
    out = Path(out)
    if grid is not None:
        dirs = [out / "runs" / grid.cell_name(c) for c in grid.cells()]
    else:
        dirs = sorted(p for p in (out / "runs").iterdir() if not p.name.startswith(".")) \
            if (out / "runs").is_dir() else []
    rows = [read_run(d) for d in dirs if is_finished_run(d)]
    return pd.DataFrame(rows, columns=list(RUN_COLUMNS))


GROUP_COLUMNS = ["network", "route", "policy", "model", "lengthscale", "truth_lengthscale", "horizon"]
SUMMARY_COLUMNS = GROUP_COLUMNS + ["n_seeds", "final_regret_mean_wh", "final_regret_se_wh",
                                   "seconds_per_round_mean"]


def standard_error(values) -> float:
    """Sample standard deviation (ddof = 1) / √n; NaN for fewer than two values."""
    v = np.asarray(values, dtype=float)
    return float(np.std(v, ddof=1) / math.sqrt(len(v))) if len(v) >= 2 else float("nan")


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean ± standard error of the final cumulative regret per route × policy × lengthscale.

    Rows keep the order in which the groups first appear in ``runs`` (the grid order).
    """
    if runs.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    rows = []
    for key, g in runs.groupby(GROUP_COLUMNS, sort=False, dropna=False):
        rows.append({**dict(zip(GROUP_COLUMNS, key, strict=True)), "n_seeds": int(len(g)),
                     "final_regret_mean_wh": float(g.final_regret_wh.mean()),
                     "final_regret_se_wh": standard_error(g.final_regret_wh),
                     "seconds_per_round_mean": float(g.seconds_per_round.mean())})
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def _pm(mean: float, se: float) -> str:
    return f"{mean:.1f} ± {se:.1f}" if math.isfinite(se) else f"{mean:.1f}"


def summary_markdown(table: pd.DataFrame, grid: Grid | None = None, title: str | None = None) -> str:
    """The summary as Markdown: long form, or route × policy by lengthscale for a sweep."""
    lines = []
    if title:
        lines += [f"## {title}", ""]
    if table.empty:
        return "\n".join(lines + ["(no finished runs)", ""])
    hz = sorted(set(table.horizon))
    seeds = sorted(set(table.n_seeds))
    lines.append(f"Final cumulative regret at T = {', '.join(map(str, hz))} (Wh), mean ± standard error "
                 f"over {', '.join(map(str, seeds))} seed(s); model: {', '.join(sorted(set(table.model)))}.")
    truth = table.truth_lengthscale if "truth_lengthscale" in table else pd.Series([1.0])
    if (truth != 1.0).any():
        if "lengthscale" in table and (truth == table.lengthscale).all():
            lines.append("The true f is sampled with each run's lengthscale (ℓ_truth = ℓ).")
        else:
            lines.append("Truth lengthscales: " + ", ".join(_fmt(x) for x in dict.fromkeys(truth)) + ".")
    lines.append("")
    lengthscales = list(dict.fromkeys(table.lengthscale))
    if len(lengthscales) > 1:
        head = "| route | policy | " + " | ".join(f"ℓ = {_fmt(x)}" for x in lengthscales) + " |"
        lines += [head, "|" + " --- |" * (2 + len(lengthscales))]
        for (route, policy), g in table.groupby(["route", "policy"], sort=False):
            by_ls = {r.lengthscale: _pm(r.final_regret_mean_wh, r.final_regret_se_wh) for r in g.itertuples()}
            lines.append(f"| {route} | {policy} | " + " | ".join(by_ls.get(x, "–") for x in lengthscales) + " |")
        lines.append("")
        timing = table.groupby("policy", sort=False).seconds_per_round_mean.mean()
        lines.append("Mean seconds per round: " + ", ".join(f"{p} {s:.3f}" for p, s in timing.items()) + ".")
    else:
        lines += ["| route | policy | seeds | final regret (Wh) | s / round |", "| --- | --- | ---: | ---: | ---: |"]
        for r in table.itertuples():
            lines.append(f"| {r.route} | {r.policy} | {r.n_seeds} | {_pm(r.final_regret_mean_wh, r.final_regret_se_wh)} "
                         f"| {r.seconds_per_round_mean:.3f} |")
    lines.append("")
    return "\n".join(lines)


def write_summaries(out: Path, table: pd.DataFrame, grid: Grid | None = None) -> list[Path]:
    """``summary.csv`` and ``summary.md`` in ``out`` (atomic writes)."""
    csv_path, md_path = out / "summary.csv", out / "summary.md"
    atomic_write_with(csv_path, lambda p: table.to_csv(p, index=False, float_format="%.10g"))
    title = f"evroute compare{' --preset ' + grid.preset if grid is not None and grid.preset else ''}"
    atomic_write_text(md_path, summary_markdown(table, grid, title=title))
    return [csv_path, md_path]


def load_grid(out: str | os.PathLike) -> Grid | None:
    """The grid of a compare directory (``grid.json``), or None."""
    path = Path(out) / "grid.json"
    if not path.is_file():
        return None
    try:
        return Grid.from_dict(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError) as exc:
        raise EvrouteError(f"{path} is not a valid grid description ({exc})") from None


__all__ = [
    "PRESETS", "PolicySpec", "parse_policy_spec", "Grid", "Cell", "make_grid", "run_grid", "run_cell",
    "collect_runs", "summarize", "standard_error", "summary_markdown", "write_summaries", "load_grid",
    "read_run", "clean_stale", "config_matches", "TIMING_COLUMNS",
]
