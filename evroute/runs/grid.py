"""Comparison grids: a base run and the axes it is swept along, and the paper's presets.

A comparison is a grid of cells: a base configuration (:class:`~evroute.runs.config.SimulationConfig`:
every setting a run has) swept along its axes, route × lengthscale × policy × seed (paper 003
Sec. 4.2: 6 policies × 4 routes × 5 seeds × T = 500, the β_t parametrisations of Fig. 3 and the
lengthscale sweep of App. C.1) and any other setting the user sweeps (``--sweep kappa=0.5,1,2``).
A cell is the base with its axes' values put in (:meth:`Grid.config`), converted by the same
declarations as ``evroute simulate``'s options, so ``simulate`` and ``compare`` accept exactly
the same specs. ``grid.json`` (:meth:`Grid.to_dict`) describes the grid in a compare directory;
its base is written by the conversion ``config.json`` uses (:meth:`SimulationConfig.to_json`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from ..bandit.agents import policy_family, resolve_policy
from ..errors import EvrouteError
from ..physics.routes import route_names
from ..presets import (
    AXES,
    DEFAULT_POLICIES,
    PAPER_ROUTES,
    PRESETS,
    SWEEPABLE,
    ConfigFile,
    is_run_config,
)
from ..priors.kernels import check_lengthscale
from ..registry import load_registry
from ..roads.names import network_spec
from ..settings import FOLDS, unfold_settings
from ..specs import Component, format_value, split_list
from ..validate import int_in, positive_float
from .config import (
    RUN_SETTINGS,
    SimulationConfig,
    flat_config_json,
    normalise_config_json,
    prior_file_settings,
)
from .directory import read_config
from .problem import check_world

#: The most seeds of a grid (seeds 0..N-1) and the most runs (cells) a grid may have: a million
#: runs of the paper's size take days on one machine; more is a typo, refused before any work.
MAX_SEEDS = 10_000
MAX_RUNS = 1_000_000

__all__ = ["PRESETS", "PAPER_ROUTES", "DEFAULT_POLICIES", "GRID_FORMAT", "AXES", "SWEEPABLE", "policy_tag",
           "Cell", "Grid", "make_grid", "load_grid", "parse_routes", "parse_lengthscales", "parse_sweep",
           "parse_truth_lengthscale", "parse_file_map", "fmt_number", "is_osm_file", "run_config", "read_config_file"]

#: ``grid.json``'s format: 2 writes the base configuration as ``config.json`` does and the swept
#: settings; 1 (before) listed the policy options per cell. Both read.
GRID_FORMAT = 2
def fmt_number(x: float) -> str:
    """A short, exact-enough number for names and labels: 1.0 → "1", 0.25 → "0.25"."""
    return f"{float(x):g}"


def policy_tag(policy: Component) -> str:
    """The run-name part of a policy's options: ``-w1-x0.5`` (ω, ξ of GP-BUCB), ``-bs0.5`` (the β_t
    scale), ``-joint``, then any other option as ``-<name><value>`` (sorted by name)."""
    given = policy.given
    out = ""
    if "omega" in given or "xi" in given:
        out += f"-w{fmt_number(policy['omega'])}-x{fmt_number(policy['xi'])}"
    if "beta_scale" in given:
        out += f"-bs{fmt_number(given['beta_scale'])}"
    if given.get("joint"):
        out += "-joint"
    for key in sorted(k for k in given if k not in ("omega", "xi", "beta_scale", "joint")):
        out += f"-{_safe(key)}{_safe(format_value(given[key]))}"
    return out


# --------------------------------------------------------------------------------------
# The grid
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One run of a grid: its place on each axis (``sweep``: the swept settings' values)."""

    network: str
    route: str  # fully qualified, e.g. "monaco:A"
    policy: Component
    lengthscale: float
    seed: int
    sweep: tuple = ()

    @property
    def route_letter(self) -> str:
        return self.route.partition(":")[2]


