"""Runs and experiments: a run's configuration (a scenario, an agent, a control), its problem,
one simulation, the run directory, grids of runs, their executors and summaries.

The package's public names are importable from :mod:`evroute` itself."""
