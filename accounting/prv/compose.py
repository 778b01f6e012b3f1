"""FFT composition of discretised privacy-loss measures and the composed profile.

Steps 3-5 of the pipeline in :mod:`dpforge.accounting.prv`: the product of transforms on a
window chosen from Chernoff bounds, the aliased and out-of-window mass, the round-off
allowance, and :class:`ComposedProfile`, which reads delta(eps) and eps(delta) off the
composed measure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import numba
import numpy as np
from scipy import fft as sp_fft

from dpforge.accounting.prv.band import band_transforms
from dpforge.accounting.prv.discrete_loss import DiscreteLoss
from dpforge.accounting.prv.discretise import GridMeasure
from dpforge.accounting.prv.limits import check_grid
from dpforge.errors import LimitError

_U = np.finfo(float).eps / 2
#: the FFT composition's rounding in units of u (T + log2 n) max p: a complex product is
#: within sqrt(5) u of the exact one (Brent, Percival, Zimmermann 2007), so z^T carries
#: about sqrt(5) T u, and the transform adds its own; the composition of Laplace b = 2,
#: q = 0.01, T = 1e3 had an entry 1.28 u (T + log2 n) max p off a direct convolution
_ROUNDING_FACTOR = 4.0
#: the unit round-off of the platform's long double (2^-64 on x86-64; where it is no more
#: precise than double, :func:`extended_precision` is always False)
_U_EXTENDED = min(float(np.finfo(np.longdouble).eps) / 2, _U)
#: a tilted composition of at least this many steps, of at most ``_EXTENDED_ROWS``
#: distinct measures, transforms and powers in long double (:func:`extended_precision`)
_EXTENDED_COUNT = 256
_EXTENDED_ROWS = 8


def extended_precision(measures: Sequence[tuple[GridMeasure, int]]) -> bool:
    """Whether :func:`fft_window` should transform and raise to powers in long double.

    The allowance c u (T + log2 n) max p is dominated by T u once T is in the hundreds:
    the power z^T multiplies the transform's relative error by T.  At a tiny delta after
    1e5 steps that term, summed over the entries above eps, is the width's floor (sigma
    = 1, q = 1e-6, T = 1e5 at delta = 1e-15: the upper end converged to 0.0029542 at
    second order in the step, 1.3e-3 above the staged lower end, and to 0.0029503
    without the allowance).  In long double (u = 2^-64 on x86-64) that term is 2048
    times smaller; a long double transform of a whole row costs about 4.5 times a double
    one (a long composition of a law whose mass sits on a few entries takes its long
    double spectrum from double transforms instead: :func:`_split_spectra`), so only
    compositions of a few distinct measures take it (a homogeneous workload: one)."""
    if _U_EXTENDED >= _U or len(measures) > _EXTENDED_ROWS:
        return False
    return sum(count for _, count in measures) >= _EXTENDED_COUNT


def roundoff_model(total_count: int, size: int, extended: bool = False) -> float:
    """The round-off allowance per entry in units of the composition's largest entry:
    ``_ROUNDING_FACTOR`` u (T + log2 n), or for an extended composition (:func:`fft_window`)
    ``_ROUNDING_FACTOR`` (u_ld (T + log2 n) + u (1 + log2 n)): the long double transform
    and power, then one rounding of each frequency to double and the double inverse
    transform."""
    if not extended:
        return _ROUNDING_FACTOR * _U * (total_count + math.log2(size))
    return _ROUNDING_FACTOR * (_U_EXTENDED * (total_count + math.log2(size)) + _U * (1.0 + math.log2(size)))


@dataclass(frozen=True)
class ComposedProfile:
    """Composed discrete measure of one bound in one direction, ready to be queried.

    delta(eps) = constant + sum_{x_j > eps} w_j (1 - e^{eps - x_j}), clipped at 0, where
    w_j = max(p_j, 0) + roundoff for the upper bound and max(p_j - roundoff, 0) for the
    lower bound; ``constant`` is +(mass at +inf + mass above the window) for the upper
    bound and -(mass outside the window) for the lower bound.

    A profile read off a tilted composition (:mod:`dpforge.accounting.prv.tilt`) keeps
    only the positions at or above ``floor``: an upper profile is then 1 (the trivial
    bound) below ``floor``, and a lower profile stays valid everywhere (a sub-measure's
    profile is a lower bound at every eps).
    """

    kind: str
    positions: np.ndarray
    weights: np.ndarray
    constant: float
    roundoff: float
    grid_size: int
    floor: float = 0.0
    #: exponents lam > 0 and the composed (untilted) cumulant log E[e^{lam L}] there, as
    #: the Chernoff window computed them (for :meth:`saddle`; empty when not known)
    exponents: np.ndarray = field(default_factory=lambda: np.empty(0), compare=False, repr=False)
    cumulants: np.ndarray = field(default_factory=lambda: np.empty(0), compare=False, repr=False)
    #: epsilon(delta) answers already computed (the refinement asks the same ones again)
    _inverted: dict = field(default_factory=dict, compare=False, repr=False)

    def saddle(self, epsilon: float) -> float | None:
        """About where the composed cumulant's slope reaches ``epsilon`` (the saddle
        exponent there), read off the Chernoff exponents: chord slopes of the convex
        cumulant, placed at the chords' midpoints and interpolated linearly.  inf when no
        chord is as steep (the saddle lies beyond the exponents composed: at a tiny eps of
        a law far narrower than the window, the largest of them can be 1000 times too
        small); None when no exponents are known.  Only sizes graded cells
        (:func:`.discretise.graded_lattice`): no bound depends on it."""
        keep = (self.exponents > 0) & np.isfinite(self.cumulants)
        lam, cumulant = self.exponents[keep], self.cumulants[keep]
        if lam.size < 2:
            return None
        order = np.argsort(lam)
        lam, cumulant = lam[order], cumulant[order]
        distinct = np.diff(lam) > 1e-12 * lam[1:]
        slopes = np.diff(cumulant)[distinct] / np.diff(lam)[distinct]
        middles = (0.5 * (lam[1:] + lam[:-1]))[distinct]
        if slopes.size == 0:
            return None
        slopes = np.maximum.accumulate(slopes)  # convex: slopes do not decrease (round-off aside)
        if epsilon <= slopes[0]:
            return float(middles[0] * max(epsilon, 0.0) / slopes[0]) if slopes[0] > 0 else float(middles[0])
        if epsilon >= slopes[-1]:
            return math.inf
        return float(np.interp(epsilon, slopes, middles))

    def delta(self, epsilon: float) -> float:
        """The profile at ``epsilon``: constant + sum_{x_j > eps} w_j (1 - e^{eps - x_j}),
        clipped at 0 -- the hockey-stick divergence written through the privacy-loss
        distribution (Sommer, Meiser, Mohammadi 2019; Koskela, Jälkö, Honkela 2020)."""
        if self.kind == "upper" and epsilon < self.floor:
            return 1.0
        active = self.positions > epsilon
        x = self.positions[active]
        value = self.constant + float(np.dot(self.weights[active], -np.expm1(epsilon - x)))
        return max(value, 0.0)

    def slope(self, epsilon: float) -> float:
        """-d delta / d eps at ``epsilon`` (>= 0): sum_{x_j > eps} w_j e^{eps - x_j}.

        A change c in the profile's constant moves its epsilon by about c / slope."""
        active = self.positions > epsilon
        return float(np.dot(self.weights[active], np.exp(epsilon - self.positions[active])))

    def epsilon(self, delta: float) -> float:
        """Smallest eps >= 0 with delta(eps) <= delta (inf when no eps qualifies).

        On a uniform grid the sums S_j = sum_{i>j} w_i e^{x_j - x_i} obey
        S_j = e^{-h} (w_{j+1} + S_{j+1}), a first-order filter with no overflow for any
        epsilon; between grid points the profile is A - e^{eps} B, solved exactly.
        """
        if delta not in self._inverted:
            self._inverted[delta] = self._epsilon(delta)
        return self._inverted[delta]

    def _epsilon(self, delta: float) -> float:
        """The inversion, uncached."""
        if self.constant >= delta:
            return math.inf
        if self.delta(0.0) <= delta:
            return 0.0
        if self.kind == "upper" and self.floor > 0:
            return max(self._epsilon_on_grid(delta), self.floor)
        return self._epsilon_on_grid(delta)

    def _epsilon_on_grid(self, delta: float) -> float:
        """The inversion itself, over the stored positions."""
        keep = self.positions > 0
        x = self.positions[keep]
        w = self.weights[keep]
        if x.size == 0:
            return 0.0
        step = float(x[1] - x[0]) if x.size > 1 else 1.0
        decay = math.exp(-step)
        # S_j via a reversed recursive filter; A_j = sum_{i>=j} w_i
        reversed_w = w[::-1]
        tilted = _discounted_suffix(w, decay)  # tilted[j] = sum_{i>j} w_i e^{x_j - x_i}
        suffix = np.cumsum(reversed_w)[::-1]  # sum_{i>=j} w_i
        after = np.append(suffix[1:], 0.0)  # sum_{i>j} w_i
        at_points = self.constant + after - tilted
        j = int(np.argmax(at_points <= delta))  # first grid point where the profile is <= delta
        if at_points[j] > delta:
            return math.inf
        left = x[j - 1] if j > 0 else 0.0
        numerator = self.constant + suffix[j] - delta
        denominator = w[j] + tilted[j]
        if denominator <= 0 or numerator <= 0:
            return float(max(left, 0.0)) if numerator <= 0 else float(x[j])
        eps = float(x[j] + math.log(numerator / denominator))
        return float(min(max(eps, left), x[j]))