def _json_value(value):
    """A setting's value as JSON (a component as its label)."""
    return value.label if isinstance(value, Component) else value


@dataclass
class Grid:
    """A comparison grid: a base run swept along routes × lengthscales × policies × seeds and
    the settings in ``sweeps``.

    Attributes
    ----------
    base : SimulationConfig
        The settings every cell shares (its network, route, policy, lengthscale, seed and swept
        settings are replaced in each cell).
    routes : list of str
        Fully qualified routes, ``monaco:A``.
    policies : list of Component
        Resolved policies (:func:`evroute.bandit.agents.resolve_policy`).
    seeds, lengthscales : list
    sweeps : tuple of (str, tuple)
        Other swept settings (:data:`SWEEPABLE`) and their values, converted.
    osm, dem : dict
        A network name's OSM and DEM files (as ``--osm``/``--dem`` of simulate).
    truth_lengthscale : float or "same"
        The truth kernel's lengthscale: a number (the paper's 1), or each cell's own lengthscale.
    preset : str, optional
    """

    base: SimulationConfig
    routes: list[str]
    policies: list[Component]
    seeds: list[int]
    lengthscales: list[float] = field(default_factory=lambda: [1.0])
    sweeps: tuple = ()
    osm: dict = field(default_factory=dict)
    dem: dict = field(default_factory=dict)
    truth_lengthscale: float | str = 1.0
    preset: str | None = None

    @property
    def networks(self) -> list[str]:
        return list(dict.fromkeys(r.partition(":")[0] for r in self.routes))

    @property
    def horizon(self) -> int:
        return self.base.horizon

    @property
    def model(self) -> Component:
        return self.base.model

    def cells(self) -> list[Cell]:
        """Cells in grid order: route, lengthscale, sweeps (first varying slowest), policy, seed. A
        policy that does not use the run's model (:func:`evroute.bandit.agents.policy_family`: ``bi``,
        ``none``) runs once whatever a ``model`` sweep holds."""
        combos: list[tuple] = [()]
        for name, values in self.sweeps:
            combos = [(*c, (name, v)) for c in combos for v in values]
        gp = [policy_family(p) == "gp" for p in self.policies]
        cells, seen = [], set()
        for r in self.routes:
            for ls in self.lengthscales:
                for sw in combos:
                    for i, p in enumerate(self.policies):  # (a policy listed twice stays twice: an error)
                        own = sw if gp[i] else tuple((k, v) for k, v in sw if k != "model")
                        for s in self.seeds:
                            key = (r, float(ls), own, i, int(s))
                            if key not in seen:
                                seen.add(key)
                                cells.append(Cell(r.partition(":")[0], r, p, float(ls), int(s), own))
        return cells

    def truth_for(self, cell: Cell) -> float:
        """The truth lengthscale of a cell."""
        return float(cell.lengthscale) if self.truth_lengthscale == "same" else float(self.truth_lengthscale)

    def config(self, cell: Cell) -> SimulationConfig:
        """The configuration of a cell (what ``evroute simulate`` would run): the base with the
        cell's values; the policies that do not use the run's model (bi, none) keep the default backend."""
        changes = dict(cell.sweep)
        gp = policy_family(cell.policy) == "gp"
        return self.base.replace(
            network=cell.network, osm=self.osm.get(cell.network), dem=self.dem.get(cell.network),
            route=cell.route, from_point=None, to_point=None, policy=cell.policy, lengthscale=cell.lengthscale,
            seed=cell.seed, truth_lengthscale=self.truth_for(cell),
            **{**changes, "model": changes.get("model", self.base.model) if gp else "exact"})

    def cell_name(self, cell: Cell) -> str:
        """``<network>-<route>-<policy>[-ls<l>][-tl<l>][-w<ω>-x<ξ>][-bs<scale>][-<truth>][-tp<vehicle>]
        [-drift<ε>][-<closures>][-m<model>][-<setting><value>...]-s<seed>``."""
        swept = dict(cell.sweep)
        get = lambda key: swept.get(key, getattr(self.base, key))  # noqa: E731
        name = f"{_safe(Path(cell.network).stem)}-{_safe(cell.route_letter)}-{cell.policy.name}"
        if cell.lengthscale != 1.0:
            name += f"-ls{fmt_number(cell.lengthscale)}"
        if self.truth_for(cell) != 1.0:
            name += f"-tl{fmt_number(self.truth_for(cell))}"
        name += policy_tag(cell.policy)
        if get("truth").label != RUN_SETTINGS["truth"].default:  # (the paper's: -gp)
            name += f"-{_safe(get('truth').label)}"
        if get("truth_prior") is not None:
            name += f"-tp{_safe(get('truth_prior'))}"
        if get("drift"):
            name += f"-drift{fmt_number(get('drift'))}"
        if get("closures") is not None:
            name += f"-{_safe(get('closures').label)}"
        model = get("model")
        if policy_family(cell.policy) == "gp" and model.name != "exact":
            name += f"-m{_safe(model.label if 'model' in swept else model.name)}"
        for key, value in cell.sweep:
            if key not in ("truth", "truth_prior", "drift", "closures", "model"):
                name += f"-{_safe(key)}{_safe(format_value(value))}"
        return f"{name}-s{cell.seed}"

    def validate(self) -> None:
        """Check everything that can be checked without loading a network (one-line errors)."""
        for what, items in (("routes", self.routes), ("policies", self.policies), ("seeds", self.seeds),
                            ("lengthscales", self.lengthscales)):
            if not items:
                raise EvrouteError(f"no {what} given")
        n_runs = len(self.routes) * len(self.policies) * len(self.lengthscales) * len(self.seeds)
        for _, values in self.sweeps:
            n_runs *= len(values)
        if n_runs > MAX_RUNS:
            raise EvrouteError(f"the grid has {n_runs:,} runs, more than {MAX_RUNS:,}; split it into several compares")
        for net in sorted(set(self.osm) | set(self.dem)):
            if net not in self.networks:
                raise EvrouteError(f"--osm/--dem given for network {net!r}, which is not in the grid")
        for name, path in list(self.osm.items()) + list(self.dem.items()):
            if not Path(path).expanduser().is_file():
                raise EvrouteError(f"file not found for network {name}: {path}")
        cells = self.cells()
        names = [self.cell_name(c) for c in cells]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise EvrouteError(f"the grid has the same run twice ({dup}); remove duplicate policies, routes, "
                               "lengthscales or swept values")
        seen = set()
        for c in cells:  # every combination of policy family and swept values makes a valid run
            key = (policy_family(c.policy), c.sweep)
            if key not in seen:
                seen.add(key)
                self.config(c)

    def to_dict(self) -> dict:
        """``grid.json``: the base configuration (as ``config.json`` writes it), the axes and the
        cells (read by ``evroute plot`` and by a resumed ``compare``)."""
        base = self.base.to_json()
        flat = flat_config_json(base)
        cells = [{"name": self.cell_name(c), "network": c.network, "route": c.route, "policy": c.policy.label,
                  "policy_name": c.policy.name, "lengthscale": c.lengthscale,
                  "truth_lengthscale": self.truth_for(c), "seed": c.seed,
                  "sweep": {k: _json_value(v) for k, v in c.sweep}} for c in self.cells()]
        return {"format": GRID_FORMAT, "preset": self.preset, "base": base, "networks": self.networks,
                "routes": list(self.routes), "policies": [p.label for p in self.policies],
                "seeds": list(self.seeds), "lengthscales": [float(x) for x in self.lengthscales],
                "truth_lengthscale": self.truth_lengthscale,
                "sweeps": [[k, [_json_value(v) for v in vs]] for k, vs in self.sweeps],
                "osm": dict(self.osm), "dem": dict(self.dem),
                # the base's settings also at the top, as format 1 had them (for readers of grid.json)
                **{k: flat[k] for k in ("horizon", "model", "kernel", "truth", "vehicle", "drift", "closures",
                                        "truth_prior")}, "cells": cells}

    @classmethod
    def from_dict(cls, d: dict) -> Grid:
        """A grid from ``grid.json`` (format 2, or format 1 of earlier versions)."""
        routes = list(d["routes"])
        first_net = routes[0].partition(":")[0] if routes else "synthetic"
        if d.get("format", 1) >= 2:
            base = SimulationConfig.from_json(d["base"])
        else:  # format 1: the base's settings at the top level, the model's options apart
            model = d.get("model", "exact")
            opts = d.get("model_options") or {}
            if opts:
                model = f"{model}[{','.join(f'{k}={format_value(v)}' for k, v in opts.items())}]"
            base = SimulationConfig.from_json(normalise_config_json({
                "format": 2, "network": first_net, "horizon": int(d["horizon"]), "model": model,
                "kernel": d.get("kernel", "combined"), "vehicle": d.get("vehicle"), "truth": d.get("truth", "gp"),
                "priors": None, "truth_prior": d.get("truth_prior"), "drift": float(d.get("drift", 0.0)),
                "closures": d.get("closures"), "policy": "gp-ts"}))
            if d.get("priors") is not None:
                base = base.replace(priors=d["priors"])
        sweeps = tuple((k, tuple(RUN_SETTINGS[k](v) for v in vs)) for k, vs in d.get("sweeps") or ())
        return cls(base=base, routes=routes, policies=[resolve_policy(p) for p in d["policies"]],
                   seeds=[int(s) for s in d["seeds"]], lengthscales=[float(x) for x in d["lengthscales"]],
                   sweeps=sweeps, osm=dict(d.get("osm") or {}), dem=dict(d.get("dem") or {}),
                   truth_lengthscale=d.get("truth_lengthscale", 1.0), preset=d.get("preset"))


