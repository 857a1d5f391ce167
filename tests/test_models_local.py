"""Local, certified GMRF updates (models/local.py; spec/local-posteriors.md): against the
textbook posterior, against the global GMRF posterior on real maps in lockstep, the bounds
shown to be bounds (and a wrong bound caught), and the joint draws' moments."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import scipy.sparse as sp

from evroute.bandit.agents import AgentSetup, make_agent
from evroute.bandit.environments import StaticEnvironment
from evroute.bandit.loop import run_loop
from evroute.errors import EvrouteError, EvrouteWarning
from evroute.models import local as local_module
from evroute.models import make_model, ordered, resolve_model
from evroute.models.gmrf import GMRFPosterior
from evroute.models.local import CHUNK, LocalGMRFPosterior
from evroute.models.ordered import SEAM
from evroute.physics.routes import edge_energies, resolve_route
from evroute.priors.graph_prior import GraphMaternPrior
from evroute.roads.oracle import Oracle

from .test_models_gmrf import feed, textbook


@pytest.fixture(scope="module")
def small():
    from evroute.physics.energy import load_vehicle
    from evroute.priors.network_prior import NetworkPrior
    from evroute.roads.network import load_network

    net = load_network("synthetic", size=120)
    pm = edge_energies(net, load_vehicle(None))
    sd = float(np.std(pm))
    pv, nv = (0.25 * sd) ** 2, (0.1 * sd) ** 2
    dense = NetworkPrior(net, pm, "graph", 1.0, 1.0, 2.0, pv)
    gmrf = GraphMaternPrior(net, pm, 1.0, 2.0, pv)
    return {"net": net, "pm": pm, "pv": pv, "nv": nv, "dense": dense, "gmrf": gmrf,
            "truth": dense.sample(np.random.default_rng(3)), "sigma0": float(np.sqrt(np.mean(gmrf.diag())))}


def errors(s, model):
    """The largest errors of μ and σ² against the textbook posterior, relative to σ₀ and σ₀²."""
    mean, var = textbook(s, model.counts, model.sums)
    mu, sd = model.mean_std()
    return np.abs(mu - mean).max() / s["sigma0"], np.abs(sd ** 2 - var).max() / s["sigma0"] ** 2


def test_the_precision_spectrum_bound_is_a_bound(small):
    """λ_min(Q) ≥ (2ν/κ²)^ν / scale, checked against a dense eigendecomposition."""
    Q = small["gmrf"].precision().toarray()
    lam = np.linalg.eigvalsh(Q).min()
    bound = small["gmrf"].precision_min_eigenvalue()
    assert 0 < bound <= lam * (1 + 1e-9) and bound > 0.2 * lam  # a bound (tight: Δ has a null space)


@pytest.mark.parametrize(("chunk", "threads"), [(8, 1), (2, 1), (2, 2)])
def test_local_equals_the_textbook_within_tol(small, chunk, threads):
    """In pairs (8 edges a chunk: 4 chunks a round) and in lanes (2: 13–14 chunks), on one
    thread and on two."""
    m = LocalGMRFPosterior(small["gmrf"], small["nv"], tol=1e-8, chunk=chunk, threads=threads)
    worst = []

    def check(t):
        dm, dv = errors(small, m)
        worst.append((dm, dv, m.mean_error_bound, m.var_error_bound))
        assert m.mean_error_bound <= 1e-8 and m.var_error_bound <= 1e-8
        assert dm <= 1e-8 + 1e-11 and dv <= 1e-8 + 1e-11  # (+ the dense reference's own rounding)

    feed(small, [m], n_rounds=10, check=check)
    assert m.summary()["max_mean_error_bound"] == max(w[2] for w in worst)
    assert (m.n_lane_rounds == 10) == (chunk == 2)


def _bound_holds(s, model) -> bool:
    dm, dv = errors(s, model)
    return dm <= model.mean_error_bound * (1 + 1e-9) + 1e-12 and dv <= model.var_error_bound * (1 + 1e-9) + 1e-12


@pytest.mark.parametrize(("radius", "chunk"), [(1, 8), (2, 8), (1, 2)])
def test_the_bounds_bound_the_error_of_small_domains(small, radius, chunk, monkeypatch):
    """With the domains forced small (1–2 hops of Q: 2–4 of the line graph) and the loosest
    tolerance, so that neither the growth rule nor the sweep hides anything, the measured
    errors are real (far above rounding) and below the stated bounds after every round, in
    pairs (8 edges a chunk) and in lanes (2), on two threads. A bound made 1,000 times
    smaller (the mutation) is caught by the same check."""
    # the bounds as the chunks leave them: no sweep, no global clean-up
    monkeypatch.setattr(LocalGMRFPosterior, "_sweep", LocalGMRFPosterior._bounds)
    monkeypatch.setattr(LocalGMRFPosterior, "_check_variances", lambda self: None)
    m = LocalGMRFPosterior(small["gmrf"], small["nv"], tol=1e-2, chunk=chunk, radius=radius, max_radius=radius,
                           threads=2)
    seen = []

    def check(t):
        dm, dv = errors(small, m)
        seen.append(dm)
        assert _bound_holds(small, m), (t, dm, m.mean_error_bound, dv, m.var_error_bound)
        wrong = LocalGMRFPosterior.__new__(LocalGMRFPosterior)
        wrong.__dict__.update(m.__dict__)
        wrong.mean_error_bound = m.mean_error_bound * 1e-3
        wrong.var_error_bound = m.var_error_bound * 1e-3
        assert not _bound_holds(small, wrong) or dm < 1e-9

    feed(small, [m], n_rounds=8, check=check)
    assert max(seen) > 1e-6  # the truncation was real
    assert (m.n_lane_rounds == 8) == (chunk == 2)


@pytest.mark.parametrize(("attr", "factor", "which"), [("_C", 1e-3, "mean"), ("_kmax", 1e-8, "variance")])
def test_a_computed_bound_made_smaller_fails_the_check(small, monkeypatch, attr, factor, which):
    """The mutation on a bound's own input: the mean's constant C = √(k_max/λ_min) divided by
    1,000; or k_max, which caps every edge's variance in the variance bound, divided by 10⁸
    with C left alone (the mean bound then still holds). The check catches either."""
    monkeypatch.setattr(LocalGMRFPosterior, "_sweep", LocalGMRFPosterior._bounds)
    monkeypatch.setattr(LocalGMRFPosterior, "_check_variances", lambda self: None)
    m = LocalGMRFPosterior(small["gmrf"], small["nv"], tol=1e-2, chunk=8, radius=1, max_radius=1)
    setattr(m, attr, getattr(m, attr) * factor)
    failed = []

    def check(t):
        if which == "mean":
            failed.append(not _bound_holds(small, m))
            return
        dm, dv = errors(small, m)
        assert dm <= m.mean_error_bound * (1 + 1e-9) + 1e-12
        failed.append(dv > m.var_error_bound * (1 + 1e-9) + 1e-12)

    feed(small, [m], n_rounds=6, check=check)
    assert any(failed)


def test_a_round_is_cut_into_an_even_number_of_near_equal_chunks(small, monkeypatch):
    """At most ``chunk`` edges a chunk, as equal as can be, an even number of them (the pairs
    balance two threads), never an empty one."""
    sizes = []
    real = LocalGMRFPosterior._commit

    def commit(self, c):
        sizes.append(c.K.size)
        return real(self, c)

    monkeypatch.setattr(LocalGMRFPosterior, "_commit", commit)
    E = small["net"].n_edges
    for chunk, n, expect in ((8, 25, [7, 6, 6, 6]), (8, 17, [5, 4, 4, 4]), (8, 8, [8]), (1, 3, [1, 1, 1]),
                             (10, 20, [10, 10])):
        m = LocalGMRFPosterior(small["gmrf"], small["nv"], chunk=chunk)
        edges = np.linspace(0, E - 1, n).astype(np.int64)
        sizes.clear()
        m.update(edges, small["truth"][edges])
        assert sorted(sizes, reverse=True) == expect, (chunk, n, sizes)


def test_a_domain_is_assembled_in_the_priors_fill_reducing_order(small):
    """Ω comes back in the prior's nested-dissection order, and the blocks are exactly
    (Q + D)_ΩΩ and Q_{shell,Ω} in it; the seeds' positions point at them."""
    m = LocalGMRFPosterior(small["gmrf"], small["nv"], chunk=8)
    feed(small, [m], n_rounds=2)
    seeds = np.array([3, 40, 41])
    ball = m._ball(seeds, 2)
    omega, A, B, shell, at = m._domain(ball, 0, seeds)
    rank = small["gmrf"].precision_ordering()
    assert np.array_equal(np.sort(omega), ball) and np.all(np.diff(rank[omega]) > 0)
    P = (m._Q + sp.diags(m.counts / small["nv"])).tocsr()
    np.testing.assert_array_equal(A.toarray(), P[omega][:, omega].toarray())
    assert A.format == "csc" and A.has_canonical_format  # (SuperLU takes it as it is)
    np.testing.assert_array_equal(B.toarray(), m._Q[shell][:, omega].toarray())
    assert np.array_equal(omega[at], seeds)
    outside = np.setdiff1d(np.arange(small["net"].n_edges), ball)
    assert np.array_equal(shell, outside[np.asarray(abs(m._Q[outside][:, omega]).sum(axis=1)).ravel() > 0])


