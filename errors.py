"""The errors dpforge raises on purpose.

Every one is a :class:`DpforgeError`, itself a ``ValueError`` (so code written against
the first release, which raised plain ``ValueError``, keeps working), and its message is
one line that names what is wrong and what is allowed.  The command line decides what to
do by the type of an error, never by its text.
"""

from __future__ import annotations


class DpforgeError(ValueError):
    """Base of every error dpforge raises on purpose; ``str(error)`` is one line."""


class ParameterError(DpforgeError):
    """An argument is out of its allowed range or of the wrong kind; the message names the
    parameter, the allowed range and the value received."""


class UnsupportedError(DpforgeError):
    """A description, engine or option combination that dpforge cannot account soundly
    (for example a vector Laplace release given to the PRV engine); the message says why
    and what to use instead."""


class LimitError(DpforgeError):
    """The computation would pass a named limit (grid size, per-step loss, series terms)
    before it could certify an answer; the message names the limit and how to stay
    inside it."""


class CalibrationError(DpforgeError):
    """No noise parameter inside the search bracket meets the target; the message names
    the bracket end and the certified epsilon there (also kept as ``parameter`` and
    ``epsilon``)."""

    def __init__(self, message: str, *, parameter: float | None = None, epsilon: float | None = None) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.epsilon = epsilon


class InputFileError(DpforgeError):
    """A file dpforge reads (a plan, a ledger, an LMO file) is unreadable or does not
    follow its schema; the message names the file and the field."""


class DpforgeAccuracyWarning(UserWarning):
    """A certified result is less accurate than asked (its bracket is wider than the
    requested relative accuracy); the result's ``accuracy`` says what was reached."""


def warn_caller(message: str, category: type[Warning]) -> None:
    """``warnings.warn`` attributed to the first frame outside dpforge's own modules, so a
    warning points at the line of the user's code that asked for the result."""
    import sys
    import warnings

    # stacklevel 1 is this function; 2 its caller, and so on up to the first frame outside dpforge
    level, frame = 2, sys._getframe(1)
    while frame is not None and str(frame.f_globals.get("__name__", "")).startswith("dpforge"):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


__all__ = [
    "CalibrationError",
    "DpforgeAccuracyWarning",
    "DpforgeError",
    "InputFileError",
    "LimitError",
    "ParameterError",
    "UnsupportedError",
    "warn_caller",
]
