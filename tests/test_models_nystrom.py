"""Nyström dictionaries (models/nystrom.py): the DTC engine against the exact posterior and
the papers' formulas; KORS and BKB dictionaries."""

from __future__ import annotations

import numpy as np
import pytest

from evroute.errors import EvrouteError
from evroute.models import make_model
from evroute.models.nystrom import BKBPosterior, KORSPosterior
from evroute.priors.graph_prior import GraphMaternPrior
from evroute.priors.network_prior import NetworkPrior


@pytest.fixture(scope="module")
def small():
    from evroute.physics.energy import load_vehicle
    from evroute.physics.routes import edge_energies
    from evroute.roads.network import load_network

    net = load_network("synthetic", size=70)
    pm = edge_energies(net, load_vehicle(None))
    sd = float(np.std(pm))
    pv, nv = (0.25 * sd) ** 2, (0.1 * sd) ** 2
    prior = NetworkPrior(net, pm, "combined", 1.0, 1.0, 2.0, pv)
    return {"net": net, "pm": pm, "pv": pv, "nv": nv, "prior": prior, "K": np.array(prior.dense()),
            "truth": prior.sample(np.random.default_rng(2))}


def rounds(s, n=8, seed=0):
    rng = np.random.default_rng(seed)
    E = s["net"].n_edges
    core = rng.choice(E, size=20, replace=False)
    for t in range(n):
        e = np.concatenate([core[: 10 + t], rng.choice(E, size=6)])
        yield e, s["truth"][e] + np.sqrt(s["nv"]) * rng.standard_normal(e.size)


def dtc(s, Z, counts, sums):
    """The DTC posterior from the papers' own formulas (EK-UCB Prop. 4.2, appendix form), in
    GP units: μ = m + k_Zᵀ Λ Γ, σ² = k_ee + λ k_Zᵀ(Λ − K_ZZ⁻¹/λ) k_Z with
    Λ = (K_ZS K_SZ + λ K_ZZ)⁻¹ over every observation (counts expand the sums)."""
    K, m, lam = s["K"], s["pm"], s["nv"]
    S = np.flatnonzero(counts)
    c = counts[S].astype(float)
    KZS = K[np.ix_(Z, S)]
    Lam = np.linalg.inv((KZS * c) @ KZS.T + lam * K[np.ix_(Z, Z)])
    Gam = KZS @ (sums[S] - c * m[S])
    KZ = K[Z]
    mean = m + KZ.T @ Lam @ Gam
    var = np.diag(K) + lam * np.einsum("ie,ij,je->e", KZ, Lam - np.linalg.inv(K[np.ix_(Z, Z)]) / lam, KZ)
    return mean, var


def test_the_engine_equals_the_papers_formulas_for_a_partial_dictionary(small):
    model = make_model("nystrom[gamma=0.3]", small["prior"], noise_var=small["nv"], seed=1)
    for e, y in rounds(small):
        model.update(e, y)
    Z = model.anchors
    assert 0 < Z.size < model.n_distinct  # a real subset
    mean, var = dtc(small, Z, model.counts, model._sums)
    mu, sd = model.mean_std()
    scale = np.sqrt(small["pv"])
    np.testing.assert_allclose(mu, mean, atol=1e-6 * scale)
    np.testing.assert_allclose(sd**2, var, atol=1e-6 * small["pv"])