def _positive(value, error: str) -> float:
    """:func:`evroute.validate.positive_float` with the caller's message."""
    try:
        return positive_float("value", value)
    except EvrouteError:
        raise EvrouteError(error) from None


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.]+", "-", str(text)).strip("-") or "x"


def parse_routes(text: str | Iterable[str], network: str | None = None) -> list[str]:
    """``A,B`` (on ``network``, default synthetic) or ``monaco:A,luxembourg:B`` → full names.

    Named routes are checked against the route registry (one-line error when unknown).
    """
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
    return name not in load_registry("networks") and Path(name).suffix.lower() in (".osm", ".xml")


def _items(value) -> list:
    """A comma-separated text (the command line's form) or a list (Python's) as a list."""
    return split_list(value) if isinstance(value, str) else list(value)


def parse_lengthscales(text: str | Iterable[float]) -> list[float]:
    """``0.1,0.5,1`` (or ``[0.1, 0.5, 1]``) → [0.1, 0.5, 1.0] (positive numbers, duplicates removed)."""
    out: list[float] = []
    for item in _items(text):
        v = _positive(item, f"the lengthscales must be positive numbers separated by commas, got {item!r}")
        check_lengthscale("the lengthscale", v)
        if v not in out:
            out.append(v)
    if not out:
        raise EvrouteError("the lengthscales are empty")
    return out


