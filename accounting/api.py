"""Public accounting entry points: ``epsilon`` and ``delta`` over mechanism descriptions."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from dpforge.accounting.prv import (
    _DIRECT_LIMIT,
    _DIRECT_RESOLUTION,
    bulk_spread,
    ComposedProfile,
    atom_aligned_step,
    compose,
    directions_for,
    discretise_all,
    loss_moments,
)
from dpforge.accounting.results import DeltaResult, EpsilonResult
from dpforge.mechanisms.combinators import Component, Description, flatten
from dpforge.mechanisms.validation import (
    require_non_negative,
    require_positive,
    require_probability_open,
)

ENGINES = ("prv", "rdp", "montecarlo", "pure")
MAX_GRID = 2**24

#: module implementing each engine other than prv; each exposes ``epsilon(description,
#: delta, **options)`` and ``delta(description, epsilon, **options)``
_ENGINE_MODULES = {
    "rdp": "dpforge.accounting.rdp",
    "montecarlo": "dpforge.accounting.montecarlo",
    "pure": "dpforge.accounting.pure",
}


def _engine_module(engine: str):
    """The module of a non-prv engine (imported lazily), or a one-line error for a bad name."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    import importlib

    return importlib.import_module(_ENGINE_MODULES[engine])


@dataclass(frozen=True)
class _Evaluation:
    """Composed profiles of both bounds for every direction at one grid step."""

    step: float
    upper: tuple[ComposedProfile, ...]
    lower: tuple[ComposedProfile, ...]
    directions: tuple[str, ...] = ()

    def dominated(self, delta: float) -> "_Evaluation | None":
        """The directions whose certified upper epsilon is below another direction's
        certified lower epsilon: they cannot set the maximum, so refining them is
        wasted work.  Returns them as a partial evaluation (or None)."""
        if len(self.upper) < 2 or len(self.lower) != len(self.upper):
            return None
        lows = [p.epsilon(delta) for p in self.lower]
        highs = [p.epsilon(delta) for p in self.upper]
        keep = [i for i in range(len(highs)) if highs[i] < max(lows[:i] + lows[i + 1 :])]
        if not keep:
            return None
        return _Evaluation(
            self.step,
            tuple(self.upper[i] for i in keep),
            tuple(self.lower[i] for i in keep),
            tuple(self.directions[i] for i in keep),
        )

    def epsilon(self, delta: float) -> tuple[float, float]:
        return (
            max(p.epsilon(delta) for p in self.lower),
            max(p.epsilon(delta) for p in self.upper),
        )

    def delta(self, epsilon: float) -> tuple[float, float]:
        return (
            max(p.delta(epsilon) for p in self.lower),
            min(1.0, max(p.delta(epsilon) for p in self.upper)),
        )

    @property
    def grid_size(self) -> int:
        return max(p.grid_size for p in self.upper + self.lower)


def _evaluate(
    components: Sequence[Component],
    step: float,
    tail: float,
    kinds: Sequence[str] = ("upper", "lower"),
    staged: bool = False,
    settled: _Evaluation | None = None,
) -> _Evaluation:
    """Compose every direction at ``step``; directions already in ``settled`` (a
    previous, coarser evaluation of only the dominated directions) are reused as they are:
    their certified bounds stay valid."""
    upper: list[ComposedProfile] = list(settled.upper) if settled else []
    lower: list[ComposedProfile] = list(settled.lower) if settled else []
    done = set(settled.directions) if settled else set()
    directions = list(settled.directions) if settled else []
    for direction in directions_for(components):
        if direction in done:
            continue
        directions.append(direction)
        direction_step = atom_aligned_step(components, direction, step)
        measures = discretise_all(components, direction, direction_step, tail, kinds, staged=staged)
        if "upper" in kinds:
            upper.append(compose(measures["upper"], tail).upper_profile())
        if "lower" in kinds:
            lower.append(compose(measures["lower"], tail).lower_profile())
    return _Evaluation(step, tuple(upper), tuple(lower), tuple(directions))


def initial_step(components: Sequence[Component], delta: float, relative_accuracy: float, tail: float) -> float:
    """A first (probe) grid step from the composed mean/variance and the O(T h^2) error model.

    The pessimistic measure moves the mean of each step by at most h^2/8 and adds at
    most h^2/4 variance, so the width of the epsilon interval grows like c T h^2; the
    refinement then scales the step by the measured width.
    """
    steps = sum(c.count for c in components)
    mean = spread = width = 0.0
    for direction in directions_for(components):
        m, v, w = loss_moments(components, direction, tail)
        mean, spread, width = max(mean, m), max(spread, math.sqrt(max(v, 0.0))), max(width, w)
    scale = max(mean + math.sqrt(2.0 * math.log(1.0 / delta)) * spread, 1e-2)
    from_error = math.sqrt(relative_accuracy * scale / (0.5 * steps))
    step = min(from_error, max(spread, 1e-6) / 40.0, width / 64.0)
    return max(step, 2.0 * (width + 12.0 * spread + 1.0) / MAX_GRID, 1e-9)


