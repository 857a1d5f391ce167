"""The priors over the edges: kernels on the line graph, the prior as an operator (rows,
diagonal, samples, sparse precision), the linear algebra beneath, the per-edge noise model, the
fit of hyperparameters and paper 004's candidate priors.

The package's public names are importable from :mod:`evroute` itself."""
