"""The exact posterior on a sparse precision (models/gmrf.py) against the dense exact posterior
and the textbook formula; ``exact`` chooses it by the prior's representation."""

from __future__ import annotations

import numpy as np
import pytest

import evroute.models.gmrf as gmrf_mod
from evroute.errors import EvrouteError
from evroute.models import ExactGPModel, make_model
from evroute.models.gmrf import GMRFPosterior
from evroute.models.local import LocalGMRFPosterior
from evroute.priors.graph_prior import GraphMaternPrior
from evroute.priors.network_prior import NetworkPrior


@pytest.fixture(scope="module")
def small():
    from evroute.physics.energy import load_vehicle
    from evroute.physics.routes import edge_energies
    from evroute.roads.network import load_network

    net = load_network("synthetic", size=80)
    pm = edge_energies(net, load_vehicle(None))
    sd = float(np.std(pm))
    pv, nv = (0.25 * sd) ** 2, (0.1 * sd) ** 2
    dense = NetworkPrior(net, pm, "graph", 1.0, 1.0, 2.0, pv)
    assert dense.representation == "dense"  # (below GMRF_FROM_EDGES)
    return {"net": net, "pm": pm, "pv": pv, "nv": nv, "dense": dense,
            "gmrf": GraphMaternPrior(net, pm, 1.0, 2.0, pv), "truth": dense.sample(np.random.default_rng(3))}


def feed(s, models, n_rounds=12, seed=0, check=None):
    """Rounds as routes make them: a repeated core, new edges, repeated edges within a round."""
    rng = np.random.default_rng(seed)
    E = s["net"].n_edges
    core = rng.choice(E, size=15, replace=False)
    for t in range(n_rounds):
        e = np.concatenate([core, rng.choice(E, size=10), core[:3]]) if t % 4 else rng.choice(E, size=25)
        y = s["truth"][e] + np.sqrt(s["nv"]) * rng.standard_normal(e.size)
        for m in models:
            m.update(e, y)
        if check:
            check(t)


def textbook(s, counts, sums):
    """μ, σ² from the dense kernel with every observed edge's mean as a pseudo-observation."""
    K = np.array(s["dense"].dense())
    S = np.flatnonzero(counts)
    A = K[np.ix_(S, S)] + np.diag(s["nv"] / counts[S])
    G = np.linalg.solve(A, K[S])
    mean = s["pm"] + G.T @ (sums[S] / counts[S] - s["pm"][S])
    var = np.diag(K) - np.einsum("ij,ij->j", G, K[S])
    return mean, var


def test_exact_chooses_the_sparse_posterior_by_the_prior(small, monkeypatch):
    import evroute.priors.network_prior as network_prior_mod

    # update=local is the default for a sparse precision (tests/test_models_local.py); global here
    assert isinstance(make_model("exact", small["gmrf"], noise_var=small["nv"]), LocalGMRFPosterior)
    assert isinstance(make_model("exact[update=global]", small["gmrf"], noise_var=small["nv"]), GMRFPosterior)
    assert isinstance(make_model("exact", small["dense"], noise_var=small["nv"]), ExactGPModel)
    monkeypatch.setattr(network_prior_mod, "GMRF_FROM_EDGES", 50)
    p = NetworkPrior(small["net"], small["pm"], "graph", 1.0, 1.0, 2.0, small["pv"])
    assert p.representation == "sparse" and p.factor_nnz > 0
    assert isinstance(make_model("exact[update=global,merge=always]", p, noise_var=small["nv"]), GMRFPosterior)
    with pytest.raises(EvrouteError, match="no sparse precision"):
        GMRFPosterior(NetworkPrior(small["net"], small["pm"], "combined"), small["nv"])


