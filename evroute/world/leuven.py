"""leuvenmapmatching made reproducible: the same match whatever Python's string-hash seed.

leuvenmapmatching (the matcher ``evroute drives import --matcher leuven`` uses,
:class:`evroute.world.drives.LeuvenMatcher`) keeps a lattice state's predecessors in Python sets
and hashes a state by its name (``BaseMatching.__hash__``: the hash of a string such as
``"12_13_5_0"``), so the order of those sets, and with it the choice between equally likely
states, would follow the process's hash seed (``PYTHONHASHSEED``, random by default).
:class:`ReproducibleMatching` hashes a state's name as Python does under ``PYTHONHASHSEED=0``
(:func:`seed_free_hash`), whatever this process's seed: the same sets in the same order, in any
process, and the same matches as before, when the matcher ran in worker processes started with
that seed.
"""

from __future__ import annotations

from functools import lru_cache

from leuvenmapmatching.matcher.distance import DistanceMatching

__all__ = ["seed_free_hash", "ReproducibleMatching"]

_MASK = (1 << 64) - 1
#: SipHash's initial state ("somepseudorandomlygeneratedbytes") with CPython's key under
#: ``PYTHONHASHSEED=0``: all zeros.
_V = (0x736F6D6570736575, 0x646F72616E646F6D, 0x6C7967656E657261, 0x7465646279746573)


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & _MASK


def _round(v0: int, v1: int, v2: int, v3: int) -> tuple[int, int, int, int]:
    """One SipRound."""
    v0 = (v0 + v1) & _MASK
    v2 = (v2 + v3) & _MASK
    v1 = _rotl(v1, 13) ^ v0
    v3 = _rotl(v3, 16) ^ v2
    v0 = _rotl(v0, 32)
    v2 = (v2 + v1) & _MASK
    v0 = (v0 + v3) & _MASK
    v1 = _rotl(v1, 17) ^ v2
    v3 = _rotl(v3, 21) ^ v0
    v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


@lru_cache(maxsize=1 << 16)
def seed_free_hash(text: str) -> int:
    """``hash(text)`` as CPython (3.11 and later: SipHash-1-3) computes it under
    ``PYTHONHASHSEED=0``, for a string of code points below 256 (a lattice state's name: digits and
    ``_``), whatever this process's seed.

    Returns
    -------
    int
        A signed 64-bit hash (never -1, as CPython's).
    """
    data = text.encode("latin-1")
    n = len(data)
    if n == 0:
        return 0
    v0, v1, v2, v3 = _V
    whole = n - n % 8
    for i in range(0, whole, 8):
        m = int.from_bytes(data[i:i + 8], "little")
        v3 ^= m
        v0, v1, v2, v3 = _round(v0, v1, v2, v3)
        v0 ^= m
    b = ((n & 0xFF) << 56) | int.from_bytes(data[whole:], "little")
    v3 ^= b
    v0, v1, v2, v3 = _round(v0, v1, v2, v3)
    v0 ^= b
    v2 ^= 0xFF
    for _ in range(3):
        v0, v1, v2, v3 = _round(v0, v1, v2, v3)
    h = v0 ^ v1 ^ v2 ^ v3
    if h >= 1 << 63:
        h -= 1 << 64
    return -2 if h == -1 else h


class ReproducibleMatching(DistanceMatching):
    """leuvenmapmatching's lattice state of its ``DistanceMatcher`` (``matching=`` this class),
    hashed by :func:`seed_free_hash` of its name instead of the process's string hash."""

    __slots__ = ()

    def __hash__(self) -> int:
        return seed_free_hash(self.cname)
