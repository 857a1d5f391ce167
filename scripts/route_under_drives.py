"""The route under a fleet's drives against the exact optimum of SUMO's truth.

For each route: the exact least-energy route of the SUMO truth (edges plus turns, one seed), and
the true energy of the routes that know less: E_det's least-energy route, the route under the
drives' edge means alone (no junctions), and ``evroute route --drives``'s route (edges plus the
junctions that at least N cars paid for) for each N of ``--min-traversals``.

    python scripts/route_under_drives.py monaco:A,monaco:B --drives fleet/traversals.parquet
    python scripts/route_under_drives.py luxembourg:A,luxembourg:B --drives lfleet/traversals.parquet \\
        --dem luxembourg-dem500.tif

The drives should come from another SUMO seed than the truth's (``evroute sumo drives --seed 1``,
then ``evroute drives import``): the truth is built for seed 0.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from evroute.bandit.policies import route_weights
from evroute.errors import EvrouteWarning
from evroute.physics.energy import energy_floor_wh
from evroute.physics.routes import reference_routes
from evroute.priors.prior import PRIOR_SCALE
from evroute.runs.config import SimulationConfig
from evroute.runs.problem import exact_optimum_cached, prepare_problem
from evroute.world.conservation import route_energy
from evroute.world.drives import drives_route, fleet_prior_mean, read_drives


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("routes", help="comma-separated routes, e.g. monaco:A,monaco:B")
    ap.add_argument("--drives", required=True, help="traversals.parquet of evroute drives import")
    ap.add_argument("--vehicle", default="sumo-ev")
    ap.add_argument("--dem", default=None)
    ap.add_argument("--min-traversals", default="3,10", help="comma-separated N")
    args = ap.parse_args()
    warnings.simplefilter("ignore", EvrouteWarning)  # (the weights' broken cycles, said elsewhere)
    mins = [int(x) for x in args.min_traversals.split(",")]
    print("| route | exact optimum (Wh) | E_det's route | drives, edges alone | "
          + " | ".join(f"drives, junctions of >= {n} cars" for n in mins) + " |")
    print("| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in mins) + " |")
    for route in args.routes.split(","):
        cfg = SimulationConfig(network=route.split(":")[0], route=route, vehicle=args.vehicle, truth="sumo",
                               dem=args.dem)
        p = prepare_problem(cfg, 0)
        turns, truth = p.ground_truth.turns, np.asarray(p.truth, dtype=np.float64)
        best = exact_optimum_cached(p, 300.0)["energy"]

        def driven(path, p=p, turns=turns, truth=truth, best=best):
            e = route_energy(p.oracle, truth, path, turns=turns)
            return f"{e:,.1f} (+{100 * (e / best - 1):.1f} %)"

        table = read_drives(args.drives, p.net.n_edges)
        e_det = p.prior_mean
        s0 = PRIOR_SCALE * float(np.std(e_det))
        mean, _, _ = fleet_prior_mean(e_det, table, s0 * s0)
        e = p.net.edges
        floor, potential = energy_floor_wh(e.length_m.to_numpy(), e.grade.to_numpy(), p.vehicle)
        w, _ = route_weights(mean, "potential", 0.0, floor=floor, potential=potential)
        edges_alone = p.oracle.shortest_path(w, p.route.start, p.route.end).edges
        energy = next(r for r in reference_routes(p.net, p.route, p.vehicle) if r["kind"] == "energy")["edges"]
        cells = [driven(drives_route(p.net, p.route, table, vehicle=p.vehicle, oracle=p.oracle,
                                     min_traversals=n)["edges"]) for n in mins]
        print(f"| {route} | {best:,.1f} | {driven(energy)} | {driven(edges_alone)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
