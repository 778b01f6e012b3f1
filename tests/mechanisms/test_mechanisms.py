"""Mechanism descriptions: constructor validation, privacy-loss laws against scipy.

Coordinates: ``privacy_loss(x)`` is evaluated at outputs x of the *dominating pair* in
units of the noise: for ``Gaussian(sigma)`` P0 = N(1/sigma, 1) vs Q0 = N(0, 1); for
``Laplace(b, c)`` P0 = Lap(c/b, 1) vs Q0 = Lap(0, 1).  Poisson subsampling at rate q
(docs/design.md §2): remove P = (1-q) Q0 + q P0 vs Q = Q0; add P = Q0 vs Q = (1-q) Q0 + q P0.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import integrate, optimize, stats
from scipy.special import logsumexp

from dpforge.mechanisms import (
    Component,
    Composed,
    Gaussian,
    Laplace,
    PoissonSampled,
    PureDP,
    RandomizedResponse,
    flatten,
)

FEW = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])

BAD_POSITIVE = [0, 0.0, -1.0, -1e-300, float("nan"), float("inf"), -float("inf"), True, False, "1.0", None, [1.0]]
BAD_NON_NEGATIVE = [-1.0, -1e-300, float("nan"), float("inf"), True, False, "1.0", None]


# ----------------------------------------------------------------------------------------
# constructor validation
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", BAD_POSITIVE, ids=repr)
@pytest.mark.parametrize(
    "build, name",
    [
        (lambda v: Gaussian(v), "noise_multiplier"),
        (lambda v: Gaussian(noise_multiplier=1.0, sensitivity=v), "sensitivity"),
        (lambda v: Laplace(v), "scale"),
        (lambda v: Laplace(scale=1.0, sensitivity=v), "sensitivity"),
    ],
    ids=["Gaussian.noise_multiplier", "Gaussian.sensitivity", "Laplace.scale", "Laplace.sensitivity"],
)
def test_positive_parameters_are_validated(build, name, value):
    with pytest.raises(ValueError, match=name):
        build(value)


@pytest.mark.parametrize("value", BAD_NON_NEGATIVE, ids=repr)
def test_pure_dp_epsilon_is_validated(value):
    with pytest.raises(ValueError, match="epsilon"):
        PureDP(value)


def test_pure_dp_accepts_zero_and_alias():
    assert PureDP(0.0).epsilon == 0.0  # a release that reveals nothing is 0-DP
    assert RandomizedResponse is PureDP


@pytest.mark.parametrize("value", [1, 2.5, np.float64(0.3), np.float32(2.0), np.int64(3), 1e-300, 1e300])
def test_valid_numbers_are_accepted(value):
    Gaussian(value)
    Laplace(value, sensitivity=value)
    PureDP(value)


@pytest.mark.parametrize(
    "rate", [0, 0.0, -0.1, 1.0000001, 2.0, float("nan"), float("inf"), True, "0.5", None], ids=repr
)
def test_sampling_rate_must_be_in_the_half_open_unit_interval(rate):
    with pytest.raises(ValueError, match="sampling_rate"):
        PoissonSampled(Gaussian(1.0), rate)


def test_sampling_rate_one_and_tiny_are_accepted():
    assert PoissonSampled(Gaussian(1.0), 1.0).sampling_rate == 1.0
    assert PoissonSampled(Gaussian(1.0), 1e-12).sampling_rate == 1e-12


@pytest.mark.parametrize("inner", [Composed([(Gaussian(1.0), 2)]), "gaussian", 1.0, None])
def test_poisson_sampled_needs_a_mechanism(inner):
    with pytest.raises(ValueError, match="mechanism"):
        PoissonSampled(inner, 0.1)


@pytest.mark.parametrize("count", [0, -1, 1.5, float("nan"), float("inf"), True, "3", None], ids=repr)
def test_composition_counts_must_be_positive_integers(count):
    with pytest.raises(ValueError, match="count"):
        Composed([(Gaussian(1.0), count)])


def test_composition_accepts_integral_counts():
    assert Composed([(Gaussian(1.0), 10.0)]).parts == ((Gaussian(1.0), 10),)
    assert Composed([(Gaussian(1.0), np.int64(7))]).parts[0][1] == 7


@pytest.mark.parametrize(
    "parts",
    [[], [Gaussian(1.0)], [(Gaussian(1.0),)], [(Gaussian(1.0), 1, 2)], [("gaussian", 1)], [(None, 1)], 5, None, "ab", {Gaussian(1.0): 1}],
    ids=["empty", "bare", "1-tuple", "3-tuple", "str", "None", "number", "no-parts", "string", "mapping"],
)
def test_composition_parts_are_validated(parts):
    with pytest.raises(ValueError, match="Composed.parts"):
        Composed(parts)


def test_descriptions_are_frozen_and_hashable():
    d = Composed([(PoissonSampled(Gaussian(1.0), 0.1), 3), (Laplace(2.0), 1)])
    assert isinstance(d.parts, tuple)
    hash(d)
    with pytest.raises(Exception):
        d.parts = ()  # type: ignore[misc]
    with pytest.raises(Exception):
        Gaussian(1.0).noise_multiplier = 2.0  # type: ignore[misc]


def test_flatten_multiplies_counts_rates_and_merges():
    g = Gaussian(1.0)
    d = Composed(
        [
            (Composed([(PoissonSampled(g, 0.1), 2), (Laplace(1.0), 1)]), 3),
            (PoissonSampled(PoissonSampled(g, 0.5), 0.2), 4),
        ]
    )
    assert flatten(d) == [Component(g, 0.1, 2 * 3 + 4), Component(Laplace(1.0), 1.0, 3)]


# ----------------------------------------------------------------------------------------
# reference densities (scipy) for the subsampled pairs
# ----------------------------------------------------------------------------------------
def base_logpdfs(mechanism):
    """(log p0, log q0) of the dominating pair in noise units."""
    if isinstance(mechanism, Gaussian):
        mu = 1.0 / mechanism.noise_multiplier
        return (lambda x: stats.norm.logpdf(x, loc=mu)), (lambda x: stats.norm.logpdf(x))
    a = mechanism.sensitivity / mechanism.scale
    return (lambda x: stats.laplace.logpdf(x, loc=a)), (lambda x: stats.laplace.logpdf(x))


def subsampled_logpdfs(mechanism, q, direction):
    """(log p, log q) of the subsampled pair in the given direction (docs/design.md §2)."""
    logp0, logq0 = base_logpdfs(mechanism)

    def mixture(x):
        x = np.asarray(x, dtype=float)
        if q >= 1.0:
            return logp0(x)
        return logsumexp(np.stack([np.log1p(-q) + logq0(x), np.log(q) + logp0(x)]), axis=0)

    return (mixture, logq0) if direction == "remove" else (logq0, mixture)


def description(mechanism, q):
    return mechanism if q >= 1.0 else PoissonSampled(mechanism, q)


SUBSAMPLED_CASES = [
    (Gaussian(1.0), 0.01),
    (Gaussian(0.5), 0.3),
    (Gaussian(2.0), 1.0),
    (Gaussian(4.0, sensitivity=3.0), 0.05),
    (Laplace(1.0), 0.02),
    (Laplace(0.4, sensitivity=1.0), 0.5),
    (Laplace(2.0, sensitivity=3.0), 1.0),
]
CASE_IDS = [f"{type(m).__name__}-q{q}" for m, q in SUBSAMPLED_CASES]


@pytest.mark.parametrize("direction", ["remove", "add"])
@pytest.mark.parametrize("mechanism, q", SUBSAMPLED_CASES, ids=CASE_IDS)
def test_privacy_loss_matches_scipy_densities(mechanism, q, direction):
    logp, logq = subsampled_logpdfs(mechanism, q, direction)
    x = np.concatenate([np.linspace(-30.0, 30.0, 601), [0.0, 1.0 / 3.0, 0.5, 1.0, 2.0]])
    expected = logp(x) - logq(x)
    got = description(mechanism, q).privacy_loss(x, direction)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)


@FEW
@given(
    sigma=st.floats(0.2, 10.0),
    q=st.floats(1e-5, 1.0),
    direction=st.sampled_from(["remove", "add"]),
    laplace=st.booleans(),
)
def test_privacy_loss_matches_scipy_densities_randomised(sigma, q, direction, laplace):
    mechanism = Laplace(sigma) if laplace else Gaussian(sigma)
    logp, logq = subsampled_logpdfs(mechanism, q, direction)
    x = np.linspace(-20.0, 20.0, 401)
    got = description(mechanism, q).privacy_loss(x, direction)
    np.testing.assert_allclose(got, logp(x) - logq(x), rtol=1e-9, atol=1e-10)


def test_sensitivity_and_scale_enter_only_through_their_ratio():
    assert Gaussian(2.0, sensitivity=5.0).dominating_pair() == Gaussian(2.0).dominating_pair()
    assert Laplace(4.0, sensitivity=2.0).dominating_pair() == Laplace(2.0).dominating_pair()


def test_pure_dp_privacy_loss_takes_the_two_values():
    eps = 0.7
    np.testing.assert_allclose(PureDP(eps).privacy_loss(np.array([0.0, 1.0])), [-eps, eps])


# ----------------------------------------------------------------------------------------
# distribution functions of L
# ----------------------------------------------------------------------------------------
ALL_DESCRIPTIONS = [
    Gaussian(1.0),
    Gaussian(0.3),
    Laplace(1.0),
    Laplace(0.5, sensitivity=2.0),
    PureDP(0.8),
    PureDP(0.0),
    PoissonSampled(Gaussian(1.0), 0.01),
    PoissonSampled(Gaussian(0.6), 0.25),
    PoissonSampled(Laplace(1.0), 0.05),
    PoissonSampled(Laplace(0.3), 0.9),
    PoissonSampled(PureDP(2.0), 0.1),
]


def grid_with_atoms(loss):
    lo, hi = loss.support
    lo = max(lo, -60.0) if math.isfinite(lo) else -60.0
    hi = min(hi, 60.0) if math.isfinite(hi) else 60.0
    ells = np.concatenate([np.linspace(lo - 1.0, hi + 1.0, 997), np.asarray(loss.atoms, dtype=float), [lo, hi, 0.0]])
    return np.sort(ells)


@pytest.mark.parametrize("under", ["P", "Q"])
@pytest.mark.parametrize("direction", ["remove", "add"])
@pytest.mark.parametrize("d", ALL_DESCRIPTIONS, ids=repr)
def test_cdf_plus_sf_is_one(d, direction, under):
    loss = d.privacy_loss_distribution(direction)
    ells = grid_with_atoms(loss)
    cdf = loss.cdf(ells, under=under)
    sf = loss.sf(ells, under=under)
    assert np.all((cdf >= 0.0) & (cdf <= 1.0)) and np.all((sf >= 0.0) & (sf <= 1.0))
    np.testing.assert_allclose(cdf + sf, 1.0, rtol=0, atol=1e-14)
    # the strict/inclusive pair: Pr(L < l) + Pr(L >= l) = 1
    np.testing.assert_allclose(
        loss.cdf(ells, under=under, inclusive=False) + loss.sf(ells, under=under, inclusive=True), 1.0, atol=1e-14
    )
    # monotone, and the atoms carry the jump
    assert np.all(np.diff(cdf) >= -1e-15)
    assert np.all(loss.cdf(ells, under=under, inclusive=False) <= cdf + 1e-15)


def _x_intervals_where_loss_at_most(loss_of_x, ell, pieces):
    """Subintervals of the pieces (on each of which L(x) is monotone or constant) where L(x) <= l."""
    out = []
    for a, b in pieces:
        la, lb = float(loss_of_x(a)), float(loss_of_x(b))
        if max(la, lb) <= ell:
            out.append((a, b))
        elif min(la, lb) > ell:
            continue
        else:
            root = optimize.brentq(lambda x: float(loss_of_x(x)) - ell, a, b, xtol=1e-14, rtol=1e-15)
            out.append((a, root) if la <= ell else (root, b))
    return out


def _integrate_density(logpdf, intervals, weight=None):
    total = 0.0
    for a, b in intervals:
        if weight is None:
            f = lambda x: math.exp(logpdf(x))  # noqa: E731
        else:
            f = lambda x: math.exp(logpdf(x) + weight(x))  # noqa: E731
        value, _ = integrate.quad(f, a, b, epsabs=1e-14, epsrel=1e-11, limit=200)
        total += value
    return total


def scalar_logpdfs(mechanism, q, direction):
    """Fast scalar versions of :func:`subsampled_logpdfs` for quadrature (checked against it below)."""
    if isinstance(mechanism, Gaussian):
        mu = 1.0 / mechanism.noise_multiplier
        c = 0.5 * math.log(2.0 * math.pi)
        logp0 = lambda x: -0.5 * (x - mu) ** 2 - c  # noqa: E731
        logq0 = lambda x: -0.5 * x * x - c  # noqa: E731
    else:
        a = mechanism.sensitivity / mechanism.scale
        logp0 = lambda x: -abs(x - a) - math.log(2.0)  # noqa: E731
        logq0 = lambda x: -abs(x) - math.log(2.0)  # noqa: E731

    def mixture(x):
        u, v = math.log1p(-q) + logq0(x), math.log(q) + logp0(x)
        m = max(u, v)
        return m + math.log(math.exp(u - m) + math.exp(v - m))

    return (mixture, logq0) if direction == "remove" else (logq0, mixture)


def _pieces(mechanism):
    if isinstance(mechanism, Gaussian):
        mu = 1.0 / mechanism.noise_multiplier
        return [(-40.0, 0.5 * mu), (0.5 * mu, 40.0 + mu)]
    a = mechanism.sensitivity / mechanism.scale
    return [(-60.0, 0.0), (0.0, a), (a, 60.0 + a)]


@pytest.mark.parametrize("direction", ["remove", "add"])
@pytest.mark.parametrize(
    "mechanism, q",
    [(Gaussian(1.0), 0.05), (Gaussian(0.7), 0.5), (Laplace(1.0), 0.05), (Laplace(0.5), 0.3)],
    ids=["gauss-q0.05", "gauss-q0.5", "laplace-q0.05", "laplace-q0.3"],
)
def test_cdf_under_q_is_the_exponential_tilt_of_p(mechanism, q, direction):
    """Pr_Q(L <= l) = int_{L(x) <= l} e^{-L(x)} p(x) dx, and both cdfs match quadrature of
    the scipy densities over {x : L(x) <= l}."""
    d = PoissonSampled(mechanism, q)
    loss = d.privacy_loss_distribution(direction)
    logp, logq = scalar_logpdfs(mechanism, q, direction)
    ref_p, ref_q = subsampled_logpdfs(mechanism, q, direction)
    xs = np.linspace(-20.0, 20.0, 81)
    np.testing.assert_allclose([logp(x) for x in xs], ref_p(xs), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose([logq(x) for x in xs], ref_q(xs), rtol=1e-12, atol=1e-12)
    loss_of_x = lambda x: float(d.privacy_loss(x, direction))  # noqa: E731
    lo, hi = loss.support
    lo = lo if math.isfinite(lo) else -8.0
    hi = hi if math.isfinite(hi) else 8.0
    ells = np.linspace(lo + 1e-3, hi - 1e-3, 6)
    for ell in ells:
        region = _x_intervals_where_loss_at_most(loss_of_x, ell, _pieces(mechanism))
        under_p = _integrate_density(logp, region)
        tilted = _integrate_density(logp, region, weight=lambda x: -loss_of_x(x))
        under_q = _integrate_density(logq, region)
        got_p = float(loss.cdf(ell, under="P"))
        got_q = float(loss.cdf(ell, under="Q"))
        assert got_p == pytest.approx(under_p, rel=1e-7, abs=1e-12), ell
        assert got_q == pytest.approx(tilted, rel=1e-7, abs=1e-12), ell
        assert got_q == pytest.approx(under_q, rel=1e-7, abs=1e-12), ell


@pytest.mark.parametrize("direction", ["remove", "add"])
@pytest.mark.parametrize(
    "d", [PoissonSampled(Gaussian(1.0), 0.05), PoissonSampled(Laplace(1.0), 0.1), Gaussian(0.8)], ids=repr
)
def test_cdf_under_q_by_stieltjes_integral_of_cdf_under_p(d, direction):
    """Same identity, from dpforge's own P-law only: F_Q(l) = int_{-inf}^{l} e^{-t} dF_P(t),
    computed by integration by parts: e^{-l} F_P(l) + int_{-inf}^{l} e^{-t} F_P(t) dt."""
    loss = d.privacy_loss_distribution(direction)
    lo, hi = loss.support
    start = lo if math.isfinite(lo) else -30.0
    stop = hi if math.isfinite(hi) else 6.0
    for ell in np.linspace(start + 0.05 * (stop - start), stop - 1e-6, 6):
        breaks = [a for a in loss.atoms if start < a < ell]
        integral, _ = integrate.quad(
            lambda t: math.exp(-t) * float(loss.cdf(t, under="P")), start, ell, points=breaks or None, limit=200,
            epsabs=1e-13, epsrel=1e-10,
        )
        boundary = math.exp(-start) * float(loss.cdf(start, under="P", inclusive=False)) if math.isfinite(lo) else 0.0
        expected = math.exp(-ell) * float(loss.cdf(ell, under="P")) + integral - boundary
        assert float(loss.cdf(ell, under="Q")) == pytest.approx(expected, rel=1e-7, abs=1e-12)
