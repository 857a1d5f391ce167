"""Paper 001's own experiment, reduced: the Bump environment
with EK-UCB, exact kernel UCB (K-UCB) and BKB, through evroute's dictionary engine.

The environment (paper 001 §6 and spec nystrom-dictionaries §3; the details of the authors'
code ``src/env/bump.py``, re-implemented, not copied):

- contexts x_t ~ U[0, 1]^5, one per round; 10 actions drawn once from the 0.01 grid of [0, 1);
- reward r(x, a) = max(0, 1 − |a − a*| − ⟨w*, x − x*⟩), a* one of the actions, x* ~ U[0, 1]^5,
  w* ~ U[−1, 1]^5, drawn once (the environment is the same for every seed, as in the code);
  observations r + N(0, 0.1²);
- Gaussian kernel on the joint (x, a) ∈ [0, 1]^6, length-scale 0.1 (the code), variance 1;
- regret against the best action of each round's context (noiseless rewards).

The arms are the T × 10 (context, action) points of the run (contexts are i.i.d., so they are
drawn up front from the seed): an :class:`evroute.priors.prior.PointsPrior` whose rows are kernel
evaluations. The agents score the round's 10 candidates with ``predict`` (O(m²) each) and pick
the largest μ̃ + β̃ σ̃, with the papers' fixed radius β̃ = 0.1 in their 1/λ-scaled units (the
code's value for every method), converted once by :func:`evroute.bandit.policies.gp_beta_from_radius`.

Methods (λ = ridge = the engine's noise variance; μ = λ as in the paper's text and Fig. 1):

- ``K-UCB``: the exact GP posterior, evroute's ``exact`` backend (the dictionary engine with
  every observed arm as an anchor equals it, tested, and takes the same decisions here, but
  refactors an m×m matrix every round: 10× slower at T = 400);
- ``EK-UCB``: KORS (``nystrom``), ε = 0.5, μ = λ, γ = ``--gamma-factor``·λ: 1 by default (the
  text, App. F.1: "γ ≈ λ"); the code's grid is c·λ with c ∈ {0.001, 0.02, 0.05, 0.1} (spec
  wave2-notes: the code's ``beta`` setting is this budget), which keeps far fewer anchors;
- ``BBKB``: BKB's resampled dictionary with the lazy trigger (``bkb[lazy=true]``), C = 3 and
  q̄ = 10·C (the code's contextual BBKB); ``--cbkb`` adds eager BKB (q̄ = 10), which the paper
  reports as "much slower in every experiment" (at T = 2000 it is: every round rebuilds the
  dictionary).

Usage::

    python reproductions/paper001_bump.py                    # T = 2000, λ ∈ {1, 10, 100}, 3 seeds
    python reproductions/paper001_bump.py --horizon 300 --lambdas 10 --seeds 1   # a quick look

Prints one Markdown row per (λ, method): final regret mean ± s.e. over seeds, seconds per run,
final dictionary size m, and d_eff = Tr(K(K + λI)⁻¹) on the K-UCB run's points. ``--out DIR``
also writes the table and the raw rows there.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: evroute and the harness
from benchmarks.harness import Table, finish, parser, write_rows  # noqa: E402
from evroute.bandit.policies import gp_beta_from_radius  # noqa: E402
from evroute.models import make_model  # noqa: E402
from evroute.models.nystrom import BKBPosterior, KORSPosterior  # noqa: E402
from evroute.priors.prior import PointsPrior, rbf_kernel  # noqa: E402

N_ACTIONS = 10
CONTEXT_DIM = 5
NOISE_SD = 0.1
LENGTHSCALE = 0.1
RADIUS = 0.1


class Bump:
    """Paper 001's Bump environment (see the module docstring). ``env_seed`` fixes a*, x*, w*
    and the actions; ``seed`` the contexts and the noise."""

    def __init__(self, horizon: int, seed: int, env_seed: int = 123):
        fixed = np.random.default_rng(env_seed)
        self.actions = np.sort(fixed.choice(np.arange(100) / 100.0, size=N_ACTIONS, replace=False))
        self.a_star = float(self.actions[fixed.integers(N_ACTIONS)])
        self.x_star = fixed.uniform(0.0, 1.0, CONTEXT_DIM)
        self.w_star = fixed.uniform(-1.0, 1.0, CONTEXT_DIM)
        rng = np.random.default_rng([seed, 0xB0])
        self.contexts = rng.uniform(0.0, 1.0, (horizon, CONTEXT_DIM))
        self.noise = NOISE_SD * rng.standard_normal(horizon)
        lin = (self.contexts - self.x_star) @ self.w_star
        self.rewards = np.maximum(0.0, 1.0 - np.abs(self.actions[None, :] - self.a_star) - lin[:, None])
        # arm t·10 + j is (x_t, a_j)
        self.points = np.column_stack([np.repeat(self.contexts, N_ACTIONS, axis=0),
                                       np.tile(self.actions, horizon)])


def run(method: str, env: Bump, lam: float, seed: int, gamma_factor: float = 1.0, mu: float | None = None) -> dict:
    T = env.rewards.shape[0]
    if method == "random":  # the expected regret of a uniform choice (a reference line)
        r = env.rewards
        return {"regret": float(np.sum(r.max(1) - r.mean(1))), "seconds": 0.0, "m": 0}
    prior = PointsPrior(np.zeros(env.points.shape[0]), env.points, rbf_kernel(LENGTHSCALE))
    if method == "K-UCB":
        model = make_model("exact", prior, noise_var=lam, seed=seed)
    elif method == "EK-UCB":
        model = KORSPosterior(prior, lam, mu=lam if mu is None else mu, eps=0.5, gamma=gamma_factor * lam,
                              m_max=T + 1, seed=seed)
    elif method == "BBKB":
        model = BKBPosterior(prior, lam, qbar=30.0, lazy=True, ratio=3.0, m_max=T + 1, seed=seed)
    elif method == "CBKB":
        model = BKBPosterior(prior, lam, qbar=10.0, m_max=T + 1, seed=seed)
    else:
        raise ValueError(method)
    width = math.sqrt(gp_beta_from_radius(RADIUS, lam))  # β̃ σ̃ = (β̃/√λ) σ_GP
    regret = 0.0
    tic = time.perf_counter()
    for t in range(T):
        idx = t * N_ACTIONS + np.arange(N_ACTIONS)
        if method == "K-UCB":  # the exact backend keeps every arm's posterior current
            mu, sd = (v[idx] for v in model.mean_std())
        else:
            mu, sd = model.predict(idx)
        a = int(np.argmax(mu + width * sd))  # ties: the first action
        r = env.rewards[t]
        regret += float(r.max() - r[a])
        model.update(np.array([idx[a]]), np.array([r[a] + env.noise[t]]))
    seconds = time.perf_counter() - tic
    out = {"regret": regret, "seconds": seconds, "m": model.n_distinct if method == "K-UCB" else model.m}
    if method == "K-UCB":
        S = np.flatnonzero(model.counts)
        Kn = prior.rows(S)[:, S]
        c = model.counts[S].astype(np.float64)
        # d_eff over the n observations: Tr(K_n (K_n + λI)⁻¹) = Tr(C^½ K_S C^½ (C^½ K_S C^½ + λI)⁻¹)
        A = np.sqrt(c)[:, None] * Kn * np.sqrt(c)[None, :]
        ev = np.linalg.eigvalsh(A)
        out["d_eff"] = float(np.sum(ev / (ev + lam)))
    return out


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("--horizon", type=int, default=2000)
    p.add_argument("--lambdas", default="1,10,100")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--gamma-factor", type=float, default=1.0, help="EK-UCB's KORS budget γ = factor · λ "
                   "(1: the text's γ ≈ λ; the code's grid: 0.001, 0.02, 0.05, 0.1)")
    p.add_argument("--cbkb", action="store_true", help="also run eager BKB (q̄ = 10; slow)")
    p.add_argument("--mus", default=None, help="EK-UCB's KORS ridges μ to sweep (default: μ = λ); the code's "
                   "Bump sweep is λ = 10, μ ∈ {1, 10, 100}")
    p.add_argument("--methods", default=None, help="comma-separated subset of random,K-UCB,EK-UCB,BBKB,CBKB")
    args = p.parse_args(argv)
    methods = ["random", "K-UCB", "EK-UCB", "BBKB"] + (["CBKB"] if args.cbkb else [])
    if args.methods:
        methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    rows = []
    table = Table(["λ", "μ", "method", "final regret (mean ± s.e.)", "s / run", "m at T", "d_eff"], align="rrl",
                  title=f"Bump, T = {args.horizon}, {args.seeds} seeds, fixed radius {RADIUS} (papers' units), "
                        f"Gaussian kernel ℓ = {LENGTHSCALE}")
    for lam in [float(x) for x in args.lambdas.split(",")]:
        for method in methods:
            mus = [float(x) for x in args.mus.split(",")] if (args.mus and method == "EK-UCB") else [None]
            for mu in mus:
                res = [run(method, Bump(args.horizon, s), lam, s, args.gamma_factor, mu) for s in range(args.seeds)]
                reg = np.array([r["regret"] for r in res])
                se = reg.std(ddof=1) / math.sqrt(reg.size) if reg.size > 1 else float("nan")
                deff = np.mean([r["d_eff"] for r in res]) if "d_eff" in res[0] else float("nan")
                mu_used = lam if mu is None else mu
                row = {"lambda": lam, "mu": mu_used if method == "EK-UCB" else float("nan"), "method": method,
                       "regret_mean": reg.mean(), "regret_se": se,
                       "seconds": float(np.mean([r["seconds"] for r in res])),
                       "m": float(np.mean([r["m"] for r in res])), "d_eff": deff}
                rows.append(row)
                table.add(f"{lam:g}", f"{mu_used:g}" if method == "EK-UCB" else "", method,
                          f"{row['regret_mean']:.1f} ± {se:.1f}", f"{row['seconds']:.1f}", f"{row['m']:.0f}",
                          "" if math.isnan(deff) else f"{deff:.0f}")
    write_rows(args.out, "paper001-bump", rows)
    finish(args.out, "paper001-bump", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
