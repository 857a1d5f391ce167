"""evroute's own map matcher (evroute.world.matching): Viterbi's path against every path of a
small lattice scored independently (networkx's distances), routes and positions against drives
whose route is known, pieces where the car leaves the network, and the leuvenmapmatching
matcher beside it."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from evroute.errors import EvrouteError
from evroute.roads.network import load_network
from evroute.testing import check_matcher
from evroute.world import matching
from evroute.world.drives import MATCHERS, LeuvenMatcher
from evroute.world.leuven import seed_free_hash
from evroute.world.matching import HMMMatcher, Matcher

from .test_drives import SPEED, _drive, _route


def _noisy(fixes, sd, seed=0):
    rng = np.random.default_rng(seed)
    out = fixes.copy()
    out["lat"] += rng.normal(0, sd / 111_195, len(out))
    out["lon"] += rng.normal(0, sd / 111_195 / np.cos(np.radians(out.lat.mean())), len(out))
    return out


def _true_positions(fixes):
    """Each fix's distance along the route from its start (:func:`_drive`: at SPEED from the first fix)."""
    return (fixes.time_s.to_numpy() - fixes.time_s.iat[0]) * SPEED


def _edge_at(route, bounds, s):
    k = np.searchsorted(bounds, s, side="right") - 1
    return np.asarray(route)[k.clip(0, len(route) - 1)]


def test_a_clean_drive_gives_its_route_and_its_positions(synthetic):
    route = _route(synthetic)
    fixes = _drive(synthetic, route, np.full(len(route), 10.0))
    m = HMMMatcher(synthetic, 5.0)
    pieces = m.match(fixes.lat, fixes.lon, t=fixes.time_s, speed=fixes.speed_mps)
    assert len(pieces) == 1
    first, got, s, dist = pieces[0]
    assert first == 0 and s.size == len(fixes)
    length = synthetic.edges.length_m.to_numpy()
    # the fixes lie on the route's straight lines: the matched route is the driven one (a fix on a
    # junction may be placed at the end of an edge before the first or at the start of one after
    # the last)
    inner = got[next(i for i, e in enumerate(got) if e == route[1]) - 1:]
    assert inner[:len(route)] == route
    offset = sum(length[got[:got.index(route[0])]])
    np.testing.assert_allclose(s - offset, _true_positions(fixes), atol=1e-6)
    assert dist.max() < 1e-6


def _reference_scorer(net, noise):
    """The model written out again: a fix's emission and a step's cost, the steps' route
    distances from networkx's shortest paths between the junctions."""
    e = net.edges
    length = e.length_m.to_numpy()
    g = nx.DiGraph()
    for i in range(len(e)):
        a, b = e.u.iat[i], e.v.iat[i]
        if a != b and (not g.has_edge(a, b) or g[a][b]["weight"] > length[i]):
            g.add_edge(a, b, weight=length[i])
    dist_nodes = dict(nx.all_pairs_dijkstra_path_length(g, weight="weight"))
    beta = matching.BETA_PER_NOISE * noise

    def score(edges, along, dist, ref):
        total = -0.5 * float(np.sum((np.asarray(dist) / noise) ** 2))
        for k in range(len(edges) - 1):
            a, b = edges[k], edges[k + 1]
            d = dist_nodes.get(e.v.iat[a], {}).get(e.u.iat[b], np.inf)
            cost = abs(length[a] - along[k] + d + along[k + 1] - ref[k])
            if a == b:
                cost = min(cost, abs(along[k + 1] - along[k] - ref[k]))
            total -= cost / beta
        return total

    return score


@pytest.mark.parametrize("seed", range(6))
def test_viterbis_path_is_the_best_of_every_path_scored_independently(synthetic, seed):
    """Six noisy fixes (20 m), three candidates each: every one of the candidate sequences
    scored with the model written out again; the matcher's sequence (read back from its
    positions and distances) scores the best."""
    route = _route(synthetic, hops=4 + seed)
    fixes = _noisy(_drive(synthetic, route, np.full(len(route), 10.0), rate_hz=0.5), 20.0, seed=seed).iloc[:6]
    noise = 12.0
    m = HMMMatcher(synthetic, noise, candidates=3)
    north, east = m.project(fixes.lat.to_numpy(), fixes.lon.to_numpy())
    fix, edge, along, dist = m.candidates(north, east)
    t, v = fixes.time_s.to_numpy(), fixes.speed_mps.to_numpy()
    ref = np.diff(t) * 0.5 * (v[1:] + v[:-1])
    score = _reference_scorer(synthetic, noise)
    per_fix = [np.flatnonzero(fix == k) for k in range(len(fixes))]
    scores = {seq: score(edge[list(seq)], along[list(seq)], dist[list(seq)], ref) for seq in itertools.product(*per_fix)}
    best = max(scores.values())
    pieces = m.match(fixes.lat, fixes.lon, t=t, speed=v)
    assert len(pieces) == 1 and pieces[0][2].size == len(fixes)
    # the matcher's candidate of each fix: the one at its distance whose road, where it lies in
    # the matched route, puts the fix at its position
    _, got, s, d = pieces[0]
    bounds = np.r_[0.0, np.cumsum(synthetic.edges.length_m.to_numpy()[got])]
    chosen = []
    for k in range(len(fixes)):
        fits = [c for c in per_fix[k] if abs(dist[c] - d[k]) < 1e-9 and
                any(abs(bounds[j] + along[c] - s[k]) < 1e-6 for j, x in enumerate(got) if x == edge[c])]
        assert len(fits) >= 1
        chosen.append(fits[0])
    assert scores[tuple(chosen)] == pytest.approx(best, abs=1e-9)