def parse_truth_lengthscale(text: str | float) -> float | str:
    """``same`` or a positive number (``--truth NAME[lengthscale=...]`` of compare)."""
    if str(text).strip().lower() == "same":
        return "same"
    return check_lengthscale("--truth lengthscale", _positive(
        text, f"--truth lengthscale must be 'same' or a positive number, got {text!r}"))


def parse_file_map(text, networks: list[str], what: str) -> dict:
    """``--dem PATH`` (one network in the grid), ``--dem luxembourg=PATH,monaco=PATH2``, or from
    Python a path or a mapping ``{"luxembourg": PATH}``."""
    if not text:
        return {}
    if isinstance(text, dict):
        text = [f"{net}={path}" for net, path in text.items()]
    elif not isinstance(text, str | list | tuple):
        text = str(text)  # a Path
    out = {}
    for item in _items(text):
        net, sep, path = item.partition("=")
        if not sep:
            if len(networks) != 1:
                raise EvrouteError(f"the grid has several networks: give --{what} as NETWORK=PATH[,NETWORK=PATH]")
            net, path = networks[0], item
        out[net.strip()] = str(Path(path.strip()).expanduser())
    return out


def _sweep_items(items) -> dict:
    """``--sweep`` as given (``"NAME=V1,V2"``, a list of them, or a mapping of names to values) →
    {name: values}; a name given twice is one line."""
    if items is None:
        return {}
    if isinstance(items, str):
        items = [items]
    if isinstance(items, dict | MappingProxyType):
        return {str(k).strip().lower().replace("-", "_"): v for k, v in items.items()}
    out: dict = {}
    for item in items:
        name, sep, values = str(item).partition("=")
        key = name.strip().lower().replace("-", "_")
        if not sep or not key or not values.strip():
            raise EvrouteError(f"--sweep {item!r}: expected NAME=VALUE1,VALUE2, e.g. kappa=0.5,1,2")
        if key in out:
            raise EvrouteError(f"--sweep {key} is given twice")
        out[key] = values
    return out


