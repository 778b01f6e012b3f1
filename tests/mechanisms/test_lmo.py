"""LMO mechanism: closed forms against integration over eta, the privacy-loss pair, PRV
accounting of subsampled LMO, exact RDP against mpmath, and the vector guard."""

from __future__ import annotations

import json
import math

import mpmath as mp
import numpy as np
import pytest
from scipy import integrate, stats

from dpforge.accounting import epsilon
from dpforge.accounting.rdp.lmo import (
    laplace_rdp_at_shift,
    lmo_pure_cap,
    lmo_rdp_exact,
    lmo_rdp_mgf_bound,
    noise_rdp,
)
from dpforge.mechanisms import LMO, Composed, Laplace, PoissonSampled

MIXED = LMO(
    weights=(0.5, 0.2, 0.3),
    gamma_shape=3.0,
    gamma_scale=0.7,
    exponential_rate=2.0,
    uniform_low=0.3,
    uniform_high=1.5,
    sensitivity=1.3,
)
FINITE_VARIANCE = LMO(weights=(0.6, 0.0, 0.4), gamma_shape=4.0, gamma_scale=0.5, uniform_low=0.5, uniform_high=2.0)


def density_by_integration(mechanism: LMO, x: float) -> float:
    """E_eta[(eta/2) e^{-eta |x|}] by quadrature over each component's law of eta."""
    t = abs(x)
    w_gamma, w_exp, w_uniform = mechanism.weights
    laws = [
        (w_gamma, stats.gamma(mechanism.gamma_shape, scale=mechanism.gamma_scale)),
        (w_exp, stats.expon(scale=1.0 / mechanism.exponential_rate)),
        (w_uniform, stats.uniform(mechanism.uniform_low, mechanism.uniform_high - mechanism.uniform_low)),
    ]
    total = 0.0
    for weight, law in laws:
        if weight > 0:
            low, high = law.support()
            total += weight * integrate.quad(
                lambda e: 0.5 * e * np.exp(-e * t) * law.pdf(e), low, high, epsabs=0, epsrel=1e-12, limit=200
            )[0]
    return total


@pytest.mark.parametrize("x", [0.0, 1e-9, 1e-3, 0.5, -2.0, 10.0, 100.0])
def test_density_matches_integration_over_eta(x):
    expected = density_by_integration(MIXED, x)
    assert float(MIXED.pdf(x)) == pytest.approx(expected, rel=1e-9)


def test_log_density_is_finite_far_out_and_for_tiny_eta():
    tiny = LMO(weights=(0.0, 0.0, 1.0), uniform_low=1e-12, uniform_high=2e-12)
    xs = np.array([0.0, 1.0, 1e3, 1e6])
    for mechanism in (MIXED, tiny):
        values = mechanism.logpdf(xs)
        assert np.all(np.isfinite(values)) and np.all(np.diff(values) <= 0)
    # exponential part: density (1/(2 lam)) (1 + t/lam)^-2 dominates far out
    far = float(MIXED.logpdf(1e6))
    expected = math.log(0.2 / (2 * 2.0)) - 2 * math.log1p(1e6 / 2.0)
    assert far == pytest.approx(expected, rel=1e-6)


def test_cdf_matches_integrated_density_and_both_tails():
    for x in (-3.0, -0.2, 0.0, 0.7, 4.0):
        integral = integrate.quad(lambda y: float(MIXED.pdf(y)), -np.inf, x, epsabs=0, epsrel=1e-11, limit=200)[0]
        assert float(MIXED.cdf(x)) == pytest.approx(integral, rel=1e-8)
    # tails in their own precision: Pr(X > 1e8) with the exponential part ~ 0.2 * lam/(2 t)
    assert float(MIXED.sf(1e8)) == pytest.approx(0.5 * 0.2 * 2.0 / (2.0 + 1e8), rel=1e-6)
    assert float(MIXED.cdf(-1e8)) == float(MIXED.sf(1e8))


def test_moments_closed_forms_and_sampler():
    # Gamma(k, theta): E[1/eta] = 1/(theta (k-1)), E[1/eta^2] = 1/(theta^2 (k-1)(k-2)); U(lo, hi): log(hi/lo)/(hi-lo), 1/(lo hi)
    m = FINITE_VARIANCE
    mean_abs = 0.6 / (0.5 * 3.0) + 0.4 * math.log(4.0) / 1.5
    variance = 2 * (0.6 / (0.25 * 3.0 * 2.0) + 0.4 / (0.5 * 2.0))
    assert m.mean_absolute() == pytest.approx(mean_abs, rel=1e-12)
    assert m.variance() == pytest.approx(variance, rel=1e-12)
    draws = m.sample(400_000, rng=3)
    assert np.mean(np.abs(draws)) == pytest.approx(mean_abs, rel=0.02)
    assert stats.kstest(draws[:20_000], lambda x: m.cdf(x)).pvalue > 1e-3
    assert np.array_equal(m.sample((3, 4), rng=7), m.sample((3, 4), rng=7))
    assert math.isinf(MIXED.variance()) and math.isinf(MIXED.mean_absolute())  # exponential part