def _drive_along(net, route, rate_hz):
    """Fixes of a car on ``route``'s shapes (each edge's geometry, by its length) at SPEED, every
    ``1 / rate_hz`` s, and each fix's true position along the route."""
    length = net.edges.length_m.to_numpy()
    lat, lon, along = [], [], []
    begins = 0.0
    for k, edge in enumerate(route):
        g = np.asarray(net.geometry[edge], dtype=np.float64)
        step = np.hypot(np.diff(g[:, 1]) * 111_195, np.diff(g[:, 0]) * 111_195 * np.cos(np.radians(g[:, 1].mean())))
        at = np.r_[0.0, np.cumsum(step)] * (length[edge] / step.sum())
        lat.append(g[:, 1][int(k > 0):])
        lon.append(g[:, 0][int(k > 0):])
        along.append((begins + at)[int(k > 0):])
        begins += length[edge]
    lat, lon, along = np.concatenate(lat), np.concatenate(lon), np.concatenate(along)
    s = np.arange(0.0, begins, SPEED / rate_hz)
    fixes = pd.DataFrame({"time_s": 100.0 + s / SPEED, "lat": np.interp(s, along, lat), "lon": np.interp(s, along, lon),
                          "speed_mps": SPEED})
    return fixes, s


def test_noisy_drives_match_at_least_as_much_as_leuvenmapmatching(synthetic):
    """10 m of noise at 1 Hz and 0.2 Hz on four routes: the share of the fixes placed on the edge
    the car was on, evroute's matcher against leuvenmapmatching's."""
    length = synthetic.edges.length_m.to_numpy()
    ours, theirs = [], []
    for seed, hops in enumerate((8, 10, 12, 14)):
        route = _route(synthetic, hops=hops)
        truth_bounds = np.r_[0.0, np.cumsum(length[route])]
        for rate in (1.0, 0.2):
            clean, true_s = _drive_along(synthetic, route, rate)
            fixes = _noisy(clean, 10.0, seed=seed)
            true_edge = _edge_at(route, truth_bounds, true_s)
            k = np.searchsorted(truth_bounds, true_s, "right")
            judged = np.minimum(true_s - truth_bounds[k - 1], truth_bounds[k.clip(0, len(route))] - true_s) > 15.0
            for matcher, out in ((HMMMatcher(synthetic, 10.0), ours), (LeuvenMatcher(synthetic, 10.0), theirs)):
                right = np.zeros(len(fixes), dtype=bool)
                for first, got, s, _ in matcher.match(fixes.lat.to_numpy(), fixes.lon.to_numpy(),
                                                      t=fixes.time_s.to_numpy(), speed=fixes.speed_mps.to_numpy()):
                    ok = np.isfinite(s)
                    bounds = np.r_[0.0, np.cumsum(length[got])]
                    idx = np.arange(first, first + s.size)[ok]
                    right[idx] = _edge_at(got, bounds, s[ok]) == true_edge[idx]
                out.append(right[judged].mean())
    assert np.mean(ours) >= 0.95
    assert np.mean(ours) >= np.mean(theirs) - 0.01


def test_a_car_off_the_network_ends_a_piece(synthetic):
    route = _route(synthetic, hops=14)
    fixes = _drive(synthetic, route, np.full(len(route), 10.0))
    gap = slice(len(fixes) // 2 - 2, len(fixes) // 2 + 2)
    fixes.loc[fixes.index[gap], "lat"] += 0.05  # 5 km north: no road within reach
    pieces = HMMMatcher(synthetic, 5.0).match(fixes.lat, fixes.lon, t=fixes.time_s, speed=fixes.speed_mps)
    assert [p[0] for p in pieces] == [0, gap.stop]
    assert pieces[0][2].size == gap.start
    assert pieces[1][2].size == len(fixes) - gap.stop
    for _, got, _, _ in pieces:
        assert set(got[1:-1]) <= set(route)


def test_a_car_waiting_far_from_any_junction(synthetic):
    """A car standing still in the middle of the longest road, farther from its junctions than a
    window's search reaches: matched to that road, no error (found on Luxembourg's fleet, where
    such a window's junctions were none)."""
    length = synthetic.edges.length_m.to_numpy()
    edge = int(np.argmax(length))
    g = np.asarray(synthetic.geometry[edge], dtype=np.float64)
    m = HMMMatcher(synthetic, 1.0)
    north, east = m.project(g[:, 1], g[:, 0])
    step = np.hypot(np.diff(north), np.diff(east))
    k = int(np.argmax(step))  # the middle of its longest segment
    lat, lon = (g[k, 1] + g[k + 1, 1]) / 2, (g[k, 0] + g[k + 1, 0]) / 2
    n = matching.WINDOW + 10
    pieces = m.match(np.full(n, lat), np.full(n, lon), t=np.arange(n, dtype=float), speed=np.zeros(n))
    assert len(pieces) == 1 and pieces[0][2].size == n
    assert set(pieces[0][1]) <= {edge, *np.flatnonzero((synthetic.edges.u.to_numpy() == synthetic.edges.v.iat[edge]) &
                                                       (synthetic.edges.v.to_numpy() == synthetic.edges.u.iat[edge]))}


def test_bad_noise_is_one_line(synthetic):
    with pytest.raises(EvrouteError, match="GPS noise"):
        HMMMatcher(synthetic, 0.0)


# --------------------------------------------------------------------------------------
# the contract both matchers follow (evroute.testing.check_matcher)
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MATCHERS))
def test_every_matcher_passes_the_shipped_contract_check(name):
    """``evroute.testing.check_matcher``: each matcher of ``--matcher`` (by its class and by its
    name) on the small synthetic city."""
    assert isinstance(MATCHERS[name](load_network("synthetic", size=60), 5.0), Matcher)
    ran = check_matcher(MATCHERS[name])
    assert ran == ["refuses a bad noise", "protocol", "pieces", "clean drive", "without times and speeds",
                   "off the network", "short trips", "deterministic"]
    assert check_matcher(name, gps_noise_m=10.0) == ran


