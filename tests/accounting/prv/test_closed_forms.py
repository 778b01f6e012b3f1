"""Certified bounds against exact privacy profiles, monotonicity and internal consistency.

Exact profiles used (add-or-remove neighbours; without subsampling both directions coincide):

* Gaussian, T-fold composition with noise multiplier sigma: a single Gaussian with
  mu = sqrt(T)/sigma, delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)
  (Balle & Wang 2018; Dong, Roth, Su 2019).  Evaluated in mpmath (50 digits), so deltas
  down to 1e-12 and eps up to ~50 are exact to float precision.
* Laplace, one release, a = sensitivity/scale: L = |x| - |x - a| under P = Lap(a, 1),
  i.e. L = a with probability 1/2 and L = 2Y + a for Y = X - a ~ Lap(0, 1) on [-a, 0].
  For 0 <= eps < a, with c = (eps - a)/2,
      delta(eps) = 1/2 (1 - e^{eps-a}) + int_c^0 (1 - e^{eps-a-2y}) e^y/2 dy
                 = 1/2 (1 - e^{2c}) + 1/2 (1 - e^c) - 1/2 (e^c - e^{2c}) = 1 - e^{(eps-a)/2},
  and delta(eps) = 0 for eps >= a; so eps(delta) = max(0, a + 2 log(1 - delta)).  The
  formula is checked against quadrature of (p - e^eps q)_+ before it is used.
* Randomised response PureDP(eps0), T-fold: L = (2K - T) eps0 with K ~ Binomial(T,
  e^eps0/(1+e^eps0)) under P, so delta(eps) = sum_k Pr(K = k) (1 - e^{eps - (2k-T) eps0})_+
  (exact binomial sum in mpmath).

Every assertion ``lower <= exact <= upper`` allows only a float-conversion slack of
1e-12 relative (the exact values are computed far more accurately than that).
"""

from __future__ import annotations

import json

import math

import mpmath as mp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from dpforge.accounting import delta as dpforge_delta
from dpforge.accounting import epsilon as dpforge_epsilon
from dpforge.mechanisms import Composed, Gaussian, Laplace, PoissonSampled, PureDP

FEW = settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True, derandomize=True
)
REL_SLACK = 1e-12


def check_bracket(result, exact: float, what: str) -> None:
    lower, upper = result.lower, result.upper
    assert math.isfinite(lower) and math.isfinite(upper), f"{what}: non-finite bounds {result}"
    slack = REL_SLACK * max(abs(exact), 1e-300)
    assert lower - slack <= exact <= upper + slack, (
        f"{what}: exact {exact!r} outside certified [{lower!r}, {upper!r}] "
        f"(lower - exact = {lower - exact:.3g}, exact - upper = {exact - upper:.3g}); accuracy={result.accuracy}"
    )


def check_sane(result) -> None:
    """Never NaN, never negative, ordered, estimate inside, delta <= 1."""
    values = (result.lower, result.upper, result.estimate)
    assert all(math.isfinite(v) for v in values), result
    assert 0.0 <= result.lower <= result.estimate <= result.upper, result
    assert result.engine
    achieved = result.accuracy.get("achieved")
    if achieved is not None and result.upper > 0:
        assert achieved == pytest.approx((result.upper - result.lower) / result.upper, rel=1e-9, abs=1e-15)


def invert_decreasing(profile, target: float, hi: float) -> float:
    """Smallest eps >= 0 with profile(eps) <= target, by bisection in mpmath."""
    target = mp.mpf(target)
    if profile(mp.mpf(0)) <= target:
        return 0.0
    lo, hi = mp.mpf(0), mp.mpf(hi)
    while profile(hi) > target:
        hi *= 2
    for _ in range(160):
        mid = (lo + hi) / 2
        if profile(mid) > target:
            lo = mid
        else:
            hi = mid
    return float(hi)


# ----------------------------------------------------------------------------------------
# Gaussian
# ----------------------------------------------------------------------------------------
def gaussian_delta_exact(mu: float, eps: float) -> float:
    with mp.workdps(50):
        mu, eps = mp.mpf(mu), mp.mpf(eps)
        return float(mp.ncdf(-eps / mu + mu / 2) - mp.exp(eps) * mp.ncdf(-eps / mu - mu / 2))


