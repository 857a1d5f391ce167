"""The edge mapping: each evroute edge as its chain of SUMO edges.

SUMO's junction ids are the OSM node ids evroute keeps, and its edge ids name the OSM way they
come from (``W#k``, ``-W#k`` against the way's node order): a chain runs from the evroute edge's
tail node to its head node, preferring SUMO edges of the edge's own OSM way (:func:`map_edges`).
"""

from __future__ import annotations

import re

import networkx as nx
import pandas as pd

__all__ = ["map_edges"]


def _ways(sumo_edge_id: str) -> frozenset:
    """The OSM way ids a SUMO edge id can stand for: ``W#k`` is a segment of way W, ``-W#k`` of W
    driven against its node order, so ``-31118`` is way -31118 or way 31118 reversed (LuST's
    ways have negative ids) and ``--31118`` way -31118 reversed."""
    m = re.fullmatch(r"(-?)(-?\d+)(?:#\d+)?", sumo_edge_id)
    if m is None:
        return frozenset()
    reversed_, way = m.group(1) == "-", int(m.group(2))
    return frozenset({way} if not reversed_ or way < 0 else {way, -way})


def map_edges(net, sumo_edges: pd.DataFrame) -> dict[int, list[str]]:
    """The chain of SUMO edges of every evroute edge that has one.

    ``sumo_edges``: one row per SUMO edge (``id``, ``from``, ``to``, ``length``). A chain runs
    from the evroute edge's tail node to its head node (SUMO's junction ids are the OSM node
    ids), preferring SUMO edges of the edge's own OSM way; a chain on other ways is accepted
    only when its length is plausible (SUMO's edges stop at the junctions' borders, so a chain
    is up to a few junction radii shorter than the evroute edge between junction centres).

    Returns
    -------
    dict
        Evroute edge id → its SUMO edge ids, in driving order.
    """
    g = nx.MultiDiGraph()
    for r in sumo_edges.itertuples(index=False):
        g.add_edge(str(r[1]), str(r[2]), key=str(r[0]), length=float(r[3]), ways=_ways(str(r[0])))
    e = net.edges
    out: dict[int, list[str]] = {}
    for i, (u, v, way, length) in enumerate(zip(e.u.to_numpy(), e.v.to_numpy(), e.osm_way.to_numpy(),
                                                  e.length_m.to_numpy(), strict=True)):
        u, v = str(u), str(v)
        if u not in g or v not in g:
            continue
        tol = 0.05 * length + 5.0

        def weight(a, b, d, way=way):
            return min(x["length"] * (1.0 if way in x["ways"] else 1.5) for x in d.values())
        try:
            nodes = nx.dijkstra_path(g, u, v, weight=weight)
        except nx.NetworkXNoPath:
            continue
        chain, total = [], 0.0
        for a, b in zip(nodes[:-1], nodes[1:], strict=True):
            key, data = min(g[a][b].items(), key=lambda kv: (way not in kv[1]["ways"], kv[1]["length"]))
            chain.append(key)
            total += data["length"]
        same_way = all(way in g[a][b][k]["ways"] for a, b, k in zip(nodes[:-1], nodes[1:], chain, strict=True))
        if same_way or 0.5 * length - tol <= total <= 1.05 * length + tol:
            out[i] = chain
    return out