@numba.njit(cache=True)
def _discounted_suffix(weights: np.ndarray, decay: float) -> np.ndarray:
    """S_j = sum_{i>j} w_i decay^{i-j}, by S_j = decay (w_{j+1} + S_{j+1}) from the top.

    The first-order recursion of :meth:`ComposedProfile._epsilon_on_grid` (a reversed
    one-pole filter); every term is at most w_i, so nothing overflows for any epsilon.
    """
    n = weights.size
    out = np.zeros(n)
    running = 0.0
    for j in range(n - 2, -1, -1):
        running = decay * (weights[j + 1] + running)
        out[j] = running
    return out


@numba.njit(cache=True)
def _log_mgf_kernel(masses, first, step, shift, lambdas):  # pragma: no cover - jitted
    """An upper bound on log sum_j m_j exp(lam x_j), x_j = (first + j) step - shift, for
    every lam, within a relative (4 n + 1500) u of the exact value.

    Shifted by the largest (lam > 0) or smallest (lam < 0) occupied position so that
    no term overflows; the factors exp(-|lam| (x_j - ref)) are a geometric sequence, built
    by repeated multiplication in four interleaved chains (positions ref, ref -+ h,
    ref -+ 2h, ref -+ 3h, each advanced by the rounded ratio exp(-4 |lam| h)): each
    product adds at most u of relative error, a chain's start exp(-i |lam| h) carries
    (1 + 3 |lam h|) u, and the ratio's rounded argument carries 4 |lam h| u, which the
    (j/4)-th power turns into |lam (x_j - ref)| u <= 645 u; hence the allowance
    (4 n + 1500) u on the total.  Four independent chains run about twice as fast as one
    (the multiplications no longer wait on each other: 232 -> 119 us for 24 exponents on
    11k points).  Once the smallest of the four factors would drop below 1e-280 the
    chains stop, and the rest go one by one from the largest until it does; then the
    remaining masses are counted at that factor (they are at most that), which keeps
    the bound and avoids subnormal arithmetic."""
    n = masses.size
    lo = -1
    hi = -1
    for j in range(n):
        if masses[j] > 0:
            if lo < 0:
                lo = j
            hi = j
    out = np.full(lambdas.size, -np.inf)
    if lo < 0:
        return out
    remaining_from_lo = np.empty(hi - lo + 2)
    remaining_from_lo[hi - lo + 1] = 0.0
    for j in range(hi, lo - 1, -1):
        remaining_from_lo[j - lo] = remaining_from_lo[j - lo + 1] + masses[j]
    # 4 u per product and sum term, plus the rounding of lam*step inside the ratios, raised
    # to the j-th power: j |lam step| u = |lam (x_j - ref)| u <= 645 u before the 1e-280 cut
    allowance = 1.0 + 1.1102230246251565e-16 * (4.0 * (hi - lo + 2) + 1500.0)
    for k in range(lambdas.size):
        lam = lambdas[k]
        decay = abs(lam) * step
        ratio = math.exp(-decay)
        ratio4 = math.exp(-4.0 * decay)
        f0, f1, f2, f3 = 1.0, ratio, math.exp(-2.0 * decay), math.exp(-3.0 * decay)
        t0 = t1 = t2 = t3 = 0.0
        total = 0.0
        if lam > 0:  # from the top down
            ref = (first + hi) * step - shift
            j = hi
            while j - 3 >= lo and f3 >= 1e-280:
                t0 += masses[j] * f0
                t1 += masses[j - 1] * f1
                t2 += masses[j - 2] * f2
                t3 += masses[j - 3] * f3
                f0 *= ratio4
                f1 *= ratio4
                f2 *= ratio4
                f3 *= ratio4
                j -= 4
            total = (t0 + t1) + (t2 + t3)
            factor = f0  # position j's
            while j >= lo:
                if factor < 1e-280:
                    total += factor * (remaining_from_lo[0] - remaining_from_lo[j - lo + 1])
                    break
                total += masses[j] * factor
                factor *= ratio
                j -= 1
        else:  # from the bottom up
            ref = (first + lo) * step - shift
            j = lo
            while j + 3 <= hi and f3 >= 1e-280:
                t0 += masses[j] * f0
                t1 += masses[j + 1] * f1
                t2 += masses[j + 2] * f2
                t3 += masses[j + 3] * f3
                f0 *= ratio4
                f1 *= ratio4
                f2 *= ratio4
                f3 *= ratio4
                j += 4
            total = (t0 + t1) + (t2 + t3)
            factor = f0
            while j <= hi:
                if factor < 1e-280:
                    total += factor * remaining_from_lo[j - lo]
                    break
                total += masses[j] * factor
                factor *= ratio
                j += 1
        out[k] = np.log(total * allowance) + lam * ref
    return out