def gaussian_epsilon_exact(mu: float, delta: float) -> float:
    with mp.workdps(50):
        m = mp.mpf(mu)
        profile = lambda e: mp.ncdf(-e / m + m / 2) - mp.exp(e) * mp.ncdf(-e / m - m / 2)  # noqa: E731
        return invert_decreasing(profile, delta, hi=1.0)


def test_gaussian_closed_form_is_right():
    # against scipy's normal cdf where float64 suffices, and the classic sigma=1 value
    mu, eps = 1.3, 0.7
    expected = stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)
    assert gaussian_delta_exact(mu, eps) == pytest.approx(expected, rel=1e-12)
    assert gaussian_delta_exact(mu, gaussian_epsilon_exact(mu, 1e-5)) == pytest.approx(1e-5, rel=1e-9)


GAUSSIAN_CASES = [
    # sigma, T, delta                      exact epsilon
    (1.0, 1, 1e-5),  #                     4.377
    (20.0, 10, 1e-5),  #                   0.561
    (50.0, 1, 1e-3),  #                    0.0252
    (0.5, 10, 1e-6),  #                    49.32   (large eps)
    (2.0, 100, 1e-8),  #                   39.89
    (0.15, 1, 1e-5),  #                    49.88   (large eps)
    (0.2, 1, 1e-12),  #                    47.05   (large eps, tiny delta)
    (0.7, 10, 1e-12),  #                   41.38
    (1.0, 1, 1e-12),  #                    7.24
    (3.0, 2000, 1e-10),  #                 ~205
    (8.822181356034656, 442, 1e-12),  #    19.1386 (found by the randomised test below)
]


# closed_form=False: the grids, which unsampled Gaussians no longer reach by default
@pytest.mark.parametrize("closed_form", [True, False], ids=["closed-form", "grids"])
@pytest.mark.parametrize("sigma, steps, delta", GAUSSIAN_CASES)
def test_gaussian_epsilon_brackets_exact(sigma, steps, delta, closed_form):
    d = Composed([(Gaussian(sigma), steps)])
    exact = gaussian_epsilon_exact(math.sqrt(steps) / sigma, delta)
    result = dpforge_epsilon(d, delta, closed_form=closed_form)
    check_sane(result)
    check_bracket(result, exact, f"Gaussian sigma={sigma} T={steps} epsilon(delta={delta:g})")
    assert ("closed_form" in result.accuracy) == closed_form
    if closed_form:  # exact to the float model's width (one step's grows by 1/mu)
        assert result.upper - result.lower <= (1e-6 if steps == 1 else 1e-9) * result.upper


@pytest.mark.slow
@pytest.mark.parametrize("closed_form", [True, False], ids=["closed-form", "grids"])
def test_gaussian_epsilon_brackets_exact_many_steps_tiny_delta(closed_form):
    sigma, steps, delta = 5.0, 1000, 1e-12  # exact epsilon 63.82
    exact = gaussian_epsilon_exact(math.sqrt(steps) / sigma, delta)
    result = dpforge_epsilon(Composed([(Gaussian(sigma), steps)]), delta, closed_form=closed_form)
    check_sane(result)
    check_bracket(result, exact, f"Gaussian sigma={sigma} T={steps} epsilon(delta={delta:g})")


@pytest.mark.skipif(
    np.finfo(np.longdouble).eps >= np.finfo(float).eps, reason="this platform's long double is no more precise than double"
)
@pytest.mark.parametrize("sigma", [3000.0, 10000.0])
def test_a_long_gaussian_composed_in_double_on_the_grids_brackets_exact(extended_flags, sigma):
    """T = 1e7 steps on the grids at delta = 1e-15: priced at the peak's bound 1, one tilted
    composition took long double; priced at the estimated peak (.tilt.peak_estimate) every
    one is composed in double, and the bracket still holds the exact epsilon and reaches
    the width."""
    flags = extended_flags
    steps, delta = 10_000_000, 1e-15
    result = dpforge_epsilon(Composed([(Gaussian(sigma), steps)]), delta, closed_form=False)
    exact = gaussian_epsilon_exact(math.sqrt(steps) / sigma, delta)
    assert flags and not any(flags)
    check_sane(result)
    assert result.accuracy["reached"]
    check_bracket(result, exact, f"Gaussian sigma={sigma} T={steps} epsilon(delta={delta:g}) on the grids")


