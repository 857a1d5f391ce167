"""Benchmark the per-round cost of the posterior backends (update + mean_std).

A random SPD prior covariance of Luxembourg's size (E = 5,600) is built from a Matérn-5/2
kernel on random 3-d points plus a small banded, graph-like PSD term. Each of 500 rounds
observes a path of 60 edges from a pool that grows so that ~1,500 distinct edges have been
observed at the end. Two workloads:

- ``uniform``: each path = the pool's newest edges + a uniform draw from the whole pool
  (worst case for caching: every round touches ~60 edges spread over all observed ones);
- ``routes``: paths are route alternatives that repeat (a few recent routes are re-driven;
  now and then a new one branches off an old one with a detour over new edges), closer
  to what a bandit policy does.

Usage::

    python benchmarks/posterior_updates.py [--edges 5600] [--rounds 500] [--path 60]
        [--distinct 1500] [--workload uniform routes] [--variant default always never bi]
        [--set refactor_every=0 ...] [--kernel-cache K.npy]

Prints median / p95 / max / mean seconds per round and the final drift against a
refactorisation from scratch.

A third workload replays a real run: ``--replay RUN_DIR [--rounds 50]`` feeds the
observations of an ``evroute simulate`` run directory (its ``observations.parquet``, round by
round) into each variant, with the run's own kernel, prior and noise, and also prints
where the time goes (cumulative time of the exact backend's internal steps)::

    evroute simulate --network luxembourg --route A --policy gp-ucb --horizon 50 --out ucb50
    python benchmarks/posterior_updates.py --replay ucb50 --variant default always
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: evroute and the harness
from benchmarks.harness import Table, finish, parser, spread  # noqa: E402
from evroute.models import make_model  # noqa: E402
from evroute.priors.prior import DensePrior  # noqa: E402


def make_kernel(E: int, seed: int = 0) -> np.ndarray:
    """Matérn-5/2 on random 3-d points (lengthscale 1) + banded graph-like term, unit diag."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 6.0, size=(E, 3))
    sq = np.einsum("ij,ij->i", X, X)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * (X @ X.T), 0.0)
    d = np.sqrt(d2, out=d2)
    r = np.sqrt(5.0) * d
    K = (1.0 + r + r * r / 3.0) * np.exp(-r)
    del d, r
    # graph-like term: B Bᵀ with B banded (each edge tied to its next 3 ids)
    band = 4
    W = rng.uniform(0.2, 1.0, size=(E, band))
    G = np.zeros((E, E))
    for j in range(band):
        idx = np.arange(E - j)
        G[idx, idx + j] = W[: E - j, j]
    GG = G @ G.T
    del G
    GG /= np.mean(np.diag(GG))
    K = 0.8 * K + 0.2 * GG
    K = 0.5 * (K + K.T)
    return K


def workload_uniform(rng, E, rounds, path, distinct):
    perm = rng.permutation(E)
    pool = path
    growth = (distinct - path) / max(rounds - 1, 1)
    for t in range(rounds):
        new_pool = min(E, int(round(path + growth * t)))
        fresh = perm[pool:new_pool]
        pool = new_pool
        rest = rng.choice(pool, size=path - fresh.size, replace=False)
        yield np.concatenate([fresh, perm[rest]]) if fresh.size else perm[rest]


def workload_routes(rng, E, rounds, path, distinct):
    perm = rng.permutation(E)
    pool = path
    routes = [perm[:path].copy()]
    target_new = (distinct - path) / max(rounds - 1, 1)  # new edges per round on average
    for _ in range(rounds):
        if rng.random() < 0.3 or len(routes) == 1:
            base = routes[rng.integers(max(0, len(routes) - 5), len(routes))].copy()
            seg = int(rng.integers(8, 25))
            start = int(rng.integers(0, path - seg + 1))
            n_new = min(seg, max(0, int(rng.poisson(target_new / 0.3))), E - pool)
            fresh = perm[pool : pool + n_new]
            pool += n_new
            old = perm[rng.choice(pool, size=seg - n_new, replace=False)]
            base[start : start + seg] = np.concatenate([fresh, old])
            routes.append(base)
            yield base
        else:
            # re-drive one of the few most recent routes, favouring the newest
            k = min(len(routes), 5)
            p = np.arange(1, k + 1, dtype=float)
            yield routes[len(routes) - k + int(rng.choice(k, p=p / p.sum()))]


