"""The sliding-window time-varying posterior (models/window.py): it answers from the last H/2
to H rounds exactly as a static posterior fed only those rounds would, never restarts at
ε = 0, and its chain-rule evidence is the dense likelihood when it does not restart."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from evroute.errors import EvrouteError
from evroute.models import make_model
from evroute.priors.network_prior import NetworkPrior


@pytest.fixture(scope="module")
def setup():
    from evroute.physics.routes import edge_energies
    from evroute.roads.network import load_network

    net = load_network("synthetic", size=70)
    m = edge_energies(net)
    pv, nv = (0.25 * np.std(m)) ** 2, (0.1 * np.std(m)) ** 2
    prior = NetworkPrior(net, m, "combined", 1.0, 1.0, 2.0, pv)
    rng = np.random.default_rng(5)
    data = []
    for _ in range(10):
        e = rng.choice(net.n_edges, size=9)
        data.append((e, m[e] + rng.normal(0, np.sqrt(pv), e.size)))
    return prior, nv, data


def test_answers_from_the_last_half_to_full_window(setup):
    prior, nv, data = setup
    model = make_model("window[every=4]", prior, noise_var=nv)
    for t, (e, y) in enumerate(data, start=1):
        model.update(e, y)
        # restarts: one posterior at t = 4, 8, ..., the other at t = 2, 6, 10, ...; the older answers
        last = max(t % 4, (t - 2) % 4) or 4 if t >= 2 else t
        ref = make_model("exact", prior, noise_var=nv)
        for e2, y2 in data[t - last:t]:
            ref.update(e2, y2)
        np.testing.assert_allclose(model.mean_std()[0], ref.mean_std()[0], rtol=0, atol=1e-9 * np.sqrt(nv))
        np.testing.assert_allclose(model.mean_std()[1], ref.mean_std()[1], rtol=0, atol=1e-9 * np.sqrt(nv))
        assert 2 <= model.diagnostics()["window_rounds"] <= 4 or t < 2


def test_no_restart_is_the_exact_posterior_and_evidence(setup):
    prior, nv, data = setup
    model = make_model("window[eps=0]", prior, noise_var=nv)
    for e, y in data:
        model.update(e, y)
    e = np.concatenate([d[0] for d in data])
    y = np.concatenate([d[1] for d in data])
    C = prior.dense()[np.ix_(e, e)] + nv * np.eye(e.size)
    assert model.log_evidence == pytest.approx(multivariate_normal(prior.mean[e], C).logpdf(y), rel=1e-10)


def test_default_period_and_bad_settings(setup):
    prior, nv, _ = setup
    assert make_model("window[eps=0.05]", prior, noise_var=nv).every == 20
    with pytest.raises(EvrouteError, match="static backend"):
        make_model("window[base=kalman]", prior, noise_var=nv)
    with pytest.raises(EvrouteError, match="at least 2"):
        make_model("window[every=1]", prior, noise_var=nv)
