"""The project's registries (networks, routes, vehicles), installed as ``evroute.data``.

``pyproject.toml`` maps this folder into the package so that a wheel carries the JSON
files; :mod:`evroute.registry` reads them with :mod:`importlib.resources`.
"""
