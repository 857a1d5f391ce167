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
    "load_network": "roads.network", "Network": "roads.network", "network_from_graph": "roads.network",
    "resolve_route": "physics.routes", "edge_energies": "physics.routes",
    "Oracle": "roads.oracle",
    "load_vehicle": "physics.energy", "Vehicle": "physics.energy",
    "Prior": "priors.prior", "NetworkPrior": "priors.network_prior", "DensePrior": "priors.prior", "DiagonalPrior": "priors.prior",
    "PointsPrior": "priors.prior", "ShiftedPrior": "priors.prior",
    "network_prior": "priors.network_prior",
    "Candidate": "priors.candidates", "parse_candidates": "priors.candidates",
    "PosteriorModel": "models", "make_model": "models", "register_model": "models",
    "available_models": "models",
    "Agent": "bandit.agents", "IndexAgent": "bandit.agents", "AgentSetup": "bandit.agents", "make_agent": "bandit.agents",
    "register_agent": "bandit.agents", "Decision": "bandit.agents",
    "Environment": "bandit.environments", "StaticEnvironment": "bandit.environments", "gp_truth": "bandit.truths",
    "RoadEnvironment": "bandit.environments", "rkhs_truth": "bandit.truths",
    "Truth": "bandit.environments", "TruthSetup": "bandit.environments", "register_truth": "bandit.environments",
    "register_closures": "bandit.closures",
    "run_loop": "bandit.loop",
    "SimulationConfig": "runs.config", "Scenario": "runs.config", "AgentSpec": "runs.config", "RunControl": "runs.config",
    "RUN_SETTINGS": "runs.config",
    "Component": "specs", "Option": "specs", "declared": "specs",
    "simulate": "runs.simulation",
    "prepare_problem": "runs.problem",
    "make_grid": "runs.grid", "run_grid": "runs.experiment",
    "read_run_table": "runs.directory", "verify_run": "runs.directory", "read_run": "runs.summaries", "read_config": "runs.directory",
    "run_gdfs": "reports.export",
    "plot_network": "reports.plots", "plot_run": "reports.plots", "plot_regret_curves": "reports.plots",
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
