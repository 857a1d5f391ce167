"""``python -m evroute``."""

from .cli import entry

entry()
