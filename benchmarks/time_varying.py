"""How close the scalable time-varying posteriors come to the exact one, and what each costs.

``--model window`` (restarted static posteriors) and ``--model eigen`` (a truncated eigenbasis)
against ``--model kalman`` (exact, dense E×E) on a network. All are fed the same rounds: routes
between random edge pairs (the oracle's shortest routes under randomly perturbed E_det weights,
so they look like driven routes), each edge observed once with noise, the truth drifting with
the forgetting rate. Reported per backend: the share of the prior variance the basis keeps
(eigen), the largest and median |error| of the posterior means and standard deviations after the
last round (in units of σ₀), and the median seconds a round (update + all-edge mean and std),
beside the exact filter's::

    python benchmarks/time_varying.py --network luxembourg --kernel graph \\
        --models "window,eigen[rank=128],eigen[rank=512]"

``tests/test_time_varying_posteriors.py`` runs the same measurement on a small network and checks
what the paper-004 page says of it.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: evroute and the harness
from benchmarks.harness import Table, finish, parser  # noqa: E402


@dataclass
class Measured:
    """One backend against the exact filter: errors in units of σ₀."""

    spec: str
    kept: float  # share of the prior variance the basis keeps (NaN where there is no basis)
    build_s: float
    mean_max: float
    mean_median: float
    std_max: float
    std_median: float
    seconds: float  # median a round


def measure(net, models: list[str], *, kernel: str = "graph", eps: float = 0.01, rounds: int = 50,
            seed: int = 0) -> tuple[float, list[Measured]]:
    """The exact filter's median seconds a round, and each backend of ``models`` (specs without
    ``eps``, which is added) against it after ``rounds`` rounds."""
    from evroute.models import make_model
    from evroute.physics.routes import edge_energies
    from evroute.priors.network_prior import NetworkPrior
    from evroute.roads.oracle import Oracle

    m = edge_energies(net)
    pv, nv = (0.25 * np.std(m)) ** 2, (0.1 * np.std(m)) ** 2
    prior = NetworkPrior(net, m, kernel, 1.0, 1.0, 2.0, pv)
    oracle = Oracle.from_network(net)
    rng = np.random.default_rng(seed)
    truth = prior.sample(rng)
    data = []
    base = np.abs(m) + 1.0
    while len(data) < rounds:
        s, e = rng.integers(0, net.n_edges, 2)
        if not oracle.reachable(int(s))[int(e)]:
            continue
        path = np.asarray(oracle.shortest_path(base * rng.uniform(0.5, 1.5, base.size), int(s), int(e)).edges)
        data.append((path, truth[path] + rng.normal(0, np.sqrt(nv), path.size)))
        truth = m + np.sqrt(1 - eps) * (truth - m) + np.sqrt(eps) * (prior.sample(rng) - m)

    def feed(model):
        secs = []
        for e, y in data:
            t0 = time.perf_counter()
            model.update(e, y)
            model.mean_std()
            secs.append(time.perf_counter() - t0)
        return model.mean_std(), float(np.median(secs))

    (mu0, sd0), exact_seconds = feed(make_model(f"kalman[eps={eps}]", prior, noise_var=nv))
    sigma0 = np.sqrt(pv)
    out = []
    for spec in models:
        name, _, rest = spec.partition("[")
        full = f"{name}[eps={eps}" + ("," + rest if rest else "]")
        t0 = time.perf_counter()
        model = make_model(full, prior, noise_var=nv)
        build = time.perf_counter() - t0
        (mu, sd), sec = feed(model)
        em, es = np.abs(mu - mu0) / sigma0, np.abs(sd - sd0) / sigma0
        out.append(Measured(full, float(getattr(model, "explained_variance", float("nan"))), build,
                            float(em.max()), float(np.median(em)), float(es.max()), float(np.median(es)), sec))
    return exact_seconds, out


def main(argv=None) -> int:
    ap = parser(__doc__, seed=0)
    ap.add_argument("--network", default="luxembourg")
    ap.add_argument("--models", default="window,eigen[rank=128],eigen[rank=256],eigen[rank=512]",
                    help="comma-separated backend specs (eps is added)")
    ap.add_argument("--kernel", default="graph", help="graph (smooth, fast eigen-decay) or combined")
    ap.add_argument("--eps", type=float, default=0.01)
    ap.add_argument("--rounds", type=int, default=50)
    args = ap.parse_args(argv)

    from evroute.roads.network import load_network
    from evroute.specs import split_list

    net = load_network(args.network)
    t0 = time.perf_counter()
    exact_seconds, rows = measure(net, split_list(args.models), kernel=args.kernel, eps=args.eps,
                                  rounds=args.rounds, seed=args.seed)
    table = Table(["model", "prior variance kept", "build s", "max / median abs error of mean (σ₀)",
                   "max / median abs error of sd (σ₀)", "s / round"],
                  title=f"{args.network}, {args.kernel} kernel: E = {net.n_edges:,}, {args.rounds} rounds, "
                        f"eps = {args.eps}; kalman (exact, dense): {exact_seconds:.3f} s a round", stream=False)
    for r in rows:
        table.add(r.spec, f"{r.kept:.3f}", f"{r.build_s:.1f}", f"{r.mean_max:.3f} / {r.mean_median:.4f}",
                  f"{r.std_max:.3f} / {r.std_median:.4f}", f"{r.seconds:.3f}")
    finish(args.out, f"time-varying-{args.network}-{args.kernel}", table,
           notes=[f"{time.perf_counter() - t0:.0f} s in all"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
