"""The bandit loop and its run directory (synthetic network, short horizons)."""

import json
import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evroute.bandit.agents import IndexAgent
from evroute.bandit.environments import StaticEnvironment
from evroute.bandit.policies import Policy
from evroute.errors import EvrouteError
from evroute.models import make_model
from evroute.priors.prior import DiagonalPrior
from evroute.runs.config import SimulationConfig, flat_config_json
from evroute.runs.directory import RUN_FILES, is_finished_run
from evroute.runs.problem import prepare_problem
from evroute.runs.simulation import run_bandit, simulate


class TruthPolicy(Policy):
    """Handed the true f: its rectified route is the clairvoyant route."""

    def __init__(self, truth):
        self.truth = truth

    def indices(self, model, t, rng):
        return self.truth.copy(), float("nan")


@pytest.fixture(scope="module")
def problem(synthetic):
    return prepare_problem(SimulationConfig(seed=3), net=synthetic)


def test_prior_and_noise_scales(problem):
    sd = np.std(problem.prior_mean)
    assert problem.sigma_det == pytest.approx(sd)
    assert problem.prior_var == pytest.approx((0.25 * sd) ** 2)
    assert problem.noise_var == pytest.approx((0.1 * sd) ** 2)
    # the truth is a draw around E_det with variance about sigma0^2, never below the floor
    resid = problem.truth - problem.prior_mean
    assert 0.3 < np.std(resid) / (0.25 * sd) < 2.0
    from evroute.physics.energy import energy_floor_wh

    floor, _ = energy_floor_wh(problem.net.edges.length_m.to_numpy(), problem.net.edges.grade.to_numpy())
    assert np.all(problem.truth >= floor) and problem.ground_truth.conserves


def truth_agent(p, weights="rectified"):
    """An agent handed the true f: its route under the weight rule is the clairvoyant route."""
    from evroute.physics.energy import energy_floor_wh

    model = make_model("bi", DiagonalPrior(p.prior_mean, p.prior_var), noise_var=p.noise_var)
    floor, potential = energy_floor_wh(p.net.edges.length_m.to_numpy(), p.net.edges.grade.to_numpy(), p.vehicle)
    return IndexAgent(TruthPolicy(p.truth), model, p.oracle, p.route.start, p.route.end, p.prior_mean,
                      weights=weights, floor=floor, potential=potential)


@pytest.mark.parametrize("truth,weights", [("gp", "rectified"), ("gp", "potential"), ("lognormal", "potential")])
def test_zero_regret_for_a_policy_handed_f(synthetic, truth, weights):
    """Handed f, an agent has no regret: on the paper's truth against the route its own weight rule
    picks (the paper's regret), on a truth that conserves against the exact optimum, which the
    potential rule finds handed the truth (the rectified rule does not: regret > 0)."""
    cfg = SimulationConfig(seed=3, horizon=5, policy="bi-ts", weights=weights, truth=truth)
    problem = prepare_problem(cfg, net=synthetic)
    res = run_bandit(cfg, problem, agent=truth_agent(problem, weights))
    assert np.all(res.rounds.regret_wh == 0.0)
    assert res.rounds.expected_energy_wh.iloc[0] == pytest.approx(res.summary["optimal_energy_wh"])
    assert res.summary["regret_reference"] == ("exact optimum" if truth == "lognormal" else "paper's rectified route")
    if truth == "lognormal":
        rect = run_bandit(cfg, problem, agent=truth_agent(problem, "rectified"))
        assert rect.rounds.regret_wh.min() > 0 and res.summary["within_1pct_from_round"] == 1


