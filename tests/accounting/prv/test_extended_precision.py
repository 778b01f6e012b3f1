"""The long double composition of :func:`dpforge.accounting.prv.compose.fft_window`
against an exact (mpmath) cyclic convolution power (what it buys at a tiny delta:
``test_refinement_chains.test_rare_hits_at_tiny_delta_reach_the_width_with_a_long_double_power``)."""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest

from dpforge.accounting import epsilon
from dpforge.accounting.prv.discretise import GridMeasure
from dpforge.mechanisms import Composed, Gaussian, PoissonSampled

# the module (the package re-exports a function of the same name)
compose = importlib.import_module("dpforge.accounting.prv.compose")
evaluate = importlib.import_module("dpforge.accounting.prv.evaluate")

needs_long_double = pytest.mark.skipif(
    compose._U_EXTENDED >= compose._U, reason="this platform's long double is no more precise than double"
)


def _rare_hit_measure() -> GridMeasure:
    """One step of a rare-hit law on a unit grid: 1 - 1e-6 at 0, 1e-6 spread over a
    geometric tail of 40 points (the shape of a subsampled law at q = 1e-6)."""
    tail = 0.8 ** np.arange(40)
    masses = np.concatenate([[1.0 - 1e-6], 1e-6 * tail / tail.sum()])
    return GridMeasure(0, masses, 1.0)


@needs_long_double
def test_the_extended_composition_is_within_its_allowance_and_the_double_one_is_not(exact_cyclic_power):
    """T = 1e5 steps on a 512-point window: the long double composition is within its
    allowance of the exact one, and that allowance is over 1,000 times smaller than the
    double one's; the double composition's actual error exceeds it (so the extended
    path really is what produced the first)."""
    measure, count = _rare_hit_measure(), 100_000
    lam, cumulant = np.array([1.0, -1.0]), np.array([400.0, 100.0])  # a window of [-100, 400]
    _, _, extended, _ = compose.fft_window([(measure, count)], [measure.masses], lam, cumulant, 0.0, extended=True)
    _, _, double, _ = compose.fft_window([(measure, count)], [measure.masses], lam, cumulant, 0.0, extended=False)
    exact = exact_cyclic_power(measure, count, extended.size)
    peak = float(exact.max())
    allowance_extended = compose.roundoff_model(count, extended.size, extended=True) * peak
    allowance_double = compose.roundoff_model(count, extended.size) * peak
    assert allowance_double > 1000.0 * allowance_extended
    assert np.max(np.abs(extended - exact)) <= allowance_extended
    assert np.max(np.abs(double - exact)) <= allowance_double
    assert np.max(np.abs(double - exact)) > allowance_extended


def test_extended_precision_is_taken_by_long_compositions_of_few_measures():
    measure = _rare_hit_measure()
    long_double_helps = bool(compose._U_EXTENDED < compose._U)
    assert compose.extended_precision([(measure, 100_000)]) == long_double_helps
    assert not compose.extended_precision([(measure, 10)])
    assert not compose.extended_precision([(measure, 1000)] * (compose._EXTENDED_ROWS + 1))


def test_a_tilt_that_fits_its_budget_in_double_stays_in_double(extended_flags):
    """q = 0.004, sigma = 1.1, T = 1e3 at delta = 1e-12: the double allowance fits the
    tilt's budget, so no composition pays for long double (it took 2.1 times the
    delta = 1e-5 call when every tilted composition of 256 steps did)."""
    flags = extended_flags
    result = epsilon(Composed([(PoissonSampled(Gaussian(1.1), 0.004), 1000)]), 1e-12)
    assert result.accuracy["reached"] and result.accuracy["tilted"]
    assert flags and not any(flags)


@needs_long_double
def test_a_tilt_whose_double_allowance_cannot_fit_takes_long_double(monkeypatch, extended_flags):
    """sigma = 1, q = 1e-6, T = 1e5 at delta = 1e-15: the width needs the long double power
    (``test_refinement_chains``), and it is taken."""
    flags = extended_flags
    tilt_module = importlib.import_module("dpforge.accounting.prv.tilt")
    counts = {"choose": 0, "saddle": 0}
    choose, saddle = evaluate.choose_tilt, tilt_module._saddle_point

    def counted_choose(*args, **kwargs):
        counts["choose"] += 1
        return choose(*args, **kwargs)

    def counted_saddle(*args, **kwargs):
        counts["saddle"] += 1
        return saddle(*args, **kwargs)

    monkeypatch.setattr(evaluate, "choose_tilt", counted_choose)
    monkeypatch.setattr(tilt_module, "_saddle_point", counted_saddle)
    epsilon(Composed([(PoissonSampled(Gaussian(1.0), 1e-6), 100_000)]), 1e-15)
    assert any(flags)
    # the saddle point is searched once per tilt, whichever precision is chosen
    assert 0 < counts["saddle"] <= counts["choose"]


@needs_long_double
def test_a_long_composition_whose_entries_peak_low_stays_in_double(monkeypatch, extended_flags):
    """sigma = 26.8, q = 1.35e-6, T = 2.37e6 at delta = 1.3e-10: the composed tilted law
    peaks near 1e-5, so its double allowance fits the budget (priced at the bound 1 it did
    not, and every composition took long double at 3.6 times the call's cost).  The
    bracket reaches the width and overlaps the long double one (both are certified)."""
    description = Composed([(PoissonSampled(Gaussian(26.8), 1.35e-6), 2_370_000)])
    flags = extended_flags
    result = epsilon(description, 1.3e-10)
    assert result.accuracy["reached"] and result.accuracy["tilted"]
    assert flags and not any(flags)
    choose = evaluate.choose_tilt
    monkeypatch.setattr(evaluate, "choose_tilt", lambda *args, **kwargs: choose(*args, **{**kwargs, "estimate_peak": False}))
    flags.clear()
    priced_at_one = epsilon(description, 1.3e-10)
    assert any(flags)
    assert result.lower <= priced_at_one.upper and priced_at_one.lower <= result.upper


@needs_long_double
def test_a_double_composition_whose_allowance_does_not_fit_is_composed_again_in_long_double(monkeypatch, extended_flags):
    """With a peak estimate far too low every eligible tilted composition is tried in
    double first; sigma = 1, q = 1e-6, T = 1e5 at delta = 1e-15 needs long double
    (``test_a_tilt_whose_double_allowance_cannot_fit_takes_long_double``), and each
    composition whose own allowance does not fit is composed again in long double, so
    the width is still reached."""
    tilt_module = importlib.import_module("dpforge.accounting.prv.tilt")
    monkeypatch.setattr(tilt_module, "_PEAK_SAFETY", 1e-12)
    flags = extended_flags
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = epsilon(Composed([(PoissonSampled(Gaussian(1.0), 1e-6), 100_000)]), 1e-15)
    assert result.accuracy["reached"]
    assert [False, True] in [flags[i : i + 2] for i in range(len(flags) - 1)]

