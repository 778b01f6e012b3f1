"""Calibrating one LMO shape's scale to the target, and the record of a calibrated shape.

One job: given a shape of the search space (:mod:`dpforge.design.space`), find the
smallest scale s at which ``shape.scaled(s)`` meets the certified target epsilon on the
workload, and the objective there.  Scaling LMO noise by s (:meth:`LMO.scaled`)
multiplies its standard deviation and E|noise| by s and makes the certified epsilon
decrease monotonically in s, so every shape has one such scale and the constrained
search becomes an unconstrained one over shape.

Sources.  The root finder is dpforge's only one,
:func:`dpforge.accounting.calibrate.find_parameter` (secant steps, then Illinois
regula falsi, Dowell & Jarratt 1971, on log epsilon over log s), run on certified PRV
upper bounds on one fixed grid (:func:`dpforge.accounting.calibrate.certified_evaluator`;
the PRV accountant of Gopi, Lee & Wutschitz 2021).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Union

from dpforge.accounting.calibrate import certified_evaluator, find_parameter
from dpforge.design import space
from dpforge.errors import CalibrationError
from dpforge.mechanisms.combinators import Composed, PoissonSampled
from dpforge.mechanisms.lmo import LMO

#: what :func:`~dpforge.design.search.lmo_search` minimises: a name or ``f(LMO) -> float``
Objective = Union[str, Callable[[LMO], float]]
#: the objectives known by name
OBJECTIVES = ("variance", "abs")
#: relative tolerance of the per-shape calibration during the search
_SEARCH_TOLERANCE = 2e-3
#: relative tolerance of the final calibration (that of the Gaussian baseline)
_FINAL_TOLERANCE = 1e-3
_PENALTY = 1e6  # objective (log scale) of shapes that are pruned or cannot reach the target


@dataclass(frozen=True)
class _Workload:
    """What every shape is calibrated against (sent to each executor task)."""

    target_epsilon: float
    delta: float
    sampling_rate: float
    steps: int
    sensitivity: float
    chi2_target: float  # chi-square divergence of the calibrated Gaussian's pair (start of calibration)
    objective: Objective
    shape_min: float
    grid_step: float | None  # PRV grid step of the search's evaluations (that of the Gaussian baseline)

    def description(self, mechanism: LMO) -> Composed:
        """``Composed([(PoissonSampled(mechanism, q), T)])`` (no sampling when q = 1)."""
        inner = mechanism if self.sampling_rate >= 1.0 else PoissonSampled(mechanism, self.sampling_rate)
        return Composed([(inner, self.steps)])


def _objective_value(objective: Objective, mechanism: LMO) -> float:
    """The objective of ``mechanism`` (a callable's NaN counts as +inf)."""
    if objective == "variance":
        return mechanism.variance()
    if objective == "abs":
        return mechanism.mean_absolute()
    value = float(objective(mechanism))  # type: ignore[operator]
    return value if not math.isnan(value) else math.inf


@dataclass(frozen=True)
class _Point:
    """One calibrated shape."""

    pattern: tuple[str, ...]
    u: tuple[float, ...]
    value: float  # the objective at the calibrated scale (inf where pruned/unreachable)
    scale: float
    epsilon: float  # certified upper epsilon at that scale (best reached where unreachable)
    evaluations: int  # certified epsilon evaluations spent
    status: str  # "ok", "pruned" (infinite objective at every scale), "unreachable"

    @property
    def key(self) -> float:
        """What the optimisers minimise: log objective (a penalty when not usable)."""
        if self.status != "ok" or not math.isfinite(self.value):
            return _PENALTY if self.value != -math.inf else -_PENALTY
        # log for positive values; values <= 0 (a callable's) below every log, still monotone
        return math.log(self.value) if self.value > 0 else self.value - 1000.0


class _Unreachable(Exception):
    """Even the largest scale allowed does not meet the target; ``epsilon`` is the
    certified epsilon there."""

    def __init__(self, epsilon: float) -> None:
        super().__init__(epsilon)
        self.epsilon = epsilon


def _calibrate_scale(shape: LMO, workload: _Workload, start: float, tolerance: float, step: float | None):
    """Smallest scale s (within tolerance) with certified epsilon(shape.scaled(s)) <= target:
    the root finder of :mod:`dpforge.accounting.calibrate` on certified PRV upper bounds on
    one grid (``step``, or the engine's choice at the first evaluation).  The smallest
    scale allowed is accepted when it already meets the target.  Returns (s, epsilon,
    evaluations); raises :class:`_Unreachable` at the largest scale allowed."""
    evaluate = certified_evaluator(
        lambda s: workload.description(shape.scaled(s)),
        workload.delta,
        rel_tolerance=tolerance,
        engine_options=None if step is None else {"step": step},
    )
    low, high = space._SCALE_LIMITS
    try:
        found = find_parameter(
            evaluate,
            workload.target_epsilon,
            low_limit=low * workload.sensitivity,
            high_limit=high * workload.sensitivity,
            rel_tolerance=tolerance,
            start=start,
            parameter_name="scale",
            accept_lower_limit=True,
        )
    except CalibrationError as error:
        raise _Unreachable(error.epsilon if error.epsilon is not None else math.inf) from None
    return found.parameter, found.epsilon, found.evaluations


def _calibrate_shape(pattern: tuple[str, ...], u: tuple[float, ...], workload: _Workload) -> _Point:
    """The shape at ``(pattern, u)`` calibrated at the search tolerance on the search grid;
    a shape whose objective is infinite at every scale is pruned without any evaluation."""
    shape = space._decode(pattern, u, workload.shape_min, workload.sensitivity)
    if not callable(workload.objective) and not math.isfinite(_objective_value(workload.objective, shape)):
        # variance/E|X| are infinite at one scale iff at every scale: nothing to calibrate
        return _Point(pattern, u, math.inf, math.nan, math.nan, 0, "pruned")
    try:
        start = space._start_scale(shape, workload.sensitivity, workload.chi2_target)
        scale, value, evaluations = _calibrate_scale(shape, workload, start, _SEARCH_TOLERANCE, workload.grid_step)
    except _Unreachable as failure:
        return _Point(pattern, u, math.inf, math.nan, failure.epsilon, 0, "unreachable")
    except (ValueError, ArithmeticError):
        return _Point(pattern, u, math.inf, math.nan, math.inf, 0, "unreachable")
    objective = _objective_value(workload.objective, shape.scaled(scale))
    return _Point(pattern, u, objective, scale, value, evaluations, "ok")
