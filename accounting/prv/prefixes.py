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
from typing import Iterator, Sequence

import numpy as np
from scipy import fft as sp_fft

from dpforge.accounting.prv.components import atom_aligned_step, directions_for, discretise_all
from dpforge.accounting.prv.compose import (
    ComposedMeasure,
    _chernoff_lambdas,
    _log_mgf,
    _place,
    _product_of_powers,
    _roundoff_per_entry,
    no_finite_window,
)
from dpforge.accounting.prv.discretise import GridMeasure
from dpforge.accounting.prv.engine import epsilon as prv_epsilon
from dpforge.accounting.prv.limits import check_grid, check_held, memory_budget
from dpforge.accounting.results import EpsilonResult
from dpforge.errors import DpforgeAccuracyWarning, ParameterError, warn_caller
from dpforge.mechanisms.combinators import Component, Composed, Description, PoissonSampled, flatten
from dpforge.validation import require_probability_open


def compose_prefixes(parts: Sequence[Sequence[tuple[GridMeasure, int]]], tail: float) -> Iterator[ComposedMeasure]:
    """The composed measure after each part (a part: measures with counts, all on one
    step), one at a time: each is yielded before the next is formed, so the caller holds
    one window at a time (a list of them took 16 bytes a point a prefix: 6.6 GB added
    for 3,000 phases of 10 steps, over the default budget).

    The transforms are multiplied (:func:`.compose._product_of_powers`, as in
    :func:`.compose.compose`, whose round-off the allowance models), not complex
    logarithms summed and exponentiated; the mass at +inf is a running sum of
    count log1p(-a) (:func:`.compose.composed_infinity` of each prefix, without summing
    every earlier part again)."""
    everything = [item for part in parts for item in part]
    step = everything[0][0].step
    lam = _chernoff_lambdas(everything, tail)
    positive = lam > 0
    log_tail = math.log(tail)
    cumulants, cumulant = [], np.zeros(lam.shape)
    bottom, top = math.inf, -math.inf
    for part in parts:
        for measure, count in part:
            cumulant = cumulant + count * _log_mgf(measure, lam)
        cumulants.append(cumulant)
        with np.errstate(invalid="ignore"):
            top = max(top, float(np.min((cumulant[positive] - log_tail) / lam[positive])))
            bottom = min(bottom, float(np.max((cumulant[~positive] - log_tail) / lam[~positive])))
    if not (math.isfinite(top) and math.isfinite(bottom)) or top < bottom:
        raise no_finite_window()
    check_grid((top - bottom) / step + 3, "the FFT window of the prefix compositions")
    size = sp_fft.next_fast_len(int(math.ceil((top - bottom) / step)) + 3, real=True)
    spectrum = np.ones(size // 2 + 1, dtype=complex)
    row = np.zeros(size)
    base, count_so_far, log_survival = 0.0, 0, 0.0
    for part, part_cumulant in zip(parts, cumulants):
        for measure, count in part:
            centre = int(round(measure.mean_index()))
            row[:] = 0.0
            _place(row, measure.masses, measure.first_index - centre)
            spectrum *= _product_of_powers(sp_fft.rfft(row)[None, :], np.array([count], dtype=np.int64))
            base += count * (centre * step - measure.shift)
            count_so_far += count
            log_survival += count * math.log1p(-measure.infinity_mass)
        composed = sp_fft.irfft(spectrum, size)
        first = int(math.floor((bottom - base) / step))
        positions = base + np.arange(first, first + size) * step
        masses = np.roll(composed, -first)  # composed[(first + j) mod size]: two slices copied, no gather
        above = float(np.exp(np.min(part_cumulant[positive] - lam[positive] * (positions[-1] + 0.5 * step))))
        below = float(np.exp(np.min(part_cumulant[~positive] - lam[~positive] * (positions[0] - 0.5 * step))))
        yield ComposedMeasure(
            positions, masses, above, below, -math.expm1(log_survival), _roundoff_per_entry(composed, count_so_far), size
        )


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
    step (untilted: at tiny delta their brackets can be wider than the last one's, which
    ``accuracy["achieved"]`` shows).  When no more than ``SEPARATE_ROWS`` rows come back
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
    # each phase is truncated as in the whole plan's discretisation, tail / (10 x all the
    # plan's steps) a step (discretise_all divides by the steps it is given): at
    # tail / (10 x the phase's steps), 1,000 phases of 10 steps put 1e-7 at +inf, against
    # 1e-10, and the rows' upper bounds sat up to 5e-4 above (6.68918 for the whole plan
    # against 6.68562 refined), 132 rows wider than asked.  The cells stay uniform: graded
    # ones sized for the whole plan's eps were 26 % faster but left the early rows up to
    # 8x wider (100 phases, row 10: 8.5e-4 against 1.1e-4)
    total_steps = sum(component.count for component in whole)
    rows: list[tuple[float, float]] = [(0.0, 0.0)] * (len(parts) - 1)
    with memory_budget(memory_budget_bytes):
        for direction in directions_for(whole):
            direction_step = atom_aligned_step(whole, direction, step)
            # eps only grows with the prefix (composition adds privacy loss, in each
            # direction), so a row's certified lower bound in this direction bounds every
            # later row's eps there from below: each row's profiles are read from the
            # previous row's lower bound up (the lower pass first), the rows' tail part
            # of the window instead of all of it
            lows = [0.0] * (len(parts) - 1)
            for kind in ("lower", "upper"):
                measures, held = [], 0
                for group in groups[:-1]:
                    group_tail = tail * sum(component.count for component in group) / total_steps
                    measures.append(discretise_all(group, direction, direction_step, group_tail, (kind,))[kind])
                    held += sum(measure.masses.nbytes for measure, _ in measures[-1])
                    check_held(held, "the one-step measures of the plan's phases")
                composed = compose_prefixes(measures, tail)
                for index, measure in enumerate(composed):
                    floor = lows[index - 1] if index > 0 else 0.0
                    if kind == "lower":
                        lows[index] = max(measure.lower_profile(floor).epsilon(delta), floor)
                        rows[index] = (max(rows[index][0], lows[index]), rows[index][1])
                    else:
                        rows[index] = (rows[index][0], max(rows[index][1], measure.upper_profile(floor).epsilon(delta)))
    # a row wider than asked is refined on its own when there are few such rows: a plan's
    # short first phases have a small eps, which the whole plan's grid resolves less
    # finely (the warm-up row of examples/plans/within_budget.toml came back 1.3e-3 wide)
    separate: dict[int, EpsilonResult] = {}
    missing = [index for index, (low, high) in enumerate(rows) if high - low > relative_accuracy * high]
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
                    "reached": high <= 0 or (math.isfinite(high) and high - low <= relative_accuracy * high),
                    "grid_step": step,
                    "prefix_product": True,
                    # refined on its own as well (its bracket intersected with the table's)
                    "refined_separately": index in separate,
                },
            )
        )
    return [*results, full]


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
