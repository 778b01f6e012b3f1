"""epsilon(delta) of a composed measure read off its band-limited spectrum, without an
inverse transform: verify's rows (:func:`.prefixes.compose_prefixes`).

A prefix of a long plan is composed on the window of the whole plan, where its spectrum
is negligible beyond a narrow band of G frequencies (200 phases of 10 steps on 17,280
points keep 58 at row 50 and 28 at the last), yet each row took an inverse transform of
the whole window and a pass over it to read its epsilon.  The profile needs only tail
sums of the composed masses: on the window, p_j = (1/n) Re sum_{f < G} c_f S_f
w^{(o + j) f} (w = e^{2 pi i / n}, c_0 = 1 and c_f = 2 otherwise, o the row's offset),
so for any start a and length N, by the geometric series,

    T_rho(a, N) = sum_{t < N} p_{a + t} rho^t
                = (1/n) Re [ sum_f V_f w^{a f} - rho^N sum_f V_f w^{(a + N) f} ],
    V_f = c_f S_f / (1 - rho w^f)

(the f = 0 term of rho = 1 is S_0 N / n).  The end a + N is the profile's end, the same
for every start, so its sum is formed once a row; each start then costs one pass over
the band.  The profile at a grid point x_J is constant + T_1 - e^{-h} T_{e^{-h}} over
the entries above it (:class:`.compose.ComposedProfile`), so epsilon(delta) is found by
a search over J from where the previous row was solved (a handful of rounds of 16
points) and solved in the last cell exactly as there.

Weights.  The upper profile's weights are p_j + r (r the row's per-entry allowance:
round-off model plus what the dropped frequencies can move an entry), the lower one's
p_j - r: the composed law's true masses lie within r of the p_j, so these bound the sums
from above and below; they are linear in p, which the spectral sums need (the whole
window's reading takes max(p_j, 0) + r and max(p_j - r, 0), within r of these at each
entry).  The lower profile reads the entries up to the first past the peak where p_j
falls below r (a sub-measure: still a lower bound), and takes off only the mass outside
the window that can alias into those entries (:class:`_Profile`).  Neither bound needs
the profile to be monotone between grid points: the upper bound is a point where the
upper profile is at most delta (the composed law's delta is at most that there, and
only falls beyond), the lower bound one where the lower profile equals delta (the law's
delta is at least that there, and at least as large before).

Accuracy of the sums.  Every exponent is reduced exactly ((a f) mod n as integers) and
looked up in a table of roots of unity formed in long double, 1 - rho w^f is formed
without cancellation (-expm1(-h) + e^{-h} 2 sin(pi f/n) (sin(pi f/n) - i cos(pi f/n))),
and the sums are taken pairwise, so each is within (16 + 1 + log2 G) u of
sum_f |V_f| (:func:`_sum_error`); that bound, over both sums and the S_0 N term, is
added to the upper and taken from the lower profile (:func:`tail_sums`).  It bounds the
worst cancellation: 5e-15 on a full band of 1,441 where the actual error was 1e-17,
which moves eps by 1e-10 at delta = 1e-5 and 1e-5 at 1e-10; the sums are checked
against long double sums over the inverse transform in
``tests/accounting/prv/test_spectral_rows.py``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from dpforge.accounting.prv.compose import _U, _U_EXTENDED, chernoff_above, chernoff_below
from dpforge.accounting.prv.tilt import untilting_error

#: points evaluated a round by :meth:`SpectralRow.epsilon`'s search
_ROUND_POINTS = 16
#: rows read at a delta below this sum in long double (:func:`_sum_error`: the double sums'
#: bound, about 1e-14, would be 1e-4 of delta at 1e-10 and 1e-2 at 1e-12)
_EXTENDED_BELOW = 1e-8


def unit_roots(size: int) -> np.ndarray:
    """w^k = e^{2 pi i k / n} for k < n, each formed in long double and rounded: within
    u of the exact value where long double carries more digits than double
    (:func:`_root_error`)."""
    return _extended_roots(size).astype(complex)


@functools.lru_cache(maxsize=2)
def _extended_roots(size: int) -> np.ndarray:
    """w^k for k < n in long double (read only), each angle 2 pi k / n and its cosine and
    sine formed there."""
    pi = np.arccos(np.longdouble(-1.0))
    angles = np.arange(size, dtype=np.longdouble) * (2 * pi / size)
    roots = np.cos(angles) + 1j * np.sin(angles)
    roots.flags.writeable = False
    return roots


def _unit(roots: np.ndarray) -> float:
    """The unit roundoff of the arithmetic that ``roots`` carries."""
    return _U_EXTENDED if roots.dtype == np.clongdouble else _U


def _root_error(roots: np.ndarray) -> float:
    """Each entry of ``roots`` within this many of its own unit roundoff: 1 where long
    double carries more digits than its angles needed (the angle 2 pi k / n within a few
    u_ld of itself, its cosine and sine within an ulp more, then rounded), else about
    4 pi (the angle's own rounding, 2 u of up to 2 pi)."""
    if roots.dtype == np.clongdouble:
        return 4.0 if _U_EXTENDED < _U else 14.0
    return 1.0 if _U_EXTENDED < _U else 14.0


def _real_sums(indices: np.ndarray, values: np.ndarray, roots: np.ndarray) -> np.ndarray:
    """Re sum_f values_f w^{a f} for every a in ``indices``: the exponent reduced
    exactly, (a f) mod n, and looked up in ``roots`` (:func:`unit_roots`: a gather where
    a cosine and sine each cost five times more), the real parts of the products formed
    and summed pairwise along each row (numpy's sum over a contiguous axis), in the
    precision of ``roots`` and ``values``."""
    size = roots.size
    turns = (np.asarray(indices, dtype=np.int64)[:, None] % size) * np.arange(values.size, dtype=np.int64)[None, :] % size
    phases = roots[turns]
    return np.sum(phases.real * values.real - phases.imag * values.imag, axis=1)


def _fold_weights(band: int, size: int, dtype: type = np.float64) -> np.ndarray:
    """c_f for f < ``band``: 1 at f = 0 and at the Nyquist frequency n/2 (each appears once
    in the full spectrum), 2 elsewhere (f and n - f folded into one)."""
    weights = np.full(band, 2.0, dtype=dtype)
    weights[0] = 1.0
    if 2 * (band - 1) == size:
        weights[-1] = 1.0
    return weights


def _sum_error(band: int, roots: np.ndarray) -> float:
    """The relative error bound, over sum_f |V_f|, of :func:`_real_sums`: each V_f within
    8 units (a division by 1 - rho w^f formed within 4), each root within
    :func:`_root_error` units, the real part of the product within 3 more, and pairwise
    summation within log2 G + 1 of the sum of the moduli; with margin,
    (16 + root error + log2 G) units of the arithmetic's roundoff."""
    return (16.0 + _root_error(roots) + math.log2(band + 1)) * _unit(roots)


@dataclass(frozen=True)
class _Series:
    """V_f = c_f S_f / (1 - rho w^f) of one ratio rho, with its sum at the window's end."""

    values: np.ndarray
    #: Re sum_f V_f w^{end f}
    at_end: float
    #: sum_f |V_f|, for the error bound
    magnitude: float


def _series(spectrum: np.ndarray, roots: np.ndarray, rate: float, step: float, end: int) -> _Series:
    """:class:`_Series` for rho = e^{-rate step} (``rate`` >= 0), in the precision of
    ``roots``; at rate 0 (rho = 1) the f = 0 term is left out (:func:`tail_sums` adds
    S_0 N / n)."""
    band, size = spectrum.size, roots.size
    real = np.longdouble if roots.dtype == np.clongdouble else np.float64
    pi = np.arccos(real(-1.0))
    f = np.arange(band, dtype=real)
    half = np.sin(pi * f / size)
    one_minus = 2 * half * (half - 1j * np.cos(pi * f / size))  # 1 - w^f
    if rate > 0:  # 1 - rho w^f = (1 - rho) + rho (1 - w^f), without cancellation
        one_minus = -np.expm1(real(-rate * step)) + np.exp(real(-rate * step)) * one_minus
    weights = _fold_weights(band, size, real)
    values = np.zeros(band, dtype=one_minus.dtype)
    start = 0 if rate > 0 else 1
    values[start:] = weights[start:] * spectrum[start:].astype(one_minus.dtype) / one_minus[start:]
    at_end = _real_sums(np.array([end]), values, roots)[0]
    return _Series(values, at_end, float(np.sum(np.abs(values))))


def tail_sums(
    spectrum: np.ndarray,
    size: int,
    step: float,
    starts: np.ndarray,
    end: int,
    extended: bool = False,
    theta: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(sum_{c = a}^{end - 1} p_c rho_1^{c - a}, sum_{c = a}^{end - 1} p_c rho_2^{c - a}, and
    a bound on each one's floating-point error) for every a in ``starts``, with
    rho_1 = e^{-theta h} and rho_2 = e^{-(1 + theta) h} (``theta`` >= 0: the untilting
    factors of a tilted row, :class:`SpectralRow`), p_c = (1/n) Re sum_{f < G} c_f S_f
    w^{c f} the inverse transform of the band ``spectrum`` (module docstring); in long
    double with ``extended``."""
    roots = _extended_roots(size) if extended else unit_roots(size)
    rates = (theta, 1.0 + theta)
    first, second = (_series(spectrum, roots, rate, step, end) for rate in rates)
    return _sums(spectrum, roots, step, np.asarray(starts, dtype=np.int64), end, first, second, rates)


def _sums(
    spectrum: np.ndarray,
    roots: np.ndarray,
    step: float,
    starts: np.ndarray,
    end: int,
    first: _Series,
    second: _Series,
    rates: tuple[float, float] = (0.0, 1.0),
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`tail_sums` with the row's two series formed at ``rates`` (in their
    precision; the sums rounded to double at the end, half an ulp more of each in the
    bound)."""
    size = roots.size
    real = np.longdouble if roots.dtype == np.clongdouble else np.float64
    counts = (end - starts).astype(real)
    # each sum within _sum_error of sum |V|, the differences and the division by n
    # within 3 units of their terms' moduli
    scale = (_sum_error(spectrum.size, roots) + 4.0 * _unit(roots)) / size

    def one(series: _Series, rate: float) -> tuple[np.ndarray, np.ndarray]:
        if rate > 0:
            ratio = np.exp(-rate * step * counts)
            value = ((_real_sums(starts, series.values, roots) - ratio * series.at_end) / size).astype(float)
            return value, scale * series.magnitude * (1.0 + ratio.astype(float)) + _U * np.abs(value)
        value = ((_real_sums(starts, series.values, roots) - series.at_end + real(spectrum[0].real) * counts) / size).astype(float)
        return value, scale * (2.0 * series.magnitude + abs(spectrum[0].real) * counts.astype(float)) + _U * np.abs(value)

    plain, plain_error = one(first, rates[0])
    discounted, discounted_error = one(second, rates[1])
    return plain, discounted, plain_error, discounted_error


@dataclass(frozen=True)
class SpectralRow:
    """A composed measure on a window of ``size`` points held as its band of frequencies:
    mass p_j at ``base + (first + j) step`` for j < ``size`` is
    (1/n) Re sum_{f < G} c_f spectrum_f w^{(first + j) f}, within ``roundoff`` of the
    composed law's; ``above``/``below`` bound the mass beyond the window and
    ``infinity`` is the mass at +inf, as in :class:`.compose.ComposedMeasure`."""

    spectrum: np.ndarray
    size: int
    base: float
    first: int
    step: float
    above: float
    below: float
    infinity: float
    roundoff: float
    #: :func:`unit_roots` of ``size`` (shared by the rows of one window)
    roots: np.ndarray
    #: the Chernoff exponents lam and the row's composed cumulant log E[e^{lam L}] there
    #: (for the mass below the window that can alias into the lower profile's entries;
    #: of the tilted law for a tilted row)
    exponents: np.ndarray = field(default_factory=lambda: np.empty(0), compare=False, repr=False)
    cumulants: np.ndarray = field(default_factory=lambda: np.empty(0), compare=False, repr=False)
    #: a tilted row (theta > 0, :mod:`.tilt`): the band is that of the tilted law
    #: p~_j = p_j e^{theta y_j - log_scale}, ``roundoff`` is in its units, and the
    #: profiles read only positions from ``floor`` (a certified lower bound on the eps
    #: sought) up, untilting by S(y) = e^{log_scale - theta y}; ``above`` and ``below``
    #: stay untilted (``below``: the mass below the window at or above ``floor``) and
    #: ``tilted_above`` / ``tilted_below`` bound the tilted law's mass beyond the window
    theta: float = 0.0
    log_scale: float = 0.0
    floor: float = 0.0
    tilted_above: float = 0.0
    tilted_below: float = 0.0
    #: a tilted row: each composed tilted entry's relative error from forming the tilted
    #: one-step masses in log space (:func:`.tilt.log_space_error`)
    relative_error: float = 0.0

    def mass_below(self, position: float) -> float:
        """A Chernoff bound on the composed (for a tilted row: tilted) mass at or below
        ``position`` (``below`` where no exponents are known): min over lam < 0 of
        e^{K(lam) - lam position}."""
        bound = self.tilted_below if self.theta > 0 else self.below
        if not np.any(self.exponents < 0):
            return bound
        return min(bound, chernoff_below(self.exponents, self.cumulants, position))

    def mass_above(self, position: float) -> float:
        """A Chernoff bound on the composed (for a tilted row: tilted) mass at or above
        ``position`` (``above`` where no exponents are known): min over lam > 0 of
        e^{K(lam) - lam position}."""
        bound = self.tilted_above if self.theta > 0 else self.above
        if not np.any(self.exponents > 0):
            return bound
        return min(bound, chernoff_above(self.exponents, self.cumulants, position))

    def untilting(self, position: float) -> float:
        """S(y) = e^{log_scale - theta y}, the factor that untilts a mass at ``position``
        (1 for an untilted row)."""
        return math.exp(self.log_scale - self.theta * position) if self.theta > 0 else 1.0

    def first_read(self) -> int:
        """The first window entry the profiles read: above 0 and at or above ``floor``."""
        entry = self.first_positive()
        if self.floor > 0:
            entry = max(entry, int(math.ceil((self.floor - self.base) / self.step - 1e-9)) - self.first)
        return min(entry, self.size)

    def first_positive(self) -> int:
        """The first window entry whose position is above 0 (the profiles read from it)."""
        return max(0, int(math.floor(-self.base / self.step)) - self.first + 1)

    @property
    def grid_size(self) -> int:
        """The window's points (as :attr:`.compose.ComposedMeasure.grid_size`)."""
        return self.size

    def position(self, index: int) -> float:
        """The position of window entry ``index``."""
        return self.base + (self.first + index) * self.step

    def masses(self, entries: np.ndarray) -> np.ndarray:
        """p_j for j in ``entries``: (1/n) Re sum_f c_f S_f w^{(first + j) f}."""
        weights = _fold_weights(self.spectrum.size, self.size)
        return _real_sums(self.first + np.asarray(entries, dtype=np.int64), weights * self.spectrum, self.roots) / self.size

    def delta(self, kind: str, epsilon: float) -> float:
        """The ``kind`` ('upper' or 'lower') profile at ``epsilon`` (as
        :meth:`.compose.ComposedProfile.delta` of the whole window's profile, with the
        weights p_j +- r of the module docstring)."""
        if epsilon < self.floor:
            if kind == "upper":
                return 1.0  # a tilted row reads nothing below its floor
            epsilon = self.floor  # delta only falls with eps: a lower bound there holds below
        profile = _Profile(self, kind)
        entry = max(0, int(math.floor((epsilon - self.base) / self.step)) - self.first + 1)
        while entry < profile.stop and self.position(entry) <= epsilon:
            entry += 1
        if entry >= profile.stop:
            return max(profile.constant, 0.0)
        plain, discounted = profile.parts(np.array([entry]))
        value = profile.constant + float(plain[0]) - math.exp(epsilon - self.position(entry)) * float(discounted[0])
        return max(value, 0.0)

    def epsilon(
        self, kind: str, delta: float, floor: float = 0.0, hint: tuple[float, float] | None = None
    ) -> tuple[float, tuple[float, float]]:
        """(the smallest eps >= 0 where the ``kind`` ('upper' or 'lower') profile is at
        most ``delta``; the positions where it was solved and where the profile stopped):
        as :meth:`.compose.ComposedMeasure.upper_profile` and ``lower_profile`` read from
        ``floor`` (the previous row's certified lower bound: eps only grows with the
        prefix), by searches started at the entries nearest the positions ``hint`` (the
        previous row's; each row's window starts elsewhere)."""
        upper = kind == "upper"
        floor = max(floor, self.floor)
        solved_near, stop_near = (None, None) if hint is None else (self._entry_near(hint[0]), self._entry_near(hint[1]))
        profile = _Profile(self, kind, stop_near, extended=delta < _EXTENDED_BELOW)
        constant, stop = profile.constant, profile.stop
        where = (self.position(stop - 1), self.position(stop))
        if upper and constant >= delta:
            return math.inf, where
        # the entries the profile reads: positions above 0 and at or above the floor
        zero = self.first_positive()
        start = zero
        if floor > 0:
            start = max(start, int(math.ceil((floor - self.base) / self.step - 1e-9)) - self.first)
        if self.theta > 0 and start >= stop:
            # a tilted row reads nothing below its floor (S(y) grows without bound there):
            # with no entry from the floor up, the upper profile is its constant there
            # (below delta, above), the lower one reads nothing
            return (floor if upper else 0.0), where
        start = min(start, stop - 1)
        if not (upper and floor > 0) and not self.theta > 0:
            # the profile at eps = 0: constant + sum_{x_j > 0} w_j (1 - e^{-x_j})
            at_zero = constant
            if zero < stop:
                plain, discounted = profile.parts(np.array([zero]))
                at_zero += float(plain[0]) - math.exp(-self.position(zero)) * float(discounted[0])
            if max(at_zero, 0.0) <= delta:
                return 0.0, (self.position(zero), self.position(stop))
        # search: low is below the answer (or start - 1), high at or above it
        low, high = start - 1, stop - 1
        near = solved_near
        if near is not None and start <= near < high:
            offsets = 2 ** np.arange(_ROUND_POINTS // 2)
            candidates = np.unique(np.clip(np.concatenate([near - offsets[::-1] + 1, near + offsets]), start, high - 1))
            low, high = _narrow(candidates, profile.at_points(candidates), delta, low, high)
        while high - low > 1:
            count = min(_ROUND_POINTS, high - low - 1)
            candidates = np.unique(np.linspace(low + 1, high - 1, count).round().astype(np.int64))
            low, high = _narrow(candidates, profile.at_points(candidates), delta, low, high)
        entry = high
        suffix, discounted = profile.parts(np.array([entry]))
        left = self.position(entry - 1) if entry > start else 0.0
        x = self.position(entry)
        numerator = constant + float(suffix[0]) - delta
        denominator = float(discounted[0])
        if denominator <= 0 or numerator <= 0:
            eps = max(left, 0.0) if numerator <= 0 else x
        else:
            eps = min(max(x + math.log(numerator / denominator), left), x)
        if upper and floor > 0:
            eps = max(eps, floor)
        return float(eps), (self.position(entry), self.position(stop))

    def _entry_near(self, position: float) -> int | None:
        """The window entry nearest ``position`` (None when it is not finite)."""
        if not math.isfinite(position):
            return None
        return int(round((position - self.base) / self.step)) - self.first

    def _lower_stop(self, near: int | None = None) -> int:
        """About the first entry above the peak where p_j falls below the allowance: from
        the entries around ``near`` (where the previous row's stopped) when p_j crosses
        the allowance among them, else the first of 65 evenly spaced entries past the
        largest of them where it is below; then 16-point rounds back to the first such
        entry (any stop is sound for the lower profile; this one drops the far tail,
        whose entries lie below the allowance, and the mass below the window that
        aliased to its top)."""
        low = high = None
        if near is not None and 0 < near < self.size:
            offsets = 2 ** np.arange(_ROUND_POINTS // 2)
            around = np.unique(np.clip(np.concatenate([near - offsets[::-1] + 1, near + offsets]), 0, self.size - 1))
            under = np.flatnonzero(self.masses(around) < self.roundoff)
            if under.size and under[0] > 0:
                low, high = int(around[under[0] - 1]), int(around[under[0]])
        if low is None:
            coarse = np.unique(np.linspace(0, self.size - 1, 65).round().astype(np.int64))
            values = self.masses(coarse)
            peak = int(np.argmax(values))
            under = np.flatnonzero(values[peak:] < self.roundoff)
            if under.size == 0 or under[0] == 0:
                # every sample is below the allowance: a law narrower than their spacing
                # fell between them, and the largest is noise anywhere; read it all
                return self.size
            low, high = int(coarse[peak + under[0] - 1]), int(coarse[peak + under[0]])
        while high - low > 1:
            candidates = np.unique(np.linspace(low + 1, high - 1, min(_ROUND_POINTS, high - low - 1)).round().astype(np.int64))
            low, high = _narrow(candidates, self.masses(candidates), self.roundoff, low, high)
        return high


class _Profile:
    """One bound's profile of a :class:`SpectralRow`: its constant, the entries it reads
    (below ``stop``), and its tail sums."""

    def __init__(self, row: SpectralRow, kind: str, stop_near: int | None = None, extended: bool = False) -> None:
        upper = kind == "upper"
        self.row = row
        self.weight = row.roundoff if upper else -row.roundoff
        self.sign = 1.0 if upper else -1.0
        # the lower profile reads the entries below the first where p_j falls under the
        # allowance only (a sub-measure: still a lower bound; each entry above it would
        # take up to r, at delta = 1e-10 about as much as the profile itself)
        self.stop = row.size if upper else row._lower_stop(stop_near)
        # the two tail sums' ratios are e^{-rate h}: 1 and e^{-h}, or for a tilted row
        # e^{-theta h} and e^{-(1 + theta) h} (:meth:`parts`)
        self.rates = (row.theta, 1.0 + row.theta)
        if upper:
            self.constant = row.infinity + row.above + (row.below if row.position(0) > row.floor else 0.0)
        else:
            # what lies outside the window aliases in: mass k steps below it wraps to entry
            # n - k and mass k steps above it to entry k - 1, so only what lies more than
            # n - stop steps below or more than (the first entry read) steps above can
            # reach the entries read; the rest lands where the profile does not read (the
            # whole window's reading counts it and then takes all of it back, 1.8e-9 at
            # delta = 1e-5 on 200 phases, 2e-5 of eps)
            # (for a tilted row, tilted masses, each untilted by at most S at the first
            # entry read)
            read = row.first_read()
            below = row.mass_below(row.position(0) - (row.size - self.stop + 0.5) * row.step)
            above = row.mass_above(row.position(row.size - 1) + (read + 0.5) * row.step)
            at = row.position(min(read, row.size - 1))
            self.constant = -(above + below) * row.untilting(at) * (1.0 + 2.0 * _untilting_error(row, np.array([at]))[0])
        end = row.first + self.stop
        self.roots = _extended_roots(row.size) if extended else row.roots
        self.series = tuple(_series(row.spectrum, self.roots, rate, row.step, end) for rate in self.rates)

    def parts(self, entries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(sum_{J <= j < stop} w_j, sum_{J <= j < stop} w_j e^{-(j - J) h}) for each J
        in ``entries``, with their error bounds added (upper) or taken (lower).  For a
        tilted row w_j = (p~_j +- r~) S(y_j) and S(y_j) = S(y_J) e^{-theta (j - J) h}:
        the same sums at ratios e^{-theta h} and e^{-(1 + theta) h}, times S(y_J)."""
        row = self.row
        plain, discounted, plain_error, discounted_error = _sums(
            row.spectrum, self.roots, row.step, row.first + entries, row.first + self.stop, *self.series, self.rates
        )
        counts = np.maximum(self.stop - entries, 0).astype(float)
        plain = plain + self.weight * _geometric(self.rates[0] * row.step, counts) + self.sign * plain_error
        discounted = discounted + self.weight * _geometric(self.rates[1] * row.step, counts) - self.sign * discounted_error
        if row.theta > 0:
            positions = row.base + (row.first + entries) * row.step
            # S(y) and the tilted masses carry their own rounding: moved towards the side
            # each bound is on (.tilt.untilting_error)
            untilting = np.exp(row.log_scale - row.theta * positions) * (1.0 + 2.0 * self.sign * _untilting_error(row, positions))
            plain, discounted = plain * untilting, discounted * untilting
        return plain, discounted

    def at_points(self, entries: np.ndarray) -> np.ndarray:
        """The profile at position(J), J in ``entries``: constant + sum_{j > J} w_j
        (1 - e^{-(j - J) h}) (each error bound moving it towards the side it bounds)."""
        after, discounted = self.parts(entries + 1)
        return self.constant + after - math.exp(-self.row.step) * discounted


def _untilting_error(row: SpectralRow, positions: np.ndarray) -> np.ndarray:
    """A tilted row's relative error bound at ``positions``: S's rounding there and the
    tilted masses' (:func:`.tilt.untilting_error`, ``row.relative_error``)."""
    return untilting_error(row.log_scale, row.theta, positions) + row.relative_error


def _geometric(exponent: float, counts: np.ndarray) -> np.ndarray:
    """sum_{t < N} e^{-exponent t} for each N in ``counts`` (N itself at exponent 0)."""
    if exponent <= 0:
        return counts
    return np.expm1(-exponent * counts) / math.expm1(-exponent)


def _narrow(candidates: np.ndarray, values: np.ndarray, delta: float, low: int, high: int) -> tuple[int, int]:
    """The bracket (low, high) after evaluating the profile at ``candidates`` (sorted,
    inside it): high the first where it is at most ``delta``, low the one before."""
    below = np.flatnonzero(values <= delta)
    if below.size:
        index = int(below[0])
        high = int(candidates[index])
        if index > 0:
            low = int(candidates[index - 1])
    else:
        low = int(candidates[-1])
    return low, high