def parse_sweep(items: Iterable[str] | str | None) -> tuple:
    """``--sweep NAME=V1,V2`` (repeatable) → ((name, (value, ...)), ...): each value converted by
    the setting's declaration, duplicates dropped. Settings that are axes of their own
    (:data:`AXES`) are refused with the option to use."""
    if items is None:
        return ()
    if isinstance(items, str):
        items = [items]
    elif isinstance(items, dict | MappingProxyType):  # from Python: {"kappa": [0.5, 1, 2]}
        items = [f"{k}={v if isinstance(v, str) else ','.join(format_value(x) for x in v)}" for k, v in items.items()]
    out: dict[str, tuple] = {}
    for item in items:
        name, sep, values = str(item).partition("=")
        key = name.strip().lower().replace("-", "_")
        if not sep or not key or not values.strip():
            raise EvrouteError(f"--sweep {item!r}: expected NAME=VALUE1,VALUE2, e.g. kappa=0.5,1,2")
        if key in AXES and key != "lengthscale":
            raise EvrouteError(f"--sweep {key}: give it with {AXES[key]}")
        if key == "lengthscale":
            raise EvrouteError("--sweep lengthscale is an axis of the grid (make_grid's lengthscales)")
        if key not in RUN_SETTINGS:
            raise EvrouteError(f"--sweep {name.strip()!r}: not a setting; sweepable: {', '.join(SWEEPABLE)}")
        if key in out:
            raise EvrouteError(f"--sweep {key} is given twice")
        option = RUN_SETTINGS[key]
        converted: list = []
        for text in split_list(values):
            folded = sorted(set(unfold_settings({key: text}, spell=str)) - {key}) if key in FOLDS else []
            if folded:
                raise EvrouteError(f"--sweep {key}={text}: sweep {', '.join(folded)} by name, e.g. --sweep "
                                   f"{folded[0]}=V1,V2")
            value = option(None if text.lower() == "none" and option.default is None else text, key)
            if value not in converted:
                converted.append(value)
        out[key] = tuple(converted)
    return tuple(out.items())