def test_same_seed_gives_identical_tables(tmp_path, synthetic):
    cfg = SimulationConfig(horizon=25, seed=1, policy="gp-ts")
    simulate(cfg, tmp_path / "a", net=synthetic)
    simulate(cfg, tmp_path / "b", net=synthetic)
    for name in ("observations.parquet", "edges.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    ra = pd.read_parquet(tmp_path / "a" / "rounds.parquet").drop(columns="seconds")
    rb = pd.read_parquet(tmp_path / "b" / "rounds.parquet").drop(columns="seconds")
    pd.testing.assert_frame_equal(ra, rb)
    other = simulate(SimulationConfig(horizon=25, seed=2), net=synthetic)
    assert not np.array_equal(other.edges.energy_true_wh, pd.read_parquet(tmp_path / "a" / "edges.parquet").energy_true_wh)


@pytest.mark.parametrize("policy", ["gp-ucb", "gp-bucb", "gp-ts", "gp-greedy", "bi-ucb", "bi-bucb", "bi-ts", "bi-greedy"])
def test_run_directory_contents(tmp_path, synthetic, policy):
    out = tmp_path / "run"
    res = simulate(SimulationConfig(horizon=12, seed=0, policy=policy), out, net=synthetic)
    assert sorted(p.name for p in out.iterdir()) == sorted(RUN_FILES)
    rounds = pd.read_parquet(out / "rounds.parquet")
    assert list(rounds.columns) == ["t", "path", "n_edges", "expected_energy_wh", "observed_energy_wh",
                                    "optimal_energy_wh", "regret_wh", "cumulative_regret_wh", "beta", "seconds",
                                    "fastest_energy_wh", "shortest_energy_wh"]
    obs = pd.read_parquet(out / "observations.parquet")
    assert list(obs.columns) == ["t", "edge", "observed_wh", "expected_wh", "prior_mean_wh",
                                 "post_mean_before", "post_std_before", "index_before"]
    edges = pd.read_parquet(out / "edges.parquet")
    assert {"edge", "u", "v", "osm_way", "length_m", "speed_mps", "grade", "energy_det_wh", "energy_true_wh",
            "visits", "post_mean_final", "post_std_final"} <= set(edges.columns)
    summary = json.loads((out / "summary.json").read_text())
    for key in ("final_cumulative_regret_wh", "mean_seconds_per_round", "horizon", "policy", "model", "network",
                "route", "seed", "noise_std_wh", "prior_std_wh", "optimal_energy_wh", "exact_optimal_energy_wh"):
        assert key in summary
    config = json.loads((out / "config.json").read_text())
    assert config["evroute_version"] and config["agent"]["policy"] == policy
    # consistency across files
    assert rounds.n_edges.sum() == len(obs) == edges.visits.sum()
    assert np.allclose(rounds.cumulative_regret_wh, np.cumsum(rounds.regret_wh))
    for t, path in zip(rounds.t, rounds.path, strict=True):
        assert list(obs[obs.t == t].edge) == list(path)
    assert np.allclose(rounds.expected_energy_wh,
                       [edges.energy_true_wh.to_numpy()[p].sum() for p in rounds.path])
    assert summary["final_cumulative_regret_wh"] == pytest.approx(rounds.cumulative_regret_wh.iloc[-1])
    assert summary["model"] == ("bi" if policy.startswith("bi") else "exact")
    if policy.endswith("ucb"):
        assert np.all(np.isfinite(rounds.beta)) and np.all(rounds.beta > 0)
    assert res.summary == summary


def test_posterior_converges_on_the_driven_route(problem):
    cfg = SimulationConfig(seed=3, horizon=80, policy="gp-ts")
    res = run_bandit(cfg, problem)
    last = res.rounds.path.iloc[-1]
    e = res.edges
    prior_err = np.abs(e.energy_det_wh.to_numpy()[last] - e.energy_true_wh.to_numpy()[last]).mean()
    post_err = np.abs(e.post_mean_final.to_numpy()[last] - e.energy_true_wh.to_numpy()[last]).mean()
    assert post_err < 0.5 * prior_err
    assert np.all(e.post_std_final.to_numpy()[last] < np.sqrt(problem.prior_var))


def test_no_chosen_route_beats_the_exact_optimum(tmp_path, synthetic):
    """The paper's truth (it creates energy): the MILP's vertex-simple optimum beside the paper's
    regret; no vertex-simple route driven beats it."""
    res = simulate(SimulationConfig(seed=4, horizon=30, policy="gp-ts", exact_optimum=True, truth="gp",
                                    exact_optimum_time_limit=120), net=synthetic)
    opt = res.summary["exact_optimum"]
    assert opt["status"] == "optimal" and opt["method"] in ("bellman-ford", "milp")
    best = res.summary["exact_optimal_energy_wh"]
    assert res.summary["rectification_gap_wh"] == pytest.approx(res.summary["optimal_energy_wh"] - best)
    assert res.summary["rectification_gap_wh"] >= -1e-6
    u, v = res.edges.u.to_numpy(), res.edges.v.to_numpy()
    checked = 0
    for path, energy in zip(res.rounds.path, res.rounds.expected_energy_wh, strict=True):
        nodes = [u[path[0]]] + [v[e] for e in path]
        if len(set(nodes)) == len(nodes):  # vertex-simple routes are the exact optimum's domain
            assert energy >= best - 1e-6
            checked += 1
    assert checked > 0


@pytest.mark.parametrize("kw,msg", [
    ({"horizon": 0}, "horizon"), ({"horizon": -5}, "horizon"), ({"policy": "gp-magic"}, "policy"),
    ({"model": "oracle"}, "model"), ({"kernel": "rbf"}, "kernel"), ({"lengthscale": float("nan")}, "lengthscale"),
    ({"lengthscale": -1.0}, "lengthscale"), ({"policy": "gp-bucb[omega=nan]"}, "omega"),
    ({"policy": "gp-bucb[xi=-0.5]"}, "xi"),
])
def test_bad_config(kw, msg, tmp_path):
    with pytest.raises(EvrouteError, match=msg):
        simulate(SimulationConfig(**kw), tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_out_dir_rules(tmp_path, synthetic):
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(EvrouteError, match="not empty"):
        simulate(SimulationConfig(horizon=3), out, net=synthetic)
    assert not is_finished_run(out)
    # --overwrite replaces evroute run directories only: the user's file stays
    with pytest.raises(EvrouteError, match="not an evroute run directory.*nothing was deleted"):
        simulate(SimulationConfig(horizon=3), out, overwrite=True, net=synthetic)
    assert (out / "notes.txt").read_text() == "mine"
    (out / "notes.txt").unlink()
    simulate(SimulationConfig(horizon=3), out, net=synthetic)
    assert is_finished_run(out)
    simulate(SimulationConfig(horizon=4, seed=1), out, overwrite=True, net=synthetic)
    assert json.loads((out / "config.json").read_text())["control"]["horizon"] == 4
    # a run directory the user added a file to is not replaced either
    (out / "thesis.txt").write_text("mine")
    with pytest.raises(EvrouteError, match="files evroute did not write.*thesis.txt"):
        simulate(SimulationConfig(horizon=3), out, overwrite=True, net=synthetic)
    assert (out / "thesis.txt").read_text() == "mine" and is_finished_run(out)
    assert [p for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_out_dir_current_directory_refused(tmp_path, synthetic, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "thesis.txt").write_text("mine")
    for out, overwrite in ((Path("."), True), (Path("."), False), (Path(".."), True), (tmp_path, True)):
        with pytest.raises(EvrouteError, match="current directory"):
            simulate(SimulationConfig(horizon=3), out, overwrite=overwrite, net=synthetic)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thesis.txt"]


def test_stale_partial_folders_removed(tmp_path, synthetic):
    import subprocess
    import sys

    out = tmp_path / "run"
    # what killed runs leave: a folder of a dead process, one of an old version (no pid)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    stale = [tmp_path / f".run.partial-{dead.stdout.strip()}-abcd1234", tmp_path / ".run.partial-k2j4h5g6",
             tmp_path / f".run.old-{dead.stdout.strip()}"]
    alive = tmp_path / f".run.partial-{os.getppid()}-zzzz9999"  # a live process's run: kept
    other = tmp_path / ".other.partial-k2j4h5g6"  # another --out's: not ours to judge
    mine = tmp_path / ".run.partial-notes"  # the user's, not our pattern
    for p in (*stale, alive, other, mine):
        p.mkdir()
    simulate(SimulationConfig(horizon=3), out, net=synthetic)
    assert is_finished_run(out)
    assert not any(p.exists() for p in stale)
    assert alive.is_dir() and other.is_dir() and mine.is_dir()


def test_unwritable_out_dir(tmp_path, synthetic):
    if os.geteuid() == 0:  # root writes anywhere a normal file system allows
        target = tmp_path.__class__("/proc/evroute-no-such-dir/run")
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
        target = ro / "run"
    with pytest.raises(EvrouteError, match="cannot write"):
        simulate(SimulationConfig(horizon=3), target, net=synthetic)


def test_out_dir_under_a_file(tmp_path, synthetic):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(EvrouteError):
        simulate(SimulationConfig(horizon=3), f / "run", net=synthetic)


def test_unreachable_route(monkeypatch, tmp_path, synthetic):
    from evroute.roads.oracle import Oracle

    monkeypatch.setattr(Oracle, "reachable", lambda self, start: np.zeros(self.n_edges, dtype=bool))
    with pytest.raises(EvrouteError, match="cannot be reached"):
        simulate(SimulationConfig(horizon=3), tmp_path / "run", net=synthetic)
    assert not (tmp_path / "run").exists() and list(tmp_path.iterdir()) == []


def test_cli_simulate(tmp_path, capsys):
    from evroute.cli import main

    out = tmp_path / "cli-run"
    assert main(["simulate", "--horizon", "5", "--policy", "bi-ucb", "--out", str(out), "--csv"]) == 0
    assert (out / "rounds.csv").is_file() and is_finished_run(out)
    capsys.readouterr()
    assert main(["simulate", "--horizon", "5", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "--overwrite" in err
    assert main(["simulate", "--horizon", "0", "--out", str(tmp_path / "z")]) == 2


def test_run_files_get_the_umask_permissions(tmp_path, synthetic):
    """mkdtemp/mkstemp make 0700/0600; the finished run must be readable like any file."""
    from evroute.io import public_mode

    mask = os.umask(0o022)
    os.umask(mask)
    assert public_mode() == 0o666 & ~mask and public_mode(directory=True) == 0o777 & ~mask
    out = tmp_path / "run"
    simulate(SimulationConfig(horizon=2, seed=0, policy="bi-ts"), out, net=synthetic)
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~mask
    for f in out.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~mask, f.name


def _blas_threads() -> list[int]:
    from threadpoolctl import threadpool_info

    return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]


@pytest.mark.parametrize("threads", [1, 2, 0])
def test_simulate_runs_with_the_requested_blas_threads(monkeypatch, tmp_path, synthetic, threads):
    """One BLAS thread by default (the numbers then do not depend on the core count);
    0 leaves the libraries alone; the limit is lifted when the run ends."""
    from threadpoolctl import threadpool_limits

    import evroute.runs.simulation as sim

    seen = []
    real = sim.run_bandit

    def spy(cfg, problem, **kw):
        seen.append(_blas_threads())
        return real(cfg, problem, **kw)

    monkeypatch.setattr(sim, "run_bandit", spy)
    with threadpool_limits(limits=3, user_api="blas"):
        outer = _blas_threads()
        if not outer:
            pytest.skip("no BLAS library visible to threadpoolctl")
        if threads == 1:
            simulate(SimulationConfig(horizon=2), tmp_path / "run", net=synthetic)  # the default
        else:
            simulate(SimulationConfig(horizon=2), tmp_path / "run", net=synthetic, blas_threads=threads)
        assert seen[0] == ([threads] * len(outer) if threads else outer)
        assert _blas_threads() == outer


def test_bad_blas_threads(tmp_path, synthetic, capsys):
    from evroute.cli import main

    with pytest.raises(EvrouteError, match="blas_threads"):
        simulate(SimulationConfig(horizon=2), tmp_path / "x", net=synthetic, blas_threads=-1)
    assert not (tmp_path / "x").exists()
    assert main(["simulate", "--horizon", "2", "--blas-threads", "-1", "--out", str(tmp_path / "y")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --blas-threads") and err.count("\n") == 1 and not (tmp_path / "y").exists()


def test_truth_lengthscale_sets_the_sampling_kernel_only(synthetic):
    """f = E_det + L_ℓ z with the seed's z: ℓ = 1 is the paper's (and the default) truth,
    another ℓ the same draw through the Cholesky factor of the ℓ-kernel."""
    from evroute.priors.network_prior import network_kernel

    base = prepare_problem(SimulationConfig(seed=4, truth="gp"), net=synthetic)
    same = prepare_problem(SimulationConfig(seed=4, truth="gp", truth_lengthscale=1.0, lengthscale=2.0), net=synthetic)
    assert np.array_equal(base.truth, same.truth)  # the agent's lengthscale leaves f alone
    wide = prepare_problem(SimulationConfig(seed=4, truth="gp", truth_lengthscale=2.0), net=synthetic)
    K = network_kernel(synthetic, "combined", 2.0, kappa=1.0, nu=2.0, prior_var=wide.prior_var)
    L = np.linalg.cholesky(K + 1e-10 * np.mean(np.diag(K)) * np.eye(K.shape[0]))
    z = np.random.default_rng([4, 1]).standard_normal(synthetic.n_edges)
    ref = wide.prior_mean + L @ z
    assert np.max(np.abs(wide.truth - ref)) < 1e-4 * np.sqrt(wide.prior_var)
    assert np.max(np.abs(wide.truth - base.truth)) > 0.1 * np.sqrt(base.prior_var)


def test_bad_truth_lengthscale(tmp_path):
    with pytest.raises(EvrouteError, match="truth_lengthscale"):
        simulate(SimulationConfig(truth_lengthscale=0.0), tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_volatile_arms_hook_closes_edges(problem):
    """Environment.available: closed edges are never driven; no route is one clear error."""

    def env(available):
        class Closures(StaticEnvironment):
            def available(self, t):
                return available(t)

        return Closures(problem.truth, problem.noise_std, problem.oracle, problem.route.start,
                        problem.route.end, seed=3)

    optimal = env(lambda t: None).reference_route(1)
    closed = optimal[len(optimal) // 2]

    def every_other_round(t):
        mask = np.ones(problem.net.n_edges, dtype=bool)
        if t % 2 == 0:  # closed on even rounds
            mask[closed] = False
        return mask

    cfg = SimulationConfig(seed=3, horizon=6, policy="bi-ts")
    res = run_bandit(cfg, problem, agent=truth_agent(problem), env=env(every_other_round))
    for t, path in zip(res.rounds.t, res.rounds.path, strict=True):
        assert (closed in list(path)) == (t % 2 == 1)  # the clairvoyant route on odd rounds only

    def start_cut_off_from_round_3(t):
        mask = np.ones(problem.net.n_edges, dtype=bool)
        mask[problem.net.conn_dst[problem.net.conn_src == problem.route.start]] = t < 3
        return mask

    with pytest.raises(EvrouteError, match="^round 3: no route from edge"):
        run_bandit(cfg, problem, agent=truth_agent(problem), env=env(start_cut_off_from_round_3))


def test_too_long_horizon_is_refused_with_the_limit(tmp_path, capsys):
    from evroute.cli import main

    code = main(["simulate", "--horizon", "10000000000", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2 and len(lines) == 1 and "--horizon must be an integer in [1, 100,000,000]" in lines[0], err
    assert not (tmp_path / "r").exists() and list(tmp_path.iterdir()) == []


def test_logs_that_do_not_fit_are_refused(tmp_path, synthetic, monkeypatch):
    import shutil as sh
    from collections import namedtuple

    import evroute.bandit.loop as sim

    Usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr(sim.shutil, "disk_usage", lambda p: Usage(10**9, 10**9 - 10**5, 10**5))
    with pytest.raises(EvrouteError, match="would need about .* free: shorten the horizon"):
        simulate(SimulationConfig(horizon=5000, policy="bi-ts"), tmp_path / "r", net=synthetic)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(sim.shutil, "disk_usage", sh.disk_usage)
    monkeypatch.setattr(sim.os, "sysconf", lambda name: 100 if name == "SC_AVPHYS_PAGES" else 4096)
    with pytest.raises(EvrouteError, match="of memory .* write the run to a directory"):
        simulate(SimulationConfig(horizon=5000, policy="bi-ts"), net=synthetic)


def test_long_runs_are_logged_in_chunks(tmp_path, synthetic, monkeypatch):
    """Chunked logging (memory flat) writes exactly the tables of an in-memory run."""
    import pyarrow.parquet as pq

    import evroute.bandit.loop as sim

    cfg = SimulationConfig(horizon=30, policy="gp-ucb", seed=2)
    whole = simulate(cfg, net=synthetic)  # in memory
    monkeypatch.setattr(sim, "LOG_CHUNK_ROUNDS", 7)
    peak = []
    real_flush = sim.RoundLog.flush

    def flush(self):
        peak.append(len(self._rows["t"]))
        return real_flush(self)

    monkeypatch.setattr(sim.RoundLog, "flush", flush)
    out = tmp_path / "run"
    streamed = simulate(cfg, out, net=synthetic, csv=True)
    assert max(peak) <= 7  # never more than a chunk of rounds in memory
    assert pq.ParquetFile(out / "rounds.parquet").metadata.num_row_groups == 5  # ceil(30 / 7)
    for name in ("rounds", "observations"):
        a = getattr(whole, name).drop(columns=["seconds"], errors="ignore")
        b = pd.read_parquet(out / f"{name}.parquet").drop(columns=["seconds"], errors="ignore")
        pd.testing.assert_frame_equal(a, b)
        pd.testing.assert_frame_equal(getattr(streamed, name), pd.read_parquet(out / f"{name}.parquet"))
    csv = pd.read_csv(out / "rounds.csv")
    assert len(csv) == 30 and csv.path.iloc[0] == " ".join(map(str, whole.rounds.path.iloc[0]))
    assert len(pd.read_csv(out / "observations.csv")) == len(whole.observations)
    assert streamed.summary["final_cumulative_regret_wh"] == whole.summary["final_cumulative_regret_wh"]
    from evroute.runs.directory import verify_run

    assert verify_run(out) is None


def _networkx_route(net, weights, start, end, available=None):
    """An independent Dijkstra on the line graph (networkx): the edge ids from start to end."""
    import networkx as nx

    ok = np.ones(net.n_edges, bool) if available is None else np.asarray(available)
    g = nx.DiGraph()
    for a, b in zip(net.conn_src, net.conn_dst, strict=True):
        if ok[a] and ok[b]:
            g.add_edge(int(a), int(b), weight=float(weights[b]))
    return nx.dijkstra_path(g, start, end)


def test_energy_saved_against_the_fastest_and_shortest_routes(tmp_path, synthetic):
    """Issue 25, item 5: every run logs the energy of always driving the fastest and the shortest
    route under f, and what the agent saved against them (checked with networkx's Dijkstra)."""
    cfg = SimulationConfig(policy="gp-ts", horizon=12, seed=2)
    res = simulate(cfg, tmp_path / "r", net=synthetic)
    s, rounds = res.summary, pd.read_parquet(tmp_path / "r" / "rounds.parquet")
    problem = prepare_problem(cfg, net=synthetic)
    e = synthetic.edges
    f = problem.truth
    for name, w in (("fastest", e.length_m.to_numpy() / e.speed_mps.to_numpy()), ("shortest", e.length_m.to_numpy())):
        path = _networkx_route(synthetic, w, problem.route.start, problem.route.end)
        assert s[f"{name}_total_energy_wh"] == pytest.approx(cfg.horizon * f[path].sum(), rel=1e-12, abs=1e-9)
        np.testing.assert_allclose(rounds[f"{name}_energy_wh"], f[path].sum(), rtol=1e-12, atol=1e-9)
        assert s[f"saved_vs_{name}_wh"] == pytest.approx(s[f"{name}_total_energy_wh"] - s["total_energy_wh"])
    assert s["total_energy_wh"] == pytest.approx(rounds.expected_energy_wh.sum(), rel=1e-12)
    # the clairvoyant rectified route minus the regret is what the agent drove
    assert s["total_energy_wh"] == pytest.approx(rounds.optimal_energy_wh.sum() + s["final_cumulative_regret_wh"])


def test_baseline_routes_avoid_closed_roads(tmp_path):
    from evroute.roads.network import load_network

    net = load_network("synthetic", size=70)
    cfg = SimulationConfig(policy="bi-ts", horizon=6, closures="alternate")
    simulate(cfg, tmp_path / "r", net=net)
    rounds = pd.read_parquet(tmp_path / "r" / "rounds.parquet")
    problem = prepare_problem(cfg, net=net)
    from evroute.runs.problem import make_environment

    env = make_environment(cfg, problem)
    e = net.edges
    w = e.length_m.to_numpy() / e.speed_mps.to_numpy()
    for t in range(1, 7):
        mask = env.available(t)
        path = _networkx_route(net, w, problem.route.start, problem.route.end, mask)
        assert mask is None or mask[path].all()
        assert rounds.fastest_energy_wh.iat[t - 1] == pytest.approx(env.expected(t)[path].sum(), rel=1e-12, abs=1e-9)


def test_simulate_config_runs_a_run_directory_again(tmp_path, capsys):
    """`evroute simulate --config RUN/config.json` reproduces the run (the same tables, timing
    aside); a setting given as well replaces the file's."""
    import pandas as pd

    from evroute.cli import main

    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert main(["simulate", "--policy", "gp-ucb", "--seed", "3", "--horizon", "12", "--route", "B", "--out", str(a)]) == 0
    assert main(["simulate", "--config", str(a / "config.json"), "--out", str(b)]) == 0
    assert main(["simulate", "--config", str(a), "--seed", "4", "--out", str(c)]) == 0
    for table in ("rounds", "observations"):
        ta, tb = (pd.read_parquet(d / f"{table}.parquet").drop(columns=["seconds"], errors="ignore") for d in (a, b))
        pd.testing.assert_frame_equal(ta, tb)
    cfg = flat_config_json(json.loads((c / "config.json").read_text()))
    assert (cfg["seed"], cfg["policy"], cfg["route"], cfg["horizon"]) == (4, "gp-ucb", "B", 12)


def test_the_closing_lines_explain_the_trip(tmp_path, capsys):
    """The closing lines of `evroute simulate`: percentages where the baseline route consumes
    energy, and a plain line when the trip recovers energy under the truth."""
    from evroute.cli import main
    from evroute.reports.report import describe_run

    assert main(["simulate", "--horizon", "20", "--route", "B", "--out", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    s = json.loads((tmp_path / "b" / "summary.json").read_text())
    pct = 100 * s["saved_vs_fastest_wh"] / s["fastest_total_energy_wh"]
    assert s["fastest_total_energy_wh"] > 0 and f"({pct:.1f} %)" in out and "recovers" not in out
    assert s["trip_climb_m"] > 100  # route B climbs
    lines = describe_run({**s, "fastest_total_energy_wh": -100.0, "trip_climb_m": -46.0, "saved_vs_fastest_pct": None})
    assert any("descends 46 m" in line and "recovers" in line for line in lines)
    assert "no percentage" in " ".join(lines)


def _bellman_ford_optimum(out, start, end):
    """A run's optimum recomputed from its own files: networkx's Bellman–Ford on the line graph, an
    arc e → e′ weighing the true energy of e′ (edges.parquet) plus the turn's cost (turns.parquet
    where the truth has turns), the start edge its own."""
    import networkx as nx

    from evroute.roads.network import load_network

    f = pd.read_parquet(out / "edges.parquet").energy_true_wh.to_numpy()
    net = load_network("synthetic")
    cost = np.zeros(len(net.conn_src))
    if (out / "turns.parquet").exists():
        t = pd.read_parquet(out / "turns.parquet")
        arc = {(a, b): i for i, (a, b) in enumerate(zip(net.conn_src.tolist(), net.conn_dst.tolist(), strict=True))}
        for a, b, c in zip(t.from_edge, t.to_edge, t.cost_wh, strict=True):
            cost[arc[(int(a), int(b))]] = c
    g = nx.DiGraph()
    g.add_weighted_edges_from((int(a), int(b), float(f[b] + c))
                              for a, b, c in zip(net.conn_src, net.conn_dst, cost, strict=True))
    return float(f[start]) + nx.bellman_ford_path_length(g, start, end)


def test_the_main_jobs_regret_is_against_an_optimum_bellman_ford_confirms(tmp_path, capsys, dear_truth):
    """The main job as a user types it (the default truth) and a truth of edges plus turns: the
    run's optimum equals networkx's Bellman–Ford over the energies and turns it logged, no round's
    regret is negative, no warning of cycles that create energy, the closing lines say what the
    trip uses and what was saved, and the agents were not handed the truth's turns."""
    import warnings

    from evroute.cli import main

    for args, name in ((["simulate"], "main"), (["simulate", "--truth", "dear", "--horizon", "60"], "turns")):
        out = tmp_path / name
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert main([*args, "--out", str(out), "--no-progress"]) == 0
        text = capsys.readouterr()
        s = json.loads((out / "summary.json").read_text())
        rounds = pd.read_parquet(out / "rounds.parquet")
        assert s["regret_reference"] == "exact optimum" and (rounds.regret_wh >= 0).all()
        assert s["optimal_energy_wh"] == pytest.approx(_bellman_ford_optimum(out, s["start_edge"], s["end_edge"]),
                                                       abs=1e-6)
        assert "warning" not in text.err and "regret against the exact optimum" in text.out
        assert "saved" in text.out and " %)" in text.out and "oracle" not in text.out
        assert s.get("prior_turns", "physics") == "physics"
