"""The SVGP backend (paper 003, Algorithm 3) against the exact GP, and in the loop."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from evroute.errors import EvrouteError
from evroute.models import make_model
from evroute.priors.network_prior import NetworkPrior
from evroute.priors.prior import NOISE_SCALE, PRIOR_SCALE, DensePrior
from evroute.runs.config import SimulationConfig
from evroute.runs.directory import RUN_FILES
from evroute.runs.simulation import simulate

pytestmark = pytest.mark.needs("svgp")
torch = pytest.importorskip("torch", reason='needs the svgp extra: pip install "evroute[svgp]"')
pytest.importorskip("gpytorch")


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Small problems: one torch thread (OpenMP spinning on a busy 2-core box costs 3x)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def small():
    """A 130-edge synthetic city with the paper's prior and noise scales."""
    from evroute.physics.energy import load_vehicle
    from evroute.physics.routes import edge_energies
    from evroute.roads.network import load_network

    net = load_network("synthetic", size=60)
    pm = edge_energies(net, load_vehicle(None))
    sd = float(np.std(pm))
    pv, nv = (PRIOR_SCALE * sd) ** 2, (NOISE_SCALE * sd) ** 2
    K = NetworkPrior(net, pm, "combined", 1.0, 1.0, 2.0, pv).dense()
    f = pm + np.linalg.cholesky(K + 1e-9 * pv * np.eye(net.n_edges)) @ np.random.default_rng(5).standard_normal(net.n_edges)
    return dict(net=net, pm=pm, pv=pv, nv=nv, K=K, f=f)


def _prior(s, kind="combined", lengthscale=1.0):
    return NetworkPrior(s["net"], s["pm"], kind, lengthscale, 1.0, 2.0, s["pv"])


def _svgp(s, kind="combined", seed=0, **kw):
    opts = dict(inducing=500, batch_size=10_000, steps=1, learn_hyperparameters=False)
    opts.update(kw)
    return make_model("svgp", _prior(s, kind), noise_var=s["nv"], seed=seed, **opts)


def _rounds(s, n_rounds=8, k=12, seed=0):
    rng = np.random.default_rng(seed)
    E = s["net"].n_edges
    out = []
    for _ in range(n_rounds):
        e = rng.choice(E, size=k, replace=True)
        out.append((e, s["f"][e] + np.sqrt(s["nv"]) * rng.standard_normal(k)))
    return out


def test_import_does_not_import_torch():
    """The backend is declared and registered without torch (``evroute models`` lists it); its
    classes live at the top level of the module that imports torch."""
    code = ("import sys, evroute.models.svgp, evroute.models\nfrom evroute.cli import main\nmain(['models'])\n"
            "assert not {'torch', 'gpytorch'} & set(sys.modules), 'torch imported'")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert "svgp" in out.stdout
    from evroute.models import svgp_gpytorch

    for name in svgp_gpytorch.__all__:
        obj = getattr(svgp_gpytorch, name)
        assert getattr(obj, "__module__", svgp_gpytorch.__name__) == svgp_gpytorch.__name__, name


@pytest.mark.parametrize("kind", ["combined", "graph", "context"])
def test_kernel_equals_the_exact_prior_at_initialisation(small, kind):
    prior = _prior(small, kind, 0.7)
    K = prior.dense()
    m = make_model("svgp", prior, noise_var=small["nv"])
    assert np.max(np.abs(m.prior_covariance() - K)) <= 1e-10 * small["pv"]
    mu, sd = m.mean_std()  # the prior until the first observation
    assert np.array_equal(mu, small["pm"])
    np.testing.assert_allclose(sd, np.sqrt(np.diag(K)), rtol=1e-12)
    assert mu.dtype == sd.dtype == np.float64
    assert not mu.flags.writeable


def test_posterior_approaches_the_exact_gp(small):
    """M ≥ distinct edges, fixed hyperparameters, full batch: SVGP → exact posterior.

    Reached after 150 extra steps: max |Δμ|/σ₀ ≈ 7e-7, max |Δσ|/σ₀ ≈ 4.5e-6, a floor set
    by the 1e-6 (relative) jitter of K_ZZ (jitter 1e-8 gives 7e-9 / 5e-8); asserted at 2e-5.
    """
    m = _svgp(small)
    ex = make_model("exact", DensePrior(small["pm"], small["K"]), noise_var=small["nv"])
    for e, y in _rounds(small):
        m.update(e, y)  # one NGD step per round, q carried over when Z grows
        ex.update(e, y)
    assert m.n_inducing_changes > 0
    assert m.inducing_edges.size == m.n_distinct == ex.n_distinct
    mu, sd = m.mean_std()
    mue, sde = ex.mean_std()
    s0 = np.sqrt(small["pv"])
    gap_before = np.max(np.abs(mu - mue)) / s0
    m.optimise(150)
    mu, sd = m.mean_std()
    dmu = np.max(np.abs(mu - mue)) / s0
    dsd = np.max(np.abs(sd - sde)) / s0
    print(f"max |Δμ|/σ₀ = {dmu:.2e}, max |Δσ|/σ₀ = {dsd:.2e}")
    assert dmu < 2e-5 and dsd < 2e-5, (dmu, dsd)
    assert dmu < gap_before


