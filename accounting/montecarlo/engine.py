"""Monte-Carlo accountant: high-probability bounds on delta(eps) and eps(delta); this
module checks the options, states the epsilon and the delta logic, and writes the
accuracy record.

Following Wang, Mahloujifar, Wu, Jia & Mittal (NeurIPS 2023), the privacy profile of the
composed dominating pair, delta(eps) = E_P[(1 - e^{eps - L})_+], is estimated from samples
of the composed privacy loss L (the sum of independent one-step losses of every
component; both add/remove directions, the maximum is reported), drawn from an
exponentially tilted law (importance sampling; :mod:`.tilting`, :mod:`.samplers`,
:mod:`.generic`, :mod:`.registry`, :mod:`.directions`) so that every term lies in
[0, B(eps)], B the moment (Chernoff) bound.  The empirical Bernstein inequality of
Maurer & Pontil (2009, Theorem 4) turns the terms into confidence bounds
(:mod:`.bounds`); the samples are drawn in seeded chunks (:mod:`.runner`).

**delta at eps.**  The tilt is the one minimising B(eps) (no pilot); the bounds are those
of the single point eps.

**eps at delta.**  A pilot run (independent seeds, not part of the certificate) fixes the
tilt and a grid of eps values; the main run evaluates the upper bound U(eps_g) at every
grid point from the same samples and reports the smallest grid point whose *monotone
envelope* max_{g' >= g} U(eps_g') is <= delta.  No multiplicity correction is needed:
if the reported point were below the true eps*(delta), the envelope would be <= delta at
the fixed grid point just below eps*, where delta(eps) > delta, i.e. the single
(fixed-point) inequality would fail there, which has probability at most b.  The lower
bound is symmetric: the largest grid point whose running minimum of the lower bounds,
taken upwards from a start fixed by the pilot, exceeds delta.

The upper and the lower bound each hold with probability >= confidence (separately, not
jointly); the estimate is the crossing of the point estimate and is not a bound.  Every
result is labelled ``bound="high-probability"``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from dpforge.accounting.montecarlo.bounds import (
    _crossing,
    _grid_bounds,
    _main_grid,
    _pilot_stats,
    _plain_samples_needed,
    _samples_needed,
    _scaled,
    _too_small,
)
from dpforge.accounting.montecarlo.directions import _Direction, _directions
from dpforge.accounting.montecarlo.runner import _progress_bar, _Runner
from dpforge.accounting.results import MonteCarloDeltaResult, MonteCarloEpsilonResult
from dpforge.errors import ParameterError
from dpforge.mechanisms.sampling import result_labels
from dpforge.mechanisms.combinators import Description
from dpforge.parallel import resolve_executor
from dpforge.validation import require_count, require_non_negative, require_probability_open

DEFAULT_SAMPLES = 100_000
#: the most samples a call takes: 1e10 composed losses of even one step is hours of
#: numba here; ``--samples 1e23`` ran unbounded (9 GB of chunk jobs after 18 minutes)
MAX_SAMPLES = 10**10
DEFAULT_CONFIDENCE = 0.99
INEQUALITY = "empirical Bernstein (Maurer & Pontil 2009, Theorem 4) on terms in [0, B]"

_PILOT_CANDIDATES = 601
_OPTIONS = ("samples", "confidence", "seed", "executor", "progress", "importance_sampling")


# =========================================================================== common part


def _check_options(options: dict) -> None:
    """ParameterError for the first name that is not an option of this engine."""
    for name in options:
        if name not in _OPTIONS:
            raise ParameterError(f"{name} is not an option of the montecarlo engine (options: {', '.join(_OPTIONS)})")


@dataclass(frozen=True)
class _Call:
    """One call's checked options, the directions it samples and its confidence term."""

    samples: int
    confidence: float
    seed: int
    executor: Any
    progress: Any
    directions: list[_Direction]
    log_term: float
    started: float


