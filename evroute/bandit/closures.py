"""Closure patterns (``--truth NAME[closures=SPEC]``): which edges are open in each round (volatile arms, paper
004), registered into :data:`evroute.components.CLOSURES`: ``alternate`` (the best corridor
closed every other round) and ``random[rate=…]``. :class:`evroute.bandit.environments.RoadEnvironment`
asks a pattern for each round's open edges.
"""

from __future__ import annotations

import numpy as np

from ..components import CLOSURES
from ..errors import EvrouteError
from ..specs import Component, Option, declared
from ..validate import positive_float

__all__ = ["ClosurePattern", "AlternateClosures", "RandomClosures", "register_closures", "parse_closures", "CLOSURES"]

class ClosurePattern:
    """Which edges are open in each round (volatile arms). :meth:`attach` is called once with the
    environment (its oracle, trip and first truth); :meth:`mask` gives round t's open edges
    (None: all) and may redraw until
    :meth:`evroute.bandit.environments.RoadEnvironment.connected` holds; ``env`` is the
    :class:`evroute.bandit.environments.RoadEnvironment`."""

    def attach(self, env) -> None:
        """Prepare for ``env`` (e.g. find a corridor on its clairvoyant route)."""

    def mask(self, t: int, env) -> np.ndarray | None:
        raise NotImplementedError


class AlternateClosures(ClosurePattern):
    """The best corridor closed in every even round (paper 004's alternating domain, on roads):
    the middle third of the round-1 clairvoyant route (a sixth, a twelfth if no detour remains);
    an error if no detour exists."""

    def attach(self, env):
        route = env.route_for(env.expected(1), None)
        for frac in (1 / 3, 1 / 6, 1 / 12):  # the middle of the best route, as wide as still leaves a detour
            k = max(1, int(round(frac * route.size)))
            mid = (route.size - k) // 2
            corridor = np.setdiff1d(route[mid:mid + k], [env.start, env.end])
            mask = np.ones(env.n_edges, bool)
            mask[corridor] = False
            if corridor.size and env.connected(mask):
                self.corridor = corridor
                return
        raise EvrouteError("closures alternate: closing the middle of the best route leaves no route "
                           "between the trip's ends; choose another route or random closures")

    def mask(self, t, env):
        if t % 2:
            return None
        mask = np.ones(env.n_edges, bool)
        mask[self.corridor] = False
        return mask


def _rate(name, value) -> float:
    rate = positive_float(name, value)
    if not rate < 1:
        raise EvrouteError(f"closures random: {name} must be below 1, got {rate}")
    return rate


@declared(Option("rate", _rate, 0.05, "share of the edges closed each round", metavar="NUMBER"))
class RandomClosures(ClosurePattern):
    """Each edge other than the trip's ends closed with probability ``rate`` in every round (stream
    ``[seed, 5, t]``); a draw that disconnects the trip is redrawn, up to 20 times, then the
    round is left open."""

    def __init__(self, rate: float = 0.05):
        self.rate = rate

    def mask(self, t, env):
        rng = np.random.default_rng([env.seed, 5, t])
        for _ in range(20):
            m = rng.random(env.n_edges) >= self.rate
            m[[env.start, env.end]] = True
            if env.connected(m):
                return m
        return None


def register_closures(name: str, factory, *, options: tuple[Option, ...] | None = None, description: str = "",
                      overwrite: bool = False) -> None:
    """Register a closure pattern: ``factory(**options) -> ClosurePattern``."""
    CLOSURES.register(name, factory, options, description, overwrite)


register_closures("alternate", AlternateClosures, description="the best corridor closed every other round "
                  "(paper 004's alternating domain)")
register_closures("random", RandomClosures, description="each edge closed at random each round")


def parse_closures(spec) -> Component | None:
    """``None`` (also ``none``), ``alternate`` or ``random[rate=0.05]`` → the resolved pattern."""
    if spec in (None, "", "none"):
        return None
    return CLOSURES.resolve(spec)
