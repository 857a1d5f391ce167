"""The time-varying posterior (models/kalman.py) against the batch GP with paper 004's
(1 − ε)^{|t−t′|/2} kernel, every observation an input (edge, round)."""

from __future__ import annotations

import numpy as np
import pytest

from evroute.errors import EvrouteError
from evroute.models import make_model
from evroute.priors.network_prior import NetworkPrior


@pytest.mark.parametrize("eps", [0.05, 0.3])
def test_kalman_equals_the_batch_time_varying_gp(eps):
    from evroute.physics.routes import edge_energies
    from evroute.roads.network import load_network

    net = load_network("synthetic", size=70)
    m = edge_energies(net)
    pv, nv = (0.25 * np.std(m)) ** 2, (0.1 * np.std(m)) ** 2
    prior = NetworkPrior(net, m, "combined", 1.0, 1.0, 2.0, pv)
    K = prior.dense()
    rng = np.random.default_rng(0)
    model = make_model(f"kalman[eps={eps}]", prior, noise_var=nv)
    E, T = net.n_edges, 6
    edges, times, ys = [], [], []
    for t in range(1, T + 1):
        e = rng.choice(E, size=12)
        e = np.concatenate([e, e[:3]])  # repeats within a round
        y = m[e] + rng.normal(0.0, np.sqrt(pv), e.size)
        model.update(e, y)
        edges.append(e), times.append(np.full(e.size, t)), ys.append(y)
    e, tt, y = np.concatenate(edges), np.concatenate(times), np.concatenate(ys)
    decay = (1 - eps) ** (np.abs(tt[:, None] - tt[None, :]) / 2)
    Kb = K[np.ix_(e, e)] * decay + nv * np.eye(e.size)
    ks = K[:, e] * (1 - eps) ** ((T + 1 - tt)[None, :] / 2)  # the prediction is for round T + 1
    sol = np.linalg.solve(Kb, np.column_stack([y - m[e], ks.T]))
    mean = m + ks @ sol[:, 0]
    var = np.diag(K) - np.einsum("ij,ji->i", ks, sol[:, 1:])
    mu, sd = model.mean_std()
    scale = np.sqrt(pv)
    np.testing.assert_allclose(mu, mean, atol=1e-8 * scale)
    np.testing.assert_allclose(sd, np.sqrt(var), atol=1e-8 * scale)


def test_kalman_refuses_what_does_not_fit():
    class Big:
        n_edges = 10**6

    with pytest.raises(EvrouteError, match="dense"):
        make_model("kalman", Big(), noise_var=1.0)