def test_a_precision_without_its_diagonal_stored_is_refused(small):
    """The domains add the counts to Q's stored diagonal: a precision that leaves one out is
    refused at once (one line), not assembled wrongly."""
    Q = sp.csr_matrix(small["gmrf"].precision())
    Q.sort_indices()
    Q.data[Q.indptr[7] + np.flatnonzero(Q.indices[Q.indptr[7]:Q.indptr[8]] == 7)[0]] = 0.0
    Q.eliminate_zeros()

    class NoDiagonal(type(small["gmrf"])):
        def precision(self):
            return Q

    prior = small["gmrf"]
    broken = NoDiagonal.__new__(NoDiagonal)
    broken.__dict__.update(prior.__dict__)
    with pytest.raises(EvrouteError, match="store its .*diagonal"):
        LocalGMRFPosterior(broken, small["nv"])


def test_the_adaptive_rule_brings_small_domains_back_within_tol(small):
    m = LocalGMRFPosterior(small["gmrf"], small["nv"], tol=1e-8, chunk=8, radius=1)

    def check(t):
        dm, dv = errors(small, m)
        assert m.mean_error_bound <= 1e-8 and dm <= 1e-8 + 1e-11 and dv <= 1e-8 + 1e-11

    feed(small, [m], n_rounds=8, check=check)
    assert m.n_global_mean == 0 and max(r for r, *_ in m.trace) > 1


