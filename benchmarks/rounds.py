#!/usr/bin/env python
"""Network loads, oracle queries and seconds per bandit round (benchmarks, not tests).

Usage::

    python benchmarks/rounds.py networks
    python benchmarks/rounds.py oracle [--queries 200]
    python benchmarks/rounds.py rounds [--horizon 500] [--blas-threads 1] [--truth gp] [--weights rectified]
        [--cases luxembourg:A:gp-ucb,monaco:B:bi-ts] [--out DIR]

The real networks come from the data folder (``evroute data fetch all``; ``$EVROUTE_DATA_DIR``).
Every section prints a Markdown table of medians (and 95th percentiles) and the hardware line;
compare medians and ratios measured side by side, not single timings.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: evroute and the harness
from benchmarks.harness import Table, finish, parser, peak_rss_gb  # noqa: E402

NETWORKS = ("synthetic", "monaco", "luxembourg")


def _child(code: str, env: dict) -> float:
    """Seconds a fresh interpreter takes to run ``code`` (imports included)."""
    tic = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True)
    return time.perf_counter() - tic


def bench_networks(repeats: int) -> Table:
    """Cold (empty cache) and warm load of each network, in fresh processes."""
    table = Table(["network", "edges", "cold load s", "warm load s (median)", "warm in-process s"])
    for name in NETWORKS:
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "EVROUTE_CACHE_DIR": cache}
            code = f"from evroute.roads.network import load_network; load_network({name!r})"
            cold = _child(code, env)
            warm = [_child(code, env) for _ in range(repeats)]
            os.environ["EVROUTE_CACHE_DIR"] = cache
            from evroute.roads.network import load_network

            load_network(name)
            inproc = []
            for _ in range(repeats):
                tic = time.perf_counter()
                net = load_network(name)
                inproc.append(time.perf_counter() - tic)
        table.add(name, net.n_edges, f"{cold:.2f}", f"{np.median(warm):.2f}", f"{np.median(inproc):.3f}")
    return table


def bench_oracle(queries: int) -> Table:
    """Dijkstra per query on random start/end pairs with random non-negative weights."""
    from evroute.roads.network import load_network
    from evroute.roads.oracle import Oracle

    table = Table(["network", "edges", "queries", "median ms", "p95 ms"])
    for name in NETWORKS:
        net = load_network(name)
        oracle = Oracle.from_network(net)
        rng = np.random.default_rng(0)
        times = []
        for _ in range(queries):
            w = rng.uniform(0.0, 100.0, net.n_edges)
            s, t = (int(x) for x in rng.integers(net.n_edges, size=2))
            tic = time.perf_counter()
            oracle.shortest_path(w, s, t)
            times.append(time.perf_counter() - tic)
        ms = np.array(times) * 1e3
        table.add(name, net.n_edges, queries, f"{np.median(ms):.2f}", f"{np.percentile(ms, 95):.2f}")
    return table


def bench_rounds(horizon: int, cases: list[tuple[str, str, str, str]], seed: int, window: int = 50,
                 settings: dict | None = None) -> Table:
    """Seconds per round (policy + oracle + posterior update) over t = 1..horizon.

    Besides the median and 95th percentile over all rounds, the median of every window of
    ``window`` consecutive rounds is taken and the worst (largest) one reported, with the
    window where it occurs: a per-round target must hold at every t, not only on average.
    """
    from evroute.runs.config import SimulationConfig
    from evroute.runs.problem import prepare_problem
    from evroute.runs.simulation import run_bandit

    table = Table(["route", "policy", "model", "median ms", "p95 ms", "max ms",
                   f"worst {window}-round median ms (rounds)", "distinct edges", "peak RSS GB"], align="lll")
    for network, route, policy, model in cases:
        cfg = SimulationConfig(network=network, route=route, policy=policy, model=model, horizon=horizon, seed=seed,
                               **(settings or {}))
        problem = prepare_problem(cfg)
        res = run_bandit(cfg, problem)
        ms = res.rounds.seconds.to_numpy() * 1e3
        meds = [np.median(ms[i : i + window]) for i in range(0, ms.size, window)]
        worst = int(np.argmax(meds))
        lo, hi = worst * window + 1, min(ms.size, (worst + 1) * window)
        table.add(f"{network}:{route}", policy, res.summary["model"], f"{np.median(ms):.1f}",
                  f"{np.percentile(ms, 95):.1f}", f"{ms.max():.1f}", f"{meds[worst]:.1f} ({lo}–{hi})",
                  res.summary["distinct_edges_observed"], f"{peak_rss_gb():.2f}")
    return table


def main(argv=None) -> int:
    p = parser(__doc__, seed=0)
    p.add_argument("section", choices=["networks", "oracle", "rounds", "all"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--horizon", type=int, default=500)
    p.add_argument("--blas-threads", type=int, default=None,
                   help="limit BLAS threads (default: the library's own setting)")
    p.add_argument("--truth", default=None, help="the runs' truth (default: evroute simulate's)")
    p.add_argument("--weights", default=None, help="the runs' weight rule (default: evroute simulate's)")
    p.add_argument("--cases", default=None,
                   help="comma-separated network:route:policy (model exact for gp-*); "
                        "default: gp-ts, gp-ucb, gp-bucb, bi-ts on luxembourg:A and monaco:B")
    args = p.parse_args(argv)
    if args.blas_threads is not None:
        from evroute.runs.simulation import limit_blas

        limit_blas(args.blas_threads)  # for the whole process (not used as a context)
    tables = []
    if args.section in ("networks", "all"):
        tables.append(bench_networks(args.repeats))
    if args.section in ("oracle", "all"):
        tables.append(bench_oracle(args.queries))
    if args.section in ("rounds", "all"):
        if args.cases:
            cases = [(*c.split(":"), "exact") for c in args.cases.split(",")]
        else:
            cases = [(n, r, p, "exact") for n, r in (("luxembourg", "A"), ("monaco", "B"))
                     for p in ("gp-ts", "gp-ucb", "gp-bucb", "bi-ts")]
        settings = {k: v for k, v in (("truth", args.truth), ("weights", args.weights)) if v is not None}
        tables.append(bench_rounds(args.horizon, cases, args.seed, settings=settings))
    finish(args.out, f"rounds-{args.section}", *tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
