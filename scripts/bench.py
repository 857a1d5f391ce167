#!/usr/bin/env python
"""Benchmarks (not tests): network loads, oracle queries, seconds per bandit round.

Usage::

    EVROUTE_DATA_DIR=../shared/data python scripts/bench.py networks
    EVROUTE_DATA_DIR=../shared/data python scripts/bench.py oracle [--queries 200]
    EVROUTE_DATA_DIR=../shared/data python scripts/bench.py rounds [--horizon 500] [--blas-threads 1]
        [--cases luxembourg:A:gp-ucb,monaco:B:bi-ts]

Every section prints a markdown table of medians (and 95th percentiles); machines here are
shared and noisy, so compare ratios and medians, not single timings.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

NETWORKS = ("synthetic", "monaco", "luxembourg")


def _child(code: str, env: dict) -> float:
    """Seconds a fresh interpreter takes to run ``code`` (imports included)."""
    tic = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True)
    return time.perf_counter() - tic


def bench_networks(repeats: int) -> None:
    """Cold (empty cache) and warm load of each network, in fresh processes."""
    print("| network | edges | cold load s | warm load s (median) | warm in-process s |")
    print("| --- | --- | --- | --- | --- |")
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
        print(f"| {name} | {net.n_edges} | {cold:.2f} | {np.median(warm):.2f} | {np.median(inproc):.3f} |")


def bench_oracle(queries: int) -> None:
    """Dijkstra per query on random start/end pairs with random non-negative weights."""
    from evroute.roads.network import load_network
    from evroute.roads.oracle import Oracle

    print("| network | edges | queries | median ms | p95 ms |")
    print("| --- | --- | --- | --- | --- |")
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
        print(f"| {name} | {net.n_edges} | {queries} | {np.median(ms):.2f} | {np.percentile(ms, 95):.2f} |")


def bench_rounds(horizon: int, cases: list[tuple[str, str, str, str]], window: int = 50) -> None:
    """Seconds per round (policy + oracle + posterior update) over t = 1..horizon.

    Besides the median and 95th percentile over all rounds, the median of every window of
    ``window`` consecutive rounds is taken and the worst (largest) one reported, with the
    window where it occurs: a per-round target must hold at every t, not only on average.
    """
    from evroute.runs.config import SimulationConfig
    from evroute.runs.problem import prepare_problem
    from evroute.runs.simulation import run_bandit

    print(f"| route | policy | model | median ms | p95 ms | max ms | worst {window}-round median ms (rounds) "
          "| distinct edges | final regret Wh | peak RSS GB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for network, route, policy, model in cases:
        cfg = SimulationConfig(network=network, route=route, policy=policy, model=model, horizon=horizon, seed=0)
        problem = prepare_problem(cfg)
        res = run_bandit(cfg, problem)
        ms = res.rounds.seconds.to_numpy() * 1e3
        meds = [np.median(ms[i : i + window]) for i in range(0, ms.size, window)]
        worst = int(np.argmax(meds))
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
        lo, hi = worst * window + 1, min(ms.size, (worst + 1) * window)
        print(f"| {network}:{route} | {policy} | {res.summary['model']} | {np.median(ms):.1f} | "
              f"{np.percentile(ms, 95):.1f} | {ms.max():.1f} | {meds[worst]:.1f} ({lo}–{hi}) | "
              f"{res.summary['distinct_edges_observed']} | "
              f"{res.summary['final_cumulative_regret_wh']:.0f} | {rss:.2f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("section", choices=["networks", "oracle", "rounds", "all"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--horizon", type=int, default=500)
    parser.add_argument("--blas-threads", type=int, default=None,
                        help="limit BLAS threads (default: the library's own setting)")
    parser.add_argument("--cases", default=None,
                        help="comma-separated network:route:policy (model exact for gp-*); "
                             "default: gp-ts, gp-ucb, gp-bucb, bi-ts on luxembourg:A and monaco:B")
    args = parser.parse_args()
    if args.blas_threads is not None:
        from evroute.runs.simulation import limit_blas

        limit_blas(args.blas_threads)  # for the whole process (not used as a context)
    os.environ.setdefault("EVROUTE_DATA_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data"))
    if args.section in ("networks", "all"):
        bench_networks(args.repeats)
    if args.section in ("oracle", "all"):
        bench_oracle(args.queries)
    if args.section in ("rounds", "all"):
        if args.cases:
            cases = [(*c.split(":"), "exact") for c in args.cases.split(",")]
        else:
            cases = [(n, r, p, "exact") for n, r in (("luxembourg", "A"), ("monaco", "B"))
                     for p in ("gp-ts", "gp-ucb", "gp-bucb", "bi-ts")]
        bench_rounds(args.horizon, cases)


if __name__ == "__main__":
    main()