@pytest.mark.parametrize("local", [False, True])
def test_variances_recomputed_when_their_bound_exceeds_tol(small, local, monkeypatch):
    """A variance bound above tol is cleared by recomputing every variance: exactly (selected
    inversion) on small networks, by certified local solves above LOCAL_VARIANCES_ABOVE edges
    (forced here); either way the variances then match the textbook within the new bound,
    which fits tol, and a warning says which way it went."""
    import evroute.models.local as local_module

    if local:  # (patches of 8 from one hop: domains smaller than this small graph, bounds > 0)
        monkeypatch.setattr(local_module, "LOCAL_VARIANCES_ABOVE", 0)
        monkeypatch.setattr(local_module, "local_inverse_diagonal",
                            functools.partial(local_module.local_inverse_diagonal, patch=8, radius=1))
    m = LocalGMRFPosterior(small["gmrf"], small["nv"], tol=1e-6, chunk=8)
    feed(small, [m], n_rounds=3)
    assert m.n_global_var == 0
    m._var_out = 1e-3 * small["sigma0"] ** 2  # as if the outside-domain terms had piled up
    m._var[:] += 1e-4 * small["sigma0"] ** 2  # (and the variances were off by part of it)
    m._bounds()
    with pytest.warns(EvrouteWarning, match="certified local solves" if local else "selected inversion"):
        m._check_variances()
    assert m.n_global_var == 1 and m.var_error_bound <= 1e-6 / 10
    assert (m.var_error_bound > 0) == local
    dm, dv = errors(small, m)
    assert dv <= m.var_error_bound * (1 + 1e-9) + 1e-12


