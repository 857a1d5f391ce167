"""Match quality and throughput of ``evroute drives import`` against SUMO's answer key.

SUMO drives on a network, degraded to a GPS noise and a rate, imported, and compared traversal
by traversal with SUMO's own accounting (needs the sumo extra)::

    python benchmarks/map_matching.py monaco --vehicles 30 --noise 0,5,10,20 --rates 1,0.2

Reports, per noise and rate: the share of the driven length (the answer key's complete
traversals) whose edge the import found at that time, the median absolute error of the matched
traversals' energy (relative, where SUMO's is at least 5 Wh, and in Wh) and of their energy at a
constant kinetic state (``edge_wh``), the matched traversals' energy summed against SUMO's, and
the fixes matched a second (one process). Beside SUMO's accounting (its own ends of an edge, each
reporting step booked whole), the same errors against the import's own accounting of the exact
positions: SUMO's energies split where ``--boundary`` draws a traversal's ends, read off the 1 Hz
drives without noise (the reference of what the noise and the rate cost, in the convention the
import writes).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: evroute and the harness
from benchmarks.harness import Table, finish, parser  # noqa: E402
from evroute.physics.energy import load_vehicle  # noqa: E402
from evroute.roads.network import load_network  # noqa: E402
from evroute.world import drives, matching  # noqa: E402
from evroute.world.drives import (  # noqa: E402
    MATCHERS,
    TRAVERSAL_COLUMNS,
    ImportReport,
    degrade,
    make_matcher,
    match_trip,
    plausible_traversals,
    trip_speeds,
)
from evroute.world.sumo_drives import sumo_drives  # noqa: E402


def compare(answer: pd.DataFrame, got: pd.DataFrame, length: np.ndarray) -> dict:
    """Pair each answer traversal with the import's traversal of the same trip and edge whose
    entry is nearest (within half the traversal's time, at least 5 s)."""
    a = answer.reset_index(drop=True)
    right = np.zeros(len(a), dtype=bool)
    err, err_wh, err_edge = [], [], []
    ours, theirs = 0.0, 0.0
    groups = {k: g for k, g in got.groupby(["trip", "edge"])}
    for i, r in enumerate(a.itertuples(index=False)):
        g = groups.get((r.trip, r.edge))
        if g is None:
            continue
        gap = np.abs(g.enter_s.to_numpy() - r.enter_s)
        j = int(np.argmin(gap))
        if gap[j] <= max(5.0, 0.5 * r.seconds):
            right[i] = True
            e = float(g.energy_wh.iat[j])
            ours += e
            theirs += r.energy_wh
            err_wh.append(abs(e - r.energy_wh))
            if abs(r.energy_wh) >= 5.0:
                err.append(abs(e - r.energy_wh) / abs(r.energy_wh))
            if abs(r.edge_wh) >= 5.0:
                err_edge.append(abs(float(g.edge_wh.iat[j]) - r.edge_wh) / abs(r.edge_wh))
    driven = length[a.edge.to_numpy()]
    keys = {k: g.enter_s.to_numpy() for k, g in a.groupby(["trip", "edge"])}
    phantom = 0
    for r in got.itertuples(index=False):
        enter = keys.get((r.trip, r.edge))
        if enter is None or np.abs(enter - r.enter_s).min() > max(5.0, 0.5 * r.seconds):
            phantom += 1
    return {"phantom": phantom / max(1, len(got)),"length_right": float(driven[right].sum() / driven.sum()), "traversals_right": float(right.mean()),
            "energy_err_median": float(np.median(err)) if err else float("nan"),
            "energy_err_wh_median": float(np.median(err_wh)) if err_wh else float("nan"),
            "edge_err_median": float(np.median(err_edge)) if err_edge else float("nan"),
            "total_err": ours / theirs - 1.0}


def main(argv=None) -> int:
    ap = parser(__doc__, seed=0)
    ap.add_argument("network")
    ap.add_argument("--vehicles", type=int, default=30)
    ap.add_argument("--noise", default="0,5,10,20")
    ap.add_argument("--rates", default="1,0.2")
    ap.add_argument("--dem")
    ap.add_argument("--boundary", default="centre", choices=("centre", "sumo"),
                    help="where the import draws a traversal's ends: at the junction's centre (the default), or "
                         "as SUMO's answer key does (steps booked whole, edges ending past the junction)")
    ap.add_argument("--matcher", default="hmm", choices=tuple(MATCHERS),
                    help="evroute's own hidden Markov matcher (hmm, the import's default) or leuvenmapmatching's")
    ap.add_argument("--no-speed", action="store_true",
                    help="drop the logged speed from the degraded traces (a phone's trace: positions and energy "
                         "only); the reference of the exact positions keeps it")
    ap.add_argument("--odometry", metavar="FLOOR,SHARE",
                    help="the odometer's error a step for the import's smoother, metres and share of the step "
                         "(evroute.world.drives.ODOMETRY_FLOOR_M and ODOMETRY_SHARE; default: theirs)")
    ap.add_argument("--keep-implausible", action="store_true",
                    help="keep what the import drops as implausible (evroute.world.plausibility): the matcher's raw "
                         "traversals")
    ap.add_argument("--acceleration", type=float,
                    help="the random acceleration of the speed estimated from positions where a trace has none, m²/s³ "
                         "(evroute.world.matching.ACCELERATION_NOISE; default: theirs)")
    args = ap.parse_args(argv)
    if args.acceleration is not None:
        matching.ACCELERATION_NOISE = args.acceleration
    if args.odometry:
        floor, share = (float(x) for x in args.odometry.split(","))
        drives.ODOMETRY_FLOOR_M, drives.ODOMETRY_SHARE = floor, share
    net = load_network(args.network, dem=args.dem)
    veh = load_vehicle(None)
    t0 = time.perf_counter()
    d = sumo_drives(net, args.network, veh, vehicles=args.vehicles, seed=args.seed, dem=args.dem)
    print(f"# {args.network}: {d.summary['vehicles']} drives, {d.summary['fixes']:,} fixes at 1 Hz, answer key "
          f"{len(d.answer):,} traversals; SUMO {time.perf_counter() - t0:.1f} s; boundary {args.boundary}; odometer "
          f"{drives.ODOMETRY_FLOOR_M:g} m + {100 * drives.ODOMETRY_SHARE:g} % a step")
    length = net.edges.length_m.to_numpy()

    def imported(noise: float, rate: float, exact: bool = False) -> tuple[pd.DataFrame, int, float]:
        traces = degrade(d.traces, noise, rate, seed=args.seed)
        if args.no_speed and not exact:
            traces = traces.assign(speed_mps=np.nan)
        matcher = make_matcher(args.matcher, net, max(noise, 5.0))
        t0 = time.perf_counter()
        rows, report = [], ImportReport()
        for name, g in traces.groupby("trip", sort=True):
            g = g.assign(energy_wh=g.energy_wh - g.energy_wh.iat[0])
            got, _ = match_trip(matcher, g, veh, boundary=args.boundary, smooth=not exact)  # exact positions: as they are
            got = pd.DataFrame(got, columns=list(TRAVERSAL_COLUMNS[2:]))
            if not (exact or args.keep_implausible):  # what the import writes
                got = plausible_traversals(got, g, net, speed=trip_speeds(g, matcher.noise), report=report)
            rows.extend((name, *r[:6]) for r in got.itertuples(index=False))
        got = pd.DataFrame(rows, columns=["trip", "edge", "next_edge", "enter_s", "seconds", "energy_wh", "edge_wh"])
        got.attrs["dropped"] = sum(n for k, n in report.dropped.items())
        if report.dropped:
            print(f"# {noise:g} m, {rate:g} Hz: dropped {dict(sorted(report.dropped.items()))}", flush=True)
        return got, len(traces), time.perf_counter() - t0

    own, _, _ = imported(0.0, 1.0, exact=True)  # the exact positions every second: the import's own accounting of SUMO's energy
    key_match = compare(d.answer, own, length)
    print(f"# the import's own accounting: the 1 Hz drives without noise, {100 * key_match['length_right']:.1f} % of the "
          f"driven length on the right edge, {100 * key_match['phantom']:.1f} % of its traversals pairing with none of the "
          "answer key's")
    table = Table(["GPS noise (m)", "rate (Hz)", "driven length on the right edge", "traversals found",
                   "energy error (median, ≥ 5 Wh)", "energy error (median Wh)", "edge_wh error (median, ≥ 5 Wh)",
                   "the found traversals' energy summed", "fixes a second",
                   "against the exact positions: energy error, edge_wh error",
                   "traversals pairing with none of the answer key's", "dropped as implausible"], align="rr")
    for rate in [float(x) for x in args.rates.split(",")]:
        for noise in [float(x) for x in args.noise.split(",")]:
            got, fixes, seconds = imported(noise, rate)
            c = compare(d.answer, got, length)
            o = compare(own, got, length)
            table.add(f"{noise:g}", f"{rate:g}", f"{100 * c['length_right']:.1f} %", f"{100 * c['traversals_right']:.1f} %",
                      f"{100 * c['energy_err_median']:.1f} %", f"{c['energy_err_wh_median']:.2f}",
                      f"{100 * c['edge_err_median']:.1f} %", f"{100 * c['total_err']:+.2f} %", f"{fixes / seconds:,.0f}",
                      f"{100 * o['energy_err_median']:.1f} %, {100 * o['edge_err_median']:.1f} %",
                      f"{100 * c['phantom']:.1f} %", f"{got.attrs['dropped']:,}")
    finish(args.out, f"map-matching-{args.network}", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