class _Shifted(HMMMatcher):
    """A broken matcher: every position 5 m further along than the fix is."""

    def match(self, lat, lon, *, t=None, speed=None):
        return [(f, r, s + 5.0, d) for f, r, s, d in super().match(lat, lon, t=t, speed=speed)]


class _Jumping(HMMMatcher):
    """A broken matcher: its routes skip every other edge."""

    def match(self, lat, lon, *, t=None, speed=None):
        return [(f, r[::2], s, d) for f, r, s, d in super().match(lat, lon, t=t, speed=speed)]


class _Lenient(HMMMatcher):
    """A broken matcher: it takes a GPS noise of zero."""

    def __init__(self, net, gps_noise_m):
        super().__init__(net, max(gps_noise_m, 1.0))
        self.noise = gps_noise_m


def test_the_shipped_contract_check_catches_a_broken_matcher():
    with pytest.raises(AssertionError, match="position along its route within 1 m"):
        check_matcher(_Shifted)
    with pytest.raises(AssertionError, match="must be a walk"):
        check_matcher(_Jumping)
    with pytest.raises(AssertionError, match="must be refused"):
        check_matcher(_Lenient)


def test_seed_free_hash_is_pythons_string_hash_under_hash_seed_0():
    words = ["", "a", "0_1_0_0", "12_13_5_0", "1234567", "12345678", "123456789_987654321_1234_0", "x" * 16]
    code = f"print([hash(w) for w in {words!r}])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONHASHSEED": "0"}, timeout=60)
    assert eval(out.stdout) == [seed_free_hash(w) for w in words]  # noqa: S307 (our own printout)


#: A car standing still on every third two-way street of the small city (fixes about its middle):
#: the states on the street's two directions are equally likely, and leuvenmapmatching picks one
#: in the order of a Python set of its states.
_STANDING = """
import sys
import numpy as np
from evroute.roads.network import load_network
from evroute.world.drives import LeuvenMatcher
if sys.argv[1] == "library":  # leuvenmapmatching's own hash of a state: the process's string hash
    from leuvenmapmatching.matcher.distance import DistanceMatching
    import evroute.world.leuven as leuven
    leuven.ReproducibleMatching = DistanceMatching
net = load_network("synthetic", size=60)
e = net.edges
pairs = set(zip(e.u, e.v))
m = LeuvenMatcher(net, 5.0)
out = []
for i in range(0, net.n_edges, 3):
    if (e.v.iat[i], e.u.iat[i]) in pairs:
        lon, lat = np.asarray(net.geometry[i], float)[:2].mean(axis=0)
        rng = np.random.default_rng(i)
        pieces = m.match(lat + rng.normal(0, 3 / 111195, 12), lon + rng.normal(0, 3 / 80000, 12))
        out.append([(p[0], [int(x) for x in p[1]], p[2].round(6).tolist()) for p in pieces])
print(out)
"""


def test_leuvenmapmatching_breaks_ties_alike_whatever_the_hash_seed():
    """With evroute's hash of the lattice states (evroute.world.leuven) the pieces are the same
    under any hash seed, and the same as the library's own hashing gives under PYTHONHASHSEED=0
    (where ``evroute drives import`` used to run it); the library's own hashing alone differs
    between seeds on these fixes."""

    def run(how, seed):
        out = subprocess.run([sys.executable, "-W", "ignore", "-c", _STANDING, how], capture_output=True, text=True,
                             env={**os.environ, "PYTHONHASHSEED": seed}, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout

    ours = {run("evroute", seed) for seed in ("1", "2")}
    assert len(ours) == 1
    assert run("library", "0") in ours
    assert run("library", "1") not in ours  # (the test sees ties)
