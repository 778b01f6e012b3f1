"""Offline search for LMO mixture parameters against a *certified* privacy budget.

:func:`lmo_search` finds the LMO noise (docs/design.md §4) that minimises a utility
-- the variance, E|noise|, or a user function -- among all mixtures whose certified PRV
upper epsilon for the workload ``Composed([(PoissonSampled(LMO, q), T)])`` is at most
the target, and puts it next to the Gaussian calibrated to the same workload.

The search exploits one structural fact: scaling LMO noise by s (:meth:`LMO.scaled`)
multiplies its standard deviation and E|noise| by s and makes the certified epsilon
decrease monotonically in s.  So the space is parametrised by the mixture *shape* only
(weights and the ratios between the component parameters), and every shape is
calibrated -- secant steps and Illinois regula falsi on the certified epsilon over
log s, as in :func:`dpforge.accounting.calibrate` -- to the smallest scale meeting the
target.  The constrained search becomes an unconstrained one over shape.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import math
import multiprocessing
import numbers
import pickle
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence, Union

import numpy as np
from scipy import optimize
from scipy.stats import qmc

from dpforge.accounting.api import epsilon
from dpforge.accounting.calibrate import calibrate_noise_multiplier, certified_evaluator, find_parameter
from dpforge.accounting.prv.evaluate import initial_step
from dpforge.errors import CalibrationError
from dpforge.mechanisms.base import Gaussian
from dpforge.mechanisms.combinators import Composed, PoissonSampled, flatten
from dpforge.mechanisms.lmo import COMPONENTS, LMO
from dpforge.validation import (
    require_count,
    require_positive,
    require_probability_open,
    require_sampling_rate,
)

Objective = Union[str, Callable[[LMO], float]]

OBJECTIVES = ("variance", "abs")
#: scale factors tried by the calibration, in units of the sensitivity (reference
#: shapes have E[eta] of order 1, i.e. noise of order 1)
_SCALE_LIMITS = (1e-4, 1e6)
#: bracket of the Gaussian baseline's noise multiplier
_SIGMA_LIMITS = (1e-3, 1e7)
#: relative tolerance of the per-shape calibration during the search
_SEARCH_TOLERANCE = 2e-3
#: relative tolerance of the final calibration (that of the Gaussian baseline)
_FINAL_TOLERANCE = 1e-3
#: box of the shape coordinates (natural logs)
_LOG_SHAPE_MAX = math.log(1000.0)  # Gamma shape k up to 1000 (close to Laplace)
_LOG_RATIO = math.log(100.0)  # exponential mean / uniform centre within 1/100 .. 100 of the Gamma mean
_LOG_WIDTH = (math.log(1e-3), math.log(1e3))  # uniform hi/lo - 1
_WEIGHT_FLOOR = 1e-3
#: lowest Gamma shape searched, per objective (the variance needs k > 2, E|X| needs k > 1)
_GAMMA_SHAPE_MIN = {"variance": 2.05, "abs": 1.05, "callable": 0.5}
#: global stage: quasi-random points per shape dimension (rounded up to a power of 2)
_POINTS_PER_DIMENSION = 16
#: local stage: number of polished starts and function evaluations per start
_POLISH_STARTS = 3
_POLISH_EVALUATIONS_PER_DIMENSION = 25
_POLISH_EVALUATIONS_MIN = 10
_BATCH = 8
#: share of the time limit the global stage may use before it stops early
_GLOBAL_SHARE = 0.5
_PENALTY = 1e6  # objective (log scale) of shapes that are pruned or cannot reach the target


# --------------------------------------------------------------------------- shapes


def _patterns(components: Sequence[str]) -> list[tuple[str, ...]]:
    """Every non-empty subset of ``components`` (in COMPONENTS order), smallest first."""
    chosen = [c for c in COMPONENTS if c in components]
    out = []
    for mask in range(1, 2 ** len(chosen)):
        out.append(tuple(c for i, c in enumerate(chosen) if mask >> i & 1))
    return sorted(out, key=lambda p: (len(p), [COMPONENTS.index(c) for c in p]))


def _coordinates(pattern: tuple[str, ...]) -> list[str]:
    """Names of the shape coordinates of a support pattern (each mapped from [0, 1])."""
    names = []
    if "gamma" in pattern:
        names.append("gamma_shape")
    if "exponential" in pattern and "gamma" in pattern:
        names.append("exponential_mean")
    if "uniform" in pattern:
        if "gamma" in pattern or "exponential" in pattern:
            names.append("uniform_centre")
        names.append("uniform_width")
    names += [f"weight_{i}" for i in range(len(pattern) - 1)]
    return names


def _decode(pattern: tuple[str, ...], u: Sequence[float], shape_min: float, sensitivity: float) -> LMO:
    """The LMO of reference scale for unit coordinates ``u`` (see :func:`_coordinates`).

    The first component present sets the scale: a Gamma part has mean eta 1, otherwise
    an Exponential part has rate 1, otherwise the Uniform part is centred on 1.
    """
    values = dict(zip(_coordinates(pattern), (min(max(float(x), 0.0), 1.0) for x in u)))
    fields: dict[str, Any] = {"sensitivity": sensitivity}
    if "gamma" in pattern:
        low = math.log(shape_min)
        k = math.exp(low + values["gamma_shape"] * (_LOG_SHAPE_MAX - low))
        fields.update(gamma_shape=k, gamma_scale=1.0 / k)
    if "exponential" in pattern:
        mean = math.exp(_LOG_RATIO * (2.0 * values["exponential_mean"] - 1.0)) if "gamma" in pattern else 1.0
        fields["exponential_rate"] = 1.0 / mean
    if "uniform" in pattern:
        centre = math.exp(_LOG_RATIO * (2.0 * values["uniform_centre"] - 1.0)) if "uniform_centre" in values else 1.0
        ratio = 1.0 + math.exp(_LOG_WIDTH[0] + values["uniform_width"] * (_LOG_WIDTH[1] - _LOG_WIDTH[0]))
        fields.update(uniform_low=2.0 * centre / (1.0 + ratio), uniform_high=2.0 * centre * ratio / (1.0 + ratio))
    # stick breaking: w_1 = b_1, w_2 = (1 - b_1) b_2, ..., the last takes the rest
    remaining, weights = 1.0, {}
    for i, name in enumerate(pattern[:-1]):
        share = _WEIGHT_FLOOR + (1.0 - 2.0 * _WEIGHT_FLOOR) * values[f"weight_{i}"]
        weights[name] = remaining * share
        remaining -= weights[name]
    weights[pattern[-1]] = remaining
    fields["weights"] = tuple(weights.get(c, 0.0) for c in COMPONENTS)
    return LMO(**fields)


# --------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class _Workload:
    target_epsilon: float
    delta: float
    sampling_rate: float
    steps: int
    sensitivity: float
    chi2_target: float  # chi-square divergence of the calibrated Gaussian's pair (start of calibration)
    objective: Objective
    shape_min: float
    grid_step: float | None  # PRV grid step of the search's evaluations (that of the Gaussian baseline)

    def description(self, mechanism: LMO):
        inner = mechanism if self.sampling_rate >= 1.0 else PoissonSampled(mechanism, self.sampling_rate)
        return Composed([(inner, self.steps)])


def _objective_value(objective: Objective, mechanism: LMO) -> float:
    if objective == "variance":
        return mechanism.variance()
    if objective == "abs":
        return mechanism.mean_absolute()
    value = float(objective(mechanism))  # type: ignore[operator]
    return value if not math.isnan(value) else math.inf


def _log_chi2(mechanism: LMO, shift: float) -> float:
    """log chi^2(noise + shift || noise), chi^2 = int (f(x - b) - f(x))^2 / f(x) dx, by
    Gauss-Legendre quadrature on [0, b] and on log-spaced panels of each tail, summed in
    log space (chi^2 spans hundreds of orders of magnitude over the scales tried)."""
    nodes, weights = _GL
    logs, log_weights = [], []
    x = 0.5 * shift * (nodes + 1.0)
    logs.append(_log_chi2_integrand(mechanism, x, shift))
    log_weights.append(np.log(0.5 * shift * weights))
    # x = b + t and x = -t, t in [1e-12 b, 1e12 max(1, b)] on log panels
    edges = np.log(np.geomspace(1e-12 * shift, 1e12 * max(1.0, shift), 49))
    for lo, hi in zip(edges[:-1], edges[1:]):
        t = np.exp(0.5 * (hi - lo) * (nodes + 1.0) + lo)
        log_w = np.log(0.5 * (hi - lo) * weights * t)
        for points in (shift + t, -t):
            logs.append(_log_chi2_integrand(mechanism, points, shift))
            log_weights.append(log_w)
    terms = np.concatenate(logs) + np.concatenate(log_weights)
    terms = terms[np.isfinite(terms)]
    if terms.size == 0:
        return -math.inf
    top = float(terms.max())
    return top + math.log(float(np.exp(terms - top).sum()))


def _log_chi2_integrand(mechanism: LMO, x: np.ndarray, shift: float) -> np.ndarray:
    """log[(f(x - b) - f(x))^2 / f(x)] = log f(x) + 2 log|expm1(log f(x - b) - log f(x))|."""
    l1 = mechanism.logpdf(x - shift)
    l2 = mechanism.logpdf(x)
    d = l1 - l2
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        log_abs = np.where(d > 0, d + np.log(-np.expm1(-np.abs(d))), np.log(-np.expm1(-np.abs(d))))
        return l2 + 2.0 * log_abs


_GL = np.polynomial.legendre.leggauss(24)


def _start_scale(shape: LMO, workload: _Workload) -> float:
    """Scale whose one-step chi^2 divergence equals that of the calibrated Gaussian: by the
    central-limit picture of subsampled composition (mu ~ q sqrt(T chi^2)) the two then
    have about the same epsilon.  Only a starting point; never a bound."""
    a = workload.sensitivity
    low, high = _SCALE_LIMITS[0] * a, _SCALE_LIMITS[1] * a
    base = dataclasses.replace(shape, sensitivity=1.0)

    def gap(log_s: float) -> float:
        # chi^2 at scale s is chi^2 of the shift a/s at scale 1
        return max(_log_chi2(base, a / math.exp(log_s)), -1e4) - math.log(workload.chi2_target)

    try:
        return math.exp(optimize.brentq(gap, math.log(low), math.log(high), xtol=1e-3))
    except (ValueError, RuntimeError):
        return a


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


_warm = False


def _warm_up() -> None:
    """Once per process: a tiny accounting call so that numba loads (or compiles) its
    kernels before the first real task."""
    global _warm
    if _warm:
        return
    _warm = True
    with _OneNumbaThread():
        tiny = PoissonSampled(LMO(weights=(1.0, 0.0, 0.0), gamma_shape=5.0), 0.1)
        epsilon(Composed([(tiny, 2)]), 1e-3, relative_accuracy=0.1)


class _Unreachable(Exception):
    def __init__(self, epsilon: float) -> None:
        super().__init__(epsilon)
        self.epsilon = epsilon


def _log(value: float) -> float:
    return math.log(value) if value > 1e-300 else -700.0


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
    try:
        found = find_parameter(
            evaluate,
            workload.target_epsilon,
            low_limit=_SCALE_LIMITS[0] * workload.sensitivity,
            high_limit=_SCALE_LIMITS[1] * workload.sensitivity,
            rel_tolerance=tolerance,
            start=start,
            parameter_name="scale",
            accept_lower_limit=True,
        )
    except CalibrationError as error:
        raise _Unreachable(error.epsilon if error.epsilon is not None else math.inf) from None
    return found.parameter, found.epsilon, found.evaluations


def _calibrate_shape(pattern: tuple[str, ...], u: tuple[float, ...], workload: _Workload) -> _Point:
    shape = _decode(pattern, u, workload.shape_min, workload.sensitivity)
    if not callable(workload.objective) and not math.isfinite(_objective_value(workload.objective, shape)):
        # variance/E|X| are infinite at one scale iff at every scale: nothing to calibrate
        return _Point(pattern, u, math.inf, math.nan, math.nan, 0, "pruned")
    try:
        scale, value, evaluations = _calibrate_scale(
            shape, workload, _start_scale(shape, workload), _SEARCH_TOLERANCE, workload.grid_step
        )
    except _Unreachable as failure:
        return _Point(pattern, u, math.inf, math.nan, failure.epsilon, 0, "unreachable")
    except (ValueError, ArithmeticError):
        return _Point(pattern, u, math.inf, math.nan, math.inf, 0, "unreachable")
    objective = _objective_value(workload.objective, shape.scaled(scale))
    return _Point(pattern, u, objective, scale, value, evaluations, "ok")


class _OneNumbaThread:
    """Numba's parallel kernels on one thread for the duration of a task (thread-local,
    restored after): the executor supplies the parallelism, and nested threads on a
    small shared machine cost several times more than they save."""

    def __enter__(self) -> None:
        try:
            import numba

            self.numba, self.previous = numba, numba.get_num_threads()
            numba.set_num_threads(1)
        except Exception:  # pragma: no cover - numba without thread control
            self.numba = None

    def __exit__(self, *exc: object) -> None:
        if self.numba is not None:
            self.numba.set_num_threads(self.previous)


def _global_task(task: tuple) -> _Point:
    """Executor task: calibrate one shape."""
    _warm_up()
    pattern, u, workload = task
    with _OneNumbaThread():
        return _calibrate_shape(pattern, u, workload)


def _polish_task(task: tuple) -> tuple[_Point, list[_Point], bool]:
    """Executor task: Nelder-Mead from one start within the unit box (bounded), evaluating
    shapes sequentially; stops at ``max_evaluations`` or at the wall-clock ``deadline``."""
    _warm_up()
    start, workload, max_evaluations, deadline = task
    with _OneNumbaThread():
        return _polish(start, workload, max_evaluations, deadline)


def _polish(start: _Point, workload: _Workload, max_evaluations: int, deadline: float):
    pattern = start.pattern
    seen: dict[tuple[float, ...], _Point] = {start.u: start}
    order: list[_Point] = []
    stopped = [False]

    class _Stop(Exception):
        pass

    def key(x: np.ndarray) -> float:
        u = tuple(round(float(min(max(v, 0.0), 1.0)), 12) for v in x)
        if u not in seen:
            if len(order) >= max_evaluations:
                raise _Stop
            if time.time() > deadline:
                stopped[0] = True
                raise _Stop
            seen[u] = _calibrate_shape(pattern, u, workload)
            order.append(seen[u])
        return seen[u].key

    x0 = np.asarray(start.u, dtype=float)
    d = x0.size
    simplex = [x0]
    for i in range(d):
        vertex = x0.copy()
        vertex[i] = vertex[i] + 0.1 if vertex[i] <= 0.9 else vertex[i] - 0.1
        simplex.append(vertex)
    try:
        optimize.minimize(
            key,
            x0,
            method="Nelder-Mead",
            bounds=[(0.0, 1.0)] * d,
            options={
                "initial_simplex": np.asarray(simplex),
                "maxfev": 10 * max_evaluations,
                "xatol": 2e-3,
                "fatol": 2e-4,
            },
        )
    except _Stop:
        pass
    best = min([start, *order], key=lambda p: p.key)
    return best, order, stopped[0]


# --------------------------------------------------------------------------- executors


class _Serial:
    def map(self, fn, iterable):
        return map(fn, iterable)


def _spawn_pool(workers: int) -> concurrent.futures.Executor:
    return concurrent.futures.ProcessPoolExecutor(
        max_workers=workers, mp_context=multiprocessing.get_context("spawn"), initializer=_warm_up
    )


def _resolve_executor(executor: Any, objective: Objective) -> tuple[Any, bool]:
    """(an object with .map, whether we own it and must shut it down)."""
    if executor is None:
        if callable(objective):
            try:
                pickle.dumps(objective)
            except Exception:
                return _Serial(), False  # a lambda/closure cannot reach worker processes
        return _spawn_pool(2), True
    if isinstance(executor, str):
        if executor == "serial":
            return _Serial(), False
        raise ValueError(f"executor must be None, 'serial' or an object with .map, got {executor!r}")
    if not callable(getattr(executor, "map", None)):
        raise ValueError(f"executor must be None, 'serial' or an object with .map, got {type(executor).__name__}")
    return executor, False


def _run(mapper: Any, owned: bool, fn: Callable, tasks: list) -> tuple[list, Any]:
    """``list(mapper.map(fn, tasks))``; when our own pool cannot start its workers (a
    script without the ``if __name__ == "__main__":`` guard, which spawned workers need)
    the work continues serially with a warning."""
    try:
        return list(mapper.map(fn, tasks)), mapper
    except concurrent.futures.process.BrokenProcessPool:
        if not owned:
            raise
        import warnings

        mapper.shutdown(wait=False, cancel_futures=True)
        warnings.warn(
            "lmo_search: worker processes failed (a script calling lmo_search with the default executor "
            "needs an `if __name__ == \"__main__\":` guard); continuing serially",
            RuntimeWarning,
            stacklevel=3,
        )
        serial = _Serial()
        return list(serial.map(fn, tasks)), serial


# --------------------------------------------------------------------------- progress


class _Progress:
    def __init__(self, progress: Any, total: int) -> None:
        self.total = total
        self.done = 0
        self.callback = progress if callable(progress) else None
        if progress is None:
            self.bar = sys.stderr.isatty()
        else:
            self.bar = self.callback is None and bool(progress)

    def update(self, count: int, best: float, stage: str) -> None:
        self.done += count
        if self.callback is not None:
            self.callback({"stage": stage, "done": self.done, "total": self.total, "best": best})
        elif self.bar:
            width = 30
            filled = int(width * min(self.done, self.total) / max(self.total, 1))
            sys.stderr.write(
                f"\rlmo search {stage:6s} [{'#' * filled}{'.' * (width - filled)}] "
                f"{self.done}/{self.total} best {best:.6g}   "
            )
            sys.stderr.flush()

    def close(self) -> None:
        if self.bar and self.callback is None:
            sys.stderr.write(f"\rlmo search done   [{'#' * 30}] {self.done} shapes calibrated{' ' * 20}\n")
            sys.stderr.flush()


# --------------------------------------------------------------------------- result


def _finite_or_str(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _float(value: Any) -> float:
    """A float from JSON (non-finite values arrive as the strings 'inf', '-inf', 'nan')."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
        raise ValueError(f"expected a number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class LMOSearchResult:
    """The best LMO found, its certified epsilon, and the calibrated Gaussian next to it.

    ``epsilon`` is the certified PRV upper bound at the default accuracy (<= the target),
    ``epsilon_lower`` the certified lower bound.  ``gaussian_std`` is sigma * sensitivity
    of the Gaussian calibrated (certified) to the same (epsilon, delta, q, T);
    ``gaussian_abs`` = gaussian_std * sqrt(2/pi).  Ratios below 1 mean less noise than
    the Gaussian.
    """

    mechanism: LMO
    epsilon: float
    epsilon_lower: float
    target_epsilon: float
    delta: float
    sampling_rate: float
    steps: int
    objective: str
    objective_value: float
    std: float
    mean_absolute: float
    gaussian_noise_multiplier: float
    gaussian_epsilon: float
    gaussian_std: float
    gaussian_abs: float
    std_ratio: float
    abs_ratio: float
    components: tuple[str, ...]
    evaluations: int
    epsilon_evaluations: int
    seed: int
    elapsed: float
    stopped_early: bool
    engine: str = "prv"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field; the mechanism as :meth:`LMO.to_dict` and
        non-finite floats as the strings 'inf', '-inf', 'nan'."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["mechanism"] = self.mechanism.to_dict()
        data["components"] = list(self.components)
        return {key: _finite_or_str(value) for key, value in data.items()}

    def to_json(self, indent: int | None = None) -> str:
        """:meth:`to_dict` as strict JSON text (no NaN/Infinity literals)."""
        return json.dumps(self.to_dict(), allow_nan=False, indent=indent)

    @classmethod
    def from_dict(cls, data: dict) -> "LMOSearchResult":
        """Inverse of :meth:`to_dict`; missing or unknown fields are a one-line ValueError."""
        if not isinstance(data, dict):
            raise ValueError(f"an LMO search result must be a JSON object, got {type(data).__name__}")
        names = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ValueError(f"unknown LMO search result field {unknown[0]!r}")
        missing = [n for n, f in names.items() if n not in data and f.default is dataclasses.MISSING]
        if missing:
            raise ValueError(f"LMO search result is missing the field {missing[0]!r}")
        fields: dict[str, Any] = {}
        for name, value in data.items():
            try:
                if name == "mechanism":
                    fields[name] = LMO.from_dict(value)
                elif name == "components":
                    fields[name] = tuple(str(c) for c in value)
                elif name in ("steps", "evaluations", "epsilon_evaluations", "seed"):
                    fields[name] = require_count(name, value, 0)
                elif name in ("objective", "engine"):
                    fields[name] = str(value)
                elif name == "stopped_early":
                    if not isinstance(value, bool):
                        raise ValueError(f"expected true or false, got {value!r}")
                    fields[name] = value
                else:
                    fields[name] = _float(value)
            except (TypeError, ValueError) as error:
                raise ValueError(f"LMO search result field {name!r}: {error}") from None
        return cls(**fields)

    def __str__(self) -> str:
        return (
            f"LMO {self.objective} = {self.objective_value:.6g} at certified epsilon <= {self.epsilon:.6g} "
            f"(target {self.target_epsilon:.6g}, delta {self.delta:.3g}); std {self.std:.6g} = "
            f"{self.std_ratio:.4g} x Gaussian, E|noise| {self.mean_absolute:.6g} = {self.abs_ratio:.4g} x Gaussian"
        )


# --------------------------------------------------------------------------- search


def _check_inputs(
    target_epsilon, delta, sampling_rate, steps, objective, components, seed, time_limit, sensitivity, executor
):
    target_epsilon = require_positive("target_epsilon", target_epsilon)
    delta = require_probability_open("delta", delta)
    sampling_rate = require_sampling_rate("sampling_rate", sampling_rate)
    steps = require_count("steps", steps)
    if not callable(objective) and objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)} or a callable, got {objective!r}")
    if isinstance(components, str):
        components = (components,)
    try:
        components = tuple(components)
    except TypeError:
        raise ValueError(f"components must be a sequence of {', '.join(COMPONENTS)}, got {components!r}") from None
    if not components:
        raise ValueError(f"components must name at least one of {', '.join(COMPONENTS)}")
    for c in components:
        if c not in COMPONENTS:
            raise ValueError(f"components: unknown component {c!r}; allowed: {', '.join(COMPONENTS)}")
    if len(set(components)) != len(components):
        raise ValueError(f"components must not repeat a component, got {components!r}")
    seed = require_count("seed", seed, 0)
    time_limit = require_positive("time_limit", time_limit)
    if not (executor is None or executor == "serial" or callable(getattr(executor, "map", None))):
        raise ValueError(f"executor must be None, 'serial' or an object with .map, got {executor!r}")
    sensitivity = require_positive("sensitivity", sensitivity)
    components = tuple(c for c in COMPONENTS if c in components)
    return target_epsilon, delta, sampling_rate, steps, components, seed, time_limit, sensitivity