@numba.njit(cache=True)
def _moments_kernel(masses, first, step, shift):  # pragma: no cover - jitted
    total = 0.0
    first_moment = 0.0
    for j in range(masses.size):
        total += masses[j]
        first_moment += masses[j] * ((first + j) * step - shift)
    if total <= 0:
        return 0.0, 0.0
    mean = first_moment / total
    second = 0.0
    for j in range(masses.size):
        d = (first + j) * step - shift - mean
        second += masses[j] * d * d
    return mean, second / total


def _log_mgf(measure: GridMeasure, lambdas: np.ndarray) -> np.ndarray:
    """log sum_j m_j exp(lam x_j) for each lam (finite part of the measure), exactly."""
    return _log_mgf_kernel(measure.masses, measure.first_index, measure.step, measure.shift, lambdas)


def _moments(measure: GridMeasure) -> tuple[float, float]:
    return _moments_kernel(measure.masses, measure.first_index, measure.step, measure.shift)


def _chernoff_lambdas(measures: Sequence[tuple[GridMeasure, int]], tail: float) -> np.ndarray:
    """A few exponents around the Gaussian-optimal ones for both tails.

    Any lam gives a valid Chernoff bound; near-optimal ones give a tight window.  For a
    sum with variance S^2 the optimal lam for a tail of size ``tail`` is about
    sqrt(2 log(1/tail)) / S.
    """
    variance = sum(count * _moments(measure)[1] for measure, count in measures)
    spread = math.sqrt(max(variance, 1e-300))
    centre = math.sqrt(2.0 * math.log(1.0 / tail)) / max(spread, 1e-12)
    factors = np.geomspace(1e-3, 3.0, 8)  # heavy upper tails (small q) want small lam
    lam = np.clip(centre * factors, 1e-6, 1e6)
    return np.concatenate([lam, -lam])


#: exponents added between the neighbours of the best exponent on each side of a window,
#: and rounds of that after an extension (:func:`refine_lambdas`)
_LAMBDA_REFINEMENT = 4
_LAMBDA_REFINEMENT_ROUNDS = 2
#: exponents added a round beyond an end of a side whose bound is the best there, and rounds
_LAMBDA_EXTENSION = 3
_LAMBDA_EXTENSION_ROUNDS = 4


