"""Checks every registered posterior backend must pass (the contract of
:class:`evroute.models.PosteriorModel`), in the spirit of scikit-learn's estimator checks.

A new backend is picked up automatically (``available_models()``); it needs an entry in
``AGREEMENT`` saying where it must agree with the exact posterior.
"""

from __future__ import annotations

import numpy as np
import pytest

from evroute.errors import EvrouteError
from evroute.models import PosteriorModel, available_models, make_model
from evroute.models.base import readonly
from evroute.priors.network_prior import NetworkPrior
from evroute.priors.prior import DensePrior, DiagonalPrior
from evroute.testing import check_backend, small_problem

# options that keep the heavier backends fast on the small network
FAST = {"svgp": {"inducing": 200, "batch_size": 5000, "learn_hyperparameters": False}}


@pytest.fixture(scope="module")
def small():
    """A ~130-edge synthetic city with the paper's prior, noise and a GP truth."""
    from evroute.physics.energy import load_vehicle
    from evroute.physics.routes import edge_energies
    from evroute.roads.network import load_network

    net = load_network("synthetic", size=60)
    pm = edge_energies(net, load_vehicle(None))
    sd = float(np.std(pm))
    prior = NetworkPrior(net, pm, "combined", 1.0, 1.0, 2.0, (0.25 * sd) ** 2)
    truth = prior.sample(np.random.default_rng(11))
    return {"net": net, "prior": prior, "nv": (0.1 * sd) ** 2, "truth": truth}


