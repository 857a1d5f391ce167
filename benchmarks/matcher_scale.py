"""evroute's map matcher from a city to a country: its set-up, memory and throughput by network size.

For each network: the time and memory to load it and to set up :class:`evroute.world.matching.HMMMatcher`
(the roads' index), then ``--drives`` drives of about ``--hops`` edges each (a shortest route by
length from a random edge to one a random walk reached), driven along the junctions' straight lines
at 12 m/s, a fix a second with ``--noise`` metres of GPS noise, matched one after another in this
process: fixes a second, and the share of the driven length (the routes' interior edges) matched
to the right edge. Prints one Markdown row per network (the peak memory is the process's so far:
give the networks smallest first)::

    python benchmarks/matcher_scale.py synthetic-100k,synthetic-1000k --drives 50 --noise 10
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: evroute and the harness
from benchmarks.harness import Table, finish, parser, peak_rss_gb  # noqa: E402
from evroute.errors import EvrouteError  # noqa: E402
from evroute.geo import EARTH_RADIUS_M  # noqa: E402
from evroute.roads.network import load_network  # noqa: E402
from evroute.roads.oracle import Oracle  # noqa: E402
from evroute.world.matching import HMMMatcher  # noqa: E402

SPEED = 12.0


def main(argv=None) -> int:
    ap = parser(__doc__, seed=0)
    ap.add_argument("networks", help="comma-separated, e.g. synthetic-100k,synthetic-1000k")
    ap.add_argument("--drives", type=int, default=50)
    ap.add_argument("--hops", type=int, default=60)
    ap.add_argument("--noise", type=float, default=10.0)
    args = ap.parse_args(argv)
    table = Table(["network", "edges", "load s", "matcher set-up s", "peak memory GB", "fixes", "fixes a second",
                   "right edge %"])
    for name in args.networks.split(","):
        t0 = time.perf_counter()
        net = load_network(name)
        t_load = time.perf_counter() - t0
        t0 = time.perf_counter()
        matcher = HMMMatcher(net, args.noise)
        t_setup = time.perf_counter() - t0
        oracle = Oracle.from_network(net)
        rng = np.random.default_rng(args.seed)
        order = np.argsort(net.conn_src, kind="stable")
        src_sorted = np.asarray(net.conn_src)[order]
        dst_sorted = np.asarray(net.conn_dst)[order]
        lo = np.searchsorted(src_sorted, np.arange(net.n_edges), side="left")
        hi = np.searchsorted(src_sorted, np.arange(net.n_edges), side="right")
        e, nodes = net.edges, net.nodes
        u, v, length = e.u.to_numpy(), e.v.to_numpy(), e.length_m.to_numpy(np.float64)
        lat_of = nodes.lat.to_dict()
        lon_of = nodes.lon.to_dict()
        fixes = right = total = 0.0
        seconds = 0.0
        done = 0
        while done < args.drives:
            start = int(rng.integers(net.n_edges))
            end = start
            for _ in range(args.hops):  # a random walk decides where the trip goes
                if hi[end] == lo[end]:
                    break
                end = int(dst_sorted[rng.integers(lo[end], hi[end])])
            try:
                route = oracle.shortest_path(length, start, end).edges
            except EvrouteError:
                continue
            if len(route) < 5:
                continue
            pts = [(lat_of[u[route[0]]], lon_of[u[route[0]]])] + [(lat_of[v[k]], lon_of[v[k]]) for k in route]
            times = np.r_[0.0, np.cumsum(length[route]) / SPEED]
            grid = np.arange(0.0, times[-1], 1.0)
            lat = np.interp(grid, times, [p[0] for p in pts])
            lon = np.interp(grid, times, [p[1] for p in pts])
            lat = lat + rng.normal(0.0, args.noise, grid.size) / EARTH_RADIUS_M * 180 / np.pi
            lon = lon + rng.normal(0.0, args.noise, grid.size) / (EARTH_RADIUS_M * np.cos(np.radians(lat))) * 180 / np.pi
            t0 = time.perf_counter()
            pieces = matcher.match(lat, lon, t=grid, speed=np.full(grid.size, SPEED))
            seconds += time.perf_counter() - t0
            matched = {x for piece in pieces for x in piece[1]}
            inner = route[1:-1]
            right += float(sum(length[x] for x in inner if x in matched))
            total += float(length[inner].sum())
            fixes += grid.size
            done += 1
        table.add(name, f"{net.n_edges:,}", f"{t_load:.1f}", f"{t_setup:.2f}", f"{peak_rss_gb():.2f}", f"{int(fixes):,}",
                  f"{fixes / seconds:,.0f}", f"{100 * right / total:.1f}")
    finish(args.out, "matcher-scale", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
