"""The LMO-DP paper's own formulas (Yang et al. 2024): Theorem 4.2 (Eq. 4 with Definition
4.1's MGF) and Algorithm 3, as re-implemented in :mod:`dpforge.accounting.rdp.published`
(NOT CERTIFIED), measured against the exact divergence.

Both sides are computed at test time: the paper's formulas against ``lmo_rdp_exact``
(quadrature) and an independent mpmath integral of the closed-form densities written
here.  Only mechanism parameters are fixed.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from dpforge.accounting.rdp import epsilon_from_rdp
from dpforge.accounting.rdp.lmo import lmo_rdp_exact, lmo_rdp_mgf_bound
from dpforge.accounting.rdp.published import (
    PUBLIC_CODE_ORDERS,
    definition_4_1_law,
    lmo_epsilon_as_published,
    lmo_rdp_as_published,
)
from dpforge.mechanisms import LMO

mp = pytest.importorskip("mpmath")

ORDERS = PUBLIC_CODE_ORDERS  # 2, 3, ..., 128
MIXTURE = LMO(weights=(0.5, 0.2, 0.3), gamma_shape=3.0, gamma_scale=0.05, exponential_rate=20.0,
              uniform_low=0.05, uniform_high=0.2)
#: orders where every MGF argument of MIXTURE (Definition 4.1 and Algorithm 3) is before its pole
VALID = np.array([2.0, 4.0, 8.0, 16.0])


def at(mechanism: LMO, sensitivity: float) -> LMO:
    return dataclasses.replace(mechanism, sensitivity=sensitivity)


# -- an independent reference: mpmath quadrature of the closed-form density --------------
def _mp_density(m: LMO):
    """f(x) = sum_k w_k E[(eta/2) e^{-eta |x|}] in closed form: Lomax for Gamma(k, theta)
    (Exp(lam) is Gamma(1, 1/lam)), and for U[lo, hi] the difference formula, or its Taylor
    series where (hi |x|) < 1e-3 (the difference cancels there)."""
    wg, we, wu = (mp.mpf(w) for w in m.weights)
    k, th, lam = mp.mpf(m.gamma_shape), mp.mpf(m.gamma_scale), mp.mpf(m.exponential_rate)
    lo, hi = mp.mpf(m.uniform_low), mp.mpf(m.uniform_high)

    def f(x):
        t = abs(x)
        total = wg * k * th / 2 * (1 + th * t) ** (-(k + 1)) + we / (2 * lam) * (1 + t / lam) ** (-2)
        if t * hi < mp.mpf("1e-3"):
            total += wu * mp.fsum((-t) ** n / mp.factorial(n) * (hi ** (n + 2) - lo ** (n + 2)) / (2 * (n + 2) * (hi - lo))
                                  for n in range(25))
        else:
            total += wu * ((1 + lo * t) * mp.exp(-lo * t) - (1 + hi * t) * mp.exp(-hi * t)) / (2 * (hi - lo) * t**2)
        return total

    return f


def mp_renyi(m: LMO, alpha: float) -> float:
    """D_alpha(f(. - C) || f) = log(int f(x - C)^alpha f(x)^(1-alpha) dx) / (alpha - 1), mpmath."""
    with mp.workdps(30):
        f, a, c = _mp_density(m), mp.mpf(alpha), mp.mpf(m.sensitivity)
        value = mp.quad(lambda x: f(x - c) ** a * f(x) ** (1 - a), [-mp.inf, -100 * c, 0, c, 100 * c, mp.inf])
        return float(mp.log(value) / (a - 1))


def test_the_mpmath_reference_agrees_with_the_quadrature():
    for sensitivity, alpha in ((1.0, 2.0), (20.0, 4.0)):
        m = at(MIXTURE, sensitivity)
        assert lmo_rdp_exact(m, [alpha])[0] == pytest.approx(mp_renyi(m, alpha), rel=1e-7)


# -- which law each formula describes --------------------------------------------------
def test_theorem_4_2_at_sensitivity_1_is_three_times_an_equal_weight_mixture():
    """Definition 4.1's M_LMO is 3 x the MGF of the equal-weight mixture of a_k Y_k, so at
    C = 1 Eq. 4 is that mixture's joint-convexity bound plus log(3)/(alpha - 1)."""
    law = definition_4_1_law(MIXTURE)
    assert law.weights == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    printed = lmo_rdp_as_published(MIXTURE, VALID, "theorem_4_2")
    np.testing.assert_allclose(printed, lmo_rdp_mgf_bound(law, VALID) + math.log(3.0) / (VALID - 1), rtol=1e-12)


