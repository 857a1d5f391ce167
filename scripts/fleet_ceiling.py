"""What a fleet's prior could give at best on one route: the learning target's ceiling.

The issue's learning target asks the fleet's prior to cut the best policy's regret to a third of
E_det's, for a vehicle the fleet did not contain. Where a fleet falls short, three things may be
to blame: the fleet's noise (its means are a few cars' and another seed's traffic), its coverage
(it never drove the roads the learner explores) and the transfer (another vehicle's residuals
times the physics' ratio ρ are not this vehicle's). This script separates them by replacing the
fleet's drives with perfect ones, made from the SUMO truth itself: each edge's mean exactly the
truth's expected energy, its traversals spread as the real fleet's are (about ± its pooled sd ς,
moved into this vehicle's units by ρ for this vehicle's own rows), so that the prior's variance is
what the real fleet's would be and only the means are perfect:

- ``the fleet's drives``: as imported (noise, coverage and transfer);
- ``fleet vehicle, exact, its edges``: the fleet vehicle's truth on the edges the fleet drove, as
  often as it drove them (coverage and transfer, no noise);
- ``fleet vehicle, exact, every edge``: on every edge ``--copies`` times (transfer only);
- ``this vehicle, exact, the fleet's edges``: this vehicle's own truth where the fleet drove, as
  often (coverage only);
- ``this vehicle, exact, every edge``: this vehicle's own truth everywhere (none of the three).

The other vehicle's rows run as the docs' fleet rows do (``--fleet-vehicle --vehicle-scale 0.5
--prior-drives-variance fleet``), this vehicle's with ``--prior-drives-variance fleet`` only (a
fleet of this vehicle has no scale to learn), beside E_det, all with the
paper's hyperparameters or those given (``--prior-std``, ``--noise-std``, ``--lengthscale``: the
fit ``evroute prior check --for-vehicle`` prints); exact regret (``--exact-optimum``), mean ± standard error over the seeds.
It also prints the fleet's coverage of what the E_det learner explores: of the edges it drove off
the optimal route, weighted by the rounds it drove them, the share the fleet drove at least once
and at least ten times.

    python scripts/fleet_ceiling.py luxembourg:B --drives fleet1k-hmm/traversals.parquet \\
        --dem luxembourg-dem500.tif
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from fleet_prior_error import fleet_arguments  # (scripts/, beside this one)

from evroute.runs.config import SimulationConfig
from evroute.runs.problem import fleet_ratio, prepare_problem
from evroute.runs.simulation import run_bandit
from evroute.world.drives import fleet_prior_mean, read_drives


def perfect_drives(values, edges, spread: float, path: Path) -> Path:
    """A traversals table whose means per edge are exactly ``values`` and whose pooled variance is
    ``spread``²: an edge's traversals alternate above and below its value (the last one of an odd
    count exact), so the prior's variance is what a fleet of that spread would give."""
    edges = np.sort(np.asarray(edges, dtype=np.int64), kind="stable")
    rank = np.arange(edges.size) - np.searchsorted(edges, edges, side="left")  # 0, 1, 2… within an edge
    count = np.bincount(edges)[edges]
    sign = np.where(rank % 2 == 0, 1.0, -1.0) * ((count % 2 == 0) | (rank < count - 1))
    dof, signed = edges.size - np.unique(edges).size, np.count_nonzero(sign)
    if signed:  # the pooled variance (fleet_prior_mean's: over the degrees of freedom) exactly spread²
        spread = spread * np.sqrt(dof / signed)
    y = np.asarray(values, dtype=np.float64)[edges] + spread * sign
    n = edges.size
    pd.DataFrame({"trip": [f"t{i}" for i in range(n)], "vehicle": "perfect", "edge": edges, "next_edge": -1,
                  "enter_s": 0.0, "seconds": np.nan, "energy_wh": y, "edge_wh": y, "kin_in_wh": 0.0,
                  "kin_out_wh": 0.0, "v_in": np.nan, "v_top": np.nan, "v_out": np.nan,
                  "match_dist_m": 0.0}).to_parquet(path)
    return path


def regrets(cfg: SimulationConfig, seeds: int) -> tuple[np.ndarray, list]:
    """The exact final regret of each seed, and each run's rounds."""
    out, rounds = [], []
    for seed in range(seeds):
        run = cfg.replace(seed=seed)
        res = run_bandit(run, prepare_problem(run, seed))
        out.append(res.summary["final_exact_regret_wh"])
        rounds.append(res.rounds)
    return np.asarray(out), rounds


