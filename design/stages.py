"""The two search stages over shapes, run as executor tasks.

One job: decide which shapes get calibrated, and in what order.  (1) Global: seeded
scrambled Sobol points in every support pattern, plus the box centre and the
near-Laplace ends, calibrated in fixed batches (:func:`_global_stage`).  (2) Local: a
bounded Nelder-Mead polish on log(objective) from the best shape of each of the best
patterns, one executor task per start (:func:`_polish_stage`).  Tasks are mapped in a
fixed order and do not depend on the executor, so the result is a function of the seed
(unless the time limit cuts a stage short).  The executors and the progress report are
those of :mod:`dpforge.parallel`; this module adds only the fallback from a broken
process pool that dpforge owns to serial work, and numba's thread count inside a task.

Sources.  Sobol sequences (Sobol' 1967) with Owen scrambling (Owen 1998), as
:class:`scipy.stats.qmc.Sobol`; the simplex method of Nelder & Mead (1965), bounded, as
:func:`scipy.optimize.minimize` (``method="Nelder-Mead"``).
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.process
import math
import time
import warnings
from typing import Any, Callable, Iterable

import numpy as np
from scipy import optimize
from scipy.stats import qmc

from dpforge.accounting.api import epsilon
from dpforge.design.scale import _calibrate_shape, _Point, _Workload
from dpforge.design.space import _coordinates
from dpforge.mechanisms.combinators import Composed, PoissonSampled
from dpforge.mechanisms.lmo import LMO
from dpforge.parallel import Progress, SerialExecutor

#: global stage: quasi-random points per shape dimension (rounded up to a power of 2)
_POINTS_PER_DIMENSION = 16
#: local stage: number of polished starts and function evaluations per start
_POLISH_STARTS = 3
_POLISH_EVALUATIONS_PER_DIMENSION = 25
_POLISH_EVALUATIONS_MIN = 10
#: global stage: shapes per batch (the time limit is checked between batches)
_BATCH = 8
#: share of the time limit the global stage may use before it stops early
_GLOBAL_SHARE = 0.5


# --------------------------------------------------------------------------- in each worker

_warm = False


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
    """(best point, points calibrated in order, whether the deadline stopped it)."""
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


# --------------------------------------------------------------------------- in the caller


class _Runner:
    """Maps tasks through an executor in order.  When a process pool that dpforge owns
    cannot start its workers (a script without the ``if __name__ == "__main__":`` guard,
    which spawned workers need) the work continues serially with a RuntimeWarning."""

    def __init__(self, executor: Any, owned: bool) -> None:
        self.executor = executor
        self.owned = owned

    def map(self, fn: Callable, tasks: list) -> list:
        """``list(executor.map(fn, tasks))``, serially after a broken owned pool."""
        try:
            return list(self.executor.map(fn, tasks))
        except concurrent.futures.process.BrokenProcessPool:
            if not self.owned:
                raise
            self.executor.shutdown(wait=False, cancel_futures=True)
            warnings.warn(
                "lmo_search: worker processes failed (a script calling lmo_search with the default executor "
                "needs an `if __name__ == \"__main__\":` guard); continuing serially",
                RuntimeWarning,
                stacklevel=4,
            )
            self.executor = SerialExecutor()
            return list(self.executor.map(fn, tasks))

    def close(self) -> None:
        """Shut the executor down when dpforge owns it."""
        if self.owned and hasattr(self.executor, "shutdown"):
            self.executor.shutdown(wait=True, cancel_futures=True)


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


def _polish_evaluations(dimension: int) -> int:
    """Calibrations one polish from a start with ``dimension`` coordinates may spend."""
    return max(_POLISH_EVALUATIONS_MIN, _POLISH_EVALUATIONS_PER_DIMENSION * dimension)


def _polish_budget(patterns: list[tuple[str, ...]]) -> int:
    """The polish work announced to the progress report (that of the two widest patterns)."""
    return sum(_polish_evaluations(len(_coordinates(p))) for p in patterns[-2:])


def _best_value(points: Iterable[_Point]) -> float:
    """The smallest objective among usable points (inf when there is none)."""
    values = [p.value for p in points if p.status == "ok"]
    return min(values) if values else math.inf


def _global_stage(
    points: list, workload: _Workload, runner: _Runner, bar: Progress, began: float, time_limit: float
) -> tuple[list[_Point], bool]:
    """Calibrate ``points`` in batches of ``_BATCH``; after the first batch, stop once the
    run has used ``_GLOBAL_SHARE`` of ``time_limit``.  Returns (points, stopped early)."""
    evaluated: list[_Point] = []
    for i in range(0, len(points), _BATCH):
        if i > 0 and time.time() - began > _GLOBAL_SHARE * time_limit:
            return evaluated, True
        batch = points[i : i + _BATCH]
        results = runner.map(_global_task, [(p, u, workload) for p, u in batch])
        evaluated += results
        bar.update(len(results), stage="global", best=_best_value(evaluated))
    return evaluated, False


def _polish_stage(
    evaluated: list[_Point], workload: _Workload, runner: _Runner, bar: Progress, deadline: float
) -> tuple[list[_Point], bool]:
    """Polish the starts of :func:`_polish_starts` (one task each, unless the deadline has
    passed).  Returns (the points calibrated, whether a polish hit the deadline)."""
    tasks = [(s, workload, _polish_evaluations(len(s.u)), deadline) for s in _polish_starts(evaluated)]
    if not tasks or time.time() >= deadline:
        return [], False
    found: list[_Point] = []
    stopped_early = False
    seen = list(evaluated)
    for _best, order, stopped in runner.map(_polish_task, tasks):
        found += order
        seen += order
        stopped_early = stopped_early or stopped
        bar.update(len(order), stage="polish", best=_best_value(seen))
    return found, stopped_early


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
