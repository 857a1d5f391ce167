"""Benchmark the ``svgp`` backend (paper 003, Algorithm 3) against ``exact`` in the loop.

For each policy (default gp-ts and gp-bucb), backend (exact, svgp) and seed 0..N-1, one
bandit run of T rounds on ``luxembourg:A`` (``evroute data fetch luxembourg``). Both backends see the same truth, noise and policy streams per
seed, so the final cumulative regrets are paired by seed.

Reported (markdown):

- seconds per round (the loop's ``seconds``: posterior, policy, oracle and update), median
  and mean over all rounds t = 1..T and seeds, and the speed ratio svgp / exact of the
  medians;
- final cumulative regret per backend (median, mean ± standard error over seeds) and the
  paired difference svgp − exact (mean ± standard error over seeds).

Usage::

    python benchmarks/svgp_vs_exact.py [--horizon 500] [--seeds 5] [--network luxembourg]
        [--route A] [--policies gp-ts gp-bucb] [--inducing 1000] [--batch-size 2500]
        [--steps 1] [--fixed-hyperparameters] [--threads N] [--json FILE]
        [--seed-list 0,1,2]
    python benchmarks/svgp_vs_exact.py --combine a.json b.json   # one table from split runs

A full run (2 policies x 2 backends x 5 seeds x 500 rounds) takes hours on a CPU at the
paper's M = 1000: split it over processes with ``--seed-list``/``--policies`` and
``--json``, then ``--combine`` the files.

svgp uses the paper's defaults (M = 1000, B = 2500, G = 1, NGD lr 0.1, Adam lr 0.01)
unless told otherwise.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: evroute and the harness
from benchmarks.harness import Table, finish, parser  # noqa: E402
from evroute.runs.config import SimulationConfig  # noqa: E402
from evroute.runs.problem import prepare_problem  # noqa: E402
from evroute.runs.simulation import run_bandit  # noqa: E402


def parse_args(argv=None):
    p = parser(__doc__)
    p.add_argument("--network", default="luxembourg")
    p.add_argument("--route", default="A")
    p.add_argument("--horizon", type=int, default=500, help="T, rounds per run")
    p.add_argument("--seeds", type=int, default=5, help="N, seeds 0..N-1")
    p.add_argument("--policies", nargs="+", default=["gp-ts", "gp-bucb"])
    p.add_argument("--inducing", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=2500)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--fixed-hyperparameters", action="store_true")
    p.add_argument("--truth", default=None, help="the runs' truth (default: evroute simulate's; the table in the "
                   "docs: gp)")
    p.add_argument("--weights", default=None, help="the runs' weight rule (default: evroute simulate's)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--json", type=Path, default=None, help="write the raw results here")
    p.add_argument("--seed-list", default=None, help="comma-separated seeds (overrides --seeds)")
    p.add_argument("--combine", type=Path, nargs="+", default=None,
                   help="print one table from the --json files of earlier (split) runs")
    return p.parse_args(argv)


def run_one(args, policy: str, model: str, seed: int, net) -> dict:
    spec = model
    if model == "svgp":
        spec = (f"svgp[inducing={args.inducing},batch_size={args.batch_size},steps={args.steps},"
                f"learn_hyperparameters={str(not args.fixed_hyperparameters).lower()}]")
    settings = {k: v for k, v in (("truth", args.truth), ("weights", args.weights)) if v is not None}
    cfg = SimulationConfig(network=args.network, route=args.route, policy=policy, model=spec,
                           horizon=args.horizon, seed=seed, **settings)
    problem = prepare_problem(cfg, net=net)
    tic = time.perf_counter()
    res = run_bandit(cfg, problem)
    wall = time.perf_counter() - tic
    return {"policy": policy, "model": model, "seed": seed, "wall_seconds": wall,
            "seconds": res.rounds.seconds.to_list(),
            "final_regret_wh": float(res.summary["final_cumulative_regret_wh"]),
            "distinct_edges": int(res.summary["distinct_edges_observed"])}


def _se(x) -> float:
    x = np.asarray(x, dtype=float)
    return float(np.std(x, ddof=1) / math.sqrt(x.size)) if x.size > 1 else math.nan


def tables(results: list[dict], args) -> tuple[Table, Table]:
    title = (f"network {args.network}:{args.route}, T = {args.horizon}, {len(_seeds(args))} seeds; "
             f"svgp M = {args.inducing}, B = {args.batch_size}, G = {args.steps}, "
             f"hyperparameters {'fixed' if args.fixed_hyperparameters else 'learnt'}")
    runs = Table(["policy", "backend", "median s/round", "mean s/round", "median final regret (Wh)", "mean ± SE (Wh)"],
                 align="ll", title=title, stream=False)
    summary = Table(["policy", "speed ratio svgp/exact (median s/round)",
                     "final regret svgp − exact, paired mean ± SE (Wh)", "seeds"], stream=False)
    for policy in args.policies:
        per = {}
        for model in ("exact", "svgp"):
            rs = sorted((r for r in results if r["policy"] == policy and r["model"] == model),
                        key=lambda r: r["seed"])
            if not rs:
                continue
            secs = np.concatenate([r["seconds"] for r in rs])
            reg = np.array([r["final_regret_wh"] for r in rs])
            per[model] = (np.median(secs), reg, [r["seed"] for r in rs])
            runs.add(policy, model, f"{np.median(secs):.4f}", f"{np.mean(secs):.4f}", f"{np.median(reg):.1f}",
                     f"{np.mean(reg):.1f} ± {_se(reg):.1f}")
        if len(per) == 2:
            (se, re_, seeds_e), (ss, rs_, seeds_s) = per["exact"], per["svgp"]
            common = sorted(set(seeds_e) & set(seeds_s))
            d = np.array([rs_[seeds_s.index(s)] - re_[seeds_e.index(s)] for s in common])
            summary.add(policy, f"{ss / se:.1f}×", f"{np.mean(d):+.1f} ± {_se(d):.1f}", len(common))
    return runs, summary


def _seeds(args) -> list[int]:
    if args.seed_list:
        return [int(x) for x in args.seed_list.split(",") if x.strip()]
    return list(range(args.seeds))


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.combine:
        results, policies, seeds = [], [], set()
        for f in args.combine:
            data = json.loads(f.read_text())
            for k in ("network", "route", "horizon", "inducing", "batch_size", "steps"):
                setattr(args, k, type(getattr(args, k))(data["args"][k]))
            args.fixed_hyperparameters = data["args"]["fixed_hyperparameters"] == "True"
            results += data["results"]
        for r in results:
            seeds.add(r["seed"])
            if r["policy"] not in policies:
                policies.append(r["policy"])
        args.policies, args.seeds = policies, len(seeds)
        finish(args.out, "svgp-vs-exact", *tables(results, args))
        return 0
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    from evroute.roads.network import load_network

    net = load_network(args.network)
    results = []
    for policy in args.policies:
        for seed in _seeds(args):
            for model in ("exact", "svgp"):
                r = run_one(args, policy, model, seed, net)
                results.append(r)
                print(f"{policy:8s} {model:6s} seed {seed}: regret {r['final_regret_wh']:9.1f} Wh, "
                      f"median {np.median(r['seconds']):.4f} s/round, wall {r['wall_seconds']:.0f} s",
                      file=sys.stderr, flush=True)
                if args.json:
                    args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                                     "results": results}))
    finish(args.out, "svgp-vs-exact", *tables(results, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
