"""What the ``dpforge`` commands print, and the status they exit with.

Tables are left-aligned columns (a column of numbers right-aligned), floats shown with
six significant digits; ``--json`` prints exactly one strict JSON object (non-finite
floats as the strings ``"inf"``, ``"-inf"``, ``"nan"``).  Nothing heavy is imported at
module level.

Exit statuses (re-exported by :mod:`dpforge.cli.main`): :data:`EXIT_OK` success (for
``verify``: within the budget, or no budget), :data:`EXIT_OVER_BUDGET` ``verify`` found
the plan over budget, :data:`EXIT_ERROR` any usage or input error,
:data:`EXIT_ACCURACY` the certified bounds are looser than ``--relative-accuracy``
asked (the result is still printed, and certified; ``--accept-looser`` turns this into
a warning with status 0).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

EXIT_OK = 0
EXIT_OVER_BUDGET = 1
EXIT_ERROR = 2
EXIT_ACCURACY = 3

#: the exit statuses as the help pages and the README state them
EXIT_CODES_TEXT = """exit status:
  0  success (verify: certified epsilon within the budget, or no budget)
  1  verify: the plan is over budget
  2  usage or input error (one line on stderr, no traceback)
  3  accuracy shortfall: the certified bounds are looser than --relative-accuracy asked
     (result still printed; --accept-looser makes it a warning with status 0)"""


def format_value(value: Any) -> str:
    """A table cell: floats with six significant digits, anything else as ``str``."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def table(rows: Sequence[Sequence[Any]], header: Sequence[str] | None = None) -> str:
    """Rows of cells as left-aligned columns (a column of numbers right-aligned)."""
    cells = [[format_value(cell) for cell in row] for row in rows]
    if header is not None:
        cells.insert(0, list(header))
    widths = [max(len(row[column]) for row in cells) for column in range(len(cells[0]))]
    numeric = [
        all(isinstance(row[column], (int, float)) and not isinstance(row[column], bool) for row in rows)
        for column in range(len(widths))
    ]
    lines = []
    for row in cells:
        parts = [cell.rjust(w) if num else cell.ljust(w) for cell, w, num in zip(row, widths, numeric)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def print_json(data: dict[str, Any]) -> None:
    """Print ``data`` as one line of strict JSON (non-finite floats as strings, by
    :func:`dpforge.accounting.results.json_ready`)."""
    from dpforge.accounting.results import json_ready

    print(json.dumps(json_ready(data), allow_nan=False))


def accuracy_rows(accuracy: dict[str, Any]) -> list[tuple[str, Any]]:
    """Table rows of a schema ``accuracy`` object (requested, achieved; the PRV grid)."""
    rows: list[tuple[str, Any]] = [
        ("accuracy requested", "none (engine takes no request)" if accuracy.get("requested") is None else accuracy["requested"]),
        ("accuracy achieved", "none" if accuracy.get("achieved") is None else accuracy["achieved"]),
    ]
    if "closed_form" in accuracy:  # no grid: read off a closed-form profile
        return rows + [("method", f"closed form ({accuracy['closed_form']}), no grid")]
    if "total_variation" in accuracy:  # no grid: delta covers the total variation bound
        return rows + [("method", f"total variation bound {accuracy['total_variation']:.3g} <= delta, no grid")]
    names = {"grid_step": "grid step", "grid_size": "grid size", "refinements": "refinements"}
    return rows + [(label, accuracy[key]) for key, label in names.items() if key in accuracy]


def accuracy_status(accuracy: dict[str, Any], accept_looser: bool, what: str = "result") -> int:
    """The exit status of a result whose schema ``accuracy`` is given: :data:`EXIT_OK`
    when the request was reached (or none was made), else one warning line on stderr and
    :data:`EXIT_ACCURACY` (:data:`EXIT_OK` with ``accept_looser``)."""
    import sys

    if accuracy.get("reached") is not False:
        return EXIT_OK
    achieved, requested = accuracy.get("achieved"), accuracy.get("requested")
    shown = "unknown" if achieved is None else f"{achieved:.3g}"
    outcome = "accepted (--accept-looser)" if accept_looser else "exit status 3; pass --accept-looser to accept it"
    print(
        f"dpforge: warning: the {what}'s certified bounds are looser than asked: relative width {shown} > "
        f"--relative-accuracy {requested:g}; {outcome}",
        file=sys.stderr,
    )
    return EXIT_OK if accept_looser else EXIT_ACCURACY


def summary_rows(summary: dict[str, Any]) -> list[tuple[str, Any]]:
    """Table rows of a description's summary (``sampling_rate`` -> ``sampling rate``)."""
    return [(key.replace("_", " "), value) for key, value in summary.items()]


def engine_rows(result: Any) -> list[tuple[str, Any]]:
    """The extra table rows of a high-probability (montecarlo) result -- its point
    estimate, samples, confidence and seed (reported, so a run can be repeated); none
    otherwise."""
    if not hasattr(result, "samples"):
        return []
    return [
        ("estimate (montecarlo)", result.estimate),
        ("samples", result.samples),
        ("confidence", result.confidence),
        ("bound", result.bound),
        ("seed", result.accuracy.get("seed")),
    ]
