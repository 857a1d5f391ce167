"""The tables ``evroute plot`` writes beside its figures, recomputed from the runs' own files."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from evroute.cli import main
from evroute.io import written_by_evroute
from evroute.reports import figures, tables
from evroute.runs.experiment import run_grid
from evroute.runs.grid import make_grid


@pytest.fixture(scope="module")
def bounds_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("bounds")
    grid = make_grid(network="synthetic", routes="A", policies="gp-ucb,gp-cmm,bi-ts", seeds=2, horizon=8,
                     truth="rkhs[B=10]")
    run_grid(grid, out, jobs=1, progress=False, log=lambda m: None)
    return out


@pytest.fixture(scope="module")
def priors_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("priors")
    grid = make_grid(network="synthetic", routes="A", policies="gp-pe,gp-ucb", seeds=3, horizon=25,
                     priors="sumo-ev,delivery-van,compact-ev", truth_prior="delivery-van", vehicle="delivery-van")
    run_grid(grid, out, jobs=1, progress=False, log=lambda m: None)
    return out


def test_coverage_table_against_the_observations(bounds_dir):
    """Each bound policy's share of driven (edge, round) pairs with index ≤ truth, pooled over a
    run and averaged over runs; bi-ts logs no bound and has no row; gp-cmm's route bound counted
    from its rounds."""
    runs = figures.load_runs(figures.find_runs(bounds_dir)[0])
    table = tables.coverage_table(runs)
    assert sorted(table.policy) == ["gp-cmm", "gp-ucb"]
    for row in table.itertuples():
        dirs = runs[runs.policy == row.policy].dir
        shares = []
        for d in dirs:
            obs = pd.read_parquet(d / "observations.parquet")
            shares.append(100.0 * float((obs.index_before <= obs.expected_wh).mean()))
        assert row.runs == len(dirs) == 2
        assert row.bound_below_truth_pct == pytest.approx(np.mean(shares), rel=1e-12)
        if row.policy == "gp-cmm":
            r = pd.concat([pd.read_parquet(d / "rounds.parquet") for d in dirs])
            assert row.route_bound_below_pct == pytest.approx(100.0 * float((r.path_lower_bound
                                                                            <= r.expected_energy_wh).mean()))
        else:
            assert np.isnan(row.route_bound_below_pct)


def test_priors_table_against_the_runs(priors_dir):
    """gp-pe's share of rounds under the truth's vehicle and its eliminations, read back from
    priors.parquet and summary.json; the index rule's row carries its vehicle and its regret."""
    runs = figures.load_runs(figures.find_runs(priors_dir)[0])
    table = tables.priors_table(runs)
    assert sorted(table.policy) == ["gp-pe", "gp-ucb"]
    pe = table[table.policy == "gp-pe"].iloc[0]
    dirs = list(runs[runs.policy_name == "gp-pe"].dir)
    chosen = [pd.read_parquet(d / "priors.parquet").chosen for d in dirs]
    assert pe.on_true_prior_pct == pytest.approx(100.0 * np.mean([(c == "delivery-van").mean() for c in chosen]))
    summaries = [json.loads((d / "summary.json").read_text()) for d in dirs]
    regrets = [s["final_cumulative_regret_wh"] for s in summaries]
    assert pe.regret_wh == pytest.approx(np.mean(regrets))
    assert pe.regret_se_wh == pytest.approx(np.std(regrets, ddof=1) / np.sqrt(3))
    eliminated: dict[str, list[int]] = {}
    for s in summaries:
        for p, t in (s.get("priors_eliminated_at") or {}).items():
            eliminated.setdefault(p, []).append(t)
    expected = "; ".join(f"{p}@{int(np.median(ts))} ({len(ts)}/3)" for p, ts in sorted(eliminated.items()))
    assert pe.eliminated == (expected or "–")
    ucb = table[table.policy == "gp-ucb"].iloc[0]
    assert ucb.vehicle == "delivery-van" and np.isnan(ucb.on_true_prior_pct)


def test_no_candidates_no_priors_table(bounds_dir):
    runs = figures.load_runs(figures.find_runs(bounds_dir)[0])
    assert tables.priors_table(runs).empty


def test_plot_writes_and_prints_the_tables(priors_dir, bounds_dir, tmp_path, capsys):
    """``evroute plot`` writes each table as CSV with evroute's mark (so a second plot replaces
    it) and prints it as Markdown; the CSV reads back to the table."""
    for d, stem, table in ((priors_dir, "priors-table", tables.priors_table),
                           (bounds_dir, "coverage-table", tables.coverage_table)):
        out = tmp_path / d.name
        assert main(["plot", str(d), "--out", str(out), "--no-maps"]) == 0
        assert main(["plot", str(d), "--out", str(out), "--no-maps"]) == 0  # its own file: replaced
        printed = capsys.readouterr().out
        csv = out / f"{stem}.csv"
        assert written_by_evroute(csv) and str(csv) in printed and f"{stem}:\n| " in printed
        expected = table(figures.load_runs(figures.find_runs(d)[0]))
        pd.testing.assert_frame_equal(tables.read_table(csv), expected, check_dtype=False)


def test_plot_never_writes_over_a_users_table(bounds_dir, tmp_path, capsys):
    out = tmp_path / "figs"
    out.mkdir()
    (out / "coverage-table.csv").write_text("mine\n")
    assert main(["plot", str(bounds_dir), "--out", str(out), "--no-maps"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "coverage-table.csv" in err and len(err.strip().splitlines()) == 1
    assert (out / "coverage-table.csv").read_text() == "mine\n" and not list(out.glob("*.png"))


def test_markdown_cells():
    df = pd.DataFrame({"policy": ["gp-ucb", "gp-cmm"], "pct": [1234.25, float("nan")]})
    assert tables.markdown(df).splitlines() == ["| policy | pct |", "| --- | ---: |", "| gp-ucb | 1,234.2 |",
                                                "| gp-cmm | – |"]