def test_joint_draws_match_the_posterior(small):
    """Joint draws (global, Matheron's rule): mean and variance of 3,000 draws on a few edges
    against the textbook posterior (z-scores), and their correlation with a neighbour."""
    m = LocalGMRFPosterior(small["gmrf"], small["nv"])
    feed(small, [m], n_rounds=6)
    mean, var = textbook(small, m.counts, m.sums)
    rng = np.random.default_rng(7)
    draws = np.array([m.sample(rng, joint=True) for _ in range(3000)])
    edges = np.flatnonzero(m.counts)[:3].tolist() + [0, small["net"].n_edges - 1]
    for e in edges:
        z_mean = (draws[:, e].mean() - mean[e]) / np.sqrt(var[e] / len(draws))
        z_var = (draws[:, e].var() - var[e]) / (var[e] * np.sqrt(2.0 / len(draws)))
        assert abs(z_mean) < 4.5 and abs(z_var) < 4.5, (e, z_mean, z_var)
    ind = np.array([m.sample(rng) for _ in range(3000)])
    z = (ind[:, edges[0]].mean() - mean[edges[0]]) / np.sqrt(var[edges[0]] / len(ind))
    assert abs(z) < 4.5


def test_options_declared_once_and_checked(small):
    assert isinstance(make_model("exact", small["gmrf"], noise_var=small["nv"]), LocalGMRFPosterior)
    assert isinstance(make_model(resolve_model("exact[update=global]"), small["gmrf"], noise_var=small["nv"]),
                      GMRFPosterior)
    assert make_model(resolve_model("exact[tol=1e-6]"), small["gmrf"], noise_var=small["nv"]).tol == 1e-6
    assert make_model("exact", small["gmrf"], noise_var=small["nv"]).chunk == CHUNK
    m = make_model(resolve_model("exact[chunk=16,threads=2]"), small["gmrf"], noise_var=small["nv"])
    assert (m.chunk, m.threads) == (16, 2)
    for bad in ("exact[tol=0]", "exact[tol=0.5]", "exact[tol=nan]", "exact[update=sometimes]"):
        with pytest.raises(EvrouteError):
            resolve_model(bad)