def test_algorithm_3_is_the_mgf_bound_of_the_weighted_mixture_at_sensitivity_1():
    """Line 13's MGF is the a_k-weighted mixture (dpforge's LMO), line 17 is Eq. 4 at C = 1."""
    np.testing.assert_allclose(lmo_rdp_as_published(MIXTURE, VALID, "algorithm_3"),
                               lmo_rdp_mgf_bound(MIXTURE, VALID), rtol=1e-12)
    # so, for one release at sensitivity 1 and before the poles, it is an upper bound
    assert np.all(lmo_rdp_as_published(MIXTURE, VALID, "algorithm_3") >= lmo_rdp_exact(MIXTURE, VALID))


def test_definition_4_1_and_algorithm_3_describe_different_noises():
    """Same coefficients, different laws: f(0) = E[eta]/2 is 3x smaller for Definition 4.1's."""
    law = definition_4_1_law(MIXTURE)
    assert MIXTURE.pdf(0.0) == pytest.approx(3.0 * law.pdf(0.0), rel=1e-12)


# -- sensitivity: over-reports below 1, under-reports above, non-monotone --------------
def test_at_sensitivity_1_theorem_4_2_over_reports_by_at_least_log3():
    exact_law = lmo_rdp_exact(definition_4_1_law(MIXTURE), VALID)
    assert np.all(lmo_rdp_as_published(MIXTURE, VALID, "theorem_4_2") >= exact_law + math.log(3.0) / (VALID - 1))


@pytest.mark.parametrize("sensitivity", [20.0, 100.0])
def test_large_sensitivity_falls_below_the_exact_divergence(sensitivity):
    m = at(MIXTURE, sensitivity)
    orders = np.array([4.0, 8.0, 16.0])
    printed = lmo_rdp_as_published(m, orders, "theorem_4_2")
    assert np.all(np.isfinite(printed)) and np.all(printed > 0)  # nothing flags it
    for law in (m, definition_4_1_law(m)):  # below the divergence of either reading
        assert np.all(printed < 0.5 * lmo_rdp_exact(law, orders))
    assert printed[0] < 0.5 * mp_renyi(m, 4.0)


def test_theorem_4_2_decreases_in_the_sensitivity_where_the_divergence_grows():
    sensitivities = [5.0, 20.0, 100.0]
    printed = [lmo_rdp_as_published(at(MIXTURE, c), VALID, "theorem_4_2") for c in sensitivities]
    exact = [lmo_rdp_exact(at(MIXTURE, c), VALID) for c in sensitivities]
    assert np.all(printed[0] > printed[1]) and np.all(printed[1] > printed[2])
    assert np.all(exact[0] < exact[1]) and np.all(exact[1] < exact[2])


def test_sensitivity_towards_0_keeps_theorem_4_2_away_from_0():
    m = at(MIXTURE, 1e-6)
    printed = lmo_rdp_as_published(m, VALID, "theorem_4_2")
    assert np.all(lmo_rdp_exact(m, VALID) < 1e-9)
    assert np.all(printed > math.log(3.0) / (VALID - 1))


def test_epsilon_from_theorem_4_2_is_too_small_at_large_sensitivity():
    m = at(MIXTURE, 100.0)
    printed = lmo_epsilon_as_published(m, 1e-10, formula="theorem_4_2")
    exact, _ = epsilon_from_rdp(ORDERS, lmo_rdp_exact(m, ORDERS), 1e-10)
    assert printed.epsilon < 0.5 * exact


# -- poles, NaN and negative values ----------------------------------------------------
EXP_POLE = dict(a1=0.5, a3=0.2, a4=0.3, k=3.0, theta=0.05, lam=1.0, a=0.05, b=0.2)  # a_2 (alpha-1) >= lam from 6
GAMMA_POLE = dict(a1=0.5, a3=0.2, a4=0.3, k=2.5, theta=0.5, lam=100.0, a=0.05, b=0.2)  # a_1 theta (alpha-1) >= 1 from 5


def test_past_the_exponential_pole_eq4_is_nan_negative_or_small_and_finite():
    printed = lmo_rdp_as_published(EXP_POLE, ORDERS, "theorem_4_2")
    past = ORDERS >= 6
    assert np.all(np.isfinite(printed[~past]) & (printed[~past] > 0))
    assert np.isposinf(printed[ORDERS == 6][0])  # on the pole
    assert np.isnan(printed[past]).any() and (printed[past] < 0).any()
    finite = past & np.isfinite(printed) & (printed > 0)
    assert finite.any()  # finite positive values past the pole, which nothing flags ...
    mechanism = LMO(weights=(0.5, 0.2, 0.3), gamma_shape=3.0, gamma_scale=0.05, exponential_rate=1.0,
                    uniform_low=0.05, uniform_high=0.2)
    orders = ORDERS[finite][:3]
    law = definition_4_1_law(mechanism)  # ... and can be below the divergence they stand for
    assert printed[finite][0] < 0.5 * lmo_rdp_exact(law, orders)[0]


