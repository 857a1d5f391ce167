"""The physics of the prior mean: the vehicle model (:mod:`evroute.physics.energy`) and each edge's
deterministic energy on a network, with the named trips (:mod:`evroute.physics.routes`).

The package's public names are importable from :mod:`evroute` itself."""