def test_cli_prints_the_bounds_and_refuses_a_bad_tol(tmp_path, capsys):
    import json

    import pandas as pd

    from evroute.cli import main

    args = ["simulate", "--network", "synthetic-2k", "--kernel", "graph", "--policy", "gp-ucb", "--horizon", "6",
            "--no-progress"]
    assert main([*args, "--model", "exact[tol=0.5]", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tol" in err and not (tmp_path / "bad").exists()
    assert main([*args, "--out", str(tmp_path / "r")]) == 0
    assert "error bound" in capsys.readouterr().out
    rounds = pd.read_parquet(tmp_path / "r" / "rounds.parquet")
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert (rounds.mean_error_bound <= 1e-8).all() and (rounds.var_error_bound <= 1e-8).all()
    assert s["max_mean_error_bound"] == rounds.mean_error_bound.max()


def _lockstep(net, policy, rounds, tol=1e-8):
    """The same policy with local and global updates, each in its own environment of the
    same seed: the routes, regrets and final posteriors."""
    pm = edge_energies(net)
    sd = float(np.std(pm))
    pv, nv = (0.25 * sd) ** 2, (0.1 * sd) ** 2
    prior = GraphMaternPrior(net, pm, 1.0, 2.0, pv)
    truth = prior.sample(np.random.default_rng(1))
    oracle = Oracle.from_network(net)
    trip = resolve_route(net, "A")
    out = {}
    for update in ("local", "global"):
        env = StaticEnvironment(truth, np.sqrt(nv), oracle, trip.start, trip.end, seed=0)
        agent = make_agent(policy, AgentSetup(prior, nv, oracle, trip.start, trip.end,
                                              model=resolve_model(f"exact[update={update},tol={tol:g}]")))
        res = run_loop(env, agent, rounds, seed=0)
        out[update] = (res.rounds, *agent.mean_std())
    return out, float(np.sqrt(np.mean(prior.diag())))


@pytest.mark.real
@pytest.mark.parametrize("network", ["monaco", "luxembourg", "synthetic-10k"])
def test_local_equals_global_on_real_maps(network, request):
    """100 rounds (30 on synthetic-10k for UCB/BUCB) of gp-ucb, gp-bucb and gp-ts: the same
    route in every round, identical regret, and every mean and variance within tol."""
    from evroute.roads.network import load_network

    net = request.getfixturevalue(network) if network != "synthetic-10k" else load_network(network)
    for policy in ("gp-ucb", "gp-bucb", "gp-ts"):
        rounds = 100 if network != "synthetic-10k" or policy == "gp-ts" else 30
        out, s0 = _lockstep(net, policy, rounds)
        (rl, ml, sl), (rg, mg, sg) = out["local"], out["global"]
        assert [list(p) for p in rl.path] == [list(p) for p in rg.path], policy
        np.testing.assert_array_equal(rl.regret_wh.to_numpy(), rg.regret_wh.to_numpy())
        assert np.abs(ml - mg).max() <= 1e-8 * s0 + 1e-12 * s0, policy
        assert np.abs(sl ** 2 - sg ** 2).max() <= 1e-8 * s0 ** 2 + 1e-12 * s0 ** 2, policy
        assert (rl.mean_error_bound <= 1e-8).all() and (rl.var_error_bound <= 1e-8).all()


@functools.cache
def _route_problem(network: str):
    from evroute.roads.network import load_network

    net = load_network(network)
    pm = edge_energies(net)
    sd = float(np.std(pm))
    prior = GraphMaternPrior(net, pm, 1.0, 2.0, (0.25 * sd) ** 2)
    truth = prior.sample(np.random.default_rng(2))
    trip = resolve_route(net, "A")
    route = np.asarray(Oracle.from_network(net).shortest_path(np.maximum(pm, 0.01), trip.start, trip.end).edges)
    return prior, truth, route, sd


def _threads_1_and_2(network, n_edges, chunk, rounds=6, tol=1e-2):
    """The same observations of a route fed to a local model on one thread and on two."""
    prior, truth, route, sd = _route_problem(network)
    route = route[:n_edges]
    models = [LocalGMRFPosterior(prior, (0.1 * sd) ** 2, tol=tol, chunk=chunk, threads=t) for t in (1, 2)]
    rng = np.random.default_rng(0)
    for _ in range(rounds):
        y = truth[route] + 0.1 * sd * rng.standard_normal(route.size)
        for m in models:
            m.update(route, y)
    (m1, s1), (m2, s2) = (m.mean_std() for m in models)
    np.testing.assert_array_equal(m1, m2)
    np.testing.assert_array_equal(s1, s2)
    assert models[0].max_mean_error_bound == models[1].max_mean_error_bound
    assert models[0].max_var_error_bound == models[1].max_var_error_bound
    return models


def test_two_threads_give_the_same_bits_in_pairs(monkeypatch):
    """Chunks conditioned in pairs (as a round of fewer than LANES_FROM chunks is), side by
    side on two threads or one after the other: the same means, variances and bounds, bit for
    bit (both kinds of pair occur: kept and redone)."""
    monkeypatch.setattr(local_module, "LANES_FROM", 10 ** 9)
    # a loose tolerance keeps the domains small, so that some pairs miss each other
    models = _threads_1_and_2("synthetic-2k", None, 4)
    assert models[0].n_lane_rounds == 0
    assert models[0].n_redone == models[1].n_redone
    assert 0 < models[0].n_redone < models[0].n_pairs  # pairs kept side by side, and pairs redone
    for bad in ("exact[threads=0]", "exact[threads=3]", "exact[threads=1.5]", "exact[chunk=0]", "exact[chunk=513]",
                "exact[chunk=4.5]"):
        with pytest.raises(EvrouteError):
            resolve_model(bad)


@pytest.mark.parametrize("seam", [SEAM, -1])
def test_two_threads_give_the_same_bits_in_lanes(seam, monkeypatch):
    """Chunks conditioned in two lanes, side by side on two threads or one after the other
    in the order that defines the result: the same bits, in rounds whose lanes ran side by
    side to the end and in rounds whose lanes met (rolled back, ordered, and on); without
    the seam's order (-1) the lanes meet first at the seam."""
    monkeypatch.setattr(ordered, "SEAM", seam)
    one, two = _threads_1_and_2("synthetic-10k", None, 8)
    assert one.n_lane_rounds == two.n_lane_rounds == 6 and one.n_pairs == two.n_pairs == 0
    assert one.n_lanes_met == 0 and one.n_lanes_serial == 6  # (one thread: the order itself)
    assert two.n_lanes_met > 0 and two.n_lanes_serial < 6  # rolled back, and went on side by side


@pytest.mark.parametrize("mutate", [False, True])
def test_a_rollback_restores_every_write(mutate, monkeypatch):
    """The second thread's first chunk held back until the first thread has written its
    whole lane, without the seam's order: the second lane's first chunk then meets the first
    lane's last, and every chunk of the first lane is rolled back (none of them comes before
    it in the order). The same bits as one thread; and, as a mutation, a rollback that leaves
    one of its writes (the variances) in place gives other bits, so the check can fail."""
    import threading
    import time

    real_attempt, real_restore = LocalGMRFPosterior._attempt, LocalGMRFPosterior._restore
    _, _, route, _ = _route_problem("synthetic-10k")
    n = -(-route.size // 8)
    n += n % 2
    first_b = route[(n // 2) * route.size // n]  # the first edge of the second lane's first chunk
    held = threading.Event()
    restored = []

    def attempt(self, *args, **kwargs):
        if self.threads == 2 and args[0][0] == first_b and not held.is_set():
            held.set()
            time.sleep(1.0)
        return real_attempt(self, *args, **kwargs)

    def restore(self, saved):
        restored.append(saved[0].K[0])
        before = self._var.copy()
        real_restore(self, saved)
        if mutate:
            self._var[:] = before

    monkeypatch.setattr(LocalGMRFPosterior, "_attempt", attempt)
    monkeypatch.setattr(LocalGMRFPosterior, "_restore", restore)
    monkeypatch.setattr(ordered, "SEAM", -1)
    if mutate:
        with pytest.raises(AssertionError):
            _threads_1_and_2("synthetic-10k", None, 8, rounds=1)
    else:
        one, two = _threads_1_and_2("synthetic-10k", None, 8, rounds=1)
        assert two.n_lanes_met >= 1 and len(restored) >= 3  # (the first lane: 3 chunks or more)


def test_lanes_give_the_same_run_in_any_process(tmp_path):
    """`evroute simulate` with local updates in lanes (chunks of 8 on synthetic-10k: 12 and
    more a round), on two threads under two hash seeds and on one thread: the same tables."""
    import os
    import subprocess
    import sys

    import pandas as pd

    outs = []
    for threads, seed in ((2, "1"), (2, "2"), (1, "3")):
        out = tmp_path / f"t{threads}-{seed}"
        done = subprocess.run(
            [sys.executable, "-m", "evroute", "simulate", "--network", "synthetic-10k", "--kernel", "graph",
             "--policy", "gp-ucb", "--horizon", "4", "--model", f"exact[threads={threads},chunk=8]", "--no-progress",
             "--out", str(out)],
            capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONHASHSEED": seed})
        assert done.returncode == 0, done.stderr
        outs.append(out)
    tables = sorted(p.name for p in outs[0].glob("*.parquet"))
    assert "rounds.parquet" in tables
    for name in tables:
        a = pd.read_parquet(outs[0] / name)
        for other in outs[1:]:
            b = pd.read_parquet(other / name)
            pd.testing.assert_frame_equal(a.drop(columns=["seconds"], errors="ignore"),
                                          b.drop(columns=["seconds"], errors="ignore"))


def test_an_error_in_a_lane_stops_both(monkeypatch):
    """An error in the other thread's chunk reaches the caller, promptly (no thread left
    waiting), and the model goes on afterwards."""
    prior, truth, route, sd = _route_problem("synthetic-10k")
    m = LocalGMRFPosterior(prior, (0.1 * sd) ** 2, tol=1e-2, chunk=8, threads=2)
    real = LocalGMRFPosterior._attempt

    def attempt(self, *args, **kwargs):
        if args[5] == 1:  # (the scratch slot of the second thread)
            raise EvrouteError("a domain that cannot be factorised")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(LocalGMRFPosterior, "_attempt", attempt)
    with pytest.raises(EvrouteError, match="cannot be factorised"):
        m.update(route, truth[route])
    monkeypatch.setattr(LocalGMRFPosterior, "_attempt", real)
    m.update(route, truth[route])
    assert m.n_lane_rounds == 2


def test_kill_and_resume_a_local_grid(tmp_path):
    """A grid of local-update runs killed (SIGKILL) after its first finished run and resumed
    gives the same tables as the grid run in one go, in another process and hash seed."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import pandas as pd

    from evroute.runs.directory import is_finished_run

    out, runs = tmp_path / "grid", tmp_path / "grid" / "runs"
    grid = ["compare", "--kernel", "graph", "--routes", "synthetic-2k:A", "--policies",
            "gp-ucb,gp-ts", "--seeds", "2", "--horizon", "8", "--no-progress"]
    args = [sys.executable, "-m", "evroute", *grid, "--jobs", "1", "--out", str(out)]
    env = {**os.environ, "PYTHONHASHSEED": "11"}
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:
            if runs.is_dir() and any(is_finished_run(d) for d in runs.iterdir() if not d.name.startswith(".")):
                break
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    # (a worker's .NAME.partial-* directory holds summary.json a moment before its rename)
    finished = [d.name for d in runs.iterdir() if not d.name.startswith(".") and is_finished_run(d)]
    assert 1 <= len(finished) < 4, "the kill came too late"
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr
    once = subprocess.run([sys.executable, "-m", "evroute", *grid, "--jobs", "2", "--out", str(tmp_path / "once")],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONHASHSEED": "5"})
    assert once.returncode == 0, once.stderr
    for d in sorted(runs.iterdir()):
        a = pd.read_parquet(d / "rounds.parquet").drop(columns=["seconds"])
        b = pd.read_parquet(tmp_path / "once" / "runs" / d.name / "rounds.parquet").drop(columns=["seconds"])
        assert "mean_error_bound" in a and (a.mean_error_bound <= 1e-8).all()
        pd.testing.assert_frame_equal(a, b)


def _tracked_residual_error(s, m) -> float:
    """How far the model's tracked residual is from b − (Q + D)(μ − m) recomputed from its counts
    and sums (D = diag(c/ς²), b = (sums − c∘m)/ς²), relative to ‖b‖∞."""
    c, sums, nv, pm = m.counts.astype(float), m.sums, s["nv"], s["pm"]
    mu, _ = m.mean_std()
    b = (sums - c * pm) / nv
    res = b - (s["gmrf"].precision() @ (mu - pm) + c / nv * (mu - pm))
    return float(np.abs(m._res - res).max() / max(np.abs(b).max(), 1e-300))


@pytest.mark.filterwarnings("ignore::evroute.errors.EvrouteWarning")
@pytest.mark.parametrize("chunk", [8, 2])
def test_the_tracked_residual_is_the_residual_after_every_round(small, chunk):
    """In pairs (8 edges a chunk) and in lanes (2), on two threads, with domains of one hop (the
    residual then large, the sweeps at work): the residual the bounds are computed from equals
    the one recomputed from scratch, to 1e-10."""
    m = LocalGMRFPosterior(small["gmrf"], small["nv"], tol=1e-2, chunk=chunk, radius=1, max_radius=1, threads=2)
    worst = []
    feed(small, [m], n_rounds=8, check=lambda t: worst.append(_tracked_residual_error(small, m)))
    assert max(worst) <= 1e-10, worst


@pytest.mark.filterwarnings("ignore::evroute.errors.EvrouteWarning")
@pytest.mark.parametrize("threads", [1, 2])
def test_two_chunks_that_meet_run_as_a_pair_is_caught_without_timing(small, monkeypatch, threads):
    """The mutation: the ordered executor's check never finds a meeting, so the second chunk of
    a pair whose domains and shells meet keeps its attempt made before the first was written.
    The residual check catches it on one thread as on two."""
    monkeypatch.setattr(ordered, "meets", lambda written_by, footprint, base: False)
    m = LocalGMRFPosterior(small["gmrf"], small["nv"], tol=1e-2, chunk=8, radius=2, max_radius=2, threads=threads)
    worst = []
    feed(small, [m], n_rounds=8, check=lambda t: worst.append(_tracked_residual_error(small, m)))
    assert max(worst) > 1e-6


@pytest.mark.filterwarnings("ignore::evroute.errors.EvrouteWarning")
def test_the_mean_bound_constant_bounds_every_posterior_column(small):
    """C = √(k_max / λ_min) ≥ max_i ‖Σ eᵢ‖₂ for the prior and the posterior after every round
    (Σ = (Q + D)⁻¹ dense), so |μ − μ*|∞ ≤ max_i ‖Σ eᵢ‖ ‖res‖ ≤ C ‖res‖; and the model's mean
    error is below the tighter middle term too (checked where the domains are small)."""
    m = LocalGMRFPosterior(small["gmrf"], small["nv"], tol=1e-2, chunk=8, radius=1, max_radius=1)
    Q = small["gmrf"].precision().toarray()
    assert np.linalg.norm(np.linalg.inv(Q), axis=0).max() <= m._C * (1 + 1e-9)
    ratios = []

    def check(t):
        sigma = np.linalg.inv(Q + np.diag(m.counts / small["nv"]))
        col = float(np.linalg.norm(sigma, axis=0).max())
        assert col <= m._C * (1 + 1e-9)
        mean, _ = textbook(small, m.counts, m.sums)
        err = float(np.abs(m.mean_std()[0] - mean).max())
        assert err <= col * float(np.linalg.norm(m._res)) * (1 + 1e-9) + 1e-12
        ratios.append(col / m._C)

    feed(small, [m], n_rounds=6, check=check)
    assert min(ratios) > 0.05  # C is a bound, and not a loose one here


def test_the_variance_bound_never_exceeds_the_trivial_one(small, monkeypatch):
    """At the loosest tol with one-hop domains and no exact clean-up, the first-order variance
    bound would pass k_max/σ₀² (every variance lies in [0, k_max]); it is capped there and still
    bounds the error."""
    monkeypatch.setattr(LocalGMRFPosterior, "_check_variances", lambda self: None)
    m = LocalGMRFPosterior(small["gmrf"], small["nv"], tol=1e-2, chunk=8, radius=1, max_radius=1)
    cap = m._kmax / m._sigma0 ** 2
    raw = []

    def check(t):
        raw.append((float(m._var_acc.max()) + m._var_out) / m._sigma0 ** 2)
        assert m.var_error_bound <= cap
        _, dv = errors(small, m)
        assert dv <= m.var_error_bound * (1 + 1e-9) + 1e-12

    feed(small, [m], n_rounds=8, check=check)
    assert max(raw) > cap  # the cap was needed
