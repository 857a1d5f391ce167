"""The Nyström dictionaries against the exact posterior (paper 002).

``evroute compare`` of gp-ucb and gp-ts on one route with ``--model exact``, ``nystrom`` and
``bkb``; then, per policy and backend, the paired final-regret difference to exact (mean ± s.e.
over seeds), the median seconds per round and the dictionary size m at the last round.

Usage::

    python benchmarks/dictionaries.py --out dictionaries
    # luxembourg:A, T = 500, 5 seeds by default; --route, --horizon, --seeds, --models, --jobs

The grids go under ``--out``, beside the result. Re-running resumes (``evroute compare`` keeps
its finished runs).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: evroute and the harness
from benchmarks.harness import Table, finish, mean_se, parser  # noqa: E402


def main(argv=None) -> int:
    p = parser(__doc__, out_required=True)
    p.add_argument("--route", default="luxembourg:A")
    p.add_argument("--horizon", type=int, default=500)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--policies", default="gp-ucb,gp-ts")
    p.add_argument("--models", default="exact,nystrom,bkb")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--args", default="", help="more arguments of evroute compare, e.g. \"--truth gp --weights rectified\"")
    args = p.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in models:
        d = args.out / m.replace("[", "_").replace("]", "").replace("=", "").replace(",", "_")
        subprocess.run([sys.executable, "-m", "evroute", "compare", "--routes", args.route, "--policies",
                        args.policies, "--seeds", str(args.seeds), "--horizon", str(args.horizon), "--model", m,
                        "--out", str(d), "--jobs", str(args.jobs), "--no-progress", *shlex.split(args.args)], check=True,
                       stdout=subprocess.DEVNULL)
    from evroute.runs.directory import read_run_json, read_run_table

    rows = {}
    for m in models:
        d = args.out / m.replace("[", "_").replace("]", "").replace("=", "").replace(",", "_")
        for run in sorted((d / "runs").iterdir()):
            _, s = read_run_json(run)
            r = read_run_table(run, "rounds")
            rows[(m, s["policy"], int(s["seed"]))] = {
                "regret": float(s["final_cumulative_regret_wh"]), "median_s": float(np.median(r.seconds)),
                "m": float(r.dictionary_size.iloc[-1]) if "dictionary_size" in r else float("nan")}
    table = Table(["policy", "model", "final regret (mean ± s.e.)", "paired difference to exact",
                   "median s / round", "m at T"], align="ll",
                  title=f"{args.route}, T = {args.horizon}, {args.seeds} seeds (paired by seed: same truth and noise)")
    for pol in [x.strip() for x in args.policies.split(",")]:
        for m in models:
            seeds = sorted(s for (mm, pp, s) in rows if mm == m and pp == pol)
            reg = np.array([rows[(m, pol, s)]["regret"] for s in seeds])
            ex = np.array([rows[("exact", pol, s)]["regret"] for s in seeds]) if "exact" in models else None
            mean, se = mean_se(reg)
            if ex is not None and m != "exact":
                diff = reg - ex
                _, dse = mean_se(diff)
                dcell = f"{diff.mean():+.1f} ± {dse:.1f} ({100 * diff.mean() / ex.mean():+.1f} %)"
            else:
                dcell = "–"
            med = np.median([rows[(m, pol, s)]["median_s"] for s in seeds])
            mm = np.mean([rows[(m, pol, s)]["m"] for s in seeds])
            table.add(pol, m, f"{mean:.1f} ± {se:.1f}", dcell, f"{med:.3f}", "–" if np.isnan(mm) else f"{mm:.0f}")
    finish(args.out, "dictionaries", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
