"""Figures of a tiny grid and of a single run: files, pixel sizes, not blank."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from evroute.bandit.agents import LOWER_CONFIDENCE_BOUND, POLICIES
from evroute.cli import main
from evroute.errors import EvrouteError
from evroute.reports import figures, plots, tables
from evroute.runs.config import SimulationConfig
from evroute.runs.experiment import run_grid
from evroute.runs.grid import make_grid
from evroute.runs.simulation import simulate


@pytest.fixture(scope="module")
def grid_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("grid")
    grid = make_grid(network="synthetic", routes="A,B", policies="gp-ucb,gp-bucb[xi=0.5],bi-ts",
                     seeds=2, horizon=6, lengthscales="0.5,1")
    run_grid(grid, out, jobs=1, progress=False, log=lambda m: None)
    return out


def png_pixels(path):
    import matplotlib.image as mpimg

    return mpimg.imread(path)


def assert_not_blank(img) -> None:
    rgb = img[..., :3].reshape(-1, 3)
    assert len(np.unique(np.round(rgb * 255).astype(np.uint8), axis=0)) > 20
    assert float(rgb.std()) > 0.02


def expected_px(size) -> tuple[int, int]:
    w, h = size
    return round(h * figures.DPI), round(w * figures.DPI)


def test_grid_figures(grid_dir, capsys, synthetic):
    code = main(["plot", str(grid_dir)])
    out, err = capsys.readouterr()
    assert code == 0, err
    names = {"regret", "beta", "regret_lengthscale", "final_regret_vs_lengthscale", "coverage",
             "explore-synthetic-A", "explore-synthetic-B"}
    files = set(out.split("\n\n")[0].splitlines())  # the files, then the tables printed
    assert files == {str(grid_dir / "plots" / f"{n}.{ext}") for n in names for ext in ("png", "svg")} | \
        {str(grid_dir / "plots" / "coverage-table.csv")}
    for n in names:
        img = png_pixels(grid_dir / "plots" / f"{n}.png")
        assert_not_blank(img)
        root = ET.parse(grid_dir / "plots" / f"{n}.svg").getroot()
        assert root.tag.endswith("svg")
    # pixel sizes: 2 routes → 2 panels side by side; β: 1 network → 1 panel
    assert png_pixels(grid_dir / "plots" / "regret.png").shape[:2] == expected_px(figures.figure_size(2)) == (450, 960)
    assert png_pixels(grid_dir / "plots" / "beta.png").shape[:2] == expected_px(figures.figure_size(1)) == (450, 480)
    assert png_pixels(grid_dir / "plots" / "final_regret_vs_lengthscale.png").shape[:2] == (450, 960)
    aspect = figures.network_aspect(synthetic)
    assert png_pixels(grid_dir / "plots" / "explore-synthetic-A.png").shape[:2] == \
        expected_px(figures.figure_size(3, "map", aspect))


def test_curve_statistics():
    curves = np.array([[1.0, 2.0, 4.0], [3.0, 4.0, 8.0]])
    mean, se = figures.mean_se(curves)
    assert np.allclose(mean, [2, 3, 6])
    assert np.allclose(se, np.std(curves, axis=0, ddof=1) / math.sqrt(2))
    mean, se = figures.mean_se(curves[:1])
    assert np.allclose(se, 0)


def test_single_run_and_options(tmp_path, synthetic, capsys):
    run = tmp_path / "run"
    simulate(SimulationConfig(policy="gp-bucb", horizon=5, seed=0), run, net=synthetic)
    files = plots.plot_directory(run, tmp_path / "figs")
    assert sorted(f.name for f in files) == sorted(
        ["regret.png", "regret.svg", "beta.png", "beta.svg", "coverage.png", "coverage.svg", "coverage-table.csv",
         "explore-synthetic-A.png", "explore-synthetic-A.svg"])
    assert_not_blank(png_pixels(tmp_path / "figs" / "regret.png"))
    assert png_pixels(tmp_path / "figs" / "regret.png").shape[:2] == expected_px(figures.figure_size(1))
    code = main(["plot", str(run), "--out", str(tmp_path / "nomaps"), "--no-maps"])
    assert code == 0
    assert not list((tmp_path / "nomaps").glob("explore-*"))


def test_plot_bad_input(tmp_path, capsys):
    with pytest.raises(EvrouteError, match="neither a run directory"):
        plots.plot_directory(tmp_path)
    (tmp_path / "runs").mkdir()
    with pytest.raises(EvrouteError, match="no finished runs"):
        plots.plot_directory(tmp_path)
    code = main(["plot", str(tmp_path / "missing")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error:") and len(err.strip().splitlines()) == 1


def test_exploration_legend_names_the_seed_shown(tmp_path, synthetic, monkeypatch):
    run = tmp_path / "run"
    simulate(SimulationConfig(horizon=3, seed=3, policy="bi-ts"), run, net=synthetic)
    seen = []
    real = plots.figure_legend

    def record(fig, handles, labels, ncols=None):
        seen.append(list(labels))
        return real(fig, handles, labels, ncols=ncols)

    monkeypatch.setattr(plots, "figure_legend", record)
    runs = figures.load_runs([run])
    plots.plot_exploration(runs, tmp_path / "plots", nets={"synthetic": synthetic})
    assert seen and seen[-1][0] == "clairvoyant optimal route (seed 3)"


def test_large_networks_draw_their_background_as_pixels_in_svg(tmp_path, synthetic, monkeypatch):
    """Above RASTERIZE_FROM_EDGES edges the grey network is an embedded image in the SVG (a
    100k-edge city: 16 MB of paths → 0.8 MB), below it stays vector paths."""
    run = tmp_path / "run"
    simulate(SimulationConfig(horizon=3, seed=1, policy="bi-ts"), run, net=synthetic)
    small = plots.plot_directory(run, tmp_path / "vector")
    monkeypatch.setattr(figures, "RASTERIZE_FROM_EDGES", 10)
    big = plots.plot_directory(run, tmp_path / "raster")
    svg = {p.parent.name: p.read_text() for p in small + big if p.name.startswith("explore") and p.suffix == ".svg"}
    assert svg["raster"].count("<image") == svg["vector"].count("<image") + 1  # (+ the colour bar's)
    assert len(svg["raster"]) < len(svg["vector"])


def test_lower_bound_capability_declared():
    """The policies whose logged index is a lower confidence bound say so; draws and means do not."""
    offered = set(POLICIES.with_capability(LOWER_CONFIDENCE_BOUND))
    assert {"gp-ucb", "gp-bucb", "bi-ucb", "bi-bucb", "gp-amm", "gp-dmm", "gp-ay", "gp-igp", "gp-cmm"} <= offered
    assert not offered & {"gp-ts", "bi-ts", "gp-greedy", "bi-greedy"}
    assert "[offers: lower-confidence-bound]" in POLICIES.get("gp-ucb").help()


def test_coverage_curves_against_pandas(grid_dir):
    """The coverage figure's numbers, recomputed from the observations with pandas: the share
    of (edge, round) pairs so far whose index was at or below the truth, and the mean gap."""
    import pandas as pd

    runs = figures.load_runs(figures.find_runs(grid_dir)[0])
    for d in runs[runs.policy_name == "gp-ucb"].dir[:2]:
        obs = pd.read_parquet(d / "observations.parquet")
        per_round = obs.assign(below=obs.index_before <= obs.expected_wh,
                               gap=obs.expected_wh - obs.index_before).groupby("t")
        expected_cov = 100 * per_round.below.sum().cumsum() / per_round.size().cumsum()
        cov, gap = tables.bound_curves(d)
        np.testing.assert_allclose(cov, expected_cov.to_numpy(), rtol=1e-12)
        np.testing.assert_allclose(gap, per_round.gap.mean().to_numpy(), rtol=1e-12)
        # a UCB index is the posterior mean less sqrt(beta) posterior standard deviations
        beta = pd.read_parquet(d / "rounds.parquet").set_index("t").beta
        np.testing.assert_allclose(obs.index_before, obs.post_mean_before - np.sqrt(beta[obs.t].to_numpy())
                                   * obs.post_std_before, rtol=1e-9, atol=1e-9)


def test_coverage_only_for_bounds(tmp_path, synthetic):
    run = tmp_path / "ts"
    simulate(SimulationConfig(policy="gp-ts", horizon=3, seed=0), run, net=synthetic)
    assert plots.plot_coverage(figures.load_runs([run]), tmp_path / "figs") == []
    run = tmp_path / "ucb"
    simulate(SimulationConfig(policy="gp-ucb", horizon=3, seed=0), run, net=synthetic)
    files = plots.plot_coverage(figures.load_runs([run]), tmp_path / "figs")
    assert sorted(f.name for f in files) == ["coverage.png", "coverage.svg"]
    img = png_pixels(tmp_path / "figs" / "coverage.png")
    assert_not_blank(img)
    assert img.shape[:2] == expected_px((2 * figures.PANEL_W, figures.PANEL_H + figures.LEGEND_H))


def test_the_public_figures_return_fig_and_ax_and_write_nothing(grid_dir, synthetic, tmp_path, monkeypatch):
    """plot_network, plot_run and plot_regret_curves return (fig, ax), draw what they are given
    (every edge once, the coloured ones as many as have a value; the regret lines are the means
    over the seeds) and write no file."""
    import matplotlib.pyplot as plt
    import pandas as pd

    import evroute

    monkeypatch.chdir(tmp_path)
    values = np.full(synthetic.n_edges, np.nan)
    values[:10] = np.arange(10.0)
    fig, ax = evroute.plot_network(synthetic, values, route=[0, 1], ends=(0, 1), label="x")
    grey, coloured = ax.collections[0], ax.collections[1]
    assert len(grey.get_segments()) == synthetic.n_edges and len(coloured.get_segments()) == 10
    with pytest.raises(EvrouteError, match="one number per edge"):
        evroute.plot_network(synthetic, np.zeros(3))
    run = grid_dir / "runs" / "synthetic-A-gp-ucb-s0"
    fig2, ax2 = plt.subplots()
    assert evroute.plot_run(run, "post_mean_final", ax=ax2) == (fig2, ax2)
    visits = pd.read_parquet(run / "edges.parquet").visits
    _, ax3 = evroute.plot_run(run)
    assert len(ax3.collections[1].get_segments()) == int((visits > 0).sum())
    _, ax4 = evroute.plot_regret_curves(grid_dir, "synthetic:B")
    lines = {line.get_label(): line.get_ydata() for line in ax4.get_lines()}
    assert set(lines) == {"GP-UCB", "GP-BUCB [xi=0.5]", "BI-TS"}
    finals = [pd.read_parquet(grid_dir / "runs" / f"synthetic-B-bi-ts-s{s}" / "rounds.parquet").cumulative_regret_wh
              for s in (0, 1)]
    np.testing.assert_allclose(lines["BI-TS"], (finals[0] + finals[1]) / 2)
    assert list(tmp_path.iterdir()) == []
    plt.close("all")


def test_a_policys_line_follows_its_declared_family_not_its_name():
    """Dashed for a policy on its own independent model, solid on the GP, as each declared at
    registration: a BI policy whose name does not start with ``bi-`` is dashed, one named ``bi-…``
    that uses the GP is solid; a GP policy and its BI twin share a colour."""
    from evroute.bandit.agents import register_agent, unregister_agent

    register_agent("indep-ucb", lambda setup: None, model="bi")
    register_agent("bi-like", lambda setup: None, model="gp")
    try:
        s = figures.policy_styles(["gp-ucb", "bi-ucb", "gp-ts[joint=true]", "indep-ucb", "bi-like", "gone-policy"])
    finally:
        unregister_agent("indep-ucb")
        unregister_agent("bi-like")
    dashes = {k: v["linestyle"] for k, v in s.items()}
    assert dashes == {"gp-ucb": "-", "bi-ucb": "--", "gp-ts[joint=true]": "-", "indep-ucb": "--", "bi-like": "-",
                      "gone-policy": "-"}
    assert s["gp-ucb"]["color"] == s["bi-ucb"]["color"]
    assert len({s[k]["color"] for k in ("gp-ucb", "gp-ts[joint=true]", "indep-ucb", "bi-like", "gone-policy")}) == 5
