"""Posterior backends over the expected energy of every edge: a plug-in family.

Every backend implements :class:`PosteriorModel` (:mod:`evroute.models.base`) and is created
from a :class:`evroute.priors.prior.Prior` through the registry (:mod:`evroute.models.registry`):
``make_model("exact", prior, noise_var=...)`` or, with options, ``make_model("svgp[inducing=500]",
prior, noise_var=..., seed=...)``. The backends shipped with evroute, registered here:

- ``bi`` (:class:`BIModel`): independent conjugate Gaussian per edge (the paper's BI
  baseline, Åkerblom et al. 2023).
- ``exact`` (:class:`ExactGPModel`): the exact GP posterior of paper 003, Sec. 2.2,
  Eq. 2–3, with incremental updates; on a prior given by its sparse precision (the graph
  Matérn kernel on large networks) it is :class:`GMRFPosterior` (:mod:`evroute.models.gmrf`),
  chosen by the factory, the same posterior without an E×E or E×n matrix.
- ``nystrom`` and ``bkb`` (:mod:`evroute.models.nystrom`): the DTC posterior of a dictionary
  of anchor edges, grown by KORS (EK-UCB, paper 001) or resampled by posterior variance
  (BKB, paper 002); kernel rows from the prior operator, m×E floats.
- ``kalman`` (:mod:`evroute.models.kalman`): the posterior under time-varying energies, the
  (1−ε)^{|t−t′|/2} kernel of paper 004, as a Kalman filter on the edges (dense E×E).
- ``svgp`` (:mod:`evroute.models.svgp`): the sparse variational GP of 003 Algorithm 3, in
  GPyTorch (torch is imported on first use).

A new backend registers itself the same way (see DEVELOPERS.md, "Adding a backend") and must
pass the shared conformance checks in ``tests/test_models_conformance.py``.
"""

from __future__ import annotations

from . import bi, eigen, exact, kalman, nystrom, svgp, window
from .base import (
    CAPABILITIES,
    COVARIANCE,
    EVIDENCE,
    INFORMATION_GAIN,
    JOINT_SAMPLES,
    SPARSE_PRECISION,
    TIME_VARYING,
    PosteriorModel,
    aggregate_observations,
)
from .bi import BIModel
from .exact import ExactGPModel
from .gmrf import GMRFPosterior
from .registry import (
    MODELS,
    Backend,
    Option,
    available_models,
    get_backend,
    make_model,
    parse_model_spec,
    register_model,
    require_capability,
    resolve_model,
    unregister_model,
)

__all__ = [
    "PosteriorModel",
    "BIModel",
    "ExactGPModel",
    "GMRFPosterior",
    "Option",
    "Backend",
    "make_model",
    "register_model",
    "unregister_model",
    "available_models",
    "get_backend",
    "parse_model_spec",
    "resolve_model",
    "require_capability",
    "aggregate_observations",
    "MODELS",
    "CAPABILITIES",
    "COVARIANCE",
    "JOINT_SAMPLES",
    "EVIDENCE",
    "INFORMATION_GAIN",
    "TIME_VARYING",
    "SPARSE_PRECISION",
]

register_model("bi", bi.make_bi, capabilities=BIModel.capabilities,
               description="independent conjugate Gaussian per edge (the BI baseline)")
register_model("exact", exact.make_exact,
               capabilities=ExactGPModel.capabilities | GMRFPosterior.capabilities,
               description="exact GP posterior, incremental (003 Eq. 2-3); conditions the GMRF on a sparse-precision "
                           "prior (covariance blocks and the information gain on dense priors only)")
register_model("nystrom", nystrom.make_nystrom,
               capabilities=nystrom.NystromPosterior.capabilities,
               description="Nystrom dictionary grown by KORS, DTC posterior (EK-UCB, paper 001)")
register_model("bkb", nystrom.make_bkb, capabilities=nystrom.NystromPosterior.capabilities,
               description="Nystrom dictionary resampled by posterior variance, DTC posterior (BKB, paper 002)")
register_model("kalman", kalman.make_kalman, capabilities=kalman.KalmanPosterior.capabilities,
               description="time-varying energies: Kalman filter for the (1-eps)^(|t-t'|/2) kernel (paper 004), dense")
register_model("eigen", eigen.make_eigen, capabilities=eigen.EigenKalmanPosterior.capabilities,
               description="time-varying energies: Kalman filter on a truncated eigenbasis (paper 004's kernel; "
                           "rank = E is exact; keeps little variance of the paper's kernels at low rank)")
register_model("window", window.make_window,
               capabilities={COVARIANCE, JOINT_SAMPLES, EVIDENCE, TIME_VARYING},
               description="time-varying energies on any network: two staggered restarted static posteriors "
                           "(a sliding window, R-GP-UCB; covariance blocks where its base gives them)")
register_model("svgp", svgp.make_svgp, requires=svgp.REQUIRES,
               description="sparse variational GP in GPyTorch (003 Algorithm 3; pip install \"evroute[svgp]\")")