def coverage(rounds: list, counts) -> tuple[float, float]:
    """Of the edges driven off the last round's route (the optimum), weighted by how often, the
    share the fleet drove at least once and at least ten times."""
    n, w = [], []
    for r in rounds:
        best = set(np.asarray(r.path.iloc[-1]).tolist())
        for path, regret in zip(r.path, r.exact_regret_wh, strict=True):
            if regret > 0.05:
                off = [e for e in np.asarray(path).tolist() if e not in best]
                n.extend(int(counts[e]) for e in off)
                w.extend([1.0] * len(off))
    n, w = np.asarray(n), np.asarray(w)
    return (float((w * (n >= 1)).sum() / w.sum()), float((w * (n >= 10)).sum() / w.sum())) if w.size else (1.0, 1.0)


def main() -> None:
    ap = fleet_arguments(__doc__.split("\n\n")[0])
    ap.add_argument("--policies", default="gp-ts,bi-ts")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--horizon", type=int, default=500)
    ap.add_argument("--copies", type=int, default=30, help="traversals of every edge in the 'every edge' rows")
    ap.add_argument("--rows", default=None, help="only the rows whose name contains this text (and E_det's)")
    ap.add_argument("--prior-std", type=float, default=None, help="σ₀ of every row, E_det's too (Wh; default the paper's)")
    ap.add_argument("--noise-std", default=None, help="ς of every row: Wh, or a per-edge model "
                    "(edge[a=…,b_per_km=…,tls=…]: evroute prior check prints the fitted one; default the paper's)")
    ap.add_argument("--lengthscale", type=float, default=None, help="the kernel's ℓ of every row (default 1)")
    args = ap.parse_args()
    fit = {k: v for k, v in (("prior_std", args.prior_std), ("noise_std", args.noise_std),
                             ("lengthscale", args.lengthscale)) if v is not None}  # (the config converts the text)
    base = SimulationConfig(network=args.route.split(":")[0], route=args.route, vehicle=args.vehicle, truth="sumo",
                            dem=args.dem, horizon=args.horizon, exact_optimum=True, **fit)
    van = prepare_problem(base, 0)
    car = prepare_problem(base.replace(vehicle=args.fleet_vehicle), 0)
    table = read_drives(args.drives, van.net.n_edges)
    fleet_edges = table.edge.to_numpy(np.int64)
    counts = np.bincount(fleet_edges, minlength=van.net.n_edges)
    driven = counts > 0
    spread = np.sqrt(fleet_prior_mean(car.prior_mean, table, car.prior_var)[2])
    rho = fleet_ratio(car.prior_mean[driven], van.prior_mean[driven])
    print(f"the fleet: {int(driven.sum()):,} edges driven, traversals' sd {spread:.1f} Wh, rho {rho:.3f}")
    every = np.repeat(np.arange(van.net.n_edges), args.copies)
    fleet = {"vehicle_scale": 0.5, "prior_drives_variance": "fleet"}
    own = {"prior_drives_variance": "fleet"}  # a fleet of this vehicle: no scale to learn
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        rows = [("E_det", {}),
                ("the fleet's drives", {**fleet, "prior_drives": args.drives, "fleet_vehicle": args.fleet_vehicle}),
                ("fleet vehicle, exact, its edges",
                 {**fleet, "fleet_vehicle": args.fleet_vehicle,
                  "prior_drives": str(perfect_drives(car.truth, fleet_edges, spread, tmp / "car-fleet.parquet"))}),
                ("fleet vehicle, exact, every edge",
                 {**fleet, "fleet_vehicle": args.fleet_vehicle,
                  "prior_drives": str(perfect_drives(car.truth, every, spread, tmp / "car-all.parquet"))}),
                ("this vehicle, exact, the fleet's edges",
                 {**own, "prior_drives": str(perfect_drives(van.truth, fleet_edges, rho * spread, tmp / "van-fleet.parquet"))}),
                ("this vehicle, exact, every edge",
                 {**own, "prior_drives": str(perfect_drives(van.truth, every, rho * spread, tmp / "van-all.parquet"))})]
        print(f"{args.route}, {args.vehicle} (fleet: {args.fleet_vehicle}); exact regret at T = {args.horizon}, "
              f"mean ± se over {args.seeds} seeds")
        best_edet = None
        for name, settings in rows:
            if args.rows and name != "E_det" and args.rows not in name:
                continue
            cells, means = [], []
            for policy in args.policies.split(","):
                r, rounds = regrets(base.replace(policy=policy, **settings), args.seeds)
                cells.append(f"{policy} {r.mean():8,.0f} ± {r.std(ddof=1) / np.sqrt(r.size):5,.0f}")
                means.append(r.mean())
                if name == "E_det":
                    best_edet = r.mean() if best_edet is None else min(best_edet, r.mean())
                    once, ten = coverage(rounds, counts)
                    cover = (f"   (the fleet drove {once:.0%} of what {policy} explored off the optimum, "
                             f"{ten:.0%} at least ten times)")
                    print(cover)
            print(f"  {name:34s} " + "   ".join(cells) + f"   best / E_det's best {min(means) / best_edet:.2f}")


if __name__ == "__main__":
    main()
