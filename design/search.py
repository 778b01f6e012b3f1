"""Offline search for LMO mixture parameters against a *certified* privacy budget.

One job: :func:`lmo_search` itself -- check the inputs, set up the workload
``Composed([(PoissonSampled(LMO, q), T)])`` and the Gaussian calibrated to it (the
baseline, and the grid and start of every calibration), run the stages, and certify the
winner.  It finds the LMO noise (docs/design.md §4) that minimises a utility -- the
variance, E|noise|, or a user function -- among all mixtures whose certified PRV upper
epsilon for the workload is at most the target, and puts it next to the Gaussian.

The parts live beside it: the search space in :mod:`dpforge.design.space`, the
calibration of one shape's scale in :mod:`dpforge.design.scale`, the global and local
stages in :mod:`dpforge.design.stages`, the result and its JSON in
:mod:`dpforge.design.result` (:class:`LMOSearchResult` is re-exported here).

Sources.  LMO noise: Yang, Mohammady, Wang et al. (2024), "LMO-DP".  Certified epsilons:
the PRV accountant (Gopi, Lee & Wutschitz 2021) of :mod:`dpforge.accounting`; the
Gaussian baseline: :func:`dpforge.accounting.calibrate.calibrate_noise_multiplier`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import pickle
import time
from typing import Any, Sequence

from dpforge.accounting.api import epsilon
from dpforge.accounting.calibrate import calibrate_noise_multiplier
from dpforge.accounting.prv.evaluate import initial_step
from dpforge.design import space, stages
from dpforge.design.result import LMOSearchResult
from dpforge.design.scale import (
    _FINAL_TOLERANCE,
    _SEARCH_TOLERANCE,
    OBJECTIVES,
    Objective,
    _calibrate_scale,
    _objective_value,
    _Point,
    _Unreachable,
    _Workload,
)
from dpforge.design.stages import _OneNumbaThread, _Runner, _warm_up
from dpforge.errors import CalibrationError, DpforgeError, ParameterError
from dpforge.mechanisms.base import Gaussian
from dpforge.mechanisms.combinators import Composed, PoissonSampled, flatten
from dpforge.mechanisms.lmo import COMPONENTS, LMO
from dpforge.parallel import Progress, SerialExecutor, process_pool, resolve_executor
from dpforge.validation import (
    require_count,
    require_positive,
    require_probability_open,
    require_sampling_rate,
)

__all__ = ["LMOSearchResult", "OBJECTIVES", "Objective", "lmo_search", "worker_pool"]

#: bracket of the Gaussian baseline's noise multiplier
_SIGMA_LIMITS = (1e-3, 1e7)


# --------------------------------------------------------------------------- executors


def worker_pool(workers: int) -> concurrent.futures.Executor:
    """A pool of ``workers`` spawned processes (:func:`dpforge.parallel.process_pool`)
    whose workers load numba's kernels before their first task; pass it to
    :func:`lmo_search` as ``executor`` (the caller shuts it down)."""
    return process_pool(require_count("workers", workers), initializer=_warm_up)


#: the old private name of :func:`worker_pool` (used by the command line until it moves)
_spawn_pool = worker_pool


def _default_executor(objective: Objective) -> concurrent.futures.Executor:
    """A pool of 2 workers; serial when a callable objective cannot be pickled (a lambda
    or a closure cannot reach worker processes)."""
    if callable(objective):
        try:
            pickle.dumps(objective)
        except Exception:
            return SerialExecutor()
    return worker_pool(2)


# --------------------------------------------------------------------------- inputs and workload


def _check_inputs(
    target_epsilon, delta, sampling_rate, steps, objective, components, seed, time_limit, sensitivity, executor
):
    """The arguments checked and normalised (components in COMPONENTS order); each problem
    is one :class:`~dpforge.errors.ParameterError` line."""
    target_epsilon = require_positive("target_epsilon", target_epsilon)
    delta = require_probability_open("delta", delta)
    sampling_rate = require_sampling_rate("sampling_rate", sampling_rate)
    steps = require_count("steps", steps)
    if not callable(objective) and objective not in OBJECTIVES:
        raise ParameterError(f"objective must be one of {', '.join(OBJECTIVES)} or a callable, got {objective!r}")
    if isinstance(components, str):
        components = (components,)
    try:
        components = tuple(components)
    except TypeError:
        raise ParameterError(f"components must be a sequence of {', '.join(COMPONENTS)}, got {components!r}") from None
    if not components:
        raise ParameterError(f"components must name at least one of {', '.join(COMPONENTS)}")
    for c in components:
        if c not in COMPONENTS:
            raise ParameterError(f"components: unknown component {c!r}; allowed: {', '.join(COMPONENTS)}")
    if len(set(components)) != len(components):
        raise ParameterError(f"components must not repeat a component, got {components!r}")
    seed = require_count("seed", seed, 0, maximum=None)
    time_limit = require_positive("time_limit", time_limit)
    if executor is not None:
        resolve_executor(executor)  # raises a ParameterError for anything but "serial" or an executor
    sensitivity = require_positive("sensitivity", sensitivity)
    components = tuple(c for c in COMPONENTS if c in components)
    return target_epsilon, delta, sampling_rate, steps, components, seed, time_limit, sensitivity


def _usable_patterns(components: tuple[str, ...], objective: Objective, objective_name: str) -> list[tuple[str, ...]]:
    """The support patterns worth searching: for "variance" and "abs" none with an
    exponential part (infinite at every scale)."""
    patterns = space._patterns(components)
    if callable(objective):
        return patterns
    usable = [p for p in patterns if "exponential" not in p]
    if not usable:
        raise ParameterError(
            f"no shape in the search space has a finite {objective_name}: every mixture with an "
            "exponential part has infinite variance and E|noise|; add gamma or uniform to components"
        )
    return usable


def _gaussian_baseline(sampling_rate: float, steps: int, target_epsilon: float, delta: float):
    """The Gaussian noise multiplier calibrated (certified) to the workload, as a
    :class:`~dpforge.accounting.calibrate.Root`."""
    try:
        return calibrate_noise_multiplier(
            sampling_rate, steps, target_epsilon, delta, rel_tolerance=_FINAL_TOLERANCE, lower=_SIGMA_LIMITS[0], upper=_SIGMA_LIMITS[1]
        )
    except CalibrationError as error:
        message = f"cannot calibrate the Gaussian baseline for this workload: {error}"
        raise CalibrationError(message, parameter=error.parameter, epsilon=error.epsilon) from None
    except DpforgeError as error:
        raise type(error)(f"cannot calibrate the Gaussian baseline for this workload: {error}") from None
    except ValueError as error:
        raise CalibrationError(f"cannot calibrate the Gaussian baseline for this workload: {error}") from None


# --------------------------------------------------------------------------- the final stage


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


def _certify(winner: _Point, workload: _Workload):
    """(mechanism, certified epsilon, evaluations): the winner recalibrated at the
    baseline's tolerance, then certified at the default accuracy (the scale raised if
    needed), so the certified epsilon is <= target."""
    shape = space._decode(winner.pattern, winner.u, workload.shape_min, workload.sensitivity)
    scale, evaluations = winner.scale, 0
    target = workload.target_epsilon
    with _OneNumbaThread():
        try:
            scale, _, count = _calibrate_scale(shape, workload, scale, _FINAL_TOLERANCE, None)
            evaluations += count
        except (_Unreachable, ValueError, ArithmeticError):
            pass  # keep the search's scale; its certified epsilon is <= target already
        for _ in range(40):
            mechanism = _tidy(shape.scaled(scale))
            certified = epsilon(workload.description(mechanism), workload.delta)
            evaluations += 1
            if certified.upper <= target:
                return mechanism, certified, evaluations
            scale *= 1.0 + max(1e-3, 2.0 * (certified.upper - target) / target)
    raise CalibrationError(  # pragma: no cover - the calibrated scale is certified; only guards the loop
        f"could not certify the best LMO at target_epsilon={target:g}", parameter=scale, epsilon=certified.upper
    )


# --------------------------------------------------------------------------- search


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

    ``executor``: None (a 2-process pool of :func:`worker_pool`, one numba thread each;
    serial when a callable objective cannot be pickled), "serial", or any object with
    ``submit`` and ``map`` (a ``concurrent.futures.Executor``, a Dask client's
    ``get_executor()``), as :func:`dpforge.parallel.resolve_executor` takes it.  Tasks are mapped in a fixed order and their results do not depend on the
    executor.  The result is a deterministic function of the inputs and ``seed`` as long
    as ``time_limit`` does not cut the search short; when it does (the global stage past
    half the limit, or a polish past the limit) the best shape so far is finished and
    ``stopped_early`` is True (stage 3 always runs).  With the default executor, a
    script must guard its entry point (``if __name__ == "__main__":``) as spawned
    workers import it; otherwise the search warns (RuntimeWarning) and runs serially.
    ``progress``: None (a bar on stderr when it is a terminal), True/False, or a callable
    receiving ``{"label", "done", "total", "stage", "best"}`` per batch
    (:class:`dpforge.parallel.Progress`).

    Raises :class:`~dpforge.errors.ParameterError` (one line) on bad input, and
    :class:`~dpforge.errors.CalibrationError` when the Gaussian baseline cannot be
    calibrated or no shape in the space reaches the target (naming the best certified
    epsilon reached).  Both are ``ValueError`` subclasses.
    """
    started = time.monotonic()
    target_epsilon, delta, sampling_rate, steps, components, seed, time_limit, sensitivity = _check_inputs(
        target_epsilon, delta, sampling_rate, steps, objective, components, seed, time_limit, sensitivity, executor
    )
    began = time.time()
    deadline = began + time_limit
    objective_name = objective if isinstance(objective, str) else getattr(objective, "__name__", "callable")
    shape_min = space._GAMMA_SHAPE_MIN[objective if isinstance(objective, str) else "callable"]
    patterns = _usable_patterns(components, objective, objective_name)

    # the Gaussian baseline (also the grid and the start of every shape's calibration)
    baseline = _gaussian_baseline(sampling_rate, steps, target_epsilon, delta)
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

    # 1. global stage, 2. local stage
    runner = _Runner(*resolve_executor(executor, default=lambda: _default_executor(objective)))
    points = stages._global_points(patterns, seed)
    bar = Progress(len(points) + stages._polish_budget(patterns), label="lmo search", enabled=progress)
    try:
        evaluated, stopped_early = stages._global_stage(points, workload, runner, bar, began, time_limit)
        polished, stopped = stages._polish_stage(evaluated, workload, runner, bar, deadline)
        evaluated += polished
        stopped_early = stopped_early or stopped
    finally:
        bar.close()
        runner.close()

    usable = sorted((p for p in evaluated if p.status == "ok"), key=lambda p: (p.key, p.pattern, p.u))
    if not usable:
        reached = [p.epsilon for p in evaluated if not math.isnan(p.epsilon)]
        best = min(reached) if reached else math.inf
        largest = space._SCALE_LIMITS[1] * sensitivity
        raise CalibrationError(
            f"no LMO shape in the search space reaches target_epsilon={target_epsilon:g} at delta={delta:g} "
            f"(best certified epsilon found: {best:.6g}, at the largest scale factor tried, {largest:g})",
            parameter=largest,
            epsilon=best,
        )

    # 3. final: recalibrate the winner at the baseline's tolerance, certify at the default accuracy
    mechanism, certified, final_evaluations = _certify(usable[0], workload)
    epsilon_evaluations = sum(p.evaluations for p in evaluated) + final_evaluations

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

