"""The scaling ladder of the sparse graph prior: seconds a round (median and 95th percentile) at one
network size, and the peak memory.

By default it measures the command a user types, on the defaults, with nothing in the
environment: for each policy, ``evroute simulate --network synthetic-<N>k --kernel graph
--policy P --horizon R`` in a fresh process (the rounds' seconds read from the run's
``rounds.parquet``; the peak resident memory of the largest of these processes)::

    python benchmarks/scale.py 100k --rounds 20 --policies gp-ucb,gp-bucb,gp-ts
    python benchmarks/scale.py 1000k --rounds 8 --policies gp-ts,gp-ucb
    python benchmarks/scale.py 100k --args "--model exact[threads=1]"   # a setting side by side

``--in-process`` runs the agents inside this process instead (route A, the graph Matérn kernel
κ = 1, ν = 2, the paper's σ₀ and ς, a truth drawn from the same prior) and prints each phase (the
network build, the prior's factorisation and selected inversion, the truth) and where a local
update's time goes: a development tool::

    python benchmarks/scale.py luxembourg --in-process --dense   # the dense exact backend
    python benchmarks/scale.py 100k --in-process --kernel combined --model nystrom --policies gp-ts,gp-ucb
    python benchmarks/scale.py 100k --in-process --warm --model "exact[update=global]"

Cold by default (a fresh cache: the first command builds the network and the prior's variances;
``--warm`` uses the user's cache). A size is ``synthetic-<N>k`` (``<N>k`` for short) or a
network name. Prints a Markdown table of one row and the hardware line.
"""

from __future__ import annotations

import gc
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: evroute and the harness
if "--warm" not in sys.argv:  # cold by default: network build and selected inversion timed from scratch
    os.environ["EVROUTE_CACHE_DIR"] = tempfile.mkdtemp(prefix="evroute-bench-scale-")

import evroute.priors.network_prior as network_prior_module  # noqa: E402
from benchmarks.harness import Table, finish, parser, peak_rss_gb  # noqa: E402
from evroute.bandit.agents import AgentSetup, make_agent  # noqa: E402
from evroute.bandit.environments import StaticEnvironment  # noqa: E402
from evroute.bandit.loop import run_loop  # noqa: E402
from evroute.physics.routes import edge_energies, resolve_route  # noqa: E402
from evroute.priors.graph_prior import GraphMaternPrior  # noqa: E402
from evroute.priors.network_prior import NetworkPrior  # noqa: E402
from evroute.roads.network import load_network  # noqa: E402
from evroute.roads.oracle import Oracle  # noqa: E402

POLICIES = ("bi-ts", "gp-ts", "gp-ucb", "gp-bucb")


_peak_gb = peak_rss_gb


