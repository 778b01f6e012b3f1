"""Calibration: the smallest noise whose certified upper epsilon meets a target.

One root finder, :func:`find_parameter`, works on any evaluator p -> certified upper
epsilon that does not increase with p (a noise multiplier, a Laplace scale, an LMO
scale factor).  :func:`certified_evaluator` builds that evaluator for any registered
engine: for "prv" it is :class:`~dpforge.accounting.prv.evaluate.FixedGridEvaluator`
(one grid for every evaluation, so the function is smooth); for "rdp" and "pure" it is
the engine's own certified upper bound.  The Monte-Carlo engine is refused: its bound
holds only with a probability, and a root found on random bounds is not a calibration.

Cheap approximations only choose where to start (the central-limit / Gaussian-DP
approximation for subsampled Gaussians, Bu, Dong, Long, Su 2020; pure-DP amplification
for Laplace); every accepted value is a certified upper bound of the chosen engine.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from scipy import special

from dpforge.accounting import api
from dpforge.accounting.api import DEFAULT_ENGINE, engine_names, get_engine
from dpforge.accounting.prv.evaluate import FixedGridEvaluator
from dpforge.accounting.results import CalibrationResult, EpsilonResult
from dpforge.accounting.pure import unamplified_epsilon
from dpforge.errors import (
    CalibrationError,
    DpforgeAccuracyWarning,
    DpforgeError,
    LimitError,
    ParameterError,
    UnsupportedError,
    warn_caller,
)
from dpforge.mechanisms.base import Gaussian, Laplace
from dpforge.mechanisms.combinators import Composed, Description, PoissonSampled
from dpforge.mechanisms.sampling import lower_bound_description
from dpforge.validation import require_count, require_positive, require_probability_open, require_sampling_rate

#: default search bracket of :func:`calibrate` for the noise parameter
SEARCH_LIMITS = (1e-3, 1e4)
#: engines whose bound holds only with a probability: never calibrated on
_RANDOM_ENGINES = ("montecarlo",)


class _EngineEvaluator:
    """Certified upper epsilon(delta) of ``make_description(p)`` from a registered engine."""

    def __init__(self, make_description, delta: float, engine: str, options: dict[str, Any]) -> None:
        self.make_description = make_description
        self.delta = delta
        get_engine(engine)  # an unknown name fails here, before any search
        self.engine_name = engine
        self.options = options
        self.evaluations = 0
        self.cache: dict[float, float] = {}
        self.lowers: dict[float, float] = {}  # the engine's own lower bound at each parameter

    def _description(self, parameter: float) -> Description:
        try:
            return self.make_description(parameter)
        except ValueError as error:
            kind = type(error) if isinstance(error, DpforgeError) else ParameterError
            raise kind(f"make_description({parameter:g}) failed: {error}") from None

    def __call__(self, parameter: float) -> float:
        if parameter not in self.cache:
            result = get_engine(self.engine_name).epsilon(self._description(parameter), self.delta, **self.options)
            self.cache[parameter] = result.upper
            self.lowers[parameter] = result.lower
            self.evaluations += 1
        return self.cache[parameter]

    def lower_at(self, parameter: float) -> float:
        """The certified lower bound at the answer, through the api: for a step whose
        certified pair is not realised by datasets (fixed-size batches, replace-one
        non-Gaussian) it comes from pairs that are, so it stays a lower bound on the run's
        epsilon (the search itself needs only upper bounds)."""
        description = self._description(parameter)
        if lower_bound_description(description) is None and parameter in self.lowers:
            return self.lowers[parameter]  # the engine's pair is realised: its lower stands
        self.evaluations += 1
        return api.epsilon(description, self.delta, engine=self.engine_name, **self.options).lower


def certified_evaluator(
    make_description: Callable[[float], Description],
    delta: float,
    *,
    engine: str = DEFAULT_ENGINE,
    rel_tolerance: float = 1e-3,
    engine_options: dict[str, Any] | None = None,
    target: float | None = None,
) -> Callable[[float], float]:
    """p -> certified upper epsilon(delta) of ``make_description(p)`` under ``engine``;
    the returned callable caches its values and counts ``evaluations``.  ``target`` (the
    epsilon being calibrated for) lets the PRV evaluator tilt its compositions there."""
    options = dict(engine_options or {})
    if engine not in engine_names():
        raise ParameterError(f"engine must be one of {', '.join(engine_names())}, got {engine!r}")
    if engine in _RANDOM_ENGINES:
        raise UnsupportedError(
            f"calibration needs a deterministic certified bound; the {engine} engine's bound holds only with a "
            "probability (use engine='prv', 'rdp' or 'pure')"
        )
    if engine == "prv":
        step = options.pop("step", None)
        if options:
            raise ParameterError(f"{sorted(options)[0]} is not a calibration option of the prv engine (step is)")
        return FixedGridEvaluator(make_description, delta, rel_tolerance, step=step, target=target)
    return _EngineEvaluator(make_description, delta, engine, options)


@dataclass(frozen=True)
class Root:
    """What :func:`find_parameter` found: the parameter, its certified epsilon, and the
    evaluations spent."""

    parameter: float
    epsilon: float
    evaluations: int


def _log(value: float) -> float:
    """log for the root finder; a certified epsilon of 0 maps to a large negative number."""
    return math.log(value) if value > 1e-300 else -700.0


def find_parameter(
    evaluate: Callable[[float], float],
    target_epsilon: float,
    *,
    low_limit: float,
    high_limit: float,
    rel_tolerance: float,
    start: float,
    parameter_name: str = "parameter",
    accept_lower_limit: bool = False,
) -> Root:
    """A parameter p in [low_limit, high_limit] with target (1 - rel_tolerance) <=
    evaluate(p) <= target, for an ``evaluate`` that does not increase with p.

    Secant steps in (log p, log epsilon) from ``start`` (each move at most 16x) until the
    target is bracketed, then Illinois regula falsi; where the grid makes epsilon(p)
    piecewise smooth and the tolerance band is missed, the bracket end with enough noise
    is returned, so the answer always meets the target.  Raises
    :class:`~dpforge.errors.CalibrationError` when even ``high_limit`` gives too large an
    epsilon, or (unless ``accept_lower_limit``) when ``low_limit`` already meets the
    target.
    """
    floor, aim = target_epsilon * (1.0 - rel_tolerance), target_epsilon * (1.0 - 0.5 * rel_tolerance)
    low, high = math.log(low_limit), math.log(high_limit)
    x = min(max(math.log(start), low), high)
    count = getattr(evaluate, "evaluations", None)

    def root(log_p: float, value: float) -> Root:
        return Root(math.exp(log_p), value, getattr(evaluate, "evaluations", 0) if count is not None else 0)

    too_little: tuple[float, float] | None = None  # (log p, log eps - log aim) with eps > target
    enough: tuple[float, float] | None = None
    previous: tuple[float, float] | None = None
    side = 0
    for _ in range(80):
        value = evaluate(math.exp(x))
        if floor <= value <= target_epsilon:
            return root(x, value)
        f = _log(value) - math.log(aim)
        if value > target_epsilon:
            if x >= high:
                raise CalibrationError(
                    f"target_epsilon={target_epsilon:g} is not reachable: at the upper end of the search "
                    f"bracket ({parameter_name}={high_limit:g}) the certified epsilon is {value:.6g}",
                    parameter=high_limit,
                    epsilon=value,
                )
            if too_little is None or x > too_little[0]:
                too_little = (x, f)
            if side == -1 and enough is not None:
                enough = (enough[0], 0.5 * enough[1])
            side = -1
        else:
            if x <= low:
                if accept_lower_limit:
                    return root(x, value)
                raise CalibrationError(
                    f"target_epsilon={target_epsilon:g} is met already at the lower end of the search bracket "
                    f"({parameter_name}={low_limit:g}, certified epsilon {value:.6g}); lower the bracket",
                    parameter=low_limit,
                    epsilon=value,
                )
            if enough is None or x < enough[0]:
                enough = (x, f)
            if side == 1 and too_little is not None:
                too_little = (too_little[0], 0.5 * too_little[1])
            side = 1
        if too_little is not None and enough is not None:
            (xa, fa), (xb, fb) = too_little, enough
            if abs(xb - xa) < 1e-13:
                break
            new = xb - fb * (xb - xa) / (fb - fa) if fb != fa else 0.5 * (xa + xb)
            if not min(xa, xb) < new < max(xa, xb):
                new = 0.5 * (xa + xb)
        else:
            slope = -1.1  # d log eps / d log p, typical for subsampled compositions
            if previous is not None and x != previous[0]:
                measured = (f - previous[1]) / (x - previous[0])
                if measured < -0.05:
                    slope = measured
            move = min(max(-f / slope * 1.05, -math.log(16.0)), math.log(16.0))
            new = min(max(x + move, low), high)
        previous = (x, f)
        x = new
    if enough is None:  # pragma: no cover - the loop brackets long before
        raise CalibrationError(f"no {parameter_name} in [{low_limit:g}, {high_limit:g}] was found to meet the target")
    return root(enough[0], evaluate(math.exp(enough[0])))


def calibrate(
    make_description: Callable[[float], Description],
    target_epsilon: float,
    delta: float,
    *,
    engine: str = DEFAULT_ENGINE,
    lower: float | None = None,
    upper: float | None = None,
    rel_tolerance: float = 1e-3,
    start: float | None = None,
    parameter_name: str = "parameter",
    engine_options: dict[str, Any] | None = None,
) -> CalibrationResult:
    """Find a noise parameter p with target*(1 - rel_tolerance) <= eps_upper(p) <= target.

    ``make_description(p)`` must describe a release whose epsilon decreases as p grows
    (a noise multiplier or a Laplace scale).  ``lower``/``upper`` bound the search
    (default [1e-3, 1e4]); it starts at ``start`` (default 1, or the bracket's geometric
    mean when both ends are given).  With the PRV engine the grid is set at the first
    evaluation; when the answer lies more than 1.5x from the start, the search is
    repeated on a grid set at the answer and the smaller certified parameter is kept, so
    a poor start costs time, not noise.  The returned ``epsilon`` is the engine's
    certified upper bound at ``parameter``.  Raises
    :class:`~dpforge.errors.CalibrationError` naming the bracket end when the target
    cannot be met inside it.
    """
    target_epsilon = require_positive("target_epsilon", target_epsilon)
    delta = require_probability_open("delta", delta)
    rel_tolerance = require_positive("rel_tolerance", rel_tolerance)
    if rel_tolerance >= 1:
        raise ParameterError(f"rel_tolerance must be in (0, 1), got {rel_tolerance!r}")
    low_limit = require_positive("lower", lower) if lower is not None else SEARCH_LIMITS[0]
    high_limit = require_positive("upper", upper) if upper is not None else SEARCH_LIMITS[1]
    if low_limit >= high_limit:
        raise ParameterError(f"lower must be < upper, got lower={low_limit!r}, upper={high_limit!r}")
    if start is None:
        start = math.sqrt(low_limit * high_limit) if lower is not None and upper is not None else 1.0
    start = require_positive("start", start)

    def search(guess: float, options: dict[str, Any] | None = engine_options) -> CalibrationResult:
        evaluate = certified_evaluator(
            make_description,
            delta,
            engine=engine,
            rel_tolerance=rel_tolerance,
            engine_options=options,
            target=target_epsilon,
        )
        found = find_parameter(
            evaluate,
            target_epsilon,
            low_limit=low_limit,
            high_limit=high_limit,
            rel_tolerance=rel_tolerance,
            start=guess,
            parameter_name=parameter_name,
        )
        return CalibrationResult(
            parameter=found.parameter,
            epsilon=found.epsilon,
            target_epsilon=target_epsilon,
            delta=delta,
            rel_tolerance=rel_tolerance,
            evaluations=found.evaluations,
            engine=engine,
            parameter_name=parameter_name,
            # the engine's own lower bound at the answer (prv: set by the epsilon() check below)
            lower=evaluate.lower_at(found.parameter) if hasattr(evaluate, "lower_at") else math.nan,
        )

    best = search(start)
    # The PRV grid is fixed at the first evaluation, for the starting parameter.  Far from
    # the answer that grid is coarse (e.g. a Laplace scale 10x the start), and a coarse
    # grid's certified bound calls for more noise than needed; search again on a grid set
    # at the answer and keep the smaller certified parameter.
    if engine == "prv" and abs(math.log(best.parameter / min(max(start, low_limit), high_limit))) > math.log(1.5):
        try:
            second = search(best.parameter)
        except CalibrationError:  # the first answer stands: it is certified on its own grid
            second = None
        if second is not None:
            chosen = second if second.parameter < best.parameter else best
            best = dataclasses.replace(chosen, evaluations=best.evaluations + second.evaluations)
    if engine == "prv":
        best, check = _as_verified(best, make_description, high_limit)
        if check is not None and best.epsilon < target_epsilon * (1.0 - rel_tolerance) and "step" not in (engine_options or {}):
            best = _on_a_finer_grid(best, check, search, make_description, high_limit)
        if best.epsilon < target_epsilon * (1.0 - rel_tolerance):
            warn_caller(
                f"the calibrated {parameter_name}={best.parameter:.6g} gives certified epsilon {best.epsilon:.6g}, "
                f"{1.0 - best.epsilon / target_epsilon:.2g} below the target {target_epsilon:g} (rel_tolerance "
                f"{rel_tolerance:g}): it is certified but adds more noise than needed",
                DpforgeAccuracyWarning,
            )
    return best


def _on_a_finer_grid(
    best: CalibrationResult, check: EpsilonResult, search: Callable[..., CalibrationResult], make_description, high_limit: float
) -> CalibrationResult:
    """``best`` searched again on the grid ``epsilon()`` refined to at the answer (``check``,
    the verification's own call), where that check shows more noise than the tolerance allows (its certified epsilon below
    target (1 - rel_tolerance)): the search's grid, set from the starting parameter, was
    coarser than the answer's epsilon needs, and its certified bound asked for more noise
    (q = 0.01, T = 1,000, target 0.01 at delta = 1e-5: a step of 9.9e-5 read 0.01055 at
    sigma 77.1, whose certified epsilon is 0.010007; the search returned 81.24, epsilon
    0.943 of the target).  The second answer is kept only if ``epsilon()`` verifies it and
    it is the smaller parameter, so a calibrated parameter still always verifies."""
    step = check.accuracy.get("grid_step")
    if not step:
        return best
    try:
        second, verified = _as_verified(search(best.parameter, {"step": step}), make_description, high_limit, quiet=True)
    except CalibrationError:
        return best
    chosen = second if verified is not None and second.parameter < best.parameter else best
    return dataclasses.replace(chosen, evaluations=best.evaluations + second.evaluations)


#: how far :func:`_as_verified` moves a parameter per try, and how many tries it makes
_VERIFY_NUDGE, _VERIFY_TRIES = 1e-3, 8


def _as_verified(
    result: CalibrationResult, make_description, high_limit: float, quiet: bool = False
) -> tuple[CalibrationResult, EpsilonResult | None]:
    """The calibrated parameter as ``epsilon()`` and ``dpforge verify`` will see it.

    The search certifies on one fixed grid; ``epsilon()`` refines its own grid, and both
    upper bounds are certified but need not be equal.  So the answer is checked with
    ``epsilon()`` at its default accuracy, and moved up by 0.1% at a time (at most
    ``_VERIFY_TRIES`` times) until that upper bound meets the target too: a calibrated
    parameter then passes ``dpforge verify``, and the reported ``epsilon``/``lower`` are
    that check's certified bracket.  Where ``epsilon()`` stays looser than the search's
    own certified bound (it can, at tiny delta on laws it has to compose in stages), the
    search's result is returned as it is, certified on its grid, with a
    :class:`~dpforge.errors.DpforgeAccuracyWarning` saying that ``epsilon()`` and verify
    will report more (unless ``quiet``: the caller then discards an unverified result).
    Returns the result and the ``epsilon()`` check that verified it (None where none did).
    """
    parameter, evaluations = result.parameter, result.evaluations
    check = None
    for _ in range(_VERIFY_TRIES):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DpforgeAccuracyWarning)
                check = api.epsilon(make_description(parameter), result.delta, engine="prv")
        except LimitError:
            break
        evaluations += 1
        if check.upper <= result.target_epsilon:
            verified = dataclasses.replace(
                result, parameter=parameter, epsilon=check.upper, lower=check.lower, evaluations=evaluations
            )
            return verified, check
        if parameter >= high_limit or check.upper > result.target_epsilon * (1.0 + 2.0 * _VERIFY_NUDGE * _VERIFY_TRIES):
            break  # no nudge within reach closes the gap: epsilon() is looser here, not the parameter
        parameter = min(parameter * (1.0 + _VERIFY_NUDGE), high_limit)
    if quiet:
        return dataclasses.replace(result, evaluations=evaluations), None
    reported = f"{check.upper:.6g}" if check is not None else "no bound (a named limit)"
    warn_caller(
        f"the calibrated {result.parameter_name}={result.parameter:.6g} is certified on the search's grid "
        f"(epsilon <= {result.epsilon:.6g}), but epsilon() and dpforge verify report {reported} for it: they are "
        "looser here than the search's grid",
        DpforgeAccuracyWarning,
    )
    return dataclasses.replace(result, evaluations=evaluations), None


def _gaussian_dp_mu(target_epsilon: float, delta: float) -> float:
    """mu of a mu-GDP mechanism with delta(target_epsilon) = delta (Dong, Roth, Su 2022)."""

    def excess(mu: float) -> float:
        # e^eps Phi(-eps/mu - mu/2) in log space: e^eps alone overflows past eps ~ 709
        return (
            special.ndtr(-target_epsilon / mu + mu / 2)
            - math.exp(target_epsilon + special.log_ndtr(-target_epsilon / mu - mu / 2))
            - delta
        )

    from scipy import optimize  # only calibration needs it; importing it costs ~25 MiB

    high = 1.0
    while excess(high) < 0 and high < 1e12:
        high *= 2.0
    if excess(high) < 0:  # a target past every mu searched (eps 1e30): only a starting point
        return high
    return optimize.brentq(excess, 1e-6, high, xtol=1e-10)


def _workload(sampling_rate: float, steps: int, target_epsilon: float, delta: float) -> tuple[float, int, float, float]:
    """The question of a DP-SGD-style calibration, checked: (q, T, target, delta)."""
    return (
        require_sampling_rate("sampling_rate", sampling_rate),
        require_count("steps", steps),
        require_positive("target_epsilon", target_epsilon),
        require_probability_open("delta", delta),
    )


def _run(mechanism, sampling_rate: float, steps: int) -> Composed:
    """``steps`` releases of ``mechanism``, Poisson-subsampled when ``sampling_rate < 1``."""
    step = PoissonSampled(mechanism, sampling_rate) if sampling_rate < 1.0 else mechanism
    return Composed([(step, steps)])


def calibrate_noise_multiplier(
    sampling_rate: float,
    steps: int,
    target_epsilon: float,
    delta: float,
    *,
    rel_tolerance: float = 1e-3,
    lower: float | None = None,
    upper: float | None = None,
    engine: str = DEFAULT_ENGINE,
) -> CalibrationResult:
    """Noise multiplier of a Poisson-subsampled Gaussian (DP-SGD) meeting the target.

    The search starts at the central-limit approximation mu = q sqrt(T (e^{1/sigma^2} - 1))
    (Bu et al. 2020), which is close but not certified, and finishes on certified upper
    bounds of ``engine``.
    """
    sampling_rate, steps, target_epsilon, delta = _workload(sampling_rate, steps, target_epsilon, delta)
    mu = _gaussian_dp_mu(target_epsilon, delta)
    if sampling_rate >= 1.0:
        start = math.sqrt(steps) / mu
    else:
        # log1p(mu^2 / (q^2 T)) with the ratio formed in logarithms: q^2 T underflowed
        # to 0 at q = 1e-300
        log_ratio = 2.0 * (math.log(mu) - math.log(sampling_rate)) - math.log(steps)
        start = 1.0 / math.sqrt(math.log1p(math.exp(log_ratio)) if log_ratio < 700.0 else log_ratio)
    return calibrate(
        lambda noise_multiplier: _run(Gaussian(noise_multiplier), sampling_rate, steps),
        target_epsilon,
        delta,
        engine=engine,
        lower=lower,
        upper=upper,
        rel_tolerance=rel_tolerance,
        start=start,
        parameter_name="noise_multiplier",
    )


def calibrate_laplace_scale(
    sampling_rate: float,
    steps: int,
    target_epsilon: float,
    delta: float,
    *,
    sensitivity: float = 1.0,
    rel_tolerance: float = 1e-3,
    lower: float | None = None,
    upper: float | None = None,
    engine: str = DEFAULT_ENGINE,
) -> CalibrationResult:
    """Laplace scale b of a Poisson-subsampled Laplace mechanism meeting the target.

    Starts at 0.8x the pure-DP answer T log(1 + q(e^{s/b} - 1)) = target (amplification by
    subsampling, Balle, Barthe, Gaboardi 2018), which is always enough noise.
    """
    sampling_rate, steps, target_epsilon, delta = _workload(sampling_rate, steps, target_epsilon, delta)
    sensitivity = require_positive("sensitivity", sensitivity)
    per_step = target_epsilon / steps
    ratio = unamplified_epsilon(per_step, sampling_rate)  # s/b giving that per-step epsilon
    return calibrate(
        lambda scale: _run(Laplace(scale, sensitivity), sampling_rate, steps),
        target_epsilon,
        delta,
        engine=engine,
        lower=lower,
        upper=upper,
        rel_tolerance=rel_tolerance,
        start=0.8 * sensitivity / ratio,
        parameter_name="scale",
    )
