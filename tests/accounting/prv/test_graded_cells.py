"""Graded cells: one-step laws discretised with whole-step cells in the bulk and wider
cells across thin tails (:func:`dpforge.accounting.prv.discretise.graded_lattice`)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpforge.accounting.prv import discretise
from dpforge.accounting.prv.components import chernoff_saddle, truncation
from dpforge.accounting.prv.evaluate import evaluate, saddle_estimate
from dpforge.mechanisms import Composed, Gaussian, PoissonSampled, flatten

LAWS = [(1.0, 0.01), (0.6, 1e-4), (2.0, 1.0), (0.8, 0.3)]


def _law(sigma, rate, direction):
    return flatten(Composed([(PoissonSampled(Gaussian(sigma), rate), 1)]))[0].privacy_loss_distribution(direction)


def _graded_reference(loss, step, k_lo, k_hi, phase, exponent, widest=64, share=0.05):
    """The numpy specification of :func:`discretise.graded_lattice`."""
    if k_hi - k_lo < 8 * widest:
        return np.arange(k_lo, k_hi + 1)
    coarse = np.append(np.arange(k_lo, k_hi, widest), k_hi)
    x = coarse * step + phase
    cdf_p, sf_p, _, _ = loss.distribution_functions(x)
    mass = discretise._differences(cdf_p, sf_p)
    cells = mass.size
    with np.errstate(divide="ignore"):
        log_mass = np.log(mass)
    weight = mass / max(float(mass.sum()), 1e-300)
    for lam in np.atleast_1d(exponent):  # several exponents: the largest tilted mass of each cell
        if lam > 0 and np.isfinite(log_mass).any():
            tilted = log_mass + lam * x[:-1]
            top = float(np.max(tilted))
            log_norm = top + math.log(float(np.sum(np.exp(tilted - top))))
            weight = np.maximum(weight, np.exp(np.minimum(log_mass + lam * x[1:] - log_norm, 0.0)))
    need = weight * (widest * widest * cells / share)
    splits = np.minimum(np.ceil(np.log2(np.maximum(need, 1.0)) / 2.0), math.log2(widest)).astype(np.int64)
    widths = np.diff(coarse)
    counts = np.minimum(np.left_shift(1, splits), widths)
    starts = np.repeat(coarse[:-1], counts)
    within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    return np.append(starts + (within * np.repeat(widths, counts)) // np.repeat(counts, counts), k_hi)


def _range(loss, step, phase=0.0):
    cut = truncation(loss, 1e-14)
    return int(np.floor((cut.low - phase) / step)), int(np.ceil((cut.high - phase) / step))


@pytest.mark.parametrize("sigma, rate", LAWS)
@pytest.mark.parametrize("direction", ["remove", "add"])
def test_compiled_graded_lattice_matches_the_numpy_specification(sigma, rate, direction):
    loss = _law(sigma, rate, direction)
    for step in (1e-3, 1e-4, 3e-5):
        phase = 0.3 * step
        k_lo, k_hi = _range(loss, step, phase)
        for exponent in (0.0, 1.0, 4.0, 30.0, (1.0, 4.0), (0.5, 2.0, 30.0)):
            got = discretise.graded_lattice(loss, step, k_lo, k_hi, phase, exponent)
            np.testing.assert_array_equal(got, _graded_reference(loss, step, k_lo, k_hi, phase, exponent))
            assert got[0] == k_lo and got[-1] == k_hi and np.all(np.diff(got) >= 1)
            assert np.all(np.diff(got) <= discretise.GRADE_WIDEST)


@pytest.mark.parametrize("sigma, rate", LAWS)
def test_cells_graded_at_several_exponents_hold_every_edge_of_each(sigma, rate):
    """A prefix table reads one measure at several eps (:mod:`.prefixes`): graded at a set
    of exponents, its edges include those graded at each one of them, so its cells are
    nowhere wider than any one exponent's."""
    loss = _law(sigma, rate, "remove")
    step = 1e-4
    k_lo, k_hi = _range(loss, step)
    exponents = (1.0, 2.0, 4.0, 8.0)
    both = set(discretise.graded_lattice(loss, step, k_lo, k_hi, 0.0, exponents).tolist())
    for exponent in exponents:
        assert set(discretise.graded_lattice(loss, step, k_lo, k_hi, 0.0, exponent).tolist()) <= both


def test_graded_cells_are_few_across_a_thin_tail():
    """A subsampled law has most of its range in a thin tail: far fewer edges there."""
    loss = _law(1.0, 0.01, "remove")
    step = 5e-4
    k_lo, k_hi = _range(loss, step)
    for exponent, most in ((0.0, 0.15), (2.5, 0.2)):
        assert discretise.graded_lattice(loss, step, k_lo, k_hi, 0.0, exponent).size < most * (k_hi - k_lo)
    # a huge exponent weighs the far tail fully: every cell is a whole step there
    dense = discretise.graded_lattice(loss, step, k_lo, k_hi, 0.0, 200.0)
    assert np.all(np.diff(dense)[-50:] == 1)