def _prior_defaults(settings: dict, sweeps: tuple = ()) -> dict:
    """What a fleet's prior file (``prior``, else the first of ``--sweep prior=...``) stands for
    where the settings give none: its network, files, vehicle, σ₀, noise and lengthscale
    (:func:`evroute.runs.config.prior_file_settings`), so that a grid's runs with and without it
    differ in the fleet's posterior alone; {} without one."""
    prior = settings.get("prior")
    if prior is None:
        prior = next((v for k, vs in sweeps if k == "prior" for v in vs if v is not None), None)
    return {} if prior is None else prior_file_settings(prior, settings)


def _take_prior_settings(prior_settings: dict, values: dict, nets: list, osm_map: dict, dem_map: dict) -> None:
    """A grid's prior file's settings where the grid gives none (in place): the OSM and DEM its
    network was loaded with; where the file is swept (``prior=none,PRIOR``), its vehicle, σ₀ and
    noise for every run too."""
    if "prior" not in values:
        values.update({k: prior_settings[k] for k in ("vehicle", "prior_std", "noise_std")
                       if k in prior_settings and k not in values})
    own = prior_settings.get("network")
    for files, key in ((osm_map, "osm"), (dem_map, "dem")):  # the prior's network as it was loaded
        if own in nets and own not in files and prior_settings.get(key) is not None:
            files[own] = prior_settings[key]


