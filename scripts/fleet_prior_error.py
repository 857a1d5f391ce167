"""How far a fleet's prior mean is from the truth of another vehicle, edge by edge.

Over the edges the fleet drove, the root mean square of (prior mean − the SUMO truth's expected
energy) for: the run vehicle's E_det; the fleet's posterior means times one factor a (least
squares, the best ``--vehicle-scale`` could learn); and ``--fleet-vehicle``'s mean (the run
vehicle's E_det plus the fleet's residuals beyond its own vehicle's E_det, times the physics'
ratio of the two), as :func:`evroute.runs.problem.prepare_problem` makes it, and with those
residuals times their best factor b (what ``--vehicle-scale`` learns beside ``--fleet-vehicle``). Then where that
error comes from: the fleet's posterior against its own vehicle's truth (its measurement: the
traversals' noise, the other seed's traffic) beside that vehicle's E_det, and the fleet vehicle's
*true* residuals times the physics' ratio (what the transfer would give a fleet without noise).
Last the junctions: the same error of each turn's cost against the truth's, for the speed change
(``--prior-turns speed-change``), the fleet's ten-car means (``--prior-turns drives``) and the
fleet's per-turn posterior (what ``--learn-turns`` starts from), over the turns the fleet drove
and those it did not, with the share of the truth's turns inside the posterior's 90 % interval;
and what the kinetic bound would cost a learner held to it everywhere (``--learn-turns`` raises
a turn's index to the lower of the bound ψ(e′) − ψ(e) of its potential and the turn's posterior
mean, since the truth's per-turn means may go below the bound; until 2026-11-27 every turn's to the
bound, then every turn's the agent had not driven): the exact optimum with every
turn raised to the bound, driven on the truth, against the truth's optimum: the regret a round
that no amount of learning removed under that rule.

    python scripts/fleet_prior_error.py monaco:A --drives fleet/traversals.parquet \\
        --vehicle delivery-van --fleet-vehicle sumo-ev
"""

from __future__ import annotations

import argparse

import numpy as np

from evroute.physics.energy import energy_floor_wh, load_vehicle
from evroute.roads.optimum import exact_optimum
from evroute.runs.config import SimulationConfig
from evroute.runs.problem import exact_optimum_cached, prepare_problem
from evroute.world.drives import read_drives
from evroute.world.junctions import MIN_TURN_CARS, fleet_turns, measured_turns, speed_change_turns


