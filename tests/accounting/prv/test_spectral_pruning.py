"""Frequencies whose power is negligible are dropped before the power
(:func:`dpforge.accounting.prv.compose._kept_frequencies`), and what that can move is
added to the composition's round-off allowance; a long composition takes the long double
spectrum at the kept frequencies from double transforms and a chirp z-transform of the
row's largest entries (:func:`dpforge.accounting.prv.compose._split_spectra`)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from scipy import fft as sp_fft

from dpforge.accounting.prv.discretise import GridMeasure

# the module (the package re-exports a function of the same name)
compose = importlib.import_module("dpforge.accounting.prv.compose")


def _bell_measure() -> GridMeasure:
    """A one-step law over 7 points (a discretised bell), on a unit grid."""
    masses = np.exp(-0.5 * (np.arange(-3, 4) / 1.2) ** 2)
    return GridMeasure(-3, masses / masses.sum(), 1.0)


def test_a_pruned_composition_is_within_its_allowance_of_the_exact_one(exact_cyclic_power):
    """300 steps of a 7-point law on a window of about 256 points: most frequencies are
    dropped, and every entry stays within the round-off model plus the pruning bound of
    the exact cyclic power (mpmath), in double and in long double."""
    measure, count = _bell_measure(), 300
    lam, cumulant = np.array([1.0, -1.0]), np.array([127.0, 127.0])  # a window of [-127, 127]
    exact = None
    for extended in (False, True):
        _, _, composed, pruned = compose.fft_window([(measure, count)], [measure.masses], lam, cumulant, 0.0, extended=extended)
        placed = np.zeros((1, composed.size), dtype=np.longdouble if extended else float)
        compose._place(placed[0], measure.masses, measure.first_index - int(round(measure.mean_index())))
        keep, _ = compose._kept_frequencies(sp_fft.rfft(placed, axis=1), np.array([count]), composed.size, extended)
        assert keep.mean() < 0.5 and pruned > 0.0  # the test drops frequencies
        if exact is None:
            exact = exact_cyclic_power(measure, count, composed.size)
        allowance = compose.roundoff_model(count, composed.size, extended) * float(exact.max()) + pruned
        assert np.max(np.abs(composed - exact)) <= allowance


def test_the_pruning_bound_covers_what_the_dropped_frequencies_carry():
    """The dropped frequencies' own inverse transform (the full power in long double,
    restricted to them) is within the returned bound at every entry, every dropped
    frequency's power is below the threshold that bound is made of, and the bound is at
    most the asked share of the round-off model at the composition's peak."""
    rng = np.random.default_rng(7)
    size = 4096
    masses = rng.random(40) * np.exp(-0.1 * np.arange(40))
    masses /= masses.sum()
    for count in (50, 2_000, 100_000):
        row = np.zeros((1, size), dtype=np.longdouble)
        row[0, :40] = masses
        spectra = sp_fft.rfft(row, axis=1)
        keep, pruned = compose._kept_frequencies(spectra, np.array([count]), size, True)
        full = spectra[0] ** count
        dropped = np.where(keep, 0.0, full).astype(complex)
        carried = sp_fft.irfft(dropped, size)
        assert np.max(np.abs(carried)) <= pruned
        # the bound is (2/n) t per dropped frequency: each of them is below that t
        if not keep.all():
            threshold = pruned * size / (2.0 * np.count_nonzero(~keep))
            assert np.max(np.abs(full[~keep]).astype(float)) <= threshold
        peak = float(sp_fft.irfft(full.astype(complex), size).max())
        assert pruned <= 2.0 * compose._PRUNE_SHARE * compose.roundoff_model(count, size, True) * peak
        if count == 100_000:
            assert keep.mean() < 0.05


def test_nothing_is_dropped_where_every_frequency_matters():
    """One step of a law on a window as wide as itself keeps every frequency, and adds
    nothing to the allowance."""
    spectra = sp_fft.rfft(np.full((1, 64), 1.0 / 64.0) + np.eye(1, 64), axis=1)
    keep, pruned = compose._kept_frequencies(spectra, np.array([1]), 64, False)
    assert keep.all() and pruned == 0.0


def _rare_hit_row(size: int) -> np.ndarray:
    """A long double row shaped like a subsampled law at q = 1e-6: a bell of 41 points
    around 0 and a light tail of mass 1e-6 over 20,000 points."""
    row = np.zeros(size, dtype=np.longdouble)
    bell = np.exp(-0.5 * (np.arange(-20, 21) / 6.0) ** 2)
    row[:41] = (1.0 - 1e-6) * bell / bell.sum()
    tail = np.exp(-np.arange(20_000) / 3_000.0)
    row[41:20_041] = 1e-6 * tail / tail.sum()
    return row