def rounds(s, n=6, k=10, seed=0):
    rng = np.random.default_rng(seed)
    E = s["prior"].n_edges
    hot = rng.choice(E, size=12, replace=False)  # repeated edges, as routes repeat
    out = []
    for _ in range(n):
        e = np.concatenate([rng.choice(hot, size=k // 2), rng.choice(E, size=k - k // 2)])
        out.append((e, s["truth"][e] + np.sqrt(s["nv"]) * rng.standard_normal(e.size)))
    return out


def build(name, s, seed=0):
    return make_model(name, s["prior"], noise_var=s["nv"], seed=seed, **FAST.get(name, {}))


def fed(name, s, seed=0):
    model = build(name, s, seed)
    for e, y in rounds(s):
        model.update(e, y)
    return model


BACKENDS = available_models()
#: backends that need an extra installed
EXTRA = {"svgp": "svgp"}


def _backends(names):
    return [pytest.param(n, marks=[pytest.mark.needs(EXTRA[n])] if n in EXTRA else []) for n in names]


@pytest.mark.parametrize("name", _backends(BACKENDS))
def test_every_backend_passes_the_shipped_checks(name):
    """evroute.testing.check_backend: the contract, and every capability the backend declares."""
    spec = f"{name}[{','.join(f'{k}={v}' for k, v in FAST[name].items())}]" if name in FAST else name
    ran = check_backend(spec)
    assert {"prior before data", "counts and sums", "deterministic", "bad rounds"} <= set(ran)
    declared = make_model(spec, small_problem().prior, noise_var=small_problem().noise_var).capabilities
    assert declared <= set(ran) | {"time_varying", "sparse_precision"}  # each declared capability was exercised


def _per_edge(name):
    """``name`` under per-edge noise (models/hetero.py), as a class the shipped checks construct:
    ς_e² = ς² w_e with w a fixed pattern of mean 1 (so the model's reference ς² is the one given)."""
    spec = f"{name}[{','.join(f'{k}={v}' for k, v in FAST[name].items())}]" if name in FAST else name

    def __new__(cls, prior, *, noise_var, seed=0):
        w = np.exp(np.sin(np.arange(prior.n_edges)))  # a factor 7 between edges
        return make_model(spec, prior, noise_var=noise_var * w / w.mean(), seed=seed)

    return type(f"PerEdgeNoise[{name}]", (), {"__new__": __new__})


@pytest.mark.parametrize("name", [n for n in BACKENDS if n != "svgp"])
def test_every_backend_passes_the_shipped_checks_under_per_edge_noise(name):
    """The same contract for every backend wrapped for per-edge noise (svgp refuses it)."""
    ran = check_backend(_per_edge(name))
    assert {"prior before data", "counts and sums", "deterministic", "bad rounds"} <= set(ran)


class _Forgetful(PosteriorModel):
    """A broken backend: it ignores the data (the checks must catch it)."""

    def __init__(self, prior, *, noise_var, seed=0):
        self.n_arms, self.noise_var = prior.n_edges, noise_var
        self._mu, self._sd = readonly(prior.mean.copy()), readonly(np.sqrt(prior.diag()))
        self._counts, self._sums = np.zeros(self.n_arms, np.int64), np.zeros(self.n_arms)

    def update(self, edges, observed):
        self._record(edges, observed)

    def mean_std(self):
        return self._mu, self._sd


class _Boastful(_Forgetful):
    """Declares covariance blocks it cannot give."""

    capabilities = frozenset({"covariance"})

    def update(self, edges, observed):
        self._record(edges, observed)
        self._sd = readonly(self._sd * 0.99)


def test_the_shipped_checks_catch_a_broken_backend():
    with pytest.raises(AssertionError, match="every observed edge must have learnt something"):
        check_backend(_Forgetful)
    with pytest.raises(EvrouteError, match="does not give posterior covariance"):
        check_backend(_Boastful)


def _exact(prior, nv, data):
    model = make_model("exact", prior, noise_var=nv)
    for e, y in data:
        model.update(e, y)
    return model.mean_std()


def _agree_bi(s):
    """BI ignores correlations: it is the exact posterior of the diagonal prior."""
    prior = DiagonalPrior(s["prior"].mean, s["prior"].diag())
    bi = make_model("bi", s["prior"], noise_var=s["nv"])
    data = rounds(s)
    for e, y in data:
        bi.update(e, y)
    return bi.mean_std(), _exact(DensePrior(prior.mean, np.diag(prior.diag())), s["nv"], data), 1e-10


def _agree_exact(s):
    """The incremental posterior equals the textbook formula with every observation listed."""
    data = rounds(s)
    K = s["prior"].dense()
    e = np.concatenate([d[0] for d in data])
    y = np.concatenate([d[1] for d in data])
    m = s["prior"].mean
    gram = K[np.ix_(e, e)] + s["nv"] * np.eye(e.size)
    sol = np.linalg.solve(gram, np.column_stack([y - m[e], K[e]]))
    mean = m + K[:, e] @ sol[:, 0]
    var = np.diag(K) - np.einsum("ij,ji->i", K[:, e], sol[:, 1:])
    return _exact(s["prior"], s["nv"], data), (mean, np.sqrt(var)), 1e-8


def _agree_svgp(s):
    """M ≥ distinct edges, full batch, fixed hyperparameters: close to exact after NGD steps
    (floor set by the 1e-6 relative jitter of K_ZZ; tests/test_svgp.py measures it)."""
    data = rounds(s)
    model = build("svgp", s)
    for e, y in data:
        model.update(e, y)
    model.optimise(100)
    return model.mean_std(), _exact(s["prior"], s["nv"], data), 1e-3


def _agree_dictionary(name, options):
    def agree(s):
        """With every observed edge in the dictionary, the DTC posterior is the exact one."""
        data = rounds(s)
        model = make_model(name, s["prior"], noise_var=s["nv"], **options)
        for e, y in data:
            model.update(e, y)
        assert set(model.anchors) == set(np.flatnonzero(model.counts))
        return model.mean_std(), _exact(s["prior"], s["nv"], data), 1e-6
    return agree


#: where each backend must agree with the exact posterior (ours, reference, relative tolerance)
def _agree_kalman(s):
    """With ε = 0 (static energies) the Kalman filter is the exact posterior."""
    data = rounds(s)
    model = make_model("kalman[eps=0]", s["prior"], noise_var=s["nv"])
    for e, y in data:
        model.update(e, y)
    return model.mean_std(), _exact(s["prior"], s["nv"], data), 1e-9


def _agree_eigen(s):
    """With ε = 0 and a full eigenbasis (rank = E) the truncated Kalman filter is exact."""
    data = rounds(s)
    model = make_model(f"eigen[eps=0,rank={s['prior'].n_edges}]", s["prior"], noise_var=s["nv"])
    for e, y in data:
        model.update(e, y)
    return model.mean_std(), _exact(s["prior"], s["nv"], data), 1e-8


def _agree_window(s):
    """With ε = 0 the window never restarts: the exact posterior itself."""
    data = rounds(s)
    model = make_model("window[eps=0]", s["prior"], noise_var=s["nv"])
    for e, y in data:
        model.update(e, y)
    return model.mean_std(), _exact(s["prior"], s["nv"], data), 1e-12


AGREEMENT = {"bi": _agree_bi, "exact": _agree_exact, "svgp": _agree_svgp, "kalman": _agree_kalman,
             "eigen": _agree_eigen, "window": _agree_window,
             "nystrom": _agree_dictionary("nystrom", {"gamma": 1e9}),
             "bkb": _agree_dictionary("bkb", {"qbar": 1e9})}


@pytest.mark.parametrize("name", _backends(BACKENDS))
def test_agrees_with_the_exact_posterior_where_it_should(name, small):
    assert name in AGREEMENT, f"backend {name!r}: add where it must agree with 'exact' to AGREEMENT"
    (mu, sd), (mu_ref, sd_ref), rtol = AGREEMENT[name](small)
    scale = float(np.sqrt(small["prior"].prior_var))
    assert np.max(np.abs(mu - mu_ref)) <= rtol * scale
    assert np.max(np.abs(sd - sd_ref)) <= rtol * scale
