"""The PRV engine at tiny delta: tilted compositions, checked against independent references.

References: the q = 1 Gaussian composes to a Gaussian with mu = sqrt(T)/sigma, whose
profile delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) (Dong, Roth, Su 2022)
mpmath evaluates to 50 digits; the pure-DP pair composes to a binomial law with an exact
profile; subsampled mechanisms are checked against dp-accounting's PLD at a fine
discretisation and against the engine at a 50x tighter accuracy.
"""

from __future__ import annotations

import importlib
import math
import warnings

import mpmath as mp
import numpy as np
import pytest

from dpforge.accounting import calibrate_noise_multiplier, delta, epsilon
from dpforge.accounting.prv.compose import compose
from dpforge.accounting.prv.components import atom_aligned_step, discretise_all
from dpforge.accounting.prv.tilt import compose_tilted, saddle_tilt
from dpforge.errors import DpforgeAccuracyWarning
from dpforge.mechanisms import Composed, Gaussian, Laplace, PoissonSampled, PureDP
from dpforge.mechanisms.combinators import flatten

TINY = [1e-10, 1e-12, 1e-13, 1e-15]


def _gaussian_delta(eps, mu):
    eps, mu = mp.mpf(eps), mp.mpf(mu)
    return mp.ncdf(-eps / mu + mu / 2) - mp.e**eps * mp.ncdf(-eps / mu - mu / 2)


def _gaussian_epsilon(target, mu):
    low, high = mp.mpf(0), mp.mpf(5000)
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if _gaussian_delta(middle, mu) > target else (low, middle)
    return (low + high) / 2


def _pure_delta(eps, eps0, steps):
    """Exact profile of `steps` eps0-randomised responses: the loss is (2k - T) eps0 with
    k ~ Binomial(T, p), p = e^eps0/(1 + e^eps0) under P."""
    eps, eps0 = mp.mpf(eps), mp.mpf(eps0)
    p = mp.e**eps0 / (1 + mp.e**eps0)
    total = mp.mpf(0)
    for k in range(steps + 1):
        loss = (2 * k - steps) * eps0
        if loss > eps:
            total += mp.binomial(steps, k) * p**k * (1 - p) ** (steps - k) * (1 - mp.e ** (eps - loss))
    return total


@pytest.fixture(autouse=True)
def _precise():
    with mp.workdps(50):
        yield


@pytest.mark.parametrize("sigma, steps", [(1.0, 10), (5.0, 3000), (20.0, 100), (0.8, 1)])
@pytest.mark.parametrize("target", TINY)
def test_gaussian_epsilon_brackets_the_exact_value_at_tiny_delta(sigma, steps, target):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DpforgeAccuracyWarning)  # the accuracy asked is reached
        result = epsilon(Composed([(Gaussian(sigma), steps)]), target)
    exact = float(_gaussian_epsilon(target, math.sqrt(steps) / sigma))
    assert result.lower <= exact <= result.upper
    assert (result.upper - result.lower) / result.upper <= 1e-3
    assert result.accuracy["reached"]


@pytest.mark.parametrize("eps0, steps", [(0.1, 50), (1.0, 20)])
@pytest.mark.parametrize("point", [0.5, 2.0])
def test_pure_dp_delta_brackets_the_binomial_profile(eps0, steps, point):
    result = delta(Composed([(PureDP(eps0), steps)]), point)
    exact = float(_pure_delta(point, eps0, steps))
    assert result.lower <= exact * (1 + 1e-12) and exact <= result.upper * (1 + 1e-12)


@pytest.mark.parametrize(
    "description",
    [
        Composed([(PoissonSampled(Gaussian(1.1), 0.004), 1000)]),
        Composed([(PoissonSampled(Laplace(2.0), 0.01), 1000)]),
        Composed([(PoissonSampled(Gaussian(2.0), 0.1), 100)]),
    ],
    ids=["dp-sgd", "laplace", "large-q"],
)
@pytest.mark.parametrize("target", [1e-12, 1e-15])
def test_subsampled_brackets_are_tight_and_agree_with_a_finer_run(description, target):
    coarse = epsilon(description, target)
    fine = epsilon(description, target, relative_accuracy=2e-5)
    assert coarse.accuracy["tilted"] and coarse.accuracy["reached"]
    assert (coarse.upper - coarse.lower) / coarse.upper <= 1e-3
    # both brackets are certified, so they must overlap, and the finer one sits inside the coarse one
    assert coarse.lower <= fine.upper and fine.lower <= coarse.upper
    assert fine.upper - fine.lower <= coarse.upper - coarse.lower


