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
from numbers import Integral
from pathlib import Path

from .errors import EvrouteError

__all__ = ["positive_float", "nonneg_float", "unit_rate", "positive_int", "nonneg_int", "flag", "optional_flag",
           "choice", "text", "number_in", "int_in", "in_range", "int_range", "MAX_SEED", "existing_file",
           "parse_latlon"]

#: The largest seed: seeds are stored as 64-bit integers in every table and file.
MAX_SEED = 2**63 - 1

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def _is_bool(value) -> bool:
    """True and False, also numpy's (without importing numpy: this module stays light)."""
    return isinstance(value, bool) or (type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_"))


def _number(name: str, value, what: str) -> float:
    if _is_bool(value):
        raise EvrouteError(f"{name} must be {what}, got {_short(value)}")
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        raise EvrouteError(f"{name} must be {what}, got {_short(value)}") from None
    if not math.isfinite(v):
        raise EvrouteError(f"{name} must be {what}, got {_short(value)}")
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


def _short(value) -> str:
    """``repr(value)``, shortened to one readable line (a 400-digit number stays short)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...{text[-8:]} ({len(text)} characters)"


def _integer(name: str, value, what: str) -> int:
    if _is_bool(value):
        raise EvrouteError(f"{name} must be {what}, got {_short(value)}")
    if isinstance(value, Integral):
        return int(value)
    if isinstance(value, str) and len(value) <= 100:
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise EvrouteError(f"{name} must be {what}, got {_short(value)}")


def _interval(lo, hi, lo_open: bool, hi_open: bool) -> str:
    left = "(" if lo_open or lo is None else "["
    right = ")" if hi_open or hi is None else "]"
    return f"{left}{'-inf' if lo is None else f'{lo:g}'}, {'inf' if hi is None else f'{hi:g}'}{right}"


def number_in(name: str, value, lo: float | None = None, *, hi: float | None = None, lo_open: bool = False,
              hi_open: bool = False, why: str = "") -> float:
    """A finite number in an interval (``lo_open``/``hi_open``: the end excluded). The message
    names the interval and, with ``why``, the reason for its ends."""
    what = f"a number in {_interval(lo, hi, lo_open, hi_open)}"
    v = _number(name, value, what + (f" ({why})" if why else ""))
    below = lo is not None and (v <= lo if lo_open else v < lo)
    above = hi is not None and (v >= hi if hi_open else v > hi)
    if below or above:
        raise EvrouteError(f"{name} must be {what}, got {_short(value)}" + (f" ({why})" if why else ""))
    return v


def int_in(name: str, value, lo: int | None = None, *, hi: int | None = None, why: str = "") -> int:
    """An integer in [lo, hi] (an integer-valued text is accepted, a float is not)."""
    what = f"an integer in [{'-inf' if lo is None else f'{lo:,}'}, {'inf' if hi is None else f'{hi:,}'}]"
    v = _integer(name, value, what)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise EvrouteError(f"{name} must be {what}, got {_short(value)}" + (f" ({why})" if why else ""))
    return v


def in_range(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False, hi_open: bool = False,
             why: str = ""):
    """A converter ``convert(name, value)`` for :class:`evroute.specs.Option`: :func:`number_in` with
    these bounds (its ``bounds`` attribute says them, for help texts)."""
    def convert(name, value):
        return number_in(name, value, lo, hi=hi, lo_open=lo_open, hi_open=hi_open, why=why)

    convert.bounds = _interval(lo, hi, lo_open, hi_open)
    return convert


def int_range(lo: int | None = None, hi: int | None = None, *, why: str = ""):
    """A converter for :class:`evroute.specs.Option`: :func:`int_in` with these bounds."""
    def convert(name, value):
        return int_in(name, value, lo, hi=hi, why=why)

    convert.bounds = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
    return convert


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
    if _is_bool(value):
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


def existing_file(what: str):
    """An option converter: the path of an existing file (``what`` names it in the message)."""

    def convert(name, value) -> str:
        path = Path(str(value)).expanduser()
        if not path.is_file():
            raise EvrouteError(f"{what} not found: {value}")
        return str(path)

    return convert


def parse_latlon(text: str, label: str = "the point") -> tuple[float, float]:
    """Parse ``"LAT,LON"`` (decimal degrees) with a one-line error on bad input naming ``label``.

    Returns
    -------
    tuple of float
        ``(lat, lon)``.
    """
    parts = [p.strip() for p in str(text).split(",")]
    try:
        if len(parts) != 2:
            raise ValueError
        lat, lon = float(parts[0]), float(parts[1])
    except ValueError:
        raise EvrouteError(f"{label} must be LAT,LON in decimal degrees (e.g. 43.735,7.423), got {text!r}") from None
    if not (math.isfinite(lat) and math.isfinite(lon) and -90 <= lat <= 90 and -180 <= lon <= 180):
        raise EvrouteError(f"{label} {text!r} is not a valid latitude,longitude")
    return lat, lon