def make_grid(*, preset: str | ConfigFile | None = None, network: str | None = None,
              routes: str | Iterable[str] | None = None, policies: str | Iterable | None = None,
              seeds: int | None = None, lengthscales: str | Iterable[float] | None = None,
              truth_lengthscale: float | str | None = None, osm=None, dem=None,
              sweep: Iterable[str] | str | dict | None = None, truth_kind: str | None = None, **settings) -> Grid:
    """A comparison grid, as ``evroute compare`` builds it; options given (not None) override the
    preset's (or the config file's).

    Parameters
    ----------
    preset : str or ConfigFile, optional
        A named grid (:data:`evroute.presets.PRESETS`: ``paper-fig2``, ``paper-fig3``, ...) or a
        config file (:class:`evroute.presets.ConfigFile`: ``--config FILE``). A file's single
        network, route, policy and lengthscale are one-value axes; its seed is replaced by the
        grid's seeds.
    network : str, optional
        The network of unqualified routes (default ``synthetic``).
    routes : str or list of str, optional
        ``"A,B"`` or ``["monaco:A", "luxembourg:B"]`` (default ``A``).
    policies : str or list, optional
        ``"gp-ucb,bi-ucb"`` or ``["gp-ucb", "gp-bucb[xi=0.5]"]`` (default the six of paper 003 Fig. 2).
    seeds : int, optional
        Seeds 0..N-1 (default 5).
    lengthscales : str or list of float, optional
        The agents' prior lengthscales (default 1; also ``sweep={"lengthscale": [...]}``).
    truth_lengthscale : float or "same", optional
        The truth kernel's lengthscale (default 1), or each run's own.
    osm, dem : str, path or dict, optional
        One file (a grid of one network), ``"NET=PATH,..."`` or ``{"luxembourg": PATH}``.
    sweep : str, list of str or dict, optional
        More settings to sweep: ``["kappa=0.5,1,2"]`` or ``{"kappa": [0.5, 1, 2]}``.
    **settings
        Any setting of a run (:data:`evroute.settings.RUN_SETTINGS`: ``horizon``, ``model``,
        ``vehicle``, ``kappa``, ``truth``, ``drift``, ...), converted by its declaration as
        ``evroute simulate``'s options are.

    Returns
    -------
    Grid
        The grid: its base configuration and axes (``grid.cells()``, ``grid.config(cell)``).

    With a preset and ``network`` but no ``routes``, the preset's route letters are taken on
    ``network`` (``network="monaco"`` with ``paper-fig2`` → monaco:A, monaco:B).

    Examples
    --------
    >>> grid = make_grid(network="synthetic", routes="A", policies=["gp-ucb", "bi-ucb"], seeds=2, horizon=20)
    >>> len(grid.cells()), [c.policy.label for c in grid.cells()][:2]
    (4, ['gp-ucb', 'gp-ucb'])
    """
    if isinstance(preset, str):
        if preset not in PRESETS:
            raise EvrouteError(f"unknown preset {preset!r}; choose one of: {', '.join(PRESETS)}")
        preset = PRESETS[preset]
    cf = preset if preset is not None else ConfigFile()
    preset_name = cf.name if cf.name in PRESETS and PRESETS[cf.name] is cf else None
    if truth_kind is not None:
        settings.setdefault("truth", truth_kind)
    for key in settings:
        if key not in RUN_SETTINGS:
            raise EvrouteError(f"unknown setting {key!r}; settings: {', '.join(RUN_SETTINGS)}")
        if key in AXES and key != "priors":
            raise EvrouteError(f"{key} is an axis of a grid: give it with {AXES[key]}")
    base, file_routes, file_policies, file_ls = _file_axes(cf)
    swept = {**_sweep_items(cf.sweep), **_sweep_items(sweep)}
    if "lengthscale" in swept:
        if lengthscales is not None:
            raise EvrouteError("the lengthscales are given twice: sweep them once (--sweep lengthscale=V1,V2)")
        lengthscales = swept.pop("lengthscale")
        lengthscales = [lengthscales] if isinstance(lengthscales, int | float) else lengthscales
    sweeps = parse_sweep(swept)
    prior_settings = _prior_defaults({**base, **{k: v for k, v in settings.items() if v is not None}}, sweeps)
    if network is None and file_routes is None:
        network = prior_settings.get("network")
    if lengthscales is None and file_ls is None and prior_settings:
        lengthscales = [prior_settings["lengthscale"]]
    if routes is not None:
        route_list = parse_routes(routes, network)
    elif file_routes is not None:
        if network is not None:
            letters = list(dict.fromkeys(r.partition(":")[2] for r in file_routes))
            route_list = parse_routes(letters, network)
        else:
            route_list = parse_routes(list(file_routes))
    else:
        route_list = parse_routes("A", network)
    policy_texts = _items(policies) if policies is not None else list(file_policies or DEFAULT_POLICIES)
    if not policy_texts:
        raise EvrouteError("--policies is empty")
    policy_list: list[Component] = [resolve_policy(text) for text in policy_texts]
    n_seeds = seeds if seeds is not None else (cf.seeds if cf.seeds is not None else 5)
    int_in("--seeds (the number of seeds)", n_seeds, 1, hi=MAX_SEEDS)
    ls = parse_lengthscales(lengthscales if lengthscales is not None else file_ls or (1.0,))
    truth = parse_truth_lengthscale(truth_lengthscale if truth_lengthscale is not None
                                    else base.pop("truth_lengthscale", 1.0))
    osm = osm if osm is not None else base.pop("osm", None)
    dem = dem if dem is not None else base.pop("dem", None)
    values = {k: v for k, v in base.items() if k not in AXES or k == "priors"}
    values.update({k: v for k, v in settings.items() if v is not None})
    values.setdefault("horizon", 500)
    first = route_list[0]
    nets = list(dict.fromkeys(r.partition(":")[0] for r in route_list))
    osm_map, dem_map = parse_file_map(osm, nets, "osm"), parse_file_map(dem, nets, "dem")
    _take_prior_settings(prior_settings, values, nets, osm_map, dem_map)
    base_cfg = SimulationConfig(**{**values, "network": first.partition(":")[0], "route": first,
                                   "osm": osm_map.get(nets[0]), "dem": dem_map.get(nets[0]),
                                   "policy": policy_list[0], "lengthscale": ls[0],
                                   "truth_lengthscale": ls[0] if truth == "same" else truth})
    grid = Grid(base=base_cfg, routes=route_list, policies=policy_list, seeds=list(range(n_seeds)),
                lengthscales=ls, sweeps=sweeps, osm=osm_map, dem=dem_map, truth_lengthscale=truth,
                preset=preset_name)
    grid.validate()
    check_world(base_cfg)
    return grid


