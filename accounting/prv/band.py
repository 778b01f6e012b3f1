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
Two rows of similar mass share them (:func:`band_transforms`).

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

import functools
import math

import numpy as np
from scipy import fft as sp_fft


@functools.lru_cache(maxsize=4)
def _chirp(count: int, size: int) -> np.ndarray:
    """c_m = e^{-i pi m^2 / n} for m = 0 .. count - 1, the angle reduced exactly (m^2 mod 2n).
    Cached (read only): the prefix products ask for the same one thousands of times."""
    index = np.arange(count, dtype=np.int64)
    angles = ((index * index) % (2 * size)).astype(float) * (math.pi / size)
    chirp = np.cos(angles) - 1j * np.sin(angles)
    chirp.flags.writeable = False
    return chirp


@functools.lru_cache(maxsize=4)
def _kernel_spectrum(span: int, band: int, length: int, size: int) -> np.ndarray:
    """The transform of conj(c_m) for m = -(span - 1) .. band - 1 placed cyclically on
    ``length`` points: the convolution kernel of :func:`band_transforms` (cached, read only)."""
    chirp = _chirp(max(span, band), size)
    kernel = np.zeros(length, dtype=complex)
    kernel[:band] = np.conj(chirp[:band])
    if span > 1:
        kernel[length - span + 1 :] = np.conj(chirp[1:span][::-1])
    spectrum = sp_fft.fft(kernel)
    spectrum.flags.writeable = False
    return spectrum


def band_transforms(rows: list[np.ndarray], offsets: np.ndarray, frequencies: int, size: int) -> np.ndarray:
    """sum_t rows[r][t] e^{-2 pi i (offsets[r] + t) k / size} for k = 0 .. frequencies - 1,
    one row of the result per row (module docstring); every row at most ``size`` long.

    Two real rows a, b of masses within a factor 2 share one transform: the band of
    z = a + i b at k = -(K - 1) .. K - 1 (the chirp times e^{2 pi i t (K - 1) / n}, its
    angle reduced exactly) gives A_k = (Z_k + conj(Z_{-k})) / 2 and
    B_k = (Z_k - conj(Z_{-k})) / 2i, each within the error of Z, which is relative to
    the pair's mass, at most three times either's."""
    band = 2 * frequencies - 1  # k = -(K - 1) .. K - 1
    length = sp_fft.next_fast_len(max(row.size for row in rows) + band - 1)
    # the longest row this length convolves without wrapping (the kernel and chirp then
    # depend on the length only, so batches of similar rows share the cached ones)
    span = min(length - band + 1, size)
    chirp = _chirp(max(span, band), size)
    kernel_spectrum = _kernel_spectrum(span, band, length, size)
    # the band starts at k0 = -(K - 1): x_t e^{-2 pi i t k0 / n} = x_t e^{2 pi i t (K - 1) / n}
    t = np.arange(span, dtype=np.int64)
    turns = ((t * (frequencies - 1)) % size).astype(float) * (2.0 * math.pi / size)
    start_chirp = chirp[:span] * (np.cos(turns) + 1j * np.sin(turns))
    masses = np.array([float(row.sum()) for row in rows])
    pairs: list[tuple[int, int | None]] = []
    index = 0
    while index < len(rows):
        partner = index + 1
        if partner < len(rows) and max(masses[index], masses[partner]) <= 2.0 * min(masses[index], masses[partner]):
            pairs.append((index, partner))
            index += 2
        else:
            pairs.append((index, None))
            index += 1
    weighted = np.zeros((len(pairs), length), dtype=complex)
    for p, (first, second) in enumerate(pairs):
        weighted[p, : rows[first].size] = rows[first] * start_chirp[: rows[first].size]
        if second is not None:
            weighted[p, : rows[second].size] += 1j * rows[second] * start_chirp[: rows[second].size]
    convolved = sp_fft.ifft(sp_fft.fft(weighted, axis=1) * kernel_spectrum, axis=1)[:, :band] * chirp[:band]
    centre = frequencies - 1  # index of k = 0
    positive = convolved[:, centre:]  # Z_k, k = 0 .. K - 1
    negative = np.conj(convolved[:, centre::-1])  # conj(Z_{-k})
    out = np.empty((len(rows), frequencies), dtype=complex)
    for p, (first, second) in enumerate(pairs):
        if second is None:
            out[first] = positive[p]
            continue
        out[first] = 0.5 * (positive[p] + negative[p])
        out[second] = -0.5j * (positive[p] - negative[p])
    shifts = ((np.asarray(offsets, dtype=np.int64)[:, None] % size) * np.arange(frequencies, dtype=np.int64)[None, :]) % size
    angles = shifts.astype(float) * (2.0 * math.pi / size)
    return out * (np.cos(angles) - 1j * np.sin(angles))
