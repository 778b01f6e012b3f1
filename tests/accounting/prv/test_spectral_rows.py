"""Rows read off their band of frequencies (verify's prefix table): the tail sums against
long double sums over the inverse transform, the eps against the whole window's reading,
and the bounds against a closed form."""

from __future__ import annotations

import importlib
import math

import mpmath
import numpy as np
import pytest

spectral_rows = importlib.import_module("dpforge.accounting.prv.spectral_rows")


def _bump(size: int, centre: float, width: float) -> np.ndarray:
    """A smooth law on the window: a Gaussian bump with a heavier right shoulder."""
    index = np.arange(size, dtype=float)
    values = np.exp(-0.5 * ((index - centre) / width) ** 2) + 0.05 * np.exp(-0.5 * ((index - centre - 3 * width) / (2 * width)) ** 2)
    return values / values.sum()


def _long_double_masses(spectrum: np.ndarray, size: int, entries: np.ndarray) -> np.ndarray:
    """(1/n) Re sum_f c_f S_f w^{c f} in long double, term by term."""
    pi = np.arccos(np.longdouble(-1.0))
    f = np.arange(spectrum.size, dtype=np.int64)
    weights = np.where(f == 0, 1.0, 2.0).astype(np.longdouble)
    turns = (entries.astype(np.int64)[:, None] * f[None, :]) % size
    angles = turns.astype(np.longdouble) * (2 * pi / size)
    real = spectrum.real.astype(np.longdouble)
    imag = spectrum.imag.astype(np.longdouble)
    return (np.cos(angles) * real - np.sin(angles) * imag) @ weights / size


def test_tail_sums_match_long_double_sums_over_the_inverse_transform():
    """sum_{c >= a} p_c and sum_{c >= a} p_c e^{-(c - a) h} from the band alone, for
    starts across the window and an end short of it, within the error bound returned,
    and that bound far below the scale of the sums (so it can fail)."""
    size, band, step = 4320, 180, 1e-3
    spectrum = np.fft.rfft(_bump(size, 1500.0, 60.0))[:band]
    end = 3900
    starts = np.array([0, 700, 1499, 1500, 1800, 2300, 2900, 3500, 3899])
    plain, discounted, plain_error, discounted_error = spectral_rows.tail_sums(spectrum, size, step, starts, end)
    masses = _long_double_masses(spectrum, size, np.arange(size))
    for index, a in enumerate(starts):
        tail = masses[a:end]
        decay = np.exp(-np.longdouble(step) * np.arange(end - a, dtype=np.longdouble))
        assert abs(np.longdouble(plain[index]) - tail.sum()) <= plain_error[index]
        assert abs(np.longdouble(discounted[index]) - (tail * decay).sum()) <= discounted_error[index]
    assert np.all(plain_error < 1e-13) and np.all(discounted_error < 1e-13)
    assert plain[-1] == pytest.approx(float(masses[3899]), rel=1e-6, abs=1e-15)
    # in long double (tiny delta): the same sums, within a bound a thousand times smaller
    # where long double carries more digits (it is about 2,000 times as precise)
    wide, wide_discounted, wide_error, wide_discounted_error = spectral_rows.tail_sums(spectrum, size, step, starts, end, extended=True)
    assert np.all(np.abs(wide - plain) <= plain_error + wide_error)
    assert np.all(np.abs(wide_discounted - discounted) <= discounted_error + wide_discounted_error)
    if np.finfo(np.longdouble).eps < np.finfo(float).eps:
        # (beyond the final rounding to double, half an ulp of each sum)
        unit = np.finfo(float).eps
        assert np.all(wide_error < 1e-3 * plain_error + unit * np.abs(wide))
        assert np.all(wide_discounted_error < 1e-3 * discounted_error + unit * np.abs(wide_discounted))
        for index, a in enumerate(starts):
            assert abs(np.longdouble(wide[index]) - masses[a:end].sum()) <= 1e-17 + 1e-12 * abs(wide[index])


def _row_from(composed, step: float):
    """A ComposedMeasure's window as a SpectralRow: the same masses, as their transform."""
    size = composed.masses.size
    return spectral_rows.SpectralRow(
        np.fft.rfft(composed.masses),
        size,
        float(composed.positions[0]),
        0,
        step,
        composed.above,
        composed.below,
        composed.infinity,
        composed.roundoff,
        spectral_rows.unit_roots(size),
    )