def test_mixture_mgf_of_eta():
    for t in (-3.0, -0.5, 0.2, 1.0):
        expected = (
            0.5 * (1 - 0.7 * t) ** -3.0
            + 0.2 * 2.0 / (2.0 - t)
            + 0.3 * (math.exp(1.5 * t) - math.exp(0.3 * t)) / (1.2 * t)
        )
        assert float(MIXED.log_eta_mgf(t)) == pytest.approx(math.log(expected), rel=1e-12)
    assert math.isinf(float(MIXED.log_eta_mgf(2.0)))  # beyond the exponential part's rate


def test_pair_distribution_is_a_law_and_matches_sampling():
    pair = MIXED.dominating_pair()
    grid = np.linspace(-1.2 * pair.r_max, 1.2 * pair.r_max, 41)
    for under in ("P", "Q"):
        total = pair.r_cdf(grid, under) + pair.r_sf(grid, under)
        assert np.allclose(total, 1.0, atol=1e-13)
        assert np.all(np.diff(pair.r_cdf(grid, under)) >= -1e-15)
    noise = MIXED.sample(200_000, rng=11)
    checks = np.linspace(-0.8 * pair.r_max, 0.8 * pair.r_max, 7)
    r_q = pair.log_likelihood_ratio(noise)
    r_p = pair.log_likelihood_ratio(noise + MIXED.sensitivity)
    for c in checks:
        assert float(pair.r_cdf(c, "Q")) == pytest.approx(np.mean(r_q <= c), abs=4e-3)
        assert float(pair.r_cdf(c, "P")) == pytest.approx(np.mean(r_p <= c), abs=4e-3)
    # Q-law is the e^{-r} tilt of the P-law: E_P[e^{-r}] = 1
    assert np.mean(np.exp(-r_p)) == pytest.approx(1.0, abs=0.02)


def test_narrowing_mixture_reduces_to_laplace():
    """The fields cannot express a point mass (uniform_low < uniform_high is required),
    so the degenerate case is reached as a limit: every number converges to Laplace's."""
    laplace = Laplace(scale=1.0)
    orders = np.array([1.5, 2.0, 8.0, 64.0])
    previous_gap = math.inf
    for width in (1e-2, 1e-4, 1e-6):
        narrow = LMO(weights=(0.0, 0.0, 1.0), uniform_low=1 - width, uniform_high=1 + width)
        x = np.array([-5.0, -0.3, 0.0, 0.4, 7.0])
        assert np.allclose(narrow.pdf(x), 0.5 * np.exp(-np.abs(x)), rtol=10 * width)
        assert narrow.variance() == pytest.approx(2.0, rel=10 * width)
        assert narrow.max_privacy_loss == pytest.approx(1.0, rel=10 * width)
        gap = np.max(np.abs(lmo_rdp_exact(narrow, orders) - laplace_rdp_at_shift(1.0, orders)))
        assert gap <= 10 * width and gap <= previous_gap
        previous_gap = gap
    narrow = LMO(weights=(0.0, 0.0, 1.0), uniform_low=1 - 1e-6, uniform_high=1 + 1e-6)
    for description in (narrow, Composed([(PoissonSampled(narrow, 0.05), 200)])):
        lmo_result = epsilon(description if description is not narrow else Composed([(narrow, 3)]), 1e-5)
        reference = epsilon(
            Composed([(PoissonSampled(laplace, 0.05), 200)]) if description is not narrow else Composed([(laplace, 3)]),
            1e-5,
        )
        # the certified intervals overlap and agree to the engine accuracy
        assert lmo_result.lower <= reference.upper * (1 + 1e-5) and reference.lower <= lmo_result.upper * (1 + 1e-5)
        assert lmo_result.upper == pytest.approx(reference.upper, rel=2e-3)


def _mp_rdp(mechanism: LMO, alpha: float, shift: float) -> float:
    mp.mp.dps = 30

    def f(x):
        return mp.mpf(float(mechanism.pdf(float(x))))

    integral = mp.quad(
        lambda x: f(x - shift) ** alpha * f(x) ** (1 - alpha), [-mp.inf, -10, 0, shift / 2, shift, shift + 10, mp.inf]
    )
    return float(mp.log(integral) / (alpha - 1))


