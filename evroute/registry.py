"""The project's small text registries: networks, routes and vehicles (``data/*.json``)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent.parent / "data"


@cache
def load_registry(name: str) -> dict:
    """Return the parsed ``data/<name>.json`` registry (cached)."""
    path = DATA_DIR / f"{name}.json"
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)