def test_split_spectra_match_the_long_double_transform_at_the_kept_frequencies():
    """The long double spectrum from a double transform plus the long double sums over
    the largest entries is within the long double transform's term of the allowance,
    4 u_ld log2(n) sum x, of a long double transform of the whole row; it keeps the same
    frequencies, and fft_window takes it for a long composition of this law."""
    size, count = 2**17, 100_000
    placed = _rare_hit_row(size)[None, :]
    split = compose._split_spectra(placed, np.array([count]), size)
    assert split is not None
    spectra, keep, pruned = split
    assert keep.mean() < 0.05 and pruned > 0.0
    full = sp_fft.rfft(placed, axis=1)
    unit = compose._ROUNDING_FACTOR * compose._U_EXTENDED * np.log2(size) * float(placed.sum())
    assert np.max(np.abs(spectra - full[:, keep])) <= unit
    # a double transform alone is far off at that scale (so the sums matter)
    assert np.max(np.abs(sp_fft.rfft(placed.astype(float), axis=1)[:, keep] - full[:, keep])) > unit
    kept_in_long_double, _ = compose._kept_frequencies(full, np.array([count]), size, True)
    assert np.array_equal(keep, kept_in_long_double)


def test_an_extended_composition_through_split_spectra_is_within_its_allowance(monkeypatch):
    """fft_window in long double takes the split spectra for the rare-hit row, and its
    composition is within the round-off model (plus the pruning bound) of one made from
    the long double transform of the whole row with every frequency kept."""
    size, count = 2**17, 100_000
    row = _rare_hit_row(size)
    measure = GridMeasure(0, row[:20_041].astype(float), 1.0)
    lam, cumulant = np.array([1.0, -1.0]), np.array([float(size) - 4000.0, 3000.0])
    taken = []
    original = compose._split_spectra
    monkeypatch.setattr(compose, "_split_spectra", lambda *a: taken.append(original(*a)) or taken[-1])
    _, _, composed, pruned = compose.fft_window([(measure, count)], [measure.masses], lam, cumulant, 0.0, extended=True)
    assert taken and taken[0] is not None
    placed = np.zeros(composed.size, dtype=np.longdouble)
    compose._place(placed, measure.masses, measure.first_index - int(round(measure.mean_index())))
    reference = sp_fft.irfft(compose._power(sp_fft.rfft(placed), count).astype(complex), composed.size)
    allowance = compose.roundoff_model(count, composed.size, True) * float(reference.max()) + pruned
    assert np.max(np.abs(composed - reference)) <= allowance


def test_compose_powers_prunes_for_every_count_within_the_allowance():
    """compose_powers drops the frequencies negligible at its smallest count for every
    count, and each result is within its allowance (round-off model plus the pruning
    term) of the full long double power at every entry."""
    measure = _bell_measure()
    counts = [300, 302, 301, 340]
    centre = int(round(measure.mean_index()))
    for count, composed in zip(sorted(counts), compose.compose_powers(measure, counts, 1e-14)):
        size = composed.grid_size
        placed = np.zeros(size, dtype=np.longdouble)
        compose._place(placed, measure.masses, measure.first_index - centre)
        reference = sp_fft.irfft(compose._power(sp_fft.rfft(placed), count).astype(complex), size)
        offsets = np.round((composed.positions - count * (centre * measure.step - measure.shift)) / measure.step).astype(int)
        assert np.max(np.abs(composed.masses - reference[offsets % size])) <= composed.roundoff
    keep, _ = compose._kept_frequencies(sp_fft.rfft(placed)[None, :].astype(complex), np.array([300]), size, False)
    assert keep.mean() < 0.5


def test_chirp_band_matches_a_direct_long_double_sum():
    """The chirp z-transform of a cyclic run (wrapping past the end of the row) equals the
    direct long double sum sum_t x_t e^{-2 pi i (start + t) k / n} over the band, within
    a few dozen u_ld of sum x."""
    size, start, span, frequencies = 1000, 990, 25, 40
    rng = np.random.default_rng(11)
    row = np.zeros(size, dtype=np.longdouble)
    indices = (start + np.arange(span)) % size
    row[indices] = rng.random(span)
    band = compose._chirp_band(row, start, span, frequencies, size)
    pi = np.arccos(np.longdouble(-1.0))
    angles = ((np.arange(frequencies)[:, None] * indices[None, :]) % size).astype(np.longdouble) * (2 * pi / size)
    direct = (row[indices] * (np.cos(angles) - 1j * np.sin(angles))).sum(axis=1)
    assert np.max(np.abs(band - direct)) <= 64 * compose._U_EXTENDED * float(row.sum())


def test_a_power_of_zero_is_the_identity_and_prunes_nothing():
    """A two-scale chunk whose every step may fall in the tail composes B~^{*0}: the
    pruning bound of a single row divided by its count, and 138 mixed Gaussian and
    Laplace phases of 5-11 steps at delta = 1e-10 stopped on a ZeroDivisionError.  A
    power 0 keeps every frequency, and compose_powers gives a unit atom at 0 for it."""
    measure = _bell_measure()
    row = np.zeros((1, 64))
    row[0, :7] = measure.masses
    keep, pruned = compose._kept_frequencies(sp_fft.rfft(row, axis=1), np.array([0]), 64, False)
    assert keep.all() and pruned == 0.0
    identity, square = list(compose.compose_powers(measure, [0, 2], 1e-12))
    lower = identity.lower_masses()
    assert identity.positions[int(np.argmax(lower))] == 0.0
    assert lower.max() == pytest.approx(1.0, abs=1e-9) and lower.sum() == pytest.approx(1.0, abs=1e-9)
    assert square.lower_masses().sum() == pytest.approx(1.0, abs=1e-9)
