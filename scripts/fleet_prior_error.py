"""How far a fleet's prior mean is from the truth of another vehicle, edge by edge.

Over the edges the fleet drove, the root mean square of (prior mean − the SUMO truth's expected
energy) for: the run vehicle's E_det; the fleet's posterior means times one factor a (least
squares, the best ``--vehicle-scale`` could learn); and ``--fleet-vehicle``'s mean (the run
vehicle's E_det plus the fleet's residuals beyond its own vehicle's E_det, times the physics'
ratio of the two), as :func:`evroute.runs.problem.prepare_problem` makes it. Then where that
error comes from: the fleet's posterior against its own vehicle's truth (its measurement: the
traversals' noise, the other seed's traffic) beside that vehicle's E_det, and the fleet vehicle's
*true* residuals times the physics' ratio (what the transfer would give a fleet without noise).

    python scripts/fleet_prior_error.py monaco:A --drives fleet/traversals.parquet \\
        --vehicle delivery-van --fleet-vehicle sumo-ev
"""

from __future__ import annotations

import argparse

import numpy as np

from evroute.runs.config import SimulationConfig
from evroute.runs.problem import prepare_problem


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("route")
    ap.add_argument("--drives", required=True, help="traversals.parquet of evroute drives import")
    ap.add_argument("--vehicle", default="delivery-van", help="the run's vehicle (the truth's)")
    ap.add_argument("--fleet-vehicle", default="sumo-ev", help="the vehicle that drove the fleet's drives")
    ap.add_argument("--dem", default=None)
    args = ap.parse_args()
    cfg = SimulationConfig(network=args.route.split(":")[0], route=args.route, vehicle=args.vehicle, truth="sumo",
                           dem=args.dem, prior_drives=args.drives)
    fleet = prepare_problem(cfg, 0)
    moved = prepare_problem(cfg.replace(fleet_vehicle=args.fleet_vehicle), 0)
    driven = fleet.fleet_counts > 0
    truth = np.asarray(fleet.truth, dtype=np.float64)[driven]
    m = fleet.prior_mean[driven]
    a = float(m @ truth / (m @ m))
    print(f"{args.route}: {int(driven.sum()):,} edges driven by the fleet; root mean square error of the prior mean")
    for name, mean in ((f"E_det ({args.vehicle})", fleet.e_det[driven]), (f"a x the fleet (a = {a:.2f})", a * m),
                       (f"--fleet-vehicle {args.fleet_vehicle}", moved.prior_mean[driven])):
        print(f"  {name:36s} {np.sqrt(np.mean((mean - truth) ** 2)):4.1f} Wh")
    own = prepare_problem(cfg.replace(vehicle=args.fleet_vehicle), 0)  # the fleet's own vehicle and truth
    f_own = np.asarray(own.truth, dtype=np.float64)[driven]
    e_own = own.e_det[driven]
    rho = float(e_own @ fleet.e_det[driven] / (e_own @ e_own))
    print(f"where it comes from (rho = {rho:.2f}):")
    for name, err in ((f"E_det ({args.fleet_vehicle}), its own truth", e_own - f_own),
                      ("the fleet, its own vehicle's truth", own.prior_mean[driven] - f_own),
                      ("E_det + rho x its true residuals", fleet.e_det[driven] + rho * (f_own - e_own) - truth)):
        print(f"  {name:36s} {np.sqrt(np.mean(err ** 2)):4.1f} Wh")


if __name__ == "__main__":
    main()
