"""Geodesy constants shared by every module that measures distances on the Earth."""

from __future__ import annotations

__all__ = ["EARTH_RADIUS_M"]

#: Mean Earth radius in metres: osmnx's default (``osmnx.distance.great_circle``), so the
#: lengths evroute computes itself (synthetic cities, snapping points to roads) agree with
#: the edge lengths osmnx gives OSM networks.
EARTH_RADIUS_M = 6_371_009.0
