"""The compiled subsampled-Gaussian distribution functions and the batched quantiles."""

import math

import mpmath
import numpy as np
import pytest

from dpforge.mechanisms.pairs import GaussianPair, PrivacyLoss


class _NumpyGaussianPair(GaussianPair):
    """The same pair through the generic numpy path (the compiled path is for GaussianPair only)."""


@pytest.mark.parametrize("mu", [1e-3, 0.3, 1.0, 1 / 0.6, 8.0])
@pytest.mark.parametrize("q", [1.0, 0.5, 0.01, 1e-6])
@pytest.mark.parametrize("direction", ["remove", "add"])
def test_compiled_distribution_functions_match_the_numpy_path(mu, q, direction):
    x = np.concatenate([np.linspace(-5, 5, 801), np.linspace(-0.02, 0.02, 801), -np.geomspace(1e-12, 600, 200), np.geomspace(1e-12, 600, 200)])
    compiled = PrivacyLoss(GaussianPair(mu), q, direction).distribution_functions(x)
    generic = PrivacyLoss(_NumpyGaussianPair(mu), q, direction).distribution_functions(x)
    for a, b in zip(compiled, generic):
        assert np.all(np.isfinite(a)) and np.all((a >= 0) & (a <= 1))
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-300)


def test_compiled_tails_against_mpmath():
    """Both tails of the remove law of a subsampled Gaussian, from mpmath at 50 digits."""
    mu, q = 1.0 / 0.8, 0.01
    loss = PrivacyLoss(GaussianPair(mu), q, "remove")
    mpmath.mp.dps = 50
    for ell in (-0.0095, 0.0, 0.5, 3.0, 9.0):
        r = mpmath.log((mpmath.exp(ell) - (1 - mpmath.mpf(q))) / q)
        below_p0 = mpmath.ncdf(r / mu - mu / 2)
        below_q0 = mpmath.ncdf(r / mu + mu / 2)
        cdf_p = (1 - q) * below_q0 + q * below_p0
        sf_p = (1 - q) * (1 - below_q0) + q * (1 - below_p0)
        got_cdf, got_sf, _, _ = loss.distribution_functions(np.array([ell]))
        assert float(got_cdf[0]) == pytest.approx(float(cdf_p), rel=1e-12)
        assert float(got_sf[0]) == pytest.approx(float(sf_p), rel=1e-12)


@pytest.mark.parametrize("pair", [GaussianPair(1.0), GaussianPair(1 / 0.6), _NumpyGaussianPair(0.05)])
@pytest.mark.parametrize("q", [1.0, 0.01, 1e-4])
@pytest.mark.parametrize("direction", ["remove", "add"])
def test_batched_quantiles_sit_on_the_side_where_their_condition_holds(pair, q, direction):
    loss = PrivacyLoss(pair, q, direction)
    (q05, q95), (low6, low12), (high4, high12) = loss.quantiles((0.05, 0.95), (1e-6, 1e-12), (1e-4, 1e-12))
    lo_support, hi_support = loss.support
    assert float(loss.cdf(q05)) >= 0.05 and float(loss.cdf(q95)) >= 0.95
    # just below each quantile the condition fails (within the bracket precision)
    for level, value in ((0.05, q05), (0.95, q95)):
        assert float(loss.cdf(value - 1e-5 * max(1.0, abs(value)) - 1e-9)) < level
    for tail, value in ((1e-6, low6), (1e-12, low12)):
        assert float(loss.cdf(value)) <= tail
        assert value == lo_support if math.isfinite(lo_support) else value <= 0.0
    for tail, value in ((1e-4, high4), (1e-12, high12)):
        assert float(loss.sf(value)) <= tail
        assert value == hi_support if math.isfinite(hi_support) else value >= max(lo_support, 0.0)
    # one at a time gives the same answers
    assert loss.quantile(0.05) == q05 and loss.lower_quantile(1e-12) == low12 and loss.upper_quantile(1e-4) == high4


@pytest.mark.parametrize("mu", [1e-3, 0.05, 1.0, 1 / 0.6, 50.0])
@pytest.mark.parametrize("q", [1.0, 0.5, 0.01, 1e-6])
@pytest.mark.parametrize("direction", ["remove", "add"])
def test_compiled_quantiles_match_the_numpy_path(mu, q, direction):
    """The compiled quantile search runs the numpy path's steps: the same answers (up to
    the last bits of a bracket cut next to 0) on the same side of every condition."""
    args = ((0.05, 0.95, 0.5, 1e-12), (1e-6, 1e-12, 1e-20, 1e-3), (1e-4, 1e-12, 1e-25, 0.3))
    compiled = PrivacyLoss(GaussianPair(mu), q, direction).quantiles(*args)
    generic = PrivacyLoss(_NumpyGaussianPair(mu), q, direction).quantiles(*args)
    for got, expected in zip(compiled, generic):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)
    loss = PrivacyLoss(GaussianPair(mu), q, direction)
    (levels, lowers, uppers) = compiled
    for level, value in zip(args[0], levels):
        assert float(loss.cdf(value)) >= level
    for tail, value in zip(args[1], lowers):
        assert float(loss.cdf(value)) <= tail
    for tail, value in zip(args[2], uppers):
        assert float(loss.sf(value)) <= tail
