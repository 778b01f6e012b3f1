"""Calibration: the smallest noise whose certified upper epsilon meets a target.

Cheap approximations only choose where to start (the central-limit / Gaussian-DP
approximation for subsampled Gaussians, Bu, Dong, Long, Su 2020; pure-DP amplification
for Laplace); every accepted value is a certified PRV upper bound evaluated on one fixed
grid, so epsilon(parameter) is a smooth function the root finder can trust.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable

from scipy import optimize, stats

from dpforge.accounting.api import _evaluate, initial_step
from dpforge.accounting.results import CalibrationResult
from dpforge.mechanisms.base import Gaussian, Laplace
from dpforge.mechanisms.combinators import Composed, Description, PoissonSampled, flatten
from dpforge.mechanisms.validation import (
    require_count,
    require_positive,
    require_probability_open,
    require_sampling_rate,
)

_SEARCH_LIMITS = (1e-3, 1e4)


class _CertifiedUpper:
    """epsilon_upper(parameter) on a grid fixed at the first evaluation (upper bound only)."""

    def __init__(self, make_description: Callable[[float], Description], delta: float, rel_tolerance: float):
        self.make_description = make_description
        self.delta = delta
        self.rel_tolerance = rel_tolerance
        self.tail = 1e-4 * delta
        self.step: float | None = None
        self.evaluations = 0
        self.cache: dict[float, float] = {}

    def __call__(self, parameter: float) -> float:
        if parameter in self.cache:
            return self.cache[parameter]
        try:
            description = self.make_description(parameter)
        except ValueError as error:
            raise ValueError(f"make_description({parameter:g}) failed: {error}") from None
        components = flatten(description)
        if self.step is None:
            self.step = initial_step(components, self.delta, 0.25 * self.rel_tolerance, self.tail)
        evaluation = _evaluate(components, self.step, self.tail, kinds=("upper",))
        value = max(profile.epsilon(self.delta) for profile in evaluation.upper)
        self.evaluations += 1
        self.cache[parameter] = value
        return value


def calibrate(
    make_description: Callable[[float], Description],
    target_epsilon: float,
    delta: float,
    lower: float | None = None,
    upper: float | None = None,
    rel_tolerance: float = 1e-3,
    *,
    start: float | None = None,
    parameter_name: str = "parameter",
) -> CalibrationResult:
    """Find a noise parameter p with target*(1 - rel_tolerance) <= eps_upper(p) <= target.

    ``make_description(p)`` must describe a release whose epsilon decreases as p grows
    (a noise multiplier or a Laplace scale).  ``lower``/``upper`` bound the search; when
    absent the bracket is found by expanding from ``start`` (default 1) by factors of 2
    within [1e-3, 1e4].  The PRV grid is set at the first evaluation; when the answer
    lies more than 1.5x from the start, the search is repeated on a grid set at the
    answer and the smaller certified parameter is kept, so a poor start costs time, not
    noise.  The returned ``epsilon`` is the certified PRV upper bound at
    ``parameter``.  Raises ``ValueError`` naming the bracket end when the target cannot
    be met inside it.
    """
    target_epsilon = require_positive("target_epsilon", target_epsilon)
    delta = require_probability_open("delta", delta)
    rel_tolerance = require_positive("rel_tolerance", rel_tolerance)
    if rel_tolerance >= 1:
        raise ValueError(f"rel_tolerance must be in (0, 1), got {rel_tolerance!r}")
    low_limit = require_positive("lower", lower) if lower is not None else _SEARCH_LIMITS[0]
    high_limit = require_positive("upper", upper) if upper is not None else _SEARCH_LIMITS[1]
    if low_limit >= high_limit:
        raise ValueError(f"lower must be < upper, got lower={low_limit!r}, upper={high_limit!r}")
    first = _search(make_description, target_epsilon, delta, low_limit, high_limit, rel_tolerance,
                    start if start is not None else (math.sqrt(low_limit * high_limit) if lower and upper else 1.0),
                    start is not None, parameter_name)
    # The PRV grid is fixed at the first evaluation, for the starting parameter.  Far from
    # the answer that grid is coarse (e.g. a Laplace scale 10x the start), and a coarse
    # grid's certified bound calls for more noise than needed; search again on a grid set
    # at the answer and keep the smaller certified parameter.
    if abs(math.log(first.parameter / first.grid_parameter)) > math.log(1.5):
        try:
            second = _search(make_description, target_epsilon, delta, low_limit, high_limit, rel_tolerance,
                             first.parameter, True, parameter_name)
        except ValueError:  # the first answer stands: it is certified on its own grid
            return first.result
        best = second.result if second.result.parameter < first.result.parameter else first.result
        return dataclasses.replace(best, evaluations=first.result.evaluations + second.result.evaluations)
    return first.result


@dataclass(frozen=True)
class _SearchOutcome:
    result: CalibrationResult
    grid_parameter: float

    @property
    def parameter(self) -> float:
        return self.result.parameter


def _search(
    make_description: Callable[[float], Description],
    target_epsilon: float,
    delta: float,
    low_limit: float,
    high_limit: float,
    rel_tolerance: float,
    guess: float,
    near: bool,
    parameter_name: str,
) -> _SearchOutcome:
    """One bracketing + Illinois search on a grid fixed at ``guess`` (``near``: the guess
    is believed close, so the bracket grows from a factor 1.25 instead of 2)."""
    evaluate = _CertifiedUpper(make_description, delta, rel_tolerance)
    floor = target_epsilon * (1.0 - rel_tolerance)
    aim = target_epsilon * (1.0 - 0.5 * rel_tolerance)

    guess = min(max(guess, low_limit), high_limit)

    def accept(parameter: float) -> _SearchOutcome:
        result = CalibrationResult(
            parameter=parameter,
            epsilon=evaluate(parameter),
            target_epsilon=target_epsilon,
            delta=delta,
            rel_tolerance=rel_tolerance,
            evaluations=evaluate.evaluations,
            engine="prv",
            parameter_name=parameter_name,
        )
        return _SearchOutcome(result, guess)

    # 1. bracket: a_param with eps > target (too little noise), b_param with eps <= target
    value = evaluate(guess)
    if floor <= value <= target_epsilon:
        return accept(guess)
    too_little, enough = (guess, None) if value > target_epsilon else (None, guess)
    factor = 1.25 if near else 2.0
    while too_little is None or enough is None:
        # geometric steps away from the guess, growing until the target is bracketed
        if enough is None:
            if too_little >= high_limit:
                raise ValueError(
                    f"target_epsilon={target_epsilon:g} is not reachable: at the upper end of the search "
                    f"bracket ({parameter_name}={high_limit:g}) the certified epsilon is {evaluate(high_limit):.6g}"
                )
            candidate = min(too_little * factor, high_limit)
        else:
            if enough <= low_limit:
                raise ValueError(
                    f"target_epsilon={target_epsilon:g} is met already at the lower end of the search bracket "
                    f"({parameter_name}={low_limit:g}, certified epsilon {evaluate(low_limit):.6g}); lower the bracket"
                )
            candidate = max(enough / factor, low_limit)
        value = evaluate(candidate)
        if floor <= value <= target_epsilon:
            return accept(candidate)
        if value > target_epsilon:
            too_little = candidate
        else:
            enough = candidate
        factor = min(factor * 2.0, 16.0)
    # 2. Illinois regula falsi on log(eps) - log(aim) versus log(parameter)
    xa, xb = math.log(too_little), math.log(enough)
    fa = _log(evaluate(too_little)) - math.log(aim)
    fb = _log(evaluate(enough)) - math.log(aim)
    side = 0
    for _ in range(60):
        x = xb - fb * (xb - xa) / (fb - fa) if fb != fa else 0.5 * (xa + xb)
        if not (min(xa, xb) < x < max(xa, xb)):
            x = 0.5 * (xa + xb)
        parameter = math.exp(x)
        v = evaluate(parameter)
        if floor <= v <= target_epsilon:
            return accept(parameter)
        fx = _log(v) - math.log(aim)
        if fx > 0:  # too little noise: replaces the `too_little` end
            xa, fa = x, fx
            if side == -1:
                fb *= 0.5
            side = -1
        else:
            xb, fb = x, fx
            if side == 1:
                fa *= 0.5
            side = 1
        if abs(xb - xa) < 1e-13:
            break
    # the grid makes eps(parameter) piecewise smooth; fall back to the safe end
    return accept(math.exp(xb))


def _log(value: float) -> float:
    """log for the root finder; a certified epsilon of 0 (enough noise to reach
    delta = 0 at eps = 0) maps to a large negative number instead of failing."""
    return math.log(value) if value > 1e-300 else -700.0


def _gaussian_dp_mu(target_epsilon: float, delta: float) -> float:
    """mu of a mu-GDP mechanism with delta(target_epsilon) = delta (Dong, Roth, Su 2022)."""

    def excess(mu: float) -> float:
        return (
            stats.norm.cdf(-target_epsilon / mu + mu / 2)
            - math.exp(target_epsilon) * stats.norm.cdf(-target_epsilon / mu - mu / 2)
            - delta
        )

    high = 1.0
    while excess(high) < 0 and high < 1e3:
        high *= 2.0
    return optimize.brentq(excess, 1e-6, high, xtol=1e-10)


def calibrate_noise_multiplier(
    sampling_rate: float,
    steps: int,
    target_epsilon: float,
    delta: float,
    rel_tolerance: float = 1e-3,
    *,
    lower: float | None = None,
    upper: float | None = None,
) -> CalibrationResult:
    """Noise multiplier of a Poisson-subsampled Gaussian (DP-SGD) meeting the target.

    The search starts at the central-limit approximation mu = q sqrt(T (e^{1/sigma^2} - 1))
    (Bu et al. 2020), which is close but not certified, and finishes on certified PRV
    upper bounds.
    """
    sampling_rate = require_sampling_rate("sampling_rate", sampling_rate)
    steps = require_count("steps", steps)
    target_epsilon = require_positive("target_epsilon", target_epsilon)
    delta = require_probability_open("delta", delta)
    mu = _gaussian_dp_mu(target_epsilon, delta)
    if sampling_rate >= 1.0:
        start = math.sqrt(steps) / mu
    else:
        start = 1.0 / math.sqrt(math.log1p(mu**2 / (sampling_rate**2 * steps)))

    def make(noise_multiplier: float):
        mechanism = Gaussian(noise_multiplier)
        if sampling_rate < 1.0:
            mechanism = PoissonSampled(mechanism, sampling_rate)
        return Composed([(mechanism, steps)])

    return calibrate(
        make, target_epsilon, delta, lower, upper, rel_tolerance, start=start, parameter_name="noise_multiplier"
    )


def calibrate_laplace_scale(
    sampling_rate: float,
    steps: int,
    target_epsilon: float,
    delta: float,
    sensitivity: float = 1.0,
    rel_tolerance: float = 1e-3,
    *,
    lower: float | None = None,
    upper: float | None = None,
) -> CalibrationResult:
    """Laplace scale b of a Poisson-subsampled Laplace mechanism meeting the target.

    Starts at 0.8x the pure-DP answer T log(1 + q(e^{s/b} - 1)) = target (amplification by
    subsampling, Balle, Barthe, Gaboardi 2018), which is always enough noise.
    """
    sampling_rate = require_sampling_rate("sampling_rate", sampling_rate)
    steps = require_count("steps", steps)
    target_epsilon = require_positive("target_epsilon", target_epsilon)
    delta = require_probability_open("delta", delta)
    sensitivity = require_positive("sensitivity", sensitivity)
    per_step = target_epsilon / steps
    ratio = math.log1p(math.expm1(per_step) / sampling_rate)  # s/b giving that per-step epsilon
    start = 0.8 * sensitivity / ratio

    def make(scale: float):
        mechanism = Laplace(scale, sensitivity)
        if sampling_rate < 1.0:
            mechanism = PoissonSampled(mechanism, sampling_rate)
        return Composed([(mechanism, steps)])

    return calibrate(make, target_epsilon, delta, lower, upper, rel_tolerance, start=start, parameter_name="scale")