def fleet_arguments(description: str) -> argparse.ArgumentParser:
    """The arguments of the scripts that weigh a fleet's drives against a route's truth (this one
    and fleet_ceiling.py): the route, the drives, the two vehicles and the DEM."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("route")
    ap.add_argument("--drives", required=True, help="traversals.parquet of evroute drives import")
    ap.add_argument("--vehicle", default="delivery-van", help="the run's vehicle (the truth's)")
    ap.add_argument("--fleet-vehicle", default="sumo-ev", help="the vehicle that drove the fleet's drives")
    ap.add_argument("--dem", default=None)
    return ap


def main() -> None:
    args = fleet_arguments(__doc__.split("\n\n")[0]).parse_args()
    cfg = SimulationConfig(network=args.route.split(":")[0], route=args.route, vehicle=args.vehicle, truth="sumo",
                           dem=args.dem, prior_drives=args.drives)
    fleet = prepare_problem(cfg, 0)
    moved = prepare_problem(cfg.replace(fleet_vehicle=args.fleet_vehicle), 0)
    driven = fleet.fleet_counts > 0
    truth = np.asarray(fleet.truth, dtype=np.float64)[driven]
    m = fleet.prior_mean[driven]
    a = float(m @ truth / (m @ m))
    # with --fleet-vehicle, --vehicle-scale scales the moved residuals r alone: the best factor b on them
    e_det, moved_mean = fleet.e_det[driven], moved.prior_mean[driven]
    r = moved_mean - e_det
    b = float(r @ (truth - e_det) / (r @ r))
    print(f"{args.route}: {int(driven.sum()):,} edges driven by the fleet; root mean square error of the prior mean")
    for name, mean in ((f"E_det ({args.vehicle})", e_det), (f"a x the fleet (a = {a:.2f})", a * m),
                       (f"--fleet-vehicle {args.fleet_vehicle}", moved_mean),
                       (f"  its residuals times b (b = {b:.2f})", e_det + b * r)):
        print(f"  {name:36s} {np.sqrt(np.mean((mean - truth) ** 2)):4.1f} Wh")
    own = prepare_problem(cfg.replace(vehicle=args.fleet_vehicle), 0)  # the fleet's own vehicle and truth
    f_own = np.asarray(own.truth, dtype=np.float64)[driven]
    e_own = own.e_det[driven]
    rho = float(e_own @ e_det / (e_own @ e_own))
    print(f"where it comes from (rho = {rho:.2f}):")
    for name, err in ((f"E_det ({args.fleet_vehicle}), its own truth", e_own - f_own),
                      ("the fleet, its own vehicle's truth", own.prior_mean[driven] - f_own),
                      ("E_det + rho x its true residuals", e_det + rho * (f_own - e_own) - truth)):
        print(f"  {name:36s} {np.sqrt(np.mean(err ** 2)):4.1f} Wh")
    n = fleet.fleet_counts[driven]
    print("the fleet's means against its own vehicle's truth, by the traversals an edge has (root mean square error; "
          "the truth's residual from E_det beside it)")
    for lo, hi in ((1, 3), (3, 10), (10, 30), (30, 100), (100, None)):
        k = (n >= lo) & (n < (np.inf if hi is None else hi))
        if k.any():
            err, resid = own.prior_mean[driven][k] - f_own[k], f_own[k] - e_own[k]
            print(f"  {f'{lo} to {hi - 1}' if hi else f'{lo} or more':>10s} traversals: {int(k.sum()):5,d} edges, "
                  f"{np.sqrt(np.mean(err ** 2)):4.1f} Wh (the truth from E_det: {np.sqrt(np.mean(resid ** 2)):4.1f} Wh)")
    turns(moved, drives=args.drives, fleet_vehicle=args.fleet_vehicle)
    print("what the kinetic bound would cost a learner held to it at every turn (the least-energy route with every "
          "turn at least its bound, on the truth)")
    for prior_turns in ("speed-change", "drives"):
        learner = prepare_problem(cfg.replace(fleet_vehicle=args.fleet_vehicle, prior_turns=prior_turns,
                                              learn_turns=True), 0)
        best, bounded = bound_floor(learner)
        print(f"  --prior-turns {prior_turns:13s} optimum {best:,.1f} Wh, the bounded learner's best {bounded:,.1f} Wh: "
              f"{bounded - best:,.1f} Wh a round")


def turns(problem, *, drives: str, fleet_vehicle: str) -> None:
    """The junctions' costs an agent may start from, against the truth's."""
    truth = problem.ground_truth.turns
    table = read_drives(drives, problem.net.n_edges)
    by = load_vehicle(fleet_vehicle)
    post = fleet_turns(table, problem.net, problem.vehicle, measured_by=by)
    driven = post.counts > 0
    print(f"the junctions: {int(driven.sum()):,} of {driven.size:,} turns driven by the fleet; root mean square error "
          "(all / driven / not driven)")
    for name, costs in (("the speed change", speed_change_turns(problem.net, problem.vehicle).costs),
                        ("the fleet's ten-car means", measured_turns(table, problem.net, problem.vehicle,
                                                                     min_traversals=MIN_TURN_CARS,
                                                                     measured_by=by).costs),
                        ("the fleet's per-turn posterior", post.costs)):
        err = costs - truth.costs
        print(f"  {name:36s} " + " / ".join(f"{np.sqrt(np.mean(err[w] ** 2)):5.1f}" for w in
                                             (slice(None), driven, ~driven)) + " Wh")
    z = np.abs(post.costs - truth.costs) / np.sqrt(post.variance)
    print(f"  the posterior's 90 % intervals cover {np.mean(z < 1.645):.0%} of the truth's turns "
          f"({np.mean(z[driven] < 1.645):.0%} driven, {np.mean(z[~driven] < 1.645):.0%} not); "
          f"tau = {np.sqrt(post.variance[~driven].max()):.1f} Wh, one car's spread {post.noise_std:.1f} Wh")


def bound_floor(problem) -> tuple[float, float]:
    """The truth's least energy, and the truth's energy of the least-energy route when every turn
    costs at least the learner's kinetic bound (``problem.agent_turns.bound``) and every edge at
    least its floor."""
    net, truth, f = problem.net, problem.ground_truth.turns, np.asarray(problem.truth, dtype=np.float64)
    floor = energy_floor_wh(net.edges.length_m.to_numpy(), net.edges.grade.to_numpy(), problem.vehicle)[0]
    best = exact_optimum_cached(problem, 300)
    res = exact_optimum(net.n_edges, net.conn_src, net.conn_dst, edge_u=net.edges.u.to_numpy(),
                        edge_v=net.edges.v.to_numpy(), weights=np.maximum(f, floor), start=problem.route.start,
                        end=problem.route.end, time_limit=300, ends="auto",
                        turn_weights=np.maximum(truth.costs, problem.agent_turns.bound), walks=True)
    path = np.asarray(res.path, dtype=np.int64)
    arc = problem.oracle.turn_index(path)
    return float(best["energy"]), float(f[path].sum() + truth.costs[arc].sum())


if __name__ == "__main__":
    main()
