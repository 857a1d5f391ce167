"""The built-in components, by family: the one explicit list of where each lives.

The four families' registries live here (:data:`POLICIES`, :data:`MODELS`, :data:`TRUTHS`,
:data:`CLOSURES`; :mod:`evroute.agents`, :mod:`evroute.models` and :mod:`evroute.environments`
re-export them and register into them). A registry knows the built-in names before the modules
that register them are imported: help texts list them at once (``evroute simulate --help``
imports no numerical library), and the first use of a name imports its module, whose
registration call then makes it. A component registered by other code (a plug-in) joins its
family's registry, and the help texts, when that code runs.
"""

from __future__ import annotations

from .specs import Registry

__all__ = ["BUILTIN", "POLICIES", "MODELS", "TRUTHS", "CLOSURES", "REGISTRIES", "component_names"]

_POLICIES = ("gp-ucb", "gp-bucb", "gp-ts", "gp-greedy", "bi-ucb", "bi-bucb", "bi-ts", "bi-greedy",
             "gp-amm", "gp-dmm", "gp-cmm", "gp-ay", "gp-igp", "gp-pe", "gp-mle", "gp-fb", "gp-rb")
_MODELS = ("bi", "bkb", "eigen", "exact", "kalman", "nystrom", "svgp", "window")

#: family → {name: the module whose import registers it}, in the order help texts list them.
BUILTIN: dict[str, dict[str, str]] = {
    "policy": dict.fromkeys(_POLICIES, "evroute.agents"),
    "model": dict.fromkeys(_MODELS, "evroute.models"),
    "truth": {"gp": "evroute.environments", "rkhs": "evroute.environments", "sumo": "evroute.sumo"},
    "closures": {"alternate": "evroute.environments", "random": "evroute.environments"},
}


#: The policies (``--policy``): ``evroute.agents.register_agent`` adds one.
POLICIES = Registry("policy", sort=False, example="gp-bucb[xi=0.5]", catalogue=BUILTIN["policy"])
#: The posterior backends (``--model``): ``evroute.models.register_model`` adds one.
MODELS = Registry("model", sort=True, example="svgp[inducing=500]", catalogue=BUILTIN["model"])
#: The truths (``--truth``): ``evroute.environments.register_truth`` adds one.
TRUTHS = Registry("truth", sort=False, example="rkhs[B=10]", catalogue=BUILTIN["truth"])
#: The closure patterns (``--closures``): ``evroute.environments.register_closures`` adds one.
CLOSURES = Registry("closures", sort=False, example="random[rate=0.05]", catalogue=BUILTIN["closures"])
#: family → registry.
REGISTRIES = {"policy": POLICIES, "model": MODELS, "truth": TRUTHS, "closures": CLOSURES}


def component_names(family: str) -> list[str]:
    """The names of a family (``policy``, ``model``, ``truth``, ``closures``): the built-in ones
    and any registered in this process, without importing the built-in ones."""
    return REGISTRIES[family].names()