def test_incremental_and_rebuilt_dictionaries_agree(small):
    """Anchors appended over the rounds (R and Ze extended row by row) = the same dictionary
    built from scratch, for both dictionary rules (one engine)."""
    inc = make_model("nystrom[gamma=0.5]", small["prior"], noise_var=small["nv"], seed=4)
    for e, y in rounds(small):
        inc.update(e, y)
    rebuilt = BKBPosterior(small["prior"], small["nv"], lazy=True, ratio=1e30)
    rebuilt._counts[:], rebuilt._sums[:] = inc.counts, inc._sums
    rebuilt._set_dictionary(inc.anchors)
    rebuilt._posterior()
    for a, b in zip(inc.mean_std(), rebuilt.mean_std(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9 * np.sqrt(small["pv"]))


def test_kors_score_is_eq_41(small):
    """The closed form (1+ε) d/(d+μ) equals 001 eq. 41 over the augmented dictionary:
    τ = (1+ε)/μ (k_ss − k̄ᵀ S̄ (S̄ᵀ K̄ S̄ + μI)⁻¹ S̄ᵀ k̄), the candidate with weight 1."""
    model = KORSPosterior(small["prior"], small["nv"], gamma=0.5, seed=3)
    for e, y in rounds(small, n=4):
        model.update(e, y)
    K, Z, mu, eps = small["K"], model.anchors, model.mu, model.eps
    assert Z.size >= 3
    for s in (0, 5, int(Z[0]), small["net"].n_edges - 1):
        aug = np.append(Z, s)
        Kbar = K[np.ix_(aug, aug)]
        Sbar = np.diag(np.append(1.0 / np.sqrt(model._p), 1.0))
        kbar = K[aug, s]
        inner = Sbar @ np.linalg.solve(Sbar.T @ Kbar @ Sbar + mu * np.eye(aug.size), Sbar.T @ kbar)
        eq41 = (1 + eps) / mu * (K[s, s] - kbar @ inner)
        assert model.kors_score(s) == pytest.approx(eq41, rel=1e-7, abs=1e-12)


def test_in_round_scores_extend_the_rounds_first_scores(small, monkeypatch):
    """Within a round, after anchors were added, the score of the next observation is its
    score against the dictionary before the round extended by the new anchors' coordinates:
    equal to the score from scratch (closed form over every anchor) for every candidate."""
    model = KORSPosterior(small["prior"], small["nv"], gamma=0.8, seed=5)
    checked = []
    extend = KORSPosterior._kors_extend

    def both(self, s, u0):
        tau, u = extend(self, s, u0)
        tau_ref, u_ref = self._kors(s)
        checked.append(self._p.size - u0.size)
        assert tau == pytest.approx(tau_ref, rel=1e-10, abs=1e-13)
        np.testing.assert_allclose(u, u_ref, rtol=1e-9, atol=1e-12 * np.abs(u_ref).max())
        return tau, u

    monkeypatch.setattr(KORSPosterior, "_kors_extend", both)
    for e, y in rounds(small, n=6):
        model.update(e, y)
    assert len(checked) > 10 and max(checked) >= 2  # several anchors added within a round


def test_an_anchor_twice_is_a_near_duplicate(small):
    model = KORSPosterior(small["prior"], small["nv"], gamma=1e9)
    e = np.array([3, 3, 3, 8])
    model.update(e, small["truth"][e])
    assert list(model.anchors) == [3, 8] and model.n_duplicates == 2
    assert np.all(np.isfinite(model.mean_std()[1]))


def test_rows_come_from_the_prior_operator(small):
    """On the sparse graph prior (rows by solves) the engine gives what the dense prior gives."""
    net, pm, pv, nv = small["net"], small["pm"], small["pv"], small["nv"]
    dense = NetworkPrior(net, pm, "graph", 1.0, 1.0, 2.0, pv)
    dense.dense()
    a = make_model("bkb", dense, noise_var=nv, seed=2)
    b = make_model("bkb", GraphMaternPrior(net, pm, 1.0, 2.0, pv), noise_var=nv, seed=2)
    for e, y in rounds(small, n=4):
        a.update(e, y)
        b.update(e, y)
    np.testing.assert_array_equal(a.anchors, b.anchors)
    for x, y in zip(a.mean_std(), b.mean_std(), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-7, atol=1e-8 * np.sqrt(pv))


def test_bkb_resamples_by_variance_and_lazy_keeps_the_dictionary(small):
    eager = BKBPosterior(small["prior"], small["nv"], qbar=0.5, seed=0)
    lazy = BKBPosterior(small["prior"], small["nv"], qbar=0.5, lazy=True, ratio=1e9, seed=0)
    for e, y in rounds(small):
        eager.update(e, y)
        lazy.update(e, y)
    assert eager.n_resamples == 8 and lazy.n_resamples == 1  # lazy: only the empty dictionary
    assert len(eager.stale_ratios) == 8 and eager.stale_ratios[0] > 1.0
    assert set(eager.anchors) <= set(np.flatnonzero(eager.counts))


def test_joint_draws_have_the_dtc_marginals(small):
    model = make_model("nystrom[gamma=0.3]", small["prior"], noise_var=small["nv"], seed=1)
    for e, y in rounds(small):
        model.update(e, y)
    mu, sd = model.mean_std()
    rng = np.random.default_rng(0)
    n = 3000
    draws = np.array([model.sample(rng, joint=True) for _ in range(n)])
    assert np.all(np.abs(draws.mean(0) - mu) < 5 * sd / np.sqrt(n))
    assert np.all(np.abs(draws.std(0) / sd - 1) < 0.1)


def test_bad_options_are_one_line_errors(small):
    for spec in ("nystrom[gamma=-1]", "bkb[qbar=0]", "nystrom[eps=x]", "bkb[lazy=maybe]"):
        with pytest.raises(EvrouteError) as err:
            make_model(spec, small["prior"], noise_var=small["nv"])
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("policy", ["gp-ucb", "gp-bucb", "gp-ts", "gp-greedy"])
def test_every_policy_runs_and_logs_the_dictionary(tmp_path, small, policy):
    """All policies run on the dictionary backends; rounds.parquet carries the dictionary size,
    the stale-variance ratio and the time split; `evroute plot` draws m against t."""
    import pandas as pd

    from evroute.reports.plots import plot_directory
    from evroute.runs.config import SimulationConfig
    from evroute.runs.simulation import simulate

    cfg = SimulationConfig(model="bkb" if policy == "gp-ts" else "nystrom", policy=policy, horizon=6, seed=1)
    simulate(cfg, tmp_path / "run", net=small["net"])
    r = pd.read_parquet(tmp_path / "run" / "rounds.parquet")
    assert {"dictionary_size", "stale_ratio", "seconds_dictionary", "seconds_posterior",
            "seconds_scoring"} <= set(r.columns)
    assert np.all(r.dictionary_size >= 1) and np.all(r.stale_ratio >= 1.0)
    if cfg.model == "nystrom":
        assert np.all(np.diff(r.dictionary_size) >= 0)  # KORS only grows
    files = plot_directory(tmp_path / "run", tmp_path / "plots", maps=False)
    assert tmp_path / "plots" / "dictionary.png" in files


@pytest.mark.parametrize("t", [6, 63, 215])
def test_no_variance_starvation_as_in_bkb_fig_1(t):
    """Paper 002 Fig. 1 (spec nystrom §3): a GP on [0, 1] with k = exp(−100 d²), λ = 0.01, t
    evaluations uniform in [0, 0.5], BKB with q̄ = 3. The DTC variance stays at the prior on
    [0.7, 1] (= the exact posterior) and is accurate where the data are; subset-of-regressors
    (‖z‖² in place of k(x, x)) starves there."""
    from evroute.priors.prior import DensePrior

    x = np.linspace(0.0, 1.0, 201)
    K = np.exp(-100.0 * (x[:, None] - x[None, :]) ** 2)
    prior = DensePrior(np.zeros(x.size), K)
    rng = np.random.default_rng(t)
    arms = rng.integers(0, 101, size=t)  # x ≤ 0.5
    f = np.sin(6 * x)
    model = BKBPosterior(prior, 0.01, qbar=3.0, seed=t)
    exact = make_model("exact", prior, noise_var=0.01)
    for a in arms:  # one evaluation a round, as in the paper
        y = f[[a]] + 0.1 * rng.standard_normal(1)
        model.update(np.array([a]), y)
        exact.update(np.array([a]), y)
    _, sd = model.mean_std()
    _, sd_exact = exact.mean_std()
    far, near = x >= 0.7, x <= 0.5
    assert np.all(sd[far] ** 2 > 0.99)  # the prior level (1)
    np.testing.assert_allclose(sd[far], sd_exact[far], atol=1e-3)
    assert np.max(np.abs(sd[near] ** 2 - sd_exact[near] ** 2)) < 0.05
    U = sla_solve(model)
    sor = 0.01 * np.einsum("ij,ij->j", U, U)  # λ zᵀV⁻¹z: the SoR variance
    assert np.max(sor[far]) < 0.1 and np.max(sor[x >= 0.8]) < 0.003  # starved: ≪ the prior's 1
    assert model.m <= 60 and model.m < model.n_distinct + 1


def sla_solve(model):
    import scipy.linalg as sla

    return sla.solve_triangular(model._LV, model._Ze, lower=True)


def test_downdated_variances_equal_full_recomputation(small, monkeypatch):
    """``scoring=downdate`` (rank-B Woodbury on V while the dictionary is fixed) gives the same
    all-edge posterior as recomputing ‖L_V⁻¹z_e‖² every round, round after round (the cost
    rule is switched off: on this small graph a downdate would not pay)."""
    import evroute.models.nystrom as ny

    monkeypatch.setattr(ny, "DOWNDATE_COST", 0.0)
    kw = dict(noise_var=small["nv"], seed=3)
    specs = ("bkb[lazy=true,ratio=1e30,scoring={},refresh=1000]", "nystrom[gamma=0.05,scoring={},refresh=1000]")
    for spec in specs:
        full = make_model(spec.format("full"), small["prior"], **kw)
        down = make_model(spec.format("downdate"), small["prior"], **kw)
        for e, y in rounds(small, n=12, seed=5):
            full.update(e, y)
            down.update(e, y)
            for a, b in zip(full.mean_std(), down.mean_std(), strict=True):
                np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-9 * np.sqrt(small["pv"]))
        np.testing.assert_array_equal(full.anchors, down.anchors)
        assert down.n_downdates >= 3 and full.n_downdates == 0  # downdates did happen


