"""A staged chunk's optimistic measure on two scales: a fine grid for the bulk of the
law, the coarse grid for its tail.

Why. A law narrower than the grid (a Poisson-subsampled step at small q) is composed in
chunks on a finer grid before it is discretised onto the grid (:func:`.components._chunk`).
The fine grid has to cover the whole one-step range, and subsampled laws carry a thin
tail far beyond their bulk: at q = 1e-4, sigma = 0.6 the bulk is about 1e-4 wide and the
tail reaches 3 nats, so every chunk took windows of 1-5 M fine points.

How. Split the one-step law at a point ``split`` of the coarse grid into the sub-measure
B of losses at or below it and R of losses above it: omega = B + R.  Profiles are linear
in the measure and composition is bilinear, so a chunk of c steps is

    omega^{*c} = sum_k C(c, k) B^{*(c-k)} * R^{*k},

and for a lower bound any terms may be dropped (a sub-measure's profile is a lower bound
at every eps).  So the chunk's optimistic measure is built as

    M = sum_{k <= K} C(c, k) G_k * R~^{*k},

with every factor a certified optimistic measure:

* B~ and R~: the optimistic construction of :mod:`.discretise` restricted to each part
  (:func:`.discretise.lower_on_grid` on cell edges that meet at ``split``, moved down to
  the last point of the fine lattice: B on the fine lattice at its best phase, dropping
  what lies above ``split``; R from ``split`` up, its first cell ending at the next
  coarse point and its first label rounded down to the coarse point below ``split``).  A
  randomised quantiser of a sub-measure is dominated by it (data processing holds for
  the hockey-stick functional of any two non-negative measures), and rounding labels
  down only lowers the profile.
* G_k: B~^{*(c-k)} composed on the fine grid (:func:`.compose.compose_powers`, its lower law:
  round-off and aliased mass removed), then discretised onto the coarse grid by the same
  optimistic construction at one common grid phase.
* R~^{*k} and the sum: one FFT on a window that holds the sum's support up to where a
  Chernoff bound on the mass beyond is negligible next to the round-off allowance; that
  bound, which is all that can wrap round, and the allowance of :mod:`.compose` are
  removed from every entry, and the entries past the window dropped.
* Terms k > K are dropped; K is the smallest with Pr(Binomial(c, rho) > K) <= the chunk's
  tail, rho = R's mass (the chunk's tail is already a hundredth of the composition's tail
  over the number of chunks, which is 1e-4 of delta), so what is dropped is negligible
  next to delta.
* Labels of different terms sit on the coarse lattice shifted down by tiny (1e-12) common
  offsets that differ between terms; every term is placed on the lattice shifted by the
  largest of them, which moves atoms down only.

The fine grid now spans the bulk and ``split`` only (a few thousand points), and R is
resolved on the coarse grid, where its smooth, wide law needs nothing finer.  It holds
at most ``_FINE_POINTS`` points, and so does the window of B~'s powers: a log-normal bulk
(sigma = 0.3, q = 1e-6) asked for 1e8.

At a tiny delta the sum over k is formed tilted instead (:func:`_sum_of_products`):
untilted, its round-off hides the single far-out hits that set eps.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import fft as sp_fft
from scipy import special

from dpforge.accounting.prv.compose import _ROUNDING_FACTOR, _U, _log_mgf_kernel, _place, compose_powers, powers_window
from dpforge.accounting.prv.discrete_loss import DiscreteLoss
from dpforge.accounting.prv.discretise import GridMeasure, _choose_phase, lower_measure, lower_on_grid
from dpforge.accounting.prv.limits import check_grid
from dpforge.accounting.prv.tilt_split import _log_binomial
from dpforge.mechanisms.pairs import PrivacyLoss

#: the tail part R of a chunk of c steps has mass rho with c * rho at most this
_TAIL_EVENTS = 1e-3
#: zoom passes of the bulk's phase search (.discretise._choose_phase): a chunk of c steps
#: pays the bulk's rounding c times, so its phase is searched to 1/(24 * 12^2) of a step
_ZOOM = 2
#: a chunk's law is re-discretised within this many nats of its centre (as in .components)
_CENTRED_RANGE = 600.0
#: the bulk's fine grid, and the FFT window of its powers, hold at most this many points:
#: the fine step comes from one step's robust width, which a log-normal bulk makes tiny
#: next to the span its powers need (sigma = 0.3, q = 1e-6: robust width 2.8e-7 nats, a
#: bulk reaching 0.03-0.1 nats, windows of 3e7-1.2e8 points over the memory budget).
#: Any fine step keeps the measure certified; a coarser one loses tightness only where
#: the bulk's rounding, paid once per step, reaches the coarse step (T = 1,000 at
#: delta = 1e-5 gives the same bracket to 4e-7 with the fine step 10x or 100x coarser)
_FINE_POINTS = 2**21
#: ... and a staged chain's first chunks at most this many (their ``resolution`` 1): at
#: sigma = 0.3, q = 1e-6 (bulks reaching 0.03 nats) 2M-point bulks cost seconds a build
#: and bought nothing up to T = 1e5 (T = 1e5, delta = 1e-5: lower 3.502404 at 256k
#: against 3.502512 at 2M, upper 3.502611; T = 1e3: 0.250260 against 0.250249).  The
#: refinement's untilted second round of chunks (.evaluate.refine) takes
#: ``_FINE_POINTS``, which long chunks need (T = 1e7: 6.6e-3 wide at 256k, 3.9e-3 at 2M)
_FIRST_FINE_POINTS = 2**18


def split_point(
    loss: PrivacyLoss, chunk: int, step: float, bulk: tuple[float, float], low: float, high: float
) -> tuple[float, str] | None:
    """(split, side): the coarse-grid point beyond which one step's law has mass
    rho <= _TAIL_EVENTS / chunk, on the side ("upper" or "lower") where the range reaches
    further past the bulk (its 5 % and 95 % quantiles); None when the split would leave
    under two coarse steps of tail."""
    level = _TAIL_EVENTS / chunk
    q05, q95 = bulk
    if high - q95 >= q05 - low:
        edge = loss.quantiles(upper_tails=(level,))[2][0]
        split = math.ceil(max(edge, q95) / step) * step
        return None if split >= high - 2.0 * step else (split, "upper")
    edge = loss.quantiles(lower_tails=(level,))[1][0]
    split = math.floor(min(edge, q05) / step) * step
    return None if split <= low + 2.0 * step else (split, "lower")


def _drop_count(chunk: int, rho: float, tail: float) -> int:
    """Smallest K with Pr(Binomial(chunk, rho) > K) <= tail (at least 1)."""
    budget = tail
    for k in range(1, 64):
        if special.bdtrc(k, chunk, rho) <= budget:
            return k
    return 64


def _centred_law(positions: np.ndarray, masses: np.ndarray, step: float) -> tuple[DiscreteLoss, int]:
    """(the law moved by a whole number K of ``step`` near its mean, K): mass further than
    ``_CENTRED_RANGE`` from there is dropped (as in .components._chunk: the Q-masses
    m e^{-x} of a chunk's law can leave the floating-point range, and
    delta_{L - c}(eps) = delta_L(eps + c))."""
    total = float(masses.sum())
    whole = int(round(float(np.dot(masses, positions)) / total / step)) if total > 0 else 0
    offsets = positions - whole * step
    inside = np.abs(offsets) <= _CENTRED_RANGE
    return DiscreteLoss(offsets[inside], masses[inside], 0.0), whole


def _coarse_lower(law: DiscreteLoss, whole: int, step: float, phase: float) -> GridMeasure:
    """The optimistic measure of a centred law on the coarse grid at ``phase``, moved back."""
    low, high = float(law.positions[0]), float(law.positions[-1])
    measure = lower_measure(law, step, low, high, phase=phase)
    return dataclasses.replace(measure, first_index=measure.first_index + whole)


def two_scale_chunks(
    loss: PrivacyLoss,
    sizes: list[int],
    step: float,
    fine: float,
    low: float,
    high: float,
    split: float,
    side: str,
    tail: float,
    theta: float = 0.0,
    resolution: float = 1.0,
) -> dict[int, GridMeasure]:
    """The optimistic measure of a chunk of each size in ``sizes`` steps of ``loss`` on the
    grid ``step`` (module docstring): the bulk on the grid ``fine`` (or coarser:
    at most ``_FIRST_FINE_POINTS`` x ``resolution`` points, and never more than
    ``_FINE_POINTS``), the tail beyond
    ``split`` on ``side`` on the grid ``step``; the range is ``low`` to ``high``.  Chunks
    of nearby sizes share B~, R~ and one transform for every G_k; K is set by the largest
    (the Binomial tail grows with the size).  With ``theta`` > 0 the sum over k is formed
    tilted by e^{theta x} (:func:`_sum_of_products`)."""
    build = _upper_split if side == "upper" else _lower_split
    # the bulk's own grid within fine_points
    fine_points = min(_FIRST_FINE_POINTS * resolution, _FINE_POINTS)
    fine = max(fine, (split - low if side == "upper" else high - split) / fine_points)
    bulk, rest, rho = build(loss, step, fine, low, high, split)
    terms = min(_drop_count(max(sizes), rho, tail), min(sizes))
    counts = sorted({size - k for size in sizes for k in range(terms + 1)})
    inner_tail = tail / (10.0 * len(counts))
    # ... and the window of its powers, whose span in nats hardly depends on the fine step
    span = powers_window(bulk, counts, inner_tail)
    if span / fine > fine_points:
        fine = span / fine_points
        bulk, rest, rho = build(loss, step, fine, low, high, split)
    # G_n = B~^{*n} on the fine grid, then onto the coarse grid at one phase (the largest
    # count's), so that every term of every chunk lies on one lattice; each power is
    # centred as it comes and dropped (only the centred laws are held)
    laws = [
        (count, *_centred_law(composed.positions, composed.lower_masses(), step))
        for count, composed in zip(counts, compose_powers(bulk, counts, inner_tail))
    ]
    largest = laws[-1][1]
    phase = _choose_phase(largest, step, float(largest.positions[0]), float(largest.positions[-1]))
    del largest
    coarse: dict[int, GridMeasure] = {}
    while laws:  # each law dropped once on the coarse grid (with the sums it formed there)
        count, law, whole = laws.pop()
        coarse[count] = _coarse_lower(law, whole, step, phase)
    del law
    return {size: _sum_of_products([coarse[size - k] for k in range(terms + 1)], rest, size, terms, theta) for size in sizes}


def _upper_split(
    loss: PrivacyLoss, step: float, fine: float, low: float, high: float, split: float
) -> tuple[GridMeasure, GridMeasure, float]:
    """(B~, R~, rho) with R the losses above ``split`` (moved down to the fine lattice).

    B~: fine cells up to split_f, the last point of the fine lattice at or below split, at
    the lattice's best phase, searched with ``_ZOOM`` zoom passes (subsampled laws pile up
    against an end of their support, where the phase matters); what lies above split_f is dropped.  R~: the cell
    (split_f, j_lo step], then the coarse cells above it (phase 0); its first label is
    rounded down to (j_lo - 1) step <= split_f like every label to its point."""
    phase_fine = _choose_phase(loss, fine, low, split, zoom=_ZOOM)
    k_hi = int(math.floor((split - phase_fine) / fine))
    # one cell below the point at or below ``low``: what lies at or below the first point
    # is dropped, and a law that piles up at the end of its support puts its pile at
    # ``low`` (.discretise.lower_measure)
    k_lo = min(int(math.floor((low - phase_fine) / fine)) - 1, k_hi - 1)
    check_grid(k_hi - k_lo + 2, "the bulk grid of a two-scale chunk")
    grid = np.arange(k_lo, k_hi + 1) * fine + phase_fine
    split_f = float(grid[-1])
    bulk = lower_on_grid(loss, grid, k_lo, fine, phase_fine, include_above=False)
    j_lo = int(math.floor(split_f / step)) + 1
    j_hi = max(int(math.ceil(high / step)), j_lo + 1)
    check_grid(j_hi - j_lo + 3, "the tail grid of a two-scale chunk")
    edges = np.concatenate([[split_f], np.arange(j_lo, j_hi + 1) * step])
    rest = lower_on_grid(loss, edges, j_lo - 1, step, 0.0, include_above=True)
    return bulk, rest, float(loss.sf(split_f, "P"))


def _lower_split(
    loss: PrivacyLoss, step: float, fine: float, low: float, high: float, split: float
) -> tuple[GridMeasure, GridMeasure, float]:
    """(B~, R~, rho) with R the losses at or below ``split`` (moved up to the fine lattice).

    B~: fine cells from split_f, the first point of the fine lattice at or above split, at
    the lattice's best phase, with the mass above the range in its top label.  R~: the
    coarse cells (phase 0) from below ``low`` up to the last coarse point below split_f,
    then the cell up to split_f; its top label is rounded down to a coarse point like
    every label.  What lies at or below the first coarse edge is dropped."""
    phase_fine = _choose_phase(loss, fine, split, high, zoom=_ZOOM)
    k_lo = int(math.ceil((split - phase_fine) / fine))
    k_hi = max(int(math.ceil((high - phase_fine) / fine)), k_lo + 1)
    check_grid(k_hi - k_lo + 2, "the bulk grid of a two-scale chunk")
    grid = np.arange(k_lo, k_hi + 1) * fine + phase_fine
    split_f = float(grid[0])
    bulk = lower_on_grid(loss, grid, k_lo, fine, phase_fine, include_above=True)
    i_lo = int(math.floor(low / step)) - 1  # one cell below ``low``, as in _upper_split
    i_hi = int(math.ceil(split_f / step)) - 1  # the last coarse point strictly below split_f
    if i_hi * step >= split_f:
        i_hi -= 1
    i_lo = min(i_lo, i_hi - 1)
    check_grid(i_hi - i_lo + 3, "the tail grid of a two-scale chunk")
    edges = np.concatenate([np.arange(i_lo, i_hi + 1) * step, [split_f]])
    rest = lower_on_grid(loss, edges, i_lo, step, 0.0, include_above=False)
    return bulk, rest, float(loss.cdf(split_f, "P"))


def _sum_of_products(coarse: list[GridMeasure], rest: GridMeasure, chunk: int, terms: int, theta: float = 0.0) -> GridMeasure:
    """sum_k C(chunk, k) coarse[k] * rest^{*k} on one FFT window, with the round-off
    allowance and a bound on the mass that wraps round it removed from every entry
    (:func:`_summed`: the window ends where that bound is negligible next to the
    allowance, and the entries past it are dropped).

    Every entry of that sum is at most the exact sum's entry.  Its allowance is relative
    to the sum's peak, so entries rarer than about 1e-16 of the peak are lost, and at a
    tiny delta those are the events that set eps.  With ``theta`` > 0 the sum is formed
    with every factor tilted by e^{theta i step} instead (i its lattice index; indices add
    under convolution, so the tilted sum's entry i is the exact one times
    e^{theta i step}), and entry i of that sum, less its own allowance, is untilted by
    e^{-theta i step}: also at most the exact entry, with the allowance now relative to
    the tilted peak (the tilting of Section 3 of the design notes, applied to a chunk).
    Either way a sub-measure of the exact sum, whose profile is below the exact one at
    every eps.

    The untilted sum was also formed and the larger entry kept: it is larger only on the
    far side of the bulk, which the tilt lowers (a synthetic chunk: 1.6e-9 of the mass),
    and no bracket of the width sweep moved without it (287 of 288 identical, one by
    2e-11), while its transforms were a sixth of a staged tiny-delta call (sigma = 0.3,
    q = 1e-6, T = 1e3 at delta = 1e-15: 2.38 s -> 1.98 s)."""
    step = rest.step
    # every term on the lattice i * step - shift, shift the largest (atoms move down only)
    shifts = [coarse[k].shift + k * rest.shift for k in range(terms + 1)]
    shift = max(shifts)
    first = min(coarse[k].first_index + k * rest.first_index for k in range(terms + 1))
    last = max(coarse[k].first_index + coarse[k].masses.size + k * (rest.first_index + rest.masses.size) for k in range(terms + 1))
    theta = _lifting_exponent(coarse, rest, chunk, terms, theta) if theta > 0.0 else 0.0
    masses = _summed(coarse, rest, chunk, terms, first, last - first + 1, theta)
    return GridMeasure(first, masses, step, shift, 0.0)


def _lifting_exponent(coarse: list[GridMeasure], rest: GridMeasure, chunk: int, terms: int, theta: float) -> float:
    """``theta``, or a smaller exponent (down to theta / 4096; 0 below that) at which no
    term k >= 1 of the tilted sum outweighs the term k = 0 at its largest entry.

    A subsampled law's tail is heavier than exponential (its log-masses are convex), so
    a large tilt moves the tilted peak to the end of R's range, and every entry between
    the bulk and that end falls further below the peak than it was untilted: sigma = 1,
    q = 1e-6, T = 1e5 at delta = 1e-15 has its saddle at 6,040 while R reaches 0.031
    nats, where the tilt lifts e^{187}.  Up to the exponent that brings that end level
    with the bulk, the entries in between are lifted by e^{theta x} relative to the bulk
    and stay below the peak (a convex function lies below its chords)."""
    with np.errstate(divide="ignore"):
        log_rest = np.log(rest.masses)
        log_coarse = [np.log(coarse[k].masses) for k in range(terms + 1)]
    rest_x = (rest.first_index + np.arange(rest.masses.size)) * rest.step
    coarse_x = [(coarse[k].first_index + np.arange(coarse[k].masses.size)) * rest.step for k in range(terms + 1)]

    def excess(value: float) -> float:
        rest_top = float(np.max(log_rest + value * rest_x))
        tops = [_log_binomial(chunk, k) + float(np.max(log_coarse[k] + value * coarse_x[k])) + k * rest_top for k in range(terms + 1)]
        return max(tops[1:], default=-math.inf) - tops[0]

    if terms == 0 or excess(theta) <= 0.0:
        return theta
    low, high = theta / 4096.0, theta
    if excess(low) > 0.0:
        return 0.0
    for _ in range(12):  # geometric bisection: the excess grows with the exponent
        middle = math.sqrt(low * high)
        low, high = (middle, high) if excess(middle) <= 0.0 else (low, middle)
    return low


def _scaled_entries(measure: GridMeasure, theta: float) -> tuple[np.ndarray | None, float]:
    """(m_j e^{theta (first + j) step - top} for the measure's entries, top): top is the
    largest log, so the largest entry is 1 (None and -inf for an empty measure)."""
    if theta == 0.0:
        peak = float(np.max(measure.masses)) if measure.masses.size else 0.0
        return (measure.masses / peak, math.log(peak)) if peak > 0.0 else (None, -math.inf)
    with np.errstate(divide="ignore"):
        logs = np.log(measure.masses) + theta * ((measure.first_index + np.arange(measure.masses.size)) * measure.step)
    top = float(np.max(logs)) if logs.size else -math.inf
    return (np.exp(logs - top), top) if math.isfinite(top) else (None, top)


def _summed(
    coarse: list[GridMeasure], rest: GridMeasure, chunk: int, terms: int, first: int, length: int, theta: float
) -> np.ndarray:
    """The first entries, from lattice index ``first``, of sum_k C(chunk, k) coarse[k] *
    rest^{*k} (whose support spans ``length`` entries), each at most the exact entry:
    formed tilted by e^{theta i step} (theta = 0: untilted) on a window of n entries, the
    allowance removed, then untilted (:func:`_sum_of_products`).  Factors and terms are
    scaled by their largest entries, kept in log space, so that no tilt overflows.

    The window holds the whole support only where it must: it ends where a Chernoff
    bound on the sum's (tilted, scaled) mass beyond it is at most ``_CUT_SHARE`` of the
    allowance at the first term's peak (:func:`_window`).  What lies beyond wraps round
    the window, onto entries at most that mass each, so that mass is taken off every
    entry as well; the entries beyond the window are dropped (a sub-measure).  sigma =
    0.3, q = 1e-3, T = 1e3 at delta = 1e-15: chunks of 63 steps whose K = 6 terms reach
    186 nats, while the tilted sum's mass ends within a fraction of that."""
    step = rest.step
    # the scale from the terms' largest entries first; only the terms' own entries are held
    scaled = [_scaled_entries(coarse[k], theta) for k in range(terms + 1)]
    rest_entries, rest_top = _scaled_entries(rest, theta)
    # (an empty rest, top -inf, leaves the k = 0 term alone: 0 x -inf would be nan)
    logs = [_log_binomial(chunk, k) + top + (k * rest_top if k else 0.0) for k, (_, top) in enumerate(scaled)]
    if not any(math.isfinite(value) for value in logs):
        check_grid(length, "the window of a two-scale chunk")
        return np.zeros(length)  # every term empty: nothing to keep (a sub-measure)
    scale = max(value for value in logs if math.isfinite(value))
    size, wrapped = _window(coarse, rest, chunk, terms, theta, first, length, logs[0] - scale, scale)
    check_grid(size, "the window of a two-scale chunk")
    kept_length = min(length, size)
    # a factor longer than the window wraps round it (an addition more an entry a wrap)
    wraps = max(
        (offset + entries.size - 1) // size
        for entries, offset in [(rest_entries, 0)]
        + [(scaled[k][0], coarse[k].first_index + k * rest.first_index - first) for k in range(terms + 1)]
        if entries is not None
    )
    rest_spectrum = sp_fft.rfft(_folded(rest_entries, size, 0))
    # each term's row is placed on the window, transformed and added in turn, so the
    # window holds a few rows whatever the number of terms (all of them together took 9
    # of S1's 21 MB here)
    total = np.zeros(size // 2 + 1, dtype=complex)
    power = np.ones(size // 2 + 1, dtype=complex)
    for k in range(terms + 1):
        if k > 0:
            power *= rest_spectrum
        if math.isfinite(logs[k]):
            spectrum = sp_fft.rfft(_folded(scaled[k][0], size, coarse[k].first_index + k * rest.first_index - first))
            spectrum *= math.exp(logs[k] - scale)
            spectrum *= power
            total += spectrum
            del spectrum
    del power, rest_spectrum
    raw = sp_fft.irfft(total, size)
    del total
    # the allowance of .compose: a model of the FFT's error (products of terms + 2
    # transforms and a sum of terms + 1; an addition more a wrap), or twice the most
    # negative entry if larger; then the factors' own rounding in log space, relative to
    # each entry, and the mass that wrapped round
    roundoff = max(
        _ROUNDING_FACTOR * _U * (4.0 * (terms + 2) + wraps + math.log2(size)) * float(np.max(raw)),
        2.0 * max(-float(np.min(raw)), 0.0),
    )
    relative = _factor_error(coarse, rest, chunk, terms, theta, scaled, rest_top, logs, scale)
    kept = np.maximum((raw[:kept_length] - roundoff) / (1.0 + relative) - wrapped, 0.0)
    if theta == 0.0:
        return kept * (math.exp(scale) * (1.0 - 2.0 * _U * (abs(scale) + 2.0)))
    out = np.zeros(kept_length)
    positive = kept > 0.0
    # the exponent is at most log of the exact entry (<= 1): no overflow; its rounding,
    # u times the magnitudes it is formed from, is taken off each entry
    lattice = (first + np.flatnonzero(positive)) * step
    exponent = np.log(kept[positive]) + scale - theta * lattice
    error = 2.0 * _U * (np.abs(exponent) + np.abs(np.log(kept[positive])) + abs(scale) + 2.0 * np.abs(theta * lattice) + 2.0)
    out[positive] = np.exp(exponent) * (1.0 - error)
    return out


def _factor_error(
    coarse: list[GridMeasure],
    rest: GridMeasure,
    chunk: int,
    terms: int,
    theta: float,
    scaled: list[tuple[np.ndarray | None, float]],
    rest_top: float,
    logs: list[float],
    scale: float,
) -> float:
    """A bound on the relative error, entry by entry, of the sum :func:`_summed`
    transforms, before the transforms' own: each factor is formed in log space (an
    entry e^{log m_j + theta x_j - top}, a term's weight e^{log C(chunk, k) + top_k +
    k top_R - scale}), and an exponential carries the absolute rounding of its argument,
    about u times the magnitudes it was summed from, as a relative error.  Term k
    multiplies an entry of coarse[k], k of rest and its weight; all are non-negative,
    so the sum's entries are within the largest term's error of themselves.  Twice
    the first-order sum, for the products of the (1 + e)."""

    def entries_error(measure: GridMeasure, top: float) -> float:
        if theta == 0.0 or not math.isfinite(top):
            return 2.0 * _U
        positive = measure.masses[measure.masses > 0.0]
        reach = max(abs(measure.first_index), abs(measure.first_index + measure.masses.size)) * measure.step
        logs_reach = max(abs(math.log(float(positive.min()))), abs(math.log(float(positive.max()))))
        return 2.0 * _U * (logs_reach + 2.0 * abs(theta) * reach + abs(top) + 2.0)

    rest_error = entries_error(rest, rest_top)
    worst = 0.0
    for k in range(terms + 1):
        if not math.isfinite(logs[k]):
            continue
        magnitudes = abs(_log_binomial(chunk, k)) + abs(scaled[k][1]) + k * abs(rest_top) + abs(scale) + abs(logs[k] - scale)
        weight = 2.0 * _U * (magnitudes + 2.0)
        worst = max(worst, entries_error(coarse[k], scaled[k][1]) + k * rest_error + weight)
    return 2.0 * worst


def _folded(entries: np.ndarray | None, size: int, offset: int) -> np.ndarray:
    """A row of ``size`` holding ``entries`` from ``offset``, those past its end wrapped
    round (:func:`.compose._place`: the circular convolution of wrapped rows is the
    wrapped linear one); zeros where None."""
    row = np.zeros(size)
    if entries is not None:
        _place(row, entries, offset)
    return row


#: a two-scale chunk's sum is formed on a window that ends where the bound on its mass
#: beyond is at most this share of the round-off allowance at the first term's peak
#: (:func:`_window`; taken off every entry with the allowance: at a tenth, sigma = 1,
#: q = 1e-6, T = 1e5 at delta = 1e-15 lost 1e-5 of its lower bound, whose entries lie
#: just above the allowance)
_CUT_SHARE = 0.01
#: ... bounded by Chernoff at these exponents, over the reciprocal of the sum's span
_CUT_EXPONENTS = np.geomspace(1.0, 1e6, 48)


def _window(
    coarse: list[GridMeasure],
    rest: GridMeasure,
    chunk: int,
    terms: int,
    theta: float,
    first: int,
    length: int,
    log_first_peak: float,
    scale: float,
) -> tuple[int, float]:
    """(the FFT window n of :func:`_summed`, a bound on the sum's mass from lattice index
    ``first`` + n up, tilted and scaled as :func:`_summed` forms it: 0 where the window
    holds all ``length`` entries).

    The tilted mass of term k at indices i > I is at most, for every lam > 0,

        C(chunk, k) e^{Lambda_k(theta + lam) + k Lambda_R(theta + lam) - lam (I + 1) step}

    (Chernoff: e^{theta i step} <= e^{(theta + lam) i step - lam (I + 1) step} there),
    Lambda the log of sum_j m_j e^{s (first_j + j) step}, bounded from above by
    :func:`.compose._log_mgf_kernel` in lattice units (indices add under convolution),
    with a margin for the rounding of lam x there and of the sums here.  n is about the
    smallest (to 1/4096 of the support, then the next fast transform length) whose bound,
    over e^``scale``, is at most ``_CUT_SHARE`` of the round-off allowance at
    e^``log_first_peak`` (the first term's largest scaled entry, at most the sum's
    largest: every term is non-negative); the whole support where none is."""
    full = sp_fft.next_fast_len(length, real=True)
    if not math.isfinite(log_first_peak) or length <= 1:
        return full, 0.0
    step = rest.step
    exponents = _CUT_EXPONENTS / (length * step)
    shifted = theta + exponents
    log_rest = _log_mgf_kernel(rest.masses, rest.first_index, step, 0.0, shifted)
    rows = []
    for k in range(terms + 1):
        log_term = _log_mgf_kernel(coarse[k].masses, coarse[k].first_index, step, 0.0, shifted)
        if k:
            log_term = log_term + k * log_rest
        rows.append(_log_binomial(chunk, k) + log_term)
    exponent_sums = np.array(rows) - scale  # terms x exponents (-inf for an empty term)

    # each log-MGF is an upper bound to the rounding of lam x, about u |lam| times the
    # largest position, and each sum rounds too: a margin of a few u of the magnitudes
    reach = max(abs(first), abs(first + length)) * step
    counts = np.arange(terms + 1)[:, None] + 1.0
    finite_sums = np.where(np.isfinite(exponent_sums), np.abs(exponent_sums), 0.0)
    margin = 4.0 * _U * (finite_sums + abs(scale) + counts * shifted[None, :] * reach + 1.0)

    def wrapped(size: int) -> float:
        """The bound on the scaled tilted mass at indices first + size and up."""
        edge = exponents[None, :] * ((first + size) * step)
        logs = np.min(exponent_sums - edge + margin + 4.0 * _U * np.abs(edge), axis=1)
        return float(np.sum(np.exp(logs)))  # (an empty term's -inf adds 0)

    def target(size: int) -> float:
        return _CUT_SHARE * _ROUNDING_FACTOR * _U * (4.0 * (terms + 2) + math.log2(size)) * math.exp(log_first_peak)

    # bisection on the window: at ``high`` the bound passes, or high is the whole support
    # (where nothing wraps, whatever the bound says); at ``low`` it may not
    low, high = 0, length
    while high - low > max(1, length // 4096):
        middle = (low + high) // 2
        if wrapped(middle) <= target(middle):
            high = middle
        else:
            low = middle
    size = sp_fft.next_fast_len(max(high, 1), real=True)
    if size >= length:
        return full, 0.0
    return size, wrapped(size)
