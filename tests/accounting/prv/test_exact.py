"""eps(delta) read off closed-form profiles (accounting/prv/exact.py): one step of any law
and unsampled Gaussian compositions, against mpmath references and against the grids."""

from __future__ import annotations

import math

import mpmath as mp
import pytest

from dpforge.accounting import delta as delta_of
from dpforge.accounting import epsilon
from dpforge.accounting.prv.prefixes import epsilon_prefixes
from dpforge.mechanisms import Composed, Gaussian, Laplace, PoissonSampled


def _invert(profile, target):
    """Smallest eps >= 0 with profile(eps) <= target (bisection in mpmath)."""
    target = mp.mpf(target)
    if profile(mp.mpf(0)) <= target:
        return mp.mpf(0)
    low, high = mp.mpf(0), mp.mpf(1)
    while profile(high) > target:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if profile(middle) > target else (low, middle)
    return high


def _subsampled_gaussian_epsilon(sigma, rate, delta):
    """Both directions of one Poisson-subsampled Gaussian step, in closed form: the
    likelihood ratio is monotone in x, so {p > e^eps q} is a half-line."""
    with mp.workdps(60):
        mu, q = 1 / mp.mpf(sigma), mp.mpf(rate)
        sf = lambda x: mp.ncdf(-x)  # noqa: E731

        def remove(eps):  # P = (1-q) N(0,1) + q N(mu,1), Q = N(0,1)
            if mp.exp(eps) <= 1 - q:  # every x has p > e^eps q: delta = 1 - e^eps
                return 1 - mp.exp(eps)
            x = (mp.log((mp.exp(eps) - (1 - q)) / q) + mu**2 / 2) / mu
            return (1 - q) * sf(x) + q * sf(x - mu) - mp.exp(eps) * sf(x)

        def add(eps):  # P = N(0,1), Q = (1-q) N(0,1) + q N(mu,1)
            inner = mp.exp(-eps) - (1 - q)
            if inner <= 0:
                return mp.mpf(0)
            x = (mp.log(inner / q) + mu**2 / 2) / mu
            return mp.ncdf(x) - mp.exp(eps) * ((1 - q) * mp.ncdf(x) + q * mp.ncdf(x - mu))

        return float(max(_invert(remove, delta), _invert(add, delta)))


@pytest.mark.parametrize(
    "sigma, rate, delta",
    [(1.0, 1e-3, 1e-5), (1.0, 1e-3, 1e-15), (0.3, 1e-6, 1e-10), (5.0, 0.2, 1e-12), (100.0, 1.0, 1e-15), (0.05, 0.5, 1e-10), (0.1, 1e-4, 1e-15)],
)
def test_one_subsampled_gaussian_step_brackets_mpmath(sigma, rate, delta):
    exact = _subsampled_gaussian_epsilon(sigma, rate, delta)
    result = epsilon(Composed([(PoissonSampled(Gaussian(sigma), rate), 1)]), delta)
    assert result.accuracy["closed_form"] == "one step" and result.accuracy["grid_size"] == 0
    assert result.lower <= exact * (1 + 1e-12) and exact <= result.upper * (1 + 1e-12)
    assert result.upper - result.lower <= 1e-6 * result.upper


@pytest.mark.filterwarnings("ignore:the prv engine reached")
@pytest.mark.parametrize("sigma, rate, delta", [(1000.0, 1e-3, 1e-10), (1000.0, 1.0, 1e-15), (300.0, 1e-6, 1e-12)])
def test_small_mu_steps_stay_certified(sigma, rate, delta):
    """mu = 1/sigma divides the threshold's rounding, so the error model grows by 1/mu:
    the closed form widens (or, past the accuracy asked, the grids answer), and either
    way the bracket holds the mpmath value."""
    exact = _subsampled_gaussian_epsilon(sigma, rate, delta)
    step = PoissonSampled(Gaussian(sigma), rate) if rate < 1 else Gaussian(sigma)
    result = epsilon(Composed([(step, 1)]), delta)
    assert result.lower <= exact * (1 + 1e-12) and exact <= result.upper * (1 + 1e-12)