def _profile(measure, eps_values):
    x, m = measure.positions, measure.masses
    return np.array([float(np.sum(m[x > e] * -np.expm1(e - x[x > e]))) + measure.infinity_mass for e in eps_values])


@pytest.mark.parametrize("sigma, rate", LAWS)
@pytest.mark.parametrize("direction", ["remove", "add"])
def test_graded_measures_bracket_the_exact_one_step_profile(sigma, rate, direction):
    """delta(eps) = Pr_P(L > eps) - e^eps Pr_Q(L > eps) from the distribution functions
    lies between the graded optimistic and pessimistic measures' profiles."""
    loss = _law(sigma, rate, direction)
    step = 2e-4
    cut = truncation(loss, 1e-14)
    eps = np.concatenate([np.linspace(0.0, 0.05, 11), np.linspace(0.1, 0.8 * cut.high, 17)])
    _, sf_p, _, sf_q = loss.distribution_functions(eps)
    exact = sf_p - np.exp(eps) * sf_q
    for exponent in (0.0, 3.0):
        upper = discretise.upper_measure(loss, step, cut.low, cut.high, exponent=exponent)
        lower = discretise.lower_measure(loss, step, cut.low, cut.high, exponent=exponent)
        assert np.all(_profile(upper, eps) >= exact * (1 - 1e-12) - 1e-16)
        assert np.all(_profile(lower, eps) <= exact * (1 + 1e-12) + 1e-16)
        # the whole P-mass is kept by the pessimistic measure, plus the modelled errors
        # of the computed masses (module .rounding: each cell is raised by its own)
        assert 1.0 - 1e-15 <= upper.total_mass + upper.infinity_mass <= 1.0 + 1e-9


def test_graded_cells_cost_little_tightness():
    """At one grid step, graded cells give a bracket about as narrow as uniform cells."""
    components = flatten(Composed([(PoissonSampled(Gaussian(1.0), 0.01), 1000)]))
    step, tail, delta = 5e-4, 1e-9, 1e-5
    uniform = evaluate(components, step, tail)
    low, high = uniform.epsilon(delta)
    exponents = {d: saddle_estimate(components, d, tail, high) for d in ("remove", "add")}
    graded = evaluate(components, step, tail, exponents=exponents)
    g_low, g_high = graded.epsilon(delta)
    assert g_low <= high and low <= g_high
    assert g_high - g_low <= 1.2 * (high - low)


@pytest.mark.parametrize("eps", [3.0, 5.0, 8.0])
def test_saddle_of_a_composed_gaussian(eps):
    """q = 1: the composed loss is N(T mu^2/2, T mu^2), whose cumulant has slope eps at
    lam = (eps - T mu^2/2) / (T mu^2); the Chernoff-exponent reading is within 25 %."""
    sigma, steps = 3.0, 40
    components = flatten(Composed([(PoissonSampled(Gaussian(sigma), 1.0), steps)]))
    evaluation = evaluate(components, 2e-3, 1e-12)
    mean, variance = steps / (2 * sigma**2), steps / sigma**2
    exact = (eps - mean) / variance
    found = evaluation.saddles(eps)["remove"]
    assert found == pytest.approx(exact, rel=0.25)
    assert saddle_estimate(components, "remove", 1e-12, eps) == pytest.approx(exact, rel=0.02)


@pytest.mark.parametrize("sigma, steps, delta", [(3.0, 40, 1e-5), (1.0, 1000, 1e-10), (10.0, 1, 1e-15)])
def test_chernoff_saddle_of_a_composed_gaussian(sigma, steps, delta):
    """q = 1: the composed loss is N(m, 2m), m = T / (2 sigma^2), whose cumulant
    K(lam) = m lam (1 + lam) has rate function lam K' - K = m lam^2: it reaches
    log(1/delta) at lam = sqrt(log(1/delta) / m), read off the coarse one-step laws."""
    components = flatten(Composed([(PoissonSampled(Gaussian(sigma), 1.0), steps)]))
    mean = steps / (2 * sigma**2)
    exact = math.sqrt(math.log(1 / delta) / mean)
    assert chernoff_saddle(components, "remove", 1e-25, delta) == pytest.approx(exact, rel=0.03)
    # one step cut at 1e-5 holds too little tail to reach log(1/delta) = 690: not found
    one_step = flatten(Composed([(PoissonSampled(Gaussian(sigma), 1.0), 1)]))
    assert chernoff_saddle(one_step, "remove", 1e-5, 1e-300) == 0.0
