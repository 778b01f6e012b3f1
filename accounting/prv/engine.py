"""The PRV engine's entry points: certified ``epsilon(delta)`` and ``delta(epsilon)``.

Both refine one :class:`~dpforge.accounting.prv.evaluate.Evaluation` until the certified
bracket is as narrow as ``relative_accuracy`` asks (or a grid limit is reached, which
``accuracy["achieved"]`` then shows), and report the bracket with how it was obtained.
"""

from __future__ import annotations

import math
from typing import Sequence

from dpforge.accounting.prv.evaluate import Evaluation, evaluate, initial_step, refine
from dpforge.accounting.results import DeltaResult, EpsilonResult
from dpforge.errors import LimitError, ParameterError
from dpforge.mechanisms.combinators import Component, Description, flatten
from dpforge.validation import require_non_negative, require_positive, require_probability_open

#: the engine's name in the registry of :mod:`dpforge.accounting.api`
NAME = "prv"


def _components(description: Description) -> list[Component]:
    return flatten(description)


def _reject_options(options: dict) -> None:
    if options:
        raise ParameterError(f"{sorted(options)[0]} is not an option of the prv engine")


def _accuracy(relative_accuracy: float, low: float, high: float, evaluation: Evaluation, refinements: int) -> dict:
    """What the bracket [low, high] achieved and the grid it came from."""
    return {
        "relative_accuracy": relative_accuracy,
        "achieved": (high - low) / high if high > 0 else 0.0,
        "grid_step": evaluation.step,
        "grid_size": evaluation.grid_size,
        "refinements": refinements,
    }


def epsilon(
    description: Description,
    delta: float,
    *,
    relative_accuracy: float = 1e-3,
    step: float | None = None,
    max_refinements: int = 6,
    **options,
) -> EpsilonResult:
    """Certified bounds on epsilon(delta) of a composed, possibly subsampled, description.

    ``upper`` and ``lower`` are certified for the add-or-remove relation under Poisson
    subsampling (the maximum over both directions).  The grid step is refined until
    (upper - lower) / upper <= ``relative_accuracy`` (or the grid limit is reached;
    ``accuracy['achieved']`` reports what was reached).  Pass ``step`` to fix the grid.
    """
    _reject_options(options)
    delta = require_probability_open("delta", delta)
    relative_accuracy = require_positive("relative_accuracy", relative_accuracy)
    components = _components(description)
    tail = 1e-4 * delta

    def width_of(evaluation: Evaluation) -> tuple[float, float]:
        low, high = evaluation.epsilon(delta)
        return high - low, high

    if step is not None:
        step = require_positive("step", step)
        evaluation, refinements = evaluate(components, step, tail), 0
    else:
        first = initial_step(components, delta, relative_accuracy, tail)
        evaluation, refinements = refine(components, first, tail, relative_accuracy, width_of, max_refinements, delta=delta)
    low, high = evaluation.epsilon(delta)
    if not math.isfinite(high):
        raise LimitError(
            f"delta={delta:g} is below what the prv engine can certify for this description "
            "(the truncated and round-off mass alone exceeds it); use a larger delta"
        )
    low = min(low, high)
    return EpsilonResult(
        lower=low,
        upper=high,
        estimate=0.5 * (low + high),
        delta=delta,
        engine=NAME,
        accuracy=_accuracy(relative_accuracy, low, high, evaluation, refinements),
    )


def delta_evaluation(
    description: Description,
    epsilons: Sequence[float],
    relative_accuracy: float,
    step: float | None,
    max_refinements: int,
) -> tuple[Evaluation, int]:
    """The composed profiles, refined until delta at every one of ``epsilons`` has the
    relative accuracy (deltas below 1e-14 are not refined for)."""
    relative_accuracy = require_positive("relative_accuracy", relative_accuracy)
    components = _components(description)
    tail = 1e-16

    def width_of(evaluation: Evaluation) -> tuple[float, float]:
        worst, worst_ratio = (0.0, 1.0), 0.0
        for value in epsilons:
            low, high = evaluation.delta(value)
            if high >= 1e-14 and (high - low) / high > worst_ratio:
                worst, worst_ratio = (high - low, high), (high - low) / high
        return worst

    if step is not None:
        step = require_positive("step", step)
        return evaluate(components, step, tail), 0
    first = initial_step(components, 1e-6, relative_accuracy, tail)
    return refine(components, first, tail, relative_accuracy, width_of, max_refinements)


def delta(
    description: Description,
    epsilon: float,
    *,
    relative_accuracy: float = 1e-3,
    step: float | None = None,
    max_refinements: int = 6,
    **options,
) -> DeltaResult:
    """Certified bounds on delta(epsilon); refined until (upper - lower)/upper <= relative_accuracy."""
    _reject_options(options)
    epsilon = require_non_negative("epsilon", epsilon)
    evaluation, refinements = delta_evaluation(description, (epsilon,), relative_accuracy, step, max_refinements)
    low, high = evaluation.delta(epsilon)
    low = min(low, high)
    return DeltaResult(
        lower=low,
        upper=high,
        estimate=0.5 * (low + high),
        epsilon=epsilon,
        engine=NAME,
        accuracy=_accuracy(relative_accuracy, low, high, evaluation, refinements),
    )
