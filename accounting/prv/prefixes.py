"""Certified epsilon after each part of a sequence, from one composition (prefix products).

Verifying a plan of K phases asks for epsilon after phases 0..k for every k.  Composing
each prefix afresh costs K refinements of ever longer compositions (quadratic).  Here the
whole sequence is refined once; then, at that grid step, every part is discretised once,
the parts' transforms are multiplied in order, and after each part one inverse transform
gives that prefix's composed measure.  The window covers every prefix (the union of their
Chernoff windows), and each prefix's aliasing, truncation and round-off terms come from
its own cumulant, mass at +inf and step count, so each row is certified exactly as a
separate :func:`~dpforge.accounting.prv.engine.epsilon` call at that step would be.  The
last row is the full refined result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np
from scipy import fft as sp_fft

from dpforge.accounting.prv.components import atom_aligned_step, chernoff_saddle, directions_for, discretise_all
from dpforge.accounting.prv.band import band_transforms
from dpforge.accounting.prv.compose import (
    _BAND_COST,
    _PRUNE_SHARE,
    _ROUNDING_FACTOR,
    _U,
    ComposedMeasure,
    _chernoff_lambdas,
    _log_mgf,
    _placed_spectra,
    _power,
    _roundoff_per_entry,
    chernoff_above,
    chernoff_below,
    no_finite_window,
    roundoff_model,
)
from dpforge.accounting.prv.discretise import GridMeasure
from dpforge.accounting.prv.engine import epsilon as prv_epsilon
from dpforge.accounting.prv.limits import check_grid, check_held, memory_budget
from dpforge.accounting.prv.spectral_rows import SpectralRow, unit_roots
from dpforge.accounting.prv.stand_in import GROUPS, stand_in
from dpforge.accounting.prv.evaluate import _GRADED_MIN_HITS, _TILT_BUDGET, expected_hits
from dpforge.accounting.prv.tilt import (
    _MAX_LOG_SCALE,
    _MAX_LOG_TILTED_TAIL,
    TiltedComposition,
    _log_spread,
    _log_tilted_masses,
    tilted_mass_error,
)
from dpforge.accounting.results import EpsilonResult
from dpforge.errors import DpforgeAccuracyWarning, LimitError, ParameterError, warn_caller
from dpforge.mechanisms.combinators import Component, Composed, Description, PoissonSampled, flatten
from dpforge.validation import require_probability_open


#: the prefix products narrow their band of frequencies every this-many measures, which
#: are then transformed together at that band (:func:`compose_prefixes`)
_BAND_BLOCK = 8
#: a row is read off its band of frequencies (:class:`.spectral_rows.SpectralRow`) when
#: the band holds at most 1 / this of the window's frequencies, else by an inverse
#: transform of the window (:class:`.compose.ComposedMeasure`)
_SPECTRAL_SHARE = 8
#: of the rows read off their band, every this-many-th (and the last) is also inverse
#: transformed for the round-off witness (twice its largest negative entry,
#: :func:`.compose._roundoff_per_entry`), which the rows after it carry
_WITNESS_EVERY = 32


def compose_prefixes(
    parts: Sequence[Sequence[tuple[GridMeasure, int]]],
    tail: float,
    theta: float = 0.0,
    floors: Sequence[float] | None = None,
) -> Iterator[ComposedMeasure | TiltedComposition | SpectralRow]:
    """The composed measure after each part (a part: measures with counts, all on one
    step), one at a time: each is yielded before the next is formed, so the caller holds
    one window at a time (a list of them took 16 bytes a point a prefix: 6.6 GB added
    for 3,000 phases of 10 steps, over the default budget).

    The transforms are multiplied (:func:`.compose._product_of_powers`, as in
    :func:`.compose.compose`, whose round-off the allowance models), not complex
    logarithms summed and exponentiated; the mass at +inf is a running sum of
    count log1p(-a) (:func:`.compose.composed_infinity` of each prefix, without summing
    every earlier part again).

    Only a band of low frequencies is kept once the rest is negligible for every row to
    come.  M_f = prod_i (|z_if| + e_i)^{c_i} over the measures so far bounds the prefix's
    spectrum (e_i the transform's error, as :func:`.compose._kept_frequencies`); every
    ``_BAND_BLOCK`` measures the band is cut to the fewest frequencies whose dropped
    bounds, with those dropped before, sum to at most ``_PRUNE_SHARE`` of the round-off
    model times M_0, and the next block is transformed at that band only (chirp
    z-transforms, :func:`.band.band_transforms`, where cheaper than the whole window).
    A dropped frequency's bound then grows by at most a factor (mass_i + e_i)^{c_i} a
    measure (|z_if| <= z_i0, the weights being non-negative), so the dropped bounds are
    carried as one sum, and each row adds (2/n) times it, which dropping moved each of
    its entries at most, to its allowance.  A row whose band holds at most
    1 / ``_SPECTRAL_SHARE`` of the window's frequencies is yielded as its band
    (:class:`.spectral_rows.SpectralRow`), its allowance the model at the peak that its
    spectrum bounds, (|S_0| + 2 sum |S_f|) / n, or the latest witness if larger.  10,000
    phases of 10 steps on 194,400 points keep 1,656 of 97,201 frequencies at row 10, 180
    at row 100, 44 at row 1,000 and 17 at the last (the first 8 rows whole).

    ``theta`` > 0 composes every measure tilted by e^{theta x} (normalised, as
    :func:`.tilt.compose_tilted`), so that each row's round-off allowance is relative to
    the mass where its delta lives; row k keeps positions from ``floors[k]`` (a certified
    lower bound on its eps) up, its window set for a tilted tail of tail / S_k(floor_k),
    and is yielded as a tilted :class:`.spectral_rows.SpectralRow` or a
    :class:`.tilt.TiltedComposition` (untilted by S_k(y) = e^{Lambda_k - theta y},
    Lambda_k the sum over its measures of count log Z_i)."""
    everything = [item for part in parts for item in part]
    step = everything[0][0].step
    lam = _chernoff_lambdas(everything, tail)
    positive = lam > 0
    log_tail = math.log(tail)
    tilted = theta > 0
    if tilted:
        if floors is None or len(floors) != len(parts):
            raise ValueError("a tilted prefix composition needs one floor per part")
        # each measure's tilted copy (the logs are not kept: one copy a measure), held
        # beside the measures themselves and checked against the budget with them
        tilted_weights, log_zs, mass_errors = [], [], []
        for measure, _ in everything:
            logs, log_z = _log_tilted_masses(measure, theta)
            tilted_weights.append(np.exp(logs))
            log_zs.append(log_z)
            mass_errors.append(tilted_mass_error(measure, logs, log_z, theta))
        check_held(
            sum(measure.masses.nbytes + weight.nbytes for (measure, _), weight in zip(everything, tilted_weights)),
            "the one-step measures of the plan's phases and their tilted copies",
        )
    cumulants, cumulant = [], np.zeros(lam.shape)
    tilted_cumulants, tilted_cumulant = [], np.zeros(lam.shape)
    log_scales, log_scale = [], 0.0
    bottom, top = math.inf, -math.inf
    index = 0
    for part_index, part in enumerate(parts):
        for measure, count in part:
            cumulant = cumulant + count * _log_mgf(measure, lam)
            if tilted:
                tilted_cumulant = tilted_cumulant + count * (_log_mgf(measure, theta + lam) - log_zs[index])
                log_scale += count * log_zs[index]
            index += 1
        cumulants.append(cumulant)
        tilted_cumulants.append(tilted_cumulant)
        log_scales.append(log_scale)
        window_cumulant, window_tail = cumulant, log_tail
        if tilted:
            # the wrapped tilted mass is taken off scaled by S(floor): a tilted tail of
            # tail / S(floor) keeps that term at tail (.tilt.compose_tilted)
            log_scale_floor = log_scale - theta * floors[part_index]
            if log_scale_floor > _MAX_LOG_SCALE:
                raise LimitError(
                    f"a tilt of {theta:.3g} would scale prefix {part_index} by e^{log_scale_floor:.0f} "
                    f"at eps={floors[part_index]:.6g} (limit e^{_MAX_LOG_SCALE:.0f})"
                )
            window_cumulant, window_tail = tilted_cumulant, min(log_tail - log_scale_floor, _MAX_LOG_TILTED_TAIL)
        with np.errstate(invalid="ignore"):
            top = max(top, float(np.min((window_cumulant[positive] - window_tail) / lam[positive])))
            bottom = min(bottom, float(np.max((window_cumulant[~positive] - window_tail) / lam[~positive])))
    if not (math.isfinite(top) and math.isfinite(bottom)) or top < bottom:
        raise no_finite_window()
    check_grid((top - bottom) / step + 3, "the FFT window of the prefix compositions")
    size = sp_fft.next_fast_len(int(math.ceil((top - bottom) / step)) + 3, real=True)
    frequencies = size // 2 + 1
    centres = [int(round(measure.mean_index())) for measure, _ in everything]
    offsets = np.array([measure.first_index - centre for (measure, _), centre in zip(everything, centres)], dtype=np.int64)
    weights = tilted_weights if tilted else [measure.masses for measure, _ in everything]
    masses = np.array([float(np.sum(weight)) for weight in weights])
    errors = ((_ROUNDING_FACTOR * math.log2(size) + 2.0) * _U + 2.0 * _U) * masses
    with np.errstate(divide="ignore"):
        logs = np.log(masses + errors)
    band = frequencies
    spectrum = np.ones(frequencies, dtype=complex)
    bound = np.zeros(frequencies)  # log M_f: sum over the measures so far of c log(|z_f| + e), f < band
    log_mass = 0.0  # log M_0 = sum of c log(mass + e)
    dropped = 0.0  # sum over the dropped frequencies of their bound on |S_f|
    banded: dict[int, np.ndarray] = {}
    witness = 0.0
    roots = None
    base, count_so_far, log_survival, index = 0.0, 0, 0.0, 0
    entries_error, scale_sum = 0.0, 0.0  # (tilted: the rows' log-space rounding so far)
    for part_index, (part, part_cumulant, part_tilted) in enumerate(zip(parts, cumulants, tilted_cumulants)):
        for measure, count in part:
            if index % _BAND_BLOCK == 0:
                band, dropped = _narrowed_band(bound, dropped, log_mass, count_so_far, size, band)
                spectrum = spectrum[:band]
                banded = _band_spectra(weights, offsets, index, band, size)
            transform = banded.pop(index)
            with np.errstate(divide="ignore"):
                bound[:band] += count * np.log(np.abs(transform) + errors[index])
            spectrum *= _power(transform, count)
            log_mass += count * float(logs[index])
            dropped *= math.exp(count * float(logs[index]))
            base += count * (centres[index] * step - measure.shift)
            count_so_far += count
            log_survival += count * math.log1p(-measure.infinity_mass)
            if tilted:  # each row's tilted entries carry their measures' log-space rounding
                entries_error += count * mass_errors[index]
                scale_sum += count * abs(log_zs[index]) if math.isfinite(log_zs[index]) else 0.0
            index += 1
        first = int(math.floor((bottom - base) / step))
        high, low = base + (first + size - 0.5) * step, base + (first - 0.5) * step
        above = chernoff_above(lam, part_cumulant, high)
        below = chernoff_below(lam, part_cumulant, low)
        tilt_terms: dict = {}
        if tilted:
            floor, row_scale = floors[part_index], log_scales[part_index]
            tilted_above = chernoff_above(lam, part_tilted, high)
            tilted_below = chernoff_below(lam, part_tilted, low)
            # untilted mass beyond the window: the direct bound or the tilted one times S
            # at the window's edge; below it, only what lies at or above the floor matters
            # (.tilt.compose_tilted)
            above = min(above, math.exp(min(row_scale - theta * high + math.log(max(tilted_above, 1e-300)), 0.0)))
            below = min(below, chernoff_above(lam, part_cumulant, floor), math.exp(row_scale - theta * floor) * tilted_below)
            tilt_terms = {
                "theta": theta,
                "log_scale": row_scale,
                "floor": floor,
                "tilted_above": tilted_above,
                "tilted_below": tilted_below,
                "relative_error": entries_error + _U * index * scale_sum,  # (.tilt.log_space_error)
            }
        infinity = -math.expm1(log_survival)
        pruned = 2.0 * dropped / size
        spectral = band * _SPECTRAL_SHARE <= frequencies
        if not spectral or part_index % _WITNESS_EVERY == 0 or part_index == len(parts) - 1:
            composed = sp_fft.irfft(np.concatenate([spectrum, np.zeros(frequencies - band)]), size)
            if not spectral:
                positions = base + np.arange(first, first + size) * step
                masses_row = np.roll(composed, -first)  # composed[(first + j) mod size]: two slices copied, no gather
                roundoff = _roundoff_per_entry(composed, count_so_far) + pruned
                if tilted:
                    yield TiltedComposition(
                        positions, masses_row, theta, tilt_terms["log_scale"], tilt_terms["floor"], tilt_terms["tilted_above"],
                        tilt_terms["tilted_below"], above, below, infinity, roundoff, size, lam, part_cumulant,
                        relative_error=tilt_terms["relative_error"],
                    )
                else:
                    yield ComposedMeasure(positions, masses_row, above, below, infinity, roundoff, size)
                continue
            witness = 2.0 * max(-float(np.min(composed)), 0.0)
        peak = (abs(spectrum[0].real) + 2.0 * float(np.sum(np.abs(spectrum[1:])))) / size
        roundoff = max(roundoff_model(count_so_far, size) * peak, witness) + pruned
        roots = unit_roots(size) if roots is None else roots
        # (a tilted row's exponents carry the tilted cumulant: its lower profile takes off
        # the tilted mass that can alias into the entries read)
        yield SpectralRow(
            spectrum.copy(), size, base, first, step, above, below, infinity, roundoff, roots, lam,
            part_tilted if tilted else part_cumulant, **tilt_terms,
        )


def _narrowed_band(
    bound: np.ndarray, dropped: float, log_mass: float, count: int, size: int, band: int
) -> tuple[int, float]:
    """(the fewest low frequencies, at most ``band``, whose dropped bounds e^{bound_f}, with
    the ``dropped`` sum so far, total at most ``_PRUNE_SHARE`` times the round-off model
    of ``count`` steps times M_0 = e^{log_mass}; that total) (:func:`compose_prefixes`)."""
    target = _PRUNE_SHARE * roundoff_model(max(count, 1), size) * math.exp(log_mass)
    suffix = np.cumsum(np.exp(bound[:band])[::-1])[::-1]  # suffix[g] = sum_{g <= f < band} e^{bound_f}
    fits = np.flatnonzero(suffix + dropped <= target)
    narrowed = max(int(fits[0]) if fits.size else band, 1)
    return narrowed, dropped + (float(suffix[narrowed]) if narrowed < band else 0.0)


def _band_spectra(weights: Sequence[np.ndarray], offsets: np.ndarray, start: int, band: int, size: int) -> dict[int, np.ndarray]:
    """The transforms at frequencies below ``band`` of the block of measures (``weights``,
    placed at ``offsets``) from ``start`` (:func:`compose_prefixes`): by chirp
    z-transforms where a transform of the band costs less than one of the window
    (``_BAND_COST``, as :func:`.compose._band_limited_product`), else whole."""
    indices = np.arange(start, min(len(weights), start + _BAND_BLOCK))
    longest = max(weights[i].size for i in indices)
    if longest <= size and 4.0 * sp_fft.next_fast_len(longest + 2 * band - 2) <= _BAND_COST * size:
        spectra = band_transforms([weights[i] for i in indices], offsets[indices], band, size)
    else:
        spectra = _placed_spectra(indices, weights, offsets, size)[:, :band]
    return {int(i): spectra[row] for row, i in enumerate(indices)}


#: verify's rows at a delta below this are composed a second time, tilted, when some come
#: back wider than asked (:func:`epsilon_prefixes`)
_TILT_ROWS_BELOW = 1e-8
#: rows of a prefix table that are refined on their own when they come back wider than
#: asked, if no more than this many do (beyond that they are returned as they are, each
#: certified, and :func:`dpforge.budget.verify.verify_plan` says how many miss)
SEPARATE_ROWS = 16


def epsilon_prefixes(
    parts: Sequence[Description],
    delta: float,
    *,
    relative_accuracy: float = 1e-3,
    max_refinements: int = 6,
    memory_budget_bytes: float | None = None,
) -> list[EpsilonResult]:
    """Certified (lower, upper) epsilon(delta) of parts[0], parts[0..1], ..., all parts.

    The last result is :func:`~dpforge.accounting.prv.engine.epsilon` of the whole
    sequence; the others are read off one prefix-product composition at its final grid
    step, a bound kind and direction at a time.  Below delta = ``_TILT_ROWS_BELOW``,
    rows wider than ``relative_accuracy`` are composed again tilted (:func:`_prefix_rows`
    with a :class:`_RowTilt`), each keeping the intersection of its two certified
    brackets.  When no more than ``SEPARATE_ROWS`` rows come back
    wider than ``relative_accuracy``, each of them is also refined on its own and keeps
    the intersection of the two certified brackets (``accuracy["refined_separately"]``)."""
    delta = require_probability_open("delta", delta)
    if not parts:
        raise ParameterError("parts must hold at least one description")
    groups: list[list[Component]] = [flatten(part) for part in parts]
    whole = [component for group in groups for component in group]
    full = _epsilon_of_components(whole, delta, relative_accuracy, max_refinements, memory_budget_bytes)
    if len(parts) == 1:
        return [full]
    if full.accuracy["grid_step"] is None:
        # the whole needed no grid (eps = 0 by total variation, or a closed form), and
        # neither does any prefix: each is answered the same way
        prefixes = [whole_description([c for group in groups[: k + 1] for c in group]) for k in range(len(parts) - 1)]
        return [
            prv_epsilon(
                prefix,
                delta,
                relative_accuracy=relative_accuracy,
                max_refinements=max_refinements,
                memory_budget=memory_budget_bytes,
            )
            for prefix in prefixes
        ] + [full]
    # the whole plan's grid step and truncation tail (the refinement cuts the tail where
    # the mass outside the windows moves eps)
    step = full.accuracy["grid_step"]
    tail = full.accuracy.get("truncation_tail") or 1e-4 * delta
    table = _Table(groups, whole, delta, step, tail, memory_budget_bytes, relative_accuracy)
    untilted, uppers, deferred = _prefix_rows(table)
    rows = _monotone(untilted, full.upper)
    wide = [index for index, (low, high) in enumerate(rows) if _is_wide(low, high, relative_accuracy)]
    if wide and delta < _TILT_ROWS_BELOW:
        # at tiny delta the untilted rows' round-off allowance sets their width (100
        # phases at 1e-12: 99 rows up to 12 % wide): compose them again tilted, from
        # their certified lower bounds up, and keep the intersection of the brackets
        try:
            row_tilt = _RowTilt(rows, wide, relative_accuracy * delta * _TILT_BUDGET, uppers)
            tilted = _prefix_rows(table, tilt=row_tilt)
        except LimitError:  # a tilted window past a named limit: the untilted rows stand, marked
            tilted = None
        if tilted is not None:
            rows = [(max(low, tilted_low), min(high, tilted_high)) for (low, high), (tilted_low, tilted_high) in zip(rows, tilted[0])]
            rows = _monotone(rows, full.upper)
        elif deferred:
            # the directions that left rows to the tilted pass are composed at the step
            # instead, as without the coarse pass: the untilted rows stand as they were
            rows = _with_directions_at_the_step(table, untilted, uppers, deferred)
            rows = _monotone(rows, full.upper)
    # a row wider than asked is refined on its own when there are few such rows: a plan's
    # short first phases have a small eps, which the whole plan's grid resolves less
    # finely (the warm-up row of examples/plans/within_budget.toml came back 1.3e-3 wide)
    separate: dict[int, EpsilonResult] = {}
    missing = [index for index, (low, high) in enumerate(rows) if _is_wide(low, high, relative_accuracy)]
    if len(missing) <= SEPARATE_ROWS:
        for index in missing:
            separate[index] = prv_epsilon(
                whole_description([c for group in groups[: index + 1] for c in group]),
                delta,
                relative_accuracy=relative_accuracy,
                max_refinements=max_refinements,
                memory_budget=memory_budget_bytes,
            )
            low, high = rows[index]  # both brackets are certified: keep their intersection
            rows[index] = (max(low, separate[index].lower), min(high, separate[index].upper))
        rows = _monotone(rows, full.upper)
    results = []
    for index, (low, high) in enumerate(rows):
        if low > high:  # two certified bounds cannot cross: a defect, reported rather than hidden
            warn_caller(
                f"prefix {index}: the certified lower bound {low!r} exceeds the upper bound {high!r}; "
                "the lower bound is replaced by the upper bound (please report this plan)",
                DpforgeAccuracyWarning,
            )
            low = high
        results.append(
            EpsilonResult(
                lower=low,
                upper=high,
                estimate=0.5 * (low + high),
                delta=delta,
                engine="prv",
                accuracy={
                    "relative_accuracy": relative_accuracy,
                    "achieved": (high - low) / high if high > 0 else 0.0,
                    # as the engine's own results say it (a row wider than asked is not
                    # silent: verify_plan also counts such rows in a warning)
                    "reached": not _is_wide(low, high, relative_accuracy),
                    "grid_step": step,
                    "prefix_product": True,
                    # refined on its own as well (its bracket intersected with the table's)
                    "refined_separately": index in separate,
                },
            )
        )
    return [*results, full]


@dataclass(frozen=True)
class _RowTilt:
    """What a tilted prefix pass needs: the rows' certified brackets so far (their lower
    ends are the floors, their middles the eps each tilt is aimed at), the rows it is
    for, the part of delta the round-off allowance may take (as the engine's
    ``_TILT_BUDGET`` share of the width asked), and each direction's certified upper
    bounds from the untilted pass (a direction they show dominated at every row it is
    for is not composed again: :func:`_prefix_rows`)."""

    rows: list[tuple[float, float]]
    wide: list[int]
    budget: float
    uppers: dict[str, list[float]] = field(default_factory=dict)


#: verify's rows in a direction after the first are bounded from above first on a grid
#: this many times coarser, upper chain only (:func:`_prefix_rows`; 1 or less: not)
_COARSE_FACTOR = 4


@dataclass(frozen=True)
class _Table:
    """What every prefix pass of one table reads: the plan's phases (``groups``, their
    components flattened in ``whole``), the delta asked, the whole plan's grid ``step``
    and truncation ``tail``, the memory budget and the width asked."""

    groups: Sequence[Sequence[Component]]
    whole: Sequence[Component]
    delta: float
    step: float
    tail: float
    memory_budget_bytes: float | None
    relative_accuracy: float


def _prefix_rows(
    table: _Table, tilt: _RowTilt | None = None
) -> tuple[list[tuple[float, float]], dict[str, list[float]], tuple[str, ...]] | None:
    """(every row's certified (lower, upper) eps(delta) but the last, each direction's
    certified upper bounds on its rows, the coarse directions that left a row they may
    set to the tilted pass) from one prefix composition a bound kind and direction at the
    whole plan's ``step``; with ``tilt``, composed tilted (:func:`compose_prefixes`) at
    one tilt a direction (:func:`_rows_tilt`), or None where no tilt fits the rows.

    A row's eps is the larger of its directions' (dpforge's add-or-remove accounting), so
    its upper bound is the larger of theirs and any one direction's lower bound bounds it
    from below.  The first direction is composed for both bounds.  Untilted, each other
    direction is first composed for its upper bound alone on a grid ``_COARSE_FACTOR``
    times coarser (certified at any step), read from the rows' lower bounds so far (a
    profile read from a floor gives at least the floor, which is at most the row's eps):
    if that leaves no row both wider than ``relative_accuracy`` and possibly set by this
    direction (its upper bound above the row's lower one), it stands, and the direction
    costs a coarse upper pass instead of two passes at the step.  The verify family's
    add direction lies far below its remove one (100 phases at 1e-5: row 49 at 1.09
    against 1.86).  Otherwise the direction is composed at the step as the first.
    Below ``_TILT_ROWS_BELOW`` a row already wider than asked without the direction
    does not count (the tilted pass takes it; where that pass fails, such a direction is
    composed at the step: :func:`_with_directions_at_the_step`).  Tilted, a direction
    whose untilted upper bounds are at or below every wide row's floor is not composed
    again, its upper bounds standing; otherwise it is composed tilted for both bounds.

    Each phase is truncated as in the whole plan's discretisation, tail / (10 x all the
    plan's steps) a step (discretise_all divides by the steps it is given): at
    tail / (10 x the phase's steps), 1,000 phases of 10 steps put 1e-7 at +inf, against
    1e-10, and the rows' upper bounds sat up to 5e-4 above (6.68918 for the whole plan
    against 6.68562 refined), 132 rows wider than asked.  The cells stay uniform: graded
    ones sized for the whole plan's eps were 26 % faster but left the early rows up to
    8x wider (100 phases, row 10: 8.5e-4 against 1.1e-4)."""
    groups, whole, delta, step, tail = table.groups, table.whole, table.delta, table.step, table.tail
    relative_accuracy = table.relative_accuracy
    count = len(groups) - 1
    floors = [low for low, _ in tilt.rows[:count]] if tilt is not None else [0.0] * count
    lows, highs = list(floors), [0.0] * count
    uppers: dict[str, list[float]] = {}
    deferred: tuple[str, ...] = ()
    with memory_budget(table.memory_budget_bytes):
        for order, direction in enumerate(directions_for(whole)):
            direction_step = atom_aligned_step(whole, direction, step)
            if order > 0 and tilt is None and _COARSE_FACTOR > 1:
                coarse_step = atom_aligned_step(whole, direction, _COARSE_FACTOR * step)
                _, bounds = _direction_rows(groups, whole, direction, ("upper",), coarse_step, tail, delta, lows)
                merged = [max(high, bound) for high, bound in zip(highs, bounds)]
                # rows this direction may set (its coarse upper bound above their lower
                # bound) that it leaves wider than asked; below _TILT_ROWS_BELOW a row
                # already wide without it is left to the tilted pass, which composes the
                # direction again unless its coarse upper bounds lie below every wide
                # row's floor
                tilting = delta < _TILT_ROWS_BELOW
                settable = [bound > low and _is_wide(low, top, relative_accuracy) for low, top, bound in zip(lows, merged, bounds)]
                left = [tilting and _is_wide(low, high, relative_accuracy) for low, high in zip(lows, highs)]
                if not any(may and not later for may, later in zip(settable, left)):
                    uppers[direction], highs = bounds, merged
                    if any(may and later for may, later in zip(settable, left)):
                        deferred += (direction,)
                    continue
            known = tilt.uppers.get(direction) if tilt is not None and order > 0 else None
            if known is not None and all(known[index] <= floors[index] for index in tilt.wide):
                uppers[direction], highs = known, [max(high, bound) for high, bound in zip(highs, known)]
                continue
            found = _direction_rows(groups, whole, direction, ("lower", "upper"), direction_step, tail, delta, floors, tilt)
            if found is None:
                return None
            direction_lows, uppers[direction] = found
            lows = [max(low, bound) for low, bound in zip(lows, direction_lows)]
            highs = [max(high, bound) for high, bound in zip(highs, uppers[direction])]
    return list(zip(lows, highs)), uppers, deferred


def _with_directions_at_the_step(
    table: _Table, rows: Sequence[tuple[float, float]], uppers: dict[str, list[float]], directions: Sequence[str]
) -> list[tuple[float, float]]:
    """The untilted ``rows`` (as :func:`_prefix_rows` gave them, with each direction's
    upper bounds ``uppers``) with each of ``directions`` composed at the step for both
    bounds in place of its coarse upper bounds: the rows :func:`_prefix_rows` gives
    without the coarse pass, without composing the other directions again."""
    count = len(table.groups) - 1
    lows = [low for low, _ in rows]
    uppers = dict(uppers)
    with memory_budget(table.memory_budget_bytes):
        for direction in directions:
            direction_step = atom_aligned_step(table.whole, direction, table.step)
            found = _direction_rows(
                table.groups, table.whole, direction, ("lower", "upper"), direction_step, table.tail, table.delta, [0.0] * count
            )
            direction_lows, uppers[direction] = found
            lows = [max(low, bound) for low, bound in zip(lows, direction_lows)]
    highs = [max(bounds) for bounds in zip(*uppers.values())]
    return list(zip(lows, highs))


def _is_wide(low: float, high: float, relative_accuracy: float) -> bool:
    """A bracket wider than ``relative_accuracy`` asks, or with no finite upper end."""
    return not math.isfinite(high) or high - low > relative_accuracy * high


def _direction_rows(
    groups: Sequence[Sequence[Component]],
    whole: Sequence[Component],
    direction: str,
    kinds: Sequence[str],
    step: float,
    tail: float,
    delta: float,
    floors: Sequence[float],
    tilt: _RowTilt | None = None,
) -> tuple[list[float], list[float]] | None:
    """(each row's certified lower bound: the larger of ``direction``'s and its floor;
    its certified upper bound on the row's eps, read from the larger of the previous
    row's lower bound and its floor, so at least the floor: ``direction``'s own where it
    lies above them) for the ``kinds`` asked (the floors, or 0 for the upper bounds,
    where a kind is not), lower first; None where a tilted pass finds no tilt
    (:func:`_prefix_rows`).  The floors are certified lower bounds on the rows' eps (of
    any direction: the row's is the larger of its directions')."""
    total_steps = sum(component.count for component in whole)
    count = len(groups) - 1
    lows, highs = list(floors), [0.0] * count
    # eps only grows with the prefix (composition adds privacy loss, in each direction),
    # so a row's certified lower bound in this direction bounds every later row's eps
    # there from below: each row's profiles are read from the previous row's lower bound
    # up (the lower pass first), the rows' tail part of the window instead of all of it
    theta = 0.0
    step_tail = tail / (10.0 * total_steps)  # each step cut as the whole plan's discretisation cuts it
    exponents, first_graded = row_exponents(groups[:-1], direction, step_tail, delta)
    for kind in kinds:
        measures, held = [], 0
        for index, group in enumerate(groups[:-1]):
            group_tail = tail * sum(component.count for component in group) / total_steps
            graded = exponents if index >= first_graded else None  # (uniform cells before it)
            measures.append(
                discretise_all(group, direction, step, group_tail, (kind,), exponent=graded, step_tail=step_tail)[kind]
            )
            held += sum(measure.masses.nbytes for measure, _ in measures[-1])
            check_held(held, "the one-step measures of the plan's phases")
        if tilt is not None and kind == "lower":
            theta = _rows_tilt(measures, tilt, floors)
            if not theta > 0:
                return None
        composed = compose_prefixes(measures, tail, theta, list(floors) if theta > 0 else None)
        hint = None
        for index, measure in enumerate(composed):
            floor = max(lows[index - 1] if index > 0 else 0.0, floors[index])
            eps, hint = _row_epsilon(measure, kind, delta, floor, hint)
            if kind == "lower":
                lows[index] = max(eps, floor)
            else:
                highs[index] = eps
    return lows, highs


#: the row exponents that size the prefix pass's graded cells are spaced by at most this
#: ratio (:func:`row_exponents`)
_EXPONENT_RATIO = 2.0


def row_exponents(
    groups: Sequence[Sequence[Component]], direction: str, step_tail: float, delta: float
) -> tuple[np.ndarray | None, int]:
    """(exponents at which the prefix pass grades its one-step laws'
    cells, :func:`.discretise.graded_lattice` with several exponents; the index of the
    first part graded): parts are graded from the first row whose prefix has
    ``evaluate._GRADED_MIN_HITS`` expected sampled steps, the parts before it keep
    uniform cells; the exponents run from that row's saddle exponent to the last row's,
    spaced by at most ``_EXPONENT_RATIO`` (None, every part uniform, where no row has
    the hits or a saddle is not found).

    Row k reads the composition of ``groups[:k + 1]`` at its eps, where that composition
    reads each one-step law tilted by about the row's saddle exponent, which
    :func:`.components.chernoff_saddle` finds from delta alone (each step truncated at
    ``step_tail``, as the whole plan's discretisation does).  A longer prefix spreads
    more and reads its law less far out, so the first graded row's exponent is usually
    the largest and the last's the smallest (the two are sorted, whichever is larger;
    each prefix of more than ``stand_in.GROUPS`` components is read on its
    :mod:`.stand_in`).  A part is read by its own row and every later one, and a cell is
    graded at least as finely as for each exponent of the set; a cell's tilted mass is
    log-concave in the exponent, so between two neighbours of the set it cannot rise far
    above the larger of theirs.  With fewer hits the saddle point does not describe
    where a row reads its laws (as for :func:`.evaluate.refine`'s graded cells): a plan
    of Gaussian phases with q = 1e-4 (0.005 hits a phase) and Laplace phases at 1e-12
    graded from its first row read that row [0.28202, 0.32166] against [0.32160,
    0.32162] on uniform cells.  Only tightness depends on any of this: both
    constructions are certified on any cells.  Graded at the whole plan's exponent alone,
    the early rows came out up to 8x wider (100 phases, row 10: 8.5e-4 against 1.1e-4
    uniform); at a normal approximation's saddle exponents (10.9 to 78 for 100 phases
    of the verify family, against 4.8 to 5.4 from the Chernoff exponent: blind to a
    subsampled law's heavy right tail) the first row was 26x wider."""
    hits, first_graded = 0.0, len(groups)
    for index, group in enumerate(groups):
        hits += expected_hits(group)
        if hits >= _GRADED_MIN_HITS:
            first_graded = index
            break
    if first_graded == len(groups):
        return None, first_graded

    def saddle(parts: Sequence[Sequence[Component]]) -> float:
        components = [component for group in parts for component in group]
        return chernoff_saddle(stand_in(components) if len(components) > GROUPS else components, direction, step_tail, delta)

    low, high = sorted((saddle(groups[: first_graded + 1]), saddle(groups)))
    if not low > 0.0:
        return None, len(groups)  # a saddle not found: uniform cells
    count = 1 + int(math.ceil(math.log(high / low) / math.log(_EXPONENT_RATIO))) if high > low else 1
    return np.geomspace(low, high, count), first_graded


#: tilts tried for verify's tilted rows (:func:`_rows_tilt`)
_ROW_TILTS = np.geomspace(1e-2, 64.0, 64)


def _rows_tilt(measures: Sequence[Sequence[tuple[GridMeasure, int]]], tilt: _RowTilt, floors: Sequence[float]) -> float:
    """One tilt theta for every row of a tilted prefix pass (0 where none serves): of
    ``_ROW_TILTS``, those whose round-off allowance fits the budget at the most of the
    wide rows' eps (each row's log S_k(eps_k) = Lambda_k(theta) - theta eps_k within
    :func:`.tilt._roundoff_goal`, priced at a largest entry of 1), the middle one, and
    only tilts that keep every row's S_k(floor_k) within ``_MAX_LOG_SCALE``.

    One tilt serves many rows: the allowance fits over a wide range of theta around each
    row's saddle point (100 phases of the verify family at 1e-12: every row within
    theta 2.95 to 5.2).  Which tilt only sets the tightness; any theta > 0 certifies."""
    thetas = _ROW_TILTS
    step = measures[0][0][0].step
    log_scales = np.zeros((len(measures), thetas.size))
    scale, steps, counts = np.zeros(thetas.size), 0, []
    for index, part in enumerate(measures):
        for measure, count in part:
            scale = scale + count * _log_mgf(measure, thetas)
            steps += count
        log_scales[index] = scale
        counts.append(steps)
    fits = np.zeros(thetas.size)
    spread = np.array([_log_spread(theta, step) for theta in thetas])
    for index in tilt.wide:
        if index >= len(measures):
            continue
        low, high = tilt.rows[index]
        target = 0.5 * (low + high) if math.isfinite(high) else max(2.0 * low, low + 1.0)
        goal = math.log(tilt.budget) - math.log(roundoff_model(counts[index], 2**64)) - spread
        fits += log_scales[index] - thetas * target <= goal
    allowed = np.all(log_scales - thetas[None, :] * np.asarray(floors)[:, None] <= _MAX_LOG_SCALE, axis=0)
    fits = np.where(allowed, fits, 0.0)
    if not np.max(fits) > 0:
        return 0.0
    best = np.flatnonzero(fits == np.max(fits))
    return float(thetas[best[best.size // 2]])


def _monotone(rows: list[tuple[float, float]], last_upper: float) -> list[tuple[float, float]]:
    """The rows' certified brackets with each lower bound raised to the largest before it
    and each upper bound lowered to the smallest after it (``last_upper``, the whole
    plan's, last of all): eps only grows with the prefix (composing more is
    post-processed back to fewer), so a row's certified lower bound holds for every later
    row and its upper bound for every earlier one.  At tiny delta the untilted rows'
    own upper bounds sit far above the whole plan's tilted one (100 phases at 1e-12:
    row 50 read [5.07, 9.80] against the whole plan's [5.2999, 5.3030])."""
    lows = np.maximum.accumulate(np.array([low for low, _ in rows] or [0.0]))
    uppers = np.array([high for _, high in rows] + [last_upper])
    highs = np.minimum.accumulate(uppers[::-1])[::-1]  # highs[k] = min of uppers[k:]
    return [(float(lows[index]), float(highs[index])) for index in range(len(rows))]


def _row_epsilon(
    row: ComposedMeasure | TiltedComposition | SpectralRow,
    kind: str,
    delta: float,
    floor: float,
    hint: tuple[float, float] | None,
) -> tuple[float, tuple[float, float] | None]:
    """(a prefix row's certified ``kind`` bound on eps(delta), read from ``floor`` up; the
    positions to start the next row's searches from)."""
    if isinstance(row, SpectralRow):
        return row.epsilon(kind, delta, floor, hint)
    if isinstance(row, TiltedComposition):  # read from its own floor up
        profile = row.upper_profile() if kind == "upper" else row.lower_profile()
        return profile.epsilon(delta), None
    profile = row.upper_profile(floor) if kind == "upper" else row.lower_profile(floor)
    return profile.epsilon(delta), None


def epsilon_of_all(
    parts: Sequence[Description],
    delta: float,
    *,
    relative_accuracy: float = 1e-3,
    max_refinements: int = 6,
    memory_budget_bytes: float | None = None,
) -> EpsilonResult:
    """Certified (lower, upper) epsilon(delta) of all the parts composed: the last row of
    :func:`epsilon_prefixes`, without the rows before it."""
    delta = require_probability_open("delta", delta)
    if not parts:
        raise ParameterError("parts must hold at least one description")
    components = [component for part in parts for component in flatten(part)]
    return _epsilon_of_components(components, delta, relative_accuracy, max_refinements, memory_budget_bytes)


def _epsilon_of_components(
    components: Sequence[Component],
    delta: float,
    relative_accuracy: float,
    max_refinements: int,
    memory_budget_bytes: float | None,
) -> EpsilonResult:
    """The prv engine's epsilon of the flattened components composed (the parts' checks done)."""
    return prv_epsilon(
        whole_description(components),
        delta,
        relative_accuracy=relative_accuracy,
        max_refinements=max_refinements,
        memory_budget=memory_budget_bytes,
    )


def whole_description(components: Sequence[Component]) -> Description:
    """The composition of flattened components, as a description."""
    parts = []
    for component in components:
        step = component.mechanism if component.sampling_rate >= 1.0 else PoissonSampled(component.mechanism, component.sampling_rate)
        parts.append((step, component.count))
    return Composed(parts)