@FEW
@given(
    mu=st.floats(0.05, 8.0),
    steps=st.integers(1, 2000),
    log10_delta=st.floats(-12.0, -3.0),
)
def test_gaussian_epsilon_brackets_exact_randomised(mu, steps, log10_delta):
    # drawn by mu = sqrt(T)/sigma so that the exact epsilon stays below ~100
    sigma = math.sqrt(steps) / mu
    delta = 10.0**log10_delta
    exact = gaussian_epsilon_exact(math.sqrt(steps) / sigma, delta)
    for closed_form in (True, False):
        result = dpforge_epsilon(Composed([(Gaussian(sigma), steps)]), delta, closed_form=closed_form)
        check_sane(result)
        check_bracket(result, exact, f"Gaussian sigma={sigma!r} T={steps} epsilon(delta={delta!r}), closed_form={closed_form}")


GAUSSIAN_DELTA_CASES = [
    # sigma, T, eps                exact delta
    (1.0, 1, 0.0),  #              0.383 (total variation)
    (1.0, 1, 2.0),  #              0.0131
    (1.0, 1, 5.0),  #              5.79e-7
    (20.0, 10, 0.5),  #            2.2e-5
    (0.5, 10, 49.3),  #            1.0e-6  (large eps)
    (0.15, 1, 49.88),  #           1.0e-5  (large eps)
    (2.0, 100, 30.0),  #           ~1e-5
]


@pytest.mark.parametrize("closed_form", [True, False], ids=["closed-form", "grids"])
@pytest.mark.parametrize("sigma, steps, eps", GAUSSIAN_DELTA_CASES)
def test_gaussian_delta_brackets_exact(sigma, steps, eps, closed_form):
    exact = gaussian_delta_exact(math.sqrt(steps) / sigma, eps)
    result = dpforge_delta(Composed([(Gaussian(sigma), steps)]), eps, closed_form=closed_form)
    check_sane(result)
    assert ("closed_form" in result.accuracy) == closed_form
    assert result.upper <= 1.0
    check_bracket(result, exact, f"Gaussian sigma={sigma} T={steps} delta(eps={eps})")


@pytest.mark.slow
@pytest.mark.parametrize("closed_form", [True, False], ids=["closed-form", "grids"])
@pytest.mark.parametrize("sigma, steps", [(1.0, 1), (0.7, 10), (0.2, 1)])
def test_gaussian_delta_brackets_exact_down_to_1e_12(sigma, steps, closed_form):
    mu = math.sqrt(steps) / sigma
    eps = gaussian_epsilon_exact(mu, 1e-12)
    exact = gaussian_delta_exact(mu, eps)
    assert exact == pytest.approx(1e-12, rel=1e-6)
    result = dpforge_delta(Composed([(Gaussian(sigma), steps)]), eps, closed_form=closed_form)
    check_sane(result)
    check_bracket(result, exact, f"Gaussian sigma={sigma} T={steps} delta(eps={eps})")


# ----------------------------------------------------------------------------------------
# Laplace (one release)
# ----------------------------------------------------------------------------------------
def laplace_delta_exact(a: float, eps: float) -> float:
    return 0.0 if eps >= a else -math.expm1(0.5 * (eps - a))


def laplace_epsilon_exact(a: float, delta: float) -> float:
    return max(0.0, a + 2.0 * math.log1p(-delta))


@pytest.mark.parametrize("a", [0.1, 1.0, 3.0])
@pytest.mark.parametrize("frac", [0.0, 0.3, 0.9, 0.999])
def test_laplace_closed_form_matches_quadrature(a, frac):
    eps = frac * a
    integrand = lambda x: max(0.0, stats.laplace.pdf(x, loc=a) - math.exp(eps) * stats.laplace.pdf(x))  # noqa: E731
    kink = 0.5 * (eps + a)  # where p = e^eps q inside [0, a] (the integrand's kink)
    value = sum(
        integrate.quad(integrand, lo, hi, epsabs=1e-15, epsrel=1e-12, limit=200)[0]
        for lo, hi in [(-np.inf, 0.0), (0.0, kink), (kink, a), (a, np.inf)]
    )
    assert laplace_delta_exact(a, eps) == pytest.approx(value, rel=1e-9, abs=1e-14)