def test_carry_over_keeps_the_posterior_when_z_grows(small):
    """q_new(u_new) = ∫ p(u_new | u_old) q_old: with Z_new ⊇ Z_old predictions do not move."""
    m = _svgp(small)
    (e1, y1), (e2, _) = _rounds(small, n_rounds=2)
    m.update(e1, y1)
    m.optimise(5)
    mu1, sd1 = (a.copy() for a in m.mean_std())
    old = set(m.inducing_edges.tolist())
    m._counts[np.setdiff1d(e2, e1)] += 1  # new visited edges, no new data, no steps
    m._select_inducing()
    m._cache = None
    assert set(m.inducing_edges.tolist()) > old
    mu2, sd2 = m.mean_std()
    s0 = np.sqrt(small["pv"])
    assert np.max(np.abs(mu2 - mu1)) / s0 < 1e-5
    assert np.max(np.abs(sd2 - sd1)) / s0 < 1e-5


def test_elbo_rises(small):
    m = _svgp(small)
    for e, y in _rounds(small, n_rounds=3):
        m.update(e, y)
    before = m.elbo()
    trace = m.optimise(15)  # full batch, fixed hyperparameters: NGD is monotone
    assert np.all(np.diff(trace) > -1e-12)
    assert before == pytest.approx(trace[0], abs=1e-9)  # full batch: the same ELBO
    assert m.elbo() > trace[-1] > trace[0]
    h = _svgp(small, learn_hyperparameters=True)
    for e, y in _rounds(small, n_rounds=3):
        h.update(e, y)
    trace = h.optimise(15)
    assert trace[-1] > trace[0]
    assert h.hyperparameters()["lengthscale_f"] != [1.0, 1.0, 1.0]


def test_inducing_points_are_the_most_visited_edges(small):
    m = _svgp(small, inducing=3)
    pm = small["pm"]
    e = np.array([5, 5, 5, 9, 9, 2, 2, 1, 7])
    m.update(e, pm[e])
    assert m.inducing_edges.tolist() == [2, 5, 9]  # 5 (3 visits), then 2 and 9 (2 each)
    m2 = _svgp(small, inducing=2)
    m2.update(e, pm[e])
    assert m2.inducing_edges.tolist() == [2, 5]  # 2 and 9 tie: the smaller id wins
    z = m.inducing_points
    assert z[:, 0].tolist() == [2.0, 5.0, 9.0]
    assert m.counts.tolist()[:10] == [0, 1, 2, 0, 0, 3, 0, 1, 0, 2]
    assert m.n_distinct == 5


def test_inducing_contexts_move_but_edge_ids_stay(small):
    m = _svgp(small, inducing=20, batch_size=30, learn_hyperparameters=True)
    for e, y in _rounds(small, n_rounds=3):
        m.update(e, y)
    m.optimise(10)
    z = m.inducing_points
    assert np.array_equal(z[:, 0], m.inducing_edges.astype(float))
    from evroute.priors.kernels import standardize_context

    x = standardize_context(small["net"].context)[m.inducing_edges]
    assert np.max(np.abs(z[:, 1:] - x)) > 0


def test_same_seed_same_output_different_seed_different_batches(small):
    def run(seed):
        m = _svgp(small, batch_size=20, steps=2, learn_hyperparameters=True, seed=seed)
        batches = []
        for e, y in _rounds(small, n_rounds=4):
            m.update(e, y)
            batches.append(m.last_batch.copy())
        mu, sd = m.mean_std()
        return mu.copy(), sd.copy(), list(m.elbo_trace), batches

    a, b, c = run(3), run(3), run(4)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[2] == b[2]
    assert all(np.array_equal(x, y) for x, y in zip(a[3], b[3], strict=True))
    assert any(not np.array_equal(x, y) for x, y in zip(a[3], c[3], strict=True))
    assert all(len(x) == 20 for x in a[3][1:])  # history > B: minibatches of B
    assert not np.array_equal(a[0], c[0])


