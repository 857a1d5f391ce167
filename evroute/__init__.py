"""evroute: online energy-efficient routing of electric vehicles with combinatorial GP bandits.

The documented entry points, importable from the package (the API reference, docs/api.md;
the README's "Using evroute from Python"):

- networks and trips: :func:`load_network`, :func:`network_from_graph` (an osmnx graph),
  :func:`resolve_route`, :class:`Oracle`; ``Network.to_gdfs()`` (GeoDataFrames);
- the physics prior mean: :func:`load_vehicle`, :func:`edge_energies`;
- priors over the edges: :func:`network_prior` (the paper's), :class:`NetworkPrior`,
  :class:`DensePrior`, :class:`DiagonalPrior`, :class:`PointsPrior` (arms that are points),
  :class:`ShiftedPrior` (another mean), :class:`Prior`; paper 004's candidate priors:
  :func:`parse_candidates`, :class:`Candidate`;
- posterior backends: :func:`make_model`, :func:`register_model`, :func:`available_models`,
  :class:`PosteriorModel`;
- agents: :func:`make_agent`, :class:`AgentSetup`, :class:`IndexAgent`, :class:`Agent`,
  :func:`register_agent`;
- environments: :class:`StaticEnvironment`, :class:`RoadEnvironment` (drift, closures),
  :class:`Environment`, :func:`gp_truth`, :func:`rkhs_truth`;
- running: :func:`run_loop` (an environment and an agent), :func:`simulate` with a
  :class:`SimulationConfig` (what ``evroute simulate`` runs), :func:`prepare_problem`;
- comparing: :func:`make_grid`, :func:`run_grid` (what ``evroute compare`` runs);
- reading runs: :func:`read_run_table`, :func:`verify_run`, :func:`read_run`, :func:`read_config`,
  :func:`run_gdfs` (a run's routes and per-edge posteriors as GeoDataFrames);
- figures: :func:`plot_network`, :func:`plot_run`, :func:`plot_regret_curves` (each returns
  ``(fig, ax)``).

Attributes are imported on first use, so ``import evroute`` stays cheap.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

#: public name → module that defines it
_API = {
    "load_network": "network", "Network": "network", "network_from_graph": "network",
    "resolve_route": "routes", "edge_energies": "routes",
    "Oracle": "oracle",
    "load_vehicle": "energy", "Vehicle": "energy",
    "Prior": "prior", "NetworkPrior": "prior", "DensePrior": "prior", "DiagonalPrior": "prior",
    "PointsPrior": "prior", "ShiftedPrior": "prior",
    "network_prior": "prior",
    "Candidate": "candidates", "parse_candidates": "candidates",
    "PosteriorModel": "models", "make_model": "models", "register_model": "models",
    "available_models": "models",
    "Agent": "agents", "IndexAgent": "agents", "AgentSetup": "agents", "make_agent": "agents",
    "register_agent": "agents", "Decision": "agents",
    "Environment": "environments", "StaticEnvironment": "environments", "gp_truth": "environments",
    "RoadEnvironment": "environments", "rkhs_truth": "environments",
    "Truth": "environments", "TruthSetup": "environments", "register_truth": "environments",
    "register_closures": "environments",
    "run_loop": "loop",
    "SimulationConfig": "config", "Scenario": "config", "AgentSpec": "config", "RunControl": "config",
    "RUN_SETTINGS": "config",
    "Component": "specs", "Option": "specs",
    "simulate": "simulation",
    "prepare_problem": "problem",
    "make_grid": "grid", "run_grid": "experiment",
    "read_run_table": "runs", "verify_run": "runs", "read_run": "summaries", "read_config": "runs",
    "run_gdfs": "export",
    "plot_network": "plots", "plot_run": "plots", "plot_regret_curves": "plots",
    "EvrouteError": "errors",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str):  # PEP 562
    if name in _API:
        value = getattr(importlib.import_module(f"{__name__}.{_API[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