def refine_lambdas(
    lam: np.ndarray, cumulant: np.ndarray, log_tail: float, cumulant_at: Callable[[np.ndarray], np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Narrow a Chernoff window: on each side, add ``_LAMBDA_REFINEMENT`` exponents
    geometrically between the neighbours of the exponent giving the best bound.

    Every exponent gives a valid bound (the window edge is the best over all of them), so
    adding exponents only narrows the window; the starting set from
    :func:`_chernoff_lambdas` is spaced by a factor of about 3, which left windows up to
    twice as wide as the best exponent gives (most at tiny delta, where tilted laws are
    far from Gaussian).  ``cumulant_at(extra)`` is the cumulant at the added exponents.

    Where the best exponent is the smallest or the largest of its side, the set is first
    extended beyond it (a factor of 3 a point, ``_LAMBDA_EXTENSION`` points a round, up to
    ``_LAMBDA_EXTENSION_ROUNDS`` rounds) until an inner one is best: the starting set is
    centred for the untilted law's spread and tail, and a tilted law with a heavy upper
    tail wants far smaller exponents (sigma = 0.3, q = 1e-6, T = 1e3 at delta = 1e-15: the
    tilted window reached 398 nats, where lam = 0.54 bounds it at 64).  The refinement
    between neighbours then runs ``_LAMBDA_REFINEMENT_ROUNDS`` times (an extended set is
    spaced by 3 near its best, as coarse as the starting set); once where the starting
    set held the best (a second round there cost W1 13 % of its time)."""

    def extended(added: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
        if not added:
            return None
        extra = np.concatenate(added)
        return np.concatenate([lam, extra]), np.concatenate([cumulant, cumulant_at(extra)])

    factors = 3.0 ** np.arange(1, _LAMBDA_EXTENSION + 1)
    rounds = 1
    for _ in range(_LAMBDA_EXTENSION_ROUNDS):
        beyond = []
        for sign, magnitudes, best in _best_exponents(lam, cumulant, log_tail):
            if best == 0 and magnitudes.size > 1 and magnitudes[0] > 1e-9:
                beyond.append(sign * magnitudes[0] / factors)
            elif best == magnitudes.size - 1 and magnitudes.size > 1 and magnitudes[-1] < 1e9:
                beyond.append(sign * magnitudes[-1] * factors)
        grown = extended(beyond)
        if grown is None:
            break
        lam, cumulant = grown
        rounds = _LAMBDA_REFINEMENT_ROUNDS
    for _ in range(rounds):
        between = []
        for sign, magnitudes, best in _best_exponents(lam, cumulant, log_tail):
            low = magnitudes[best - 1] if best > 0 else magnitudes[best] / 3.0
            high = magnitudes[best + 1] if best + 1 < magnitudes.size else magnitudes[best] * 3.0
            between.append(sign * np.geomspace(low, high, _LAMBDA_REFINEMENT + 2)[1:-1])
        grown = extended(between)
        if grown is None:
            break
        lam, cumulant = grown
    return lam, cumulant


def _best_exponents(lam: np.ndarray, cumulant: np.ndarray, log_tail: float) -> Iterator[tuple[float, np.ndarray, int]]:
    """For each side of a window with a finite bound (sign +1: the top edge, the least
    (K(lam) - log tail) / lam over lam > 0; sign -1: the bottom edge, the largest over
    lam < 0): (sign, that side's exponent magnitudes in increasing order, the index of
    the best among them)."""
    for sign in (1.0, -1.0):
        side = np.flatnonzero(lam * sign > 0)
        if side.size == 0:
            continue
        order = side[np.argsort(np.abs(lam[side]))]
        with np.errstate(invalid="ignore"):
            bound = (cumulant[order] - log_tail) / lam[order]
        finite = np.isfinite(bound)
        if finite.any():
            yield sign, np.abs(lam[order]), int(np.argmin(np.where(finite, sign * bound, np.inf)))


def _roundoff_per_entry(composed: np.ndarray, total_count: int) -> float:
    """Allowance for floating-point error in each composed entry.

    The transform of each step's measure carries a relative error of a few ulps at the
    low frequencies that carry the mass, and raising it to the power T multiplies that
    error by T (each complex product adds up to sqrt(5) u), so entries are off by up to
    about ``_ROUNDING_FACTOR`` u (T + log2 n) max(p) (checked against mpmath references
    at delta = 1e-12 and against direct convolutions, where the worst entry used 0.32 of
    it; with the factor 1 it used 1.28, and a lower bound came out above the true eps).  Entries far below that come out as noise of both
    signs, and twice the largest negative entry is the second witness.  The larger of
    the two is used.  This is a model of the error, not a worst-case bound (see the
    module docstring).
    """
    peak = float(np.max(composed))
    lowest = float(np.min(composed))
    model = roundoff_model(total_count, composed.size) * peak
    return max(2.0 * max(-lowest, 0.0), model)


@dataclass(frozen=True)
class ComposedMeasure:
    """The composed discrete measure on its FFT window, with what lies outside it.

    ``masses`` are the wrapped (aliased) FFT output; ``above``/``below`` are Chernoff
    bounds on the composed mass beyond the window; ``infinity`` is the composed mass at
    +inf (from truncated upper tails); ``roundoff`` is the per-entry allowance.
    """

    positions: np.ndarray
    masses: np.ndarray
    above: float
    below: float
    infinity: float
    roundoff: float
    grid_size: int
    #: the Chernoff exponents and the cumulant there (:attr:`ComposedProfile.exponents`)
    exponents: np.ndarray = field(default_factory=lambda: np.empty(0), compare=False, repr=False)
    cumulants: np.ndarray = field(default_factory=lambda: np.empty(0), compare=False, repr=False)

    def _from(self, floor: float | None) -> int:
        """The first entry at or above ``floor`` (0 without one, or when it is not above
        the window)."""
        if floor is None or not floor > self.positions[0]:
            return 0
        return int(np.searchsorted(self.positions, floor, side="left"))

    def upper_profile(self, floor: float | None = None) -> ComposedProfile:
        """Profile bounding delta(eps) from above for eps >= 0: weights max(p_j, 0) +
        roundoff, plus the masses at +inf and above the window (and below it, when the
        window starts above 0) as a constant.

        ``floor``: a certified lower bound on the eps that will be asked of the profile
        (verify's rows: the previous row's lower bound, since eps only grows with the
        prefix); only the entries from it up are kept, and the profile is the trivial 1
        below it (as a tilted profile's, :class:`ComposedProfile`), so every
        eps(delta) at or above the floor is the one the whole window gives (to rounding:
        the inversion reads the grid step off the first two positions it keeps), for a
        fraction of the reading."""
        # mass below the window is aliased into it (non-negative, so only raises the
        # sum); its own contribution is zero for eps >= 0 unless the window starts above 0
        below = self.below if self.positions[0] > 0 else 0.0
        start = self._from(floor)
        weights = np.maximum(self.masses[start:], 0.0) + self.roundoff
        return ComposedProfile(
            "upper",
            self.positions[start:],
            weights,
            self.infinity + self.above + below,
            self.roundoff,
            self.grid_size,
            floor=0.0 if floor is None else max(floor, 0.0),
            exponents=self.exponents,
            cumulants=self.cumulants,
        )

    def lower_profile(self, floor: float | None = None) -> ComposedProfile:
        """Profile bounding delta(eps) from below: weights max(p_j - roundoff, 0), minus
        the Chernoff bounds on the mass outside the window (which may have aliased in).
        ``floor``: only the entries from it up are kept (a sub-measure: still a lower
        bound at every eps, and the same one from the floor up)."""
        start = self._from(floor)
        weights = np.maximum(self.masses[start:] - self.roundoff, 0.0)
        return ComposedProfile(
            "lower", self.positions[start:], weights, -(self.above + self.below), self.roundoff, self.grid_size
        )

    def upper_loss(self) -> DiscreteLoss:
        """A measure dominating the composed law at every eps (for further composition):
        the window with round-off added, the mass below the window rounded up onto its
        first point, the mass above it and at +inf moved to +inf."""
        masses = np.maximum(self.masses, 0.0) + self.roundoff
        masses[0] += self.below
        return DiscreteLoss(self.positions, masses, self.infinity + self.above)

    def lower_loss(self) -> DiscreteLoss:
        """A measure dominated by the composed law at every eps: round-off removed, and
        mass as large as all that can have been aliased in removed from the top."""
        return DiscreteLoss(self.positions, self.lower_masses(), 0.0)

    def lower_masses(self) -> np.ndarray:
        """The masses of :meth:`lower_loss` at ``positions``."""
        masses = np.maximum(self.masses - self.roundoff, 0.0)
        remove = self.above + self.below
        tail = np.cumsum(masses[::-1])
        cut = int(np.searchsorted(tail, remove, side="left"))
        if cut >= masses.size:
            raise lower_mass_lost()
        masses[masses.size - cut :] = 0.0
        masses[masses.size - 1 - cut] = tail[cut] - remove
        return masses


def chernoff_above(lam: np.ndarray, cumulant: np.ndarray, position: float) -> float:
    """A Chernoff bound on the composed mass at or above ``position``: the smallest
    e^{K(lam) - lam position} over the exponents lam > 0 (K the composed cumulant at them)."""
    positive = lam > 0
    return float(np.exp(np.min(cumulant[positive] - lam[positive] * position)))


def chernoff_below(lam: np.ndarray, cumulant: np.ndarray, position: float) -> float:
    """A Chernoff bound on the composed mass at or below ``position``: the smallest
    e^{K(lam) - lam position} over the exponents lam < 0."""
    negative = ~(lam > 0)
    return float(np.exp(np.min(cumulant[negative] - lam[negative] * position)))


def composed_infinity(measures: Sequence[tuple[GridMeasure, int]]) -> float:
    """Mass at +inf after composition: 1 - prod_i (1 - a_i)^count_i, computed as
    -expm1(sum_i count_i log1p(-a_i)) so that per-step masses far below 1e-16 (the
    truncated tails at tiny delta) are not rounded away.  A step with all of its mass at
    +inf or more (an error cover that overflowed: a grid step of 1,000 nats put e^1000 on
    its top point) leaves every composed mass there: 1, the trivial bound."""
    if any(not measure.infinity_mass < 1.0 for measure, count in measures if count > 0):
        return 1.0
    return -math.expm1(sum(count * math.log1p(-measure.infinity_mass) for measure, count in measures))


#: entries of one batch of placed measures transformed together by :func:`fft_window`
_BATCH_ENTRIES = 2**21


def lower_mass_lost() -> LimitError:
    """The error for a composed optimistic measure left with less mass than may have been
    aliased into its window (:meth:`ComposedMeasure.lower_masses`).

    Its bound would be 0, so the lower chain cannot go on; every valid description has a
    law of mass 1, so this is the engine's limit (an optimistic measure that loses a
    fraction of its mass at each of thousands of steps), not a bad parameter: it was a
    ParameterError, which sigma = 0.172, q = 9e-7, T = 11,862 reached at delta = 1e-5
    before the optimistic grid kept the pile at log(1 - q) (.discretise)."""
    return LimitError(
        "the prv engine's optimistic (lower-bound) measure lost its mass over the composition: "
        "its lower bound cannot be certified on this grid; account it with engine='rdp'"
    )


def no_finite_window() -> LimitError:
    """The error for a composition whose Chernoff window is empty or not finite.

    Every valid description has a law of total mass 1, so this means its finite part
    left the grid: the chunks of a staged chain put most of their mass at +inf (sigma =
    0.11, q = 0.535, T = 5.7e7: a quarter per chunk, eps of about 1e9).  A limit of the
    engine, not a bad parameter (it was a ParameterError asking to check the mechanism's
    parameters)."""
    return LimitError(
        "the composed privacy loss has no finite mass left on the prv engine's grid (its Chernoff window is "
        "empty): epsilon is beyond what the prv engine can certify for this description; "
        "account it with engine='rdp'"
    )


def _place(row: np.ndarray, values: np.ndarray, offset: int) -> None:
    """Add ``values[j]`` to ``row[(offset + j) mod row.size]`` (cyclic placement), in the
    row's own precision (a long double row sums what wraps onto one entry in long double)."""
    size = row.size
    if values.size > size and row.dtype != np.float64:
        begin, done = offset % size, 0
        while done < values.size:
            take = min(values.size - done, size - begin)
            row[begin : begin + take] += values[done : done + take]
            done, begin = done + take, 0
        return
    if values.size > size:
        row += np.bincount((offset + np.arange(values.size)) % size, weights=values, minlength=size)
        return
    begin = offset % size
    head = min(values.size, size - begin)
    row[begin : begin + head] += values[:head]
    row[: values.size - head] += values[head:]


def _product_of_powers(spectra: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """prod_i spectra[i] ** counts[i] by binary powers: squarings of the rows still needed
    and one product per bit, about log2(max count) passes of multiplications.  numpy's
    complex power goes through exp(count log z) for counts of 100 or more, a complex log
    and exp per entry against a few multiplications.  The relative
    error of z^T by squaring is about sqrt(5) T u, as for repeated multiplication (each
    squaring doubles the error carried and adds up to sqrt(5) u), which the round-off
    allowance 4u (T + log2 n) covers (checked against mpmath references down to delta =
    1e-15 and against direct convolutions).

    Rows with equal counts are multiplied together first, prod_c (prod_{count_i = c}
    z_i)^c: the powers then cost a few passes over one row per distinct count instead of
    over every row (a plan of phases of 10 steps each: about 5 multiplications a row
    down to 1), and the error, sqrt(5) u per multiplication carried c times through the
    power, is again about sqrt(5) u (sum of counts)."""
    if counts.size == 1:
        return _power(spectra[0], int(counts[0]))
    distinct, which = np.unique(counts, return_inverse=True)
    if distinct.size == 1:
        return _power(np.prod(spectra, axis=0), int(distinct[0]))
    if distinct.size < counts.size:
        spectra = np.stack([np.prod(spectra[which == k], axis=0) for k in range(distinct.size)])
        counts = distinct.astype(np.int64)
    result = np.ones(spectra.shape[1], dtype=spectra.dtype)
    base = spectra
    remaining = counts.copy()
    while True:
        odd = (remaining & 1).astype(bool)
        if odd.any():
            result *= np.prod(base[odd], axis=0) if odd.sum() > 1 else base[odd][0]
        remaining >>= 1
        active = remaining > 0
        if not active.any():
            return result
        base, remaining = base[active] * base[active], remaining[active]


def _power(spectrum: np.ndarray, count: int) -> np.ndarray:
    """spectrum ** count by the binary powers of :func:`_product_of_powers`, the same
    multiplications in the same order (so the same numbers), squaring in place rather
    than through copies of the row (the prefix products take one power a phase)."""
    dtype = np.clongdouble if spectrum.dtype == np.clongdouble else complex
    result = np.ones(spectrum.shape, dtype=dtype)
    base = spectrum.astype(dtype, copy=True)
    while count > 0:
        if count & 1:
            result *= base
        count >>= 1
        if count:
            np.multiply(base, base, out=base)
    return result


#: the share of the composition's round-off model (at the peak that its spectrum bounds)
#: that the frequencies dropped by :func:`_kept_frequencies` may add to an entry
_PRUNE_SHARE = 1e-3


def _kept_frequencies(
    spectra: np.ndarray, counts: np.ndarray, size: int, extended: bool, transform_unit: float | None = None
) -> tuple[np.ndarray, float]:
    """(which frequencies of prod_i spectra[i]^counts[i] to raise to their powers, the
    most that dropping the others can move an entry of the inverse transform).

    The composed spectrum is |Z_k| = prod_i |z_ik|^{c_i}, and after T steps it is
    negligible at most frequencies: |z| <= 1 - a k^2 makes |z|^T about e^{-T a k^2}, so a
    composition of 1e5 steps on 1.9M points keeps 0.09 % of them.  Each |z_ik| is bounded
    by its computed modulus plus e_i = (4 log2(n) + 2) u z_i0, the transform's error (the
    weights are non-negative, so z_i0 = sum_j x_ij; the unit of :func:`roundoff_model`,
    with u that of ``spectra``: ``transform_unit``, else that of ``extended``) and the
    modulus' own rounding, so M_k = prod_i (|z_ik| + e_i)^{c_i} bounds |Z_k|.  Entry j of
    the inverse transform is (1/n) sum_k w_k Re(Z_k e^{2 pi i jk/n}) with w_k <= 2, so
    setting Z_k = 0 wherever M_k < t moves no entry by more than (2/n) t times the number
    dropped: that is the second value returned, which the caller adds to its per-entry
    allowance.  t = ``_PRUNE_SHARE`` r M_0 / (n/2 + 1), r the round-off model of
    ``extended``, so that this is at most that share of the model at 2 M_0 / n, a lower
    bound on (2/n) sum_k M_k, which bounds the largest entry.  The powers of the rest are
    unchanged.  One row is compared on its squared modulus, |z|^2 < (t^{1/c} - e)^2, and
    several on sum_i c_i log(|z_i| + e_i) < log t: no exponential per frequency.  The
    powers cost about log2(T) passes over the spectrum, as much as the transform
    (sigma = 1, q = 1e-6, T = 1e5 at delta = 1e-15: 0.18 s of 0.81 in long double)."""
    unit = transform_unit if transform_unit is not None else (_U_EXTENDED if extended else _U)
    if not np.any(counts):
        # a power 0 is the identity (Z = 1 at every frequency): nothing is negligible.  A
        # two-scale chunk whose every step may fall in the tail takes B~^{*0}, and the
        # single-row bound below divided by its count (ZeroDivisionError on 138 mixed
        # Gaussian and Laplace phases of 5-11 steps at delta = 1e-10)
        return np.ones(spectra.shape[1], dtype=bool), 0.0
    rows = spectra.astype(complex, copy=False)
    mass = np.abs(rows[:, 0].real)
    errors = ((_ROUNDING_FACTOR * math.log2(size) + 2.0) * unit + 2.0 * _U) * mass
    with np.errstate(divide="ignore"):
        log_mass = float(counts.astype(float) @ np.log(mass + errors))
    log_threshold = math.log(_PRUNE_SHARE * roundoff_model(int(counts.sum()), size, extended)) + log_mass - math.log(rows.shape[1])
    if not (math.isfinite(log_threshold) and log_threshold < 0.0):  # t < 1: a dropped |z| + e is below 1
        return np.ones(rows.shape[1], dtype=bool), 0.0
    if rows.shape[0] == 1:
        radius = math.exp(log_threshold / float(counts[0])) - float(errors[0])
        if radius <= 0.0:
            return np.ones(rows.shape[1], dtype=bool), 0.0
        keep = rows[0].real ** 2 + rows[0].imag ** 2 >= radius * radius
    else:
        with np.errstate(divide="ignore"):
            keep = counts.astype(float) @ np.log(np.abs(rows) + errors[:, None]) >= log_threshold
    dropped = int(keep.size - np.count_nonzero(keep))
    return keep, 2.0 * dropped * math.exp(log_threshold) / size


#: :func:`_split_spectra` is taken while its chirp transforms cost at most 1 / this of the
#: row's n log2 n (long double complex transforms of the runs plus the band: about break-even
#: with a long double transform of the row at T = 1e3, 6,616 kept frequencies on 437k points)
_SPLIT_COST = 12.0


def _chirp_band(row: np.ndarray, start: int, span: int, frequencies: int, size: int) -> np.ndarray:
    """sum_{t < span} x_t e^{-2 pi i (start + t) k / n} for k = 0 .. ``frequencies`` - 1,
    x_t = row[(start + t) mod n], in long double: Bluestein's chirp z-transform (Rabiner,
    Schafer, Rader 1969), with tk = (t^2 + k^2 - (k - t)^2) / 2, so the sum is
    c_k sum_t (x_t c_t) conj(c_{k-t}), c_m = e^{-i pi m^2 / n}: one linear convolution by
    transforms of next_fast_len(span + frequencies - 1) points.  Every angle is reduced
    exactly first (m^2 mod 2n, start k mod n), so each chirp is within a few u_ld, and
    the convolution within about log2 of its length u_ld of sum x: the error of a long
    double transform of the whole row."""
    pi = np.arccos(np.longdouble(-1.0))
    top = max(span, frequencies)
    index = np.arange(top, dtype=np.int64)
    angles = ((index * index) % (2 * size)).astype(np.longdouble) * (pi / size)
    chirp = np.cos(angles) - 1j * np.sin(angles)
    length = sp_fft.next_fast_len(span + frequencies - 1)
    weighted = np.zeros(length, dtype=np.clongdouble)
    weighted[:span] = row[(start + index[:span]) % size] * chirp[:span]
    kernel = np.zeros(length, dtype=np.clongdouble)
    kernel[:frequencies] = np.conj(chirp[:frequencies])
    if span > 1:
        kernel[length - span + 1 :] = np.conj(chirp[1:span][::-1])
    band = chirp[:frequencies] * sp_fft.ifft(sp_fft.fft(weighted) * sp_fft.fft(kernel))[:frequencies]
    shifts = ((start * index[:frequencies]) % size).astype(np.longdouble) * (2.0 * pi / size)
    return band * (np.cos(shifts) - 1j * np.sin(shifts))


def _split_spectra(placed: np.ndarray, counts: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, float] | None:
    """(the long double transforms of the rows of ``placed`` at the kept frequencies, which
    frequencies are kept, the pruning bound) without a long double transform of the
    rows, which costs about 4.7 times a double one (1.9M points: 0.171 s against 0.036 s);
    None where that would cost more.

    Each row x (non-negative) is split into x_B, short cyclic runs of entries that hold
    its largest ones (split where two are further apart than the band of frequencies),
    and x_S, the rest, whose sum is at most (u_ld / u) / 8 of the row's.  The row's double
    transform chooses the kept frequencies (:func:`_kept_frequencies` with the double
    error); up to the highest of them, x_B is transformed in long double by a chirp
    z-transform of each run (:func:`_chirp_band`: a few long double transforms of the
    run's length plus the band's), and x_S in double.  The first is within about
    log2(length) u_ld sum x_B, the second within 4u log2(n) sum x_S <= u_ld log2(n) sum x / 2:
    together within a long double transform's own error, so the allowance's model holds
    as it is (:func:`roundoff_model`); measured, they differ from a long double transform
    of the whole row by 8-14 u_ld sum x, and the compositions of 1e5-773k steps made from
    them differ from those made from whole-row transforms by 0.25-0.47 of the model, where
    whole-row and direct long double sums differ by 0.18-0.29 of it (docs/design.md §3).  A subsampled law's mass sits on a few short runs
    and a long composition keeps few frequencies: sigma = 1, q = 1e-6, T = 1e5 keeps 549-892
    frequencies, its largest entries on runs of 133-420 entries.  Where the runs and the
    band need transforms of more than a twelfth of the row's n log2 n, the row is
    transformed in long double as before (what is lost is the first double transform)."""
    doubles = placed.astype(float)
    keep, pruned = _kept_frequencies(sp_fft.rfft(doubles, axis=1), counts, size, True, transform_unit=_U)
    kept = np.flatnonzero(keep)
    frequencies = int(kept[-1]) + 1
    out = np.empty((placed.shape[0], kept.size), dtype=np.clongdouble)
    for row in range(placed.shape[0]):
        values = doubles[row]
        occupied = np.flatnonzero(values > 0.0)
        ordered = occupied[np.argsort(values[occupied], kind="stable")]
        sums = np.cumsum(values[ordered])
        small = int(np.searchsorted(sums, 0.125 * (_U_EXTENDED / _U) * float(sums[-1]), side="right")) if sums.size else 0
        big = np.sort(ordered[small:])
        if big.size == 0:
            return None
        # runs of them, cyclically from the widest gap, split where a gap is longer than
        # the band (a transform of gap + band points costs more than a second one of band)
        gaps = np.diff(np.concatenate([big, [big[0] + size]]))
        widest = int(np.argmax(gaps))
        start = int(big[(widest + 1) % big.size])
        offsets = np.sort((big - start) % size)
        breaks = np.flatnonzero(np.diff(offsets) > frequencies)
        firsts = np.concatenate([[0], breaks + 1])
        lasts = np.concatenate([breaks, [offsets.size - 1]])
        runs = [(int(offsets[f]), int(offsets[l]) - int(offsets[f]) + 1) for f, l in zip(firsts, lasts)]
        cost = sum(_SPLIT_COST * (span + frequencies) * math.log2(span + frequencies) for _, span in runs)
        if cost > size * math.log2(size):
            return None
        rest = values.copy()
        band = np.zeros(frequencies, dtype=np.clongdouble)
        for offset, span in runs:
            rest[(start + offset + np.arange(span)) % size] = 0.0
            band += _chirp_band(placed[row], (start + offset) % size, span, frequencies, size)
        out[row] = band[kept] + sp_fft.rfft(rest)[kept]
    return out, keep, pruned


def chernoff_window(lam: np.ndarray, cumulant: np.ndarray, log_tail: float) -> tuple[float, float]:
    """(bottom, top) of the window outside which the composed law's Chernoff tails
    (``cumulant`` at ``lam``) are below e^{log_tail} on each side (:func:`no_finite_window`
    where there is none)."""
    positive = lam > 0
    with np.errstate(invalid="ignore"):
        top = float(np.min((cumulant[positive] - log_tail) / lam[positive]))
        bottom = float(np.max((cumulant[~positive] - log_tail) / lam[~positive]))
    if not (math.isfinite(top) and math.isfinite(bottom)) or top < bottom:
        raise no_finite_window()
    return bottom, top


def fft_window(
    measures: Sequence[tuple[GridMeasure, int]],
    weights: Sequence[np.ndarray],
    lam: np.ndarray,
    cumulant: np.ndarray,
    log_tail: float,
    extended: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """The product of transforms of ``weights`` (one array per measure, on its grid; the
    masses themselves or tilted ones), each to its count, on a window where the composed
    law's Chernoff tails (``cumulant`` at ``lam``) are below e^{log_tail}.

    Each measure is centred on its mean index before the transform (so the window covers
    the composed spread, not its mean).  With ``extended`` the rows are placed, transformed
    and raised to their powers in long double, and the product is rounded to double once
    before the (double) inverse transform (:func:`extended_precision`,
    :func:`roundoff_model`).  Frequencies whose power is negligible are set to 0 before
    the power when every measure fits one batch (:func:`_kept_frequencies`).  Returns
    (positions, window masses, the raw aliased composition, the most that dropping those
    frequencies can move an entry: the caller adds it to the per-entry allowance)."""
    step = measures[0][0].step
    bottom, top = chernoff_window(lam, cumulant, log_tail)
    check_grid((top - bottom) / step + 3, "the FFT window of the composition")
    size = sp_fft.next_fast_len(int(math.ceil((top - bottom) / step)) + 3, real=True)
    real = np.longdouble if extended else np.float64
    spectrum = np.ones(size // 2 + 1, dtype=np.clongdouble if extended else complex)
    base = 0.0
    batch = max(1, min(len(measures), _BATCH_ENTRIES // size))
    pruned = 0.0
    banded = None
    if not extended and batch < len(measures) and len(measures) >= _BAND_MEASURES:
        banded = _band_limited_product(measures, weights, size)
    if banded is not None:
        spectrum, pruned, base = banded
    for start in range(0, len(measures) if banded is None else 0, batch):
        chunk = list(zip(measures[start : start + batch], weights[start : start + batch]))
        placed = np.zeros((len(chunk), size), dtype=real)
        counts = np.empty(len(chunk))
        for row, ((measure, count), values) in enumerate(chunk):
            centre = int(round(measure.mean_index()))
            _place(placed[row], values, measure.first_index - centre)
            counts[row] = count
            base += count * (centre * step - measure.shift)
        counts_int = counts.astype(np.int64)
        split = _split_spectra(placed, counts_int, size) if extended and batch == len(measures) else None
        if split is not None:
            kept_spectra, keep, pruned = split
            spectrum[keep] = _product_of_powers(kept_spectra, counts_int)
            spectrum[~keep] = 0.0
            continue
        spectra = sp_fft.rfft(placed, axis=1)
        if batch == len(measures):  # one batch: frequencies whose power is negligible are dropped
            keep, pruned = _kept_frequencies(spectra, counts_int, size, extended)
            # spectra multiplied (binary powers), not complex logs summed
            spectrum[keep] = _product_of_powers(spectra[:, keep], counts_int)
            spectrum[~keep] = 0.0
        else:
            spectrum *= _product_of_powers(spectra, counts_int)
    composed = sp_fft.irfft(spectrum.astype(complex) if extended else spectrum, size)
    first = int(math.floor((bottom - base) / step))
    offsets = np.arange(first, first + size)
    return base + offsets * step, composed[offsets % size], composed, pruned


#: compositions of at least this many distinct measures (in more than one batch of
#: transforms) are tried band-limited (:func:`_band_limited_product`) ...
_BAND_MEASURES = 64
#: ... with every this-many-th measure transformed whole to bound the spectrum
_BAND_SAMPLE = 8
#: ... and each of the others band-limited when a chirp transform of its band costs at
#: most this share of the whole window's (two complex transforms of L points against
#: one real transform of n: about 4 L / n; a pair of rows shares them, which this rule
#: leaves out to err towards whole transforms)
_BAND_COST = 0.8


def _placed_spectra(
    indices: np.ndarray, weights: Sequence[np.ndarray], offsets: np.ndarray, size: int
) -> np.ndarray:
    """The whole-window transforms of ``weights[i]`` placed cyclically at ``offsets[i]``,
    for every i in ``indices`` (one batch)."""
    placed = np.zeros((indices.size, size))
    for row, index in enumerate(indices):
        _place(placed[row], weights[index], int(offsets[index]))
    return sp_fft.rfft(placed, axis=1)


def _band_limited_product(
    measures: Sequence[tuple[GridMeasure, int]], weights: Sequence[np.ndarray], size: int
) -> tuple[np.ndarray, float, float] | None:
    """(prod_i spectra[i] ** counts[i] on a window of ``size`` points, with the
    frequencies whose bound is negligible set to 0; the most that dropping them can move
    an entry; the composed law's offset ``base`` as :func:`fft_window` sums it),
    transforming most measures at the kept frequencies only (:mod:`.band`); None where
    a row is longer than the window (the caller's path folds it).

    The bound is :func:`_kept_frequencies`' M_k = prod_i (|z_ik| + e_i)^{c_i}, with
    every ``_BAND_SAMPLE``-th measure's computed modulus (its whole transform) and the
    others' |z_ik| <= sum_j x_ij, their mass (the weights are non-negative), so it holds
    before those are transformed; the threshold and what dropping moves are as there.
    With an eighth of the measures the bound still keeps a narrow band: 62-66 frequencies
    for 2,000 phases of 10 steps (n = 54,000) and 10,000 single steps (n = 34,560).  The
    other measures' band comes from :func:`.band.band_transforms`, within the transform
    error the round-off model allows (its module docstring); a measure whose band is not
    cheaper than its whole transform (4 L > ``_BAND_COST`` n, L the chirp transform's
    length) is transformed whole as before."""
    lengths = np.array([values.size for values in weights])
    if np.any(lengths > size):
        return None
    counts = np.array([count for _, count in measures], dtype=np.int64)
    centres = [int(round(measure.mean_index())) for measure, _ in measures]
    offsets = np.array([measure.first_index - centre for (measure, _), centre in zip(measures, centres)], dtype=np.int64)
    step = measures[0][0].step
    base = 0.0
    for (measure, count), centre in zip(measures, centres):
        base += count * (centre * step - measure.shift)
    masses = np.array([float(np.sum(values)) for values in weights])
    errors = ((_ROUNDING_FACTOR * math.log2(size) + 2.0) * _U + 2.0 * _U) * masses
    with np.errstate(divide="ignore"):
        logs = np.log(masses + errors)
    frequencies_all = size // 2 + 1
    log_threshold = math.log(_PRUNE_SHARE * roundoff_model(int(counts.sum()), size)) + float(counts @ logs) - math.log(frequencies_all)
    if not (math.isfinite(log_threshold) and log_threshold < 0.0):
        return None
    sample = np.zeros(len(measures), dtype=bool)
    sample[::_BAND_SAMPLE] = True
    rest = np.flatnonzero(~sample)
    bound = np.full(frequencies_all, float(counts[rest] @ logs[rest]))
    product = np.ones(frequencies_all, dtype=complex)
    chosen = np.flatnonzero(sample)
    batch = max(1, _BATCH_ENTRIES // size)
    for start in range(0, chosen.size, batch):
        rows = chosen[start : start + batch]
        spectra = _placed_spectra(rows, weights, offsets, size)
        with np.errstate(divide="ignore"):
            bound += counts[rows].astype(float) @ np.log(np.abs(spectra) + errors[rows][:, None])
        product *= _product_of_powers(spectra, counts[rows])
    keep = bound >= log_threshold
    kept = np.flatnonzero(keep)
    band = int(kept[-1]) + 1 if kept.size else 0
    spectrum = np.zeros(frequencies_all, dtype=complex)
    if rest.size:
        # a row whose band costs more than its whole transform is transformed whole
        lengths_needed = np.array([sp_fft.next_fast_len(int(n) + max(band, 1) - 1) for n in lengths[rest]])
        whole = rest[4.0 * lengths_needed > _BAND_COST * size]
        for start in range(0, whole.size, batch):
            rows = whole[start : start + batch]
            product *= _product_of_powers(_placed_spectra(rows, weights, offsets, size), counts[rows])
        banded = rest[4.0 * lengths_needed <= _BAND_COST * size]
        order = banded[np.argsort(-lengths[banded], kind="stable")]
        start = 0
        while band and start < order.size:
            # rows of similar length share one chirp transform of the longest one's
            longest = int(lengths[order[start]])
            rows_per_batch = max(1, (_BATCH_ENTRIES // 2) // sp_fft.next_fast_len(longest + band - 1))
            stop = start + 1
            while stop < order.size and stop - start < rows_per_batch and 5 * int(lengths[order[stop]]) >= 4 * longest:
                stop += 1
            rows = order[start:stop]
            spectra = band_transforms([weights[index] for index in rows], offsets[rows], band, size)
            product[kept] *= _product_of_powers(spectra[:, kept], counts[rows])  # kept < band
            start = stop
    spectrum[kept] = product[kept]
    dropped = frequencies_all - kept.size
    return spectrum, 2.0 * dropped * math.exp(log_threshold) / size, base


def compose(measures: Sequence[tuple[GridMeasure, int]], tail: float) -> ComposedMeasure:
    """Compose ``count`` copies of each measure on one FFT window: FFT composition of
    privacy-loss distributions (Koskela, Jälkö, Honkela 2020) on a window set by Chernoff
    bounds, with the aliasing argument of Gopi, Lee, Wutschitz 2021 (module docstring)."""
    step = measures[0][0].step

    def cumulant_at(lam: np.ndarray) -> np.ndarray:
        total = np.zeros(lam.shape)
        for measure, count in measures:
            total += count * _log_mgf(measure, lam)
        return total

    lam = _chernoff_lambdas(measures, tail)
    lam, cumulant = refine_lambdas(lam, cumulant_at(lam), math.log(tail), cumulant_at)
    positions, masses, composed, pruned = fft_window(measures, [m.masses for m, _ in measures], lam, cumulant, math.log(tail))
    # Chernoff bounds on the composed discrete measure beyond the window
    above = chernoff_above(lam, cumulant, positions[-1] + 0.5 * step)
    below = chernoff_below(lam, cumulant, positions[0] - 0.5 * step)
    infinity = composed_infinity(measures)
    total_count = sum(count for _, count in measures)
    roundoff = _roundoff_per_entry(composed, total_count) + pruned
    return ComposedMeasure(positions, masses, above, below, infinity, roundoff, composed.size, lam, cumulant)


def _powers_window(
    measure: GridMeasure, counts: Sequence[int], tail: float
) -> tuple[np.ndarray, np.ndarray, dict[int, tuple[float, float]], float]:
    """(lambdas, one copy's log-MGF at them, each count's Chernoff edges, the span in
    nats of the window that holds every count's edges around its own centre) for
    :func:`compose_powers`."""
    log_tail = math.log(tail)
    largest = max(counts)
    lam = _chernoff_lambdas([(measure, largest)], tail)
    lam, unit = refine_lambdas(lam, _log_mgf(measure, lam), log_tail / largest, lambda extra: _log_mgf(measure, extra))
    positive = lam > 0
    edges = {}
    with np.errstate(invalid="ignore"):
        for count in counts:
            cumulant = count * unit
            edges[count] = (
                float(np.max((cumulant[~positive] - log_tail) / lam[~positive])),
                float(np.min((cumulant[positive] - log_tail) / lam[positive])),
            )
    offset = int(round(measure.mean_index())) * measure.step - measure.shift
    spread = max(top - count * offset for count, (_, top) in edges.items()) - min(
        bottom - count * offset for count, (bottom, _) in edges.items()
    )
    return lam, unit, edges, spread


def powers_window(measure: GridMeasure, counts: Sequence[int], tail: float) -> float:
    """The span in nats of the FFT window :func:`compose_powers` would take (nan when the
    measure has no mass)."""
    return _powers_window(measure, counts, tail)[3]


def compose_powers(measure: GridMeasure, counts: Sequence[int], tail: float) -> Iterator[ComposedMeasure]:
    """:func:`compose` of ``count`` copies of one measure for every count in ``counts``,
    from one transform: the window is the widest of their Chernoff windows, each power is
    the transform raised to its count, and each result carries its own aliasing bounds,
    mass at +inf and round-off allowance, exactly as its own :func:`compose` call would.
    The results come in increasing order of count, each formed when the caller asks for
    it (a list of a dozen held 17 MiB of S1's 57 MiB peak).

    Frequencies negligible at the smallest count are dropped for every count
    (:func:`_kept_frequencies`): a dropped frequency has |z| + e < 1, so its bound only
    falls as the count grows, and each result's allowance carries the same pruning term."""
    step = measure.step
    lam, unit, edges, spread = _powers_window(measure, counts, tail)
    centre = int(round(measure.mean_index()))
    offset = centre * step - measure.shift
    if not math.isfinite(spread) or spread <= 0:
        raise no_finite_window()
    check_grid(spread / step + 3, "the FFT window of the composition")
    size = sp_fft.next_fast_len(int(math.ceil(spread / step)) + 3, real=True)
    row = np.zeros(size)
    _place(row, measure.masses, measure.first_index - centre)
    transform = sp_fft.rfft(row)
    del row
    keep, pruned = _kept_frequencies(transform[None, :], np.array([min(counts)], dtype=np.int64), size, False)
    kept = transform[keep]
    spectrum = np.zeros(transform.size, dtype=complex)
    del transform
    power, power_count = None, 0
    for count in sorted(counts):
        bottom, _ = edges[count]
        cumulant = count * unit
        # the smallest count by binary powers, each next one by further multiplications
        if power is None or count - power_count > 8:
            power = _product_of_powers(kept[None, :], np.array([count], dtype=np.int64))
        else:
            for _ in range(count - power_count):
                power = power * kept
        power_count = count
        spectrum[keep] = power
        composed = sp_fft.irfft(spectrum, size)
        base = count * offset
        first = int(math.floor((bottom - base) / step))
        offsets = np.arange(first, first + size)
        positions = base + offsets * step
        above = chernoff_above(lam, cumulant, positions[-1] + 0.5 * step)
        below = chernoff_below(lam, cumulant, positions[0] - 0.5 * step)
        infinity = composed_infinity([(measure, count)])
        yield ComposedMeasure(
            positions, composed[offsets % size], above, below, infinity, _roundoff_per_entry(composed, count) + pruned, size
        )