def _file_axes(cf: ConfigFile) -> tuple[dict, list | None, list | None, list | None]:
    """A config file's settings (folded ones taken out) and its axes: its routes, policies and
    lengthscales, or the one its settings name (a run's configuration: its network and route, its
    policy, its lengthscale). Its seed is the grid's to set."""
    base = unfold_settings(dict(cf.settings), spell=str)
    routes = list(cf.routes) if cf.routes is not None else None
    if base.get("from_point") is not None or base.get("to_point") is not None:
        raise EvrouteError(f"{cf.name or 'the configuration'}: a trip between two points is for simulate; compare "
                           "takes named routes (routes: [\"NETWORK:ROUTE\", ...])")
    if routes is None and (base.get("network") is not None or base.get("route") is not None):
        route = str(base.get("route") or "A")
        routes = [route if ":" in route else f"{base.get('network') or 'synthetic'}:{route}"]
    policies = list(cf.policies) if cf.policies is not None else None
    if policies is None and base.get("policy") is not None:
        policies = [base["policy"]]
    ls = list(cf.lengthscales) if cf.lengthscales is not None else None
    if ls is None and base.get("lengthscale") is not None:
        ls = [base["lengthscale"]]
    for key in ("network", "route", "from_point", "to_point", "policy", "lengthscale", "seed"):
        base.pop(key, None)
    return base, routes, policies, ls


def read_config_file(value: str | os.PathLike) -> ConfigFile:
    """``--config``/``--preset``: a preset's name (:data:`evroute.presets.PRESETS`), a config file
    (:meth:`evroute.presets.ConfigFile.read`: JSON or TOML), or a run's configuration (its
    directory or its ``config.json``: every setting of that run) as a
    :class:`~evroute.presets.ConfigFile`.

    Returns
    -------
    ConfigFile
        The preset itself, or the file's settings and grid keys, checked (one :class:`EvrouteError`
        line naming the file otherwise).
    """
    text = str(value)
    path = Path(text).expanduser()
    if text in PRESETS and not path.exists():
        return PRESETS[text]
    if not path.exists():
        raise EvrouteError(f"no such configuration: {text} (a config file, a run directory, or a preset: "
                           f"{', '.join(PRESETS)})")
    if is_run_config(path):
        return ConfigFile(settings=read_config(path).settings(), name=text)
    return ConfigFile.read(path)


def run_config(config: str | os.PathLike | None = None, settings: Mapping | None = None) -> SimulationConfig:
    """The configuration ``evroute simulate`` runs: the settings given, on top of ``config`` (its
    ``--config``/``--preset``): a run's configuration (its directory or ``config.json``: that run
    again), a config file or a preset (:func:`evroute.presets.read_config_file`: its grid's first
    cell). A trip given replaces the file's (a network given: its files too).

    Returns
    -------
    SimulationConfig
        The run's configuration, every setting checked.
    """
    settings = dict(settings or {})
    if settings.get("from_point") is not None:  # (the trip given is the trip)
        settings.setdefault("route", None)
    if settings.get("route") is not None:
        settings.setdefault("from_point", None)
        settings.setdefault("to_point", None)
    if config is None:
        return SimulationConfig(**settings)
    path = Path(config).expanduser()
    if path.exists() and is_run_config(path):
        return read_config(path).replace(**settings)
    base = read_config_file(config).first_run()
    drop = ("network", "osm", "dem", "route", "from_point", "to_point") if "network" in settings else \
        ("route", "from_point", "to_point") if set(settings) & {"route", "from_point"} else ()
    return SimulationConfig(**{**{k: v for k, v in base.items() if k not in drop}, **settings})


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
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise EvrouteError(f"{path} is not a valid grid description ({type(exc).__name__}: {exc})") from None