@pytest.mark.parametrize("merge", ["auto", "always", "never"])
def test_equals_the_textbook_posterior_every_round(small, merge):
    model = make_model(f"exact[update=global,merge={merge}]", small["gmrf"], noise_var=small["nv"])
    dense = make_model("exact", small["dense"], noise_var=small["nv"])

    def check(t):
        mu, sd = model.mean_std()
        ref_mu, ref_var = textbook(small, model.counts.astype(float), model._sums)
        np.testing.assert_allclose(mu, ref_mu, rtol=1e-9, atol=1e-9 * np.sqrt(small["pv"]))
        np.testing.assert_allclose(sd**2, ref_var, rtol=1e-8)
        dmu, dsd = dense.mean_std()
        np.testing.assert_allclose(mu, dmu, rtol=1e-9, atol=1e-9 * np.sqrt(small["pv"]))
        np.testing.assert_allclose(sd, dsd, rtol=1e-8)

    feed(small, [model, dense], check=check)
    if merge == "always":
        assert model.n_merges == 12
    if merge == "never":
        assert model.n_merges == 0
    assert model.n_check_failures == 0


def test_a_repeated_route_needs_no_new_solves_after_a_merge(small):
    model = make_model("exact[update=global,merge=always]", small["gmrf"], noise_var=small["nv"])
    route = np.arange(0, 40, 2)
    rng = np.random.default_rng(1)
    model.update(route, small["truth"][route] + rng.standard_normal(route.size))
    solves = model.n_solves
    assert solves == route.size
    for _ in range(3):  # the columns are carried through the merges, exactly
        model.update(route, small["truth"][route] + rng.standard_normal(route.size))
    assert model.n_solves == solves and model.n_merges == 4
    ref_mu, ref_var = textbook(small, model.counts.astype(float), model._sums)
    np.testing.assert_allclose(model.mean_std()[1] ** 2, ref_var, rtol=1e-8)


def test_a_failed_check_recomputes_the_variances_exactly(small, monkeypatch):
    model = make_model("exact[update=global,merge=always]", small["gmrf"], noise_var=small["nv"])
    monkeypatch.setattr(GMRFPosterior, "_checks_pass", lambda self, mean: False)
    feed(small, [model], n_rounds=3)
    assert model.n_check_failures == 3
    ref_mu, ref_var = textbook(small, model.counts.astype(float), model._sums)
    np.testing.assert_allclose(model.mean_std()[1] ** 2, ref_var, rtol=1e-8)


def test_the_merge_rule_follows_the_cost_model(small, monkeypatch):
    """auto merges when the active block's dense work outgrows a refactorisation: never when a
    refactorisation is made very dear, more often when it is free than at its measured cost."""
    merges = []
    for flops in (1e30, 1e3 * gmrf_mod.FACTOR_FLOPS_PER_NNZ, gmrf_mod.FACTOR_FLOPS_PER_NNZ, 0.0):
        monkeypatch.setattr(gmrf_mod, "FACTOR_FLOPS_PER_NNZ", flops)
        model = make_model("exact[update=global]", small["gmrf"], noise_var=small["nv"])
        feed(small, [model], n_rounds=20)
        merges.append(model.n_merges)
    assert merges[0] == 0 and merges == sorted(merges) and merges[1] < merges[3] and merges[3] >= 5


def test_joint_draws_have_the_posterior_covariance(small):
    """Matheron's rule through both levels (base factor and active columns): Monte Carlo
    moments against the dense posterior covariance."""
    model = make_model("exact[update=global,merge=never,max_active=30]", small["gmrf"], noise_var=small["nv"])
    dense = make_model("exact", small["dense"], noise_var=small["nv"])
    feed(small, [model, dense], n_rounds=6)
    assert model.n_merges >= 1 and model.n_columns > 0  # both levels hold data
    cov = dense.posterior_cov()
    mu, sd = model.mean_std()
    rng = np.random.default_rng(0)
    n = 4000
    draws = np.array([model.sample(rng, joint=True) for _ in range(n)])
    assert np.all(np.abs(draws.mean(0) - mu) < 5 * sd / np.sqrt(n))
    se = np.sqrt((np.outer(sd**2, sd**2) + cov**2) / n)
    assert np.mean(np.abs(np.cov(draws, rowvar=False) - cov) < 4 * se) > 0.999
    # the independent draw of the paper's GP-TS
    ind = np.array([model.sample(rng) for _ in range(n)])
    assert np.all(np.abs(ind.std(0) / sd - 1) < 0.1)