def _global_points(patterns: list[tuple[str, ...]], seed: int) -> list[tuple[tuple[str, ...], tuple[float, ...]]]:
    """Seeded scrambled Sobol points per pattern, plus the box centre and, for one-component
    patterns, the end nearest the Laplace mechanism (Gamma shape 1000, hi/lo = 1.001)."""
    points = []
    for index, pattern in enumerate(patterns):
        d = len(_coordinates(pattern))
        if d == 0:
            points.append((pattern, ()))
            continue
        n = 2 ** math.ceil(math.log2(_POINTS_PER_DIMENSION * d))
        sobol = qmc.Sobol(d, scramble=True, rng=np.random.default_rng([seed, index]))
        raw = sobol.random(n)
        anchors = [tuple([0.5] * d)]
        if pattern == ("gamma",):
            anchors.append((1.0,))
        if pattern == ("uniform",):
            anchors.append((0.0,))
        points += [(pattern, a) for a in anchors]
        points += [(pattern, tuple(round(float(v), 12) for v in row)) for row in raw]
    return points


def lmo_search(
    target_epsilon: float,
    delta: float,
    sampling_rate: float,
    steps: int,
    objective: Objective = "variance",
    components: Sequence[str] = COMPONENTS,
    seed: int = 0,
    executor: Any = None,
    time_limit: float = 60.0,
    sensitivity: float = 1.0,
    progress: Any = None,
) -> LMOSearchResult:
    """The LMO (scalar release) minimising ``objective`` with certified epsilon <= target.

    The workload is ``Composed([(PoissonSampled(LMO, sampling_rate), steps)])`` under
    add-or-remove neighbours, accounted by the PRV engine.  ``objective`` is "variance",
    "abs" (E|noise|) or a callable ``f(LMO) -> float`` that must be non-decreasing in the
    noise scale (every shape is used at the smallest scale meeting the target).

    Search space.  Every non-empty subset ("pattern") of ``components`` is searched over
    its *shape* coordinates, each log-scaled in a box: Gamma shape k in [k_min, 1000]
    with mean eta fixed to 1; the Exponential mean and the Uniform centre within a factor
    100 of it; Uniform hi/lo - 1 in [1e-3, 1e3]; mixture weights by stick breaking.  The
    overall scale is not searched: each shape is calibrated (regula falsi on the certified
    upper epsilon over log s, started where its one-step chi^2 divergence equals the
    calibrated Gaussian's) to the smallest scale meeting the target.

    Pruning.  The variance is infinite with any Exponential weight > 0 or a Gamma shape
    <= 2, and E|noise| is infinite with any Exponential weight > 0 or a Gamma shape <= 1;
    such shapes are infinite at every scale and are pruned before any calibration (k_min
    is 2.05 for "variance", 1.05 for "abs", 0.5 for a callable).  The exponential
    component stays in the space, but for "variance" and "abs" it can never win; only a
    callable objective can make use of it.

    Stages.  (1) global: seeded scrambled Sobol points (16 per coordinate, plus the box
    centre and the near-Laplace ends) in every pattern, calibrated in a fixed order
    through ``executor``; (2) local: bounded Nelder-Mead on log(objective) (25
    calibrations per coordinate) from the best shape of each of the 3 best patterns --
    the pattern with most coordinates always among them -- each start one executor task;
    (3) the winner is recalibrated at tolerance 1e-3 and its epsilon recomputed at the
    default accuracy (the scale raised if needed), so the reported certified epsilon is
    <= target.  During the search every epsilon is a certified PRV upper bound on one
    fixed grid (the step the engine picks for the calibrated Gaussian), calibrated to
    within 0.2% of the target.

    ``executor``: None (a 2-process pool, spawned, one numba thread each), "serial", or
    any object with ``.map`` (a ``concurrent.futures.Executor``, a Dask client's
    executor).  Tasks are mapped in a fixed order and their results do not depend on the
    executor.  The result is a deterministic function of the inputs and ``seed`` as long
    as ``time_limit`` does not cut the search short; when it does (the global stage past
    half the limit, or a polish past the limit) the best shape so far is finished and
    ``stopped_early`` is True (stage 3 always runs).  With the default executor, a
    script must guard its entry point (``if __name__ == "__main__":``) as spawned
    workers import it; otherwise the search warns and runs serially.  ``progress``: None (a bar on stderr when it is a
    terminal), True/False, or a callable receiving a dict per batch.

    Raises ``ValueError`` (one line) on bad input, or when no shape in the space reaches
    the target (naming the best certified epsilon reached).
    """

    started = time.monotonic()
    target_epsilon, delta, sampling_rate, steps, components, seed, time_limit, sensitivity = _check_inputs(
        target_epsilon, delta, sampling_rate, steps, objective, components, seed, time_limit, sensitivity, executor
    )
    began = time.time()
    deadline = began + time_limit
    objective_name = objective if isinstance(objective, str) else getattr(objective, "__name__", "callable")
    shape_min = _GAMMA_SHAPE_MIN[objective if isinstance(objective, str) else "callable"]
    patterns = _patterns(components)
    if not callable(objective):
        usable = [p for p in patterns if "exponential" not in p]
        if not usable:
            raise ValueError(
                f"no shape in the search space has a finite {objective_name}: every mixture with an "
                "exponential part has infinite variance and E|noise|; add gamma or uniform to components"
            )
        patterns = usable

    # the Gaussian baseline (also the start of every shape's calibration)
    try:
        baseline = calibrate_noise_multiplier(
            sampling_rate, steps, target_epsilon, delta, rel_tolerance=_FINAL_TOLERANCE, lower=_SIGMA_LIMITS[0], upper=_SIGMA_LIMITS[1]
        )
    except ValueError as error:
        raise ValueError(f"cannot calibrate the Gaussian baseline for this workload: {error}") from None
    sigma = baseline.parameter
    gaussian = Gaussian(sigma) if sampling_rate >= 1.0 else PoissonSampled(Gaussian(sigma), sampling_rate)
    grid_step = initial_step(flatten(Composed([(gaussian, steps)])), delta, 0.25 * _SEARCH_TOLERANCE, 1e-4 * delta)
    workload = _Workload(
        target_epsilon=target_epsilon,
        delta=delta,
        sampling_rate=sampling_rate,
        steps=steps,
        sensitivity=sensitivity,
        chi2_target=math.expm1(min(1.0 / sigma**2, 700.0)),
        objective=objective,
        shape_min=shape_min,
        grid_step=grid_step,
    )

    mapper, owned = _resolve_executor(executor, objective)
    points = _global_points(patterns, seed)
    polish_budget = sum(
        max(_POLISH_EVALUATIONS_MIN, _POLISH_EVALUATIONS_PER_DIMENSION * len(_coordinates(p))) for p in patterns[-2:]
    )
    bar = _Progress(progress, len(points) + polish_budget)
    stopped_early = False
    evaluated: list[_Point] = []
    try:
        # 1. global stage, in fixed batches (the time limit is checked between batches)
        for i in range(0, len(points), _BATCH):
            if i > 0 and time.time() - began > _GLOBAL_SHARE * time_limit:
                stopped_early = True
                break
            batch = points[i : i + _BATCH]
            results, mapper = _run(mapper, owned, _global_task, [(p, u, workload) for p, u in batch])
            evaluated += results
            bar.update(len(results), _best_value(evaluated), "global")
        # 2. local stage: the best shapes of distinct patterns
        starts = _polish_starts(evaluated)
        tasks = [
            (
                s,
                workload,
                max(_POLISH_EVALUATIONS_MIN, _POLISH_EVALUATIONS_PER_DIMENSION * len(s.u)),
                deadline,
            )
            for s in starts
        ]
        if tasks and time.time() < deadline:
            polished, mapper = _run(mapper, owned, _polish_task, tasks)
            for best, order, stopped in polished:
                evaluated += order
                stopped_early = stopped_early or stopped
                bar.update(len(order), _best_value(evaluated), "polish")
    finally:
        bar.close()
        if owned and hasattr(mapper, "shutdown"):
            mapper.shutdown(wait=True, cancel_futures=True)

    usable = sorted((p for p in evaluated if p.status == "ok"), key=lambda p: (p.key, p.pattern, p.u))
    epsilon_evaluations = sum(p.evaluations for p in evaluated)
    if not usable:
        reached = [p.epsilon for p in evaluated if not math.isnan(p.epsilon)]
        best = min(reached) if reached else math.inf
        raise ValueError(
            f"no LMO shape in the search space reaches target_epsilon={target_epsilon:g} at delta={delta:g} "
            f"(best certified epsilon found: {best:.6g}, at the largest scale factor tried, "
            f"{_SCALE_LIMITS[1] * sensitivity:g})"
        )
    winner = usable[0]

    # 3. final: recalibrate at the baseline's tolerance, then certify at the default accuracy
    shape = _decode(winner.pattern, winner.u, shape_min, sensitivity)
    scale = winner.scale
    with _OneNumbaThread():
        try:
            scale, _, count = _calibrate_scale(shape, workload, scale, _FINAL_TOLERANCE, None)
            epsilon_evaluations += count
        except (_Unreachable, ValueError, ArithmeticError):
            pass  # keep the search's scale; its certified epsilon is <= target already
        for _ in range(40):
            mechanism = _tidy(shape.scaled(scale))
            certified = epsilon(workload.description(mechanism), delta)
            epsilon_evaluations += 1
            if certified.upper <= target_epsilon:
                break
            scale *= 1.0 + max(1e-3, 2.0 * (certified.upper - target_epsilon) / target_epsilon)
        else:  # pragma: no cover - the calibrated scale is certified; this only guards the loop
            raise ValueError(f"could not certify the best LMO at target_epsilon={target_epsilon:g}")

    gaussian_std = sigma * sensitivity
    gaussian_abs = gaussian_std * math.sqrt(2.0 / math.pi)
    std = mechanism.std()
    mean_abs = mechanism.mean_absolute()
    return LMOSearchResult(
        mechanism=mechanism,
        epsilon=certified.upper,
        epsilon_lower=certified.lower,
        target_epsilon=target_epsilon,
        delta=delta,
        sampling_rate=sampling_rate,
        steps=steps,
        objective=objective_name,
        objective_value=_objective_value(objective, mechanism),
        std=std,
        mean_absolute=mean_abs,
        gaussian_noise_multiplier=sigma,
        gaussian_epsilon=baseline.epsilon,
        gaussian_std=gaussian_std,
        gaussian_abs=gaussian_abs,
        std_ratio=std / gaussian_std,
        abs_ratio=mean_abs / gaussian_abs,
        components=components,
        evaluations=len(evaluated),
        epsilon_evaluations=epsilon_evaluations + baseline.evaluations,
        seed=seed,
        elapsed=time.monotonic() - started,
        stopped_early=stopped_early,
    )


