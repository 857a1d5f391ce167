"""The roads: networks (OSM, the embedded synthetic cities, the reference datasets and their
download), the line graph's shortest paths (the route oracle), walks and negative cycles, and the
exact optimum's MILP.

The package's public names are importable from :mod:`evroute` itself."""
