"""Argument checks shared by every part of dpforge.

Each check raises :class:`dpforge.errors.ParameterError` (a ``ValueError``) with one line that names the parameter, the allowed
range and the value received; nothing is clamped.
"""

from __future__ import annotations

import math
import numbers
import sys

from dpforge.errors import ParameterError

#: the smallest positive normal double: a probability below it (a subnormal) has lost
#: digits, and a tenth of it underflows to 0 (delta = 5e-324 divided by zero in the prv
#: engine's truncation tail)
SMALLEST_PROBABILITY = sys.float_info.min
#: the largest count (steps, samples, sizes) accepted: every integer up to it is exact
#: in a double (10**400 steps overflowed float conversion inside the engines)
LARGEST_COUNT = 2**53


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def shown(value: object) -> str:
    """``repr(value)``, shortened past 40 characters (a 400-digit integer stays one short line)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...{text[-8:]} ({len(text)} characters)"


def require_real(name: str, value: object) -> float:
    """Return ``value`` as a finite float or raise naming ``name``."""
    if not _is_real(value):
        raise ParameterError(f"{name} must be a finite number, got {shown(value)}")
    try:
        result = float(value)  # type: ignore[arg-type]
    except OverflowError:  # an integer beyond the double range
        raise ParameterError(f"{name} must be a finite number, got {shown(value)}") from None
    if not math.isfinite(result):
        raise ParameterError(f"{name} must be a finite number, got {shown(value)}")
    return result


def require_positive(name: str, value: object) -> float:
    """A finite number > 0."""
    result = require_real(name, value)
    if result <= 0.0:
        raise ParameterError(f"{name} must be a finite number > 0, got {value!r}")
    return result


def require_non_negative(name: str, value: object) -> float:
    """A finite number >= 0."""
    result = require_real(name, value)
    if result < 0.0:
        raise ParameterError(f"{name} must be a finite number >= 0, got {value!r}")
    return result


def require_probability_open(name: str, value: object) -> float:
    """A number in the open interval (0, 1), at least ``SMALLEST_PROBABILITY`` (used for
    delta and confidences)."""
    result = require_real(name, value)
    if not 0.0 < result < 1.0:
        raise ParameterError(f"{name} must be in (0, 1), got {shown(value)}")
    if result < SMALLEST_PROBABILITY:
        raise ParameterError(f"{name} must be in [{SMALLEST_PROBABILITY!r}, 1), got {shown(value)} (a subnormal number)")
    return result


def require_sampling_rate(name: str, value: object) -> float:
    """A number in (0, 1], at least ``SMALLEST_PROBABILITY``."""
    result = require_real(name, value)
    if not 0.0 < result <= 1.0:
        raise ParameterError(f"{name} must be in (0, 1], got {shown(value)}")
    if result < SMALLEST_PROBABILITY:
        raise ParameterError(f"{name} must be in [{SMALLEST_PROBABILITY!r}, 1], got {shown(value)} (a subnormal number)")
    return result


def require_count(name: str, value: object, minimum: int = 1, maximum: int | None = LARGEST_COUNT) -> int:
    """An integer >= ``minimum`` and at most ``maximum`` (``LARGEST_COUNT`` unless None;
    integral floats such as 10.0 are accepted)."""
    allowed = f"an integer >= {minimum}" + ("" if maximum is None else f" and at most {'2**53' if maximum == LARGEST_COUNT else maximum}")
    if isinstance(value, bool):
        raise ParameterError(f"{name} must be {allowed}, got {shown(value)}")
    if isinstance(value, numbers.Integral):
        result = int(value)
    elif _is_real(value) and math.isfinite(float(value)) and float(value).is_integer():  # type: ignore[arg-type]
        result = int(float(value))  # type: ignore[arg-type]
    else:
        raise ParameterError(f"{name} must be {allowed}, got {shown(value)}")
    if result < minimum or (maximum is not None and result > maximum):
        raise ParameterError(f"{name} must be {allowed}, got {shown(value)}")
    return result
