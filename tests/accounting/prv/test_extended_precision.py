"""The long double composition of :func:`dpforge.accounting.prv.compose.fft_window`
against an exact (mpmath) cyclic convolution power (what it buys at a tiny delta:
``test_refinement_chains.test_rare_hits_at_tiny_delta_reach_the_width_with_a_long_double_power``)."""

from __future__ import annotations

import importlib

import mpmath as mp
import numpy as np
import pytest

from dpforge.accounting.prv.discretise import GridMeasure

# the module (the package re-exports a function of the same name)
compose = importlib.import_module("dpforge.accounting.prv.compose")

needs_long_double = pytest.mark.skipif(
    compose._U_EXTENDED >= compose._U, reason="this platform's long double is no more precise than double"
)


def _rare_hit_measure() -> GridMeasure:
    """One step of a rare-hit law on a unit grid: 1 - 1e-6 at 0, 1e-6 spread over a
    geometric tail of 40 points (the shape of a subsampled law at q = 1e-6)."""
    tail = 0.8 ** np.arange(40)
    masses = np.concatenate([[1.0 - 1e-6], 1e-6 * tail / tail.sum()])
    return GridMeasure(0, masses, 1.0)


def _exact_cyclic_power(measure: GridMeasure, count: int, size: int) -> list:
    """The ``count``-fold cyclic convolution of the measure as fft_window places it
    (centred on its mean index), by an exact DFT in mpmath."""
    row = np.zeros(size)
    compose._place(row, measure.masses, measure.first_index - int(round(measure.mean_index())))
    with mp.workdps(40):
        occupied = [(j, mp.mpf(float(row[j]))) for j in np.flatnonzero(row)]
        roots = [mp.expjpi(-2 * mp.mpf(k) / size) for k in range(size)]
        spectrum = [mp.fsum(value * roots[(j * f) % size] for j, value in occupied) ** count for f in range(size)]
        return [
            float(mp.re(mp.fsum(spectrum[f] * mp.conj(roots[(f * k) % size]) for f in range(size))) / size)
            for k in range(size)
        ]


@needs_long_double
def test_the_extended_composition_is_within_its_allowance_and_the_double_one_is_not():
    """T = 1e5 steps on a 512-point window: the long double composition is within its
    allowance of the exact one, and that allowance is over 1,000 times smaller than the
    double one's; the double composition's actual error exceeds it (so the extended
    path really is what produced the first)."""
    measure, count = _rare_hit_measure(), 100_000
    lam, cumulant = np.array([1.0, -1.0]), np.array([400.0, 100.0])  # a window of [-100, 400]
    _, _, extended = compose.fft_window([(measure, count)], [measure.masses], lam, cumulant, 0.0, extended=True)
    _, _, double = compose.fft_window([(measure, count)], [measure.masses], lam, cumulant, 0.0, extended=False)
    exact = np.array(_exact_cyclic_power(measure, count, extended.size))
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