def test_statistics_are_kept_exactly_and_subsets_predict_the_same(small):
    """G and b, kept incrementally (GEMM per round, bordered per anchor), equal their
    recomputation from the counts; predict(idx) equals mean_std() at idx."""
    model = make_model("nystrom[gamma=0.3]", small["prior"], noise_var=small["nv"], seed=1)
    for e, y in rounds(small, n=6):
        model.update(e, y)
        S = np.flatnonzero(model.counts)
        c = model.counts[S].astype(float)
        ZS = model._Ze[:, S]
        np.testing.assert_allclose(model._G, (ZS * c) @ ZS.T, rtol=1e-10, atol=1e-12 * np.abs(model._G).max())
        np.testing.assert_allclose(model._b, ZS @ (model._sums[S] - c * small["pm"][S]), rtol=1e-10,
                                   atol=1e-12 * np.abs(model._b).max())
        idx = np.array([0, 3, 17, small["net"].n_edges - 1])
        mu_p, sd_p = model.predict(idx)
        mu, sd = model.mean_std()
        np.testing.assert_allclose(mu_p, mu[idx], rtol=1e-12)
        np.testing.assert_allclose(sd_p, sd[idx], rtol=1e-10)


def test_dictionary_size_tracks_the_effective_dimension(small):
    """m tracks d_eff = Tr(K_n(K_n + λI)⁻¹) over the n observations (spec nystrom J.8 item 6):
    BKB's expected size is Σ_j min(1, q̄ c_j σ̃²_j) ≈ q̄ d_eff, and both rules grow and shrink
    with d_eff as λ falls and rises."""
    K, S = small["K"], []
    for e, _ in rounds(small, n=10, seed=7):
        S.extend(e.tolist())
    S = np.asarray(S)
    sizes, deffs = {"bkb": [], "nystrom": []}, []
    for scale in (0.3, 1.0, 3.0):
        lam = small["nv"] * scale**2
        Kn = K[np.ix_(S, S)]
        deffs.append(float(np.trace(np.linalg.solve(Kn + lam * np.eye(S.size), Kn))))
        for name in sizes:
            ms = []
            for seed in range(5):
                model = make_model(f"{name}[qbar=3]" if name == "bkb" else name, small["prior"], noise_var=lam,
                                   seed=seed)
                for e, y in rounds(small, n=10, seed=7):
                    model.update(e, y)
                ms.append(model.m)
            sizes[name].append(float(np.mean(ms)))
        # BKB: m within [0.3, 3] × q̄ d_eff (the sandwich of 002 Thm. 1 with q̄ = 3 holds loosely)
        assert 0.3 * 3 * deffs[-1] <= sizes["bkb"][-1] <= 3 * 3 * deffs[-1]
    assert deffs[0] > deffs[1] > deffs[2]
    for name in sizes:
        assert sizes[name][0] > sizes[name][2], (name, sizes, deffs)


def test_points_prior_rows_are_the_kernel_and_lazy_bkb_accumulates():
    """PointsPrior (arms that are points, e.g. paper 001's (context, action) pairs) gives the
    Gaussian kernel's rows; BBKB's trigger accumulates the variance since the last resampling
    (one observation a round never passes C alone here, yet the dictionary is refreshed)."""
    from evroute.priors.prior import PointsPrior, rbf_kernel

    rng = np.random.default_rng(0)
    X = rng.uniform(size=(60, 3))
    prior = PointsPrior(np.zeros(60), X, rbf_kernel(0.3, 2.0))
    d2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    np.testing.assert_allclose(prior.rows(np.arange(60)), 2.0 * np.exp(-d2 / (2 * 0.09)), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(prior.diag(), 2.0)
    lam = 4.0  # σ̃² ≤ k/λ = 0.5 per observation: 1 + σ̃² < C = 1.6 for a single round
    model = BKBPosterior(prior, lam, qbar=3.0, lazy=True, ratio=1.6, seed=1)
    for t in range(30):
        e = np.array([t % 60])
        model.update(e, np.array([rng.normal()]))
    assert max(model.stale_ratios) < 1.6
    assert 2 <= model.n_resamples < 30
