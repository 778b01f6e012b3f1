"""The AS-PUBLISHED (public code) LMO accounting and its documented failures.

Every comparison computes both sides at test time: the public formula
(:mod:`dpforge.accounting.rdp.published`, NOT CERTIFIED) against the exact Rényi
divergence (``lmo_rdp_exact``, quadrature) and the sound joint-convexity bound
(``lmo_rdp_mgf_bound``).  Only mechanism parameters are fixed here.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import dpforge
from dpforge.accounting.rdp import epsilon_from_rdp
from dpforge.accounting.rdp.lmo import lmo_rdp_exact, lmo_rdp_mgf_bound
from dpforge.mechanisms import LMO
from dpforge.accounting.rdp.published import (
    PUBLIC_CODE_ORDERS,
    PublishedParameters,
    lmo_epsilon_as_published,
    lmo_rdp_as_published,
    published_parameters,
)

ORDERS = PUBLIC_CODE_ORDERS  # 2, 3, ..., 128
GAMMA_CASES = [(2.0, 1 / 40), (1.0, 1 / 20)]  # (shape k, scale theta); mean eta = 0.05


def gamma_only(k: float, theta: float, sensitivity: float) -> LMO:
    return LMO(weights=(1.0, 0.0, 0.0), gamma_shape=k, gamma_scale=theta, sensitivity=sensitivity)


def before_gamma_pole(theta: float, orders: np.ndarray = ORDERS) -> np.ndarray:
    """Orders where M(alpha - 1) of a Gamma(k, theta) with a1 = 1 is finite."""
    return orders[(orders - 1) * theta < 1]


# -- sensitivity is ignored: under-reporting above 1, safe at or below 1 ---------------
@pytest.mark.parametrize("k, theta", GAMMA_CASES)
def test_sensitivity_2_falls_far_below_exact(k, theta):
    m = gamma_only(k, theta, 2.0)
    orders = np.array([2.0, 8.0, 16.0])
    published = lmo_rdp_as_published(m, orders)
    loop = lmo_rdp_as_published(m, orders, "public_code_loop")
    exact = lmo_rdp_exact(m, orders)
    assert np.all(published > 0) and np.array_equal(loop, published)  # the loop keeps them
    assert np.all(published < 0.75 * exact)  # unsound at every order
    assert np.all(published[:2] < 0.5 * exact[:2])  # by a factor > 2 at alpha = 2, 8


def test_sensitivity_is_ignored():
    values = [lmo_rdp_as_published(gamma_only(2.0, 1 / 40, s), ORDERS) for s in (0.25, 1.0, 2.0, 5.0)]
    for v in values[1:]:
        np.testing.assert_array_equal(v, values[0])


@pytest.mark.parametrize("sensitivity", [2.0, 3.0])
def test_epsilon_under_reported_above_sensitivity_1(sensitivity):
    # the Gamma pole lies beyond order 128, so every order is a genuine (shift-1) value
    m = gamma_only(10.0, 1 / 200, sensitivity)
    assert np.all((ORDERS - 1) * m.gamma_scale < 1)
    for delta in (1e-5, 1e-10):
        published = lmo_epsilon_as_published(m, delta, ORDERS).epsilon
        exact = epsilon_from_rdp(ORDERS, lmo_rdp_exact(m, ORDERS), delta)[0]
        assert published < exact


@pytest.mark.parametrize("k, theta", GAMMA_CASES)
@pytest.mark.parametrize("sensitivity", [0.5, 1.0])
def test_at_most_sensitivity_1_and_before_the_pole_it_is_above_exact(k, theta, sensitivity):
    m = gamma_only(k, theta, sensitivity)
    orders = before_gamma_pole(theta)
    published = lmo_rdp_as_published(m, orders)
    assert np.all(np.isfinite(published))
    assert np.all(published >= lmo_rdp_exact(m, orders))


@pytest.mark.parametrize(
    "weights", [(1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)], ids=["gamma", "exponential", "uniform"]
)
def test_single_component_sensitivity_1_equals_mgf_bound(weights):
    m = LMO(weights=weights, gamma_shape=2.0, gamma_scale=1 / 40, exponential_rate=30.0,
            uniform_low=0.02, uniform_high=0.08, sensitivity=1.0)
    orders = np.concatenate([np.arange(2.0, 129.0), [1.5, 2.5, 7.25, 20.5]])
    bound = lmo_rdp_mgf_bound(m, orders)
    finite = np.isfinite(bound)
    assert finite.sum() >= 20
    published = lmo_rdp_as_published(m, orders[finite])
    np.testing.assert_allclose(published, bound[finite], rtol=0, atol=1e-12)


def test_mixture_weights_read_as_sum_coefficients_under_report_at_sensitivity_1():
    # 90% Gamma (mean 0.05) + 10% Uniform[1, 2]: the mixture sometimes adds little noise;
    # the public code accounts eta = 0.9 G + 0.1 U instead, a different (noisier) law
    m = LMO(weights=(0.9, 0.0, 0.1), gamma_shape=2.0, gamma_scale=1 / 40,
            uniform_low=1.0, uniform_high=2.0, sensitivity=1.0)
    orders = np.array([2.0, 8.0, 16.0, 32.0])
    published = lmo_rdp_as_published(m, orders)
    exact = lmo_rdp_exact(m, orders)
    bound = lmo_rdp_mgf_bound(m, orders)
    assert np.all(exact <= bound)
    assert np.all(published < 0.5 * exact)


# -- poles: NaN, negative, and finite garbage that the loop keeps ----------------------
def test_nan_past_gamma_pole_and_loop_turns_it_into_inf():
    k, theta = 1.0, 1 / 20
    m = gamma_only(k, theta, 1.0)
    raw = lmo_rdp_as_published(m, ORDERS)
    loop = lmo_rdp_as_published(m, ORDERS, "public_code_loop")
    past = (ORDERS - 1) * theta > 1
    assert past.sum() > 100  # the pole check (smallest order only) let all of them through
    assert np.all(np.isnan(raw[past]))
    assert np.all(np.isposinf(loop[past]))
    before = (ORDERS - 1) * theta < 1
    np.testing.assert_array_equal(loop[before], raw[before])
    assert np.all(np.isinf(lmo_rdp_mgf_bound(m, ORDERS[past])))
    assert np.all(np.isfinite(lmo_rdp_exact(m, ORDERS[past])))  # the true divergence is finite


def test_nan_past_exponential_pole():
    lam = 10.0
    m = LMO(weights=(0.0, 1.0, 0.0), exponential_rate=lam, sensitivity=1.0)
    raw = lmo_rdp_as_published(m, ORDERS)
    loop = lmo_rdp_as_published(m, ORDERS, "public_code_loop")
    past = ORDERS - 1 > lam  # a3 (alpha - 1) > lam
    assert np.all(np.isnan(raw[past])) and np.all(np.isposinf(loop[past]))
    assert np.all(np.isfinite(loop[~past & (ORDERS - 1 < lam)]))


@pytest.mark.parametrize("k, theta", [(2.0, 1 / 40), (4.0, 1 / 80)])
def test_even_shape_past_pole_gives_finite_values_the_loop_keeps(k, theta):
    """(1 - t theta)^(-k) is positive past the pole for even k: the loop keeps finite
    values at orders where the MGF (and so the bound) is infinite, some of them below
    the exact divergence even at sensitivity 1; others are negative."""
    m = gamma_only(k, theta, 1.0)
    raw = lmo_rdp_as_published(m, ORDERS)
    loop = lmo_rdp_as_published(m, ORDERS, "public_code_loop")
    exact = lmo_rdp_exact(m, ORDERS)
    past = (ORDERS - 1) * theta > 1
    assert np.all(np.isinf(lmo_rdp_mgf_bound(m, ORDERS[past])))
    kept = past & np.isfinite(loop)
    assert kept.any()  # finite numbers where no finite MGF bound exists
    assert np.any(loop[kept] < exact[kept])  # ... and below the exact divergence
    negative = past & (raw < 0)
    if k == 2.0:
        assert negative.any() and np.all(np.isposinf(loop[negative]))
    for delta in (1e-5, 1e-10):  # the resulting epsilon at sensitivity 1
        published = lmo_epsilon_as_published(m, delta, ORDERS)
        exact_eps = epsilon_from_rdp(ORDERS, exact, delta)[0]
        assert published.order > 1 + 1 / theta  # attained past the pole
        if k == 4.0 or delta == 1e-5:
            assert published.epsilon < exact_eps


def test_public_default_example_reports_epsilon_from_orders_past_both_poles():
    # the defaults of the public script: eta = 0.1 G(1, 0.5) + 0.1 Exp(5) + 0.1 U[1, 2]
    params = {"a1": 0.1, "a3": 0.1, "a4": 0.1, "G_theta": 0.5, "G_k": 1, "E_lambda": 5, "U_b": 2, "U_a": 1}
    p = published_parameters(params)
    raw = lmo_rdp_as_published(params, ORDERS)
    loop = lmo_rdp_as_published(params, ORDERS, "public_code_loop")
    gamma_past = p.a1 * p.theta * (ORDERS - 1) > 1
    exp_past = p.a3 * (ORDERS - 1) > p.lam
    assert np.all(np.isnan(raw[gamma_past & ~exp_past]))
    both = gamma_past & exp_past  # two negative factors multiply to a positive "MGF"
    assert both.any() and np.all(np.isfinite(loop[both])) and np.all(loop[both] > 0)
    valid = ~gamma_past & ~exp_past & (p.a1 * p.theta * (ORDERS - 1) < 1)
    for delta in (1e-5, 1e-10):
        published = lmo_epsilon_as_published(params, delta, ORDERS)
        assert both[np.flatnonzero(ORDERS == published.order)[0]]
        from_valid_orders = epsilon_from_rdp(ORDERS[valid], loop[valid], delta)[0]
        assert published.epsilon < 0.5 * from_valid_orders


def test_pole_check_at_smallest_order_returns_no_curve():
    for params in ({"a1": 1.0, "a3": 0.0, "a4": 0.0, "k": 1.0, "theta": 2.0, "lam": 1.0, "a": 1.0, "b": 2.0},
                   {"a1": 0.0, "a3": 1.0, "a4": 0.0, "k": 1.0, "theta": 1.0, "lam": 0.5, "a": 1.0, "b": 2.0}):
        assert np.all(np.isposinf(lmo_rdp_as_published(params, ORDERS, "public_code_loop")))
        result = lmo_epsilon_as_published(params, 1e-5, ORDERS)
        assert math.isinf(result.epsilon) and math.isnan(result.order)


def test_literal_zero_uniform_coefficient_is_nan_everywhere():
    m = gamma_only(2.0, 1 / 40, 1.0)
    raw = lmo_rdp_as_published(m, ORDERS, zero_uniform="literal")
    assert np.all(np.isnan(raw))
    assert np.all(np.isposinf(lmo_rdp_as_published(m, ORDERS, "public_code_loop", zero_uniform="literal")))
    assert math.isinf(lmo_epsilon_as_published(m, 1e-5, zero_uniform="literal").epsilon)


# -- the sound side: exact <= MGF bound ------------------------------------------------
@pytest.mark.parametrize("weights", [(1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0), (0.5, 0.3, 0.2)])
@pytest.mark.parametrize("sensitivity", [0.5, 1.0, 2.0])
def test_exact_never_exceeds_mgf_bound(weights, sensitivity):
    m = LMO(weights=weights, gamma_shape=2.0, gamma_scale=1 / 40, exponential_rate=20.0,
            uniform_low=0.02, uniform_high=0.1, sensitivity=sensitivity)
    exact, bound = lmo_rdp_exact(m, ORDERS), lmo_rdp_mgf_bound(m, ORDERS)
    assert np.all(exact <= bound * (1 + 1e-9))


# -- conversion and inputs -------------------------------------------------------------
def test_conversion_matches_dpforge_on_a_clean_curve():
    m = gamma_only(10.0, 1 / 200, 1.0)
    for delta, steps in ((1e-5, 1), (1e-10, 7)):
        result = lmo_epsilon_as_published(m, delta, ORDERS, steps)
        eps, order = epsilon_from_rdp(ORDERS, lmo_rdp_as_published(m, ORDERS) * steps, delta)
        assert result.epsilon == pytest.approx(eps, rel=1e-12) and result.order == order


def test_input_forms_agree():
    m = LMO(weights=(0.2, 0.3, 0.5), gamma_shape=2.0, gamma_scale=0.01, exponential_rate=40.0,
            uniform_low=0.5, uniform_high=1.5, sensitivity=3.0)
    ours = dict(a1=0.2, a3=0.3, a4=0.5, k=2.0, theta=0.01, lam=40.0, a=0.5, b=1.5)
    public = dict(a1=0.2, a3=0.3, a4=0.5, G_k=2.0, G_theta=0.01, E_lambda=40.0, U_a=0.5, U_b=1.5)
    reference = lmo_rdp_as_published(m, ORDERS)
    for form in (lmo_rdp_as_published(ours, ORDERS), lmo_rdp_as_published(public, ORDERS),
                 lmo_rdp_as_published(None, ORDERS, **ours), lmo_rdp_as_published(PublishedParameters(**ours), ORDERS)):
        np.testing.assert_array_equal(form, reference)


GOOD = dict(a1=1.0, a3=0.0, a4=0.0, k=2.0, theta=0.025, lam=1.0, a=0.5, b=1.0)


@pytest.mark.parametrize(
    "call",
    [
        lambda: lmo_rdp_as_published(GOOD, [2.0, 1.0]),
        lambda: lmo_rdp_as_published(GOOD, [0.5]),
        lambda: lmo_rdp_as_published(GOOD, [np.inf]),
        lambda: lmo_rdp_as_published(GOOD, []),
        lambda: lmo_rdp_as_published(GOOD, ORDERS, "theorem_4_3"),
        lambda: lmo_rdp_as_published(GOOD, ORDERS, zero_uniform="zero"),
        lambda: lmo_rdp_as_published({**GOOD, "sigma": 1.0}, ORDERS),
        lambda: lmo_rdp_as_published({k: v for k, v in GOOD.items() if k != "lam"}, ORDERS),
        lambda: lmo_rdp_as_published({**GOOD, "theta": 0.0}, ORDERS),
        lambda: lmo_rdp_as_published({**GOOD, "a1": -0.1}, ORDERS),
        lambda: lmo_rdp_as_published({**GOOD, "a": 2.0}, ORDERS),
        lambda: lmo_rdp_as_published({**GOOD, "k": "x"}, ORDERS),
        lambda: lmo_rdp_as_published(gamma_only(2.0, 0.025, 1.0), ORDERS, a1=1.0),
        lambda: lmo_rdp_as_published(3.0, ORDERS),
        lambda: lmo_epsilon_as_published(GOOD, 0.0),
        lambda: lmo_epsilon_as_published(GOOD, 1e-5, ORDERS, 0),
        lambda: lmo_epsilon_as_published(GOOD, 1e-5, [1.0, 2.0]),
    ],
)
def test_bad_input_is_a_one_line_value_error(call):
    with pytest.raises(ValueError) as info:
        call()
    assert "\n" not in str(info.value)


def test_no_engine_imports_the_published_formulas():
    """Only the module itself (and the deprecated-alias table) may name it: no engine,
    calibrator, search, trainer or command imports the uncertified formulas."""
    root = Path(dpforge.__file__).parent
    sources = [path for path in root.rglob("*.py") if path.parts[len(root.parts)] not in ("tests", "benchmarks", "examples", "build")]
    assert any(path.name == "published.py" for path in sources)  # the walk sees the package
    names = ("rdp.published", "rdp import published", "lmo_published")
    users = [
        path
        for path in sources
        if path.name not in ("published.py", "_deprecated.py") and any(name in path.read_text() for name in names)
    ]
    assert users == [], users
