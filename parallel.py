"""Executors and progress reporting shared by the long-running parts of dpforge.

The Monte-Carlo engine and the LMO search both run many independent tasks and report
progress on long runs; they share this module rather than each keeping their own.

* Work goes to any :class:`concurrent.futures.Executor` (a process pool, a thread pool,
  or a Dask ``distributed`` cluster: pass the ``Client`` itself, see :func:`dask_executor`); "serial" runs in
  the calling process.  :func:`resolve_executor` turns what a caller passed into an
  executor and says whether dpforge owns (and must shut down) it.
* Progress is drawn by ``tqdm`` (a well-kept, dependency-free progress bar that already
  handles terminals, notebooks and non-interactive output) or handed to a callback.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import sys
from typing import Any, Callable

from dpforge.errors import ParameterError


class SerialExecutor(concurrent.futures.Executor):
    """Runs each task at once in the calling process (an Executor with no workers)."""

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        """Run ``fn(*args, **kwargs)`` now; the returned future is already done."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # the caller sees it from .result(), as with a pool
            future.set_exception(error)
        return future


def process_pool(workers: int, initializer: Callable[[], None] | None = None) -> concurrent.futures.Executor:
    """A pool of ``workers`` spawned processes (spawn: safe with numba and threads)."""
    return concurrent.futures.ProcessPoolExecutor(
        max_workers=workers, mp_context=multiprocessing.get_context("spawn"), initializer=initializer
    )


def is_dask_client(executor: Any) -> bool:
    """True for a Dask ``distributed.Client`` (checked by type, without importing Dask)."""
    kind = type(executor)
    return kind.__name__ == "Client" and kind.__module__.split(".")[0] == "distributed" and callable(
        getattr(executor, "get_executor", None)
    )


def dask_executor(client: Any) -> concurrent.futures.Executor:
    """A :class:`concurrent.futures.Executor` running on a Dask ``distributed.Client``.

    A client's own ``submit``/``map`` return Dask futures (``map`` a list of them, not
    results), so it cannot stand in for an executor directly; ``client.get_executor``
    adapts it: ``submit`` returns a :class:`concurrent.futures.Future` and ``map`` yields
    results in order.  ``pure=False`` makes every call a new task (Dask would otherwise
    reuse the result of an equal earlier call).  The client stays the caller's: closing
    it (or the cluster) is theirs to do.
    """
    if not is_dask_client(client):
        raise ParameterError(f"client must be a distributed.Client, got {type(client).__name__}")
    return client.get_executor(pure=False)


def resolve_executor(executor: Any, *, default: Callable[[], concurrent.futures.Executor] | None = None) -> tuple[Any, bool]:
    """(an executor, whether the caller owns it and must shut it down).

    ``executor`` is None (``default()`` if given, else serial), "serial", a Dask
    ``distributed.Client`` (run through :func:`dask_executor`), or any object with
    ``submit`` and ``map`` (a :class:`concurrent.futures.Executor`, a Dask client's
    ``get_executor()``).  Anything else is a one-line :class:`ParameterError`.
    """
    if is_dask_client(executor):
        return dask_executor(executor), False
    if executor is None:
        return (default(), True) if default is not None else (SerialExecutor(), False)
    if isinstance(executor, str):
        if executor == "serial":
            return SerialExecutor(), False
        raise ParameterError(f"executor must be None, 'serial' or an Executor, got {executor!r}")
    if not (callable(getattr(executor, "submit", None)) and callable(getattr(executor, "map", None))):
        raise ParameterError(
            f"executor must be None, 'serial' or an Executor (with submit and map), got {type(executor).__name__}"
        )
    return executor, False


class Progress:
    """Progress of ``total`` units of work, drawn by tqdm or reported to a callback.

    ``enabled``: None draws a bar only when stderr is a terminal; True/False force it; a
    callable receives ``{"label", "done", "total", **info}`` after each update instead of
    a bar.  The bar appears only once a run has lasted ``delay`` seconds.
    """

    def __init__(self, total: int, *, label: str, enabled: Any = None, delay: float = 2.0, unit: str = "it") -> None:
        self.total = max(int(total), 1)
        self.label = label
        self.done = 0
        self.callback = enabled if callable(enabled) else None
        self.bar = None
        if self.callback is None:
            show = sys.stderr.isatty() if enabled is None else bool(enabled)
            if show:
                from tqdm import tqdm

                self.bar = tqdm(total=self.total, desc=label, unit=unit, delay=delay, file=sys.stderr, leave=False)

    def update(self, count: int, **info: Any) -> None:
        """``count`` more units done; ``info`` (e.g. ``best=...``, ``stage=...``) is shown
        beside the bar or passed to the callback."""
        self.done += count
        if self.callback is not None:
            self.callback({"label": self.label, "done": self.done, "total": self.total, **info})
        elif self.bar is not None:
            if info:
                self.bar.set_postfix(info, refresh=False)
            self.bar.update(count)

    def close(self) -> None:
        """Remove the bar (if one was drawn)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
