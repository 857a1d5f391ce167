"""Grids of runs: policy specs, presets, resume after SIGKILL, summaries, executors, errors."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evroute.bandit.agents import resolve_policy
from evroute.cli import main
from evroute.errors import EvrouteError
from evroute.runs.config import SimulationConfig
from evroute.runs.directory import is_finished_run
from evroute.runs.executors import run_cell
from evroute.runs.experiment import clean_stale, run_grid
from evroute.runs.grid import PRESETS, Grid, make_grid, policy_tag
from evroute.runs.simulation import simulate
from evroute.runs.summaries import (
    TIMING_COLUMNS,
    collect_runs,
    read_run,
    standard_error,
    summarize,
    summary_markdown,
)


def cli(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def tables_equal(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.drop(columns=list(TIMING_COLUMNS)).reset_index(drop=True),
                                  b.drop(columns=list(TIMING_COLUMNS)).reset_index(drop=True))


def run_tables(run_dir: Path) -> dict:
    return {"rounds": pd.read_parquet(run_dir / "rounds.parquet").drop(columns="seconds"),
            "observations": pd.read_parquet(run_dir / "observations.parquet"),
            "edges": pd.read_parquet(run_dir / "edges.parquet")}


# --------------------------------------------------------------------------------------
# policy specs, presets, names
# --------------------------------------------------------------------------------------


def test_policy_specs():
    assert resolve_policy("gp-ts") == resolve_policy("GP-TS[joint=false]")
    s = resolve_policy("GP-BUCB[xi=0.5]")
    assert (s.name, s["omega"], s["xi"], s.label, policy_tag(s)) == ("gp-bucb", 1.0, 0.5, "gp-bucb[xi=0.5]", "-w1-x0.5")
    s = resolve_policy(" gp-ucb[beta_scale=0.5] ")
    assert (s["beta_scale"], s.label, policy_tag(s)) == (0.5, "gp-ucb[beta_scale=0.5]", "-bs0.5")
    assert resolve_policy("gp-ucb[bs=0.5]") == s  # an alias of the option
    assert resolve_policy("gp-bucb[omega=1,xi=1]").label == "gp-bucb"  # defaults collapse
    assert resolve_policy("gp-ts[joint=true]")["joint"] is True and policy_tag(resolve_policy("gp-ts[joint=true]")) == "-joint"
    s = resolve_policy("bi-bucb[omega=2,xi=0.5,beta_scale=0.3]")
    assert resolve_policy(s.label) == s and (s["omega"], s["xi"], s["beta_scale"]) == (2.0, 0.5, 0.3)


@pytest.mark.parametrize("text,msg", [
    ("gp-ts[xi=0.5]", "unknown option(s) for policy 'gp-ts': xi"),
    ("gp-ucb[omega=2]", "unknown option(s) for policy 'gp-ucb': omega"),
    ("gp-bucb[foo=1]", "unknown option(s) for policy 'gp-bucb': foo"),
    ("gp-bucb[xi=-1]", "xi"),
    ("gp-bucb[xi=abc]", "xi"),
    ("gp-bucb[xi]", "key=value"),
    ("gp-magic", "unknown policy"),
    ("gp-bucb[xi=0.5", "cannot parse"),
])
def test_bad_policy_specs(text, msg):
    with pytest.raises(EvrouteError, match=re.escape(msg)):
        resolve_policy(text)
    with pytest.raises(EvrouteError, match=re.escape(msg)):  # compare accepts exactly the same specs
        make_grid(network="synthetic", routes="A", policies=f"gp-ts,{text}", seeds=1)


def test_presets_and_overrides():
    g = make_grid(preset="paper-fig2")
    assert g.routes == ["luxembourg:A", "luxembourg:B", "monaco:A", "monaco:B"]
    assert [p.label for p in g.policies] == ["gp-ucb", "gp-bucb", "gp-ts", "bi-ucb", "bi-bucb", "bi-ts"]
    assert (g.seeds, g.horizon, g.lengthscales) == ([0, 1, 2, 3, 4], 500, [1.0])
    assert len(g.cells()) == 6 * 4 * 5
    g = make_grid(preset="paper-fig3")
    assert [p.label for p in g.policies] == ["gp-bucb", "gp-bucb[xi=0.5]", "gp-ucb", "gp-ucb[beta_scale=0.5]"]
    g = make_grid(preset="paper-lengthscale")
    assert g.lengthscales == list(PRESETS["paper-lengthscale"].lengthscales)
    assert min(g.lengthscales) == 0.1 and max(g.lengthscales) == 2.0  # 003 Sec. 4.2
    assert [p.label for p in g.policies] == ["gp-bucb", "gp-ts", "bi-bucb", "bi-ts"]
    # options given with a preset override it
    g = make_grid(preset="paper-fig2", network="synthetic", seeds=2, horizon=7, policies="gp-ts")
    assert g.routes == ["synthetic:A", "synthetic:B"] and g.seeds == [0, 1] and g.horizon == 7
    assert [p.label for p in g.policies] == ["gp-ts"]
    g = make_grid(preset="paper-lengthscale", routes="monaco:B", lengthscales="0.5,2")
    assert g.routes == ["monaco:B"] and g.lengthscales == [0.5, 2.0]


def test_routes_and_names():
    g = make_grid(routes="monaco:A,luxembourg:B", policies="gp-bucb[xi=0.5],gp-ucb[beta_scale=0.5],bi-ts",
                  seeds=1, lengthscales="1,0.25")
    assert g.networks == ["monaco", "luxembourg"]
    names = [g.cell_name(c) for c in g.cells()]
    assert "monaco-A-gp-bucb-w1-x0.5-s0" in names
    assert "luxembourg-B-gp-ucb-ls0.25-bs0.5-s0" in names
    assert "monaco-A-bi-ts-ls0.25-s0" in names
    assert len(set(names)) == len(names) == 2 * 3 * 2
    assert make_grid(network="synthetic", routes="A,B").routes == ["synthetic:A", "synthetic:B"]
    cfg = g.config(g.cells()[0])
    assert (cfg.network, cfg.route, cfg.policy.label, cfg.policy["xi"]) == ("monaco", "monaco:A", "gp-bucb[xi=0.5]", 0.5)


# --------------------------------------------------------------------------------------
# summary statistics on made-up runs
# --------------------------------------------------------------------------------------


def fake_run(runs: Path, name: str, policy: str, route: str, seed: int, regret: float, seconds: float,
             lengthscale: float = 1.0, xi: float = 1.0) -> None:
    d = runs / name
    d.mkdir(parents=True)
    cfg = {"network": route.split(":")[0], "route": route, "policy": policy, "model": "exact", "horizon": 50,
           "seed": seed, "lengthscale": lengthscale, "omega": 1.0, "xi": xi, "beta_scale": 1.0,
           "joint_samples": False, "resolved": {"backend": "bi" if policy.startswith("bi") else "exact"}}
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "summary.json").write_text(json.dumps({"final_cumulative_regret_wh": regret, "mean_seconds_per_round": seconds,
                                                "horizon": 50, "seed": seed, "route": route, "policy": policy,
                                                "optimal_energy_wh": 0.0, "optimal_path": [0, 1], "start_edge": 0,
                                                "end_edge": 1}))


def test_summary_statistics_by_hand(tmp_path):
    runs = tmp_path / "runs"
    known = {("monaco:A", "gp-ts"): [100.0, 130.0, 160.0, 90.0],
             ("monaco:A", "bi-ts"): [400.0, 380.0],
             ("monaco:B", "gp-ts"): [55.5]}
    for (route, pol), values in known.items():
        for s, v in enumerate(values):
            fake_run(runs, f"{route.replace(':', '-')}-{pol}-s{s}", pol, route, s, v, seconds=0.01 * (s + 1))
    fake_run(runs, "monaco-A-gp-bucb-w1-x0.5-s0", "gp-bucb", "monaco:A", 0, 10.0, 0.5, xi=0.5)
    fake_run(runs, "monaco-A-gp-bucb-w1-x0.5-s1", "gp-bucb", "monaco:A", 1, 30.0, 0.5, xi=0.5)
    (runs / "unfinished").mkdir()
    (runs / "unfinished" / "config.json").write_text("{}")

    table = summarize(collect_runs(tmp_path))
    assert len(table) == 4
    row = table[(table.route == "monaco:A") & (table.policy == "gp-ts")].iloc[0]
    # hand computation: mean 120, sample sd sqrt(((-20)^2 + 10^2 + 40^2 + (-30)^2) / 3) = sqrt(1000)
    assert row.n_seeds == 4
    assert row.final_regret_mean_wh == pytest.approx(120.0)
    assert row.final_regret_se_wh == pytest.approx(math.sqrt(1000.0) / 2.0)
    assert row.seconds_per_round_mean == pytest.approx(0.025)
    row = table[(table.policy == "bi-ts")].iloc[0]
    assert (row.n_seeds, row.final_regret_mean_wh) == (2, pytest.approx(390.0))
    assert row.final_regret_se_wh == pytest.approx(math.sqrt(200.0) / math.sqrt(2))
    assert row.model == "bi"
    row = table[table.policy == "gp-bucb[xi=0.5]"].iloc[0]
    assert (row.final_regret_mean_wh, row.final_regret_se_wh) == (pytest.approx(20.0), pytest.approx(10.0))
    row = table[table.route == "monaco:B"].iloc[0]
    assert row.n_seeds == 1 and row.final_regret_mean_wh == 55.5 and math.isnan(row.final_regret_se_wh)
    assert standard_error([1.0, 2.0, 3.0]) == pytest.approx(np.std([1, 2, 3], ddof=1) / math.sqrt(3))
    md = summary_markdown(table)
    assert "120.0 ± 15.8" in md and "| monaco:B | gp-ts | 1 | 55.5 |" in md


# --------------------------------------------------------------------------------------
# running grids
# --------------------------------------------------------------------------------------

TINY = ["--routes", "synthetic:A", "--policies", "gp-ts,gp-bucb[xi=0.5],bi-ts,bi-ucb",
        "--seeds", "2", "--horizon", "10"]


def tiny_grid(**kw) -> Grid:
    return make_grid(network="synthetic", routes="A", policies="gp-ts,gp-bucb[xi=0.5],bi-ts,bi-ucb",
                     seeds=2, horizon=10, **kw)


def test_run_cell_equals_simulate(tmp_path, synthetic):
    """The in-process caches (network, problem, kernel) do not change a run."""
    cfg = SimulationConfig(network="synthetic", route="synthetic:B", policy="gp-bucb", horizon=12, seed=1,
                           lengthscale=0.5)
    simulate(cfg, tmp_path / "a", net=synthetic)
    run_cell(cfg, tmp_path / "b")
    run_cell(cfg, tmp_path / "c")  # cached problem and kernel, unfinished dir replaced
    for other in ("b", "c"):
        ta, tb = run_tables(tmp_path / "a"), run_tables(tmp_path / other)
        for k in ta:
            pd.testing.assert_frame_equal(ta[k], tb[k])


def _finished(runs: Path) -> dict:
    """The finished runs in place (a worker's ``.NAME.partial-*`` directory holds its
    summary.json a moment before it is renamed into place: not a finished run yet)."""
    out = {}
    for d in runs.iterdir():
        if not d.name.startswith(".") and is_finished_run(d):
            st = (d / "summary.json").stat()
            out[d.name] = (st.st_ino, st.st_mtime_ns)
    return out


def test_resume_after_sigkill(tmp_path):
    out = tmp_path / "grid"
    runs = out / "runs"
    args = [sys.executable, "-m", "evroute", "compare", *TINY, "--jobs", "2", "--no-progress", "--out", str(out)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    try:
        while time.time() < deadline and proc.poll() is None:
            if runs.is_dir() and _finished(runs):
                break
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)  # the driver only: its pool workers must die with it
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    time.sleep(0.5)
    before = _finished(runs)
    n_total = 8
    assert 1 <= len(before) < n_total, "the kill came too late to leave unfinished runs"
    time.sleep(1.0)
    assert _finished(runs) == before, "a worker outlived the killed driver"
    assert not (out / "summary.csv").exists()
    # what a kill can leave behind, made explicit: a temp dir and an unfinished dir
    pending = sorted(tiny_grid().cell_name(c) for c in tiny_grid().cells() if tiny_grid().cell_name(c) not in before)
    stale = runs / f".{pending[0]}.partial-zz"
    stale.mkdir()
    (stale / "config.json").write_text("{half")
    (runs / pending[-1]).mkdir(exist_ok=True)  # an evroute run whose tables are damaged
    (runs / pending[-1] / "config.json").write_text((runs / next(iter(before)) / "config.json").read_text())
    (runs / pending[-1] / "rounds.parquet").write_bytes(b"garbage")

    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    k = len(before)
    assert f"{n_total} runs: {k} already finished, {n_total - k} to compute" in done.stderr
    after = _finished(runs)
    assert set(after) == {tiny_grid().cell_name(c) for c in tiny_grid().cells()}
    assert {n: after[n] for n in before} == before  # finished runs untouched
    assert sum(after[n] != before.get(n) for n in after) == n_total - k  # exactly the others recomputed
    assert not [p.name for p in runs.iterdir() if p.name.startswith(".")]
    assert f"({k} kept, {n_total - k} computed)" in done.stdout

    # the same grid in one go (in-process, 1 job): identical tables
    one = run_grid(tiny_grid(), tmp_path / "one", jobs=1, progress=False, log=lambda m: None)
    tables_equal(pd.read_csv(out / "summary.csv"), pd.read_csv(tmp_path / "one" / "summary.csv"))
    assert (out / "summary.md").read_text().count("\n") == (tmp_path / "one" / "summary.md").read_text().count("\n")
    for name in after:
        ta, tb = run_tables(runs / name), run_tables(tmp_path / "one" / "runs" / name)
        for key in ta:
            pd.testing.assert_frame_equal(ta[key], tb[key])
    assert one.n_computed == n_total
    grid = json.loads((out / "grid.json").read_text())
    assert len(grid["cells"]) == n_total and grid["horizon"] == 10

    # a third run recomputes nothing
    again = run_grid(tiny_grid(), out, jobs=2, progress=False, log=lambda m: None)
    assert (again.n_kept, again.n_computed) == (n_total, 0)
    assert _finished(runs) == after


def test_settings_mismatch_and_overwrite(tmp_path):
    grid = make_grid(network="synthetic", routes="B", policies="bi-ts", seeds=1, horizon=5)
    run_grid(grid, tmp_path, jobs=1, progress=False, log=lambda m: None)
    other = make_grid(network="synthetic", routes="B", policies="bi-ts", seeds=2, horizon=6)
    with pytest.raises(EvrouteError, match="other settings.*horizon 5"):
        run_grid(other, tmp_path, jobs=1, progress=False, log=lambda m: None)
    res = run_grid(other, tmp_path, jobs=1, progress=False, overwrite=True, log=lambda m: None)
    assert (res.n_kept, res.n_computed) == (0, 2)
    assert read_run(tmp_path / "runs" / "synthetic-B-bi-ts-s0")["horizon"] == 6


def test_lock_and_stale_cleanup(tmp_path):
    from evroute.runs.experiment import _DirLock

    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / ".x-s0.partial-abc").mkdir()
    (tmp_path / "runs" / ".x-s0.old-12").mkdir()
    (tmp_path / "runs" / "keep").mkdir()
    assert len(clean_stale(tmp_path / "runs")) == 2
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["keep"]
    (tmp_path / "runs" / "keep").rmdir()
    with _DirLock(tmp_path):
        with pytest.raises(EvrouteError, match="another evroute compare"):
            run_grid(tiny_grid(), tmp_path, jobs=1, progress=False, log=lambda m: None)


@pytest.mark.needs("ray")
def test_local_and_ray_executors_identical(tmp_path):
    ray = pytest.importorskip("ray")
    grid = make_grid(network="synthetic", routes="A,B", policies="gp-ts,gp-ucb,bi-bucb", seeds=2, horizon=8)
    local = run_grid(grid, tmp_path / "local", executor="local", jobs=2, progress=False, log=lambda m: None)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = run_grid(grid, tmp_path / "ray", executor="ray", progress=False, log=lambda m: None)
    finally:
        ray.shutdown()
    assert local.n_computed == remote.n_computed == 12
    tables_equal(local.summary, remote.summary)
    tables_equal(pd.read_csv(tmp_path / "local" / "summary.csv"), pd.read_csv(tmp_path / "ray" / "summary.csv"))
    for c in grid.cells():
        name = grid.cell_name(c)
        pd.testing.assert_frame_equal(run_tables(tmp_path / "local" / "runs" / name)["rounds"],
                                      run_tables(tmp_path / "ray" / "runs" / name)["rounds"])


def test_ray_missing_gives_install_hint(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray → ImportError
    code, _, err = cli(capsys, "compare", "--executor", "ray", "--out", str(tmp_path / "x"), "--seeds", "1")
    assert code == 2 and 'pip install "evroute[ray]"' in err and len(err.strip().splitlines()) == 1


def test_cli_compare_tiny(capsys, tmp_path):
    code, out, err = cli(capsys, "compare", "--routes", "synthetic:B", "--policies", "bi-ts,bi-bucb[xi=0.5]",
                         "--seeds", "2", "--horizon", "5", "--jobs", "1", "--no-progress", "--out", str(tmp_path))
    assert code == 0, err
    assert "bi-bucb[xi=0.5]" in out and "4 runs (0 kept, 4 computed)" in out
    table = pd.read_csv(tmp_path / "summary.csv")
    assert list(table.policy) == ["bi-ts", "bi-bucb[xi=0.5]"] and list(table.n_seeds) == [2, 2]
    assert (tmp_path / "summary.md").read_text().startswith("## evroute compare")
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [
        "synthetic-B-bi-bucb-w1-x0.5-s0", "synthetic-B-bi-bucb-w1-x0.5-s1", "synthetic-B-bi-ts-s0", "synthetic-B-bi-ts-s1"]


@pytest.mark.parametrize("args,msg", [
    (["--preset", "paper-fig9"], "no such configuration: paper-fig9"),
    (["--policies", "gp-ts,gp-wizard"], "unknown policy"),
    (["--policies", "gp-bucb[zeta=1]"], "unknown option(s) for policy 'gp-bucb': zeta"),
    (["--routes", "Z"], "unknown route synthetic:Z"),
    (["--routes", "atlantis:A"], "unknown network"),
    (["--seeds", "0"], "--seeds (the number of seeds) must be an integer in [1, 10,000]"),
    (["--jobs", "0"], "--jobs must be an integer in [1, 1,024]"),
    (["--horizon", "0"], "--horizon must be an integer in [1, 100,000,000]"),
    (["--sweep", "lengthscale=0.5,-1"], "positive"),
    (["--executor", "spark"], "unknown executor"),
    (["--model", "magic"], "unknown model"),
    (["--executor", "local[address=auto]"], "--executor 'local[address=auto]': local, ray or ray[address=HOST:PORT]"),
    (["--dem", "/nonexistent.tif"], "file not found"),
    (["--truth", "gp[lengthscale=wide]"], "--truth lengthscale must be 'same' or a positive number"),
    (["--truth", "gp[lengthscale=-1]"], "--truth lengthscale must be 'same' or a positive number"),
])
def test_compare_bad_input_one_line_exit_2(capsys, tmp_path, args, msg):
    code, _, err = cli(capsys, "compare", "--out", str(tmp_path / "out"), "--policies", "bi-ts", *args)
    assert code == 2
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and msg in lines[0], err
    assert not (tmp_path / "out" / "runs").exists() or not any((tmp_path / "out" / "runs").iterdir())


def test_failed_run_is_reported_and_others_kept(tmp_path, monkeypatch):
    import evroute.runs.executors as ex

    real = ex.run_cell

    def flaky(cfg, out):
        if cfg.seed == 1 and cfg.policy.name == "bi-ts":
            raise RuntimeError("boom")
        return real(cfg, out)

    monkeypatch.setattr(ex, "run_cell", flaky)
    grid = make_grid(network="synthetic", routes="A", policies="bi-ts,bi-ucb", seeds=2, horizon=4)
    with pytest.raises(EvrouteError, match=r"1 of 4 runs failed \(first: synthetic-A-bi-ts-s1: RuntimeError: boom\)"):
        run_grid(grid, tmp_path, jobs=1, progress=False, log=lambda m: None)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [
        "synthetic-A-bi-ts-s0", "synthetic-A-bi-ucb-s0", "synthetic-A-bi-ucb-s1"]
    assert not (tmp_path / "summary.csv").exists()
    monkeypatch.setattr(ex, "run_cell", real)
    res = run_grid(grid, tmp_path, jobs=1, progress=False, log=lambda m: None)
    assert (res.n_kept, res.n_computed) == (3, 1) and (tmp_path / "summary.csv").exists()


# --------------------------------------------------------------------------------------
# the truth's lengthscale
# --------------------------------------------------------------------------------------


def test_truth_lengthscale_same_changes_the_environment_with_the_sweep(tmp_path):
    grid = make_grid(network="synthetic", routes="B", policies="bi-ts", seeds=2, horizon=6,
                     lengthscales="0.5,1,2", truth_lengthscale="same")
    cells = grid.cells()
    assert [grid.config(c).truth_lengthscale for c in cells] == [0.5, 0.5, 1.0, 1.0, 2.0, 2.0]
    assert [grid.cell_name(c) for c in cells[::2]] == [
        "synthetic-B-bi-ts-ls0.5-tl0.5-s0", "synthetic-B-bi-ts-s0", "synthetic-B-bi-ts-ls2-tl2-s0"]
    from evroute.runs.experiment import _warm_tasks

    warm = _warm_tasks(grid, cells)  # one truth to prepare per (scenario, seed): per (seed, ℓ_truth) here
    assert sorted((t["config"]["control"]["seed"], t["config"]["scenario"]["truth_lengthscale"]) for t in warm) == [
        (0, 0.5), (0, 1.0), (0, 2.0), (1, 0.5), (1, 1.0), (1, 2.0)]
    res = run_grid(grid, tmp_path, jobs=1, progress=False, log=lambda m: None)
    table = res.summary
    assert list(table.truth_lengthscale) == [0.5, 1.0, 2.0]
    # BI has no kernel: its regret moves with ℓ only because the environment does
    assert table.final_regret_mean_wh.nunique() == 3
    assert "ℓ_truth = ℓ" in (tmp_path / "summary.md").read_text()
    # grid.json round trip, and a resume keeps everything
    again = run_grid(Grid.from_dict(json.loads((tmp_path / "grid.json").read_text())), tmp_path,
                     jobs=1, progress=False, log=lambda m: None)
    assert (again.n_kept, again.n_computed) == (6, 0)
    # the default (truth ℓ = 1 for every cell): the prior-only sweep, BI rows all equal
    prior_only = make_grid(network="synthetic", routes="B", policies="bi-ts", seeds=2, horizon=6,
                           lengthscales="0.5,2")
    res = run_grid(prior_only, tmp_path / "prior", jobs=1, progress=False, log=lambda m: None)
    assert list(res.summary.truth_lengthscale) == [1.0, 1.0]
    assert res.summary.final_regret_mean_wh.nunique() == 1


def test_runs_from_before_the_truth_option_still_match(tmp_path):
    """A config.json without truth_lengthscale was sampled with ℓ = 1: resume keeps it."""
    grid = make_grid(network="synthetic", routes="B", policies="bi-ts", seeds=1, horizon=4)
    run_grid(grid, tmp_path, jobs=1, progress=False, log=lambda m: None)
    cfg_path = tmp_path / "runs" / "synthetic-B-bi-ts-s0" / "config.json"
    saved = json.loads(cfg_path.read_text())
    del saved["scenario"]["truth_lengthscale"]
    cfg_path.write_text(json.dumps(saved))
    res = run_grid(grid, tmp_path, jobs=1, progress=False, log=lambda m: None)
    assert (res.n_kept, res.n_computed) == (1, 0)
    assert read_run(cfg_path.parent)["truth_lengthscale"] == 1.0
    other = make_grid(network="synthetic", routes="B", policies="bi-ts", seeds=1, horizon=4, truth_lengthscale="2")
    assert grid.cell_name(grid.cells()[0]) != other.cell_name(other.cells()[0])


def test_compare_refuses_foreign_out_dirs(capsys, tmp_path, synthetic):
    args = ["compare", "--routes", "synthetic:B", "--policies", "bi-ts", "--seeds", "1", "--horizon", "3",
            "--jobs", "1", "--no-progress", "--out"]
    # a simulate run directory
    run = tmp_path / "run"
    simulate(SimulationConfig(horizon=3), run, net=synthetic)
    before = sorted(p.name for p in run.iterdir())
    code, _, err = cli(capsys, *args, str(run))
    assert code == 2 and "is a simulate run directory" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in run.iterdir()) == before
    # a user's non-empty folder (even one with a runs/ folder of their own)
    mine = tmp_path / "mydocs"
    (mine / "runs").mkdir(parents=True)
    (mine / "thesis.txt").write_text("mine")
    code, _, err = cli(capsys, *args, str(mine))
    assert code == 2 and "not an evroute compare directory" in err
    (mine / "thesis.txt").unlink()
    (mine / "runs" / "data.csv").write_text("1,2")
    code, _, err = cli(capsys, *args, str(mine))
    assert code == 2 and "not an evroute compare directory" in err
    assert sorted(p.name for p in mine.rglob("*")) == ["data.csv", "runs"]
    # a grid.json that is not evroute's
    other = tmp_path / "other"
    other.mkdir()
    (other / "grid.json").write_text('{"rows": 3}')
    code, _, err = cli(capsys, *args, str(other))
    assert code == 2 and "not a valid grid description" in err
    # an empty folder and an evroute compare directory are fine (the latter resumes)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli(capsys, *args, str(empty))[0] == 0
    code, out, _ = cli(capsys, *args, str(empty))
    assert code == 0 and "(1 kept, 0 computed)" in out


@pytest.mark.parametrize("jobs", ["2", "1"])
def test_ctrl_c_stops_compare_promptly_and_resumes(tmp_path, jobs):
    """A real SIGINT: exit 130 within seconds, one line, workers stopped, resumable."""
    out = tmp_path / "grid"
    runs = out / "runs"
    grid_args = ["--routes", "synthetic:A", "--policies", "gp-ucb,bi-ts", "--seeds", "3",
                 "--horizon", "2000"]
    args = [sys.executable, "-m", "evroute", "compare", *grid_args, "--jobs", jobs, "--no-progress",
            "--out", str(out)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None:
        if runs.is_dir() and _finished(runs):
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the grid finished before the interrupt"
    tic = time.time()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert time.time() - tic < 5, "Ctrl-C did not stop compare promptly"
    assert proc.returncode == 130, err
    lines = [x for x in err.splitlines() if x.startswith("interrupted")]
    assert len(lines) == 1, err
    finished = _finished(runs)
    k = len(finished)
    assert 1 <= k < 6
    assert lines[0] == f"interrupted: {k} runs finished, {6 - k} left; rerun the same command to resume"
    assert "Traceback" not in err
    time.sleep(1.5)
    assert _finished(runs) == finished, "a worker kept running after Ctrl-C"
    assert not (out / "summary.csv").exists()
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert f"6 runs: {k} already finished, {6 - k} to compute" in done.stderr
    assert {n: v for n, v in _finished(runs).items() if n in finished} == finished


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_interrupted_simulate_leaves_nothing(tmp_path, sig):
    out = tmp_path / "run"
    args = [sys.executable, "-m", "evroute", "simulate", "--horizon", "1000000", "--out", str(out),
            "--no-progress"]
    # a warm cache (network, kernel, truth), so that the signal lands in the rounds
    warm = subprocess.run([*args[:5], "1", "--out", str(tmp_path / "warm"), "--no-progress"],
                          capture_output=True, text=True, timeout=300)
    assert warm.returncode == 0, warm.stderr
    shutil.rmtree(tmp_path / "warm")
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not any(p.name.startswith(".run.partial-") for p in tmp_path.iterdir()):
        time.sleep(0.02)
    time.sleep(3.0)  # into the rounds
    tic = time.time()
    proc.send_signal(sig)
    stdout, err = proc.communicate(timeout=60)
    assert time.time() - tic < 5
    if sig == signal.SIGKILL:
        # nothing can be cleaned up by the killed process itself: the next run with the same
        # --out removes its temporary folder
        assert proc.returncode == -signal.SIGKILL
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".run.partial-")]
        again = subprocess.run([*args[:5], "3", *args[6:]], capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr
        assert [p.name for p in tmp_path.iterdir()] == ["run"] and is_finished_run(out)
        return
    assert proc.returncode == 130, err
    assert len(err.strip().splitlines()) == 1, err
    assert re.match(r"interrupted: the run stopped (after \d+ of 1000000 rounds|before the first round); "
                    r"nothing was written to .*; rerun the same command", err), err
    assert "rerun the same command" in err and stdout == ""
    assert list(tmp_path.iterdir()) == []  # no run directory, no temporary folder


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_damaged_run_files_one_line_errors_and_recompute(capsys, tmp_path, synthetic):
    from evroute.runs.directory import verify_run

    run = tmp_path / "run"
    simulate(SimulationConfig(horizon=4, policy="bi-ts"), run, net=synthetic)
    assert verify_run(run) is None
    _truncate(run / "rounds.parquet")
    assert "rounds.parquet is unreadable" in verify_run(run)
    for args in (["plot", str(run), "--no-maps"], ["export", str(run), "--geojson", str(tmp_path / "x.geojson")]):
        code, _, err = cli(capsys, *args)
        lines = [x for x in err.splitlines() if x.strip()]
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error:") and "rounds.parquet" in lines[0], err
    assert not (tmp_path / "x.geojson").exists()

    # a grid: plots skip the damaged run (named, one line), compare verifies and recomputes it
    out = tmp_path / "grid"
    grid_args = ["compare", "--routes", "synthetic:B", "--policies", "bi-ts", "--seeds", "3", "--horizon", "5",
                 "--jobs", "1", "--no-progress", "--out", str(out)]
    assert cli(capsys, *grid_args)[0] == 0
    bad = out / "runs" / "synthetic-B-bi-ts-s1"
    good = {n: (out / "runs" / n / "rounds.parquet").stat().st_mtime_ns for n in ("synthetic-B-bi-ts-s0",
                                                                                 "synthetic-B-bi-ts-s2")}
    _truncate(bad / "observations.parquet")
    code, _, err = cli(capsys, "plot", str(out), "--no-maps")
    assert code == 0
    warn = [x for x in err.splitlines() if "synthetic-B-bi-ts-s1" in x]
    assert len(warn) == 1 and warn[0].startswith("warning: skipping run synthetic-B-bi-ts-s1"), err
    # a row count that does not match the config is damage too
    pd.read_parquet(out / "runs" / "synthetic-B-bi-ts-s2" / "rounds.parquet").head(3).to_parquet(
        out / "runs" / "synthetic-B-bi-ts-s2" / "rounds.parquet", index=False)
    assert "rounds.parquet has 3 rows, the run's horizon is 5" in verify_run(out / "runs" / "synthetic-B-bi-ts-s2")
    code, stdout, err = cli(capsys, *grid_args)
    assert code == 0, err
    assert "recomputing synthetic-B-bi-ts-s1: observations.parquet is unreadable" in err
    assert "recomputing synthetic-B-bi-ts-s2: rounds.parquet has 3 rows" in err
    assert "(1 kept, 2 computed)" in stdout
    for n in ("synthetic-B-bi-ts-s1", "synthetic-B-bi-ts-s2"):
        assert verify_run(out / "runs" / n) is None
    assert (out / "runs" / "synthetic-B-bi-ts-s0" / "rounds.parquet").stat().st_mtime_ns == good["synthetic-B-bi-ts-s0"]


def test_model_spec_of_a_grid_reaches_its_gp_runs():
    grid = make_grid(network="synthetic", routes="A", policies="gp-ucb,bi-ucb", seeds=1, horizon=3,
                     model="exact[merge=always]")
    assert grid.model.label == "exact[merge=always]"
    gp, bi = (grid.config(c) for c in grid.cells())
    assert gp.model.label == "exact[merge=always]" and bi.backend == "bi"
    assert Grid.from_dict(json.loads(json.dumps(grid.to_dict()))).model.label == "exact[merge=always]"
    with pytest.raises(EvrouteError, match="unknown option"):
        make_grid(network="synthetic", routes="A", policies="gp-ucb", seeds=1, model="exact[rank=2]")


def test_energy_saved_is_summarised_by_hand(tmp_path):
    """energy.csv: mean energy driven and what was saved against the fastest and the shortest
    route, from the runs' summary.json (checked by hand on made-up runs)."""
    from evroute.runs.summaries import summarize_energy

    runs = tmp_path / "runs"
    for seed, (total, fastest, shortest) in enumerate([(100.0, 150.0, 120.0), (140.0, 170.0, 100.0)]):
        fake_run(runs, f"monaco-A-gp-ts-s{seed}", "gp-ts", "monaco:A", seed, 10.0, 0.1)
        s = json.loads((runs / f"monaco-A-gp-ts-s{seed}" / "summary.json").read_text())
        s |= {"total_energy_wh": total, "fastest_total_energy_wh": fastest, "shortest_total_energy_wh": shortest}
        (runs / f"monaco-A-gp-ts-s{seed}" / "summary.json").write_text(json.dumps(s))
    fake_run(runs, "monaco-A-bi-ts-s0", "bi-ts", "monaco:A", 0, 10.0, 0.1)  # an earlier version: no energies
    table = summarize_energy(collect_runs(tmp_path))
    assert list(table.policy) == ["gp-ts"]
    row = table.iloc[0]
    assert (row.n_seeds, row.total_energy_mean_wh, row.fastest_total_energy_mean_wh) == (2, 120.0, 160.0)
    assert row.saved_vs_fastest_mean_wh == pytest.approx(40.0) and row.saved_vs_fastest_pct == pytest.approx(25.0)
    assert row.saved_vs_shortest_mean_wh == pytest.approx(-10.0)
    assert row.saved_vs_shortest_pct == pytest.approx(-100 * 10 / 110)


