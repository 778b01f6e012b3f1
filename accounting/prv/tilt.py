"""Exponentially tilted FFT composition: certified brackets at tiny delta.

The FFT composition of :mod:`.compose` carries a round-off allowance of about
4u (T + log2 n) max(p) on every entry.  That allowance does not shrink with the grid
step, and at delta of 1e-10 or below its share of delta(eps) = sum_{x > eps} w (1 - e^{eps - x})
sets a floor on the bracket's width that no refinement can pass.

Tilting moves the composition to where delta lives (the saddle-point idea of Alghamdi et
al. 2023, used here only to place the FFT's dynamic range, never as an approximation):

1. each discretised measure m is replaced by m~_j = m_j e^{theta x_j} / Z, with
   Z = sum_j m_j e^{theta x_j} (finite part; the atom at +inf is kept aside);
2. the tilted measures are composed by the same FFT (tilting commutes with convolution:
   e^{theta (x + y)} = e^{theta x} e^{theta y});
3. entry k of the composition is untilted exactly: p_k = p~_k S(y_k) with
   S(y) = exp(Lambda - theta y), Lambda = sum_i count_i log Z_i;
4. the round-off allowance r~ is taken on the tilted entries, so each entry's allowance
   becomes r~ S(y_k): relative to the mass where delta(eps) lives, decaying above it.
5. where r~, about c u T max p~, would still take more than its budget of delta at
   every tilt up to the saddle point (a tiny delta after 1e5 steps), a composition of
   hundreds of steps or more of a few distinct measures is transformed and raised to
   its powers in long double (:func:`choose_tilt`, :func:`.compose.extended_precision`).
   The choice is made on an estimate of max p~ (:func:`peak_estimate`) and checked on the
   composition's own allowance (:func:`allowance_fits`): a double composition whose
   allowance does not fit is composed again in long double.

theta is chosen so that the tilted composed mean sits at the eps of interest (the
saddle point of the Chernoff bound there).  Only positions y >= ``floor`` are kept, where
S(y) <= S(floor) stays representable; ``floor`` is a certified lower bound on the eps
being sought (from an untilted evaluation), so nothing is lost:

* upper profile: weights (max(p~_k, 0) + r~) S(y_k), plus the mass at +inf, the
  untilted Chernoff bound on the mass above the window, and (when the window starts above
  ``floor``) a Chernoff bound on the mass between ``floor`` and the window; below
  ``floor`` it is the trivial bound 1.  Wrapped
  (aliased) tilted mass is non-negative, so it only raises the sum.
* lower profile: weights max(p~_k - r~, 0) S(y_k) (a sub-measure of the composed lower
  measure), minus every tilted mass that can have wrapped into the kept entries,
  (above~ + below~) S(floor), valid at every eps because S is largest at ``floor``.

The window is set from the *tilted* cumulant Lambda(theta + lam) - Lambda(theta), with a
tail of ``tail`` / S(floor), so that the subtracted aliasing term is at most ``tail``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numba
import numpy as np

from dpforge.accounting.prv.compose import (
    _U,
    ComposedProfile,
    _chernoff_lambdas,
    _log_mgf,
    chernoff_above,
    chernoff_below,
    chernoff_window,
    composed_infinity,
    extended_precision,
    fft_window,
    refine_lambdas,
    roundoff_model,
)
from dpforge.accounting.prv.discretise import GridMeasure
from dpforge.accounting.prv.tilt_split import split_composition, worth_splitting
from dpforge.errors import LimitError

#: largest log S(floor) a tilted composition accepts (S(floor) = e^600 stays far from overflow)
_MAX_LOG_SCALE = 600.0
#: largest tilted tail the window is set for (when S(floor) is tiny, tail / S(floor) can
#: exceed the tilted law's whole mass)
_MAX_LOG_TILTED_TAIL = math.log(1e-6)
#: the safety factor on the local limit theorem's peak (:func:`peak_estimate`): a skewed
#: tilted law peaks higher (sigma = 1, q = 1e-6, T = 1e5 at delta = 1e-15 peaked 15 times
#: above the normal density's h / sqrt(2 pi sigma~^2) on 1.9M points)
_PEAK_SAFETY = 4.0


def _log_tilted_masses(measure: GridMeasure, theta: float) -> tuple[np.ndarray, float]:
    """(log of m_j e^{theta x_j} / Z, log Z) with -inf where m_j = 0."""
    with np.errstate(divide="ignore"):
        logs = np.log(measure.masses) + theta * measure.positions
    top = float(np.max(logs))
    if not math.isfinite(top):
        return logs, -math.inf
    log_z = top + math.log(float(np.sum(np.exp(logs - top))))
    return logs - log_z, log_z


@numba.njit(cache=True)
def _tilt_kernel(masses, first, step, shift, theta):  # pragma: no cover - jitted
    """(log Z, mean, variance of the tilted measure) for m_j e^{theta x_j}, x_j =
    (first + j) step - shift, shifted by the largest exponent so that nothing overflows
    ((-inf, 0, 0) when empty).

    The factors e^{theta (x_j - x_top)} come by one multiplication a cell, walking away
    from the occupied point x_top with the largest exponent (the last for theta >= 0),
    rather than an exponential each: about 1e-10 relative after a million cells, and
    these moments only steer (:func:`saddle_tilt`, :func:`choose_tilt`; every bound uses
    its own tilted masses, :func:`_log_tilted_masses`).  The walk stops once every cell
    left could add at most 1e-18 of the total.  Mean and variance are taken about x_top."""
    size = masses.size
    low, high = 0, size - 1
    while low < size and not masses[low] > 0:
        low += 1
    if low == size:
        return -np.inf, 0.0, 0.0
    while not masses[high] > 0:
        high -= 1
    top = high if theta >= 0 else low
    walk = -1 if theta >= 0 else 1
    origin = (first + top) * step - shift
    factor = np.exp(-abs(theta) * step)
    total = 0.0
    weighted = 0.0
    squared = 0.0
    scale = 1.0
    j = top
    cells = high - low + 1
    while low <= j <= high:
        if masses[j] > 0:
            w = masses[j] * scale
            d = (j - top) * step
            total += w
            weighted += w * d
            squared += w * d * d
        scale *= factor
        if scale * cells < 1e-18 * total:
            break
        j += walk
    offset = weighted / total
    return theta * origin + np.log(total), origin + offset, max(squared / total - offset * offset, 0.0)


def _tilted_cumulants(measures: Sequence[tuple[GridMeasure, int]], theta: float) -> tuple[float, float, float]:
    """(Lambda(theta), mean, variance) of the composed measure after tilting every step by
    e^{theta x}, in one pass: Lambda(theta) = sum_i count_i log Z_i(theta) and its first
    two derivatives, sum_i count_i E~_i[x] and sum_i count_i Var~_i[x]."""
    log_scale = mean = variance = 0.0
    for measure, count in measures:
        log_z, one_mean, one_variance = _tilt_kernel(measure.masses, measure.first_index, measure.step, measure.shift, theta)
        log_scale += count * log_z
        if math.isfinite(log_z):
            mean += count * one_mean
            variance += count * one_variance
    return log_scale, mean, variance


def _tilted_moments(measures: Sequence[tuple[GridMeasure, int]], theta: float) -> tuple[float, float]:
    """(mean, variance) of the composed measure after tilting every step by e^{theta x}
    (:func:`_tilted_cumulants`)."""
    return _tilted_cumulants(measures, theta)[1:]


def tilted_mean(measures: Sequence[tuple[GridMeasure, int]], theta: float) -> float:
    """Mean of the composed measure after tilting every step by e^{theta x}:
    sum_i count_i E~_i[x] (the derivative of the composed cumulant at theta)."""
    return _tilted_moments(measures, theta)[0]


def _log_spread(theta: float, step: float) -> float:
    """log of e^{theta h} / (theta^2 h): an allowance of r~ S(y) on every kept entry
    y = eps + j h, weighted by 1 - e^{eps - y} <= y - eps, adds at most
    r~ S(eps) sum_j j h e^{-theta j h} <= r~ S(eps) e^{theta h} / (theta^2 h) to delta(eps)."""
    return theta * step - 2.0 * math.log(max(theta, 1e-12)) - math.log(step)


def _roundoff_goal(
    measures: Sequence[tuple[GridMeasure, int]], theta: float, budget: float, extended: bool = False, peak: float = 1.0
) -> float:
    """The largest log S(eps) at which the round-off allowance of a tilt by ``theta`` adds
    at most ``budget`` to delta(eps).

    Each kept entry y > eps carries r~ S(y) = r~ S(eps) e^{-theta (y - eps)} of allowance
    with r~ = :func:`.compose.roundoff_model` (T, n) max p~, at most that model at n = 2^64
    (c u (T + 64), or its long double form) times ``peak`` for the model part of the
    allowance (``peak`` = 1 bounds it: a tilted measure has total mass 1, so every entry
    is at most 1; :func:`peak_estimate` estimates it; log2 of any window is below 64);
    summed over the entries that is at most r~ S(eps) e^{theta h} / (theta^2 h)
    (:func:`_log_spread`).

    This only sets how far to tilt.  When the allowance's other witness (twice the most
    negative FFT entry, :func:`compose_tilted`) is the larger one, the allowance can take
    more than the budget: the bracket is then wider, never wrong, and a result looser than
    asked says so (``accuracy["reached"]`` and a ``DpforgeAccuracyWarning``)."""
    step = measures[0][0].step
    steps = sum(count for _, count in measures)
    roundoff = roundoff_model(steps, 2**64, extended) * peak
    return math.log(budget) - math.log(roundoff) - _log_spread(theta, step)


def peak_estimate(step: float, variance: float) -> float:
    """An estimate of the largest entry of a composed tilted measure on a grid of ``step``
    whose variance is ``variance`` (sigma~^2, :func:`_tilted_cumulants`): ``_PEAK_SAFETY``
    times the local limit theorem's h / sqrt(2 pi sigma~^2) (Gnedenko 1948; Petrov 1975,
    ch. VII), capped at 1 (and 1 without a positive variance).

    It only chooses between a double and a long double power (:func:`choose_tilt`); the
    allowance a composition carries is always taken on its own largest entry
    (:func:`compose_tilted`), and :func:`allowance_fits` checks it.  The bound 1 chose long
    double where the entries peak far lower: sigma = 26.8, q = 1.35e-6, T = 2.37e6 at
    delta = 1.3e-10 peaked at 1.1e-5, as the normal density gives, and its double
    allowance takes a quarter of the budget: the call takes 0.10 s in double against
    0.48 s in long double (medians of 3)."""
    if not variance > 0.0:
        return 1.0
    return min(1.0, _PEAK_SAFETY * step / math.sqrt(2.0 * math.pi * variance))


def allowance_fits(composition: "TiltedComposition", step: float, target: float, budget: float) -> bool:
    """Whether the allowance ``composition`` carries (its ``roundoff`` on every kept entry,
    in tilted units) adds at most ``budget`` to delta(``target``): log S(target) +
    log r~ + :func:`_log_spread` <= log ``budget`` (the bound of :func:`_roundoff_goal`,
    on the composition's own r~)."""
    if composition.roundoff <= 0.0:
        return True
    log_scale = composition.log_scale - composition.theta * target
    return log_scale + math.log(composition.roundoff) + _log_spread(composition.theta, step) <= math.log(budget)


def saddle_tilt(
    measures: Sequence[tuple[GridMeasure, int]],
    target: float,
    floor: float = 0.0,
    budget: float | None = None,
    extended: bool = False,
) -> float:
    """theta >= 0 with tilted mean = ``target`` (0 when the untilted mean is already at or
    above it); the tilted mean increases with theta, so safeguarded Newton steps find it
    (:func:`_saddle_point`).

    theta is capped at ``_MAX_LOG_SCALE / 2 / (target - floor)``: at the saddle point
    Lambda(theta) - theta target <= 0 (convexity, Lambda(0) <= 0), so the untilting factor
    at ``floor`` stays below e^{theta (target - floor)} <= e^{_MAX_LOG_SCALE / 2}.  A
    direction whose loss cannot reach ``target`` (a dominated one) gets the cap.

    With ``budget`` (the part of delta(target) the round-off allowance may take), the
    smallest theta below the saddle point whose allowance fits the budget
    (:func:`_roundoff_goal`) is returned instead: log S(target) = Lambda(theta) - theta target
    falls from Lambda(0) <= 0 to its minimum at the saddle point, and a smaller tilt skews
    the tilted law less, so its FFT window is narrower (the saddle point's window is set by
    the few large losses that dominate delta at tiny delta and can be ten times wider).
    Any theta > 0 gives a certified composition; the budget only sets the tightness.
    ``extended``: the allowance of a long double power (:func:`.compose.roundoff_model`)."""
    saddle = _saddle(measures, target, floor, budget)
    if saddle <= 0.0 or budget is None:
        return saddle
    return _fitting_tilt(measures, target, saddle, budget, extended)


def _saddle(measures: Sequence[tuple[GridMeasure, int]], target: float, floor: float, budget: float | None) -> float:
    """The saddle point of :func:`saddle_tilt` (0 when the untilted mean is at or above
    ``target``), capped; with a budget it only bounds the search below, so it is found to
    1e-3 instead of 1e-6."""
    if tilted_mean(measures, 0.0) >= target:
        return 0.0
    cap = 0.5 * _MAX_LOG_SCALE / max(target - floor, 1e-12)
    return _saddle_point(measures, target, cap, 1e-6 if budget is None else 1e-3)


def _fits(
    measures: Sequence[tuple[GridMeasure, int]],
    theta: float,
    target: float,
    budget: float,
    extended: bool,
    estimate_peak: bool = False,
) -> bool:
    """Whether the allowance of a tilt by ``theta`` keeps within ``budget`` at ``target``,
    priced at the largest composed entry's bound 1 or (``estimate_peak``) at
    :func:`peak_estimate` at that tilt (one pass over the measures gives both log S and
    the tilted variance: log S(target) = Lambda(theta) - theta target)."""
    log_scale, _, variance = _tilted_cumulants(measures, theta)
    peak = peak_estimate(measures[0][0].step, variance) if estimate_peak else 1.0
    return log_scale - theta * target <= _roundoff_goal(measures, theta, budget, extended, peak)


def _fitting_tilt(
    measures: Sequence[tuple[GridMeasure, int]],
    target: float,
    saddle: float,
    budget: float,
    extended: bool,
    fits_at_saddle: bool | None = None,
    estimate_peak: bool = False,
) -> float:
    """The smallest theta up to ``saddle`` whose allowance fits ``budget`` (``saddle`` when
    none does; :func:`saddle_tilt`); ``fits_at_saddle``, when the caller has checked it;
    ``estimate_peak``: the allowance priced at :func:`peak_estimate` (:func:`_fits`)."""
    if fits_at_saddle is None:
        fits_at_saddle = _fits(measures, saddle, target, budget, extended, estimate_peak)
    if not fits_at_saddle:
        return saddle
    # log S(target) - goal(theta) decreases on (0, saddle]: bisect for where it crosses 0
    low, high = 0.0, saddle
    for _ in range(40):
        middle = 0.5 * (low + high)
        if not _fits(measures, middle, target, budget, extended, estimate_peak):
            low = middle
        else:
            high = middle
        if high - low <= 1e-2 * high:
            break
    return high


def _saddle_point(measures: Sequence[tuple[GridMeasure, int]], target: float, cap: float, tolerance: float) -> float:
    """theta in (0, cap] with tilted mean = ``target`` to a relative ``tolerance`` (``cap``
    when the mean stays below it there), given that the untilted mean is below it.

    The mean increases with theta (its derivative is the tilted variance).  Until it
    first passes ``target``, theta grows by Newton steps of 2x to 16x; then Newton steps
    run inside the bracket [low, high] (mean below ``target`` at low, at or above it at
    high), replaced by bisection when a step would leave the bracket or would not halve
    the step before it (the safeguard of Press et al., Numerical Recipes, "rtsafe"): a
    subsampled law's mean rises from 1 to 12,000 nats between theta = 2 and 4 and then
    flattens, where a plain Newton step leaves the bracket.  Doubling from 1 and
    bisecting took 20-30 evaluations of every one-step measure (a fifth of a tiny-delta
    call's time on 1M-point grids).  Any theta > 0 certifies (the saddle point only
    places the FFT's range), so its accuracy sets only the tightness."""
    low, high = 0.0, math.inf
    theta = min(1.0, cap)
    step = previous = math.inf
    for _ in range(200):
        mean, variance = _tilted_moments(measures, theta)
        excess = mean - target
        if excess < 0.0:
            low = theta
            if theta >= cap:
                return cap
        else:
            high = theta
        newton = theta - excess / variance if variance > 0.0 else math.nan
        if math.isinf(high):  # not bracketed yet: grow theta
            theta = min(min(max(newton, 2.0 * theta) if math.isfinite(newton) else 2.0 * theta, 16.0 * theta), cap)
            continue
        if high - low <= tolerance * high:
            return min(0.5 * (low + high), cap)
        previous, step = step, abs(newton - theta) if math.isfinite(newton) else math.inf
        if low < newton < high and step <= 0.5 * previous:
            if step <= 0.25 * tolerance * newton:
                return min(newton, cap)
            theta = newton
        else:  # bisection, geometric while the bracket spans more than a factor of 4
            theta = math.sqrt(low * high) if 4.0 * low < high and low > 0.0 else 0.5 * (low + high)
            step = max(theta - low, high - theta)
    return min(0.5 * (low + high) if math.isfinite(high) else low, cap)


def choose_tilt(
    measures: Sequence[tuple[GridMeasure, int]],
    target: float,
    floor: float = 0.0,
    budget: float | None = None,
    estimate_peak: bool = True,
) -> tuple[float, bool]:
    """(theta, extended): the tilt of :func:`saddle_tilt`, and whether to compose it with
    a long double power (:func:`.compose.extended_precision`).

    Long double only where the double allowance cannot keep within ``budget`` at any
    tilt up to the saddle point (or where no budget is given), since its transforms
    cost about 4.5 times as much: q = 0.004, sigma = 1.1, T = 1e3 fits in double from
    delta = 1e-10 to 1e-15 and took 2.1 times its delta = 1e-5 call in long double
    against 1.6-1.8 times in double; sigma = 1, q = 1e-6, T = 1e5 at delta = 1e-15 does
    not fit, and needs it to reach 1e-3.

    Where long double is open (``extended_precision``), the double allowance is priced at
    :func:`peak_estimate` of the largest composed entry (``estimate_peak``) rather than at
    its bound 1, so a caller must check the double composition's own allowance
    (:func:`allowance_fits`) and call again with ``estimate_peak=False`` when it does not
    fit (:func:`.evaluate.evaluate`).  Elsewhere the allowance is priced at 1, as there
    is no second precision to fall back on."""
    saddle = _saddle(measures, target, floor, budget)
    if saddle <= 0.0:
        return 0.0, False
    eligible = extended_precision(measures)
    if budget is None:
        return saddle, eligible
    estimate = eligible and estimate_peak
    fits_double = _fits(measures, saddle, target, budget, False, estimate)
    if not eligible or fits_double:
        return _fitting_tilt(measures, target, saddle, budget, False, fits_double, estimate), False
    # the saddle point is found once for both precisions (it was searched a second time)
    return _fitting_tilt(measures, target, saddle, budget, True), True


def untilting_error(log_scale: float, theta: float, positions: np.ndarray) -> np.ndarray:
    """A bound, to first order and for exp and log within a few ulps, on the relative
    rounding of S(y) = e^{log_scale - theta y} at each position: the exponential carries
    its argument's absolute rounding, a few u of the magnitudes it is formed from
    (theta y, log_scale and their difference), as a relative error.  At theta y of tens
    of nats this is 1e-14 to 1e-13, beyond the allowance's model near the tilted peak (a
    harness against exact long double compositions found upper profiles up to 5e-14 of
    delta below the exact one before it)."""
    product = np.abs(theta * positions)
    return 4.0 * _U * (abs(log_scale) + 2.0 * product + np.abs(log_scale - theta * positions) + 1.0)


def tilted_mass_error(measure: GridMeasure, logs: np.ndarray, log_z: float, theta: float) -> float:
    """A bound (first order, for exp and log within a few ulps) on the relative error of
    each tilted one-step mass e^{log m + theta x - log Z} of ``measure`` formed in log
    space (``logs``: those exponents): a few u of the magnitudes summed into the
    exponent (:func:`log_space_error`)."""
    finite = logs[np.isfinite(logs)]
    if finite.size == 0 or not math.isfinite(log_z):
        return 0.0
    reach = max(abs(measure.first_index), abs(measure.first_index + measure.masses.size)) * measure.step + abs(measure.shift)
    return 4.0 * _U * (2.0 * float(np.max(np.abs(finite))) + 2.0 * abs(log_z) + 3.0 * abs(theta) * reach + 1.0)


def log_space_error(
    measures: Sequence[tuple[GridMeasure, int]], tilted_logs: Sequence[np.ndarray], log_zs: Sequence[float], theta: float
) -> float:
    """A bound on the relative error of each entry of the tilted composition of
    ``measures`` (count copies each) from forming every tilted one-step mass in log
    space (:func:`tilted_mass_error`; ``tilted_logs`` their exponents, ``log_zs``): a
    composed entry, a sum of products of count such masses, is within the counts times
    theirs; plus the rounding of log_scale, the sum of count log Z, which S carries to
    every entry (u times the number of measures times the sum of |count log Z|)."""
    total, scale_sum = 0.0, 0.0
    for (measure, count), logs, log_z in zip(measures, tilted_logs, log_zs):
        total += count * tilted_mass_error(measure, logs, log_z, theta)
        if math.isfinite(log_z):
            scale_sum += count * abs(log_z)
    return total + _U * len(measures) * scale_sum


@dataclass(frozen=True)
class TiltedComposition:
    """The tilted composed measure on its window, with what is needed to untilt it."""

    positions: np.ndarray
    masses: np.ndarray  # tilted p~_k (aliased FFT output)
    theta: float
    log_scale: float  # Lambda = sum_i count_i log Z_i
    floor: float
    above_tilted: float
    below_tilted: float
    above: float  # untilted mass above the window (Chernoff)
    below: float  # untilted mass below the window (Chernoff)
    infinity: float
    roundoff: float  # per-entry allowance in tilted units
    grid_size: int
    exponents: np.ndarray  # Chernoff exponents and the untilted cumulant there
    cumulants: np.ndarray
    #: a bound on each composed tilted entry's relative error from forming the tilted
    #: one-step masses in log space (:func:`log_space_error`), beside the FFT's own
    relative_error: float = 0.0

    def _kept(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(positions from the floor up, their tilted masses, S(y), each entry's relative
        error bound: the tilted masses' and S's own rounding, :func:`untilting_error`)."""
        keep = self.positions >= self.floor
        y = self.positions[keep]
        error = untilting_error(self.log_scale, self.theta, y) + self.relative_error
        return y, self.masses[keep], np.exp(self.log_scale - self.theta * y), error

    def upper_profile(self) -> ComposedProfile:
        """Certified upper profile for eps >= ``floor`` (1 below it); see the module docstring."""
        y, p, scale, error = self._kept()
        weights = (np.maximum(p, 0.0) + self.roundoff) * scale * (1.0 + 2.0 * error)
        below = self.below if self.positions[0] > self.floor else 0.0
        return ComposedProfile(
            "upper",
            y,
            weights,
            self.infinity + self.above + below,
            self.roundoff,
            self.grid_size,
            self.floor,
            exponents=self.exponents,
            cumulants=self.cumulants,
        )

    def lower_profile(self) -> ComposedProfile:
        """Certified lower profile at every eps; see the module docstring."""
        y, p, scale, error = self._kept()
        weights = np.maximum(p - self.roundoff, 0.0) * scale * (1.0 - 2.0 * error)
        floor_error = float(untilting_error(self.log_scale, self.theta, np.array([self.floor]))[0]) + self.relative_error
        wrapped = (self.above_tilted + self.below_tilted) * math.exp(self.log_scale - self.theta * self.floor)
        wrapped *= 1.0 + 2.0 * floor_error
        return ComposedProfile("lower", y, weights, -wrapped, self.roundoff, self.grid_size, self.floor)


def compose_tilted(
    measures: Sequence[tuple[GridMeasure, int]], tail: float, theta: float, floor: float, extended: bool = False
) -> TiltedComposition:
    """Compose ``count`` copies of each measure after tilting by e^{theta x} (theta > 0),
    keeping positions from ``floor`` up (module docstring); with ``extended``, by a long
    double power (:func:`.compose.fft_window`, :func:`choose_tilt`)."""
    step = measures[0][0].step
    tilted_logs, log_zs, log_scale = [], [], 0.0
    for measure, count in measures:
        logs, log_z = _log_tilted_masses(measure, theta)
        tilted_logs.append(logs)
        log_zs.append(log_z)
        log_scale += count * log_z

    def cumulants_at(lam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(tilted cumulant Lambda(theta + lam) - Lambda(theta), untilted cumulant) at lam."""
        tilted, untilted = np.zeros(lam.shape), np.zeros(lam.shape)
        for (measure, count), log_z in zip(measures, log_zs):
            tilted += count * (_log_mgf(measure, theta + lam) - log_z)
            untilted += count * _log_mgf(measure, lam)
        return tilted, untilted

    lam = _chernoff_lambdas(measures, tail)
    tilted_cumulant, cumulant = cumulants_at(lam)
    log_scale_floor = log_scale - theta * floor
    if log_scale_floor > _MAX_LOG_SCALE:
        raise LimitError(
            f"a tilt of {theta:.3g} would scale the composed measure by e^{log_scale_floor:.0f} at eps={floor:.6g} "
            f"(limit e^{_MAX_LOG_SCALE:.0f})"
        )
    # the wrapped tilted mass is subtracted scaled by S(floor): a tilted tail of
    # tail / S(floor) keeps that term at tail (capped so that the window still holds the
    # tilted law's body)
    log_tail = min(math.log(tail) - log_scale_floor, _MAX_LOG_TILTED_TAIL)
    added: list[np.ndarray] = []

    def tilted_at(extra: np.ndarray) -> np.ndarray:
        tilted, untilted = cumulants_at(extra)
        added.append(untilted)
        return tilted

    lam, tilted_cumulant = refine_lambdas(lam, tilted_cumulant, log_tail, tilted_at)
    cumulant = np.concatenate([cumulant, *added])
    positive = lam > 0
    # one measure whose tilted law carries rare large losses: composed by the number of
    # them (.tilt_split), on a window that does not grow with that number
    split = None
    if len(measures) == 1:
        whole = chernoff_window(lam, tilted_cumulant, log_tail)
        if worth_splitting((whole[1] - whole[0]) / step):
            split = split_composition(measures[0][0], measures[0][1], np.exp(tilted_logs[0]), tail, log_tail, whole, extended)
    if split is not None:
        positions, masses, size, pruned = split.positions, split.masses, split.grid_size, 0.0
        high, low = positions[-1] + 0.5 * step, positions[0] - 0.5 * step
        above_tilted, below_tilted = split.above_tilted, split.below_tilted
    else:
        positions, masses, composed, pruned = fft_window(
            measures, [np.exp(logs) for logs in tilted_logs], lam, tilted_cumulant, log_tail, extended=extended
        )
        size = composed.size
        high, low = positions[-1] + 0.5 * step, positions[0] - 0.5 * step
        above_tilted = chernoff_above(lam, tilted_cumulant, high)
        below_tilted = chernoff_below(lam, tilted_cumulant, low)
    # untilted mass beyond the window: the direct Chernoff bound, or the tilted one scaled
    # by S at the window's edge (S decreases with y for theta > 0), whichever is smaller
    above = float(np.exp(min(np.min(cumulant[positive] - lam[positive] * high), log_scale - theta * high + math.log(max(above_tilted, 1e-300)))))
    # untilted mass below the window that can matter (at or above ``floor``): no more
    # than the mass below the window, nor than the mass at or above ``floor``, nor than
    # S(floor) times the tilted mass below the window (S decreases with y)
    below = float(
        np.exp(
            min(
                np.min(cumulant[~positive] - lam[~positive] * low),
                np.min(cumulant[positive] - lam[positive] * floor),
                log_scale_floor + math.log(max(below_tilted, 1e-300)),
            )
        )
    )
    # the split's dropped terms are carried at +inf (the upper profile; the lower one
    # does not read it)
    infinity = composed_infinity(measures) + (split.dropped if split is not None else 0.0)
    total_count = sum(count for _, count in measures)
    if split is not None:
        roundoff = split.roundoff
    else:
        roundoff = max(2.0 * max(-float(masses.min()), 0.0), roundoff_model(total_count, size, extended) * float(masses.max())) + pruned
    return TiltedComposition(
        positions,
        masses,
        theta,
        log_scale,
        floor,
        above_tilted,
        below_tilted,
        above,
        below,
        infinity,
        roundoff,
        size,
        lam,
        cumulant,
        relative_error=log_space_error(measures, tilted_logs, log_zs, theta),
    )