def _prepare(description: Description, samples, confidence, seed, executor, progress, importance_sampling) -> _Call:
    """Check the common options (a random seed is drawn when none is given), set up the
    directions and ln(2/b) with b = (1 - confidence) / directions (union bound)."""
    samples = require_count("samples", samples, maximum=MAX_SAMPLES)
    confidence = require_probability_open("confidence", confidence)
    if seed is None:
        seed = int(np.random.SeedSequence().entropy)
    else:
        seed = require_count("seed", seed, minimum=0, maximum=None)
    executor, _ = resolve_executor(executor)  # no default: never one dpforge must shut down
    directions = _directions(description, importance_sampling)
    beta = (1.0 - confidence) / len(directions)
    return _Call(samples, confidence, seed, executor, progress, directions, math.log(2.0 / beta), time.perf_counter())


def _sweep(call: _Call, total: int, order: list[int], measure: Callable[[_Runner, int, _Direction, float], Any]):
    """Measure the directions in ``order`` (progress over ``total`` samples): ``measure``
    gets the runner, the direction's index and object and the largest upper bound so far,
    and returns (upper, lower, estimate) or the reason the direction is skipped.  Returns
    the uppers, lowers, estimates and skip reasons by direction name."""
    runner = _Runner(call.seed, call.executor, _progress_bar(total, call.progress))
    uppers: dict[str, float] = {}
    lowers: dict[str, float] = {}
    estimates: dict[str, float] = {}
    skipped: dict[str, str] = {}
    try:
        for index in order:
            d = call.directions[index]
            outcome = measure(runner, index, d, max(uppers.values(), default=-math.inf))
            if isinstance(outcome, str):
                skipped[d.name] = outcome
            else:
                uppers[d.name], lowers[d.name], estimates[d.name] = outcome
    finally:
        runner.close()
    return uppers, lowers, estimates, skipped


def _bracket(uppers: dict, lowers: dict, estimates: dict) -> dict[str, float]:
    """The reported bounds: the largest upper over the directions, and the lower and the
    estimate clipped into [lower, upper]."""
    upper = max(uppers.values(), default=0.0)
    lower = min(max(lowers.values(), default=0.0), upper)
    estimate = min(max(max(estimates.values(), default=0.0), lower), upper)
    return {"lower": lower, "upper": upper, "estimate": estimate}


def _accuracy(call: _Call, tilts, skipped, grid_sizes, n_pilot, **extra) -> dict[str, Any]:
    """The accuracy record of a result: inequality, tilts, directions, seed, time."""
    domains = {d.name: d.domain for d in call.directions}
    data: dict[str, Any] = {
        "inequality": INEQUALITY,
        "importance_sampling": {
            name: ("exponential tilt" if domains[name] != "none" else "none (plain sampling)") for name in domains
        },
        "tilt": {name: float(lam) for name, lam in tilts.items()},
        "directions_sampled": sorted(set(tilts) - set(skipped)),
        "seed": call.seed,
        "seconds": round(time.perf_counter() - call.started, 3),
    }
    if n_pilot:
        data["pilot_samples"] = n_pilot
        data["grid_points"] = grid_sizes
    if skipped:
        data["skipped"] = skipped
    if "chernoff" in extra:
        data["moment_bound_epsilon"] = {name: float(v[0]) for name, v in extra["chernoff"].items()}
    if "moment" in extra:
        data["moment_bound_delta"] = {name: float(v) for name, v in extra["moment"].items()}
    data["lower"] = "high-probability lower confidence bound (holds separately from the upper bound)"
    return data


# =========================================================================== epsilon