def _check_description(description: Description) -> list[Component]:
    try:
        return flatten(description)
    except ValueError:
        raise
    except Exception as error:  # pragma: no cover - defensive
        raise ValueError(f"description is not a dpforge mechanism description: {error}") from None


def _narrowest_bulk(components: Sequence[Component], minimum_count: int = 8) -> float:
    """Smallest robust one-step spread among components with at least ``minimum_count`` steps."""
    narrowest = math.inf
    for direction in directions_for(components):
        for component in components:
            if component.count >= minimum_count:
                bulk = bulk_spread(component.privacy_loss_distribution(direction))
                if bulk > 0:
                    narrowest = min(narrowest, bulk)
    return narrowest


def _needs_stages(components: Sequence[Component], step: float, tail: float) -> bool:
    """True when resolving every one-step law directly (about ``_DIRECT_RESOLUTION``
    grid steps across its bulk) would need more than ``_DIRECT_LIMIT`` grid points."""
    needed = min(step, _narrowest_bulk(components) / _DIRECT_RESOLUTION)
    window = 0.0
    for direction in directions_for(components):
        mean, variance, width = loss_moments(components, direction, tail)
        window = max(window, abs(mean) + 20.0 * math.sqrt(max(variance, 0.0)) + width)
    return window / needed > _DIRECT_LIMIT


def _refine(
    components: Sequence[Component],
    step: float,
    tail: float,
    relative_accuracy: float,
    width_of: "callable",
    max_refinements: int,
    delta: float | None = None,
) -> tuple[_Evaluation, int]:
    """Shrink the grid step until the bounds are as close as asked (width ~ c h^2).

    For an epsilon query (``delta`` given) a direction that is certainly dominated by the
    other is kept from the coarser evaluation instead of being refined.

    When resolving the one-step laws directly would need more than ``_DIRECT_LIMIT``
    grid points, narrow components are composed in chunks on finer grids instead
    (``staged``) at a step of about 1.5 bulk widths, and the result is returned as is:
    the chunks' own grids set the width, and a finer final grid would only add chunks.
    """
    staged = math.isfinite(_narrowest_bulk(components)) and _needs_stages(components, step, tail)
    if staged:
        # big chunks: each chunk's re-discretisation costs about the same, so fewer is better
        step = max(step, 1.5 * _narrowest_bulk(components))
    evaluation = _evaluate(components, step, tail, staged=staged)
    refinements = 0
    while refinements < max_refinements:
        width, scale = width_of(evaluation)
        if not (math.isfinite(width) and math.isfinite(scale)) or width <= relative_accuracy * scale:
            break
        if staged:
            break  # the chunks' own grids set the width; a finer final grid only adds chunks
        factor = math.sqrt(0.5 * relative_accuracy * scale / width) if width > 0 else 0.5
        new_step = step * min(max(factor, 1.0 / 8.0), 1.0 / 1.5)
        grid = evaluation.grid_size * step / new_step
        if not staged and grid > _DIRECT_LIMIT:
            if not math.isfinite(_narrowest_bulk(components)):
                break  # few steps of a law narrower than the grid: report the accuracy reached
            staged, new_step = True, max(step, 1.5 * _narrowest_bulk(components))
        elif grid > MAX_GRID:
            break
        step = new_step
        settled = evaluation.dominated(delta) if delta is not None else None
        evaluation = _evaluate(components, step, tail, staged=staged, settled=settled)
        refinements += 1
    return evaluation, refinements


def _reject_options(options: dict) -> None:
    if options:
        name = sorted(options)[0]
        raise ValueError(f"{name} is not an option of the prv engine")


def epsilon(
    description: Description,
    delta: float,
    *,
    engine: str = "prv",
    relative_accuracy: float = 1e-3,
    step: float | None = None,
    max_refinements: int = 6,
    **engine_options,
) -> EpsilonResult:
    """Certified bounds on epsilon(delta) of a composed, possibly subsampled, description.

    ``upper`` and ``lower`` are certified for the add-or-remove relation under Poisson
    subsampling (the maximum over both directions).  The grid step is refined until
    (upper - lower) / upper <= ``relative_accuracy`` (or the grid limit is reached;
    ``accuracy['achieved']`` reports what was reached).  Pass ``step`` to fix the grid.

    ``engine`` selects the accountant: "prv" (default, certified lower and upper),
    "rdp", "montecarlo" (a high-probability bound) or "pure"; ``engine_options`` go to
    that engine (e.g. ``samples``, ``confidence``, ``seed`` for "montecarlo").
    """
    delta = require_probability_open("delta", delta)
    if engine != "prv":
        return _engine_module(engine).epsilon(description, delta, **engine_options)
    _reject_options(engine_options)
    relative_accuracy = require_positive("relative_accuracy", relative_accuracy)
    components = _check_description(description)
    tail = 1e-4 * delta
    fixed = step is not None
    if fixed:
        step = require_positive("step", step)
    else:
        step = initial_step(components, delta, relative_accuracy, tail)

    def width_of(evaluation: _Evaluation) -> tuple[float, float]:
        low, high = evaluation.epsilon(delta)
        return high - low, high

    if fixed:
        evaluation, refinements = _evaluate(components, step, tail), 0
    else:
        evaluation, refinements = _refine(
            components, step, tail, relative_accuracy, width_of, max_refinements, delta=delta
        )
    low, high = evaluation.epsilon(delta)
    if not math.isfinite(high):
        raise ValueError(
            f"delta={delta:g} is below what the prv engine can certify for this description "
            "(the truncated and round-off mass alone exceeds it); use a larger delta"
        )
    low = min(low, high)
    return EpsilonResult(
        lower=low,
        upper=high,
        estimate=0.5 * (low + high),
        delta=delta,
        engine="prv",
        accuracy={
            "relative_accuracy": relative_accuracy,
            "achieved": (high - low) / high if high > 0 else 0.0,
            "grid_step": evaluation.step,
            "grid_size": evaluation.grid_size,
            "refinements": refinements,
        },
    )


