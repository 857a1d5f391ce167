"""The scalable time-varying posteriors against the exact filter, as benchmarks/time_varying.py
measures them (what the paper-004 page reports): a restarted window stays close to ``kalman``; a
truncated eigenbasis keeps a share of the prior variance that grows with its rank, and what it
cannot keep leaves errors of σ₀ and more on the edges driven most."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.time_varying import measure


@pytest.mark.slow
def test_the_window_tracks_the_exact_filter_and_a_truncated_eigenbasis_does_not(synthetic):
    exact_seconds, (window, low, mid) = measure(synthetic, ["window", "eigen[rank=32]", "eigen[rank=96]"],
                                                rounds=30, seed=0)
    assert exact_seconds > 0
    assert np.isnan(window.kept) and 0.0 < low.kept < mid.kept < 1.0
    assert window.mean_max < 1.0 and window.std_max < 1.0  # within σ₀ everywhere
    assert window.mean_median < 0.05 and window.std_median < 0.05
    for eigen in (low, mid):
        assert eigen.mean_max > 1.0  # several σ₀ off where the truncation bites
        assert eigen.mean_max > 2 * window.mean_max