def _epsilon_direction(call: _Call, runner: _Runner, index: int, d: _Direction, delta: float, eps_c: float,
                       lam_p: float, n_pilot: int) -> tuple[float, float, float, float, int]:
    """(upper, lower, estimate, tilt, grid points) of eps(delta) in one direction: a pilot
    at the moment bound's tilt ``lam_p`` chooses the tilt and the grid, the main run
    certifies (module docstring)."""
    samples, log_term = call.samples, call.log_term
    # ---- pilot: choose the tilt and the grid
    losses = runner.run(d.batch(lam_p, None), d.draws, n_pilot, 0, index, f"pilot ({d.name})")
    if math.isfinite(eps_c):
        # a little beyond the moment bound: the sampled bound may certify there
        eps_top = min(d.max_loss, 1.05 * eps_c + 1e-3)
    else:
        eps_top = min(d.max_loss, 2.0 * float(np.max(losses)) + 1.0)
    eps_top = max(eps_top, 1e-9)
    candidates = np.linspace(0.0, eps_top, _PILOT_CANDIDATES)
    if eps_top < d.max_loss < math.inf:
        candidates = np.append(candidates, d.max_loss)
    log_b_p, mean_p, _ = _pilot_stats(d, losses, lam_p, lam_p, candidates, log_term)
    eps_hat = _crossing(candidates, _scaled(log_b_p, mean_p), delta)
    lam_m = d.best_lambda(eps_hat) if d.domain != "none" else 0.0
    log_b_m, mean_m, var_m = _pilot_stats(d, losses, lam_p, lam_m, candidates, log_term)
    margin = np.sqrt(2.0 * var_m * log_term / samples) + 7.0 * log_term / (3.0 * max(samples - 1, 1))
    predicted = _scaled(log_b_m, np.minimum(mean_m + margin, 1.0))
    predicted = np.where(candidates >= d.max_loss, 0.0, predicted)
    passing = np.nonzero(predicted <= delta)[0]
    if not passing.size:
        needed = _samples_needed(log_b_m, mean_m, var_m, delta, log_term)
        raise _too_small(delta, samples, call.confidence, needed, f"pilot prediction, {d.name} direction")
    eps_pred = float(candidates[passing[0]])
    grid, lower_start = _main_grid(eps_hat, eps_pred, eps_top, d.max_loss)
    # ---- main run: the certificate
    sums, squares = runner.run(d.batch(lam_m, grid), d.draws, samples, 1, index, f"main ({d.name})")
    bounds = _grid_bounds(d, lam_m, grid, sums, squares, samples, log_term)
    envelope = np.maximum.accumulate(bounds.upper[::-1])[::-1]
    ok = np.nonzero(envelope <= delta)[0]
    if not ok.size:
        needed = _samples_needed(bounds.log_bound, bounds.mean_z, bounds.var_z, delta, log_term)
        raise _too_small(delta, samples, call.confidence, needed, f"{d.name} direction")
    upper = float(grid[ok[0]])
    # lower: running minimum over the grid points from the start of the dense part (fixed
    # by the pilot) upwards
    start = int(np.searchsorted(grid, lower_start))
    running_min = np.minimum.accumulate(bounds.lower[start:])
    above = np.nonzero(running_min > delta)[0]
    lower = float(grid[start + above[-1]]) if above.size else 0.0
    return upper, lower, _crossing(grid, bounds.estimate, delta), lam_m, int(grid.size)


