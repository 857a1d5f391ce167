"""The bandit: weight rules and Dijkstra (policies), confidence widths (bounds), the agents
(policy + model(s) + oracle call), the environments (truth, observations, availability) and the
loop between them (Algorithm 1).

The package's public names are importable from :mod:`evroute` itself."""