def cli_row(name: str, policies, rounds: int, extra: list[str], route: str) -> list[str]:
    """Each policy through `evroute simulate` as typed (a fresh process), its rounds' seconds."""
    import pandas as pd

    evroute = shutil.which("evroute") or sys.exit("evroute is not on PATH: pip install -e . first")
    cells, first_wall, edges = [], None, None
    with tempfile.TemporaryDirectory(prefix="evroute-bench-cli-") as tmp:
        for policy in policies:
            out = Path(tmp) / policy
            cmd = [evroute, "simulate", "--network", name, "--kernel", "graph", "--policy", policy,
                   "--route", route, "--horizon", str(rounds), "--out", str(out), "--no-progress", *extra]
            print(f"  $ {shlex.join(['evroute', *cmd[1:]])}", file=sys.stderr, flush=True)
            tic = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, text=True)
            wall = time.perf_counter() - tic
            if done.returncode != 0:
                sys.exit(f"{policy}: exit {done.returncode}: {done.stderr.strip()[-500:]}")
            first_wall = wall if first_wall is None else first_wall
            sec = pd.read_parquet(out / "rounds.parquet").seconds.to_numpy()
            summary = __import__("json").loads((out / "summary.json").read_text())
            edges = __import__("pyarrow.parquet").parquet.read_metadata(out / "edges.parquet").num_rows
            cells.append(f"{np.median(sec):.3f} / {np.percentile(sec, 95):.3f}")
            print(f"  {policy}: {wall:.1f} s in all, median {np.median(sec):.3f} s a round, regret "
                  f"{summary['final_cumulative_regret_wh']:.1f} Wh; {done.stdout.strip().splitlines()[-1]}",
                  file=sys.stderr, flush=True)
    return [name, f"{edges:,}" if edges is not None else "–", f"{first_wall:.1f}", *cells,
            f"{peak_rss_gb(children=True):.2f}"]


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("network", help="synthetic-<N>k, <N>k, or a network name")
    p.add_argument("--rounds", type=int, default=50)
    p.add_argument("--policies", default=",".join(POLICIES), help="comma-separated (default: %(default)s)")
    p.add_argument("--route", default="A")
    p.add_argument("--warm", action="store_true", help="use the evroute cache (default: a fresh one)")
    p.add_argument("--dense", action="store_true",
                   help="the dense graph Matérn prior instead (E×E; for the crossover, where it fits)")
    p.add_argument("--kernel", choices=("graph", "combined"), default="graph",
                   help="the prior's kernel: the graph Matérn (sparse) or the paper's k_G·k_f + k_f' (rows by "
                        "sparse solves from 10k edges; only the dictionary backends serve it at scale)")
    p.add_argument("--model", default="exact", help="--in-process: posterior backend spec, e.g. nystrom")
    p.add_argument("--in-process", action="store_true", help="the agents in this process, phase by phase")
    p.add_argument("--args", default="", help="more arguments of evroute simulate, e.g. \"--model exact[threads=1]\"")
    args = p.parse_args(argv)
    policies = [s.strip() for s in args.policies.split(",") if s.strip()]
    name = args.network if not args.network[:1].isdigit() else f"synthetic-{args.network}"
    if not args.in_process:
        table = Table(["network", "edges", "first command s", *[f"{p} med / p95 s" for p in policies], "peak RSS GB"])
        table.add(*cli_row(name, policies, args.rounds, shlex.split(args.args), args.route))
        finish(args.out, f"scale-{name}", table)
        return 0
    from evroute.models import resolve_model

    model = resolve_model(args.model)
    t = time.perf_counter()
    net = load_network(name)
    t_build = time.perf_counter() - t
    print(f"  build {t_build:.1f} s, {net.n_edges:,} edges, peak {_peak_gb():.2f} GB", file=sys.stderr, flush=True)
    pm = edge_energies(net)
    pv, nv = (0.25 * np.std(pm)) ** 2, (0.1 * np.std(pm)) ** 2
    t = time.perf_counter()
    if args.dense:
        network_prior_module.GMRF_FROM_EDGES = 10**9  # keep the dense representation
        prior = NetworkPrior(net, pm, "graph", 1.0, 1.0, 2.0, pv)
        prior.dense()
        name += " (dense)"
    elif args.kernel == "combined":
        prior = NetworkPrior(net, pm, "combined", 1.0, 1.0, 2.0, pv)
        name += " (combined)"
    else:
        prior = GraphMaternPrior(net, pm, 1.0, 2.0, pv)
    if model.name != "exact":
        name += f" {args.model}"
    t_prior = time.perf_counter() - t
    print(f"  prior {t_prior:.1f} s, peak {_peak_gb():.2f} GB", file=sys.stderr, flush=True)
    t = time.perf_counter()
    truth = prior.sample(np.random.default_rng(1))
    t_truth = time.perf_counter() - t
    print(f"  truth {t_truth:.1f} s, peak {_peak_gb():.2f} GB", file=sys.stderr, flush=True)
    oracle = Oracle.from_network(net)
    trip = resolve_route(net, args.route)
    cells = []
    for policy in policies:
        env = StaticEnvironment(truth, np.sqrt(nv), oracle, trip.start, trip.end, seed=0)
        agent = make_agent(policy, AgentSetup(prior, nv, oracle, trip.start, trip.end, model=model))
        res = run_loop(env, agent, args.rounds, seed=0)
        sec = np.asarray(res.rounds.seconds, dtype=np.float64)
        cells.append(f"{np.median(sec):.3f} / {np.percentile(sec, 95):.3f}")
        extra = f", m = {agent.model.m}" if hasattr(getattr(agent, "model", None), "m") else ""
        split = getattr(agent.model, "seconds_split", None)
        if split is not None:  # the local GMRF updates: where the time went, and the bounds
            extra += (", update split " + ", ".join(f"{k} {v / args.rounds:.3f}" for k, v in split.items())
                      + f" s/round; max bounds {agent.model.max_mean_error_bound:.1e} sigma_0, "
                      f"{agent.model.max_var_error_bound:.1e} sigma_0^2; radius median "
                      f"{np.median([r for r, *_ in agent.model.trace] or [0]):.0f} (last round), "
                      f"{agent.model.n_redone}/{agent.model.n_pairs} pairs redone, "
                      f"{agent.model.n_lane_rounds} rounds in lanes ({agent.model.n_lanes_serial} finished one "
                      f"chunk after the other), {agent.model.n_lanes_met} tries of the lanes met")
        print(f"  {policy} ({_peak_gb():.2f} GB peak so far): regret {float(res.rounds.cumulative_regret_wh.iloc[-1]):.1f} Wh, "
              f"{agent.n_distinct} distinct edges{extra}", file=sys.stderr)
        del agent, env, res  # (one model alive at a time: the peak is the largest policy's)
        gc.collect()
    rss = _peak_gb()
    nnz = getattr(prior, "factor_nnz", None)
    table = Table(["network", "edges", "build s", "prior s", "truth s", "factor nnz",
                   *[f"{p} med / p95 s" for p in policies], "peak RSS GB"])
    table.add(name, f"{net.n_edges:,}", f"{t_build:.1f}", f"{t_prior:.1f}", f"{t_truth:.2f}",
              f"{nnz:,}" if nnz else "–", *cells, f"{rss:.2f}")
    finish(args.out, f"scale-{name}-in-process", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