VARIANTS = {
    "default": dict(name="exact"),  # merge="auto"
    "always": dict(name="exact", merge="always"),  # single level: merge after every round
    "never": dict(name="exact", merge="never"),  # active block only (until max_active)
    "bi": dict(name="bi"),
}


def load_replay(run_dir, rounds=None):
    """Kernel, prior mean, noise variance and per-round (edges, observed) of a run directory."""
    import json

    import pandas as pd

    from evroute.priors.network_prior import network_kernel
    from evroute.runs.config import SimulationConfig
    from evroute.runs.problem import prepare_problem

    run_dir = Path(run_dir)
    saved = json.loads((run_dir / "config.json").read_text())
    cfg = SimulationConfig.from_json(saved)  # config.json of any format
    problem = prepare_problem(cfg)
    K = network_kernel(problem.net, cfg.kernel, cfg.lengthscale, kappa=cfg.kappa, nu=cfg.nu, prior_var=problem.prior_var)
    obs = pd.read_parquet(run_dir / "observations.parquet", columns=["t", "edge", "observed_wh"])
    data = [(g.edge.to_numpy(), g.observed_wh.to_numpy()) for _, g in obs.groupby("t", sort=True)]
    return K, problem.prior_mean, problem.noise_var, data[:rounds] if rounds else data


# the exact backend's internal steps timed by --replay (cumulative, nested calls included)
STEPS = ("_add_to_active", "_fresh_columns", "_solve_A0", "_condition", "_merge", "_checks_pass")


def _timed_steps(model):
    """Wrap the model's internal steps (instance attributes) to accumulate their time."""
    acc = dict.fromkeys(STEPS, 0.0)
    for name in STEPS:
        method = getattr(model, name, None)
        if method is None:
            continue

        def timed(*a, _m=method, _n=name, **k):
            t0 = time.perf_counter()
            try:
                return _m(*a, **k)
            finally:
                acc[_n] += time.perf_counter() - t0

        setattr(model, name, timed)
    return acc


def run(K, workload, variant, rounds, path, distinct, seed, noise_var, extra=None, replay=None):
    """Time ``rounds`` updates of one backend variant; ``replay`` = (prior_mean, data)."""
    E = K.shape[0]
    rng = np.random.default_rng(seed)
    if replay is None:
        prior_mean = rng.normal(size=E)
        f = prior_mean + rng.normal(size=E)  # stand-in truth (not a GP draw; cost only)
        gen = {"uniform": workload_uniform, "routes": workload_routes}[workload]
        rounds_data = (
            (edges, f[edges] + np.sqrt(noise_var) * rng.standard_normal(edges.size))
            for edges in gen(rng, E, rounds, path, distinct)
        )
    else:
        prior_mean, rounds_data = replay
    opts = dict(VARIANTS[variant])
    name = opts.pop("name")
    if name == "exact" and extra:
        opts.update(extra)
    model = make_model(name, DensePrior(prior_mean, K), noise_var=noise_var, **opts)
    steps = _timed_steps(model) if replay is not None and name == "exact" else None
    times, cpu = [], []
    for edges, y in rounds_data:
        t0, c0 = time.perf_counter(), time.process_time()
        model.update(edges, y)
        model.mean_std()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    times, cpu = np.array(times), np.array(cpu)
    out = {
        **spread(times),
        "last50_median": float(np.median(times[-50:])),
        "cpu_median": float(np.median(cpu)),
        "cpu_p95": float(np.quantile(cpu, 0.95)),
        "cpu_mean": float(cpu.mean()),
        "distinct": model.n_distinct,
    }
    if steps is not None:
        out["steps_ms_per_round"] = {k: v * 1e3 / times.size for k, v in steps.items()}
    if name == "exact":
        mu, sd = (a.copy() for a in model.mean_std())
        out.update(
            merges=model.n_merges,
            refactors=model.n_refactors,
            check_failures=model.n_check_failures,
            since_refactor=model._rounds_since_refactor,
        )
        t0 = time.perf_counter()
        model.refactor()
        out["refactor_s"] = time.perf_counter() - t0
        mu2, sd2 = model.mean_std()
        out["drift_mean"] = float(np.max(np.abs(mu - mu2)))
        out["drift_std_rel"] = float(np.max(np.abs(sd - sd2) / sd2))
    return out


