"""Paper 004's toy experiment (Ziomek et al., §6 and Fig. 2–3), run through evroute's own agents
(``gp-pe``, ``gp-mle``, ``gp-fb``, ``gp-rb``) and environment interface.

The paper describes the toy only in words and figures ("see our code"; no public code): a 1-D
function, 11 candidate priors with the same RBF kernel and different means, each mean with ten
hills, one of them tall (prior p has its tall hill at the (p−1)-th position, prior 0 has ten
equal short hills), the truth a draw from prior 2 (tall hill around 0.1), and a domain that
alternates between the whole interval and a restriction hiding the true tall hill. Our choices
where the paper is silent: 100 points on [0, 1); hills at 0, 0.1, …, 0.9, Gaussian bumps of
width 0.03, height 1 (short) or 2 (tall); RBF kernel ℓ = 0.05, variance 0.25; noise R = 0.1;
T = 100 rounds; the restricted domain drops [0.05, 0.15] in every even round; δ = 0.05 and the
theory's β and ξ.

To reuse the routing agents unchanged, a point is a route: a tiny line graph with a start
edge, one edge per point and an end edge; a route's cost is C − f(point) with C = 10 (so
maximising f is minimising a positive cost). Regret is max over the round's domain of f minus
f of the chosen point.

Usage::

    python reproductions/paper004_toy.py                  # 30 seeds
    python reproductions/paper004_toy.py --seeds 5         # a quick look

Prints the final cumulative regret (mean ± s.e.) per method and the share of rounds each
method chose each prior (Fig. 2b's histogram); ``--out DIR`` also writes the table and the raw rows there.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: evroute and the harness
from benchmarks.harness import Table, finish, parser, write_rows  # noqa: E402
from evroute.bandit.agents import AgentSetup, make_agent  # noqa: E402
from evroute.bandit.environments import StaticEnvironment  # noqa: E402
from evroute.bandit.loop import run_loop  # noqa: E402
from evroute.priors.prior import DensePrior  # noqa: E402
from evroute.roads.oracle import Oracle  # noqa: E402

N, T, R, C = 100, 100, 0.1, 10.0
X = np.arange(N) / N
CENTRES = np.arange(10) / 10
HIDDEN = (X >= 0.05) & (X <= 0.15)  # the true tall hill, hidden in even rounds
METHODS = ("gp-pe", "gp-mle", "gp-fb", "gp-rb", "random")


def prior_mean(p: int) -> np.ndarray:
    h = np.ones(10)
    if p > 0:
        h[p - 1] = 2.0
    return (h[None, :] * np.exp(-((X[:, None] - CENTRES[None, :]) ** 2) / (2 * 0.03**2))).sum(1)


def kernel() -> np.ndarray:
    K = np.zeros((N + 2, N + 2))
    K[1:-1, 1:-1] = 0.25 * np.exp(-((X[:, None] - X[None, :]) ** 2) / (2 * 0.05**2))
    K[0, 0] = K[-1, -1] = 1e-9  # the start and end edges: cost known (0)
    return K


class Toy(StaticEnvironment):
    """The truth C − f on the point edges, the domain alternating in even rounds."""

    def available(self, t):
        if t % 2:
            return None
        mask = np.ones(N + 2, bool)
        mask[1:-1][HIDDEN] = False
        return mask

    def reference_route(self, t):
        mask = self.available(t)
        pts = np.flatnonzero(mask[1:-1]) if mask is not None else np.arange(N)
        best = 1 + pts[np.argmin(self.truth[1:-1][pts])]
        return np.array([0, best, N + 1])


def run(method: str, seed: int, K, oracle) -> tuple[float, list[str]]:
    rng = np.random.default_rng([seed, 0x2104])
    f = prior_mean(2) + np.linalg.cholesky(K[1:-1, 1:-1] + 1e-10 * np.eye(N)) @ rng.standard_normal(N)
    cost = np.concatenate([[0.0], C - f, [0.0]])
    env = Toy(cost, R, oracle, 0, N + 1, seed, rectify=False)
    if method == "random":
        play = np.random.default_rng([seed, 0x2105])
        regret = 0.0
        for t in range(1, T + 1):
            mask = env.available(t)
            pts = np.flatnonzero(mask[1:-1]) if mask is not None else np.arange(N)
            i = pts[play.integers(pts.size)]
            regret += float(f[pts].max() - f[i])
        return regret, []
    names = [f"prior {p}" for p in range(11)]
    cands = {name: np.concatenate([[0.0], C - prior_mean(p), [0.0]]) for p, name in enumerate(names)}
    setup = AgentSetup(DensePrior(cands["prior 0"], K), R * R, oracle, 0, N + 1, candidates=cands, horizon=T,
                       seed=seed)
    agent = make_agent(method, setup)
    res = run_loop(env, agent, T, seed=seed)
    return float(res.rounds.cumulative_regret_wh.iloc[-1]), list(agent.tables()["priors"]["chosen"])


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("--seeds", type=int, default=30)
    args = p.parse_args(argv)
    K = kernel()
    src = np.concatenate([np.zeros(N, np.int64), 1 + np.arange(N)])
    dst = np.concatenate([1 + np.arange(N), np.full(N, N + 1)])
    oracle = Oracle(N + 2, src, dst)
    rows = []
    table = Table(["method", "final regret (mean ± s.e.)", "rounds on prior 2", "most chosen prior"], align="lrrl",
                  title=f"Paper 004's toy, T = {T}, {args.seeds} seeds; the truth from prior 2")
    for m in METHODS:
        regs, chosen = [], []
        for s in range(args.seeds):
            r, c = run(m, s, K, oracle)
            regs.append(r)
            chosen += c
        regs = np.array(regs)
        se = regs.std(ddof=1) / math.sqrt(regs.size) if regs.size > 1 else float("nan")
        share = chosen.count("prior 2") / len(chosen) if chosen else float("nan")
        top = max(set(chosen), key=chosen.count) if chosen else "–"
        hist = {f"prior {q}": chosen.count(f"prior {q}") / len(chosen) for q in range(11)} if chosen else {}
        rows.append({"method": m, "regret_mean": regs.mean(), "regret_se": se, **hist})
        table.add(m, f"{regs.mean():.2f} ± {se:.2f}", "" if math.isnan(share) else f"{100 * share:.0f} %", top)
    write_rows(args.out, "paper004-toy", rows)
    finish(args.out, "paper004-toy", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