def test_other_laws_and_flags():
    """One step of a law whose error model is not checked (an LMO mixture) goes to the
    grids; closed_form must be a bool (a string would silently count as True)."""
    from dpforge.mechanisms import LMO
    from dpforge.errors import ParameterError

    lmo = LMO(weights=(0.5, 0.0, 0.5), gamma_shape=3.0, uniform_low=0.2, uniform_high=1.5)
    assert "closed_form" not in epsilon(Composed([(PoissonSampled(lmo, 0.01), 1)]), 1e-5).accuracy
    with pytest.raises(ParameterError, match="closed_form must be True or False"):
        epsilon(Composed([(Gaussian(1.0), 1)]), 1e-5, closed_form="no")
    with pytest.raises(ParameterError, match="closed_form"):
        delta_of(Composed([(Gaussian(1.0), 1)]), 1.0, closed_form=0)


@pytest.mark.parametrize("scale, delta", [(0.5, 1e-5), (2.0, 1e-10), (10.0, 0.3)])
def test_one_laplace_step_is_a_plus_two_log_one_minus_delta(scale, delta):
    """eps(delta) = max(0, a + 2 log(1 - delta)), a = 1/b (test_closed_forms derives it)."""
    with mp.workdps(40):
        exact = float(max(0, 1 / mp.mpf(scale) + 2 * mp.log(1 - mp.mpf(delta))))
    result = epsilon(Composed([(Laplace(scale), 1)]), delta)
    assert result.lower <= exact * (1 + 1e-12) and exact <= result.upper * (1 + 1e-12)
    assert result.upper - result.lower <= 1e-9 * result.upper


@pytest.mark.parametrize("scale, rate, delta", [(0.3, 1e-3, 1e-5), (10.0, 1e-6, 1e-15), (1.0, 0.5, 1e-10)])
def test_one_step_closed_form_lies_in_the_grids_bracket(scale, rate, delta):
    description = Composed([(PoissonSampled(Laplace(scale), rate), 1)])
    exact = epsilon(description, delta)
    grids = epsilon(description, delta, closed_form=False)
    assert "closed_form" not in grids.accuracy
    # both certified: they overlap (at b = 10 the grids' atom-aligned bracket is the
    # narrower, 8e-7 against 1.9e-6: the closed form pays its error model near an atom)
    assert grids.lower <= exact.upper and exact.lower <= grids.upper
    assert exact.upper - exact.lower <= 1e-5 * exact.upper


def test_mixed_unsampled_gaussians_compose_to_one():
    """mu^2 = sum_i T_i / sigma_i^2: the same eps as one Gaussian of that mu."""
    mixed = epsilon(Composed([(Gaussian(2.0), 30), (Gaussian(0.5), 2)]), 1e-8)
    mu = math.sqrt(30 / 4.0 + 2 / 0.25)
    single = epsilon(Composed([(Gaussian(1.0 / mu), 1)]), 1e-8)
    assert mixed.accuracy["closed_form"] == "gaussian composition"
    assert mixed.lower == pytest.approx(single.lower, rel=1e-9) and mixed.upper == pytest.approx(single.upper, rel=1e-9)


def test_subsampled_compositions_still_use_the_grids():
    result = epsilon(Composed([(PoissonSampled(Gaussian(1.0), 0.01), 100)]), 1e-5)
    assert "closed_form" not in result.accuracy and result.accuracy["grid_size"] > 0


def test_prefixes_of_a_gaussian_plan_are_each_closed_form():
    parts = [Composed([(Gaussian(2.0), 10)]), Composed([(Gaussian(1.0), 5)]), Composed([(Gaussian(4.0), 40)])]
    rows = epsilon_prefixes(parts, 1e-6)
    for count, row in enumerate(rows, start=1):
        fresh = epsilon(Composed([p for part in parts[:count] for p in part.parts]), 1e-6)
        assert (row.lower, row.upper) == (fresh.lower, fresh.upper)
        assert row.accuracy["closed_form"] == "gaussian composition"