def test_past_the_gamma_pole_a_fractional_shape_gives_nan():
    printed = lmo_rdp_as_published(GAMMA_POLE, ORDERS, "theorem_4_2")
    assert np.all(np.isfinite(printed[ORDERS < 5]))
    assert np.isposinf(printed[ORDERS == 5][0]) and np.all(np.isnan(printed[ORDERS > 5]))


def test_uniform_mgf_at_zero_is_nan_when_read_literally():
    """The third argument (1 - 2C) alpha + C - 1 is 0 at C = (alpha - 1)/(2 alpha - 1):
    M_U(0) is 0/0 as printed (its limit 1 with zero_uniform='limit')."""
    literal = lmo_rdp_as_published(GAMMA_POLE, [2.0, 3.0], "theorem_4_2", sensitivity=1 / 3, zero_uniform="literal")
    assert np.isnan(literal[0]) and np.isfinite(literal[1])
    assert np.isfinite(lmo_rdp_as_published(GAMMA_POLE, [2.0], "theorem_4_2", sensitivity=1 / 3)[0])


def test_paper_epsilon_skips_orders_past_the_stated_conditions():
    result = lmo_epsilon_as_published(EXP_POLE, 1e-10, formula="theorem_4_2")
    assert math.isfinite(result.epsilon) and result.order < 6
    assert np.all(np.isposinf(result.rdp[ORDERS >= 6]))


# -- inputs ------------------------------------------------------------------------------
def test_sensitivity_defaults_to_the_mechanism_and_can_be_given():
    m = at(MIXTURE, 2.0)
    np.testing.assert_array_equal(lmo_rdp_as_published(m, VALID, "theorem_4_2"),
                                  lmo_rdp_as_published(MIXTURE, VALID, "theorem_4_2", sensitivity=2.0))


@pytest.mark.parametrize(
    "call",
    [
        lambda: lmo_rdp_as_published(MIXTURE, VALID, "algorithm_3", sensitivity=2.0),
        lambda: lmo_rdp_as_published(MIXTURE, VALID, "public_code", sensitivity=1.0),
        lambda: lmo_rdp_as_published(MIXTURE, VALID, "theorem_4_2", sensitivity=0.0),
        lambda: lmo_rdp_as_published(MIXTURE, VALID, "theorem_4_2", sensitivity=math.nan),
        lambda: lmo_epsilon_as_published(MIXTURE, 1e-5, formula="public_code"),
        lambda: lmo_epsilon_as_published(MIXTURE, 1e-5, sensitivity=2.0),
        lambda: definition_4_1_law(dataclasses.replace(MIXTURE, weights=(1.0, 0.0, 0.0))),
    ],
)
def test_bad_input_is_a_one_line_value_error(call):
    with pytest.raises(ValueError) as info:
        call()
    assert "\n" not in str(info.value)


# -- the vector release of the paper's setting ---------------------------------------------
def test_exact_vector_rdp_is_not_lost_to_rounding_at_the_papers_dimension():
    """Near-Laplace noise on d = 1.25e8 coordinates (RoBERTa-base) under L2 clipping: the
    per-coordinate divergence g(C/sqrt d) is ~1e-12.  It was lost to rounding (epsilon 0
    from the default lmo_bound='exact', by Bretagnolle-Huber on the lost low-order value);
    the exact route now agrees with the MGF bound, and its low orders with mpmath."""
    from dpforge.accounting import epsilon
    from dpforge.mechanisms import Composed

    m = LMO(weights=(0.0, 0.0, 1.0), uniform_low=0.010758, uniform_high=0.010769, dimension=125_000_000)
    orders = [1.25, 1.5, 2.0, 4.0]
    exact = epsilon(Composed([(m, 1)]), 1e-10, engine="rdp", orders=orders).upper
    bound = epsilon(Composed([(m, 1)]), 1e-10, engine="rdp", orders=orders, lmo_bound="mgf").upper
    assert bound > 0.05 and exact >= 0.5 * bound
    # a near-Laplace law is within 1e-6 of its joint-convexity bound; the exact route
    # carries its rounding allowance (~4e-7 relative here) on top
    assert exact == pytest.approx(bound, rel=1e-5)
    scalar = dataclasses.replace(m, dimension=1, sensitivity=1 / math.sqrt(m.dimension))
    truth = mp_renyi(scalar, 1.25)
    assert truth > 1e-13 and lmo_rdp_exact(scalar, [1.25])[0] == pytest.approx(truth, rel=1e-5)
    assert lmo_rdp_exact(scalar, [1.25])[0] >= truth
