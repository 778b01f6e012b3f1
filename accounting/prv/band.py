"""The lowest frequencies of many short rows' transforms, by the chirp z-transform.

A composition of many distinct measures on a window of n points transforms every
measure on the whole window, although after thousands of steps the composed spectrum is
negligible at all but its lowest frequencies: 10,000 phases of 10 steps keep 66 of
97,201 (:func:`.compose._kept_frequencies`), and 10,000 single steps 66 of 17,281.  A
row of s points needs only those: X_k = sum_t x_t e^{-2 pi i (o + t) k / n} for
k < K (o its placement offset), which Bluestein's chirp z-transform (Rabiner, Schafer,
Rader 1969) gives from one linear convolution: with tk = (t^2 + k^2 - (k - t)^2) / 2,

    X_k = e^{-2 pi i o k / n} c_k sum_t (x_t c_t) conj(c_{k - t}),   c_m = e^{-i pi m^2 / n},

two transforms of L = next_fast_len(s + K - 1) points (the chirp's own is shared by a
batch) where the whole window took one of n: at s = 11k, n = 194k, 0.15 against 0.72 ms.

Accuracy.  Every angle is reduced exactly before its cosine and sine (m^2 mod 2n,
o k mod n), so each chirp value is within a few u.  The convolution by transforms is
within about 3 log2(L) u sum_t |x_t| (three transforms, each within log2(L) u of the
norm it carries, the chirp of unit modulus), and the three chirp products add a few u
more: within the transform error (4 log2 n + 2) u sum_t x_t that the composition's
round-off model and :func:`.compose._kept_frequencies` allow each spectrum, since
L <= n (checked against long double direct sums in
``tests/accounting/prv/test_band.py``).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import fft as sp_fft


def _chirp(count: int, size: int) -> np.ndarray:
    """c_m = e^{-i pi m^2 / n} for m = 0 .. count - 1, the angle reduced exactly (m^2 mod 2n)."""
    index = np.arange(count, dtype=np.int64)
    angles = ((index * index) % (2 * size)).astype(float) * (math.pi / size)
    return np.cos(angles) - 1j * np.sin(angles)


def band_transforms(rows: list[np.ndarray], offsets: np.ndarray, frequencies: int, size: int) -> np.ndarray:
    """sum_t rows[r][t] e^{-2 pi i (offsets[r] + t) k / size} for k = 0 .. frequencies - 1,
    one row of the result per row (module docstring); every row at most ``size`` long."""
    span = max(row.size for row in rows)
    length = sp_fft.next_fast_len(span + frequencies - 1)
    chirp = _chirp(max(span, frequencies), size)
    kernel = np.zeros(length, dtype=complex)
    kernel[:frequencies] = np.conj(chirp[:frequencies])
    if span > 1:
        kernel[length - span + 1 :] = np.conj(chirp[1:span][::-1])
    kernel_spectrum = sp_fft.fft(kernel)
    weighted = np.zeros((len(rows), length), dtype=complex)
    for r, row in enumerate(rows):
        weighted[r, : row.size] = row * chirp[: row.size]
    convolved = sp_fft.ifft(sp_fft.fft(weighted, axis=1) * kernel_spectrum, axis=1)[:, :frequencies]
    shifts = ((np.asarray(offsets, dtype=np.int64)[:, None] % size) * np.arange(frequencies, dtype=np.int64)[None, :]) % size
    angles = shifts.astype(float) * (2.0 * math.pi / size)
    return convolved * chirp[:frequencies] * (np.cos(angles) - 1j * np.sin(angles))
