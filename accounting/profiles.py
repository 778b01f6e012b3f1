"""Whole privacy profiles: certified delta over a grid of epsilons from shared compositions."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from dpforge.accounting.prv.engine import delta_evaluation
from dpforge.accounting.prv.evaluate import Evaluation
from dpforge.errors import ParameterError
from dpforge.validation import require_positive


def delta_profile(
    description,
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
    1e-14 excepted), so a whole curve usually costs one to three ``delta`` calls.
    """
    try:
        grid = np.asarray(epsilons, dtype=float)
    except (TypeError, ValueError):
        raise ParameterError(f"epsilons must be a non-empty sequence of finite numbers >= 0, got {epsilons!r}") from None
    if grid.ndim != 1 or grid.size == 0 or not np.all(np.isfinite(grid)) or np.any(grid < 0):
        raise ParameterError("epsilons must be a non-empty sequence of finite numbers >= 0")
    relative_accuracy = require_positive("relative_accuracy", relative_accuracy)
    lower = np.zeros_like(grid)
    upper = np.ones_like(grid)
    evaluations: list[Evaluation] = []

    def tighten(index: int, evaluation: Evaluation) -> None:
        low, high = evaluation.delta(float(grid[index]))
        lower[index] = max(lower[index], low)
        upper[index] = min(upper[index], high)

    for index in np.argsort(grid):
        accurate = upper[index] < 1e-14 or upper[index] - lower[index] <= relative_accuracy * upper[index]
        if evaluations and accurate:
            continue
        evaluation = delta_evaluation(description, (float(grid[index]),), relative_accuracy, None, max_refinements).evaluation
        evaluations.append(evaluation)
        for other in range(grid.size):
            tighten(other, evaluation)
    return np.minimum(lower, upper), upper
