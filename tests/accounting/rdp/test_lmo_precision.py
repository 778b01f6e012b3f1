"""Tiny LMO divergences (vector releases put ~1e-12 on each coordinate at d ~ 1e8) are not
lost to rounding: the exact route, the MGF route and the pure-DP cap are compared with an
independent mpmath integral of the closed-form densities, and the guards refuse curves
whose values were lost.

The reference integrates the excess I_a - 1 = int q (r^a - 1 - a (r - 1)) dx, r = p/q, at
60 digits (the first-order term integrates to 0); D_a = log1p(excess)/(a - 1).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpforge.accounting.rdp import epsilon_from_rdp, rdp_of_component
from dpforge.accounting.rdp.formulas import randomized_response_rdp
from dpforge.accounting.rdp.lmo import (
    _log_phi,
    lmo_pure_cap,
    lmo_rdp_exact,
    lmo_rdp_mgf_bound,
    noise_rdp,
)
from dpforge.errors import LimitError, ParameterError
from dpforge.mechanisms import LMO, Gaussian
from dpforge.mechanisms.combinators import Component

mp = pytest.importorskip("mpmath")

#: every component, a wide mixing law (so the joint-convexity bound has a real gap)
MIXTURE = LMO(weights=(0.5, 0.2, 0.3), gamma_shape=3.0, gamma_scale=0.05, exponential_rate=20.0,
              uniform_low=0.05, uniform_high=0.2)
#: the LMO-DP paper's near-Laplace noise (a narrow uniform law of eta)
NARROW = LMO(weights=(0.0, 0.0, 1.0), uniform_low=0.010758, uniform_high=0.010769)


def _mp_density(m: LMO):
    """f(t) = sum_k w_k E[(eta/2) e^{-eta t}] in closed form (Lomax for Gamma and Exponential;
    the uniform difference formula, or its Taylor series where hi t < 1e-3)."""
    wg, we, wu = (mp.mpf(w) for w in m.weights)
    k, th, lam = mp.mpf(m.gamma_shape), mp.mpf(m.gamma_scale), mp.mpf(m.exponential_rate)
    lo, hi = mp.mpf(m.uniform_low), mp.mpf(m.uniform_high)

    def f(x):
        t = abs(x)
        total = wg * k * th / 2 * (1 + th * t) ** (-(k + 1)) + we / (2 * lam) * (1 + t / lam) ** (-2)
        if t * hi < mp.mpf("1e-3"):
            total += wu * mp.fsum((-t) ** n / mp.factorial(n) * (hi ** (n + 2) - lo ** (n + 2))
                                  / (2 * (n + 2) * (hi - lo)) for n in range(30))
        else:
            total += wu * ((1 + lo * t) * mp.exp(-lo * t) - (1 + hi * t) * mp.exp(-hi * t)) / (2 * (hi - lo) * t**2)
        return total

    return f


def mp_renyi(m: LMO, alpha: float, shift: float) -> float:
    """D_alpha(f(. - v) || f) by mpmath, through the excess integral (no log of a number near 1)."""
    with mp.workdps(60):
        f, a, v = _mp_density(m), mp.mpf(alpha), mp.mpf(shift)

        def excess(x):
            q = f(x)
            r = f(x - v) / q
            return q * (r**a - 1 - a * (r - 1))

        scale = 1 / mp.mpf(m.uniform_low if m.weights[2] == 1.0 else 0.1)
        points = [-mp.inf, -100 * scale, -scale, 0, v, v + scale, v + 100 * scale, mp.inf]
        return float(mp.log1p(mp.quad(excess, points)) / (a - 1))


def test_phi_keeps_relative_precision_against_mpmath():
    orders = np.array([1.001, 1.25, 2.0, 7.5, 256.0, 1e4])
    ratios = np.array([1e-14, -1e-14, 1e-9, -1e-9, 1e-5, -1e-5, 1e-3, -1e-3, 0.1, -0.1, 1.0, -1.0, 40.0, -40.0, 900.0])
    got = _log_phi(orders, ratios)
    with mp.workdps(50):
        for i, a in enumerate(orders):
            for j, x in enumerate(ratios):
                a_, x_ = mp.mpf(a), mp.mpf(x)
                expected = float(mp.log(mp.exp(a_ * x_) - 1 - a_ * mp.expm1(x_)))
                assert got[i, j] == pytest.approx(expected, rel=1e-13, abs=1e-13), (a, x)
    assert np.all(np.isneginf(_log_phi(orders, np.array([0.0]))))


@pytest.mark.parametrize(
    "mechanism, shift",
    [
        (MIXTURE, 1e-5),
        pytest.param(MIXTURE, 1e-3, marks=pytest.mark.slow),
        pytest.param(MIXTURE, 1e-2, marks=pytest.mark.slow),
        (NARROW, 1 / math.sqrt(125_000_000)),
        pytest.param(NARROW, 1e-2, marks=pytest.mark.slow),
    ],
)
def test_exact_and_mgf_routes_bound_the_mpmath_divergence_at_small_shifts(mechanism, shift):
    orders = np.array([1.5, 4.0])
    truth = np.array([mp_renyi(mechanism, a, shift) for a in orders])
    assert np.all((truth > 1e-13) & (truth < 1e-5))  # the range that used to be lost
    exact = lmo_rdp_exact(mechanism, orders, shift)
    mgf = lmo_rdp_mgf_bound(mechanism, orders, shift)
    # both are upper bounds (up to the reference's own 1e-12) and the exact route is precise
    assert np.all(exact >= truth * (1 - 1e-12)) and np.all(mgf >= truth * (1 - 1e-12))
    np.testing.assert_allclose(exact, truth, rtol=1e-5)
    # the exact route is below the joint-convexity bound, up to its own rounding allowance
    assert np.all(exact <= mgf * (1 + 1e-5))
    if mechanism is MIXTURE:
        assert np.all(exact < 0.9 * mgf)  # a wide mixing law: a real gap


def test_exact_route_falls_back_where_the_quadrature_cannot_resolve_the_shift():
    """At d = 1e18 the per-coordinate log-ratio (~1e-11) is mostly rounding: the vector
    guard says so and reports the MGF/pure-DP bound there, still above the truth."""
    vector = LMO(weights=(0.0, 0.0, 1.0), uniform_low=0.010758, uniform_high=0.010769, dimension=10**18)
    orders = np.array([1.5, 4.0])
    values, label = noise_rdp(vector, orders)
    assert "quadrature unresolved against rounding" in label
    truth = vector.dimension * np.array([mp_renyi(NARROW, a, 1e-9) for a in orders])
    assert np.all(values >= truth * (1 - 1e-12))
    np.testing.assert_allclose(values, truth, rtol=1e-5)


def test_pure_dp_cap_stays_above_the_truth_at_tiny_shifts():
    """eps0 = log f(0) - log f(v) is a difference of rounded numbers; the cap adds its
    allowance, and randomised response keeps tiny eps0 (it is nearly tight for Laplace)."""
    for shift in (1e-4, 1e-8):
        truth = mp_renyi(NARROW, 2.0, shift)
        assert lmo_pure_cap(NARROW, [2.0], shift)[0] >= truth


@pytest.mark.parametrize("eps", [1e-11, 1e-6, 1e-3, 0.7])
def test_randomized_response_rdp_keeps_tiny_epsilon(eps):
    orders = [1.001, 2.0, 100.0]
    with mp.workdps(50):
        e = mp.mpf(eps)
        p = mp.exp(e) / (1 + mp.exp(e))
        expected = [float(mp.log(p * mp.exp((a - 1) * e) + (1 - p) * mp.exp(-(a - 1) * e)) / (a - 1))
                    for a in map(mp.mpf, orders)]
    np.testing.assert_allclose(randomized_response_rdp(eps, orders), expected, rtol=1e-13)


# -- guards --------------------------------------------------------------------------------
def test_conversion_refuses_a_zero_beside_positive_values_and_negative_values():
    orders = [1.25, 2.0, 8.0]
    with pytest.raises(ParameterError, match="all 0"):
        epsilon_from_rdp(orders, [0.0, 1e-6, 1e-4], 1e-10)
    with pytest.raises(ParameterError, match=">= 0"):
        epsilon_from_rdp(orders, [-1e-18, 1e-6, 1e-4], 1e-10)
    assert epsilon_from_rdp(orders, [0.0, 0.0, 0.0], 1e-10)[0] == 0.0  # equal laws
    assert epsilon_from_rdp(orders, [1e-6, 2e-6, 1e-4], 1e-10)[0] > 0


def test_curve_refuses_an_rdp_lost_below_the_floating_point_floor():
    with pytest.raises(LimitError, match="floating-point floor"):
        rdp_of_component(Component(Gaussian(noise_multiplier=1e200), 1.0, 1), [2.0, 8.0])