def epsilon(
    description: Description,
    delta: float,
    *,
    samples: int = DEFAULT_SAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int | None = None,
    executor: Any = None,
    progress: bool | None = None,
    importance_sampling: bool = True,
    **unknown: Any,
) -> MonteCarloEpsilonResult:
    """High-probability bounds on eps(delta) of a composed description (module docstring:
    the importance-sampled estimator of Wang et al. 2023 with the empirical Bernstein
    bound of Maurer & Pontil 2009, Thm. 4).

    With probability at least ``confidence`` over the sampling, eps(delta) <= ``upper``
    (and, separately, >= ``lower``).  ``samples`` composed-loss samples per sampled
    direction make the certificate; a pilot of about samples/8 (at most 50,000, with
    independent seeds) chooses the tilt and the grid of epsilon values.  ``seed`` makes
    the run reproducible (a random seed is drawn and recorded in ``accuracy`` otherwise);
    ``executor`` ("serial" or any :class:`concurrent.futures.Executor`) spreads chunks
    over workers; ``progress`` forces the stderr progress bar on or off (default: on a
    terminal, for runs over 2 s).

    Raises :class:`~dpforge.errors.LimitError` (a ``ValueError``) when ``delta`` is below
    what ``samples`` can certify (with the number of samples that would be needed).
    """
    _check_options(unknown)
    delta = require_probability_open("delta", delta)
    call = _prepare(description, samples, confidence, seed, executor, progress, importance_sampling)
    samples, confidence, log_term, directions = call.samples, call.confidence, call.log_term, call.directions
    for d in directions:
        if d.domain == "none" and d.max_loss > 0:
            need = _plain_samples_needed(delta, log_term)
            if samples < need:
                raise _too_small(delta, samples, confidence, need, f"plain sampling in the {d.name} direction")
    if samples < 2 + 7.0 * log_term / 3.0:
        raise _too_small(delta, samples, confidence, 2 + 7.0 * log_term / 3.0, "importance sampling")
    n_pilot = int(min(max(samples // 8, 1000), 50_000))
    chernoff = {d.name: d.chernoff_epsilon(delta) for d in directions}
    order = sorted(range(len(directions)), key=lambda i: -chernoff[directions[i].name][0])
    tilts: dict[str, float] = {}
    grid_sizes: dict[str, int] = {}

    def measure(runner: _Runner, index: int, d: _Direction, current: float):
        eps_c, lam_p = chernoff[d.name]
        if d.max_loss <= current:
            return "delta is exactly 0 beyond its largest loss"
        if d.domain != "none" and eps_c <= current:
            return "its moment (Chernoff) bound already certifies the other direction's epsilon"
        if d.max_loss <= 0.0:
            return 0.0, 0.0, 0.0
        upper, lower, estimate, tilts[d.name], grid_sizes[d.name] = _epsilon_direction(
            call, runner, index, d, delta, eps_c, lam_p, n_pilot
        )
        return upper, lower, estimate

    uppers, lowers, estimates, skipped = _sweep(call, (n_pilot + samples) * len(directions), order, measure)
    return MonteCarloEpsilonResult(
        **_bracket(uppers, lowers, estimates),
        delta=delta,
        engine="montecarlo",
        **result_labels(description),
        accuracy=_accuracy(call, tilts, skipped, grid_sizes, n_pilot, chernoff=chernoff),
        samples=samples,
        confidence=confidence,
    )


# =========================================================================== delta


def delta(
    description: Description,
    epsilon: float,
    *,
    samples: int = DEFAULT_SAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int | None = None,
    executor: Any = None,
    progress: bool | None = None,
    importance_sampling: bool = True,
    **unknown: Any,
) -> MonteCarloDeltaResult:
    """High-probability bounds on delta(epsilon) (module docstring: Wang et al. 2023
    estimator, Maurer & Pontil 2009, Thm. 4 confidence bound).

    The tilt is the one minimising the moment bound B(epsilon) (no pilot); with
    probability at least ``confidence``, delta(epsilon) <= ``upper`` (and separately
    >= ``lower``).  ``upper`` never exceeds the deterministic moment bound.  The options
    are those of :func:`epsilon`.
    """
    _check_options(unknown)
    epsilon = require_non_negative("epsilon", epsilon)
    call = _prepare(description, samples, confidence, seed, executor, progress, importance_sampling)
    directions = call.directions
    live = [d for d in directions if epsilon < d.max_loss]
    lams = {d.name: d.best_lambda(epsilon) for d in live}
    moment = {d.name: min(math.exp(d.log_bound(lams[d.name], epsilon)), 1.0) for d in live}
    order = sorted(range(len(directions)), key=lambda i: -moment.get(directions[i].name, 0.0))
    grid = np.array([epsilon])

    def measure(runner: _Runner, index: int, d: _Direction, current: float):
        if epsilon >= d.max_loss:
            return 0.0, 0.0, 0.0
        if moment[d.name] <= current:
            return "its moment (Chernoff) bound is below the other direction's upper bound"
        lam = lams[d.name]
        sums, squares = runner.run(d.batch(lam, grid), d.draws, call.samples, 2, index, f"{d.name}")
        bounds = _grid_bounds(d, lam, grid, sums, squares, call.samples, call.log_term)
        return float(bounds.upper[0]), float(bounds.lower[0]), float(bounds.estimate[0])

    uppers, lowers, estimates, skipped = _sweep(call, call.samples * len(directions), order, measure)
    return MonteCarloDeltaResult(
        **_bracket(uppers, lowers, estimates),
        epsilon=epsilon,
        engine="montecarlo",
        **result_labels(description),
        accuracy=_accuracy(call, lams, skipped, {}, 0, moment=moment),
        samples=call.samples,
        confidence=call.confidence,
    )
