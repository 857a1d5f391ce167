import itertools

import networkx as nx
import numpy as np
import pytest

from evroute.errors import EvrouteError, NegativeCycleError
from evroute.roads.oracle import Oracle


def random_line_graph(n_edges, p, seed):
    rng = np.random.default_rng(seed)
    G = nx.gnp_random_graph(n_edges, p, seed=seed, directed=True)
    src = np.array([u for u, v in G.edges()], dtype=np.int64)
    dst = np.array([v for u, v in G.edges()], dtype=np.int64)
    return G, src, dst, rng


def nx_cost(G, w, s, t):
    """Reference: networkx Dijkstra where entering node v costs w[v]."""
    H = nx.DiGraph()
    H.add_nodes_from(G.nodes)
    H.add_weighted_edges_from((u, v, w[v]) for u, v in G.edges())
    return w[s] + nx.dijkstra_path_length(H, s, t)


@pytest.mark.parametrize("seed", range(12))
def test_dijkstra_matches_networkx(seed):
    G, src, dst, rng = random_line_graph(60, 0.08, seed)
    o = Oracle(60, src, dst)
    w = rng.uniform(0, 10, 60)
    w[rng.integers(60, size=5)] = 0.0  # zero weights are edges too
    reach = nx.single_source_shortest_path_length(G, 0)
    for t in list(reach)[:15]:
        r = o.shortest_path(w, 0, t)
        assert r.cost == pytest.approx(nx_cost(G, w, 0, t), abs=1e-9)
        assert r.edges[0] == 0 and r.edges[-1] == t
        assert all(G.has_edge(a, b) for a, b in itertools.pairwise(r.edges))
        assert r.cost == pytest.approx(w[r.edges].sum())


def test_start_equals_end_and_unreachable():
    o = Oracle(3, np.array([0, 1]), np.array([1, 0]))
    assert o.shortest_path(np.ones(3), 1, 1).edges == [1]
    with pytest.raises(EvrouteError, match="cannot be reached"):
        o.shortest_path(np.ones(3), 0, 2)
    with pytest.raises(EvrouteError, match="non-negative"):
        o.shortest_path(np.array([1.0, -1.0, 1.0]), 0, 1)
    with pytest.raises(EvrouteError, match="finite"):
        o.shortest_path(np.array([1.0, np.nan, 1.0]), 0, 1)
    with pytest.raises(EvrouteError, match="not an edge"):
        o.shortest_path(np.ones(3), 0, 7)


def brute_force(G, w, s, t):
    """Cheapest simple path in the line graph by enumeration."""
    if s == t:
        return w[s]
    return min(w[list(p)].sum() for p in nx.all_simple_paths(G, s, t))


@pytest.mark.parametrize("seed", range(20))
def test_bellman_ford_vs_enumeration(seed):
    G, src, dst, rng = random_line_graph(9, 0.3, seed)
    o = Oracle(9, src, dst)
    w = rng.uniform(0, 3, 9) - 4.0 * (rng.random(9) < 0.25)
    reach = nx.descendants(G, 0) | {0}
    neg_cycle = any(w[c].sum() < 0 for c in nx.simple_cycles(G.subgraph(reach)))
    for t in reach - {0}:
        if neg_cycle:
            with pytest.raises(NegativeCycleError):
                o.bellman_ford_path(w, 0, t)
        else:
            r = o.bellman_ford_path(w, 0, t)
            assert r.cost == pytest.approx(brute_force(G, w, 0, t), abs=1e-9)


def test_bellman_ford_negative_weights_on_a_dag():
    G = nx.gn_graph(12, seed=3).reverse()  # a DAG rooted at 0 (edges point away from 0)
    src = np.array([u for u, v in G.edges()])
    dst = np.array([v for u, v in G.edges()])
    w = np.random.default_rng(0).uniform(-5, 5, 12)
    o = Oracle(12, src, dst)
    for t in nx.descendants(G, 0):
        assert o.bellman_ford_path(w, 0, t).cost == pytest.approx(brute_force(G, w, 0, t))


def test_negative_cycle_is_detected():
    # 0 -> 1 -> 2 -> 1 ... with w[1] + w[2] < 0
    o = Oracle(4, np.array([0, 1, 2, 2]), np.array([1, 2, 1, 3]))
    with pytest.raises(NegativeCycleError, match="negative"):
        o.bellman_ford_path(np.array([1.0, -3.0, 1.0, 1.0]), 0, 3)
    assert o.bellman_ford_path(np.array([1.0, -1.0, 1.0, 1.0]), 0, 3).cost == pytest.approx(2.0)