def _delta_evaluation(
    description: Description,
    epsilons: Sequence[float],
    relative_accuracy: float,
    step: float | None,
    max_refinements: int,
) -> tuple[_Evaluation, int]:
    """The composed profiles, refined until delta at every one of ``epsilons`` has the
    relative accuracy (deltas below 1e-14 are not refined for)."""
    relative_accuracy = require_positive("relative_accuracy", relative_accuracy)
    components = _check_description(description)
    tail = 1e-16

    def width_of(evaluation: _Evaluation) -> tuple[float, float]:
        worst, worst_ratio = (0.0, 1.0), 0.0
        for value in epsilons:
            low, high = evaluation.delta(value)
            if high >= 1e-14 and (high - low) / high > worst_ratio:
                worst, worst_ratio = (high - low, high), (high - low) / high
        return worst

    if step is not None:
        step = require_positive("step", step)
        return _evaluate(components, step, tail), 0
    first = initial_step(components, 1e-6, relative_accuracy, tail)
    return _refine(components, first, tail, relative_accuracy, width_of, max_refinements)


def delta_profile(
    description: Description,
    epsilons: Sequence[float],
    *,
    relative_accuracy: float = 1e-3,
    max_refinements: int = 6,
) -> tuple[np.ndarray, np.ndarray]:
    """Certified lower and upper bounds on delta at each of ``epsilons`` (PRV engine).

    Compositions are shared between points: every point is read off every composed
    profile computed so far, and keeps the intersection of their brackets (each bracket
    is certified, so the intersection is too).  A new, refined composition is made only
    for a point whose bracket is still wider than ``relative_accuracy`` (deltas below
    1e-14 excepted), so a whole curve usually costs one to three :func:`delta` calls.
    """
    grid = np.asarray(epsilons, dtype=float)
    if grid.ndim != 1 or grid.size == 0 or not np.all(np.isfinite(grid)) or np.any(grid < 0):
        raise ValueError("epsilons must be a non-empty sequence of finite numbers >= 0")
    relative_accuracy = require_positive("relative_accuracy", relative_accuracy)
    lower = np.zeros_like(grid)
    upper = np.ones_like(grid)
    evaluations: list[_Evaluation] = []

    def tighten(index: int, evaluation: _Evaluation) -> None:
        low, high = evaluation.delta(float(grid[index]))
        lower[index] = max(lower[index], low)
        upper[index] = min(upper[index], high)

    for index in np.argsort(grid):
        accurate = upper[index] < 1e-14 or upper[index] - lower[index] <= relative_accuracy * upper[index]
        if evaluations and accurate:
            continue
        evaluation, _ = _delta_evaluation(description, (float(grid[index]),), relative_accuracy, None, max_refinements)
        evaluations.append(evaluation)
        for other in range(grid.size):
            tighten(other, evaluation)
    return np.minimum(lower, upper), upper


def delta(
    description: Description,
    epsilon: float,
    *,
    engine: str = "prv",
    relative_accuracy: float = 1e-3,
    step: float | None = None,
    max_refinements: int = 6,
    **engine_options,
) -> DeltaResult:
    """Certified bounds on delta(epsilon); refined until (upper - lower)/upper <= relative_accuracy.

    ``engine`` and ``engine_options`` as for :func:`epsilon`.
    """
    epsilon = require_non_negative("epsilon", epsilon)
    if engine != "prv":
        return _engine_module(engine).delta(description, epsilon, **engine_options)
    _reject_options(engine_options)
    evaluation, refinements = _delta_evaluation(description, (epsilon,), relative_accuracy, step, max_refinements)
    low, high = evaluation.delta(epsilon)
    low = min(low, high)
    return DeltaResult(
        lower=low,
        upper=high,
        estimate=0.5 * (low + high),
        epsilon=epsilon,
        engine="prv",
        accuracy={
            "relative_accuracy": relative_accuracy,
            "achieved": (high - low) / high if high > 0 else 0.0,
            "grid_step": evaluation.step,
            "grid_size": evaluation.grid_size,
            "refinements": refinements,
        },
    )
