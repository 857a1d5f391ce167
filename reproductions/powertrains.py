"""The powertrain world measured: each FASTSim car driving the same SUMO traffic (a network and
trip's atlas), its energy per km, how its edges (at a constant kinetic state) compare with the
paper's E_det and with the car's own fitted prior (``evroute vehicles fit``), and the truth's
conservation checks.

    python reproductions/powertrains.py --network monaco --route A --cars leaf,bolt,model3,zoe --ambient 20 \\
        [--out DIR]

Needs the sumo and fastsim extras (pip install "evroute[sumo,fastsim]").
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: evroute and the harness
from benchmarks.harness import finish, parser  # noqa: E402
from evroute.physics.energy import load_vehicle  # noqa: E402
from evroute.physics.routes import edge_energies, resolve_route  # noqa: E402
from evroute.roads.network import load_network  # noqa: E402
from evroute.roads.oracle import Oracle  # noqa: E402
from evroute.world.powertrain import fit_vehicle  # noqa: E402
from evroute.world.sumo_atlas import build_atlas  # noqa: E402
from evroute.world.sumo_truth import atlas_conservation, edet_agreement  # noqa: E402


def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--network", default="monaco")
    ap.add_argument("--route", default="A")
    ap.add_argument("--cars", default="leaf,bolt,model3,zoe")
    ap.add_argument("--ambient", default="20", help="comma-separated temperatures (degrees C)")
    ap.add_argument("--rate", type=float, default=1800.0)
    ap.add_argument("--hours", type=float, default=0.5)
    ap.add_argument("--probes", type=int, default=3)
    ap.add_argument("--min-traversals", type=int, default=5)
    a = ap.parse_args(argv)
    net = load_network(a.network)
    route = resolve_route(net, a.route)
    kw = dict(oracle=Oracle.from_network(net), start=route.start, end=route.end, rate=a.rate, hours=a.hours,
              probes=a.probes)
    length_km = net.edges.length_m.to_numpy() / 1000.0
    paper = edge_energies(net, load_vehicle(None))
    sumo = build_atlas(net, a.network, load_vehicle(None), **kw)
    rows = [_row("sumo-ev (SUMO's own)", sumo, net, paper, None, length_km, a.min_traversals, 0.0)]
    for temp in (float(x) for x in a.ambient.split(",")):
        for car in a.cars.split(","):
            tic = time.perf_counter()
            atlas = build_atlas(net, a.network, load_vehicle(None), powertrain=car, ambient_c=temp, **kw)
            seconds = time.perf_counter() - tic
            fitted = fit_vehicle(car, temp).vehicle
            rows.append(_row(f"{car} at {temp:g} C", atlas, net, paper, edge_energies(net, fitted), length_km,
                             a.min_traversals, seconds, start=route.start, end=route.end))
    for r in rows:
        print(json.dumps(r))
    finish(a.out, f"powertrains-{a.network}", data={"network": a.network, "route": a.route, "rows": rows})
    return 0


def _row(label, atlas, net, paper, fitted, length_km, min_traversals, seconds, start=None, end=None) -> dict:
    t = atlas.table
    km = float(length_km[t.edge.to_numpy()].sum())
    mean, counts = atlas.mean_energy(net.n_edges, min_traversals=min_traversals, column="edge_wh")
    out = {"world": label, "build_s": round(seconds, 1), "traversals": len(t), "km_driven": round(km, 1),
           "wh_per_km": round(float(t.energy_wh.sum()) / km, 1),
           "edge_wh_per_km": round(float(t.edge_wh.sum()) / km, 1),
           "edet_paper": edet_agreement(paper, mean)}
    if fitted is not None:
        out["edet_fitted"] = edet_agreement(fitted, mean)
        ok = np.isfinite(mean)
        out["rmse_paper_wh"] = float(np.sqrt(np.mean((paper[ok] - mean[ok]) ** 2)))
        out["rmse_fitted_wh"] = float(np.sqrt(np.mean((fitted[ok] - mean[ok]) ** 2)))
    if atlas.vehicle is not None and start is not None:
        c = atlas_conservation(atlas, net, atlas.vehicle, start=start, end=end)["split"]
        out["conservation"] = {k: c[k] for k in ("negative_cycle", "below_floor_share", "turn_violations",
                                                 "drive_error_median", "optimum_wh", "fastest_wh")}
    if "recost" in atlas.summary:
        out["recost"] = atlas.summary["recost"]
    return out


if __name__ == "__main__":
    sys.exit(main())
