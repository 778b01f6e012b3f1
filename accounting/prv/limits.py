"""The PRV engine's memory budget: every grid is checked against it before it is allocated,
and the one-step measures a composition holds together as they accumulate.

A query that would need more than the budget stops with a one-line
:class:`~dpforge.errors.LimitError` that names the grid, the memory it would take and the
budget, before any large array exists (rather than a ``MemoryError`` from numpy after
minutes of work).  The budget is a context variable: :func:`memory_budget` sets it for the
calls made inside a ``with`` block (the engine's ``memory_budget=`` option does this), so
concurrent queries in other threads keep their own.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

from dpforge.errors import LimitError
from dpforge.validation import require_positive

#: default budget: 6 GiB, a quarter of the 24 GiB of the smallest machine dpforge targets
DEFAULT_MEMORY_BUDGET = 6 * 2**30
#: bytes held per grid point while a grid is built or composed: measured peaks of about
#: 160 (a direct grid) and 220 (a staged chunk, with its discrete-law copies) per point; a
#: long double power (.compose.extended_precision) adds about 24 to the window's 64
BYTES_PER_POINT = 224

_BUDGET: contextvars.ContextVar[float] = contextvars.ContextVar("dpforge_prv_memory_budget", default=DEFAULT_MEMORY_BUDGET)


@contextlib.contextmanager
def memory_budget(budget_bytes: float | None) -> Iterator[None]:
    """Use ``budget_bytes`` (None: the default) as the PRV engine's budget inside the block."""
    value = DEFAULT_MEMORY_BUDGET if budget_bytes is None else require_positive("memory_budget", budget_bytes)
    token = _BUDGET.set(value)
    try:
        yield
    finally:
        _BUDGET.reset(token)


def check_grid(points: float, what: str) -> None:
    """Raise :class:`LimitError` when a grid of ``points`` points would pass the budget."""
    budget = _BUDGET.get()
    if not points * BYTES_PER_POINT <= budget:  # also catches inf and nan
        need = points * BYTES_PER_POINT / 2**30
        raise LimitError(
            f"{what} needs {points:.3g} grid points (about {need:.3g} GiB), over the prv engine's memory budget of "
            f"{budget / 2**30:.3g} GiB (option memory_budget, in bytes); raise the budget if the machine has the "
            "memory, or account this description with engine='rdp'"
        )


def check_held(nbytes: float, what: str) -> None:
    """Raise :class:`LimitError` when arrays held together (``nbytes`` bytes so far, each
    grid already within the budget) pass the budget: a description of many distinct
    components holds one measure per component while it is composed (10,000 distinct
    steps held about 0.9 GB), which no single grid check sees."""
    budget = _BUDGET.get()
    if not nbytes <= budget:
        raise LimitError(
            f"{what} hold {nbytes / 2**30:.3g} GiB together, over the prv engine's memory budget of "
            f"{budget / 2**30:.3g} GiB (option memory_budget, in bytes); raise the budget if the machine has the "
            "memory, merge equal components, or account this description with engine='rdp'"
        )