@pytest.mark.parametrize("delta, tolerance", [(1e-5, 1e-8), (1e-10, 6e-6)])
def test_a_row_read_off_its_spectrum_has_the_whole_windows_eps(delta, tolerance, mixed_windows):
    """The same composed window read through its spectrum and through its entries: the
    same upper and lower eps, from any floor below the answer and from any hint, and the
    profile itself alike at a few eps.  They differ by the sums' error bound (5e-15 in
    double here, a thousand times their actual error of 1e-17, since it bounds every
    cancellation in the worst case; rows below delta = 1e-8 sum in long double), the
    weights (p + r against max(p, 0) + r) and what the lower profile leaves out above
    its stop (9e-15 of mass aliased from below the window): 1e-10 and 4e-6 of eps at
    delta = 1e-5 and 1e-10."""
    for kind, composed in mixed_windows.items():
        whole = composed.upper_profile() if kind == "upper" else composed.lower_profile()
        row = _row_from(composed, 2e-3)
        answer = whole.epsilon(delta)
        for floor in (0.0, 0.5 * answer, answer - 1e-2):
            places = (row.position(0), row.position(row.size // 2), row.position(row.size - 2), answer, -5.0, math.inf)
            for hint in (None, *[(solved, stop) for solved in places for stop in places[::2]]):
                eps, (solved, _) = row.epsilon(kind, delta, floor, hint)
                assert eps == pytest.approx(answer, rel=tolerance), (kind, floor, hint)
                assert solved - 2e-3 * (1 + 1e-9) <= eps <= solved + 1e-12
        for eps in (0.0, 0.5 * answer, answer):
            assert row.delta(kind, eps) == pytest.approx(whole.delta(eps), rel=2e-4, abs=1e-15)


def _gaussian_epsilon(mu: float, delta: float) -> float:
    """eps(delta) of the Gaussian mechanism of sensitivity / sigma = mu, in mpmath
    (Balle and Wang 2018, Theorem 8)."""
    mpmath.mp.dps = 40
    mu = mpmath.mpf(mu)

    def profile(eps):
        return mpmath.ncdf(mu / 2 - eps / mu) - mpmath.exp(eps) * mpmath.ncdf(-mu / 2 - eps / mu) - delta

    low, high = mpmath.mpf(0), 40 * mu + 40  # profile decreasing: bisection to 2^-80 of the bracket
    for _ in range(80):
        middle = (low + high) / 2
        low, high = (middle, high) if profile(middle) > 0 else (low, middle)
    return float(high)


@pytest.mark.parametrize("delta", [1e-6, 1e-10])
def test_rows_read_off_their_band_bracket_the_closed_form(delta):
    """Unsampled Gaussians compose to a Gaussian of mu = sqrt(sum 1/sigma_i^2): every
    prefix row, read off its band (as verify reads them), brackets that closed form.  The
    lower profiles take off only the mass outside the window that can alias into the
    entries they read (less than all of it, above + below)."""
    from dpforge.accounting.prv.components import discretise_all
    from dpforge.mechanisms import Gaussian
    from dpforge.mechanisms.combinators import flatten

    prefixes = importlib.import_module("dpforge.accounting.prv.prefixes")
    sigmas = [3.0 + 4.0 * i / 39 for i in range(40)]
    groups = [flatten(Gaussian(sigma)) for sigma in sigmas]
    for kind in ("upper", "lower"):
        parts = [discretise_all(group, "remove", 1e-3, 1e-14, (kind,))[kind] for group in groups]
        rows = list(prefixes.compose_prefixes(parts, 1e-14))
        read = [row for row in rows if isinstance(row, spectral_rows.SpectralRow)]
        assert len(read) >= 30
        hint = None
        for count, row in enumerate(rows, start=1):
            exact = _gaussian_epsilon(math.sqrt(sum(1 / s**2 for s in sigmas[:count])), delta)
            eps, hint = prefixes._row_epsilon(row, kind, delta, 0.0, hint)
            if kind == "upper":
                assert exact <= eps <= exact * (1 + 2e-3) + 1e-9, (count, eps, exact)
            else:
                assert exact * (1 - 2e-3) - 1e-9 <= eps <= exact, (count, eps, exact)
                if isinstance(row, spectral_rows.SpectralRow):
                    assert -spectral_rows._Profile(row, "lower").constant < 0.5 * (row.above + row.below)


@pytest.mark.parametrize("at", [100, 500, 3000])
def test_the_lower_profile_stops_past_a_bump_the_coarse_scan_misses(at):
    """The lower profile's stop is found from 65 evenly spaced entries; a law narrower
    than their spacing (67.5 entries here) can fall between them, every sample then
    below the allowance and the largest of them round-off noise anywhere: the stop must
    not land before the law (the lower bound would read nothing: at 500 it stopped at
    338), so the whole window is read instead."""
    size = 4320
    values = np.zeros(size)
    values[at : at + 3] = [0.25, 0.5, 0.25]
    row = spectral_rows.SpectralRow(
        np.fft.rfft(values), size, -1.0, 0, 1e-3, 0.0, 0.0, 0.0, 1e-15, spectral_rows.unit_roots(size)
    )
    assert row._lower_stop() > at + 2
    centre = -1.0 + (at + 1) * 1e-3
    for kind in ("lower", "upper"):  # delta(eps) = 1 - e^{eps - x} about the bump at x: eps = x + log(1 - delta)
        eps, _ = row.epsilon(kind, 1e-3)
        assert eps == pytest.approx(max(centre + math.log1p(-1e-3), 0.0), abs=2e-3), kind


@pytest.mark.parametrize("theta", [0.7, 4.0])
def test_tilted_tail_sums_match_long_double_sums(theta):
    """A tilted row's sums: sum_{c >= a} p_c rho_1^{c - a} and sum_{c >= a} p_c
    rho_2^{c - a} at rho_1 = e^{-theta h}, rho_2 = e^{-(1 + theta) h}, from the band
    alone, within the error bound returned, in double and in long double."""
    size, band, step = 4320, 180, 1e-3
    spectrum = np.fft.rfft(_bump(size, 1500.0, 60.0))[:band]
    end = 3900
    starts = np.array([0, 700, 1499, 1500, 1800, 2300, 2900, 3500, 3899])
    masses = _long_double_masses(spectrum, size, np.arange(size))
    for extended in (False, True):
        first, second, first_error, second_error = spectral_rows.tail_sums(
            spectrum, size, step, starts, end, extended=extended, theta=theta
        )
        assert np.all(first_error < 1e-13) and np.all(second_error < 1e-13)
        for index, a in enumerate(starts):
            t = np.arange(end - a, dtype=np.longdouble)
            tail = masses[a:end]
            assert abs(np.longdouble(first[index]) - (tail * np.exp(-np.longdouble(theta * step) * t)).sum()) <= first_error[index]
            expected = (tail * np.exp(-np.longdouble((1 + theta) * step) * t)).sum()
            assert abs(np.longdouble(second[index]) - expected) <= second_error[index]
        # the tilted ratios discount: below the plain sums wherever the tail holds mass
        plain = spectral_rows.tail_sums(spectrum, size, step, starts, end, extended=extended)[0]
        assert np.all(first[:6] < plain[:6])


@pytest.mark.parametrize("delta", [1e-13, 1e-15])
def test_tilted_rows_bracket_the_closed_form_at_tiny_delta(delta):
    """At tiny delta the untilted rows' round-off allowance (about 1e-16 of the peak on
    every entry) is a large share of delta and they come back wide; composed again
    tilted (every measure times e^{theta x}, one theta for all rows, each row read from
    the untilted row's certified lower bound up and untilted by S_k(y)), every prefix
    row of 40 unsampled Gaussians brackets the closed form (Balle and Wang 2018,
    Theorem 8, mpmath) within 1e-3, read off its band or off its whole window."""
    from dpforge.accounting.prv.components import discretise_all
    from dpforge.accounting.prv.tilt import TiltedComposition
    from dpforge.mechanisms import Gaussian
    from dpforge.mechanisms.combinators import flatten

    prefixes = importlib.import_module("dpforge.accounting.prv.prefixes")
    sigmas = [3.0 + 4.0 * i / 39 for i in range(40)]
    exact = [_gaussian_epsilon(math.sqrt(sum(1 / s**2 for s in sigmas[:count])), delta) for count in range(1, 41)]
    groups = [flatten(Gaussian(sigma)) for sigma in sigmas]
    parts = {kind: [discretise_all(group, "remove", 1e-3, 1e-4 * delta, (kind,))[kind] for group in groups] for kind in ("lower", "upper")}
    untilted = {}
    for kind in ("lower", "upper"):
        hint, read = None, []
        for row in prefixes.compose_prefixes(parts[kind], 1e-4 * delta):
            eps, hint = prefixes._row_epsilon(row, kind, delta, 0.0, hint)
            read.append(eps)
        untilted[kind] = read
    rows = list(zip(untilted["lower"], untilted["upper"]))
    assert max((high - low) / high for low, high in rows) > 1e-2  # what tilting is for
    floors = [low for low, _ in rows]
    assert all(low <= value <= high for (low, high), value in zip(rows, exact))
    theta = prefixes._rows_tilt(parts["lower"], prefixes._RowTilt(rows, list(range(40)), 5e-5 * delta), floors)
    assert theta > 0
    read_kinds = set()
    tilted = {}
    for kind in ("lower", "upper"):
        hint, read = None, []
        for row in prefixes.compose_prefixes(parts[kind], 1e-4 * delta, theta, floors):
            read_kinds.add(type(row))
            eps, hint = prefixes._row_epsilon(row, kind, delta, 0.0, hint)
            read.append(eps)
        tilted[kind] = read
    assert read_kinds == {spectral_rows.SpectralRow, TiltedComposition}
    for count, (low, high, value) in enumerate(zip(tilted["lower"], tilted["upper"], exact), start=1):
        assert low <= value <= high, (count, low, value, high)
        assert high - low <= 1e-3 * high, (count, low, high)