@pytest.mark.parametrize("scale, sensitivity", [(1.0, 1.0), (0.1, 1.0), (10.0, 1.0), (2.0, 3.0), (0.05, 1.0)])
@pytest.mark.parametrize("delta", [1e-2, 1e-6, 1e-12])
def test_laplace_epsilon_brackets_exact(scale, sensitivity, delta):
    a = sensitivity / scale
    exact = laplace_epsilon_exact(a, delta)
    result = dpforge_epsilon(Laplace(scale, sensitivity=sensitivity), delta)
    check_sane(result)
    check_bracket(result, exact, f"Laplace a={a} epsilon(delta={delta:g})")


@pytest.mark.parametrize("scale", [1.0, 0.1, 0.05])
@pytest.mark.parametrize(
    "frac", [0.0, 0.5, 0.99, 0.9999, pytest.param(1.0, marks=pytest.mark.slow), 1.5]
)  # eps = a exactly (delta = 0 at the top atom) takes ~10 s: the refinement never closes
def test_laplace_delta_brackets_exact(scale, frac):
    a = 1.0 / scale
    eps = frac * a
    exact = laplace_delta_exact(a, eps)
    result = dpforge_delta(Laplace(scale), eps)
    check_sane(result)
    check_bracket(result, exact, f"Laplace a={a} delta(eps={eps})")


# ----------------------------------------------------------------------------------------
# randomised response / pure DP
# ----------------------------------------------------------------------------------------
def rr_profile(eps0: float, steps: int):
    p = mp.exp(eps0) / (1 + mp.exp(eps0))
    weights = [(mp.binomial(steps, k) * p**k * (1 - p) ** (steps - k), (2 * k - steps) * mp.mpf(eps0)) for k in range(steps + 1)]

    def profile(eps):
        total = mp.mpf(0)
        for w, loss in weights:
            if loss > eps:
                total += w * (1 - mp.exp(eps - loss))
        return total

    return profile


def rr_delta_exact(eps0: float, steps: int, eps: float) -> float:
    with mp.workdps(40):
        return float(rr_profile(eps0, steps)(mp.mpf(eps)))


def rr_epsilon_exact(eps0: float, steps: int, delta: float) -> float:
    with mp.workdps(40):
        return invert_decreasing(rr_profile(eps0, steps), delta, hi=steps * eps0 + 1)


def test_rr_closed_form_single_release():
    # T = 1: delta(eps) = e^eps0/(1+e^eps0) (1 - e^{eps-eps0}) for eps < eps0
    eps0, eps = 0.8, 0.3
    assert rr_delta_exact(eps0, 1, eps) == pytest.approx(
        math.exp(eps0) / (1 + math.exp(eps0)) * (1 - math.exp(eps - eps0)), rel=1e-12
    )


@pytest.mark.parametrize("steps", [1, 5, 50])
@pytest.mark.parametrize("eps0", [0.1, 0.5, 1.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-10])
def test_pure_dp_epsilon_brackets_exact(eps0, steps, delta):
    exact = rr_epsilon_exact(eps0, steps, delta)
    result = dpforge_epsilon(Composed([(PureDP(eps0), steps)]), delta)
    check_sane(result)
    check_bracket(result, exact, f"PureDP({eps0}) x{steps} epsilon(delta={delta:g})")


