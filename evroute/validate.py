"""Checks of user-given numbers and names, in one place.

Every function takes the parameter's name (for the message) and its value, and returns the
value converted (``"0.5"`` → 0.5, ``"true"`` → True: values parsed from a command-line spec
such as ``svgp[inducing=500]`` arrive as text), or raises :class:`EvrouteError` with one
line naming the parameter and the value. They double as option converters of the backend
registry (:class:`evroute.models.Option`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from .errors import EvrouteError

__all__ = ["positive_float", "nonneg_float", "unit_rate", "positive_int", "nonneg_int", "flag", "optional_flag",
           "choice", "text"]

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def _number(name: str, value, what: str) -> float:
    if isinstance(value, bool | np.bool_):
        raise EvrouteError(f"{name} must be {what}, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise EvrouteError(f"{name} must be {what}, got {value!r}") from None
    if not math.isfinite(v):
        raise EvrouteError(f"{name} must be {what}, got {value!r}")
    return v


def positive_float(name: str, value) -> float:
    """A finite number > 0."""
    v = _number(name, value, "a positive finite number")
    if v <= 0:
        raise EvrouteError(f"{name} must be a positive finite number, got {value!r}")
    return v


def nonneg_float(name: str, value) -> float:
    """A finite number ≥ 0."""
    v = _number(name, value, "a non-negative finite number")
    if v < 0:
        raise EvrouteError(f"{name} must be a non-negative finite number, got {value!r}")
    return v


def unit_rate(name: str, value) -> float:
    """A number in [0, 1) (a forgetting rate ε)."""
    v = nonneg_float(name, value)
    if not v < 1:
        raise EvrouteError(f"{name} must be in [0, 1), got {value!r}")
    return v


def _integer(name: str, value, what: str) -> int:
    if isinstance(value, bool | np.bool_):
        raise EvrouteError(f"{name} must be {what}, got {value!r}")
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise EvrouteError(f"{name} must be {what}, got {value!r}")


def positive_int(name: str, value) -> int:
    """An integer ≥ 1 (an integer-valued text is accepted, a float is not)."""
    v = _integer(name, value, "a positive integer")
    if v < 1:
        raise EvrouteError(f"{name} must be a positive integer, got {value!r}")
    return v


def nonneg_int(name: str, value) -> int:
    """An integer ≥ 0."""
    v = _integer(name, value, "a non-negative integer")
    if v < 0:
        raise EvrouteError(f"{name} must be a non-negative integer, got {value!r}")
    return v


def flag(name: str, value) -> bool:
    """True or False (also the texts true/false, yes/no, on/off, 1/0)."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise EvrouteError(f"{name} must be true or false, got {value!r}")


def optional_flag(name: str, value) -> bool | None:
    """None (also the text ``none``/``auto``) or a :func:`flag`."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "auto")):
        return None
    return flag(name, value)


def choice(name: str, value, choices: Iterable[str]) -> str:
    """One of ``choices`` (case-insensitive; returned in the listed spelling)."""
    choices = tuple(choices)
    key = str(value).strip().lower() if isinstance(value, str) else value
    for c in choices:
        if key == c.lower():
            return c
    raise EvrouteError(f"unknown {name} {value!r}; choose one of: {', '.join(choices)}")


def text(name: str, value) -> str:
    """A non-empty string."""
    if not isinstance(value, str) or not value.strip():
        raise EvrouteError(f"{name} must be a non-empty text, got {value!r}")
    return value.strip()
