"""Reading OSM input: the DEM sampled bilinearly (against a plane, which bilinear interpolation
reproduces exactly), and the grades it gives Luxembourg."""

from __future__ import annotations

import numpy as np
import pytest

from evroute.roads.osm import bilinear

from .conftest import LUXEMBOURG, LUXEMBOURG_DEM, data_file
from .osmxml import NODES, write_osm


def test_bilinear_is_exact_on_a_plane_and_the_cells_at_their_centres():
    rows, cols = np.mgrid[0:6, 0:9].astype(float)
    grid = 3.0 * rows - 2.0 * cols + 7.0
    rng = np.random.default_rng(0)
    r, c = rng.uniform(0, 5, 200), rng.uniform(0, 8, 200)
    np.testing.assert_allclose(bilinear(grid, r, c), 3.0 * r - 2.0 * c + 7.0, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(bilinear(grid, rows.ravel(), cols.ravel()), grid.ravel())
    # outside the centres: the border cells' values (no extrapolation)
    assert bilinear(grid, np.array([-0.4]), np.array([0.0]))[0] == grid[0, 0]
    holed = grid.copy()
    holed[2, 3] = np.nan
    assert np.isnan(bilinear(holed, np.array([2.5]), np.array([3.5]))[0])
    assert np.isfinite(bilinear(holed, np.array([4.5]), np.array([6.5]))[0])


def test_the_dem_is_sampled_bilinearly_at_the_nodes(tmp_path):
    """A DEM whose values are a plane in lon/lat (cells of ~80 m, larger than the test network's
    street segments): every node gets the plane's height at its coordinates, not its cell's."""
    import rasterio
    from rasterio.transform import from_origin

    from evroute.roads.network import load_network

    osm = write_osm(tmp_path / "small.osm", ele=False)
    west, north, step = 6.998, 45.004, 0.001
    n = 12
    lon_c = west + step * (np.arange(n) + 0.5)  # cell centres
    lat_c = north - step * (np.arange(n) + 0.5)
    grid = (200.0 + 5000.0 * (lon_c[None, :] - 7.0) + 8000.0 * (lat_c[:, None] - 45.0)).astype(np.float64)
    dem = tmp_path / "plane.tif"
    with rasterio.open(dem, "w", driver="GTiff", width=n, height=n, count=1, dtype="float64", crs="EPSG:4326",
                       transform=from_origin(west, north, step, step)) as dst:
        dst.write(grid, 1)
    net = load_network(str(osm), dem=dem, use_cache=False)
    assert net.meta["elevation_source"] == "dem"
    for node, row in net.nodes.iterrows():
        lat, lon = NODES[int(node)]
        assert row.elevation_raw_m == pytest.approx(200.0 + 5000.0 * (lon - 7.0) + 8000.0 * (lat - 45.0), abs=1e-9)


@pytest.mark.real(LUXEMBOURG, LUXEMBOURG_DEM)
def test_luxembourgs_grades_from_the_500_m_dem_are_the_terrains():
    """Bilinear sampling of the 500 m terrain model: a handful of edges reach the ±25 % bound
    (nearest-cell sampling put 182 there) and the 99th percentile of |grade| is a city's."""
    from evroute.roads.network import load_network

    net = load_network("luxembourg", dem=data_file(LUXEMBOURG_DEM))
    assert net.meta["grade_bounded_edges"] <= 5
    assert np.percentile(np.abs(net.edges.grade), 99) < 0.15
    assert 230 < net.nodes.elevation_m.min() and net.nodes.elevation_m.max() < 400
