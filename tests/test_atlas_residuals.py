"""The residual diagnostics of an atlas (``evroute sumo atlas --residuals``) on tables whose
answers are known by construction."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evroute.errors import EvrouteError
from evroute.physics.energy import load_vehicle
from evroute.physics.routes import edge_energies
from evroute.world.atlas_residuals import atlas_residuals, cv_r2, residual_lines


def traversals(per_edge: np.ndarray, noise_sd: float, k: int, seed: int = 0, e_det=None) -> pd.DataFrame:
    """``k`` traversals of every edge: E_det + the edge's residual + noise."""
    rng = np.random.default_rng(seed)
    n = per_edge.size
    edge = np.repeat(np.arange(n), k)
    energy = (e_det if e_det is not None else 0.0 * per_edge)[edge] + per_edge[edge] + rng.normal(0, noise_sd, n * k)
    return pd.DataFrame({"edge": edge, "energy_wh": energy})


@pytest.fixture(scope="module")
def e_det(synthetic):
    return edge_energies(synthetic, load_vehicle(None))


def test_cv_r2_of_a_known_linear_model():
    """y = 2x + ε, x and ε standard normal: the population R² is 4/5."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=4000)
    assert cv_r2(x, 2 * x + rng.normal(size=4000)) == pytest.approx(0.8, abs=0.02)
    assert cv_r2(x, rng.normal(size=4000)) == pytest.approx(0.0, abs=0.01)  # nothing to explain: R² ≤ 0


def test_signal_share_is_the_per_edge_variance_over_the_total(synthetic, e_det):
    """Per-edge signal of sd 2 and traversal noise of sd 3 over 9 traversals: the edge means'
    variance is 4 + 9/9, of which 4 is signal (a Monte-Carlo estimate, ~1,000 edges)."""
    rng = np.random.default_rng(2)
    res = atlas_residuals(traversals(rng.normal(0, 2, synthetic.n_edges), 3.0, 9, e_det=e_det), synthetic, e_det)
    x = res["energy_wh"]
    assert set(res) == {"energy_wh"} and x["r2_with_travel_time"] is None
    assert x["edges"] == synthetic.n_edges
    assert x["signal_share"] == pytest.approx(0.8, abs=0.06)
    assert x["residual_sd_wh"] == pytest.approx(np.sqrt(5.0), rel=0.08)
    assert x["traversal_sd_wh"] == pytest.approx(3.0, rel=0.08)
    assert abs(x["neighbour_r"]) < 0.12  # independent edges: no correlation along the graph
    assert abs(x["random_pairs_r"]) < 0.05


def test_smooth_residuals_correlate_along_the_graph_and_a_feature_explains_them(synthetic, e_det):
    """Residuals that are a smooth function of the edge's position correlate between neighbours,
    not between random pairs; residuals proportional to length × speed² are explained by it."""
    nodes = synthetic.nodes
    x = nodes.lon.reindex(synthetic.edges.u).to_numpy()
    smooth = 20.0 * np.sin(6.0 * (x - x.min()) / (x.max() - x.min()))
    res = atlas_residuals(traversals(smooth, 1.0, 6, e_det=e_det), synthetic, e_det)["energy_wh"]
    assert res["neighbour_r"] > 0.7 and abs(res["random_pairs_r"]) < 0.2
    bins = res["kernel_bins"]
    assert bins[-1]["data"] > bins[0]["data"]  # the kernel's near pairs are the data's close ones
    e = synthetic.edges
    physical = 1e-5 * (e.length_m * e.speed_mps ** 2).to_numpy()
    res = atlas_residuals(traversals(physical, 0.01 * physical.std(), 5, e_det=e_det), synthetic, e_det)["energy_wh"]
    assert res["r2_length_speed2"] > 0.99


def test_both_columns_with_travel_time_and_the_lines(synthetic, e_det):
    rng = np.random.default_rng(3)
    t = traversals(rng.normal(0, 2, synthetic.n_edges), 1.0, 5, e_det=e_det)
    t["edge_wh"] = t.energy_wh - 0.5
    t["seconds"] = synthetic.edges.length_m.to_numpy()[t.edge] / synthetic.edges.speed_mps.to_numpy()[t.edge]
    res = atlas_residuals(t, synthetic, e_det)
    assert set(res) == {"energy_wh", "edge_wh"} and res["edge_wh"]["r2_with_travel_time"] is not None
    assert res["edge_wh"]["residual_sd_wh"] == pytest.approx(res["energy_wh"]["residual_sd_wh"])  # a shift only
    assert res == atlas_residuals(t, synthetic, e_det)  # seeded: the same numbers again
    lines = residual_lines(res, "synthetic")
    assert len(lines) == 8 and lines[0].startswith("synthetic, residuals f - E_det booked whole")


def test_too_few_edges_is_one_line(synthetic, e_det):
    t = traversals(np.zeros(synthetic.n_edges), 1.0, 2, e_det=e_det)
    with pytest.raises(EvrouteError, match="traversals or more"):
        atlas_residuals(t, synthetic, e_det)
