"""How close the scalable time-varying posteriors (``--model window``, restarted static
posteriors, and ``--model eigen``, a truncated eigenbasis) come to the exact one (``--model
kalman``, dense E×E) on a real network, and what each costs.

Both are fed the same rounds: routes between random edge pairs (the oracle's shortest routes
under randomly perturbed E_det weights, so they look like driven routes), each edge observed
once with noise, the truth drifting with the forgetting rate. Reported per rank: the share of
the prior variance the basis keeps (eigen), the largest and median |error| of the posterior
means and standard deviations after T rounds (in units of σ₀), and the median seconds per
round (update + all-edge mean and std), beside the exact filter's.

    EVROUTE_DATA_DIR=../shared/data python scripts/check_time_varying.py --network luxembourg --kernel graph \
        --models "window,eigen[rank=128],eigen[rank=512]"
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--network", default="luxembourg")
    ap.add_argument("--models", default="window,eigen[rank=128],eigen[rank=256],eigen[rank=512]",
                    help="comma-separated backend specs (eps is added)")
    ap.add_argument("--kernel", default="graph", help="graph (the issue's case: smooth, fast eigen-decay) or combined")
    ap.add_argument("--eps", type=float, default=0.01)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from evroute.models import make_model
    from evroute.physics.routes import edge_energies
    from evroute.priors.network_prior import NetworkPrior
    from evroute.roads.network import load_network
    from evroute.roads.oracle import Oracle

    net = load_network(args.network)
    m = edge_energies(net)
    pv, nv = (0.25 * np.std(m)) ** 2, (0.1 * np.std(m)) ** 2
    prior = NetworkPrior(net, m, args.kernel, 1.0, 1.0, 2.0, pv)
    oracle = Oracle.from_network(net)
    rng = np.random.default_rng(args.seed)
    truth = prior.sample(rng)
    rounds = []
    base = np.abs(m) + 1.0
    while len(rounds) < args.rounds:
        s, e = rng.integers(0, net.n_edges, 2)
        if not oracle.reachable(int(s))[int(e)]:
            continue
        path = np.asarray(oracle.shortest_path(base * rng.uniform(0.5, 1.5, base.size), int(s), int(e)).edges)
        rounds.append((path, truth[path] + rng.normal(0, np.sqrt(nv), path.size)))
        truth = m + np.sqrt(1 - args.eps) * (truth - m) + np.sqrt(args.eps) * (prior.sample(rng) - m)

    def feed(model):
        secs = []
        for e, y in rounds:
            t0 = time.perf_counter()
            model.update(e, y)
            model.mean_std()
            secs.append(time.perf_counter() - t0)
        return model.mean_std(), float(np.median(secs))

    t0 = time.perf_counter()
    (mu0, sd0), sec0 = feed(make_model(f"kalman[eps={args.eps}]", prior, noise_var=nv))
    print(f"{args.network}, {args.kernel} kernel: E = {net.n_edges:,}, {args.rounds} rounds of {np.mean([r[0].size for r in rounds]):.0f} "
          f"edges, eps = {args.eps}")
    print(f"kalman (exact, dense): {sec0:.3f} s/round median; {time.perf_counter() - t0:.0f} s in all")
    sigma0 = np.sqrt(pv)
    print("| model | prior variance kept | build s | max / median abs error of mean (σ₀) | "
          "max / median abs error of sd (σ₀) | s / round |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    from evroute.specs import split_list

    for spec in split_list(args.models):
        name, _, rest = spec.partition("[")
        full = f"{name}[eps={args.eps}" + ("," + rest if rest else "]")
        t0 = time.perf_counter()
        model = make_model(full, prior, noise_var=nv)
        build = time.perf_counter() - t0
        (mu, sd), sec = feed(model)
        em, es = np.abs(mu - mu0) / sigma0, np.abs(sd - sd0) / sigma0
        kept = getattr(model, "explained_variance", float("nan"))
        print(f"| {full} | {kept:.3f} | {build:.1f} | {em.max():.3f} / {np.median(em):.4f} | "
              f"{es.max():.3f} / {np.median(es):.4f} | {sec:.3f} |", flush=True)


if __name__ == "__main__":
    main()