@pytest.mark.parametrize("alpha", [1.5, 2.0, 7.0, 20.0])
@pytest.mark.parametrize("shift", [0.4, 2.0])
def test_exact_rdp_against_mpmath(alpha, shift):
    exact = float(lmo_rdp_exact(MIXED, [alpha], shift)[0])
    assert exact == pytest.approx(_mp_rdp(MIXED, alpha, shift), rel=1e-8)


def test_mgf_bound_and_pure_cap_are_upper_bounds():
    orders = np.array([1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 50.0, 500.0])
    for mechanism in (MIXED, FINITE_VARIANCE, LMO(weights=(0, 0, 1), uniform_low=0.2, uniform_high=3.0, sensitivity=2.0)):
        exact = lmo_rdp_exact(mechanism, orders)
        mgf = lmo_rdp_mgf_bound(mechanism, orders)
        cap = lmo_pure_cap(mechanism, orders)
        assert np.all(exact <= mgf * (1 + 1e-9))
        assert np.all(exact <= cap * (1 + 1e-9))
    # the MGF bound turns infinite once (alpha - 1) * sensitivity reaches the exponential rate
    assert np.isinf(lmo_rdp_mgf_bound(MIXED, [3.0])[0]) and np.isfinite(lmo_rdp_exact(MIXED, [3.0])[0])


def test_subsampled_lmo_prv_is_within_rdp_and_contains_sampled_delta():
    description = Composed([(PoissonSampled(FINITE_VARIANCE, 0.05), 20)])
    result = epsilon(description, 1e-4)
    rdp_result = epsilon(description, 1e-4, engine="rdp")
    assert result.upper <= rdp_result.upper
    # Monte-Carlo delta at the certified epsilons, remove direction (the larger one here)
    rng = np.random.default_rng(5)
    pair = FINITE_VARIANCE.dominating_pair()
    draws, steps, q = 400_000, 20, 0.05
    loss = np.zeros(draws)
    for _ in range(steps):
        noise = FINITE_VARIANCE.sample(draws, rng)
        included = rng.random(draws) < q
        r = pair.log_likelihood_ratio(noise + np.where(included, FINITE_VARIANCE.sensitivity, 0.0))
        loss += np.logaddexp(math.log1p(-q), math.log(q) + r)
    for eps_value, side in ((result.upper, "upper"), (result.lower * 0.95, "lower")):
        terms = np.clip(1 - np.exp(eps_value - loss), 0.0, None)
        mean, err = terms.mean(), 4 * terms.std() / math.sqrt(draws)
        if side == "upper":
            assert mean <= 1e-4 + err
        else:
            assert mean >= 1e-4 - err


def test_vector_release_is_not_a_scalar_one():
    vector = LMO(weights=(0.6, 0.0, 0.4), gamma_shape=4.0, gamma_scale=0.5, uniform_low=0.5, uniform_high=2.0, dimension=50)
    scalar = LMO(weights=(0.6, 0.0, 0.4), gamma_shape=4.0, gamma_scale=0.5, uniform_low=0.5, uniform_high=2.0)
    orders = np.array([2.0, 8.0, 32.0])
    vector_rdp, label = noise_rdp(vector, orders)
    scalar_rdp, _ = noise_rdp(scalar, orders)
    assert "vector guard l2" in label
    # the scalar accountant under-reports the vector release (shift spread over coordinates)
    assert np.all(vector_rdp > 1.5 * scalar_rdp)
    # and the guard's value is the worst case: a few random directions on the sphere stay below it
    rng = np.random.default_rng(0)
    for _ in range(3):
        direction = np.abs(rng.normal(size=50))
        direction /= np.linalg.norm(direction)
        spread = sum(lmo_rdp_exact(scalar, orders, shift=v) for v in direction * scalar.sensitivity)
        assert np.all(spread <= vector_rdp * (1 + 1e-9))
    with pytest.raises(ValueError, match="vector release"):
        epsilon(vector, 1e-5)
    with pytest.raises(ValueError, match="vector release"):
        epsilon(Laplace(1.0, dimension=3, norm="l2"), 1e-5)
    l1_values, l1_label = noise_rdp(Laplace(1.0, dimension=3, norm="l1"), orders)
    assert "vector guard l1" in l1_label and np.allclose(l1_values, laplace_rdp_at_shift(1.0, orders))