@pytest.mark.filterwarnings("ignore:the prv engine reached")  # the grids at sigma = 0.3 stop at 1.5e-3
@pytest.mark.parametrize("sigma, rate, eps", [(1.0, 1e-3, 0.5), (0.3, 1e-6, 5.0), (5.0, 0.2, 0.01)])
def test_one_step_delta_brackets_mpmath_and_the_grids(sigma, rate, eps):
    """delta(eps) of one subsampled Gaussian step: the closed form brackets the mpmath
    value within 1e-9 of itself, and overlaps the grids' certified bracket."""
    description = Composed([(PoissonSampled(Gaussian(sigma), rate), 1)])
    with mp.workdps(60):
        mu, q, e = 1 / mp.mpf(sigma), mp.mpf(rate), mp.mpf(eps)
        x = (mp.log((mp.exp(e) - (1 - q)) / q) + mu**2 / 2) / mu
        remove = (1 - q) * mp.ncdf(-x) + q * mp.ncdf(mu - x) - mp.exp(e) * mp.ncdf(-x)
        inner = mp.exp(-e) - (1 - q)
        add = mp.mpf(0)
        if inner > 0:
            y = (mp.log(inner / q) + mu**2 / 2) / mu
            add = mp.ncdf(y) - mp.exp(e) * ((1 - q) * mp.ncdf(y) + q * mp.ncdf(y - mu))
        exact = float(max(remove, add))
    result = delta_of(description, eps)
    assert result.accuracy["closed_form"] == "one step"
    assert result.lower <= exact <= result.upper
    assert result.upper - result.lower <= 1e-9 * result.upper
    grids = delta_of(description, eps, closed_form=False)
    assert grids.lower <= result.upper and result.lower <= grids.upper


@pytest.mark.parametrize("sigma, steps, delta", [(1.0, 1000, 1e-15), (0.2, 10**6, 1e-5), (0.05, 100, 1e-12), (100.0, 1, 1e-15)])
def test_gaussian_composition_at_large_eps_brackets_mpmath(sigma, steps, delta):
    """eps from 0.07 to 1.25e7: the arguments' rounding grows with eps / mu, and a flat
    1e-13 (A + B) error model did not cover it at eps = 750; the modelled error does."""
    mu = math.sqrt(steps) / sigma
    with mp.workdps(60):
        m = mp.mpf(mu)
        exact = _invert(lambda e: mp.ncdf(-e / m + m / 2) - mp.exp(e) * mp.ncdf(-e / m - m / 2), delta)
    result = epsilon(Composed([(Gaussian(sigma), steps)]), delta)
    assert result.accuracy["closed_form"] == ("one step" if steps == 1 else "gaussian composition")
    assert result.lower <= exact <= result.upper
    # one step's error model grows by 1/mu (here 100): 1e-7 rather than 1e-12
    assert result.upper - result.lower <= (1e-6 if steps == 1 else 1e-9) * result.upper


@pytest.mark.filterwarnings("ignore:the prv engine reached")
def test_a_closed_form_wider_than_asked_leaves_the_question_to_the_grids():
    """Laplace b = 10, q = 1e-6, one step at delta = 1e-15: the closed form's bracket is
    1.9e-6 wide (its error model near the top atom); asked for 1e-7, the grids answer
    (and say whether they reach it) instead of a closed form that would miss silently."""
    description = Composed([(PoissonSampled(Laplace(10.0), 1e-6), 1)])
    assert epsilon(description, 1e-15).accuracy["closed_form"] == "one step"
    strict = epsilon(description, 1e-15, relative_accuracy=1e-7)
    assert "closed_form" not in strict.accuracy and strict.accuracy["grid_size"] > 0
