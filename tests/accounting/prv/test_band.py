"""Band-limited transforms of many distinct measures (:mod:`dpforge.accounting.prv.band`,
:func:`dpforge.accounting.prv.compose._band_limited_product`): the chirp z-transform's
band against long double direct sums, and a composition of many distinct measures made
through it against the one made from whole transforms."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

from dpforge.accounting.prv.band import band_transforms
from dpforge.accounting.prv.discretise import GridMeasure

# the module (the package re-exports a function of the same name)
compose = importlib.import_module("dpforge.accounting.prv.compose")

U = 2.0**-53


def _direct(row: np.ndarray, offset: int, frequencies: int, size: int) -> np.ndarray:
    """sum_t row[t] e^{-2 pi i (offset + t) k / size}, summed in long double with every
    angle reduced exactly."""
    t = np.arange(row.size, dtype=np.int64)
    k = np.arange(frequencies, dtype=np.int64)
    turns = (((offset % size) + t)[:, None] * k[None, :]) % size
    angles = turns.astype(np.longdouble) * (2 * np.pi / np.longdouble(size))
    return (row.astype(np.longdouble)[:, None] * (np.cos(angles) - 1j * np.sin(angles))).sum(axis=0)


@pytest.mark.parametrize("normalised", [False, True])
@pytest.mark.parametrize("size", [1000, 4096, 6561, 194_400])
def test_band_transforms_are_within_the_transform_error_the_model_allows(size, normalised):
    """Rows of 1 to 3,000 points at offsets that wrap both ways, in one batch (short rows
    share the longest one's chirp transform): every frequency within the transform
    error (4 log2 n + 2) u sum x that :func:`.compose._kept_frequencies` and the
    round-off model allow a spectrum, and in fact within a third of it (single-point
    rows, whose norm is their largest entry, come closest: 11 u of their mass).  Rows of
    masses within a factor 2 are transformed two to one, each within the pair's error."""
    rng = np.random.default_rng(size)
    lengths = [1, 2, 7, min(300, size // 3), min(3000, size // 2)]
    rows = [rng.random(n) * np.exp(-20.0 * rng.random(n)) for n in lengths]
    if normalised:  # masses within a factor 2 share a transform, two rows to one (and one left alone)
        rows = [row / row.sum() * (1.0 + 0.5 * (r % 2)) for r, row in enumerate(rows)]
    offsets = np.array([-5, size - 2, 0, -(size // 3), 17])
    frequencies = 41
    got = band_transforms(rows, offsets, frequencies, size)
    for r, (row, offset) in enumerate(zip(rows, offsets)):
        exact = _direct(row, int(offset), frequencies, size).astype(complex)
        model = (4.0 * math.log2(size) + 2.0) * U * float(row.sum())
        assert np.max(np.abs(got[r] - exact)) <= model / 3.0


def _bells(count: int) -> list[tuple[GridMeasure, int]]:
    """``count`` distinct one-step laws (discretised bells of 5-31 points, some skewed),
    each taken 1-4 times, on a unit grid."""
    rng = np.random.default_rng(11)
    out = []
    for i in range(count):
        half = int(rng.integers(2, 16))
        x = np.arange(-half, half + 1)
        masses = np.exp(-0.5 * (x / (0.4 * half)) ** 2) * (1.0 + 0.5 * np.tanh(x / half * rng.random()))
        out.append((GridMeasure(int(rng.integers(-3, 4)) - half, masses / masses.sum(), 1.0, 0.0), int(rng.integers(1, 5))))
    return out


def test_a_band_limited_composition_agrees_with_whole_transforms_within_its_allowance(monkeypatch):
    """160 distinct measures (about 400 steps) on a window of 1,000 points, in batches of
    a few rows: through the band path only every 8th measure is transformed whole (the
    rest at the kept band, far below n / 2), and every entry is within the composition's
    round-off model plus both pruning bounds of the whole-transform composition."""
    measures = _bells(160)
    weights = [m.masses for m, _ in measures]
    lam, cumulant = np.array([1.0, -1.0]), np.array([499.0, 499.0])  # a window of [-499, 499]
    monkeypatch.setattr(compose, "_BATCH_ENTRIES", 16_000)  # batches of about 16 rows: the many-measure path
    whole_rows: list[int] = []
    banded: list[int] = []
    rfft, band = compose.sp_fft.rfft, compose.band_transforms

    def rfft_spy(x, *args, **kwargs):
        whole_rows.append(x.shape[0] if x.ndim == 2 else 1)
        return rfft(x, *args, **kwargs)

    monkeypatch.setattr(compose.sp_fft, "rfft", rfft_spy)  # scipy.fft's, restored after the test

    def band_spy(rows, offsets, frequencies, size):
        banded.append(frequencies)
        return band(rows, offsets, frequencies, size)

    monkeypatch.setattr(compose, "band_transforms", band_spy)
    _, _, limited, pruned_band = compose.fft_window(measures, weights, lam, cumulant, 0.0)
    assert sum(whole_rows) == 20 and banded and max(banded) < limited.size // 8
    whole_rows.clear()
    monkeypatch.setattr(compose, "_BAND_MEASURES", 10**9)
    _, _, whole, pruned_whole = compose.fft_window(measures, weights, lam, cumulant, 0.0)
    assert sum(whole_rows) == 160
    steps = sum(count for _, count in measures)
    allowance = compose.roundoff_model(steps, whole.size) * float(whole.max()) + pruned_band + pruned_whole
    assert pruned_band > 0.0
    assert np.max(np.abs(limited - whole)) <= allowance
    assert limited.sum() == pytest.approx(1.0, abs=1e-9)


def test_rows_longer_than_the_window_take_the_whole_transform_path(monkeypatch):
    """A measure wider than the window is folded onto it (:func:`.compose._place`): the
    band path declines, and the composition is the whole-transform one."""
    measures = _bells(100) + [(GridMeasure(-700, np.full(1400, 1 / 1400), 1.0, 0.0), 1)]
    weights = [m.masses for m, _ in measures]
    lam, cumulant = np.array([1.0, -1.0]), np.array([499.0, 499.0])
    monkeypatch.setattr(compose, "_BATCH_ENTRIES", 16_000)
    assert compose._band_limited_product(measures, weights, 1000) is None
    _, _, composed, _ = compose.fft_window(measures, weights, lam, cumulant, 0.0)
    assert composed.sum() == pytest.approx(1.0, abs=1e-9)
