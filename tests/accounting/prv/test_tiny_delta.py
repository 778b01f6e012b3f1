"""The PRV engine at tiny delta: tilted compositions, checked against independent references.

References: the q = 1 Gaussian composes to a Gaussian with mu = sqrt(T)/sigma, whose
profile delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) (Dong, Roth, Su 2022)
mpmath evaluates to 50 digits; the pure-DP pair composes to a binomial law with an exact
profile; subsampled mechanisms are checked against dp-accounting's PLD at a fine
discretisation and against the engine at a 50x tighter accuracy.
"""

from __future__ import annotations

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