@pytest.mark.parametrize("steps", [1, 5, 50])
@pytest.mark.parametrize("eps0", [0.1, 1.0])
def test_pure_dp_delta_brackets_exact(eps0, steps):
    # including eps exactly at atoms (2k - T) eps0 below the top one, where delta(.) has kinks
    d = Composed([(PureDP(eps0), steps)])
    for eps in sorted({0.0, 0.5 * eps0, eps0 * (steps % 2 + 2 * (steps // 4)), 0.37 * steps * eps0, 1.2 * steps * eps0}):
        if eps == eps0 * steps:  # the top atom is covered (slowly) below
            continue
        exact = rr_delta_exact(eps0, steps, eps)
        result = dpforge_delta(d, eps)
        check_sane(result)
        check_bracket(result, exact, f"PureDP({eps0}) x{steps} delta(eps={eps})")


@pytest.mark.slow
@pytest.mark.parametrize("steps", [1, 5, 50])
def test_pure_dp_delta_at_the_top_atom(steps):
    """eps = T eps0, the largest privacy loss: delta = 0 exactly (slow: ~10 s each, the
    refinement keeps going because the lower bound is 0)."""
    eps0 = 1.0
    d = Composed([(PureDP(eps0), steps)])
    for eps in (steps * eps0, steps * eps0 * (1 - 1e-9)):
        exact = rr_delta_exact(eps0, steps, eps)
        result = dpforge_delta(d, eps)
        check_sane(result)
        check_bracket(result, exact, f"PureDP({eps0}) x{steps} delta(eps={eps})")


def test_pure_dp_zero_is_free():
    result = dpforge_epsilon(Composed([(PureDP(0.0), 10)]), 1e-6)
    check_sane(result)
    assert result.lower == 0.0 and result.upper == pytest.approx(0.0, abs=1e-9)


# ----------------------------------------------------------------------------------------
# requested accuracy is met (or honestly reported)
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "d, delta",
    [
        (Composed([(Gaussian(1.0), 1)]), 1e-5),
        (Composed([(Gaussian(2.0), 100)]), 1e-8),
        (Composed([(PureDP(1.0), 50)]), 1e-6),
        (Composed([(PoissonSampled(Gaussian(1.0), 0.01), 1000)]), 1e-5),
        (Composed([(PoissonSampled(Laplace(1.0), 0.05), 100)]), 1e-6),
        (Laplace(1.0), 1e-6),
    ],
    ids=["gauss", "gauss-T100", "rr-T50", "subsampled-gauss", "subsampled-laplace", "laplace"],
)
def test_requested_relative_accuracy_is_met_on_easy_cases(d, delta):
    result = dpforge_epsilon(d, delta, relative_accuracy=1e-3)
    check_sane(result)
    assert result.upper - result.lower <= 1e-3 * result.upper, result


# ----------------------------------------------------------------------------------------
# monotonicity: what certified bounds imply
# ----------------------------------------------------------------------------------------
# If eps_true(A) >= eps_true(B) then upper(A) >= eps_true(A) >= eps_true(B) >= lower(B): the
# *rigorous* consequence is upper(A) >= lower(B).  With parameters 25% apart the true gap is
# far larger than the 1e-3 relative width, so the estimates must be strictly ordered too.
def _eps(sigma, q, steps, delta):
    mech = Gaussian(sigma)
    return dpforge_epsilon(Composed([(PoissonSampled(mech, q) if q < 1 else mech, steps)]), delta)


def _assert_ordered(bigger, smaller, what):
    check_sane(bigger)
    check_sane(smaller)
    assert bigger.upper >= smaller.lower, f"{what}: {bigger} vs {smaller}"
    assert bigger.estimate > smaller.estimate, f"{what}: {bigger} vs {smaller}"


MONOTONE_CASES = [(1.0, 0.01, 100, 1e-5), (0.8, 0.2, 20, 1e-8), (3.0, 0.05, 300, 1e-6), (2.0, 0.5, 5, 1e-9)]


@pytest.mark.parametrize("sigma, q, steps, delta", MONOTONE_CASES)
def test_epsilon_is_monotone_in_sigma_q_and_steps(sigma, q, steps, delta):
    _check_monotone(sigma, q, steps, delta)


@pytest.mark.slow
@settings(parent=FEW, max_examples=8)
@given(
    sigma=st.floats(0.6, 4.0),
    q=st.floats(0.001, 0.2),
    steps=st.integers(1, 500),
    log10_delta=st.floats(-10.0, -4.0),
)
def test_epsilon_is_monotone_randomised(sigma, q, steps, log10_delta):
    _check_monotone(sigma, q, steps, 10.0**log10_delta)


def _check_monotone(sigma, q, steps, delta):
    base = _eps(sigma, q, steps, delta)
    _assert_ordered(base, _eps(1.25 * sigma, q, steps, delta), "more noise must not increase epsilon")
    _assert_ordered(_eps(sigma, min(1.0, 1.25 * q), steps, delta), base, "a larger sampling rate must not decrease epsilon")
    # (q <= 0.5 in every caller, so 1.25 q is a genuinely larger rate)
    _assert_ordered(_eps(sigma, q, 2 * steps, delta), base, "more steps must not decrease epsilon")
    smaller_delta = _eps(sigma, q, steps, delta / 10.0)
    _assert_ordered(smaller_delta, base, "a smaller delta must not decrease epsilon")


# ----------------------------------------------------------------------------------------
# epsilon(delta) and delta(epsilon) consistency
# ----------------------------------------------------------------------------------------
# With eps* = eps_true(delta) in [E.lower, E.upper] and delta_true(.) non-increasing:
#   delta_true(E.upper) <= delta      so   delta(E.upper).lower <= delta
#   delta_true(E.lower) >= delta      so   delta(E.lower).upper >= delta
# and with delta_true(eps) in [D.lower, D.upper] for D = delta(eps):
#   eps_true(D.upper) <= eps          so   epsilon(D.upper).lower <= eps
#   eps_true(D.lower) >= eps          so   epsilon(D.lower).upper >= eps   (if D.lower > 0)
# These are the only orderings certified bounds guarantee; the tightness checks below
# (delta(E.upper).upper close to delta) additionally need the requested accuracy.
CONSISTENCY_CASES = [(1.0, 0.01, 200, 1e-5), (0.7, 0.1, 50, 1e-8), (2.5, 1.0, 10, 1e-3), (1.5, 0.003, 400, 1e-7)]


@pytest.mark.parametrize("sigma, q, steps, delta", CONSISTENCY_CASES)
def test_epsilon_and_delta_are_mutually_consistent(sigma, q, steps, delta):
    _check_consistency(sigma, q, steps, delta)


@pytest.mark.slow
@settings(parent=FEW, max_examples=8)
@given(
    sigma=st.floats(0.6, 4.0),
    q=st.floats(0.001, 1.0),
    steps=st.integers(1, 500),
    log10_delta=st.floats(-9.0, -3.0),
)
def test_epsilon_and_delta_are_mutually_consistent_randomised(sigma, q, steps, log10_delta):
    _check_consistency(sigma, q, steps, 10.0**log10_delta)


def _check_consistency(sigma, q, steps, delta):
    mech = Gaussian(sigma)
    d = Composed([(PoissonSampled(mech, q) if q < 1 else mech, steps)])
    e = dpforge_epsilon(d, delta)
    check_sane(e)
    at_upper = dpforge_delta(d, e.upper)
    check_sane(at_upper)
    assert at_upper.lower <= delta * (1 + 1e-12), (e, at_upper)
    at_lower = dpforge_delta(d, e.lower)
    check_sane(at_lower)
    assert at_lower.upper >= delta * (1 - 1e-12), (e, at_lower)

    eps = e.estimate
    dd = dpforge_delta(d, eps)
    check_sane(dd)
    assert dd.upper <= 1.0
    if 0.0 < dd.upper < 1.0:
        assert dpforge_epsilon(d, dd.upper).lower <= eps * (1 + 1e-12) + 1e-12, dd
    if 0.0 < dd.lower < 1.0:
        assert dpforge_epsilon(d, dd.lower).upper >= eps * (1 - 1e-12) - 1e-12, dd


@pytest.mark.slow
@pytest.mark.parametrize("eps", [3.0, 4.0])
def test_delta_lower_and_epsilon_upper_agree_at_tiny_delta(eps):
    """delta_true(eps) >= D.lower > delta' for any delta' < D.lower, hence eps_true(delta') > eps,
    so epsilon(delta').upper must exceed eps.  (Subsampled Gaussian, delta ~ 1e-9 .. 5e-13,
    where an earlier engine state broke this: delta(4).lower = 6.0628e-13 but
    epsilon(6.06e-13).upper = 3.988.)"""
    d = Composed([(PoissonSampled(Gaussian(1.0), 0.01), 1000)])
    dd = dpforge_delta(d, eps)
    check_sane(dd)
    for factor in (1e-4, 1e-3, 1e-2):
        target = dd.lower * (1 - factor)
        e = dpforge_epsilon(d, target)
        check_sane(e)
        assert e.upper > eps, (
            f"delta({eps}).lower = {dd.lower!r} certifies delta_true({eps}) >= {dd.lower!r}, but "
            f"epsilon({target!r}).upper = {e.upper!r} < {eps} certifies delta_true({eps}) <= {target!r}"
        )


def test_results_are_plain_sane_data():
    d = Composed([(PoissonSampled(Laplace(0.8), 0.02), 300), (Gaussian(3.0), 2)])
    e = dpforge_epsilon(d, 1e-7)
    check_sane(e)
    assert e.delta == 1e-7 and e.neighbouring == "add_remove" and e.sampling == "poisson"
    data = json.loads(e.to_json())
    assert data["epsilon_upper"] == e.upper and data["epsilon_lower"] == e.lower and data["delta"] == 1e-7
    dd = dpforge_delta(d, e.upper)
    check_sane(dd)
    assert dd.epsilon == e.upper and dd.upper <= 1.0
