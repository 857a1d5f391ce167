"""The truth sampler of large networks (random Fourier features of the context kernels times GMRF
draws, ``NetworkPrior.sample_features``) against the exact dense sampler, as
benchmarks/truth_sampler.py measures it: the features add no error beyond the Monte-Carlo error
of the draws, and the draws stay Gaussian."""

from __future__ import annotations

import pytest

from benchmarks.truth_sampler import measure


@pytest.mark.slow
def test_random_feature_draws_are_as_close_to_the_kernel_as_exact_draws(synthetic):
    m = measure(synthetic, draws=150, seed=0)
    dense, features = m["dense"], m["features"]
    assert features["frob"] <= 1.05 * dense["frob"] + 0.01
    assert features["var"] <= 1.25 * dense["var"] + 0.01
    assert features["neighbours"] <= 1.25 * dense["neighbours"] + 0.01
    assert abs(features["kurtosis"]) < 0.3