def main(argv=None) -> int:
    ap = parser(__doc__, seed=1)
    ap.add_argument("--edges", type=int, default=5600)
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 500; with --replay, all)")
    ap.add_argument("--path", type=int, default=60)
    ap.add_argument("--distinct", type=int, default=1500)
    ap.add_argument("--noise-var", type=float, default=0.16, help="ς²/σ₀² = 0.1²/0.25²")
    ap.add_argument(
        "--workload", nargs="+", default=["uniform", "routes"], choices=["uniform", "routes"]
    )
    ap.add_argument("--variant", nargs="+", default=["default", "always"], choices=sorted(VARIANTS))
    ap.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="OPTION=VALUE",
        help="extra ExactGPModel options, e.g. refactor_every=0 max_active=512",
    )
    ap.add_argument(
        "--kernel-cache",
        default=None,
        help="a .npy file to load the kernel from (written if missing)",
    )
    ap.add_argument(
        "--replay",
        default=None,
        metavar="RUN_DIR",
        help="replay the observations of a simulate run (its kernel, prior and noise); "
        "--rounds then limits the rounds replayed (default: all)",
    )
    a = ap.parse_args(argv)
    extra = {}
    for item in a.set:
        k, v = item.split("=", 1)
        try:
            extra[k] = int(v)
        except ValueError:
            try:
                extra[k] = float(v)
            except ValueError:
                extra[k] = v
    t0 = time.perf_counter()
    table, notes = Table(COLUMNS, align="ll"), []
    if a.replay:
        K, prior_mean, noise_var, data = load_replay(a.replay, a.rounds)
        print(f"replaying {len(data)} rounds of {a.replay} (E = {K.shape[0]}), "
              f"loaded in {time.perf_counter() - t0:.1f}s", flush=True)
        for var in a.variant:
            r = run(K, "replay", var, len(data), 0, 0, a.seed, noise_var, extra, replay=(prior_mean, data))
            _add_result(table, notes, "replay", var, r)
        finish(a.out, "posterior-updates-replay", table, notes=notes)
        return 0
    if a.kernel_cache and Path(a.kernel_cache).exists():
        K = np.load(a.kernel_cache)
    else:
        K = make_kernel(a.edges, a.seed)
        if a.kernel_cache:
            np.save(a.kernel_cache, K)
    print(f"kernel {a.edges}x{a.edges} built in {time.perf_counter() - t0:.1f}s", flush=True)
    for wl in a.workload:
        for var in a.variant:
            r = run(K, wl, var, a.rounds or 500, a.path, a.distinct, a.seed, a.noise_var, extra)
            _add_result(table, notes, wl, var, r)
    finish(a.out, "posterior-updates", table, notes=notes)
    return 0


COLUMNS = ["workload", "variant", "distinct edges", "median ms", "p95 ms", "max ms", "mean ms", "last 50: median ms",
           "CPU median ms", "CPU p95 ms", "CPU mean ms"]


def _add_result(table, notes, wl, var, r):
    ms = {k: r[k] * 1e3 for k in ("median", "p95", "max", "mean", "last50_median", "cpu_median", "cpu_p95", "cpu_mean")}
    table.add(wl, var, r["distinct"], f"{ms['median']:.1f}", f"{ms['p95']:.1f}", f"{ms['max']:.0f}", f"{ms['mean']:.1f}",
              f"{ms['last50_median']:.1f}", f"{ms['cpu_median']:.1f}", f"{ms['cpu_p95']:.1f}", f"{ms['cpu_mean']:.1f}")
    if "merges" in r:
        notes.append(f"{wl} {var}: merges {r['merges']}, refactors {r['refactors']}, failed checks "
                     f"{r['check_failures']}, a refactorisation {r['refactor_s']:.2f} s; drift after "
                     f"{r['since_refactor']} rounds: mean {r['drift_mean']:.1e}, std (relative) {r['drift_std_rel']:.1e}")
    if "steps_ms_per_round" in r:
        steps = ", ".join(f"{k.lstrip('_')} {v:.1f}" for k, v in r["steps_ms_per_round"].items())
        notes.append(f"{wl} {var}: ms a round in (nested, cumulative): {steps}")


if __name__ == "__main__":
    sys.exit(main())
