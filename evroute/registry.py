"""The project's small text registries: networks, routes, vehicles and the reference datasets.

Their source is ``data/*.json`` at the repository root; ``pyproject.toml`` maps that
folder into the package as ``evroute.data``, so a wheel carries them and an editable
install finds them in place. They are read with :mod:`importlib.resources`.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from .errors import EvrouteError

#: The registries of ``data/``, each a file ``<name>.json`` (not the plug-in registries of
#: :data:`evroute.components.REGISTRIES`).
DATA_REGISTRIES = ("networks", "routes", "vehicles", "datasets")


@cache
def load_registry(name: str) -> dict:
    """Return the parsed ``<name>.json`` registry of package ``evroute.data`` (cached)."""
    if name not in DATA_REGISTRIES:
        raise EvrouteError(f"unknown registry {name!r}; registries: {', '.join(DATA_REGISTRIES)}")
    try:
        text = resources.files("evroute.data").joinpath(f"{name}.json").read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise EvrouteError(f"the {name} registry is missing from this installation of evroute "
                           f"({exc}); reinstall evroute") from None
    return json.loads(text)
