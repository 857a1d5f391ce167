"""The built-in components, by family: the one explicit list of where each lives, and the
``evroute.components`` entry-point group through which other packages add theirs.

The four families' registries live here (:data:`POLICIES`, :data:`MODELS`, :data:`TRUTHS`,
:data:`CLOSURES`; :mod:`evroute.bandit.agents`, :mod:`evroute.models` and :mod:`evroute.bandit.environments`
re-export them and register into them). A registry knows the built-in names before the modules
that register them are imported: help texts list them at once (``evroute simulate --help``
imports no numerical library), and the first use of a name imports its module, whose
registration call then makes it. A component registered by other code joins its family's
registry, and the help texts, when that code runs.

**Plug-ins.** A package adds components with one module that registers them (as evroute's own
modules do) and one entry point per component in the group ``evroute.components``, named
``FAMILY:NAME`` and pointing at that module::

    [project.entry-points."evroute.components"]
    "truth:flat" = "my_package.components"
    "policy:shortest" = "my_package.components"

They are listed with the built-in ones (read from the installed packages' metadata, nothing
imported) and the first use of a name imports the module, in the command line and in every
worker process of ``evroute compare`` alike. A plug-in cannot replace a built-in name (it is
skipped with a warning). ``evroute models`` says where each component comes from.
"""

from __future__ import annotations

import warnings

from .errors import EvrouteWarning
from .specs import Registry

__all__ = ["BUILTIN", "POLICIES", "MODELS", "TRUTHS", "CLOSURES", "REGISTRIES", "component_names",
           "ENTRY_POINT_GROUP", "plugin_catalogue"]

#: The entry-point group of components from other packages (names ``FAMILY:NAME``).
ENTRY_POINT_GROUP = "evroute.components"

_INDEX_POLICIES = ("gp-ucb", "gp-bucb", "gp-ts", "gp-greedy", "bi-ucb", "bi-bucb", "bi-ts", "bi-greedy")
_BOUND_POLICIES = ("gp-amm", "gp-dmm", "gp-cmm", "gp-ay", "gp-igp")
_PE_POLICIES = ("gp-pe", "gp-mle", "gp-fb", "gp-rb")
_MODELS = ("bi", "bkb", "eigen", "exact", "kalman", "nystrom", "svgp", "window")

#: family → {name: the module whose import registers it}, in the order help texts list them.
BUILTIN: dict[str, dict[str, str]] = {
    "policy": {**dict.fromkeys(_INDEX_POLICIES, "evroute.bandit.agents"),
               **dict.fromkeys(_BOUND_POLICIES, "evroute.bandit.bound_agents"),
               **dict.fromkeys(_PE_POLICIES, "evroute.bandit.pe_agents")},
    "model": dict.fromkeys(_MODELS, "evroute.models"),
    "truth": {"lognormal": "evroute.bandit.truths", "gp": "evroute.bandit.truths",
              "rkhs": "evroute.bandit.truths", "sumo": "evroute.world.sumo_truth"},
    "closures": {"alternate": "evroute.bandit.closures", "random": "evroute.bandit.closures"},
}


_PLUGINS: dict[str, dict[str, tuple[str, str]]] | None = None


def plugin_catalogue(family: str) -> dict[str, tuple[str, str]]:
    """The components of ``family`` that installed packages declare in :data:`ENTRY_POINT_GROUP`:
    name → (the module that registers it, the distribution that ships it), in name order. Read
    from the packages' metadata once per process; nothing is imported. An entry whose name is not
    ``FAMILY:NAME`` of a known family, or names a built-in component, is skipped with a warning."""
    global _PLUGINS
    if _PLUGINS is None:
        from importlib.metadata import entry_points

        found: dict[str, dict[str, tuple[str, str]]] = {f: {} for f in BUILTIN}
        for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.name, e.value)):
            fam, sep, name = ep.name.partition(":")
            dist = ep.dist.name if ep.dist is not None else "an unknown package"
            key = name.strip().lower()
            if not sep or fam not in found or not key:
                warnings.warn(f"entry point {ep.name!r} of {dist} in {ENTRY_POINT_GROUP} is not FAMILY:NAME with a "
                              f"family of {', '.join(found)}: skipped", EvrouteWarning, stacklevel=2)
            elif key in BUILTIN[fam]:
                warnings.warn(f"{dist} declares the {fam} {key!r}, a built-in one: skipped", EvrouteWarning,
                              stacklevel=2)
            else:
                found[fam].setdefault(key, (ep.value.split(":")[0].strip(), dist))
        _PLUGINS = found
    return _PLUGINS[family]


#: The policies (``--policy``): ``evroute.bandit.agents.register_agent`` adds one.
POLICIES = Registry("policy", sort=False, example="gp-bucb[xi=0.5]", catalogue=BUILTIN["policy"],
                    plugins=lambda: plugin_catalogue("policy"))
#: The posterior backends (``--model``): ``evroute.models.register_model`` adds one.
MODELS = Registry("model", sort=True, example="svgp[inducing=500]", catalogue=BUILTIN["model"],
                  plugins=lambda: plugin_catalogue("model"))
#: The truths (``--truth``): ``evroute.bandit.environments.register_truth`` adds one.
TRUTHS = Registry("truth", sort=False, example="rkhs[B=10]", catalogue=BUILTIN["truth"],
                  plugins=lambda: plugin_catalogue("truth"))
#: The closure patterns (``--truth NAME[closures=SPEC]``): ``evroute.bandit.closures.register_closures`` adds one.
CLOSURES = Registry("closures", sort=False, example="random[rate=0.05]", catalogue=BUILTIN["closures"],
                    plugins=lambda: plugin_catalogue("closures"))
#: family → registry.
REGISTRIES = {"policy": POLICIES, "model": MODELS, "truth": TRUTHS, "closures": CLOSURES}


def component_names(family: str) -> list[str]:
    """The names of a family (``policy``, ``model``, ``truth``, ``closures``): the built-in ones
    and any registered in this process, without importing the built-in ones."""
    return REGISTRIES[family].names()