def test_a_pickled_model_continues_identically(small):
    import pickle

    m = _svgp(small, batch_size=20, learn_hyperparameters=True)
    (e1, y1), (e2, y2) = _rounds(small, n_rounds=2)
    m.update(e1, y1)
    c = pickle.loads(pickle.dumps(m))
    m.update(e2, y2)
    c.update(e2, y2)
    assert np.array_equal(m.mean_std()[0], c.mean_std()[0])
    assert np.array_equal(m.mean_std()[1], c.mean_std()[1])


def test_learnt_noise_is_exposed_and_sampling(small):
    m = _svgp(small, learn_hyperparameters=True, learn_noise=True)
    assert m.noise_var == pytest.approx(small["nv"], rel=1e-12)
    for e, y in _rounds(small, n_rounds=2):
        m.update(e, y)
    assert m.noise_var != pytest.approx(small["nv"], rel=1e-9)
    fixed = _svgp(small)
    fixed.update(*_rounds(small, n_rounds=1)[0])
    assert fixed.noise_var == small["nv"]
    draw = fixed.sample(np.random.default_rng(0))
    assert draw.shape == (small["net"].n_edges,) and np.all(np.isfinite(draw))
    with pytest.raises(EvrouteError):
        fixed.sample(np.random.default_rng(0), joint=True)
    fixed.update(np.array([], dtype=np.int64), np.array([]))  # no-op
    with pytest.raises(EvrouteError):
        fixed.update(np.array([1, 2]), np.array([1.0]))


@pytest.mark.parametrize("opts, msg", [
    ({"inducing": 0}, "inducing"), ({"inducing": 2.5}, "inducing"), ({"batch_size": -1}, "batch_size"),
    ({"steps": True}, "steps"), ({"device": "tpu"}, "device"), ({"kind": "rbf"}, "kernel"),
    ({"learn_hyperparameters": "maybe"}, "learn_hyperparameters"), ({"seed": -1}, "seed"),
    ({"bogus": 1}, "unknown option"),
])
def test_bad_options_are_one_line_errors(small, opts, msg):
    with pytest.raises(EvrouteError, match=msg) as err:
        _svgp(small, **opts)
    assert "\n" not in str(err.value)


def test_svgp_needs_a_network_prior(small):
    with pytest.raises(EvrouteError, match="NetworkPrior"):
        make_model("svgp", DensePrior(small["pm"], small["K"]), noise_var=small["nv"])


def test_cuda_without_a_gpu_is_an_error(small):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(EvrouteError, match="CUDA"):
        _svgp(small, device="cuda")


@pytest.mark.parametrize("policy", ["gp-ts", "gp-bucb"])
def test_simulate_writes_a_complete_run_directory(tmp_path, small, policy):
    cfg = SimulationConfig(model="svgp[inducing=40,batch_size=100,steps=2]", policy=policy, horizon=5, seed=1)
    res = simulate(cfg, tmp_path / "run", net=small["net"])
    for name in RUN_FILES:
        assert (tmp_path / "run" / name).is_file()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["model"] == "svgp" and summary["horizon"] == 5
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["agent"]["model"] == "svgp[inducing=40,batch_size=100,steps=2]"
    assert len(res.rounds) == 5 and np.all(np.isfinite(res.edges.post_std_final))
    assert np.all(res.edges.post_std_final > 0)


@pytest.mark.parametrize("kind", ["combined", "graph"])
def test_graph_kernel_rows_come_from_the_sparse_prior_on_large_networks(small, kind, monkeypatch):
    """Above SPARSE_FROM_EDGES the svgp kernel reads k_G by sparse solves (no E×E matrix is
    built) and predicts what it predicts from the dense matrix."""
    import evroute.priors.network_prior as network_prior_mod

    dense = _svgp(small, kind, inducing=40)
    monkeypatch.setattr(network_prior_mod, "SPARSE_FROM_EDGES", 50)
    monkeypatch.setattr(network_prior_mod, "GMRF_FROM_EDGES", 50)
    monkeypatch.setattr(network_prior_mod, "graph_kernel", lambda *a, **k: pytest.fail("dense k_G built"))
    sparse = _svgp(small, kind, inducing=40)
    for e, y in _rounds(small, n_rounds=4):
        dense.update(e, y)
        sparse.update(e, y)
    held = sparse._covar.k_graph._edges.cpu().numpy()
    assert held.size < small["net"].n_edges and set(held) >= set(sparse.inducing_edges)
    for a, b in zip(dense.mean_std(), sparse.mean_std(), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-7, atol=1e-9 * np.sqrt(small["pv"]))
