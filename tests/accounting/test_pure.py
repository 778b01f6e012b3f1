"""Pure-DP engine: closed forms of basic composition and amplification, the pure-DP PRV
route, delta from the randomised-response profile, calibration and bad input."""

from __future__ import annotations

import math

import pytest

from dpforge.accounting import delta, epsilon
from dpforge.accounting.pure import amplified_epsilon, calibrate_laplace_scale_pure, pure_epsilon
from dpforge.mechanisms.base import Gaussian, Laplace, PureDP
from dpforge.mechanisms.combinators import Composed, PoissonSampled


def test_amplification_closed_form():
    assert amplified_epsilon(1.0, 0.1) == pytest.approx(math.log(1 + 0.1 * (math.e - 1)), rel=1e-15)
    assert amplified_epsilon(2.0, 1.0) == 2.0
    assert amplified_epsilon(0.0, 0.3) == 0.0
    # small epsilon: eps' ~ q eps; huge epsilon: eps' ~ eps + log q, no overflow
    assert amplified_epsilon(1e-8, 0.01) == pytest.approx(1e-10, rel=1e-7)
    assert amplified_epsilon(800.0, 0.01) == pytest.approx(800.0 + math.log(0.01), rel=1e-12)
    assert amplified_epsilon(5.0, 0.2) < 5.0


def test_basic_composition_of_heterogeneous_phases():
    description = Composed(
        [(PoissonSampled(Laplace(2.0, sensitivity=0.5), 0.016), 1000), (PureDP(0.1), 3), (Laplace(4.0), 2)]
    )
    expected = 1000 * math.log1p(0.016 * math.expm1(0.25)) + 3 * 0.1 + 2 * 0.25
    assert pure_epsilon(description) == pytest.approx(expected, rel=1e-13)
    result = epsilon(description, 1e-5, engine="pure")
    assert result.engine == "pure"
    assert result.upper == pytest.approx(expected, rel=1e-13)
    assert result.estimate == result.upper
    assert 0.0 <= result.lower <= result.upper
    assert result.delta == 1e-5 and result.accuracy["delta_used"] is False


def test_single_laplace_is_its_ratio_and_lower_is_sound():
    result = epsilon(Laplace(0.5), 1e-5, engine="pure")
    assert result.upper == pytest.approx(2.0)
    prv = epsilon(Laplace(0.5), 1e-5)
    assert result.lower <= prv.upper
    assert result.lower > 0.99 * prv.lower  # one step: the lower bound is the exact value
    description = Composed([(PoissonSampled(Laplace(1.0), 0.05), 200)])
    assert epsilon(description, 1e-5, engine="pure").lower <= epsilon(description, 1e-5).upper


@pytest.mark.parametrize("scale, q, steps", [(2.0, 0.016, 1000), (0.5, 0.1, 50), (1.0, 1.0, 5)])
def test_pure_dp_prv_and_tight_prv_are_below_basic_composition(scale, q, steps):
    basic = epsilon(Composed([(PoissonSampled(Laplace(scale), q), steps)]), 1e-5, engine="pure").upper
    pure_prv = epsilon(Composed([(PoissonSampled(PureDP(1.0 / scale), q), steps)]), 1e-5).upper
    tight = epsilon(Composed([(PoissonSampled(Laplace(scale), q), steps)]), 1e-5).upper
    assert tight <= pure_prv * (1 + 1e-9)
    assert pure_prv <= basic * (1 + 1e-3)


def test_delta_is_zero_beyond_the_pure_epsilon_and_rr_profile_below():
    description = Composed([(PoissonSampled(Laplace(1.0), 0.1), 20)])
    eps0 = pure_epsilon(description)
    assert delta(description, eps0, engine="pure").upper == 0.0
    assert delta(description, eps0 + 1, engine="pure").upper == 0.0
    eps = 0.5 * eps0
    result = delta(description, eps, engine="pure")
    expected = (math.exp(eps0) - math.exp(eps)) / (1 + math.exp(eps0))
    assert result.upper == pytest.approx(expected, rel=1e-12)
    # it is the profile of randomised response RR(eps0), which the PRV engine also computes
    rr = delta(PureDP(eps0), eps)
    assert rr.lower <= result.upper * (1 + 1e-9) and result.upper <= rr.upper * (1 + 1e-6)
    # the lower bound is sound: below the tight delta
    assert result.lower <= delta(description, eps).upper


def test_gaussian_is_refused():
    with pytest.raises(ValueError, match="Gaussian.*not pure") as info:
        epsilon(Composed([(PoissonSampled(Gaussian(1.0), 0.01), 10)]), 1e-5, engine="pure")
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="Gaussian"):
        delta(Gaussian(1.0), 1.0, engine="pure")


def test_options_and_ranges():
    with pytest.raises(ValueError, match="samples is not an option of the pure engine"):
        epsilon(Laplace(1.0), 1e-5, engine="pure", samples=10)
    with pytest.raises(ValueError, match="delta must be in"):
        epsilon(Laplace(1.0), 1.5, engine="pure")
    with pytest.raises(ValueError, match="epsilon must be"):
        delta(Laplace(1.0), -1.0, engine="pure")


@pytest.mark.parametrize("target, q, steps, sensitivity", [(1.0, 0.016, 1000, 1.0), (0.5, 0.1, 10, 2.0), (3.0, 1.0, 3, 1.0)])
def test_calibrate_laplace_scale_pure_inverts_basic_composition(target, q, steps, sensitivity):
    result = calibrate_laplace_scale_pure(target, q, steps, sensitivity)
    assert result.parameter_name == "scale" and result.engine == "pure"
    recomputed = pure_epsilon(Composed([(PoissonSampled(Laplace(result.parameter, sensitivity), q), steps)]))
    assert recomputed == result.epsilon
    assert target * (1 - 1e-12) <= recomputed <= target
    closed = sensitivity / math.log1p(math.expm1(target / steps) / q)
    assert result.parameter == pytest.approx(closed, rel=1e-12)


def test_calibrate_laplace_scale_pure_bad_input():
    with pytest.raises(ValueError, match="target_epsilon"):
        calibrate_laplace_scale_pure(0.0, 0.1, 10)
    with pytest.raises(ValueError, match="sampling_rate"):
        calibrate_laplace_scale_pure(1.0, 0.0, 10)
    with pytest.raises(ValueError, match="steps"):
        calibrate_laplace_scale_pure(1.0, 0.1, 0)


def test_pure_epsilon_past_709_nats_does_not_overflow():
    """e^eps of the step's hockey-stick divergence overflowed past eps ~ 709 (a pure-DP step
    of 710, a Laplace scale of 1e-3); its logarithm does not."""
    assert epsilon(Composed([(PureDP(710.0), 1)]), 1e-5, engine="pure").upper == 710.0
    assert epsilon(Composed([(Laplace(1e-3), 2)]), 1e-5, engine="pure").upper == pytest.approx(2000.0)


@pytest.mark.parametrize("target, rate, steps", [(1000.0, 0.5, 1), (800.0, 0.01, 1), (2.0, 0.01, 1000)])
def test_the_pure_laplace_calibration_inverts_the_amplification_at_any_target(target, rate, steps):
    """log(1 + (e^eps' - 1)/q) overflowed past eps' = 709 (target 1000, one step); the
    scale found composes to at most the target, within a few ulps of it."""
    result = calibrate_laplace_scale_pure(target, rate, steps)
    spent = steps * amplified_epsilon(1.0 / result.parameter, rate)
    assert spent <= target and spent == pytest.approx(target, rel=1e-12)