def test_make_grid_takes_lists_where_the_command_line_takes_commas():
    """The Python entry point takes lists (and a dict of sweeps) for the comma-separated texts of
    `evroute compare`, and builds the same grid."""
    text = make_grid(network="synthetic", routes="A,B", policies="gp-ucb,gp-bucb[xi=0.5]", seeds=2,
                     lengthscales="0.5,1", sweep=["kappa=0.5,2"], horizon=5)
    lists = make_grid(network="synthetic", routes=["A", "B"], policies=["gp-ucb", "gp-bucb[xi=0.5]"], seeds=2,
                      lengthscales=[0.5, 1.0], sweep={"kappa": [0.5, 2]}, horizon=5)
    assert lists.to_dict() == text.to_dict()
    assert [lists.config(c).to_json() for c in lists.cells()] == [text.config(c).to_json() for c in text.cells()]


def test_the_summary_says_which_regret_and_names_an_oracle(dear_truth, synthetic, tmp_path):
    """A run told the truth's turns is named so in the summary tables, and the summary says once
    which regret its runs measured."""
    from evroute.runs.summaries import REGRET_REFERENCES, read_run, summarize, summary_markdown

    for turns in ("physics", "oracle"):
        simulate(SimulationConfig(truth="dear", horizon=3, prior_turns=turns), tmp_path / turns, net=synthetic)
    runs = pd.DataFrame([read_run(tmp_path / t) for t in ("physics", "oracle")])
    assert runs.policy.tolist() == ["gp-ts", "gp-ts (oracle turns)"]
    text = summary_markdown(summarize(runs), references=runs.regret_reference.tolist())
    assert text.count(REGRET_REFERENCES["exact optimum"]) == 1 and "not a benchmark" in text
    gp = simulate(SimulationConfig(truth="gp", horizon=3), tmp_path / "gp", net=synthetic)
    assert read_run(tmp_path / "gp")["regret_reference"] == "paper's rectified route" == gp.summary["regret_reference"]
