"""The measured world: the truth of edges plus turns that conserves kinetic energy at junctions,
SUMO's physical truth and drives, and drives recorded by real vehicles, map-matched into
traversals and a fleet's prior.

The package's public names are importable from :mod:`evroute` itself."""