@pytest.mark.real
def test_oracle_on_luxembourg_vs_networkx(luxembourg):
    net = luxembourg
    o = Oracle.from_network(net)
    rng = np.random.default_rng(0)
    w = rng.uniform(0.1, 50, net.n_edges)
    H = nx.DiGraph()
    H.add_weighted_edges_from((int(a), int(b), w[b]) for a, b in zip(net.conn_src, net.conn_dst, strict=True))
    for _ in range(5):
        s, t = (int(x) for x in rng.integers(net.n_edges, size=2))
        assert o.shortest_path(w, s, t).cost == pytest.approx(w[s] + nx.dijkstra_path_length(H, s, t))


@pytest.mark.parametrize("seed", range(8))
def test_unavailable_edges_are_left_out_of_the_search(seed):
    """Reference: networkx Dijkstra on the subgraph of available edges."""
    G, src, dst, rng = random_line_graph(60, 0.1, seed)
    o = Oracle(60, src, dst)
    w = rng.uniform(0, 10, 60)
    avail = rng.random(60) > 0.25
    avail[0] = True
    w_inf = np.where(avail, w, np.inf)  # the documented hook: unavailable edges weigh inf
    H = G.subgraph(np.flatnonzero(avail).tolist())
    reach = nx.single_source_shortest_path_length(H, 0)
    for t in [x for x in range(60) if avail[x]]:
        if t in reach:
            for weights in (w, w_inf):
                r = o.shortest_path(weights, 0, t, available=avail)
                assert r.cost == pytest.approx(nx_cost(H, w, 0, t), abs=1e-9)
                assert all(avail[r.edges]) and r.edges[0] == 0 and r.edges[-1] == t
                assert all(G.has_edge(a, b) for a, b in itertools.pairwise(r.edges))
        elif t in nx.single_source_shortest_path_length(G, 0):
            with pytest.raises(EvrouteError, match="uses only available edges"):
                o.shortest_path(w_inf, 0, t, available=avail)
    # everything available: the plain search
    full = np.ones(60, dtype=bool)
    for t in list(nx.single_source_shortest_path_length(G, 0))[:10]:
        assert o.shortest_path(w, 0, t, available=full).edges == o.shortest_path(w, 0, t).edges


def test_availability_errors():
    o = Oracle(3, np.array([0, 1]), np.array([1, 2]))
    w = np.ones(3)
    with pytest.raises(EvrouteError, match="end edge 2 is not available"):
        o.shortest_path(w, 0, 2, available=np.array([True, True, False]))
    with pytest.raises(EvrouteError, match="only available edges"):
        o.shortest_path(np.array([1.0, np.inf, 1.0]), 0, 2, available=np.array([True, False, True]))
    with pytest.raises(EvrouteError, match="boolean mask"):
        o.shortest_path(w, 0, 2, available=np.array([1, 1, 1]))
    with pytest.raises(EvrouteError, match="finite"):  # inf on an available edge
        o.shortest_path(np.array([1.0, np.inf, 1.0]), 0, 2, available=np.ones(3, dtype=bool))


@pytest.mark.parametrize("seed", range(8))
def test_turn_weights_against_networkx(seed):
    """A weight per legal turn, paid where the route turns (a truth of edges plus turns), also
    with edges closed: networkx's Dijkstra where the arc (u, v) costs w[v] + turn(u, v)."""
    G, src, dst, rng = random_line_graph(60, 0.08, seed)
    o = Oracle(60, src, dst)
    w = rng.uniform(0, 10, 60)
    turns = rng.uniform(0, 5, src.size)
    available = rng.random(60) > 0.1
    available[0] = True
    H = nx.DiGraph()
    H.add_nodes_from(G.nodes)
    H.add_weighted_edges_from((int(u), int(v), w[v] + t) for u, v, t in zip(src, dst, turns, strict=True)
                              if available[u] and available[v])
    for t in list(nx.single_source_shortest_path_length(H, 0))[1:15]:
        r = o.shortest_path(w, 0, t, available=available, turn_weights=turns)
        assert r.cost == pytest.approx(w[0] + nx.dijkstra_path_length(H, 0, t), abs=1e-9)
        idx = o.turn_index(r.edges)
        assert [(int(src[i]), int(dst[i])) for i in idx] == list(itertools.pairwise(r.edges))
        assert r.cost == pytest.approx(w[r.edges].sum() + turns[idx].sum())
    with pytest.raises(EvrouteError, match="non-negative turn"):
        o.shortest_path(w, 0, 1, turn_weights=-turns)
    with pytest.raises(EvrouteError, match="no legal turn"):
        o.turn_index([0, 0])
