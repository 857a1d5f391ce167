"""Paper 000's confidence widths (evroute/bandit/bounds.py) against the per-observation formulas of
the paper in its own (k, α, c) units, and the orderings it proves (spec §1.4)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evroute.bandit.bounds import (
    DMM_GRID,
    amm_beta,
    ay_beta,
    confidence_widths,
    igp_beta,
    information_logdet,
    q_from_mean,
    q_value,
    rtilde2,
)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    X = rng.uniform(size=(40, 2))
    k = np.exp(-((X[:, None] - X[None]) ** 2).sum(-1) / (2 * 0.3**2))  # the paper's k (unit RBF)
    obs = rng.choice(25, size=70)  # repeated inputs among the first 25
    w = rng.standard_normal(8)
    f = 0.5 * k[:, :8] @ w  # ‖f‖_k = 0.5 √(wᵀ k_ZZ w)
    sigma = 0.2
    y = f[obs] + sigma * rng.standard_normal(obs.size)
    seen, inv = np.unique(obs, return_inverse=True)
    n = np.bincount(inv).astype(float)
    s = np.bincount(inv, weights=y)
    B_k = 1.2 * 0.5 * math.sqrt(w @ k[:8, :8] @ w)
    return {"k": k, "obs": obs, "y": y, "O": seen, "n": n, "s": s, "sigma": sigma, "B_k": B_k}


def per_observation(d, c, alpha, x):
    """Paper 000 in its own units: μ_α, ρ_α (eqs. 2–3), R̃²_α of Cor. 4.3 with
    q(α) = α yᵀ(K_N + αI)⁻¹y, for the prior k, regulariser α, mixture scale c."""
    k, obs, y, sigma, delta = d["k"], d["obs"], d["y"], d["sigma"], 0.01
    KN = k[np.ix_(obs, obs)]
    N = obs.size

    def q(a):
        return a * y @ np.linalg.solve(KN + a * np.eye(N), y)

    ld = np.linalg.slogdet(np.eye(N) + c / sigma**2 * KN)[1]
    r2 = q(sigma**2 / c) - q(alpha) + sigma**2 * ld + 2 * sigma**2 * math.log(1 / delta) + alpha * d["B_k"] ** 2
    kx = k[np.ix_(obs, x)]
    A = KN + alpha * np.eye(N)
    mu = kx.T @ np.linalg.solve(A, y)
    rho2 = np.diag(k)[x] - np.einsum("ij,ij->j", kx, np.linalg.solve(A, kx))
    return mu, np.sqrt(rho2), r2, ld


def gp_posterior(d, K, a, x):
    """A GP with prior K and noise a on the aggregated data (counts): mean and sd at x."""
    seen, n, s = d["O"], d["n"], d["s"]
    A = K[np.ix_(seen, seen)] + np.diag(a / n)
    kx = K[np.ix_(seen, x)]
    mu = kx.T @ np.linalg.solve(A, s / n)
    var = np.diag(K)[x] - np.einsum("ij,ij->j", kx, np.linalg.solve(A, kx))
    return mu, np.sqrt(var)


@pytest.mark.parametrize("c", [1.0, 0.3])
def test_k_units_equal_the_papers_units(data, c):
    """The bound μ_a + √(R̃²(a)/a) s_a with K = c·k, a = cα, B_K = B_k/√c (evroute's units) is
    paper 000's μ_α + √(R̃²_α/α) ρ_α, for every grid α; the aggregated statistics give the
    per-observation log-det and q."""
    d = data
    K, sig2 = c * d["k"], d["sigma"] ** 2
    B_K = d["B_k"] / math.sqrt(c)
    x = np.arange(40)
    KOO = K[np.ix_(d["O"], d["O"])]
    ld = information_logdet(KOO, d["n"], sig2)
    q = {sig2 * g: q_value(KOO, d["n"], d["s"], a=sig2 * g) for g in DMM_GRID}
    w = confidence_widths("dmm", logdet=ld, B=B_K, delta=0.01, noise_var=sig2, q=q)
    for a, wa in w.items():
        mu_p, rho, r2, ld_p = per_observation(d, c, a / c, x)
        assert ld == pytest.approx(ld_p, rel=1e-10)
        mu, sd = gp_posterior(d, K, a, x)
        np.testing.assert_allclose(mu, mu_p, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(mu + wa * sd, mu_p + math.sqrt(r2 / (a / c)) * rho, rtol=1e-8)


def test_q_from_the_posterior_mean_and_lemma_c2(data):
    d, sig2 = data, data["sigma"] ** 2
    K = d["k"]
    KOO = K[np.ix_(d["O"], d["O"])]
    for a in (0.3 * sig2, sig2, 4 * sig2):
        mu, _ = gp_posterior(d, K, a, d["O"])
        assert q_from_mean(d["n"], d["s"] / d["n"], mu) == pytest.approx(q_value(KOO, d["n"], d["s"], a=a), rel=1e-9)
    ld = information_logdet(KOO, d["n"], sig2)
    q0 = q_value(KOO, d["n"], d["s"], a=sig2)
    # Lemma C.2: at a = ς² the quadratic terms cancel and R̃²/ς² is AMM's β²
    assert rtilde2(sig2, q0, q0, noise_var=sig2, logdet=ld, delta=0.01, B=2.0) / sig2 == pytest.approx(amm_beta(ld, 2.0, 0.01) ** 2)


def test_the_orderings_of_theorem_6_3_and_dmm(data):
    """AMM < AY and AMM < IGP (matched regularisation) at every point; DMM ≤ AMM since ς² is on
    the grid."""
    d, sig2 = data, data["sigma"] ** 2
    K = d["k"]
    KOO = K[np.ix_(d["O"], d["O"])]
    ld = information_logdet(KOO, d["n"], sig2)
    for B in (0.5, 2.0, 10.0):
        assert amm_beta(ld, B, 0.01) < ay_beta(ld, B, 0.01)
        assert amm_beta(ld, B, 0.01) < igp_beta(ld, d["obs"].size, 2 / 1000, B=B, delta=0.01)
        q = {sig2 * g: q_value(KOO, d["n"], d["s"], a=sig2 * g) for g in DMM_GRID}
        w = confidence_widths("dmm", logdet=ld, B=B, delta=0.01, noise_var=sig2, q=q)
        x = np.arange(40)
        dmm = np.min([gp_posterior(d, K, a, x)[0] + wa * gp_posterior(d, K, a, x)[1] for a, wa in w.items()], axis=0)
        mu, sd = gp_posterior(d, K, sig2, x)
        assert np.all(dmm <= mu + amm_beta(ld, B, 0.01) * sd + 1e-12)


def test_an_empty_set_is_a_negative_radius_not_a_crash(data):
    d, sig2 = data, data["sigma"] ** 2
    KOO = d["k"][np.ix_(d["O"], d["O"])]
    ld = information_logdet(KOO, d["n"], sig2)
    s_big = d["s"] * 1e3  # data far outside any ball of radius B: misspecified
    q = {sig2 * g: q_value(KOO, d["n"], s_big, a=sig2 * g) for g in DMM_GRID}
    assert min(rtilde2(a, qa, q[sig2], noise_var=sig2, logdet=ld, delta=0.01, B=0.1) for a, qa in q.items()) < 0
    w = confidence_widths("dmm", logdet=ld, B=0.1, delta=0.01, noise_var=sig2, q=q)
    assert min(w.values()) == 0.0


# --- the agents, the truths and the weights -------------------------------------------------


@pytest.fixture(scope="module")
def small_net():
    from evroute.roads.network import load_network

    return load_network("synthetic", size=70)


def _run(tmp_path, net, policy, truth="rkhs[B=5]", seed=0, horizon=15):
    import pandas as pd

    from evroute.runs.config import SimulationConfig
    from evroute.runs.simulation import simulate

    cfg = SimulationConfig(policy=policy, horizon=horizon, seed=seed, truth=truth)
    out = tmp_path / f"{policy}-{seed}-{truth.replace('[', '').replace(']', '').replace('=', '')}"
    simulate(cfg, out, net=net)
    return (pd.read_parquet(out / "rounds.parquet"), pd.read_parquet(out / "observations.parquet"),
            pd.read_parquet(out / "edges.parquet"), out)


def _driven(net, policy, truth, seed, rounds):
    """An agent of ``policy`` set up as `evroute simulate` would, driven for ``rounds`` rounds."""
    from evroute.runs.config import SimulationConfig
    from evroute.runs.problem import make_agent, prepare_problem

    cfg = SimulationConfig(policy=policy, horizon=5, truth=truth)
    problem = prepare_problem(cfg, net=net)
    agent = make_agent(cfg, problem)
    rng = np.random.default_rng(seed)
    for t in range(1, rounds + 1):
        d = agent.select(t, None, rng)
        agent.observe(d.path, problem.truth[d.path] + problem.noise_std * rng.standard_normal(d.path.size))
    return agent, rng


@pytest.mark.parametrize("policy", ["gp-amm", "gp-dmm", "gp-ay", "gp-igp", "gp-cmm"])
def test_lower_bounds_cover_an_rkhs_truth(tmp_path, small_net, policy):
    """With --truth rkhs and the true B, the logged LCB of every observed edge lies below its
    true energy in ≥ 99 % of (edge, round) pairs (paper 000's coverage; here over 3 seeds)."""
    below = total = 0
    for seed in range(3):
        r, o, e, _ = _run(tmp_path, small_net, policy, seed=seed)
        f = o.expected_wh.to_numpy()
        below += int(np.sum(o.index_before.to_numpy() <= f))
        total += len(o)
        assert {"bound_beta", "logdet", "empty_set"} <= set(r.columns)
        if policy == "gp-cmm":  # the route-level bound covers the route's true energy
            assert np.mean(r.path_lower_bound <= r.expected_energy_wh) >= 0.99
        assert np.all(np.diff(r.logdet) >= -1e-9)  # information only grows
    assert below / total >= 0.99


def test_amm_index_is_the_gp_beta_form_and_dmm_is_tighter(tmp_path, small_net):
    r, o, _, _ = _run(tmp_path, small_net, "gp-amm")
    beta = r.set_index("t").beta.reindex(o["t"]).to_numpy()
    np.testing.assert_allclose(o.index_before, o.post_mean_before - np.sqrt(beta) * o.post_std_before, rtol=1e-10,
                               atol=1e-9)
    # on the same data, DMM's lower bound is at least AMM's at every edge (σ²/c is on its grid)
    from evroute.runs.config import SimulationConfig
    from evroute.runs.problem import make_agent, prepare_problem

    cfg = SimulationConfig(policy="gp-dmm", horizon=5, truth="rkhs[B=5]")
    problem = prepare_problem(cfg, net=small_net)
    dmm = make_agent(cfg, problem)
    amm = make_agent(SimulationConfig(policy="gp-amm", horizon=5, truth="rkhs[B=5]"), problem)
    rng = np.random.default_rng(0)
    for t in range(1, 6):
        path = dmm.select(t, None, rng).path
        y = problem.truth[path] + problem.noise_std * rng.standard_normal(path.size)
        dmm.observe(path, y)
        amm.observe(path, y)
        assert np.all(dmm.lower_bounds() >= amm.lower_bounds() - 1e-9)


def test_weights_keep_the_shortest_route_of_the_lower_bounds(small_net):
    """The Dijkstra weights max(LCB, floor) − potential are ≥ 0 and their shortest route is the
    shortest route under max(LCB, floor) itself (Bellman–Ford, negative weights allowed)."""
    from evroute.runs.config import SimulationConfig
    from evroute.runs.problem import make_agent, prepare_problem

    cfg = SimulationConfig(policy="gp-amm", horizon=5, truth="rkhs[B=5]")
    problem = prepare_problem(cfg, net=small_net)
    agent = make_agent(cfg, problem)
    rng = np.random.default_rng(1)
    for t in range(1, 5):
        d = agent.select(t, None, rng)
        raw = np.maximum(agent.lower_bounds(), agent.floor)
        shifted = raw - agent.potential
        assert np.all(shifted >= -1e-9)
        bf = problem.oracle.bellman_ford_path(raw, problem.route.start, problem.route.end)
        assert raw[d.path].sum() == pytest.approx(raw[bf.edges].sum(), rel=1e-9, abs=1e-9)
        agent.observe(d.path, problem.truth[d.path] + problem.noise_std * rng.standard_normal(d.path.size))


def test_the_truths_rkhs_norms(small_net):
    """rkhs[B]: ‖f − m‖_K = B exactly; gp: the reported norm is (f − m)ᵀK⁻¹(f − m) (dense check)."""
    from evroute.bandit.truths import gp_truth, gp_truth_rkhs_norm, rkhs_truth
    from evroute.physics.routes import edge_energies
    from evroute.priors.network_prior import NetworkPrior

    m = edge_energies(small_net)
    pv = (0.25 * np.std(m)) ** 2
    K = NetworkPrior(small_net, m, "combined", 1.0, 1.0, 2.0, pv).dense()
    f = rkhs_truth(small_net, m, pv, seed=4, B=7.0)
    g = f - m
    assert math.sqrt(g @ np.linalg.solve(K, g)) == pytest.approx(7.0, rel=1e-6)
    f = gp_truth(small_net, m, pv, seed=4)
    g = f - m
    assert gp_truth_rkhs_norm(small_net, m, pv, seed=4) == pytest.approx(math.sqrt(g @ np.linalg.solve(K, g)), rel=1e-4)


def test_energy_floor_bounds_the_physics_and_the_potential_telescopes():
    from evroute.physics.energy import edge_energy_wh, energy_floor_wh, load_vehicle

    v = load_vehicle(None)
    rng = np.random.default_rng(0)
    length = rng.uniform(5, 500, 2000)
    grade = rng.uniform(-0.35, 0.35, 2000)
    speed = rng.uniform(3, 30, 2000)
    floor, pot = energy_floor_wh(length, grade, v)
    assert np.all(edge_energy_wh(length, np.arctan(grade), speed, vehicle=v) >= floor - 1e-12)
    assert np.all(floor - pot >= -1e-12)
    # the potential of a chain of edges is η⁻ m g (h_end − h_start)/3600
    h = np.cumsum(np.r_[0.0, grade[:10] * length[:10]])
    assert pot[:10].sum() == pytest.approx(v.eta_minus * v.mass_kg * v.g * (h[-1] - h[0]) / 3600)


def test_k_shortest_paths_are_yens_on_the_line_graph(small_net):
    """The k cheapest loopless routes equal a brute-force enumeration (networkx's all simple
    paths on a small piece of the line graph), cheapest first."""
    import networkx as nx

    from evroute.roads.oracle import Oracle

    oracle = Oracle.from_network(small_net)
    rng = np.random.default_rng(0)
    w = rng.uniform(1.0, 2.0, small_net.n_edges)
    start = 0
    reach = np.flatnonzero(oracle.reachable(start))
    G = nx.DiGraph()
    G.add_edges_from(zip(small_net.conn_src.tolist(), small_net.conn_dst.tolist(), strict=True))
    end = int(min(reach[reach != start], key=lambda e: nx.shortest_path_length(G, start, e)))
    ranked = sorted(w[p].sum() for p in nx.all_simple_paths(G, start, end, cutoff=7))
    got = oracle.k_shortest_paths(w, start, end, 5)
    assert got[0].edges == oracle.shortest_path(w, start, end).edges
    np.testing.assert_allclose([r.cost for r in got], ranked[:len(got)], rtol=1e-12)
    # a far end: the same costs as networkx's Yen (turn into v costs w_v)
    import itertools

    far = int(reach[np.argmax([nx.shortest_path_length(G, start, e) for e in reach])])
    H = nx.DiGraph()
    H.add_weighted_edges_from((u, v, w[v]) for u, v in G.edges)
    ref = [w[p].sum() for p in itertools.islice(nx.shortest_simple_paths(H, start, far, weight="weight"), 6)]
    np.testing.assert_allclose([r.cost for r in oracle.k_shortest_paths(w, start, far, 6)], ref, rtol=1e-12)
    # with turn weights: a turn u → v costs w_v + its turn's weight, and a route's cost has both
    tw = rng.uniform(0.0, 3.0, small_net.n_connections)
    T = nx.DiGraph()
    T.add_weighted_edges_from((int(u), int(v), w[v] + t) for u, v, t in
                              zip(small_net.conn_src, small_net.conn_dst, tw, strict=True))
    paths = list(itertools.islice(nx.shortest_simple_paths(T, start, far, weight="weight"), 6))
    ref = [w[p].sum() + tw[oracle.turn_index(p)].sum() for p in paths]
    got = oracle.k_shortest_paths(w, start, far, 6, turn_weights=tw)
    np.testing.assert_allclose([r.cost for r in got], ref, rtol=1e-12)
    assert got[0].edges == oracle.shortest_path(w, start, far, turn_weights=tw).edges


def test_path_bound_is_the_dual_maximised_and_never_below_dmm(small_net):
    """gp-cmm's route bound is max_a of Σ m + Σ μ̂_a − √(R̃²(a)/a) √(1ᵀΣ_{a,S}1), checked against
    a dense evaluation on a fine grid; and at least DMM's summed per-edge bound of the route."""
    from evroute.bandit.bounds import q_value, rtilde2

    agent, rng = _driven(small_net, "gp-cmm", "rkhs[B=5]", 2, 4)
    S = agent.select(5, None, rng).path
    ours = agent.path_lower_bounds([S])[0]
    K = agent.prior.dense()
    c = agent.base.counts
    seen = np.flatnonzero(c)
    n, m = c[seen].astype(float), agent.prior_mean
    s = agent.base.sums[seen] - n * m[seen]
    sig2 = agent.noise_var
    KOO = K[np.ix_(seen, seen)]
    ld = information_logdet(KOO, n, sig2)
    q0 = q_value(KOO, n, s, a=sig2)
    dense = []
    for a in sig2 * np.logspace(-3, 3, 2001):
        A = KOO + np.diag(a / n)
        kS = K[np.ix_(seen, S)].sum(1)
        mean = m[S].sum() + kS @ np.linalg.solve(A, s / n)
        var = K[np.ix_(S, S)].sum() - kS @ np.linalg.solve(A, kS)
        r2 = rtilde2(a, q_value(KOO, n, s, a=a), q0, noise_var=sig2, logdet=ld, delta=agent.delta, B=agent.B)
        dense.append(mean - math.sqrt(max(r2, 0) / a) * math.sqrt(max(var, 0)))
    assert ours >= max(dense) - 1e-6 * abs(max(dense))
    assert ours <= max(dense) + 1e-3 * abs(max(dense))
    per_edge = max(sum(agent.models[a].mean_std()[0][S] - w * agent.models[a].mean_std()[1][S])
                   for a, w in agent._widths().items())
    assert ours >= per_edge - 1e-9 * abs(per_edge)


def test_route_bound_is_the_socp_of_eq_10(small_net):
    """Strong duality (paper 000 Thm 4.4/4.5): for a one-edge route, gp-cmm's bound (the 1-D dual
    maximised over a) equals the SOCP of eq. 10, solved directly here (SLSQP, spec §3's check):
    min_w K_{x,I} w  s.t.  ‖K_{O,I} w − r‖² ≤ R_N²,  wᵀ K_{I,I} w ≤ B²,  I = O ∪ {x}."""
    from scipy.optimize import minimize

    agent, _ = _driven(small_net, "gp-cmm", "rkhs[B=3]", 5, 2)
    c = agent.base.counts
    seen = np.flatnonzero(c)
    x = int(np.setdiff1d(np.arange(small_net.n_edges), seen)[0])
    ours = agent.path_lower_bounds([[x]])[0]
    K = agent.prior.dense()
    n = c[seen].astype(float)
    m = agent.prior_mean
    r = agent.base.sums[seen] / n - m[seen]
    sig2, B, delta = agent.noise_var, agent.B, agent.delta
    KOO = K[np.ix_(seen, seen)]
    ld = information_logdet(KOO, n, sig2)
    R2 = q_value(KOO, n, agent.base.sums[seen] - n * m[seen], a=sig2) + sig2 * ld + 2 * sig2 * math.log(1 / delta)
    idx = np.append(seen, x)
    s0 = math.sqrt(agent.prior.prior_var)  # in units of σ₀ (the RKHS norm does not change)
    L = np.linalg.cholesky(K[np.ix_(idx, idx)] / s0**2 + 1e-10 * np.eye(idx.size))
    # f on I is L v (so ‖f‖_K = ‖v‖): a linear objective under two ellipsoid constraints
    A_O, a_x = L[:-1], L[-1]
    sq = np.sqrt(n)
    cons = [{"type": "ineq", "fun": lambda v: R2 / s0**2 - np.sum((sq * (A_O @ v - r / s0)) ** 2),
             "jac": lambda v: -2 * (A_O.T @ (sq**2 * (A_O @ v - r / s0)))},
            {"type": "ineq", "fun": lambda v: B * B - v @ v, "jac": lambda v: -2 * v}]
    start = np.linalg.lstsq(A_O, r / s0, rcond=None)[0]
    res = minimize(lambda v: a_x @ v, start, jac=lambda v: a_x, constraints=cons, method="SLSQP",
                   options={"ftol": 1e-12, "maxiter": 1000})
    assert res.success, res.message
    socp = m[x] + s0 * res.fun
    assert ours == pytest.approx(socp, rel=1e-4, abs=1e-4 * math.sqrt(agent.prior.prior_var))


@pytest.mark.parametrize("spec", ["exact", "exact[merge=always]", "exact[merge=never]", "exact[refactor_every=3]"])
def test_the_exact_backend_accumulates_the_information_gain(small_net, spec):
    """The sum of the rounds' batch increments ln det(I + D_t^½ Σ_{B|t−1} D_t^½/ς²), kept by the
    exact backend, equals ln det(I + D^½ K_OO D^½/ς²) over every observation (chain rule)."""
    from evroute.models import make_model
    from evroute.physics.routes import edge_energies
    from evroute.priors.network_prior import NetworkPrior

    m = edge_energies(small_net)
    pv, nv = (0.25 * np.std(m)) ** 2, (0.1 * np.std(m)) ** 2
    prior = NetworkPrior(small_net, m, "combined", 1.0, 1.0, 2.0, pv)
    model = make_model(spec, prior, noise_var=nv)
    rng = np.random.default_rng(1)
    K = prior.dense()
    for _ in range(7):
        e = rng.choice(small_net.n_edges, size=15)
        e = np.concatenate([e, e[:4]])
        model.update(e, m[e] + rng.normal(0, np.sqrt(pv), e.size))
        seen = np.flatnonzero(model.counts)
        ref = information_logdet(K[np.ix_(seen, seen)], model.counts[seen], nv)
        assert model.information_logdet == pytest.approx(ref, rel=1e-9)


def test_dual_bounds_in_the_eigenbasis_equal_direct_posteriors(data):
    """bounds.dual_bounds (the eigen trick) = min over the same levels of μ_a + √(R̃²(a)/a) s_a
    from direct GP posteriors (Cholesky), for points."""
    from evroute.bandit.bounds import dual_bounds

    d, sig2, B = data, data["sigma"] ** 2, 3.0
    K = d["k"]
    seen, n, s = d["O"], d["n"], d["s"]
    x = np.arange(40)
    KOO = K[np.ix_(seen, seen)]
    lam, Q = np.linalg.eigh(np.sqrt(n)[:, None] * KOO * np.sqrt(n)[None, :])
    levels = sig2 * np.array([0.05, 0.3, 1.0, 4.0, 20.0])
    ours = dual_bounds(lam, Q.T @ (s / np.sqrt(n)), Q.T @ (np.sqrt(n)[:, None] * K[np.ix_(seen, x)]), kss=np.diag(K)[x],
                       noise_var=sig2, delta=0.01, B=B, upper=True, levels=levels)
    ld = information_logdet(KOO, n, sig2)
    q0 = q_value(KOO, n, s, a=sig2)
    ref = np.full(x.size, np.inf)
    for a in levels:
        mu, sd = gp_posterior(d, K, a, x)
        r2 = rtilde2(a, q_value(KOO, n, s, a=a), q0, noise_var=sig2, logdet=ld, delta=0.01, B=B)
        ref = np.minimum(ref, mu + math.sqrt(max(r2, 0) / a) * sd)
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-12)


def test_the_mixture_scale_c_is_the_prior_scaled(small_net):
    """gp-amm[c=2] on the prior K is gp-amm on the prior 2K with the norm B/√2: the same bounds."""
    from evroute.bandit.agents import AgentSetup, make_agent
    from evroute.priors.prior import DensePrior
    from evroute.runs.config import SimulationConfig
    from evroute.runs.problem import agent_prior, prepare_problem

    cfg = SimulationConfig(policy="gp-amm", horizon=5, truth="rkhs[B=5]")
    problem = prepare_problem(cfg, net=small_net)
    prior = agent_prior(cfg, problem)

    def setup(p):
        return AgentSetup(p, problem.noise_var, problem.oracle, problem.route.start, problem.route.end,
                          truth_rkhs_norm=problem.truth_rkhs_norm)

    a = make_agent("gp-amm", setup(prior), c=2.0)
    b = make_agent("gp-amm", setup(DensePrior(prior.mean, 2.0 * prior.dense())), b=5.0 / math.sqrt(2.0))
    rng = np.random.default_rng(3)
    for t in range(1, 5):
        path = a.select(t, None, rng).path
        y = problem.truth[path] + problem.noise_std * rng.standard_normal(path.size)
        a.observe(path, y)
        b.observe(path, y)
        np.testing.assert_allclose(a.lower_bounds(), b.lower_bounds(), rtol=1e-9, atol=1e-9)


def test_bound_and_pe_agents_route_with_the_turns_costs(small_net):
    """Under a truth of edges plus turns the bound agents and gp-pe weigh the junctions too (each
    turn's dissipation, taken as known): handed the truth (a model certain of f and the turns'
    dissipation), each drives the least-energy route, edges plus turns, which a Bellman–Ford on
    the line graph (networkx, f_v + the turn's cost on u → v) finds independently; without the
    turns they miss it on some trips."""
    import networkx as nx

    from evroute.bandit.bound_agents import BoundAgent
    from evroute.bandit.environments import Turns
    from evroute.bandit.pe_agents import PEAgent
    from evroute.physics.energy import energy_floor_wh, kinetic_energy_wh
    from evroute.physics.routes import edge_energies
    from evroute.priors.network_prior import NetworkPrior
    from evroute.roads.oracle import Oracle
    from evroute.testing import MockModel
    from evroute.world.junctions import speed_change_loss_wh

    net, oracle = small_net, Oracle.from_network(small_net)
    f = edge_energies(net)
    rng = np.random.default_rng(7)
    src, dst = np.asarray(net.conn_src), np.asarray(net.conn_dst)
    v = rng.uniform(6.0, 20.0, net.n_edges)
    stop = rng.random(src.size) < 0.5  # a car that stops at half of the junctions
    psi = kinetic_energy_wh(v)
    loss = np.where(stop, speed_change_loss_wh(v[src], 0.0) + speed_change_loss_wh(0.0, v[dst]),
                    speed_change_loss_wh(v[src], v[dst])) + 20.0 * stop  # (and what waiting costs)
    turns = Turns(psi[dst] - psi[src] + loss, psi, src, dst)
    floor, potential = energy_floor_wh(net.edges.length_m.to_numpy(), net.edges.grade.to_numpy())
    G = nx.DiGraph()
    G.add_weighted_edges_from((int(a), int(b), f[b] + c) for a, b, c in zip(src, dst, turns.costs, strict=True))
    prior = NetworkPrior(net, f, "combined", 1.0, 1.0, 2.0, 1.0)

    def agents(with_turns):
        t = dict(turns=turns.dissipation) if with_turns else {}
        bound = BoundAgent("amm", {1.0: MockModel(f, np.zeros(net.n_edges))}, 1.0, prior, oracle, start, end, B=1.0,
                           energy_floor=floor, potential=potential, **t)
        pe = PEAgent({"f": MockModel(f, np.zeros(net.n_edges))}, {"f": f}, oracle, start, end, horizon=10,
                     noise_var=1.0, energy_floor=floor, potential=potential, **t)
        return bound, pe

    missed = 0
    reach = np.flatnonzero(oracle.reachable(0))
    for start, end in [(0, int(e)) for e in rng.choice(reach[reach != 0], 12, replace=False)]:
        best = f[start] + nx.bellman_ford_path_length(G, start, end)
        for agent in agents(True):
            path = agent.select(1, None, np.random.default_rng(0)).path
            energy = f[path].sum() + turns.costs[oracle.turn_index(path)].sum()
            assert energy == pytest.approx(best, abs=1e-6), (type(agent).__name__, start, end)
        path = agents(False)[0].select(1, None, np.random.default_rng(0)).path
        missed += f[path].sum() + turns.costs[oracle.turn_index(path)].sum() > best + 1e-3
    assert missed >= 2
