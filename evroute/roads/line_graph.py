"""The line graph L(G) of a road network: its nodes are G's edges and its edges the legal turns
from one into the next (no U-turn onto the reverse edge but at a dead end, OSM turn restrictions
honoured), as two int64 arrays ``conn_src``, ``conn_dst``; and its largest strongly connected
component, which a prepared network keeps (:mod:`evroute.roads.network`).
"""

from __future__ import annotations

import numpy as np


def line_graph_arrays(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`line_graph` without turn restrictions, vectorised, for a graph with at most one
    edge each way between two nodes (the array-built synthetic city): (e1, e2) where e1 ends
    where e2 starts, except e2 = e1's reverse unless e1 ends at a dead end. Sorted by (e1, e2).
    """
    u = np.asarray(u, dtype=np.int64)
    v = np.asarray(v, dtype=np.int64)
    by_u = np.argsort(u, kind="stable")
    n = int(max(u.max(initial=-1), v.max(initial=-1))) + 1
    start = np.searchsorted(u[by_u], np.arange(n + 1))
    outs = start[v + 1] - start[v]  # edges leaving the node each edge ends at
    src = np.repeat(np.arange(u.size), outs)
    first = np.repeat(start[v] - np.cumsum(outs) + outs, outs) + np.arange(outs.sum())
    dst = by_u[first]
    reverse = v[dst] == u[src]
    only_reverse = outs[src] == 1  # a dead end: the U-turn is the only way on
    keep = ~reverse | only_reverse
    src, dst = src[keep], dst[keep]
    order = np.lexsort((dst, src))
    return src[order], dst[order]


def line_graph_component(n_edges: int, conn_src: np.ndarray, conn_dst: np.ndarray):
    """The largest strongly connected component of L(G): the mask of its edges and its turns,
    renumbered onto the kept edges (unchanged when every edge is kept)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    mat = coo_matrix((np.ones(len(conn_src)), (conn_src, conn_dst)), shape=(n_edges, n_edges)).tocsr()
    _, labels = connected_components(mat, directed=True, connection="strong")
    keep = labels == np.argmax(np.bincount(labels))
    if keep.all():
        return keep, conn_src, conn_dst
    new_id = np.cumsum(keep) - 1
    both = keep[conn_src] & keep[conn_dst]
    return keep, new_id[conn_src[both]], new_id[conn_dst[both]]


def _is_reverse(u, v, length, e1: int, e2: int) -> bool:
    """e2 runs back along e1: same end nodes swapped and (nearly) the same length."""
    return (u[e2] == v[e1] and v[e2] == u[e1]
            and abs(length[e1] - length[e2]) <= max(1.0, 0.01 * length[e1]))


def line_graph(u: np.ndarray, v: np.ndarray, length: np.ndarray, *, ways: list, restrictions: list[dict]):
    """Legal connections (e1, e2) of the line graph L(G).

    A connection exists where e1 ends where e2 starts, except (a) a U-turn onto e1's
    reverse edge unless e1 ends at a dead end (no other way on), and (b) turns forbidden
    by an OSM turn restriction (``no_*``: that turn; ``only_*``: every other turn from the
    ``from`` way at the ``via`` node).

    Returns
    -------
    conn_src, conn_dst : numpy.ndarray
        int64 arrays, sorted by (src, dst).
    n_removed : int
        Connections removed by turn restrictions.
    """
    out_by_node: dict[int, list[int]] = {}
    for e, a in enumerate(u):
        out_by_node.setdefault(int(a), []).append(e)
    src, dst = [], []
    for e1 in range(len(u)):
        outs = out_by_node.get(int(v[e1]), [])
        non_reverse = [e2 for e2 in outs if not _is_reverse(u, v, length, e1, e2)]
        allowed = outs if not non_reverse else non_reverse
        for e2 in allowed:
            src.append(e1)
            dst.append(e2)
    src = np.array(src, dtype=np.int64)
    dst = np.array(dst, dtype=np.int64)
    n_removed = 0
    if restrictions and len(src):
        way_edges: dict[int, set[int]] = {}
        for e, ws in enumerate(ways):
            for w in ws:
                way_edges.setdefault(w, set()).add(e)
        keep = np.ones(len(src), dtype=bool)
        index = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(src, dst, strict=True))}
        for r in restrictions:
            from_edges = [e for e in way_edges.get(r["from"], ()) if v[e] == r["via"]]
            to_edges = {e for e in way_edges.get(r["to"], ()) if u[e] == r["via"]}
            for e1 in from_edges:
                for e2 in out_by_node.get(int(r["via"]), []):
                    i = index.get((e1, e2))
                    if i is None:
                        continue
                    forbidden = (e2 in to_edges) if r["kind"].startswith("no_") else (
                        e2 not in to_edges if r["kind"].startswith("only_") else False)
                    if forbidden and keep[i]:
                        keep[i] = False
                        n_removed += 1
        src, dst = src[keep], dst[keep]
    return src, dst, n_removed