def _polish_starts(evaluated: list[_Point]) -> list[_Point]:
    """The best shape of each pattern, best first, up to ``_POLISH_STARTS``; the pattern
    with the most coordinates (which contains the others as limits) is always among them."""
    best: dict[tuple[str, ...], _Point] = {}
    for point in sorted((p for p in evaluated if p.status == "ok" and p.u), key=lambda p: (p.key, p.pattern, p.u)):
        best.setdefault(point.pattern, point)
    ordered = sorted(best.values(), key=lambda p: (p.key, p.pattern, p.u))
    starts = ordered[:_POLISH_STARTS]
    if ordered:
        widest = max(ordered, key=lambda p: (len(p.u), -ordered.index(p)))
        if widest not in starts:
            starts[-1] = widest
    return starts


def _tidy(mechanism: LMO) -> LMO:
    """The same noise with the parameters of zero-weight components at their defaults
    (they do not enter the law, only the printout)."""
    defaults = {f.name: f.default for f in dataclasses.fields(LMO)}
    used = {"gamma": ("gamma_shape", "gamma_scale"), "exponential": ("exponential_rate",),
            "uniform": ("uniform_low", "uniform_high")}
    changes = {}
    for weight, component in zip(mechanism.weights, COMPONENTS):
        if weight == 0:
            changes.update({name: defaults[name] for name in used[component]})
    return dataclasses.replace(mechanism, **changes)


def _best_value(points: Iterable[_Point]) -> float:
    values = [p.value for p in points if p.status == "ok"]
    return min(values) if values else math.inf
