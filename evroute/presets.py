"""The grids ``evroute compare`` knows by name (the papers' experiments) and the axes of a grid.

Declarations only, like :mod:`evroute.settings`: ``evroute compare --help`` reads them without
importing the numerical libraries; :mod:`evroute.runs.grid` builds grids from them.
"""

from __future__ import annotations

from .settings import RUN_SETTINGS

__all__ = ["PRESETS", "PAPER_ROUTES", "DEFAULT_POLICIES", "AXES", "SWEEPABLE"]

#: The six policies of paper 003 Fig. 2, the default of `evroute compare --policies`.
DEFAULT_POLICIES = ("gp-ucb", "gp-bucb", "gp-ts", "bi-ucb", "bi-bucb", "bi-ts")

#: The axes every grid has, with the ``compare`` option that gives them (a setting of a run on
#: an axis is not swept with ``--sweep``).
AXES = {"route": "--routes", "from_point": "--routes", "to_point": "--routes", "policy": "--policies",
        "lengthscale": "--lengthscales", "seed": "--seeds", "network": "--routes", "osm": "--osm",
        "dem": "--dem", "priors": "--priors", "truth_lengthscale": "--truth-lengthscale"}
#: The settings ``--sweep NAME=V1,V2`` may sweep: every setting of a run that is not an axis.
SWEEPABLE = tuple(name for name in RUN_SETTINGS if name not in AXES)

PAPER_ROUTES = ("luxembourg:A", "luxembourg:B", "monaco:A", "monaco:B")

#: The paper's experiments (003 Sec. 4.2 and App. C.1). The paper's text gives the
#: lengthscale range only ("varying between 0.1 and 2.0"; the values are in its Fig. 4–5). Each
#: keeps the papers' truth (a draw of the GP prior, ``gp``: it creates energy, so its regret is the
#: paper's, against the rectified route handed the truth) and rectified weights (Algorithm 2),
#: whatever the defaults of ``--truth`` and ``--weights``.
PRESETS: dict[str, dict] = {
    "paper-fig2": {
        "description": "003 Fig. 2: GP vs BI with UCB, BUCB and TS (ω = ξ = 1), 4 routes, 5 seeds, T = 500",
        "routes": PAPER_ROUTES, "policies": DEFAULT_POLICIES, "seeds": 5, "horizon": 500, "weights": "rectified", "truth": "gp",
        "lengthscales": (1.0,),
    },
    "paper-fig3": {
        "description": "003 Fig. 3: GP-BUCB (ω, ξ) = (1, 1), (1, 0.5); GP-UCB with β_t and 0.5 β_t",
        "routes": PAPER_ROUTES,
        "policies": ("gp-bucb", "gp-bucb[xi=0.5]", "gp-ucb", "gp-ucb[beta_scale=0.5]"),
        "seeds": 5, "horizon": 500, "weights": "rectified", "truth": "gp", "lengthscales": (1.0,),
    },
    "bounds": {
        "description": "000 in evroute: AMM, DMM, AY, IGP lower bounds against GP-UCB and GP-TS, monaco:B and "
                       "luxembourg:A, 5 seeds, T = 500 (run it with --truth gp and --truth rkhs[B=10])",
        "routes": ("monaco:B", "luxembourg:A"),
        "policies": ("gp-amm", "gp-dmm", "gp-ay", "gp-igp", "gp-ucb", "gp-ts"),
        "seeds": 5, "horizon": 500, "weights": "rectified", "truth": "gp", "lengthscales": (1.0,),
    },
    "priors": {
        "description": "004 in evroute, \"which vehicle am I?\": the truth around delivery-van, the candidates every "
                       "vehicle preset; PE-GP-UCB, MLE, FB, RB, and GP-UCB under the run's vehicle (sumo-ev: a wrong "
                       "prior; add --vehicle delivery-van --policies gp-ucb for the true one); variants: "
                       "--closures alternate, --drift 0.01 (with a candidate delivery-van[eps=0.01] in --priors)",
        "routes": ("monaco:B", "luxembourg:A"),
        "policies": ("gp-pe", "gp-mle", "gp-fb", "gp-rb", "gp-ucb"),
        "seeds": 5, "horizon": 500, "weights": "rectified", "truth": "gp", "lengthscales": (1.0,), "truth_prior": "delivery-van",
    },
    "paper-lengthscale": {
        "description": "003 Fig. 4–5 (App. C.1): GP/BI-BUCB and GP/BI-TS for lengthscales 0.1 to 2.0",
        "routes": PAPER_ROUTES, "policies": ("gp-bucb", "gp-ts", "bi-bucb", "bi-ts"),
        "seeds": 5, "horizon": 500, "weights": "rectified", "truth": "gp", "lengthscales": (0.1, 0.25, 0.5, 1.0, 1.5, 2.0),
    },
}