def test_json_round_trip():
    data = json.loads(json.dumps(MIXED.to_dict()))
    assert LMO.from_dict(data) == MIXED


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"weights": (0.5, 0.6, 0.0)}, "sum to 1"),
        ({"weights": (-0.1, 0.6, 0.5)}, "weights"),
        ({"weights": (1.0, 0.0)}, "three"),
        ({"weights": (1.0, 0.0, float("nan"))}, "weights"),
        ({"weights": "100"}, "weights"),  # a string was read as (1, 0, 0)
        ({"weights": ("1", 0, 0)}, "weights"),
        ({"weights": 5}, "weights"),
        ({"gamma_shape": 0.0}, "gamma_shape"),
        ({"gamma_scale": -1.0}, "gamma_scale"),
        ({"exponential_rate": float("inf")}, "exponential_rate"),
        ({"uniform_low": 2.0, "uniform_high": 1.0}, "uniform_low"),
        ({"uniform_low": 0.0}, "uniform_low"),
        ({"dimension": 0}, "dimension"),
        ({"norm": "linf"}, "norm"),
    ],
)
def test_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LMO(**kwargs)


def test_bad_orders_and_files():
    with pytest.raises(ValueError, match="orders"):
        lmo_rdp_exact(MIXED, [1.0])
    with pytest.raises(ValueError, match="orders"):
        lmo_rdp_exact(MIXED, [float("nan")])
    with pytest.raises(ValueError, match="colour: not a field of a lmo mechanism"):
        LMO.from_dict({"weights": [1, 0, 0], "colour": 1})
    with pytest.raises(ValueError, match="weights"):
        LMO.from_dict({"gamma_shape": 2.0})


def test_rdp_engine_reports_its_lmo_bound():
    description = Composed([(PoissonSampled(FINITE_VARIANCE, 0.01), 100)])
    exact = epsilon(description, 1e-5, engine="rdp")
    loose = epsilon(description, 1e-5, engine="rdp", lmo_bound="mgf")
    assert exact.upper <= loose.upper
    assert "exact quadrature" in exact.accuracy["bounds"][0] and "MGF" in loose.accuracy["bounds"][0]
    with pytest.raises(ValueError, match="lmo_bound"):
        epsilon(description, 1e-5, engine="rdp", lmo_bound="published")


@pytest.mark.parametrize("weights", [("1", 0, 0), (float("nan"), 0, 1), (-0.1, 0.6, 0.5), (float("inf"), 0, 0)])
def test_a_bad_weight_is_named_with_the_allowed_range(weights):
    from dpforge.mechanisms import LMO

    # a non-number said only "must be a finite number", without the range
    with pytest.raises(ValueError, match=r"weights \(gamma\) must be a finite number >= 0 \(three summing to 1\)"):
        LMO(weights=weights)


@pytest.mark.parametrize("parameters", [{"gamma_shape": 1e-300}, {"weights": (0, 1, 0), "exponential_rate": 1e300}])
def test_exact_rdp_outside_the_double_range_is_a_limit_error(parameters):
    from dpforge.errors import LimitError
    from dpforge.mechanisms import LMO

    # the quadrature's range reached inf: an OverflowError from int(inf) before
    with pytest.raises(LimitError, match="outside the floating-point range"):
        lmo_rdp_exact(LMO(**parameters), [2.0])


def test_bad_shapes_shifts_and_points():
    with pytest.raises(ValueError, match="shift"):
        lmo_rdp_exact(MIXED, [2.0], shift=-1.0)
    with pytest.raises(ValueError, match="shift"):
        lmo_rdp_mgf_bound(MIXED, [2.0], shift=float("nan"))
    with pytest.raises(ValueError, match="size"):
        MIXED.sample(-1)
    with pytest.raises(ValueError, match="x must not be NaN"):
        MIXED.logpdf([0.0, float("nan")])
    with pytest.raises(ValueError, match="x must not be NaN"):
        MIXED.cdf(float("nan"))
    assert float(MIXED.logpdf(float("inf"))) == -math.inf and float(MIXED.cdf(float("inf"))) == 1.0


def test_summary_names_only_the_active_components():
    from dpforge.mechanisms import LMO

    mixed = LMO(weights=(0.3, 0.5, 0.2), gamma_shape=2.0, exponential_rate=2.0)
    assert mixed.summary() == "0.3 Gamma(k=2, theta=1) + 0.5 Exp(rate=2) + 0.2 U(0.5, 1)"
    assert LMO(weights=(0.0, 1.0, 0.0)).summary() == "1 Exp(rate=1)"
