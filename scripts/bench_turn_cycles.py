"""Time a junction learner that breaks its turns' cycles every round (issue "Drives in"): a
learn-turns run from a fleet's turns, whose turns below their kinetic bounds close cycles of
negative energy that :func:`evroute.bandit.policies.turn_potential` breaks, one Bellman–Ford pass
a cycle.

    python scripts/bench_turn_cycles.py --drives fleet1k-hmm/traversals.parquet --repeats 2

Prints each run's seconds and median round, and a digest of the rounds' table without its
timing column: run it on two commits (``git worktree``) to compare their speed and check that
their rounds are the same.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time

from evroute.runs.config import SimulationConfig
from evroute.runs.simulation import simulate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drives", required=True, help="the fleet's traversals (evroute drives import's table)")
    ap.add_argument("--network", default="monaco")
    ap.add_argument("--route", default="B")
    ap.add_argument("--policy", default="gp-ts")
    ap.add_argument("--horizon", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--dem")
    args = ap.parse_args()
    cfg = SimulationConfig(network=args.network, route=args.route, dem=args.dem, truth="sumo", policy=args.policy,
                           vehicle="delivery-van", horizon=args.horizon, seed=args.seed, exact_optimum=True,
                           prior_drives=args.drives, fleet_vehicle="sumo-ev", vehicle_scale=0.5,
                           prior_drives_variance="fleet", prior_turns="drives", learn_turns=True)
    times, per_round = [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        res = simulate(cfg, show_progress=False)
        times.append(time.perf_counter() - t0)
        per_round.append(float(res.rounds["seconds"].median()))
        rounds = res.rounds.drop(columns=["seconds"])
        digest = hashlib.sha256(rounds.to_csv(index=False).encode()).hexdigest()[:16]
        print(f"{args.network}:{args.route} {args.policy} seed {args.seed}, {args.horizon} rounds: "
              f"{times[-1]:.1f} s ({1e3 * per_round[-1]:.0f} ms a round, median), rounds {digest}", flush=True)
    print(f"median {statistics.median(times):.1f} s a run, {1e3 * statistics.median(per_round):.0f} ms a round")


if __name__ == "__main__":
    main()
