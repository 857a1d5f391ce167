"""Scaling ladder of the sparse graph prior (issue "country scale"): for each network size,
the network build, the prior build (sparse factorisation, selected inversion), a prior draw,
kernel rows by sparse solves, and seconds per posterior update of the exact backend on the
sparse prior (rows and diagonal only), with the peak memory of the process.

Usage (one size per process, so that the peak memory is that size's)::

    EVROUTE_DATA_DIR=../shared/data python scripts/bench_scale.py synthetic-10k
    for n in 1k luxembourg 10k 30k 100k; do python scripts/bench_scale.py $n; done

Cold by default (a fresh cache: the network build and the selected inversion are timed from
scratch; ``--warm`` uses the cache). A size is ``synthetic-<N>k`` (``<N>k`` for short) or a network name. Updates: 50 rounds of
a 60-edge workload (50 edges of a fixed route plus 10 random ones, as a route that is mostly
repeated), graph kernel (κ = 1, ν = 2), the paper's σ₀ and ς. Prints one Markdown row.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("EVROUTE_DATA_DIR", str(Path(__file__).resolve().parent.parent.parent / "shared" / "data"))
if "--warm" not in sys.argv:  # cold by default: network build and selected inversion timed from scratch
    import tempfile

    os.environ["EVROUTE_CACHE_DIR"] = tempfile.mkdtemp(prefix="evroute-bench-scale-")

import evroute.prior as prior_module  # noqa: E402
from evroute.models import make_model  # noqa: E402
from evroute.network import load_network  # noqa: E402
from evroute.prior import GraphMaternPrior, NetworkPrior  # noqa: E402
from evroute.routes import edge_energies  # noqa: E402

HEADER = ("| network | edges | build s | prior s | factor nnz | draw s | rows(20) s | update median s "
          "| update p95 s | peak RSS GB |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("network", help="synthetic-<N>k, <N>k, or a network name")
    p.add_argument("--rounds", type=int, default=50)
    p.add_argument("--header", action="store_true", help="print the table header first")
    p.add_argument("--warm", action="store_true", help="use the evroute cache (default: a fresh one)")
    p.add_argument("--dense", action="store_true",
                   help="the dense graph Matérn prior instead (E×E; for the crossover, where it fits)")
    args = p.parse_args(argv)
    name = args.network if not args.network[:1].isdigit() else f"synthetic-{args.network}"
    if args.header:
        print(HEADER)
    t = time.perf_counter()
    net = load_network(name)
    t_build = time.perf_counter() - t
    pm = edge_energies(net)
    pv, nv = (0.25 * np.std(pm)) ** 2, (0.1 * np.std(pm)) ** 2
    t = time.perf_counter()
    if args.dense:
        prior_module.SPARSE_FROM_EDGES = 10**9  # keep the dense representation
        prior = NetworkPrior(net, pm, "graph", 1.0, 1.0, 2.0, pv)
        prior.dense()
        name += " (dense)"
    else:
        prior = GraphMaternPrior(net, pm, 1.0, 2.0, pv)
    t_prior = time.perf_counter() - t
    t = time.perf_counter()
    truth = prior.sample(np.random.default_rng(1))
    t_draw = time.perf_counter() - t
    t = time.perf_counter()
    prior.rows(np.arange(20))
    t_rows = time.perf_counter() - t
    model = make_model("exact", prior, noise_var=nv)
    rng = np.random.default_rng(0)
    route = rng.choice(net.n_edges, 50, replace=False)
    times = []
    for _ in range(args.rounds):
        e = np.concatenate([route, rng.choice(net.n_edges, 10)])
        t = time.perf_counter()
        model.update(e, truth[e] + np.sqrt(nv) * rng.standard_normal(e.size))
        model.mean_std()
        times.append(time.perf_counter() - t)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    print(f"| {name} | {net.n_edges:,} | {t_build:.1f} | {t_prior:.1f} | {getattr(prior, 'factor_nnz', 0):,} | {t_draw:.2f} | "
          f"{t_rows:.3f} | {np.median(times):.3f} | {np.percentile(times, 95):.3f} | {rss:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