@pytest.mark.slow
@pytest.mark.parametrize("sigma, steps, target", [(0.35, 5000, 1e-12), (0.3, 1000, 1e-15)])
def test_staged_lower_chain_reaches_the_width_at_tiny_delta(sigma, steps, target):
    """Laws narrow enough to be staged, at tiny delta: the staged lower chain's chunks
    are composed untilted, and chunks as long as the whole run hid the tail delta reads
    (q = 1e-3: [36.81, 37.142] for sigma = 0.35 at 1e-12; [47.42, 50.85] for sigma = 0.3
    at 1e-15).  The brackets of a finer run must overlap."""
    description = Composed([(PoissonSampled(Gaussian(sigma), 1e-3), steps)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", DpforgeAccuracyWarning)
        result = epsilon(description, target)
    assert result.accuracy["reached"]
    assert (result.upper - result.lower) / result.upper <= 1e-3
    finer = epsilon(description, target, relative_accuracy=2e-4)
    assert result.lower <= finer.upper and finer.lower <= result.upper


@pytest.mark.slow
@pytest.mark.parametrize("target", [1e-10, 1e-12])
def test_subsampled_gaussian_against_dp_accounting_at_tiny_delta(dpa, target):
    """dp-accounting's connect-the-dots PLD (pessimistic) at h = 2e-5 is an upper estimate
    that must not fall below our certified lower bound; its optimistic PLD must not rise
    above our certified upper bound."""
    from dp_accounting.pld import privacy_loss_distribution as pldm

    ours = epsilon(Composed([(PoissonSampled(Gaussian(1.1), 0.004), 1000)]), target)
    values = {}
    for pessimistic in (True, False):
        pld = pldm.from_gaussian_mechanism(
            1.1, sampling_prob=0.004, value_discretization_interval=2e-5, pessimistic_estimate=pessimistic, use_connect_dots=pessimistic
        ).self_compose(1000)
        values[pessimistic] = pld.get_epsilon_for_delta(target)
    assert ours.lower <= values[True]
    assert values[False] <= ours.upper


def test_tilting_is_exact_algebra_up_to_the_roundoff_allowances():
    """Untilting the tilted composition gives back the untilted one, entry by entry, within
    the two compositions' round-off allowances and aliasing bounds (the untilted one's, and
    the tilted one's scaled by the untilting factor): a check of the allowance model."""
    components = flatten(Composed([(PoissonSampled(Gaussian(1.0), 0.02), 200)]))
    step = atom_aligned_step(components, "remove", 2e-3)
    measures = discretise_all(components, "remove", step, 1e-12, ("upper",))["upper"]
    plain = compose(measures, 1e-12)
    theta = saddle_tilt(measures, 1.0)
    assert theta > 0
    tilted = compose_tilted(measures, 1e-12, theta, 0.0)
    untilted = tilted.masses * np.exp(tilted.log_scale - theta * tilted.positions)
    common = np.intersect1d(np.round(plain.positions / step).astype(int), np.round(tilted.positions / step).astype(int))
    a = dict(zip(np.round(plain.positions / step).astype(int), plain.masses))
    b = dict(zip(np.round(tilted.positions / step).astype(int), untilted))
    scale = dict(zip(np.round(tilted.positions / step).astype(int), np.exp(tilted.log_scale - theta * tilted.positions)))
    large = [k for k in common if a[k] > 1e-6]
    assert len(large) > 100
    wrapped_plain = plain.above + plain.below
    wrapped_tilted = tilted.above_tilted + tilted.below_tilted
    assert all(
        abs(a[k] - b[k]) <= plain.roundoff + wrapped_plain + (tilted.roundoff + wrapped_tilted) * scale[k] for k in common
    )
    assert max(abs(a[k] - b[k]) / a[k] for k in large) < 1e-7


@pytest.mark.parametrize("target", [1e-5, 1e-10, 1e-12, 1e-15])
def test_a_calibrated_noise_multiplier_verifies_at_every_delta(target):
    result = calibrate_noise_multiplier(0.004, 1000, 2.0, target)
    check = epsilon(Composed([(PoissonSampled(Gaussian(result.parameter), 0.004), 1000)]), target)
    assert check.upper <= 2.0
    assert check.upper == result.epsilon and check.lower == result.lower
    assert result.epsilon >= 2.0 * (1 - 3e-3)  # no more noise than the tolerance allows


def _subsampled_one_step_delta(base: str, scale, rate, eps) -> mp.mpf:
    """Exact delta(eps) of one Poisson-subsampled step, the larger of the two directions.

    Remove: P = (1 - q) B(0) + q B(1) against Q = B(0); add: the pair swapped.  For the
    Gaussian (sigma) and the Laplace (scale b) the ratio p/q is 1 - q + q r(x) with
    r(x) = e^{(2x - 1)/(2 sigma^2)}, resp. e^{(|x| - |x - 1|)/b}, increasing in x, so
    delta = P(X in S) - e^eps Q(X in S) with S = {x > x*} (remove) or {x < x_*} (add)."""
    scale, q, eps = mp.mpf(scale), mp.mpf(rate), mp.mpf(eps)

    def sf(t, mu):  # P(X > t) for the base law centred at mu
        if base == "gaussian":
            return mp.ncdf(-(t - mu) / scale)
        z = (t - mu) / scale
        return mp.e ** (-z) / 2 if z >= 0 else 1 - mp.e**z / 2

    def threshold(ratio):  # the x with 1 - q + q r(x) = ratio (r(x) = (ratio - 1 + q)/q)
        log_r = mp.log((ratio - 1 + q) / q)
        if base == "gaussian":
            return scale**2 * log_r + mp.mpf(1) / 2
        return (scale * log_r + 1) / 2  # within (0, 1), where |x| - |x - 1| = 2x - 1

    e = mp.e**eps
    values = []
    # remove: the ratio exceeds e^eps above x*
    if base == "laplace" and e >= 1 - q + q * mp.e ** (1 / scale):
        values.append(mp.mpf(0))
    else:
        x = threshold(e) if (base == "gaussian" or e > 1 - q + q * mp.e ** (-1 / scale)) else mp.mpf(-mp.inf)
        if base == "laplace":
            x = max(x, mp.mpf(0))
        mixture = (1 - q) * sf(x, 0) + q * sf(x, 1) if x > -mp.inf else mp.mpf(1)
        values.append(mixture - e * (sf(x, 0) if x > -mp.inf else 1))
    # add: 1 / (1 - q + q r(x)) exceeds e^eps below x_* (r(x_*) = (e^-eps - 1 + q)/q)
    low_ratio = 1 / e
    if low_ratio <= 1 - q or (base == "laplace" and low_ratio <= 1 - q + q * mp.e ** (-1 / scale)):
        values.append(mp.mpf(0))
    else:
        x = threshold(low_ratio)
        if base == "laplace":
            x = min(x, mp.mpf(1))
        values.append((1 - sf(x, 0)) - e * ((1 - q) * (1 - sf(x, 0)) + q * (1 - sf(x, 1))))
    return max(values)


def _subsampled_one_step_epsilon(base, scale, rate, target) -> mp.mpf:
    low, high = mp.mpf(0), mp.mpf(1)
    while _subsampled_one_step_delta(base, scale, rate, high) > target:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if _subsampled_one_step_delta(base, scale, rate, middle) > target else (low, middle)
    return (low + high) / 2


def test_one_step_reference_matches_quadrature():
    """The closed forms above against direct quadrature of (p - e^eps q)_+."""
    for base, scale, rate, eps in [("gaussian", 2.0, 0.1, 0.05), ("laplace", 1.5, 0.2, 0.03), ("laplace", 0.5, 0.3, 0.2)]:
        s, q = mp.mpf(scale), mp.mpf(rate)
        if base == "gaussian":
            density = lambda x, mu: mp.npdf(x, mu, s)  # noqa: E731
        else:
            density = lambda x, mu: mp.e ** (-abs(x - mu) / s) / (2 * s)  # noqa: E731
        mix = lambda x: (1 - q) * density(x, 0) + q * density(x, 1)  # noqa: E731
        e = mp.e ** mp.mpf(eps)
        values = []
        for gap in (lambda x: mix(x) - e * density(x, 0), lambda x: density(x, 0) - e * mix(x)):
            # the kink of (gap)_+ by bisection on its sign change, then quadrature on both sides
            low, high = (mp.mpf(-60), mp.mpf(60)) if base == "gaussian" else (mp.mpf(0), mp.mpf(1))
            rising = gap(high) > 0
            for _ in range(300):
                middle = (low + high) / 2
                low, high = (middle, high) if (gap(middle) > 0) != rising else (low, middle)
            points = sorted({-mp.inf, mp.mpf(0), mp.mpf(1), (low + high) / 2, mp.inf})
            values.append(mp.quad(lambda x: max(gap(x), 0), points))
        assert _subsampled_one_step_delta(base, scale, rate, eps) == pytest.approx(float(max(values)), rel=1e-10)


@pytest.mark.parametrize(
    "base, scale",
    [("gaussian", 10.0), ("gaussian", 100.0), ("laplace", 10.0), ("laplace", 100.0)],
)
def test_one_step_at_tiny_epsilon_brackets_the_exact_value(base, scale):
    """One step at q = 1e-6 and delta = 1e-15: eps of 1e-8 to 1e-6.  Graded cells sized
    by a saddle point (no such point describes a single step) left the Gaussian's cells
    around eps 64 steps wide (widths 1.6e-3 and 5e-3), and a Laplace atom inside a
    connect-the-dots cell lost its kink (1.7e-3 and 1.8e-2)."""
    mechanism = Gaussian(scale) if base == "gaussian" else Laplace(scale)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DpforgeAccuracyWarning)
        result = epsilon(PoissonSampled(mechanism, 1e-6), 1e-15)
    exact = float(_subsampled_one_step_epsilon(base, scale, 1e-6, 1e-15))
    assert result.lower <= exact <= result.upper
    assert (result.upper - result.lower) / result.upper <= 1e-3


@pytest.mark.parametrize(
    "sigma, rate, steps, target",
    [(1.0, 0.02, 200, 1.0), (1.1, 0.004, 1000, 2.2), (1.0, 1e-6, 100_000, 0.003), (0.3, 1e-6, 1000, 14.65)],
)
def test_the_saddle_point_puts_the_tilted_mean_at_the_target_in_a_few_evaluations(monkeypatch, sigma, rate, steps, target):
    """Newton steps inside a bracket (tilt._saddle_point): theta is within 1e-5 of what
    an independent bisection finds, after at most 14 evaluations of the measures, the
    untilted check included (doubling from 1 and bisecting to 1e-6 took 25-31 here: 5-10
    doublings and 19-20 halvings)."""
    tilt_module = importlib.import_module("dpforge.accounting.prv.tilt")
    components = flatten(Composed([(PoissonSampled(Gaussian(sigma), rate), steps)]))
    step = atom_aligned_step(components, "remove", 1e-4 if rate < 1e-3 else 2e-3)
    measures = discretise_all(components, "remove", step, 1e-12, ("upper",))["upper"]
    calls = []
    original = tilt_module._tilted_moments

    def counted(measures_, theta):
        calls.append(theta)
        return original(measures_, theta)

    monkeypatch.setattr(tilt_module, "_tilted_moments", counted)
    theta = saddle_tilt(measures, target)
    assert theta > 0 and len(calls) <= 14
    low, high = 0.0, 2.0 * theta + 1.0  # an independent bisection
    for _ in range(200):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if original(measures, middle)[0] < target else (low, middle)
    assert theta == pytest.approx(0.5 * (low + high), rel=1e-5)


@pytest.mark.parametrize("start", [(3.0, 10.0, 30.0, 100.0), (1e-4, 3e-4, 1e-3, 3e-3)])
def test_chernoff_window_edges_reach_the_best_exponent(start):
    """A tilted law with a heavy upper tail (compound Poisson with Gaussian jumps:
    K(lam) = a (e^{m lam + v lam^2 / 2} - 1)) wants exponents far from where the starting
    set is centred; each window edge must still come within 15 % of the best Chernoff
    bound (K(lam) - log tail) / lam over a dense scan (sigma = 0.3, q = 1e-6, T = 1e3 at
    delta = 1e-15 had a 398-nat tilted window where lam = 0.54 bounds it at 64).  Any
    exponent gives a valid bound, so the edge may never lie below the scan's best either."""
    from dpforge.accounting.prv.compose import refine_lambdas

    rate, jump, variance, log_tail = 1e-3, 5.6, 11.0, -31.15

    def cumulant(lam):
        lam = np.asarray(lam, dtype=float)
        with np.errstate(over="ignore"):
            return rate * np.expm1(jump * lam + 0.5 * variance * lam**2)

    start = np.array(start)
    lam, values = refine_lambdas(np.concatenate([start, -start]), cumulant(np.concatenate([start, -start])), log_tail, cumulant)
    assert np.allclose(values, cumulant(lam))
    positive = lam > 0
    with np.errstate(invalid="ignore", over="ignore"):
        top = np.nanmin((values[positive] - log_tail) / lam[positive])
        bottom = np.nanmax((values[~positive] - log_tail) / lam[~positive])
    scan = np.geomspace(1e-7, 1e3, 200_001)
    with np.errstate(over="ignore"):
        best_top = np.min((cumulant(scan) - log_tail) / scan)
        best_bottom = np.max((cumulant(-scan) - log_tail) / -scan)
    assert best_top * (1 - 1e-9) <= top <= 1.15 * best_top
    assert 1.15 * best_bottom <= bottom <= best_bottom * (1 - 1e-9)


@pytest.mark.parametrize(
    "points, centre, width, total, first, count, theta, floor, eps",
    [
        (150, 0.9415117651957465, 0.2235767599802343, 0.9400490606520349, 73, 17, 20.0, 40.8258759075627, 57.669579957983046),
        (278, 3.570176931398567, 0.4362152777917596, 0.7582890970624984, 76, 47, 5.0, 239.23804105066716, 280.6876550230305),
    ],
)
def test_tilted_upper_profiles_carry_the_rounding_of_the_tilt(points, centre, width, total, first, count, theta, floor, eps):
    """A tilted composition's upper profile at eps against the exact count-fold
    convolution in long double.  The tilted one-step masses are formed in log space,
    e^{log m + theta x - log Z}, and untilted by S(y) = e^{log_scale - theta y}: each
    exponential carries its argument's rounding, u times tens to hundreds of nats, as a
    relative error, which the FFT's allowance does not model.  These two cases (found by
    a harness over 120 random compositions) read 5.2e-14 and 3.9e-14 of delta below the
    exact one before :func:`.tilt.untilting_error` and :func:`.tilt.log_space_error`.
    (Their lower profiles read 0 here, the wrapped term outweighing the weights, so the
    lower side is checked on verify's tilted rows in ``test_prefixes.py``.)"""
    from dpforge.accounting.prv.discretise import GridMeasure
    from dpforge.accounting.prv.tilt import compose_tilted

    step = 0.02
    x = np.arange(points) * step
    masses = np.exp(-0.5 * ((x - centre) / width) ** 2)
    masses = masses / masses.sum() * total
    composed = compose_tilted([(GridMeasure(first, masses, step), count)], 1e-12, theta, floor)
    exact = np.array([1.0], dtype=np.longdouble)
    for _ in range(count):
        exact = np.convolve(exact, masses.astype(np.longdouble))
    positions = (first * count + np.arange(exact.size)) * np.longdouble(step)
    beyond = positions > eps
    true = float(np.sum(exact[beyond] * (1 - np.exp(np.longdouble(eps) - positions[beyond]))))
    assert true > 0.0
    assert composed.lower_profile().delta(eps) <= true <= composed.upper_profile().delta(eps)
